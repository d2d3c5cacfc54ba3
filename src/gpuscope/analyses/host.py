"""What the host was doing: host events sorted into the activities that starve a GPU.

Contract: :func:`host_activity` classifies every host-side event of a trace once, by name, into a
:class:`HostActivity` (or none), and answers "which Python line issued this event" through
:meth:`HostIndex.location`. Pure: nothing here knows about devices or gaps.

The user's line comes from Python frames recorded as events (``python_function``, 2022+ traces
profiled with ``with_stack=True``) or, where a trace has none, from the ``Call stack`` argument
that 2021 traces put on each operator (``train.py(42): step;.../module.py(889): _call_impl``,
innermost frame first): the first frame of it outside torch, installed packages and the standard
library, of the innermost operator running at that time.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from enum import IntEnum
from functools import lru_cache

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope._arrays import distinct
from gpuscope.analyses.intervals import Intervals, last_containing, union
from gpuscope.model import CopyDirection, Extras, Ids, Kind, Trace, narrow
from gpuscope.runtime_apis import runtime_role


class HostActivity(IntEnum):
    NONE = 0
    HOST_SYNC = 1  # the host blocks until the device drains
    DATA_LOADER = 2
    H2D_COPY = 3  # a host-to-device copy the host waits for (pageable or synchronous)
    ALLOCATOR = 4  # cudaMalloc / cudaFree (cudaFree synchronises the device)
    CHECKPOINT = 5  # saving state
    COMM_WAIT = 6  # blocked in a collective or a barrier on the host
    LAUNCH = 7  # launching device work


_SYNC_OP = re.compile(r"^aten::(?:item|_local_scalar_dense|nonzero|is_nonzero|equal|tolist)$")
_DATA_LOADER = re.compile(
    r"^enumerate\(DataLoader\)|torch/utils/data/dataloader\.py|DataLoaderIter"
)
_CHECKPOINT = re.compile(
    r"torch/serialization\.py\(\d+\): (?:save|_save)|torch/distributed/checkpoint/"
    r"|\bsave_checkpoint\b|\bcheckpoint_save\b|safetensors.*save"
)
_COMM = re.compile(
    r"^(?:nccl|gloo|hccl|mpi|ucc|xla):|^c10d::|^record_param_comms$|ProcessGroup\w*::|"
    r"torch/distributed/distributed_c10d\.py"
)
_NOT_USER_CODE = re.compile(
    r"site-packages/|dist-packages/|^torch/|/torch/|^<built-in|^<frozen|threading\.py|runpy\.py"
    r"|^<string>|/lib/python3"
)
_FRAME = re.compile(r"^(.*)\((\d+)\): (.*)$")
_STDLIB = frozenset(sys.stdlib_module_names)


#: Name classifications are remembered per name (bounded): the ranks of one job share them.
_NAMES_REMEMBERED = 1 << 14


@lru_cache(maxsize=_NAMES_REMEMBERED)
def _is_user_frame(name: str) -> bool:
    """A frame of the user's code: not torch, not an installed package, not the standard library."""
    if _NOT_USER_CODE.search(name) or not _FRAME.match(name):
        return False
    path = name.split("(", 1)[0]
    top = path.split("/", 1)[0].removesuffix(".py")
    return top not in _STDLIB


#: The host activity of a runtime call, by its role (data/runtime_apis.csv): a blocking copy
#: counts as a sync until its direction refines it (a host-to-device copy is ``H2D_COPY``).
_ACTIVITY_OF_ROLE = {
    "sync": HostActivity.HOST_SYNC,
    "alloc": HostActivity.ALLOCATOR,
    "free": HostActivity.ALLOCATOR,
    "copy": HostActivity.HOST_SYNC,
    "async_copy": HostActivity.LAUNCH,
    "launch": HostActivity.LAUNCH,
}


def _runtime_activity(name: str) -> HostActivity:
    return _ACTIVITY_OF_ROLE.get(runtime_role(name), HostActivity.NONE)


@lru_cache(maxsize=_NAMES_REMEMBERED)
def _named_activity(name: str) -> HostActivity:
    """Activities recognised from CPU op, annotation and Python frame names."""
    if _DATA_LOADER.search(name):
        return HostActivity.DATA_LOADER
    if _CHECKPOINT.search(name):
        return HostActivity.CHECKPOINT
    if _COMM.search(name):
        return HostActivity.COMM_WAIT
    if _SYNC_OP.search(name):
        return HostActivity.HOST_SYNC
    return HostActivity.NONE


