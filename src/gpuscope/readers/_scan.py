"""The Kineto reader's text side: a Kineto file scanned into columns by the C scanner
(``_kscan.c``) on a thread of its own, and the pieces of decompressed text the msgspec reader uses.

Contract: :func:`start` begins scanning a Kineto file and returns a :class:`Scan` (or None when
the file is not Kineto JSON or the scanner is not built); :meth:`Scan.result` waits for the
scanner's columns, after which :attr:`Scan.state` holds the document's other keys and whether it
ended mid-write. Errors surface in ``result()``: :class:`NotScannableError` when the scanner does
not follow the document (the msgspec reader then reads it), an ``InputError`` for a file that
cannot be read.

Needs neither numpy nor the model, so the command line starts a scan before those import. The
scanner inflates and scans the whole file in C without the GIL, so the imports run at full speed
beside it: driving decompression and the scanner from Python instead, piece by piece, made the
imports wait for the GIL (a third slower on two cores).
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager

from zlib_ng import zlib_ng

from gpuscope._native import current
from gpuscope.errors import CorruptInputError, InputError
from gpuscope.readers._io import (
    GZIP_MAGIC,
    ZLIB_ERROR,
    check_regular,
    head_bytes,
    inflate_limit,
    inflated_too_much,
    memory_budget,
    over_budget,
    require_only_padding,
    size_text,
)

#: The scanner source this reader follows (``KSCAN_VERSION`` in ``_kscan.c``). An extension
#: built from older source (a checkout updated without ``setup.py build_ext``) misses what the
#: newer source reads, so it is not used: the msgspec reader gives the whole result, slower.
SCANNER_VERSION = 10

try:  # the C scanner (setup.py builds it where a compiler is found)
    from gpuscope.readers import _kscan

    if not current(_kscan, SCANNER_VERSION, "Kineto scanner (readers/_kscan.c)"):
        raise ImportError("the C scanner was built from older source")
except ImportError:  # pragma: no cover - exercised by forcing the fallback in tests
    _kscan = None  # type: ignore[assignment]
else:  # it inflates with zlib-ng where the zlib_ng package's extension has it, else with zlib
    ZLIB_NG_INFLATES = _kscan.use_zlib_ng(zlib_ng.__file__)

#: Decompressed bytes per piece of text (the scanner's window, the msgspec reader's pieces).
#: Every piece in flight between the inflater thread and the scanner is memory touched anew,
#: page by page: scanning a 54 MB trace with 4 MB pieces faulted in 12,800 pages (60 MB peak),
#: with 1 MB pieces 7,100 (38 MB), and took 15% less CPU; smaller pieces save little more and
#: add hand-overs (benchmarks/README.md, issue 31).
PIECE_BYTES = 1 << 20
#: Compressed bytes per call to the inflater (the msgspec reader's pieces).
FEED_BYTES = 128 << 10
#: The columns a scan reads, against the memory budget: the model's table is built from them in
#: place, and the analyses then hold it about twice (a steady-state copy, sorted and derived
#: columns), with the interpreter's own ~150 MB beside. Measured: benchmarks/memory.py.
SCAN_SHARE = 0.4
BASELINE_BYTES = 150 << 20
#: The text after the events array (the document's other keys) is decoded whole: it counts this
#: many times its length against the columns' share (``TAIL_FACTOR`` in ``_kscan.c``); a longer
#: one goes to the whole-document reader, within that reader's bound.
TAIL_FACTOR = 8
#: Whether scans run on threads of their own. Off where processes already use every core (a
#: folder read in parallel).
threaded = True

KINETO_KEYS = (
    b'"traceEvents"',
    b'"schemaVersion"',
    b'"deviceProperties"',
    b'"distributedInfo"',
    b'"computeProperties"',
)

# No typing at run time: the console script's read-ahead loads this before typing (~3 ms).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import re
    from collections.abc import Iterator
    from pathlib import Path
    from typing import BinaryIO

    from gpuscope.readers._kscan import Scanned


class NotScannableError(Exception):
    """The document's layout or values are not ones the scanner follows: read it with msgspec."""


def looks_like_kineto(head: bytes) -> bool:
    """Whether the first bytes of a document are a Chrome-trace JSON object with events.

    Kineto writes ``traceEvents`` after the device properties, which can take many kilobytes:
    a JSON object whose head names any Kineto top-level key counts too.
    """
    head = head.removeprefix(UTF8_BOM).lstrip()
    if head[:1] != b"{":
        return False
    if any(key in head for key in KINETO_KEYS):
        return True
    import re  # noqa: PLC0415 - seldom needed, and the read-ahead starts before re loads

    return any(key in re.sub(_ESCAPE, _unescaped, head) for key in KINETO_KEYS)


