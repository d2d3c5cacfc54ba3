"""Interval arithmetic against brute force on small integer timelines."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscope.analyses.intervals import (
    Intervals,
    covered_ns,
    difference,
    gaps,
    intersection,
    last_containing,
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


def test_intersection_and_difference() -> None:
    a = iv((0, 10), (20, 30))
    b = iv((5, 25))
    assert pairs(intersection(a, b)) == [(5, 10), (20, 25)]
    assert pairs(difference(a, b)) == [(0, 5), (25, 30)]
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
    assert gaps(a, 0, 80).total_ns == int((~ma).sum())
    for result in (a, intersection(a, b), difference(a, b)):
        starts, ends = result.start_ns, result.end_ns
        assert np.all(ends > starts)
        assert np.all(starts[1:] > ends[:-1])  # disjoint, not touching


def from_mask(m: np.ndarray) -> list[tuple[int, int]]:
    """The maximal runs of True in ``m``, as (start, end) pairs."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], m.astype(np.int8), [0]])))
    return list(zip(edges[0::2].tolist(), edges[1::2].tolist(), strict=True))


@settings(max_examples=300, deadline=None)
@given(intervals_strategy, intervals_strategy)
def test_intersection_and_difference_are_the_brute_force_pieces(
    a_raw: list[tuple[int, int]], b_raw: list[tuple[int, int]]
) -> None:
    a, b = to_iv(a_raw), to_iv(b_raw)
    ma, mb = mask(a_raw), mask(b_raw)
    assert pairs(intersection(a, b)) == from_mask(ma & mb)
    assert pairs(difference(a, b)) == from_mask(ma & ~mb)
    assert intersection(a, b).start_ns.dtype == np.int64
    assert difference(a, b).end_ns.dtype == np.int64


def test_difference_reaches_the_ends_of_the_int64_range() -> None:
    big = np.iinfo(np.int64)
    a = Intervals(np.array([big.min, 0], dtype=np.int64), np.array([-5, big.max], dtype=np.int64))
    b = iv((big.min, -10), (3, 7))
    assert pairs(difference(a, b)) == [(-10, -5), (0, 3), (7, big.max)]
    assert pairs(intersection(a, b)) == [(big.min, -10), (3, 7)]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 100), st.integers(-2, 60)), max_size=50),
    st.lists(st.integers(-5, 170), max_size=25),
)
def test_last_containing_is_the_last_interval_started_and_still_running(
    raw: list[tuple[int, int]], times: list[int]
) -> None:
    raw.sort(key=lambda r: r[0])
    starts = np.array([s for s, _ in raw], dtype=np.int64)
    ends = np.array([s + d for s, d in raw], dtype=np.int64)
    at = np.array(times, dtype=np.int64)
    # The compiled sweep (where built) and the numpy pass, against the definition.
    for got in (last_containing(starts, ends, at), last_containing(starts, ends, at, python=True)):
        assert got.dtype == np.intp and got.shape == at.shape
        for k, when in enumerate(times):
            running = [i for i in range(len(raw)) if starts[i] <= when <= ends[i]]
            assert got[k] == (max(running) if running else -1)
