"""Stragglers: the rank that arrives last more often than chance would make it, and what it did.

Contract: see the package docstring (**Stragglers**); only contested collectives count.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from gpuscope.analyses.intervals import Intervals, union
from gpuscope.analyses.ranks.collectives import (
    I64,
    STRAGGLER_MAX_CHANCE,
    STRAGGLER_MIN_CAUSED_SHARE,
    STRAGGLER_MIN_LATE_NS,
)
from gpuscope.analyses.ranks.matching import MatchedGroup
from gpuscope.analyses.ranks.results import StragglerDetail, StragglerStat
from gpuscope.analyses.ranks.summary import RankSummary

# --- stragglers ---------------------------------------------------------------------------------


def find_stragglers(
    summaries: list[RankSummary],
    groups: list[MatchedGroup],
    waits: list[I64],
    exposed: list[I64],
    shared: list[int],
    late: list[list[tuple[int, int, int]]],
    describe: Callable[[int, Intervals, Intervals], StragglerDetail],
) -> list[StragglerStat]:
    """Every rank whose late arrivals cost the others time, tested step-down (package docstring):
    the rank last most often first; once named, the collectives it came last at leave the test,
    and the next is tested against the ranks still in question. ``describe`` tells what a named
    rank did in its windows (from its own trace: the only figures a summary does not hold)."""
    total_wait = sum(int(w.sum()) for w in waits)
    named: list[int] = []
    taken: set[tuple[int, int]] = set()  # (group, n): collectives a named rank came last at
    found: list[StragglerStat] = []
    while True:
        left = [i for i in range(len(summaries)) if i not in named and late[i]]
        stat = None
        for i in sorted(left, key=lambda i: -len(late[i])):
            arrivals = late[i]
            margins = np.array([a[2] for a in arrivals], dtype=np.int64)
            if margins.mean() <= STRAGGLER_MIN_LATE_NS:
                continue
            questioned = len(summaries) - len(named)
            still = shared[i] - sum(1 for gi, _ in taken if i in groups[gi].members)
            if not _unlikely_by_chance(groups, i, len(arrivals), still, named, questioned):
                continue
            caused, caused_exposed, windows = _caused(i, arrivals, groups, waits, exposed)
            if caused < STRAGGLER_MIN_CAUSED_SHARE * total_wait:
                continue
            before = _before(i, arrivals, groups)
            stat = _straggler_stat(
                summaries[i],
                len(arrivals),
                shared[i],
                margins,
                (caused, caused_exposed),
                (windows, before),
                describe(i, windows, before),
            )
            named.append(i)
            taken.update((gi, n) for gi, n, _ in arrivals)
            break
        if stat is None:
            break
        found.append(stat)
    found.sort(key=lambda s: -s.caused_wait_ns)
    return found


def _caused(
    i: int,
    arrivals: list[tuple[int, int, int]],
    groups: list[MatchedGroup],
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


def _before(i: int, arrivals: list[tuple[int, int, int]], groups: list[MatchedGroup]) -> Intervals:
    """On participant ``i``'s own clock, from the end of its previous collective of the group (its
    first collective: the group's first start less one period) to each late arrival: what its
    host and device did before it came."""
    lo: list[int] = []
    hi: list[int] = []
    for gi, n, _ in arrivals:
        g = groups[gi]
        k = g.members.index(i)
        arrived = int(g.start_ns[k, n])
        if n > 0:
            lo.append(int(g.end_ns[k, n - 1]))
        elif g.count > 1:
            lo.append(arrived - int(g.start_ns[k, 1] - g.start_ns[k, 0]))
        else:
            continue
        hi.append(arrived)
    return union(np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64))


def _unlikely_by_chance(
    groups: list[MatchedGroup], i: int, last: int, shared: int, named: list[int], questioned: int
) -> bool:
    """Last at ``last`` of the ``shared`` collectives no named rank came last at: too often to be
    the luck of the draw among the ``questioned`` ranks not yet named (a Bonferroni bound: each
    rank's test at :data:`STRAGGLER_MAX_CHANCE` over the ranks in question)?"""
    if shared < 2 or last > shared:
        return False
    if last == shared:  # last every time: with two ranks, no test could ask for more
        return True
    sizes = [
        len(g.members) - sum(1 for m in named if m in g.members)
        for g in groups
        if i in g.members and len(g.members) > 1
    ]
    sizes = [s for s in sizes if s > 1]
    if not sizes:
        return False
    p = len(sizes) / sum(sizes)  # the chance of being last, at the typical group size
    tail = sum(
        math.comb(shared, k) * p**k * (1 - p) ** (shared - k) for k in range(last, shared + 1)
    )
    return tail <= STRAGGLER_MAX_CHANCE / max(questioned, 1)


def _straggler_stat(
    s: RankSummary,
    arrivals: int,
    shared: int,
    margins: I64,
    caused_waits: tuple[int, int],
    spans: tuple[Intervals, Intervals],
    detail: StragglerDetail,
) -> StragglerStat:
    """The straggler's figures: how late, what it cost the others, and (``detail``) what it did
    while they waited and before it arrived."""
    caused, caused_exposed = caused_waits
    windows, before = spans
    return StragglerStat(
        rank=s.rank,
        device=s.device,
        last_arrivals=arrivals,
        shared=shared,
        mean_late_ns=float(margins.mean()),
        max_late_ns=int(margins.max()),
        caused_wait_ns=caused,
        caused_exposed_wait_ns=caused_exposed,
        window_ns=windows.total_ns,
        busy_in_window_ns=detail.busy_in_window_ns,
        top_kernels=detail.top_kernels,
        idle_causes=detail.idle_causes,
        before_ns=before.total_ns,
        idle_before=detail.idle_before,
    )