#: The UTF-8 byte-order mark some editors and Windows tools write first: not part of the JSON.
UTF8_BOM = b"\xef\xbb\xbf"
#: A JSON escape of an ASCII character (``"trace\u0045vents"`` is the key ``traceEvents``).
_ESCAPE = rb"\\u00([0-7][0-9a-fA-F])"


def _unescaped(match: re.Match[bytes]) -> bytes:
    return bytes([int(match.group(1), 16)])


def scanner_built() -> bool:
    return _kscan is not None


class TextState:
    """What surrounds the events array: the text before it and after it, and whether the file
    ended mid-write. Complete once the pieces are consumed."""

    def __init__(self, path: str | Path) -> None:
        self.path = path
        self.header = b""
        self.tail = b""
        self.truncated = False

    def metadata_document(self) -> bytes:
        """The document's other keys: the text around the events, closed as a JSON object."""
        head = self.header.removeprefix(UTF8_BOM).rstrip()
        head = head[:-1] if head.endswith(b",") else head
        tail = self.tail.strip()
        tail = tail[1:] if tail.startswith(b",") else tail
        tail = tail[:-1] if tail.endswith(b"}") else tail
        joiner = b"," if tail.strip() and not head.endswith(b"{") else b""
        return head + joiner + tail + b"}"


def scan_limit(budget: int | None = None) -> int:
    """The most memory a scan's columns may take under ``budget`` (default: the process's
    memory budget; see :data:`SCAN_SHARE`)."""
    budget = memory_budget() if budget is None else budget
    return max(int((budget - BASELINE_BYTES) * SCAN_SHARE), 1 << 20)


def too_big(path: str | Path, kind: str, amount: int, budget: int | None = None) -> InputError:
    """The one line for a read stopped at a limit (the scanner's LimitError, or the same limit
    in the msgspec reader): ``kind`` "text" (a gzip bomb: ``amount`` is the limit) or "memory"
    (the budget: ``amount`` is what the columns took when the read stopped). ``budget``: the
    one the read began under (a scan on a thread outlives the command line's reset of it)."""
    if kind == "text":
        return inflated_too_much(path, amount)
    budget = memory_budget() if budget is None else budget
    # The figure that broke the budget is the columns' share of it, named with how it follows
    # from the budget: the bytes read when the scan stopped are far below the budget itself.
    share = (
        f"{SCAN_SHARE:.0%} of what the budget leaves beside the program's own"
        f" {size_text(BASELINE_BYTES)}"
        if budget > BASELINE_BYTES + (1 << 20) / SCAN_SHARE
        else f"the least a read gets: the budget is below the program's own"
        f" {size_text(BASELINE_BYTES)}"
    )
    limit = scan_limit(budget)
    # The scanner stops before its next block would pass the limit: what it holds then can be
    # less than the limit, and is said only when it is the larger figure.
    held = f"; {size_text(amount)} when the read stopped" if amount > limit else ""
    return over_budget(
        path,
        f"its events' columns would outgrow the {size_text(limit)} they may take ({share}){held}",
        budget,
    )


def decompressed_pieces(path: str | Path, state: TextState) -> Iterator[bytes]:
    """The file's bytes, gunzipped when gzip, in pieces of at most ``PIECE_BYTES``; the file is
    read a slice at a time, never whole."""
    try:
        file = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except OSError as error:
        raise InputError(path, f"cannot be read ({error.strerror})") from None
    with file:
        yield from _pieces_of(path, file, state)


