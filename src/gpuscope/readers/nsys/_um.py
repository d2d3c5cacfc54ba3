"""Unified memory: page migrations the driver made because a processor touched managed memory."""

from __future__ import annotations

import numpy as np

from gpuscope.model import CopyDirection, Events, Kind
from gpuscope.readers.nsys._export import _ID_MASK, _Export

_MIGRATION_FALLBACK = {
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


def _um_counters(export: _Export, default_pid: int) -> Events | None:
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
    pid = np.where(data[:, 5] >= 0, (data[:, 5] >> 24) & _ID_MASK, default_pid)
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
