"""Fleet: diagnose many jobs and keep one row per job and one row per finding.

Contract:

* :func:`expand` turns paths, globs and URLs into inputs (a file, a folder of ranks, a URL);
  :func:`diagnose_input` diagnoses one input and never raises for a bad input: the error becomes
  the job row (``status="error"``, ``error`` says why). It is a plain top-level function of
  picklable arguments, so that every engine (a local process pool, Ray tasks) runs the same code
  and produces identical rows.
* :func:`run` maps :func:`diagnose_input` over inputs with an :class:`Engine` and reports each
  finished input to a callback (the CLI's progress bar); rows come back in input order.
* :func:`write` / :func:`read` store a :class:`FleetTable`: Parquet (``pyarrow``, the ``fleet``
  extra) as ``NAME.parquet`` (jobs) plus ``NAME.findings.parquet`` (findings), or one JSON
  document (``gpuscope/fleet-1``) when the name ends in ``.json``. :func:`pending` drops the inputs
  a previous run already stored with the same path, size and mtime (resuming).
* Causes map to the categories of Gao et al., "An Empirical Study on Low GPU Utilization of Deep
  Learning Jobs" (ICSE 2024): data / model / job / library, with the study's subcategory names
  (:data:`ICSE_CATEGORIES`).

Money and time: ``lost_gpu_hours`` is the findings' lost device time (summed over GPUs) in hours,
``lost_usd`` what that time cost at the job's price per GPU-hour: time lost, not a saving (fixes
overlap, and time off a step's critical path saves nothing). ``saving_usd_per_gpu_hour`` is the
diagnosis's headline, what fixing every finding is predicted to save (the all-fixes replay,
priced), and ``saving_usd`` that over the job's analysed GPU-hours. Dollars are None when the
price is unknown; savings are None when no fix could be replayed. Tables of ``gpuscope/fleet-1``
(``wasted_gpu_hours``, ``wasted_usd``: the same lost time) are read as lost time, with no saving.
"""

from __future__ import annotations

import glob
import importlib
import json
import math
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import NoneType
from typing import TYPE_CHECKING, Any, get_args

import msgspec

from gpuscope import causes, engines
from gpuscope._files import write_output
from gpuscope.diagnosis import money
from gpuscope.diagnosis.money import NS_PER_HOUR
from gpuscope.engines import Engine
from gpuscope.errors import InputError

if TYPE_CHECKING:
    from gpuscope.diagnosis import Diagnosis
    from gpuscope.diagnosis.findings import Finding

SCHEMA = "gpuscope/fleet-2"
#: Earlier tables this version reads (their lost time renamed, no saving).
OLD_SCHEMAS = ("gpuscope/fleet-1",)
#: Epoch times before 2001 are trace-relative clocks, not dates.
_MIN_EPOCH_NS = 10**18

#: cause -> (ICSE 2024 category, the study's subcategory). Idle waiting on input data and host to
#: device copies are the study's "data" issues; collectives are its "data exchange"; batch size,
#: checkpointing and memory are "model" issues; what the trace cannot explain is left to "job".
ICSE_CATEGORIES: dict[str, tuple[str, str]] = causes.icse_categories()  # data/causes.csv


def category(cause: str) -> tuple[str, str]:
    """The ICSE 2024 category and subcategory of a cause; unmapped causes are ``job``."""
    return ICSE_CATEGORIES.get(cause, ("job", "other"))


class JobRow(msgspec.Struct, frozen=True):
    path: str
    size_bytes: int | None  # None for a URL or a vanished path
    mtime_ns: int | None
    status: str  # "ok" | "error"
    error: str | None = None
    devices: str | None = None  # distinct device names, comma-separated
    gpus: int | None = None
    span_ns: int | None = None  # first to last device activity (or sample) over the job
    idle_pct: float | None = None
    bound: str | None = None
    gpu_hour_usd: float | None = None
    lost_gpu_hours: float | None = None  # the findings' lost device time, summed over GPUs
    lost_usd: float | None = None  # that time priced: what it cost, not what a fix saves
    saving_usd_per_gpu_hour: float | None = None  # all fixes' predicted saving (the headline)
    saving_usd: float | None = None  # that over the job's analysed GPU-hours
    date: str | None = None  # ISO 8601 UTC
    date_source: str | None = None  # "trace" | "samples" | "mtime"
    top_cause: str | None = None
    top_category: str | None = None


