"""Interval arithmetic on integer-nanosecond intervals, vectorised with numpy.

Contract: an :class:`Intervals` is a pair of ``int64`` arrays, sorted, disjoint and non-empty
(``start < end``, ``end[i] < start[i+1]``). Every function takes and returns that form, so results
compose without re-sorting. Touching intervals are merged.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

I64 = NDArray[np.int64]


@dataclass(frozen=True)
class Intervals:
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
    start_ns, end_ns = start_ns[keep], end_ns[keep]
    if start_ns.size == 0:
        return Intervals.empty()
    order = np.argsort(start_ns, kind="stable")
    starts, ends = start_ns[order], end_ns[order]
    reach = np.maximum.accumulate(ends)
    opens = np.empty(starts.size, dtype=np.bool_)
    opens[0] = True
    opens[1:] = starts[1:] > reach[:-1]
    first = np.flatnonzero(opens)
    last = np.append(first[1:] - 1, starts.size - 1)
    return Intervals(starts[first], reach[last])


def _coverage(sets: list[tuple[Intervals, int]], wanted: int) -> Intervals:
    """Regions where the summed weights of the sets covering them equal ``wanted``.

    Each set is disjoint, so a weight of 1, 2, 4... per set makes every combination distinct.
    """
    points = np.concatenate([np.concatenate([s.start_ns, s.end_ns]) for s, _ in sets])
    deltas = np.concatenate(
        [np.concatenate([np.full(len(s), w), np.full(len(s), -w)]) for s, w in sets]
    ).astype(np.int64)
    if points.size == 0:
        return Intervals.empty()
    order = np.argsort(points, kind="stable")
    points, deltas = points[order], deltas[order]
    # Apply every change at one point before reading the level that follows it.
    unique_points, first = np.unique(points, return_index=True)
    level = np.cumsum(deltas)[np.append(first[1:], points.size) - 1]
    inside = level[:-1] == wanted
    # Neighbouring segments may touch; union merges them.
    return union(unique_points[:-1][inside], unique_points[1:][inside])


def intersection(a: Intervals, b: Intervals) -> Intervals:
    """Time covered by both ``a`` and ``b``."""
    if len(a) == 0 or len(b) == 0:
        return Intervals.empty()
    return _coverage([(a, 1), (b, 2)], 3)


def difference(a: Intervals, b: Intervals) -> Intervals:
    """Time covered by ``a`` and not by ``b``."""
    if len(a) == 0 or len(b) == 0:
        return a
    return _coverage([(a, 1), (b, 2)], 1)


def either(a: Intervals, b: Intervals) -> Intervals:
    """Time covered by ``a`` or ``b``."""
    return union(np.concatenate([a.start_ns, b.start_ns]), np.concatenate([a.end_ns, b.end_ns]))


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
    return _covered_before(iv, hi_ns) - _covered_before(iv, lo_ns)


def _covered_before(iv: Intervals, t_ns: I64) -> I64:
    if len(iv) == 0:
        return np.zeros(t_ns.shape, dtype=np.int64)
    lengths = iv.end_ns - iv.start_ns
    prefix = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    # Index of the last interval starting at or before t.
    i = np.searchsorted(iv.start_ns, t_ns, side="right") - 1
    j = np.maximum(i, 0)
    inside = np.clip(np.minimum(t_ns, iv.end_ns[j]) - iv.start_ns[j], 0, None)
    return np.where(i >= 0, prefix[j] + inside, 0).astype(np.int64)
