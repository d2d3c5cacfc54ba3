"""Start-up phases and the steady state: real traces with known answers (MANIFEST.md, ``wild/``)
and the rules' edges on traces built in the test."""

from __future__ import annotations

import tempfile
from functools import cache
from pathlib import Path

import pytest
from msgspec.structs import replace

from corpus import corpus
from gpuscope.analyses.host import host_activity
from gpuscope.analyses.phases import WarmupKind, _first_step, startup_phases
from gpuscope.diagnosis import Diagnosis, Options, diagnose
from gpuscope.diagnosis.findings import Finding, worth_pct
from gpuscope.readers import load
from gpuscope.testing import generator as g

CUDAGRAPH = "wild/a100_cudagraph_capture_replay.json.gz"
PARTICLE = "wild/a100pcie_particle_transformer_first_iter.json"


@cache
def _diagnosis(relative: str, whole: bool = False) -> Diagnosis:
    return diagnose(load(corpus(relative)), Options(whole=whole))


def _startup(d: Diagnosis) -> Finding:
    """The start-up finding: after every finding whose fix saves step time (it saves none: it is
    paid once per process), never at the head of the list (docs/verdicts.md)."""
    found = [f for f in d.findings if f.cause == "warmup"]
    assert len(found) == 1
    at = d.findings.index(found[0])
    assert all(worth_pct(f) == 0.0 for f in d.findings[at:])
    return found[0]


def _kinds(d: Diagnosis) -> list[str]:
    assert d.window is not None
    return [e.kind for e in d.window.excluded]


def test_cudagraph_start_up_is_context_creation_and_the_replays_are_the_steady_state() -> None:
    d = _diagnosis(CUDAGRAPH)
    top = _startup(d)
    assert (top.pattern, top.cause) == ("startup", "warmup")
    assert "CUDA context creation" in top.title
    # The trace's own span starts 2.18 s before the first kernel, inside the first
    # torch.zeros (a 2.17 s cudaStreamIsCapturing: the context created lazily); then the two
    # cudaFree calls inside the first aten::mm (1.3 s): 3.47 s of the 3.55 s left out.
    assert top.evidence[1].startswith("context_init: 3,4")
    assert top.cost_usd_per_day is None
    assert {"context_init", "graph_capture"} <= set(_kinds(d))
    assert d.verdict.summary.startswith("the first 3.5")
    assert "left out; steady state:" in d.verdict.summary
    # The 20 replays: ~25 ms, busy about half of it (MANIFEST: ~58%).
    (device,) = d.devices
    assert 20e6 <= device.temporal.span_ns <= 35e6
    assert 30.0 <= d.verdict.idle_pct <= 60.0
    assert all(f.cause not in ("allocator", "unknown") for f in d.findings[:1])


def test_particle_transformer_names_module_loading_and_compilation() -> None:
    d = _diagnosis(PARTICLE)
    assert {"module_load", "compile"} <= set(_kinds(d))
    top = _startup(d)
    assert top.cause == "warmup"
    assert "lazy module loading" in top.title and "compilation" in top.title
    lines = "\n".join(top.evidence)
    assert "module_load: 1,337" in lines  # the first cudnn convolution's launch
    assert "compile: 36" in lines  # TorchScript's silent compile before delta_r2
    assert "delta_r2" in lines
    assert all(f.cause not in ("allocator", "unknown") for f in d.findings)


@pytest.mark.parametrize(
    ("relative", "expected"),
    [
        ("wild/a100_fusion_eager_vs_pt2.json.gz", ["launch_overhead"]),
        ("wild/a100_d2h_sync_cpu_loop.json.gz", ["host_sync", "launch_overhead"]),
    ],
)
def test_traces_without_start_up_keep_their_answers(relative: str, expected: list[str]) -> None:
    d = _diagnosis(relative)
    assert d.window is None
    assert [f.cause for f in d.findings[: len(expected)]] == expected


