"""Many GPUs: the ranks of one job side by side, clocks aligned on collectives, who waits for whom.

Contract: :func:`analyse_ranks` is pure. It takes one :class:`Participant` per rank's device (the
figures the per-device analyses already computed) and returns a :class:`RankAnalysis`:

* **Collectives** are the communication kernels of each device (:func:`collectives`). Each belongs
  to a process group: the ``Process Group Name`` its args (or its ``record_param_comms`` op's)
  recorded, else the communication stream it ran on, by order of first use. The n-th collective
  of a group on one rank is matched with the n-th of that group on every other rank.
* **Clocks**: a collective ends at nearly the same instant on every rank (it cannot finish before
  the last rank joins, and then all finish together), so each rank's clock offset from the lowest
  rank is the median difference of matched collective end times. ``None``: nothing to align on.
* **Waiting**: the last rank to start a collective (after alignment) is its *last arrival*; every
  other rank waits inside the collective for ``its duration - the last arrival's duration``. The
  part of that wait with no compute running alongside is *exposed wait*: device time lost.
* **Stragglers**: a rank that arrives last at half or more of the collectives it shares, by more
  than :data:`STRAGGLER_MIN_LATE_NS` on average, more often than chance would make it (binomial
  tail under "every rank equally likely" at most :data:`STRAGGLER_MAX_CHANCE`, or last at every
  one of two or more). Only *contested* collectives count (some rank waited in them at least
  :data:`CONTESTED_WAIT_NS`): in the others who came last is clock noise. For each, what it
  was doing while the others waited (kernels and idle causes inside those windows, on its own
  clock).
* **Bandwidth**: per kind of collective, message bytes (``In/Out msg nelems`` x ``dtype`` when
  recorded) over the transfer time (the last arrival's duration, which holds no waiting): the
  algorithm bandwidth, and the bus bandwidth NCCL reports (x 2(n-1)/n for all-reduce, x (n-1)/n
  for all-gather / reduce-scatter / all-to-all), against the link's peak per direction (half the
  facts table's bidirectional ``interconnect_bytes_per_s``).
* **Exposure**: per profiler step, communication and exposed communication time, and which
  collectives run fully exposed or are small enough for their fixed cost to dominate.

When only some ranks of a job are present, the analysis covers what is there and says so in
``notes``; with one rank there is no matching, so waits and stragglers are ``None`` / empty and
bandwidth figures include any waiting (a lower bound).
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope.analyses.attribution import CAUSES, IdleAttribution
from gpuscope.analyses.host import HostIndex
from gpuscope.analyses.intervals import Intervals, covered_ns, difference, union
from gpuscope.analyses.timeline import (
    DeviceWork,
    Overlap,
    StepStat,
    TemporalBreakdown,
    WorkClass,
)
from gpuscope.classify import NamePattern
from gpuscope.facts import GpuFacts
from gpuscope.model import Kind

I64 = NDArray[np.int64]

#: A straggler arrives last at this share of its collectives or more...
STRAGGLER_MIN_SHARE = 0.5
#: ... by more than this on average (host jitter between ranks is tens of µs)...
STRAGGLER_MIN_LATE_NS = 50_000
#: ... and that often by chance (each rank equally likely to be last) only with this probability.
STRAGGLER_MAX_CHANCE = 0.1
#: A collective where some rank waited this long has a meaningful last arrival.
CONTESTED_WAIT_NS = 10_000
#: A collective this exposed (share of its duration with no compute) is "fully exposed".
FULLY_EXPOSED_SHARE = 0.9
#: Collectives moving less than this, or lasting less than SMALL_COLLECTIVE_NS when sizes are not
#: recorded, are dominated by their fixed cost: merging them saves most of it.
SMALL_MESSAGE_BYTES = 1 << 20
SMALL_COLLECTIVE_NS = 50_000

_KINDS: tuple[tuple[str, NamePattern], ...] = (
    ("reduce_scatter", NamePattern(r"reduce_?scatter")),
    ("all_reduce", NamePattern(r"all_?reduce")),
    ("all_gather", NamePattern(r"all_?gather")),
    ("all_to_all", NamePattern(r"all_?to_?all")),
    ("send_recv", NamePattern(r"send_?recv|\bsend\b|\brecv\b|p2p")),
    ("broadcast", NamePattern(r"broadcast|bcast")),
    ("barrier", NamePattern(r"barrier")),
    ("reduce", NamePattern(r"reduce")),
)
_ELEMENT_BYTES = {
    "double": 8,
    "float64": 8,
    "float": 4,
    "float32": 4,
    "int": 4,
    "int32": 4,
    "long": 8,
    "int64": 8,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "short": 2,
    "int16": 2,
    "byte": 1,
    "char": 1,
    "bool": 1,
    "uint8": 1,
    "int8": 1,
}
_NO_ARGS: dict[str, Any] = {}


# --- inputs -------------------------------------------------------------------------------------


class Participant(msgspec.Struct, frozen=True):
    """One rank's device, with what the per-device analyses found on it."""

    rank: int
    device: int
    source: str
    world_size: int | None
    work: DeviceWork
    temporal: TemporalBreakdown
    overlap: Overlap
    steps: list[StepStat] = msgspec.field(default_factory=list)
    idle: IdleAttribution | None = None
    host: HostIndex | None = None
    facts: GpuFacts | None = None


