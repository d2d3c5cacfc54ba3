"""Engines: where many independent pieces of work run (a local process pool, or Ray tasks).

Contract: :func:`session` opens an :class:`Engine` and yields a :class:`Runner`; its
:meth:`Runner.map` applies a plain top-level function of picklable arguments to each argument
tuple and returns the results in argument order, reporting each finished item to a callback.
Every engine runs the same function, so results are identical whichever runs them. A session of
a local Ray (no address) starts it and shuts it down; one on a Ray already initialised in this
process (or a cluster at an address) leaves that as it found it. ``fleet`` maps jobs with it,
``diagnose --engine`` the ranks of one job.

Ray is the optional extra ``ray``; the caller checks for it before opening a session (the CLI
says which extra is missing).
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from typing import Any, TypeVar

import msgspec

from gpuscope.errors import InputError

T = TypeVar("T")
Progress = Callable[[int], None]  # called with each finished item's position
Failed = Callable[[int, Exception], T]  # the result of an item whose worker failed

#: Seconds to wait for a Ray cluster's address to accept a connection.
RAY_CONNECT_S = 5.0


class Engine(msgspec.Struct, frozen=True):
    kind: str = "local"  # "local" | "ray"
    workers: int | None = None  # processes (1: in this process) or a local Ray's CPUs; None: all
    ray_address: str | None = None  # ray: an existing cluster; None starts a local one


class Runner:
    """Maps functions over argument tuples on one engine (see the module docstring)."""

    def __init__(self, engine: Engine, pool: Executor | None, ray: Any = None) -> None:
        self.engine = engine
        self._pool = pool
        self._ray = ray

    def map(
        self,
        fn: Callable[..., T],
        items: Sequence[tuple[Any, ...]],
        done: Progress | None = None,
        failed: Failed[T] | None = None,
    ) -> list[T]:
        """``fn(*args)`` for each item, in item order. ``failed``: the result of an item whose
        worker died or raised (a process killed for memory, a lost Ray node; ``fn`` itself
        should return its errors as values); without it the exception propagates."""
        report = done or (lambda _i: None)
        if self._ray is not None:
            return self._map_ray(fn, items, report, failed)
        if self._pool is None:
            results = []
            for i, args in enumerate(items):
                results.append(fn(*args))
                report(i)
            return results
        out: dict[int, T] = {}
        futures = {self._pool.submit(fn, *args): i for i, args in enumerate(items)}
        for future in as_completed(futures):
            i = futures[future]
            out[i] = _outcome(future.result, i, failed)
            report(i)
        return [out[i] for i in range(len(items))]

    def _map_ray(
        self,
        fn: Callable[..., T],
        items: Sequence[tuple[Any, ...]],
        report: Progress,
        failed: Failed[T] | None,
    ) -> list[T]:
        ray = self._ray
        task: Any = ray.remote(fn)
        refs = [task.remote(*args) for args in items]
        index = {ref: i for i, ref in enumerate(refs)}
        out: dict[int, T] = {}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            i = index[ready[0]]
            out[i] = _outcome(functools.partial(ray.get, ready[0]), i, failed)
            report(i)
        return [out[i] for i in range(len(items))]


def _outcome(result: Callable[[], T], i: int, failed: Failed[T] | None) -> T:
    if failed is None:
        return result()
    try:
        return result()
    except Exception as error:  # the worker, not the work: see Runner.map
        return failed(i, error)


@contextmanager
def session(engine: Engine, items: int | None = None) -> Iterator[Runner]:
    """A runner on ``engine``; ``items``: how many items the first map will have (a local pool
    never starts more processes than that)."""
    if engine.kind == "ray":
        with _ray_session(engine) as ray:
            yield Runner(engine, None, ray)
        return
    if engine.kind != "local":
        raise ValueError(f"unknown engine {engine.kind!r}: local or ray")
    workers = engine.workers or _cores()
    if items is not None:
        workers = min(workers, items)
    if workers <= 1:
        yield Runner(engine, None)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        yield Runner(engine, pool)


def _cores() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


@contextmanager
def _ray_session(engine: Engine) -> Iterator[Any]:
    """Ray on ``engine.ray_address``, or a local Ray of ``engine.workers`` CPUs."""
    import ray  # noqa: PLC0415 - optional extra

    started = not ray.is_initialized()
    if started and engine.ray_address is not None:
        require_listening(engine.ray_address)
    if started:
        local = engine.ray_address is None
        ray.init(
            address=engine.ray_address,
            num_cpus=engine.workers if local else None,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,  # not Ray's notices (token auth): our output is ours
        )
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()


def require_listening(address: str) -> None:
    """One line when nothing listens at a Ray address: ``ray.init`` retries such an address for
    minutes. ``auto`` and addresses that are not ``host:port`` are left to Ray."""
    import socket  # noqa: PLC0415

    target = address.removeprefix("ray://")
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=RAY_CONNECT_S).close()
    except OSError as error:
        why = error.strerror or type(error).__name__
        raise InputError(address, f"no Ray cluster answers at this address ({why})") from None
