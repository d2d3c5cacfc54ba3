"""Reading the one trace named on a command line while the rest of gpuscope imports.

The console script calls :func:`start` before it imports the command line library, the analyses
or the renderers (~0.1 s of start-up), so that the read overlaps them:

- A Kineto file is inflated and scanned on a thread (:func:`gpuscope.readers._scan.start_early`):
  the C scanner holds no GIL.
- An SQLite file (an Nsight Systems export, usually) of up to :data:`FORK_MAX_BYTES` is read in
  a child process forked once numpy and msgspec have imported (both processes need them), by
  :func:`~gpuscope.readers._load.load_file` as the command would read it, and the Job, or the
  ``InputError`` the read raised, comes back pickled through a pipe. A
  thread would not do: SQLite's steps run without the GIL, but the reader's Python and numpy work
  would compete with the imports for it, and measured slower than no overlap at all. A bigger
  export is read in process: its pickle would cost more than the overlap saves.

:func:`start` returns the read as a :class:`Prefetch`, which the console script passes to the
command line as click's context object and the command passes to ``load(path, prefetch=...)``.
A guess, never a decision: the command still names its file, and the prefetch hands over a read
of that same file only. Where the child died or failed otherwise (a bug), the command reads the
file itself, and shows what went wrong there.
"""

from __future__ import annotations

import contextlib
import os
import sys

from gpuscope.errors import InputError
from gpuscope.readers import _scan
from gpuscope.readers._io import SQLITE_MAGIC, head_bytes, parse_size, set_memory_budget
from gpuscope.readers._prefetch import Prefetch
from gpuscope.readers._scan import looks_like_kineto

# Nor typing here (nor in the readers this imports): it imports re and enum, ~5 ms before the
# read could start.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path
    from typing import NoReturn

    from gpuscope.model import Job

#: The largest export read in a child process (its pickle is ~1.5x the file).
FORK_MAX_BYTES = 16 << 20


def start(args: list[str]) -> Prefetch | None:
    """Start reading the one trace file among a command line's arguments, if there is one."""
    # The file is named as typed until the scan has started: pathlib (with re and enum, ~6 ms)
    # loads after. The command's read names the file as it does (kineto._read_scanned).
    found: list[tuple[str, bytes]] = []
    _memory_budget_of(args)  # before the scan starts: it reads within the budget
    for i, arg in enumerate(args):
        if arg.startswith("-") or (i > 0 and args[i - 1] == "--max-memory"):
            continue
        try:
            if not os.path.isfile(arg):
                continue
            head = head_bytes(arg)
        except (InputError, OSError):
            continue  # the command says what is wrong with it
        if looks_like_kineto(head) or head.startswith(SQLITE_MAGIC):
            found.append((arg, head))
    if len(found) != 1:
        return None  # none, or several: no guess
    name, head = found[0]
    scan = None if head.startswith(SQLITE_MAGIC) else _scan.start(name)
    from pathlib import Path  # noqa: PLC0415

    path = Path(name)
    if head.startswith(SQLITE_MAGIC):
        child = _fork_load(path)
        return Prefetch(path, child=child) if child is not None else None
    return Prefetch(path, scan=scan) if scan is not None else None


def _memory_budget_of(args: list[str]) -> None:
    """Set the memory budget from ``--max-memory SIZE`` (or ``=SIZE``) among ``args``; a bad
    size is left to the command line to refuse."""
    for i, arg in enumerate(args):
        value = None
        if arg == "--max-memory" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--max-memory="):
            value = arg.partition("=")[2]
        if value is not None:
            with contextlib.suppress(ValueError):
                set_memory_budget(parse_size(value))


def begin(path: Path, prefetch: object = None) -> Prefetch | None:
    """What a command hands to ``load(path, prefetch=...)``: ``prefetch`` (the console script's,
    through click's context object) when it reads ``path``, else a Kineto scan of ``path``
    started now, so that the read overlaps whatever the command imports next."""
    if isinstance(prefetch, Prefetch) and prefetch.serves(path):
        return prefetch
    scan = _scan.start(path)
    return Prefetch(path, scan=scan) if scan is not None else None


def _fork_load(path: Path) -> tuple[int, int] | None:
    """Fork a child that reads ``path``: its pid and the read end of its pipe, or None."""
    if sys.platform != "linux" or path.stat().st_size > FORK_MAX_BYTES:
        return None
    # What both processes need, imported once: numpy and msgspec. The child then has less to
    # do than the parent before the parent needs its result.
    import gpuscope.model  # noqa: F401, PLC0415

    if not _one_thread():
        return None
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        _child(path, write_fd)
    os.close(write_fd)
    return pid, read_fd


def _one_thread() -> bool:
    """Whether this process has one thread, native ones counted (numpy's OpenBLAS starts its
    own where ``OPENBLAS_NUM_THREADS`` lets it). A fork copies only the calling thread: locks
    the others held (the import lock, malloc's) would stay locked in the child."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


def _child(path: Path, write_fd: int) -> NoReturn:
    """Read ``path``, send what came of it, and exit without running the parent's clean-up."""
    status = 1
    try:
        import signal  # noqa: PLC0415 - the child's own needs

        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C: the parent says so, not the child
        import pickle  # noqa: PLC0415

        from gpuscope.readers._load import load_file  # noqa: PLC0415

        outcome: Job | InputError
        try:
            outcome = load_file(path)
        except InputError as error:
            outcome = error
        with open(write_fd, "wb") as pipe:  # in frames, read as they come
            pickle.dump(outcome, pipe, protocol=pickle.HIGHEST_PROTOCOL)
        status = 0
    except BaseException:  # a bug, or the parent gone: the parent reads the file itself, if alive
        pass
    os._exit(status)
