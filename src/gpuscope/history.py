"""The run history: each saved run's summary in a local SQLite database.

Contract:

* Where: ``$GPUSCOPE_HISTORY`` if set, else ``history.sqlite`` in platformdirs' user data
  directory for gpuscope (:func:`default_path`).
* One row per run (:class:`StoredRun`): id, UTC time, label, git commit of the working directory
  (``None`` outside a repository), SHA-256 of the source file(s), device, metrics (the whole
  :class:`~gpuscope.compare.diff.RunSummary` as JSON, per-step values included, so that a saved
  run diffs like a file) and findings (JSON, also inside metrics; kept apart for queries).
* The schema is versioned with ``PRAGMA user_version``; :data:`MIGRATIONS` lists every step from
  an empty file to the current version, each applied once, in order, in its own transaction. A
  database from a newer gpuscope is refused (:class:`~gpuscope.errors.InputError`), never
  rewritten.
* Several processes may write at once: the database is in WAL mode, every connection waits up to
  :data:`BUSY_TIMEOUT_MS` for a lock, and writes take the write lock up front
  (``BEGIN IMMEDIATE``), so a writer never fails half-way. A lock still held after the wait is
  an :class:`~gpuscope.errors.InputError` (one line), and the run is not saved.
* Reading (``History(readonly=True)``) never writes: a history on a read-only disk, or one a
  newer schema's migration has not reached, can be listed. A missing one reads as empty.
* A row that does not decode (a corrupt or hand-edited one) is skipped and counted in
  :attr:`History.skipped`; a ``runs`` table of another shape is one line, not a traceback.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

import msgspec

from gpuscope._files import input_role, note_input_path
from gpuscope.compare.diff import RunSummary
from gpuscope.errors import InputError

ENV_VAR = "GPUSCOPE_HISTORY"
BUSY_TIMEOUT_MS = 30_000
_HASH_CHUNK_BYTES = 1 << 20


def default_path() -> Path:
    """``$GPUSCOPE_HISTORY``, else ``<user data dir>/gpuscope/history.sqlite``."""
    configured = os.environ.get(ENV_VAR)
    if configured:
        return Path(configured).expanduser()
    from platformdirs import user_data_path  # noqa: PLC0415  (only when the history is used)

    return user_data_path("gpuscope", appauthor=False) / "history.sqlite"


class StoredRun(msgspec.Struct, frozen=True):
    id: int
    created_at: str  # ISO 8601, UTC
    label: str | None
    git_commit: str | None
    source: str
    source_sha256: str | None
    device: str | None
    summary: RunSummary


def _create_runs(db: sqlite3.Connection) -> None:
    db.execute(
        """CREATE TABLE runs (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            created_at TEXT NOT NULL,
            label TEXT,
            git_commit TEXT,
            source TEXT NOT NULL,
            source_sha256 TEXT,
            device TEXT,
            metrics TEXT NOT NULL,
            findings TEXT NOT NULL
        )"""
    )


def _index_labels(db: sqlite3.Connection) -> None:
    db.execute("CREATE INDEX runs_by_label ON runs (label, id)")


#: Migration ``i`` takes a database from version ``i`` to ``i + 1``.
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_create_runs, _index_labels]
SCHEMA_VERSION = len(MIGRATIONS)


class History:
    """A connection to one history database, migrated to :data:`SCHEMA_VERSION` on open."""

    def __init__(
        self, path: Path | None = None, *, upto: int = SCHEMA_VERSION, readonly: bool = False
    ) -> None:
        self.path = path or default_path()
        #: Rows that did not decode, skipped by :meth:`runs`.
        self.skipped = 0
        _refuse_odd(self.path, writing=not readonly)
        note_input_path(self.path, "history")  # no command's output may be written over it
        try:
            if readonly:
                self._db = _open_readonly(self.path)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000)
            self._db.isolation_level = None  # explicit transactions only
            # Text that is not UTF-8 (a corrupt page) reads with U+FFFD; its row then fails to
            # decode and is skipped, never a traceback.
            self._db.text_factory = lambda raw: raw.decode("utf-8", "replace")
            self._db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            if readonly:
                self._check_version()
                if self.version == 0:  # missing or empty: nothing saved yet
                    self._db.close()
                    self._db = sqlite3.connect(":memory:")
                    self._db.isolation_level = None
                    self._migrate(upto)
            else:
                self._set_up(upto)
        except sqlite3.OperationalError as error:
            raise InputError(self.path, _locked_or(error, "cannot be opened")) from None
        except (sqlite3.DatabaseError, UnicodeDecodeError) as error:
            raise InputError(
                self.path, f"not a gpuscope history database ({_said(error)})"
            ) from None
        except OSError as error:
            raise InputError(self.path, f"cannot be opened ({error.strerror or error})") from None

    def _set_up(self, upto: int) -> None:
        """WAL mode and the migrations, retried while another connection holds the file: SQLite
        answers "locked" at once, without waiting, to a connection that would deadlock (two
        processes creating one history together both switch it to WAL)."""
        deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
        pause = 0.005
        while True:
            try:
                self._db.execute("PRAGMA journal_mode = WAL")
                self._migrate(upto)
                return
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) and "busy" not in str(error):
                    raise
                if time.monotonic() + pause > deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 0.25)

    def __enter__(self) -> History:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    @property
    def version(self) -> int:
        return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _check_version(self) -> None:
        if self.version > SCHEMA_VERSION:
            raise InputError(
                self.path,
                f"history schema version {self.version} is newer than this gpuscope's"
                f" ({SCHEMA_VERSION}): upgrade gpuscope",
            )

    def _migrate(self, upto: int) -> None:
        self._check_version()
        while self.version < upto:
            with self._write() as db:
                current = int(db.execute("PRAGMA user_version").fetchone()[0])
                if current >= upto:  # another process migrated meanwhile
                    break
                MIGRATIONS[current](db)
                db.execute(f"PRAGMA user_version = {current + 1}")

    def save(
        self,
        summary: RunSummary,
        *,
        label: str | None = None,
        git_commit: str | None = None,
        source_sha256: str | None = None,
        created_at: datetime | None = None,
    ) -> int:
        """Store one run; returns its id."""
        when = (created_at or datetime.now(UTC)).isoformat(timespec="seconds")
        metrics = msgspec.json.encode(summary).decode()
        findings = msgspec.json.encode(summary.findings).decode()
        try:
            return self._insert(when, label, git_commit, source_sha256, summary, metrics, findings)
        except sqlite3.OperationalError as error:
            raise InputError(self.path, _locked_or(error, "the run was not saved")) from None
        except (sqlite3.DatabaseError, UnicodeDecodeError) as error:
            raise InputError(
                self.path,
                f"not a gpuscope history database ({_said(error)}); the run was not saved",
            ) from None

    def _insert(
        self,
        when: str,
        label: str | None,
        git_commit: str | None,
        source_sha256: str | None,
        summary: RunSummary,
        metrics: str,
        findings: str,
    ) -> int:
        with self._write() as db:
            cursor = db.execute(
                "INSERT INTO runs (created_at, label, git_commit, source, source_sha256, device,"
                " metrics, findings) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    when,
                    label,
                    git_commit,
                    summary.source,
                    source_sha256,
                    summary.device,
                    metrics,
                    findings,
                ),
            )
            run_id = cursor.lastrowid
        if run_id is None:  # pragma: no cover - sqlite always sets it after an INSERT
            raise RuntimeError("sqlite returned no row id")
        return run_id

    def get(self, run_id: int) -> StoredRun:
        if not 0 < run_id < 2**63:  # SQLite's integers are 64-bit: no run has such an id
            raise InputError(self.path, f"no saved run with id {run_id}")
        sql = f"SELECT {_COLUMNS} FROM runs WHERE id = ?"
        row = self._query(lambda: self._db.execute(sql, (run_id,)).fetchone())
        if row is None:
            raise InputError(self.path, f"no saved run with id {run_id}")
        stored = _stored_or_none(row)
        if stored is None:
            raise InputError(self.path, f"saved run {run_id} is corrupt (its row does not decode)")
        return stored

    def runs(self, *, label: str | None = None, limit: int | None = None) -> list[StoredRun]:
        """Saved runs, newest first."""
        sql = f"SELECT {_COLUMNS} FROM runs"
        params: list[object] = []
        if label is not None:
            sql += " WHERE label = ?"
            params.append(label)
        sql += " ORDER BY id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        rows = self._query(lambda: self._db.execute(sql, params).fetchall())
        stored = [_stored_or_none(row) for row in rows]
        self.skipped = sum(s is None for s in stored)
        return [s for s in stored if s is not None]

    def _query(self, query: Callable[[], T]) -> T:
        """A read; a ``runs`` table of another shape or a locked file is one line."""
        try:
            return query()
        except sqlite3.OperationalError as error:
            raise InputError(self.path, _locked_or(error, "not a gpuscope history")) from None
        except (sqlite3.DatabaseError, UnicodeDecodeError) as error:
            raise InputError(
                self.path, f"not a gpuscope history database ({_said(error)})"
            ) from None


T = TypeVar("T")


def _said(error: Exception) -> str:
    """What SQLite said; one whose message quotes bytes that are not UTF-8 (a corrupt schema)
    reaches Python as a UnicodeDecodeError."""
    if isinstance(error, UnicodeDecodeError):
        return "corrupt: its schema does not decode"
    return str(error)


def _locked_or(error: sqlite3.Error, otherwise: str) -> str:
    """One line for an SQLite error: a lock held past the wait, or ``otherwise``."""
    if "locked" in str(error) or "busy" in str(error):
        return (
            f"locked by another gpuscope for over {BUSY_TIMEOUT_MS // 1000} s ({error});"
            f" {otherwise if 'saved' in otherwise else 'try again'}"
        )
    return f"{otherwise} ({error})"


def _refuse_odd(path: Path, *, writing: bool) -> None:
    """A history is a regular file (or none yet): a FIFO would block every command that reads
    it, a device or a folder is no database; and a run is never saved into a file the command
    read (``GPUSCOPE_HISTORY`` naming the trace being diagnosed)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except (OSError, ValueError) as error:
        why = getattr(error, "strerror", None) or error
        raise InputError(path, f"cannot be opened ({why})") from None
    if not stat.S_ISREG(mode):
        raise InputError(
            path, f"is not a regular file: {ENV_VAR} must name a history database (or none yet)"
        )
    if writing and input_role(path) not in (None, "history"):
        raise InputError(path, f"is one of the command's inputs, not a history ({ENV_VAR})")


