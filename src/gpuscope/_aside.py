"""Pieces of one computation run on a helper thread while the calling thread goes on.

Why it pays: numpy releases the GIL inside its loops over large arrays (sorts, searches,
ufuncs, ``take``), and a diagnosis spends much of its time in them. Once a trace is read, its
diagnosis runs on one thread and leaves the machine's other cores idle; a piece that needs
nothing the caller computes next (the replays' graph, the memory section) can run beside it and
fill the caller's numpy loops with its own Python, and the other way round. Measured on a
123,000-event trace on two cores: two diagnoses on two threads took 90 ms, one after the other
130.

When it does not: every numpy call on an array of more than a few hundred elements releases
the GIL and takes it back, and with a second thread waiting, each release hands the GIL over
(a futex wake-up on another core, tens of microseconds on a virtual machine). Where the arrays
are short, the calls are short too, the hand-overs outnumber the overlap, and both threads run
slower than one would alone: measured across the corpus, a diagnosis of fewer than 45,000
events took 12-81% longer with a helper thread (``benchmarks/helper_sweep.py``).
Where they are huge, the pieces' arrays are fresh memory, page faults set the pace, and both
pieces' memory is held at once. The caller says which (``parallel``).

Why the answer cannot change: a piece is a pure function of values nobody mutates (the trace's
tables, analyses' results), so it gives what it would give inline, whichever thread runs it and
whenever. Its exception is raised where its result is asked for, as it would have been raised
where the piece would have run inline, a little later.

Without a helper thread (``parallel=False``, or one CPU, where a second thread would only take
turns with the first) a piece runs where its result is first asked for, in the caller's thread:
where, and with the memory, it would have run had there been no helper at all.

Process state is the caller's: a :class:`Helper` is a context manager whose thread ends before
the ``with`` block does (a piece never asked for is skipped, not run).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from queue import SimpleQueue
from types import TracebackType
from typing import Any, Generic, TypeVar

T = TypeVar("T")


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


class Later(Generic[T]):
    """A piece's result, once computed: :meth:`result` waits for it (``lazy``: computes it, the
    first time it is asked for, in the asking thread)."""

    __slots__ = ("_args", "_done", "_error", "_fn", "_lazy", "_value")

    def __init__(self, fn: Callable[..., T], args: tuple[Any, ...], *, lazy: bool = False) -> None:
        self._fn: Callable[..., T] | None = fn
        self._args = args
        self._lazy = lazy
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        fn, args = self._fn, self._args
        self._fn, self._args = None, ()  # what the piece read is not kept past its run
        if fn is not None:
            try:
                self._value = fn(*args)
            except BaseException as error:  # raised again in the thread that asks for it
                self._error = error
        self._done.set()

    def result(self) -> T:
        if self._lazy and not self._done.is_set():
            self.run()
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # set by run() when no error was


class Helper:
    """One helper thread that runs the pieces it is given, in the order given.

    ``with Helper() as helper: later = helper.start(fn, *args) ... later.result()``.
    ``parallel=False`` runs every piece inline, when its result is asked for: where the caller
    knows that a helper thread would not gain (see the module docstring).
    """

    def __init__(self, *, parallel: bool = True) -> None:
        self._parallel = parallel and _cpus() > 1
        self._queue: SimpleQueue[Later[Any] | None] = SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closing = False

    def start(self, fn: Callable[..., T], *args: Any) -> Later[T]:
        """``fn(*args)``, begun on the helper thread; without one, run when asked for."""
        if not self._parallel:
            return Later(fn, args, lazy=True)
        later = Later(fn, args)
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="gpuscope-helper", daemon=True)
            self._thread.start()
        self._queue.put(later)
        return later

    def _work(self) -> None:
        while (later := self._queue.get()) is not None:
            if self._closing:
                later._fn, later._args = None, ()  # never asked for: skipped
            later.run()

    def __enter__(self) -> Helper:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._thread is not None:
            self._closing = True
            self._queue.put(None)
            self._thread.join()
            self._thread = None
