"""Reader for PyTorch profiler (Kineto) Chrome-trace JSON, every generation.

Handles: 2021 traces (capitalised categories, ``async`` flows, ``computeProperties``), integer-µs
traces (2022-2024), float-µs traces with ``baseTimeNanoseconds`` (2025+), CUDA, ROCm (device args
that differ from ``deviceProperties`` ids, empty device names) and MTIA (``mtia_ccp_events``).

Contract: :func:`read` takes decoded bytes and returns one :class:`~gpuscope.model.Trace`, or raises
:class:`~gpuscope.errors.InputError` with one line saying what is wrong. A document cut off
mid-write is read up to its last whole event, with a warning.

Speed: the C scanner (``_kscan.c``, run by ``_scan``) reads the events straight into columns;
where it is not built or does not follow a document, msgspec decodes it into small typed structs
that keep only the fields gpuscope uses, turned into numpy columns one pass per field.
"""

from __future__ import annotations

import gc
import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from itertools import compress
from operator import attrgetter
from pathlib import Path
from typing import Any, Union

import msgspec
import numpy as np

from gpuscope._arrays import among, distinct
from gpuscope.errors import CorruptInputError, EmptyTraceError, UnknownFormatError
from gpuscope.model import CopyDirection, DeviceInfo, Events, Kind, Step, Trace
from gpuscope.readers import _scan
from gpuscope.readers._io import read_bytes
from gpuscope.readers._links import join_launches, link_launches
from gpuscope.readers._scan import NotScannableError, Scan, TextState, looks_like_kineto

__all__ = ["looks_like_kineto", "read", "read_file"]

