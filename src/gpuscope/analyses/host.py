"""What the host was doing: host events sorted into the activities that starve a GPU.

Contract: :func:`host_activity` classifies every host-side event of a trace once, by name, into a
:class:`HostActivity` (or none), and answers "which Python line issued this event" through
:meth:`HostIndex.location`. Pure: nothing here knows about devices or gaps.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np
from numpy.typing import NDArray

from gpuscope.analyses.intervals import Intervals, union
from gpuscope.model import CopyDirection, Kind, Trace


class HostActivity(IntEnum):
    NONE = 0
    HOST_SYNC = 1  # the host blocks until the device drains
    DATA_LOADER = 2
    H2D_COPY = 3  # a host-to-device copy the host waits for (pageable or synchronous)
    ALLOCATOR = 4  # cudaMalloc / cudaFree (cudaFree synchronises the device)
    CHECKPOINT = 5  # saving state
    COMM_WAIT = 6  # blocked in a collective or a barrier on the host
    LAUNCH = 7  # launching device work


_VERSION_SUFFIX = re.compile(r"_v\d+$")
_SYNC_RUNTIME = re.compile(
    r"^(?:cuda|hip)(?:Device|Stream|Event|Ctx)Synchronize|^cu(?:Ctx|Stream|Event)Synchronize"
)
_BLOCKING_COPY = re.compile(
    r"^(?:cuda|hip)Memcpy(?:2D|3D|Peer|ToSymbol|FromSymbol)?$|^cuMemcpy[DH]to[DH]$"
)
_ASYNC_COPY = re.compile(r"^(?:cuda|hip)Memcpy\w*Async$|^cuMemcpy\w*Async$")
_ALLOCATOR = re.compile(
    r"^(?:cuda|hip)(?:Free|Malloc)(?:Host|Async|Managed|Pitch)?$|^cudaHostAlloc$|^hipHostMalloc$"
    r"|^cuMem(?:Free|Alloc)"
)
_LAUNCH = re.compile(
    r"^(?:cuda|hip|cu)(?:Launch|ExtLaunch|ModuleLaunch|GraphLaunch|MemsetAsync|ExtModuleLaunch)"
    r"|^cuLaunch|^runFunction"
)
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


def _is_user_frame(name: str) -> bool:
    """A frame of the user's code: not torch, not an installed package, not the standard library."""
    if _NOT_USER_CODE.search(name) or not _FRAME.match(name):
        return False
    path = name.split("(", 1)[0]
    top = path.split("/", 1)[0].removesuffix(".py")
    return top not in _STDLIB


def _runtime_activity(name: str) -> HostActivity:
    bare = _VERSION_SUFFIX.sub("", name)
    if _SYNC_RUNTIME.search(bare):
        return HostActivity.HOST_SYNC
    if _ALLOCATOR.search(bare):
        return HostActivity.ALLOCATOR
    if _BLOCKING_COPY.search(bare):
        return HostActivity.HOST_SYNC  # refined per event by the copy's direction
    if _LAUNCH.search(bare) or _ASYNC_COPY.search(bare):
        return HostActivity.LAUNCH
    return HostActivity.NONE


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


