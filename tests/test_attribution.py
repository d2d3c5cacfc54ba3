"""Pieces of idle attribution checked against brute force."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscope.analyses.attribution import _innermost_at


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 100), st.integers(0, 50)), min_size=0, max_size=40),
    st.lists(st.integers(-5, 160), min_size=1, max_size=20),
)
def test_innermost_at_is_the_latest_started_row_still_running(
    raw: list[tuple[int, int]], times: list[int]
) -> None:
    raw.sort()
    starts = np.array([s for s, _ in raw], dtype=np.int64)
    ends = np.array([s + d for s, d in raw], dtype=np.int64)
    rows = np.arange(len(raw), dtype=np.int64)
    t = np.array(times, dtype=np.int64)
    got = _innermost_at(starts, ends, rows, t)
    for k, when in enumerate(times):
        running = [i for i in range(len(raw)) if starts[i] <= when <= ends[i]]
        assert got[k] == (max(running) if running else -1)
