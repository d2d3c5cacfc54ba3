"""The rank analysis itself: :func:`analyse_ranks`, per-rank figures, and the what-if's wait cuts.

Contract: see the package docstring; the parts live in ``collectives``, ``matching``,
``stragglers`` and ``traffic``.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import numpy as np

from gpuscope.analyses.intervals import Intervals
from gpuscope.analyses.ranks.collectives import I64, CollectiveTable, Participant, collectives
from gpuscope.analyses.ranks.matching import (
    clock_offsets,
    exposed_wait_of,
    group_waits,
    match_groups,
    presence,
    wait_times,
)
from gpuscope.analyses.ranks.results import RankAnalysis, RankStat, StragglerDetail
from gpuscope.analyses.ranks.stragglers import find_stragglers
from gpuscope.analyses.ranks.summary import (
    RankSummary,
    straggler_detail,
    summarise,
)
from gpuscope.analyses.ranks.traffic import collective_bandwidth, step_exposure

Describe = Callable[[int, Intervals, Intervals], StragglerDetail]
"""What the summary at a position did in a straggler's windows and before its arrivals."""


def analyse_ranks(participants: list[Participant]) -> RankAnalysis:
    """The rank analysis of participants in this process: each reduced to its summary, then
    :func:`analyse_summaries` (the one cross-rank analysis, wherever the ranks were read)."""
    alone = len(participants) == 1
    summaries = [summarise(p, alone=alone) for p in participants]
    return analyse_summaries(
        summaries, lambda i, windows, before: straggler_detail(participants[i], windows, before)
    )


def analyse_summaries(summaries: list[RankSummary], describe: Describe | None) -> RankAnalysis:
    """Who waits for whom, from per-rank summaries alone; ``describe`` tells what a named
    straggler did in its windows (None: not asked, the detail stays empty)."""
    tables = [s.table() for s in summaries]
    groups, group_stats, notes = match_groups([s.rank for s in summaries], tables)
    offsets = clock_offsets(len(summaries), groups)
    waits, contested, last_counts, late = wait_times(len(summaries), tables, groups, offsets)
    exposed_waits = [
        exposed_wait_of(s.compute_intervals(), t, w)
        for s, t, w in zip(summaries, tables, waits, strict=True)
    ]
    stragglers = find_stragglers(
        summaries, groups, waits, exposed_waits, contested, late, describe or _no_detail
    )
    straggler_exposed = sum(s.caused_exposed_wait_ns for s in stragglers)
    multi = len(summaries) > 1
    if not multi:
        offsets = [None]  # one clock: nothing to align it with
    ranks = [
        _rank_stat(s, t, offsets[i], waits[i] if multi else None, exposed_waits[i], last_counts[i])
        for i, (s, t) in enumerate(zip(summaries, tables, strict=True))
    ]
    present, missing, presence_notes = presence(summaries)
    bandwidth, bandwidth_note = collective_bandwidth(summaries, tables, groups)
    return RankAnalysis(
        world_size=max((s.world_size or 0 for s in summaries), default=0) or None,
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
        exposure=step_exposure(summaries, tables, ranks, exposed_waits),
    )


def _no_detail(_position: int, _windows: Intervals, _before: Intervals) -> StragglerDetail:
    return StragglerDetail()


def _rank_stat(
    s: RankSummary,
    table: CollectiveTable,
    offset: int | None,
    wait: I64 | None,
    exposed_wait: I64,
    last_arrivals: int,
) -> RankStat:
    return RankStat(
        rank=s.rank,
        device=s.device,
        source=s.source,
        clock_offset_ns=offset,
        span_ns=s.span_ns,
        busy_ns=s.busy_ns,
        idle_ns=s.idle_ns,
        compute_ns=s.compute_ns,
        communication_ns=s.communication_ns,
        exposed_communication_ns=s.exposed_communication_ns,
        collectives=len(table),
        collective_wait_ns=None if wait is None else int(wait.sum()),
        exposed_wait_ns=None if wait is None else int(exposed_wait.sum()),
        last_arrivals=last_arrivals,
        steps=s.steps,
    )


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
    groups, _, _ = match_groups([p.rank for p in participants], tables)
    offsets = clock_offsets(len(participants), groups)
    waits = [np.zeros(len(t), dtype=np.int64) for t in tables]
    cuts = [np.zeros(len(t), dtype=np.int64) for t in tables]
    late = set(stragglers)
    for g in groups:
        if len(g.members) < 2 or g.count == 0:
            continue
        last, wait, margin, contested = group_waits(g, offsets)
        by_straggler = contested & np.isin(np.array(g.members)[last], list(late))
        for k, m in enumerate(g.members):
            waits[m][g.positions[k]] = wait[k]
            mine = by_straggler & (last != k)
            cuts[m][g.positions[k]] = np.where(mine, np.minimum(wait[k], margin), 0)
    return [WaitCuts(t.rows, w, c) for t, w, c in zip(tables, waits, cuts, strict=True)]
