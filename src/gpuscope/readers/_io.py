"""Bytes in: open a path, undo gzip, and say plainly what is wrong with a file that cannot be read.

Contract: :func:`read_bytes` returns the decompressed content and whether it ended early (a gzip
stream cut off mid-write still yields what was written). It raises :class:`InputError` for a
missing path, an unreadable file, or a gzip stream corrupt before any content.

Limits: what one input may take. :func:`memory_budget` is the memory a read and its analysis may
use (``--max-memory``, else ``GPUSCOPE_MAX_MEMORY``, else 80% of the memory available): readers
that keep more refuse the input with one line rather than exhaust the machine.
:func:`inflate_limit` is the most text a gzip file may inflate to (``GPUSCOPE_MAX_INFLATE``, else
200 times the file's size and at least 256 MiB): deflate packs at most ~1,000 to 1, profiler
JSON 5-30 to 1, so more is a decompression bomb or a corrupt file.
"""

from __future__ import annotations

import os
import stat

from zlib_ng import zlib_ng

from gpuscope.errors import CorruptInputError, EmptyTraceError, InputError

# No typing at run time: the console script's read-ahead loads this before typing (~3 ms).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import BinaryIO

GZIP_MAGIC = b"\x1f\x8b"
#: Inflated text per compressed byte beyond which a gzip file is refused, and the least limit.
INFLATE_RATIO = 200
INFLATE_FLOOR = 256 << 20
#: The share of the available memory a read and its analysis may take by default.
BUDGET_SHARE = 0.8
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


_budget: int | None = None


def parse_size(text: str) -> int:
    """``512M``, ``2G``, ``1.5GiB``, ``4096`` (bytes) as bytes; ValueError otherwise."""
    import re  # noqa: PLC0415 - the read-ahead reads --max-memory before re loads

    match = re.fullmatch(_SIZE, text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a size such as 512M or 2G")
    size = float(match.group(1)) * 1024 ** " KMGT".index(match.group(2).upper() or " ")
    if not 0 < size < 2**62:
        raise ValueError(f"{text!r} is not a size above 0")
    return int(size)


_SIZE = r"([0-9]+(?:\.[0-9]*)?)\s*([kmgtKMGT]?)(?:i?[bB])?"


def set_memory_budget(size: int | None) -> None:
    """Set the memory budget for this process (``--max-memory``); None: the default again."""
    global _budget  # noqa: PLW0603 - one setting for the process, like GPUSCOPE_WORKERS
    _budget = size


def memory_budget() -> int:
    """The memory, in bytes, that reading and analysing one input may take."""
    if _budget is not None:
        return _budget
    given = os.environ.get("GPUSCOPE_MAX_MEMORY")
    if given:
        try:
            return parse_size(given)
        except ValueError:
            pass  # the command line validates it (``--max-memory``); here: the default
    return int(_available_memory() * BUDGET_SHARE)


def _available_memory() -> int:
    """Memory available to a new allocation: MemAvailable (Linux), else the physical memory."""
    try:
        with open("/proc/meminfo", "rb") as meminfo:
            for line in meminfo:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError, AttributeError):
        return 8 << 30


def inflate_limit(compressed_bytes: int) -> int:
    """The most text a gzip file of ``compressed_bytes`` may inflate to (see the module doc)."""
    given = os.environ.get("GPUSCOPE_MAX_INFLATE")
    if given:
        try:
            return parse_size(given)
        except ValueError:
            pass
    return max(INFLATE_FLOOR, INFLATE_RATIO * compressed_bytes)


def size_text(size: float) -> str:
    """Bytes for people: ``1.5 GB``, ``300 MB``, ``12 kB`` (powers of 1024, as --max-memory)."""
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{int(size)} bytes"


def inflated_too_much(path: str | Path, limit: int) -> InputError:
    """The one line for a gzip file that inflates past ``limit``."""
    return CorruptInputError(
        path,
        f"its gzip data inflates to more than {size_text(limit)}, the limit for a file of this "
        f"size (a decompression bomb or a corrupt file; GPUSCOPE_MAX_INFLATE sets the limit)",
    )


