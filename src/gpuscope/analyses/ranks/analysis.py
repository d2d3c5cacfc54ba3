"""The rank analysis itself: :func:`analyse_ranks`, per-rank figures, and the what-if's wait cuts.

Contract: see the package docstring; the parts live in ``collectives``, ``matching``,
``stragglers`` and ``traffic``.
"""

from __future__ import annotations

import msgspec
import numpy as np

from gpuscope.analyses.intervals import covered_ns, difference
from gpuscope.analyses.ranks.collectives import I64, CollectiveTable, Participant, collectives
from gpuscope.analyses.ranks.matching import (
    _clock_offsets,
    _exposed_wait,
    _group_waits,
    _match,
    _presence,
    _waits,
)
from gpuscope.analyses.ranks.results import RankAnalysis, RankStat, StepCommunication
from gpuscope.analyses.ranks.stragglers import _stragglers
from gpuscope.analyses.ranks.traffic import _bandwidth, _exposure
from gpuscope.analyses.timeline import (
    DeviceWork,
    StepStat,
    WorkClass,
)


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
        world_size=max((p.report.world_size or 0 for p in participants), default=0) or None,
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


def _rank_stat(
    p: Participant,
    table: CollectiveTable,
    offset: int | None,
    wait: I64 | None,
    exposed_wait: I64,
    last_arrivals: int,
) -> RankStat:
    t = p.report.temporal
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
        exposed_communication_ns=p.report.overlap.exposed_ns,
        collectives=len(table),
        collective_wait_ns=None if wait is None else int(wait.sum()),
        exposed_wait_ns=None if wait is None else int(exposed_wait.sum()),
        last_arrivals=last_arrivals,
        steps=step_communication(p.work, p.report.steps, table),
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
