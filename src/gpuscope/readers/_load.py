"""Reading files and folders into a Job: the format registry and the folder reader (see the
package docstring)."""

from __future__ import annotations

import os
import pickle
import re
from collections.abc import Callable
from importlib import import_module
from pathlib import Path
from typing import Any

import msgspec

from gpuscope._files import note_input_path
from gpuscope.errors import CorruptInputError, EmptyTraceError, InputError, UnknownFormatError
from gpuscope.model import BUSY_KINDS, Job, Kind, SampleSet, Trace
from gpuscope.readers import _plausible, _scan
from gpuscope.readers._io import head_bytes, is_folder
from gpuscope.readers._prefetch import Prefetch
from gpuscope.readers._scan import Scan, looks_like_kineto


class Reader(msgspec.Struct, frozen=True):
    name: str
    sniff: Callable[[bytes], bool]
    read: Callable[[Path], Job]


def _read_kineto(path: Path, scan: Scan | None = None) -> Job:
    trace: Trace = _lazy("kineto", "read_file")(path, scan)
    try:
        require_device_activity(path, trace)
    except EmptyTraceError as error:
        if any("ends mid-write" in w for w in trace.warnings):  # the device events came later
            raise EmptyTraceError(
                path, f"{error.reason}, in the part written before the file was cut off"
            ) from None
        raise
    return Job(source=str(path), traces=[trace])


def _read_pftrace(path: Path) -> Job:
    job: Job = _lazy("pftrace", "read")(path)
    for trace in job.traces:
        require_device_activity(path, trace)
    return job


def _read_ncu(path: Path) -> Job:
    return Job(source=str(path), traces=[], counters=[_lazy("ncu", "read")(path)])


def _sampled(function: str) -> Callable[[Path], Job]:
    read: Callable[[Path], SampleSet] = _lazy("samples", function)

    def read_job(path: Path) -> Job:
        return Job(source=str(path), traces=[], samples=[read(path)])

    return read_job


def _lazy(module: str, function: str) -> Callable[..., Any]:
    """``gpuscope.readers.<module>.<function>``, imported at its first call: a file is sniffed
    format by format, and only the modules of the formats tried load."""

    def call(*args: Any) -> Any:
        return getattr(import_module(f"gpuscope.readers.{module}"), function)(*args)

    return call


READERS: list[Reader] = [
    Reader("kineto", looks_like_kineto, _read_kineto),
    Reader("nsys", _lazy("nsys", "looks_like_nsys"), _lazy("nsys", "read")),
    Reader("pftrace", _lazy("pftrace", "looks_like_pftrace"), _read_pftrace),
    Reader("rocprofv3", _lazy("rocprof", "looks_like_rocprof"), _lazy("rocprof", "read")),
    Reader("ncu-csv", _lazy("ncu", "looks_like_ncu"), _read_ncu),
    Reader("nvml-jsonl", _lazy("samples", "looks_like_nvml_jsonl"), _sampled("read_nvml_jsonl")),
    Reader(
        "nvidia-smi-csv", _lazy("samples", "looks_like_nvidia_smi"), _sampled("read_nvidia_smi")
    ),
    Reader("dcgmi-dmon", _lazy("samples", "looks_like_dcgmi_dmon"), _sampled("read_dcgmi_dmon")),
    Reader(
        "dcgm-counter-list",
        _lazy("samples", "looks_like_counter_list"),
        _lazy("samples", "reject_counter_list"),
    ),
    Reader("prometheus", _lazy("samples", "looks_like_prometheus"), _sampled("read_prometheus")),
    Reader("torch-snapshot", _lazy("snapshot", "looks_like_snapshot"), _lazy("snapshot", "read")),
]


def load(path: str | Path, *, prefetch: Prefetch | None = None) -> Job:
    """Read one file, or every readable file in a folder (one per rank, or mixed formats).

    ``prefetch`` is a read of the file begun ahead (:func:`gpuscope.readers._early.start` or
    ``begin``): a Kineto scan on a thread, or an export read in a child process. It is used for
    that file only; without it the file is read here and now.
    """
    path = Path(path)
    if is_folder(path):
        return _load_folder(path)
    return load_file(path, prefetch=prefetch)


def load_file(path: Path, *, prefetch: Prefetch | None = None) -> Job:
    """Read one file, whatever its format; events of impossible times set aside, with a warning
    (:mod:`gpuscope.readers._plausible`)."""
    job = _read_file(path, prefetch)
    job.traces = [_plausible.set_aside(t) for t in job.traces]
    return job


