"""Interval arithmetic against brute force on small integer timelines."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscope.analyses.intervals import (
    Intervals,
    covered_ns,
    difference,
    either,
    gaps,
    intersection,
    union,
)


def iv(*pairs: tuple[int, int]) -> Intervals:
    return union(
        np.array([p[0] for p in pairs], dtype=np.int64),
        np.array([p[1] for p in pairs], dtype=np.int64),
    )


def pairs(x: Intervals) -> list[tuple[int, int]]:
    return list(zip(x.start_ns.tolist(), x.end_ns.tolist(), strict=True))


def test_union_merges_overlapping_and_touching_and_drops_empty() -> None:
    got = iv((10, 20), (0, 5), (15, 30), (30, 35), (40, 40), (50, 60))
    assert pairs(got) == [(0, 5), (10, 35), (50, 60)]
    assert got.total_ns == 5 + 25 + 10


def test_intersection_difference_either() -> None:
    a = iv((0, 10), (20, 30))
    b = iv((5, 25))
    assert pairs(intersection(a, b)) == [(5, 10), (20, 25)]
    assert pairs(difference(a, b)) == [(0, 5), (25, 30)]
    assert pairs(either(a, b)) == [(0, 30)]
    assert pairs(difference(a, Intervals.empty())) == pairs(a)
    assert len(intersection(a, Intervals.empty())) == 0


def test_gaps_and_covered() -> None:
    busy = iv((10, 20), (30, 40))
    assert pairs(gaps(busy, 0, 50)) == [(0, 10), (20, 30), (40, 50)]
    lo = np.array([0, 15, 35, 45], dtype=np.int64)
    hi = np.array([50, 35, 36, 50], dtype=np.int64)
    assert covered_ns(busy, lo, hi).tolist() == [20, 10, 1, 0]
    assert covered_ns(Intervals.empty(), lo, hi).tolist() == [0, 0, 0, 0]


intervals_strategy = st.lists(
    st.tuples(st.integers(0, 60), st.integers(0, 12)).map(lambda t: (t[0], t[0] + t[1])),
    max_size=12,
)


def mask(raw: list[tuple[int, int]]) -> np.ndarray:
    m = np.zeros(80, dtype=bool)
    for s, e in raw:
        m[s:e] = True
    return m


def to_iv(raw: list[tuple[int, int]]) -> Intervals:
    return union(
        np.array([r[0] for r in raw], dtype=np.int64), np.array([r[1] for r in raw], dtype=np.int64)
    )


@settings(max_examples=300, deadline=None)
@given(intervals_strategy, intervals_strategy)
def test_set_operations_match_brute_force(
    a_raw: list[tuple[int, int]], b_raw: list[tuple[int, int]]
) -> None:
    a, b = to_iv(a_raw), to_iv(b_raw)
    ma, mb = mask(a_raw), mask(b_raw)
    assert a.total_ns == int(ma.sum())
    assert intersection(a, b).total_ns == int((ma & mb).sum())
    assert difference(a, b).total_ns == int((ma & ~mb).sum())
    assert either(a, b).total_ns == int((ma | mb).sum())
    assert gaps(a, 0, 80).total_ns == int((~ma).sum())
    for result in (a, intersection(a, b), difference(a, b)):
        starts, ends = result.start_ns, result.end_ns
        assert np.all(ends > starts)
        assert np.all(starts[1:] > ends[:-1])  # disjoint, not touching
