"""The what-if edits, one per fix, each with the assumption a finding shows.

Contract in :mod:`gpuscope.analyses.whatif`.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope._arrays import distinct, member
from gpuscope.analyses.host import HostActivity
from gpuscope.analyses.whatif.graph import NEG, Edit, Graph
from gpuscope.causes import assumptions
from gpuscope.model import CopyDirection, Kind

I64 = NDArray[np.int64]


# --- the edits: one per fix ---------------------------------------------------------------------


class EditInputs(msgspec.Struct):
    """What the edits need from one trace's analyses (all rows are rows of its events)."""

    activity: NDArray[np.uint8]  # HostActivity per event row
    launch_gap_rows: I64  # device work that ended an idle gap caused by launch overhead
    launch_gap_ns: I64  # that gap's length
    exposed_comm_rows: I64  # communication kernels with no compute alongside
    fp32_rows: I64
    fp32_bytes: NDArray[np.float64]  # NaN: not known
    tensor_ratio: float  # tensor-core peak over FP32 peak
    memory_bytes_per_s: float | None
    #: Host operators whose only device work is copying to the host (their rows).
    d2h_op_rows: I64 = msgspec.field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: One direction of the host link, as pinned copies achieve it (facts table); None: unknown.
    pinned_bytes_per_s: float | None = None
    collective_rows: I64 = msgspec.field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    wait_ns: I64 = msgspec.field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    straggler_cut_ns: I64 = msgspec.field(default_factory=lambda: np.zeros(0, dtype=np.int64))


#: An edit: changes an :class:`Edit` of the graph, in place, to the fix of its cause.
EditFn = Callable[[Graph, EditInputs, Edit], None]


def _data_loader(g: Graph, inputs: EditInputs, edit: Edit) -> None:
    _drop_host_time(g, inputs, edit, HostActivity.DATA_LOADER)


def _checkpoint(g: Graph, inputs: EditInputs, edit: Edit) -> None:
    _drop_host_time(g, inputs, edit, HostActivity.CHECKPOINT)
    _unblock(g, edit, _calls_in(g, inputs, HostActivity.CHECKPOINT), pinned=False)


def _host_sync(g: Graph, inputs: EditInputs, edit: Edit) -> None:
    syncs = _calls_of(g, inputs, HostActivity.HOST_SYNC)
    _unblock(g, edit, syncs, pinned=False)
    _keep_on_device(g, edit, _ops_around(g, inputs.d2h_op_rows, syncs))


def _d2h_copy(g: Graph, inputs: EditInputs, edit: Edit) -> None:
    # A copy the host waits for is the host_sync fix's: this one keeps the others on device.
    syncs = _calls_of(g, inputs, HostActivity.HOST_SYNC)
    waited = _ops_around(g, inputs.d2h_op_rows, syncs)
    ops = distinct(inputs.d2h_op_rows)  # (np.setdiff1d would import numpy.ma)
    _keep_on_device(g, edit, ops[~member(ops, waited)])


def _allocator(g: Graph, inputs: EditInputs, edit: Edit) -> None:
    calls = _calls_of(g, inputs, HostActivity.ALLOCATOR)
    _unblock(g, edit, calls, pinned=False)
    edit.dur[calls] = 0


def _h2d_copy(g: Graph, inputs: EditInputs, edit: Edit) -> None:
    calls = _calls_of(g, inputs, HostActivity.H2D_COPY)
    _unblock(g, edit, calls, pinned=True, link=inputs.pinned_bytes_per_s)
    _pin(g, edit, calls, inputs.pinned_bytes_per_s)


def _launch_overhead(g: Graph, inputs: EditInputs, edit: Edit) -> None:
    # Only the host time the GPU waited for goes (a gap's launch-overhead part): the host's
    # other work before a launch (a data loader, a sync) is another finding's.
    nodes = g.node_of_row[inputs.launch_gap_rows]
    idle = inputs.launch_gap_ns[nodes >= 0]
    nodes = nodes[nodes >= 0]
    at = np.searchsorted(g.launch_dst, nodes)
    if g.launch_dst.size == 0:  # no launch linked to device work (an export without kernels)
        at = at[:0]
        nodes, idle = nodes[:0], idle[:0]
    ok = (at < g.launch_dst.size) & (
        g.launch_dst[np.minimum(at, max(g.launch_dst.size - 1, 0))] == nodes
    )
    at, idle = at[ok], idle[ok]
    edit.launch_delay[at] = NEG
    calls = g.launch_src[at]
    cut = np.minimum(edit.gap[calls], idle)
    np.subtract.at(edit.gap, calls, cut)
    edit.dur[calls] = 0