# --- collectives of one device ------------------------------------------------------------------


class CollectiveTable(msgspec.Struct, frozen=True):
    """The communication kernels of one device, in start order, one entry per kernel."""

    rows: I64  # rows of the trace's events
    group: list[str]
    index: I64  # the n-th collective of its group on this device
    kind: list[str]
    start_ns: I64
    end_ns: I64
    message_bytes: I64  # -1: not recorded
    group_size: I64  # -1: not recorded

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    @property
    def dur_ns(self) -> I64:
        return self.end_ns - self.start_ns


def collective_kind(name: str) -> str:
    """``all_reduce``, ``all_gather``, ... from a collective's recorded name or its kernel's."""
    for kind, pattern in _KINDS:
        if pattern.search(name):
            return kind
    return "other"


def bus_factor(kind: str, ranks: int) -> float | None:
    """NCCL's bus-bandwidth factor: what each rank's link carries per byte of message."""
    if ranks < 1:
        return None
    if kind == "all_reduce":
        return 2.0 * (ranks - 1) / ranks
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (ranks - 1) / ranks
    if kind in ("broadcast", "reduce", "send_recv"):
        return 1.0
    return None


def _message_bytes(args: dict[str, Any]) -> int:
    nelems = [args.get("in_msg_nelems"), args.get("out_msg_nelems")]
    known = [n for n in nelems if isinstance(n, int) and n >= 0]
    dtype = str(args.get("dtype") or "").lower().removeprefix("c10::").removeprefix("torch.")
    element = _ELEMENT_BYTES.get(dtype, 1 if dtype.startswith("float8") else 0)
    if not known or not element:
        return -1
    return max(known) * element


def _group_size(args: dict[str, Any]) -> int:
    size = args.get("group_size")
    return size if isinstance(size, int) else -1


def collectives(work: DeviceWork) -> CollectiveTable:
    """The device's communication kernels with their group, kind and message size."""
    trace = work.trace
    ev = trace.events
    rows = work.rows[work.work_class == WorkClass.COMMUNICATION]
    rows = rows[ev.kind[rows] == Kind.KERNEL]
    op_args = _collective_op_args(work)
    streams = ev.stream[rows].tolist()
    # A group named by its stream: the n-th communication stream, by order of first use.
    stream_group = {s: f"stream#{i}" for i, s in enumerate(dict.fromkeys(streams))}
    extra, names = ev.extra, trace.names
    if extra or op_args:
        externals = ev.external_id[rows].tolist()
        args = [
            extra.get(row) or op_args.get(external) or _NO_ARGS
            for row, external in zip(rows.tolist(), externals, strict=True)
        ]
    else:  # nothing recorded (Nsight Systems, many Kineto traces): no lookups per kernel
        args = [_NO_ARGS] * len(streams)
    groups = [
        f"pg:{a['process_group']}" if a.get("process_group") is not None else stream_group[s]
        for a, s in zip(args, streams, strict=True)
    ]
    index: list[int] = []
    seen: dict[str, int] = {}
    for group in groups:
        n = seen.get(group, 0)
        index.append(n)
        seen[group] = n + 1
    # A job has thousands of collectives and a few names: each name is matched once.
    kind_of: dict[str, str] = {}
    kinds: list[str] = []
    for a, name_id in zip(args, ev.name_id[rows].tolist(), strict=True):
        recorded = a.get("collective_name")
        name = str(recorded) if recorded else names[name_id]
        kind = kind_of.get(name)
        if kind is None:
            kind = kind_of[name] = collective_kind(name)
        kinds.append(kind)
    sizes = [_message_bytes(a) if a else -1 for a in args]
    group_sizes = [_group_size(a) for a in args]
    return CollectiveTable(
        rows=rows.astype(np.int64),
        group=groups,
        index=np.array(index, dtype=np.int64),
        kind=kinds,
        start_ns=ev.start_ns[rows],
        end_ns=ev.end_ns[rows],
        message_bytes=np.array(sizes, dtype=np.int64),
        group_size=np.array(group_sizes, dtype=np.int64),
    )


