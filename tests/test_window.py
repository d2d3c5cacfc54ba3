"""The window is what was profiled; a gap belongs to the host work that spans it; start-up and
teardown are left out with their duration stated; one step everywhere (issue 28).

Each principle on a small Kineto trace written here (exact values), and on the real traces of the
corpus that show it (MANIFEST.md's answers).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from corpus import corpus
from gpuscope.analyses.host import host_activity
from gpuscope.analyses.phases import WarmupKind, startup_phases
from gpuscope.analyses.timeline import device_work, find_steps, step_breakdown
from gpuscope.analyses.window import profiled_window, real_steps
from gpuscope.diagnosis import Diagnosis, diagnose
from gpuscope.readers import load

MS = 1000.0  # Kineto times are in µs


class Doc:
    """A Kineto trace written event by event: host thread 1 of process 1, device 0 stream 7."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.correlation = 0
        self.python_id = 0

    def op(self, cat: str, name: str, ts: float, dur: float, **args: Any) -> None:
        self.events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}
            | ({"args": args} if args else {})
        )

    def step(self, number: int, ts: float, dur: float) -> None:
        self.op("user_annotation", f"ProfilerStep#{number}", ts, dur)

    def frame(self, name: str, ts: float, dur: float, parent: int = 0) -> int:
        self.python_id += 1
        self.op(
            "python_function",
            name,
            ts,
            dur,
            **{"Python id": self.python_id, "Python parent id": parent},
        )
        return self.python_id

    def launch(self, kernel: str, ts: float, kernel_ts: float, kernel_dur: float) -> None:
        """A 5 µs ``cudaLaunchKernel`` at ``ts`` and the kernel it launched."""
        self.correlation += 1
        self.op("cuda_runtime", "cudaLaunchKernel", ts, 5.0, correlation=self.correlation)
        self.events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": kernel,
                "pid": 0,
                "tid": 7,
                "ts": kernel_ts,
                "dur": kernel_dur,
                "args": {"device": 0, "stream": 7, "correlation": self.correlation},
            }
        )

    def busy(self, ts: float, count: int, kernel: str = "gemm_kernel") -> float:
        """``count`` back-to-back 1 ms kernels launched from ``ts``; returns when they end."""
        for k in range(count):
            self.launch(kernel, ts + 10 * k, ts + 20 + k * MS, MS)
        return ts + 20 + count * MS

    def write(self, path: Path) -> Path:
        doc = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "numSms": 132}],
            "traceEvents": self.events,
        }
        path.write_text(json.dumps(doc))
        return path


def _diagnose(doc: Doc, tmp_path: Path) -> Diagnosis:
    return diagnose(load(doc.write(tmp_path / "t.json")))


def _causes(d: Diagnosis) -> list[str]:
    return [f.cause for f in d.findings if f.pattern != "startup"]


# --- 1. the window is what was profiled ----------------------------------------------------------


def test_host_work_before_the_first_kernel_of_a_step_is_in_the_window(tmp_path: Path) -> None:
    """One 100 ms step: 60 ms of CPU preprocessing, then 40 ms of kernels. Busy is 40% of the
    step (not 100% of the GPU's own span), and the preprocessing is the top finding, at the
    deepest frame that covers most of the gap."""
    doc = Doc()
    doc.step(1, 0, 100 * MS)
    outer = doc.frame("pipeline.py(20): __call__", 1, 99.9 * MS)
    prep = doc.frame("pipeline.py(30): preprocess", 2, 59 * MS, outer)
    doc.frame("videoproc.py(235): preprocess", 5 * MS, 50 * MS, prep)
    for k in range(50):  # the per-frame work inside it: none covers half the gap
        doc.frame("transforms.py(9): resize", 5 * MS + k * MS, 0.9 * MS)
    doc.busy(60 * MS - 20, 40)  # the last kernel ends as the step does
    d = _diagnose(doc, tmp_path)
    (device,) = d.devices
    assert device.temporal.span_ns == 100_000_000
    assert 100 - d.verdict.idle_pct == pytest.approx(40.0, abs=0.2)
    top = d.findings[0]
    assert top.cause == "cpu_other"
    assert top.locations[0].location == "videoproc.py:235 (preprocess)"


