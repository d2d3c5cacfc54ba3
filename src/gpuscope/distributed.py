"""One job of many ranks, read where the engine runs: each rank reduced to a summary on a worker,
the job diagnosed on the driver from the summaries alone.

Contract:

* :func:`reduce_rank` (on a worker) reads one rank's file, diagnoses it alone, and returns a
  :class:`RankReport`: its devices' :class:`~gpuscope.analyses.ranks.RankSummary` (per-step
  figures, collective arrivals, compute inside collectives), its findings and its kernel totals.
  It never raises for a bad file: the error is the report's.
* :func:`analyse_job` (on the driver) turns the reports into a :class:`JobDiagnosis`: the
  cross-rank analysis (:func:`~gpuscope.analyses.ranks.analyse_summaries`: clocks, collective
  waits, stragglers, exposed communication, bandwidth), the job's findings (each rank's own,
  summed by cause, with exposed communication split as the one-process diagnosis splits it:
  waits for a straggler and other collective waits apart), kernel totals and scaling figures.
  The only thing it asks of a rank beyond its summary is what a named straggler did in the
  windows the analysis found: ``describe`` (one more read of that rank, on a worker).
* :func:`diagnose_job` does both with an :class:`~gpuscope.engines.Engine`: ``local`` (a process
  pool; one worker: in this process) or ``ray``. Every engine runs the same functions, so the
  diagnosis is the same whichever ran it, and its rank analysis is the one ``gpuscope diagnose``
  computes over the whole job in one process (the same summaries, reduced there).

Bounded by design: the driver holds one report per rank (:attr:`RankReport.nbytes`: a few KB,
72 bytes per collective), never a trace. A file that fails to read is named with its reason in
``failed`` and the job is diagnosed from the other ranks, which the verdict says.

Per-rank diagnoses run without the what-if replay (``Options.predict`` is ignored): a finding's
lost time is measured, not predicted, and adds up over ranks.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import numpy as np
from msgspec.structs import replace

from gpuscope.analyses.intervals import Intervals
from gpuscope.analyses.ranks import (
    RankAnalysis,
    RankSummary,
    StragglerDetail,
    analyse_summaries,
    straggler_detail,
)
from gpuscope.causes import describe as describe_cause
from gpuscope.diagnosis import Options
from gpuscope.diagnosis.findings import MIN_SHARE_PCT
from gpuscope.engines import Engine, session
from gpuscope.errors import InputError, UnknownFormatError

if TYPE_CHECKING:
    from gpuscope.diagnosis import Diagnosis

#: Kernel names a rank reports (its costliest): job totals sum these, so a kernel that is minor
#: on every rank may be missing from them.
KERNELS_PER_RANK = 10
#: Kernel names the job diagnosis lists.
JOB_KERNELS = 20


class RankFinding(msgspec.Struct, frozen=True):
    cause: str
    pattern: str
    title: str
    lost_ns: int
    fix: str


class RankReport(msgspec.Struct, frozen=True):
    """One rank's file reduced on a worker (see the module docstring)."""

    path: str
    position: int  # in the folder's order
    error: str | None = None  # why it could not be read (then nothing else is set)
    not_a_trace: bool = False  # an unknown format: a file beside the ranks, not a failed rank
    trace_rank: int | None = None  # the rank the trace names (None: numbered by position)
    summaries: list[RankSummary] = msgspec.field(default_factory=list)
    devices: list[str] = msgspec.field(default_factory=list)  # device names
    idle_pct: float | None = None
    bound: str | None = None
    findings: list[RankFinding] = msgspec.field(default_factory=list)
    kernel_unit: str = "s"
    kernel_ns: list[tuple[str, float]] = msgspec.field(default_factory=list)  # per kernel_unit

    @property
    def nbytes(self) -> int:
        """What the report weighs on the driver, about (its encoded size)."""
        return len(msgspec.msgpack.encode(self))


