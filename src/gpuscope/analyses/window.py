"""Choosing the window to analyse.

Contract: :func:`profiled_window` says what a trace profiled (its steps, else its own span) and
:func:`real_steps` which of its profiler steps are steps; :func:`drop_last_step` returns a new
trace holding a subset of its events (the input is not changed; ``steps`` keep only the steps
inside the new window). Pure.
"""

from __future__ import annotations

import msgspec
import numpy as np
from msgspec.structs import replace

from gpuscope.model import Kind, Step, Trace


def drop_last_step(trace: Trace) -> Trace:
    """HTA's default window: what the host launched before the last profiler step began.

    Keeps host events that start before the last ``ProfilerStep#N`` begins and the device work
    they launched (a kernel launched just before the cut is kept whole). Device work whose launch
    is not in the trace is dropped, as HTA drops it. A trace with fewer than two steps is returned
    as it is. gpuscope's own default is the whole trace: this exists to compare figures with HTA.
    """
    if len({s.name for s in trace.steps}) < 2:
        return trace
    ev = trace.events
    # Steps are annotations, or CPU ops in 2021 traces (category ``Operator``).
    step_marks = np.flatnonzero(ev.of_kind(Kind.ANNOTATION, Kind.GPU_ANNOTATION, Kind.CPU_OP))
    step_ids = {i for i, n in enumerate(trace.names) if "ProfilerStep" in n}
    marks = [int(ev.start_ns[r]) for r in step_marks if int(ev.name_id[r]) in step_ids]
    cut_ns = max(marks)
    on_device = ev.of_kind(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC) & (ev.correlation >= 0)
    host_kept = ~on_device & (ev.start_ns < cut_ns)
    launcher = ev.link
    device_kept = on_device & (launcher >= 0) & host_kept[np.maximum(launcher, 0)]
    rows = np.flatnonzero(host_kept | device_kept)
    events = ev.take(rows)
    steps = [s for s in trace.steps if s.start_ns < cut_ns]
    return replace(
        trace,
        events=events,
        steps=steps,
        warnings=list(trace.warnings),
        metadata=dict(trace.metadata),
    )


# --- the profiled window -----------------------------------------------------------------------

#: A profiler step this much shorter than the median of the others, that launched no device
#: work, is a stub: the profiler's ``step()`` called once more after the loop (Kineto opens a
#: ``ProfilerStep#N`` at every ``step()`` and closes the last one when the trace stops).
STUB_STEP_RATIO = 0.1


class ProfiledWindow(msgspec.Struct, frozen=True):
    """The time the user profiled, on the trace's clock: what every figure is a share of."""

    start_ns: int
    end_ns: int
    source: str  # "profiler steps" or "trace span"

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


def real_steps(trace: Trace) -> list[Step]:
    """The trace's profiler steps without stubs (see :data:`STUB_STEP_RATIO`), by start time.

    Kineto opens a ``ProfilerStep#N`` range at every ``prof.step()``; a loop that calls it once
    more after its last iteration (or a schedule that stops mid-step) leaves a last range of a
    few microseconds that launched nothing. It is not a step: taking it as one makes a step time
    of 0.02 ms, and a prediction from it nonsense."""
    steps = sorted(trace.steps, key=lambda s: s.start_ns)
    if len(steps) < 2:
        return steps
    typical = float(np.median([s.dur_ns for s in steps]))
    if all(s.dur_ns >= STUB_STEP_RATIO * typical for s in steps):
        return steps  # none short enough to be a stub: no launch need be counted
    ev = trace.events
    launches = np.sort(ev.start_ns[(ev.kind == Kind.RUNTIME) & (ev.link >= 0)])
    kept = []
    for s in steps:
        launched = np.searchsorted(launches, s.end_ns) - np.searchsorted(launches, s.start_ns)
        stub = s.dur_ns < STUB_STEP_RATIO * typical and launched == 0
        if not stub:
            kept.append(s)
    return kept or steps


def profiled_window(trace: Trace) -> ProfiledWindow | None:
    """What was profiled: the profiled steps, else the trace's own span. None without events.

    A step is the host's iteration and the device work it launched: it opens when the host
    begins it (the host's preprocessing before its first kernel is part of what each request
    costs) and ends when the later of the host's range and the device work it launched ends (the
    device runs behind the host). Without steps the window is the trace's own span, host events
    included: a profile is what happened between the profiler's start and stop, not just the
    stretch the GPU was busy. Start-up and teardown at either end are found and left out later
    (:mod:`gpuscope.analyses.phases`), with their duration stated: never clipped silently."""
    ev = trace.events
    if len(ev) == 0:
        return None
    steps = real_steps(trace)
    if steps:
        lo, hi = steps[0].start_ns, max(s.end_ns for s in steps)
        device = ev.of_kind(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET) & (ev.dur_ns > 0)
        launcher = ev.link
        linked = device & (launcher >= 0)
        at = ev.start_ns[np.maximum(launcher, 0)]
        mine = linked & (at >= lo) & (at < hi)
        unlinked = device & (launcher < 0) & (ev.start_ns >= lo) & (ev.start_ns < hi)
        ends = ev.end_ns[mine | unlinked]
        if ends.size:
            hi = max(hi, int(ends.max()))
        return ProfiledWindow(int(lo), int(hi), "profiler steps")
    counted = ~ev.of_kind(Kind.GPU_ANNOTATION, Kind.SYNC)
    if not counted.any():
        return None
    return ProfiledWindow(
        int(ev.start_ns[counted].min()), int(ev.end_ns[counted].max()), "trace span"
    )