def _collective_op_args(work: DeviceWork) -> dict[int, dict[str, Any]]:
    """``record_param_comms`` (and other host ops) with collective args, by External id."""
    ev = work.trace.events
    found: dict[int, dict[str, Any]] = {}
    for row, args in ev.extra.items():
        if "collective_name" in args and ev.kind[row] == Kind.CPU_OP and ev.external_id[row] >= 0:
            found[int(ev.external_id[row])] = args
    return found


# --- results ------------------------------------------------------------------------------------


class StepCommunication(msgspec.Struct, frozen=True):
    """Communication inside one profiler step of one device."""

    name: str
    number: int
    dur_ns: int
    communication_ns: int
    exposed_ns: int
    collectives: int


class RankStat(msgspec.Struct, frozen=True):
    rank: int
    device: int
    source: str
    clock_offset_ns: int | None  # this rank's clock minus the reference rank's; None: not aligned
    span_ns: int
    busy_ns: int
    idle_ns: int
    compute_ns: int
    communication_ns: int
    exposed_communication_ns: int
    collectives: int
    collective_wait_ns: int | None  # waiting inside collectives for the last peer; None: 1 rank
    exposed_wait_ns: int | None  # the part of that wait with no compute alongside
    last_arrivals: int
    steps: list[StepCommunication]

    @property
    def busy_pct(self) -> float:
        return 100.0 * self.busy_ns / self.span_ns if self.span_ns else float("nan")


class StragglerStat(msgspec.Struct, frozen=True):
    rank: int
    device: int
    last_arrivals: int
    shared: int  # contested collectives it took part in (some rank waited in them)
    mean_late_ns: float  # after the next-slowest rank, when it arrived last
    max_late_ns: int
    caused_wait_ns: int  # other ranks' wait inside the collectives it arrived last at
    caused_exposed_wait_ns: int
    window_ns: int  # its own time between the next-slowest rank's arrival and its own
    busy_in_window_ns: int
    top_kernels: list[tuple[str, int]]  # (name, ns inside those windows), largest first
    idle_causes: list[tuple[str, int]]  # (cause, ns inside those windows)

    @property
    def share_pct(self) -> float:
        return 100.0 * self.last_arrivals / self.shared if self.shared else 0.0


class GroupStat(msgspec.Struct, frozen=True):
    name: str  # "pg:0" or "stream#0" (the n-th communication stream, when no group is recorded)
    kinds: list[str]
    ranks: list[int]
    matched: int  # collectives matched on every rank of the group
    recorded: list[int]  # collectives recorded per rank, in ``ranks`` order


class BandwidthStat(msgspec.Struct, frozen=True):
    kind: str
    ranks: int  # group size used for the bus factor
    collectives: int  # with a recorded message size
    message_bytes: int
    transfer_ns: int
    algorithm_bytes_per_s: float
    bus_bytes_per_s: float | None
    peak_bytes_per_s: float | None  # the link's peak per direction
    includes_wait: bool  # durations from one rank only: waiting included, a lower bound

    @property
    def bus_pct_of_peak(self) -> float | None:
        if self.bus_bytes_per_s is None or not self.peak_bytes_per_s:
            return None
        return 100.0 * self.bus_bytes_per_s / self.peak_bytes_per_s


class ExposureSummary(msgspec.Struct, frozen=True):
    """Communication with nothing to hide it, summed over the ranks present, and why."""

    steps: list[StepCommunication]  # mean over ranks, per step number
    communication_ns: int
    exposed_ns: int
    collectives: int
    fully_exposed: int  # collectives with >= FULLY_EXPOSED_SHARE of their time exposed
    fully_exposed_ns: int  # their exposed time less waiting for a late rank (as below)
    small: int  # collectives dominated by their fixed cost
    small_exposed_ns: int
    small_by_size: bool  # "small" judged by message size (else by duration)
    mean_message_bytes: float | None
    locations: list[tuple[str, int, int]]  # (where issued, exposed ns less waiting, collectives)


class RankAnalysis(msgspec.Struct, frozen=True):
    world_size: int | None
    present: list[int]
    missing: list[int]
    notes: list[str]
    aligned: bool
    ranks: list[RankStat]
    groups: list[GroupStat]
    matched_collectives: int
    collective_wait_ns: int | None
    exposed_wait_ns: int
    straggler_exposed_wait_ns: int
    stragglers: list[StragglerStat]
    bandwidth: list[BandwidthStat]
    bandwidth_note: str | None
    exposure: ExposureSummary

    @property
    def partial(self) -> bool:
        return bool(self.missing)

    @property
    def busiest(self) -> RankStat | None:
        return max(self.ranks, key=lambda r: r.busy_pct) if self.ranks else None

    @property
    def least_busy(self) -> RankStat | None:
        return min(self.ranks, key=lambda r: r.busy_pct) if self.ranks else None


