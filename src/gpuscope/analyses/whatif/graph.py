"""The dependency graph of one trace: host chains, stream chains and the edges between them.

Contract in :mod:`gpuscope.analyses.whatif`.
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope._arrays import among, distinct, distinct_inverse
from gpuscope.model import BUSY_KINDS, CopyDirection, Events, Kind, Trace
from gpuscope.runtime_apis import COPIES, ENQUEUES, WAITS_FOR_DEVICE, runtime_role

I64 = NDArray[np.int64]
B = NDArray[np.bool_]


#: "No constraint": far below any time of a window (times are relative to the window's start).
NEG = -(1 << 42)
#: Offset between chains in the segmented scan: above any span of a window (about 4.9 hours).
SEGMENT = 1 << 44
#: A blocking call returns at most this long before the end of the work it waited for (clocks
#: of host and device agree to a few µs).
RETURN_TOLERANCE_NS = 2_000
#: The latency between a launch call's start and its kernel's start, when the trace shows none.
DEFAULT_LAUNCH_LATENCY_NS = 5_000
#: Work that starts within this of its stream predecessor's end was queued behind it, not
#: waiting for its launch (back-to-back kernels start 1-5 µs apart).
QUEUED_GAP_NS = 10_000
#: A launching thread silent this long between two of its calls, while another launching thread
#: of its process made calls, was waiting to be woken by it (see :func:`_wake_edges`).
WAKE_GAP_NS = 1_000_000
#: Threads that launch at least this share of the most any thread of their process launched
#: hand work to each other (:func:`_wake_edges`).
WAKE_SHARE = 0.1


class Graph(msgspec.Struct):
    """The dependency graph of one trace. Node arrays are in chain order (chain by chain, each in
    its original order); times are ns relative to ``origin_ns``."""

    trace: Trace
    origin_ns: int
    rows: I64  # event row of each node
    host: B  # a runtime call (else device work)
    chain: I64  # chain id, non-decreasing
    first: B  # first node of its chain
    start: I64  # as recorded
    end: I64
    dur: I64  # own duration: the call's cost without waiting, the work's duration
    gap: I64  # after the chain predecessor's end: the host's own time, 0 on streams
    fixed: I64  # start no earlier than this (NEG: free): chain heads, work with no launch
    launch_src: I64  # launch edges: host node -> device node, start + delay
    launch_dst: I64
    launch_delay: I64
    event_src: I64  # cross-stream edges: end of src -> start of dst
    event_dst: I64
    wait_src: I64  # blocking calls: end of src (device) + tail -> end of dst (host call)
    wait_dst: I64
    wait_tail: I64
    wait_copy: B  # the call waits for its own copy (a synchronous copy)
    node_of_row: I64  # per event row: its node, -1 when none (nested calls: the outer call)
    launch_latency_ns: int
    call_ns: int  # a non-blocking launch call's typical cost
    step_of: I64  # per node: index into ``steps`` of its step (-1: outside the steps)
    steps: int
    step_order: I64  # device nodes inside the steps, grouped by step
    step_bounds: I64  # where each step's group begins in ``step_order``
    wake_src: I64  # wake edges: main-thread call -> helper-thread call, start + wake_delay
    wake_dst: I64
    wake_delay: I64


class Edit(msgspec.Struct):
    """Changes to a graph's weights and edges; arrays are copies owned by the edit."""

    dur: I64
    gap: I64
    launch_delay: I64
    event_keep: B
    wait_keep: B

    @classmethod
    def none(cls, g: Graph) -> Edit:
        return cls(
            g.dur.copy(),
            g.gap.copy(),
            g.launch_delay.copy(),
            np.ones(g.event_src.size, dtype=np.bool_),
            np.ones(g.wait_src.size, dtype=np.bool_),
        )


# --- building ---------------------------------------------------------------------------------


