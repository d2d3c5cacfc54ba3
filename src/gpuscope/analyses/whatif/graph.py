"""What each fix is worth: the trace as a dependency graph, replayed with the fix applied.

Contract: :func:`build_graph` turns one trace (one rank) into a :class:`Graph`; :func:`replay`
gives every node's start and end under an :class:`Edit` set; :func:`step_times` measures steps
on any such schedule. All pure, all numpy: no loop runs per event.

**The graph.** Nodes are the top-level runtime calls of each host thread (nested driver calls
belong to the call around them) and the device work (kernels, copies, memsets) of each stream.
Each node lies on one *chain*, a thread or a stream, in its original order. The edges are:

* **program order**: a call starts no earlier than the previous call on its thread ended plus
  the host's own time between them (``gap``: Python, framework dispatch, the data loader);
* **stream order**: device work starts no earlier than the previous work on its stream ended;
* **launch**: device work starts no earlier than its runtime call started plus the launch
  latency. The latency is the one observed when the work was waiting for its launch, else the
  trace's median latency (a queued kernel's observed delay holds queueing, not latency);
* **host synchronisation**: a blocking call (``cudaStreamSynchronize``, ``cudaDeviceSynchronize``,
  ``cudaEventSynchronize``, ``cudaFree``, a copy from or to pageable memory or a ``cudaMemcpy``
  without ``Async``) returns no earlier than the work it waits for ends, plus the few µs it
  took to return. A copy waits for its own transfer; the others for the latest work launched
  before the call that ended by the time it returned (CUDA returns only when that work is
  done; work still running after the return cannot have been waited for). A call is blocking
  only if the trace agrees: a copy call that returned before its transfer ended did not block;
* **cross-stream events**: ``cudaStreamWaitEvent`` (and ``hipStreamWaitEvent``) makes the next
  work launched to its stream wait for the work the preceding ``cudaEventRecord`` marked: the
  last work launched before the record to the stream the host last launched to, other than the
  waiting stream (the runtime records neither stream in the trace; PyTorch records on the
  current stream, then waits on the other);
* **collectives**: a collective on one rank ends no earlier than its last participant started
  it plus the transfer. Its duration is taken as observed (waiting included); the edits that
  move arrivals (straggler, collective wait) shorten it by the waiting they remove, computed
  across ranks by :func:`gpuscope.analyses.ranks.collective_waits`.

**The replay** solves ``start = max(chain predecessor's end + gap, incoming edges)`` and
``end = max(start + duration, awaited end + tail)`` for every node. Along a chain the recurrence is
a max-plus scan, ``e_i = A_i + cummax(b_j - A_j)``, one numpy pass over every chain at once; the
cross-chain edges are then refreshed, until nothing moves (each pass settles one more hop of
the longest dependency path). Without edits the replay reproduces the trace's own schedule.

**Steps.** Work belongs to the profiler step whose host range its launch falls in. A step on the
device ends when its last work ends and begins where the previous step ended (the first: when
its first work starts); with no steps recorded the window is one step. Edits move
work between steps, so a step's own saving is noisy (it gives the range); their mean is the
change of the steps' whole device span over their number.
"""

from __future__ import annotations

import re

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope._arrays import distinct

try:  # the one-pass solver, where it was compiled (see setup.py)
    from gpuscope.analyses import _replay
except ImportError:  # pragma: no cover - the numpy fixpoint does the same, slower
    _replay = None  # type: ignore[assignment]
from gpuscope.model import BUSY_KINDS, CopyDirection, Events, Kind, Trace

I64 = NDArray[np.int64]
B = NDArray[np.bool_]

