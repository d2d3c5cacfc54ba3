"""Interval arithmetic on integer-nanosecond intervals, vectorised with numpy.

Contract: an :class:`Intervals` is a pair of ``int64`` arrays, sorted, disjoint and non-empty
(``start < end``, ``end[i] < start[i+1]``). Every function takes and returns that form, so results
compose without re-sorting. Touching intervals are merged.
"""

from __future__ import annotations

import msgspec
import numpy as np
from numpy.typing import NDArray

I64 = NDArray[np.int64]

try:  # the one-sweep query compiled with the replay solver (analyses/_replay.c), where built
    from gpuscope.analyses._replay import last_containing as _swept_last_containing
except ImportError:  # not built, or built from older source: the numpy pass below does the same
    _swept_last_containing = None  # type: ignore[assignment]


class Intervals(msgspec.Struct, frozen=True):
    start_ns: I64
    end_ns: I64

    def __len__(self) -> int:
        return int(self.start_ns.shape[0])

    @property
    def total_ns(self) -> int:
        return int((self.end_ns - self.start_ns).sum())

    @classmethod
    def empty(cls) -> Intervals:
        return cls(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))


def union(start_ns: I64, end_ns: I64) -> Intervals:
    """Merge possibly overlapping intervals (any order) into the disjoint sorted form."""
    keep = end_ns > start_ns
    starts, ends = start_ns[keep], end_ns[keep]
    if starts.size == 0:
        return Intervals.empty()
    # Most callers pass intervals in start order already (events are sorted): then the stable
    # sort would leave them as they are, and checking costs a fraction of sorting.
    if np.any(starts[1:] < starts[:-1]):
        order = np.argsort(starts, kind="stable")
        starts, ends = starts[order], ends[order]
    reach = np.maximum.accumulate(ends)
    opens = np.empty(starts.size, dtype=np.bool_)
    opens[0] = True
    opens[1:] = starts[1:] > reach[:-1]
    first = np.flatnonzero(opens)
    last = np.append(first[1:] - 1, starts.size - 1)
    return Intervals(starts[first], reach[last])


def weighted_pieces(sets: list[tuple[Intervals, int]]) -> tuple[I64, I64]:
    """Time cut at every start and end of the sets: the distinct boundary points in order, and
    the summed weights of the sets covering each piece between consecutive points (one fewer).

    One sort of every boundary. Each set is disjoint, so a weight of 1, 2, 4... per set makes the
    sum say exactly which sets cover a piece.
    """
    points = np.concatenate([np.concatenate([s.start_ns, s.end_ns]) for s, _ in sets])
    if points.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    deltas = np.concatenate(
        [np.concatenate([np.full(len(s), w), np.full(len(s), -w)]) for s, w in sets]
    ).astype(np.int64)
    order = np.argsort(points, kind="stable")
    points, deltas = points[order], deltas[order]
    # Apply every change at one point before reading the level that follows it. The points are
    # sorted: each distinct one first appears where the value changes.
    changes = np.empty(points.size, dtype=np.bool_)
    changes[0] = True
    np.not_equal(points[1:], points[:-1], out=changes[1:])
    first = np.flatnonzero(changes)
    level = np.cumsum(deltas)[np.append(first[1:], points.size) - 1]
    return points[first], level[:-1]


def _coverage(sets: list[tuple[Intervals, int]], wanted: int) -> Intervals:
    """Regions where the summed weights of the sets covering them equal ``wanted``."""
    points, level = weighted_pieces(sets)
    inside = level == wanted
    # Neighbouring segments may touch; union merges them.
    return union(points[:-1][inside], points[1:][inside])


def intersection(a: Intervals, b: Intervals) -> Intervals:
    """Time covered by both ``a`` and ``b``."""
    if len(a) == 0 or len(b) == 0:
        return Intervals.empty()
    if _canonical(a) and _canonical(b):
        return _overlaps(a, b)
    return _coverage([(a, 1), (b, 2)], 3)