class JobFinding(msgspec.Struct, frozen=True):
    cause: str
    pattern: str
    title: str
    lost_ns: int  # summed over the ranks' devices
    share_pct: float  # of the job's device time (sum of spans)
    ranks: int  # ranks it was found on (the rank findings: ranks analysed)
    fix: str


class RankRow(msgspec.Struct, frozen=True):
    rank: int
    path: str
    device: int
    busy_pct: float
    idle_pct: float | None
    exposed_wait_ns: int | None
    last_arrivals: int
    top_cause: str | None


class Scaling(msgspec.Struct, frozen=True):
    """What being spread over ranks costs the job, from the ranks' step and span figures."""

    step_ns_mean: float | None  # mean profiler step, over every rank's steps
    step_ns_slowest_rank: float | None  # the mean step of the rank whose steps are longest
    imbalance_pct: float | None  # how much longer that is than the mean
    exposed_communication_pct: float  # of device time: communication nothing hides, waits incl.
    exposed_wait_pct: float  # of device time: its part spent waiting for a late rank
    efficiency_pct: float  # device time not lost to exposed communication (waits included)


class JobDiagnosis(msgspec.Struct, frozen=True):
    source: str
    engine: str
    files: int
    ranks_read: int
    failed: list[tuple[str, str]]  # (file, why): ranks the diagnosis could not read
    skipped: list[str]  # files beside the ranks that are not traces
    verdict: str
    idle_pct: float
    device_ns: int  # the ranks' spans summed
    busy_ns: int
    findings: list[JobFinding]
    ranks: RankAnalysis | None
    rank_rows: list[RankRow]
    scaling: Scaling
    kernel_unit: str
    kernel_ns: list[tuple[str, float]]  # summed over ranks, per kernel_unit, largest first
    summary_bytes: int  # the reports the driver held, encoded
    notes: list[str] = msgspec.field(default_factory=list)

    @property
    def bytes_per_rank(self) -> float:
        return self.summary_bytes / max(self.files, 1)


# --- on a worker --------------------------------------------------------------------------------


def reduce_rank(path: str, position: int, options: Options | None = None) -> RankReport:
    """Read and diagnose one rank's file alone, and keep what the job diagnosis needs of it."""
    try:
        d, summaries = _diagnosed(path, position, options or Options())
    except UnknownFormatError as error:
        return RankReport(path, position, error.reason, not_a_trace=True)
    except InputError as error:
        return RankReport(path, position, error.reason)
    except Exception as error:  # one bad rank never stops the job
        return RankReport(path, position, f"{type(error).__name__}: {error}")
    kernels = sorted(d.kernel_ns.items(), key=lambda kv: -kv[1])[:KERNELS_PER_RANK]
    return RankReport(
        path=path,
        position=position,
        trace_rank=d.inputs[0].rank if d.inputs else None,
        summaries=summaries,
        devices=[x.info.name or "" for x in d.devices],
        idle_pct=_finite(d.verdict.idle_pct),
        bound=d.verdict.bound,
        findings=[
            RankFinding(f.cause, f.pattern, f.title, int(f.lost_ns), f.fix)
            for f in d.findings
            if f.memory_bytes is None
        ],
        kernel_unit=d.kernel_unit,
        kernel_ns=kernels,
    )


def _diagnosed(path: str, position: int, options: Options) -> tuple[Diagnosis, list[RankSummary]]:
    import gpuscope  # noqa: PLC0415 - the reader, through the facade (as fleet reads a job)
    from gpuscope.diagnosis import diagnose_timelines  # noqa: PLC0415

    job = gpuscope.load(path)
    if not job.traces or job.counters or job.samples:
        raise InputError(path, "holds no timeline of its own: a rank of a job is a trace")
    done = diagnose_timelines(job, replace(options, predict=False), summarise_from=position)
    return done.diagnosis, done.summaries


