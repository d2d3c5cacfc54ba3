"""Run summaries: a diagnosis reduced to per-step series, what a diff and the history compare.

Contract in :mod:`gpuscope.analyses.diff`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuscope.analyses.attribution import CAUSES, Cause
from gpuscope.analyses.intervals import covered_ns, difference, union
from gpuscope.analyses.timeline import WorkClass
from gpuscope.diagnosis import DeviceReport, Diagnosis

STEP_TIME = "step_time_ns"
ITERATIONS = "iterations_per_s"
ITEMS = "items_per_s"
GPU_BUSY = "gpu_busy_pct"
COST = "cost_usd_per_gpu_hour"
EXPOSED_COMMUNICATION = "exposed_communication"
LOST_PREFIX = "lost_ns_per_step."

_STABLE = (
    (re.compile(r"#\d+"), "#"),
    (re.compile(r"\b(seq|op_id|sequenceNr|id)\s*=\s*\d+"), r"\1=N"),
    (re.compile(r"0x[0-9a-fA-F]+"), "0x"),
)


def stable_name(name: str) -> str:
    """``name`` without its unique ids: ``ProfilerStep#123`` -> ``ProfilerStep#``."""
    for pattern, replacement in _STABLE:
        name = pattern.sub(replacement, name)
    return name


# --- run summaries ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FindingSummary:
    """A finding of a run; ``lost_ns_per_step`` is the mean of the per-step series when the
    cause has one (idle causes, exposed communication), else the diagnosis' own figure."""

    cause: str
    pattern: str
    title: str
    lost_ns_per_step: float | None
    share_pct: float
    cost_usd_per_gpu_hour: float | None
    predicted_saving_ns_per_step: float | None = None  # what-if replay of its fix


@dataclass(frozen=True)
class RunSummary:
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
    warnings: list[str] = field(default_factory=list)
    #: Whole-capture values of the share metrics (``gpu_busy_pct``, ``cost_usd_per_gpu_hour``),
    #: compared when a side has no steps: a share does not grow with the window's length.
    window: dict[str, float] = field(default_factory=dict)
    #: Where the steps came from: profiler steps, a repeated NVTX / record_function range, or a
    #: repeating kernel sequence (``analyses.timeline.find_steps``); None without steps.
    step_source: str | None = None
    #: Devices whose steps were timed on the host (they launched no device work in a step).
    host_timed_devices: int = 0


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
        kernel_unit="step" if steps else "s",
        kernel_ns=_kernel_ns(devices, steps),
        findings=[
            FindingSummary(
                f.cause,
                f.pattern,
                f.title,
                _mean(per_step.get(LOST_PREFIX + f.cause), f.lost_ns_per_step),
                f.share_pct,
                f.cost_usd_per_gpu_hour,
                f.predicted_saving_ns_per_step,
            )
            for f in diagnosis.findings
        ],
        no_steps_reason=None if steps else _NO_STEPS,
        warnings=list(diagnosis.warnings),
        window=_window_shares(diagnosis),
        step_source=next((d.steps[0].source for d in devices if d.steps), None),
        host_timed_devices=sum(any(s.timed_on == "host" for s in d.steps) for d in devices),
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
        lost = sum(f.share_pct for f in diagnosis.findings if f.pattern != "startup")
        shares[COST] = lost / 100.0 * price
    return shares


def _mean(values: list[float] | None, otherwise: float | None) -> float | None:
    return float(np.mean(values)) if values else otherwise


def _periods(d: DeviceReport) -> tuple[np.ndarray, np.ndarray]:
    """Each step's window on the device (``analyses.timeline.step_breakdown``): they tile the
    device's time, each from the end of the previous step's work to the end of its own. The
    first step, whose predecessor is not in the trace, starts where the host began it: it gains
    the host's lead over the device, so it only marks where the second begins (N steps give
    N - 1 values) unless it is the only one."""
    steps = d.steps[1:] if len(d.steps) > 1 else d.steps
    starts = np.array([s.start_ns for s in steps], dtype=np.int64)
    ends = np.array([s.end_ns for s in steps], dtype=np.int64)
    return starts, np.maximum(ends, starts)