def difference(a: Intervals, b: Intervals) -> Intervals:
    """Time covered by ``a`` and not by ``b``."""
    if len(a) == 0 or len(b) == 0:
        return a
    if _canonical(a) and _canonical(b):
        # What a covers outside b: its overlaps with b's complement, unbounded at both ends.
        lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
        outside = Intervals(
            np.concatenate([[lo], b.end_ns]).astype(np.int64),
            np.concatenate([b.start_ns, [hi]]).astype(np.int64),
        )
        keep = outside.end_ns > outside.start_ns
        return _overlaps(a, Intervals(outside.start_ns[keep], outside.end_ns[keep]))
    return _coverage([(a, 1), (b, 2)], 1)


def _canonical(iv: Intervals) -> bool:
    """Whether ``iv`` keeps the module's contract: non-empty, sorted, apart (not touching)."""
    starts, ends = iv.start_ns, iv.end_ns
    return bool(np.all(ends > starts)) and bool(np.all(starts[1:] > ends[:-1]))


def _overlaps(a: Intervals, b: Intervals) -> Intervals:
    """The intersection of ``a`` and ``b``, both in the contract's form: the common part of
    every overlapping pair, found by binary search rather than by sorting every boundary. The
    pieces come out sorted and apart (each lies within one interval of ``a`` and one of ``b``),
    so they are the contract's form of the result already."""
    # b[first[i]:stop[i]] are the intervals of b that overlap a[i].
    first = np.searchsorted(b.end_ns, a.start_ns, side="right")
    stop = np.searchsorted(b.start_ns, a.end_ns, side="left")
    count = np.maximum(stop - first, 0)
    total = int(count.sum())
    if total == 0:
        return Intervals.empty()
    i = np.repeat(np.arange(len(a)), count)
    j = np.arange(total) + np.repeat(first - (np.cumsum(count) - count), count)
    starts = np.maximum(a.start_ns[i], b.start_ns[j])
    ends = np.minimum(a.end_ns[i], b.end_ns[j])
    return Intervals(starts.astype(np.int64), ends.astype(np.int64))


def gaps(busy: Intervals, lo_ns: int, hi_ns: int) -> Intervals:
    """The complement of ``busy`` within ``[lo_ns, hi_ns)``."""
    inner = clip(busy, lo_ns, hi_ns)
    starts = np.concatenate([[lo_ns], inner.end_ns]).astype(np.int64)
    ends = np.concatenate([inner.start_ns, [hi_ns]]).astype(np.int64)
    keep = ends > starts
    return Intervals(starts[keep], ends[keep])


def clip(iv: Intervals, lo_ns: int, hi_ns: int) -> Intervals:
    """``iv`` cut to ``[lo_ns, hi_ns)``."""
    starts = np.maximum(iv.start_ns, lo_ns)
    ends = np.minimum(iv.end_ns, hi_ns)
    keep = ends > starts
    return Intervals(starts[keep], ends[keep])


def covered_ns(iv: Intervals, lo_ns: I64, hi_ns: I64) -> I64:
    """For each window ``[lo_ns[i], hi_ns[i])``, the time ``iv`` covers inside it (vectorised)."""
    prefix = _prefix(iv)
    return _covered_before(iv, hi_ns, prefix) - _covered_before(iv, lo_ns, prefix)


def covered_per_bucket(iv: Intervals, edges_ns: I64) -> I64:
    """The time ``iv`` covers in each bucket ``[edges_ns[i], edges_ns[i + 1])``: :func:`covered_ns`
    of consecutive windows, each edge searched once."""
    return np.diff(_covered_before(iv, edges_ns, _prefix(iv)))


def _prefix(iv: Intervals) -> I64:
    """The time the intervals before each one cover (one more: all of them)."""
    return np.concatenate([[0], np.cumsum(iv.end_ns - iv.start_ns)]).astype(np.int64)


def _covered_before(iv: Intervals, t_ns: I64, prefix: I64) -> I64:
    if len(iv) == 0:
        return np.zeros(t_ns.shape, dtype=np.int64)
    # Index of the last interval starting at or before t.
    i = np.searchsorted(iv.start_ns, t_ns, side="right") - 1
    j = np.maximum(i, 0)
    inside = np.clip(np.minimum(t_ns, iv.end_ns[j]) - iv.start_ns[j], 0, None)
    return np.where(i >= 0, prefix[j] + inside, 0).astype(np.int64)


