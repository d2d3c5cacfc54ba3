"""The export's shape: which tables and columns it has, its schema version, its interned names,
and the batched column reads every table reader uses (see the package docstring)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope.errors import CorruptInputError, UnknownFormatError

I64 = NDArray[np.int64]

_SUPPORTED_MAJOR = (2, 3)
ID_MASK = 0xFFFFFF
_BATCH_ROWS = 65536  # rows fetched and converted at a time
_IN_CHUNK = 900  # bound parameters per ``IN (...)`` query: under every SQLite's limit

_ENUM_PREFIX = re.compile(r"^.*_(?:KIND|TYPE)_")

REQUIRED = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "deviceId", "streamId"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "deviceId", "streamId", "bytes", "copyKind"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end", "deviceId", "streamId"),
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ("start", "end", "deviceId", "streamId"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "nameId"),
    "NVTX_EVENTS": ("start", "end"),
}


class Export(msgspec.Struct):
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


def inspect_export(path: Path, db: sqlite3.Connection) -> Export:
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
    return Export(path, db, columns, _schema(path, db, columns))


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


INTS = msgspec.json.Decoder(list[int])
TEXTS = msgspec.json.Decoder(list[str])


def column_batches(
    export: Export,
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


def int_columns(export: Export, table: str, select: Sequence[str]) -> list[I64]:
    """The columns ``select`` of ``table``, all integers (NULLs already coalesced), into numpy."""
    parts: list[list[I64]] = []
    try:
        for texts in column_batches(export, table, select):
            parts.append([np.array(INTS.decode(t), dtype=np.int64) for t in texts])
    except (msgspec.ValidationError, OverflowError):
        raise CorruptInputError(
            export.path, f"Nsight Systems table {table} holds empty or non-integer times or ids"
        ) from None
    if not parts:
        return [np.zeros(0, dtype=np.int64) for _ in select]
    return [np.concatenate([part[i] for part in parts]) for i in range(len(select))]