def describe_rank(
    path: str,
    position: int,
    device: int,
    spans: tuple[bytes, bytes],
    options: Options | None = None,
) -> StragglerDetail:
    """What the rank in ``path`` did on ``device`` in a straggler's windows and before its
    arrivals (``spans``: each an int64 (n, 2) array's bytes, on the rank's own clock)."""
    import gpuscope  # noqa: PLC0415
    from gpuscope.diagnosis import participants_of  # noqa: PLC0415

    participants = participants_of(
        gpuscope.load(path), replace(options or Options(), predict=False), first_rank=position
    )
    mine = next(p for p in participants if p.device == device)
    windows, before = (_intervals(b) for b in spans)
    return straggler_detail(mine, windows, before)


def _intervals(data: bytes) -> Intervals:
    pairs = np.frombuffer(data, dtype=np.int64).reshape(-1, 2)
    return Intervals(pairs[:, 0].copy(), pairs[:, 1].copy())


def _packed(iv: Intervals) -> bytes:
    return np.stack([iv.start_ns, iv.end_ns], axis=1).astype(np.int64).tobytes()


# --- on the driver ------------------------------------------------------------------------------


def rank_files(folder: Path) -> list[Path]:
    """The files of a job's folder, in name order (hidden files left out)."""
    try:
        entries = sorted(p for p in folder.iterdir() if not p.name.startswith("."))
    except OSError as error:
        raise InputError(folder, f"cannot be read ({error.strerror or error})") from None
    files = [p for p in entries if p.is_file()]
    if not files:
        raise InputError(folder, "no files: pass one job's folder of per-rank traces")
    return files


#: What a rank did in a straggler's windows and before its arrivals, asked of its report.
DescribeRank = Callable[[RankReport, RankSummary, Intervals, Intervals], StragglerDetail]


def diagnose_job(
    folder: str | Path,
    engine: Engine | None = None,
    options: Options | None = None,
    on_done: Callable[[int], None] | None = None,
) -> JobDiagnosis:
    """The job in ``folder`` (one file per rank), each rank reduced on ``engine``'s workers."""
    engine = engine or Engine()
    options = options or Options()
    path = Path(folder)
    files = rank_files(path) if path.is_dir() else [path]
    with session(engine, len(files)) as runner:
        reports = runner.map(
            reduce_rank,
            [(str(f), i, options) for i, f in enumerate(files)],
            on_done,
            lambda i, error: RankReport(str(files[i]), i, f"its worker failed: {error!r}"),
        )

        unread = [r for r in reports if r.error is not None and not r.not_a_trace]
        if not any(r.error is None for r in reports):
            first = (unread or reports)[0]
            raise InputError(
                path, f"no rank could be read ({Path(first.path).name}: {first.error})"
            )

        def describe(
            report: RankReport, summary: RankSummary, windows: Intervals, before: Intervals
        ) -> StragglerDetail:
            spans = (_packed(windows), _packed(before))
            args = (report.path, report.position, summary.device, spans, options)
            return runner.map(describe_rank, [args])[0]

        return analyse_job(str(folder), reports, describe, engine.kind)


