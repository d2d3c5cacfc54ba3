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

Two ways to read, one result. The C scanner (``_snapscan.c``) walks the pickle's opcodes as the
file streams in and turns each trace entry into a row of columns as soon as it is read, its
traceback interned by the frames it holds: neither the entries nor their tracebacks are ever
objects at once, so a snapshot takes about its own size in memory rather than ten times it. It
refuses the opcodes that name a global exactly as the unpickler does. Anything it does not
follow (or no built scanner) reads the reference way: :class:`NoGlobalsUnpickler` decodes the
whole pickle and :class:`_Parts` builds the same columns from the objects; tests hold the two to
the same record.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from zlib_ng import zlib_ng

from gpuscope._native import current
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
from gpuscope.readers._io import (
    GZIP_MAGIC,
    ZLIB_ERROR,
    check_regular,
    memory_budget,
    over_budget,
    read_bytes,
    size_text,
)

try:
    from gpuscope.readers import _snapscan

    #: The scanner source this reader follows (``SNAPSCAN_VERSION`` in ``_snapscan.c``).
    SNAPSCAN_VERSION = 2
    if not current(_snapscan, SNAPSCAN_VERSION, "snapshot scanner (readers/_snapscan.c)"):
        _snapscan = None  # type: ignore[assignment]
except ImportError:  # not built: the reference reader alone
    _snapscan = None  # type: ignore[assignment]

#: Python objects per pickle byte, measured on real snapshots (benchmarks/memory_snapshot.py):
#: a snapshot needs about this many times its size while it is decoded the reference way.
OBJECTS_PER_PICKLE_BYTE = 11
#: Memory per pickle byte the scanner's reading takes at most (its columns and the model built
#: from them; benchmarks/memory_snapshot.py): a file past budget / this is refused unread.
SCANNED_PER_PICKLE_BYTE = 2
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
    if _snapscan is not None:
        try:
            return _read_scanned(path, budget)
        except _UnfollowedError:
            pass  # the reference way below: same record, from the objects
    return _read_decoded(path, budget)


class _UnfollowedError(Exception):
    """The scanner does not follow this pickle: read it the reference way."""


def _read_scanned(path: Path, budget: int) -> Job:
    size = check_regular(path).st_size
    with path.open("rb", buffering=0) as file:
        gzipped = file.read(2) == GZIP_MAGIC
        file.seek(0)
        limit = budget // SCANNED_PER_PICKLE_BYTE
        if not gzipped and size > limit:
            raise over_budget(path, f"reading this snapshot takes about {size_text(2 * size)}")
        reader = _GzipReader(path, file, limit) if gzipped else _PlainReader(file)
        try:
            scanned = _snapscan.scan(reader.read, _SCANNED)
        except _snapscan.RefusedError as error:
            raise _refused(path, error) from None
        except _snapscan.TruncatedError:
            raise CorruptInputError(
                path, "the pickle is cut off: the snapshot cannot be read"
            ) from None
        except _snapscan.UnsupportedError:
            raise _UnfollowedError from None
        except MemoryError:
            raise over_budget(path, "reading this snapshot ran out of memory") from None
    document, columns, owners, frame_objects, stacks, unknown = scanned
    rows = _ScannedRows(columns, owners, frame_objects, stacks, unknown)
    return Job(source=str(path), traces=[], memory=[_record(path, document, rows)])


def _refused(path: Path, error: Exception) -> CorruptInputError:
    return CorruptInputError(
        path, f"refused: {error}; a memory snapshot is plain data, so nothing was loaded"
    )


class _PlainReader:
    def __init__(self, file: io.FileIO) -> None:
        self.read: Callable[[int], bytes] = file.read


class _GzipReader:
    """gzip members one after another, inflated a piece at a time; past ``limit`` bytes of
    pickle, the budget's line. What follows the last member (padding) is not the pickle's."""

    def __init__(self, path: Path, file: io.FileIO, limit: int) -> None:
        self.path, self.file, self.limit, self.total = path, file, limit, 0
        self.inflater = _inflater()
        self.rest = b""  # compressed bytes read but not yet given to the inflater

    def read(self, size: int) -> bytes:
        while True:
            tail = self.inflater.unconsumed_tail
            if self.inflater.eof:
                self.rest = self.inflater.unused_data + self.rest or self.file.read(1 << 20)
                if self.rest[:2] != GZIP_MAGIC:
                    return b""  # the last member's end
                self.inflater = _inflater()
                tail = b""
            piece = tail or self.rest or self.file.read(1 << 20)
            if not tail:
                self.rest = b""
            if not piece:
                return b""  # the end (cut off before STOP: the scanner says so)
            try:
                data: bytes = self.inflater.decompress(piece, size)
            except ZLIB_ERROR as error:
                raise CorruptInputError(self.path, f"corrupt gzip data ({error})") from None
            self.total += len(data)
            if self.total > self.limit:
                raise over_budget(self.path, f"its pickle passes {size_text(self.limit)} inflated")
            if data:
                return data


