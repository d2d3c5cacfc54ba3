"""Capture: a real PyTorch profile of a tiny script written here (the CPU build of torch).

Without torch these tests skip locally; in CI (``CI`` set) torch comes with the test extra and
its absence fails them, so a green CI run always means a real capture ran.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from gpuscope.cli import main

TRAIN = """
import sys
import torch

model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(int(sys.argv[1])):
    loss = model(torch.randn(16, 32)).square().mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
print("trained", sys.argv[1])
"""

INFER = """
import torch

model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU())
with torch.no_grad():
    for _ in range(8):
        model(torch.randn(4, 32))
"""

FAILS = """
import torch

torch.nn.Linear(4, 4)(torch.randn(2, 4))
raise ValueError("boom")
"""


@pytest.fixture
def torch() -> Any:
    if os.environ.get("CI"):
        import torch as module  # CI installs the test extra: a missing torch is a failure

        return module
    return pytest.importorskip("torch")


def profile(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuscope", "profile", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )


def profile_here(tmp_path: Path, *args: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``gpuscope profile`` in this process (torch is imported once for the whole file)."""
    monkeypatch.chdir(tmp_path)
    return CliRunner().invoke(main, ["profile", *args])


def step_names(trace: Path) -> list[str]:
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    names = {e["name"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#")}
    return sorted(names, key=lambda n: int(n.split("#")[1]))


def test_profile_records_a_script_unchanged(torch: Any, tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    result = profile(
        tmp_path, "--steps", "3", "--warmup", "2", "--out", "out", "--", "python", "train.py", "9"
    )
    assert "trained 9" in result.stdout  # the script ran to its end, with its own argv
    traces = sorted((tmp_path / "out").glob("*.pt.trace.json.gz"))
    assert len(traces) == 1
    # Steps 0 and 1 skipped; each optimizer.step() ended a step.
    assert step_names(traces[0]) == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert "9 steps seen" in result.stderr
    assert "recorded: CPU operators, " in result.stderr
    if torch.cuda.is_available():
        assert result.returncode == 0, result.stderr
        assert "GPU kernels" in result.stderr
    else:
        # No GPU: the CPU trace is written and the exit status says there is no diagnosis.
        assert result.returncode == 2
        assert "not recorded: GPU activity: torch.cuda.is_available() is False" in result.stderr
        assert "no diagnosis: GPU activity was not recorded" in result.stderr.splitlines()[-1]


def test_inference_steps_are_top_level_module_calls(
    torch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "infer.py").write_text(INFER)
    args = ("--steps", "2", "--warmup", "1", "--out", "out", "--", "infer.py")
    profile_here(tmp_path, *args, monkeypatch=monkeypatch)
    (trace,) = (tmp_path / "out").glob("*.pt.trace.json.gz")
    assert step_names(trace) == ["ProfilerStep#1", "ProfilerStep#2"]


def test_a_failing_script_shows_its_traceback_and_exits_as_python_would(
    torch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "fails.py").write_text(FAILS)
    args = ("--warmup", "0", "--out", "out", "--", "python", "fails.py")
    result = profile_here(tmp_path, *args, monkeypatch=monkeypatch)
    assert result.exit_code == 1  # an uncaught exception: python's own exit status
    assert 'fails.py", line 5, in <module>' in result.stderr
    assert "ValueError: boom" in result.stderr
    assert "runpy" not in result.stderr  # the traceback is the script's, not gpuscope's
    assert "the script failed" in result.stderr.splitlines()[-1]
    assert list((tmp_path / "out").glob("*.pt.trace.json.gz")), "what ran is still written"


def test_a_script_that_exits_with_a_message_shows_it(
    torch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "quits.py").write_text('raise SystemExit("boom: no data in /data/train")\n')
    args = ("--warmup", "0", "--out", "out", "--", "python", "quits.py")
    result = profile_here(tmp_path, *args, monkeypatch=monkeypatch)
    assert result.exit_code == 1
    assert "boom: no data in /data/train\n" in result.stderr  # where python would print it
    last = result.stderr.splitlines()[-1]
    assert last.endswith("the script failed (exit status 1): boom: no data in /data/train")


def test_a_script_keeps_its_own_exit_status(
    torch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "three.py").write_text("import sys\nsys.exit(3)\n")
    args = ("--warmup", "0", "--out", "out", "--", "python", "three.py")
    result = profile_here(tmp_path, *args, monkeypatch=monkeypatch)
    assert result.exit_code == 3, result.stderr
    assert result.stderr.splitlines()[-1].startswith(
        "gpuscope: error: the script failed (exit status 3)"
    )


def test_a_missing_script_is_named_before_anything_runs(
    torch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ("--out", "out", "--", "python", "trian.py")
    result = profile_here(tmp_path, *args, monkeypatch=monkeypatch)
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        f"gpuscope: error: trian.py: no such script (in {tmp_path})"
    ]
    assert "warmup" not in result.stderr and not (tmp_path / "out").exists()


def test_a_script_shorter_than_the_warm_up_records_nothing(
    torch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "train.py").write_text(TRAIN)
    args = ("--warmup", "5", "--out", "out", "--", "python", "train.py", "2")
    result = profile_here(tmp_path, *args, monkeypatch=monkeypatch)
    assert result.exit_code == 2
    assert sys.argv[1:] != ["2"]  # the script's argv was restored
    assert "before the 5 warm-up steps were over" in result.stderr
    assert "nothing was recorded" in result.stderr.splitlines()[-1]


def test_context_manager_and_trace_handler(torch: Any, tmp_path: Path) -> None:
    from gpuscope.capture import profile as capture_profile
    from gpuscope.capture import trace_handler

    with capture_profile(tmp_path / "api", steps=2, warmup=1, nvml=False) as prof:
        for _ in range(5):
            torch.mm(torch.randn(8, 8), torch.randn(8, 8))
            prof.step()
    assert prof.result is not None
    assert prof.result.steps_seen == 5
    (trace,) = prof.result.traces
    assert step_names(trace) == ["ProfilerStep#1", "ProfilerStep#2"]

    handler = trace_handler(tmp_path / "plain")
    with torch.profiler.profile(on_trace_ready=handler):
        torch.mm(torch.randn(8, 8), torch.randn(8, 8))
    (written,) = handler.paths
    assert written.parent == tmp_path / "plain" and written.name.endswith(".pt.trace.json.gz")


def test_a_time_window_records_steps_until_it_has_passed(torch: Any, tmp_path: Path) -> None:
    from gpuscope.capture import profile as capture_profile

    with capture_profile(tmp_path, warmup=1, seconds=0.1, nvml=False) as prof:
        for _ in range(40):
            time.sleep(0.02)
            prof.step()
    assert prof.result is not None
    (trace,) = prof.result.traces
    steps = step_names(trace)
    assert steps[0] == "ProfilerStep#1"
    assert 4 <= len(steps) <= 12  # about 0.1 s of 20 ms steps, then it stopped


def test_without_torch_one_line_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    result = CliRunner().invoke(main, ["profile", "--", "python", "train.py"])
    assert result.exit_code == 2
    # gpuscope is installed from its checkout: the line names it, so it works from any folder.
    root = Path(__file__).resolve().parents[1]
    assert result.output.strip() == (
        f"gpuscope: error: gpuscope profile needs PyTorch: pip install -e '{root}[torch]'"
    )
    assert 'torch = ["torch' in (root / "pyproject.toml").read_text()


class _FakeNvml:
    """Just enough of pynvml for one GPU."""

    def __init__(self) -> None:
        self.shut_down = False

    def nvmlInit(self) -> None:  # noqa: N802 (pynvml's names)
        pass

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.shut_down = True

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        return index

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:  # noqa: N802
        return type("Rates", (), {"gpu": 87})()

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:  # noqa: N802
        return type("Memory", (), {"used": 2**30, "total": 2**34})()

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:  # noqa: N802
        raise RuntimeError("NVMLError_NotSupported")  # left out of the samples


def test_nvml_samples_are_json_lines_the_samples_reader_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuscope.capture import NvmlSampler
    from gpuscope.readers.samples import read_nvml_jsonl

    fake = _FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    sampler = NvmlSampler(tmp_path / "nvml.jsonl", interval_s=0.01)
    assert sampler.start()
    deadline = time.monotonic() + 10
    while sampler.samples < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    sampler.stop()
    assert fake.shut_down
    first = json.loads((tmp_path / "nvml.jsonl").read_text().splitlines()[0])
    assert first["gpu_usage:0"] == 87 and first["gpu_mem_total:0"] == 2**34
    assert "gpu_power:0" not in first
    samples = read_nvml_jsonl(tmp_path / "nvml.jsonl")
    (gpu,) = samples.gpus
    assert len(gpu.time_ns) >= 3
    assert list(gpu.utilization_pct[:3]) == [87.0, 87.0, 87.0]


def test_nvml_missing_is_said_not_hidden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuscope.capture import NvmlSampler

    monkeypatch.setitem(sys.modules, "pynvml", None)
    sampler = NvmlSampler(tmp_path / "nvml.jsonl")
    assert not sampler.start()
    root = Path(__file__).resolve().parents[1]
    assert sampler.reason == f"nvidia-ml-py is not installed (pip install -e '{root}[nvml]')"


_STATE_SCRIPT = """
import gc, json, os, sys
state = {
    "environ": dict(os.environ),
    "gc_enabled": gc.isenabled(),
    "gc_threshold": list(gc.get_threshold()),
    "argv": sys.argv[1:],
    "name": __name__,
}
with open(sys.argv[1], "w") as out:
    json.dump(state, out)
"""


def test_a_profiled_script_finds_the_process_as_it_would_alone(torch: Any, tmp_path: Path) -> None:
    """The console script's start-up tuning (one BLAS thread, malloc settings, no cyclic GC) is
    gpuscope's own: a script run under ``gpuscope profile`` sees the environment and interpreter
    state it sees when run alone."""
    script = tmp_path / "state.py"
    script.write_text(_STATE_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    alone, profiled = tmp_path / "alone.json", tmp_path / "profiled.json"
    subprocess.run([sys.executable, str(script), str(alone)], env=env, check=True, cwd=tmp_path)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuscope",
            "profile",
            "--no-nvml",
            "--",
            "python",
            str(script),
            str(profiled),
        ],
        env=env,
        capture_output=True,
        check=False,
        cwd=tmp_path,
    )
    seen_alone, seen_profiled = json.loads(alone.read_text()), json.loads(profiled.read_text())
    assert seen_profiled.pop("argv") == [str(profiled)]
    assert seen_alone.pop("argv") == [str(alone)]
    assert seen_profiled["environ"] == seen_alone["environ"]
    assert seen_profiled == seen_alone
