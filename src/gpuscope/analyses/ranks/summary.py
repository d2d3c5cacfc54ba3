"""One rank reduced to what the cross-rank analysis needs: kilobytes, whatever the trace's size.

Contract: :func:`summarise` is pure: a :class:`~gpuscope.analyses.ranks.collectives.Participant`
(its device's report, work and host index) in, a :class:`RankSummary` out; the rank analysis
(:func:`~gpuscope.analyses.ranks.analyse_summaries`) reads summaries alone, so one rank can be
reduced on a worker and many ranks analysed on a driver that never holds a trace.

A summary holds the rank's figures (span, busy, idle, compute, communication and its exposed
part), its communication per profiler step, and one row per collective (:data:`COLUMNS`): group,
n-th of that group, kind, start and end on the rank's own clock (its *arrival* and its end),
message bytes, group size, the part of its duration with no compute alongside, and where it was
issued; plus the compute intervals inside the collectives, what the exposed part of a wait is
measured against (a wait lies inside its collective: it is its first ``wait`` ns). Columns are
raw ``int64`` bytes: 8 bytes a value on the wire and in the driver's memory, never a Python
object each. Size: 72 bytes per collective, 16 per compute interval inside one, plus the names.

What a summary cannot hold is what a straggler did in the windows the cross-rank analysis finds
(its kernels and idle causes there): that is :func:`straggler_detail` of the rank's participant,
asked for only of the ranks named stragglers.
"""

from __future__ import annotations

import msgspec
import numpy as np

from gpuscope.analyses.attribution import CAUSES
from gpuscope.analyses.intervals import (
    I64,
    Intervals,
    covered_ns,
    difference,
    intersection,
    union,
)
from gpuscope.analyses.ranks.collectives import CollectiveTable, Participant, collectives
from gpuscope.analyses.ranks.results import StepCommunication, StragglerDetail
from gpuscope.analyses.timeline import DeviceWork, StepStat, WorkClass

#: The columns of :attr:`RankSummary.collectives`, one row per collective in start order.
COLUMNS = (
    "group",  # index into RankSummary.groups
    "index",  # the n-th collective of its group on this rank
    "kind",  # index into RankSummary.kinds
    "start_ns",
    "end_ns",
    "message_bytes",  # -1: not recorded
    "group_size",  # -1: not recorded
    "uncovered_ns",  # its duration with no compute alongside (waiting included)
    "location",  # index into RankSummary.locations; -1: not resolved (nothing uncovered)
)
_COL = {name: i for i, name in enumerate(COLUMNS)}
#: The exposure section says where the collectives with the most exposed time (this many per
#: rank) were issued.
LOCATED_COLLECTIVES = 256


class RankSummary(msgspec.Struct, frozen=True):
    """One rank's device, as the cross-rank analysis reads it (see the module docstring)."""

    source: str
    rank: int
    device: int
    world_size: int | None
    link_bytes_per_s: float | None  # the facts table's bidirectional interconnect peak
    span_ns: int
    busy_ns: int
    idle_ns: int
    compute_ns: int
    communication_ns: int
    overlap_communication_ns: int  # the overlap analysis's communication time
    exposed_communication_ns: int  # ... and its part with no compute alongside
    steps: list[StepCommunication]
    groups: list[str]
    kinds: list[str]
    locations: list[str]
    located: bool  # the trace's host was indexed: locations were resolved
    collectives: bytes  # int64, (collectives, len(COLUMNS)), row-major
    compute: bytes  # int64, (intervals, 2): compute intervals inside collectives

    def column(self, name: str) -> I64:
        table = np.frombuffer(self.collectives, dtype=np.int64).reshape(-1, len(COLUMNS))
        return table[:, _COL[name]]

    def table(self) -> CollectiveTable:
        """The rank's collectives in the form the matching reads; rows are positions."""
        group, kind = self.column("group"), self.column("kind")
        return CollectiveTable(
            rows=np.arange(group.size, dtype=np.int64),
            group=[self.groups[g] for g in group.tolist()],
            index=self.column("index"),
            kind=[self.kinds[k] for k in kind.tolist()],
            start_ns=self.column("start_ns"),
            end_ns=self.column("end_ns"),
            message_bytes=self.column("message_bytes"),
            group_size=self.column("group_size"),
        )

    def compute_intervals(self) -> Intervals:
        pairs = np.frombuffer(self.compute, dtype=np.int64).reshape(-1, 2)
        return Intervals(pairs[:, 0].copy(), pairs[:, 1].copy())