def build_graph(trace: Trace, activity: NDArray[np.uint8] | None = None) -> Graph:
    """The graph of ``trace``; ``activity`` (from :func:`gpuscope.analyses.host.host_activity`)
    is not needed to build it, only to name edits."""
    c = _chains(trace)
    ev, nh, n = trace.events, c.nh, c.rows.size
    launch_src, launch_dst, delay, latency, event_src, event_dst = _launch_edges(trace, c)
    enqueues = c.roles.named(ENQUEUES)
    call_ns = int(np.median(c.dur[:nh][enqueues])) if enqueues.any() else 5_000
    poll_last = _polling(c)
    wait_src, wait_dst, wait_tail, wait_copy, own = _waits(
        ev,
        c.roles,
        c.rows[:nh],
        c.node_of_row,
        c.start,
        c.end,
        c.chain,
        nh,
        launch_src,
        launch_dst,
        poll_last,
    )
    _copy_delays(c, own[wait_copy], launch_src, launch_dst, delay)
    # A blocking call's own cost is what it takes past the end of what it waited for.
    c.dur[wait_dst] = np.where(
        c.end[wait_src] > c.start[wait_dst], np.maximum(wait_tail, 0), c.dur[wait_dst]
    )
    steps, step_of = _steps(trace, c.origin, c.start, c.host, launch_src, launch_dst, n)
    launch_src, launch_dst, delay = _anchor_unlinked(
        c.chain, c.start, nh, n, c.fixed, (launch_src, launch_dst, delay)
    )
    step_order, step_bounds = _step_order(c.host, step_of)
    wake_src, wake_dst, wake_delay = _wake_edges(ev, c, launch_src)
    return Graph(
        trace=trace,
        origin_ns=c.origin,
        rows=c.rows,
        host=c.host,
        chain=c.chain,
        first=c.first,
        start=c.start,
        end=c.end,
        dur=c.dur,
        gap=c.gap,
        fixed=c.fixed,
        launch_src=launch_src,
        launch_dst=launch_dst,
        launch_delay=delay,
        event_src=event_src,
        event_dst=event_dst,
        wait_src=wait_src,
        wait_dst=wait_dst,
        wait_tail=wait_tail,
        wait_copy=wait_copy,
        node_of_row=c.node_of_row,
        launch_latency_ns=latency,
        call_ns=call_ns,
        step_of=step_of,
        steps=steps,
        step_order=step_order,
        step_bounds=step_bounds,
        wake_src=wake_src,
        wake_dst=wake_dst,
        wake_delay=wake_delay,
    )


class _Chains(NamedTuple):
    """The nodes of a graph, chain by chain: host calls (the first ``nh`` nodes), then device
    work; times relative to ``origin``. ``gap`` and ``dur`` are changed in place as the edges are
    found (polling, waits, synchronous copies)."""

    origin: int
    rows: I64
    nh: int
    host: B
    first: B
    chain: I64
    start: I64
    end: I64
    dur: I64
    gap: I64
    fixed: I64
    node_of_row: I64
    prev_end: I64  # the end of the node before on its chain (NEG for a chain's first)
    launch_dst: I64  # device nodes with a launch, ascending
    roles: _Roles  # the host calls' roles


class _Roles(NamedTuple):
    """The role of each host call (data/runtime_apis.csv), looked up once per distinct name:
    ``code`` indexes ``names``."""

    code: NDArray[np.uint8]
    names: list[str]

    def named(self, roles: frozenset[str]) -> B:
        """Which calls have one of ``roles``."""
        return among(self.code, [i for i, r in enumerate(self.names) if r in roles])


def _roles(trace: Trace, name_ids: NDArray[np.int32]) -> _Roles:
    used, inverse = distinct_inverse(name_ids.astype(np.int64))
    role_of = [runtime_role(trace.names[i]) for i in used.tolist()]
    names = list(dict.fromkeys(role_of))
    code = np.array([names.index(r) for r in role_of], dtype=np.uint8)
    return _Roles(code[inverse] if code.size else np.zeros(0, dtype=np.uint8), names)


