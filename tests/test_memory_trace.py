"""Kineto ``[memory]`` events: read on both reader paths, and diagnosed with the trace (the
corpus MANIFEST's memory answers)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest

from corpus import corpus
from gpuscope.analyses.memory import MemoryReport
from gpuscope.diagnosis import Diagnosis, Options, diagnose
from gpuscope.model import MemoryAction
from gpuscope.readers import _scan, load

GB = 1e9


def _memory(relative: str) -> tuple[Diagnosis, MemoryReport]:
    d = diagnose(load(corpus(relative)))
    (m,) = d.memory
    return d, m


def _event(ts: float, size: int, allocated: int, *, device_type: int = 1) -> dict[str, Any]:
    return {
        "ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 1,
        "ts": ts,
        "args": {"Total Reserved": 4 << 30, "Total Allocated": allocated, "Bytes": size,
                 "Addr": 1 << 40, "Device Id": 0,
                 "Device Type": device_type, "Ev Idx": int(ts)},
    }  # fmt: skip


def _trace(tmp_path: Path) -> Path:
    """A forward op allocating 1 GiB then freeing it, with a kernel to diagnose."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::bmm", "pid": 1, "tid": 1, "ts": 10,
         "dur": 20, "args": {"External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 12, "dur": 2, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 15, "dur": 30,
         "args": {"device": 0, "stream": 7, "correlation": 7}},
        _event(11.5, 1 << 30, (1 << 30) + (1 << 20)),
        _event(40, -(1 << 30), 1 << 20),
        _event(41, 4096, 4096, device_type=0),  # the CPU's: not the GPU's memory
    ]  # fmt: skip
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return path


