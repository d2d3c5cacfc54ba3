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

Parts: ``_shape`` (the msgspec structs and category tables), ``_pieces`` (the document's text cut
into pieces of whole events, and the whole-document decoder), ``_columns`` (events to the model's
table, devices and steps), ``_values`` (values to columns, and what is skipped and why).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import msgspec

from gpuscope.errors import CorruptInputError, EmptyTraceError, InputError, UnknownFormatError
from gpuscope.model import Trace
from gpuscope.readers import _scan
from gpuscope.readers._io import memory_budget, read_bytes
from gpuscope.readers._scan import NotScannableError, Scan, TextState, looks_like_kineto
from gpuscope.readers.kineto._columns import Columns, memory_in, memory_of
from gpuscope.readers.kineto._pieces import (
    JSON_STRING,
    EventText,
    NotStreamableError,
    decode_document,
    flows_in,
    flows_of,
)
from gpuscope.readers.kineto._shape import (
    EVENTS_DECODER,
    LENIENT_DECODER,
    LENIENT_EVENTS_DECODER,
    META_DECODER,
    LenientDocument,
)
from gpuscope.readers.kineto._values import (
    MAX_NAME_CHARS,
)

#: A document decoded whole takes up to this many times its text in Python objects (measured
#: ~6x on generated traces): the most text read whole is the memory budget over it.
WHOLE_DOCUMENT_FACTOR = 8

__all__ = [
    "MAX_NAME_CHARS",
    "EventStream",
    "NotStreamableError",
    "looks_like_kineto",
    "read",
    "read_file",
]


def read_file(path: Path, scan: Scan | None = None) -> Trace:
    """Read a Kineto file holding little more than its columns in memory.

    The C scanner reads it where it is built (``scan``, when given, is the file's scan already
    started; see ``_scan``). Otherwise, or when the document's layout or values are unusual,
    msgspec decodes it in pieces of a few megabytes (a piece with values of odd types decoded
    leniently, the others typed) or, failing that (a layout the pieces do not follow), whole,
    within the memory budget (``_io.memory_budget``).
    """
    with _gc_paused():
        try:
            if scan is None and _scan.scanner_built():
                scan = Scan(path)
            if scan is not None:
                try:
                    return _read_scanned(path, scan)
                except NotScannableError:
                    pass  # the msgspec reader, still in pieces
            return _read_streamed(path)
        except (NotStreamableError, msgspec.DecodeError, RecursionError):
            pass  # the whole document decoded at once says what is wrong with it, if anything
    # Decoded whole, a document takes several times its text in Python objects.
    content = read_bytes(path, limit=memory_budget() // WHOLE_DOCUMENT_FACTOR)
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
    document, lost_tail = decode_document(path, data, truncated_stream)
    events = document.traceEvents
    if events is None:
        raise UnknownFormatError(path, "JSON without a 'traceEvents' list: not a Chrome trace")
    if not events:
        raise EmptyTraceError(path, "the trace holds no events")
    columns = Columns(lenient=isinstance(document, LenientDocument))
    columns.add(events, lambda: flows_of(data))
    columns.add_memory(memory_of(data))
    return columns.finish(path, document, lost_tail=lost_tail)


def _read_streamed(path: Path) -> Trace:
    limit = _scan.scan_limit()
    columns = Columns(lenient=False)
    stream = EventText(path, lambda: limit - columns.nbytes)
    for chunk in stream.chunks():
        body = b"[" + chunk + b"]"
        try:
            decoded, lenient = EVENTS_DECODER.decode(body), False
        except msgspec.ValidationError:  # odd values here: this piece only is read leniently
            decoded, lenient = LENIENT_EVENTS_DECODER.decode(body), True
        columns.add(decoded, partial(flows_in, body), lenient=lenient)
        columns.add_memory(memory_in(body))
        del decoded
        if columns.nbytes > limit:
            raise _scan.too_big(path, "memory", columns.nbytes)
    if not stream.finished:
        raise NotStreamableError
    return _finish(path, columns, stream, NotStreamableError)


def _read_scanned(path: Path, scan: Scan) -> Trace:
    """The columns the C scanner read, piece by piece, into the model (see ``_scan``)."""
    columns = Columns(lenient=False)
    try:
        columns.add_scanned(list(scan.result()))
    except UnicodeDecodeError:
        raise NotScannableError from None
    except InputError as error:
        # The read-ahead scans the file as the command line spells it (before pathlib loads):
        # the error names it as this read does.
        raise type(error)(path, error.reason) from None
    return _finish(path, columns, scan.state, NotScannableError)


def _finish(path: Path, columns: Columns, state: TextState, declined: type[Exception]) -> Trace:
    """The end both piece-by-piece paths share: a file cut before its first whole event is
    corrupt; the metadata around the events is decoded; events that were not the top-level
    ``traceEvents`` list raise ``declined``, and the caller reads the file another way."""
    if state.truncated and columns.events == 0:
        raise CorruptInputError(path, "the file ends mid-write before its first whole event")
    meta = _decode_meta(state.metadata_document())
    if not _top_level_events(state.header, meta):
        raise declined
    return columns.finish(path, meta, lost_tail=state.truncated)


class EventStream:
    """The events of a Kineto (Chrome-trace) file a piece at a time, as written, never the whole
    document: for a writer that copies them (``gpuscope annotate``).

    :meth:`pieces` yields comma-separated whole events (no brackets) once :attr:`header`, the
    document's text before its events array, has been read; then :meth:`tail` is the text after
    the array. Either raises :class:`NotStreamableError` when the document's layout is not one the
    pieces follow (no events array, an events array nested in another key, a second
    ``traceEvents``, a document that ends inside its events): read it whole instead.
    """

    def __init__(self, path: Path) -> None:
        limit = _scan.scan_limit()  # one event, or the text after them, as the readers bound it
        self._text = EventText(path, lambda: limit)

    @property
    def header(self) -> bytes:
        return self._text.header

    def pieces(self) -> Iterator[bytes]:
        return self._text.chunks()

    def tail(self) -> bytes:
        text = self._text
        if not text.finished:
            raise NotStreamableError
        try:
            meta = _decode_meta(text.metadata_document())
        except msgspec.DecodeError:
            raise NotStreamableError from None
        if not _top_level_events(text.header, meta):
            raise NotStreamableError
        return text.tail


def _decode_meta(text: bytes) -> Any:
    """The document's other keys; leniently where a value has an odd type (``"deviceProperties":
    1``), as the whole-document reader takes them, rather than reading the whole file again."""
    try:
        return META_DECODER.decode(text)
    except msgspec.ValidationError:
        return LENIENT_DECODER.decode(text)


def _top_level_events(header: bytes, meta: Any) -> bool:
    """Whether the events array found first is the document's own ``traceEvents``: the key at
    the top level (one bracket open before it, strings aside), and no other ``traceEvents`` key
    after it (a JSON parser keeps the last of duplicate keys). A ``traceEvents`` nested in a
    metadata object before the real one, or a second one, goes to the whole-document reader."""
    if meta.traceEvents is not None:
        return False
    if b"[" not in header and header.count(b"{") == 1:
        return True  # the usual header: device properties come after the events, or none
    bare = JSON_STRING.sub(b"", header)
    depth = bare.count(b"{") + bare.count(b"[") - bare.count(b"}") - bare.count(b"]")
    return depth == 1
