"""Where the device time goes in the model's own terms: per module path and per operator.

Contract: :func:`host_scopes` reads a trace's host ranges once (pure, no device facts);
:func:`device_views` takes one device's :class:`~gpuscope.analyses.timeline.DeviceWork`, its
:class:`~gpuscope.analyses.attribution.IdleAttribution` and those scopes, and returns a
:class:`DeviceViews`: a tree of module paths and a table of operators, each row with the device
time of the work launched inside it (total: children included; self: not in any child), its
launches, and the idle time decided inside it.

How device work finds its owner: every kernel, copy and memset carries the row of the runtime
call that launched it (``Events.link``, joined by correlation id). The host ranges that were open
on that call's thread when it ran are its owners: the innermost one is the *self* owner and
every range around it counts the work in its *total*. This is the launching thread's call stack
at launch time, which is what PyTorch's profiler records:

* module ranges: ``nn.Module: Linear_0`` events (``with_modules=True`` or ``with_stack=True``),
  ``record_function`` / NVTX ranges (Kineto ``user_annotation``, Nsight Systems ``NVTX_EVENTS``),
  and, when a trace has no module events, Python ``forward`` frames (a module's ``forward`` is
  where its kernels are launched from). Names lose the per-call counter PyTorch appends
  (``ProfilerStep#12`` -> ``ProfilerStep``) so that every step adds to one path;
* operator ranges: framework operators (``aten::linear`` around ``aten::addmm``), and the
  ``emit_nvtx`` ranges Nsight Systems records for them.

The backward pass runs on the autograd engine's own thread, where no module range is open (the
module hooks that open them run in the forward pass): its work lands under ``(no range)`` unless a
``record_function`` range was open there, and the operator view still names its operators.

Device time is *busy* time, so the module tree's roots sum to the device's busy time exactly: where
work of several streams overlaps, each busy nanosecond goes to one piece of work, in the order of
the exclusive split of :mod:`gpuscope.analyses.timeline` (compute > communication > memcpy >
memset; among equals the one that started last). ``kernel_ns`` keeps the plain sum of the work's
durations. Work whose launch is not in the trace (launched before the profiler's host window
opened) is its own root, ``(launch not in trace)``; work launched outside every range is
``(no range)``. Idle time goes to the range around the host event that decided the gap's cause
(:mod:`gpuscope.analyses.attribution`), or around the launch of the work that ended the gap when
no host event decided it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope._arrays import distinct, distinct_inverse, member
from gpuscope.analyses.attribution import IdleAttribution
from gpuscope.analyses.intervals import last_containing
from gpuscope.analyses.timeline import DeviceWork, WorkClass
from gpuscope.model import Ids, Kind, Trace, narrow

#: Roots for device work that no range owns.
NO_RANGE = "(no range)"
NO_LAUNCH = "(launch not in trace)"
NO_OPERATOR = "(no operator)"
BACKWARD = "(backward)"
#: The autograd engine runs each backward function as an operator of this name, on its own thread.
_BACKWARD_OP = "autograd::engine::evaluate_function: "

_MODULE_PREFIX = "nn.Module: "
#: PyTorch numbers repeated ranges (``ProfilerStep#12``); the path should not.
_CALL_COUNTER = re.compile(r"#\d+$")
_INSTANCE = re.compile(r"_\d+$")
_FORWARD_FRAME = re.compile(r"^(.*)\((\d+)\): forward$")
_PRIORITY = (WorkClass.COMPUTE, WorkClass.COMMUNICATION, WorkClass.MEMCPY, WorkClass.MEMSET)


class ViewRow(msgspec.Struct, frozen=True):
    """One module path (a node of the tree) or one operator (a row of the table)."""

    name: str
    parent: int  # index of the parent node in the same list; -1 for a root (always -1 for ops)
    depth: int
    calls: int  # times the range ran (0 for the synthetic roots)
    launches: int  # device events launched inside it, children included
    self_launches: int
    total_ns: int  # busy time of that work, children included
    self_ns: int
    kernel_ns: int  # summed durations of that work (overlapping streams count twice)
    idle_ns: int  # idle time decided inside it, children included
    self_idle_ns: int


class DeviceViews(msgspec.Struct, frozen=True):
    """The module tree (preorder, costliest sibling first) and the operator table of one device."""

    busy_ns: int
    idle_ns: int
    module_source: str  # "nn.Module", "forward frames" or "ranges" (record_function / NVTX only)
    modules: list[ViewRow]
    #: The module tree with instances of one class merged (``Linear_0``, ``Linear_1``: ``Linear``),
    #: the view that answers "which kind of layer takes the time".
    module_types: list[ViewRow]
    operators: list[ViewRow]  # by name, costliest total first
    #: Code locations of idle gaps (as findings name them) -> index of the module row where most
    #: of their idle time landed.
    location_rows: dict[str, int] = msgspec.field(default_factory=dict)

    def path(self, index: int) -> str:
        """``ProfilerStep/Qwen2Model_0/Linear_3``: a module row's names from its root."""
        names: list[str] = []
        while index >= 0:
            names.append(self.modules[index].name)
            index = self.modules[index].parent
        return "/".join(reversed(names))


