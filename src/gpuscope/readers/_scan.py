"""The Kineto reader's text side: a file decompressed in pieces, its events array found, and its
whole events scanned into columns by the C scanner (``_kscan.c``), each stage on its own thread.

Contract: :func:`start` begins scanning a Kineto file and returns a :class:`Scan` (or None when
the file is not Kineto JSON or the scanner is not built); :meth:`Scan.results` yields the
scanner's output piece by piece, after which :attr:`Scan.state` holds the document's other keys
and whether it ended mid-write. Errors surface in ``results()``: :class:`NotScannableError` when the
scanner does not follow the document (the msgspec reader then reads it), an ``InputError`` for a
file that cannot be read.

Needs neither numpy nor the model, so the command line starts a scan before those import:
decompression and scanning run without the GIL, alongside the imports.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from types import TracebackType

from zlib_ng import zlib_ng

from gpuscope.errors import CorruptInputError, InputError
from gpuscope.readers._io import GZIP_MAGIC, ZLIB_ERROR, head_bytes, read_ahead

try:  # the C scanner (setup.py builds it where a compiler is found)
    from gpuscope.readers import _kscan
except ImportError:  # pragma: no cover - exercised by forcing the fallback in tests
    _kscan = None  # type: ignore[assignment]

#: Decompressed bytes per piece; the scanner's columns for a piece are about half as large.
PIECE_BYTES = 4 << 20
#: Compressed bytes per call to the inflater.
FEED_BYTES = 128 << 10
#: Pieces the scanner may run ahead of its reader when started early (bounds the memory).
RUN_AHEAD_PIECES = 16
#: Whether scans run on threads of their own. Off where processes already use every core (a
#: folder read in parallel): threads of one process scale worse than processes here.
threaded = True

ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[')
KINETO_KEYS = (
    b'"traceEvents"',
    b'"schemaVersion"',
    b'"deviceProperties"',
    b'"distributedInfo"',
    b'"computeProperties"',
)

#: What the scanner returns for a piece (see ``_kscan.c``).
Scanned = tuple[
    int, bool, int, int, dict[str, bytes], list[bytes], list[bytes], bytes, bytes, bytes
]


class NotScannableError(Exception):
    """The document's layout or values are not ones the scanner follows: read it with msgspec."""


def looks_like_kineto(head: bytes) -> bool:
    """Whether the first bytes of a document are a Chrome-trace JSON object with events.

    Kineto writes ``traceEvents`` after the device properties, which can take many kilobytes:
    a JSON object whose head names any Kineto top-level key counts too.
    """
    if head.lstrip()[:1] != b"{":
        return False
    return any(key in head for key in KINETO_KEYS)


def scanner_built() -> bool:
    return _kscan is not None


class TextState:
    """What surrounds the events array: the text before it and after it, and whether the file
    ended mid-write. Complete once the pieces are consumed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.header = b""
        self.tail = b""
        self.truncated = False

    def metadata_document(self) -> bytes:
        """The document's other keys: the text around the events, closed as a JSON object."""
        head = self.header.rstrip()
        head = head[:-1] if head.endswith(b",") else head
        tail = self.tail.strip()
        tail = tail[1:] if tail.startswith(b",") else tail
        tail = tail[:-1] if tail.endswith(b"}") else tail
        joiner = b"," if tail.strip() and not head.endswith(b"{") else b""
        return head + joiner + tail + b"}"


