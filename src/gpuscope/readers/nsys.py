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
* ``GPU_METRICS`` (when sampled): ``trace.metadata["gpu_metrics"][device]`` is
  ``{metric name: mean value, "samples": n, "sampling_period_ns": p, "gpu_id": id}``.
  ``OSRT_API`` (when traced): the ten costliest OS runtime calls per process,
  ``trace.metadata["os_runtime_ns"]``.

Speed: one SQL query per table returns plain integer columns (joins, products and NULL handling
done in SQL); rows go straight into numpy. Python touches rows only to intern NVTX texts.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope._arrays import distinct
from gpuscope.errors import CorruptInputError, EmptyTraceError, UnknownFormatError
from gpuscope.model import BUSY_KINDS, CopyDirection, DeviceInfo, Events, Job, Kind, Step, Trace
from gpuscope.readers._io import SQLITE_MAGIC
from gpuscope.readers._links import link_launches

I64 = NDArray[np.int64]

#: Table names nsys writes early in the schema; the sniffer looks for them in the first 64 KB.
_NSYS_MARKERS = (
    b"StringIds",
    b"CUPTI_ACTIVITY_KIND_",
    b"TARGET_INFO_",
    b"NVTX_EVENTS",
    b"META_DATA_EXPORT",
    b"EXPORT_META_DATA",
)
_SUPPORTED_MAJOR = (2, 3)
_ID_MASK = 0xFFFFFF
_BATCH_ROWS = 65536  # rows fetched and converted at a time
_IN_CHUNK = 900  # bound parameters per ``IN (...)`` query: under every SQLite's limit

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
_NVTX_RANGE_FALLBACK = (59, 60, 70, 71)  # Nvtx(t)PushPopRange, Nvtx(t)StartEndRange
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

_ENUM_PREFIX = re.compile(r"^.*_(?:KIND|TYPE)_")

_REQUIRED = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "deviceId", "streamId"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "deviceId", "streamId", "bytes", "copyKind"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end", "deviceId", "streamId"),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ("start", "end", "deviceId", "streamId"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "nameId"),
    "NVTX_EVENTS": ("start", "end"),
}
_KERNEL_NAME_COLUMNS = ("demangledName", "shortName", "mangledName")

# PyTorch operator names, as ``emit_nvtx`` writes them once their suffixes are gone.
_OPERATOR = re.compile(r"^[a-z_][a-z0-9_]*::\w+$")
_NUMBERED_STEP = re.compile(
    r"^(?:ProfilerStep#|(?:train(?:ing)?[ _-]?)?(?:step|iteration|iter)[ _#:=-]*)(\d+)$",
    re.IGNORECASE,
)
_PLAIN_STEP = re.compile(r"^(?:train(?:ing)?[ _-]?)?(?:step|iteration)$", re.IGNORECASE)
_MPI_RANK = re.compile(r"^MPI Rank (\d+)$")


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


# --- the export's shape ------------------------------------------------------------------------