class _Tree(msgspec.Struct, frozen=True):
    """Ranges of one family on every host thread, as intervals on the threads-end-to-end clock
    (sorted by start), each mapped to the node of its path; and the nodes, parents first."""

    start: NDArray[np.int64]
    end: NDArray[np.int64]
    # Per range, so in 32 bits where they fit (``narrow``): the trees live through the diagnosis.
    parent: Ids  # position of the range around each one, -1 for none
    node: Ids  # node of each range
    node_parent: NDArray[np.int64]
    node_label: NDArray[np.int64]  # index into labels
    node_depth: NDArray[np.int64]
    node_calls: NDArray[np.int64]
    node_backward: NDArray[np.bool_]  # the path runs through an autograd engine function
    labels: list[str]

    @property
    def nodes(self) -> int:
        return int(self.node_parent.shape[0])


class HostScopes(msgspec.Struct, frozen=True):
    """The host ranges of one trace, ready to answer "which ranges were open at this event".

    Threads are laid end to end on one clock (thread ``k``'s time plus ``k`` times the trace's
    length), so that every thread's ranges are searched in one vectorised pass.
    """

    trace: Trace
    thread_keys: NDArray[np.int64]  # sorted pid << 32 | tid of every host thread
    origin_ns: int
    stride_ns: int
    module_source: str
    instance_labels: frozenset[str]  # module labels that name one instance (``Linear_3``)
    modules: _Tree
    operators: _Tree

    def clock(self, rows: NDArray[np.int64]) -> NDArray[np.int64]:
        """Start times of host ``rows`` on the threads-end-to-end clock."""
        ev = self.trace.events
        thread = np.searchsorted(self.thread_keys, _thread_key(ev.pid[rows], ev.tid[rows]))
        return thread * self.stride_ns + (ev.start_ns[rows] - self.origin_ns)


def _thread_key(pid: Ids, tid: Ids) -> NDArray[np.int64]:
    wide_pid, wide_tid = pid.astype(np.int64), tid.astype(np.int64)  # either may be int32
    return (wide_pid << 32) | (wide_tid & 0xFFFFFFFF)


def _threads(keys: NDArray[np.int64]) -> NDArray[np.int64]:
    """The distinct thread keys, sorted: one per run of equal keys is sorted, not every row (a
    thread's events come in runs; a trace of 100k host events has a few dozen)."""
    if keys.size == 0:
        return keys
    runs = np.ones(keys.size, dtype=np.bool_)
    np.not_equal(keys[1:], keys[:-1], out=runs[1:])
    return distinct(keys[runs])