def _chains(trace: Trace) -> _Chains:
    """Host chains (per thread, top-level calls only) and device chains (per device and stream,
    by start); each node's host gap since the node before it on its chain."""
    ev = trace.events
    runtime = np.flatnonzero(ev.kind == Kind.RUNTIME)
    device = np.flatnonzero(ev.of_kind(*BUSY_KINDS) & (ev.device >= 0) & (ev.dur_ns >= 0))
    origin = int(
        min(ev.start_ns[runtime].min(initial=1 << 62), ev.start_ns[device].min(initial=1 << 62))
    )
    if device.size == 0:
        origin = 0

    hrows, outer, top, new_thread = _host_chains(trace, runtime, origin)
    host_rows = hrows[top]

    # Device chains: per (device, stream), by start.
    dkey = (ev.device[device].astype(np.int64) << 40) + (
        ev.stream[device].astype(np.int64) & ((1 << 40) - 1)
    )
    dorder = _grouped(dkey)
    drows, dk = device[dorder], dkey[dorder]
    new_stream = np.ones(drows.size, dtype=np.bool_)
    new_stream[1:] = dk[1:] != dk[:-1]

    rows = np.concatenate([host_rows, drows])
    nh = host_rows.size
    host = np.zeros(rows.size, dtype=np.bool_)
    host[:nh] = True
    first = np.concatenate([new_thread[top], new_stream])
    chain = np.cumsum(first) - 1
    start = ev.start_ns[rows] - origin
    end = ev.end_ns[rows] - origin
    n = rows.size
    node_of_row = np.full(len(ev), -1, dtype=np.int64)
    node_of_row[hrows] = outer
    node_of_row[drows] = np.arange(nh, n)

    prev = np.arange(n) - 1
    prev[first] = -1
    prev_end_all = np.where(prev >= 0, end[np.maximum(prev, 0)], NEG)
    gap = np.zeros(n, dtype=np.int64)
    gap[:nh] = np.where(first[:nh], 0, np.maximum(start[:nh] - prev_end_all[:nh], 0))
    launcher = node_of_row[np.maximum(ev.link[drows], 0)]
    linked = (ev.link[drows] >= 0) & (launcher >= 0) & (launcher < nh)
    launch_dst = np.arange(nh, n)[linked]
    # Fixed starts: a thread's first call, and device work no launch accounts for.
    fixed = np.full(n, NEG, dtype=np.int64)
    fixed[:nh][first[:nh]] = start[:nh][first[:nh]]
    no_launch = np.ones(n, dtype=np.bool_)
    no_launch[:nh] = False
    no_launch[launch_dst] = False
    fixed[no_launch] = start[no_launch]
    return _Chains(
        origin,
        rows,
        nh,
        host,
        first,
        chain,
        start,
        end,
        end - start,
        gap,
        fixed,
        node_of_row,
        prev_end_all,
        launch_dst,
        _roles(trace, ev.name_id[host_rows]),
    )


def _grouped(keys: I64) -> NDArray[np.intp]:
    """``np.argsort(keys, kind="stable")`` for keys of a few threads or streams: each key's rank
    among the distinct ones (found from one key per run) sorted instead, as 16-bit ranks, which
    numpy sorts by radix (a tenth of the time of a merge sort of the keys)."""
    if keys.size == 0:
        return np.zeros(0, dtype=np.intp)
    runs = np.ones(keys.size, dtype=np.bool_)
    np.not_equal(keys[1:], keys[:-1], out=runs[1:])
    values = distinct(keys[runs])
    if values.size >= 1 << 15:
        return np.argsort(keys, kind="stable")
    return np.argsort(np.searchsorted(values, keys).astype(np.int16), kind="stable")


def _host_chains(trace: Trace, runtime: I64, origin: int) -> tuple[I64, I64, B, B]:
    """Host chains: per thread, top-level calls only. The runtime rows by thread, each one's
    enclosing top-level call (its index among them), which are top-level, and which begin a
    thread."""
    ev = trace.events
    pid, tid = ev.pid[runtime].astype(np.int64), ev.tid[runtime].astype(np.int64)
    thread_key = (pid << 32) + (tid & 0xFFFFFFFF)
    order = _grouped(thread_key)  # rows are in start order already
    hrows, hkey = runtime[order], thread_key[order]
    hstart, hend = ev.start_ns[hrows] - origin, ev.end_ns[hrows] - origin
    new_thread = np.ones(hrows.size, dtype=np.bool_)
    new_thread[1:] = hkey[1:] != hkey[:-1]
    thread_id = np.cumsum(new_thread) - 1
    # Running max of previous ends within a thread: a call that starts before it is nested.
    prev_end = np.full(hrows.size, NEG, dtype=np.int64)
    if hrows.size:
        seg = thread_id * SEGMENT
        running = np.maximum.accumulate(hend + seg) - seg
        prev_end[1:] = running[:-1]
        prev_end[new_thread] = NEG
    top = hstart >= prev_end
    outer = np.cumsum(top) - 1  # index among top-level calls of each call's enclosing call
    return hrows, outer, top, new_thread