def _read_file(path: Path, prefetch: Prefetch | None) -> Job:
    if path.suffix == ".nsys-rep":
        raise UnknownFormatError(
            path,
            "an Nsight Systems report; export it first: nsys export --type sqlite "
            f"--output {path.with_suffix('.sqlite').name} {path.name}",
        )
    note_input_path(path)  # no output of the command may overwrite it (see gpuscope._files)
    early = prefetch.job_for(path) if prefetch is not None else None
    if early is not None:  # read already, in a child process (see the console script)
        return early
    scan = prefetch.scan_for(path) if prefetch is not None else None
    head = head_bytes(path)
    for reader in READERS:
        if reader.sniff(head):
            return _read_kineto(path, scan) if reader.name == "kineto" else reader.read(path)
    if head.lstrip()[:1] in (b"{", b"["):
        raise UnknownFormatError(path, _other_json(head))
    known = ", ".join(r.name for r in READERS)
    raise UnknownFormatError(path, f"not a profiler trace gpuscope can read ({known})")


# The profiler's other JSON outputs, which users find beside their traces.
_EXECUTION_TRACE = re.compile(rb'^\s*\{\s*"schema"[^{]*"nodes"\s*:\s*\[')
_MEMORY_TIMELINE = re.compile(rb"^\s*\[\s*\[\s*-?\d+\s*,\s*\d+\s*,\s*-?\d+\s*,\s*\d+\s*\]")


def _other_json(head: bytes) -> str:
    """Why a JSON file is not a trace, naming the PyTorch output it is when it is one."""
    if _EXECUTION_TRACE.match(head):
        return (
            "a PyTorch execution trace (the operator graph, without GPU timings):"
            " diagnose the profiler trace recorded beside it"
        )
    if _MEMORY_TIMELINE.match(head):
        return (
            "a PyTorch memory timeline (export_memory_timeline), not a timeline of GPU work:"
            " diagnose the profiler trace (export_chrome_trace)"
        )
    return "JSON, but not a profiler trace (no 'traceEvents')"


def require_device_activity(path: Path, trace: Trace) -> None:
    """A timeline without device work cannot be diagnosed: say which of two reasons it is."""
    ev = trace.events
    busy = ev.of_kind(*BUSY_KINDS)
    if busy.any() and (ev.dur_ns[busy] > 0).any():
        return
    if busy.any():
        raise EmptyTraceError(path, "every GPU event has zero duration: no device time to analyse")
    if ev.of_kind(Kind.RUNTIME).any():
        raise EmptyTraceError(
            path,
            "GPU activity was not recorded: the trace has CPU launches but no kernels"
            " (profile with ProfilerActivity.CUDA)",
        )
    raise EmptyTraceError(path, "no GPU activity: the trace holds CPU events only")


def _load_folder(folder: Path) -> Job:
    try:
        entries = sorted(p for p in folder.iterdir() if not p.name.startswith("."))
        files = [p for p in entries if p.is_file()]
    except OSError as error:
        raise InputError(folder, f"cannot be read ({error.strerror or error})") from None
    if not files:
        raise InputError(folder, _no_files(entries))
    for file in files:  # read by worker processes, perhaps: noted here
        note_input_path(file)
    parts: list[Job] = []
    skipped: list[str] = []
    empty: list[_Unread] = []
    for file, outcome in zip(files, _read_all(files), strict=True):
        if isinstance(outcome, Job):
            parts.append(outcome)
        elif outcome.error is None:
            skipped.append(f"{file.name} ({outcome.reason})")
        elif outcome.error == EmptyTraceError.__name__:
            empty.append(outcome)
        else:
            raise _ERRORS.get(outcome.error, InputError)(outcome.path, outcome.reason)
    if not parts:
        if empty:  # nothing else to diagnose: the first file's own reason
            raise EmptyTraceError(empty[0].path, empty[0].reason)
        raise UnknownFormatError(folder, "no readable trace in the folder: " + "; ".join(skipped))
    job = Job.merge(str(folder), parts)
    # A rank that recorded no GPU work (a CPU-only or data-loading process) must not hide the
    # ranks that did: they are diagnosed, and the job says which file was left out and why.
    for unread in empty:
        job.notes.append(f"{unread.path}: left out, {unread.reason}")
    if skipped:
        job.notes.append(f"{folder}: skipped files that are not traces: " + "; ".join(skipped))
    return job


def _no_files(entries: list[Path]) -> str:
    """Why a folder without files is no job, and what to pass instead."""
    folders = [p.name for p in entries if p.is_dir()]
    if not folders:
        return "the folder is empty"
    shown = ", ".join(folders[:3]) + (f" and {len(folders) - 3} more" if len(folders) > 3 else "")
    return (
        f"no trace files here, only {len(folders)} sub-folder{'s' if len(folders) > 1 else ''}"
        f" ({shown}): pass one job's folder (its per-rank files), or run"
        f" `gpuscope fleet '{entries[0].parent / '*'}'` for many jobs"
    )