def _exposed_communication(g: Graph, inputs: EditInputs, edit: Edit) -> None:
    nodes = _nodes(g, inputs.exposed_comm_rows)
    edit.event_keep &= ~member(g.event_dst, nodes)


def _fp32_gemm(g: Graph, inputs: EditInputs, edit: Edit) -> None:
    nodes = _nodes(g, inputs.fp32_rows)
    known = g.node_of_row[inputs.fp32_rows] >= 0
    faster = edit.dur[nodes] / max(inputs.tensor_ratio, 1.0)
    if inputs.memory_bytes_per_s:
        floor = inputs.fp32_bytes[known] / inputs.memory_bytes_per_s * 1e9
        faster = np.where(np.isnan(floor), faster, np.maximum(faster, floor))
    edit.dur[nodes] = np.minimum(edit.dur[nodes], faster.astype(np.int64))


def _shorten_collectives(g: Graph, inputs: EditInputs, edit: Edit, cut: I64) -> None:
    nodes = _nodes(g, inputs.collective_rows)
    known = g.node_of_row[inputs.collective_rows] >= 0
    edit.dur[nodes] = np.maximum(edit.dur[nodes] - cut[known], 0)


def _straggler(g: Graph, inputs: EditInputs, edit: Edit) -> None:
    _shorten_collectives(g, inputs, edit, inputs.straggler_cut_ns)


def _collective_wait(g: Graph, inputs: EditInputs, edit: Edit) -> None:
    _shorten_collectives(g, inputs, edit, inputs.wait_ns)


#: The edit of each cause's fix, by the cause's name; what it assumes is the cause's ``whatif``
#: in data/causes.csv (required there for every cause here). Causes not here have no edit.
EDITS: dict[str, EditFn] = {
    "data_loader": _data_loader,
    "checkpoint": _checkpoint,
    "host_sync": _host_sync,
    "d2h_copy": _d2h_copy,
    "allocator": _allocator,
    "h2d_copy": _h2d_copy,
    "launch_overhead": _launch_overhead,
    "exposed_communication": _exposed_communication,
    "fp32_gemm": _fp32_gemm,
    "straggler": _straggler,
    "collective_wait": _collective_wait,
}

#: What each edit assumes, in the words a finding shows (data/causes.csv's ``whatif``).
ASSUMPTIONS: dict[str, str] = assumptions()
if set(ASSUMPTIONS) != set(EDITS):  # an edit without its row's assumption, or the reverse
    raise ValueError(
        "data/causes.csv: a whatif for every cause with an edit and none other; differs for"
        f" {sorted(set(ASSUMPTIONS) ^ set(EDITS))}"
    )


def apply_edit(g: Graph, inputs: EditInputs, cause: str, edit: Edit) -> None:
    """Change ``edit`` in place to the fix of ``cause`` (a no-op for causes with no edit)."""
    fix = EDITS.get(cause)
    if fix is not None:
        fix(g, inputs, edit)


def _nodes(g: Graph, rows: I64) -> I64:
    nodes = g.node_of_row[rows]
    return nodes[nodes >= 0]


def _calls_of(g: Graph, inputs: EditInputs, activity: int) -> I64:
    """Host call nodes whose own row has ``activity``."""
    return np.flatnonzero(g.host & (inputs.activity[g.rows] == activity))


def _spans(g: Graph, inputs: EditInputs, activity: int) -> tuple[I64, I64]:
    """The union of the host ranges with ``activity``, on the graph's clock."""
    from gpuscope.analyses.intervals import union  # noqa: PLC0415

    ev = g.trace.events
    rows = np.flatnonzero(inputs.activity == activity)
    iv = union(ev.start_ns[rows] - g.origin_ns, ev.end_ns[rows] - g.origin_ns)
    return iv.start_ns, iv.end_ns


def _covered(starts: I64, ends: I64, lo: I64, hi: I64) -> I64:
    """Length of the sorted, disjoint intervals inside each [lo, hi)."""
    if starts.size == 0:
        return np.zeros(lo.size, dtype=np.int64)
    before = np.concatenate([[0], np.cumsum(ends - starts)])

    def upto(t: I64) -> I64:
        k = np.searchsorted(starts, t, side="right")
        inside = np.where(
            k > 0, np.minimum(t, ends[np.maximum(k - 1, 0)]) - starts[np.maximum(k - 1, 0)], 0
        )
        found: I64 = before[np.maximum(k - 1, 0)] * (k > 0) + np.maximum(inside, 0)
        return found

    covered: I64 = np.maximum(upto(hi) - upto(lo), 0)
    return covered