class _Export(msgspec.Struct):
    """What is in the file: tables with their columns, the schema version, interned names."""

    path: Path
    db: sqlite3.Connection
    columns: dict[str, set[str]]
    schema: str
    names: list[str] = msgspec.field(default_factory=list)
    _index: dict[str, int] = msgspec.field(default_factory=dict)
    _strings: dict[int, str] = msgspec.field(default_factory=dict)

    def has(self, table: str) -> bool:
        return table in self.columns

    def require(self, table: str, wanted: Sequence[str]) -> None:
        missing = [c for c in wanted if c not in self.columns[table]]
        if missing:
            raise CorruptInputError(
                self.path, f"Nsight Systems table {table} lacks column(s) {', '.join(missing)}"
            )

    def column_or(self, table: str, column: str, default: str) -> str:
        """``column`` in SQL when the table has it, else a constant."""
        return column if column in self.columns.get(table, ()) else default

    def intern(self, name: str) -> int:
        return self._index.setdefault(name, len(self._index))

    def finish_names(self) -> None:
        self.names = list(self._index)

    def string_ids(self, ids: I64) -> NDArray[np.int32]:
        """Map ``StringIds`` ids to interned name indices, looking each distinct id up once."""
        unique, inverse = np.unique(ids, return_inverse=True)
        strings = self.strings(unique.tolist())
        interned = [self.intern(strings[i]) for i in unique.tolist()]
        return np.asarray(interned, dtype=np.int32)[inverse.reshape(-1)]

    def strings(self, ids: list[int]) -> dict[int, str]:
        """The ``StringIds`` values of ``ids`` (a placeholder for an id the table lacks)."""
        self._load_strings([i for i in ids if i not in self._strings])
        found = {i: self._strings.get(i) for i in ids}
        return {i: v if isinstance(v, str) else f"<unnamed {i}>" for i, v in found.items()}

    def _load_strings(self, wanted: list[int]) -> None:
        if not wanted or not self.has("StringIds"):
            return
        for at in range(0, len(wanted), _IN_CHUNK):
            chunk = wanted[at : at + _IN_CHUNK]
            marks = ",".join("?" * len(chunk))
            sql = f"SELECT id, value FROM StringIds WHERE id IN ({marks})"
            self._strings.update(self.db.execute(sql, chunk).fetchall())

    def enum(self, table: str, fallback: dict[int, str], label: bool = False) -> dict[int, str]:
        """An export's own enum table (``name`` or ``label``), else the documented values."""
        if not self.has(table):
            return fallback
        with_label = label and "label" in self.columns[table]
        column = "label" if with_label else "name"
        rows = self.db.execute(f"SELECT id, {column} FROM {table}").fetchall()
        values = {int(i): str(v) for i, v in rows if i is not None and v is not None}
        if label and not with_label:  # CUDA_MEMOPR_MEMORY_KIND_PAGEABLE -> Pageable
            values = {
                i: _ENUM_PREFIX.sub("", v).replace("_", " ").capitalize() for i, v in values.items()
            }
        return values or fallback


def _inspect(path: Path, db: sqlite3.Connection) -> _Export:
    tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    nsys_tables = ("META_DATA_EXPORT", "EXPORT_META_DATA", "NVTX_EVENTS", "TARGET_INFO_GPU")
    if "StringIds" not in tables or not (
        any(t.startswith("CUPTI_ACTIVITY_KIND_") for t in tables)
        or any(t in tables for t in nsys_tables)
    ):
        raise UnknownFormatError(
            path, "an SQLite database, but not an Nsight Systems export (no nsys tables)"
        )
    columns: dict[str, set[str]] = {t: set() for t in tables}
    sql = (  # every table's columns in one statement, not one PRAGMA per table (47 of them)
        "SELECT m.name, p.name FROM sqlite_master AS m, pragma_table_info(m.name) AS p"
        " WHERE m.type = 'table'"
    )
    for table, column in db.execute(sql):
        columns[table].add(column)
    return _Export(path, db, columns, _schema(path, db, columns))


def _schema(path: Path, db: sqlite3.Connection, columns: dict[str, set[str]]) -> str:
    """``nsys-3.25`` from the export's metadata; ``nsys-unknown`` when it records no version."""
    table = next((t for t in ("META_DATA_EXPORT", "EXPORT_META_DATA") if t in columns), None)
    if table is None:
        return "nsys-unknown"
    sql = f"SELECT value FROM {table} WHERE name = 'EXPORT_SCHEMA_VERSION'"
    row = db.execute(sql).fetchone()
    if row is None:
        return "nsys-unknown"
    version = str(row[0])
    parts = version.split(".")
    if not parts[0].isdigit() or int(parts[0]) not in _SUPPORTED_MAJOR:
        raise UnknownFormatError(
            path,
            f"Nsight Systems export schema {version} is not one gpuscope reads"
            " (2.x to 3.x): re-export it with a matching nsys",
        )
    return "nsys-" + ".".join(parts[:2])