# --- the analysis -------------------------------------------------------------------------------


class _Group(msgspec.Struct):
    name: str
    members: list[int]  # participant positions
    count: int
    positions: I64  # (members, count): rows of each member's CollectiveTable
    start_ns: I64  # (members, count), own clocks
    end_ns: I64


def analyse_ranks(participants: list[Participant]) -> RankAnalysis:
    tables = [collectives(p.work) for p in participants]
    groups, group_stats, notes = _match(participants, tables)
    offsets = _clock_offsets(len(participants), groups)
    waits, contested, last_counts, late = _waits(participants, tables, groups, offsets)
    exposed_waits = [
        _exposed_wait(p, t, w) for p, t, w in zip(participants, tables, waits, strict=True)
    ]
    stragglers = _stragglers(participants, groups, waits, exposed_waits, contested, late)
    straggler_exposed = sum(s.caused_exposed_wait_ns for s in stragglers)
    multi = len(participants) > 1
    if not multi:
        offsets = [None]  # one clock: nothing to align it with
    ranks = [
        _rank_stat(p, t, offsets[i], waits[i] if multi else None, exposed_waits[i], last_counts[i])
        for i, (p, t) in enumerate(zip(participants, tables, strict=True))
    ]
    present, missing, presence_notes = _presence(participants)
    bandwidth, bandwidth_note = _bandwidth(participants, tables, groups)
    return RankAnalysis(
        world_size=max((p.world_size or 0 for p in participants), default=0) or None,
        present=present,
        missing=missing,
        notes=presence_notes + notes,
        aligned=any(o is not None for o in offsets[1:]) if multi else False,
        ranks=ranks,
        groups=group_stats,
        matched_collectives=sum(g.count for g in groups if len(g.members) > 1),
        collective_wait_ns=int(sum(int(w.sum()) for w in waits)) if multi else None,
        exposed_wait_ns=int(sum(int(e.sum()) for e in exposed_waits)),
        straggler_exposed_wait_ns=straggler_exposed,
        stragglers=stragglers,
        bandwidth=bandwidth,
        bandwidth_note=bandwidth_note,
        exposure=_exposure(participants, tables, ranks, exposed_waits),
    )


def _presence(participants: list[Participant]) -> tuple[list[int], list[int], list[str]]:
    present = sorted({p.rank for p in participants})
    world = max((p.world_size or 0 for p in participants), default=0)
    missing = [r for r in range(world) if r not in set(present)] if world else []
    notes: list[str] = []
    if missing:
        shown = ", ".join(map(str, present[:8])) + (", ..." if len(present) > 8 else "")
        notes.append(
            f"only {len(present)} of {world} ranks present (rank {shown}): figures cover those"
            " ranks; who waits for whom needs every rank's trace"
        )
    if len(present) < len(participants):
        notes.append("several traces claim the same rank: each is analysed as its own participant")
    return present, missing, notes


def _match(
    participants: list[Participant], tables: list[CollectiveTable]
) -> tuple[list[_Group], list[GroupStat], list[str]]:
    """The n-th collective of each group, matched across the participants that have the group."""
    names = list(dict.fromkeys(g for t in tables for g in t.group))
    groups: list[_Group] = []
    stats: list[GroupStat] = []
    notes: list[str] = []
    for name in names:
        members = [i for i, t in enumerate(tables) if name in t.group]
        picks = [np.flatnonzero(np.array(tables[i].group) == name) for i in members]
        counts = [int(p.size) for p in picks]
        count = min(counts)
        positions = np.array([p[:count] for p in picks], dtype=np.int64).reshape(
            len(members), count
        )
        start = np.array([tables[m].start_ns[p] for m, p in zip(members, positions, strict=True)])
        end = np.array([tables[m].end_ns[p] for m, p in zip(members, positions, strict=True)])
        kinds = sorted(
            {tables[m].kind[j] for m, p in zip(members, positions, strict=True) for j in p.tolist()}
        )
        groups.append(
            _Group(
                name,
                members,
                count,
                positions,
                start.reshape(positions.shape),
                end.reshape(positions.shape),
            )
        )
        ranks = [participants[m].rank for m in members]
        stats.append(GroupStat(name, kinds, ranks, count, counts))
        if len(set(counts)) > 1:
            notes.append(
                f"group {name}: ranks recorded {min(counts)} to {max(counts)} collectives; the"
                f" first {count} of each are matched (profiling windows may differ)"
            )
    return groups, stats, notes