def test_whole_analyses_everything_and_says_start_up_is_included() -> None:
    d = _diagnosis(CUDAGRAPH, whole=True)
    assert d.window is None
    assert _startup(d).cost_usd_per_day is None
    assert d.verdict.summary.startswith("whole trace, start-up included")
    (device,) = d.devices
    warm = next(c for c in device.idle.causes if c.cause == "warmup")
    assert warm.kinds[0].kind.value == "context_init"
    assert warm.kinds[0].location == "cudagraph_mwe.py:6 (do_work)"
    assert device.idle.lost_ns(warm.cause) > 1_300_000_000


def test_json_states_the_window() -> None:
    from gpuscope.render.json import to_document

    doc = to_document(_diagnosis(CUDAGRAPH))
    window = doc["window"]
    assert window["start_ns"] < window["end_ns"]
    # Start-up before the window, teardown (if any) after it.
    assert all(
        e["start_ns"] < window["start_ns"] or e["start_ns"] >= window["end_ns"]
        for e in window["excluded"]
    )
    assert {e["kind"] for e in window["excluded"]} >= {"context_init", "graph_capture"}
    assert to_document(_diagnosis(CUDAGRAPH, whole=True))["window"] is None


# --- generated traces: start-up of each kind before steady steps with a known cause -------------


@cache
def _generated(kind: str, whole: bool = False) -> tuple[Diagnosis, g.Truth]:
    config = g.GeneratorConfig(seed=3, steps=4, inject=(g.Startup(kind=kind), g.HostSync()))
    trace = g.generate(config)
    with tempfile.TemporaryDirectory() as tmp:
        path = trace.write(Path(tmp) / "t.json.gz")
        return diagnose(load(path), Options(whole=whole)), trace.truth


@pytest.mark.parametrize("kind", g.STARTUP_KINDS)
def test_generated_start_up_is_left_out_and_the_steady_answer_stays(kind: str) -> None:
    d, truth = _generated(kind)
    assert _kinds(d) and set(_kinds(d)) == {kind}
    top = _startup(d)
    assert (top.pattern, top.cause) == ("startup", "warmup")
    assert top.locations[0].location == "train.py:44 (warmup)"
    assert abs(top.lost_ns - truth.lost_ns_by_cause["warmup"]) <= 0.01 * top.lost_ns
    assert d.findings[0].cause == "host_sync"
    assert d.window is not None and d.window.start_ns <= truth.gaps[-1].start_ns
    assert len(d.devices[0].steps) == 4  # every step is in the steady state


@pytest.mark.parametrize("kind", g.STARTUP_KINDS)
def test_generated_start_up_with_whole_is_warmup_idle_time(kind: str) -> None:
    d, truth = _generated(kind, whole=True)
    (device,) = d.devices
    warm = next(c for c in device.idle.causes if c.cause == "warmup")
    assert [k.kind.value for k in warm.kinds] == [kind]
    assert abs(warm.lost_ns - truth.lost_ns_by_cause["warmup"]) <= 0.01 * warm.lost_ns
    assert _startup(d).cost_usd_per_day is None


def test_a_slow_first_step_is_start_up_and_equal_steps_are_not() -> None:
    trace = g.generate(g.GeneratorConfig(seed=0, steps=5))
    with tempfile.TemporaryDirectory() as tmp:
        loaded = load(trace.write(Path(tmp) / "t.json.gz")).traces[0]
    assert _first_step(loaded) == []
    first = loaded.steps[0]
    slow = [replace(first, start_ns=first.start_ns - 50_000_000), *loaded.steps[1:]]
    (phase,) = _first_step(replace(loaded, steps=slow))
    assert phase.kind is WarmupKind.FIRST_STEP and phase.end_ns == first.end_ns


def test_a_cuda_free_waiting_for_queued_work_is_not_context_creation() -> None:
    """cudaFree synchronises: a long one while the device drains is the allocator's."""
    config = g.GeneratorConfig(seed=0, steps=3, inject=(g.AllocatorChurn(count=6),))
    with tempfile.TemporaryDirectory() as tmp:
        job = load(g.generate(config).write(Path(tmp) / "t.json.gz"))
    trace = job.traces[0]
    assert startup_phases(trace, host_activity(trace)) == []