#: Where the events array starts.
ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[')

# --- the decoded shape -----------------------------------------------------------------------


class _Args(msgspec.Struct, gc=False):
    correlation: int = -1
    stream: int = -1
    device: int = -1
    external_id: int = msgspec.field(default=-1, name="External id")
    external_id_2021: int = msgspec.field(default=-1, name="external id")
    bytes: int = -1
    python_id: int = msgspec.field(default=-1, name="Python id")
    python_parent_id: int | None = msgspec.field(default=-1, name="Python parent id")
    grid: list[int] | None = None
    block: list[int] | None = None
    occupancy_pct: float = msgspec.field(default=float("nan"), name="est. achieved occupancy %")
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    input_type: Any = msgspec.field(default=None, name="Input type")
    concrete_inputs: Any = msgspec.field(default=None, name="Concrete Inputs")
    collective_name: str | None = msgspec.field(default=None, name="Collective name")
    in_msg_nelems: int | None = msgspec.field(default=None, name="In msg nelems")
    out_msg_nelems: int | None = msgspec.field(default=None, name="Out msg nelems")
    group_size: int | None = msgspec.field(default=None, name="Group size")
    dtype: str | None = None
    pg_name: str | None = msgspec.field(default=None, name="Process Group Name")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    size: int | None = None  # MTIA DMA size in bytes
    # 2021 traces' Python stack of an op, innermost frame first: "train.py(42): step;...".
    call_stack: str | None = msgspec.field(default=None, name="Call stack")
    # A copy between two GPUs (CUPTI's peer-to-peer memcpy record): source and destination.
    from_device: int | None = msgspec.field(default=None, name="fromDevice")
    to_device: int | None = msgspec.field(default=None, name="toDevice")


# The same fields as _Args, any JSON type: the fallback when a writer put odd types in ``args``.
_LenientArgs = msgspec.defstruct(
    "_LenientArgs",
    [(f.name, Any, None) for f in msgspec.structs.fields(_Args)],
    rename={f.name: f.encode_name for f in msgspec.structs.fields(_Args)},
    gc=False,
)


class _Event(msgspec.Struct, tag="X", tag_field="ph", gc=False):
    """A complete event (``"ph": "X"``): the only phase the model is built from."""

    cat: str = ""
    name: str = ""
    pid: Any = None
    tid: Any = None
    ts: int | float = 0
    dur: int | float = 0
    args: _Args | None = None


def _skipped_phase(phase: str) -> type:
    # Decoding other phases into field-less structs skips their content without allocating it.
    return msgspec.defstruct(f"_Phase_{phase}", [], tag=phase, tag_field="ph", gc=False)


_CHROME_PHASES = "BEiIsftPNODCbneMRcVpSTF"
_AnyEvent = Union[(_Event, *(_skipped_phase(p) for p in _CHROME_PHASES))]  # type: ignore[valid-type]


class _Flow(msgspec.Struct, gc=False):
    ph: str = ""
    cat: Any = ""
    id: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = 0


class _FlowDocument(msgspec.Struct, gc=False):
    traceEvents: list[_Flow] | None = None  # noqa: N815


class _LenientEvent(msgspec.Struct, gc=False):
    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = 0.0
    dur: Any = 0.0
    id: Any = None
    bp: Any = ""
    args: _LenientArgs | None = None  # type: ignore[valid-type]


class _Document(msgspec.Struct):
    traceEvents: list[_AnyEvent] | None = None  # type: ignore[valid-type]  # noqa: N815 - the format's own key
    deviceProperties: list[dict[str, Any]] | None = None  # noqa: N815
    computeProperties: list[dict[str, Any]] | None = None  # noqa: N815
    distributedInfo: dict[str, Any] | None = None  # noqa: N815
    baseTimeNanoseconds: int | None = None  # noqa: N815
    schemaVersion: Any = None  # noqa: N815
    roctracer_version: Any = None
    hip_runtime_version: Any = None


class _LenientDocument(msgspec.Struct):
    traceEvents: list[_LenientEvent] | None = None  # noqa: N815
    deviceProperties: Any = None  # noqa: N815
    computeProperties: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815
    baseTimeNanoseconds: Any = None  # noqa: N815
    schemaVersion: Any = None  # noqa: N815
    roctracer_version: Any = None
    hip_runtime_version: Any = None


_DECODER = msgspec.json.Decoder(_Document)
_EVENTS_DECODER = msgspec.json.Decoder(list[_AnyEvent])  # type: ignore[valid-type]
_FLOWS_DECODER = msgspec.json.Decoder(list[_Flow])
_ARGS_LIST_DECODER = msgspec.json.Decoder(list[_Args])
_LENIENT_ARGS_LIST_DECODER = msgspec.json.Decoder(list[_LenientArgs], float_hook=float)  # type: ignore[valid-type]
_META_DECODER = _DECODER  # the document without its events
_FLOW_DECODER = msgspec.json.Decoder(_FlowDocument)
_CATEGORY = attrgetter("cat")
_NAME = attrgetter("name")
_PID = attrgetter("pid")
_TID = attrgetter("tid")
_TS = attrgetter("ts")
_DUR = attrgetter("dur")
_OCCUPANCY = attrgetter("occupancy_pct")
_SKIP = 255
# float_hook: a number beyond a double (``1e400``) is valid JSON; it decodes as infinity and is
# then refused as a value (see _bad_times), rather than failing the whole document.
_LENIENT_DECODER = msgspec.json.Decoder(_LenientDocument, float_hook=float)
_EMPTY_ARGS = _Args()

# Categories, matched case-insensitively (2021 traces capitalise them).
_KIND_OF_CATEGORY: dict[str, Kind] = {
    "kernel": Kind.KERNEL,
    "cuda_profiler_range": Kind.KERNEL,
    "mtia_ccp_events": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "memset": Kind.MEMSET,
    "cuda_sync": Kind.SYNC,
    "cuda_runtime": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "cuda_driver": Kind.RUNTIME,
    "mtia_runtime": Kind.RUNTIME,
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "python_function": Kind.PYTHON,
    "python": Kind.PYTHON,
    "user_annotation": Kind.ANNOTATION,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
}
_DEVICE_KINDS = frozenset({Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC, Kind.GPU_ANNOTATION})
_LINKED_KINDS = frozenset({Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC, Kind.RUNTIME})
_FLOW_CATEGORIES = frozenset({"ac2g", "async", "async_cpu_to_gpu", "async_gpu"})
_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
_MEMCPY_DIRECTION = {
    "htod": CopyDirection.H2D,
    "dtoh": CopyDirection.D2H,
    "dtod": CopyDirection.D2D,
    "ptop": CopyDirection.P2P,
}


def read_file(path: Path, scan: Scan | None = None) -> Trace:
    """Read a Kineto file holding little more than its columns in memory.

    The C scanner reads it where it is built (``scan``, when given, is the file's scan already
    started; see ``_scan``). Otherwise, or when the document's layout or values are unusual,
    msgspec decodes it in pieces of a few megabytes or, failing that, whole.
    """
    with _gc_paused():
        try:
            if scan is None and _scan.scanner_built():
                scan = Scan(path)
            if scan is not None:
                return _read_scanned(path, scan)
            return _read_streamed(path)
        except (NotScannableError, _NotStreamableError, msgspec.DecodeError, RecursionError):
            pass  # the whole document decoded at once says what is wrong with it, if anything
    content = read_bytes(path)
    return read(path, content.data, truncated_stream=content.truncated)


def read(path: Path, data: bytes, *, truncated_stream: bool = False) -> Trace:
    """Decode one whole Kineto document held in memory into a :class:`Trace`."""
    with _gc_paused():
        return _read(path, data, truncated_stream)


@contextmanager
def _gc_paused() -> Iterator[None]:
    # Hundreds of thousands of short-lived objects and no cycles: the cyclic GC would only rescan
    # them, which costs more than the decoding itself.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _read(path: Path, data: bytes, truncated_stream: bool) -> Trace:
    document, lost_tail = _decode(path, data, truncated_stream)
    events = document.traceEvents
    if events is None:
        raise UnknownFormatError(path, "JSON without a 'traceEvents' list: not a Chrome trace")
    if not events:
        raise EmptyTraceError(path, "the trace holds no events")
    columns = _Columns(lenient=isinstance(document, _LenientDocument))
    columns.add(events, lambda: _flows_of(data))
    return columns.finish(path, document, lost_tail=lost_tail)


# --- reading in pieces ---------------------------------------------------------------------------

_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
#: The end of the events array: its last event's brace, then another key of the document, or
#: (once the whole file has been read) the document's end.
_ARRAY_END = re.compile(rb"\}\s*\]\s*,\s*\"")
_ARRAY_END_LAST = re.compile(rb"\}\s*\]\s*\}\s*$")


class _NotStreamableError(Exception):
    """The document's layout is not one the piecewise reader follows; read it whole instead."""


def _read_streamed(path: Path) -> Trace:
    stream = _EventText(path)
    columns = _Columns(lenient=False)
    for chunk in stream.chunks():
        body = b"[" + chunk + b"]"
        decoded = _EVENTS_DECODER.decode(body)
        columns.add(decoded, partial(_flows_in, body))
        del decoded
    if not stream.finished:
        raise _NotStreamableError
    if stream.truncated and columns.events == 0:
        raise CorruptInputError(path, "the file ends mid-write before its first whole event")
    meta = _META_DECODER.decode(stream.metadata_document())
    if not _top_level_events(stream.header, meta):
        raise _NotStreamableError
    return columns.finish(path, meta, lost_tail=stream.truncated)


def _read_scanned(path: Path, scan: Scan) -> Trace:
    """The columns the C scanner read, piece by piece, into the model (see ``_scan``)."""
    columns = _Columns(lenient=False)
    try:
        columns.add_scanned(scan.result())
    except UnicodeDecodeError:
        raise NotScannableError from None
    state = scan.state
    if state.truncated and columns.events == 0:
        raise CorruptInputError(path, "the file ends mid-write before its first whole event")
    meta = _META_DECODER.decode(state.metadata_document())
    if not _top_level_events(state.header, meta):
        raise NotScannableError
    return columns.finish(path, meta, lost_tail=state.truncated)


_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')  # unrolled: fast on long strings


def _top_level_events(header: bytes, meta: Any) -> bool:
    """Whether the events array found first is the document's own ``traceEvents``: the key at
    the top level (one bracket open before it, strings aside), and no other ``traceEvents`` key
    after it (a JSON parser keeps the last of duplicate keys). A ``traceEvents`` nested in a
    metadata object before the real one, or a second one, goes to the whole-document reader."""
    if meta.traceEvents is not None:
        return False
    if b"[" not in header and header.count(b"{") == 1:
        return True  # the usual header: device properties come after the events, or none
    bare = _JSON_STRING.sub(b"", header)
    depth = bare.count(b"{") + bare.count(b"[") - bare.count(b"}") - bare.count(b"]")
    return depth == 1


class _EventText(TextState):
    """The text of a Chrome trace cut into pieces of whole events, for the msgspec reader.

    ``chunks()`` yields comma-separated whole events (no brackets); afterwards
    ``metadata_document()`` is the document without its events, and ``truncated`` says whether
    it ended mid-write.
    """

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.finished = False

    def chunks(self) -> Iterator[bytes]:
        pieces = _scan.decompressed_pieces(self.path, self)
        buffer = b""
        for piece in pieces:
            buffer += piece
            found = ARRAY_START.search(buffer)
            if found:
                self.header, buffer = buffer[: found.start()], buffer[found.end() :]
                break
            if len(buffer) > (64 << 20):
                raise _NotStreamableError
        else:
            raise _NotStreamableError
        exhausted = False
        while True:
            while len(buffer) < _scan.PIECE_BYTES and not exhausted:
                more = next(pieces, None)
                exhausted = more is None
                buffer += more or b""
            end = _ARRAY_END.search(buffer)
            if end is None and exhausted:
                end = _ARRAY_END_LAST.search(buffer)
            if end is not None:
                # The events end here; what follows (other keys, which may hold lists of
                # objects such as deviceProperties) is the document's tail.
                self.tail = buffer[end.start() + 1 :].lstrip()[1:] + b"".join(pieces)
                self.finished = True
                yield buffer[: end.start() + 1]
                return
            cut = _last_boundary(buffer)
            if cut is not None:
                yield buffer[: cut[0]]
                buffer = buffer[cut[1] :]
                if len(buffer) < _scan.PIECE_BYTES and not exhausted:
                    continue
            if exhausted:
                break
            more = next(pieces, None)  # one event larger than a piece: read on
            exhausted = more is None
            buffer += more or b""
        last = self._last_event(buffer)
        self.finished = True
        if last:
            yield last

    def _last_event(self, buffer: bytes) -> bytes:
        """Split what follows the last boundary into the last event and the document's tail."""
        if buffer.lstrip().startswith(b"]"):
            self.tail = buffer.lstrip()[1:]
            return b""
        position = buffer.find(b"]")
        while position >= 0:
            candidate = buffer[:position]
            if candidate.rstrip().endswith(b"}"):
                try:
                    _EVENTS_DECODER.decode(b"[" + candidate + b"]")
                except msgspec.DecodeError:
                    pass
                else:
                    self.tail = buffer[position + 1 :]
                    return candidate
            position = buffer.find(b"]", position + 1)
        self.truncated = True  # the last event was cut off mid-write, or just after its end:
        last = buffer.rstrip()  # then it is whole and kept, as the scanner keeps it
        last = last[:-1].rstrip() if last.endswith(b",") else last
        if last.endswith(b"}"):
            try:
                _EVENTS_DECODER.decode(b"[" + last + b"]")
            except msgspec.DecodeError:
                return b""
            return last
        return b""


def _last_boundary(buffer: bytes) -> tuple[int, int] | None:
    """Where the last whole event before another ends: (just past its ``}``, at the next ``{``)."""
    for window in (1 << 16, len(buffer)):
        found = None
        for found in _BOUNDARY.finditer(buffer, max(0, len(buffer) - window)):  # noqa: B007
            pass
        if found is not None:
            return found.start() + 1, found.end() - 1
    return None


def _flows_in(body: bytes) -> list[Any]:
    return list(_FLOWS_DECODER.decode(body))


def _flows_of(data: bytes) -> list[Any]:
    try:
        return _FLOW_DECODER.decode(data).traceEvents or []
    except msgspec.DecodeError:  # a repaired, truncated document: no flows rather than none at all
        return []


# --- decoding ----------------------------------------------------------------------------------


def _decode(path: Path, data: bytes, truncated_stream: bool) -> tuple[Any, bool]:
    try:
        return _decode_any(data), truncated_stream
    except RecursionError:  # valid JSON, but arrays or objects nested thousands deep
        raise CorruptInputError(path, "JSON nested too deep to read") from None
    except msgspec.DecodeError as error:
        message = str(error)
        # Cut off mid-write only when the decoder ran out of input: an error anywhere else is a
        # corrupt document, and keeping the events before it would be a silent loss. (msgspec
        # also says "truncated" of a lone UTF-16 surrogate escape, which is no cut.)
        cut_off = "truncated" in message and _LONE_SURROGATE.search(data) is None
        if (
            not cut_off
            or not data.lstrip().startswith(b"{")
            or b'"traceEvents"' not in data[:65536]
        ):
            raise CorruptInputError(path, f"not valid JSON ({error})") from None
    repaired = _repair_truncated(data)
    if repaired is None:
        raise CorruptInputError(path, f"not valid JSON and no whole event to keep ({message})")
    return repaired, True


_LONE_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])")


