"""Step finders: profiler steps, else a repeated user range, else a repeating kernel sequence; and
each step timed on the device."""

from __future__ import annotations

import statistics
from pathlib import Path

from gpuscope.analyses.timeline import PROFILER_STEPS, device_work, find_steps, step_breakdown
from gpuscope.model import Trace
from gpuscope.readers import kineto
from gpuscope.testing import generator as g

SMALL = {"layers": 1, "hidden": 512, "seq_len": 256}


def _trace(drop: str | None = None, rename: bool = False) -> Trace:
    """A generated 6-step loop; ``drop`` removes events of that category, ``rename`` turns the
    ProfilerStep ranges into plain ``record_function`` ranges."""
    generated = g.generate(g.GeneratorConfig(seed=5, steps=6, **SMALL))
    document = generated.document
    events = []
    for event in document["traceEvents"]:
        if drop is not None and event.get("cat") == drop:
            continue
        name = event.get("name")
        if rename and isinstance(name, str) and name.startswith("ProfilerStep#"):
            name = name.replace("ProfilerStep#", "train_iter ")
        events.append({**event, "name": name} if "name" in event else event)
    edited = g.GeneratedTrace({**document, "traceEvents": events}, generated.truth)
    return kineto.read(Path("x.json"), edited.to_bytes())


def _durations(trace: Trace) -> tuple[str, list[int]]:
    steps = step_breakdown(device_work(trace, trace.device_ids[0]))
    assert steps, "no steps found"
    assert all(s.timed_on == "device" for s in steps)
    return steps[0].source, [s.dur_ns for s in steps[1:]]


def test_the_three_finders_agree_on_the_step_time() -> None:
    source, profiler = _durations(_trace())
    assert source == PROFILER_STEPS and len(profiler) == 5
    ranges = _trace(rename=True)
    assert find_steps(ranges).source == "repeated record_function range 'train_iter N'"
    source, by_range = _durations(ranges)
    assert len(by_range) == 5
    source, by_kernels = _durations(_trace(drop="user_annotation"))
    assert source.startswith("repeating kernel sequence")
    assert len(by_kernels) >= 4
    truth = statistics.median(profiler)
    for found in (by_range, by_kernels):
        assert abs(statistics.median(found) / truth - 1) < 0.02
