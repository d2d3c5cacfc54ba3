"""Predictions that real pairs confirm (issue 28, class 5): each replay principle on a trace built
here with a known answer, and on the corpus pairs where one part of a trace is another with one
fix applied (``benchmarks/whatif.py`` reports the same pairs beside its generated runs).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from corpus import corpus
from gpuscope import diagnose, load
from gpuscope.analyses.whatif import build_graph, step_times
from gpuscope.testing import generator as gen
from gpuscope.testing.config import AllocatorChurn, GeneratorConfig

ROOT = Path(__file__).resolve().parents[1]

# --- a pageable copy's call stages it -------------------------------------------------------------

_DEVICE = {"device": 0, "stream": 7}


def _pageable_steps(dma_after_return_us: float) -> dict[str, Any]:
    """Four steps, each a 20 MiB pageable host-to-device copy (its call lasts as long as the
    copy: the driver stages it), four 250 µs GEMMs and a sync. The DMA of the last chunk ends
    ``dma_after_return_us`` after the call returns."""
    events: list[dict[str, Any]] = []
    t, corr = 0.0, 0
    for step in range(4):
        begin = t
        corr += 1
        events += [
            {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "pid": 1, "tid": 1, "ts": t + 5,
             "dur": 3620, "args": {"External id": corr}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1,
             "ts": t + 10, "dur": 3600, "args": {"correlation": corr}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0,
             "tid": 7, "ts": t + 150, "dur": 3460 + dma_after_return_us,
             "args": {"correlation": corr, "bytes": 20 * 2**20, **_DEVICE}},
        ]  # fmt: skip
        t += 3640
        for k in range(4):
            corr += 1
            events += [
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                 "tid": 1, "ts": t + 8 * k, "dur": 5, "args": {"correlation": corr}},
                {"ph": "X", "cat": "kernel", "name": "ampere_bf16_s16816gemm_bf16_128x128_tn",
                 "pid": 0, "tid": 7, "ts": t + 32 + 250 * k, "dur": 250,
                 "args": {"correlation": corr, **_DEVICE}},
            ]  # fmt: skip
        corr += 1
        events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1,
             "tid": 1, "ts": t + 34, "dur": 1000, "args": {"correlation": corr}}
        )  # fmt: skip
        t += 1040
        events.append(
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1,
             "tid": 1, "ts": begin, "dur": t - begin}
        )  # fmt: skip
    return {
        "traceEvents": events,
        "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "numSms": 108}],
    }


@pytest.mark.parametrize("dma_after_return_us", [0.0, 10.0])
def test_a_pageable_copy_is_replayed_pinned_whether_or_not_its_call_waited(
    tmp_path: Path, dma_after_return_us: float
) -> None:
    """The driver stages a pageable copy through a pinned buffer, chunk by chunk: the call lasts
    as long as the copy, and returns when the last chunk is staged, a little before its DMA ends.
    Pinned, the call returns at once and the copy runs at the host link's rate (no pinned copy
    in the trace says what the link gives, so the A100's PCIe 4 x16 from the facts table: 32 GB/s
    a direction at 80%, 0.82 ms for 20 MiB). Step: 4.64 ms; the copy 3.46 -> 0.82 ms and no
    longer holds the host: about 1.85 to 2.0 ms."""
    path = tmp_path / "pageable.json"
    path.write_text(json.dumps(_pageable_steps(dma_after_return_us)))
    d = diagnose(load(path))
    f = next(f for f in d.findings if f.cause == "h2d_copy")
    assert f.prediction is not None
    assert f.prediction.step_ns == pytest.approx(4.64e6, rel=0.01)
    assert 1.8e6 <= f.prediction.predicted_step_ns <= 2.05e6, f.prediction


# --- an allocator that calls the driver on every free ---------------------------------------------


def _measured_step_ns(path: Path) -> float:
    per = [step_times(g, g.start, g.end) for g in (build_graph(t) for t in load(path).traces)]
    return float(np.mean([p.mean() for p in per if p.size]))


def test_an_allocator_that_frees_to_the_driver_is_replayed_as_the_caching_allocator(
    tmp_path: Path,
) -> None:
    """Caching off (every free a ``cudaFree``, which synchronises the device, every allocation a
    ``cudaMalloc``): the replay serves them from the cache, and the step it predicts is the one
    the same run measures with the caching allocator."""
    config = GeneratorConfig(
        seed=1, steps=4, inject=(AllocatorChurn(count=60, free_us=300.0, malloc_us=100.0),)
    )
    before = gen.generate(config).write(tmp_path / "before.json")
    after = gen.generate(gen.apply_fix(config, "allocator")).write(tmp_path / "after.json")
    d = diagnose(load(before))
    f = next(f for f in d.findings if f.cause == "allocator")
    assert f.prediction is not None and f.prediction.faster_pct > 30
    assert f.prediction.predicted_step_ns == pytest.approx(_measured_step_ns(after), rel=0.05)


# --- real pairs -----------------------------------------------------------------------------------


def _whatif() -> ModuleType:
    spec = importlib.util.spec_from_file_location("whatif", ROOT / "benchmarks" / "whatif.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_real_pairs_are_predicted_within_a_quarter() -> None:
    """The eager half that launches 36 tiny kernels one by one against the same work launched
    back to back; 4,096 ``.cpu()`` calls against the same sum kept on the GPU."""
    whatif = _whatif()
    for relative, *_ in whatif.REAL_PAIRS:
        corpus(relative)  # present (or skipped / failed as the corpus helper says)
    rows = {r["cause"]: r for r in whatif.real_pairs()}
    assert rows["launch_overhead"]["fixed_part_ms"] == pytest.approx(0.191, abs=0.001)
    assert rows["host_sync"]["fixed_part_ms"] == pytest.approx(85.776, abs=0.01)
    for r in rows.values():
        assert r["error_pct"] is not None and abs(r["error_pct"]) <= 25, r