def test_without_steps_the_window_is_the_traces_own_span(tmp_path: Path) -> None:
    doc = Doc()
    doc.frame("train.py(5): main", 0, 30 * MS)
    doc.busy(10 * MS, 10)
    loaded = load(doc.write(tmp_path / "t.json")).traces[0]
    window = profiled_window(loaded)
    assert window is not None and window.source == "trace span"
    assert (window.start_ns, window.end_ns) == (0, 30_000_000)


def test_a_stub_step_is_dropped(tmp_path: Path) -> None:
    """A loop that calls ``prof.step()`` once more leaves a 0.02 ms last step with no work."""
    doc = Doc()
    for n in range(3):
        doc.step(n, n * 20 * MS, 20 * MS)
        doc.busy(n * 20 * MS + 1 * MS, 10)
    doc.step(3, 60 * MS, 0.02 * MS)
    trace = load(doc.write(tmp_path / "t.json")).traces[0]
    assert [s.number for s in real_steps(trace)] == [0, 1, 2]
    d = diagnose(load(tmp_path / "t.json"))
    assert d.inputs[0].steps == len(d.devices[0].steps) == 3


def test_teardown_at_exit_is_left_out_and_stated(tmp_path: Path) -> None:
    """After the last kernel the program frees its memory and unloads modules for 30 ms."""
    doc = Doc()
    doc.frame("train.py(5): main", 0, 60 * MS)
    end = doc.busy(0, 30)
    doc.op("cuda_runtime", "cudaFree", end + 10, 10 * MS)
    doc.op("cuda_driver", "cuModuleUnload", end + 10 * MS + 20, 20 * MS)
    d = _diagnose(doc, tmp_path)
    assert d.window is not None
    assert "teardown" in {e.kind for e in d.window.excluded}
    assert d.window.end_ns <= 30_100_000
    left_out = next(f for f in d.findings if f.pattern == "startup")
    assert "teardown" in left_out.title


# --- 2. a gap belongs to the host work that spans it ---------------------------------------------


def test_a_short_sync_never_owns_a_long_gap(tmp_path: Path) -> None:
    """A 6 µs cudaStreamSynchronize, then 50 ms of Python before the next launch: the host's own
    work, not host_sync."""
    doc = Doc()
    end = doc.busy(0, 5)
    doc.op("cuda_runtime", "cudaStreamSynchronize", end - 6, 6)
    doc.frame("train.py(40): evaluate", end + 5, 50 * MS)
    doc.busy(end + 50 * MS + 20, 5)
    d = _diagnose(doc, tmp_path)
    assert _causes(d)[0] == "cpu_other"
    assert d.devices[0].idle.lost_ns(next(c.cause for c in d.devices[0].idle.causes)) > 49e6


def test_silence_before_a_compiled_kernels_first_launch_is_compilation(tmp_path: Path) -> None:
    """2.5 s with nothing recorded after a 6 µs sync, ended by the first ``triton_*`` launch:
    Inductor compiling (start-up), not host_sync."""
    doc = Doc()
    end = doc.busy(0, 5)
    doc.op("cuda_runtime", "cudaStreamSynchronize", end - 6, 6)
    after = end + 2500 * MS
    for k in range(3):  # the compiled loop, then steady kernels
        after = doc.busy(after, 20, kernel=f"triton_poi_fused_add_{k}")
    loaded = load(doc.write(tmp_path / "t.json")).traces[0]
    phases = startup_phases(loaded, host_activity(loaded))
    assert [p.kind for p in phases] == [WarmupKind.COMPILE]
    assert phases[0].end_ns - phases[0].start_ns >= 2_490_000_000
    d = diagnose(load(tmp_path / "t.json"))
    assert "host_sync" not in _causes(d)
    assert d.window is not None and "compile" in {e.kind for e in d.window.excluded}


@pytest.mark.parametrize(
    "name",
    [
        "OutputGraph.call_user_compiler (dynamo_timed)",
        "_compile.compile_inner (dynamo_timed)",
        "create_aot_dispatcher_function (dynamo_timed)",
        "warmup",
        "compile model",
    ],
)
def test_compile_and_warm_up_ranges_are_start_up_by_their_family(tmp_path: Path, name: str) -> None:
    doc = Doc()
    doc.op("user_annotation", name, 0, 200 * MS)
    after = doc.busy(200 * MS, 5)
    doc.busy(after, 40)
    loaded = load(doc.write(tmp_path / "t.json")).traces[0]
    kinds = {p.kind for p in startup_phases(loaded, host_activity(loaded))}
    assert kinds & {WarmupKind.COMPILE, WarmupKind.FIRST_STEP}