def _pieces_of(path: str | Path, file: BinaryIO, state: TextState) -> Iterator[bytes]:
    try:
        first = file.read(PIECE_BYTES)
        if not first.startswith(GZIP_MAGIC):
            while first:
                yield first
                first = file.read(PIECE_BYTES)
            return
        limit = inflate_limit(os.fstat(file.fileno()).st_size)
        inflated = 0
        # Compressed input goes in small slices: zlib's own ``max_length`` would copy the whole
        # rest of the input into ``unconsumed_tail`` at every piece.
        pending = first
        inflater = zlib_ng.decompressobj(16 + zlib_ng.MAX_WBITS)
        while True:
            feed = pending or file.read(FEED_BYTES)
            pending = b""
            if not feed:
                state.truncated = True  # the stream stops before its end-of-stream marker
                return
            while feed:
                try:
                    piece = inflater.decompress(feed, PIECE_BYTES)
                except ZLIB_ERROR as error:
                    raise CorruptInputError(path, f"corrupt gzip data ({error})") from None
                feed = inflater.unconsumed_tail
                inflated += len(piece)
                if inflated > limit:
                    raise inflated_too_much(path, limit)
                if piece:
                    yield piece
                if inflater.eof:
                    break
            if inflater.eof:  # another gzip member may follow
                rest = inflater.unused_data
                while len(rest) < 2:
                    more = file.read(FEED_BYTES)
                    if not more:
                        break
                    rest += more
                if not rest.startswith(GZIP_MAGIC):
                    require_only_padding(path, rest, file)
                    return
                pending = rest
                inflater = zlib_ng.decompressobj(16 + zlib_ng.MAX_WBITS)
    except OSError as error:
        raise InputError(path, f"cannot be read ({error.strerror})") from None


class Scan:
    """A Kineto file being scanned, on a thread of its own (see :data:`threaded`). The thread
    cannot be stopped: a scan nobody reads runs to its end and is dropped."""

    def __init__(self, path: str | Path) -> None:
        self.path = path
        self.state = TextState(path)
        self._outcome: Scanned | BaseException | None = None
        self._thread: threading.Thread | None = None
        # Set when the reader waits for the result: the scanner then inflates on a second
        # thread. Not before: a second busy thread would slow down the imports meanwhile.
        self._hurry = bytearray(1)
        # Now: ``--max-memory`` is read before a scan starts; kept, as the command line resets
        # the process's budget while this scan may still run.
        self._budget = memory_budget()
        self._limit = scan_limit(self._budget)
        if threaded:
            self._thread = threading.Thread(target=self._run, name="gpuscope-scan", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._outcome = self._scan()
        except BaseException as error:
            self._outcome = error

    def _scan(self) -> Scanned:
        if _kscan is None:
            raise NotScannableError
        try:
            file = open(self.path, "rb")  # noqa: SIM115 - closed by the with below
        except OSError as error:
            raise InputError(self.path, f"cannot be read ({error.strerror})") from None
        with file:
            try:
                size = os.fstat(file.fileno()).st_size
                # The scanner reads the file from its descriptor a slice at a time, never whole.
                header, scanned, tail, truncated = _kscan.scan_file(
                    file.fileno(), PIECE_BYTES, self._hurry, inflate_limit(size), self._limit
                )
            except _kscan.GzipError as error:
                raise CorruptInputError(self.path, f"corrupt gzip data ({error})") from None
            except _kscan.LimitError as error:
                kind, amount = error.args
                limit = inflate_limit(size) if kind == "text" else amount
                raise too_big(self.path, kind, limit, self._budget) from None
            except OSError as error:
                raise InputError(self.path, f"cannot be read ({error.strerror})") from None
            except ValueError:
                raise NotScannableError from None
        self.state.header, self.state.tail, self.state.truncated = header, tail, truncated
        return scanned

    def result(self) -> Scanned:
        """The file's columns, once scanned; raises what the scan raised. Call it once: the
        columns are handed over, not kept."""
        if self._thread is None:
            return self._scan()
        self._hurry[0] = 1
        self._thread.join()
        outcome, self._outcome = self._outcome, None
        if isinstance(outcome, BaseException):
            raise outcome
        assert outcome is not None
        return outcome


@contextmanager
def unthreaded() -> Iterator[None]:
    """Scans started inside run on the caller's thread (see :data:`threaded`)."""
    global threaded  # noqa: PLW0603 - one switch for the process, like GPUSCOPE_WORKERS
    was, threaded = threaded, False
    try:
        yield
    finally:
        threaded = was


def start(path: str | Path) -> Scan | None:
    """Start scanning ``path`` now if it is a Kineto file the scanner can read, else None.

    The scan goes on while the caller does other work (importing the analyses).
    """
    if _kscan is None:
        return None
    try:
        check_regular(path)  # never a FIFO: opening one waits for a writer
    except InputError:
        return None  # the normal read says what is wrong with it
    try:
        head = head_bytes(path)
    except InputError:
        return None  # the normal read says what is wrong with it
    return Scan(path) if looks_like_kineto(head) else None
