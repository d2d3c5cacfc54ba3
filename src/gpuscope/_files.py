"""Writing output files safely: the one helper every command writes its files through.

Contract of :func:`write_output` (``--json``, ``-o``, ``--out`` of every command, and the MCP
``render_report`` tool), by what the path names:

* **a regular file, or nothing yet**: replaced atomically. The data goes to an unnamed file in the
  same folder (Linux ``O_TMPFILE``; elsewhere a hidden ``.NAME.PID.HEX.tmp``), flushed with
  ``fsync``, then put in place with one rename: a process killed mid-write (even by ``kill -9``),
  or a full disk, leaves the old file or the new one, never a truncated mix. A named temporary is
  removed on error, on SIGINT, SIGTERM and SIGHUP; one left by a process killed with ``kill -9``
  is removed by the next write to the same path. A file written over keeps its permissions.
* **a character device or a FIFO** (``/dev/null``, ``/dev/stdout``, ``>(gzip > out)``): written
  through, opened for writing and never renamed over. A FIFO nobody reads is refused in one line
  rather than waited on.
* **a symbolic link**: followed; the file it points to is written as above (the link stays).
* **a folder, a socket or a block device**: refused in one line.
* **one of the command's inputs** (compared by device and inode, so a hard link, a symlink or
  another spelling of the path is caught too): refused in one line. Readers call
  :func:`note_input` for every file they open.

Every refusal is an :class:`~gpuscope.errors.InputError` (one line, exit 2).

Light imports only: the readers load this module before a scan starts.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from gpuscope.errors import InputError

#: (device, inode) of every file the running command read -> its change time and what it was
#: read as ("input", or "history" for the run history). A command starts with none
#: (:func:`forget_inputs`); a file whose change time moved since is another file on a reused
#: inode (a long-lived process: a test run, an embedding program).
_inputs: dict[tuple[int, int], tuple[int, str]] = {}

#: The signals that, during a write, remove the named temporary before the process ends (by
#: name: ``signal`` imports on the first write, not with every read).
_CLEANUP_SIGNALS = ("SIGTERM", "SIGHUP")


def note_input(status: os.stat_result, role: str = "input") -> None:
    """Record a file read as input (its ``stat``), which no output may then overwrite."""
    key = (status.st_dev, status.st_ino)
    known = _inputs.get(key)
    if known is None or known[0] != status.st_ctime_ns:
        _inputs[key] = (status.st_ctime_ns, role)


def note_input_path(path: str | Path, role: str = "input") -> None:
    """:func:`note_input` by path; a path that cannot be examined is not recorded."""
    with contextlib.suppress(OSError, ValueError):
        note_input(os.stat(path), role)


def input_role(path: str | Path) -> str | None:
    """What the running command read ``path`` (through any link) as; None if it did not."""
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return None
    known = _inputs.get((status.st_dev, status.st_ino))
    return known[1] if known is not None and known[0] == status.st_ctime_ns else None


def is_input(path: str | Path) -> bool:
    """Whether ``path`` names (through any link) a file the running command read."""
    return input_role(path) is not None


def forget_inputs() -> None:
    """Start a command: files an earlier command of the same process read (a test's, an MCP
    session's earlier tool call) are not this one's inputs, and their inodes may be reused."""
    _inputs.clear()


def write_output(
    path: str | Path, data: bytes | Iterable[bytes], *, extra_inputs: tuple[Path, ...] = ()
) -> None:
    """Write ``data`` (bytes, or pieces of them: an annotated trace is written as it is read) to
    ``path`` as the module docstring says; whatever the pieces raise leaves the old file whole."""
    target = Path(path)
    for extra in extra_inputs:
        note_input_path(extra)
    if is_input(target):
        raise InputError(target, "is one of the command's inputs: write the output elsewhere")
    try:
        status: os.stat_result | None = os.stat(target)  # through a symbolic link
    except FileNotFoundError:
        status = None
        target = Path(os.path.realpath(target))  # a dangling link: make the file it names
    except (OSError, ValueError) as error:
        raise InputError(target, f"cannot be written ({_why(error)})") from None
    if status is None or stat.S_ISREG(status.st_mode):
        _replace(Path(os.path.realpath(target)), data, status)
    elif stat.S_ISCHR(status.st_mode) or stat.S_ISFIFO(status.st_mode):
        _write_through(target, data, fifo=stat.S_ISFIFO(status.st_mode))
    else:
        raise InputError(target, f"is {_kind(status.st_mode)}: give a file name for the output")


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a regular file"


def _why(error: BaseException) -> str:
    return (error.strerror if isinstance(error, OSError) else None) or str(error)


def _write_through(target: Path, data: bytes | Iterable[bytes], *, fifo: bool) -> None:
    """Write into a device or a FIFO as it is: nothing is created, renamed or removed."""
    flags = os.O_WRONLY | (os.O_NONBLOCK if fifo else 0)
    try:
        fd = os.open(target, flags)
    except OSError as error:
        if fifo and error.errno == 6:  # ENXIO: no process has the FIFO open for reading
            raise InputError(target, "is a FIFO that nobody reads: not waited on") from None
        raise InputError(target, f"cannot be written ({_why(error)})") from None
    if fifo:
        os.set_blocking(fd, True)  # a reader is there: write at its pace
    try:
        with os.fdopen(fd, "wb") as out:
            for piece in [data] if isinstance(data, bytes) else data:
                out.write(piece)
    except BrokenPipeError:
        raise InputError(target, "its reader went away before the output was written") from None
    except OSError as error:
        raise InputError(target, f"cannot be written ({_why(error)})") from None


def _replace(target: Path, data: bytes | Iterable[bytes], status: os.stat_result | None) -> None:
    """Replace (or create) the regular file ``target`` atomically."""
    folder = target.parent
    _sweep_stale(target)
    with _temporary(target) as (fd, link):
        try:
            with os.fdopen(os.dup(fd), "wb") as out:
                for piece in [data] if isinstance(data, bytes) else data:
                    out.write(piece)
                out.flush()
                os.fsync(out.fileno())
            os.fchmod(fd, status.st_mode & 0o7777 if status else _default_mode())
            os.replace(link(), target)
        except OSError as error:
            raise InputError(target, f"cannot be written ({_why(error)})") from None
    _sync_folder(folder)


def _default_mode() -> int:
    """The mode ``open()`` gives a new file: 0o666 less the umask."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


_TEMPORARY = re.compile(r"^\.(?P<name>.*)\.(?P<pid>\d+)\.[0-9a-f]{8}\.tmp$")


def _temporary_name(target: Path) -> Path:
    return target.parent / f".{target.name[:200]}.{os.getpid()}.{os.urandom(4).hex()}.tmp"


@contextlib.contextmanager
def _temporary(target: Path) -> Iterator[tuple[int, Callable[[], str]]]:
    """An open temporary file beside ``target`` and a function that gives it a name to rename
    from. The file is unnamed (``O_TMPFILE``) until then where the system allows, so that no
    kill, not even ``kill -9``, leaves it behind; a named one is removed on error and signals."""
    named: list[Path] = []
    fd = -1
    if hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # a file system without it: a named one
            fd = os.open(target.parent, os.O_WRONLY | os.O_TMPFILE | os.O_CLOEXEC, 0o600)
    if fd < 0:
        name = _temporary_name(target)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError as error:
            raise InputError(target, f"cannot be written ({_why(error)})") from None
        named.append(name)

    def link() -> str:
        if not named:  # give the unnamed file a name for the instant before the rename
            name = _temporary_name(target)
            named.append(name)
            try:
                os.link(f"/proc/self/fd/{fd}", name, follow_symlinks=True)
            except OSError:  # a file system that cannot link it (overlayfs): copied instead
                _copy_named(fd, name)
        return str(named[0])

    try:
        with _removed_on_signals(named):
            yield fd, link
    except BaseException:
        for name in named:
            with contextlib.suppress(OSError):
                os.unlink(name)
        raise
    finally:
        os.close(fd)


def _copy_named(fd: int, name: Path) -> None:
    """Copy the unnamed file ``fd`` into the new file ``name`` (flushed to disk)."""
    with open(name, "xb") as out, os.fdopen(os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)) as src:
        while chunk := src.buffer.read(1 << 20):
            out.write(chunk)
        out.flush()
        os.fchmod(out.fileno(), os.fstat(fd).st_mode & 0o7777)
        os.fsync(out.fileno())


@contextlib.contextmanager
def _removed_on_signals(named: list[Path]) -> Iterator[None]:
    """While a temporary exists, SIGTERM and SIGHUP end the process through an exception (as
    SIGINT does), so the temporary is removed first; handlers a program set are left alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    import signal  # noqa: PLC0415

    previous = {}
    for name in _CLEANUP_SIGNALS:  # SIGINT raises KeyboardInterrupt already
        number = getattr(signal, name)
        if signal.getsignal(number) is signal.SIG_DFL:
            previous[number] = signal.SIG_DFL
            signal.signal(number, _exit_on_signal)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _exit_on_signal(number: int, _frame: object) -> None:
    raise SystemExit(128 + number)


def _sweep_stale(target: Path) -> None:
    """Remove temporaries of ``target`` left by gpuscope processes that no longer exist (killed
    with ``kill -9`` between naming the temporary and renaming it)."""
    try:
        names = os.listdir(target.parent)
    except OSError:
        return
    for name in names:
        match = _TEMPORARY.match(name)
        if match is None or match["name"] != target.name[:200]:
            continue
        if _alive(int(match["pid"])):
            continue
        with contextlib.suppress(OSError):
            os.unlink(target.parent / name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True
    return True


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