def _decode_any(data: bytes) -> Any:
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError:
        return _LENIENT_DECODER.decode(data)


_EVENT_BOUNDARY = _BOUNDARY


def _repair_truncated(data: bytes) -> Any | None:
    """Cut a document that ends mid-write after its last whole event and close it."""
    start = data.find(b"[", data.find(b'"traceEvents"'))
    if start < 0:
        return None
    tail_from = max(start, len(data) - (8 << 20))
    boundaries = [m.start() for m in _EVENT_BOUNDARY.finditer(data, tail_from)]
    # A file cut just after an event (``},``) keeps that event too, as the scanner does.
    end = data.rstrip()
    end = end[:-1].rstrip() if end.endswith(b",") else end
    if end.endswith(b"}") and len(end) > start:
        boundaries.append(len(end) - 1)
    for cut in reversed(boundaries[-64:]):
        try:
            return _decode_any(data[: cut + 1] + b"]}")
        except (msgspec.DecodeError, RecursionError):
            continue
    return None


# --- building the model --------------------------------------------------------------------------


class _Columns:
    """Events turned into columns piece by piece, then assembled into one sorted table."""

    def __init__(self, *, lenient: bool) -> None:
        self.lenient = lenient
        self.kind_of: dict[Any, int] = {}
        self.index: dict[Any, int] = {}
        self._names: list[str] = []
        self.parts: dict[str, list[np.ndarray]] = {}
        self.extra: dict[int, dict[str, Any]] = {}
        self.rows = 0
        self.events = 0
        self.old_schema = False
        self.float_ts = False
        self.flows: list[Any] = []
        #: Complete events skipped, by why (see :func:`_bad_times`): reported, never zeroed.
        self.skipped: dict[str, int] = {}

    def add(self, raw_events: list[Any], flows: Callable[[], list[Any]]) -> None:
        """Add a piece of the document's events; ``flows`` decodes the same piece's flow events,
        called only when device work in it lacks correlation ids."""
        self.events += len(raw_events)
        if self.lenient:
            complete = [e for e in raw_events if e.ph == "X"]
        else:
            complete = [e for e in raw_events if type(e) is _Event]
        categories = list(map(_CATEGORY, complete))
        if self.lenient:  # a category that is not a string (a list, an object) is no kind
            categories = [c if isinstance(c, str) else None for c in categories]
        for cat in set(categories) - self.kind_of.keys():
            self._kind_code(cat)
        codes = np.fromiter(
            map(self.kind_of.__getitem__, categories), dtype=np.uint8, count=len(categories)
        )
        keep = codes != _SKIP
        rows = list(compress(complete, keep.tolist()))
        if not rows:
            return
        kinds = codes[keep]
        bad = _bad_times(
            [e.ts for e in rows], [e.dur for e in rows], self.skipped, typed=not self.lenient
        )
        if bad is not None:
            rows = list(compress(rows, (~bad).tolist()))
            kinds = kinds[~bad]
            if not rows:
                return
        if "mtia_ccp_events" in self.kind_of:
            _mark_mtia_dma(rows, kinds)
        columns = self._columns(rows, kinds)
        for name, values in columns.items():
            self.parts.setdefault(name, []).append(values)
        on_device = (columns["device"] >= 0) & (kinds != Kind.GPU_ANNOTATION)
        if np.any(columns["correlation"][on_device] < 0):
            self.flows.extend(flows())
        self.rows += len(rows)

    def add_scanned(self, scanned: _scan.Scanned) -> None:
        """Add the events the C scanner read: the same columns :meth:`add` builds from decoded
        events."""
        events, n, raw, raw_cats, raw_names, extra_rows, extras, flows = scanned
        self.events += events
        if n == 0:
            return
        # Every name and category msgspec would decode must be UTF-8, used or not: otherwise
        # UnicodeDecodeError, and the msgspec reader says what is wrong with the document.
        b"".join(raw_names).decode()
        b"".join(raw_cats).decode()
        cats = [_raw_string(c) for c in raw_cats]
        codes_of_cat = np.array([self._kind_code(c) for c in cats], dtype=np.uint8)
        cat = np.frombuffer(memoryview(raw.pop("cat")), dtype=np.int32)
        codes = codes_of_cat[cat]
        keep = codes != _SKIP
        # The scanner hands over any time that is not a number in range; a negative duration
        # is skipped and counted here as the msgspec reader does (see _bad_times).
        negative = keep & (np.frombuffer(memoryview(raw["dur_ns"]), dtype=np.int64) < 0)
        if negative.any():
            _count(self.skipped, _NEGATIVE_DURATION, int(negative.sum()))
            keep &= ~negative
        if not keep.any():
            return
        kept = np.flatnonzero(keep)
        every_row = len(kept) == n
        kinds = codes[kept]
        name_local = np.frombuffer(memoryview(raw.pop("name")), dtype=np.int32)[kept]
        if "mtia_ccp_events" in cats:
            dma = np.array([name.startswith(b"dma") for name in raw_names], dtype=bool)
            is_mtia = np.array([c == "mtia_ccp_events" for c in cats], dtype=bool)
            kinds[is_mtia[cat[kept]] & dma[name_local]] = Kind.MEMCPY

        # Each raw column is read once and dropped: the peak holds the table about once.
        def column(key: str, dtype: type = np.int64) -> np.ndarray:
            values: np.ndarray = np.frombuffer(memoryview(raw.pop(key)), dtype=dtype)
            return values if every_row else values[kept]

        def arg(field: str, rows: np.ndarray) -> np.ndarray:
            values: np.ndarray = np.frombuffer(memoryview(raw.pop(field)), dtype=np.int64)[
                kept[rows]
            ]
            return values

        self.float_ts |= bool(column("float_time", np.uint8).any())
        if extra_rows:
            new_row = np.cumsum(keep) - 1
            rows_with_args = np.frombuffer(extra_rows, dtype=np.int64).tolist()
            for row, args in zip(
                rows_with_args, _decode_args_list(memoryview(extras)), strict=True
            ):
                extra = _extras_of(args) if keep[row] else None
                if extra:
                    self.extra[self.rows + int(new_row[row])] = extra
        piece = {
            "kind": kinds,
            "name_id": self._intern_used(raw_names, name_local),
            "start_ns": column("ts_ns"),
            "dur_ns": column("dur_ns"),
            **self._arg_columns(kinds, column("pid"), column("tid"), arg),
            "occupancy_pct": column("occupancy", np.float64).astype(np.float32),
        }
        for name, values in piece.items():
            self.parts.setdefault(name, []).append(values)
        on_device = (piece["device"] >= 0) & (kinds != Kind.GPU_ANNOTATION)
        if np.any(piece["correlation"][on_device] < 0):
            self.flows.extend(_FLOWS_DECODER.decode(memoryview(flows)))
        self.rows += len(kept)

    def _intern_used(self, raw_names: list[bytes], local: np.ndarray) -> np.ndarray:
        """Global ids for local name ids (into the scanner's raw names), decoding and interning
        only the names used, in order of use."""
        used, first = np.unique(local, return_index=True)
        used = used[np.argsort(first, kind="stable")]
        global_ids = np.zeros(len(raw_names), dtype=np.int32)
        global_ids[used] = self._intern([_raw_string(raw_names[i]) for i in used.tolist()])
        mapped: np.ndarray = global_ids[local]
        return mapped

    def _kind_code(self, cat: Any) -> int:
        """The kind code of an event category (``_SKIP``: not one the model keeps)."""
        if cat not in self.kind_of:
            kind = _KIND_OF_CATEGORY.get(cat.lower()) if isinstance(cat, str) else None
            self.kind_of[cat] = _SKIP if kind is None else int(kind)
            self.old_schema |= cat in ("Kernel", "Runtime", "Operator")
        return self.kind_of[cat]

    def _columns(self, rows: list[Any], kinds: np.ndarray) -> dict[str, np.ndarray]:
        args = [e.args or _EMPTY_ARGS for e in rows]
        if self.lenient:
            args = [_coerce_args(a) for a in args]
            ts = [_num(e.ts) for e in rows]
            dur = [_num(e.dur) for e in rows]
            self.float_ts |= any(isinstance(e.ts, float) for e in rows)
        else:
            ts = list(map(_TS, rows))
            dur = list(map(_DUR, rows))
        ts_us = np.array(ts)
        self.float_ts |= not self.lenient and ts_us.dtype.kind == "f"
        n = len(rows)
        for row, values in _extra_args(args).items():
            self.extra[self.rows + row] = values

        def arg(field: str, chosen: np.ndarray) -> np.ndarray:
            if field in ("grid", "block"):
                return np.array([_product(getattr(args[r], field)) for r in chosen], np.int64)
            return _column(args, field, chosen)

        return {
            "kind": kinds,
            "name_id": self._intern(list(map(_NAME, rows))),
            "start_ns": _to_ns(ts_us),
            "dur_ns": _to_ns(dur),
            **self._arg_columns(
                kinds, _ids(list(map(_PID, rows))), _ids(list(map(_TID, rows))), arg
            ),
            "occupancy_pct": np.fromiter(map(_OCCUPANCY, args), dtype=np.float32, count=n),
        }

    def _arg_columns(
        self,
        kinds: np.ndarray,
        pid: np.ndarray,
        tid: np.ndarray,
        arg: Callable[[str, np.ndarray], np.ndarray],
    ) -> dict[str, np.ndarray]:
        """The columns taken from ``args``, each read (``arg(field, rows)``) only for the kinds
        it concerns; -1 elsewhere. Both readers' columns come from here."""
        n = len(kinds)
        every = np.arange(n)
        on_device = np.flatnonzero(among(kinds, _DEVICE_KINDS))
        linked = np.flatnonzero(among(kinds, _LINKED_KINDS))
        copies = np.flatnonzero((kinds == Kind.MEMCPY) | (kinds == Kind.MEMSET))
        python = np.flatnonzero(kinds == Kind.PYTHON)
        kernels = np.flatnonzero(kinds == Kind.KERNEL)
        arg_device, arg_stream = arg("device", on_device), arg("stream", on_device)
        external_id = arg("external_id", every)
        if self.old_schema:
            external_id = np.where(external_id >= 0, external_id, arg("external_id_2021", every))
        return {
            "pid": pid,
            "tid": tid,
            "device": _scatter(n, on_device, np.where(arg_device >= 0, arg_device, pid[on_device])),
            "stream": _scatter(n, on_device, np.where(arg_stream >= 0, arg_stream, tid[on_device])),
            "correlation": _scatter(n, linked, arg("correlation", linked)),
            "external_id": external_id,
            "bytes": _scatter(n, copies, np.maximum(arg("bytes", copies), arg("size", copies))),
            "python_id": _scatter(n, python, arg("python_id", python)),
            "python_parent_id": _scatter(n, python, arg("python_parent_id", python)),
            "grid_blocks": _scatter(n, kernels, arg("grid", kernels)),
            "block_threads": _scatter(n, kernels, arg("block", kernels)),
        }

    def _intern(self, raw_names: list[Any]) -> np.ndarray:
        if not all(type(n) is str for n in raw_names):  # the lenient reader's odd names
            raw_names = [self._odd_name(n) for n in raw_names]
        index = self.index
        for name in dict.fromkeys(raw_names):
            if name not in index:
                text = name
                if len(text) > MAX_NAME_CHARS:
                    text = text[:MAX_NAME_CHARS] + "…"
                    _count(self.skipped, _LONG_NAME, 1)
                index[name] = index.setdefault(text, len(self.names))
                if index[name] == len(self.names):
                    self.names.append(text)
        return np.fromiter(map(index.__getitem__, raw_names), dtype=np.int32, count=len(raw_names))

    def _odd_name(self, name: Any) -> str:
        """A name that is not a JSON string (a number, a list, an object) reads as ``?``."""
        if isinstance(name, str):
            return name
        _count(self.skipped, _NOT_A_STRING, 1)
        return "?"

    @property
    def names(self) -> list[str]:
        return self._names

    def finish(self, path: Path, doc: Any, *, lost_tail: bool) -> Trace:
        if self.events == 0:
            raise EmptyTraceError(path, "the trace holds no events")
        if self.rows == 0:
            raise EmptyTraceError(path, "no profiler events (no CPU ops, kernels or runtime calls)")
        names = list(self.names)
        # Sorted by start one column at a time, each piece freed as soon as it is copied: the
        # peak stays near one copy of the table rather than three.
        order = np.argsort(_joined(self.parts["start_ns"]), kind="stable")
        columns: dict[str, np.ndarray] = {}
        for name in list(self.parts):
            columns[name] = _joined(self.parts.pop(name))[order]
        direction, pageable = _memcpy_columns(names, columns["name_id"], columns["kind"])
        columns["copy_direction"] = direction
        columns["pageable"] = pageable
        new_row = np.empty_like(order)
        new_row[order] = np.arange(len(order))
        extra = dict(zip(new_row[list(self.extra)].tolist(), self.extra.values(), strict=True))
        _between_gpus(columns, extra)
        table = Events.from_columns(self.rows, columns, extra)
        link_launches(table)
        if self.flows:
            _link_by_flows(table, self.flows)
        dist = doc.distributedInfo if isinstance(doc.distributedInfo, dict) else {}
        old = self.old_schema or doc.computeProperties is not None
        schema = "kineto-2021" if old else ("kineto-float-us" if self.float_ts else "kineto-int-us")
        trace = Trace(
            source=str(path),
            format="kineto",
            schema=schema,
            rank=_opt_int(dist.get("rank")),
            world_size=_opt_int(dist.get("world_size")),
            devices=_devices(doc, table, mtia="mtia_ccp_events" in self.kind_of),
            names=names,
            events=table,
            steps=_steps(table, names),
            metadata={"base_time_ns": _opt_int(doc.baseTimeNanoseconds), "distributed": dist},
        )
        if "cuda_profiler_range" in self.kind_of:
            trace.warnings.append(
                f"{path}: kernels were recorded by CUPTI range profiling (replayed for counters):"
                " their durations are not real-time, so busy and idle figures are not either"
            )
        for reason, count in self.skipped.items():
            trace.warnings.append(f"{path}: {count:,} {reason}")
        if lost_tail:
            trace.warnings.append(
                f"{path}: the file ends mid-write (the profiler did not finish it); read "
                f"{self.rows:,} whole events covering {_span_ms(trace):.1f} ms, the rest is lost"
            )
        return trace


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """The pieces of a column as one array; the scanner's single piece as it is (no copy)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _mark_mtia_dma(rows: list[Any], kinds: np.ndarray) -> None:
    """MTIA device events named ``dma_*`` move memory; the rest of ``mtia_ccp_events`` compute."""
    dma = [
        e.cat == "mtia_ccp_events" and isinstance(e.name, str) and e.name.startswith("dma")
        for e in rows
    ]
    kinds[np.array(dma, dtype=bool)] = Kind.MEMCPY


def _scatter(n: int, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    column = np.full(n, -1, dtype=np.int64)
    column[rows] = values
    return column


def _column(args: list[Any], field: str, rows: np.ndarray | None = None) -> np.ndarray:
    """One integer argument as a column (``-1`` when absent), for all rows or only ``rows``."""
    chosen = args if rows is None else [args[r] for r in rows.tolist()]
    values = list(map(attrgetter(field), chosen))
    try:
        column = np.array(values, dtype=np.int64)
        if column.ndim == 1:
            return column
    except (TypeError, ValueError, OverflowError):  # a null among the ints, one beyond 64 bits
        pass
    return np.array([v if _in_int64(v) else -1 for v in values], dtype=np.int64)


def _in_int64(value: Any) -> bool:
    return isinstance(value, int) and _INT64_MIN <= value <= _INT64_MAX


def _ids(values: list[Any]) -> np.ndarray:
    """pid/tid columns: plain ints, except in traces that write them as strings."""
    try:
        column = np.array(values, dtype=np.int64)
        if column.ndim == 1:  # not ``"pid": [1, 2]`` everywhere (a column of lists)
            return column
    except (TypeError, ValueError, OverflowError):
        pass
    return np.array([_int_id(v) for v in values], dtype=np.int64)


def _to_ns(values_us: list[Any] | np.ndarray) -> np.ndarray:
    """Microseconds as written (ints, or floats with a fraction) to exact integer nanoseconds.

    Integers are scaled exactly; floats are split into whole and fractional microseconds first,
    so that the scaling does not lose the nanoseconds a float of ~1e15 cannot hold after ``* 1000``.
    """
    us = np.asarray(values_us)
    if us.dtype.kind in "iu":
        exact: np.ndarray = us.astype(np.int64) * 1000
        return exact
    us = us.astype(np.float64)
    whole = np.floor(us)
    fraction_ns = np.rint((us - whole) * 1000.0).astype(np.int64)
    split: np.ndarray = whole.astype(np.int64) * 1000 + fraction_ns
    return split


def _product(dims: list[int] | None) -> int:
    if not dims:
        return -1
    total = 1
    for d in dims:
        total *= d
    return total


def _int_id(value: Any) -> int:
    """Process and thread ids: ints, or strings such as ``"24572"`` / ``"stream 7"`` (2021)."""
    if isinstance(value, str) and _ID_DIGITS.fullmatch(digits := value.rsplit(" ", 1)[-1]):
        value = int(digits)
    return value if _in_int64(value) and not isinstance(value, bool) else -1


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_ID_DIGITS = re.compile(r"-?[0-9]+")
#: The largest time in microseconds whose nanoseconds fit in 64 bits (as the scanner checks).
_MAX_TIME_US = 9.0e15
_BAD_TIME = "events with a ts or dur that is not a number in range were skipped"
#: Kernel names of C++ templates run to a few thousand characters; a name of megabytes is a
#: corrupt or hostile file, and matching patterns over it would take minutes.
MAX_NAME_CHARS = 1 << 16
_NEGATIVE_DURATION = "events with a negative duration were skipped"
_LONG_NAME = f"names longer than {MAX_NAME_CHARS:,} characters were cut there"
_NOT_A_STRING = "events with a name that is not a string are named '?'"


def _count(skipped: dict[str, int], reason: str, n: int) -> None:
    skipped[reason] = skipped.get(reason, 0) + n


def _bad_times(
    ts: list[Any], dur: list[Any], skipped: dict[str, int], *, typed: bool
) -> np.ndarray | None:
    """Rows whose time cannot be used, counted into ``skipped`` by reason; None when all can.

    A timestamp that is not a number (a string, null, a list), out of range (``1e400``, beyond
    64-bit nanoseconds) or a negative duration is a writer's bug or a corrupt file: taking it as
    0 would move the event to the clock's origin and stretch the timeline by decades, so the
    event is skipped and the count reported instead. ``typed``: the values are msgspec's ints
    and floats (no bools, strings or nulls), so numpy converts them in one pass.
    """
    try:  # ints beyond a double (a 400-digit ts) take the slow path
        t = np.array(ts, dtype=np.float64) if typed else None
        d = np.array(dur, dtype=np.float64) if typed else None
    except OverflowError:
        t = d = None
    if t is None or d is None:
        t = np.array([_time_or_nan(v) for v in ts], dtype=np.float64)
        d = np.array([_time_or_nan(v) for v in dur], dtype=np.float64)
    with np.errstate(invalid="ignore"):
        unusable = ~(np.abs(t) <= _MAX_TIME_US) | ~(np.abs(d) <= _MAX_TIME_US)
        negative = ~unusable & (d < 0)
    if not unusable.any() and not negative.any():
        return None
    if unusable.any():
        _count(skipped, _BAD_TIME, int(unusable.sum()))
    if negative.any():
        _count(skipped, _NEGATIVE_DURATION, int(negative.sum()))
    bad: np.ndarray = unusable | negative
    return bad


def _time_or_nan(value: Any) -> float:
    if type(value) not in (int, float):
        return float("nan")
    try:
        return float(value)
    except OverflowError:
        return float("nan")


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _opt_int(value: Any) -> int | None:
    try:
        number = None if value is None else int(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
        return None
    return number if number is None or _INT64_MIN <= number <= _INT64_MAX else None


def _coerce_args(a: Any) -> Any:
    """Turn lenient args into the typed shape, dropping values of the wrong type."""
    typed = _Args()
    for field_name in _Args.__struct_fields__:
        value = getattr(a, field_name)
        if field_name in {"grid", "block"}:
            value = (
                value
                if isinstance(value, list) and all(isinstance(v, int) for v in value)
                else None
            )
        elif field_name in {"input_dims", "input_type", "concrete_inputs", "pg_ranks"}:
            pass
        elif field_name in {"collective_name", "dtype", "pg_name", "call_stack"}:
            value = value if isinstance(value, str) else None
        elif field_name == "occupancy_pct":  # beyond a double, or not a number: unknown
            value = _time_or_nan(value) if not isinstance(value, bool) else float("nan")
            value = value if math.isfinite(value) else float("nan")
        else:  # ints: what int() makes of the value, else the field's own default
            number = _opt_int(value)
            value = getattr(_EMPTY_ARGS, field_name) if number is None else number
        setattr(typed, field_name, value)
    return typed


def _memcpy_columns(
    names: list[str], name_ids: np.ndarray, kinds: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Direction and pageable host memory, decided once per distinct memcpy name."""
    direction_of_name = np.zeros(len(names), dtype=np.uint8)
    pageable_of_name = np.zeros(len(names), dtype=np.bool_)
    for name_id in distinct(name_ids[kinds == Kind.MEMCPY]):
        name = names[int(name_id)]
        words = name.lower().split()
        code = words[1] if len(words) > 1 and words[0] == "memcpy" else ""
        direction_of_name[name_id] = _MEMCPY_DIRECTION.get(code, CopyDirection.OTHER)
        pageable_of_name[name_id] = "pageable" in name.lower()
    is_copy = kinds == Kind.MEMCPY
    return (
        np.where(is_copy, direction_of_name[name_ids], 0).astype(np.uint8),
        is_copy & pageable_of_name[name_ids],
    )