def summarise(
    p: Participant, table: CollectiveTable | None = None, *, alone: bool = False
) -> RankSummary:
    """The participant's summary (``table``: its collectives, when already listed).

    ``alone``: the participant is the job's only one, so no peer's wait can reorder its
    collectives by exposed time (exposed is then the uncovered time itself): only the
    :data:`LOCATED_COLLECTIVES` most uncovered need a location (resolving every one costs ~10 ms
    on a trace of 2,000 collectives)."""
    table = table if table is not None else collectives(p.work)
    report = p.report
    t = report.temporal
    compute = p.work.by_class[WorkClass.COMPUTE]
    inside = intersection(compute, union(table.start_ns, table.end_ns))
    uncovered = table.dur_ns - covered_ns(compute, table.start_ns, table.end_ns)
    groups = list(dict.fromkeys(table.group))
    kinds = list(dict.fromkeys(table.kind))
    locations, location = _locations(p, table, uncovered, alone)
    group_of = {g: i for i, g in enumerate(groups)}
    kind_of = {k: i for i, k in enumerate(kinds)}
    columns = np.stack(
        [
            np.array([group_of[g] for g in table.group], dtype=np.int64),
            table.index,
            np.array([kind_of[k] for k in table.kind], dtype=np.int64),
            table.start_ns,
            table.end_ns,
            table.message_bytes,
            table.group_size,
            uncovered.astype(np.int64),
            location,
        ],
        axis=1,
    ).astype(np.int64)
    facts = report.facts
    return RankSummary(
        source=report.source,
        rank=p.rank,
        device=p.device,
        world_size=report.world_size,
        link_bytes_per_s=facts.interconnect_bytes_per_s if facts else None,
        span_ns=t.span_ns,
        busy_ns=t.busy_ns,
        idle_ns=t.idle_ns,
        compute_ns=t.compute_ns,
        communication_ns=t.communication_ns,
        overlap_communication_ns=report.overlap.communication_ns,
        exposed_communication_ns=report.overlap.exposed_ns,
        steps=step_communication(p.work, report.steps, table),
        groups=groups,
        kinds=kinds,
        locations=locations,
        located=p.host is not None,
        collectives=columns.tobytes(),
        compute=np.stack([inside.start_ns, inside.end_ns], axis=1).astype(np.int64).tobytes(),
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


def _locations(
    p: Participant, table: CollectiveTable, uncovered: I64, alone: bool
) -> tuple[list[str], I64]:
    """Where each collective with an uncovered part was issued (its launch's location in the
    user's code when the launch is known, else its own name), as indices into the names; only
    the most uncovered when the participant is ``alone`` (see :func:`summarise`)."""
    location = np.full(len(table), -1, dtype=np.int64)
    if p.host is None or len(table) == 0:
        return [], location
    ev = p.work.trace.events
    wanted = np.flatnonzero(uncovered > 0)
    if alone:  # the order the exposure section takes them in (traffic._locate)
        order = np.argsort(-uncovered, kind="stable")[:LOCATED_COLLECTIVES]
        wanted = np.sort(order[uncovered[order] > 0])
    rows = table.rows[wanted]
    where = [p.work.trace.names[i] for i in ev.name_id[rows].tolist()]
    launcher = ev.link[rows].astype(np.int64)
    launched = np.flatnonzero(launcher >= 0)
    for k, found in zip(launched.tolist(), p.host.locations(launcher[launched]), strict=True):
        where[k] = found
    names = list(dict.fromkeys(where))
    index = {w: i for i, w in enumerate(names)}
    location[wanted] = [index[w] for w in where]
    return names, location


def straggler_detail(p: Participant, windows: Intervals, before: Intervals) -> StragglerDetail:
    """What a straggler did while the others waited (``windows``, on its own clock: its kernels,
    idle causes and busy time there) and before it arrived (``before``: its idle time by cause
    and line)."""
    work = p.work
    ev = work.trace.events
    rows = work.rows
    inside = covered_ns(windows, ev.start_ns[rows], ev.end_ns[rows])
    by_name: dict[str, int] = {}
    for row, ns in zip(rows[inside > 0].tolist(), inside[inside > 0].tolist(), strict=True):
        name = work.trace.name(row)
        by_name[name] = by_name.get(name, 0) + ns
    causes: dict[str, int] = {}
    gaps = p.report.idle.gaps
    idle_inside = covered_ns(windows, gaps.start_ns, gaps.end_ns)
    for code, ns in zip(gaps.cause.tolist(), idle_inside.tolist(), strict=True):
        if ns > 0:
            cause = CAUSES[code]
            causes[cause] = causes.get(cause, 0) + ns
    busy = int(covered_ns(work.busy, windows.start_ns, windows.end_ns).sum())
    idle_before = covered_ns(before, gaps.start_ns, gaps.end_ns)
    doing: dict[str, int] = {}
    for code, where, ns in zip(
        gaps.cause.tolist(), gaps.location, idle_before.tolist(), strict=True
    ):
        if ns > 0:
            key = CAUSES[code] + (f" at {where}" if where else "")
            doing[key] = doing.get(key, 0) + ns
    return StragglerDetail(
        busy_in_window_ns=busy,
        top_kernels=sorted(by_name.items(), key=lambda kv: -kv[1])[:5],
        idle_causes=sorted(causes.items(), key=lambda kv: -kv[1]),
        idle_before=sorted(doing.items(), key=lambda kv: -kv[1])[:3],
    )
