"""Why the device was idle: every idle gap attributed to one cause, with the code that caused it.

Contract: :func:`attribute_idle` takes the :class:`~gpuscope.analyses.timeline.DeviceWork` of one
device and the trace's :class:`~gpuscope.analyses.host.HostIndex`, and returns the idle time of
the device's span cut into segments, each with exactly one :class:`Cause`, so that the causes
partition the idle time. A gap is one segment unless the host did two different blocking things
during it (a sync, then the data loader): then each part gets its own cause.

How idle time is explained, looking at the host thread that launched the work ending the gap:

0. one-time start-up (context creation, module loading, library set-up, compilation, graph
   capture, a slow first step; see :mod:`gpuscope.analyses.phases`) claims the idle time inside
   it, on any thread: it is paid once per process and is not the host's steady-state work;
1. a blocking host activity claims the idle time it overlaps, in this order: checkpoint, data
   loader, collective wait, allocator call, host-to-device copy the host waits for, sync;
2. in what is left, a synchronisation (or ``cudaFree``) that returned just as it began: the host
   emptied the queue and then spent the time on its own work before launching again;
3. else a short gap that ends in an on-demand unified-memory migration: the driver servicing a
   page fault (``page_migration``, see :func:`_on_demand_migration`); such work was never
   launched, so no longer gap before it is launch overhead either;
4. else the work after the gap had been launched before the gap began: the device waited on a
   dependency (a peer's collective when that work is communication; a bubble under 50 µs between
   queued kernels is launch latency; anything longer is unknown);
5. else a short gap (launch latency territory): the host could not launch fast enough;
6. else a CPU op that launches no device work covers the gap (an optimizer step on the CPU, host
   preprocessing): ``cpu_other``; Python and framework code on its way to the next launch is
   launch overhead, unless it runs for over a millisecond (then ``cpu_other``);
7. else the thread was recorded on a CPU for most of the gap outside any CUDA call: ``cpu_other``,
   the host computing (see :func:`_host_computing`);
8. else ``unknown``: nothing in the trace explains it, and it is reported as such.
"""

from __future__ import annotations

import re
from enum import Enum

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope._arrays import distinct
from gpuscope.analyses.host import HostActivity, HostIndex
from gpuscope.analyses.intervals import (
    Intervals,
    covered_ns,
    difference,
    gaps,
    intersection,
    last_containing,
)
from gpuscope.analyses.phases import KIND_ORDER, Phase, WarmupKind, phase_intervals
from gpuscope.analyses.timeline import DeviceWork, WorkClass
from gpuscope.model import Kind, Trace

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
    WARMUP = "warmup"  # one-time start-up; its kinds are in CauseStat.kinds
    PAGE_MIGRATION = "page_migration"  # the driver servicing unified-memory page faults


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


class LocationStat(msgspec.Struct, frozen=True):
    location: str
    lost_ns: int
    gaps: int


class KindStat(msgspec.Struct, frozen=True):
    """Idle time of one kind of start-up, and the code that triggered its longest phase."""

    kind: WarmupKind
    lost_ns: int
    location: str | None


class CauseStat(msgspec.Struct, frozen=True):
    cause: Cause
    lost_ns: int
    gaps: int
    share_pct: float  # of the device's span
    locations: list[LocationStat]  # costliest first
    kinds: list[KindStat] = msgspec.field(default_factory=list)  # warmup only, costliest first


class IdleGaps(msgspec.Struct, frozen=True):
    """Every idle gap of one device, in time order, with its cause and deciding host event."""

    start_ns: NDArray[np.int64]
    end_ns: NDArray[np.int64]
    cause: NDArray[np.uint8]  # index into CAUSES
    decider: NDArray[np.int64]  # host event row that decided the cause, -1 when none
    location: list[str | None]  # resolved for the costliest deciders only


class IdleAttribution(msgspec.Struct, frozen=True):
    span_ns: int
    idle_ns: int
    gaps: IdleGaps
    causes: list[CauseStat]  # every cause with time lost, costliest first

    def lost_ns(self, cause: Cause) -> int:
        return next((c.lost_ns for c in self.causes if c.cause is cause), 0)


