"""A trace's allocator events (Kineto ``[memory]``) as a :class:`~gpuscope.model.MemoryRecord`,
so that :func:`gpuscope.analyses.memory.analyse_memory` reads them as it reads a snapshot.

Contract: :func:`trace_record` is pure. A trace has no stacks for its allocations; each event's
stack is made of what the host was running on the allocating thread at that moment: the
innermost operator (or user annotation) enclosing it, as a frame with the file ``<op>``, then the
innermost frame of the user's own code (``HostIndex.user_frames``: Python frames recorded with
``with_stack=True``, or 2021 traces' ``Call stack``). User annotations named like an optimizer
step, forward or backward become the record's annotations (they say the phase). A trace has no
segments: allocated and reserved come from the totals each event records.
"""

from __future__ import annotations

import re

import numpy as np
from msgspec.structs import replace

from gpuscope.analyses.host import HostIndex
from gpuscope.analyses.intervals import last_containing
from gpuscope.model import (
    Kind,
    MemoryAnnotation,
    MemoryBlocks,
    MemoryFrame,
    MemoryRecord,
    MemorySegments,
    Trace,
)

#: The file of a frame that is an operator, not Python code.
OPERATOR_FILE = "<op>"
_LOCATION = re.compile(r"^(.*):(\d+) \((.*)\)$")
_PHASE_ANNOTATION = re.compile(r"optimizer\.|backward|forward", re.IGNORECASE)


def trace_record(trace: Trace, host: HostIndex) -> MemoryRecord | None:
    memory = trace.memory
    if memory is None or not len(memory):
        return None
    ev = trace.events
    frames: list[MemoryFrame] = []
    frame_ids: dict[MemoryFrame, int] = {}
    stacks: list[list[int]] = []
    stack_ids: dict[tuple[int, ...], int] = {}
    stack = np.full(len(memory), -1, dtype=np.int32)

    def frame_id(frame: MemoryFrame) -> int:
        known = frame_ids.get(frame)
        if known is None:
            known = frame_ids[frame] = len(frames)
            frames.append(frame)
        return known

    ops = np.flatnonzero(ev.of_kind(Kind.CPU_OP, Kind.ANNOTATION))
    for tid in np.unique(memory.tid).tolist():
        at = np.flatnonzero(memory.tid == tid)
        times = memory.time_ns[at]
        pid = _pid_of(trace, tid)
        mine = ops[ev.tid[ops] == tid]
        inner = last_containing(ev.start_ns[mine], ev.end_ns[mine], times)
        users = host.user_frames(pid, tid, times) if pid is not None else [None] * at.size
        for k, (row, user) in enumerate(zip(inner.tolist(), users, strict=True)):
            ids: list[int] = []
            if row >= 0:
                name = trace.names[int(ev.name_id[mine[row]])]
                ids.append(frame_id(MemoryFrame(OPERATOR_FILE, 0, name)))
            if user is not None:
                ids.append(frame_id(_user_frame(user)))
            if ids:
                key = tuple(ids)
                number = stack_ids.get(key)
                if number is None:
                    number = stack_ids[key] = len(stacks)
                    stacks.append(ids)
                stack[at[k]] = number
    return MemoryRecord(
        source=trace.source,
        format="kineto-memory",
        schema=trace.schema,
        segments=_no_segments(),
        blocks=_no_blocks(),
        events=replace(memory, stack=stack),
        frames=frames,
        stacks=stacks,
        annotations=_annotations(trace),
    )


def _pid_of(trace: Trace, tid: int) -> int | None:
    ev = trace.events
    rows = np.flatnonzero((ev.tid == tid) & (ev.device < 0))
    return int(ev.pid[rows[0]]) if rows.size else None


def _user_frame(location: str) -> MemoryFrame:
    match = _LOCATION.match(location)
    if match is None:
        return MemoryFrame(location, 0, "?")
    return MemoryFrame(match.group(1), int(match.group(2)), match.group(3))


def _annotations(trace: Trace) -> list[MemoryAnnotation]:
    ev = trace.events
    rows = np.flatnonzero(ev.of_kind(Kind.ANNOTATION))
    found = [
        MemoryAnnotation(
            trace.names[int(ev.name_id[r])], -1, int(ev.start_ns[r]), int(ev.end_ns[r])
        )
        for r in rows.tolist()
        if _PHASE_ANNOTATION.search(trace.names[int(ev.name_id[r])])
    ]
    return sorted(found, key=lambda a: a.start_ns)


def _no_segments() -> MemorySegments:
    empty = np.empty(0, np.int64)
    return MemorySegments(
        device=np.empty(0, np.int32),
        address=empty,
        size_bytes=empty,
        stream=empty,
        expandable=np.empty(0, np.bool_),
        graph_pool=np.empty(0, np.bool_),
    )


def _no_blocks() -> MemoryBlocks:
    empty = np.empty(0, np.int64)
    return MemoryBlocks(
        segment=np.empty(0, np.int32),
        address=empty,
        size_bytes=empty,
        requested_bytes=empty,
        state=np.empty(0, np.uint8),
        stack=np.empty(0, np.int32),
    )
