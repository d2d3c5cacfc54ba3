"""Capture: record a PyTorch profile of a training (or inference) loop, ready for gpuscope.

Contract:

* :func:`run_script` runs a user's script unchanged, in this process (``runpy``, as ``python``
  would: ``__name__ == "__main__"``, ``sys.argv`` set), under ``torch.profiler.profile``, and
  returns a :class:`CaptureResult` naming the trace files written and saying exactly what was and
  was not recorded. It never raises for the script's own errors: they are reported in the result.
* Steps are marked without touching the user's code: every ``Optimizer.step()`` ends a step (a
  global optimizer step post-hook). A script that never steps an optimizer (inference) gets one
  step per top-level ``nn.Module`` call (the next top-level call starts the next step), until the
  first optimizer step, after which only optimizer steps count.
* :func:`profile` is the same recorder for code that marks steps itself (``prof.step()``), and
  :func:`trace_handler` is the ``on_trace_ready`` callback it uses, for plain
  ``torch.profiler.profile(on_trace_ready=gpuscope.capture.trace_handler(out_dir))``.
* Defaults: skip ``warmup`` steps (the last of them warms the profiler up), then record ``steps``
  steps (or, with ``seconds``, steps until that much wall time has passed), with shapes and
  Python stacks, CPU activity always and CUDA activity when ``torch.cuda.is_available()``.
* When NVML is importable (``nvidia-ml-py``) and initialises, a thread samples each GPU's
  utilisation, memory and power every ``nvml_interval_s`` into ``nvml.jsonl`` next to the trace,
  one JSON object per line (``time`` in ISO 8601 UTC, ``time_ns``, ``gpu_usage:I`` in %,
  ``gpu_mem_used:I`` and ``gpu_mem_total:I`` in bytes, ``gpu_power:I`` in W: the keys of
  SuperBench's NVML monitor, which ``gpuscope.readers.samples`` reads).
* Without torch, :class:`TorchMissingError` (the CLI turns it into the ``pip install`` line
  that adds torch, and exit 2). torch and NVML are imported only when a capture starts.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec

from gpuscope._install import install_line
from gpuscope.errors import GpuscopeError
from gpuscope.names import plural

NVML_FILE = "nvml.jsonl"
TRACE_SUFFIX = ".pt.trace.json.gz"


class TorchMissingError(GpuscopeError):
    """PyTorch is not installed: capture needs it (``pip install -e '.[torch]'``)."""


def _torch() -> Any:
    """The ``torch`` module, imported on first use (untyped: gpuscope type-checks without it)."""
    try:
        return importlib.import_module("torch")
    except ImportError:
        raise TorchMissingError(f"capture needs PyTorch: {install_line('torch')}") from None


class CaptureOptions(msgspec.Struct, frozen=True):
    steps: int = 5  # steps to record (after warm-up)
    warmup: int = 3  # steps to skip first
    seconds: float | None = None  # record steps until this much wall time instead of `steps`
    record_shapes: bool = True
    with_stack: bool = True
    nvml: bool = True
    nvml_interval_s: float = 0.1

    def __post_init__(self) -> None:
        if self.steps < 1 or self.warmup < 0:
            raise ValueError("capture needs steps >= 1 and warmup >= 0")
        if self.seconds is not None and self.seconds <= 0:
            raise ValueError("capture needs seconds > 0")


class CaptureResult(msgspec.Struct, frozen=True):
    out_dir: Path
    traces: list[Path]  # trace files written
    nvml_path: Path | None  # NVML samples, when recorded
    steps_seen: int  # step boundaries seen in the script (optimizer steps or module calls)
    recorded: list[str]  # what the trace holds, one phrase each
    not_recorded: list[str]  # what it lacks, and why
    script_error: str | None = None  # its traceback or SystemExit message, when it failed
    exit_code: int = 0  # the script's own exit status (SystemExit), 1 for an exception


# --- trace handler -------------------------------------------------------------------------------


class TraceHandler:
    """``on_trace_ready`` callback: writes each trace as gzip JSON into ``out_dir``."""

    def __init__(self, out_dir: str | Path, worker_name: str | None = None) -> None:
        self.out_dir = Path(out_dir)
        self.worker_name = worker_name
        self.paths: list[Path] = []

    def __call__(self, prof: Any) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        worker = self.worker_name or _worker_name()
        path = self.out_dir / f"{worker}.{time.time_ns() // 1_000_000}{TRACE_SUFFIX}"
        prof.export_chrome_trace(str(path))
        self.paths.append(path)


def trace_handler(out_dir: str | Path, worker_name: str | None = None) -> TraceHandler:
    """For ``torch.profiler.profile(on_trace_ready=trace_handler(out_dir))``."""
    return TraceHandler(out_dir, worker_name)


def _worker_name() -> str:
    """``host_pid``, with the rank first when torch.distributed is initialised."""
    name = f"{socket.gethostname()}_{os.getpid()}"
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        name = f"rank{dist.get_rank()}.{name}"
    return name


# --- NVML sampling -------------------------------------------------------------------------------


class NvmlSampler:
    """Samples every GPU through NVML in a thread; ``reason`` says why not when it cannot."""

    def __init__(self, path: Path, interval_s: float = 0.1) -> None:
        self.path = path
        self.interval_s = interval_s
        self.samples = 0
        self.reason: str | None = None
        self._nvml: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        try:
            nvml: ModuleType = importlib.import_module("pynvml")
        except ImportError:
            self.reason = f"nvidia-ml-py is not installed ({install_line('nvml')})"
            return False
        try:
            nvml.nvmlInit()
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as error:  # NVMLError and its many subclasses: no driver, no GPU
            self.reason = f"NVML did not start: {error}"
            return False
        if count == 0:
            self.reason = "NVML sees no GPU"
            nvml.nvmlShutdown()
            return False
        self._nvml = nvml
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, args=(count,), daemon=True)
        self._thread.start()
        return True

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._nvml.nvmlShutdown()

    def _run(self, count: int) -> None:
        nvml = self._nvml
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        with self.path.open("w") as out:
            while not self._stop.is_set():
                out.write(json.dumps(_nvml_sample(nvml, handles)) + "\n")
                self.samples += 1
                self._stop.wait(self.interval_s)


def _nvml_sample(nvml: Any, handles: Sequence[Any]) -> dict[str, Any]:
    now_ns = time.time_ns()
    sample: dict[str, Any] = {
        "time": datetime.fromtimestamp(now_ns / 1e9, UTC).isoformat(),
        "time_ns": now_ns,
    }
    for i, handle in enumerate(handles):
        for key, value in _nvml_readings(nvml, handle):
            sample[f"{key}:{i}"] = value
    return sample


def _nvml_readings(nvml: Any, handle: Any) -> Iterator[tuple[str, float]]:
    """Each metric this GPU reports; one it does not support is left out."""
    readers: list[tuple[str, Callable[[], float]]] = [
        ("gpu_usage", lambda: float(nvml.nvmlDeviceGetUtilizationRates(handle).gpu)),
        ("gpu_mem_used", lambda: float(nvml.nvmlDeviceGetMemoryInfo(handle).used)),
        ("gpu_mem_total", lambda: float(nvml.nvmlDeviceGetMemoryInfo(handle).total)),
        ("gpu_power", lambda: float(nvml.nvmlDeviceGetPowerUsage(handle)) / 1000.0),
    ]
    for key, read in readers:
        try:
            yield key, read()
        except Exception:  # NVMLError_NotSupported and kin
            continue


# --- the recorder ---------------------------------------------------------------------------------


def _schedule(torch: Any, options: CaptureOptions) -> Callable[[int], Any]:
    """Skip ``warmup`` steps (warming the profiler up in the last), then record; save at the end
    of the last step to record (``steps`` of them, or the first to end after ``seconds``)."""
    action = torch.profiler.ProfilerAction
    started: list[float] = []
    saved_at: list[int] = []

    def schedule(step: int) -> Any:
        if step < options.warmup:
            return action.WARMUP if step == options.warmup - 1 else action.NONE
        if saved_at and step > saved_at[0]:
            return action.NONE  # one cycle only
        if options.seconds is not None:
            if not started:
                started.append(time.monotonic())
            last = time.monotonic() - started[0] >= options.seconds
        else:
            last = step >= options.warmup + options.steps - 1
        if last and not saved_at:
            saved_at.append(step)
        return action.RECORD_AND_SAVE if last else action.RECORD

    return schedule


class Recorder:
    """One profiling session: the torch profiler, its trace handler and the NVML sampler."""

    def __init__(self, out_dir: str | Path, options: CaptureOptions) -> None:
        torch = _torch()
        self.out_dir = Path(out_dir)
        self.options = options
        self.cuda = bool(torch.cuda.is_available())
        activity = torch.profiler.ProfilerActivity
        activities = [activity.CPU] + ([activity.CUDA] if self.cuda else [])
        self.handler = trace_handler(self.out_dir)
        self.steps_seen = 0
        self.finished = False
        self._prof = torch.profiler.profile(
            activities=activities,
            schedule=_schedule(torch, options),
            on_trace_ready=self._on_trace_ready,
            record_shapes=options.record_shapes,
            with_stack=options.with_stack,
        )
        self._nvml = NvmlSampler(self.out_dir / NVML_FILE, options.nvml_interval_s)

    def _on_trace_ready(self, prof: Any) -> None:
        self.handler(prof)
        self.finished = True

    def start(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if self.options.nvml:
            self._nvml.start()
        self._prof.start()

    def step(self) -> None:
        """The current step ended; the next begins."""
        self.steps_seen += 1
        if not self.finished:
            self._prof.step()

    def stop(self) -> None:
        if not self.finished:
            self._prof.stop()  # saves what a RECORD phase holds; nothing in NONE or WARMUP
        self._nvml.stop()

    def result(self, script_error: str | None = None, exit_code: int = 0) -> CaptureResult:
        return CaptureResult(
            out_dir=self.out_dir,
            traces=list(self.handler.paths),
            nvml_path=self._nvml.path if self._nvml.samples else None,
            steps_seen=self.steps_seen,
            recorded=self._recorded(),
            not_recorded=self._not_recorded(),
            script_error=script_error,
            exit_code=exit_code,
        )

    def _recorded(self) -> list[str]:
        if not self.handler.paths:
            return []
        found = ["CPU operators"]
        found += ["GPU kernels, copies and memsets (CUDA)"] if self.cuda else []
        found += ["input shapes"] if self.options.record_shapes else []
        found += ["Python stacks"] if self.options.with_stack else []
        found += [f"{self._nvml.samples} NVML samples"] if self._nvml.samples else []
        return found

    def _not_recorded(self) -> list[str]:
        missing = []
        if not self.handler.paths:
            missing.append(
                f"no trace: the script ended after {plural(self.steps_seen, 'step')}, before the"
                f" {self.options.warmup} warm-up steps were over (try --warmup 0)"
            )
        if not self.cuda:
            missing.append("GPU activity: torch.cuda.is_available() is False (no GPU timeline)")
        if self.options.nvml and not self._nvml.samples:
            missing.append(f"NVML samples: {self._nvml.reason or 'none taken'}")
        return missing


class Capture:
    """What :func:`profile` yields: call :meth:`step` at the end of every step."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self.result: CaptureResult | None = None  # set when the ``with`` block ends

    def step(self) -> None:
        self._recorder.step()