def attribute_idle(
    work: DeviceWork, host: HostIndex, phases: list[Phase] | None = None
) -> IdleAttribution:
    ev = work.trace.events
    idle = gaps(work.busy, work.span_start_ns, work.span_end_ns)
    idle_ns = idle.total_ns
    parts: list[_Segments] = []
    kinds: list[KindStat] = []
    if phases:
        idle, warm, kinds = claim_startup(idle, host, phases)
        parts.append(warm)
    g0, g1 = idle.start_ns, idle.end_ns
    if g0.size:
        # The device work that ends each gap, and the host thread that launched it.
        starts = ev.start_ns[work.rows]
        next_work = np.minimum(np.searchsorted(starts, g1, side="left"), starts.size - 1)
        launcher = ev.link[work.rows[next_work]]
        after_class = work.work_class[next_work]
        after_row = work.rows[next_work]
        main_pid, main_tid = host.main_thread
        pid = np.where(launcher >= 0, ev.pid[np.maximum(launcher, 0)], main_pid)
        tid = np.where(launcher >= 0, ev.tid[np.maximum(launcher, 0)], main_tid)
        for p in distinct(pid).tolist():
            of_pid = pid == p
            for t in distinct(tid[of_pid]).tolist():
                which = np.flatnonzero(of_pid & (tid == t))
                gap = _Gaps(
                    g0[which], g1[which], after_class[which], launcher[which], after_row[which]
                )
                parts.append(_explain(work, host, (p, t), gap))
    segments = _Segments.concat(parts)
    locations, resolved = _locations(
        host, segments.start, segments.end, segments.cause, segments.decider
    )
    gap_set = IdleGaps(segments.start, segments.end, segments.cause, segments.decider, locations)
    causes = _cause_stats(gap_set, work.span_ns, resolved)
    if kinds:
        causes = [
            msgspec.structs.replace(c, kinds=kinds) if c.cause is Cause.WARMUP else c
            for c in causes
        ]
    return IdleAttribution(
        span_ns=work.span_ns,
        idle_ns=idle_ns,
        gaps=gap_set,
        causes=causes,
    )


