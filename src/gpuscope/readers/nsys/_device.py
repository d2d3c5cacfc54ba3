"""Device work: kernels, copies, memsets and synchronisations, one ``Events`` table each."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from gpuscope.model import CopyDirection, Events, Kind
from gpuscope.readers.nsys._export import I64, ID_MASK, REQUIRED, Export, int_columns
from gpuscope.readers.nsys._um import MIGRATION_FALLBACK

# Fallbacks when an export has no enum tables (schema 2.x): nsys's documented values.
_MEMCPY_OPER_FALLBACK = {
    0: "UNKNOWN",
    1: "HTOD",
    2: "DTOH",
    3: "HTOA",
    4: "ATOH",
    5: "ATOA",
    6: "ATOD",
    7: "DTOA",
    8: "DTOD",
    9: "HTOH",
    10: "PTOP",
    11: "UVM_HTOD",
    12: "UVM_DTOH",
    13: "UVM_DTOD",
}
_MEM_KIND_FALLBACK = {
    0: "Pageable",
    1: "Pinned",
    2: "Device",
    3: "Array",
    4: "Managed",
    5: "Device Static",
    6: "Managed Static",
    7: "Unknown",
}
_SYNC_TYPE_FALLBACK = {
    0: "Unknown",
    1: "Event sync",
    2: "Stream wait sync",
    3: "Stream sync",
    4: "Context sync",
}
_COPY_CODE = {
    "HTOD": ("HtoD", CopyDirection.H2D),
    "HTOA": ("HtoA", CopyDirection.H2D),
    "UVM_HTOD": ("HtoD", CopyDirection.H2D),
    "DTOH": ("DtoH", CopyDirection.D2H),
    "ATOH": ("AtoH", CopyDirection.D2H),
    "UVM_DTOH": ("DtoH", CopyDirection.D2H),
    "DTOD": ("DtoD", CopyDirection.D2D),
    "ATOD": ("AtoD", CopyDirection.D2D),
    "DTOA": ("DtoA", CopyDirection.D2D),
    "ATOA": ("AtoA", CopyDirection.D2D),
    "UVM_DTOD": ("DtoD", CopyDirection.D2D),
    "PTOP": ("PtoP", CopyDirection.P2P),
    "HTOH": ("HtoH", CopyDirection.OTHER),
}

_KERNEL_NAME_COLUMNS = ("demangledName", "shortName", "mangledName")


def _device_columns(
    export: Export, table: str, extra: Sequence[str]
) -> tuple[dict[str, Any], list[I64]] | None:
    """The columns every device table shares, plus ``extra`` SQL expressions."""
    if not export.has(table):
        return None
    export.require(table, REQUIRED[table])
    correlation = export.column_or(table, "correlationId", "-1")
    global_pid = export.column_or(table, "globalPid", "0")
    select = [
        "start",
        "end - start",
        "deviceId",
        "streamId",
        f"COALESCE({correlation}, -1)",
        f"COALESCE({global_pid}, 0)",
        *extra,
    ]
    got = int_columns(export, table, select)
    start, dur, device, stream, corr, gpid = got[:6]
    columns = {
        "start_ns": start,
        "dur_ns": dur,  # an end before the start is dropped and counted (_implausible)
        "device": device,
        "stream": stream,
        "correlation": corr,
        "pid": (gpid >> 24) & ID_MASK,
    }
    return columns, got[6:]


def kernel_events(export: Export) -> Events | None:
    table = "CUPTI_ACTIVITY_KIND_KERNEL"
    if not export.has(table):
        return None
    export.require(table, REQUIRED[table])
    present = [c for c in _KERNEL_NAME_COLUMNS if c in export.columns[table]]
    if not present:
        export.require(table, ("demangledName",))
    name = f"COALESCE({', '.join(present)}, -1)"
    grid = _product(export, table, ("gridX", "gridY", "gridZ"))
    block = _product(export, table, ("blockX", "blockY", "blockZ"))
    got = _device_columns(export, table, (name, grid, block))
    if got is None:
        return None
    columns, (name_ids, grid_blocks, block_threads) = got
    columns.update(
        kind=np.full(name_ids.shape, Kind.KERNEL, dtype=np.uint8),
        name_id=export.string_ids(name_ids),
        grid_blocks=grid_blocks,
        block_threads=block_threads,
    )
    return Events.from_columns(name_ids.shape[0], columns, {})


def _product(export: Export, table: str, dims: Sequence[str]) -> str:
    if not all(d in export.columns[table] for d in dims):
        return "-1"
    return "COALESCE(" + " * ".join(dims) + ", -1)"


def memcpys(export: Export) -> Events | None:
    table = "CUPTI_ACTIVITY_KIND_MEMCPY"
    src = f"COALESCE({export.column_or(table, 'srcKind', '-1')}, -1)"
    dst = f"COALESCE({export.column_or(table, 'dstKind', '-1')}, -1)"
    cause = f"COALESCE({export.column_or(table, 'migrationCause', '-1')}, -1)"
    got = _device_columns(export, table, ("bytes", "copyKind", src, dst, cause))
    if got is None:
        return None
    columns, (nbytes, copy_kind, src_kind, dst_kind, migration) = got
    operations = export.enum("ENUM_CUDA_MEMCPY_OPER", _MEMCPY_OPER_FALLBACK)
    memory = export.enum("ENUM_CUDA_MEM_KIND", _MEM_KIND_FALLBACK, label=True)
    causes = export.enum("ENUM_CUDA_UNIF_MEM_MIGRATION", MIGRATION_FALLBACK, label=True)
    # One decision per distinct (copy kind, source kind, destination kind, migration cause).
    keys = np.stack([copy_kind, src_kind, dst_kind, migration], axis=1)
    unique, inverse = np.unique(keys, axis=0, return_inverse=True)
    decoded = [_decode_copy(export, operations, memory, causes, *map(int, k)) for k in unique]
    inverse = inverse.reshape(-1)
    columns.update(
        kind=np.full(nbytes.shape, Kind.MEMCPY, dtype=np.uint8),
        name_id=np.array([d[0] for d in decoded], dtype=np.int32)[inverse],
        copy_direction=np.array([d[1] for d in decoded], dtype=np.uint8)[inverse],
        pageable=np.array([d[2] for d in decoded], dtype=np.bool_)[inverse],
        bytes=nbytes,
    )
    return Events.from_columns(nbytes.shape[0], columns, {})


def _decode_copy(
    export: Export,
    operations: dict[int, str],
    memory: dict[int, str],
    causes: dict[int, str],
    copy_kind: int,
    src_kind: int,
    dst_kind: int,
    migration: int,
) -> tuple[int, CopyDirection, bool]:
    """(name id, direction, pageable host memory) of one kind of copy."""
    operation = operations.get(copy_kind, "UNKNOWN").upper().removeprefix("CUDA_MEMCPY_KIND_")
    short, direction = _COPY_CODE.get(operation, ("Unknown", CopyDirection.OTHER))
    if operation.startswith("UVM_"):
        name = f"Unified Memory {short} ({causes.get(migration, 'Unknown')})"
        return export.intern(name), direction, False
    src = memory.get(src_kind, "Unknown")
    dst = memory.get(dst_kind, "Unknown")
    pageable = "pageable" in (src.lower(), dst.lower())
    name = f"Memcpy {short} ({src} -> {dst})"
    return export.intern(name), direction, pageable


def memset_events(export: Export) -> Events | None:
    table = "CUPTI_ACTIVITY_KIND_MEMSET"
    nbytes = export.column_or(table, "bytes", "-1")
    kind = export.column_or(table, "memKind", "-1")
    got = _device_columns(export, table, (f"COALESCE({nbytes}, -1)", f"COALESCE({kind}, -1)"))
    if got is None:
        return None
    columns, (byte_count, mem_kind) = got
    memory = export.enum("ENUM_CUDA_MEM_KIND", _MEM_KIND_FALLBACK, label=True)
    unique, inverse = np.unique(mem_kind, return_inverse=True)
    names = [export.intern(f"Memset ({memory.get(int(k), 'Unknown')})") for k in unique]
    columns.update(
        kind=np.full(byte_count.shape, Kind.MEMSET, dtype=np.uint8),
        name_id=np.array(names, dtype=np.int32)[inverse.reshape(-1)],
        bytes=byte_count,
    )
    return Events.from_columns(byte_count.shape[0], columns, {})


def syncs(export: Export) -> Events | None:
    table = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
    sync_type = export.column_or(table, "syncType", "0")
    got = _device_columns(export, table, (f"COALESCE({sync_type}, 0)",))
    if got is None:
        return None
    columns, (types,) = got
    labels = export.enum("ENUM_CUPTI_SYNC_TYPE", _SYNC_TYPE_FALLBACK, label=True)
    unique, inverse = np.unique(types, return_inverse=True)
    names = [export.intern(labels.get(int(t), "Unknown sync")) for t in unique]
    columns.update(
        kind=np.full(types.shape, Kind.SYNC, dtype=np.uint8),
        name_id=np.array(names, dtype=np.int32)[inverse.reshape(-1)],
    )
    return Events.from_columns(types.shape[0], columns, {})