def analyse_job(
    source: str, reports: list[RankReport], describe: DescribeRank | None, engine: str = "local"
) -> JobDiagnosis:
    """The job diagnosis from the ranks' reports alone (see the module docstring)."""
    # In rank order, as a folder read in one process orders its traces (Job.merge).
    read = sorted(
        (r for r in reports if r.error is None),
        key=lambda r: (r.trace_rank if r.trace_rank is not None else 1 << 30, r.path),
    )
    failed = [(r.path, r.error or "") for r in reports if r.error is not None and not r.not_a_trace]
    skipped = [r.path for r in reports if r.not_a_trace]
    owners = [(r, s) for r in read for s in r.summaries]
    summaries = [s for _, s in owners]

    def detail(i: int, windows: Intervals, before: Intervals) -> StragglerDetail:
        if describe is None:
            return StragglerDetail()
        report, summary = owners[i]
        try:
            return describe(report, summary, windows, before)
        except Exception:  # the rank read once and not again (moved, changed): figures stay
            return StragglerDetail()

    ranks = analyse_summaries(summaries, detail) if len(summaries) > 1 else None
    device_ns = sum(s.span_ns for s in summaries)
    busy_ns = sum(s.busy_ns for s in summaries)
    found = _findings(read, ranks, device_ns)
    kernel_unit, kernels = _kernels(read)
    idle_pct = 100.0 * (device_ns - busy_ns) / device_ns if device_ns else float("nan")
    return JobDiagnosis(
        source=source,
        engine=engine,
        files=len(reports) - len(skipped),
        ranks_read=len(read),
        failed=failed,
        skipped=skipped,
        verdict=_verdict(read, failed, ranks, found, idle_pct),
        idle_pct=idle_pct,
        device_ns=device_ns,
        busy_ns=busy_ns,
        findings=found,
        ranks=ranks,
        rank_rows=_rank_rows(owners, ranks),
        scaling=_scaling(summaries, ranks, device_ns),
        kernel_unit=kernel_unit,
        kernel_ns=kernels,
        summary_bytes=sum(r.nbytes for r in reports),
        notes=list(ranks.notes) if ranks is not None else [],
    )


def _findings(
    read: list[RankReport], ranks: RankAnalysis | None, device_ns: int
) -> list[JobFinding]:
    """Each cause's lost time summed over the ranks' findings; exposed communication from the
    summaries, less the waits the rank analysis attributes to late peers (reported as
    ``straggler`` and ``collective_wait``), so that nothing counts twice, as in the one-process
    diagnosis. A cause under ``MIN_SHARE_PCT`` of one rank's time is not in that rank's report:
    the job's sum leaves it out there."""
    from gpuscope.diagnosis.fixes import advice, straggler_advice  # noqa: PLC0415

    lost: dict[str, int] = {}
    on: dict[str, int] = {}
    worst: dict[str, RankFinding] = {}
    for r in read:
        for f in r.findings:
            lost[f.cause] = lost.get(f.cause, 0) + f.lost_ns
            on[f.cause] = on.get(f.cause, 0) + 1
            if f.cause not in worst or f.lost_ns > worst[f.cause].lost_ns:
                worst[f.cause] = f
    exposed_cause = "exposed_communication"
    exposed = sum(s.exposed_communication_ns for r in read for s in r.summaries)
    exposed -= ranks.exposed_wait_ns if ranks is not None else 0
    lost[exposed_cause] = exposed
    on[exposed_cause] = sum(1 for r in read if any(s.exposed_communication_ns for s in r.summaries))
    fix_of = {cause: f.fix for cause, f in worst.items()}
    found = [
        _job_finding(cause, ns, on[cause], fix_of.get(cause) or advice(cause), device_ns)
        for cause, ns in lost.items()
    ]
    if ranks is not None and ranks.collective_wait_ns is not None:
        everyone = len(ranks.ranks)
        if ranks.stragglers:
            fix = " ".join(straggler_advice(s) for s in ranks.stragglers[:3])
            found.append(
                _job_finding("straggler", ranks.straggler_exposed_wait_ns, everyone, fix, device_ns)
            )
        other = ranks.exposed_wait_ns - ranks.straggler_exposed_wait_ns
        found.append(
            _job_finding("collective_wait", other, everyone, advice("collective_wait"), device_ns)
        )
    # As in the one-process diagnosis: what costs under MIN_SHARE_PCT of device time is left
    # out, except a named straggler (the others may have hidden its lateness this time).
    named = {"straggler"} if ranks is not None and ranks.stragglers else set()
    found = [
        f for f in found if f.cause in named or (f.lost_ns > 0 and f.share_pct >= MIN_SHARE_PCT)
    ]
    return sorted(found, key=lambda f: (-f.lost_ns, f.cause))