#: "No constraint": far below any time of a window (times are relative to the window's start).
NEG = -(1 << 42)
#: Offset between chains in the segmented scan: above any span of a window (about 4.9 hours).
_SEG = 1 << 44
#: A blocking call returns at most this long before the end of the work it waited for (clocks
#: of host and device agree to a few µs).
RETURN_TOLERANCE_NS = 2_000
#: The latency between a launch call's start and its kernel's start, when the trace shows none.
DEFAULT_LAUNCH_LATENCY_NS = 5_000
#: Work that starts within this of its stream predecessor's end was queued behind it, not
#: waiting for its launch (back-to-back kernels start 1-5 µs apart).
QUEUED_GAP_NS = 10_000
#: A replay gives up after this many passes (each settles one more hop of the longest path):
#: long zig-zags of tiny kernels between streams (thousands of hops) do not settle in time, and
#: an unsettled replay (from below) would promise too much.
MAX_PASSES = 64

_RECORD = re.compile(r"^(?:cuda|hip)EventRecord|^cuEventRecord")
_WAIT_EVENT = re.compile(r"^(?:cuda|hip)StreamWaitEvent|^cuStreamWaitEvent")
_SYNC = re.compile(
    r"^(?:cuda|hip)(?:Device|Stream|Event|Ctx)Synchronize|^cu(?:Ctx|Stream|Event)Synchronize"
)
_FREE = re.compile(r"^(?:cuda|hip)Free(?:Host)?(?:_v\d+)?$|^cuMemFree")
_BLOCKING_COPY = re.compile(
    r"^(?:cuda|hip)Memcpy(?:2D|3D|Peer|ToSymbol|FromSymbol)?(?:_v\d+)?$|^cuMemcpy[DH]to[DH]"
)
_COPY_CALL = re.compile(r"^(?:cuda|hip|cu)Memcpy")
_QUERY = re.compile(r"^(?:cuda|hip)(?:Event|Stream)Query|^cu(?:Event|Stream)Query")
#: Calls that only enqueue work: their median cost is what a launch costs the host.
_ENQUEUE = re.compile(r"Launch|^(?:cuda|hip)Memcpy\w*Async|^(?:cuda|hip)MemsetAsync")


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
    ev = trace.events
    kind = ev.kind
    runtime = np.flatnonzero(kind == Kind.RUNTIME)
    device = np.flatnonzero(ev.of_kind(*BUSY_KINDS) & (ev.device >= 0) & (ev.dur_ns >= 0))
    origin = int(
        min(ev.start_ns[runtime].min(initial=1 << 62), ev.start_ns[device].min(initial=1 << 62))
    )
    if device.size == 0:
        origin = 0

    # Host chains: per thread, top-level calls only.
    thread_key = (ev.pid[runtime] << 32) + (ev.tid[runtime] & 0xFFFFFFFF)
    order = np.argsort(thread_key, kind="stable")  # rows are in start order already
    hrows, hkey = runtime[order], thread_key[order]
    hstart, hend = ev.start_ns[hrows] - origin, ev.end_ns[hrows] - origin
    new_thread = np.ones(hrows.size, dtype=np.bool_)
    new_thread[1:] = hkey[1:] != hkey[:-1]
    thread_id = np.cumsum(new_thread) - 1
    # Running max of previous ends within a thread: a call that starts before it is nested.
    prev_end = np.full(hrows.size, NEG, dtype=np.int64)
    if hrows.size:
        seg = thread_id * _SEG
        running = np.maximum.accumulate(hend + seg) - seg
        prev_end[1:] = running[:-1]
        prev_end[new_thread] = NEG
    top = hstart >= prev_end
    outer = np.cumsum(top) - 1  # index among top-level calls of each call's enclosing call
    host_rows = hrows[top]

    # Device chains: per (device, stream), by start.
    dkey = (ev.device[device].astype(np.int64) << 40) + (ev.stream[device] & ((1 << 40) - 1))
    dorder = np.argsort(dkey, kind="stable")
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
    dur = end - start
    n = rows.size
    node_of_row = np.full(len(ev), -1, dtype=np.int64)
    node_of_row[hrows] = outer
    node_of_row[drows] = np.arange(nh, n)

    prev = np.arange(n) - 1
    prev[first] = -1
    prev_end_all = np.where(prev >= 0, end[np.maximum(prev, 0)], NEG)
    gap = np.zeros(n, dtype=np.int64)
    gap[:nh] = np.where(first[:nh], 0, np.maximum(start[:nh] - prev_end_all[:nh], 0))

    # Launch edges.
    dnodes = np.arange(nh, n)
    launcher = node_of_row[np.maximum(ev.link[drows], 0)]
    linked = (ev.link[drows] >= 0) & (launcher >= 0) & (launcher < nh)
    launch_dst, launch_src = dnodes[linked], launcher[linked]
    observed = np.maximum(start[launch_dst] - start[launch_src], 0)
    waited_launch = start[launch_dst] > prev_end_all[launch_dst] + QUEUED_GAP_NS
    event_src, event_dst = _event_edges(ev, host, start, chain, launch_src, launch_dst, rows, trace)
    # The trace decides: work that started before the work it would wait for ended did not wait.
    agrees = start[event_dst] >= end[event_src] - RETURN_TOLERANCE_NS
    event_src, event_dst = event_src[agrees], event_dst[agrees]
    by_event = np.zeros(n, dtype=np.bool_)
    by_event[event_dst] = start[event_dst] <= end[event_src] + RETURN_TOLERANCE_NS
    bound = waited_launch & ~by_event[launch_dst]
    latency = int(np.median(observed[bound])) if bound.any() else DEFAULT_LAUNCH_LATENCY_NS
    latency = min(latency, DEFAULT_LAUNCH_LATENCY_NS * 4)
    delay = np.where(bound, observed, np.minimum(observed, latency))

    fixed = np.full(n, NEG, dtype=np.int64)
    fixed[:nh][first[:nh]] = start[:nh][first[:nh]]
    no_launch = np.ones(n, dtype=np.bool_)
    no_launch[:nh] = False
    no_launch[launch_dst] = False
    fixed[no_launch] = start[no_launch]

    host_ids = ev.name_id[host_rows]
    enqueues = _named(trace, host_ids, _ENQUEUE)
    call_ns = int(np.median(dur[:nh][enqueues])) if enqueues.any() else 5_000
    # Polling: a run of event / stream queries on a thread is the host waiting for work to end
    # (the loop exits on the query that finds it done). The last query is a sync; the polling
    # before it is waiting, not the host's own work, so it takes no time of its own.
    query = _named(trace, host_ids, _QUERY)
    in_chain_prev = np.zeros(nh, dtype=np.bool_)
    in_chain_prev[1:] = query[:-1] & ~first[1:nh]
    in_chain_next = np.zeros(nh, dtype=np.bool_)
    in_chain_next[:-1] = query[1:] & ~first[1:nh]
    poll_last = query & in_chain_prev & ~in_chain_next
    polling = query & in_chain_next
    gap[:nh][query & in_chain_prev] = 0
    dur[:nh][polling] = 0
    wait_src, wait_dst, wait_tail, wait_copy, own = _waits(
        ev,
        trace,
        host_ids,
        host_rows,
        node_of_row,
        start,
        end,
        chain,
        nh,
        launch_src,
        launch_dst,
        poll_last,
    )
    # A synchronous copy starts once the call has staged (or the stream drained): its delay is
    # counted from the later of the two, so it is both a launch delay and a stream gap.
    copy_nodes = own[wait_copy]
    if copy_nodes.size:
        dst_pos = np.searchsorted(launch_dst, copy_nodes)
        ok = (dst_pos < launch_dst.size) & (
            launch_dst[np.minimum(dst_pos, launch_dst.size - 1)] == copy_nodes
        )
        dst_pos, copy_nodes = dst_pos[ok], copy_nodes[ok]
        calls = launch_src[dst_pos]
        begin = np.maximum(start[calls], prev_end_all[copy_nodes])
        off = np.maximum(start[copy_nodes] - begin, 0)
        delay[dst_pos] = off
        gap[copy_nodes] = off
    # A blocking call's own cost is what it takes past the end of what it waited for.
    dur[wait_dst] = np.where(
        end[wait_src] > start[wait_dst], np.maximum(wait_tail, 0), dur[wait_dst]
    )
    steps, step_of = _steps(trace, origin, start, host, launch_src, launch_dst, n)
    in_steps = np.flatnonzero(~host & (step_of >= 0))
    step_order = in_steps[np.argsort(step_of[in_steps], kind="stable")]
    grouped = step_of[step_order]
    step_bounds = (
        np.flatnonzero(np.r_[True, grouped[1:] != grouped[:-1]]) if grouped.size else grouped
    )
    return Graph(
        trace=trace,
        origin_ns=origin,
        rows=rows,
        host=host,
        chain=chain,
        first=first,
        start=start,
        end=end,
        dur=dur,
        gap=gap,
        fixed=fixed,
        launch_src=launch_src,
        launch_dst=launch_dst,
        launch_delay=delay,
        event_src=event_src,
        event_dst=event_dst,
        wait_src=wait_src,
        wait_dst=wait_dst,
        wait_tail=wait_tail,
        wait_copy=wait_copy,
        node_of_row=node_of_row,
        launch_latency_ns=latency,
        call_ns=call_ns,
        step_of=step_of,
        steps=steps,
        step_order=step_order,
        step_bounds=step_bounds.astype(np.int64),
    )


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
    trace: Trace,
    host_ids: NDArray[np.int32],
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
    is_sync = _named(trace, host_ids, _SYNC) | _named(trace, host_ids, _FREE) | poll_last
    is_copy = _named(trace, host_ids, _COPY_CALL)
    blocking_name = _named(trace, host_ids, _BLOCKING_COPY)
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
    trace: Trace,
) -> tuple[I64, I64]:
    """Record / wait-event pairs on each thread, turned into stream-to-stream edges."""
    nh = int(host.sum())
    n = start.size
    name_ids = ev.name_id[rows[:nh]]
    is_rec = _named(trace, name_ids, _RECORD)
    is_wait = _named(trace, name_ids, _WAIT_EVENT)
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