def _between_gpus(columns: dict[str, np.ndarray], extra: dict[int, dict[str, Any]]) -> None:
    """A copy whose recorded source and destination GPUs differ crosses the interconnect
    (NVLink, or PCIe through the host), whatever its name: CUPTI records peer copies with both
    devices, and Kineto names them ``Memcpy DtoD (Device -> Device)`` as often as ``Memcpy PtoP``.
    A device-to-device copy within one GPU (no such record, or the same device twice) stays in
    that GPU's memory: it is not an interconnect transfer."""
    direction, kinds = columns["copy_direction"], columns["kind"]
    for row, values in extra.items():
        source, destination = values.get("from_device"), values.get("to_device")
        if kinds[row] != Kind.MEMCPY or source is None or destination is None:
            continue
        if source != destination:
            direction[row] = CopyDirection.P2P
        elif direction[row] == CopyDirection.P2P:
            direction[row] = CopyDirection.D2D


_EXTRA_FIELDS = (
    ("input_dims", "input_dims"),
    ("input_type", "input_types"),
    ("concrete_inputs", "concrete_inputs"),
    ("collective_name", "collective_name"),
    ("in_msg_nelems", "in_msg_nelems"),
    ("out_msg_nelems", "out_msg_nelems"),
    ("group_size", "group_size"),
    ("dtype", "dtype"),
    ("pg_name", "process_group"),
    ("pg_ranks", "process_group_ranks"),
    ("call_stack", "call_stack"),
    ("from_device", "from_device"),
    ("to_device", "to_device"),
)