def _ops_around(g: Graph, rows: I64, calls: I64) -> I64:
    """The operators among ``rows`` that hold one of the host call nodes ``calls``."""
    if rows.size == 0 or calls.size == 0:
        return rows[:0]
    ev = g.trace.events
    order = np.argsort(ev.start_ns[rows], kind="stable")
    rows = rows[order]
    starts, ends = ev.start_ns[rows] - g.origin_ns, ev.end_ns[rows] - g.origin_ns
    at = np.searchsorted(starts, g.start[calls], side="right") - 1
    ok = (at >= 0) & (ends[np.maximum(at, 0)] >= g.end[calls])
    return rows[distinct(at[ok])]


def _keep_on_device(g: Graph, edit: Edit, rows: I64) -> None:
    """The values stay on the device: the host's time inside the operators ``rows`` (each only
    copies a value to the host) goes, the calls inside them no longer wait, and their copies do
    not run."""
    from gpuscope.analyses.intervals import union  # noqa: PLC0415

    ev = g.trace.events
    if rows.size == 0:
        return
    iv = union(ev.start_ns[rows] - g.origin_ns, ev.end_ns[rows] - g.origin_ns)
    starts, ends = iv.start_ns, iv.end_ns
    _drop_spans(g, edit, starts, ends)
    host_calls = np.flatnonzero(g.host)
    inside = host_calls[_covered(starts, ends, g.start[host_calls], g.end[host_calls] + 1) > 0]
    _unblock(g, edit, inside, pinned=False)
    copies = g.launch_dst[member(g.launch_src, inside)]
    d2h = ev.copy_direction[g.rows[copies]] == CopyDirection.D2H
    edit.dur[copies[d2h]] = 0


def _drop_host_time(g: Graph, inputs: EditInputs, edit: Edit, activity: int) -> None:
    starts, ends = _spans(g, inputs, activity)
    _drop_spans(g, edit, starts, ends)


def _drop_spans(g: Graph, edit: Edit, starts: I64, ends: I64) -> None:
    """The host's time inside the sorted, disjoint ``[starts, ends)`` goes: from the gaps
    between calls and from the calls themselves."""
    hosts = np.flatnonzero(g.host & ~g.first)
    prev_end = g.end[hosts - 1]
    edit.gap[hosts] -= np.minimum(_covered(starts, ends, prev_end, g.start[hosts]), edit.gap[hosts])
    calls = np.flatnonzero(g.host)
    edit.dur[calls] -= np.minimum(
        _covered(starts, ends, g.start[calls], g.end[calls]), edit.dur[calls]
    )


def _calls_in(g: Graph, inputs: EditInputs, activity: int) -> I64:
    """Host call nodes that run inside a host range with ``activity``."""
    starts, ends = _spans(g, inputs, activity)
    calls = np.flatnonzero(g.host)
    return calls[_covered(starts, ends, g.start[calls], g.end[calls] + 1) > 0]


def _pin(g: Graph, edit: Edit, calls: I64, link: float | None) -> None:
    """The pageable host-to-device copies ``calls`` launched, from pinned memory instead.

    A pageable copy is staged by the driver through a pinned bounce buffer, chunk by chunk: the
    call lasts as long as the copy (it returns when the last chunk is staged, a few µs before the
    DMA of that chunk ends, so the trace need not show it waiting), and the transfer runs at the
    staging rate. From pinned memory the DMA reads the buffer directly: the call returns at once
    (it costs what a launch costs) and the transfer runs at the rate the host link allows
    (:func:`_pinned_rate`), whether or not the host waited for it."""
    if calls.size == 0 or g.launch_src.size == 0:
        return
    ev = g.trace.events
    launched = member(g.launch_src, calls)
    copies = g.launch_dst[launched]
    rows = g.rows[copies]
    staged = (
        (ev.kind[rows] == Kind.MEMCPY)
        & (ev.copy_direction[rows] == CopyDirection.H2D)
        & ev.pageable[rows]
        & (ev.bytes[rows] > 0)
    )
    if not staged.any():
        return
    copies = copies[staged]
    _at_pinned_rate(g, edit, copies, link)
    callers = g.launch_src[launched][staged]
    edit.dur[callers] = np.minimum(edit.dur[callers], g.call_ns)


