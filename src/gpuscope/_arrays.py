"""numpy helpers that every layer may use.

Contract: pure functions of arrays, no gpuscope imports.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeVar

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike, NDArray

S = TypeVar("S", bound=np.generic)


def distinct(values: NDArray[S]) -> NDArray[S]:
    """The sorted distinct values of a 1-d array: ``np.unique(values)`` for ids and codes.

    ``np.unique`` without ``return_*`` first asks whether its input is a masked array, which
    imports ``numpy.ma`` (10 ms, a twentieth of a whole ``gpuscope diagnose``) the first time.
    No NaN handling: for integers and codes. Integers within a span a few times their count (name
    ids, thread ids, codes) are marked in a table, not sorted: 0.1 ms against 1 ms for 40k ids.
    """
    given = np.asarray(values).ravel()
    n = given.shape[0]
    if n >= 64 and given.dtype.kind in "iu":
        lo, hi = int(given.min()), int(given.max())
        if hi - lo <= 4 * n + 4096:
            seen = np.zeros(hi - lo + 1, dtype=np.bool_)
            wide = given if given.dtype.itemsize == 8 else given.astype(np.int64)
            seen[wide - lo if lo else wide] = True  # (values - lo fit, wrapping or not)
            found: NDArray[S] = np.flatnonzero(seen).astype(given.dtype) + given.dtype.type(lo)
            return found
    ordered = np.sort(given)
    if ordered.shape[0] < 2:
        return ordered
    keep = np.empty(ordered.shape[0], dtype=np.bool_)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def distinct_inverse(values: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.intp]]:
    """``np.unique(values, return_inverse=True)`` of a 1-d array of integer codes: the sorted
    distinct values and, per value, its position among them. Codes within a span a few times
    their count (node and label ids) are marked in a table, not sorted: 0.3 ms against 1.6 ms
    for 20k codes."""
    given = np.asarray(values).ravel()
    if given.shape[0] == 0:
        return given.copy(), np.zeros(0, dtype=np.intp)
    lo, hi = int(given.min()), int(given.max())
    if hi - lo > 4 * given.shape[0] + 4096:
        unique, inverse = np.unique(given, return_inverse=True)
        return unique, inverse.ravel()
    seen = np.zeros(hi - lo + 1, dtype=np.bool_)
    offset = given - lo
    seen[offset] = True
    rank = np.cumsum(seen, dtype=np.intp) - 1
    return (np.flatnonzero(seen) + lo).astype(given.dtype), rank[offset]


def first_occurrences(
    values: NDArray[np.integer], size: int
) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """``np.unique(values, return_index=True)`` of a 1-d array of ids below ``size``: the
    sorted distinct ids and the position of each one's first occurrence. The first positions
    are kept in a table of ``size`` (``np.minimum.at``), not found by a stable sort: 0.3 ms
    against 17 ms for 123k ids of 3k names in no order."""
    given = np.asarray(values).ravel()
    n = given.shape[0]
    first = np.full(size, n, dtype=np.intp)
    np.minimum.at(first, given, np.arange(n, dtype=np.intp))
    used = np.flatnonzero(first < n)
    return used, first[used]


def among(values: NDArray[np.uint8], codes: Iterable[int]) -> NDArray[np.bool_]:
    """``np.isin(values, codes)`` for a few small codes (event kinds, copy directions): one
    vectorised comparison per code. ``np.isin`` sorts or builds a table first, and took 1.8 ms
    where this takes 0.03 ms (216k kinds, three codes)."""
    mask = np.zeros(values.shape, dtype=np.bool_)
    for code in codes:
        mask |= values == code
    return mask


def member(values: ArrayLike, pool: ArrayLike) -> NDArray[np.bool_]:
    """``np.isin(values, pool)`` for integers, by a search in the sorted pool.

    ``np.isin`` on integers whose range is wide (addresses, row numbers) sorts with
    ``np.unique``, which imports ``numpy.ma`` (10 ms) the first time (see :func:`distinct`).
    """
    given = np.asarray(values)
    pool = np.asarray(pool).ravel()
    if pool.size == 0:
        return np.zeros(given.shape, dtype=np.bool_)
    ordered = np.sort(pool)
    at = np.searchsorted(ordered, given)
    np.minimum(at, ordered.size - 1, out=at)
    found: NDArray[np.bool_] = ordered[at] == given
    return found


def median(values: ArrayLike) -> np.float64:
    """``np.median(values)`` of a 1-d array, the same arithmetic (the middle value, or the mean
    of the middle two, in float64; NaN where any value is NaN). ``np.median`` of floats checks
    for NaN through ``numpy.ma``, importing it (10 ms) the first time."""
    given = np.asarray(values).ravel()
    n = given.shape[0]
    if n == 0:
        return np.float64(np.nan)
    if given.dtype.kind == "f" and np.isnan(given).any():
        return np.float64(np.nan)
    half = n // 2
    if n % 2:
        return np.float64(np.partition(given, half)[half])
    part = np.partition(given, (half - 1, half))
    return np.float64((np.float64(part[half - 1]) + np.float64(part[half])) / 2)


def percentile(values: ArrayLike, q: float) -> np.float64:
    """``np.percentile(values, q)`` of a 1-d array for one ``q`` (linear interpolation), the same
    arithmetic: the order statistics either side of ``(n - 1) * q / 100`` and numpy's lerp. With
    a fractional index, ``np.percentile`` takes the distinct values of its indexes through
    ``np.unique``, which imports ``numpy.ma`` (10 ms) the first time (see :func:`distinct`)."""
    given = np.asarray(values).ravel()
    n = given.shape[0]
    if n == 0:
        raise IndexError("percentile of an empty array")
    if given.dtype.kind == "f" and np.isnan(given).any():
        return np.float64(np.nan)
    virtual = (n - 1) * np.true_divide(q, 100)
    below = np.floor(virtual)
    # Outside the array (q of 0 or 100 at the ends): both neighbours are the end value, and
    # the weight does not matter.
    lo = n - 1 if virtual >= n - 1 else 0 if virtual < 0 else int(below)
    hi = lo if virtual >= n - 1 or virtual < 0 else lo + 1
    part = np.partition(given, (lo, hi)) if hi != lo else np.partition(given, lo)
    a, b = part[lo], part[hi]
    t = virtual - below
    gap = b - a
    found = b - gap * (1 - t) if t >= 0.5 else a + gap * t
    return np.float64(found)


def bucket_edges(lo: int, hi: int, buckets: int) -> NDArray[np.int64]:
    """``buckets + 1`` integer edges splitting ``[lo, hi]`` evenly (where a chart's buckets
    lie: the analyses fill them, the renderers place them)."""
    return np.linspace(lo, hi, max(buckets, 1) + 1).round().astype(np.int64)


def longest(members: NDArray[np.intp], length: NDArray[np.int64], k: int) -> NDArray[np.intp]:
    """The ``k`` longest of ``members`` (ties: the earliest), in no particular order: the first
    ``k`` of a stable sort by decreasing length, found without sorting them all."""
    if members.size <= k:
        return members
    threshold = np.partition(length, length.size - k)[length.size - k]
    longer = members[length > threshold]
    tied = members[length == threshold][: k - longer.size]
    return np.concatenate([longer, tied])
