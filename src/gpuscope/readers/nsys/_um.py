"""Unified memory: page migrations the driver made because a processor touched managed memory."""

from __future__ import annotations

from typing import Any

import numpy as np

from gpuscope.model import CopyDirection, Events, Kind
from gpuscope.readers.nsys._export import ID_MASK, Export

MIGRATION_FALLBACK = {
    0: "Unknown",
    1: "User prefetch",
    2: "Page fault",
    3: "Speculative prefetch",
    4: "Eviction",
    5: "Access counters",
}
#: CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND values that are byte transfers (the rest count
#: faults or thrashing, not device time).
_UM_TRANSFER_KINDS = {1: ("HtoD", CopyDirection.H2D), 2: ("DtoH", CopyDirection.D2H)}


def um_counters(export: Export, default_pid: int) -> Events | None:
    """Byte transfers of the older unified-memory table, as copies on no stream, of the process
    the table names (``globalPid``), else of the process whose device work came first."""
    table = "CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER"
    if (
        not export.has(table)
        or not {"start", "end", "counterKind", "value"} <= export.columns[table]
    ):
        return None
    device = export.column_or(table, "deviceId", export.column_or(table, "dstId", "0"))
    gpid = export.column_or(table, "globalPid", "-1")
    rows = export.db.execute(
        f"SELECT start, end, counterKind, value, COALESCE({device}, 0), COALESCE({gpid}, -1)"
        f" FROM {table}"
        " WHERE counterKind IN (1, 2) AND end > start ORDER BY start"
    ).fetchall()
    if not rows:
        return None
    data = np.array(rows, dtype=np.int64)
    names = {
        k: export.intern(f"Unified Memory {short} (Page fault)")
        for k, (short, _) in _UM_TRANSFER_KINDS.items()
    }
    kinds = data[:, 2]
    pid = np.where(data[:, 5] >= 0, (data[:, 5] >> 24) & ID_MASK, default_pid)
    columns = {
        "kind": np.full(len(rows), Kind.MEMCPY, dtype=np.uint8),
        "name_id": np.array([names[int(k)] for k in kinds], dtype=np.int32),
        "start_ns": data[:, 0],
        "dur_ns": data[:, 1] - data[:, 0],
        "device": data[:, 4].astype(np.int32),
        "stream": np.full(len(rows), -1, dtype=np.int64),
        "pid": pid,
        "bytes": data[:, 3],
        "copy_direction": np.array([_UM_TRANSFER_KINDS[int(k)][1] for k in kinds], dtype=np.uint8),
    }
    return Events.from_columns(len(rows), columns, {})


#: How many faulting code sites are kept per process (the most frequent first).
FAULT_SITES = 5


def um_fault_counts(export: Export) -> dict[int, dict[str, Any]]:
    """Unified-memory page faults per process, from the tables ``nsys profile
    --cuda-um-cpu-page-faults=true --cuda-um-gpu-page-faults=true`` adds:

    * ``CUDA_UM_CPU_PAGE_FAULT_EVENTS`` (``start, globalPid, address, originalFaultPc,
      CpuInstruction, module``): one row per CPU access to a managed page resident on a GPU;
      the function (``CpuInstruction``, a ``StringIds`` id) and module that touched it. Each
      makes the driver migrate the page back, with the thread stalled meanwhile.
    * ``CUDA_UM_GPU_PAGE_FAULT_EVENTS`` (``start, end, globalPid, deviceId, address,
      numberOfPageFaults, faultAccessType``): one row per group of faults a kernel took on pages
      resident elsewhere; the kernel's warps wait while the driver migrates them.

    Returned: ``{pid: {"cpu_page_faults": n, "cpu_fault_sites": {"function (module)": n},
    "gpu_page_faults": n, "gpu_fault_groups": n, "gpu_fault_ns": ns}}``, counting only the tables
    present.
    """
    faults: dict[int, dict[str, Any]] = {}
    cpu = "CUDA_UM_CPU_PAGE_FAULT_EVENTS"
    if export.has(cpu) and {"start", "globalPid"} <= export.columns[cpu]:
        function = f"COALESCE({export.column_or(cpu, 'CpuInstruction', 'NULL')}, -1)"
        module = f"COALESCE({export.column_or(cpu, 'module', 'NULL')}, -1)"
        rows = export.db.execute(
            f"SELECT (globalPid >> 24) & {ID_MASK}, {function}, {module}, COUNT(*) FROM {cpu}"
            " GROUP BY 1, 2, 3"
        ).fetchall()
        ids = sorted({int(r[i]) for r in rows for i in (1, 2) if int(r[i]) >= 0})
        strings = export.strings(ids)
        for pid, function_id, module_id, n in rows:
            entry = faults.setdefault(int(pid), {"cpu_page_faults": 0, "cpu_fault_sites": {}})
            entry["cpu_page_faults"] += int(n)
            site = _site(strings.get(int(function_id)), strings.get(int(module_id)))
            entry["cpu_fault_sites"][site] = entry["cpu_fault_sites"].get(site, 0) + int(n)
        for entry in faults.values():
            top = sorted(entry["cpu_fault_sites"].items(), key=lambda kv: -kv[1])[:FAULT_SITES]
            entry["cpu_fault_sites"] = dict(top)
    gpu = "CUDA_UM_GPU_PAGE_FAULT_EVENTS"
    if export.has(gpu) and {"start", "end", "globalPid"} <= export.columns[gpu]:
        count = f"COALESCE({export.column_or(gpu, 'numberOfPageFaults', '1')}, 1)"
        rows = export.db.execute(
            f"SELECT (globalPid >> 24) & {ID_MASK}, SUM({count}), COUNT(*),"
            f" SUM(MAX(end - start, 0)) FROM {gpu} GROUP BY 1"
        ).fetchall()
        for pid, n, groups, ns in rows:
            entry = faults.setdefault(int(pid), {})
            entry.update(gpu_page_faults=int(n), gpu_fault_groups=int(groups), gpu_fault_ns=int(ns))
    return faults


def _site(function: str | None, module: str | None) -> str:
    """``softmax_check (app)``: the function that touched the page and its module's file name."""
    where = function if function and not function.startswith("<unnamed") else "unknown function"
    if module and not module.startswith("<unnamed"):
        where += f" ({module.rsplit('/', 1)[-1]})"
    return where