def last_containing(starts: I64, ends: I64, t: I64, *, python: bool = False) -> NDArray[np.intp]:
    """For each time in ``t``, the position of the last interval with ``start <= t <= end``
    (intervals sorted by start, overlapping or nested as they like); -1 when none does.

    Among the intervals that started by ``t``, the answer is the last one still running at ``t``.
    Compiled (``_replay.last_containing``): one sweep over the times in order, a stack of the
    intervals begun, popped from the top where they have ended. Else, or with ``python``: a
    "previous element at least t" query, answered for all times at once by binary lifting over
    a sparse table of running maxima of the end times.
    """
    none = np.full(t.shape, -1, dtype=np.intp)
    if starts.size == 0 or t.size == 0:
        return none
    if _swept_last_containing is not None and not python:
        at = np.ascontiguousarray(t, dtype=np.int64).ravel()
        order = np.argsort(at, kind="stable")  # times usually come in order: ~linear
        answer = np.empty(at.size, dtype=np.intp)
        c64 = np.ascontiguousarray
        _swept_last_containing(
            c64(starts, dtype=np.int64), c64(ends, dtype=np.int64), at, order, answer
        )
        return answer.reshape(t.shape)
    # An interval that contains none of the times answers none of them, and leaving it out does
    # not change which containing interval is last: the table covers only the useful ones. An
    # interval is useful when the first time at or after its start is at most its end; which
    # time that is follows from how many times fall before each start.
    times = np.sort(t, kind="stable")  # times usually come in order: a merge sort is ~linear
    placed = np.searchsorted(starts, times, side="right")  # times before start i: placed <= i
    before = np.cumsum(np.bincount(placed, minlength=starts.size + 1))[: starts.size]
    first = times[np.minimum(before, times.size - 1)]
    useful = np.flatnonzero((before < times.size) & (first <= ends))
    if useful.size == 0:
        return none
    starts, ends = starts[useful], ends[useful]
    # jumps[j][i + 1] = max(ends[i - 2**j + 1 .. i]), or "never jump" (the largest int64) where
    # that window would reach before the first interval, and at i = -1.
    never = np.iinfo(np.int64).max
    level = ends
    jumps: list[I64] = []
    while True:
        size = 1 << len(jumps)
        table = np.empty(level.size + 1, dtype=np.int64)
        table[0] = never
        table[1:] = level
        table[1:size] = never
        jumps.append(table)
        if size * 2 > ends.size:
            break
        level = level.copy()
        level[size:] = np.maximum(level[size:], level[:-size])
    p = np.searchsorted(starts, t, side="right") - 1
    for j in range(len(jumps) - 1, -1, -1):
        # Skip a whole window of intervals that all ended before t.
        p -= (jumps[j][p + 1] < t) * (1 << j)
    found = (p >= 0) & (ends[np.maximum(p, 0)] >= t)
    return np.where(found, useful[np.maximum(p, 0)], -1)


def latest_before(
    starts: NDArray[np.int64], rows: NDArray[np.int64], t: NDArray[np.int64]
) -> NDArray[np.int64]:
    """For each time, the last of ``rows`` (sorted by start) that started before it, or -1."""
    if rows.size == 0:
        return np.full(t.shape, -1, dtype=np.int64)
    i = np.searchsorted(starts[rows], t, side="left") - 1
    return np.where(i >= 0, rows[np.maximum(i, 0)], -1)


def innermost_at(
    starts: NDArray[np.int64],
    ends: NDArray[np.int64],
    rows: NDArray[np.int64],
    t: NDArray[np.int64],
) -> NDArray[np.int64]:
    """For each time, the latest-starting of ``rows`` (sorted by start) that contains it (nested
    ops: the innermost), or -1."""
    at = last_containing(starts[rows], ends[rows], t)
    return np.where(at >= 0, rows[np.maximum(at, 0)] if rows.size else -1, -1).astype(np.int64)