def claim_startup(
    idle: Intervals, host: HostIndex, phases: list[Phase]
) -> tuple[Intervals, _Segments, list[KindStat]]:
    """Idle time inside start-up phases, per kind (a more specific kind first): the segments,
    the idle time left to explain, and each kind's time with the code behind its longest
    phase."""
    ev = host.trace.events
    pieces: list[_Segments] = []
    kinds: list[KindStat] = []
    for kind, iv in phase_intervals(phases).items():
        claimed = intersection(idle, iv)
        if not len(claimed):
            continue
        idle = difference(idle, claimed)
        mine = [p for p in phases if p.kind is kind]
        rows = np.array([p.row for p in mine], dtype=np.int64)
        starts = np.array([p.start_ns for p in mine], dtype=np.int64)
        order = np.argsort(starts, kind="stable")
        rows, starts = rows[order], starts[order]
        i = np.searchsorted(starts, claimed.end_ns, side="left") - 1
        decider = np.where(i >= 0, rows[np.maximum(i, 0)], -1)
        pieces.append(_segments(claimed.start_ns, claimed.end_ns, Cause.WARMUP, decider))
        longest = max(mine, key=lambda p: p.end_ns - p.start_ns)
        where = host.location(longest.row) if longest.row >= 0 else None
        if where is None and len(ev):
            main_pid, main_tid = host.main_thread
            where = host.user_frame(main_pid, main_tid, (longest.start_ns + longest.end_ns) // 2)
        kinds.append(KindStat(kind, claimed.total_ns, where))
    kinds.sort(key=lambda k: (-k.lost_ns, KIND_ORDER.index(k.kind)))
    return idle, _Segments.concat(pieces), kinds


class _Gaps(msgspec.Struct, frozen=True):
    """Idle gaps ended by work from one host thread: bounds, the class of the work after, its
    launch."""

    start: NDArray[np.int64]
    end: NDArray[np.int64]
    after_class: NDArray[np.uint8]  # WorkClass
    launcher: NDArray[np.int64]
    after_row: NDArray[np.int64]  # the row of the work that ends the gap


class _Segments(msgspec.Struct, frozen=True):
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
    # The thread's host rows (ascending), so that each selection below scans them, not the trace.
    thread_rows = host.rows_of_thread(*thread)
    thread_rows = thread_rows[ev.device[thread_rows] < 0]
    if not np.any(ev.kind[thread_rows] == Kind.PYTHON):
        python_rows = np.flatnonzero(ev.kind == Kind.PYTHON)
        if python_rows.size:  # frames on a pseudo-thread: take them all
            thread_rows = np.union1d(thread_rows, python_rows)
    thread_activity = host.activity[thread_rows]
    thread_kind = ev.kind[thread_rows]
    pieces: list[_Segments] = []

    # 1. Blocking host activities claim the idle time they overlap, in priority order.
    remaining = Intervals(gap.start, gap.end)
    rows_of: dict[HostActivity, NDArray[np.int64]] = {}
    present = np.bincount(thread_activity, minlength=len(HostActivity))
    for activity, c in _BLOCKING:
        rows = thread_rows[thread_activity == activity] if present[activity] else thread_rows[:0]
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

    # 3. A short gap before an on-demand migration: the driver servicing a page fault.
    migration = _on_demand_migration(work.trace, gap.after_row[index])
    decide(migration & (length <= SHORT_GAP_NS), Cause.PAGE_MIGRATION, decider)
    was_launched = ~migration  # launch overhead needs a launch: a migration is the driver's own

    # 4. Work launched well before its gap began: the device waited on a dependency.
    launcher = gap.launcher[index]
    launch_ns = np.where(launcher >= 0, ev.start_ns[np.maximum(launcher, 0)], r1)
    queued = (launcher >= 0) & (launch_ns < gap.start[index] - QUEUED_NS)
    comm_after = gap.after_class[index] == WorkClass.COMMUNICATION
    decide(queued & comm_after, Cause.COMMUNICATION_WAIT, launcher)
    # A brief bubble between queued kernels is the device's own launch latency.
    decide(queued & (length <= SHORT_GAP_NS), Cause.LAUNCH_OVERHEAD, launcher)
    decide(queued, Cause.UNKNOWN, launcher)

    # 5. Short gaps: the host could not launch fast enough.
    decide(was_launched & (length <= SHORT_GAP_NS), Cause.LAUNCH_OVERHEAD, launcher)

    # 6. A CPU op that launches no device work kept the host busy: cpu_other. Python and framework
    #    code on the way to the next launch is launch overhead unless it runs for very long.
    #    Only the pieces still undecided are looked at (most gaps are short, decided above).
    todo = np.flatnonzero(undecided)
    if todo.size:
        t0, t1, t_length = r0[todo], r1[todo], length[todo]
        ops = thread_rows[thread_kind == Kind.CPU_OP]
        op_row = np.full(r0.size, -1, dtype=np.int64)
        op_row[todo] = _innermost_at(ev.start_ns, ev.end_ns, ops, (t0 + t1) // 2)
        safe = np.maximum(op_row[todo], 0)
        inside = np.minimum(ev.end_ns[safe], t1) - np.maximum(ev.start_ns[safe], t0)
        launches = thread_rows[thread_activity == HostActivity.LAUNCH]
        launch_starts = ev.start_ns[launches]
        launched = np.searchsorted(launch_starts, ev.end_ns[safe], side="right") - np.searchsorted(
            launch_starts, ev.start_ns[safe], side="left"
        )
        pure_cpu = np.zeros(r0.size, dtype=np.bool_)
        pure_cpu[todo] = (op_row[todo] >= 0) & (2 * inside >= t_length) & (launched == 0)
        decide(pure_cpu, Cause.CPU_OTHER, op_row)
        decide(was_launched & (length <= LONG_HOST_GAP_NS), Cause.LAUNCH_OVERHEAD, launcher)
        decide(op_row >= 0, Cause.CPU_OTHER, op_row)
        frames = thread_rows[thread_kind == Kind.PYTHON]
        if frames.size:
            py_cover = np.zeros(r0.size, dtype=np.int64)
            py_cover[todo] = covered_ns(host.intervals(frames), t0, t1)
            decide(2 * py_cover >= length, Cause.CPU_OTHER, np.full(r0.size, -1, np.int64))
        # 7. The thread was on a CPU, in no CUDA call: the host computing.
        computing = np.zeros(r0.size, dtype=np.bool_)
        computing[todo] = _host_computing(host, thread_rows, t0, t1)
        decide(computing, Cause.CPU_OTHER, np.full(r0.size, -1, np.int64))
    pieces.append(_Segments(r0, r1, cause, decider))
    return _Segments.concat(pieces)


def _on_demand_migration(trace: Trace, rows: NDArray[np.int64]) -> NDArray[np.bool_]:
    """Which rows are unified-memory migrations the driver started on its own: a processor touched
    a page resident elsewhere (``Page fault``), the driver moved its neighbours too (``Speculative
    prefetch``), evicted pages to make room, or followed access counters. Only ``User prefetch``
    (``cudaMemPrefetchAsync``) is launched by the program. Readers name migrations
    ``Unified Memory HtoD (Page fault)``.

    The faulting thread stalls while the UVM driver services the fault: it finds the page, unmaps
    it where it lives, copies it (and a neighbourhood) and maps it where it was touched. A short
    idle gap before such a migration is that service, tens of microseconds between the fault
    and the copy or between the copies of one fault: ``page_migration``. It is never launch
    overhead: nothing launched the migration. A longer gap before one is whatever the thread did
    before touching the page, decided by the later rules (the host computing, or unknown)."""
    names = trace.names
    ids = trace.events.name_id[rows]
    used = distinct(ids)
    flag = np.zeros(len(names), dtype=np.bool_)
    flag[used] = [_ON_DEMAND.match(names[i]) is not None for i in used.tolist()]
    return flag[ids]


_ON_DEMAND = re.compile(r"^Unified Memory \w+ \((?!User prefetch\))")


def _host_computing(
    host: HostIndex, thread_rows: NDArray[np.int64], t0: NDArray[np.int64], t1: NDArray[np.int64]
) -> NDArray[np.bool_]:
    """Pieces the thread spent mostly on a CPU outside any CUDA call: the host computing.

    Where the trace records when the thread was on a CPU (:attr:`Kind.HOST_RUNNING`: the OS
    scheduling trace or CPU samples of Nsight Systems), a thread that ran through a device-idle
    gap without calling CUDA was doing its own work (a CPU loop, preprocessing, verification):
    ``cpu_other``. Where nothing records the thread, this says nothing and the gap stays
    ``unknown``; a thread off the CPU was waiting on something the trace does not name.
    """
    ev = host.trace.events
    running = thread_rows[ev.kind[thread_rows] == Kind.HOST_RUNNING]
    if running.size == 0:
        return np.zeros(t0.size, dtype=np.bool_)
    on_cpu = covered_ns(host.intervals(running), t0, t1)
    calls = thread_rows[ev.kind[thread_rows] == Kind.RUNTIME]
    in_calls = covered_ns(host.intervals(calls), t0, t1)
    return 2 * (on_cpu - in_calls) >= t1 - t0


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
    """For each time, the latest-starting of ``rows`` (sorted by start) that contains it (nested
    ops: the innermost), or -1."""
    at = last_containing(starts[rows], ends[rows], t)
    return np.where(at >= 0, rows[np.maximum(at, 0)] if rows.size else -1, -1).astype(np.int64)


def _locations(
    host: HostIndex,
    g0: NDArray[np.int64],
    g1: NDArray[np.int64],
    cause: NDArray[np.uint8],
    decider: NDArray[np.int64],
) -> tuple[list[str | None], NDArray[np.intp]]:
    """Resolve code locations for the deciders of the costliest gaps of each cause; and which
    gaps were looked up (ascending: the others have no location)."""
    locations: list[str | None] = [None] * g0.size
    length = g1 - g0
    chosen: list[NDArray[np.intp]] = []
    for code in np.flatnonzero(np.bincount(cause, minlength=len(CAUSES))).tolist():
        if CAUSES[code] is Cause.UNKNOWN:
            continue
        members = np.flatnonzero(cause == code)
        chosen.append(_costliest(members, length[members], LOCATIONS_RESOLVED * 4))
    if not chosen:
        return locations, np.zeros(0, dtype=np.intp)
    # Resolved in two batches (a deciding event; else the main thread at the gap's middle), as
    # each lookup is a vectorised search: one call per gap would dominate the analysis.
    members = np.concatenate(chosen)
    rows = decider[members]
    decided = rows >= 0
    for gap, where in zip(members[decided].tolist(), host.locations(rows[decided]), strict=True):
        locations[gap] = where
    main_pid, main_tid = host.main_thread
    undecided = members[~decided]
    middle = (g0[undecided] + g1[undecided]) // 2
    for gap, frame in zip(
        undecided.tolist(), host.user_frames(main_pid, main_tid, middle), strict=True
    ):
        locations[gap] = frame
    return locations, np.sort(members)


def _costliest(members: NDArray[np.intp], length: NDArray[np.int64], k: int) -> NDArray[np.intp]:
    """The ``k`` longest of ``members`` (ties: the earliest), in no particular order: the first
    ``k`` of a stable sort by decreasing length, found without sorting them all."""
    if members.size <= k:
        return members
    threshold = np.partition(length, length.size - k)[length.size - k]
    longer = members[length > threshold]
    tied = members[length == threshold][: k - longer.size]
    return np.concatenate([longer, tied])


def _cause_stats(gap_set: IdleGaps, span_ns: int, resolved: NDArray[np.intp]) -> list[CauseStat]:
    length = gap_set.end_ns - gap_set.start_ns
    stats: list[CauseStat] = []
    # Time and gaps per cause and location, in gap order, in one pass over the gaps whose
    # location was looked up (``resolved``, ascending; a few thousand of maybe tens of thousands).
    by_cause: dict[int, dict[str, list[int]]] = {}
    columns = (resolved.tolist(), gap_set.cause[resolved].tolist(), length[resolved].tolist())
    for gap, code, ns in zip(*columns, strict=True):
        where = gap_set.location[gap]
        if where is not None:
            entry = by_cause.setdefault(code, {}).setdefault(where, [0, 0])
            entry[0] += ns
            entry[1] += 1
    present = np.bincount(gap_set.cause, minlength=len(CAUSES))
    for code, c in enumerate(CAUSES):
        if not present[code]:
            continue
        members = np.flatnonzero(gap_set.cause == code)
        lost = int(length[members].sum())
        by_location = by_cause.get(code, {})
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