def over_budget(path: str | Path, needed: str, budget: int | None = None) -> InputError:
    """The one line for an input that would take more memory than the budget (``budget``: the
    one the read began under, when it runs on a thread while the command line is still being
    read; else the process's now)."""
    budget = memory_budget() if budget is None else budget
    return InputError(
        path,
        f"too big for the memory budget of {size_text(budget)}: {needed} (--max-memory "
        f"or GPUSCOPE_MAX_MEMORY sets the budget; the default is 80% of the available memory)",
    )


def read_bytes(path: Path, *, limit: int | None = None) -> Content:
    """Read ``path`` whole, decompressing gzip whatever the file is called.

    ``limit``: the most bytes the content may take (the file, or its inflated text), else
    :func:`over_budget`; gzip text is bounded by :func:`inflate_limit` too.
    """
    if limit is not None:
        size = check_regular(path).st_size
        if size > limit:
            raise over_budget(path, f"read whole, it would take {size_text(size)} and more")
    raw = _read_raw(path, None)
    if not raw.startswith(GZIP_MAGIC):
        return Content(raw, truncated=False, compressed=False)
    return _gunzip(path, raw, limit)


def check_regular(path: str | Path) -> os.stat_result:
    """The file's status, or one line saying why it is not a file gpuscope can read.

    Only regular files are read: opening a FIFO blocks until a writer comes, and a device or a
    socket never ends. A path the system refuses (a name too long, a folder without search
    permission, a loop of links) is one line too, never a traceback.
    """
    try:
        status = os.stat(path)
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


def _read_raw(path: str | Path, size: int | None) -> bytes:
    """The file's bytes (its first ``size`` bytes), or one line saying why they cannot be had."""
    check_regular(path)
    try:
        with open(path, "rb") as file:
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


def _gunzip(path: Path, raw: bytes, budget: int | None = None) -> Content:
    # wbits 16+MAX_WBITS: gzip header and trailer; decompressobj keeps what a cut-off stream gave.
    bomb = inflate_limit(len(raw))
    limit = bomb if budget is None else min(bomb, budget)
    inflater = zlib_ng.decompressobj(16 + zlib_ng.MAX_WBITS)
    try:
        data = inflater.decompress(raw, limit + 1)
    except ZLIB_ERROR as error:
        raise CorruptInputError(path, f"corrupt gzip data ({error})") from None
    truncated = not inflater.eof
    # A file of concatenated gzip members (pigz, bgzip's 64 kB blocks) continues after the first
    # member's end. Members are joined once at the end and the input is read through a view: both
    # ``data += ...`` and ``unused_data`` copy, which made many members quadratic.
    pieces = [data]
    size = len(data)
    view = memoryview(raw)
    offset = len(raw) - len(inflater.unused_data)
    while size <= limit and inflater.eof and view[offset : offset + 2] == GZIP_MAGIC:
        inflater = zlib_ng.decompressobj(16 + zlib_ng.MAX_WBITS)
        try:
            piece = inflater.decompress(view[offset:], limit + 1 - size)
        except ZLIB_ERROR as error:
            raise CorruptInputError(path, f"corrupt gzip data ({error})") from None
        pieces.append(piece)
        size += len(piece)
        offset = len(raw) - len(inflater.unused_data) - len(inflater.unconsumed_tail)
        truncated = not inflater.eof
    if size <= limit and inflater.eof:
        require_only_padding(path, view[offset:])
    data = pieces[0] if len(pieces) == 1 else b"".join(pieces)
    if len(data) > limit:
        if limit == bomb:
            raise inflated_too_much(path, bomb)
        raise over_budget(path, f"read whole, its text would take more than {size_text(limit)}")
    if not data:
        raise CorruptInputError(path, "gzip stream holds no data (cut off or corrupt)")
    return Content(data, truncated=truncated, compressed=True)


#: What a file holding data after its last gzip member is (``_kscan.c`` says the same).
JUNK_AFTER_GZIP = "corrupt gzip data (data after the last gzip member that is not gzip)"


def require_only_padding(
    path: str | Path, rest: bytes | memoryview, file: BinaryIO | None = None
) -> None:
    """Zero bytes may follow a file's last gzip member (padding); anything else is junk appended
    to it, refused in one line rather than dropped unsaid. ``file``: the rest still to read."""
    while True:
        if bytes(rest).strip(b"\0"):
            raise CorruptInputError(path, JUNK_AFTER_GZIP)
        rest = file.read(1 << 20) if file is not None else b""
        if not rest:
            return


def head_bytes(path: str | Path, size: int = 65536) -> bytes:
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