def _clock_offsets(n: int, groups: list[_Group]) -> list[int | None]:
    """Each participant's clock minus participant 0's: the median gap of matched collective ends.

    A participant that shares no collective with participant 0 is aligned through any participant
    already aligned (one pass per participant at most)."""
    offsets: list[int | None] = [None] * n
    if n == 0:
        return offsets
    offsets[0] = 0
    for _ in range(n):
        changed = False
        for g in groups:
            known = [k for k, m in enumerate(g.members) if offsets[m] is not None]
            if not known or g.count == 0:
                continue
            ref = known[0]
            ref_offset = offsets[g.members[ref]]
            assert ref_offset is not None
            for k, m in enumerate(g.members):
                if offsets[m] is None:
                    offsets[m] = ref_offset + int(np.median(g.end_ns[k] - g.end_ns[ref]))
                    changed = True
        if not changed:
            break
    return offsets


def _aligned_starts(g: _Group, offsets: list[int | None]) -> I64:
    shift = np.array([offsets[m] or 0 for m in g.members], dtype=np.int64)
    return g.start_ns - shift[:, None]


def _waits(
    participants: list[Participant],
    tables: list[CollectiveTable],
    groups: list[_Group],
    offsets: list[int | None],
) -> tuple[list[I64], list[int], list[int], list[list[tuple[int, int, int]]]]:
    """Per participant: wait per collective (table order), contested collectives it took part
    in, its last arrivals at them, and those collectives as (group index, n, ns after the
    next-slowest). A collective is contested when some rank waited :data:`CONTESTED_WAIT_NS` or
    more: when none did (a collective queued behind the one before it starts on every rank as
    that one ends) who came "last" is clock noise."""
    waits = [np.zeros(len(t), dtype=np.int64) for t in tables]
    contested = [0] * len(participants)
    last_counts = [0] * len(participants)
    late: list[list[tuple[int, int, int]]] = [[] for _ in participants]
    for gi, g in enumerate(groups):
        if len(g.members) < 2 or g.count == 0:
            continue
        last, wait, margin, counted = _group_waits(g, offsets)
        for k, m in enumerate(g.members):
            waits[m][g.positions[k]] = wait[k]
            contested[m] += int(counted.sum())
            mine = np.flatnonzero((last == k) & counted)
            last_counts[m] += int(mine.size)
            late[m].extend((gi, int(n), int(margin[n])) for n in mine.tolist())
    return waits, contested, last_counts, late


def _group_waits(g: _Group, offsets: list[int | None]) -> tuple[I64, I64, I64, NDArray[np.bool_]]:
    """Per collective of a matched group: which member arrived last, each member's wait (its
    duration beyond the last arrival's), the last arrival's margin over the next-to-last, and
    whether the collective was contested (some member waited ``CONTESTED_WAIT_NS`` or more)."""
    starts = _aligned_starts(g, offsets)
    durations = g.end_ns - g.start_ns
    last = np.argmax(starts, axis=0)
    wait = np.maximum(durations - durations[last, np.arange(g.count)], 0)
    ordered = np.sort(starts, axis=0)
    margin = ordered[-1] - ordered[-2]
    return last, wait, margin, wait.max(axis=0) >= CONTESTED_WAIT_NS


def _exposed_wait(p: Participant, table: CollectiveTable, wait: I64) -> I64:
    """Per collective, the part of its wait with no compute alongside; sums to the exact union."""
    if len(table) == 0:
        return np.zeros(0, dtype=np.int64)
    compute = p.work.by_class[WorkClass.COMPUTE]
    lo, hi = table.start_ns, table.start_ns + wait
    per = wait - covered_ns(compute, lo, hi)
    exact = difference(union(lo, hi), compute).total_ns
    total = int(per.sum())
    if total > exact > 0:  # overlapping waits (several comm streams) counted once
        per = (per * (exact / total)).astype(np.int64)
    return per.astype(np.int64)


def _rank_stat(
    p: Participant,
    table: CollectiveTable,
    offset: int | None,
    wait: I64 | None,
    exposed_wait: I64,
    last_arrivals: int,
) -> RankStat:
    t = p.temporal
    return RankStat(
        rank=p.rank,
        device=p.device,
        source=p.work.trace.source,
        clock_offset_ns=offset,
        span_ns=t.span_ns,
        busy_ns=t.busy_ns,
        idle_ns=t.idle_ns,
        compute_ns=t.compute_ns,
        communication_ns=t.communication_ns,
        exposed_communication_ns=p.overlap.exposed_ns,
        collectives=len(table),
        collective_wait_ns=None if wait is None else int(wait.sum()),
        exposed_wait_ns=None if wait is None else int(exposed_wait.sum()),
        last_arrivals=last_arrivals,
        steps=step_communication(p.work, p.steps, table),
    )