def _open_readonly(path: Path) -> sqlite3.Connection:
    """Open for reading only, writing nothing: no WAL switch, no migration, and no ``-wal`` or
    ``-shm`` file made beside it. Without a ``-wal`` file no writer is in the middle of a
    transaction, so the file is read as immutable (SQLite then makes no lock files); with one, it
    is opened read-only (the files are there already). Where the folder is read-only, immutable."""
    if not path.exists():
        return sqlite3.connect(":memory:")
    uri = f"file:{quote(str(path.resolve()))}"
    if not Path(f"{path.resolve()}-wal").exists():
        return sqlite3.connect(f"{uri}?immutable=1", uri=True)
    try:
        db = sqlite3.connect(f"{uri}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
        db.execute("PRAGMA user_version").fetchone()
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.OperationalError:
        db = sqlite3.connect(f"{uri}?immutable=1", uri=True)
    return db


_COLUMNS = "id, created_at, label, git_commit, source, source_sha256, device, metrics, findings"


def _stored_or_none(row: tuple[object, ...]) -> StoredRun | None:
    """A row as a run, or None when it does not decode (corrupt, or written by hand)."""
    try:
        return _stored(row)
    except (msgspec.DecodeError, ValueError, TypeError):
        return None


def _stored(row: tuple[object, ...]) -> StoredRun:
    run_id, created_at, label, commit, source, sha, device, metrics, _findings = row
    return StoredRun(
        id=int(str(run_id)),
        created_at=str(created_at),
        label=None if label is None else str(label),
        git_commit=None if commit is None else str(commit),
        source=str(source),
        source_sha256=None if sha is None else str(sha),
        device=None if device is None else str(device),
        summary=msgspec.json.decode(str(metrics), type=RunSummary),
    )


_RUN_ID = re.compile(r"#?([0-9]{1,30})")


def run_id(ref: str) -> int | None:
    """The saved-run id a reference names (``12`` or ``#12``, ASCII digits), else None."""
    match = _RUN_ID.fullmatch(ref)
    return int(match.group(1)) if match else None


def git_commit(directory: Path | None = None) -> str | None:
    """HEAD of the git working directory containing ``directory`` (default: the current one)."""
    try:
        result = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=directory or Path.cwd(),
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = result.stdout.strip()
    return commit if result.returncode == 0 and commit else None


def source_sha256(path: Path) -> str:
    """SHA-256 of a file, or of a folder's files (names and contents, in name order)."""
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for file in files:
        if path.is_dir():
            digest.update(str(file.relative_to(path)).encode() + b"\0")
        with file.open("rb") as handle:
            while chunk := handle.read(_HASH_CHUNK_BYTES):
                digest.update(chunk)
    return digest.hexdigest()