def _launch_edges(trace: Trace, c: _Chains) -> tuple[I64, I64, I64, int, I64, I64]:
    """Launch edges (source call, device node, delay), the launch latency, and the cross-stream
    event edges the trace agrees with."""
    ev = trace.events
    launch_dst = c.launch_dst
    launch_src = c.node_of_row[np.maximum(ev.link[c.rows[launch_dst]], 0)]
    start, end = c.start, c.end
    observed = np.maximum(start[launch_dst] - start[launch_src], 0)
    waited_launch = start[launch_dst] > c.prev_end[launch_dst] + QUEUED_GAP_NS
    event_src, event_dst = _event_edges(
        ev, c.host, start, c.chain, launch_src, launch_dst, c.rows, c.roles
    )
    # The trace decides: work that started before the work it would wait for ended did not wait.
    agrees = start[event_dst] >= end[event_src] - RETURN_TOLERANCE_NS
    event_src, event_dst = event_src[agrees], event_dst[agrees]
    by_event = np.zeros(c.rows.size, dtype=np.bool_)
    by_event[event_dst] = start[event_dst] <= end[event_src] + RETURN_TOLERANCE_NS
    bound = waited_launch & ~by_event[launch_dst]
    latency = int(np.median(observed[bound])) if bound.any() else DEFAULT_LAUNCH_LATENCY_NS
    latency = min(latency, DEFAULT_LAUNCH_LATENCY_NS * 4)
    delay = np.where(bound, observed, np.minimum(observed, latency))
    return launch_src, launch_dst, delay, latency, event_src, event_dst


def _polling(c: _Chains) -> B:
    """Polling: a run of event / stream queries on a thread is the host waiting for work to end
    (the loop exits on the query that finds it done). The last query is a sync (returned); the
    polling before it is waiting, not the host's own work, so it takes no time of its own."""
    nh = c.nh
    query = c.roles.named(frozenset({"query"}))
    in_chain_prev = np.zeros(nh, dtype=np.bool_)
    in_chain_prev[1:] = query[:-1] & ~c.first[1:nh]
    in_chain_next = np.zeros(nh, dtype=np.bool_)
    in_chain_next[:-1] = query[1:] & ~c.first[1:nh]
    poll_last = query & in_chain_prev & ~in_chain_next
    polling = query & in_chain_next
    c.gap[:nh][query & in_chain_prev] = 0
    c.dur[:nh][polling] = 0
    return poll_last


def _copy_delays(c: _Chains, copy_nodes: I64, launch_src: I64, launch_dst: I64, delay: I64) -> None:
    """A synchronous copy starts once the call has staged (or the stream drained): its delay is
    counted from the later of the two, so it is both a launch delay and a stream gap."""
    if not copy_nodes.size:
        return
    dst_pos = np.searchsorted(launch_dst, copy_nodes)
    ok = (dst_pos < launch_dst.size) & (
        launch_dst[np.minimum(dst_pos, launch_dst.size - 1)] == copy_nodes
    )
    dst_pos, copy_nodes = dst_pos[ok], copy_nodes[ok]
    calls = launch_src[dst_pos]
    begin = np.maximum(c.start[calls], c.prev_end[copy_nodes])
    off = np.maximum(c.start[copy_nodes] - begin, 0)
    delay[dst_pos] = off
    c.gap[copy_nodes] = off


def _step_order(host: B, step_of: I64) -> tuple[I64, I64]:
    """Device nodes in steps, grouped by step (stable), and where each step's group begins."""
    in_steps = np.flatnonzero(~host & (step_of >= 0))
    step_order = in_steps[np.argsort(step_of[in_steps], kind="stable")]
    grouped = step_of[step_order]
    step_bounds = (
        np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]]) if grouped.size else grouped
    )
    return step_order, step_bounds.astype(np.int64)


