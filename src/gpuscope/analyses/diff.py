"""Before/after comparison of two runs: per-step figures, whether each change beats the noise.

Contract:

* :func:`summarize` reduces a :class:`~gpuscope.diagnosis.Diagnosis` to a :class:`RunSummary`:
  per-step series (step time, GPU busy share, each idle cause's lost time, exposed communication,
  wasted cost per GPU-hour), per-step kernel time by stable name, and the findings. A summary is
  what the history stores, so :func:`diff` works the same on files and on saved runs.
* :func:`diff` compares two summaries and returns a :class:`RunDiff`; :func:`compare` compares two
  samples of per-step values. All are pure and never print.
* Every figure is per step (or a share), never a total over the capture window: two captures with
  different step counts compare fairly. A trace without steps has no per-step figures: its GPU
  busy share and cost are compared over the whole capture (``significant`` None: no noise
  estimate), the rest is ``None`` with a reason, and kernels are compared per second of span.
* A step on the device runs from the end of the previous step's device work to the end of its
  own, so the idle time before a step's first kernel (waiting for data, say) belongs to that
  step. The first recorded step, whose predecessor is not in the trace, only marks where the
  second begins: N steps give N - 1 per-step values. Values are averaged over devices per step.
* Significance: Welch's t-test on the per-step values, two-sided, at :data:`SIGNIFICANCE_LEVEL`,
  with the matching confidence interval of the difference of means. (A percentile bootstrap is
  too narrow below about ten steps a side: with five, its nominal 1% errs about 5% of the time;
  an exact Mann-Whitney test cannot reach 1% with fewer than five.) With fewer than
  :data:`MIN_STEPS` steps on either side, ``significant`` is ``None``: the evidence is thin.
* Names carrying unique ids (``ProfilerStep#123``, NVTX ``seq = 17``, ``0x7f...`` addresses)
  are matched by their stable part (:func:`stable_name`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuscope.analyses.attribution import CAUSES, Cause
from gpuscope.analyses.intervals import covered_ns, difference, union
from gpuscope.analyses.timeline import WorkClass
from gpuscope.diagnosis import DeviceReport, Diagnosis

#: Two-sided level of the test that calls a change larger than step-to-step noise.
SIGNIFICANCE_LEVEL = 0.01
#: Fewer per-step values than this on either side: the evidence is thin (``significant=None``).
MIN_STEPS = 3
#: Kernel changes listed in a diff, and the smallest change listed (% of the kernel's time
#: before; kernels added or removed are always listed).
TOP_KERNEL_CHANGES = 10
KERNEL_CHANGE_MIN_PCT = 2.0

STEP_TIME = "step_time_ns"
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
        no_steps_reason=None if steps else "the trace has no profiler steps",
        warnings=list(diagnosis.warnings),
        window=_window_shares(diagnosis),
    )


def _window_shares(diagnosis: Diagnosis) -> dict[str, float]:
    shares = {GPU_BUSY: 100.0 - diagnosis.verdict.idle_pct}
    if diagnosis.verdict.wasted_usd_per_gpu_hour is not None:
        shares[COST] = diagnosis.verdict.wasted_usd_per_gpu_hour
    return shares


def _mean(values: list[float] | None, otherwise: float | None) -> float | None:
    return float(np.mean(values)) if values else otherwise


def _periods(d: DeviceReport) -> tuple[np.ndarray, np.ndarray]:
    """Each step's period on the device: from the end of the previous step's device work to the
    end of its own. The first step's predecessor is not in the trace, so it only marks where the
    second begins (a trace of one step keeps it, from the step's own start)."""
    ends = np.array([s.end_ns for s in d.steps], dtype=np.int64)
    if ends.size == 1:
        return np.array([d.steps[0].start_ns], dtype=np.int64), ends
    starts, ends = ends[:-1], ends[1:]
    if np.any(ends <= starts):  # overlapping or unordered step windows: use them as they are
        starts = np.array([s.start_ns for s in d.steps[1:]], dtype=np.int64)
    return starts, ends


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
    """One number for a metric of a run: the mean per step, or a whole-run share."""
    if name == "idle_pct":
        return summary.idle_pct
    values = summary.per_step.get(name)
    if values:
        return float(np.mean(values))
    return summary.window.get(name)


def metric_names(summary: RunSummary) -> list[str]:
    return ["idle_pct", *sorted(summary.per_step)]


# --- statistics ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """Two samples of per-step values: after - before, and whether it is larger than noise."""

    before_mean: float | None
    after_mean: float | None
    change: float | None  # after - before
    change_pct: float | None  # of before; None when before is 0 or missing
    ci_low: float | None  # confidence interval of ``change`` at 1 - SIGNIFICANCE_LEVEL
    ci_high: float | None
    p_value: float | None
    significant: bool | None  # None: too few steps to tell (see ``note``)
    note: str | None = None


def compare(before: Sequence[float], after: Sequence[float]) -> Comparison:
    if not before or not after:
        side = "before" if not before else "after"
        return Comparison(None, None, None, None, None, None, None, None, f"no steps {side}")
    b = np.asarray(before, dtype=np.float64)
    a = np.asarray(after, dtype=np.float64)
    mb, ma = float(b.mean()), float(a.mean())
    change = ma - mb
    change_pct = 100.0 * change / mb if mb else None
    if b.size < MIN_STEPS or a.size < MIN_STEPS:
        note = f"thin evidence: {b.size} steps before, {a.size} after (need {MIN_STEPS} each)"
        return Comparison(mb, ma, change, change_pct, None, None, None, None, note)
    p_value, half_width = _welch(b, a)
    return Comparison(
        mb,
        ma,
        change,
        change_pct,
        change - half_width,
        change + half_width,
        p_value,
        p_value < SIGNIFICANCE_LEVEL,
    )


def _welch(b: np.ndarray, a: np.ndarray) -> tuple[float, float]:
    """Two-sided p-value of Welch's t-test, and the half-width of its confidence interval."""
    vb = float(b.var(ddof=1)) / b.size
    va = float(a.var(ddof=1)) / a.size
    se = math.sqrt(vb + va)
    change = float(a.mean() - b.mean())
    if se == 0.0 or se < 1e-12 * max(abs(float(a.mean())), abs(float(b.mean())), 1e-300):
        return (1.0 if change == 0.0 else 0.0), 0.0
    df = (vb + va) ** 2 / (vb**2 / (b.size - 1) + va**2 / (a.size - 1))
    t = change / se
    return _t_two_sided(t, df), _t_quantile(1.0 - SIGNIFICANCE_LEVEL / 2.0, df) * se


def _t_two_sided(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom."""
    return _betai(df / 2.0, 0.5, df / (df + t * t))


def _t_quantile(q: float, df: float) -> float:
    """The ``q`` quantile (q > 0.5) of Student's t, by bisection on the two-sided tail."""
    tail = 2.0 * (1.0 - q)
    lo, hi = 0.0, 1e6
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if _t_two_sided(mid, df) > tail:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def _betai(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b) (Numerical Recipes, 6.4)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def _betacf(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


# --- diffs --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetricDiff:
    name: str
    unit: str  # "ns", "pct", "usd_per_gpu_hour"
    better: str  # "lower" or "higher"
    before: list[float]  # per step
    after: list[float]
    comparison: Comparison

    @property
    def outcome(self) -> str:
        """better | worse | unchanged (within noise) | unclear (thin evidence or no data)."""
        c = self.comparison
        if c.significant is None or c.change is None:
            return "unclear"
        if not c.significant:
            return "unchanged"
        lower = c.change < 0
        return "better" if lower == (self.better == "lower") else "worse"


@dataclass(frozen=True)
class KernelChange:
    name: str
    status: str  # added | removed | slower | faster
    before_ns: float  # per kernel_unit
    after_ns: float

    @property
    def change_ns(self) -> float:
        return self.after_ns - self.before_ns

    @property
    def change_pct(self) -> float | None:
        return 100.0 * self.change_ns / self.before_ns if self.before_ns else None


@dataclass(frozen=True)
class FindingChange:
    cause: str
    title: str
    before: FindingSummary | None
    after: FindingSummary | None


@dataclass(frozen=True)
class PredictionCheck:
    """A resolved finding's predicted step time (made on "before") beside "after"'s measured."""

    cause: str
    before_step_ns: float
    predicted_step_ns: float
    after_step_ns: float

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted_step_ns - self.after_step_ns) / self.after_step_ns


@dataclass(frozen=True)
class RunDiff:
    before: RunSummary
    after: RunSummary
    metrics: list[MetricDiff]
    kernel_unit: str
    kernels: list[KernelChange]
    resolved: list[FindingChange]
    new: list[FindingChange]
    persisting: list[FindingChange]
    notes: list[str]
    predictions: list[PredictionCheck] = field(default_factory=list)

    def metric(self, name: str) -> MetricDiff | None:
        return next((m for m in self.metrics if m.name == name), None)


def diff(before: RunSummary, after: RunSummary, top_kernels: int = TOP_KERNEL_CHANGES) -> RunDiff:
    notes: list[str] = []
    for side, s in (("before", before), ("after", after)):
        if s.no_steps_reason:
            notes.append(f"{side}: {s.no_steps_reason}; per-step figures are not available")
    if before.device != after.device:
        notes.append(f"different devices: {before.device} before, {after.device} after")
    unit = "step" if before.kernel_unit == after.kernel_unit == "step" else "s"
    if unit == "s" and (before.kernel_unit == "step" or after.kernel_unit == "step"):
        notes.append("kernels compared per second of device span: one side has no steps")
    resolved, new, persisting = _finding_changes(before, after)
    return RunDiff(
        before=before,
        after=after,
        metrics=_metric_diffs(before, after),
        kernel_unit=unit,
        kernels=_kernel_changes(before, after, unit, top_kernels),
        resolved=resolved,
        new=new,
        persisting=persisting,
        notes=notes,
        predictions=_prediction_checks(before, after, resolved),
    )


def _prediction_checks(
    before: RunSummary, after: RunSummary, resolved: list[FindingChange]
) -> list[PredictionCheck]:
    """How close each resolved finding's predicted saving came: before's step time less the
    saving, against after's step time (both measured here the same way)."""
    b, a = headline(before, STEP_TIME), headline(after, STEP_TIME)
    if not b or not a:
        return []
    return [
        PredictionCheck(f.cause, b, b - f.before.predicted_saving_ns_per_step, a)
        for f in resolved
        if f.before is not None and f.before.predicted_saving_ns_per_step is not None
    ]


def _metric_diffs(before: RunSummary, after: RunSummary) -> list[MetricDiff]:
    causes = [c.value for c in CAUSES] + [EXPOSED_COMMUNICATION]
    lost = [LOST_PREFIX + c for c in causes]
    present = [name for name in lost if _any_nonzero(before, name) or _any_nonzero(after, name)]
    specs = [
        (STEP_TIME, "ns", "lower"),
        (GPU_BUSY, "pct", "higher"),
        (COST, "usd_per_gpu_hour", "lower"),
    ]
    specs += [(name, "ns", "lower") for name in present]
    result = []
    for name, unit, better in specs:
        b = before.per_step.get(name, [])
        a = after.per_step.get(name, [])
        comparison = compare(b, a)
        if (not b or not a) and name in before.window and name in after.window:
            comparison = _compare_windows(before.window[name], after.window[name])
        result.append(MetricDiff(name, unit, better, b, a, comparison))
    return result


def _compare_windows(before: float, after: float) -> Comparison:
    """Whole-capture shares: the change, but no noise estimate (``significant`` is None)."""
    change_pct = 100.0 * (after - before) / before if before else None
    note = "no steps: whole-capture figures, noise not measured"
    return Comparison(before, after, after - before, change_pct, None, None, None, None, note)


def _any_nonzero(summary: RunSummary, name: str) -> bool:
    return any(v != 0.0 for v in summary.per_step.get(name, []))


def _kernel_changes(
    before: RunSummary, after: RunSummary, unit: str, top: int
) -> list[KernelChange]:
    b = _kernels_per(before, unit)
    a = _kernels_per(after, unit)
    changes = []
    for name in sorted(set(b) | set(a)):
        vb, va = b.get(name, 0.0), a.get(name, 0.0)
        if vb == va or (vb and abs(va - vb) < KERNEL_CHANGE_MIN_PCT / 100.0 * vb):
            continue
        status = (
            "added" if vb == 0.0 else "removed" if va == 0.0 else "slower" if va > vb else "faster"
        )
        changes.append(KernelChange(name, status, vb, va))
    changes.sort(key=lambda k: (-abs(k.change_ns), k.name))
    return changes[:top]


def _kernels_per(summary: RunSummary, unit: str) -> dict[str, float]:
    if summary.kernel_unit == unit:
        return summary.kernel_ns
    # per step -> per second: a step lasts the mean step time
    step_s = float(np.mean(summary.per_step[STEP_TIME])) / 1e9
    return {name: ns / step_s for name, ns in summary.kernel_ns.items()}


def _finding_changes(
    before: RunSummary, after: RunSummary
) -> tuple[list[FindingChange], list[FindingChange], list[FindingChange]]:
    b = {f.cause: f for f in before.findings}
    a = {f.cause: f for f in after.findings}
    resolved = [FindingChange(c, f.title, f, None) for c, f in b.items() if c not in a]
    new = [FindingChange(c, f.title, None, f) for c, f in a.items() if c not in b]
    persisting = [FindingChange(c, f.title, f, a[c]) for c, f in b.items() if c in a]
    return resolved, new, persisting


# --- gate ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bounds:
    max_idle_pct: float | None = None
    max_cost_usd_per_gpu_hour: float | None = None
    max_regression_pct: float | None = None  # step time against the baseline


@dataclass(frozen=True)
class CheckOutcome:
    ok: bool
    reasons: list[str]  # one line per broken bound, first the most important
    passed: list[str]  # one line per bound kept
    unavailable: list[str]  # bounds that could not be checked: bad input


def check(summary: RunSummary, bounds: Bounds, baseline: RunDiff | None = None) -> CheckOutcome:
    """Each bound against the run; a step-time regression counts when it is larger than the
    allowed percentage and not within noise (thin evidence: the percentage alone decides)."""
    broken: list[str] = []
    kept: list[str] = []
    unavailable: list[str] = []
    if bounds.max_idle_pct is not None:
        line = f"GPU idle {summary.idle_pct:.1f}% (max {bounds.max_idle_pct:g}%)"
        (broken if summary.idle_pct > bounds.max_idle_pct else kept).append(line)
    if bounds.max_cost_usd_per_gpu_hour is not None:
        cost = summary.wasted_usd_per_gpu_hour
        if cost is None:
            unavailable.append("the waste cannot be priced: unknown device (pass --gpu-hour-usd)")
        else:
            line = f"waste ${cost:.2f}/GPU-hour (max ${bounds.max_cost_usd_per_gpu_hour:.2f})"
            (broken if cost > bounds.max_cost_usd_per_gpu_hour else kept).append(line)
    if bounds.max_regression_pct is not None and baseline is not None:
        _check_regression(baseline, bounds.max_regression_pct, broken, kept, unavailable)
    return CheckOutcome(not broken and not unavailable, broken, kept, unavailable)


def _check_regression(
    baseline: RunDiff, max_pct: float, broken: list[str], kept: list[str], unavailable: list[str]
) -> None:
    step = baseline.metric(STEP_TIME)
    c = step.comparison if step else None
    if c is None or c.change_pct is None or c.before_mean is None or c.after_mean is None:
        unavailable.append(
            "step time cannot be compared with the baseline: " + (c.note or "no steps")
            if c
            else "no steps"
        )
        return
    line = (
        f"step time {c.after_mean / 1e6:,.2f} ms vs baseline {c.before_mean / 1e6:,.2f} ms"
        f" ({c.change_pct:+.1f}%, max +{max_pct:g}%"
    )
    if c.significant is None:
        line += "; thin evidence"
    elif not c.significant:
        line += "; within noise"
    line += ")"
    regressed = c.change_pct > max_pct and c.significant is not False
    (broken if regressed else kept).append(line)
