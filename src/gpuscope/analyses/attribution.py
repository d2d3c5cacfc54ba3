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
   loader, collective wait, allocator call, host-to-device copy the host waits for, sync; but
   not in a gap whose next work was already queued before the gap began (rule 4 decides it:
   the host being blocked did not delay work that was already launched);
2. in what is left, a synchronisation (or ``cudaFree``) that returned just as it began: the host
   emptied the queue and then spent the time on its own work before launching again;
3. else a short gap that ends in an on-demand unified-memory migration: the driver servicing a
   page fault (``page_migration``, see :func:`fault_service`); such work was never launched, so
   no gap before it is launch overhead either;
4. else the work after the gap had been launched before the gap began: the device waited on a
   dependency (a peer's collective when that work is communication; a bubble under 50 µs between
   queued kernels is launch latency; anything longer is unknown);
5. else a short gap (launch latency territory): the host could not launch fast enough;
6. else a CPU op that launches no device work covers the gap (an optimizer step on the CPU, host
   preprocessing): ``cpu_other``; Python and framework code on its way to the next launch is
   launch overhead, unless it runs for over a millisecond (then ``cpu_other``);
7. else the thread was recorded on a CPU for most of the gap outside any CUDA call: ``cpu_other``,
   the host computing (see :func:`thread_on_a_cpu`);
8. else ``unknown``: nothing in the trace explains it, and it is reported as such.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import NamedTuple

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope._arrays import distinct, longest
from gpuscope.analyses.host import HostActivity, HostIndex
from gpuscope.analyses.intervals import (
    Intervals,
    covered_ns,
    difference,
    gaps,
    innermost_at,
    intersection,
    latest_before,
    union,
)
from gpuscope.analyses.phases import KIND_ORDER, Phase, WarmupKind, phase_intervals
from gpuscope.analyses.timeline import DeviceWork, WorkClass, on_demand_migration
from gpuscope.causes import idle_causes
from gpuscope.model import Events, Kind

#: Gaps up to this long with nothing blocking the host are launch overhead.
SHORT_GAP_NS = 50_000
#: How far a synchronisation's return may be from the moment the device drained.
SYNC_BEFORE_NS = 10_000
SYNC_AFTER_NS = 100_000
#: A sync owns the idle time after its return up to this many times its own wait (or up to
#: LONG_HOST_GAP_NS, whichever is longer).
SYNC_OWNS_RATIO = 10
#: A launch this long before the gap began means the work was queued, not late.
QUEUED_NS = 10_000
#: Host code running longer than this between launches is the host's own work, not overhead.
LONG_HOST_GAP_NS = 1_000_000
#: How many of the costliest host events per cause are resolved to code locations.
LOCATIONS_RESOLVED = 256