@dataclass
class HostIndex:
    """Host events of one trace, classified, with per-thread lookups built on demand."""

    trace: Trace
    activity: NDArray[np.uint8]  # HostActivity per event row (NONE for device rows)
    main_thread: tuple[int, int]
    _frames: dict[tuple[int, int], tuple[NDArray[np.int64], NDArray[np.int64]]] = field(
        default_factory=dict
    )
    _by_id: dict[int, int] = field(default_factory=dict)
    _location_cache: dict[int, str] = field(default_factory=dict)
    _ops: dict[tuple[int, int], tuple[NDArray[np.int64], NDArray[np.int64]]] = field(
        default_factory=dict
    )

    def thread_rows(self, pid: int, tid: int, mask: NDArray[np.bool_]) -> NDArray[np.int64]:
        ev = self.trace.events
        return np.flatnonzero(mask & (ev.pid == pid) & (ev.tid == tid)).astype(np.int64)

    def intervals(self, rows: NDArray[np.int64]) -> Intervals:
        ev = self.trace.events
        return union(ev.start_ns[rows], ev.end_ns[rows])

    def location(self, row: int) -> str:
        """Where in the user's code ``row`` was issued: ``file.py:LINE (fn)`` or the op's name."""
        cached = self._location_cache.get(row)
        if cached is None:
            ev = self.trace.events
            frame = self.user_frame(int(ev.pid[row]), int(ev.tid[row]), int(ev.start_ns[row]))
            cached = frame or self._op_name(row)
            self._location_cache[row] = cached
        return cached

    def _op_name(self, row: int) -> str:
        """Without Python stacks: the innermost CPU op around an event, else the event's name."""
        ev = self.trace.events
        key = (int(ev.pid[row]), int(ev.tid[row]))
        cached = self._ops.get(key)
        if cached is None:
            rows = self.thread_rows(key[0], key[1], ev.kind == Kind.CPU_OP)
            cached = (rows, ev.start_ns[rows])
            self._ops[key] = cached
        ops, op_starts = cached
        t = int(ev.start_ns[row])
        i = int(np.searchsorted(op_starts, t, side="right")) - 1
        for j in range(i, max(i - 64, -1), -1):
            if ev.end_ns[ops[j]] >= t:
                return self.trace.name(int(ops[j]))
        return self.trace.name(row)

    def user_frame(self, pid: int, tid: int, t: int) -> str | None:
        """The innermost frame of the user's own code running on a thread at time ``t``."""
        ev = self.trace.events
        frames, frame_starts = self._python_frames(pid, tid)
        if frames.size == 0:
            return None
        i = int(np.searchsorted(frame_starts, t, side="right")) - 1
        if i < 0:
            return None
        frame = int(frames[i])
        # Walk out from the latest frame that started before t to one that contains t and is
        # the user's own code (not torch, not site-packages).
        for _ in range(256):
            name = self.trace.name(frame)
            if int(ev.end_ns[frame]) >= t and _is_user_frame(name):
                return _frame_location(name)
            parent = self._by_id.get(int(ev.python_parent_id[frame]))
            if parent is None:
                return None
            frame = parent
        return None

    def _python_frames(self, pid: int, tid: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        key = (pid, tid)
        cached = self._frames.get(key)
        if cached is None:
            ev = self.trace.events
            python = ev.kind == Kind.PYTHON
            frames = np.flatnonzero(python & (ev.pid == pid) & (ev.tid == tid)).astype(np.int64)
            if frames.size == 0:
                # Some writers put Python frames on their own pseudo-thread: use them all.
                frames = np.flatnonzero(python).astype(np.int64)
            cached = (frames, ev.start_ns[frames])
            self._frames[key] = cached
            if not self._by_id:
                all_frames = np.flatnonzero(python)
                self._by_id = dict(
                    zip(ev.python_id[all_frames].tolist(), all_frames.tolist(), strict=True)
                )
        return cached


def _frame_location(name: str) -> str:
    match = _FRAME.match(name)
    if match is None:
        return name
    path, line, func = match.groups()
    return f"{path}:{line} ({func})"


def host_activity(trace: Trace) -> HostIndex:
    ev = trace.events
    runtime_of_name = np.array([_runtime_activity(n) for n in trace.names], dtype=np.uint8)
    named_of_name = np.array([_named_activity(n) for n in trace.names], dtype=np.uint8)
    activity = np.zeros(len(ev), dtype=np.uint8)
    runtime = ev.kind == Kind.RUNTIME
    activity[runtime] = runtime_of_name[ev.name_id[runtime]]
    named = ev.of_kind(Kind.CPU_OP, Kind.ANNOTATION, Kind.PYTHON)
    activity[named] = named_of_name[ev.name_id[named]]
    _refine_copies(trace, activity)
    return HostIndex(trace, activity, _main_thread(trace))


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
    keys = ev.pid[launches] * (1 << 32) + (ev.tid[launches] & 0xFFFFFFFF)
    values, counts = np.unique(keys, return_counts=True)
    best = np.flatnonzero(keys == values[np.argmax(counts)])[0]
    row = int(launches[best])
    return (int(ev.pid[row]), int(ev.tid[row]))
