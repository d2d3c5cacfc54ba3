"""Before/after comparison of two runs: per-step figures, whether each change beats the noise.

Contract:

* :func:`summarize` reduces a :class:`~gpuscope.diagnosis.Diagnosis` to a :class:`RunSummary`:
  per-step series (step time, GPU busy share, each idle cause's lost time, exposed communication,
  the findings' lost time priced per GPU-hour), per-step kernel time by stable name, and the
  findings. A summary is what the history stores, so :func:`diff` works the same on files and on
  saved runs.
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
  by more than the bound, a one-sided question: over when the exact one-sided rank test of
  "the shift is at most the bound" rejects at :data:`GATE_TAIL` (the shift's one-sided
  :data:`CONFIDENCE` lower bound lies above the bound; three steps a side wholly beyond it do);
  inconclusive when the estimate is above the bound but that lower bound is not, or when the
  steps are too few to reach the confidence, with the steps a side that would settle it; within
  otherwise. docs/ci-gate.md explains the choice.
* Names carrying unique ids (``ProfilerStep#123``, NVTX ``seq = 17``, ``0x7f...`` addresses)
  are matched by their stable part (:func:`gpuscope.names.stable_name`).
"""

from __future__ import annotations

from gpuscope.compare.diff.changes import (
    KERNEL_CHANGE_MIN_PCT,
    TOP_KERNEL_CHANGES,
    FindingChange,
    KernelChange,
    MetricDiff,
    PredictionCheck,
    RunDiff,
    diff,
)
from gpuscope.compare.diff.gate import (
    GATE_TAIL,
    Bounds,
    CheckOutcome,
    Regression,
    check,
    decisive,
    regression,
    regression_line,
)
from gpuscope.compare.diff.stats import (
    CONFIDENCE,
    EXACT_MAX,
    MAX_STEPS_TO_SETTLE,
    SIGNIFICANCE_LEVEL,
    SLOW_STEP_MIN_PCT,
    SLOW_STEP_SDS,
    Comparison,
    compare,
    mann_whitney_p,
    reachable,
    robust_sd,
    shift_interval,
    steps_to_reach,
    steps_to_settle,
    typical_steps,
)
from gpuscope.compare.diff.summary import (
    COST,
    EXPOSED_COMMUNICATION,
    GPU_BUSY,
    ITEMS,
    ITERATIONS,
    LOST_PREFIX,
    STEP_TIME,
    FindingSummary,
    RunSummary,
    all_metric_names,
    headline,
    metric_names,
    summarize,
    summarize_finding,
)
from gpuscope.names import stable_name

__all__ = [
    "CONFIDENCE",
    "COST",
    "EXACT_MAX",
    "EXPOSED_COMMUNICATION",
    "GATE_TAIL",
    "GPU_BUSY",
    "ITEMS",
    "ITERATIONS",
    "KERNEL_CHANGE_MIN_PCT",
    "LOST_PREFIX",
    "MAX_STEPS_TO_SETTLE",
    "SIGNIFICANCE_LEVEL",
    "SLOW_STEP_MIN_PCT",
    "SLOW_STEP_SDS",
    "STEP_TIME",
    "TOP_KERNEL_CHANGES",
    "Bounds",
    "CheckOutcome",
    "Comparison",
    "FindingChange",
    "FindingSummary",
    "KernelChange",
    "MetricDiff",
    "PredictionCheck",
    "Regression",
    "RunDiff",
    "RunSummary",
    "all_metric_names",
    "check",
    "compare",
    "decisive",
    "diff",
    "headline",
    "mann_whitney_p",
    "metric_names",
    "reachable",
    "regression",
    "regression_line",
    "robust_sd",
    "shift_interval",
    "stable_name",
    "steps_to_reach",
    "steps_to_settle",
    "summarize",
    "summarize_finding",
    "typical_steps",
]