class FindingRow(msgspec.Struct, frozen=True):
    """One finding of one job, as a row of the fleet table (made by :func:`finding_row`)."""

    path: str
    pattern: str
    cause: str
    category: str
    subcategory: str
    lost_ns: int
    share_pct: float
    cost_usd_per_gpu_hour: float | None


# Mutable: the table a fleet scan builds up batch by batch (extend).
class FleetTable(msgspec.Struct):
    jobs: list[JobRow] = msgspec.field(default_factory=list)
    findings: list[FindingRow] = msgspec.field(default_factory=list)

    def extend(self, other: FleetTable) -> None:
        self.jobs.extend(other.jobs)
        self.findings.extend(other.findings)


# --- inputs -------------------------------------------------------------------------------------


def is_url(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def expand(patterns: Iterable[str]) -> list[str]:
    """Paths and glob matches in the order given, each once; URLs pass through. A pattern that
    matches nothing stays, so that it becomes an error row rather than vanishing."""
    seen: dict[str, None] = {}
    for pattern in patterns:
        matches = [] if is_url(pattern) else sorted(glob.glob(pattern, recursive=True))
        for path in matches or [pattern]:
            seen.setdefault(path, None)
    return list(seen)


def fingerprint(path: str) -> tuple[int | None, int | None]:
    """(size in bytes, mtime in ns) of a local path; a folder's size sums its files."""
    if is_url(path):
        return None, None
    try:
        stat = os.stat(path)
    except OSError:
        return None, None
    if not os.path.isdir(path):
        return stat.st_size, stat.st_mtime_ns
    files = [p for p in Path(path).rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    mtime = max([p.stat().st_mtime_ns for p in files], default=stat.st_mtime_ns)
    return size, mtime


# --- one input ----------------------------------------------------------------------------------


def diagnose_input(path: str, gpu_hour_usd: float | None = None) -> FleetTable:
    """Diagnose one input; a bad input is an error row, never an exception."""
    import gpuscope  # noqa: PLC0415 - keeps worker start-up light until work arrives

    size, mtime = fingerprint(path)
    from gpuscope.diagnosis import saved  # noqa: PLC0415

    try:
        with _local_copy(path) as local:
            if saved.is_saved(local):
                # A saved diagnosis (``diagnose --json``) is one job's result as it was made.
                return _rows(path, size, mtime, saved.read(local))
            job = gpuscope.load(local)
            diagnosis = gpuscope.diagnose(job, gpuscope.Options(gpu_hour_usd=gpu_hour_usd))
    except Exception as error:  # one bad job never stops a fleet run
        message = str(error) if isinstance(error, gpuscope.InputError) else repr(error)
        return FleetTable([_error_row(path, size, mtime, message)], [])
    return _rows(path, size, mtime, diagnosis)


@contextmanager
def _local_copy(path: str) -> Iterator[str]:
    """A local path for ``path``: itself, or a temporary download of an fsspec URL."""
    if not is_url(path):
        yield path
        return
    try:
        fsspec = importlib.import_module("fsspec")
    except ImportError:
        raise InputError(path, "reading URLs needs fsspec: pip install fsspec") from None
    with tempfile.TemporaryDirectory(prefix="gpuscope-fleet-") as tmp:
        target = os.path.join(tmp, path.rstrip("/").rsplit("/", 1)[-1])
        fsspec.filesystem(path.split("://", 1)[0]).get(path, target, recursive=True)
        yield target


def finding_row(path: str, f: Finding) -> FindingRow:
    """The one way a :class:`~gpuscope.diagnosis.findings.Finding` becomes a fleet row: the
    job's path, the finding's identity and figures, and its cause's category (flat columns, for
    a Parquet table)."""
    return FindingRow(
        path,
        f.pattern,
        f.cause,
        *category(f.cause),
        int(f.lost_ns),
        float(f.share_pct),
        _finite(f.cost_usd_per_gpu_hour),
    )


def _error_row(path: str, size: int | None, mtime: int | None, message: str) -> JobRow:
    date, source = _date(None, mtime)
    return JobRow(path, size, mtime, "error", message, date=date, date_source=source)


def _rows(path: str, size: int | None, mtime: int | None, d: Diagnosis) -> FleetTable:
    v = d.verdict
    found = [finding_row(path, f) for f in d.findings if math.isfinite(f.share_pct)]
    lost_hours = sum(f.lost_ns for f in found) / NS_PER_HOUR
    usd = lost_hours * v.gpu_hour_usd if v.gpu_hour_usd is not None else None
    bases = [i.base_time_ns for i in d.inputs if i.base_time_ns]
    date, date_source = _date(_epoch_of(d, bases), mtime)
    top = max(found, key=lambda f: f.lost_ns, default=None)
    names = [x.info.name for x in d.devices] + [g.name for g in d.sampled]
    # A sampled job's verdict prices its idle time (no replay): no saving is predicted there.
    saving = _finite(v.wasted_usd_per_gpu_hour) if d.based_on.startswith("timeline") else None
    span, gpus = _span_ns(d), len(d.devices) or len(d.sampled)
    job = JobRow(
        path=path,
        size_bytes=size,
        mtime_ns=mtime,
        status="ok",
        error=None,
        devices=", ".join(sorted({n for n in names if n})) or None,
        # The GPUs whose data is here, not the declared world size: a job with 2 of its 128
        # ranks traced was measured on 2 GPUs, and its findings' lost time is summed over them.
        gpus=gpus,
        span_ns=span,
        idle_pct=_finite(v.idle_pct),
        bound=v.bound,
        gpu_hour_usd=v.gpu_hour_usd,
        lost_gpu_hours=lost_hours,
        lost_usd=usd,
        saving_usd_per_gpu_hour=saving,
        saving_usd=saving * (span or 0) * gpus / NS_PER_HOUR if saving is not None else None,
        date=date,
        date_source=date_source,
        top_cause=top.cause if top else None,
        top_category=top.category if top else None,
    )
    return FleetTable([job], found)


def _finite(value: float | None) -> float | None:
    """A figure the input could not give (NaN: no timeline to measure idle time from) is None in
    the table, never NaN: NaN is not JSON, and Parquet readers would average it in."""
    return float(value) if value is not None and math.isfinite(value) else None


def _span_ns(d: Diagnosis) -> int | None:
    spans = [(x.span_start_ns, x.span_end_ns) for x in d.devices] or [
        (g.start_ns, g.end_ns) for g in d.sampled
    ]
    if not spans:
        return None
    return int(max(e for _, e in spans) - min(s for s, _ in spans))


def _epoch_of(d: Diagnosis, bases: list[int]) -> tuple[int, str] | None:
    """When the job ran, from the input itself: Kineto's base time or sample timestamps."""
    traced = [b for b in bases if b >= _MIN_EPOCH_NS]
    if traced:
        return min(traced), "trace"
    starts = [g.start_ns for g in d.sampled if g.start_ns >= _MIN_EPOCH_NS]
    return (min(starts), "samples") if starts else None


def _date(epoch: tuple[int, str] | None, mtime: int | None) -> tuple[str | None, str | None]:
    if epoch is None:
        if mtime is None:
            return None, None
        epoch = (mtime, "mtime")
    stamp = datetime.fromtimestamp(epoch[0] / 1e9, tz=UTC)
    return stamp.isoformat(timespec="seconds"), epoch[1]


# --- engines ------------------------------------------------------------------------------------


Progress = Callable[[str], None]


def run(
    inputs: Sequence[str],
    engine: Engine | None = None,
    gpu_hour_usd: float | None = None,
    on_done: Progress | None = None,
) -> FleetTable:
    """Diagnose every input with ``engine`` (:mod:`gpuscope.engines`); rows come back in input
    order."""
    engine = engine or Engine()
    done = on_done or (lambda _path: None)
    with engines.session(engine, len(inputs)) as runner:
        parts = runner.map(
            diagnose_input, [(p, gpu_hour_usd) for p in inputs], lambda i: done(inputs[i])
        )
    table = FleetTable()
    for part in parts:
        table.extend(part)
    return table


# --- storage ------------------------------------------------------------------------------------


def findings_path(path: str | Path) -> Path:
    """Where the findings of a Parquet fleet table live: ``NAME.findings.parquet``."""
    p = Path(path)
    return p.with_name(p.name.removesuffix(".parquet") + ".findings.parquet")


def is_json(path: str | Path) -> bool:
    return str(path).endswith(".json")


def write(table: FleetTable, path: str | Path) -> None:
    """Store ``table`` at ``path`` (JSON when it ends in .json, else Parquet)."""
    if is_json(path):
        doc = {
            "schema": SCHEMA,
            "jobs": [msgspec.structs.asdict(j) for j in table.jobs],
            "findings": [msgspec.structs.asdict(f) for f in table.findings],
        }
        # allow_nan=False: a NaN that slipped through fails here, not in a reader of the file.
        text = json.dumps(doc, indent=1, allow_nan=False)
        write_output(path, (text + "\n").encode())
        return
    import pyarrow as pa  # type: ignore[import-untyped]  # noqa: PLC0415
    import pyarrow.parquet as pq  # type: ignore[import-untyped]  # noqa: PLC0415

    for rows, cls, target in (
        (table.jobs, JobRow, Path(path)),
        (table.findings, FindingRow, findings_path(path)),
    ):
        columns = {f.name: [getattr(r, f.name) for r in rows] for f in msgspec.structs.fields(cls)}
        sink = pa.BufferOutputStream()  # in memory, then replaced in one step: a job killed
        pq.write_table(pa.table(columns, schema=_arrow_schema(cls)), sink)  # mid-write keeps
        write_output(target, sink.getvalue().to_pybytes())  # the table it had


def _arrow_schema(cls: type) -> Any:
    import pyarrow as pa  # noqa: PLC0415

    types = {int: pa.int64(), float: pa.float64(), str: pa.string()}
    # Each field is int, float or str, optional or not: the Arrow type of its non-None member.
    return pa.schema(
        [
            (f.name, types[next(a for a in get_args(f.type) or (f.type,) if a is not NoneType)])
            for f in msgspec.structs.fields(cls)
        ]
    )


def read(path: str | Path) -> FleetTable:
    """The table stored at ``path``; an absent file is an empty table. A file that is not a fleet
    table raises :class:`~gpuscope.errors.InputError`."""
    if not Path(path).exists():
        return FleetTable()
    try:
        return _read_json(Path(path)) if is_json(path) else _read_parquet(Path(path))
    except (ValueError, TypeError, KeyError, OSError) as error:
        raise InputError(path, f"not a gpuscope fleet table ({error})") from None


def _read_json(path: Path) -> FleetTable:
    doc = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or doc.get("schema") not in (SCHEMA, *OLD_SCHEMAS):
        raise ValueError(f"schema is not {SCHEMA}")
    return FleetTable(
        [_job_row(j) for j in doc["jobs"]], [FindingRow(**f) for f in doc["findings"]]
    )


def _job_row(row: dict[str, Any]) -> JobRow:
    """A stored job row; one of ``gpuscope/fleet-1`` has its lost time renamed and no saving (its
    ``wasted_usd_per_gpu_hour`` added the findings' dollars up, which is no saving)."""
    if "wasted_gpu_hours" in row:
        row = dict(row)
        row["lost_gpu_hours"] = row.pop("wasted_gpu_hours")
        row["lost_usd"] = row.pop("wasted_usd", None)
        row.pop("wasted_usd_per_gpu_hour", None)
    return JobRow(**row)


def _read_parquet(path: Path) -> FleetTable:
    import pyarrow.parquet as pq  # noqa: PLC0415

    jobs = [_job_row(r) for r in pq.read_table(path).to_pylist()]
    side = findings_path(path)
    found = [FindingRow(**r) for r in pq.read_table(side).to_pylist()] if side.exists() else []
    return FleetTable(jobs, found)


def pending(inputs: Sequence[str], stored: FleetTable) -> list[str]:
    """The inputs not yet in ``stored`` with the same path, size and mtime."""
    have = {(j.path, j.size_bytes, j.mtime_ns) for j in stored.jobs}
    todo = []
    for path in inputs:
        size, mtime = fingerprint(path)
        if mtime is None or (path, size, mtime) not in have:  # URLs are always read again
            todo.append(path)
    return todo


def store(fresh: FleetTable, path: str | Path) -> None:
    """Merge ``fresh`` into the table at ``path``, read again and written under an exclusive lock
    on its folder: two ``fleet --out`` runs into one table that finish together each keep the
    other's jobs (the later one waits for the earlier one's write, then reads it)."""
    with _folder_locked(Path(path).parent):
        write(merge(read(path), fresh), path)


@contextmanager
def _folder_locked(folder: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``folder`` itself (no lock file is left beside the table)."""
    import fcntl  # noqa: PLC0415  (POSIX only; the rest of the module is not)

    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError as error:
        raise InputError(folder, f"cannot be opened ({error.strerror or error})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def merge(stored: FleetTable, fresh: FleetTable) -> FleetTable:
    """``stored`` with the jobs of ``fresh`` replacing rows of the same path."""
    again = {j.path for j in fresh.jobs}
    return FleetTable(
        [j for j in stored.jobs if j.path not in again] + fresh.jobs,
        [f for f in stored.findings if f.path not in again] + fresh.findings,
    )


# --- the fleet report's figures -----------------------------------------------------------------


class Waste(msgspec.Struct, frozen=True):
    key: str  # a cause, an ICSE category or a date
    gpu_hours: float
    usd: float | None  # None when no job of this key had a price
    jobs: int


class FleetSummary(msgspec.Struct, frozen=True):
    jobs: int
    failed: int
    gpu_hours: float  # device time analysed (span x GPUs, summed over jobs)
    lost_gpu_hours: float
    lost_usd: float | None  # the lost time priced: not a saving
    saving_usd: float | None  # all fixes' predicted saving over the jobs that have one
    by_cause: list[Waste]  # most GPU-hours first
    by_category: list[Waste]
    by_day: list[Waste]  # in date order; empty when no job carries a date
    worst: list[JobRow]  # most GPU-hours (then dollars) lost first, priced or not
    idle_pcts: list[float]  # one per analysed job: the utilisation histogram's data
    failed_jobs: list[JobRow] = msgspec.field(default_factory=list)  # each with its error


def summarize(table: FleetTable, worst: int = 10) -> FleetSummary:
    """The figures of the fleet report, from the stored rows alone."""
    ok = [j for j in table.jobs if j.status == "ok"]
    price = {j.path: j.gpu_hour_usd for j in ok}
    findings = [f for f in table.findings if f.path in price]
    by_cause = _group(findings, lambda f: f.cause, price)
    by_category = _group(findings, lambda f: f.category, price)
    dated = [(j.date[:10], j) for j in ok if j.date]
    days: dict[str, list[JobRow]] = {}
    for day, j in sorted(dated, key=lambda x: x[0]):
        days.setdefault(day, []).append(j)
    by_day = [
        Waste(
            day,
            sum(j.lost_gpu_hours or 0.0 for j in js),
            _sum_or_none(j.lost_usd for j in js),
            len(js),
        )
        for day, js in days.items()
    ]
    # GPU-hours first: every job has them, while a price is known only for some devices (an
    # NVML-sampled job on an unknown GPU can hold most of the waste and has no dollar figure).
    ranked = sorted(ok, key=lambda j: (j.lost_gpu_hours or 0.0, j.lost_usd or 0.0), reverse=True)
    return FleetSummary(
        jobs=len(table.jobs),
        failed=len(table.jobs) - len(ok),
        gpu_hours=sum((j.span_ns or 0) * (j.gpus or 0) for j in ok) / NS_PER_HOUR,
        lost_gpu_hours=sum(j.lost_gpu_hours or 0.0 for j in ok),
        lost_usd=_sum_or_none(j.lost_usd for j in ok),
        saving_usd=_sum_or_none(j.saving_usd for j in ok),
        by_cause=by_cause,
        by_category=by_category,
        by_day=by_day,
        worst=ranked[:worst],
        idle_pcts=[j.idle_pct for j in ok if j.idle_pct is not None],
        failed_jobs=[j for j in table.jobs if j.status != "ok"],
    )


def _group(
    findings: list[FindingRow],
    key: Callable[[FindingRow], str],
    price: dict[str, float | None],
) -> list[Waste]:
    groups: dict[str, list[FindingRow]] = {}
    for f in findings:
        groups.setdefault(key(f), []).append(f)
    out = [
        Waste(
            name,
            sum(f.lost_ns for f in fs) / NS_PER_HOUR,
            _sum_or_none(_usd(f, price[f.path]) for f in fs),
            len({f.path for f in fs}),
        )
        for name, fs in groups.items()
    ]
    return sorted(out, key=lambda w: (-w.gpu_hours, w.key))


def _usd(f: FindingRow, gpu_hour_usd: float | None) -> float | None:
    return money.of_time(f.lost_ns, gpu_hour_usd)


def _sum_or_none(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None