def _at_pinned_rate(g: Graph, edit: Edit, copies: I64, link: float | None) -> None:
    """Pageable copies among ``copies`` shortened to their bytes at the pinned rate.

    The rate is the fastest pinned copy in the trace (what this machine's link gives), else the
    host link's (``link``, from the facts table, at the efficiency pinned copies reach). A
    pageable copy is bounded by the CPU's copy into the driver's staging buffer, not by the link
    (an H200 moved 32 MB pageable at 4.9 GB/s and pinned at 55 GB/s), so its own rate says little
    of the pinned one. Only with neither known: twice its own rate (the DMA's pass alone)."""
    ev = g.trace.events
    rows = g.rows[copies]
    pageable = ev.pageable[rows]
    nbytes = ev.bytes[rows].astype(np.float64)
    seen = _pinned_rate(g)
    own = 2.0 * nbytes / np.maximum(g.dur[copies], 1) * 1e9  # as recorded, not as edited
    known = seen or link
    rate = np.full(copies.size, known) if known else own
    at_rate = nbytes / np.maximum(rate, 1.0) * 1e9
    faster = np.where(pageable & (nbytes > 0), at_rate, edit.dur[copies])
    edit.dur[copies] = np.minimum(edit.dur[copies], faster.astype(np.int64))


def _unblock(g: Graph, edit: Edit, calls: I64, *, pinned: bool, link: float | None = None) -> None:
    """The calls no longer wait: each costs what a launch costs; a copy it made runs async."""
    waiting = member(g.wait_dst, calls)
    edit.wait_keep &= ~waiting
    edit.dur[g.wait_dst[waiting]] = np.minimum(edit.dur[g.wait_dst[waiting]], g.call_ns)
    copies = g.wait_src[waiting & g.wait_copy]
    if copies.size == 0:
        return
    at = np.searchsorted(g.launch_dst, copies)
    ok = (at < g.launch_dst.size) & (g.launch_dst[np.minimum(at, g.launch_dst.size - 1)] == copies)
    edit.launch_delay[at[ok]] = np.minimum(edit.launch_delay[at[ok]], g.launch_latency_ns)
    edit.gap[copies] = 0
    if pinned:
        _at_pinned_rate(g, edit, copies, link)


def _pinned_rate(g: Graph) -> float | None:
    """The fastest pinned host-to-device copy of 1 MiB or more in the trace, in bytes per
    second (the link as this machine drives it); None when there is none."""
    ev = g.trace.events
    rows = np.flatnonzero(
        (ev.kind == Kind.MEMCPY)
        & (ev.copy_direction == CopyDirection.H2D)
        & ~ev.pageable
        & (ev.bytes >= 1 << 20)
        & (ev.dur_ns > 0)
    )
    if rows.size == 0:
        return None
    return float((ev.bytes[rows] / ev.dur_ns[rows]).max() * 1e9)


def removed_ns(g: Graph, edit: Edit) -> int:
    """The most ``edit`` can save on this graph: the time it takes out of it, over the window.

    The replay is a longest-path problem; shortening a weight by ``x`` moves no end by more than
    ``x``, and dropping an edge moves its node by no more than it waited on that edge beyond its
    other constraints (its slack, as recorded), plus what moved upstream. So the step ends move by
    at most the sum of the durations, host gaps and launch delays shortened, the waiting of the
    calls unblocked (a blocking call's recorded time less its new cost) and the recorded slack of
    the cross-stream and launch edges dropped. A prediction above it is a replay error, whatever
    the trace (tests check it on every corpus trace)."""
    n = g.start.size
    if n == 0:
        return 0
    # In place: these run over every node of the graph, once per prediction.
    cut = np.subtract(g.dur, edit.dur)
    np.maximum(cut, 0, out=cut)
    unblocked = g.wait_dst[~edit.wait_keep]
    recorded = g.end[unblocked] - g.start[unblocked]
    cut[unblocked] = np.maximum(recorded - edit.dur[unblocked], 0)
    gap = np.subtract(g.gap, edit.gap)
    np.maximum(gap, 0, out=gap)
    total = int(cut.sum()) + int(gap.sum())
    kept = edit.launch_delay > NEG
    total += int(np.maximum(g.launch_delay[kept] - edit.launch_delay[kept], 0).sum())
    # The slack of a dropped edge: how long its node waited after the end of the node before it
    # on its chain (its own start for a chain's first node), read at those nodes only.
    for waited in (g.launch_dst[~kept], g.event_dst[~edit.event_keep]):
        prev_end = np.where(g.first[waited], g.start[waited], g.end[waited - 1])
        total += int(np.maximum(g.start[waited] - prev_end, 0).sum())
    return total
