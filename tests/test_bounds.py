"""Memory bounds of a diff (issue #30, class 5): step statistics never hold every (before, after)
pair of a long run, and the rank test from ranks equals the one from pairs."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from gpuscope.compare.diff import gate, stats


@pytest.mark.parametrize(("n", "m"), [(5, 7), (60, 80), (3000, 2500)])
def test_the_rank_statistic_from_ranks_equals_the_one_from_pairs(n: int, m: int) -> None:
    rng = np.random.default_rng(n)
    b = np.round(rng.normal(10.0, 1.0, n), 1)  # rounded: ties on both sides
    a = np.round(rng.normal(10.3, 1.0, m), 1)
    pairs = np.subtract.outer(a, b)
    from_pairs = float((pairs > 0).sum()) + 0.5 * float((pairs == 0).sum())
    ranks = stats._average_ranks(np.concatenate([b, a]))
    assert float(ranks[n:].sum()) - m * (m + 1) / 2.0 == from_pairs


def test_30000_steps_a_side_compare_within_a_bounded_memory() -> None:
    rng = np.random.default_rng(1)
    before = rng.normal(40e6, 1e6, 30_000).tolist()
    after = rng.normal(41e6, 1e6, 30_000).tolist()
    tracemalloc.start()
    try:
        result = stats.compare(before, after)
        regression = gate.regression(before, after, 1.0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256 * 2**20  # 30,000 x 30,000 pairs took 6.7 GiB
    assert result.change == pytest.approx(1e6, rel=0.1)
    assert result.ci_low is not None and result.ci_high is not None
    assert result.ci_low < 1e6 < result.ci_high and result.significant
    assert result.note is not None and "2,000 of 30,000 steps before" in result.note
    assert regression.verdict == "over" and regression.change_pct == pytest.approx(2.5, abs=0.3)


def test_a_small_comparison_uses_every_pair() -> None:
    result = stats.compare([10.0, 11.0, 12.0, 13.0, 14.0], [12.0, 13.0, 14.0, 15.0, 16.0])
    assert result.change == 2.0 and result.note is None


@pytest.mark.parametrize(("n", "m"), [(1, 1), (3, 3), (4, 4), (30_000, 20_000)])
def test_reachable_never_overflows(n: int, m: int) -> None:
    assert stats.reachable(n, m, 0.025) == (n >= 4 and m >= 4)
