"""numpy helpers that every layer may use.

Contract: pure functions of arrays, no gpuscope imports.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeVar

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

S = TypeVar("S", bound=np.generic)


def distinct(values: NDArray[S]) -> NDArray[S]:
    """The sorted distinct values of a 1-d array: ``np.unique(values)`` for ids and codes.

    ``np.unique`` without ``return_*`` first asks whether its input is a masked array, which
    imports ``numpy.ma`` (10 ms, a twentieth of a whole ``gpuscope diagnose``) the first time.
    No NaN handling: for integers and codes.
    """
    ordered = np.sort(np.asarray(values).ravel())
    if ordered.shape[0] < 2:
        return ordered
    keep = np.empty(ordered.shape[0], dtype=np.bool_)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def among(values: NDArray[np.uint8], codes: Iterable[int]) -> NDArray[np.bool_]:
    """``np.isin(values, codes)`` for a few small codes (event kinds, copy directions): one
    vectorised comparison per code. ``np.isin`` sorts or builds a table first, and took 1.8 ms
    where this takes 0.03 ms (216k kinds, three codes)."""
    mask = np.zeros(values.shape, dtype=np.bool_)
    for code in codes:
        mask |= values == code
    return mask


def bucket_edges(lo: int, hi: int, buckets: int) -> NDArray[np.int64]:
    """``buckets + 1`` integer edges splitting ``[lo, hi]`` evenly (where a chart's buckets
    lie: the analyses fill them, the renderers place them)."""
    return np.linspace(lo, hi, max(buckets, 1) + 1).round().astype(np.int64)
