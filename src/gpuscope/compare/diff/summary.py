"""Run summaries: a diagnosis reduced to per-step series, what a diff and the history compare.

Contract in :mod:`gpuscope.compare.diff`.
"""

from __future__ import annotations

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope.analyses.attribution import CAUSES
from gpuscope.analyses.drawn import step_periods
from gpuscope.causes import is_waste
from gpuscope.compare.diff.memory import site_bytes
from gpuscope.diagnosis import DeviceReport, Diagnosis
from gpuscope.diagnosis.findings import Finding

STEP_TIME = "step_time_ns"
ITERATIONS = "iterations_per_s"
ITEMS = "items_per_s"
GPU_BUSY = "gpu_busy_pct"
COST = "cost_usd_per_gpu_hour"
EXPOSED_COMMUNICATION = "exposed_communication"
LOST_PREFIX = "lost_ns_per_step."


# --- run summaries ------------------------------------------------------------------------------


class FindingSummary(msgspec.Struct, frozen=True):
    """A finding of a run, as the history stores it (:func:`summarize_finding` makes it from the
    :class:`~gpuscope.diagnosis.findings.Finding`); ``lost_ns_per_step`` is the mean of the
    per-step series when the cause has one (idle causes, exposed communication), else the
    diagnosis' own figure. It keeps the figures a diff compares and drops the locations and
    evidence, so a saved run stays small and old histories keep reading."""

    cause: str
    pattern: str
    title: str
    lost_ns_per_step: float | None
    share_pct: float
    cost_usd_per_gpu_hour: float | None
    predicted_saving_ns_per_step: float | None = None  # what-if replay of its fix
    #: Other causes whose time its fix hides (the replay's ``Prediction.hides``): fixing it
    #: removes their waits too.
    hides: list[str] = msgspec.field(default_factory=list)


class RunSummary(msgspec.Struct, frozen=True):
    """What a diff, a check and the history need of one run, per step."""

    source: str
    device: str | None  # the first device's name
    devices: int
    gpu_hour_usd: float | None
    idle_pct: float  # of the job's device time
    wasted_usd_per_gpu_hour: float | None
    steps: int  # per-step values available (the shortest device's count)
    #: Per-step series by metric name (``step_time_ns``, ``gpu_busy_pct``,
    #: ``cost_usd_per_gpu_hour``, ``lost_ns_per_step.CAUSE``); empty without steps.
    per_step: dict[str, list[float]]
    kernel_unit: str  # "step", or "s" (per second of device span) when there are no steps
    kernel_ns: dict[str, float]  # device time per kernel_unit, per device, by stable name
    findings: list[FindingSummary]
    no_steps_reason: str | None = None
    warnings: list[str] = msgspec.field(default_factory=list)
    #: Whole-capture values of the share metrics (``gpu_busy_pct``, ``cost_usd_per_gpu_hour``),
    #: compared when a side has no steps: a share does not grow with the window's length.
    window: dict[str, float] = msgspec.field(default_factory=dict)
    #: Where the steps came from: profiler steps, a repeated NVTX / record_function range, or a
    #: repeating kernel sequence (``analyses.timeline.find_steps``); None without steps.
    step_source: str | None = None
    #: Devices whose steps were timed on the host (they launched no device work in a step).
    host_timed_devices: int = 0
    #: The highest memory peak of its devices and the bytes each site held at it (None, {}:
    #: no allocator record).
    memory_peak_bytes: int | None = None
    memory_sites: dict[str, int] = msgspec.field(default_factory=dict)

    def headline(self, name: str) -> float | None:
        """One number for a metric of the run: the median per step, or a whole-run share."""
        if name == "idle_pct":
            return self.idle_pct
        values = self.per_step.get(name)
        if values:
            return float(np.median(values))
        return self.window.get(name)


def summarize(diagnosis: Diagnosis) -> RunSummary:
    devices = diagnosis.devices
    first = devices[0] if devices else None
    series = [_device_series(d, diagnosis) for d in devices]
    steps = min((len(s[STEP_TIME]) for s in series), default=0)
    per_step: dict[str, list[float]] = {}
    if steps:
        names = sorted({name for s in series for name in s})
        for name in names:
            rows = np.array([s.get(name, [0.0] * steps)[:steps] for s in series], dtype=np.float64)
            per_step[name] = [float(v) for v in rows.mean(axis=0)]
    verdict = diagnosis.verdict
    return RunSummary(
        source=diagnosis.source,
        device=first.info.name if first else None,
        devices=len(devices),
        gpu_hour_usd=verdict.gpu_hour_usd,
        idle_pct=verdict.idle_pct,
        wasted_usd_per_gpu_hour=verdict.wasted_usd_per_gpu_hour,
        steps=steps,
        per_step=per_step,
        kernel_unit=diagnosis.kernel_unit,
        kernel_ns=dict(diagnosis.kernel_ns),
        findings=[
            summarize_finding(f, per_step.get(LOST_PREFIX + f.cause)) for f in diagnosis.findings
        ],
        no_steps_reason=None if steps else _NO_STEPS,
        warnings=list(diagnosis.warnings),
        window=_window_shares(diagnosis),
        step_source=next((d.steps[0].source for d in devices if d.steps), None),
        host_timed_devices=sum(any(s.timed_on == "host" for s in d.steps) for d in devices),
        memory_peak_bytes=max((m.peak_allocated_bytes for m in diagnosis.memory), default=None),
        memory_sites=site_bytes(diagnosis.memory),
    )