_INTS = msgspec.json.Decoder(list[int])
_TEXTS = msgspec.json.Decoder(list[str])


def _column_batches(
    export: _Export,
    table: str,
    select: Sequence[str],
    where: str = "",
    outer: Sequence[str] | None = None,
) -> Iterator[list[bytes]]:
    """The columns ``select`` of ``table``'s rows (``where`` filtering them), in rowid order, as
    one JSON array per column for each batch of rows; ``outer``: expressions of those columns
    (``c0``, ``c1``, ...) to return instead.

    SQLite builds the arrays (``json_group_array``) inside one step of its own, without the GIL;
    row by row, Python's sqlite3 module takes the GIL back after every row. A bounded batch keeps
    the cost per row the same for a thousand rows or ten million. A batch is a range of rowids,
    found by seeking to the next one present: an ``ORDER BY rowid LIMIT`` batch made SQLite copy
    its rows once more (a third of the time for NVTX ranges).
    """
    wanted = outer or [f"c{i}" for i in range(len(select))]
    arrays = ", ".join(f"json_group_array({expression})" for expression in wanted)
    columns = ", ".join(f"{expression} AS c{i}" for i, expression in enumerate(select))
    condition = f"rowid BETWEEN ? AND ?{f' AND ({where})' if where else ''}"
    sql = f"SELECT count(*), {arrays} FROM (SELECT {columns} FROM {table} WHERE {condition})"
    seek = f"SELECT min(rowid) FROM {table} WHERE rowid > ?"
    last = -(1 << 63)
    while True:
        (first,) = export.db.execute(seek, (last,)).fetchone()
        if first is None:
            return
        last = min(first + _BATCH_ROWS - 1, (1 << 63) - 1)
        count, *texts = export.db.execute(sql, (first, last)).fetchone()
        if count:
            yield [t.encode() if isinstance(t, str) else t for t in texts]


def _int_columns(export: _Export, table: str, select: Sequence[str]) -> list[I64]:
    """The columns ``select`` of ``table``, all integers (NULLs already coalesced), into numpy."""
    parts: list[list[I64]] = []
    try:
        for texts in _column_batches(export, table, select):
            parts.append([np.array(_INTS.decode(t), dtype=np.int64) for t in texts])
    except (msgspec.ValidationError, OverflowError):
        raise CorruptInputError(
            export.path, f"Nsight Systems table {table} holds empty or non-integer times or ids"
        ) from None
    if not parts:
        return [np.zeros(0, dtype=np.int64) for _ in select]
    return [np.concatenate([part[i] for part in parts]) for i in range(len(select))]


# --- device work -------------------------------------------------------------------------------


def _device_columns(
    export: _Export, table: str, extra: Sequence[str]
) -> tuple[dict[str, Any], list[I64]] | None:
    """The columns every device table shares, plus ``extra`` SQL expressions."""
    if not export.has(table):
        return None
    export.require(table, _REQUIRED[table])
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
    got = _int_columns(export, table, select)
    start, dur, device, stream, corr, gpid = got[:6]
    columns = {
        "start_ns": start,
        "dur_ns": dur,  # an end before the start is dropped and counted (_implausible)
        "device": device,
        "stream": stream,
        "correlation": corr,
        "pid": (gpid >> 24) & _ID_MASK,
    }
    return columns, got[6:]


def _kernels(export: _Export) -> Events | None:
    table = "CUPTI_ACTIVITY_KIND_KERNEL"
    if not export.has(table):
        return None
    export.require(table, _REQUIRED[table])
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


def _product(export: _Export, table: str, dims: Sequence[str]) -> str:
    if not all(d in export.columns[table] for d in dims):
        return "-1"
    return "COALESCE(" + " * ".join(dims) + ", -1)"