def decompressed_pieces(path: Path, state: TextState) -> Iterator[bytes]:
    """The file's bytes, gunzipped when gzip, in pieces of at most ``PIECE_BYTES``."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise InputError(path, f"cannot be read ({error.strerror})") from None
    if not raw.startswith(GZIP_MAGIC):
        for start in range(0, len(raw), PIECE_BYTES):
            yield raw[start : start + PIECE_BYTES]
        return
    # Compressed input goes in small slices: zlib's own ``max_length`` would copy the whole rest
    # of the file into ``unconsumed_tail`` at every piece.
    view = memoryview(raw)
    member = 0
    while member < len(raw):
        inflater = zlib_ng.decompressobj(16 + zlib_ng.MAX_WBITS)
        position = member
        while position < len(raw) and not inflater.eof:
            feed: bytes | memoryview = view[position : position + FEED_BYTES]
            position += len(feed)
            while feed:
                try:
                    piece = inflater.decompress(feed, PIECE_BYTES)
                except ZLIB_ERROR as error:
                    raise CorruptInputError(path, f"corrupt gzip data ({error})") from None
                feed = inflater.unconsumed_tail
                if piece:
                    yield piece
                if inflater.eof:
                    break
        if not inflater.eof:
            state.truncated = True
            return
        member = position - len(inflater.unused_data)  # another gzip member may follow
        if raw[member : member + 2] != GZIP_MAGIC:
            return


def events_start(pieces: Iterator[bytes], state: TextState) -> bytes:
    """Read up to the events array's ``[``; keep what came before as the document's header."""
    buffer = b""
    for piece in pieces:
        buffer += piece
        found = ARRAY_START.search(buffer)
        if found:
            state.header = buffer[: found.start()]
            return buffer[found.end() :]
        if len(buffer) > (64 << 20):
            break
    raise NotScannableError


def scanned_pieces(pieces: Iterator[bytes], state: TextState) -> Iterator[Scanned]:
    """The scanner's output for each piece of text, up to the end of the events array."""
    if _kscan is None:
        raise NotScannableError
    buffer = events_start(pieces, state)
    first, exhausted, stalled = True, False, False
    while True:
        while (len(buffer) < PIECE_BYTES or stalled) and not exhausted:
            more = next(pieces, None)
            exhausted = more is None
            buffer += more or b""
            stalled = False
        try:
            scanned = _kscan.scan(buffer, first, 0, -1)
        except ValueError:
            raise NotScannableError from None
        yield scanned
        consumed, done = scanned[0], scanned[1]
        first = first and scanned[2] == 0
        if done:
            state.tail = buffer[consumed:] + b"".join(pieces)
            return
        buffer = buffer[consumed:]
        if exhausted:  # the events array never closes: the file ends mid-write
            state.truncated = True
            return
        stalled = consumed == 0  # one event longer than the buffer: read on


class Scan:
    """A file being scanned on two threads (decompression, scanner), up to ``run_ahead`` pieces
    ahead of whoever reads :meth:`results`. Use as a context manager, or call :meth:`close`."""

    def __init__(self, path: Path, run_ahead: int = 2) -> None:
        self.path = path
        self.state = TextState(path)
        self._stack = ExitStack()
        pieces = decompressed_pieces(path, self.state)
        if threaded:
            pieces = self._stack.enter_context(read_ahead(pieces))
        self._results = scanned_pieces(pieces, self.state)
        if threaded:
            self._results = self._stack.enter_context(read_ahead(self._results, depth=run_ahead))

    def results(self) -> Iterator[Scanned]:
        return self._results

    def close(self) -> None:
        self._stack.close()

    def __enter__(self) -> Scan:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


@contextmanager
def unthreaded() -> Iterator[None]:
    """Scans started inside run on the caller's thread (see :data:`threaded`)."""
    global threaded  # noqa: PLW0603 - one switch for the process, like GPUSCOPE_WORKERS
    was, threaded = threaded, False
    try:
        yield
    finally:
        threaded = was


def start(path: Path) -> Scan | None:
    """Start scanning ``path`` now if it is a Kineto file the scanner can read, else None.

    The scan runs ahead of its reader by up to ``RUN_AHEAD_PIECES`` pieces, so that it can go on
    while the caller does other work (importing the analyses).
    """
    if _kscan is None or not path.is_file():
        return None
    try:
        head = head_bytes(path)
    except InputError:
        return None  # the normal read says what is wrong with it
    return Scan(path, run_ahead=RUN_AHEAD_PIECES) if looks_like_kineto(head) else None
