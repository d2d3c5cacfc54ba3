"""Reader for Nsight Systems SQLite exports (``nsys export --type sqlite``), schemas 2.9 to 3.x.

Contract: :func:`read` opens the file read-only and returns a :class:`~gpuscope.model.Job` with one
:class:`~gpuscope.model.Trace` per process that ran GPU work, or raises
:class:`~gpuscope.errors.InputError` with one line naming the file: ``UnknownFormatError`` for an
SQLite database that is not an nsys export or has a schema major version other than 2 or 3,
``CorruptInputError`` for a truncated or damaged file or a table that lacks a required column,
``EmptyTraceError`` when the export holds no kernel, copy or memset at all.

What becomes what (tables absent when empty are simply skipped):

* ``CUPTI_ACTIVITY_KIND_KERNEL`` / ``_MEMCPY`` / ``_MEMSET``: device work. Kernel names are the
  full demangled name (else the short, else the mangled one). Copy direction and pageable/pinned
  host memory are decoded through the export's own ``ENUM_CUDA_MEMCPY_OPER`` and
  ``ENUM_CUDA_MEM_KIND`` tables, falling back to nsys's documented values when the export has none
  (schema 2.x). Copies are named as Kineto names them: ``Memcpy HtoD (Pinned -> Device)``.
  Unified-memory migrations (copy kinds ``UVM_*`` with their ``migrationCause``, and the older
  ``CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER`` table's byte-transfer rows) are copies named
  ``Unified Memory HtoD (Page fault)``: the driver moved pages because a processor touched them.
* ``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION``: :attr:`Kind.SYNC` on its stream, never busy work.
* ``CUPTI_ACTIVITY_KIND_RUNTIME``: :attr:`Kind.RUNTIME`, names as recorded
  (``cudaStreamSynchronize_v3020``); linked to the device work they launched by ``correlationId``.
* ``NVTX_EVENTS`` ranges: :attr:`Kind.ANNOTATION`, except PyTorch operator ranges
  (``emit_nvtx``: ``aten::mm, seq = 3, op_id = 17``), which are :attr:`Kind.CPU_OP` named as
  Kineto names them (``aten::mm``). Ranges named like steps (``ProfilerStep#3``, ``step 12``,
  ``iteration_4``, ``train_step``) become :attr:`Trace.steps`: the most frequent such name family.
* Processes and threads: ``pid = globalPid >> 24 & 0xFFFFFF`` and ``tid = globalTid & 0xFFFFFF``
  as nsys documents its serialized global ids. ``rank`` is set only when the export says so (an
  NVTX ``MPI Rank N`` thread name); otherwise None.
* Devices: ``TARGET_INFO_GPU`` (name, SM count, memory, compute capability), matched to CUDA device
  ids through ``TARGET_INFO_CUDA_DEVICE`` or ``cuDevice``; absent, the name is None.
* ``SCHED_EVENTS`` (context switches) or, without them, ``COMPOSITE_EVENTS`` (CPU samples) of
  the threads that call CUDA: :attr:`Kind.HOST_RUNNING` intervals, when each was on a CPU,
  within the span of the other events. They tell the host computing from the host waiting.
* ``CUDA_UM_CPU_PAGE_FAULT_EVENTS`` / ``CUDA_UM_GPU_PAGE_FAULT_EVENTS`` (``nsys profile
  --cuda-um-cpu-page-faults=true --cuda-um-gpu-page-faults=true``): per process, fault counts
  and the functions that faulted, ``trace.metadata["unified_memory_faults"]``.
* ``CUDA_GPU_MEMORY_USAGE_EVENTS`` (``--cuda-memory-usage=true``): cudaMalloc/cudaFree of device
  memory as ``trace.memory`` (``_memory``: under PyTorch, reserved memory).
* ``GPU_METRICS`` (when sampled): ``trace.metadata["gpu_metrics"][device]`` is
  ``{metric name: mean value, "samples": n, "sampling_period_ns": p, "gpu_id": id}``, and every
  metric as a time series of its device, ``trace.counters``.
  ``OSRT_API`` (when traced): the ten costliest OS runtime calls per process,
  ``trace.metadata["os_runtime_ns"]``.

Modules: ``_export`` (tables, columns, schema version, batched column reads), ``_device``
(kernels, copies, memsets, synchronisations), ``_um`` (unified-memory migrations and page
faults), ``_memory`` (device allocations), ``_host`` (runtime calls, NVTX ranges and steps, OS
runtime, threads on a CPU), ``_gpus`` (device facts, sampled metrics); this module sniffs, opens
and assembles the traces.

Speed: one SQL query per table returns plain integer columns (joins, products and NULL handling
done in SQL); rows go straight into numpy. Python touches rows only to intern NVTX texts.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from gpuscope._arrays import distinct
from gpuscope.errors import CorruptInputError, EmptyTraceError, UnknownFormatError
from gpuscope.model import BUSY_KINDS, ID_COLUMNS, DeviceInfo, Events, Job, Trace, narrow
from gpuscope.readers._io import SQLITE_MAGIC
from gpuscope.readers._links import link_launches
from gpuscope.readers.nsys._device import kernel_events, memcpys, memset_events, syncs
from gpuscope.readers.nsys._export import Export, inspect_export
from gpuscope.readers.nsys._gpus import device_infos, gpu_metric_series, gpu_metric_summary
from gpuscope.readers.nsys._host import (
    host_running,
    nvtx_ranges,
    os_runtime_totals,
    runtime_events,
    steps_of,
)
from gpuscope.readers.nsys._memory import gpu_memory, memory_events
from gpuscope.readers.nsys._um import um_counters, um_fault_counts

__all__ = ["MAX_DISTANCE_NS", "looks_like_nsys", "read"]

#: Table names nsys writes early in the schema; the sniffer looks for them in the first 64 KB.
_NSYS_MARKERS = (
    b"StringIds",
    b"CUPTI_ACTIVITY_KIND_",
    b"TARGET_INFO_",
    b"NVTX_EVENTS",
    b"META_DATA_EXPORT",
    b"EXPORT_META_DATA",
)


# --- sniffing and opening ----------------------------------------------------------------------


def looks_like_nsys(head: bytes) -> bool:
    """An SQLite database whose first pages name tables that only nsys exports have."""
    return head.startswith(SQLITE_MAGIC) and any(m in head for m in _NSYS_MARKERS)


def read(path: Path) -> Job:
    """Read one export: one trace per process that ran GPU work."""
    _check_not_truncated(path)
    try:
        with _open(path) as db:
            return _read(path, db)
    except sqlite3.Error as error:
        raise CorruptInputError(path, f"not a readable SQLite database ({error})") from None
    except UnicodeDecodeError:  # a damaged page: text that is not UTF-8 where SQLite keeps text
        raise CorruptInputError(
            path, "not a readable SQLite database (text that is not UTF-8)"
        ) from None
    except (ValueError, TypeError, OverflowError) as error:
        # SQLite columns are typed by their values, not their declaration: an id column holding
        # text, a float or an integer beyond 64 bits is a hand-edited or corrupt export.
        raise CorruptInputError(
            path, f"a column holds a value of the wrong type or size ({error})"
        ) from None


def _check_not_truncated(path: Path) -> None:
    """The header records the database size; a shorter file was cut off (copy or export)."""
    try:
        size_bytes = path.stat().st_size
        with path.open("rb") as file:
            header = file.read(100)
    except OSError as error:
        raise CorruptInputError(path, f"cannot be read ({error.strerror})") from None
    if header.startswith(b"\x1f\x8b"):
        raise UnknownFormatError(path, "a gzip-compressed Nsight Systems export: gunzip it first")
    if not header.startswith(SQLITE_MAGIC):
        raise UnknownFormatError(path, "not an SQLite database")
    if len(header) < 100:
        raise CorruptInputError(path, "truncated: shorter than an SQLite header")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    size_is_valid = header[24:28] == header[92:96] and pages > 0
    expected_bytes = pages * page_size
    if size_is_valid and size_bytes < expected_bytes:
        raise CorruptInputError(
            path,
            f"truncated: {size_bytes:,} of {expected_bytes:,} bytes"
            " (the copy or the export did not finish)",
        )


@contextmanager
def _open(path: Path) -> Iterator[sqlite3.Connection]:
    uri = f"file:{quote(str(path.resolve()))}?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as db:
        # No memory map: an export cut short while it is read (a re-export over it) would kill
        # the process with SIGBUS on the missing pages; read() calls return an error instead,
        # a CorruptInputError. Measured no slower on the corpus exports.
        db.execute("PRAGMA mmap_size = 0")
        yield db


# --- assembling traces -------------------------------------------------------------------------


def _read(path: Path, db: sqlite3.Connection) -> Job:
    export = inspect_export(path, db)
    parts = [kernel_events(export), memcpys(export), memset_events(export), syncs(export)]
    first_pid = next((int(p.pid[0]) for p in parts if p is not None and len(p)), -1)
    parts.append(um_counters(export, first_pid))
    device_parts = [p for p in parts if p is not None and len(p)]
    runtime = runtime_events(export)
    if not device_parts:
        raise EmptyTraceError(path, _no_device_work_reason(runtime, _cuda_traced(db)))
    missing = _missing_kernel_table(path, export, runtime, _cuda_traced(db))
    nvtx = nvtx_ranges(export)
    host_parts = [p for p in (runtime, nvtx.events) if p is not None and len(p)]
    host_parts += _running(export, device_parts + host_parts)
    os_runtime = os_runtime_totals(export)
    um_faults = um_fault_counts(export)
    allocations = gpu_memory(export)
    export.finish_names()
    events = _concat(device_parts + host_parts)
    events, notes = _implausible(path, events)
    if not events.of_kind(*BUSY_KINDS).any():
        raise EmptyTraceError(path, "no GPU activity left once implausible times are dropped")
    order = np.argsort(events.start_ns, kind="stable")
    busy = events.of_kind(*BUSY_KINDS)
    infos = device_infos(export)
    metrics = gpu_metric_summary(export)
    series = gpu_metric_series(export)
    traces: list[Trace] = []
    for pid in distinct(events.pid[busy]).tolist():
        rows = order[events.pid[order] == pid]
        table = events.take(rows)
        link_launches(table)
        trace = _trace(export, table, pid, nvtx.ranks.get(pid), infos)
        _attach_metrics(trace, metrics)
        trace.counters = [c for d in sorted(trace.devices) for c in series.get(d, [])]
        if pid in os_runtime:
            trace.metadata["os_runtime_ns"] = os_runtime[pid]
        if pid in um_faults:
            trace.metadata["unified_memory_faults"] = um_faults[pid]
        if pid in allocations:
            trace.memory = memory_events(allocations[pid], table)
        trace.warnings.extend([*missing, *notes])
        traces.append(trace)
    return Job(source=str(path), traces=traces)


def _running(export: Export, parts: list[Events]) -> list[Events]:
    """When the CUDA-calling threads were on a CPU, within the span of the events read (a
    thread's scheduling trace starts with the process, long before its first CUDA call)."""
    starts = [int(p.start_ns.min()) for p in parts]
    ends = [int((p.start_ns + p.dur_ns).max()) for p in parts]
    running = host_running(export, min(starts), max(ends))
    return [running] if running is not None else []


#: The farthest an event may start or end from the export's median start: nsys records seconds
#: to hours; an end at 2^62 ns (146 years) is a corrupt row, and kept it would make the GPU
#: "busy" for a century.
MAX_DISTANCE_NS = 31 * 86_400 * 1_000_000_000


def _implausible(path: Path, events: Events) -> tuple[Events, list[str]]:
    """Events that end before they start, or lie decades from the rest, dropped and counted."""
    start, dur = events.start_ns, events.dur_ns
    middle = int(np.median(start)) if len(start) else 0
    backwards = dur < 0
    with np.errstate(over="ignore"):
        far = (np.abs(start - middle) > MAX_DISTANCE_NS) | (dur > MAX_DISTANCE_NS) & ~backwards
    notes = []
    if backwards.any():
        notes.append(
            f"{path}: dropped {int(backwards.sum()):,} event(s) that end before they start"
        )
    if far.any():
        notes.append(
            f"{path}: dropped {int(far.sum()):,} event(s) timed more than 31 days from the rest"
            " of the export (corrupt times)"
        )
    if not notes:
        return events, []
    return events.take(np.flatnonzero(~(backwards | far))), notes


def _missing_kernel_table(
    path: Path, export: Export, runtime: Events | None, cuda_traced: bool | None
) -> list[str]:
    """An export without a kernel table (nsys leaves out tables it has no rows for, and drops
    kernels it was not told to trace) holds copies, memsets or synchronisations only: its GPU
    reads as idle between them, and that must not pass as a finding about the program. What to
    do about it reads the capture's own settings: with CUDA tracing on, the capture missed the
    kernels, and ``--trace=cuda`` would change nothing."""
    if export.has("CUPTI_ACTIVITY_KIND_KERNEL"):
        return []
    launches = "" if runtime is None or not len(runtime) else " although CUDA API calls were"
    todo = (
        "CUDA tracing was on (the capture's settings say so), so no kernel ran while nsys"
        " recorded: capture the part that runs kernels (nsys --delay/--duration, or"
        " --capture-range=cudaProfilerApi around the steps)"
        if cuda_traced
        else "profile with nsys --trace=cuda"
    )
    return [
        f"{path}: the export has no kernel table (CUPTI_ACTIVITY_KIND_KERNEL): no kernel was"
        f" recorded{launches}, so the GPU's busy time counts copies, memsets and"
        f" synchronisations only ({todo})"
    ]


def _no_device_work_reason(runtime: Events | None, cuda_traced: bool | None) -> str:
    """Why there is nothing to diagnose, read from the capture's own settings: with CUDA tracing
    on (``META_DATA_CAPTURE``), no GPU work means the capture ended (or started) where the
    program launched none, and ``--trace=cuda`` would change nothing."""
    if cuda_traced:
        return (
            "no GPU work in the capture: CUDA tracing was on (the capture's settings say so) but"
            " the program launched no kernels, copies or memsets while nsys recorded; capture"
            " the part that runs on the GPU (nsys --delay/--duration, or"
            " --capture-range=cudaProfilerApi around the steps)"
        )
    if runtime is not None and len(runtime):
        return (
            "GPU activity was not recorded: the export has CUDA API calls but no kernels,"
            " copies or memsets (profile with nsys --trace=cuda)"
        )
    return "no GPU activity: the export holds no CUDA kernels, copies or memsets"


def _cuda_traced(db: sqlite3.Connection) -> bool | None:
    """Whether the capture traced CUDA (``META_DATA_CAPTURE``: ``CAPTURE_EVENT_TYPE`` = Cuda, or
    a process's ``COLLECT_CUDA_TRACE`` = true); None when the export does not say."""
    try:
        rows = db.execute("SELECT name, value FROM META_DATA_CAPTURE").fetchall()
    except sqlite3.Error:
        return None
    said = [
        str(value).lower() in ("cuda", "true")
        for name, value in rows
        if name == "CAPTURE_EVENT_TYPE" or str(name).endswith("COLLECT_CUDA_TRACE")
    ]
    return any(said) if said else None


def _concat(parts: list[Events]) -> Events:
    names = [name for name in Events.__struct_fields__ if name != "extra"]
    arrays: dict[str, Any] = {n: np.concatenate([getattr(p, n) for p in parts]) for n in names}
    for name in ID_COLUMNS:  # a wide part makes the whole column wide: narrowed again if it fits
        arrays[name] = narrow(arrays[name])
    return Events(**arrays, extra={})


def _trace(
    export: Export,
    table: Events,
    pid: int,
    rank: int | None,
    infos: dict[tuple[int, int], DeviceInfo],
) -> Trace:
    used = distinct(table.device[table.of_kind(*BUSY_KINDS)]).tolist()
    devices = {
        d: infos.get((pid, d)) or infos.get((-1, d)) or DeviceInfo(d, None, "nvidia", *[None] * 3)
        for d in used
    }
    return Trace(
        source=str(export.path),
        format="nsys",
        schema=export.schema,
        rank=rank,
        world_size=None,
        devices=devices,
        names=export.names,
        events=table,
        steps=steps_of(table, export.names),
        metadata={"pid": pid},
    )


def _attach_metrics(trace: Trace, metrics: dict[int, dict[str, Any]]) -> None:
    mine = {d: m for d, m in metrics.items() if d in trace.devices}
    if mine:
        trace.metadata["gpu_metrics"] = mine
    elif metrics:
        trace.warnings.append(
            f"{trace.source}: GPU metrics were sampled on GPUs {sorted(metrics)}, none of which"
            f" ran this process's work (devices {sorted(trace.devices)})"
        )