@contextmanager
def profile(
    out_dir: str | Path,
    *,
    steps: int = 5,
    warmup: int = 1,
    seconds: float | None = None,
    record_shapes: bool = True,
    with_stack: bool = True,
    nvml: bool = True,
) -> Iterator[Capture]:
    """Profile the block; ``prof.step()`` marks the end of each step::

    with gpuscope.capture.profile("traces", steps=5) as prof:
        for batch in loader:
            train_step(batch)
            prof.step()
    """
    options = CaptureOptions(steps, warmup, seconds, record_shapes, with_stack, nvml)
    recorder = Recorder(out_dir, options)
    capture = Capture(recorder)
    recorder.start()
    try:
        yield capture
    finally:
        recorder.stop()
        capture.result = recorder.result()


# --- running a script ---------------------------------------------------------------------------


class _StepHooks:
    """Optimizer and top-level module hooks that tell the recorder where steps end."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self._depth = 0
        self._calls = 0
        self._optimizer_seen = False
        modules = importlib.import_module("torch.nn.modules.module")
        optimizer = importlib.import_module("torch.optim.optimizer")
        self._handles = [
            optimizer.register_optimizer_step_post_hook(self._optimizer_step),
            modules.register_module_forward_pre_hook(self._enter),
            modules.register_module_forward_hook(self._leave),
        ]

    def _optimizer_step(self, *_: Any) -> None:
        if not self._optimizer_seen:
            self._optimizer_seen = True
            for handle in self._handles[1:]:  # training: module calls no longer mark steps
                handle.remove()
        self._recorder.step()

    def _enter(self, *_: Any) -> None:
        self._depth += 1
        if self._depth == 1:
            if self._calls and not self._optimizer_seen:
                self._recorder.step()
            self._calls += 1

    def _leave(self, *_: Any) -> None:
        self._depth = max(self._depth - 1, 0)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


def script_and_args(command: Sequence[str]) -> tuple[str, list[str], bool]:
    """``python train.py ARGS`` / ``train.py ARGS`` / ``python -m pkg ARGS`` ->
    (script or module, its argv, whether it is a module)."""
    words = list(command)
    if words and Path(words[0]).name.startswith("python") and not words[0].endswith(".py"):
        words = words[1:]
        while words and words[0].startswith("-") and words[0] != "-m":
            words = words[1:]  # interpreter flags (-u, -O, ...) have no meaning in-process
    if len(words) >= 2 and words[0] == "-m":
        return words[1], words[2:], True
    if not words:
        raise ValueError("no script to run: gpuscope profile -- python train.py ARGS")
    return words[0], words[1:], False


def missing_script(command: Sequence[str]) -> str | None:
    """Why ``command`` names no script to run, or None. Checked before the profiler starts, so
    that a typo is not reported as a script that ended before its warm-up."""
    target, _, is_module = script_and_args(command)
    if is_module or Path(target).is_file():
        return None  # a module is found by runpy, which says so when it is not
    if Path(target).exists():
        return f"{target}: not a script file"
    return f"{target}: no such script (in {Path.cwd()})"


def run_script(
    command: Sequence[str], out_dir: str | Path, options: CaptureOptions | None = None
) -> CaptureResult:
    """Run ``python SCRIPT ARGS`` in this process under the profiler; see the module contract."""
    options = options or CaptureOptions()
    target, args, is_module = script_and_args(command)
    recorder = Recorder(out_dir, options)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    error: str | None = None
    code = 0
    hooks = _StepHooks(recorder)
    recorder.start()
    try:
        if is_module:
            sys.argv = [target, *args]
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.argv = [target, *args]
            sys.path.insert(0, str(Path(target).resolve().parent))
            runpy.run_path(target, run_name="__main__")
    except SystemExit as exit_:
        code = _exit_status(exit_.code)
        if code and not isinstance(exit_.code, int):
            error = f"{exit_.code}\n"  # what python prints for SystemExit("message")
    except Exception as failure:
        error = _script_traceback(failure)
        code = 1
    finally:
        hooks.remove()
        recorder.stop()
        sys.argv, sys.path[:] = saved_argv, saved_path
    return recorder.result(error, code)


def _script_traceback(failure: BaseException) -> str:
    """The traceback as ``python SCRIPT`` would print it: without runpy's and gpuscope's frames."""
    skip = {runpy.__file__, __file__, "<frozen runpy>"}
    summary = traceback.TracebackException.from_exception(failure)
    summary.stack = traceback.StackSummary.from_list(
        [frame for frame in summary.stack if frame.filename not in skip]
    )
    return "".join(summary.format())


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    return 1


class CaptureFacts(msgspec.Struct, frozen=True):
    """What a capture in this environment can record, before running anything."""

    torch_version: str
    cuda: bool
    devices: list[str] = msgspec.field(default_factory=list)


def environment() -> CaptureFacts:
    torch = _torch()
    cuda = bool(torch.cuda.is_available())
    names = [str(torch.cuda.get_device_name(i)) for i in range(torch.cuda.device_count())]
    return CaptureFacts(str(torch.__version__), cuda, names if cuda else [])