def step_communication(
    work: DeviceWork, steps: list[StepStat], table: CollectiveTable | None = None
) -> list[StepCommunication]:
    """Communication and exposed communication inside each profiler step's device window."""
    if not steps:
        return []
    table = table if table is not None else collectives(work)
    lo = np.array([s.start_ns for s in steps], dtype=np.int64)
    hi = np.array([s.end_ns for s in steps], dtype=np.int64)
    comm = work.by_class[WorkClass.COMMUNICATION]
    exposed = difference(comm, work.by_class[WorkClass.COMPUTE])
    in_comm, in_exposed = covered_ns(comm, lo, hi), covered_ns(exposed, lo, hi)
    first = np.searchsorted(table.start_ns, lo, side="left")
    after = np.searchsorted(table.start_ns, hi, side="left")
    return [
        StepCommunication(
            s.name,
            s.number,
            s.dur_ns,
            int(in_comm[i]),
            int(in_exposed[i]),
            int(after[i] - first[i]),
        )
        for i, s in enumerate(steps)
    ]


# --- stragglers ---------------------------------------------------------------------------------


def _stragglers(
    participants: list[Participant],
    groups: list[_Group],
    waits: list[I64],
    exposed: list[I64],
    shared: list[int],
    late: list[list[tuple[int, int, int]]],
) -> list[StragglerStat]:
    found: list[StragglerStat] = []
    for i, p in enumerate(participants):
        arrivals = late[i]
        if not arrivals or shared[i] < 2:
            continue
        margins = np.array([a[2] for a in arrivals], dtype=np.int64)
        if margins.mean() <= STRAGGLER_MIN_LATE_NS:
            continue
        if not _unlikely_by_chance(groups, i, len(arrivals), shared[i]):
            continue
        caused, caused_exposed, windows = _caused(i, arrivals, groups, waits, exposed)
        found.append(
            _straggler_stat(p, len(arrivals), shared[i], margins, caused, caused_exposed, windows)
        )
    found.sort(key=lambda s: -s.caused_wait_ns)
    return found


def _caused(
    i: int,
    arrivals: list[tuple[int, int, int]],
    groups: list[_Group],
    waits: list[I64],
    exposed: list[I64],
) -> tuple[int, int, Intervals]:
    """The others' wait (all, exposed) in the collectives participant ``i`` arrived last at, and
    the windows, on its own clock, between the next-slowest arrival and its own."""
    caused, caused_exposed = 0, 0
    lo: list[int] = []
    hi: list[int] = []
    for gi, n, margin in arrivals:
        g = groups[gi]
        k = g.members.index(i)
        for kk, m in enumerate(g.members):
            if kk != k:
                caused += int(waits[m][g.positions[kk, n]])
                caused_exposed += int(exposed[m][g.positions[kk, n]])
        hi.append(int(g.start_ns[k, n]))
        lo.append(hi[-1] - margin)
    windows = union(np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64))
    return caused, caused_exposed, windows


def _unlikely_by_chance(groups: list[_Group], i: int, last: int, shared: int) -> bool:
    """Last at ``last`` of ``shared`` collectives: too often to be the luck of the draw?"""
    if last < STRAGGLER_MIN_SHARE * shared:
        return False
    if last == shared >= 2:  # last every time: with two ranks, no test could ask for more
        return True
    sizes = [len(g.members) for g in groups if i in g.members and len(g.members) > 1]
    p = len(sizes) / sum(sizes)  # the chance of being last, at the typical group size
    tail = sum(
        math.comb(shared, k) * p**k * (1 - p) ** (shared - k) for k in range(last, shared + 1)
    )
    return tail <= STRAGGLER_MAX_CHANCE


def _straggler_stat(
    p: Participant,
    arrivals: int,
    shared: int,
    margins: I64,
    caused: int,
    caused_exposed: int,
    windows: Intervals,
) -> StragglerStat:
    """What the straggler did while the others waited: its kernels and idle causes then."""
    work = p.work
    ev = work.trace.events
    rows = work.rows
    inside = covered_ns(windows, ev.start_ns[rows], ev.end_ns[rows])
    by_name: dict[str, int] = {}
    for row, ns in zip(rows[inside > 0].tolist(), inside[inside > 0].tolist(), strict=True):
        name = work.trace.name(row)
        by_name[name] = by_name.get(name, 0) + ns
    causes: dict[str, int] = {}
    if p.idle is not None:
        gaps = p.idle.gaps
        idle_inside = covered_ns(windows, gaps.start_ns, gaps.end_ns)
        for code, ns in zip(gaps.cause.tolist(), idle_inside.tolist(), strict=True):
            if ns > 0:
                cause = CAUSES[code].value
                causes[cause] = causes.get(cause, 0) + ns
    busy = int(covered_ns(work.busy, windows.start_ns, windows.end_ns).sum())
    return StragglerStat(
        rank=p.rank,
        device=p.device,
        last_arrivals=arrivals,
        shared=shared,
        mean_late_ns=float(margins.mean()),
        max_late_ns=int(margins.max()),
        caused_wait_ns=caused,
        caused_exposed_wait_ns=caused_exposed,
        window_ns=windows.total_ns,
        busy_in_window_ns=busy,
        top_kernels=sorted(by_name.items(), key=lambda kv: -kv[1])[:5],
        idle_causes=sorted(causes.items(), key=lambda kv: -kv[1]),
    )


