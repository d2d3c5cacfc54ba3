"""Real files captured on an H200 with a planted cause (tests/data/h200/README.md says how)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscope import diagnose, load
from gpuscope.analyses.whatif import Prediction

DATA = Path(__file__).parent / "data" / "h200"


def test_the_item_sync_every_step_is_found_at_its_function() -> None:
    d = diagnose(load(DATA / "sync_train.json.gz"))
    causes = {f.cause: f for f in d.findings}
    sync = causes["host_sync"]
    assert sync.locations and sync.locations[0].location == "gpu_capture.py:28 (_train_step)"
    assert {"launch_overhead", "fp32_gemm"} <= set(causes)
    device = d.devices[0]
    assert device.facts is not None and "H200" in device.facts.display_name
    assert d.memory and d.memory[0].peak_allocated_bytes > 300 * 2**20


def test_the_oom_snapshot_names_the_request_and_the_line_that_filled_the_device() -> None:
    d = diagnose(load(DATA / "oom_snapshot.pickle.gz"))
    memory = d.memory[0]
    assert memory.oom is not None and memory.oom.request_bytes == 16 * 2**30
    assert memory.oom.device_free_bytes == 11801853952  # 10.99 GiB, as the OOM message said
    top = memory.sites[0]
    assert top.location == "gpu_capture.py:92" and top.bytes == 128 * 2**30 and top.blocks == 8
    # A torch.empty loop in the user's code: its own tensors, not a forward's activations, so
    # no inference_mode advice (its frames: THPVariable_empty called from gpu_capture.py:92).
    assert top.category == "user tensors" and top.confidence == "high"
    assert memory.categories["activations"] == 0
    assert memory.oom.verdict == "user_tensors" and memory.peak_phase == "unknown"
    assert not any(f.cause == "inference_keeps_activations" for f in d.findings)


def test_ncu_on_the_h200_calls_the_gemm_compute_bound_and_the_elementwise_memory_bound() -> None:
    """ncu 2025.3 on the H200: the bf16 GEMM's busiest memory unit (95%, its tiles through
    shared memory) is above its SM throughput (93%) while DRAM is at 21%: compute-bound, not
    DRAM-bound; `x * 2.0 + 1.0` moves DRAM at 88%: memory-bound; randn's Philox kernels compute."""
    d = diagnose(load(DATA / "gemm_elementwise.ncu.csv"))
    stats = d.counters[0].stats
    limiter = {
        s.name.split("(")[0].split("<")[0].strip(): s.limiter.value for s in stats if s.limiter
    }
    gemm = next(s for s in stats if s.name.startswith("nvjet"))
    assert gemm.limiter is not None and gemm.limiter.value == "compute", limiter
    elementwise = [s for s in stats if "vectorized_elementwise" in s.name]
    assert elementwise and all(
        s.limiter is not None and s.limiter.value == "memory" for s in elementwise
    )
    rng = [s for s in stats if "distribution" in s.name]
    assert rng and all(s.limiter is not None and s.limiter.value == "compute" for s in rng)


# --- the GPU loop's runs: one pathology left in, against every fix on ----------------------------

LOOP = Path(__file__).resolve().parent / "data" / "h200" / "loop"


def _prediction(name: str, cause: str) -> Prediction:
    finding = next(f for f in diagnose(load(LOOP / name)).findings if f.cause == cause)
    assert finding.prediction is not None
    return finding.prediction


def test_the_h200_runs_confirm_the_loader_and_tf32_predictions() -> None:
    """The replay's saving against the saving measured on the same H200 with the fix applied
    (median steps; the fixed run: 4.61 ms). TF32 was predicted 4.5 of 11.8 ms before FFMA
    GEMMs counted as FP32 and the backward thread was woken by the forward's end."""
    fixed = _prediction("fix-all.json.gz", "launch_overhead").step_ns
    assert fixed == pytest.approx(4.61e6, rel=0.01)
    for name, cause in (
        ("only-data_loader.json.gz", "data_loader"),
        ("only-fp32_gemm.json.gz", "fp32_gemm"),
    ):
        p = _prediction(name, cause)
        measured = p.step_ns - fixed
        assert p.saving_ns_per_step == pytest.approx(measured, rel=0.1), (cause, p)


def test_the_h200_pageable_copies_are_replayed_at_the_link_rate() -> None:
    """Two 32 MB pageable copies of ~7 ms a step, pinned at the link's rate, no longer holding the
    host: about 13 ms of the 29.5 ms measured (the rest is host time no copy replay sees; it was
    predicted 0.3 ms when the backward thread stayed pinned to its recorded start)."""
    p = _prediction("only-h2d_copy.json.gz", "h2d_copy")
    assert 11e6 <= p.saving_ns_per_step <= 15e6, p


def test_a_prediction_is_not_checked_against_a_run_that_changed_other_causes() -> None:
    """The pageable-copy run against the run with every fix on: host_sync's finding is gone,
    but so are most of the copies', the loader's and the CPU's waits. host_sync's replay (its
    fix alone: 0.01 ms a step) says nothing about a run 31 ms a step faster for other reasons,
    so the diff names those causes beside its error of +675%."""
    from gpuscope.compare.diff import diff, summarize
    from gpuscope.render.diff import prediction_line

    before, after = (diagnose(load(LOOP / n)) for n in ("only-h2d_copy.json.gz", "fix-all.json.gz"))
    checks = {c.cause: c for c in diff(summarize(before), summarize(after)).predictions}
    check = checks["host_sync"]
    assert not check.comparable
    assert {"h2d_copy", "cpu_other"} <= set(check.also_changed)
    assert "host_sync" not in check.also_changed
    line = prediction_line(check)
    assert "measured after: 4.55 ms" in line
    assert "after also changed h2d_copy, launch_overhead and cpu_other beyond noise" in line
