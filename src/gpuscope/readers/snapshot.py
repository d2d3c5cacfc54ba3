"""PyTorch CUDA memory snapshots: ``torch.cuda.memory._dump_snapshot(path)`` and pickled
``torch.cuda.memory._snapshot()`` / ``memory_snapshot()`` results, plain or gzip.

Safety first: a snapshot is a pickle, and loading a pickle can run any code it names. This reader
never calls ``pickle.load``: :class:`NoGlobalsUnpickler` resolves no global at all (no class, no
function, no persistent id), so a pickle that names one (``os.system``, ``builtins.eval``) is
refused with one line before anything it names is even imported. Snapshots need none: they are
dicts, lists, strings, numbers and tuples.

What is read, and how each field maps to the model (:class:`~gpuscope.model.MemoryRecord`):

* ``segments``: one row of :class:`~gpuscope.model.MemorySegments` each (``device``,
  ``address``, ``total_size``, ``stream``, ``is_expandable``, ``segment_pool_id`` other than
  ``(0, 0)``: a CUDA-graph pool), and its ``blocks`` as :class:`~gpuscope.model.MemoryBlocks`
  (``size``, ``requested_size``, ``state``; the block's ``frames``, or in the old format the last
  entry of its ``history``; the old format has no block addresses: they follow from the sizes).
* ``device_traces``: one list per device of trace entries (``action``, ``addr``, ``size``,
  ``stream``, ``time_us`` when recorded, ``frames``) as :class:`~gpuscope.model.MemoryEvents`.
* ``external_annotations`` (``START``/``END`` ranges such as ``Optimizer.step#AdamW.step``),
  ``allocator_settings`` (kept as given).
* Frames are interned: each distinct (file, line, function) once in ``frames``, each distinct
  stack once in ``stacks`` (frame ids, innermost first, as the snapshot lists them).
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from gpuscope.errors import CorruptInputError, UnknownFormatError
from gpuscope.model import (
    BlockState,
    Job,
    MemoryAction,
    MemoryAnnotation,
    MemoryBlocks,
    MemoryEvents,
    MemoryFrame,
    MemoryRecord,
    MemorySegments,
)
from gpuscope.readers._io import memory_budget, over_budget, read_bytes, size_text

#: Python objects per pickle byte, measured on real snapshots (benchmarks/memory_snapshot.py):
#: a snapshot needs about this many times its size while it is decoded.
OBJECTS_PER_PICKLE_BYTE = 8
_ACTIONS = {
    "alloc": MemoryAction.ALLOC,
    "free_requested": MemoryAction.FREE_REQUESTED,
    "free_completed": MemoryAction.FREE_COMPLETED,
    "segment_alloc": MemoryAction.SEGMENT_ALLOC,
    "segment_free": MemoryAction.SEGMENT_FREE,
    "segment_map": MemoryAction.SEGMENT_MAP,
    "segment_unmap": MemoryAction.SEGMENT_UNMAP,
    "oom": MemoryAction.OOM,
    "snapshot": MemoryAction.SNAPSHOT,
}
_STATES = {
    "active_allocated": BlockState.ALLOCATED,
    "active_pending_free": BlockState.PENDING_FREE,
    "inactive": BlockState.INACTIVE,
}


class RefusedGlobalError(pickle.UnpicklingError):
    """The pickle names a global (a class or function to import and call)."""


class NoGlobalsUnpickler(pickle.Unpickler):
    """An unpickler that resolves no global and no persistent id: only plain data loads.

    ``find_class`` is where every opcode that imports something ends up (GLOBAL, STACK_GLOBAL,
    the copyreg extension codes); REDUCE, BUILD, NEWOBJ and OBJ need a callable that only it or
    ``persistent_load`` could have put on the stack, so refusing both refuses them all."""

    def find_class(self, module: str, name: str) -> Any:
        raise RefusedGlobalError(f"it names the global {module}.{name}")

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedGlobalError("it holds a persistent id")


def loads_plain(data: bytes) -> Any:
    """Decode a pickle that holds plain data only; :class:`RefusedGlobalError` otherwise."""
    return NoGlobalsUnpickler(io.BytesIO(data)).load()


def looks_like_snapshot(head: bytes) -> bool:
    """A pickle (protocol 2 to 5) whose first bytes name a snapshot's keys."""
    if len(head) < 2 or head[0] != 0x80 or not 2 <= head[1] <= 5:
        return False
    start = head[:4096]
    return b"segments" in start or (b"total_size" in start and b"blocks" in start)


