"""Device memory an Nsight Systems export records (``nsys profile --cuda-memory-usage=true``):
``CUDA_GPU_MEMORY_USAGE_EVENTS``, one row per ``cudaMalloc``/``cudaFree`` (and their async and
driver forms), as the model's :class:`~gpuscope.model.MemoryEvents`.

What this memory is: the driver's allocations. Under PyTorch each is a caching-allocator segment,
so the totals are *reserved* memory (the allocator's blocks inside them are not visible); for a
program that calls ``cudaMalloc`` itself they are its allocations. Both totals columns hold the
running sum per device from the first recorded event (baseline 0: nsys traces a process from its
start), ``memoryOperationType`` 0 allocates and 1 frees. Only device memory (``memKind`` 3
device, 4 array, 6 device static; CUPTI's ``CUpti_ActivityMemoryKind``) is kept: pinned host and
managed memory are not the GPU's. Each event takes the thread of the runtime call it came from
(``correlationId``), so the diagnosis can say what the host was running.
"""

from __future__ import annotations

import numpy as np

from gpuscope.model import Events, Kind, MemoryAction, MemoryEvents
from gpuscope.readers.nsys._export import ID_MASK, Export

TABLE = "CUDA_GPU_MEMORY_USAGE_EVENTS"
DEVICE_KINDS = (3, 4, 6)


def gpu_memory(export: Export) -> dict[int, np.ndarray]:
    """Per process (pid): rows of (start, device, address, signed bytes, correlation)."""
    wanted = {"start", "globalPid", "deviceId", "address", "bytes", "memKind"}
    if not export.has(TABLE) or not wanted | {"memoryOperationType"} <= export.columns[TABLE]:
        return {}
    correlation = export.column_or(TABLE, "correlationId", "-1")
    kinds = ", ".join(map(str, DEVICE_KINDS))
    rows = export.db.execute(
        f"SELECT start, globalPid, deviceId, address,"
        f" CASE memoryOperationType WHEN 0 THEN bytes ELSE -bytes END, COALESCE({correlation}, -1)"
        f" FROM {TABLE} WHERE memKind IN ({kinds}) AND bytes >= 0 ORDER BY start"
    ).fetchall()
    if not rows:
        return {}
    data = np.array(rows, dtype=np.int64)
    pid = (data[:, 1] >> 24) & ID_MASK
    return {int(p): data[pid == p][:, [0, 2, 3, 4, 5]] for p in np.unique(pid)}


def memory_events(rows: np.ndarray, table: Events) -> MemoryEvents:
    """A process's rows as events; the thread from the runtime call with the same correlation."""
    signed = rows[:, 3]
    device = rows[:, 1]
    totals = np.zeros(len(rows), dtype=np.int64)
    for d in np.unique(device):
        mine = device == d
        totals[mine] = np.cumsum(signed[mine])
    runtime = np.flatnonzero(table.of_kind(Kind.RUNTIME) & (table.correlation >= 0))
    by_correlation = dict(
        zip(table.correlation[runtime].tolist(), table.tid[runtime].tolist(), strict=True)
    )
    tid = [by_correlation.get(c, -1) for c in rows[:, 4].tolist()]
    return MemoryEvents.from_columns(
        len(rows),
        {
            "action": np.where(signed >= 0, MemoryAction.ALLOC, MemoryAction.FREE_COMPLETED),
            "device": device.astype(np.int32),
            "address": rows[:, 2],
            "size_bytes": np.abs(signed),
            "time_ns": rows[:, 0],
            "tid": np.asarray(tid, dtype=np.int64),
            "allocated_bytes": totals,
            "reserved_bytes": totals,
        },
    )
