"""Stragglers: the rank that arrives last more often than chance would make it, and what it did.

Contract: see the package docstring (**Stragglers**); only contested collectives count.
"""

from __future__ import annotations

import math

import numpy as np

from gpuscope.analyses.attribution import CAUSES
from gpuscope.analyses.intervals import Intervals, covered_ns, union
from gpuscope.analyses.ranks.collectives import (
    I64,
    STRAGGLER_MAX_CHANCE,
    STRAGGLER_MIN_LATE_NS,
    STRAGGLER_MIN_SHARE,
    Participant,
)
from gpuscope.analyses.ranks.matching import _Group
from gpuscope.analyses.ranks.results import StragglerStat

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
    gaps = p.report.idle.gaps
    idle_inside = covered_ns(windows, gaps.start_ns, gaps.end_ns)
    for code, ns in zip(gaps.cause.tolist(), idle_inside.tolist(), strict=True):
        if ns > 0:
            cause = CAUSES[code]
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