def _extra_args(args: list[Any]) -> dict[int, dict[str, Any]]:
    has_shapes = [x is not None for x in map(attrgetter("input_dims"), args)]
    has_comms = [x is not None for x in map(attrgetter("collective_name"), args)]
    has_stack = [x is not None for x in map(attrgetter("call_stack"), args)]
    has_peer = [x is not None for x in map(attrgetter("to_device"), args)]
    rows = np.flatnonzero(
        np.array(has_shapes, dtype=bool)
        | np.array(has_comms, dtype=bool)
        | np.array(has_stack, dtype=bool)
        | np.array(has_peer, dtype=bool)
    )
    return {row: _extras_of(args[row]) for row in rows.tolist()}


_EXTRA_VALUES = attrgetter(*(f for f, _ in _EXTRA_FIELDS))
_EXTRA_KEYS = tuple(key for _, key in _EXTRA_FIELDS)


def _extras_of(a: Any) -> dict[str, Any]:
    """The arguments kept per event (shapes, collective sizes, 2021 call stacks, a copy's source
    and destination GPUs), by their model names."""
    if (
        a.input_dims is None
        and a.collective_name is None
        and a.call_stack is None
        and a.to_device is None
        and a.from_device is None
    ):
        return {}
    values = _EXTRA_VALUES(a)
    return {k: v for k, v in zip(_EXTRA_KEYS, values, strict=True) if v is not None}