def _memcpys(export: _Export) -> Events | None:
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
    causes = export.enum("ENUM_CUDA_UNIF_MEM_MIGRATION", _MIGRATION_FALLBACK, label=True)
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
    export: _Export,
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


def _memsets(export: _Export) -> Events | None:
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


def _syncs(export: _Export) -> Events | None:
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


# --- host side ---------------------------------------------------------------------------------


def _runtime(export: _Export) -> Events | None:
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if not export.has(table):
        return None
    export.require(table, _REQUIRED[table])
    correlation = export.column_or(table, "correlationId", "-1")
    thread = export.column_or(table, "globalTid", "0")
    select = ("start", "end - start", f"COALESCE({correlation}, -1)", f"COALESCE({thread}, 0)")
    start, dur, corr, gtid, name_ids = _int_columns(export, table, (*select, "nameId"))
    columns = {
        "kind": np.full(start.shape, Kind.RUNTIME, dtype=np.uint8),
        "name_id": export.string_ids(name_ids),
        "start_ns": start,
        "dur_ns": dur,
        "pid": (gtid >> 24) & _ID_MASK,
        "tid": gtid & _ID_MASK,
        "correlation": corr,
    }
    return Events.from_columns(start.shape[0], columns, {})


class _Nvtx(msgspec.Struct, frozen=True):
    events: Events | None
    ranks: dict[int, int]  # pid -> MPI rank named by the export


def _nvtx(export: _Export) -> _Nvtx:
    table = "NVTX_EVENTS"
    if not export.has(table):
        return _Nvtx(None, {})
    export.require(table, _REQUIRED[table])
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
        for *numbers, texts in _column_batches(export, table, select, where, outer):
            values = _TEXTS.decode(texts)
            for text_value in dict.fromkeys(values):
                distinct.setdefault(text_value, len(distinct))
            ids = np.fromiter(map(distinct.__getitem__, values), np.int64, len(values))
            parts.append([*(np.array(_INTS.decode(n), dtype=np.int64) for n in numbers), ids])
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
        "pid": (gtids >> 24) & _ID_MASK,
        "tid": gtids & _ID_MASK,
    }
    return _Nvtx(Events.from_columns(start.shape[0], columns, {}), ranks)


def _nvtx_text_sql(export: _Export) -> str:
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


def _nvtx_range_types(export: _Export) -> list[int]:
    table = "ENUM_NSYS_EVENT_TYPE"
    if not export.has(table):
        return list(_NVTX_RANGE_FALLBACK)
    known = export.enum(table, {})
    ranges = [i for i, n in known.items() if re.fullmatch(r"Nvtxt?(?:PushPop|StartEnd)Range", n)]
    return ranges or list(_NVTX_RANGE_FALLBACK)


def _nvtx_kinds(export: _Export, raw: list[Any]) -> tuple[NDArray[np.uint8], NDArray[np.int32]]:
    """Per distinct NVTX text: its kind (PyTorch operator or annotation) and interned name."""
    texts = [t if isinstance(t, str) else str(t) for t in raw]
    kinds = np.array(
        [Kind.CPU_OP if _OPERATOR.match(t) else Kind.ANNOTATION for t in texts], dtype=np.uint8
    )
    names = np.array([export.intern(t) for t in texts], dtype=np.int32)
    return kinds, names


def _mpi_ranks(export: _Export, text: str, thread: str) -> dict[int, int]:
    """``MPI Rank N``: the thread name nsys records for each MPI-traced process."""
    sql = f"SELECT DISTINCT {thread}, {text} FROM NVTX_EVENTS WHERE {text} LIKE 'MPI Rank %'"
    ranks: dict[int, int] = {}
    for gtid, name in export.db.execute(sql).fetchall():
        match = _MPI_RANK.match(str(name))
        if match is not None:
            ranks.setdefault((int(gtid) >> 24) & _ID_MASK, int(match.group(1)))
    return ranks