class HostIndex(msgspec.Struct):
    """Host events of one trace, classified, with per-thread lookups built on demand."""

    trace: Trace
    activity: NDArray[np.uint8]  # HostActivity per event row (NONE for device rows)
    main_thread: tuple[int, int]
    #: Per thread, its Python frames' rows and its CPU ops' rows. Their start times are
    #: gathered per call, not kept: 8 bytes a row for the whole diagnosis, for a few lookups.
    _frames: dict[tuple[int, int], Ids] = msgspec.field(default_factory=dict)
    _location_cache: dict[int, str] = msgspec.field(default_factory=dict)
    _ops: dict[tuple[int, int], Ids] = msgspec.field(default_factory=dict)
    #: Every Python frame's row, ascending, and its parent frame's row (-1: none); built once.
    _parents: tuple[Ids, Ids] | None = None
    #: Per name id: 1 when the name is a frame of the user's code, 0 when not, -1 not yet known.
    _user_name: NDArray[np.int8] | None = None
    _frame_names: dict[int, str] = msgspec.field(default_factory=dict)
    _threads: dict[tuple[int, int], Ids] = msgspec.field(default_factory=dict)
    #: Per thread: ops whose recorded call stack names a user frame (rows, starts, ends, frames).
    _stacks: dict[tuple[int, int], tuple[NDArray[np.int64], NDArray[np.int64], list[str]]] = (
        msgspec.field(default_factory=dict)
    )

    def thread_rows(self, pid: int, tid: int, mask: NDArray[np.bool_]) -> Ids:
        rows = self.rows_of_thread(pid, tid)
        return rows[mask[rows]]

    def rows_of_thread(self, pid: int, tid: int) -> Ids:
        """Every row of a thread, ascending; found once per thread (several devices' gaps and
        the collectives ask about the same few threads). Row indices in 32 bits where they fit
        (``narrow``): the main thread holds most of a trace's rows, and this cache lives for the
        whole diagnosis."""
        cached = self._threads.get((pid, tid))
        if cached is None:
            ev = self.trace.events
            cached = narrow(np.flatnonzero((ev.pid == pid) & (ev.tid == tid)))
            self._threads[(pid, tid)] = cached
        return cached

    def intervals(self, rows: NDArray[np.int64]) -> Intervals:
        ev = self.trace.events
        return union(ev.start_ns[rows], ev.end_ns[rows])

    def location(self, row: int) -> str:
        """Where in the user's code ``row`` was issued: ``file.py:LINE (fn)`` or the op's name;
        a Python frame of the user's code is its own location."""
        return self.locations(np.array([row], dtype=np.int64))[0]

    def locations(self, rows: NDArray[np.int64]) -> list[str]:
        """:meth:`location` of many rows: each thread's lookups are one vectorised search rather
        than one per row (gaps and collectives ask for thousands)."""
        cache = self._location_cache
        wanted = distinct(rows)
        todo = wanted[[r not in cache for r in wanted.tolist()]]
        if todo.size:
            ev = self.trace.events
            own = ev.kind[todo] == Kind.PYTHON
            own[own] = self._is_user(ev.name_id[todo[own]])
            for row, name_id in zip(
                todo[own].tolist(), ev.name_id[todo[own]].tolist(), strict=True
            ):
                cache[row] = self._frame_name(name_id)
            todo = todo[~own]
            pids, tids = ev.pid[todo], ev.tid[todo]
            for pid in distinct(pids).tolist():
                of_pid = pids == pid
                for tid in distinct(tids[of_pid]).tolist():
                    mine = todo[of_pid & (tids == tid)]
                    frames = self.user_frames(pid, tid, ev.start_ns[mine])
                    ops = self._op_names(pid, tid, mine)
                    for row, frame, op in zip(mine.tolist(), frames, ops, strict=True):
                        cache[row] = frame or op
        return [cache[r] for r in rows.tolist()]

    def _op_names(self, pid: int, tid: int, rows: NDArray[np.int64]) -> list[str]:
        """Without Python stacks: the innermost CPU op around each event of a thread, else the
        event's name. Only the 64 ops that started last by then are candidates."""
        ev = self.trace.events
        key = (pid, tid)
        ops = self._ops.get(key)
        if ops is None:
            thread = self.rows_of_thread(pid, tid)
            ops = self._ops[key] = thread[ev.kind[thread] == Kind.CPU_OP]
        op_starts = ev.start_ns[ops]
        t = ev.start_ns[rows]
        latest = np.searchsorted(op_starts, t, side="right") - 1
        inner = last_containing(op_starts, ev.end_ns[ops], t)
        near = (inner >= 0) & (latest - inner < 64)
        found = np.where(near, ops[np.maximum(inner, 0)] if ops.size else -1, rows)
        names = self.trace.names
        return [names[i] for i in ev.name_id[found].tolist()]

    def user_frame(self, pid: int, tid: int, t: int) -> str | None:
        """The innermost frame of the user's own code running on a thread at time ``t``."""
        return self.user_frames(pid, tid, np.array([t], dtype=np.int64))[0]

    def user_frames(self, pid: int, tid: int, t: NDArray[np.int64]) -> list[str | None]:
        """:meth:`user_frame` at each of the times ``t``, all walked up their stacks together."""
        frames, frame_starts = self._python_frames(pid, tid)
        if frames.size == 0:
            return self._stack_frames(pid, tid, t)
        return self._frames_at(frames, frame_starts, t)

    def _frames_at(
        self, frames: Ids, frame_starts: NDArray[np.int64], t: NDArray[np.int64]
    ) -> list[str | None]:
        ev = self.trace.events
        result: list[str | None] = [None] * t.size
        latest = np.searchsorted(frame_starts, t, side="right") - 1
        active = np.flatnonzero(latest >= 0)
        frame: Ids = frames[latest[active]]
        at = t[active]
        all_frames, parent = self._parent_frames()
        # Walk out from the latest frame that started before t to one that contains t and is
        # the user's own code (not torch, not site-packages), at most 256 frames up.
        for _ in range(256):
            if active.size == 0:
                break
            name_id = ev.name_id[frame]
            hit = (ev.end_ns[frame] >= at) & self._is_user(name_id)
            for k, i in zip(active[hit].tolist(), name_id[hit].tolist(), strict=True):
                result[k] = self._frame_name(i)
            up = parent[np.searchsorted(all_frames, frame)]
            more = ~hit & (up >= 0)
            active, frame, at = active[more], up[more], at[more]
        return result

    def _stack_frames(self, pid: int, tid: int, t: NDArray[np.int64]) -> list[str | None]:
        """The user frame of the innermost op with a recorded call stack running at each time."""
        key = (pid, tid)
        cached = self._stacks.get(key)
        if cached is None:
            cached = self._stacks[key] = self._thread_stacks(pid, tid)
        rows, ends, where = cached
        if rows.size == 0:
            return [None] * t.size
        ev = self.trace.events
        at = last_containing(ev.start_ns[rows], ends, t).tolist()
        return [where[i] if i >= 0 else None for i in at]

    def _thread_stacks(
        self, pid: int, tid: int
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], list[str]]:
        ev = self.trace.events
        # The thread's rows with arguments, ascending; each distinct arguments' frame found once
        # (the same stacks recur every step; a look at every row's arguments took 50 ms on
        # 100k rows).
        extra = Extras.of(ev.extra)
        rows = extra.rows.astype(np.int64)
        rows = rows[(ev.pid[rows] == pid) & (ev.tid[rows] == tid)]
        ids = extra.value_ids(rows)
        values = extra.distinct
        frame_of: dict[int, str] = {}
        for i in distinct(ids).tolist():
            args = values[i]
            frame = _stack_user_frame(args["call_stack"]) if "call_stack" in args else None
            if frame is not None:
                frame_of[i] = frame
        known = np.zeros(len(values), dtype=np.bool_)
        known[list(frame_of)] = True
        keep = known[ids]
        rows, ids = rows[keep], ids[keep]
        return rows, ev.end_ns[rows], [frame_of[i] for i in ids.tolist()]

    def _is_user(self, name_id: NDArray[np.int32]) -> NDArray[np.bool_]:
        """:func:`_is_user_frame` per name id, decided once per distinct name."""
        if self._user_name is None:
            self._user_name = np.full(len(self.trace.names), -1, dtype=np.int8)
        known = self._user_name
        for i in distinct(name_id[known[name_id] < 0]).tolist():
            known[i] = _is_user_frame(self.trace.names[i])
        return known[name_id] > 0

    def _frame_name(self, name_id: int) -> str:
        cached = self._frame_names.get(name_id)
        if cached is None:
            cached = self._frame_names[name_id] = _frame_location(self.trace.names[name_id])
        return cached

    def _python_frames(self, pid: int, tid: int) -> tuple[Ids, NDArray[np.int64]]:
        key = (pid, tid)
        ev = self.trace.events
        frames = self._frames.get(key)
        if frames is None:
            every, _ = self._parent_frames()
            frames = every[(ev.pid[every] == pid) & (ev.tid[every] == tid)]
            if frames.size == 0:
                # Some writers put Python frames on their own pseudo-thread: use them all.
                frames = every
            self._frames[key] = frames
        return frames, ev.start_ns[frames]

    def _parent_frames(self) -> tuple[Ids, Ids]:
        """Every Python frame's row (ascending) and the row of its parent, found by Python id
        (the last frame carrying an id wins when ids repeat); -1 when there is none. Both row
        indices, kept in 32 bits where they fit (they live for the whole diagnosis)."""
        if self._parents is None:
            ev = self.trace.events
            frames = np.flatnonzero(ev.kind == Kind.PYTHON).astype(np.int64)
            ids = ev.python_id[frames]
            order = np.argsort(ids, kind="stable")
            sorted_ids = ids[order]
            last = np.ones(sorted_ids.size, dtype=np.bool_)
            last[:-1] = sorted_ids[1:] != sorted_ids[:-1]
            unique_ids, id_rows = sorted_ids[last], frames[order[last]]
            wanted = ev.python_parent_id[frames]
            parent = np.full(frames.size, -1, dtype=np.int64)
            if unique_ids.size:
                at = np.minimum(np.searchsorted(unique_ids, wanted), unique_ids.size - 1)
                parent = np.where(unique_ids[at] == wanted, id_rows[at], -1).astype(np.int64)
            self._parents = (narrow(frames), narrow(parent))
        return self._parents