def host_scopes(trace: Trace) -> HostScopes:
    """The module ranges and the operator ranges of a trace, nested into path trees."""
    ev = trace.events
    kind, names = ev.kind, trace.names
    host = ev.device < 0
    origin = int(ev.start_ns.min()) if len(ev) else 0
    stride = int(ev.end_ns.max()) - origin + 1 if len(ev) else 1
    python = np.flatnonzero(kind == Kind.PYTHON)
    frame_names = distinct(ev.name_id[python]).tolist()
    scope_rows = [np.flatnonzero(kind == Kind.ANNOTATION)]
    source = "ranges"
    module_ids = [i for i in frame_names if names[i].startswith(_MODULE_PREFIX)]
    if not module_ids:
        module_ids = [i for i in frame_names if _FORWARD_FRAME.match(names[i])]
        source = "forward frames" if module_ids else source
    else:
        source = "nn.Module"
    if module_ids:
        scope_rows.append(python[member(ev.name_id[python], module_ids)])
    scopes = HostScopes(
        trace=trace,
        thread_keys=_threads(_thread_key(ev.pid[host], ev.tid[host])),
        origin_ns=origin,
        stride_ns=stride,
        module_source=source,
        instance_labels=frozenset(
            _module_label(names[i]) for i in module_ids if names[i].startswith(_MODULE_PREFIX)
        ),
        modules=_EMPTY,
        operators=_EMPTY,
    )
    rows = np.sort(np.concatenate(scope_rows))
    return msgspec.structs.replace(
        scopes,
        modules=_tree(scopes, rows, _module_label),
        operators=_tree(scopes, np.flatnonzero(kind == Kind.CPU_OP), str),
    )


def _module_label(name: str) -> str:
    if name.startswith(_MODULE_PREFIX):
        return name[len(_MODULE_PREFIX) :]
    frame = _FORWARD_FRAME.match(name)
    if frame is not None:
        return f"{frame.group(1)}:{frame.group(2)} (forward)"
    return _CALL_COUNTER.sub("", name)


_NONE = np.zeros(0, dtype=np.int64)
_EMPTY = _Tree(_NONE, _NONE, _NONE, _NONE, _NONE, _NONE, _NONE, _NONE, _NONE.astype(np.bool_), [])


