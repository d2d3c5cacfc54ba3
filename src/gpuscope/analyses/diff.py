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
* Steps are :func:`gpuscope.analyses.timeline.step_breakdown`'s: profiler steps, else a repeated
  NVTX / ``record_function`` range, else a repeating kernel sequence (``step_source`` says
  which), timed on the device: a step runs from the end of the previous step's device work to the
  end of its own, so the idle time before a step's first kernel (waiting for data, say) belongs
  to that step; the first step only marks where the second begins (N steps give N - 1 values).
  Values are averaged over devices per step. Throughput (iterations, and items with
  ``items_per_step``, per second) is compared step by step, so captures of different lengths
  compare fairly.
* Statistics for 3-50 steps with outliers (one slow step: a checkpoint, a GC pause, the first
  step after the profiler starts): the two medians are compared by a Mann-Whitney rank test,
  exact up to :data:`EXACT_MAX` values a side, with the Hodges-Lehmann shift (the median of
  every after - before difference) and its distribution-free interval at :data:`CONFIDENCE`.
  One slow step moves a mean and a standard deviation as far as it likes, and with them a
  t-test; it moves a rank by one. A diff calls a change significant when the two-sided p is
  within 1 - CONFIDENCE; when the sides are too small for any order of the values to reach it
  (three against three), ``significant`` is None and the note says how many steps would.
