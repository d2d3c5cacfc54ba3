"""A read of one file begun ahead of the command that needs it, as the loader takes it.

:mod:`gpuscope.readers._early` begins the read (it runs the loader in a child); the loader
(:mod:`gpuscope.readers._load`) takes what was begun. This is the one type both share, so that
the loader never imports the read-ahead.
"""

from __future__ import annotations

import os

from gpuscope.errors import InputError

# No typing at run time: the console script's read-ahead loads this before typing (~3 ms).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from gpuscope.model import Job
    from gpuscope.readers._scan import Scan


class Prefetch:
    """A read of one file begun before the command that needs it: a Kineto scan on a thread, or
    an export read in a child process (``child`` is its pid and the read end of its pipe).

    It is handed to :func:`gpuscope.readers.load` as ``prefetch=``; the read serves that one file
    only, once. Nothing about it lives in module state: a process that never starts one (a
    library caller) reads as it always would.
    """

    def __init__(
        self, path: Path, scan: Scan | None = None, child: tuple[int, int] | None = None
    ) -> None:
        self.path = path.resolve()
        self.scan = scan
        self.child = child

    def serves(self, path: Path) -> bool:
        return path.resolve() == self.path

    def scan_for(self, path: Path) -> Scan | None:
        """The Kineto scan of ``path`` begun ahead, handed over once; None otherwise."""
        if self.scan is None or not self.serves(path):
            return None
        scan, self.scan = self.scan, None
        return scan

    def job_for(self, path: Path) -> Job | None:
        """The Job a child read from ``path`` (raising its ``InputError``), once, or None: no
        child read that file, or it failed."""
        if self.child is None or not self.serves(path):
            return None
        (pid, read_fd), self.child = self.child, None
        import pickle  # noqa: PLC0415 - not before a scan starts

        try:
            with open(read_fd, "rb") as pipe:
                outcome: Job | InputError = pickle.load(pipe)
        except (pickle.UnpicklingError, EOFError, ValueError):
            return None  # the child died before it had sent everything
        finally:
            _reap(pid)
        if isinstance(outcome, InputError):
            raise outcome
        return outcome


def _reap(pid: int) -> None:
    """Collect the child's exit now if it is over, else when this process exits: its exit
    (unmapping its memory) is not worth waiting for, but its CPU time counts as this process's
    (``getrusage(RUSAGE_CHILDREN)`` of whoever runs gpuscope) only once collected."""
    if os.waitpid(pid, os.WNOHANG) == (0, 0):
        import atexit  # noqa: PLC0415

        atexit.register(os.waitpid, pid, 0)