#: An idle cause: its name in ``data/causes.csv`` (a row of source ``idle``).
Cause = str
#: The idle causes, in the table's order: a gap's cause code (:attr:`IdleGaps.cause`) is its
#: position here. Saved diagnoses store these names with the codes, so a row may go anywhere.
CAUSES: tuple[Cause, ...] = idle_causes()
_CODE = {c: i for i, c in enumerate(CAUSES)}
UNKNOWN: Cause = "unknown"  # what no rule explains
WARMUP: Cause = "warmup"  # one-time start-up (claim_startup); its kinds are in CauseStat.kinds


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
        return next((c.lost_ns for c in self.causes if c.cause == cause), 0)


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
        index = np.searchsorted(starts, g1, side="left")
        # A gap after the last device work (the window's end) is ended by nothing the device
        # ran: no launch to follow, and the host's work over it decides.
        trailing = index >= starts.size
        next_work = np.minimum(index, starts.size - 1)
        launcher = np.where(trailing, -1, ev.link[work.rows[next_work]]).astype(np.int64)
        after_class = work.work_class[next_work]
        after_row = np.where(trailing, -1, work.rows[next_work])
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
            msgspec.structs.replace(c, kinds=kinds) if c.cause == WARMUP else c for c in causes
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
        pieces.append(_segments(claimed.start_ns, claimed.end_ns, WARMUP, decider))
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
    """Split the gaps ended by work from ``thread`` into pieces, each with one cause: first the
    blocking activities of :data:`CLAIMS` claim the time they overlap, then every piece left is
    given the cause of the first of :data:`RULES` that explains it (else ``unknown``)."""
    ev = work.trace.events
    # The thread's host rows (ascending), so that each selection below scans them, not the trace.
    # (The index keeps them in 32 bits; this gap's selection is widened for the rules below.)
    every = host.rows_of_thread(*thread)
    thread_rows = every[ev.device[every] < 0].astype(np.int64)
    if not np.any(ev.kind[thread_rows] == Kind.PYTHON):
        python_rows = np.flatnonzero(ev.kind == Kind.PYTHON)
        if python_rows.size:  # frames on a pseudo-thread: take them all
            thread_rows = distinct(np.concatenate([thread_rows, python_rows]))  # a union
    thread_activity = host.activity[thread_rows]
    pieces: list[_Segments] = []

    rows_of: dict[HostActivity, NDArray[np.int64]] = {}
    present = np.bincount(thread_activity, minlength=len(HostActivity))
    for activity, _ in CLAIMS:
        rows = thread_rows[thread_activity == activity] if present[activity] else thread_rows[:0]
        rows_of[activity] = rows
    # Blocking host activities claim the idle time they overlap, in the order of CLAIMS, except
    # in gaps whose next work was already queued when they began (see :func:`queued_before`):
    # only a collective the host waits for claims those too, as the queued work waits for the
    # same collective (its stream waits on the collective's event).
    queued = queued_before(ev, gap.launcher, gap.start, gap.end)
    unlaunched = (gap.launcher < 0) & (gap.after_row >= 0) & ~queued
    if unlaunched.any():
        blocked = host.intervals(np.concatenate(list(rows_of.values())))
        queued |= unlaunched & _within(blocked, gap.start, gap.end)
    remaining = Intervals(gap.start[~queued], gap.end[~queued])
    waiting = Intervals(gap.start[queued], gap.end[queued])
    for activity, c in CLAIMS:
        rows = rows_of[activity]
        if rows.size == 0:
            continue
        held = host.intervals(rows)
        pools = [remaining, waiting] if activity is HostActivity.COMM_WAIT else [remaining]
        for k, pool in enumerate(pools):
            claimed = intersection(pool, held)
            if len(claimed):
                pools[k] = difference(pool, claimed)
                decider = latest_before(ev.start_ns, rows, claimed.end_ns)
                pieces.append(_segments(claimed.start_ns, claimed.end_ns, c, decider))
        remaining = pools[0]
        if len(pools) > 1:
            waiting = pools[1]
    if len(waiting):
        remaining = union(
            np.concatenate([remaining.start_ns, waiting.start_ns]),
            np.concatenate([remaining.end_ns, waiting.end_ns]),
        )
    # What is left is decided by the rules, from the gap each piece belongs to and what the
    # thread was doing just before and during it.
    ctx = GapContext(work, host, gap, queued, remaining, thread_rows, thread_activity, rows_of)
    size = ctx.start.size
    cause = np.full(size, _CODE[UNKNOWN], dtype=np.uint8)
    decider = np.full(size, -1, dtype=np.int64)
    for c, rule in RULES:
        if not ctx.undecided.any():
            break
        evidence = rule(ctx)
        if evidence is None:
            continue
        take = ctx.undecided & evidence.explains
        cause[take] = _CODE[c]
        decider[take] = evidence.rows[take]
        ctx.undecided[take] = False
    pieces.append(_Segments(ctx.start, ctx.end, cause, decider))
    return _Segments.concat(pieces)


def queued_before(
    ev: Events, launcher: NDArray[np.int64], start_ns: NDArray[np.int64], end_ns: NDArray[np.int64]
) -> NDArray[np.bool_]:
    """Per gap: the work that ends it was launched more than QUEUED_NS before it began.

    Such a gap is not the host's doing, whatever the host was blocked in meanwhile: the next
    work was already in the device's queue, so a host that returned at once would not have
    made it start sooner. This is the common case while the host waits in a sync at the end of
    a step (``torch.cuda.synchronize()``, a profiler's stop): the device drains its queue, and
    the bubbles between the queued kernels are the device's own (launch latency, or a dependency
    the trace does not show), not the sync's."""
    launch_ns = np.where(launcher >= 0, ev.start_ns[np.maximum(launcher, 0)], end_ns)
    return (launcher >= 0) & (launch_ns < start_ns - QUEUED_NS)