* Slow outlier steps (:func:`typical_steps`: more than :data:`SLOW_STEP_SDS` robust standard
  deviations above their side's median, at most a fifth of a side) are left out of the step-time
  and throughput comparisons and said so; lost time per cause keeps every step.
* The gate (:func:`check`, :func:`regression`) asks whether the step time is over the baseline's
  by more than the bound: over when the shift's whole :data:`CONFIDENCE` interval lies above the
  bound (the same interval the diff prints); inconclusive when the estimate is above the bound
  but its interval is not, or when the steps are too few to reach the confidence, with the steps
  a side that would settle it; within otherwise. docs/ci-gate.md explains the choice.
* Names carrying unique ids (``ProfilerStep#123``, NVTX ``seq = 17``, ``0x7f...`` addresses)
  are matched by their stable part (:func:`gpuscope.names.stable_name`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from gpuscope.analyses.attribution import CAUSES, Cause
from gpuscope.analyses.drawn import step_periods
from gpuscope.diagnosis import DeviceReport, Diagnosis

#: Confidence of the intervals and of the gate; a diff calls a change significant when the
#: two-sided rank test's p is within 1 - CONFIDENCE.
CONFIDENCE = 0.95
SIGNIFICANCE_LEVEL = 1.0 - CONFIDENCE
#: Sides up to this many values use the exact Mann-Whitney distribution, larger ones the normal.
EXACT_MAX = 50
#: A step this many robust standard deviations above its side's median is a slow outlier...
SLOW_STEP_SDS = 5.0
#: ... when it is also this much (%) over the median: a stall worth leaving out is a real share
#: of a step, not the jitter of runs whose steps barely vary.
SLOW_STEP_MIN_PCT = 10.0
#: Steps to settle a question are reported up to this many ("more than" beyond).
MAX_STEPS_TO_SETTLE = 1000
#: Kernel changes listed in a diff, and the smallest change listed (% of the kernel's time
#: before; kernels added or removed are always listed).
TOP_KERNEL_CHANGES = 10
KERNEL_CHANGE_MIN_PCT = 2.0

STEP_TIME = "step_time_ns"
ITERATIONS = "iterations_per_s"
ITEMS = "items_per_s"
GPU_BUSY = "gpu_busy_pct"
COST = "cost_usd_per_gpu_hour"
EXPOSED_COMMUNICATION = "exposed_communication"
LOST_PREFIX = "lost_ns_per_step."

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
        kernel_unit=diagnosis.kernel_unit,
        kernel_ns=dict(diagnosis.kernel_ns),
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
    shares = {GPU_BUSY: 100.0 - diagnosis.verdict.idle_pct}
    if diagnosis.verdict.wasted_usd_per_gpu_hour is not None:
        shares[COST] = diagnosis.verdict.wasted_usd_per_gpu_hour
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
        lost = per_step(table.lost_ns[cause.value])
        out[LOST_PREFIX + cause.value] = lost.tolist()
        if cause.value in finding_causes:
            wasted += lost
    exposed_ns = per_step(table.exposed_communication_ns)
    out[LOST_PREFIX + EXPOSED_COMMUNICATION] = exposed_ns.tolist()
    if EXPOSED_COMMUNICATION in finding_causes:
        wasted += exposed_ns
    price = diagnosis.verdict.gpu_hour_usd
    if price is not None:
        idle_like = finding_causes & ({c.value for c in Cause} | {EXPOSED_COMMUNICATION})
        other_pct = sum(f.share_pct for f in diagnosis.findings if f.cause not in idle_like)
        out[COST] = ((wasted / period + other_pct / 100.0) * price).tolist()
    return out


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


# --- statistics ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """Two samples of per-step values: the shift after - before, and whether it beats the noise.

    ``change`` is the Hodges-Lehmann shift (the median of every after - before difference), the
    interval is its distribution-free interval at :data:`CONFIDENCE` (from the Mann-Whitney
    distribution) and ``p_value`` the two-sided Mann-Whitney p. ``change_pct`` is of the median
    before."""

    before_median: float | None
    after_median: float | None
    change: float | None  # Hodges-Lehmann shift, after - before
    change_pct: float | None  # of before_median; None when it is 0 or missing
    ci_low: float | None  # interval of ``change`` at CONFIDENCE, two-sided
    ci_high: float | None
    p_value: float | None  # two-sided Mann-Whitney
    significant: bool | None  # None: too few steps for the test to reach CONFIDENCE (see note)
    note: str | None = None
    before_mean: float | None = None
    after_mean: float | None = None
    before_n: int = 0
    after_n: int = 0


def compare(before: Sequence[float], after: Sequence[float]) -> Comparison:
    if not before or not after:
        side = "before" if not before else "after"
        return Comparison(None, None, None, None, None, None, None, None, f"no steps {side}")
    b = np.asarray(before, dtype=np.float64)
    a = np.asarray(after, dtype=np.float64)
    mb, ma = float(np.median(b)), float(np.median(a))
    differences = np.sort(np.subtract.outer(a, b).ravel())
    change = float(np.median(differences))
    change_pct = 100.0 * change / mb if mb else None
    thin = Comparison(
        mb,
        ma,
        change,
        change_pct,
        None,
        None,
        None,
        None,
        before_mean=float(b.mean()),
        after_mean=float(a.mean()),
        before_n=int(b.size),
        after_n=int(a.size),
    )
    if not reachable(b.size, a.size, SIGNIFICANCE_LEVEL / 2.0):
        note = (
            f"thin evidence: {b.size} steps before, {a.size} after; the rank test needs"
            f" {steps_to_reach(SIGNIFICANCE_LEVEL / 2.0)} a side to reach"
            f" {100 * CONFIDENCE:g}% confidence"
        )
        return replace(thin, note=note)
    p_value = mann_whitney_p(b, a)
    low, high = shift_interval(differences, b.size, a.size, SIGNIFICANCE_LEVEL / 2.0)
    return replace(
        thin, ci_low=low, ci_high=high, p_value=p_value, significant=p_value <= SIGNIFICANCE_LEVEL
    )


def reachable(n: int, m: int, tail: float) -> bool:
    """Whether a one-sided rank test of ``n`` against ``m`` values can reach ``tail`` at all: the
    most extreme of the C(n + m, n) equally likely orders has probability 1 / C(n + m, n)."""
    return n >= 1 and m >= 1 and 1.0 / math.comb(n + m, n) <= tail


def steps_to_reach(tail: float) -> int:
    """Fewest steps a side (equal sides) with which a one-sided rank test can reach ``tail``."""
    n = 1
    while not reachable(n, n, tail):
        n += 1
    return n


def mann_whitney_p(b: np.ndarray, a: np.ndarray) -> float:
    """Two-sided p of the Mann-Whitney test: exact without ties (both sides up to
    :data:`EXACT_MAX` values), else the normal approximation with the tie correction."""
    u = _u_statistic(b, a)
    n, m = b.size, a.size
    pooled = np.concatenate([b, a])
    ties = pooled.size - np.unique(pooled).size
    if not ties and max(n, m) <= EXACT_MAX:
        cdf = np.cumsum(_u_distribution(n, m))
        low = float(cdf[math.floor(u)])
        high = 1.0 - (float(cdf[math.ceil(u) - 1]) if u >= 1 else 0.0)
        return min(1.0, 2.0 * min(low, high))
    _values, counts = np.unique(pooled, return_counts=True)
    total = n + m
    variance = (
        n * m / 12.0 * (total + 1 - float((counts**3 - counts).sum()) / (total * (total - 1)))
    )
    if variance <= 0.0:
        return 1.0
    z = (abs(u - n * m / 2.0) - 0.5) / math.sqrt(variance)
    return min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2.0)))


def _u_statistic(b: np.ndarray, a: np.ndarray) -> float:
    """Pairs (before, after) with after > before, ties counting one half."""
    diff = np.subtract.outer(a, b)
    return float((diff > 0).sum()) + 0.5 * float((diff == 0).sum())


@lru_cache(maxsize=256)
def _u_distribution(n: int, m: int) -> np.ndarray:
    """P(U = u) for u = 0..n*m under no change (every order of the n + m values equally likely):
    f(i, j, u) = f(i - 1, j, u - j) + f(i, j - 1, u), divided by C(n + m, n)."""
    previous = [np.ones(1) for _ in range(m + 1)]
    for i in range(1, n + 1):
        current = [np.ones(1)]
        for j in range(1, m + 1):
            counts = np.zeros(i * j + 1)
            counts[j : j + previous[j].size] += previous[j]
            counts[: current[j - 1].size] += current[j - 1]
            current.append(counts)
        previous = current
    distribution = previous[m] / math.comb(n + m, n)
    distribution.setflags(write=False)
    return distribution


def shift_interval(
    differences: np.ndarray, n: int, m: int, tail: float
) -> tuple[float | None, float | None]:
    """The Hodges-Lehmann interval of the shift from the sorted after - before differences:
    [D(c), D(nm + 1 - c)] where c - 1 is the largest U whose lower tail is within ``tail``
    (exact below :data:`EXACT_MAX`, else normal). ``tail`` is one side's error: 0.025 for a
    two-sided 95% interval, 0.05 for a one-sided 95% bound. None when the sizes cannot reach it."""
    total = n * m
    if max(n, m) <= EXACT_MAX:
        cdf = np.cumsum(_u_distribution(n, m))
        c = int(np.searchsorted(cdf, tail * (1.0 + 1e-9), side="right"))
    else:
        z = _normal_quantile(1.0 - tail)
        c = math.floor(total / 2.0 - z * math.sqrt(total * (n + m + 1) / 12.0))
    if c < 1:
        return None, None
    return float(differences[c - 1]), float(differences[total - c])


def _normal_quantile(q: float) -> float:
    """The ``q`` quantile of the standard normal, by bisection on ``erfc``."""
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if 0.5 * math.erfc(-mid / math.sqrt(2.0)) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def robust_sd(b: Sequence[float] | np.ndarray, a: Sequence[float] | np.ndarray) -> float:
    """Step-to-step noise: 1.4826 x the median absolute deviation of both sides' values from
    their own medians (a normal's standard deviation, unmoved by one slow step)."""
    parts = [np.asarray(x, dtype=np.float64) for x in (b, a) if len(x)]
    if not parts:
        return 0.0
    residuals = np.concatenate([x - np.median(x) for x in parts])
    return 1.4826 * float(np.median(np.abs(residuals)))


def typical_steps(
    before: Sequence[float], after: Sequence[float]
) -> tuple[list[float], list[float], int, int]:
    """Both sides' step times without their slow outliers, and how many each side lost.

    A step more than :data:`SLOW_STEP_SDS` robust standard deviations (:func:`robust_sd`, pooled
    over both sides) and :data:`SLOW_STEP_MIN_PCT` above its own side's median did not run the
    loop's usual work at the usual pace: a checkpoint, a GC pause, an evaluation, the profiler
    starting. Only slow steps: a stall adds time, nothing makes the same work faster. At most a
    fifth of a side (one step below ten) is left out, and enough steps stay for the test to reach
    its confidence, else nothing is: many slow steps are the run's usual pace. Step time is
    compared on what is left, so one checkpoint does not decide a gate; lost time per cause is
    compared on every step, so the checkpoint still shows there."""
    noise = robust_sd(before, after)
    kept: list[list[float]] = []
    dropped: list[int] = []
    for values in (before, after):
        x = np.asarray(values, dtype=np.float64)
        keep = x
        if noise > 0.0 and x.size:
            median = float(np.median(x))
            limit = max(median + SLOW_STEP_SDS * noise, median * (1.0 + SLOW_STEP_MIN_PCT / 100.0))
            keep = x[x <= limit]
            if x.size - keep.size > max(1, x.size // 5) or keep.size < 3:
                keep = x
        kept.append(keep.tolist())
        dropped.append(int(x.size - keep.size))
    if (dropped[0] or dropped[1]) and not reachable(
        len(kept[0]), len(kept[1]), SIGNIFICANCE_LEVEL / 2.0
    ):
        return list(before), list(after), 0, 0  # leaving them out would leave too few to tell
    return kept[0], kept[1], dropped[0], dropped[1]


def _left_out_note(before: int, after: int) -> str | None:
    parts = [
        f"{n} slow step{'s' if n > 1 else ''} {side}"
        for n, side in ((before, "before"), (after, "after"))
        if n
    ]
    return f"left out as outliers: {' and '.join(parts)}" if parts else None


def steps_to_settle(noise_sd: float, margin: float, tail: float = 1.0 - CONFIDENCE) -> int:
    """Steps a side with which a one-sided rank test at ``tail`` would tell a shift ``margin``
    away from the bound with 80% power: the normal sample size for a difference of means,
    times pi / 3 (the rank test's efficiency against the t-test is 3 / pi under normal noise)."""
    floor = steps_to_reach(tail)
    if margin <= 0.0:
        return MAX_STEPS_TO_SETTLE
    if noise_sd <= 0.0:
        return floor
    z = _normal_quantile(1.0 - tail) + _normal_quantile(0.8)
    n = 2.0 * (math.pi / 3.0) * (z * noise_sd / margin) ** 2
    return min(max(floor, math.ceil(n)), MAX_STEPS_TO_SETTLE)


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


def diff(
    before: RunSummary,
    after: RunSummary,
    top_kernels: int = TOP_KERNEL_CHANGES,
    items_per_step: float | None = None,
) -> RunDiff:
    """``after`` against ``before``, per step. ``items_per_step`` (samples or tokens a step
    processes) adds items per second to the iterations per second."""
    notes: list[str] = []
    for side, s in (("before", before), ("after", after)):
        if s.no_steps_reason:
            notes.append(f"{side}: {s.no_steps_reason}; per-step figures are not available")
    if before.step_source != after.step_source and before.steps and after.steps:
        notes.append(
            f"steps found differently: {before.step_source} before, {after.step_source} after"
        )
    if before.device != after.device:
        notes.append(f"different devices: {before.device} before, {after.device} after")
    unit = "step" if before.kernel_unit == after.kernel_unit == "step" else "s"
    if unit == "s" and (before.kernel_unit == "step" or after.kernel_unit == "step"):
        notes.append("kernels compared per second of device span: one side has no steps")
    resolved, new, persisting = _finding_changes(before, after)
    return RunDiff(
        before=before,
        after=after,
        metrics=_metric_diffs(before, after, items_per_step),
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


def _metric_diffs(
    before: RunSummary, after: RunSummary, items_per_step: float | None
) -> list[MetricDiff]:
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
        typical_b, typical_a = b, a
        if name == STEP_TIME and b and a:
            typical_b, typical_a, left_b, left_a = typical_steps(b, a)
            if left_b or left_a:
                comparison = replace(
                    compare(typical_b, typical_a), note=_left_out_note(left_b, left_a)
                )
        if (not b or not a) and name in before.window and name in after.window:
            comparison = _compare_windows(before.window[name], after.window[name])
        elif (not b and before.steps) or (not a and after.steps):
            side = "before" if not b and before.steps else "after"
            reason = "the device has no price (pass --gpu-hour-usd)" if name == COST else "no data"
            comparison = replace(comparison, note=f"not available {side}: {reason}")
        result.append(MetricDiff(name, unit, better, b, a, comparison))
        if name == STEP_TIME:
            result += _throughput(typical_b, typical_a, items_per_step)
    return result


def _throughput(
    before: list[float], after: list[float], items_per_step: float | None
) -> list[MetricDiff]:
    """Iterations per second (and items per second with ``items_per_step``) of each step: what
    a run delivers, comparable when the two captures hold different numbers of iterations."""
    b = [1e9 / v for v in before if v > 0]
    a = [1e9 / v for v in after if v > 0]
    result = [MetricDiff(ITERATIONS, "per_s", "higher", b, a, compare(b, a))]
    if items_per_step is not None:
        bi = [items_per_step * v for v in b]
        ai = [items_per_step * v for v in a]
        result.append(MetricDiff(ITEMS, "per_s", "higher", bi, ai, compare(bi, ai)))
    return result


def _compare_windows(before: float, after: float) -> Comparison:
    """Whole-capture shares: the change, but no noise estimate (``significant`` is None)."""
    change_pct = 100.0 * (after - before) / before if before else None
    note = "no steps: whole-capture figures, noise not measured"
    return Comparison(
        before, after, after - before, change_pct, None, None, None, None, note, before, after
    )


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
    #: Bounds the evidence cannot decide yet (too few steps), each saying how many would.
    inconclusive: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Regression:
    """The gate's view of step time against a baseline: the Hodges-Lehmann shift in % of the
    baseline's median, its one-sided lower bound at :data:`CONFIDENCE`, and the verdict."""

    before_median_ns: float
    after_median_ns: float
    change_pct: float
    lower_pct: float | None  # None: too few steps for the rank test to reach CONFIDENCE
    upper_pct: float | None
    max_pct: float
    verdict: str  # "over" | "within" | "inconclusive"
    steps_needed: int | None  # a side, when inconclusive
    before_steps: int = 0  # compared, after slow outliers are left out
    after_steps: int = 0
    before_left_out: int = 0  # slow outlier steps (typical_steps)
    after_left_out: int = 0


def regression(before: Sequence[float], after: Sequence[float], max_pct: float) -> Regression:
    """Is the step time over the baseline's by more than ``max_pct``, at :data:`CONFIDENCE`?

    * over: the shift's whole interval at :data:`CONFIDENCE` (the diff's two-sided interval: its
      lower end is a 97.5% one-sided bound) lies above the bound;
    * inconclusive: the estimate is above the bound but its lower bound is not, or the steps are
      too few for the rank test to reach the confidence at all (``steps_needed`` says how many
      a side would settle it, from the measured noise and the distance to the bound);
    * within: the estimate is within the bound (a gate stays quiet unless a regression shows).
    """
    kept_b, kept_a, left_b, left_a = typical_steps(before, after)
    b = np.asarray(kept_b, dtype=np.float64)
    a = np.asarray(kept_a, dtype=np.float64)
    base = float(np.median(b))
    differences = np.sort(np.subtract.outer(a, b).ravel())
    shift = float(np.median(differences))
    tail = (1.0 - CONFIDENCE) / 2.0  # the diff's two-sided interval: its lower end
    low, _ = shift_interval(differences, b.size, a.size, tail)
    _, high = shift_interval(differences, b.size, a.size, tail)
    to_pct = 100.0 / base
    change_pct = shift * to_pct
    lower = None if low is None else low * to_pct
    upper = None if high is None else high * to_pct
    margin_ns = abs(shift - max_pct / to_pct)
    needed = steps_to_settle(robust_sd(b, a), margin_ns, tail)
    if lower is not None and lower > max_pct:
        verdict, steps = "over", None
    elif change_pct > max_pct or lower is None:
        verdict, steps = "inconclusive", max(needed, min(b.size, a.size) + 1)
    else:
        verdict, steps = "within", None
    return Regression(
        base,
        float(np.median(a)),
        change_pct,
        lower,
        upper,
        max_pct,
        verdict,
        steps,
        int(b.size),
        int(a.size),
        left_b,
        left_a,
    )


def check(summary: RunSummary, bounds: Bounds, baseline: RunDiff | None = None) -> CheckOutcome:
    """Each bound against the run; step time against the baseline by :func:`regression`."""
    broken: list[str] = []
    kept: list[str] = []
    unavailable: list[str] = []
    inconclusive: list[str] = []
    if bounds.max_idle_pct is not None:
        idle = decisive(summary.idle_pct, bounds.max_idle_pct)
        line = f"GPU idle {idle}% (max {bounds.max_idle_pct:g}%)"
        (broken if summary.idle_pct > bounds.max_idle_pct else kept).append(line)
    if bounds.max_cost_usd_per_gpu_hour is not None:
        cost = summary.wasted_usd_per_gpu_hour
        if cost is None:
            unavailable.append("the waste cannot be priced: unknown device (pass --gpu-hour-usd)")
        else:
            bound = bounds.max_cost_usd_per_gpu_hour
            shown = f"{bound:.2f}" if float(f"{bound:.2f}") == bound else f"{bound:g}"
            line = f"waste ${decisive(cost, bound, 2)}/GPU-hour (max ${shown})"
            (broken if cost > bounds.max_cost_usd_per_gpu_hour else kept).append(line)
    if bounds.max_regression_pct is not None and baseline is not None:
        before = baseline.before.per_step.get(STEP_TIME, [])
        after = baseline.after.per_step.get(STEP_TIME, [])
        if not before or not after:
            side = "the baseline" if not before else "this run"
            reason = (baseline.before if not before else baseline.after).no_steps_reason
            unavailable.append(
                f"step time cannot be compared with the baseline: {side} has no steps"
                + (f" ({reason})" if reason else "")
            )
        else:
            r = regression(before, after, bounds.max_regression_pct)
            line = regression_line(r)
            {"over": broken, "within": kept, "inconclusive": inconclusive}[r.verdict].append(line)
    ok = not broken and not unavailable and not inconclusive
    return CheckOutcome(ok, broken, kept, unavailable, inconclusive)


def decisive(value: float, bound: float, digits: int = 1) -> str:
    """``value`` as text with as many decimals as it takes to see it against ``bound``: at least
    ``digits``, at least as many as the bound was given with, more while the two would print alike
    but differ (52.3449 against a bound of 52.34 prints 52.345, not 52.3)."""
    given = f"{bound:g}"
    places = max(digits, 0 if "e" in given else len(given.partition(".")[2]))
    while places < 9 and value != bound and f"{value:.{places}f}" == f"{bound:.{places}f}":
        places += 1
    return f"{value:.{places}f}"


def regression_line(r: Regression) -> str:
    confidence = f"{100 * CONFIDENCE:g}%"
    line = (
        f"step time {r.after_median_ns / 1e6:,.2f} ms vs baseline {r.before_median_ns / 1e6:,.2f}"
        f" ms ({r.change_pct:+.1f}%, max +{r.max_pct:g}%; medians of {r.after_steps} and"
        f" {r.before_steps} steps"
    )
    left_out = _left_out_note(r.before_left_out, r.after_left_out)
    if left_out:
        line += f", {left_out.replace(' before', ' baseline').replace(' after', ' run')}"
    if r.lower_pct is not None and r.upper_pct is not None:
        line += f"; {confidence} interval {r.lower_pct:+.1f}% to {r.upper_pct:+.1f}%"
    if r.verdict == "inconclusive":
        if r.lower_pct is None:
            line += f"; too few steps to reach {confidence} confidence"
        else:
            line += "; over the bound, but not beyond noise"
        if r.steps_needed is not None and r.steps_needed >= MAX_STEPS_TO_SETTLE:
            line += f"; more than {MAX_STEPS_TO_SETTLE} steps a side would settle it"
        else:
            line += f"; about {r.steps_needed} steps a side would settle it"
    return line + ")"