# --- bandwidth ----------------------------------------------------------------------------------


def _bandwidth(
    participants: list[Participant], tables: list[CollectiveTable], groups: list[_Group]
) -> tuple[list[BandwidthStat], str | None]:
    """Per kind: recorded message bytes over the transfer time (the last arrival's duration)."""
    totals, unsized = _bandwidth_totals(participants, tables, groups)
    peak = next(
        (
            p.facts.interconnect_bytes_per_s / 2
            for p in participants
            if p.facts and p.facts.interconnect_bytes_per_s
        ),
        None,
    )
    stats: list[BandwidthStat] = []
    for (kind, ranks, alone), (count, nbytes, ns) in sorted(totals.items()):
        if ns <= 0:
            continue
        algbw = nbytes / (ns / 1e9)
        factor = bus_factor(kind, ranks)
        busbw = None if factor is None else algbw * factor
        stats.append(BandwidthStat(kind, ranks, count, nbytes, ns, algbw, busbw, peak, alone))
    note = None
    if unsized and not stats:
        note = (
            f"message sizes not recorded for {unsized} collectives (no 'In msg nelems' / 'dtype'"
            " args on the NCCL kernels or their record_param_comms ops)"
        )
    elif stats and all(s.includes_wait for s in stats):
        note = "durations from one rank include waiting for its peers: bandwidths are lower bounds"
    return stats, note


def _bandwidth_totals(
    participants: list[Participant], tables: list[CollectiveTable], groups: list[_Group]
) -> tuple[dict[tuple[str, int, bool], list[int]], int]:
    """(kind, ranks, one rank only) -> [collectives, bytes, transfer ns]; and how many collectives
    had no recorded size."""
    totals: dict[tuple[str, int, bool], list[int]] = {}
    unsized = 0
    for g in groups:
        alone = len(g.members) < 2
        durations = g.end_ns - g.start_ns
        transfer = durations[0] if alone else durations.min(axis=0)
        first = tables[g.members[0]]
        if g.count == 0:
            continue
        # The largest size any rank recorded, per collective of the group.
        sizes = np.stack(
            [tables[m].message_bytes[g.positions[k]] for k, m in enumerate(g.members)]
        ).max(axis=0)
        sized = np.flatnonzero(sizes > 0)
        unsized += g.count - int(sized.size)
        declared = participants[g.members[0]].world_size or 1
        at = g.positions[0, sized]
        recorded_sizes = first.group_size[at].tolist()
        columns = (at.tolist(), sizes[sized].tolist(), transfer[sized].tolist(), recorded_sizes)
        for position, nbytes, ns, recorded in zip(*columns, strict=True):
            ranks = recorded if recorded > 0 else max(len(g.members), declared)
            entry = totals.setdefault((first.kind[position], ranks, alone), [0, 0, 0])
            entry[0] += 1
            entry[1] += nbytes
            entry[2] += ns
    return totals, unsized


# --- exposure -----------------------------------------------------------------------------------