def _inflater() -> Any:
    return zlib_ng.decompressobj(16 + zlib_ng.MAX_WBITS)


def _read_decoded(path: Path, budget: int) -> Job:
    content = read_bytes(path, limit=budget // OBJECTS_PER_PICKLE_BYTE)
    data = content.data
    needed = len(data) * OBJECTS_PER_PICKLE_BYTE
    if needed > budget:
        raise over_budget(path, f"decoding this snapshot takes about {size_text(needed)}")
    try:
        document = loads_plain(data)
    except RefusedGlobalError as error:
        raise _refused(path, error) from None
    except MemoryError:
        raise over_budget(path, "decoding this snapshot ran out of memory") from None
    except Exception as error:
        # (a pickle whose opcodes append to a dict: AttributeError; a bad memo key: KeyError)
        cut = "truncated" in str(error) or isinstance(error, EOFError) or content.truncated
        why = "the pickle is cut off" if cut else f"not a readable pickle ({error})"
        raise CorruptInputError(path, f"{why}: the snapshot cannot be read") from None
    del data, content
    return Job(source=str(path), traces=[], memory=[_record(path, document, None)])


def _record(path: Path, document: Any, rows: _ScannedRows | None) -> MemoryRecord:
    try:
        return snapshot_record(str(path), document, rows)
    except (OverflowError, ValueError, TypeError) as error:  # a number beyond 64 bits, say
        raise CorruptInputError(
            path, f"a value out of range ({error}): an inconsistent snapshot"
        ) from None


#: What the scanner leaves in a device's list where each entry was (the entry is a row).
_SCANNED = object()


class _ScannedRows:
    """The scanner's rows (see ``_snapscan.c``): columns, the lists they belong to, and the
    frame objects and stacks their ``stack`` column indexes."""

    def __init__(
        self,
        columns: dict[str, bytearray],
        owners: list[list[Any]],
        frame_objects: list[Any],
        stacks: list[bytes],
        unknown: list[Any],
    ) -> None:
        types = {"action": np.uint8, "size_ok": np.uint8, "stack": np.int32, "owner": np.int32}
        self.columns = {
            name: np.frombuffer(data, types.get(name, np.int64)) for name, data in columns.items()
        }
        self.owner_of = {id(owner): number for number, owner in enumerate(owners)}
        self.owners = owners  # (alive while their ids are keys)
        self.frame_objects = frame_objects
        self.stacks = stacks
        self.unknown = unknown
        self.unknown_index = np.cumsum(self.columns["action"] == 255) - 1

    def of(self, entries: list[Any]) -> NDArray[np.intp] | slice | None:
        """The rows of ``entries`` (a device's list), None when it is not one the scanner
        read."""
        number = self.owner_of.get(id(entries))
        if number is None:
            return None
        if len(self.owners) == 1:
            return slice(None)
        return np.flatnonzero(self.columns["owner"] == number)


def snapshot_record(source: str, document: Any, rows: _ScannedRows | None = None) -> MemoryRecord:
    """The model of a decoded snapshot (a dict, or the old bare list of segments); ``rows``:
    the trace entries the scanner read as rows (their places in ``document`` hold a marker)."""
    if isinstance(document, list):
        document = {"segments": document}
    if not isinstance(document, dict) or not isinstance(document.get("segments"), list):
        raise UnknownFormatError(source, "a pickle, but not a PyTorch memory snapshot")
    parts = _Parts(source, rows)
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

    def __init__(self, source: str, rows: _ScannedRows | None = None) -> None:
        self.source = source
        self.rows = rows
        self._scanned_stacks: dict[int, int] = {}
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
        """The trace entries as columns, a field at a time (a snapshot holds millions)."""
        parts: list[dict[str, Any]] = []
        for device, entries in enumerate(traces):
            if not isinstance(entries, list):
                raise self.bad(f"the trace of device {device} is not a list")
            if not entries:
                continue
            rows = self.rows.of(entries) if self.rows is not None else None
            if rows is None:
                parts.append(self._device_events(device, entries))
            else:
                parts.append(self._scanned_events(device, entries, rows))
        if not parts:
            return MemoryEvents.from_columns(0, {})
        if len(parts) == 1:
            columns = parts[0]
        else:
            columns = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        return MemoryEvents.from_columns(len(columns["action"]), columns)

    def _scanned_events(
        self, device: int, entries: list[Any], rows: NDArray[np.intp] | slice
    ) -> dict[str, Any]:
        """:meth:`_device_events` of a list the scanner read: the same columns, the same
        errors, from its rows."""
        assert self.rows is not None
        if entries.count(_SCANNED) != len(entries):
            number = next(i for i, e in enumerate(entries) if e is not _SCANNED)
            if type(entries[number]) is dict:
                raise _UnfollowedError  # (an entry the scanner left an object: never in a dump)
            raise self.bad(f"entry {number} of device {device}'s trace is not a dict")
        c = {name: column[rows] for name, column in self.rows.columns.items()}
        action = c["action"]
        unknown = action == 255
        if unknown.any():
            given = self.rows.unknown
            names = [str(given[i])[:40] for i in self.rows.unknown_index[rows][unknown]]
            for name in sorted(set(names)):
                self.warnings.append(
                    f"{self.source}: {names.count(name):,} allocator trace entries of unknown"
                    f" action {name!r} left out"
                )
            c = {name: column[~unknown] for name, column in c.items()}
            action = c["action"]
        if not c["size_ok"].all():
            number = int(np.argmin(c["size_ok"]))
            raise self.bad(f"entry {number} of device {device}'s trace has no size")
        size = c["size"]
        if (size < 0).any():
            raise self.bad(
                f"entry {int(np.argmax(size < 0))} of device {device}'s trace has no size"
            )
        time_us = c["time_us"]
        return {
            "action": action,
            "device": np.full(len(action), device, np.int32),
            "address": c["address"],
            "size_bytes": size,
            "stream": c["stream"],
            "time_ns": np.where(time_us >= 0, time_us * 1000, -1),
            "stack": self._scanned_stack_ids(c["stack"]),
        }

    def _scanned_stack_ids(self, scanned: NDArray[np.int32]) -> NDArray[np.int32]:
        """The scanner's stack numbers as this record's, interned in order of first use (as
        :meth:`stacks_of` interns them: frames in order of first use too)."""
        assert self.rows is not None
        numbers, first = np.unique(scanned, return_index=True)
        order = [n for n in numbers[np.argsort(first)].tolist() if n not in self._scanned_stacks]
        table = np.full(len(self.rows.stacks) + 1, -1, np.int32)  # [number + 1]
        for number, known in self._scanned_stacks.items():
            table[number + 1] = known
        order = [n for n in order if n >= 0]
        if order:
            pieces = [np.frombuffer(self.rows.stacks[n], np.int32) for n in order]
            flat = np.concatenate(pieces)
            objects, seen = np.unique(flat, return_index=True)
            frame_id = np.zeros(len(self.rows.frame_objects), np.int64)
            given = self.rows.frame_objects
            for f in objects[np.argsort(seen)].tolist():
                frame_id[f] = self._frame(given[f])
            ends = np.cumsum([len(p) for p in pieces]).tolist()
            ids = frame_id[flat].tolist()
            start = 0
            for number, end in zip(order, ends, strict=True):
                key = tuple(ids[start:end])
                start = end
                stack = self._stack_ids.get(key)
                if stack is None:
                    stack = self._stack_ids[key] = len(self.stacks)
                    self.stacks.append(list(key))
                table[number + 1] = self._scanned_stacks[number] = stack
        return table[scanned + 1]

    def _device_events(self, device: int, entries: list[Any]) -> dict[str, Any]:
        if not all(type(e) is dict for e in entries):
            number = next(i for i, e in enumerate(entries) if type(e) is not dict)
            raise self.bad(f"entry {number} of device {device}'s trace is not a dict")
        action = np.array([_ACTIONS.get(e.get("action"), 255) for e in entries], np.int64)
        unknown = action == 255
        if unknown.any():
            names = [str(entries[i].get("action"))[:40] for i in np.flatnonzero(unknown)]
            for name in sorted(set(names)):
                self.warnings.append(
                    f"{self.source}: {names.count(name):,} allocator trace entries of unknown"
                    f" action {name!r} left out"
                )
            keep = np.flatnonzero(~unknown).tolist()
            entries = [entries[i] for i in keep]
            action = action[~unknown]
        sizes = [e.get("size") for e in entries]
        if not all(type(x) is int for x in sizes):
            number = next(i for i, x in enumerate(sizes) if type(x) is not int)
            raise self.bad(f"entry {number} of device {device}'s trace has no size")
        size = np.array(sizes, np.int64)
        if (size < 0).any():
            raise self.bad(
                f"entry {int(np.argmax(size < 0))} of device {device}'s trace has no size"
            )
        times = [e.get("time_us", -1) for e in entries]
        time_us = np.array([t if type(t) is int else -1 for t in times], np.int64)
        return {
            "action": action.astype(np.uint8),
            "device": np.full(len(entries), device, np.int32),
            # An "oom" entry carries the device's free memory as "device_free", not "addr".
            "address": np.array(
                [_int(e.get("addr", e.get("device_free")), -1) for e in entries], np.int64
            ),
            "size_bytes": size,
            "stream": np.array([_int(e.get("stream"), -1) for e in entries], np.int64),
            "time_ns": np.where(time_us >= 0, time_us * 1000, -1),
            "stack": np.array(self.stacks_of([e.get("frames") for e in entries]), np.int32),
        }

    def stacks_of(self, given: list[Any]) -> list[int]:
        """:meth:`stack` of each, the ones seen before (the same list object) looked up at
        once."""
        known = self._stack_by_object
        found = [known.get(id(f), -2) for f in given]
        return [
            number if number != -2 else self.stack(frames)
            for number, frames in zip(found, given, strict=True)
        ]


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
