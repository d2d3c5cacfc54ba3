"""The pure-Python reader's text side: a Kineto document cut into pieces of whole events for
msgspec, and the whole-document decoder (with the repair of a document cut off mid-write).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from gpuscope.errors import CorruptInputError
from gpuscope.readers import _scan
from gpuscope.readers._scan import UTF8_BOM, TextState
from gpuscope.readers.kineto._shape import (
    ARRAY_START,
    DOCUMENT_DECODER,
    EVENTS_DECODER,
    FLOW_DECODER,
    FLOWS_DECODER,
    LENIENT_DECODER,
)

# --- reading in pieces ---------------------------------------------------------------------------

_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
#: The end of the events array: its last event's brace, then another key of the document, or
#: (once the whole file has been read) the document's end.
_ARRAY_END = re.compile(rb"\}\s*\]\s*,\s*\"")
_ARRAY_END_LAST = re.compile(rb"\}\s*\]\s*\}\s*$")


class NotStreamableError(Exception):
    """The document's layout is not one the piecewise reader follows; read it whole instead."""


JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')  # unrolled: fast on long strings


class EventText(TextState):
    """The text of a Chrome trace cut into pieces of whole events, for the msgspec reader.

    ``chunks()`` yields comma-separated whole events (no brackets); afterwards
    ``metadata_document()`` is the document without its events, and ``truncated`` says whether
    it ended mid-write.
    """

    def __init__(self, path: Path, room: Callable[[], int] | None = None) -> None:
        super().__init__(path)
        self.finished = False
        #: The memory left for the text of one event (the budget less the columns read so far).
        self.room = room

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
                raise NotStreamableError
        else:
            raise NotStreamableError
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
                self.tail = self._rest(buffer[end.start() + 1 :].lstrip()[1:], pieces)
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
            if self.room is not None and 2 * len(buffer) > self.room():
                raise _scan.too_big(self.path, "memory", len(buffer))
            more = next(pieces, None)  # one event larger than a piece: read on
            exhausted = more is None
            buffer += more or b""
        last = self._last_event(buffer)
        self.finished = True
        if last:
            yield last

    def _rest(self, start: bytes, pieces: Iterator[bytes]) -> bytes:
        """The document's text after its events, within the room left (it is decoded whole:
        :data:`_scan.TAIL_FACTOR` times its length); a longer one (a second events array, junk)
        is :class:`NotStreamableError`: the whole-document reader, within its own bound."""
        rest = [start]
        length = len(start)
        for piece in pieces:
            if self.room is not None and _scan.TAIL_FACTOR * length > self.room():
                raise NotStreamableError
            rest.append(piece)
            length += len(piece)
        if self.room is not None and _scan.TAIL_FACTOR * length > self.room():
            raise NotStreamableError
        return b"".join(rest)

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
                    EVENTS_DECODER.decode(b"[" + candidate + b"]")
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
                EVENTS_DECODER.decode(b"[" + last + b"]")
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


def flows_in(body: bytes) -> list[Any]:
    return list(FLOWS_DECODER.decode(body))


def flows_of(data: bytes) -> list[Any]:
    try:
        return FLOW_DECODER.decode(data).traceEvents or []
    except msgspec.DecodeError:  # a repaired, truncated document: no flows rather than none at all
        return []


# --- decoding ----------------------------------------------------------------------------------


def decode_document(path: Path, data: bytes, truncated_stream: bool) -> tuple[Any, bool]:
    if data.startswith(UTF8_BOM):  # written by some editors and Windows tools: not JSON
        data = data[len(UTF8_BOM) :]
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
        return DOCUMENT_DECODER.decode(data)
    except msgspec.ValidationError:
        return LENIENT_DECODER.decode(data)


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