def read(path: Path) -> Job:
    budget = memory_budget()
    content = read_bytes(path, limit=budget // OBJECTS_PER_PICKLE_BYTE)
    data = content.data
    needed = len(data) * OBJECTS_PER_PICKLE_BYTE
    if needed > budget:
        raise over_budget(path, f"decoding this snapshot takes about {size_text(needed)}")
    try:
        document = loads_plain(data)
    except RefusedGlobalError as error:
        raise CorruptInputError(
            path, f"refused: {error}; a memory snapshot is plain data, so nothing was loaded"
        ) from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError) as error:
        cut = "truncated" in str(error) or isinstance(error, EOFError) or content.truncated
        why = "the pickle is cut off" if cut else f"not a readable pickle ({error})"
        raise CorruptInputError(path, f"{why}: the snapshot cannot be read") from None
    del data, content
    return Job(source=str(path), traces=[], memory=[snapshot_record(str(path), document)])


def snapshot_record(source: str, document: Any) -> MemoryRecord:
    """The model of a decoded snapshot (a dict, or the old bare list of segments)."""
    if isinstance(document, list):
        document = {"segments": document}
    if not isinstance(document, dict) or not isinstance(document.get("segments"), list):
        raise UnknownFormatError(source, "a pickle, but not a PyTorch memory snapshot")
    parts = _Parts(source)
    segments, blocks = parts.segments(document["segments"])
    traces = document.get("device_traces") or []
    if not isinstance(traces, list):
        raise CorruptInputError(source, "'device_traces' is not a list: an inconsistent snapshot")
    events = parts.events(traces)
    new = bool(len(events)) and bool((events.time_ns >= 0).any())
    return MemoryRecord(
        source=source,
        format="torch-snapshot",
        schema="snapshot-2.1+" if new or "allocator_settings" in document else "snapshot-old",
        segments=segments,
        blocks=blocks,
        events=events,
        frames=parts.frames,
        stacks=parts.stacks,
        annotations=_annotations(document.get("external_annotations")),
        settings=_settings(document.get("allocator_settings")),
        warnings=parts.warnings,
    )


