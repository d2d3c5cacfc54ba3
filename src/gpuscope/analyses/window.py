"""Choosing the window to analyse.

Contract: functions here take a :class:`~gpuscope.model.Trace` and return a new one holding a subset
of its events (the input is not changed); ``steps`` keep only the steps inside the new window.
"""

from __future__ import annotations

import numpy as np
from msgspec.structs import replace

from gpuscope.model import Kind, Trace


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
