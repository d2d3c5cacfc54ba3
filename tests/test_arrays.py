"""The numpy helpers against the numpy calls they stand for (same values, same dtypes)."""

from __future__ import annotations

import numpy as np
import pytest

from gpuscope._arrays import distinct, distinct_inverse, first_occurrences, percentile


@pytest.mark.parametrize(
    "dtype", [np.int8, np.uint8, np.int16, np.int32, np.uint32, np.int64, np.uint64]
)
@pytest.mark.parametrize(
    ("n", "span"), [(0, 1), (1, 1), (63, 10), (64, 10), (5000, 1000), (500, 10**6)]
)
def test_distinct_is_numpys_unique(dtype: type[np.integer], n: int, span: int) -> None:
    """Both ways (a table for a narrow span, a sort otherwise), at either end of the dtype."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(n + span)
    for low in {int(info.min), 0, max(int(info.min), int(info.max) - span)}:
        high = min(int(info.max), low + span)
        values = rng.integers(low, high, n, endpoint=True, dtype=dtype)
        found, expected = distinct(values), np.unique(values)
        assert found.dtype == expected.dtype
        assert found.tolist() == expected.tolist()


@pytest.mark.parametrize(
    ("n", "low", "high"),
    [
        (0, 0, 1),
        (1, 0, 1),
        (7, -5, 3),
        (1000, 0, 50),
        (20_000, 0, 30_000),
        (20_000, -(10**12), 10**12),
    ],
)
def test_distinct_inverse_is_numpys_unique_with_inverse(n: int, low: int, high: int) -> None:
    values = np.random.default_rng(n).integers(low, high, n).astype(np.int64)
    unique, inverse = distinct_inverse(values)
    expected, expected_inverse = np.unique(values, return_inverse=True)
    assert unique.dtype == expected.dtype
    assert unique.tolist() == expected.tolist()
    assert inverse.tolist() == expected_inverse.ravel().tolist()
    assert (unique[inverse] == values).all()


@pytest.mark.parametrize(
    ("n", "size"), [(0, 1), (1, 1), (50, 7), (123_000, 3_000), (1000, 100_000)]
)
def test_first_occurrences_are_numpys_unique_with_index(n: int, size: int) -> None:
    values = np.random.default_rng(n).integers(0, size, n).astype(np.int32)
    used, first = first_occurrences(values, size)
    expected, expected_first = np.unique(values, return_index=True)
    assert used.tolist() == expected.tolist()
    assert first.tolist() == expected_first.tolist()


@pytest.mark.parametrize("dtype", [np.int64, np.float64])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 10, 11, 37, 200])
def test_percentile_is_numpys_percentile(dtype: type[np.number], n: int) -> None:
    """Exactly the same value, for one q as numpy is called with and within a list of them."""
    rng = np.random.default_rng(n)
    for values in (rng.integers(-(10**12), 10**12, n), rng.integers(0, 5, n)):
        given = values.astype(dtype)
        for q in (0, 10, 12.5, 33.3, 50, 90, 99.9, 100):
            expected = np.percentile(given, q)
            assert percentile(given, q) == expected
            assert percentile(given, q) == np.percentile(given, [q, 50])[0]
    with_nan = rng.random(n)
    with_nan[0] = np.nan
    assert np.isnan(percentile(with_nan, 10)) and np.isnan(np.percentile(with_nan, 10))
