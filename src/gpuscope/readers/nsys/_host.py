"""Host side: CUDA runtime calls, NVTX ranges (PyTorch operators, MPI ranks, steps) and the
OS runtime calls that took the most time."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope.errors import CorruptInputError
from gpuscope.model import Events, Kind, Step
from gpuscope.readers.nsys._export import (
    I64,
    ID_MASK,
    INTS,
    REQUIRED,
    TEXTS,
    Export,
    column_batches,
    int_columns,
)

_NVTX_RANGE_FALLBACK = (59, 60, 70, 71)  # Nvtx(t)PushPopRange, Nvtx(t)StartEndRange

# PyTorch operator names, as ``emit_nvtx`` writes them once their suffixes are gone.
_OPERATOR = re.compile(r"^[a-z_][a-z0-9_]*::\w+$")
_NUMBERED_STEP = re.compile(
    r"^(?:ProfilerStep#|(?:train(?:ing)?[ _-]?)?(?:step|iteration|iter)[ _#:=-]*)(\d+)$",
    re.IGNORECASE,
)
_PLAIN_STEP = re.compile(r"^(?:train(?:ing)?[ _-]?)?(?:step|iteration)$", re.IGNORECASE)
_MPI_RANK = re.compile(r"^MPI Rank (\d+)$")


def runtime_events(export: Export) -> Events | None:
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if not export.has(table):
        return None
    export.require(table, REQUIRED[table])
    correlation = export.column_or(table, "correlationId", "-1")
    thread = export.column_or(table, "globalTid", "0")
    select = ("start", "end - start", f"COALESCE({correlation}, -1)", f"COALESCE({thread}, 0)")
    start, dur, corr, gtid, name_ids = int_columns(export, table, (*select, "nameId"))
    columns = {
        "kind": np.full(start.shape, Kind.RUNTIME, dtype=np.uint8),
        "name_id": export.string_ids(name_ids),
        "start_ns": start,
        "dur_ns": dur,
        "pid": (gtid >> 24) & ID_MASK,
        "tid": gtid & ID_MASK,
        "correlation": corr,
    }
    return Events.from_columns(start.shape[0], columns, {})


class _Nvtx(msgspec.Struct, frozen=True):
    events: Events | None
    ranks: dict[int, int]  # pid -> MPI rank named by the export


def nvtx_ranges(export: Export) -> _Nvtx:
    table = "NVTX_EVENTS"
    if not export.has(table):
        return _Nvtx(None, {})
    export.require(table, REQUIRED[table])
    text = _nvtx_text_sql(export)
    thread = f"COALESCE({export.column_or(table, 'globalTid', '0')}, 0)"
    event_type = (
        f"COALESCE({export.column_or(table, 'eventType', 'NULL')}, {_NVTX_RANGE_FALLBACK[0]})"
    )
    range_types = ", ".join(str(t) for t in _nvtx_range_types(export))
    where = f"end IS NOT NULL AND end >= start AND {event_type} IN ({range_types})"
    select = ("start", "end - start", thread, f"CAST({text} AS TEXT)")
    outer = ("c0", "c1", "c2", _strip_emit_nvtx_sql("c3"))
    # Texts are few once emit_nvtx suffixes are gone: numbered in order of appearance, then
    # each distinct text gets its kind and name once.
    distinct: dict[Any, int] = {}
    parts: list[list[I64]] = []
    try:
        for *numbers, texts in column_batches(export, table, select, where, outer):
            values = TEXTS.decode(texts)
            for text_value in dict.fromkeys(values):
                distinct.setdefault(text_value, len(distinct))
            ids = np.fromiter(map(distinct.__getitem__, values), np.int64, len(values))
            parts.append([*(np.array(INTS.decode(n), dtype=np.int64) for n in numbers), ids])
    except (msgspec.ValidationError, OverflowError):
        raise CorruptInputError(
            export.path, f"Nsight Systems table {table} holds non-integer times or thread ids"
        ) from None
    ranks = _mpi_ranks(export, text, thread)
    if not parts:
        return _Nvtx(None, ranks)
    start, dur, gtids, text_ids = (np.concatenate([p[i] for p in parts]) for i in range(4))
    kind_of_text, name_of_text = _nvtx_kinds(export, list(distinct))
    columns = {
        "kind": kind_of_text[text_ids],
        "name_id": name_of_text[text_ids],
        "start_ns": start,
        "dur_ns": dur,
        "pid": (gtids >> 24) & ID_MASK,
        "tid": gtids & ID_MASK,
    }
    return _Nvtx(Events.from_columns(start.shape[0], columns, {}), ranks)


def _nvtx_text_sql(export: Export) -> str:
    """A range's text: written inline, or registered in ``StringIds``."""
    text = export.column_or("NVTX_EVENTS", "text", "NULL")
    text_id = export.column_or("NVTX_EVENTS", "textId", "NULL")
    return f"COALESCE({text}, (SELECT value FROM StringIds WHERE id = {text_id}), '')"


