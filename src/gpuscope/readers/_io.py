"""Bytes in: open a path, undo gzip, and say plainly what is wrong with a file that cannot be read.

Contract: :func:`read_bytes` returns the decompressed content and whether it ended early (a gzip
stream cut off mid-write still yields what was written). It raises :class:`InputError` for a
missing path, an unreadable file, or a gzip stream corrupt before any content.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zlib_ng import zlib_ng

from gpuscope.errors import CorruptInputError, EmptyTraceError, InputError

if TYPE_CHECKING:
    from pathlib import Path

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"
# zlib_ng's stub declares ``error`` as an instance; at run time it is the exception class.
ZLIB_ERROR: type[Exception] = zlib_ng.error  # type: ignore[assignment]


class Content:
    """A file's content. A plain class: this module loads before a scan starts, and the
    dataclasses module takes 10 ms to import (see ``gpuscope.console``)."""

    __slots__ = ("compressed", "data", "truncated")

    def __init__(self, data: bytes, *, truncated: bool, compressed: bool) -> None:
        self.data = data
        self.truncated = truncated  # the compressed stream ended before its end-of-stream marker
        self.compressed = compressed


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