@lru_cache(maxsize=_NAMES_REMEMBERED)
def _stack_user_frame(stack: str) -> str | None:
    """The first frame of the user's code in a ``Call stack`` argument (innermost first, frames
    separated by ``;``, some writers add a line break), as ``file.py:LINE (fn)``; None if none."""
    for frame in map(str.strip, stack.split(";")):
        if _is_user_frame(frame):
            return _frame_location(frame)
    return None


def _frame_location(name: str) -> str:
    match = _FRAME.match(name)
    if match is None:
        return name
    path, line, func = match.groups()
    return f"{path}:{line} ({func})"


def host_activity(trace: Trace) -> HostIndex:
    ev = trace.events
    kind = ev.kind
    activity = np.zeros(len(ev), dtype=np.uint8)
    runtime = np.flatnonzero(kind == Kind.RUNTIME)
    named = np.flatnonzero(
        (kind == Kind.CPU_OP) | (kind == Kind.ANNOTATION) | (kind == Kind.PYTHON)
    )
    for rows, classify in ((runtime, _runtime_activity), (named, _named_activity)):
        name_ids = ev.name_id[rows]
        activity[rows] = _of_used_names(trace.names, name_ids, classify)[name_ids]
    _refine_copies(trace, activity)
    return HostIndex(trace, activity, _main_thread(trace))