def _within(
    blocked: Intervals, start_ns: NDArray[np.int64], end_ns: NDArray[np.int64]
) -> NDArray[np.bool_]:
    """Per gap: one blocking host call began before it and had not returned when the work after
    it started. A host thread blocked in a call launches nothing, so that work was launched
    before the call (its launch is outside the trace) or by another thread: it was queued, and
    the call did not delay it. Only the gap that ends after the call returns can be the call's."""
    if len(blocked) == 0:
        return np.zeros(start_ns.size, dtype=np.bool_)
    i = np.searchsorted(blocked.start_ns, start_ns, side="right") - 1
    return (i >= 0) & (blocked.end_ns[np.maximum(i, 0)] > end_ns)


# --- the rules ----------------------------------------------------------------------------------


class Evidence(NamedTuple):
    """What a rule found: which pieces it explains, and per piece the host event (a trace row)
    that shows it, -1 when none; the first rule to explain a piece decides its cause."""

    explains: NDArray[np.bool_]
    rows: NDArray[np.int64]


class GapContext:
    """What a rule sees: the pieces of idle gaps (after the claims) ended by work that one host
    thread launched, and that thread's host events.

    Per piece (arrays of one length): ``start``, ``end``, ``length``; the gap it belongs to
    (``gap_start``), the class of the device work that ends it (``after_class``) and the runtime
    call that launched that work (``launcher``, -1 when unknown); ``undecided``, the pieces no
    earlier rule explained (a rule may restrict costly work to them). Facts several rules share
    are computed once, when a rule first asks, over the pieces undecided then."""

    def __init__(
        self,
        work: DeviceWork,
        host: HostIndex,
        gap: _Gaps,
        gap_queued: NDArray[np.bool_],
        pieces: Intervals,
        thread_rows: NDArray[np.int64],
        thread_activity: NDArray[np.uint8],
        rows_of: dict[HostActivity, NDArray[np.int64]],
    ) -> None:
        self.ev = work.trace.events
        self.busy = work.busy
        self.host = host
        self.thread_rows = thread_rows
        self.thread_activity = thread_activity
        self.thread_kind = self.ev.kind[thread_rows]
        self.rows_of = rows_of  # the thread's host events of each blocking activity
        self.start, self.end = pieces.start_ns, pieces.end_ns
        self.length = self.end - self.start
        index = np.searchsorted(gap.start, self.start, side="right") - 1
        self.gap_start = gap.start[index]
        self.after_class = gap.after_class[index]
        self.launcher = gap.launcher[index]
        self.after_row = gap.after_row[index]
        #: Per piece: the work after it was queued before its gap began (:func:`queued_before`,
        #: or launched unseen before a blocking call that spans the gap).
        self.queued = gap_queued[index]
        self.undecided = np.ones(self.start.size, dtype=bool)

    def none(self) -> NDArray[np.int64]:
        """No deciding host event, for every piece."""
        return np.full(self.start.size, -1, dtype=np.int64)

    @cached_property
    def sync_return(self) -> tuple[NDArray[np.bool_], NDArray[np.int64]]:
        """Per piece: whether a blocking runtime call (a synchronisation, a waited-for copy, an
        allocator call) returned as it began, within SYNC_BEFORE_NS before to SYNC_AFTER_NS
        after (not past its end), and that call."""
        ev = self.ev
        syncs = np.concatenate(
            [
                self.rows_of[HostActivity.H2D_COPY],
                self.rows_of[HostActivity.HOST_SYNC],
                self.rows_of[HostActivity.ALLOCATOR],
            ]
        )
        syncs = syncs[ev.kind[syncs] == Kind.RUNTIME]
        r0, r1 = self.start, self.end
        if not (syncs.size and r0.size):
            return np.zeros(r0.size, dtype=np.bool_), self.none()
        ends = ev.end_ns[syncs]
        order = np.argsort(ends, kind="stable")
        syncs, ends = syncs[order], ends[order]
        i = np.minimum(np.searchsorted(ends, r0 - SYNC_BEFORE_NS, side="left"), ends.size - 1)
        hit = (ends[i] >= r0 - SYNC_BEFORE_NS) & (ends[i] <= np.minimum(r0 + SYNC_AFTER_NS, r1))
        refill = self._refill(ends, r0, r1, ~hit)
        i = np.where(refill >= 0, refill, i)
        hit |= refill >= 0
        # A call much shorter than the piece never owns it: a sync that waited W could have let
        # the host do at most about W of its own work earlier, while the device still ran; a
        # piece far longer than that is the host's own work (or silence), for the later rules.
        waited = ev.dur_ns[syncs[i]]
        hit &= (r1 - r0) <= np.maximum(LONG_HOST_GAP_NS, SYNC_OWNS_RATIO * waited)
        return hit, syncs[i]

    def _refill(
        self,
        ends: NDArray[np.int64],
        r0: NDArray[np.int64],
        r1: NDArray[np.int64],
        todo: NDArray[np.bool_],
    ) -> NDArray[np.int64]:
        """Per piece: the sync (its position in ``ends``, the syncs' ends, sorted) whose emptied
        queue the host is refilling, -1 when none. The queue stays empty until the host refills
        it: a piece after a sync that returned earlier, with at most SYNC_BEFORE_NS of device
        work since (the tiny kernel the host launched first, ``running += loss.item()``), is that
        refill when it is the host's ordinary way to the next launch: longer than SHORT_GAP_NS
        (a shorter one is one launch's cost, launch overhead whatever came before it); no longer
        than the device work since the sync before (what a host not made to wait could have run
        ahead of: a host slower than its device idles it with or without the sync); and with no
        op or Python frame begun after the sync covering half of it (that is what the host was
        doing, for the later rules)."""
        j = np.searchsorted(ends, r0, side="right") - 1
        k = np.flatnonzero(todo & (j >= 0) & (r1 - r0 > SHORT_GAP_NS))
        refill = np.full(r0.size, -1, dtype=np.int64)
        if k.size == 0:
            return refill
        since, length = ends[j[k]], (r1 - r0)[k]
        before = np.where(j[k] > 0, ends[np.maximum(j[k] - 1, 0)], since - (1 << 50))
        ok = covered_ns(self.busy, since, r0[k]) <= SYNC_BEFORE_NS
        ok &= length <= covered_ns(self.busy, before, since)
        ev, mid = self.ev, (r0[k] + r1[k]) // 2
        for kind in (Kind.CPU_OP, Kind.PYTHON):
            rows = self.thread_rows[self.thread_kind == kind]
            at = innermost_at(ev.start_ns, ev.end_ns, rows, mid)
            safe = np.maximum(at, 0)
            inside = np.minimum(ev.end_ns[safe], r1[k]) - np.maximum(ev.start_ns[safe], r0[k])
            ok &= ~((at >= 0) & (ev.start_ns[safe] >= since) & (2 * inside >= length))
        refill[k[ok]] = j[k[ok]]
        return refill

    @cached_property
    def migration_after(self) -> NDArray[np.bool_]:
        """Per piece: the work after it is an on-demand unified-memory migration, which nothing
        launched (see :func:`on_demand_migration`)."""
        after = self.after_row
        found = on_demand_migration(self.host.trace, np.maximum(after, 0))
        return found & (after >= 0)

    @cached_property
    def host_op(self) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
        """Per undecided piece: the innermost CPU op of the thread at its middle (-1: none), and
        whether that op covers half the piece or more and launches no device work."""
        ev = self.ev
        todo = np.flatnonzero(self.undecided)
        op_row = self.none()
        pure_cpu = np.zeros(self.start.size, dtype=np.bool_)
        t0, t1 = self.start[todo], self.end[todo]
        ops = self.thread_rows[self.thread_kind == Kind.CPU_OP]
        op_row[todo] = innermost_at(ev.start_ns, ev.end_ns, ops, (t0 + t1) // 2)
        safe = np.maximum(op_row[todo], 0)
        inside = np.minimum(ev.end_ns[safe], t1) - np.maximum(ev.start_ns[safe], t0)
        launches = self.thread_rows[self.thread_activity == HostActivity.LAUNCH]
        launch_starts = ev.start_ns[launches]
        launched = np.searchsorted(launch_starts, ev.end_ns[safe], side="right") - np.searchsorted(
            launch_starts, ev.start_ns[safe], side="left"
        )
        pure_cpu[todo] = (op_row[todo] >= 0) & (2 * inside >= t1 - t0) & (launched == 0)
        return op_row, pure_cpu


Rule = Callable[[GapContext], Evidence | None]


def sync_was_an_allocator_call(ctx: GapContext) -> Evidence | None:
    """``cudaFree`` (and ``cudaMalloc`` when the pool is empty) synchronises the device: when it
    returns just as the gap begins, the allocator emptied the queue and the host then went on
    with its own work before launching again."""
    hit, row = ctx.sync_return
    return Evidence(hit & (ctx.host.activity[row] == HostActivity.ALLOCATOR), row)


def sync_was_a_copy(ctx: GapContext) -> Evidence | None:
    """A host-to-device copy the host waits for (pageable memory, or a synchronous
    ``cudaMemcpy``) returns when the device has drained up to it: the same shape as a sync."""
    hit, row = ctx.sync_return
    return Evidence(hit & (ctx.host.activity[row] == HostActivity.H2D_COPY), row)


def sync_returned(ctx: GapContext) -> Evidence | None:
    """A synchronisation (``cudaStreamSynchronize``, ``cudaDeviceSynchronize``, an event sync:
    ``.item()``, ``.cpu()``) returns only once the queue is empty, so the device idles from then
    until the host, which could not run ahead, launches again."""
    hit, row = ctx.sync_return
    return Evidence(hit, row)


def fault_service(ctx: GapContext) -> Evidence | None:
    """The faulting thread stalls while the UVM driver services a page fault: it finds the page,
    unmaps it where it lives, copies it (and a neighbourhood) and maps it where it was touched. A
    gap of at most SHORT_GAP_NS before an on-demand migration is that service, between the fault
    and the copy or between the copies of one fault. A longer gap before one is whatever the
    thread did before touching the page, for the later rules (the host computing, or unknown)."""
    return Evidence(ctx.migration_after & (ctx.length <= SHORT_GAP_NS), ctx.none())


def waited_for_a_peer(ctx: GapContext) -> Evidence | None:
    """The work after the gap was already queued and is a collective: the device was not
    waiting for this host but for the other ranks to join (NCCL kernels start together)."""
    comm_after = ctx.after_class == WorkClass.COMMUNICATION
    return Evidence(ctx.queued & comm_after, ctx.launcher)


def queued_launch_latency(ctx: GapContext) -> Evidence | None:
    """A bubble of at most SHORT_GAP_NS between kernels that were already queued is the
    device's own launch latency (a few µs per kernel from queue to start)."""
    return Evidence(ctx.queued & (ctx.length <= SHORT_GAP_NS), ctx.launcher)


def queued_dependency(ctx: GapContext) -> Evidence | None:
    """Longer idle time before queued work is a dependency the trace does not show (an event
    on another stream, another process): reported as unknown rather than guessed."""
    return Evidence(ctx.queued, ctx.launcher)


def garbage_collection(ctx: GapContext) -> Evidence | None:
    """``gc.collect()`` walks every tracked Python object (a second or more with a large model's
    objects alive) and launches nothing while it runs. Python frames (``with_stack``) of the
    collector, which PyTorch's tracer names ``<built-in function collect>``, covering half the
    piece or more: the host was collecting garbage. The location is the user's frame around it."""
    names = ctx.host.trace.names
    if _COLLECTOR not in names:
        return None
    frames = ctx.thread_rows[ctx.thread_kind == Kind.PYTHON]
    ids = ctx.ev.name_id[frames]
    used = distinct(ids)
    collector = np.zeros(len(names), dtype=np.bool_)
    collector[used] = [names[i] == _COLLECTOR for i in used.tolist()]
    collecting = frames[collector[ids]]
    if not collecting.size:
        return None
    todo = np.flatnonzero(ctx.undecided)
    cover = np.zeros(ctx.start.size, dtype=np.int64)
    cover[todo] = covered_ns(ctx.host.intervals(collecting), ctx.start[todo], ctx.end[todo])
    return Evidence(2 * cover >= ctx.length, ctx.none())


_COLLECTOR = "<built-in function collect>"  # gc.collect, as PyTorch's Python tracer names it


def short_gap(ctx: GapContext) -> Evidence | None:
    """Up to SHORT_GAP_NS with nothing blocking the host is the time to get the next kernel
    out (dispatch, argument checks, the launch call): the host cannot launch fast enough. Not
    before a migration the driver started: nothing was launched."""
    return Evidence((ctx.length <= SHORT_GAP_NS) & ~ctx.migration_after, ctx.launcher)


def cpu_op_without_launches(ctx: GapContext) -> Evidence | None:
    """A CPU op that covers half the piece or more and launches no device work (an optimizer
    step on the CPU, host preprocessing) kept the host from launching: the host's own work."""
    op_row, pure_cpu = ctx.host_op
    return Evidence(pure_cpu, op_row)


def host_code_between_launches(ctx: GapContext) -> Evidence | None:
    """Python and framework code on its way to the next launch, up to LONG_HOST_GAP_NS, is the
    cost of launching from Python (not before a migration: nothing was launched)."""
    return Evidence((ctx.length <= LONG_HOST_GAP_NS) & ~ctx.migration_after, ctx.launcher)


def inside_a_cpu_op(ctx: GapContext) -> Evidence | None:
    """Longer than that inside a CPU op (even one that launches, later): the host's own work."""
    op_row, _ = ctx.host_op
    return Evidence(op_row >= 0, op_row)


def python_frames(ctx: GapContext) -> Evidence | None:
    """Python frames (``with_stack``) covering half the piece or more, with no op: user code
    running on the host, not waiting for anything the trace records. The piece belongs to the
    deepest frame that covers half of it or more: the most specific code that holds most of the
    time (the preprocessing function, not the pipeline call around it, nor one of the hundred
    short calls inside it)."""
    frames = ctx.thread_rows[ctx.thread_kind == Kind.PYTHON]
    if not frames.size:
        return None
    todo = np.flatnonzero(ctx.undecided)
    py_cover = np.zeros(ctx.start.size, dtype=np.int64)
    py_cover[todo] = covered_ns(ctx.host.intervals(frames), ctx.start[todo], ctx.end[todo])
    explains = 2 * py_cover >= ctx.length
    return Evidence(explains, _deepest_covering(ctx, frames, explains))


def _deepest_covering(
    ctx: GapContext, rows: NDArray[np.int64], pieces: NDArray[np.bool_]
) -> NDArray[np.int64]:
    """Per piece (of ``pieces`` longer than LONG_HOST_GAP_NS: the few that matter), the
    latest-starting of ``rows`` (nested frames: the deepest) overlapping half of it or more;
    -1 for the others."""
    ev = ctx.ev
    found = ctx.none()
    starts, ends = ev.start_ns[rows], ev.end_ns[rows]
    for i in np.flatnonzero(pieces & (ctx.length > LONG_HOST_GAP_NS)).tolist():
        a, b = int(ctx.start[i]), int(ctx.end[i])
        upto = int(np.searchsorted(starts, b, side="left"))
        overlap = np.minimum(ends[:upto], b) - np.maximum(starts[:upto], a)
        holding = np.flatnonzero(2 * overlap >= b - a)
        if holding.size:
            found[i] = rows[int(holding[-1])]
    return found


def thread_on_a_cpu(ctx: GapContext) -> Evidence | None:
    """Where the trace records when the thread was on a CPU (:attr:`Kind.HOST_RUNNING`: the OS
    scheduling trace or CPU samples of Nsight Systems), a thread that spent most of a device-idle
    piece on a CPU outside any CUDA call was doing its own work (a CPU loop, preprocessing,
    verification): ``cpu_other``. Where nothing records the thread this says nothing, and the
    piece stays ``unknown``; a thread off the CPU was waiting on something the trace does not
    name."""
    running = ctx.thread_rows[ctx.thread_kind == Kind.HOST_RUNNING]
    if not running.size:
        return None
    todo = np.flatnonzero(ctx.undecided)
    t0, t1 = ctx.start[todo], ctx.end[todo]
    calls = ctx.thread_rows[ctx.thread_kind == Kind.RUNTIME]
    on_cpu = covered_ns(ctx.host.intervals(running), t0, t1)
    in_calls = covered_ns(ctx.host.intervals(calls), t0, t1)
    computing = np.zeros(ctx.start.size, dtype=np.bool_)
    computing[todo] = 2 * (on_cpu - in_calls) >= t1 - t0
    return Evidence(computing, ctx.none())


#: Blocking host activities claim the idle time they overlap, in this order (a stretch covered
#: by two goes to the first): a checkpoint or the data loader holds the step for its whole
#: length and may sync or copy inside (the sync is then a symptom, the save or the batch the
#: cause); a collective waited for on the host is a peer's lateness; allocator calls and waited
#: for copies synchronise as part of their own work; a bare sync comes last.
CLAIMS: tuple[tuple[HostActivity, Cause], ...] = (
    (HostActivity.CHECKPOINT, "checkpoint"),
    (HostActivity.DATA_LOADER, "data_loader"),
    (HostActivity.COMM_WAIT, "communication_wait"),
    (HostActivity.ALLOCATOR, "allocator"),
    (HostActivity.H2D_COPY, "h2d_copy"),
    (HostActivity.HOST_SYNC, "host_sync"),
)

#: The rules for what the claims leave, in order; the first that explains a piece decides it.
#: Why this order: a sync that returned as the piece began is direct evidence of what emptied
#: the queue (most specific call first); then a short gap before a migration the driver started
#: (fault service, not the host); then whether the next work was already queued, which
#: rules out the host as the cause whatever its length; then the garbage collector, whose frames
#: name what the host did whatever the length; then length alone (a short gap is launch
#: overhead); then what the host was running, most specific first (an op that launches nothing,
#: host code of ordinary length, any op, Python frames, the thread recorded on a CPU). Nothing
#: left: ``unknown``.
RULES: tuple[tuple[Cause, Rule], ...] = (
    ("allocator", sync_was_an_allocator_call),
    ("h2d_copy", sync_was_a_copy),
    ("host_sync", sync_returned),
    ("page_migration", fault_service),
    ("communication_wait", waited_for_a_peer),
    ("launch_overhead", queued_launch_latency),
    (UNKNOWN, queued_dependency),
    ("gc_collect", garbage_collection),
    ("launch_overhead", short_gap),
    ("cpu_other", cpu_op_without_launches),
    ("launch_overhead", host_code_between_launches),
    ("cpu_other", inside_a_cpu_op),
    ("cpu_other", python_frames),
    ("cpu_other", thread_on_a_cpu),
)

#: Idle causes no rule above gives, and where they come from.
PRODUCED_ELSEWHERE: dict[Cause, str] = {
    WARMUP: "claim_startup: idle time inside one-time start-up phases (analyses.phases)",
    UNKNOWN: "_explain: what no rule explains",
}
_NAMED = {c for _, c in CLAIMS} | {c for c, _ in RULES} | set(PRODUCED_ELSEWHERE)
if not set(CAUSES) >= _NAMED:  # a typo, or a rule whose row is missing: fail on import
    raise ValueError(f"idle causes with no row in data/causes.csv: {sorted(_NAMED - set(CAUSES))}")


def _segments(
    start: NDArray[np.int64], end: NDArray[np.int64], c: Cause, decider: NDArray[np.int64]
) -> _Segments:
    return _Segments(start, end, np.full(start.size, _CODE[c], dtype=np.uint8), decider)


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
        if CAUSES[code] == UNKNOWN:
            continue
        members = np.flatnonzero(cause == code)
        chosen.append(longest(members, length[members], LOCATIONS_RESOLVED * 4))
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