def _launch_times(start: I64, launch_src: I64, launch_dst: I64, n: int) -> I64:
    """When each node was launched: its call's start (device work with no call: its own start)."""
    t = start.copy()
    t[launch_dst] = start[launch_src]
    return t


def _per_stream_last(chain: I64, dev_nodes: I64, launched: I64, at: I64) -> tuple[I64, I64]:
    """For each time in ``at`` and each stream chain: the last node launched before it (-1)."""
    chains = distinct(chain[dev_nodes])
    out = np.full((chains.size, at.size), -1, dtype=np.int64)
    for i, c in enumerate(chains.tolist()):
        nodes = dev_nodes[chain[dev_nodes] == c]
        t = launched[nodes]
        order = np.argsort(t, kind="stable")
        nodes, t = nodes[order], t[order]
        k = np.searchsorted(t, at, side="left") - 1
        out[i] = np.where(k >= 0, nodes[np.maximum(k, 0)], -1)
    return chains, out


def _waits(
    ev: Events,
    roles: _Roles,
    host_rows: I64,
    node_of_row: I64,
    start: I64,
    end: I64,
    chain: I64,
    nh: int,
    launch_src: I64,
    launch_dst: I64,
    poll_last: B,
) -> tuple[I64, I64, I64, B, I64]:
    """Blocking calls: (awaited node, call node, tail, waits for its own copy, own copy node)."""
    n = start.size
    is_sync = roles.named(WAITS_FOR_DEVICE) | poll_last
    is_copy = roles.named(COPIES)
    blocking_name = roles.named(frozenset({"copy"}))
    hnodes = np.arange(nh)
    link = ev.link[host_rows]
    own = np.where(link >= 0, node_of_row[np.maximum(link, 0)], -1)
    own = np.where((own >= nh), own, -1)
    own_kind = np.where(own >= 0, ev.kind[np.maximum(link, 0)], 0)
    pageable = np.where(own >= 0, ev.pageable[np.maximum(link, 0)], False)
    copy_dir = np.where(own >= 0, ev.copy_direction[np.maximum(link, 0)], 0)
    sync_copy = (
        is_copy
        & (own >= 0)
        & (own_kind == Kind.MEMCPY)
        & (pageable | blocking_name | (copy_dir == CopyDirection.OTHER) & blocking_name)
    )
    own_end = end[np.maximum(own, 0)]
    # The trace decides: a copy call that returned before its transfer ended did not block.
    sync_copy &= end[:nh] >= own_end - RETURN_TOLERANCE_NS
    srcs: list[I64] = [own[sync_copy]]
    dsts: list[I64] = [hnodes[sync_copy]]
    copies: list[B] = [np.ones(int(sync_copy.sum()), dtype=np.bool_)]
    sync_nodes = hnodes[is_sync & ~sync_copy]
    if sync_nodes.size and n > nh:
        dev_nodes = np.arange(nh, n)
        launched = _launch_times(start, launch_src, launch_dst, n)
        _, last = _per_stream_last(chain, dev_nodes, launched, start[sync_nodes])
        ends = np.where(last >= 0, end[np.maximum(last, 0)], NEG)
        ends = np.where(ends <= end[sync_nodes] + RETURN_TOLERANCE_NS, ends, NEG)
        pick = np.argmax(ends, axis=0)
        cols = np.arange(sync_nodes.size)
        awaited = last[pick, cols]
        ok = ends[pick, cols] > NEG
        srcs.append(awaited[ok])
        dsts.append(sync_nodes[ok])
        copies.append(np.zeros(int(ok.sum()), dtype=np.bool_))
    src = np.concatenate(srcs).astype(np.int64)
    dst = np.concatenate(dsts).astype(np.int64)
    copy = np.concatenate(copies)
    order = np.argsort(dst, kind="stable")
    src, dst, copy = src[order], dst[order], copy[order]
    tail = np.clip(end[dst] - end[src], 0, end[dst] - start[dst])
    return src, dst, tail, copy, np.where(copy, src, -1)


