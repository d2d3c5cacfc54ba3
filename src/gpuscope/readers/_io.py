"""Bytes in: open a path, undo gzip, and say plainly what is wrong with a file that cannot be read.

Contract: :func:`read_bytes` returns the decompressed content and whether it ended early (a gzip
stream cut off mid-write still yields what was written). It raises :class:`InputError` for a
missing path, an unreadable file, or a gzip stream corrupt before any content.
"""

from __future__ import annotations

import os
import stat
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


def check_regular(path: Path) -> os.stat_result:
    """The file's status, or one line saying why it is not a file gpuscope can read.

    Only regular files are read: opening a FIFO blocks until a writer comes, and a device or a
    socket never ends. A path the system refuses (a name too long, a folder without search
    permission, a loop of links) is one line too, never a traceback.
    """
    try:
        status = path.stat()
    except FileNotFoundError:
        raise InputError(path, "no such file or directory") from None
    except OSError as error:
        raise InputError(path, f"cannot be read ({error.strerror or error})") from None
    if stat.S_ISDIR(status.st_mode):
        raise InputError(path, "is a directory")
    if not stat.S_ISREG(status.st_mode):
        raise InputError(path, f"is not a regular file (a {_file_type(status.st_mode)})")
    return status


def _file_type(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "named pipe"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return name
    return "special file"


def is_folder(path: Path) -> bool:
    """``path.is_dir()``, where a path the system refuses (too long, no permission) is not one."""
    try:
        return path.is_dir()
    except OSError:
        return False


def _read_raw(path: Path, size: int | None) -> bytes:
    """The file's bytes (its first ``size`` bytes), or one line saying why they cannot be had."""
    check_regular(path)
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