# --- reading a folder's files on all cores ------------------------------------------------------
#
# Files are read by worker processes started with "spawn" (safe whatever threads the caller runs)
# and by the calling process itself. They share one queue of files: workers take files from its
# front, the caller from its back, through a counter in shared memory, so that nobody idles while
# files are left (the caller starts at once; a worker first spends ~0.4 s importing). A worker
# pickles each Job into a file of a private temporary folder: a 15 MB result sent through the
# pool's pipe would stall the worker until the caller, busy decoding a file while holding the GIL,
# read it. Pickling the numpy columns costs ~20 ms for a 120k-event trace, loading them back less.
# A folder is read one file after another when it holds one file, when one core is available, or
# when its files are too small to pay for starting a worker; ``GPUSCOPE_WORKERS=N`` sets the
# number of readers, the calling process included (1: never in parallel).

#: Below this many bytes on disk in all, starting worker interpreters costs more than it saves.
PARALLEL_MIN_BYTES = 8 << 20
_ERRORS: dict[str, type[InputError]] = {
    cls.__name__: cls
    for cls in (InputError, UnknownFormatError, CorruptInputError, EmptyTraceError)
}
#: In a worker process: the shared [front, back] indices of the files left to read.
_queue: Any = None


class _Unread(msgspec.Struct, frozen=True):
    """Why a file of a folder was not read: skipped (``error`` None) or an input error."""

    path: str
    reason: str
    error: str | None


def _read_one(path: Path) -> Job | _Unread:
    """Read one file of a folder; errors come back as values (exceptions with a custom
    ``__init__`` do not survive pickling between processes)."""
    try:
        return load_file(path)
    except UnknownFormatError as error:
        return _Unread(error.path, error.reason, None)
    except InputError as error:
        return _Unread(error.path, error.reason, type(error).__name__)


def _take(queue: Any, *, front: bool) -> int | None:
    """The index of the next file to read from the front or the back, or None when none is left."""
    with queue.get_lock():
        first, last = int(queue[0]), int(queue[1])
        if first > last:
            return None
        if front:
            queue[0] = first + 1
            return first
        queue[1] = last - 1
        return last


def _start_worker(queue: Any) -> None:
    global _queue  # noqa: PLW0603 - shared memory reaches a spawned worker only this way
    _queue = queue
    _scan.threaded = False  # the processes use the cores


def _drain(files: list[Path], scratch: Path) -> list[tuple[int, Path | _Unread]]:
    """In a worker: read files from the front of the queue, each Job pickled to a file."""
    done: list[tuple[int, Path | _Unread]] = []
    while (i := _take(_queue, front=True)) is not None:
        outcome = _read_one(files[i])
        if isinstance(outcome, Job):
            out = scratch / f"{i}.pickle"
            with out.open("wb") as stream:
                pickle.dump(outcome, stream, protocol=pickle.HIGHEST_PROTOCOL)
            done.append((i, out))
        else:
            done.append((i, outcome))
    return done


def _load_pickled(outcome: Path | _Unread) -> Job | _Unread:
    if isinstance(outcome, _Unread):
        return outcome
    with outcome.open("rb") as stream:
        job: Job = pickle.load(stream)
    return job


def folder_workers(files: list[Path]) -> int:
    """How many processes read ``files`` (the caller included): ``GPUSCOPE_WORKERS``, else one per
    core when the files are large enough to gain from it; never more than the files."""
    setting = os.environ.get("GPUSCOPE_WORKERS", "").strip()
    if setting.isdigit() and int(setting) > 0:
        wanted = int(setting)
    elif sum(_size(f) for f in files) < PARALLEL_MIN_BYTES:
        wanted = 1
    else:
        affinity = getattr(os, "sched_getaffinity", None)
        wanted = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    return max(1, min(wanted, len(files)))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _read_all(files: list[Path]) -> list[Job | _Unread]:
    workers = folder_workers(files)
    if workers <= 1:
        return [_read_one(f) for f in files]
    import multiprocessing  # noqa: PLC0415 - only a folder read in parallel needs these
    import tempfile  # noqa: PLC0415
    from concurrent.futures import ProcessPoolExecutor  # noqa: PLC0415

    context = multiprocessing.get_context("spawn")
    queue = context.Array("q", [0, len(files) - 1])
    results: list[Job | _Unread | None] = [None] * len(files)
    with (
        _scan.unthreaded(),
        tempfile.TemporaryDirectory(prefix="gpuscope-read-") as scratch,
        ProcessPoolExecutor(
            workers - 1, mp_context=context, initializer=_start_worker, initargs=(queue,)
        ) as pool,
    ):
        drains = [pool.submit(_drain, files, Path(scratch)) for _ in range(workers - 1)]
        while (i := _take(queue, front=False)) is not None:
            results[i] = _read_one(files[i])
        for drain in drains:
            for i, outcome in drain.result():
                results[i] = _load_pickled(outcome)
    return [r for r in results if r is not None]