@pytest.mark.parametrize("scanner", [True, False])
def test_memory_events_are_read_on_both_paths(
    tmp_path: Path, scanner: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not scanner:
        monkeypatch.setattr(_scan, "_kscan", None)
    trace = load(_trace(tmp_path)).traces[0]
    m = trace.memory
    assert m is not None and len(m) == 2
    assert m.action.tolist() == [MemoryAction.ALLOC, MemoryAction.FREE_COMPLETED]
    assert m.size_bytes.tolist() == [1 << 30, 1 << 30]
    assert m.time_ns.tolist() == [11_500, 40_000]
    assert m.allocated_bytes.tolist() == [(1 << 30) + (1 << 20), 1 << 20]
    (r,) = diagnose(load(_trace(tmp_path))).memory
    assert r.peak_allocated_bytes == (1 << 30) + (1 << 20)
    assert r.baseline_bytes == 1 << 20  # the first event's total less its own size
    assert r.sites[0].location == "aten::bmm" and r.sites[0].bytes == 1 << 30


def test_both_reader_paths_read_the_same_memory_events(monkeypatch: pytest.MonkeyPatch) -> None:
    path = corpus("kineto/tracelens/mi300x_timesformer_hf_pipeline.json.gz")
    fast = load(path).traces[0].memory
    monkeypatch.setattr(_scan, "_kscan", None)
    slow = load(path).traces[0].memory
    assert fast is not None and slow is not None
    for name in fast.__struct_fields__:
        assert np.array_equal(getattr(fast, name), getattr(slow, name)), name


def test_timesformer_h100_peaks_on_attention_scores() -> None:
    d, m = _memory("kineto/tracelens/h100_timesformer_hf_pipeline.json.gz")
    assert round(m.peak_allocated_bytes / GB, 2) == 4.49
    assert round(m.peak_reserved_bytes / GB, 2) == 4.59
    top = m.sites[0]
    assert top.location == "modeling_timesformer.py:200" and top.bytes >= 1.89 * GB
    assert top.operator in ("aten::bmm", "aten::mul", "aten::_softmax", "aten::softmax")
    assert "attention_scores" in [f.cause for f in d.findings]


def test_timesformer_mi300x_peak_and_reserved() -> None:
    d, m = _memory("kineto/tracelens/mi300x_timesformer_hf_pipeline.json.gz")
    assert round(m.peak_allocated_bytes / GB, 2) == 4.59
    assert round(m.peak_reserved_bytes / GB, 2) == 6.67
    assert m.sites[0].location == "modeling_timesformer.py:200"
    assert "attention_scores" in [f.cause for f in d.findings]


@pytest.mark.parametrize(
    ("name", "peak", "reserved"),
    [
        ("h100_owlv2_detection_pipeline", 2.71, 3.60),
        ("mi300x_owlv2_detection_pipeline", 2.81, 2.97),
    ],
)
def test_owlv2_peaks_at_the_attention_probabilities(
    name: str, peak: float, reserved: float
) -> None:
    _, m = _memory(f"kineto/tracelens/{name}.json.gz")
    assert round(m.peak_allocated_bytes / GB, 2) == peak
    assert round(m.peak_reserved_bytes / GB, 2) == reserved
    assert m.sites[0].location == "modeling_owlv2.py:410"
    assert m.sites[0].bytes >= 0.86 * GB


def test_falconsai_peaks_are_small_and_mi300x_is_a_gemm_workspace() -> None:
    _, h100 = _memory("kineto/tracelens/h100_falconsai_vit_classification.json.gz")
    assert round(h100.peak_allocated_bytes / GB, 2) == 0.23
    _, mi300x = _memory("kineto/tracelens/mi300x_falconsai_vit_classification.json.gz")
    assert round(mi300x.peak_allocated_bytes / GB, 2) == 0.27
    workspace = next(s for s in mi300x.sites if s.operator == "aten::empty")
    assert 76 <= workspace.bytes / (1 << 20) < 90  # the 76 MiB workspace (and a small block)


def test_switch_moe_inference_keeps_its_activations() -> None:
    d, m = _memory("wild/a100_switch_moe_fp32_coldstart.json")
    assert 2.1 * GB < m.baseline_bytes < 2.4 * GB
    assert m.peak_allocated_bytes > 22 * GB
    assert not m.backward_recorded
    assert m.kept_activation_bytes > 15 * GB
    finding = next(f for f in d.findings if f.cause == "inference_keeps_activations")
    assert finding.memory_bytes is not None and finding.memory_bytes > 15 * GB
    assert finding.predicted_peak_bytes is not None
    assert finding.predicted_peak_bytes < m.peak_allocated_bytes / 2


def test_df_index_resolver_memory_events() -> None:
    d, m = _memory("kineto/hta/df_index_resolver/df_index_resolver.json.gz")
    assert m.device == 1 and m.events == 26_770
    assert round(m.peak_allocated_bytes / GB, 2) == 6.63
    assert round(m.peak_reserved_bytes / GB, 2) == 12.78
    # No pieces are known from a trace's totals: no fragmentation finding on their word alone.
    assert "allocator_fragmentation" not in [f.cause for f in d.findings]
    # A terminal-only run (charts=False) leaves out only what the drawing reports read.
    terminal = diagnose(load(corpus("kineto/hta/df_index_resolver/df_index_resolver.json.gz")),
                        Options(charts=False))  # fmt: skip
    (t,) = terminal.memory
    assert len(m.timeline) > 100 and t.timeline == []
    assert msgspec.structs.replace(t, timeline=m.timeline) == m
    views, terminal_views = d.devices[0].views, terminal.devices[0].views
    assert views is not None and terminal_views is not None
    assert views.location_rows and terminal_views.location_rows == {}
    assert msgspec.structs.replace(terminal_views, location_rows=views.location_rows) == views
    assert terminal.drawn is None and d.drawn is not None
    series, terminal_series = d.devices[0].series, terminal.devices[0].series
    assert series.roofline_kernels and terminal_series.roofline_kernels == []
    assert terminal_series.states_ns == series.states_ns
    assert terminal_series.step_causes == series.step_causes
    assert terminal.findings == d.findings and terminal.verdict == d.verdict


def test_nsys_cuda_memory_usage_events_are_reserved_memory(tmp_path: Path) -> None:
    """cudaMalloc / cudaFree of device memory (nsys --cuda-memory-usage=true); pinned host
    memory is not the GPU's."""
    from test_nsys import Export

    gib = 1 << 30
    export = Export(tmp_path / "m.sqlite")
    export.enums()
    export.kernel(pid=5, start=1_000, end=50_000, correlation=3)
    for corr, start in ((1, 100), (2, 300), (3, 900)):
        name = "cudaLaunchKernel" if corr == 3 else "cudaMalloc"
        export.runtime(pid=5, tid=7, start=start, end=start + 50, name=name, corr=corr)
    rows = [
        (120, 1 << 40, gib, 3, 0, 1),
        (320, (1 << 40) + gib, gib // 2, 3, 0, 2),
        (330, 1 << 44, 4096, 2, 0, 2),  # pinned host memory: left out
        (60_000, 1 << 40, gib, 3, 1, -1),
    ]
    export.add(
        "CUDA_GPU_MEMORY_USAGE_EVENTS",
        [
            {
                "start": start,
                "globalPid": export.gpid(5),
                "deviceId": 0,
                "contextId": 1,
                "address": address,
                "pc": 0,
                "bytes": size,
                "memKind": kind,
                "memoryOperationType": operation,
                "name": None,
                "correlationId": corr,
            }
            for start, address, size, kind, operation, corr in rows
        ],
    )
    trace = load(export.close()).traces[0]
    m = trace.memory
    assert m is not None and len(m) == 3
    assert m.reserved_bytes.tolist() == [gib, gib + gib // 2, gib // 2]
    assert m.tid.tolist()[:2] == [7, 7]
    (r,) = diagnose(load(tmp_path / "m.sqlite")).memory
    assert r.peak_allocated_bytes == gib + gib // 2 and r.baseline_bytes == 0


def test_a_memory_event_beyond_64_bits_is_left_out_by_both_readers(tmp_path: Path) -> None:
    """An address past 64 bits is no allocator's: the scanner hands such an event to the Python
    reader, which left it to numpy's int64 cast (a traceback). Both now leave it out."""
    from gpuscope.readers import kineto
    from gpuscope.readers._load import load as load_one

    memory = {"Device Type": 1, "Device Id": 0, "Bytes": 512, "Total Allocated": 512}
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 5, "dur": 2, "args": {"correlation": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5,
         "args": {"device": 0, "stream": 7, "correlation": 1}},
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 6, "s": "t",
         "args": {**memory, "Addr": 2**70, "Total Reserved": 2048}},
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 7, "s": "t",
         "args": {**memory, "Addr": 4096, "Total Reserved": 2048}},
    ]  # fmt: skip
    path = tmp_path / "big_address.json"
    path.write_text(json.dumps({"traceEvents": events}))
    for trace in (kineto.read(path, path.read_bytes()), load_one(path).traces[0]):
        kept = trace.memory
        assert kept is not None and kept.address.tolist() == [4096]