# --- devices, metrics, OS runtime --------------------------------------------------------------


def _device_infos(export: _Export) -> dict[tuple[int, int], DeviceInfo]:
    """Device facts by (pid, CUDA device id); pid -1 when the mapping is the same everywhere."""
    if not export.has("TARGET_INFO_GPU"):
        return {}
    cols = export.columns["TARGET_INFO_GPU"]
    select = [
        "id",
        export.column_or("TARGET_INFO_GPU", "cuDevice", "id"),
        export.column_or("TARGET_INFO_GPU", "name", "NULL"),
        export.column_or("TARGET_INFO_GPU", "smCount", "NULL"),
        export.column_or("TARGET_INFO_GPU", "totalMemory", "NULL"),
        "computeMajor" if {"computeMajor", "computeMinor"} <= cols else "NULL",
        "computeMinor" if {"computeMajor", "computeMinor"} <= cols else "NULL",
    ]
    rows = export.db.execute(f"SELECT {', '.join(select)} FROM TARGET_INFO_GPU").fetchall()
    by_gpu = {int(r[0]): r for r in rows}
    infos: dict[tuple[int, int], DeviceInfo] = {}
    for row in rows:
        infos[(-1, int(row[1]))] = _device_info(int(row[1]), *row[2:])
    for pid, cuda_id, gpu_id in _cuda_device_map(export):
        row = by_gpu.get(gpu_id)
        if row is not None:
            infos[(pid, cuda_id)] = _device_info(cuda_id, *row[2:])
    return infos


def _cuda_device_map(export: _Export) -> list[tuple[int, int, int]]:
    table = "TARGET_INFO_CUDA_DEVICE"
    if not export.has(table) or not {"gpuId", "cudaId", "pid"} <= export.columns[table]:
        return []
    rows = export.db.execute(f"SELECT pid, cudaId, gpuId FROM {table}").fetchall()
    return [(int(p), int(c), int(g)) for p, c, g in rows if None not in (p, c, g)]


def _device_info(
    index: int, name: Any, sms: Any, memory: Any, major: Any, minor: Any
) -> DeviceInfo:
    return DeviceInfo(
        index=index,
        name=str(name) if name else None,
        vendor="nvidia",
        num_sms=int(sms) if sms else None,
        total_memory_bytes=int(memory) if memory else None,
        compute_capability=None if major is None or minor is None else f"{major}.{minor}",
    )


def _gpu_metrics(export: _Export) -> dict[int, dict[str, Any]]:
    """Mean of every sampled GPU metric, per CUDA device (GPU id = ``typeId & 0xFF``)."""
    if not (export.has("GPU_METRICS") and export.has("TARGET_INFO_GPU_METRICS")):
        return {}
    export.require("GPU_METRICS", ("timestamp", "typeId", "metricId", "value"))
    export.require("TARGET_INFO_GPU_METRICS", ("typeId", "metricId", "metricName"))
    db = export.db
    metric_names = {
        (int(t), int(m)): str(n)
        for t, m, n in db.execute(
            "SELECT DISTINCT typeId, metricId, metricName FROM TARGET_INFO_GPU_METRICS"
        )
    }
    cuda_of_gpu = _cuda_of_gpu(export)
    summary: dict[int, dict[str, Any]] = {}
    timing_sql = (
        "SELECT typeId, COUNT(DISTINCT timestamp), MIN(timestamp), MAX(timestamp)"
        " FROM GPU_METRICS GROUP BY typeId"
    )
    for type_id, samples, first_ns, last_ns in db.execute(timing_sql):
        gpu = int(type_id) & 0xFF
        entry = summary.setdefault(cuda_of_gpu.get(gpu, gpu), {"gpu_id": gpu, "samples": 0})
        entry["samples"] += int(samples)
        period = (int(last_ns) - int(first_ns)) // (int(samples) - 1) if samples > 1 else None
        entry["sampling_period_ns"] = period
    means_sql = "SELECT typeId, metricId, AVG(value) FROM GPU_METRICS GROUP BY typeId, metricId"
    for type_id, metric_id, mean in db.execute(means_sql):
        gpu = int(type_id) & 0xFF
        name = metric_names.get((int(type_id), int(metric_id)), f"metric {metric_id}")
        if mean is not None:
            summary[cuda_of_gpu.get(gpu, gpu)][name] = float(mean)
    return summary


