"""Matching collectives across ranks: groups, clock offsets, and who waited for whom.

Contract: the n-th collective of a process group on one rank is matched with the n-th of that
group on every other rank; clocks align on matched end times (median difference); a rank waits
inside a collective for its duration minus the last arrival's. Pure functions over
:class:`~gpuscope.analyses.ranks.collectives.CollectiveTable`.
"""

from __future__ import annotations

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope.analyses.intervals import Intervals, covered_ns, difference, union
from gpuscope.analyses.ranks.collectives import CONTESTED_WAIT_NS, I64, CollectiveTable
from gpuscope.analyses.ranks.results import GroupStat
from gpuscope.analyses.ranks.summary import RankSummary

# --- the analysis -------------------------------------------------------------------------------


class MatchedGroup(msgspec.Struct):
    name: str
    members: list[int]  # participant positions
    count: int
    positions: I64  # (members, count): rows of each member's CollectiveTable
    start_ns: I64  # (members, count), own clocks
    end_ns: I64


def presence(summaries: list[RankSummary]) -> tuple[list[int], list[int], list[str]]:
    present = sorted({s.rank for s in summaries})
    world = max((s.world_size or 0 for s in summaries), default=0)
    missing = [r for r in range(world) if r not in set(present)] if world else []
    notes: list[str] = []
    if missing:
        shown = ", ".join(map(str, present[:8])) + (", ..." if len(present) > 8 else "")
        notes.append(
            f"only {len(present)} of {world} ranks present (rank {shown}): figures cover those"
            " ranks; who waits for whom needs every rank's trace"
        )
    if len(present) < len(summaries):
        notes.append("several traces claim the same rank: each is analysed as its own participant")
    return present, missing, notes


def match_groups(
    rank_of: list[int], tables: list[CollectiveTable]
) -> tuple[list[MatchedGroup], list[GroupStat], list[str]]:
    """The n-th collective of each group, matched across the participants that have the group
    (``rank_of``: each participant's rank)."""
    names = list(dict.fromkeys(g for t in tables for g in t.group))
    groups: list[MatchedGroup] = []
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
            MatchedGroup(
                name,
                members,
                count,
                positions,
                start.reshape(positions.shape),
                end.reshape(positions.shape),
            )
        )
        ranks = [rank_of[m] for m in members]
        stats.append(GroupStat(name, kinds, ranks, count, counts))
        if len(set(counts)) > 1:
            notes.append(
                f"group {name}: ranks recorded {min(counts)} to {max(counts)} collectives; the"
                f" first {count} of each are matched (profiling windows may differ)"
            )
    return groups, stats, notes


def clock_offsets(n: int, groups: list[MatchedGroup]) -> list[int | None]:
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


def _aligned_starts(g: MatchedGroup, offsets: list[int | None]) -> I64:
    shift = np.array([offsets[m] or 0 for m in g.members], dtype=np.int64)
    return g.start_ns - shift[:, None]


def wait_times(
    n: int,
    tables: list[CollectiveTable],
    groups: list[MatchedGroup],
    offsets: list[int | None],
) -> tuple[list[I64], list[int], list[int], list[list[tuple[int, int, int]]]]:
    """Per participant: wait per collective (table order), contested collectives it took part
    in, its last arrivals at them, and those collectives as (group index, n, ns after the
    next-slowest). A collective is contested when some rank waited :data:`CONTESTED_WAIT_NS` or
    more: when none did (a collective queued behind the one before it starts on every rank as
    that one ends) who came "last" is clock noise."""
    waits = [np.zeros(len(t), dtype=np.int64) for t in tables]
    contested = [0] * n
    last_counts = [0] * n
    late: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]
    for gi, g in enumerate(groups):
        if len(g.members) < 2 or g.count == 0:
            continue
        last, wait, margin, counted = group_waits(g, offsets)
        for k, m in enumerate(g.members):
            waits[m][g.positions[k]] = wait[k]
            contested[m] += int(counted.sum())
            mine = np.flatnonzero((last == k) & counted)
            last_counts[m] += int(mine.size)
            late[m].extend((gi, int(n), int(margin[n])) for n in mine.tolist())
    return waits, contested, last_counts, late


def group_waits(
    g: MatchedGroup, offsets: list[int | None]
) -> tuple[I64, I64, I64, NDArray[np.bool_]]:
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


def exposed_wait_of(compute: Intervals, table: CollectiveTable, wait: I64) -> I64:
    """Per collective, the part of its wait with no compute alongside; sums to the exact union.
    ``compute``: the rank's compute intervals (those inside its collectives suffice)."""
    if len(table) == 0:
        return np.zeros(0, dtype=np.int64)
    lo, hi = table.start_ns, table.start_ns + wait
    per = wait - covered_ns(compute, lo, hi)
    exact = difference(union(lo, hi), compute).total_ns
    total = int(per.sum())
    if total > exact > 0:  # overlapping waits (several comm streams) counted once
        per = (per * (exact / total)).astype(np.int64)
    return per.astype(np.int64)
