"""The ``gpuscope`` console script.

It starts reading the trace named on the command line (:func:`gpuscope.readers._early.start`)
before anything heavy imports, then hands over to the command line proper (:mod:`gpuscope.cli`).
A Kineto trace of 50 MB takes about as long to scan as the command line library, numpy and the
analyses take to import, and an Nsight Systems export of a few MB about as long to read; this way
the two overlap from the first millisecond.
"""

from __future__ import annotations

import gc
import os
import sys

TYPE_CHECKING = False  # typing imports re and enum (~5 ms): the read starts before them
if TYPE_CHECKING:
    from typing import NoReturn

#: The commands that read a trace through :func:`gpuscope.readers.load`: its read starts early.
READS_A_TRACE = frozenset({"diagnose", "report", "annotate"})
#: The commands that read their inputs, print or write one result and end. The others run for
#: as long as the user wants (``watch``; ``mcp``, an agent's server), run the user's program
#: (``profile``) or read a whole fleet of jobs (``fleet``), and keep the garbage collector and the
#: usual exit.
RUN_ONCE = READS_A_TRACE | {"demo", "diff", "history", "check", "scale", "sweep", "fleet-report"}


#: Commands that run the user's own program in this process: it must find the process as it would
#: alone (no thread limit for its BLAS, glibc's allocator as configured), so none of the tuning
#: below applies to them.
RUNS_USER_CODE = frozenset({"profile"})


def main() -> None:
    args = sys.argv[1:]
    command = args[0] if args else None
    if command not in RUNS_USER_CODE:
        _one_blas_thread()
        _tune_malloc()
    if command not in RUN_ONCE:
        from gpuscope.cli import main as cli

        cli()
        return
    # One result, then exit: the cyclic collector would only walk the imported modules' objects
    # again and again (~70 passes, ~8 ms); the readers and analyses make no cycles.
    gc.disable()
    prefetch = None
    if command in READS_A_TRACE:
        from gpuscope.readers import _early

        prefetch = _early.start(args[1:])  # handed to the command as click's context object
    from gpuscope import _recache

    _recache.install()  # regexes compiled in earlier runs, once the read has begun
    try:
        if _names_one_trace(args, prefetch):
            from gpuscope.commands._run import run_plain

            run_plain(args[1], prefetch)
        else:
            from gpuscope.cli import main as cli

            cli(obj=prefetch)
    except SystemExit as stop:
        _exit_now(stop.code)
    _exit_now(0)


def _names_one_trace(args: list[str], prefetch: object) -> bool:
    """Whether the command line is ``diagnose TRACE`` and nothing else, with TRACE a file whose
    read has begun: the commonest command, with every option at its default, which runs without
    the command-line library (click and what it imports, ~17 ms: a tenth of the whole run).
    Anything else, help and a file that is not a trace included, goes through click."""
    if len(args) != 2 or args[0] != "diagnose" or args[1].startswith("-"):
        return False
    from pathlib import Path

    from gpuscope.readers._prefetch import Prefetch

    return isinstance(prefetch, Prefetch) and prefetch.serves(Path(args[1]))


def _exit_now(code: str | int | None) -> NoReturn:
    """Exit as ``sys.exit(code)`` would, without tearing the interpreter down: freeing every
    module's objects and the trace's arrays one by one took 15-25 ms, a tenth of a whole run.

    What a normal exit does that matters here is done first: the ``atexit`` handlers run and the
    standard streams are flushed. A command that left a thread of its own running exits the
    usual way, which waits for it.
    """
    threading = sys.modules.get("threading")
    if threading is not None and any(
        not t.daemon and t is not threading.main_thread() and t.is_alive()
        for t in threading.enumerate()
    ):
        sys.exit(code)
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:
        print(code, file=sys.stderr)
        status = 1
    import atexit

    atexit._run_exitfuncs()  # private, but what a normal exit calls: the registered handlers
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except BrokenPipeError:  # a reader that took what it wanted and left (`| head -1`)
            pass
        except ValueError:  # a closed stream
            status = status or 1
    os._exit(status)


def _one_blas_thread() -> None:
    """numpy's OpenBLAS starts a thread per CPU when numpy imports, and they spin for a while
    (~50 ms of CPU) waiting for work that gpuscope never gives them: it does no linear algebra.
    On a small machine they take the CPU the trace's scan thread needs. A user's own setting
    stands; the worker processes of a parallel read inherit this one."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -2, -3, -8


def _tune_malloc() -> None:
    """The process is ours: tune glibc's allocator for reading traces.

    - One arena. glibc gives every thread that allocates an arena of its own, and each keeps
      what it freed for that thread alone: what the trace's scan thread freed (its window, the
      flow events' text) stayed resident beside everything the diagnosis then allocated on the
      main thread (a whole ``gpuscope diagnose`` of a 54 MB trace peaked at 98 MiB with two
      arenas, 83 with one). The scan thread allocates a few large buffers, so it seldom waits
      for the main thread's lock.
    - Blocks up to 8 MB come from the heap, and up to 128 MB of freed heap is kept. Otherwise
      every 4 MB piece of a trace is mapped fresh and returned at once, and the kernel zeroes and
      faults its pages in again: 23% fewer page faults, and ~10% less time for a 54 MB trace, for
      ~10 MB more at the peak.
    - The heap grows 32 MB at a time, not 128 KB. A buffer that grows by ``realloc`` at the top
      of the heap (the scanner's texts) then extends in place; with a small top it is copied
      into a fresh mapping once it passes the 8 MB above, and every page of the copy is
      faulted in anew. Measured on a 54 MB trace: 72 -> 12 ``brk`` calls, 16,700 -> 14,600
      page faults (3-4 us each on a virtual machine), and the same peak: address space the
      heap reserves but does not touch is not memory.
    """
    if os.name != "posix" or "glibc" not in (os.confstr("CS_GNU_LIBC_VERSION") or ""):
        return
    try:  # the scanner's extension has mallopt: it loads before the scan starts anyway
        from gpuscope.readers._kscan import mallopt
    except ImportError:  # not built, or built from older source: ctypes (~2 ms to import)
        import ctypes

        mallopt = ctypes.CDLL(None).mallopt
    mallopt(_M_ARENA_MAX, 1)
    mallopt(_M_MMAP_THRESHOLD, 8 << 20)
    mallopt(_M_TRIM_THRESHOLD, 128 << 20)
    mallopt(_M_TOP_PAD, 32 << 20)