def _of_used_names(
    names: list[str], name_ids: NDArray[np.int32], classify: Callable[[str], HostActivity]
) -> NDArray[np.uint8]:
    """``classify`` per name id, run only on the names in ``name_ids`` (NONE for the others):
    a trace's names include every kernel's, which no host activity needs to look at."""
    of_name = np.zeros(len(names), dtype=np.uint8)
    used = np.flatnonzero(np.bincount(name_ids, minlength=len(names)))
    of_name[used] = [classify(names[i]) for i in used.tolist()]
    return of_name


def _refine_copies(trace: Trace, activity: NDArray[np.uint8]) -> None:
    """A copy call is an H2D copy the host waits for, a sync (D2H), or just a launch."""
    ev = trace.events
    copies = np.flatnonzero((ev.kind == Kind.RUNTIME) & (ev.link >= 0))
    device = ev.link[copies]
    is_copy = ev.kind[device] == Kind.MEMCPY
    copies, device = copies[is_copy], device[is_copy]
    h2d = ev.copy_direction[device] == CopyDirection.H2D
    d2h = ev.copy_direction[device] == CopyDirection.D2H
    pageable = ev.pageable[device]
    blocking = activity[copies] == HostActivity.HOST_SYNC  # cudaMemcpy without Async
    activity[copies[h2d & (pageable | blocking)]] = HostActivity.H2D_COPY
    activity[copies[d2h & pageable]] = HostActivity.HOST_SYNC


def _main_thread(trace: Trace) -> tuple[int, int]:
    """The host thread that launched most device work."""
    ev = trace.events
    launches = np.flatnonzero((ev.kind == Kind.RUNTIME) & (ev.link >= 0))
    if launches.size == 0:
        launches = np.flatnonzero(ev.kind == Kind.CPU_OP)
    if launches.size == 0:
        return (-1, -1)
    pid, tid = ev.pid[launches].astype(np.int64), ev.tid[launches].astype(np.int64)
    keys = pid * (1 << 32) + (tid & 0xFFFFFFFF)
    values, counts = np.unique(keys, return_counts=True)
    best = np.flatnonzero(keys == values[np.argmax(counts)])[0]
    row = int(launches[best])
    return (int(ev.pid[row]), int(ev.tid[row]))
