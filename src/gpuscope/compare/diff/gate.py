"""The CI gate: is the step time over the baseline's by more than the bound.

Contract in :mod:`gpuscope.compare.diff`.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import numpy as np

from gpuscope.compare.diff.changes import RunDiff
from gpuscope.compare.diff.stats import (
    CONFIDENCE,
    MAX_STEPS_TO_SETTLE,
    left_out_note,
    robust_sd,
    shift_differences,
    shift_interval,
    steps_to_settle,
    typical_steps,
)
from gpuscope.compare.diff.summary import STEP_TIME, RunSummary
from gpuscope.units import ms

# --- gate ---------------------------------------------------------------------------------------


class Bounds(msgspec.Struct, frozen=True):
    max_idle_pct: float | None = None
    max_cost_usd_per_gpu_hour: float | None = None
    max_regression_pct: float | None = None  # step time against the baseline


class CheckOutcome(msgspec.Struct, frozen=True):
    ok: bool
    reasons: list[str]  # one line per broken bound, first the most important
    passed: list[str]  # one line per bound kept
    unavailable: list[str]  # bounds that could not be checked: bad input
    #: Bounds the evidence cannot decide yet (too few steps), each saying how many would.
    inconclusive: list[str] = msgspec.field(default_factory=list)


#: The gate's error rate, all in one tail: it asks one-sided "is the run slower than the bound
#: allows?", never "did anything change?" (the diff's two-sided question).
GATE_TAIL = 1.0 - CONFIDENCE


class Regression(msgspec.Struct, frozen=True):
    """The gate's view of step time against a baseline: the Hodges-Lehmann shift in % of the
    baseline's median, its one-sided bounds at :data:`CONFIDENCE` (each end of the two-sided
    interval that leaves :data:`GATE_TAIL` out on each side), and the verdict."""

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

    The question is one-sided and carries its own effect size: does the run's step time exceed
    the baseline's by more than the bound? So the test is the exact one-sided Mann-Whitney test
    of "the shift is at most the bound" (the run's steps, less the bound, against the
    baseline's), at :data:`GATE_TAIL`; by the test's duality with its interval, that is the
    shift's one-sided lower bound at :data:`CONFIDENCE` lying above the bound.

    * over: that lower bound is above the bound. With few steps only the extreme orders get
      there: when every step of the run, less the bound, is slower than every baseline step,
      the exact p is 1 / C(n + m, n) (3 against 3: 1/20 = 5%, so it fails; 4 against 4: 1.4%);
      one step inside the other run's range (3 against 3: 2/20 = 10%) is not enough;
    * inconclusive: the estimate is above the bound but its lower bound is not, or the steps
      are too few for any order to reach the confidence (2 against 2: 1/6; ``steps_needed``
      says how many a side would settle it, from the measured noise and the distance to the
      bound);
    * within: the estimate is within the bound, however few the steps (a gate stays quiet unless
      a regression shows: a run 10% faster than its baseline passes, it is not "inconclusive"
      for want of steps to prove a slowdown that its own figures do not show).

    Why one-sided at 5% and not the diff's two-sided interval (its lower end a 97.5% bound, the
    gate's earlier choice): no order of 3 against 3 or 3 against 4 steps (1/35 = 2.9%) reaches
    2.5%, so a 5x slower run profiled for four steps was "inconclusive" however clear the
    separation (benchmarks/README.md, the H200 loop). A one-sided question spends its whole
    error rate on one side: no-change runs fail at most 5% of the time, by the exact test.
    """
    kept_b, kept_a, left_b, left_a = typical_steps(before, after, GATE_TAIL)
    b = np.asarray(kept_b, dtype=np.float64)
    a = np.asarray(kept_a, dtype=np.float64)
    base = float(np.median(b))
    differences, n, m = shift_differences(b, a)  # bounded memory however many steps
    shift = float(np.median(differences))
    low, high = shift_interval(differences, n, m, GATE_TAIL)
    to_pct = 100.0 / base
    change_pct = shift * to_pct
    lower = None if low is None else low * to_pct
    upper = None if high is None else high * to_pct
    margin_ns = abs(shift - max_pct / to_pct)
    needed = steps_to_settle(robust_sd(b, a), margin_ns, GATE_TAIL)
    if lower is not None and lower > max_pct:
        verdict, steps = "over", None
    elif change_pct > max_pct:
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
            unavailable.append(
                "the predicted saving cannot be priced: unknown device (pass --gpu-hour-usd)"
                if summary.gpu_hour_usd is None
                else "no saving is predicted: no finding's fix could be replayed"
            )
        else:
            bound = bounds.max_cost_usd_per_gpu_hour
            shown = f"{bound:.2f}" if float(f"{bound:.2f}") == bound else f"{bound:g}"
            line = f"predicted saving ${decisive(cost, bound, 2)}/GPU-hour (max ${shown})"
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
        f"step time {ms(r.after_median_ns)} vs baseline {r.before_median_ns / 1e6:,.2f}"
        f" ms ({r.change_pct:+.1f}%, max +{r.max_pct:g}%; medians of {r.after_steps} and"
        f" {r.before_steps} steps"
    )
    left_out = left_out_note(r.before_left_out, r.after_left_out)
    if left_out:
        line += f", {left_out.replace(' before', ' baseline').replace(' after', ' run')}"
    if r.verdict == "within" and r.upper_pct is not None:
        line += f"; at most {r.upper_pct:+.1f}% at {confidence} confidence"
    elif r.lower_pct is not None:
        line += f"; at least {r.lower_pct:+.1f}% at {confidence} confidence"
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
