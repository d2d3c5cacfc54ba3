"""Writing output files safely: atomically, and never over one of the command's inputs.

Contract: :func:`atomic_write` replaces ``path`` with ``data`` in one step (a temporary file in
the same folder, flushed to disk with ``fsync``, then renamed over the target): a process killed
mid-write, or a full disk, leaves the old file or the new one, never a truncated mix. It raises
:class:`~gpuscope.errors.InputError` when the target cannot be written, or when it is a file
this process read as input (compared by device and inode, so a hard link, a symlink or another
spelling of the path is caught too). Readers call :func:`note_input` for every file they open.

Light imports only: the readers load this module before a scan starts.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

from gpuscope.errors import InputError

#: (device, inode) of every file read as input by this process.
_inputs: set[tuple[int, int]] = set()


def note_input(status: os.stat_result) -> None:
    """Record a file read as input (its ``stat``), which no output may then overwrite."""
    _inputs.add((status.st_dev, status.st_ino))


def note_input_path(path: str | Path) -> None:
    """:func:`note_input` by path; a path that cannot be examined is not recorded."""
    with contextlib.suppress(OSError, ValueError):
        note_input(os.stat(path))


def is_input(path: str | Path) -> bool:
    """Whether ``path`` names (through any link) a file this process read as input."""
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return False
    return (status.st_dev, status.st_ino) in _inputs


def atomic_write(
    path: str | Path, data: bytes | Iterable[bytes], *, extra_inputs: tuple[Path, ...] = ()
) -> None:
    """Replace ``path`` with ``data`` atomically (see the module docstring). ``data`` may come in
    pieces (an annotated trace is written as it is read); whatever the pieces raise leaves the
    old file as it was."""
    target = Path(path)
    for extra in extra_inputs:
        note_input_path(extra)
    if is_input(target):
        raise InputError(target, "is one of the command's inputs: write the output elsewhere")
    if os.path.isdir(target):
        raise InputError(target, "is a directory: give a file name for the output")
    folder = target.parent
    temporary = folder / f".{target.name[:200]}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as error:
        raise InputError(target, f"cannot be written ({error.strerror or error})") from None
    try:
        with os.fdopen(fd, "wb") as out:
            for piece in [data] if isinstance(data, bytes) else data:
                out.write(piece)
            out.flush()
            os.fsync(out.fileno())
        _keep_mode(target, temporary)
        os.replace(temporary, target)
    except OSError as error:
        _remove(temporary)
        raise InputError(target, f"cannot be written ({error.strerror or error})") from None
    except BaseException:
        _remove(temporary)
        raise
    _sync_folder(folder)


def _keep_mode(target: Path, temporary: Path) -> None:
    """A file written over keeps its permissions (a new one gets the umask's, as open() gives)."""
    try:
        mode = os.stat(target).st_mode & 0o7777
    except OSError:
        return
    os.chmod(temporary, mode)


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable (POSIX); where a folder cannot be opened, skip it."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
