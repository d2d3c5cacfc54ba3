"""Bytes in: open a path, undo gzip, and say plainly what is wrong with a file that cannot be read.

Contract: :func:`read_bytes` returns the decompressed content and whether it ended early (a gzip
stream cut off mid-write still yields what was written). It raises :class:`InputError` for a
missing path, an unreadable file, or a gzip stream corrupt before any content.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

from zlib_ng import zlib_ng

from gpuscope.errors import CorruptInputError, EmptyTraceError, InputError

GZIP_MAGIC = b"\x1f\x8b"
# zlib_ng's stub declares ``error`` as an instance; at run time it is the exception class.
ZLIB_ERROR = cast(type[Exception], zlib_ng.error)


@dataclass(frozen=True)
class Content:
    data: bytes
    truncated: bool  # the compressed stream ended before its end-of-stream marker
    compressed: bool


def read_bytes(path: Path) -> Content:
    """Read ``path`` whole, decompressing gzip whatever the file is called."""
    raw = _read_raw(path, None)
    if not raw.startswith(GZIP_MAGIC):
        return Content(raw, truncated=False, compressed=False)
    return _gunzip(path, raw)


def _read_raw(path: Path, size: int | None) -> bytes:
    """The file's bytes (its first ``size`` bytes), or one line saying why they cannot be had."""
    try:
        with path.open("rb") as file:
            raw = file.read() if size is None else file.read(size)
    except FileNotFoundError:
        raise InputError(path, "no such file or directory") from None
    except IsADirectoryError:
        raise InputError(path, "is a directory") from None
    except OSError as error:
        raise InputError(path, f"cannot be read ({error.strerror})") from None
    if not raw:
        raise EmptyTraceError(path, "the file is empty")
    return raw


def _gunzip(path: Path, raw: bytes) -> Content:
    # wbits 16+MAX_WBITS: gzip header and trailer; decompressobj keeps what a cut-off stream gave.
    inflater = zlib_ng.decompressobj(16 + zlib_ng.MAX_WBITS)
    try:
        data = inflater.decompress(raw)
    except ZLIB_ERROR as error:
        raise CorruptInputError(path, f"corrupt gzip data ({error})") from None
    truncated = not inflater.eof
    # A file of concatenated gzip members (pigz, re-gzipped chunks) continues in unused_data.
    while inflater.eof and inflater.unused_data.startswith(GZIP_MAGIC):
        rest = inflater.unused_data
        inflater = zlib_ng.decompressobj(16 + zlib_ng.MAX_WBITS)
        try:
            data += inflater.decompress(rest)
        except ZLIB_ERROR as error:
            raise CorruptInputError(path, f"corrupt gzip data ({error})") from None
        truncated = not inflater.eof
    if not data:
        raise CorruptInputError(path, "gzip stream holds no data (cut off or corrupt)")
    return Content(data, truncated=truncated, compressed=True)


def head_bytes(path: Path, size: int = 65536) -> bytes:
    """The first bytes of a file, decompressed when it is gzip, for sniffing its format."""
    raw = _read_raw(path, size)
    if not raw.startswith(GZIP_MAGIC):
        return raw
    try:
        head: bytes = zlib_ng.decompressobj(16 + zlib_ng.MAX_WBITS).decompress(raw, size)
    except ZLIB_ERROR as error:
        raise CorruptInputError(path, f"corrupt gzip data ({error})") from None
    if not head:
        raise CorruptInputError(path, "gzip stream holds no data (cut off or corrupt)")
    return head


_END = object()
T = TypeVar("T")


@contextmanager
def read_ahead(pieces: Iterator[T], depth: int = 2) -> Iterator[Iterator[T]]:
    """Produce ``pieces`` in a thread, up to ``depth`` ahead of the consumer.

    For producers that spend their time outside the GIL (decompression, the C scanner): they
    then overlap whatever the consumer does with the previous piece. Errors raised while
    producing are raised to the consumer; leaving the ``with`` block early stops the producer.
    """
    ready: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def offer(item: object) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for piece in pieces:
                if not offer(piece):
                    return
        except BaseException as error:  # handed to the consumer, raised there
            offer(error)
            return
        offer(_END)

    def consume() -> Iterator[T]:
        while True:
            item = ready.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield cast(T, item)

    producer = threading.Thread(target=produce, name="gpuscope-read-ahead", daemon=True)
    producer.start()
    try:
        yield consume()
    finally:
        stop.set()
        producer.join()
