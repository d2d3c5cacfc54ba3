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

from gpuscope._arrays import distinct, distinct_inverse
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
    # Per event: the innermost operator's name id and the user frame's code; each distinct
    # (operator, user frame) pair is one stack, made once.
    op_name = np.full(len(memory), -1, dtype=np.int64)
    user_code = np.full(len(memory), -1, dtype=np.int64)
    user_names: dict[str, int] = {}
    ops = np.flatnonzero(ev.of_kind(Kind.CPU_OP, Kind.ANNOTATION))
    for tid in distinct(memory.tid).tolist():
        at = np.flatnonzero(memory.tid == tid)
        times = memory.time_ns[at]
        mine = ops[ev.tid[ops] == tid]
        inner = last_containing(ev.start_ns[mine], ev.end_ns[mine], times)
        found = inner >= 0
        op_name[at[found]] = ev.name_id[mine[inner[found]]]
        pid = _pid_of(trace, tid)
        users = host.user_frames(pid, tid, times) if pid is not None else []
        if users.count(None) < len(users):  # some user frame is known (else codes stay -1)
            for u in dict.fromkeys(users):  # numbered in the order they first come
                if u is not None:
                    user_names.setdefault(u, len(user_names))
            code_of: dict[str | None, int] = {None: -1}
            code_of.update(user_names)
            user_code[at] = list(map(code_of.__getitem__, users))
    key = (op_name + 1) * (len(user_names) + 1) + (user_code + 1)
    keys, stack = distinct_inverse(key)  # each distinct pair in order, and each event's
    users_by_code = list(user_names)
    frames: list[MemoryFrame] = []
    frame_ids: dict[MemoryFrame, int] = {}
    stacks: list[list[int]] = []
    for k in keys.tolist():
        op, user = divmod(k, len(user_names) + 1)
        parts = [] if op == 0 else [MemoryFrame(OPERATOR_FILE, 0, trace.names[op - 1])]
        parts += [] if user == 0 else [_user_frame(users_by_code[user - 1])]
        stacks.append([frame_ids.setdefault(f, len(frame_ids)) for f in parts])
    frames = list(frame_ids)
    stack = stack.astype(np.int32)
    if keys.size and keys[0] == 0:  # neither an operator nor a user frame: no stack
        stack -= 1
        stacks.pop(0)
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
    # Each distinct name searched once (a profile records the same few ranges every step).
    ids = ev.name_id[rows]
    used = distinct(ids)
    phase = np.zeros(len(trace.names), dtype=np.bool_)
    phase[used] = [_PHASE_ANNOTATION.search(trace.names[i]) is not None for i in used.tolist()]
    rows = rows[phase[ids]]
    found = [
        MemoryAnnotation(trace.names[i], -1, start, end)
        for i, start, end in zip(
            ev.name_id[rows].tolist(),
            ev.start_ns[rows].tolist(),
            ev.end_ns[rows].tolist(),
            strict=True,
        )
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