def _exposure(
    participants: list[Participant],
    tables: list[CollectiveTable],
    ranks: list[RankStat],
    exposed_waits: list[I64],
) -> ExposureSummary:
    """Exposure per collective, less the time it spent waiting for a late rank (reported apart):
    what overlapping or merging collectives can still gain."""
    comm = sum(p.overlap.communication_ns for p in participants)
    exposed_total = sum(p.overlap.exposed_ns for p in participants)
    fully, fully_ns, small, small_ns, count = 0, 0, 0, 0, 0
    sized = [int(b) for t in tables for b in t.message_bytes.tolist() if b > 0]
    by_size = len(sized) >= sum(len(t) for t in tables) / 2 and bool(sized)
    locations: dict[str, list[int]] = {}
    for p, t, waited in zip(participants, tables, exposed_waits, strict=True):
        if len(t) == 0:
            continue
        count += len(t)
        compute = p.work.by_class[WorkClass.COMPUTE]
        with_wait = t.dur_ns - covered_ns(compute, t.start_ns, t.end_ns)
        full = with_wait >= FULLY_EXPOSED_SHARE * np.maximum(t.dur_ns, 1)
        exposed = np.maximum(with_wait - waited, 0)
        fully += int(full.sum())
        fully_ns += int(exposed[full].sum())
        is_small = (
            (t.message_bytes >= 0) & (t.message_bytes < SMALL_MESSAGE_BYTES)
            if by_size
            else t.dur_ns < SMALL_COLLECTIVE_NS
        )
        small += int(is_small.sum())
        small_ns += int(exposed[is_small].sum())
        if p.host is not None:
            _locate(p, t, exposed, locations)
    top = sorted(locations.items(), key=lambda kv: -kv[1][0])[:5]
    return ExposureSummary(
        steps=_mean_steps(ranks),
        communication_ns=comm,
        exposed_ns=exposed_total,
        collectives=count,
        fully_exposed=fully,
        fully_exposed_ns=fully_ns,
        small=small,
        small_exposed_ns=small_ns,
        small_by_size=by_size,
        mean_message_bytes=float(np.mean(sized)) if sized else None,
        locations=[(where, v[0], v[1]) for where, v in top if v[0] > 0],
    )


def _locate(p: Participant, t: CollectiveTable, exposed: I64, into: dict[str, list[int]]) -> None:
    """Where the costliest exposed collectives were issued, in the user's code when known."""
    assert p.host is not None
    ev = p.work.trace.events
    order = np.argsort(-exposed, kind="stable")[:256]
    order = order[exposed[order] > 0]
    rows = t.rows[order]
    launcher = ev.link[rows]
    # Launched work: where its launch was issued (resolved together); else the work's own name.
    where = [p.work.trace.names[i] for i in ev.name_id[rows].tolist()]
    launched = np.flatnonzero(launcher >= 0)
    for k, location in zip(launched.tolist(), p.host.locations(launcher[launched]), strict=True):
        where[k] = location
    for w, ns in zip(where, exposed[order].tolist(), strict=True):
        entry = into.setdefault(w, [0, 0])
        entry[0] += ns
        entry[1] += 1


def _mean_steps(ranks: list[RankStat]) -> list[StepCommunication]:
    """Per step number, the mean over ranks that recorded it."""
    by_number: dict[int, list[StepCommunication]] = {}
    for r in ranks:
        for s in r.steps:
            by_number.setdefault(s.number, []).append(s)
    result: list[StepCommunication] = []
    for number in sorted(by_number):
        group = by_number[number]
        n = len(group)
        result.append(
            StepCommunication(
                name=group[0].name,
                number=number,
                dur_ns=sum(s.dur_ns for s in group) // n,
                communication_ns=sum(s.communication_ns for s in group) // n,
                exposed_ns=sum(s.exposed_ns for s in group) // n,
                collectives=round(sum(s.collectives for s in group) / n),
            )
        )
    return result


# --- what moving arrivals would save (used by the what-if replay) -----------------------------


class WaitCuts(msgspec.Struct, frozen=True):
    """Per participant: its collectives' trace rows, the waiting inside each (for the last
    arrival), and how much of it goes if the named stragglers arrived with the next-to-last
    rank."""

    rows: I64
    wait_ns: I64
    straggler_cut_ns: I64


def collective_waits(participants: list[Participant], stragglers: list[int]) -> list[WaitCuts]:
    """Matched collectives' waiting per participant, and the cut a straggler fix makes.

    ``stragglers`` are participant positions. At a contested collective whose last arrival is a
    straggler, a rank that waited ``w`` would have waited ``max(w - margin, 0)`` had the
    straggler arrived ``margin`` earlier, with the next-to-last rank (its own wait: none)."""
    tables = [collectives(p.work) for p in participants]
    groups, _, _ = _match(participants, tables)
    offsets = _clock_offsets(len(participants), groups)
    waits = [np.zeros(len(t), dtype=np.int64) for t in tables]
    cuts = [np.zeros(len(t), dtype=np.int64) for t in tables]
    late = set(stragglers)
    for g in groups:
        if len(g.members) < 2 or g.count == 0:
            continue
        last, wait, margin, contested = _group_waits(g, offsets)
        by_straggler = contested & np.isin(np.array(g.members)[last], list(late))
        for k, m in enumerate(g.members):
            waits[m][g.positions[k]] = wait[k]
            mine = by_straggler & (last != k)
            cuts[m][g.positions[k]] = np.where(mine, np.minimum(wait[k], margin), 0)
    return [WaitCuts(t.rows, w, c) for t, w, c in zip(tables, waits, cuts, strict=True)]