def _cuda_of_gpu(export: _Export) -> dict[int, int]:
    if not export.has("TARGET_INFO_GPU") or "cuDevice" not in export.columns["TARGET_INFO_GPU"]:
        return {}
    rows = export.db.execute("SELECT id, cuDevice FROM TARGET_INFO_GPU").fetchall()
    return {int(g): int(c) for g, c in rows if g is not None and c is not None}


def _os_runtime(export: _Export) -> dict[int, dict[str, int]]:
    """Per process, the ten OS runtime calls that took the most time (ns)."""
    table = "OSRT_API"
    if (
        not export.has(table)
        or not {"start", "end", "nameId", "globalTid"} <= export.columns[table]
    ):
        return {}
    sql = (
        f"SELECT (globalTid >> 24) & {_ID_MASK}, nameId, SUM(end - start) FROM {table}"
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


# --- assembling traces -------------------------------------------------------------------------


def _read(path: Path, db: sqlite3.Connection) -> Job:
    export = _inspect(path, db)
    parts = [_kernels(export), _memcpys(export), _memsets(export), _syncs(export)]
    first_pid = next((int(p.pid[0]) for p in parts if p is not None and len(p)), -1)
    parts.append(_um_counters(export, first_pid))
    device_parts = [p for p in parts if p is not None and len(p)]
    runtime = _runtime(export)
    if not device_parts:
        raise EmptyTraceError(path, _no_device_work_reason(runtime))
    nvtx = _nvtx(export)
    host_parts = [p for p in (runtime, nvtx.events) if p is not None and len(p)]
    os_runtime = _os_runtime(export)
    export.finish_names()
    events = _concat(device_parts + host_parts)
    events, notes = _implausible(path, events)
    if not events.of_kind(*BUSY_KINDS).any():
        raise EmptyTraceError(path, "no GPU activity left once implausible times are dropped")
    order = np.argsort(events.start_ns, kind="stable")
    busy = events.of_kind(*BUSY_KINDS)
    infos = _device_infos(export)
    metrics = _gpu_metrics(export)
    traces: list[Trace] = []
    for pid in distinct(events.pid[busy]).tolist():
        rows = order[events.pid[order] == pid]
        table = events.take(rows)
        link_launches(table)
        trace = _trace(export, table, pid, nvtx.ranks.get(pid), infos)
        _attach_metrics(trace, metrics)
        if pid in os_runtime:
            trace.metadata["os_runtime_ns"] = os_runtime[pid]
        trace.warnings.extend(notes)
        traces.append(trace)
    return Job(source=str(path), traces=traces)


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


def _no_device_work_reason(runtime: Events | None) -> str:
    if runtime is not None and len(runtime):
        return (
            "GPU activity was not recorded: the export has CUDA API calls but no kernels,"
            " copies or memsets (profile with nsys --trace=cuda)"
        )
    return "no GPU activity: the export holds no CUDA kernels, copies or memsets"


def _concat(parts: list[Events]) -> Events:
    names = [name for name in Events.__struct_fields__ if name != "extra"]
    arrays: dict[str, Any] = {n: np.concatenate([getattr(p, n) for p in parts]) for n in names}
    return Events(**arrays, extra={})


def _trace(
    export: _Export,
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
        steps=_steps(table, export.names),
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


def _steps(table: Events, names: list[str]) -> list[Step]:
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