def _event_edges(
    ev: Events,
    host: B,
    start: I64,
    chain: I64,
    launch_src: I64,
    launch_dst: I64,
    rows: I64,
    roles: _Roles,
) -> tuple[I64, I64]:
    """Record / wait-event pairs on each thread, turned into stream-to-stream edges."""
    nh = int(host.sum())
    n = start.size
    is_rec = roles.named(frozenset({"event_record"}))
    is_wait = roles.named(frozenset({"stream_wait_event"}))
    empty = np.zeros(0, dtype=np.int64)
    if not is_wait.any() or n == nh:
        return empty, empty
    hchain = chain[:nh]
    # Per host node: the next node at or after it on its thread that launched device work.
    launches = np.full(nh, -1, dtype=np.int64)
    launches[launch_src] = launch_dst  # one work per call is enough: the first on its stream
    idx = np.where(launches >= 0, np.arange(nh), nh)
    nxt = np.minimum.accumulate(idx[::-1])[::-1]
    waits = np.flatnonzero(is_wait)
    after = np.where(waits + 1 < nh, nxt[np.minimum(waits + 1, nh - 1)], nh)
    ok = after < nh
    ok[ok] &= hchain[after[ok]] == hchain[waits[ok]]
    waits, after = waits[ok], after[ok]
    dst = launches[after]
    # The mark: the record before the wait on its thread (since the previous wait), else the
    # wait itself (some traces do not record cudaEventRecord).
    marks = np.flatnonzero(is_rec | is_wait)
    k = np.searchsorted(marks, waits) - 1
    prior = marks[np.maximum(k, 0)]
    use_rec = (k >= 0) & is_rec[prior] & (hchain[prior] == hchain[waits])
    rec = np.where(use_rec, prior, waits)
    if rec.size == 0:
        return empty, empty
    dev_nodes = np.arange(nh, n)
    launched = _launch_times(start, launch_src, launch_dst, n)
    chains, last = _per_stream_last(chain, dev_nodes, launched, start[rec])
    dev_of_chain = {
        int(c): int(ev.device[rows[dev_nodes[chain[dev_nodes] == c][0]]]) for c in chains.tolist()
    }
    chain_dev = np.array([dev_of_chain[int(c)] for c in chains.tolist()], dtype=np.int64)
    dst_dev = ev.device[rows[dst]].astype(np.int64)
    t = np.where(last >= 0, launched[np.maximum(last, 0)], NEG)
    t = np.where(
        (chains[:, None] != chain[dst][None, :]) & (chain_dev[:, None] == dst_dev[None, :]), t, NEG
    )
    pick = np.argmax(t, axis=0)
    cols = np.arange(rec.size)
    src = last[pick, cols]
    ok = t[pick, cols] > NEG
    src, dst = src[ok], dst[ok]
    return src.astype(np.int64), dst.astype(np.int64)


def _anchor_unlinked(
    chain: I64, start: I64, nh: int, n: int, fixed: I64, launches: tuple[I64, I64, I64]
) -> tuple[I64, I64, I64]:
    """Device work whose launch the trace did not record, tied to the host as it ran.

    Some launches go unrecorded (Triton's launcher calling ``cuLaunchKernel`` under an older
    profiler; a driver-level API the capture did not trace), yet the host issued that work: it
    cannot start before the host reached it. Pinned at its recorded time, it would hold every
    step's end where it was, whatever a fix does to the host before it. Each such work gets a
    launch edge from the last call, on the thread that launched most of the recorded work, that
    started before it, with the recorded offset as its delay: it moves as that host moves.
    ``fixed`` is updated in place (the work is no longer pinned)."""
    launch_src, launch_dst, delay = launches
    if nh in (0, n) or launch_src.size == 0:
        return launch_src, launch_dst, delay
    unlinked = np.ones(n - nh, dtype=np.bool_)
    unlinked[launch_dst - nh] = False
    dev = np.flatnonzero(unlinked) + nh
    if dev.size == 0:
        return launch_src, launch_dst, delay
    main = int(np.bincount(chain[launch_src]).argmax())
    calls = np.flatnonzero(chain[:nh] == main)
    at = np.searchsorted(start[calls], start[dev], side="right") - 1
    ok = at >= 0
    dev, src = dev[ok], calls[at[ok]]
    fixed[dev] = NEG
    src_all = np.concatenate([launch_src, src])
    dst_all = np.concatenate([launch_dst, dev])
    delay_all = np.concatenate([delay, start[dev] - start[src]])
    order = np.argsort(dst_all, kind="stable")
    return src_all[order], dst_all[order], delay_all[order]