def summarize_finding(f: Finding, lost_per_step: list[float] | None = None) -> FindingSummary:
    """The one way a :class:`~gpuscope.diagnosis.findings.Finding` becomes a summary: its
    identity and figures, with the lost time per step the mean of ``lost_per_step`` (the run's
    per-step series of its cause) when there is one."""
    return FindingSummary(
        f.cause,
        f.pattern,
        f.title,
        _mean(lost_per_step, f.lost_ns_per_step),
        f.share_pct,
        f.cost_usd_per_gpu_hour,
        f.predicted_saving_ns_per_step,
        f.prediction.hides if f.prediction is not None else [],
    )


_NO_STEPS = (
    "no profiler steps, no repeated NVTX or record_function range and no repeating kernel sequence"
)


def _window_shares(diagnosis: Diagnosis) -> dict[str, float]:
    """Over the window: the busy share, and the findings' lost time priced (what the per-step
    series' COST is, never a predicted saving)."""
    shares = {GPU_BUSY: 100.0 - diagnosis.verdict.idle_pct}
    price = diagnosis.verdict.gpu_hour_usd
    if price is not None:
        lost = sum(f.share_pct for f in diagnosis.findings if is_waste(f.cause))
        shares[COST] = lost / 100.0 * price
    return shares


def _mean(values: list[float] | None, otherwise: float | None) -> float | None:
    return float(np.mean(values)) if values else otherwise


def _device_series(d: DeviceReport, diagnosis: Diagnosis) -> dict[str, list[float]]:
    """Per-step series of one device, from its step windows and its per-step cause table
    (:class:`~gpuscope.analyses.drawn.StepCauses`): the first step only opens the second (see
    :func:`~gpuscope.analyses.drawn.step_periods`), and a window that ends before it starts
    counts nothing."""
    if not d.steps:
        return {STEP_TIME: []}
    lo, hi = step_periods(d.steps)
    kept = slice(1, None) if len(d.steps) > 1 else slice(None)
    empty = (
        np.array([s.end_ns for s in d.steps], dtype=np.int64)
        < np.array([s.start_ns for s in d.steps], dtype=np.int64)
    )[kept]

    def per_step(values: list[int]) -> NDArray[np.float64]:
        return np.where(empty, 0, np.asarray(values, dtype=np.int64)[kept]).astype(np.float64)

    period = np.maximum(hi - lo, 1).astype(np.float64)
    busy = per_step([s.busy_ns for s in d.steps])
    out: dict[str, list[float]] = {
        STEP_TIME: (hi - lo).astype(np.float64).tolist(),
        GPU_BUSY: (100.0 * busy / period).tolist(),
    }
    table = d.series.step_causes
    wasted = np.zeros(lo.shape, dtype=np.float64)
    finding_causes = {f.cause for f in diagnosis.findings}
    for cause in CAUSES:
        lost = per_step(table.lost_ns[cause])
        out[LOST_PREFIX + cause] = lost.tolist()
        if cause in finding_causes and is_waste(cause):  # start-up is paid once: no waste
            wasted += lost
    exposed_ns = per_step(table.exposed_communication_ns)
    out[LOST_PREFIX + EXPOSED_COMMUNICATION] = exposed_ns.tolist()
    if EXPOSED_COMMUNICATION in finding_causes:
        wasted += exposed_ns
    price = diagnosis.verdict.gpu_hour_usd
    if price is not None:
        idle_like = finding_causes & {*CAUSES, EXPOSED_COMMUNICATION}
        other_pct = sum(f.share_pct for f in diagnosis.findings if f.cause not in idle_like)
        out[COST] = ((wasted / period + other_pct / 100.0) * price).tolist()
    return out


def headline(summary: RunSummary, name: str) -> float | None:
    """One number for a metric of a run: the median per step, or a whole-run share."""
    return summary.headline(name)


def metric_names(summary: RunSummary) -> list[str]:
    return ["idle_pct", *sorted(summary.per_step)]


def all_metric_names() -> list[str]:
    """Every metric a run can have (a run without steps or price has fewer)."""
    lost = [LOST_PREFIX + c for c in [*CAUSES, EXPOSED_COMMUNICATION]]
    return ["idle_pct", STEP_TIME, GPU_BUSY, COST, *lost]