def _strip_emit_nvtx_sql(text: str) -> str:
    """``aten::mm, seq = 3, op_id = 17, sizes = ...`` -> ``aten::mm``, in SQL, so that the
    per-operation suffixes never reach Python as millions of distinct strings."""
    op_at = f"instr({text}, ', op_id = ')"
    seq_at = f"instr({text}, ', seq = ')"
    return (
        f"CASE WHEN {op_at} = 0 THEN {text}"
        f" WHEN {seq_at} > 0 AND {seq_at} < {op_at} THEN substr({text}, 1, {seq_at} - 1)"
        f" ELSE substr({text}, 1, {op_at} - 1) END"
    )


def _nvtx_range_types(export: Export) -> list[int]:
    table = "ENUM_NSYS_EVENT_TYPE"
    if not export.has(table):
        return list(_NVTX_RANGE_FALLBACK)
    known = export.enum(table, {})
    ranges = [i for i, n in known.items() if re.fullmatch(r"Nvtxt?(?:PushPop|StartEnd)Range", n)]
    return ranges or list(_NVTX_RANGE_FALLBACK)


def _nvtx_kinds(export: Export, raw: list[Any]) -> tuple[NDArray[np.uint8], NDArray[np.int32]]:
    """Per distinct NVTX text: its kind (PyTorch operator or annotation) and interned name."""
    texts = [t if isinstance(t, str) else str(t) for t in raw]
    kinds = np.array(
        [Kind.CPU_OP if _OPERATOR.match(t) else Kind.ANNOTATION for t in texts], dtype=np.uint8
    )
    names = np.array([export.intern(t) for t in texts], dtype=np.int32)
    return kinds, names


def _mpi_ranks(export: Export, text: str, thread: str) -> dict[int, int]:
    """``MPI Rank N``: the thread name nsys records for each MPI-traced process."""
    sql = f"SELECT DISTINCT {thread}, {text} FROM NVTX_EVENTS WHERE {text} LIKE 'MPI Rank %'"
    ranks: dict[int, int] = {}
    for gtid, name in export.db.execute(sql).fetchall():
        match = _MPI_RANK.match(str(name))
        if match is not None:
            ranks.setdefault((int(gtid) >> 24) & ID_MASK, int(match.group(1)))
    return ranks


def os_runtime_totals(export: Export) -> dict[int, dict[str, int]]:
    """Per process, the ten OS runtime calls that took the most time (ns)."""
    table = "OSRT_API"
    if (
        not export.has(table)
        or not {"start", "end", "nameId", "globalTid"} <= export.columns[table]
    ):
        return {}
    sql = (
        f"SELECT (globalTid >> 24) & {ID_MASK}, nameId, SUM(end - start) FROM {table}"
        " WHERE end IS NOT NULL GROUP BY 1, 2"
    )
    rows = export.db.execute(sql).fetchall()
    if not rows:
        return {}
    strings = export.strings(sorted({int(r[1]) for r in rows}))
    by_pid: dict[int, dict[str, int]] = {}
    for pid, name_id, total_ns in rows:
        by_pid.setdefault(int(pid), {})[strings[int(name_id)]] = int(total_ns or 0)
    return {
        pid: dict(sorted(calls.items(), key=lambda kv: -kv[1])[:10])
        for pid, calls in by_pid.items()
    }


def steps_of(table: Events, names: list[str]) -> list[Step]:
    """Step ranges: the most frequent family of step-like NVTX names (``step 3``, ``step 4``)."""
    rows = np.flatnonzero(table.kind == Kind.ANNOTATION)
    families: dict[str, list[tuple[int, int | None]]] = {}
    step_like: dict[int, tuple[str, int | None] | None] = {}
    for row, name_id in zip(rows.tolist(), table.name_id[rows].tolist(), strict=True):
        if name_id not in step_like:
            step_like[name_id] = _step_family(names[name_id])
        family = step_like[name_id]
        if family is not None:
            families.setdefault(family[0], []).append((row, family[1]))
    if not families:
        return []
    chosen = max(families.values(), key=len)
    steps = []
    for position, (row, recorded) in enumerate(chosen):
        start = int(table.start_ns[row])
        name = names[int(table.name_id[row])]
        number = position if recorded is None else recorded
        steps.append(Step(name, number, start, start + int(table.dur_ns[row])))
    return steps


