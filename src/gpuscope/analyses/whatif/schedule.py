"""The replay: the least schedule that meets every edge of a graph under an edit, and its steps.

Contract in :mod:`gpuscope.analyses.whatif`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from gpuscope._native import current
from gpuscope.analyses.whatif.graph import NEG, SEGMENT, Edit, Graph

#: The solver source this replay follows (``REPLAY_VERSION`` in ``_replay.c``); a build of older
#: source is not used (:mod:`gpuscope._native`).
REPLAY_VERSION = 2

try:  # the one-pass solver, where it was compiled (see setup.py)
    from gpuscope.analyses import _replay

    if not current(_replay, REPLAY_VERSION, "replay solver (analyses/_replay.c)"):
        _replay = None  # type: ignore[assignment]
except ImportError:  # pragma: no cover - the numpy fixpoint does the same, slower
    _replay = None  # type: ignore[assignment]


I64 = NDArray[np.int64]


#: The numpy fixpoint gives up after this many passes. Each pass settles one more hop of the
#: longest path, so a graph settles within its longest path's hops; it is the twin of the C
#: solver (an install without a compiler), and must reach the same schedule wherever the solver
#: does: a trace's longest zig-zag of tiny kernels between streams and threads takes hundreds
#: of hops (a 54 MB Kineto trace: 256 to 1,024), and at 64 passes such a replay stayed
#: unsettled, its fix unpriced and the diagnosis different. An unsettled replay (from below)
#: would promise too much, so the cap bounds only the time a cycle or a pathological graph
#: takes (~0.5 ms a pass per 65k nodes).
MAX_PASSES = 4096


# --- replaying --------------------------------------------------------------------------------


def replay(g: Graph, edit: Edit, *, python: bool = False) -> tuple[I64, I64, bool]:
    """Every node's (start, end) under ``edit``: the least schedule that meets every edge, and
    whether it settled. The C solver (``_replay``, one pass in topological order) runs when it
    was built; else, or with ``python``, the numpy fixpoint, within :data:`MAX_PASSES`."""
    n = g.start.size
    if n == 0:
        return g.start.copy(), g.end.copy(), True
    dur, gap = edit.dur, edit.gap
    keep_launch = edit.launch_delay > NEG
    # Wake edges (a helper thread started by the main thread) are start-to-start edges like a
    # launch's; no edit changes them.
    ls, ld, lw = (
        np.concatenate([g.launch_src[keep_launch], g.wake_src]),
        np.concatenate([g.launch_dst[keep_launch], g.wake_dst]),
        np.concatenate([edit.launch_delay[keep_launch], g.wake_delay]),
    )
    es, ed = g.event_src[edit.event_keep], g.event_dst[edit.event_keep]
    ws, wd, wt = g.wait_src[edit.wait_keep], g.wait_dst[edit.wait_keep], g.wait_tail[edit.wait_keep]
    fixed = g.fixed.copy()
    # Work whose launch edge an edit removed starts when its stream lets it: its chain decides.
    free = np.zeros(n, dtype=np.bool_)
    free[g.launch_dst[~keep_launch]] = True
    heads = g.first & free
    fixed[heads] = g.start[heads]
    if _replay is not None and not python:
        prev = np.arange(n, dtype=np.int64) - 1
        prev[g.first] = -1
        s_out, e_out = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        c64 = np.ascontiguousarray
        solved = _replay.solve(
            c64(prev),
            c64(gap),
            c64(dur),
            c64(fixed),
            c64(ls),
            c64(ld),
            c64(lw),
            c64(es),
            c64(ed),
            c64(ws),
            c64(wd),
            c64(wt),
            s_out,
            e_out,
        )
        if solved:
            return s_out, e_out, True
    seg = g.chain * SEGMENT
    a = gap + dur
    a = np.where(g.first, 0, a)
    acc = np.cumsum(a)
    base = acc[g.first][g.chain]  # chain-local prefix: subtract the head's cumulative sum
    local = acc - base
    c = fixed.copy()
    f = np.full(n, NEG, dtype=np.int64)
    prev = np.arange(n) - 1
    s = e = g.start
    settled = False
    for _ in range(MAX_PASSES):
        b = np.maximum(np.maximum(c + dur, f), NEG)
        x = np.maximum.accumulate(b - local + seg) - seg
        e = local + x
        pe = np.where(g.first, NEG, e[np.maximum(prev, 0)])
        s = np.maximum(pe + gap, c)
        s = np.where(g.first, np.maximum(c, NEG), s)
        c2 = fixed.copy()
        c2[ld] = np.maximum(c2[ld], s[ls] + lw)
        if es.size:
            np.maximum.at(c2, ed, e[es])
        f2 = np.full(n, NEG, dtype=np.int64)
        if ws.size:
            np.maximum.at(f2, wd, e[ws] + wt)
        if np.array_equal(c2, c) and np.array_equal(f2, f):
            settled = True
            break
        c, f = c2, f2
    return s, e, settled


def step_times(g: Graph, start: I64, end: I64) -> NDArray[np.float64]:
    """Each step's device time (ns) under a schedule (their sum: the steps' device span)."""
    order, bounds = g.step_order, g.step_bounds
    if order.size == 0:
        return np.zeros(0)
    first = np.minimum.reduceat(start[order], bounds)
    last = np.maximum.reduceat(end[order], bounds)
    # A step ends when its last work ends: the anchor edits move least (a step's first work
    # can move by a whole step when the host gets ahead).
    ends = np.maximum.accumulate(last)
    begins = np.append(first[0], ends[:-1])
    times: NDArray[np.float64] = (ends - begins).astype(np.float64)
    return times