def _decode_args_list(text: bytes | memoryview) -> list[Any]:
    """A JSON array of args objects, typed; odd value types coerced as the lenient reader does."""
    try:
        return _ARGS_LIST_DECODER.decode(text)
    except msgspec.ValidationError:
        return [_coerce_args(a) for a in _LENIENT_ARGS_LIST_DECODER.decode(text)]


def _raw_string(raw: bytes) -> str:
    """A JSON string's content as the scanner found it: escapes are rare, decode them if any."""
    if b"\\" not in raw:
        return raw.decode()
    decoded: str = msgspec.json.decode(b'"' + raw + b'"')
    return decoded


def _link_by_flows(table: Events, flows: list[Any]) -> None:
    """Link device work without correlation ids through flow start/finish pairs (MTIA, old ROCm).

    Flow events are decoded only for the pieces of a document that need them.
    """
    flows = [
        e
        for e in flows
        if e.ph in ("s", "f") and isinstance(e.cat, str) and e.cat.lower() in _FLOW_CATEGORIES
    ]
    ts_ns = _to_ns([_num(e.ts) for e in flows]).tolist()
    starts: dict[Any, tuple[int, int, int]] = {}
    finishes: dict[Any, tuple[int, int, int]] = {}
    for e, t_ns in zip(flows, ts_ns, strict=True):
        key = (_int_id(e.pid), _int_id(e.tid), t_ns)
        (starts if e.ph == "s" else finishes)[e.id] = key
    if not starts or not finishes:
        return
    candidates = np.flatnonzero(
        table.of_kind(Kind.RUNTIME) | ((table.device >= 0) & (table.link < 0))
    )
    keys = zip(
        table.pid[candidates].tolist(),
        table.tid[candidates].tolist(),
        table.start_ns[candidates].tolist(),
        strict=True,
    )
    at = dict(zip(keys, candidates.tolist(), strict=True))
    host_rows: list[int] = []
    dev_rows: list[int] = []
    for flow_id, start_key in starts.items():
        finish_key = finishes.get(flow_id)
        if finish_key is None:
            continue
        h, d = at.get(start_key), at.get(finish_key)
        if (
            h is not None
            and d is not None
            and table.kind[h] == Kind.RUNTIME
            and table.device[d] >= 0
        ):
            host_rows.append(h)
            dev_rows.append(d)
    if host_rows:
        h_arr = np.array(host_rows, dtype=np.int64)
        join_launches(table, h_arr, h_arr, np.array(dev_rows, dtype=np.int64), h_arr)