class _Parts:
    """Builds the columns, interning frames and stacks as it goes (a snapshot shares one list
    between the entries of one allocation, and one dict between equal frames: keyed by object
    first, by value second)."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.frames: list[MemoryFrame] = []
        self.stacks: list[list[int]] = []
        self.warnings: list[str] = []
        self._frame_ids: dict[Any, int] = {}
        self._stack_by_object: dict[int, int] = {}
        self._stack_ids: dict[tuple[int, ...], int] = {}
        self._keep: list[Any] = []  # the objects whose ids key the caches stay alive

    def bad(self, what: str) -> CorruptInputError:
        return CorruptInputError(self.source, f"{what}: an inconsistent snapshot")

    def stack(self, frames: Any) -> int:
        if not frames or not isinstance(frames, list):
            return -1
        known = self._stack_by_object.get(id(frames))
        if known is not None:
            return known
        ids = tuple(self._frame(f) for f in frames)
        stack = self._stack_ids.get(ids)
        if stack is None:
            stack = self._stack_ids[ids] = len(self.stacks)
            self.stacks.append(list(ids))
        self._stack_by_object[id(frames)] = stack
        self._keep.append(frames)
        return stack

    def _frame(self, frame: Any) -> int:
        known = self._frame_ids.get(id(frame))
        if known is not None:
            return known
        if not isinstance(frame, dict):
            raise self.bad("a stack frame that is not a dict")
        line = frame.get("line")
        value = MemoryFrame(
            str(frame.get("filename", "?")),
            line if isinstance(line, int) else 0,
            str(frame.get("name", "?")),
        )
        number = self._frame_ids.get(value)
        if number is None:
            number = self._frame_ids[value] = len(self.frames)
            self.frames.append(value)
        self._frame_ids[id(frame)] = number
        self._keep.append(frame)
        return number

    def segments(self, given: list[Any]) -> tuple[MemorySegments, MemoryBlocks]:
        seg: dict[str, list[Any]] = {k: [] for k in MemorySegments.__struct_fields__}
        blk: dict[str, list[Any]] = {k: [] for k in MemoryBlocks.__struct_fields__}
        for row, segment in enumerate(given):
            if not isinstance(segment, dict) or not isinstance(segment.get("blocks"), list):
                raise self.bad(f"segment {row} has no list of blocks")
            address = _int(segment.get("address"), 0)
            total = _int(segment.get("total_size"), -1)
            if total < 0:
                raise self.bad(f"segment {row} has no total_size")
            pool = segment.get("segment_pool_id")
            seg["device"].append(_int(segment.get("device"), 0))
            seg["address"].append(address)
            seg["size_bytes"].append(total)
            seg["stream"].append(_int(segment.get("stream"), 0))
            seg["expandable"].append(bool(segment.get("is_expandable", False)))
            seg["graph_pool"].append(isinstance(pool, tuple | list) and tuple(pool) != (0, 0))
            offset = address
            used = 0
            for block in segment["blocks"]:
                if not isinstance(block, dict):
                    raise self.bad(f"a block of segment {row} is not a dict")
                size = _int(block.get("size"), -1)
                if size < 0:
                    raise self.bad(f"a block of segment {row} has no size")
                used += size
                frames = block.get("frames")
                history = block.get("history")
                if frames is None and isinstance(history, list) and history:
                    last = history[-1]
                    frames = last.get("frames") if isinstance(last, dict) else None
                blk["segment"].append(row)
                blk["address"].append(_int(block.get("address"), offset))
                blk["size_bytes"].append(size)
                blk["requested_bytes"].append(_int(block.get("requested_size"), size))
                blk["state"].append(_STATES.get(block.get("state", ""), BlockState.INACTIVE))
                blk["stack"].append(self.stack(frames))
                offset += size
            if used > total:
                raise self.bad(f"segment {row}'s blocks add up to more than its size")
        segments = MemorySegments(
            device=np.asarray(seg["device"], np.int32),
            address=np.asarray(seg["address"], np.int64),
            size_bytes=np.asarray(seg["size_bytes"], np.int64),
            stream=np.asarray(seg["stream"], np.int64),
            expandable=np.asarray(seg["expandable"], np.bool_),
            graph_pool=np.asarray(seg["graph_pool"], np.bool_),
        )
        blocks = MemoryBlocks(
            segment=np.asarray(blk["segment"], np.int32),
            address=np.asarray(blk["address"], np.int64),
            size_bytes=np.asarray(blk["size_bytes"], np.int64),
            requested_bytes=np.asarray(blk["requested_bytes"], np.int64),
            state=np.asarray(blk["state"], np.uint8),
            stack=np.asarray(blk["stack"], np.int32),
        )
        return segments, blocks

    def events(self, traces: list[Any]) -> MemoryEvents:
        cols: dict[str, list[int]] = {
            k: [] for k in ("action", "device", "address", "size_bytes", "stream", "time_ns")
        }
        stacks: list[int] = []
        unknown: dict[str, int] = {}
        for device, entries in enumerate(traces):
            if not isinstance(entries, list):
                raise self.bad(f"the trace of device {device} is not a list")
            for number, entry in enumerate(entries):
                if not isinstance(entry, dict):
                    raise self.bad(f"entry {number} of device {device}'s trace is not a dict")
                action = _ACTIONS.get(entry.get("action"))  # type: ignore[arg-type]
                if action is None:
                    name = str(entry.get("action"))[:40]
                    unknown[name] = unknown.get(name, 0) + 1
                    continue
                size = entry.get("size")
                if not isinstance(size, int) or size < 0:
                    raise self.bad(f"entry {number} of device {device}'s trace has no size")
                time_us = entry.get("time_us")
                cols["action"].append(action)
                cols["device"].append(device)
                cols["address"].append(_int(entry.get("addr"), -1))
                cols["size_bytes"].append(size)
                cols["stream"].append(_int(entry.get("stream"), -1))
                cols["time_ns"].append(time_us * 1000 if isinstance(time_us, int) else -1)
                stacks.append(self.stack(entry.get("frames")))
        for name, count in unknown.items():
            self.warnings.append(
                f"{self.source}: {count:,} allocator trace entries of unknown action {name!r}"
                " left out"
            )
        columns: dict[str, Any] = {k: np.asarray(v, np.int64) for k, v in cols.items()}
        columns["stack"] = np.asarray(stacks, np.int32)
        return MemoryEvents.from_columns(len(stacks), columns)


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _annotations(given: Any) -> list[MemoryAnnotation]:
    """START/END pairs, matched per (name, device) in order; an END without START is dropped."""
    if not isinstance(given, list):
        return []
    open_: dict[tuple[str, int], list[int]] = {}
    done: list[MemoryAnnotation] = []
    for item in given:
        if not isinstance(item, dict) or not isinstance(item.get("time_us"), int):
            continue
        key = (str(item.get("name", "")), _int(item.get("device"), 0))
        time_ns = item["time_us"] * 1000
        if item.get("stage") == "START":
            open_.setdefault(key, []).append(time_ns)
        elif item.get("stage") == "END" and open_.get(key):
            done.append(MemoryAnnotation(key[0], key[1], open_[key].pop(), time_ns))
    for (name, device), starts in open_.items():
        done += [MemoryAnnotation(name, device, start, -1) for start in starts]
    return sorted(done, key=lambda a: a.start_ns)


def _settings(given: Any) -> dict[str, Any]:
    if not isinstance(given, dict):
        return {}
    return {str(k): v for k, v in given.items() if isinstance(v, str | int | float | bool | None)}
