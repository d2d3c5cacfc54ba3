"""Why the device was idle: every idle gap attributed to one cause, with the code that caused it.

Contract: :func:`attribute_idle` takes the :class:`~gpuscope.analyses.timeline.DeviceWork` of one
device and the trace's :class:`~gpuscope.analyses.host.HostIndex`, and returns every idle gap of
the device's span with exactly one :class:`Cause`, so that the causes partition the idle time.

How a gap is explained, looking at the host thread that launched the work ending the gap:

1. a blocking host activity covers at least half of the gap: checkpoint, data loader, collective
   wait, allocator call, host-to-device copy the host waits for, or a synchronisation;
2. else a synchronisation (or ``cudaFree``) returned just as the device drained: the host emptied
   the queue and then spent the gap on its own work before launching again;
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
from gpuscope.analyses.intervals import covered_ns, gaps
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
    cause = np.full(g0.size, _CODE[Cause.UNKNOWN], dtype=np.uint8)
    decider = np.full(g0.size, -1, dtype=np.int64)
    if g0.size:
        # The device work that ends each gap, and the host thread that launched it.
        starts = ev.start_ns[work.rows]
        after = work.rows[np.minimum(np.searchsorted(starts, g1, side="left"), starts.size - 1)]
        launcher = ev.link[after]
        main_pid, main_tid = host.main_thread
        pid = np.where(launcher >= 0, ev.pid[np.maximum(launcher, 0)], main_pid)
        tid = np.where(launcher >= 0, ev.tid[np.maximum(launcher, 0)], main_tid)
        for p, t in sorted(set(zip(pid.tolist(), tid.tolist(), strict=True))):
            on_thread = np.flatnonzero((pid == p) & (tid == t))
            _explain(work, host, (p, t), on_thread, g0, g1, after, launcher, cause, decider)
    locations = _locations(host, g0, g1, cause, decider)
    gap_set = IdleGaps(g0, g1, cause, decider, locations)
    return IdleAttribution(
        span_ns=work.span_ns,
        idle_ns=idle.total_ns,
        gaps=gap_set,
        causes=_cause_stats(gap_set, work.span_ns),
    )


def _explain(
    work: DeviceWork,
    host: HostIndex,
    thread: tuple[int, int],
    which: NDArray[np.int64],
    g0_all: NDArray[np.int64],
    g1_all: NDArray[np.int64],
    after_all: NDArray[np.int64],
    launcher_all: NDArray[np.int64],
    cause: NDArray[np.uint8],
    decider: NDArray[np.int64],
) -> None:
    """Decide the cause of the gaps ``which``, all ended by work launched from ``thread``."""
    ev = work.trace.events
    g0, g1 = g0_all[which], g1_all[which]
    length = g1 - g0
    undecided = np.ones(which.size, dtype=bool)
    host_rows = ev.device < 0
    on_thread = host_rows & (ev.pid == thread[0]) & (ev.tid == thread[1])
    if not np.any(on_thread & (ev.kind == Kind.PYTHON)):
        on_thread = on_thread | (ev.kind == Kind.PYTHON)  # frames on a pseudo-thread

    def decide(mask: NDArray[np.bool_], c: Cause, rows: NDArray[np.int64]) -> None:
        take = undecided & mask
        cause[which[take]] = _CODE[c]
        decider[which[take]] = rows[take]
        undecided[take] = False

    # 1. A blocking activity covers at least half the gap: the largest one wins.
    coverage = np.zeros((len(_BLOCKING), which.size), dtype=np.int64)
    activity_rows: list[NDArray[np.int64]] = []
    for i, (activity, _) in enumerate(_BLOCKING):
        rows = np.flatnonzero(on_thread & (host.activity == activity)).astype(np.int64)
        activity_rows.append(rows)
        if rows.size:
            coverage[i] = covered_ns(host.intervals(rows), g0, g1)
    best = np.argmax(coverage, axis=0)
    best_cover = coverage[best, np.arange(which.size)]
    for i, (_, c) in enumerate(_BLOCKING):
        mask = (best == i) & (2 * best_cover >= length)
        if mask.any():
            decide(mask, c, _latest_before(ev.start_ns, activity_rows[i], g1))

    # 2. A synchronisation returned as the device drained.
    syncs = np.concatenate(
        [activity_rows[4], activity_rows[5], activity_rows[3]]
    )  # copy/sync/alloc
    syncs = syncs[ev.kind[syncs] == Kind.RUNTIME]
    if syncs.size and undecided.any():
        ends = ev.end_ns[syncs]
        order = np.argsort(ends, kind="stable")
        syncs, ends = syncs[order], ends[order]
        i = np.minimum(np.searchsorted(ends, g0 - SYNC_BEFORE_NS, side="left"), ends.size - 1)
        hit = (ends[i] >= g0 - SYNC_BEFORE_NS) & (ends[i] <= np.minimum(g0 + SYNC_AFTER_NS, g1))
        row = syncs[i]
        is_alloc = host.activity[row] == HostActivity.ALLOCATOR
        is_copy = host.activity[row] == HostActivity.H2D_COPY
        decide(hit & is_alloc, Cause.ALLOCATOR, row)
        decide(hit & is_copy, Cause.H2D_COPY, row)
        decide(hit, Cause.HOST_SYNC, row)

    # 3. Work launched well before the gap: the device waited on a dependency.
    launcher = launcher_all[which]
    after = after_all[which]
    launch_ns = np.where(launcher >= 0, ev.start_ns[np.maximum(launcher, 0)], g1)
    queued = (launcher >= 0) & (launch_ns < g0 - QUEUED_NS)
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
        op_row = _innermost_at(ev.start_ns, ev.end_ns, ops, (g0 + g1) // 2)
        safe = np.maximum(op_row, 0)
        inside = np.minimum(ev.end_ns[safe], g1) - np.maximum(ev.start_ns[safe], g0)
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
            py_cover = covered_ns(host.intervals(python), g0, g1)
            decide(2 * py_cover >= length, Cause.CPU_OTHER, np.full(which.size, -1, np.int64))


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
    """For each time, the latest-starting of ``rows`` that contains it (nested ops: innermost)."""
    result = np.full(t.shape, -1, dtype=np.int64)
    if rows.size == 0:
        return result
    row_starts, row_ends = starts[rows], ends[rows]
    last = np.searchsorted(row_starts, t, side="right") - 1
    found = (last >= 0) & (row_ends[np.maximum(last, 0)] >= t)
    result[found] = rows[last[found]]
    # The latest op to start may have ended already: walk back to an enclosing one.
    for k in np.flatnonzero(~found & (last >= 0)).tolist():
        when = int(t[k])
        for j in range(int(last[k]) - 1, max(int(last[k]) - 64, -1), -1):
            if row_ends[j] >= when:
                result[k] = rows[j]
                break
    return result


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
