"""Why the device was idle: every idle gap attributed to one cause, with the code that caused it.

Contract: :func:`attribute_idle` takes the :class:`~gpuscope.analyses.timeline.DeviceWork` of one
device and the trace's :class:`~gpuscope.analyses.host.HostIndex`, and returns the idle time of
the device's span cut into segments, each with exactly one :class:`Cause`, so that the causes
partition the idle time. A gap is one segment unless the host did two different blocking things
during it (a sync, then the data loader): then each part gets its own cause.

How idle time is explained, looking at the host thread that launched the work ending the gap:

1. a blocking host activity claims the idle time it overlaps, in this order: checkpoint, data
   loader, collective wait, allocator call, host-to-device copy the host waits for, sync;
2. in what is left, a synchronisation (or ``cudaFree``) that returned just as it began: the host
   emptied the queue and then spent the time on its own work before launching again;
3. else the work after the gap had been launched before the gap began: the device waited on a
   dependency (a peer's collective when that work is communication; a bubble under 50 µs between
   queued kernels is launch latency; anything longer is unknown);
4. else a short gap (launch latency territory): the host could not launch fast enough;
5. else a CPU op that launches no device work covers the gap (an optimizer step on the CPU, host
   preprocessing): ``cpu_other``; Python and framework code on its way to the next launch is
   launch overhead, unless it runs for over a millisecond (then ``cpu_other``);
6. else ``unknown``: nothing in the trace explains it, and it is reported as such.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np
from numpy.typing import NDArray

from gpuscope.analyses.host import HostActivity, HostIndex
from gpuscope.analyses.intervals import Intervals, covered_ns, difference, gaps, intersection
from gpuscope.analyses.timeline import DeviceWork, WorkClass
from gpuscope.model import Kind

#: Gaps up to this long with nothing blocking the host are launch overhead.
SHORT_GAP_NS = 50_000
#: How far a synchronisation's return may be from the moment the device drained.
SYNC_BEFORE_NS = 10_000
SYNC_AFTER_NS = 100_000
#: A launch this long before the gap began means the work was queued, not late.
QUEUED_NS = 10_000
#: Host code running longer than this between launches is the host's own work, not overhead.
LONG_HOST_GAP_NS = 1_000_000
#: How many of the costliest host events per cause are resolved to code locations.
LOCATIONS_RESOLVED = 256


class Cause(str, Enum):
    HOST_SYNC = "host_sync"
    DATA_LOADER = "data_loader"
    H2D_COPY = "h2d_copy"
    LAUNCH_OVERHEAD = "launch_overhead"
    ALLOCATOR = "allocator"
    COMMUNICATION_WAIT = "communication_wait"
    CHECKPOINT = "checkpoint"
    CPU_OTHER = "cpu_other"
    UNKNOWN = "unknown"


CAUSES = list(Cause)
_CODE = {c: i for i, c in enumerate(CAUSES)}
_BLOCKING = (
    (HostActivity.CHECKPOINT, Cause.CHECKPOINT),
    (HostActivity.DATA_LOADER, Cause.DATA_LOADER),
    (HostActivity.COMM_WAIT, Cause.COMMUNICATION_WAIT),
    (HostActivity.ALLOCATOR, Cause.ALLOCATOR),
    (HostActivity.H2D_COPY, Cause.H2D_COPY),
    (HostActivity.HOST_SYNC, Cause.HOST_SYNC),
)


@dataclass(frozen=True)
class LocationStat:
    location: str
    lost_ns: int
    gaps: int


@dataclass(frozen=True)
class CauseStat:
    cause: Cause
    lost_ns: int
    gaps: int
    share_pct: float  # of the device's span
    locations: list[LocationStat]  # costliest first


@dataclass(frozen=True)
class IdleGaps:
    """Every idle gap of one device, in time order, with its cause and deciding host event."""

    start_ns: NDArray[np.int64]
    end_ns: NDArray[np.int64]
    cause: NDArray[np.uint8]  # index into CAUSES
    decider: NDArray[np.int64]  # host event row that decided the cause, -1 when none
    location: list[str | None]  # resolved for the costliest deciders only


@dataclass(frozen=True)
class IdleAttribution:
    span_ns: int
    idle_ns: int
    gaps: IdleGaps
    causes: list[CauseStat]  # every cause with time lost, costliest first

    def lost_ns(self, cause: Cause) -> int:
        return next((c.lost_ns for c in self.causes if c.cause is cause), 0)


def attribute_idle(work: DeviceWork, host: HostIndex) -> IdleAttribution:
    ev = work.trace.events
    idle = gaps(work.busy, work.span_start_ns, work.span_end_ns)
    g0, g1 = idle.start_ns, idle.end_ns
    parts: list[_Segments] = []
    if g0.size:
        # The device work that ends each gap, and the host thread that launched it.
        starts = ev.start_ns[work.rows]
        after = work.rows[np.minimum(np.searchsorted(starts, g1, side="left"), starts.size - 1)]
        launcher = ev.link[after]
        main_pid, main_tid = host.main_thread
        pid = np.where(launcher >= 0, ev.pid[np.maximum(launcher, 0)], main_pid)
        tid = np.where(launcher >= 0, ev.tid[np.maximum(launcher, 0)], main_tid)
        for p, t in sorted(set(zip(pid.tolist(), tid.tolist(), strict=True))):
            which = np.flatnonzero((pid == p) & (tid == t))
            gap = _Gaps(g0[which], g1[which], after[which], launcher[which])
            parts.append(_explain(work, host, (p, t), gap))
    segments = _Segments.concat(parts)
    locations = _locations(host, segments.start, segments.end, segments.cause, segments.decider)
    gap_set = IdleGaps(segments.start, segments.end, segments.cause, segments.decider, locations)
    return IdleAttribution(
        span_ns=work.span_ns,
        idle_ns=idle.total_ns,
        gaps=gap_set,
        causes=_cause_stats(gap_set, work.span_ns),
    )


@dataclass(frozen=True)
class _Gaps:
    """Idle gaps ended by work from one host thread: bounds, the work after, its launch."""

    start: NDArray[np.int64]
    end: NDArray[np.int64]
    after: NDArray[np.int64]
    launcher: NDArray[np.int64]


@dataclass(frozen=True)
class _Segments:
    """Pieces of idle gaps, each with one cause and the host event that decided it."""

    start: NDArray[np.int64]
    end: NDArray[np.int64]
    cause: NDArray[np.uint8]
    decider: NDArray[np.int64]

    @classmethod
    def concat(cls, parts: list[_Segments]) -> _Segments:
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            return cls(empty, empty, np.zeros(0, dtype=np.uint8), empty)
        start = np.concatenate([p.start for p in parts])
        order = np.argsort(start, kind="stable")
        return cls(
            start[order],
            np.concatenate([p.end for p in parts])[order],
            np.concatenate([p.cause for p in parts])[order],
            np.concatenate([p.decider for p in parts])[order],
        )


def _explain(work: DeviceWork, host: HostIndex, thread: tuple[int, int], gap: _Gaps) -> _Segments:
    """Split the gaps ended by work from ``thread`` into pieces, each with one cause."""
    ev = work.trace.events
    on_thread = (ev.device < 0) & (ev.pid == thread[0]) & (ev.tid == thread[1])
    if not np.any(on_thread & (ev.kind == Kind.PYTHON)):
        on_thread = on_thread | (ev.kind == Kind.PYTHON)  # frames on a pseudo-thread
    pieces: list[_Segments] = []

    # 1. Blocking host activities claim the idle time they overlap, in priority order.
    remaining = Intervals(gap.start, gap.end)
    rows_of: dict[HostActivity, NDArray[np.int64]] = {}
    for activity, c in _BLOCKING:
        rows = np.flatnonzero(on_thread & (host.activity == activity)).astype(np.int64)
        rows_of[activity] = rows
        if rows.size == 0 or len(remaining) == 0:
            continue
        claimed = intersection(remaining, host.intervals(rows))
        if len(claimed):
            remaining = difference(remaining, claimed)
            decider = _latest_before(ev.start_ns, rows, claimed.end_ns)
            pieces.append(_segments(claimed.start_ns, claimed.end_ns, c, decider))

    # What is left is decided from the gap it belongs to and what came just before it.
    r0, r1 = remaining.start_ns, remaining.end_ns
    index = np.searchsorted(gap.start, r0, side="right") - 1
    cause = np.full(r0.size, _CODE[Cause.UNKNOWN], dtype=np.uint8)
    decider = np.full(r0.size, -1, dtype=np.int64)
    undecided = np.ones(r0.size, dtype=bool)
    length = r1 - r0

    def decide(mask: NDArray[np.bool_], c: Cause, rows: NDArray[np.int64]) -> None:
        take = undecided & mask
        cause[take] = _CODE[c]
        decider[take] = rows[take]
        undecided[take] = False

    # 2. A synchronisation returned as the device drained: the host emptied the queue.
    syncs = np.concatenate(
        [
            rows_of[HostActivity.H2D_COPY],
            rows_of[HostActivity.HOST_SYNC],
            rows_of[HostActivity.ALLOCATOR],
        ]
    )
    syncs = syncs[ev.kind[syncs] == Kind.RUNTIME]
    if syncs.size and r0.size:
        ends = ev.end_ns[syncs]
        order = np.argsort(ends, kind="stable")
        syncs, ends = syncs[order], ends[order]
        i = np.minimum(np.searchsorted(ends, r0 - SYNC_BEFORE_NS, side="left"), ends.size - 1)
        hit = (ends[i] >= r0 - SYNC_BEFORE_NS) & (ends[i] <= np.minimum(r0 + SYNC_AFTER_NS, r1))
        row = syncs[i]
        decide(hit & (host.activity[row] == HostActivity.ALLOCATOR), Cause.ALLOCATOR, row)
        decide(hit & (host.activity[row] == HostActivity.H2D_COPY), Cause.H2D_COPY, row)
        decide(hit, Cause.HOST_SYNC, row)

    # 3. Work launched well before its gap began: the device waited on a dependency.
    launcher = gap.launcher[index]
    after = gap.after[index]
    launch_ns = np.where(launcher >= 0, ev.start_ns[np.maximum(launcher, 0)], r1)
    queued = (launcher >= 0) & (launch_ns < gap.start[index] - QUEUED_NS)
    comm_after = work.work_class[np.searchsorted(work.rows, after)] == WorkClass.COMMUNICATION
    decide(queued & comm_after, Cause.COMMUNICATION_WAIT, launcher)
    # A brief bubble between queued kernels is the device's own launch latency.
    decide(queued & (length <= SHORT_GAP_NS), Cause.LAUNCH_OVERHEAD, launcher)
    decide(queued, Cause.UNKNOWN, launcher)

    # 4. Short gaps: the host could not launch fast enough.
    decide(length <= SHORT_GAP_NS, Cause.LAUNCH_OVERHEAD, launcher)

    # 5. A CPU op that launches no device work kept the host busy: cpu_other. Python and framework
    #    code on the way to the next launch is launch overhead unless it runs for very long.
    if undecided.any():
        ops = np.flatnonzero(on_thread & (ev.kind == Kind.CPU_OP)).astype(np.int64)
        op_row = _innermost_at(ev.start_ns, ev.end_ns, ops, (r0 + r1) // 2)
        safe = np.maximum(op_row, 0)
        inside = np.minimum(ev.end_ns[safe], r1) - np.maximum(ev.start_ns[safe], r0)
        launches = np.flatnonzero(on_thread & (host.activity == HostActivity.LAUNCH))
        launch_starts = ev.start_ns[launches]
        launched = np.searchsorted(launch_starts, ev.end_ns[safe], side="right") - np.searchsorted(
            launch_starts, ev.start_ns[safe], side="left"
        )
        pure_cpu = (op_row >= 0) & (2 * inside >= length) & (launched == 0)
        decide(pure_cpu, Cause.CPU_OTHER, op_row)
        decide(length <= LONG_HOST_GAP_NS, Cause.LAUNCH_OVERHEAD, launcher)
        decide(op_row >= 0, Cause.CPU_OTHER, op_row)
        python = np.flatnonzero(on_thread & (ev.kind == Kind.PYTHON)).astype(np.int64)
        if python.size:
            py_cover = covered_ns(host.intervals(python), r0, r1)
            decide(2 * py_cover >= length, Cause.CPU_OTHER, np.full(r0.size, -1, np.int64))
    pieces.append(_Segments(r0, r1, cause, decider))
    return _Segments.concat(pieces)


def _segments(
    start: NDArray[np.int64], end: NDArray[np.int64], c: Cause, decider: NDArray[np.int64]
) -> _Segments:
    return _Segments(start, end, np.full(start.size, _CODE[c], dtype=np.uint8), decider)


def _latest_before(
    starts: NDArray[np.int64], rows: NDArray[np.int64], t: NDArray[np.int64]
) -> NDArray[np.int64]:
    """For each time, the last of ``rows`` (sorted by start) that started before it, or -1."""
    if rows.size == 0:
        return np.full(t.shape, -1, dtype=np.int64)
    i = np.searchsorted(starts[rows], t, side="left") - 1
    return np.where(i >= 0, rows[np.maximum(i, 0)], -1)


def _innermost_at(
    starts: NDArray[np.int64],
    ends: NDArray[np.int64],
    rows: NDArray[np.int64],
    t: NDArray[np.int64],
) -> NDArray[np.int64]:
    """For each time, the latest-starting of ``rows`` that contains it (nested ops: innermost).

    Among the rows that started by ``t``, the answer is the last one still running at ``t``: a
    "previous element at least t" query, answered for all times at once by binary lifting over
    a sparse table of running maxima of the end times.
    """
    if rows.size == 0:
        return np.full(t.shape, -1, dtype=np.int64)
    row_starts, row_ends = starts[rows], ends[rows]
    # levels[j][i] = max(row_ends[i - 2**j + 1 .. i])
    levels = [row_ends]
    while (1 << len(levels)) <= row_ends.size:
        prev, half = levels[-1], 1 << (len(levels) - 1)
        level = prev.copy()
        level[half:] = np.maximum(prev[half:], prev[:-half])
        levels.append(level)
    p = np.searchsorted(row_starts, t, side="right") - 1
    for j in range(len(levels) - 1, -1, -1):
        size = 1 << j
        jump = (p - size + 1 >= 0) & (levels[j][np.maximum(p, 0)] < t)
        p = np.where(jump, p - size, p)
    found = (p >= 0) & (row_ends[np.maximum(p, 0)] >= t)
    return np.where(found, rows[np.maximum(p, 0)], -1).astype(np.int64)


def _locations(
    host: HostIndex,
    g0: NDArray[np.int64],
    g1: NDArray[np.int64],
    cause: NDArray[np.uint8],
    decider: NDArray[np.int64],
) -> list[str | None]:
    """Resolve code locations for the deciders of the costliest gaps of each cause."""
    locations: list[str | None] = [None] * g0.size
    length = g1 - g0
    main_pid, main_tid = host.main_thread
    for code in np.unique(cause):
        if CAUSES[int(code)] is Cause.UNKNOWN:
            continue
        members = np.flatnonzero(cause == code)
        members = members[np.argsort(-length[members], kind="stable")][: LOCATIONS_RESOLVED * 4]
        for gap in members.tolist():
            row = int(decider[gap])
            if row >= 0:
                locations[gap] = host.location(row)
            else:
                middle = int((g0[gap] + g1[gap]) // 2)
                locations[gap] = host.user_frame(main_pid, main_tid, middle)
    return locations


def _cause_stats(gap_set: IdleGaps, span_ns: int) -> list[CauseStat]:
    length = gap_set.end_ns - gap_set.start_ns
    stats: list[CauseStat] = []
    for code, c in enumerate(CAUSES):
        members = np.flatnonzero(gap_set.cause == code)
        if members.size == 0:
            continue
        lost = int(length[members].sum())
        by_location: dict[str, list[int]] = {}
        for gap in members.tolist():
            where = gap_set.location[gap]
            if where is not None:
                entry = by_location.setdefault(where, [0, 0])
                entry[0] += int(length[gap])
                entry[1] += 1
        top = sorted(by_location.items(), key=lambda kv: -kv[1][0])[:5]
        stats.append(
            CauseStat(
                cause=c,
                lost_ns=lost,
                gaps=int(members.size),
                share_pct=100.0 * lost / span_ns if span_ns else 0.0,
                locations=[LocationStat(w, v[0], v[1]) for w, v in top],
            )
        )
    stats.sort(key=lambda s: -s.lost_ns)
    return stats