def _tree(scopes: HostScopes, rows: NDArray[np.int64], label_of: Callable[[str], str]) -> _Tree:
    """Nest ``rows`` (host ranges of any threads) and map each to the node of its path.

    A range's level is how many ranges of its thread were still open when it began; its parent
    is the last range before it one level up. For ranges that nest properly, as one thread's
    call stack does, that is the innermost range around it; a range not inside that one (ranges
    that overlap without nesting) starts a path of its own."""
    ev = scopes.trace.events
    rows = rows[ev.dur_ns[rows] > 0]  # an empty range contains no launch
    if rows.size == 0:
        return _EMPTY
    # Rows are in start order already: put each thread's together, keeping that order.
    thread = np.searchsorted(scopes.thread_keys, _thread_key(ev.pid[rows], ev.tid[rows]))
    if np.any(thread[1:] < thread[:-1]):
        order = np.argsort(thread.astype(np.int16), kind="stable")  # a radix sort
        rows, thread = rows[order], thread[order]
    start = thread * scopes.stride_ns + (ev.start_ns[rows] - scopes.origin_ns)
    end = start + ev.dur_ns[rows]
    if np.any((start[1:] == start[:-1]) & (end[1:] > end[:-1])):
        order = np.lexsort((-end, start))  # a parent before the children that start with it
        rows, start, end = rows[order], start[order], end[order]
    n = rows.size
    # Ranges after this one start no earlier and are not empty: they have not ended yet. (Ends of
    # ranges in start order are runs of nearly sorted values: a merge sort takes a tenth of the
    # default sort's time on them.)
    ends = np.sort(end, kind="stable")
    level = np.arange(n, dtype=np.int64) - np.searchsorted(ends, start, side="right")
    level = np.maximum(level, 0)
    small = level.astype(np.int16) if int(level.max()) < 1 << 15 else level
    by_level = np.argsort(small, kind="stable")  # by level, then position
    bounds = np.searchsorted(level[by_level], np.arange(int(level.max()) + 2))
    label = _labels(scopes.trace.names, ev.name_id[rows], label_of)
    width = len(label.labels)
    parent = np.full(n, -1, dtype=np.int64)
    node = np.full(n, -1, dtype=np.int64)
    index: dict[tuple[int, int], int] = {}
    node_parent: list[int] = []
    node_label: list[int] = []
    node_depth: list[int] = []
    above = by_level[:0]
    # Level by level: each range's parent is the last range one level up that began before it;
    # paths are interned as they go (a parent's node is known before its children's).
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        members = by_level[lo:hi]
        if above.size and members.size:
            at = np.searchsorted(above, members) - 1
            candidate = above[np.maximum(at, 0)]
            ok = (at >= 0) & (end[candidate] >= end[members])
            parent[members] = np.where(ok, candidate, -1)
        above = members
        up = parent[members]
        up_node = np.where(up >= 0, node[np.maximum(up, 0)], -1)
        unique, inverse = distinct_inverse((up_node + 1) * width + label.of_range[members])
        ids = np.empty(unique.size, dtype=np.int64)
        for j, k in enumerate(unique.tolist()):
            pair = (k // width - 1, k % width)
            found = index.get(pair)
            if found is None:
                found = index[pair] = len(node_parent)
                node_parent.append(pair[0])
                node_label.append(pair[1])
                node_depth.append(0 if pair[0] < 0 else node_depth[pair[0]] + 1)
            ids[j] = found
        node[members] = ids[inverse]
    count = len(node_parent)
    return _Tree(
        start=start,
        end=end,
        parent=narrow(parent),
        node=narrow(node),
        node_parent=np.array(node_parent, dtype=np.int64),
        node_label=np.array(node_label, dtype=np.int64),
        node_depth=np.array(node_depth, dtype=np.int64),
        node_calls=np.bincount(node, minlength=count).astype(np.int64),
        node_backward=_backward(node_parent, node_label, label.labels),
        labels=label.labels,
    )


def _backward(parent: list[int], label: list[int], labels: list[str]) -> NDArray[np.bool_]:
    """Per node: whether it or a range around it is a backward function of the autograd engine."""
    engine = [text.startswith(_BACKWARD_OP) for text in labels]
    flags: list[bool] = []
    for p, lab in zip(parent, label, strict=True):
        flags.append(engine[lab] or (p >= 0 and flags[p]))
    return np.array(flags, dtype=np.bool_)


class _Labels(msgspec.Struct, frozen=True):
    of_range: NDArray[np.int64]
    labels: list[str]


def _labels(
    names: list[str], name_ids: NDArray[np.int32], label_of: Callable[[str], str]
) -> _Labels:
    """Each range's label (an index into ``labels``), decided once per distinct name."""
    labels: list[str] = []
    seen: dict[str, int] = {}
    of_name = np.zeros(len(names), dtype=np.int64)
    for i in distinct(name_ids).tolist():
        text = label_of(names[i])
        of_name[i] = seen.setdefault(text, len(labels))
        if of_name[i] == len(labels):
            labels.append(text)
    return _Labels(of_name[name_ids], labels)


# --- one device ----------------------------------------------------------------------------------


def device_views(
    work: DeviceWork, idle: IdleAttribution, scopes: HostScopes, links: bool = True
) -> DeviceViews:
    """The module tree and the operator table of one device (see the module docstring);
    ``links``: with ``location_rows`` (the reports that link findings to rows read them; else
    they are empty)."""
    ev = work.trace.events
    rows = work.rows
    launcher = ev.link[rows]
    gaps = idle.gaps
    gap_ns = gaps.end_ns - gaps.start_ns
    # A gap no host event decided belongs where the work that ended it was launched.
    after = np.searchsorted(ev.start_ns[rows], gaps.end_ns, side="left")
    next_launch = launcher[np.minimum(after, rows.size - 1)] if rows.size else after * 0 - 1
    host_rows = np.concatenate([launcher, np.where(gaps.decider >= 0, gaps.decider, next_launch)])
    known = host_rows >= 0
    t = np.zeros(host_rows.shape, dtype=np.int64)
    t[known] = scopes.clock(host_rows[known])
    # Each temporary here is a row per piece of device work: dropped once used (on tens of
    # millions of events they are the peak of a diagnosis).
    del host_rows, next_launch, after
    weights = _Weights(busy_ns=_busy_share(work), kernel_ns=ev.dur_ns[rows], idle_ns=gap_ns)
    del launcher
    ops, modules = scopes.operators, scopes.modules
    op_node = _owner(ops, t, known)
    op_slot = np.where(op_node >= 0, op_node, np.where(known, ops.nodes, ops.nodes + 1))
    module_node = _owner(modules, t, known)
    del t
    # No module range open: the autograd engine's thread (backward), or no range at all.
    backward = np.zeros(known.shape, dtype=np.bool_)
    if ops.nodes:
        backward[op_node >= 0] = ops.node_backward[op_node[op_node >= 0]]
    outside = np.where(backward, modules.nodes + 1, modules.nodes)
    module_slot = np.where(
        module_node >= 0, module_node, np.where(known, outside, modules.nodes + 2)
    )
    del op_node, module_node, backward, outside, known
    module_rows, module_index = _tree_rows(
        modules, module_slot, weights, [NO_RANGE, BACKWARD, NO_LAUNCH]
    )
    gap_slot = module_slot[rows.size :]
    return DeviceViews(
        busy_ns=work.busy.total_ns,
        idle_ns=idle.idle_ns,
        module_source=scopes.module_source,
        modules=module_rows,
        module_types=_merge_instances(module_rows, scopes.instance_labels),
        operators=_table_rows(ops, op_slot, weights, [NO_OPERATOR, NO_LAUNCH]),
        location_rows=(
            _location_rows(gaps.location, gap_ns, gap_slot, module_index) if links else {}
        ),
    )


class _Weights(msgspec.Struct, frozen=True):
    """What each attributed event adds to its owners: the launches (one each, their busy and
    kernel time), then the idle gaps (their idle time); the slots come in that order."""

    busy_ns: NDArray[np.int64]  # per launch
    kernel_ns: NDArray[np.int64]  # per launch
    idle_ns: NDArray[np.int64]  # per gap

    def sums(self, slot: NDArray[np.int64], size: int) -> NDArray[np.int64]:
        """Per slot: launches, busy, kernel and idle time (one row per slot)."""
        n = self.busy_ns.size
        launched, gaps = slot[:n], slot[n:]
        columns = (
            np.bincount(launched, minlength=size).astype(np.float64),
            np.bincount(launched, weights=self.busy_ns, minlength=size),
            np.bincount(launched, weights=self.kernel_ns, minlength=size),
            np.bincount(gaps, weights=self.idle_ns, minlength=size),
        )
        return np.stack([c.round() for c in columns], axis=1).astype(np.int64)


def _busy_share(work: DeviceWork) -> NDArray[np.int64]:
    """The busy time each piece of work owns: its duration, less what it shares with work that
    comes first in the exclusive split (see the module docstring)."""
    ev = work.trace.events
    s = ev.start_ns[work.rows]
    e = ev.end_ns[work.rows]
    if int((e - s).sum()) == work.busy.total_ns:
        return e - s  # nothing overlaps
    cuts = distinct(np.concatenate([s, e]))
    lo, length = cuts[:-1], np.diff(cuts)
    owner = np.full(lo.size, -1, dtype=np.int64)
    for work_class in _PRIORITY:
        mine = np.flatnonzero(work.work_class == work_class)
        todo = np.flatnonzero(owner < 0)
        if mine.size == 0 or todo.size == 0:
            continue
        # Among a class, the piece goes to the work that started last and still runs there.
        hit = last_containing(s[mine], e[mine] - 1, lo[todo])
        owner[todo[hit >= 0]] = mine[hit[hit >= 0]]
    owned = owner >= 0
    shares = np.bincount(owner[owned], weights=length[owned], minlength=s.size)
    return shares.round().astype(np.int64)


def _owner(tree: _Tree, t: NDArray[np.int64], known: NDArray[np.bool_]) -> NDArray[np.int64]:
    """The node of the innermost range open at each time (-1: none): the last range that began
    by then if it still runs, else the first of its enclosing ranges that does (a range that
    began and ended in between lies inside the one that is still open)."""
    node = np.full(t.shape, -1, dtype=np.int64)
    if tree.start.size == 0:
        return node
    at_time = t[known]
    inner = np.full(at_time.shape, -1, dtype=np.int64)
    latest = np.searchsorted(tree.start, at_time, side="right") - 1
    active = np.flatnonzero(latest >= 0)
    here: Ids = latest[active]
    while active.size:
        inside = tree.end[here] >= at_time[active]
        inner[active[inside]] = here[inside]
        up = tree.parent[here]
        more = ~inside & (up >= 0)
        active, here = active[more], up[more]
    node[known] = np.where(inner >= 0, tree.node[np.maximum(inner, 0)], -1)
    return node


class _Sums(msgspec.Struct, frozen=True):
    names: list[str]
    parent: list[int]
    calls: list[int]
    own: list[list[int]]  # launches, busy, kernel, idle per node (then per synthetic root)
    total: list[list[int]]


def _node_sums(tree: _Tree, slot: NDArray[np.int64], weights: _Weights, extra: list[str]) -> _Sums:
    """Per node its own sums and, added up the tree, its totals; the ``extra`` synthetic roots
    follow the nodes."""
    size = tree.nodes + len(extra)
    own = weights.sums(slot, size)
    total = own.copy()
    depth = tree.node_depth
    for d in range(int(depth.max()) if depth.size else 0, 0, -1):
        level = np.flatnonzero(depth == d)
        np.add.at(total, tree.node_parent[level], total[level])
    return _Sums(
        names=[tree.labels[i] for i in tree.node_label.tolist()] + extra,
        parent=tree.node_parent.tolist() + [-1] * len(extra),
        calls=tree.node_calls.tolist() + [0] * len(extra),
        own=own.tolist(),
        total=total.tolist(),
    )


def _row(
    name: str, parent: int, depth: int, calls: int, own: list[int], total: list[int]
) -> ViewRow:
    return ViewRow(
        name=name,
        parent=parent,
        depth=depth,
        calls=calls,
        launches=total[0],
        self_launches=own[0],
        total_ns=total[1],
        self_ns=own[1],
        kernel_ns=total[2],
        idle_ns=total[3],
        self_idle_ns=own[3],
    )


def _tree_rows(
    tree: _Tree, slot: NDArray[np.int64], weights: _Weights, extra: list[str]
) -> tuple[list[ViewRow], dict[int, int]]:
    """The nodes that launched work or decided idle time, in preorder with the costliest sibling
    first; and the row of each slot shown."""
    sums = _node_sums(tree, slot, weights, extra)
    total = sums.total
    children: dict[int, list[int]] = {}
    for i, p in enumerate(sums.parent):
        if total[i][0] or total[i][3]:
            children.setdefault(p, []).append(i)
    rows: list[ViewRow] = []
    index: dict[int, int] = {}
    stack = [(i, -1, 0) for i in _costliest(children.get(-1, []), total)[::-1]]
    while stack:
        i, parent_row, depth = stack.pop()
        index[i] = len(rows)
        rows.append(_row(sums.names[i], parent_row, depth, sums.calls[i], sums.own[i], total[i]))
        stack += [(c, index[i], depth + 1) for c in _costliest(children.get(i, []), total)[::-1]]
    return rows, index


def _merge_instances(rows: list[ViewRow], instance_labels: frozenset[str]) -> list[ViewRow]:
    """``rows`` (a tree in preorder) with the instances of one module class under one parent
    path merged: PyTorch names module events ``<class>_<n>``, n counting instances."""
    names: list[str] = []
    parents: list[int] = []
    sums: list[list[int]] = []
    merged: dict[tuple[int, str], int] = {}
    of_row: list[int] = []
    for r in rows:
        name = _INSTANCE.sub("", r.name) if r.name in instance_labels else r.name
        up = of_row[r.parent] if r.parent >= 0 else -1
        at = merged.get((up, name))
        if at is None:
            at = merged[(up, name)] = len(names)
            names.append(name)
            parents.append(up)
            sums.append([0] * 8)
        of_row.append(at)
        fields = (r.calls, r.launches, r.self_launches, r.total_ns, r.self_ns, r.kernel_ns)
        for k, value in enumerate((*fields, r.idle_ns, r.self_idle_ns)):
            sums[at][k] += value
    children: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        children.setdefault(p, []).append(i)

    def order(nodes: list[int]) -> list[int]:
        return sorted(nodes, key=lambda i: (-sums[i][3], -sums[i][6], i))

    result: list[ViewRow] = []
    stack = [(i, -1, 0) for i in order(children.get(-1, []))[::-1]]
    while stack:
        i, parent_row, depth = stack.pop()
        c = sums[i]
        index = len(result)
        result.append(ViewRow(names[i], parent_row, depth, *c))
        stack += [(k, index, depth + 1) for k in order(children.get(i, []))[::-1]]
    return result


def _costliest(nodes: list[int], total: list[list[int]]) -> list[int]:
    return sorted(nodes, key=lambda i: (-total[i][1], -total[i][3], i))


def _table_rows(
    tree: _Tree, slot: NDArray[np.int64], weights: _Weights, extra: list[str]
) -> list[ViewRow]:
    """Operators by name: self sums over every node of the name; totals over the nodes with no
    ancestor of the same name, so that a recursive operator counts its work once."""
    sums = _node_sums(tree, slot, weights, extra)
    labels = tree.node_label.tolist() + [-1 - k for k in range(len(extra))]
    above: list[frozenset[int]] = []
    by_name: dict[str, list[list[int]]] = {}
    for i, (label, p) in enumerate(zip(labels, sums.parent, strict=True)):
        ancestors = above[p] | {labels[p]} if p >= 0 else frozenset()
        above.append(ancestors)
        entry = by_name.setdefault(sums.names[i], [[0, 0, 0, 0], [0, 0, 0, 0], [0]])
        entry[2][0] += sums.calls[i]
        for k in range(4):
            entry[0][k] += sums.own[i][k]
            if label not in ancestors:
                entry[1][k] += sums.total[i][k]
    rows = [
        _row(name, -1, 0, calls[0], own, total)
        for name, (own, total, calls) in by_name.items()
        if total[0] or total[3]
    ]
    rows.sort(key=lambda r: (-r.total_ns, -r.idle_ns, r.name))
    return rows


def _location_rows(
    location: list[str | None],
    gap_ns: NDArray[np.int64],
    gap_slot: NDArray[np.int64],
    index: dict[int, int],
) -> dict[str, int]:
    """For each code location a finding may name: the module row where most of its idle landed."""
    located = [(i, where) for i, where in enumerate(location) if where is not None]
    if not located or not index:
        return {}
    codes: dict[str, int] = {}
    code = np.array([codes.setdefault(where, len(codes)) for _, where in located], dtype=np.int64)
    at = np.array([i for i, _ in located], dtype=np.intp)
    row_of_slot = np.full(max(*index, int(gap_slot.max())) + 1, -1, dtype=np.int64)
    row_of_slot[list(index)] = list(index.values())
    row = row_of_slot[gap_slot[at]]
    kept = row >= 0
    rows = len(index)
    spent = np.bincount(
        code[kept] * rows + row[kept], weights=gap_ns[at][kept], minlength=len(codes) * rows
    ).reshape(len(codes), rows)
    best = spent.argmax(axis=1).tolist()
    found = (spent.max(axis=1) > 0).tolist()
    return {where: best[c] for where, c in codes.items() if found[c]}