def _wake_edges(ev: Events, c: _Chains, launch_src: I64) -> tuple[I64, I64, I64]:
    """Host threads woken by another thread of their process: (waker's call, woken call, delay).

    PyTorch runs a CUDA backward pass on the autograd engine's own thread per device: it sits
    idle until the main thread's ``backward()`` hands it the graph, and the main thread blocks
    until it is done. Between steps the engine's thread is silent for as long as the main
    thread's forward pass (and its data loading, copies and syncs) takes, and the main thread is
    silent while the engine runs: neither silence is the thread's own work. Kept as fixed gaps on
    their chains, they would pin every backward pass to its recorded time whatever a fix does to
    the forward pass before it (a fix of the batch copy would save nothing), and the optimizer
    after it likewise.

    So between threads that launch device work (each at least :data:`WAKE_SHARE` of the most any
    thread of the process launched: helper threads that only poll or pin are not among them), a
    call after a silence of :data:`WAKE_GAP_NS` or more during which another such thread made
    calls starts no earlier than that thread's last call before it plus the recorded offset (the
    hand-over and the thread's own work before its first call), instead of after a fixed gap. A
    silence in which no other such thread called (a data loader's wait, host work outside the
    trace) stays the thread's own time."""
    nh = c.nh
    empty = np.zeros(0, dtype=np.int64)
    if nh == 0 or launch_src.size == 0:
        return empty, empty, empty
    host_chain = c.chain[:nh]
    chains = int(host_chain.max()) + 1
    if chains < 2:
        return empty, empty, empty
    chain_pid = np.zeros(chains, dtype=np.int64)
    chain_pid[host_chain] = ev.pid[c.rows[:nh]]
    launched = np.bincount(c.chain[launch_src], minlength=chains)[:chains]
    # A thread's first call in the window counts as after a silence since the window began (a
    # backward thread first seen after the forward pass).
    quiet = np.where(c.first[:nh], c.start[:nh], c.gap[:nh]) >= WAKE_GAP_NS
    src_parts, dst_parts, delay_parts = [], [], []
    for p in distinct(chain_pid).tolist():  # (np.unique would import numpy.ma: 10 ms)
        mine = np.flatnonzero(chain_pid == p)
        working = mine[launched[mine] >= max(1, WAKE_SHARE * launched[mine].max())]
        if working.size < 2:
            continue
        calls = np.flatnonzero(np.isin(host_chain, working))
        calls = calls[np.argsort(c.start[calls], kind="stable")]  # every such thread, by start
        for chain in working.tolist():
            silent = np.flatnonzero(quiet & (host_chain == chain))
            if silent.size == 0:
                continue
            others = calls[host_chain[calls] != chain]
            at = np.searchsorted(c.start[others], c.start[silent], side="right") - 1
            ok = at >= 0
            silent, waker = silent[ok], others[at[ok]]
            since = np.where(c.first[silent], 0, c.prev_end[silent])
            woken = c.start[waker] >= since  # the other thread called meanwhile
            src_parts.append(waker[woken])
            dst_parts.append(silent[woken])
            delay_parts.append(c.start[silent[woken]] - c.start[waker[woken]])
    if not src_parts:
        return empty, empty, empty
    dst = np.concatenate(dst_parts)
    c.gap[dst] = 0
    c.fixed[dst] = NEG  # a woken first call is no longer pinned where it was recorded
    return np.concatenate(src_parts), dst, np.concatenate(delay_parts)


def _steps(
    trace: Trace, origin: int, start: I64, host: B, launch_src: I64, launch_dst: I64, n: int
) -> tuple[int, I64]:
    """Step index per node, by when the node (its call, for device work) started."""
    launched = _launch_times(start, launch_src, launch_dst, n)
    steps = sorted(trace.steps, key=lambda s: s.start_ns)
    if not steps:
        return 1, np.zeros(n, dtype=np.int64)
    bounds = np.array([s.start_ns - origin for s in steps], dtype=np.int64)
    last_end = steps[-1].end_ns - origin
    k = np.searchsorted(bounds, launched, side="right") - 1
    k = np.where((k >= 0) & (launched < last_end), k, -1)
    return len(steps), k.astype(np.int64)