def _device_series(d: DeviceReport, diagnosis: Diagnosis) -> dict[str, list[float]]:
    if not d.steps:
        return {STEP_TIME: []}
    lo, hi = _periods(d)
    period = np.maximum(hi - lo, 1).astype(np.float64)
    busy = covered_ns(d.work.busy, lo, hi).astype(np.float64)
    out: dict[str, list[float]] = {
        STEP_TIME: (hi - lo).astype(np.float64).tolist(),
        GPU_BUSY: (100.0 * busy / period).tolist(),
    }
    gaps = d.idle.gaps
    wasted = np.zeros(lo.shape, dtype=np.float64)
    finding_causes = {f.cause for f in diagnosis.findings}
    for code, cause in enumerate(CAUSES):
        mask = gaps.cause == code
        lost = covered_ns(union(gaps.start_ns[mask], gaps.end_ns[mask]), lo, hi)
        out[LOST_PREFIX + cause.value] = lost.astype(np.float64).tolist()
        if cause.value in finding_causes:
            wasted += lost
    by_class = d.work.by_class
    exposed = difference(by_class[WorkClass.COMMUNICATION], by_class[WorkClass.COMPUTE])
    exposed_ns = covered_ns(exposed, lo, hi).astype(np.float64)
    out[LOST_PREFIX + EXPOSED_COMMUNICATION] = exposed_ns.tolist()
    if EXPOSED_COMMUNICATION in finding_causes:
        wasted += exposed_ns
    price = diagnosis.verdict.gpu_hour_usd
    if price is not None:
        idle_like = finding_causes & ({c.value for c in Cause} | {EXPOSED_COMMUNICATION})
        other_pct = sum(f.share_pct for f in diagnosis.findings if f.cause not in idle_like)
        out[COST] = ((wasted / period + other_pct / 100.0) * price).tolist()
    return out


def _kernel_ns(devices: Sequence[DeviceReport], steps: int) -> dict[str, float]:
    """Device time per kernel name, per step (or per second of span) and per device."""
    totals: dict[str, float] = {}
    for d in devices:
        if steps:
            lo, hi = _periods(d)
            window = (int(lo[0]), int(hi[steps - 1]))
            units = float(steps)
        else:
            window = (d.span_start_ns, d.span_end_ns)
            units = max(d.span_end_ns - d.span_start_ns, 1) / 1e9
        ev = d.work.trace.events
        starts = ev.start_ns[d.work.rows]
        inside = d.work.rows[(starts >= window[0]) & (starts < window[1])]
        for name_id, dur in zip(
            ev.name_id[inside].tolist(), ev.dur_ns[inside].tolist(), strict=True
        ):
            name = stable_name(d.work.trace.names[name_id])
            totals[name] = totals.get(name, 0.0) + dur / units
    count = max(len(devices), 1)
    return {name: ns / count for name, ns in totals.items()}


def headline(summary: RunSummary, name: str) -> float | None:
    """One number for a metric of a run: the median per step, or a whole-run share."""
    if name == "idle_pct":
        return summary.idle_pct
    values = summary.per_step.get(name)
    if values:
        return float(np.median(values))
    return summary.window.get(name)


def metric_names(summary: RunSummary) -> list[str]:
    return ["idle_pct", *sorted(summary.per_step)]


def all_metric_names() -> list[str]:
    """Every metric a run can have (a run without steps or price has fewer)."""
    lost = [LOST_PREFIX + c.value for c in CAUSES] + [LOST_PREFIX + EXPOSED_COMMUNICATION]
    return ["idle_pct", STEP_TIME, GPU_BUSY, COST, *lost]