def _devices(doc: Any, table: Events, *, mtia: bool) -> dict[int, DeviceInfo]:
    props = doc.deviceProperties if doc.deviceProperties is not None else doc.computeProperties
    props = [p for p in props if isinstance(p, dict)] if isinstance(props, list) else []
    used = sorted({int(d) for d in distinct(table.device) if d >= 0})
    rocm = doc.roctracer_version is not None or doc.hip_runtime_version is not None
    by_id = {_opt_int(p.get("id")): p for p in props}
    devices: dict[int, DeviceInfo] = {}
    for position, device_id in enumerate(used):
        prop = by_id.get(device_id)
        if prop is None and len(props) == len(used):
            prop = sorted(props, key=lambda p: _opt_int(p.get("id")) or 0)[position]
        devices[device_id] = _device_info(device_id, prop, rocm, mtia)
    return devices


def _device_info(device_id: int, prop: dict[str, Any] | None, rocm: bool, mtia: bool) -> DeviceInfo:
    if prop is None:
        return DeviceInfo(
            device_id, None, "mtia" if mtia else ("amd" if rocm else None), None, None, None
        )
    name = prop.get("name") or None
    major = prop.get("computeMajor", prop.get("major"))
    minor = prop.get("computeMinor", prop.get("minor"))
    is_amd = rocm or (isinstance(name, str) and name.upper().startswith("AMD"))
    return DeviceInfo(
        index=device_id,
        name=name if isinstance(name, str) else None,
        vendor="mtia" if mtia else ("amd" if is_amd else "nvidia"),
        num_sms=_opt_int(prop.get("numSms", prop.get("multiProcessorCount"))),
        total_memory_bytes=_opt_int(prop.get("totalGlobalMem")),
        compute_capability=None if major is None else f"{major}.{minor}",
    )


def _steps(table: Events, names: list[str]) -> list[Step]:
    """``ProfilerStep#N`` ranges on the host, whatever their category: ``user_annotation`` since
    2022, ``Operator`` (a CPU op) in 2021 traces. The device-side copies (``gpu_user_annotation``)
    are not steps: they are where a step's kernels ran, used per device by the step breakdown."""
    rows = np.flatnonzero(table.of_kind(Kind.ANNOTATION, Kind.CPU_OP))
    steps: list[Step] = []
    step_name_ids = {i for i, n in enumerate(names) if n.startswith("ProfilerStep#")}
    for row in rows:
        if int(table.name_id[row]) not in step_name_ids:
            continue
        name = names[int(table.name_id[row])]
        match = _STEP_NAME.match(name)
        if match is None:
            continue
        start = int(table.start_ns[row])
        steps.append(Step(name, int(match.group(1)), start, start + int(table.dur_ns[row])))
    return steps


def _span_ms(trace: Trace) -> float:
    ev = trace.events
    if len(ev) == 0:
        return 0.0
    return float(ev.end_ns.max() - ev.start_ns.min()) / 1e6