def _step_family(name: str) -> tuple[str, int | None] | None:
    """(family, number) of a step-like range name, else None."""
    text = name.strip()
    match = _NUMBERED_STEP.match(text)
    if match is not None:
        return text[: match.start(1)].lower(), int(match.group(1))
    if _PLAIN_STEP.match(text):
        return text.lower(), None
    return None


# --- the host thread on a CPU ------------------------------------------------------------------

#: The name of an interval in which a host thread was on a CPU (:attr:`Kind.HOST_RUNNING`).
HOST_RUNNING_NAME = "[thread on a CPU]"


def host_running(export: Export, lo_ns: int, hi_ns: int) -> Events | None:
    """When the threads that call CUDA were on a CPU, within ``[lo_ns, hi_ns]`` (the span of the
    events read): from the OS scheduling trace (``SCHED_EVENTS``: a switch in, then out), else
    from CPU samples (``COMPOSITE_EVENTS``). These say the host was computing where it made no
    CUDA call: an idle gap the thread spent on a CPU is the host's own work, not a mystery."""
    threads = "SELECT DISTINCT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME"
    if not export.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        return None
    intervals = _scheduled(export, threads) or _sampled(export, threads)
    if intervals is None:
        return None
    gtid, start, end = intervals
    start, end = np.maximum(start, lo_ns), np.minimum(end, hi_ns)
    keep = end > start
    gtid, start, end = gtid[keep], start[keep], end[keep]
    if not start.size:
        return None
    columns = {
        "kind": np.full(start.shape, Kind.HOST_RUNNING, dtype=np.uint8),
        "name_id": np.full(start.shape, export.intern(HOST_RUNNING_NAME), dtype=np.int32),
        "start_ns": start,
        "dur_ns": end - start,
        "pid": (gtid >> 24) & ID_MASK,
        "tid": gtid & ID_MASK,
    }
    return Events.from_columns(start.shape[0], columns, {})


_Intervals = tuple[I64, I64, I64]  # thread (globalTid), start, end


def _scheduled(export: Export, threads: str) -> _Intervals | None:
    """On-CPU intervals from context switches: each switch in, to the thread's next switch out."""
    table = "SCHED_EVENTS"
    if not export.has(table) or not {"start", "isSchedIn", "globalTid"} <= export.columns[table]:
        return None
    rows = export.db.execute(
        f"SELECT globalTid, start, isSchedIn FROM {table} WHERE globalTid IN ({threads})"
        " AND start IS NOT NULL ORDER BY globalTid, start"
    ).fetchall()
    if not rows:
        return None
    data = np.array([(int(g), int(s), 1 if i else 0) for g, s, i in rows], dtype=np.int64)
    gtid, start, switched_in = data[:, 0], data[:, 1], data[:, 2]
    # A switch in followed, on the same thread, by a switch out: one interval on a CPU.
    pair = (switched_in[:-1] == 1) & (switched_in[1:] == 0) & (gtid[:-1] == gtid[1:])
    at = np.flatnonzero(pair)
    return gtid[at], start[at], start[at + 1]


def _sampled(export: Export, threads: str) -> _Intervals | None:
    """On-CPU intervals from CPU samples: a thread is sampled once per sampling period of CPU
    time while it runs, so samples a period apart (up to twice, for jitter) are one run; each
    run starts a period before its first sample."""
    table = "COMPOSITE_EVENTS"
    if not export.has(table) or not {"start", "globalTid"} <= export.columns[table]:
        return None
    running = (
        "threadState IS NULL OR threadState = 1" if "threadState" in export.columns[table] else "1"
    )
    rows = export.db.execute(
        f"SELECT globalTid, start FROM {table} WHERE globalTid IN ({threads})"
        f" AND start IS NOT NULL AND ({running}) ORDER BY globalTid, start"
    ).fetchall()
    if len(rows) < 2:
        return None
    data = np.array(rows, dtype=np.int64)
    gtid, start = data[:, 0], data[:, 1]
    same = gtid[1:] == gtid[:-1]
    step = np.diff(start)[same]
    if not step.size:
        return None
    period = max(int(np.median(step)), 1)
    # A new run where the thread changes or the samples are more than two periods apart.
    new_run = np.ones(start.size, dtype=np.bool_)
    new_run[1:] = ~same | (np.diff(start) > 2 * period)
    first = np.flatnonzero(new_run)
    last = np.append(first[1:] - 1, start.size - 1)
    return gtid[first], start[first] - period, start[last]