def test_ranges_merely_containing_init_are_not_start_up(tmp_path: Path) -> None:
    doc = Doc()
    doc.op("user_annotation", "init_hidden", 0, 20 * MS)
    doc.busy(20 * MS, 5)
    loaded = load(doc.write(tmp_path / "t.json")).traces[0]
    assert startup_phases(loaded, host_activity(loaded)) == []


# --- 4. one step everywhere ---------------------------------------------------------------------


def test_per_line_markers_are_not_steps(tmp_path: Path) -> None:
    """A range per source line (DLProf/pyprof style) repeats every iteration but holds one launch
    of the ten each iteration makes: not a step."""
    doc = Doc()
    for n in range(5):
        t0 = n * 20 * MS
        doc.op("user_annotation", "model.py:42", t0, 15)
        doc.busy(t0, 10)
    trace = load(doc.write(tmp_path / "t.json")).traces[0]
    assert find_steps(trace).source is None


def test_layers_of_one_forward_are_not_steps(tmp_path: Path) -> None:
    """The same three kernels per layer, 12 layers back to back with launch latency between
    every kernel alike: layers, not iterations; with no steps, nothing is called a step."""
    doc = Doc()
    t = 0.0
    for _layer in range(12):
        for kernel in ("qkv_gemm", "attention", "mlp_gemm"):
            doc.launch(kernel, t, t + 20, 0.5 * MS)
            t += 0.5 * MS + 10
    d = _diagnose(doc, tmp_path)
    assert step_breakdown(device_work(load(tmp_path / "t.json").traces[0], 0)) == []
    assert d.inputs[0].steps == 0 and d.devices[0].steps == []
    assert all(f.cost_usd_per_day is None for f in d.findings)
    for f in d.findings:
        assert f.prediction is None or f.prediction.unit == "window"


def test_the_prediction_starts_from_the_median_step() -> None:
    """The demo: its step table lists 42.66-44.55 ms; the prediction starts from its median."""
    from statistics import median

    import gpuscope

    d = diagnose(load(Path(gpuscope.__file__).parent / "examples" / "demo_train.json.gz"))
    table = median(s.dur_ns for s in d.devices[0].steps)
    for f in d.findings:
        if f.prediction is not None:
            assert f.prediction.step_ns == pytest.approx(table, rel=0.01)


# --- the real traces that show each principle (MANIFEST.md) --------------------------------------


def test_timesformer_is_cpu_preprocessing_at_videomae_with_the_step_41_percent_busy() -> None:
    d = diagnose(load(corpus("kineto/tracelens/h100_timesformer_hf_pipeline.json.gz")))
    assert 100 - d.verdict.idle_pct == pytest.approx(41.4, abs=1.0)
    top = d.findings[0]
    assert top.cause == "cpu_other"
    assert top.locations[0].location.startswith(
        "transformers/models/videomae/image_processing_videomae.py:235"
    )
    assert top.lost_ns == pytest.approx(218e6, rel=0.03)


def test_switch_moe_leaves_its_first_479_ms_out_and_is_compute_bound_on_fp32_gemms() -> None:
    d = diagnose(load(corpus("wild/a100_switch_moe_fp32_coldstart.json")))
    assert d.window is not None
    assert d.verdict.summary.startswith("the first 477")
    assert d.verdict.bound == "compute"
    assert _causes(d)[0] == "fp32_gemm"


def test_vllm_kernels_queued_before_the_capture_are_not_idle_time() -> None:
    """The host issues the step in 26 ms; the kernels start 148 ms after their launch (work from
    before the capture): that wait is left out, and the rest is GPU-bound."""
    d = diagnose(
        load(corpus("kineto/tracelens/mi300x_vllm_prefilldecode_piecewise_graphs.json.gz"))
    )
    assert d.window is not None and "earlier_work" in {e.kind for e in d.window.excluded}
    assert d.verdict.bound == "compute" and d.verdict.idle_pct < 1.0
