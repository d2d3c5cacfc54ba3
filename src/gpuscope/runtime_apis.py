"""What each CUDA / HIP runtime or driver call does, defined once: ``data/runtime_apis.csv``.

Contract: :func:`runtime_role` names the role of a call (``sync``, ``copy``, ``async_copy``,
``alloc``, ``free``, ``launch``, ``context``, ``module_load``, ``library_init``, ``teardown``,
``capture_begin``, ``capture_end``, ``graph_instantiate``, ``event_record``,
``stream_wait_event``, ``query``, or ``none``), from the table, for every reader of it: the idle
attribution (:mod:`gpuscope.analyses.host` sorts host events into activities by it), the start-up
phases (:mod:`gpuscope.analyses.phases`) and the what-if replay
(:mod:`gpuscope.analyses.whatif.graph`: which calls wait for the device, which enqueue work).
One definition, so that they cannot drift. A malformed table is a packaging error
(``ValueError`` naming the row).

A name is matched without its per-thread-default-stream and version suffixes (``_ptsz``,
``_ptds``, ``_v7000``: Nsight Systems names entry points ``cudaLaunchKernel_v7000``); an exact
name of the table wins over a pattern (``*``: any characters), then the first pattern in file
order.
"""

from __future__ import annotations

import csv
import re
from functools import cache, lru_cache

from gpuscope.classify import DATA

ROLES = (
    "sync",
    "copy",
    "async_copy",
    "alloc",
    "free",
    "launch",
    "context",
    "module_load",
    "library_init",
    "teardown",
    "capture_begin",
    "capture_end",
    "graph_instantiate",
    "event_record",
    "stream_wait_event",
    "query",
)
#: Calls that return only once the device (or a stream, an event) has drained: ``cudaFree``
#: synchronises the device before it releases memory.
WAITS_FOR_DEVICE = frozenset({"sync", "free"})
#: Allocator calls, whether they synchronise or not.
ALLOCATOR = frozenset({"alloc", "free"})
#: Calls that copy memory: the host may wait for a ``copy``, never for an ``async_copy``.
COPIES = frozenset({"copy", "async_copy"})
#: Calls that only enqueue device work: what a launch costs the host.
ENQUEUES = frozenset({"launch", "async_copy"})

_SUFFIX = re.compile(r"(?:_ptsz|_ptds)?(?:_v\d+)?$")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_*]*")


@cache
def _table() -> tuple[dict[str, str], tuple[tuple[str, str, str], ...]]:
    """Exact name -> role, and (pattern, role) in file order."""
    lines = (DATA / "runtime_apis.csv").read_text("utf-8").splitlines()
    rows = list(csv.reader(line for line in lines if line and not line.startswith("#")))
    if not rows or rows[0] != ["role", "cuda", "hip"]:
        raise ValueError("data/runtime_apis.csv: header must be role,cuda,hip")
    exact: dict[str, str] = {}
    patterns: dict[str, str] = {}
    for number, row in enumerate(rows[1:], start=2):
        problem = _problem(row)
        for name in row[1:] if problem is None else ():
            into = patterns if "*" in name else exact
            if name and into.setdefault(name, row[0]) != row[0]:
                problem = f"{name} has two roles ({into[name]}, {row[0]})"
        if problem is not None:
            raise ValueError(f"data/runtime_apis.csv row {number}: {problem}")
    # A pattern holds one ``*``: a prefix and a suffix, matched without regular expressions
    # (compiling ~70 of them cost more than a whole trace's lookups).
    split = []
    for glob, role in patterns.items():
        prefix, suffix = glob.split("*", 1)
        split.append((prefix, suffix, role))
    return exact, tuple(split)


def _problem(row: list[str]) -> str | None:
    if len(row) != 3:
        return f"{len(row)} fields, not 3"
    role, cuda, hip = row
    if role not in ROLES:
        return f"role must be one of {', '.join(ROLES)}"
    if not (cuda or hip):
        return "a CUDA name, a HIP name or both"
    if cuda and not (cuda.startswith(("cu", "nccl")) and _NAME.fullmatch(cuda)):
        return f"{cuda!r} is not a CUDA API name"
    if hip and not _NAME.fullmatch(hip):
        return f"{hip!r} is not an API name"
    if cuda.count("*") > 1 or hip.count("*") > 1:
        return "a name holds one * at most"
    return None


#: Roles are remembered per name (bounded): the ranks of one job share their names.
_NAMES_REMEMBERED = 1 << 14


@lru_cache(maxsize=_NAMES_REMEMBERED)
def runtime_role(name: str) -> str:
    """The role of the call ``name`` (see the module docstring), ``none`` when the table does
    not list it. A CUDA name and its HIP twin have the same role."""
    bare = _SUFFIX.sub("", name)
    exact, patterns = _table()
    role = exact.get(bare)
    if role is not None:
        return role
    return next(
        (
            role
            for prefix, suffix, role in patterns
            if bare.startswith(prefix)
            and bare.endswith(suffix)
            and len(bare) >= len(prefix) + len(suffix)
        ),
        "none",
    )