def _job_finding(cause: str, lost_ns: int, ranks: int, fix: str, device_ns: int) -> JobFinding:
    info = describe_cause(cause)
    return JobFinding(
        cause, info.pattern, info.title, int(lost_ns), _share(lost_ns, device_ns), ranks, fix
    )


def _share(ns: int, device_ns: int) -> float:
    return 100.0 * ns / device_ns if device_ns else 0.0


def _kernels(read: list[RankReport]) -> tuple[str, list[tuple[str, float]]]:
    """Device time per kernel name summed over ranks, in the ranks' common unit (per step when
    every rank has steps, else per second of span)."""
    unit = "step" if read and all(r.kernel_unit == "step" for r in read) else "s"
    totals: dict[str, float] = {}
    for r in read:
        if r.kernel_unit != unit:
            continue
        for name, ns in r.kernel_ns:
            totals[name] = totals.get(name, 0.0) + ns
    return unit, sorted(totals.items(), key=lambda kv: -kv[1])[:JOB_KERNELS]


def _rank_rows(
    owners: list[tuple[RankReport, RankSummary]], ranks: RankAnalysis | None
) -> list[RankRow]:
    rows = []
    for i, (report, s) in enumerate(owners):
        stat = ranks.ranks[i] if ranks is not None else None
        top = max(report.findings, key=lambda f: f.lost_ns, default=None)
        busy = 100.0 * s.busy_ns / s.span_ns if s.span_ns else float("nan")
        rows.append(
            RankRow(
                rank=s.rank,
                path=report.path,
                device=s.device,
                busy_pct=stat.busy_pct if stat is not None else busy,
                idle_pct=report.idle_pct,
                exposed_wait_ns=stat.exposed_wait_ns if stat is not None else None,
                last_arrivals=stat.last_arrivals if stat is not None else 0,
                top_cause=top.cause if top is not None else None,
            )
        )
    return rows


def _scaling(summaries: list[RankSummary], ranks: RankAnalysis | None, device_ns: int) -> Scaling:
    per_rank = [sum(s.dur_ns for s in r.steps) / len(r.steps) for r in summaries if r.steps]
    mean = sum(sum(s.dur_ns for s in r.steps) for r in summaries) / max(
        sum(len(r.steps) for r in summaries), 1
    )
    slowest = max(per_rank, default=None)
    exposed = sum(s.exposed_communication_ns for s in summaries)
    waited = ranks.exposed_wait_ns if ranks is not None else 0
    return Scaling(
        step_ns_mean=mean if per_rank else None,
        step_ns_slowest_rank=slowest,
        imbalance_pct=100.0 * (slowest / mean - 1) if slowest is not None and mean else None,
        exposed_communication_pct=_share(exposed, device_ns),
        exposed_wait_pct=_share(waited, device_ns),
        efficiency_pct=100.0 - _share(exposed, device_ns),
    )


def _verdict(
    read: list[RankReport],
    failed: list[tuple[str, str]],
    ranks: RankAnalysis | None,
    found: list[JobFinding],
    idle_pct: float,
) -> str:
    """One sentence: what was read, how idle the job's GPUs were, and the largest loss."""
    parts = [f"{len(read)} ranks read"]
    if failed:
        parts[0] = (
            f"diagnosed from {len(read)} of {len(read) + len(failed)} ranks"
            f" ({len(failed)} could not be read)"
        )
    if math.isfinite(idle_pct):
        parts.append(f"GPUs {idle_pct:.0f}% idle")
    if ranks is not None and ranks.stragglers:
        named = ", ".join(str(s.rank) for s in ranks.stragglers[:3])
        parts.append(f"straggler: rank {named}")
    if found:
        top = found[0]
        parts.append(f"largest loss: {top.title} ({top.share_pct:.1f}% of device time)")
    return "; ".join(parts)


def _finite(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None