def _named(trace: Trace, name_ids: NDArray[np.int32], pattern: re.Pattern[str]) -> B:
    """Rows whose name matches, decided once per distinct name of the calls."""
    used = distinct(name_ids)
    hits = np.array([pattern.search(trace.names[i]) is not None for i in used.tolist()])
    if not hits.any():
        return np.zeros(name_ids.size, dtype=np.bool_)
    return hits[np.searchsorted(used, name_ids)]


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
    ls, ld, lw = (
        g.launch_src[keep_launch],
        g.launch_dst[keep_launch],
        edit.launch_delay[keep_launch],
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
    seg = g.chain * _SEG
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


# --- the edits: one per fix ---------------------------------------------------------------------

#: What each edit assumes, in the words a finding shows. Causes not here have no edit.
ASSUMPTIONS: dict[str, str] = {
    "data_loader": (
        "the data loader keeps up (workers prefetch the next batch): the host's time inside"
        " the loader's __next__ becomes 0"
    ),
    "host_sync": (
        "the host no longer waits at these syncs (the value is read later, or not at all): each"
        " returns at once and the work behind it keeps running"
    ),
    "launch_overhead": (
        "the kernels after launch gaps run back to back, as under a CUDA graph: they keep their"
        " durations and the host's time issuing them goes"
    ),
    "h2d_copy": (
        "the copies come from pinned memory, asynchronously: the host does not wait for them"
        " and each runs at the pinned rate (the fastest pinned host-to-device copy in the trace,"
        " else twice its pageable rate), overlapping the work that does not depend on it"
    ),
    "exposed_communication": (
        "collectives that ran with no compute alongside start as soon as they are launched"
        " (their data is ready earlier, as with DDP's buckets during backward) and overlap the"
        " compute that does not depend on them"
    ),
    "fp32_gemm": (
        "FP32 GEMMs run on tensor cores: faster by the facts table's tensor-core / FP32 peak"
        " ratio, but no faster than their bytes at the memory bandwidth"
    ),
    "straggler": (
        "the straggler arrives with the next-to-last rank: the others' waiting inside the"
        " collectives it came last at shrinks by its lateness, and it keeps pace with them"
    ),
    "collective_wait": (
        "the ranks arrive at each collective together: the waiting inside collectives goes"
    ),
    "allocator": (
        "allocations hit the caching allocator: cudaMalloc / cudaFree return at once and no"
        " longer synchronise the device"
    ),
    "checkpoint": (
        "checkpoints are written in the background: the host's time saving them, and its waits"
        " for their copies, go"
    ),
}


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
    collective_rows: I64 = msgspec.field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    wait_ns: I64 = msgspec.field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    straggler_cut_ns: I64 = msgspec.field(default_factory=lambda: np.zeros(0, dtype=np.int64))


def apply_edit(g: Graph, inputs: EditInputs, cause: str, edit: Edit) -> None:
    """Change ``edit`` in place to the fix of ``cause`` (a no-op for causes with no edit)."""
    from gpuscope.analyses.host import HostActivity  # noqa: PLC0415 - only edits need it

    if cause == "data_loader":
        _drop_host_time(g, inputs, edit, HostActivity.DATA_LOADER)
    elif cause == "checkpoint":
        _drop_host_time(g, inputs, edit, HostActivity.CHECKPOINT)
        _unblock(g, edit, _calls_in(g, inputs, HostActivity.CHECKPOINT), pinned=False)
    elif cause == "host_sync":
        _unblock(g, edit, _calls_of(g, inputs, HostActivity.HOST_SYNC), pinned=False)
    elif cause == "allocator":
        calls = _calls_of(g, inputs, HostActivity.ALLOCATOR)
        _unblock(g, edit, calls, pinned=False)
        edit.dur[calls] = 0
    elif cause == "h2d_copy":
        _unblock(g, edit, _calls_of(g, inputs, HostActivity.H2D_COPY), pinned=True)
    elif cause == "launch_overhead":
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
    elif cause == "exposed_communication":
        nodes = _nodes(g, inputs.exposed_comm_rows)
        edit.event_keep &= ~np.isin(g.event_dst, nodes)
    elif cause == "fp32_gemm":
        nodes = _nodes(g, inputs.fp32_rows)
        known = g.node_of_row[inputs.fp32_rows] >= 0
        faster = edit.dur[nodes] / max(inputs.tensor_ratio, 1.0)
        if inputs.memory_bytes_per_s:
            floor = inputs.fp32_bytes[known] / inputs.memory_bytes_per_s * 1e9
            faster = np.where(np.isnan(floor), faster, np.maximum(faster, floor))
        edit.dur[nodes] = np.minimum(edit.dur[nodes], faster.astype(np.int64))
    elif cause in ("straggler", "collective_wait"):
        cut = inputs.straggler_cut_ns if cause == "straggler" else inputs.wait_ns
        nodes = _nodes(g, inputs.collective_rows)
        known = g.node_of_row[inputs.collective_rows] >= 0
        edit.dur[nodes] = np.maximum(edit.dur[nodes] - cut[known], 0)


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


def _drop_host_time(g: Graph, inputs: EditInputs, edit: Edit, activity: int) -> None:
    starts, ends = _spans(g, inputs, activity)
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


def _unblock(g: Graph, edit: Edit, calls: I64, *, pinned: bool) -> None:
    """The calls no longer wait: each costs what a launch costs; a copy it made runs async."""
    waiting = np.isin(g.wait_dst, calls)
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
        ev = g.trace.events
        rows = g.rows[copies]
        pageable = ev.pageable[rows]
        rate = _pinned_rate(g)
        nbytes = ev.bytes[rows].astype(np.float64)
        at_rate = nbytes / rate * 1e9 if rate else edit.dur[copies] / 2.0
        faster = np.where(pageable & (nbytes > 0), at_rate, edit.dur[copies])
        edit.dur[copies] = np.minimum(edit.dur[copies], faster.astype(np.int64))


def _pinned_rate(g: Graph) -> float | None:
    """The fastest pinned host-to-device copy of 1 MiB or more, in bytes per second."""
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


# --- predictions ------------------------------------------------------------------------------


class Prediction(msgspec.Struct, frozen=True):
    """What a fix is worth, per GPU and step, from replaying the trace with it applied."""

    cause: str  # a finding's cause, or "all" for every fix together
    assumption: str
    step_ns: float  # measured: mean over ranks and steps
    predicted_step_ns: float
    saving_ns_per_step: float  # per GPU
    saving_low_ns_per_step: float  # the spread over steps
    saving_high_ns_per_step: float
    saving_ns: int  # over the steps replayed, summed over ranks (as findings' lost_ns is)
    steps: int  # steps replayed per rank
    note: str | None = None

    @property
    def faster_pct(self) -> float:
        return 100.0 * self.saving_ns_per_step / self.step_ns if self.step_ns else 0.0


def _steps_of(g: Graph, edit: Edit) -> tuple[NDArray[np.float64], bool]:
    start, end, settled = replay(g, edit)
    return step_times(g, start, end), settled


def _step_part(g: Graph, rows: I64, ns: I64) -> int:
    """The sum of ``ns`` over the rows whose work falls in the steps replayed."""
    nodes = g.node_of_row[rows]
    known = nodes >= 0
    k = g.step_of[nodes[known]]
    return int(ns[known][k >= 0].sum())


class Replayer:
    """The graphs of a job's traces, their baseline replays, and predictions for edit sets."""

    def __init__(self, graphs: list[Graph], inputs: list[EditInputs], stragglers: set[int]) -> None:
        self.graphs = graphs
        self.inputs = inputs
        self.stragglers = stragglers  # graph positions of straggler ranks
        self.measured = [step_times(g, g.start, g.end) for g in graphs]
        self.baseline = [_steps_of(g, Edit.none(g))[0] for g in graphs]

    def predict(self, causes: list[str], name: str | None = None) -> Prediction | None:
        causes = [c for c in causes if c in ASSUMPTIONS]
        if not causes or not self.graphs:
            return None
        per_rank: list[NDArray[np.float64]] = []
        skip = self.stragglers if "straggler" in causes else set()
        waiting_removed = 0
        for i, (g, inputs) in enumerate(zip(self.graphs, self.inputs, strict=True)):
            edit = Edit.none(g)
            for cause in causes:
                apply_edit(g, inputs, cause, edit)
            after, settled = _steps_of(g, edit)
            if not settled:
                return None  # a promise the replay could not check: none rather than too much
            if after.size != self.baseline[i].size or i in skip:
                continue
            per_rank.append(self.baseline[i] - after)
            if "straggler" in causes:
                waiting_removed += int(
                    _step_part(g, inputs.collective_rows, inputs.straggler_cut_ns)
                )
            elif "collective_wait" in causes:
                waiting_removed += int(_step_part(g, inputs.collective_rows, inputs.wait_ns))
        measured = [m for m in self.measured if m.size]
        if not per_rank or not measured:
            return None
        pooled = np.concatenate(per_rank)
        step_ns = float(np.mean([m.mean() for m in measured]))
        saving = float(np.mean([s.mean() for s in per_rank]))
        total = round(float(pooled.sum()))
        note = None
        if waiting_removed and len(causes) == 1:
            note = (
                f"the other ranks would wait {waiting_removed / 1e6:,.2f} ms less inside"
                f" collectives in all; {total / 1e6:,.2f} ms of that shortens their steps: the"
                " rest of the waiting ran alongside other work, or the work after it waited for"
                " the host, which keeps its time"
            )
        low, high = (
            (float(pooled.min()), float(pooled.max()))
            if pooled.size < 10
            else (float(np.percentile(pooled, 10)), float(np.percentile(pooled, 90)))
        )
        cause = name or causes[0]
        assumption = (
            ASSUMPTIONS[causes[0]] if len(causes) == 1 else "each fix as its own finding assumes"
        )
        return Prediction(
            cause=cause,
            assumption=assumption,
            step_ns=step_ns,
            predicted_step_ns=step_ns - saving,
            saving_ns_per_step=saving,
            saving_low_ns_per_step=low,
            saving_high_ns_per_step=high,
            saving_ns=total,
            steps=max(int(m.size) for m in measured),
            note=note,
        )
