"""The statistics of a diff: rank tests, shift intervals and slow-step outliers for 3-50 steps.

Contract in :mod:`gpuscope.compare.diff`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import msgspec
import numpy as np

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
#: The most (before, after) step pairs whose differences are held at once (8 bytes each: 32 MB).
#: Beyond it the shift and its interval come from an even sample of each side's sorted steps
#: (:func:`shift_differences`), and the rank test from ranks, never from the pairs: 30,000 steps a
#: side would otherwise take 6.7 GiB.
MAX_PAIRS = 4_000_000

# --- statistics ---------------------------------------------------------------------------------


class Comparison(msgspec.Struct, frozen=True):
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
    #: With too few steps to test: "above" or "below" when every step after is above (below)
    #: every step before, else None.
    apart: str | None = None


def compare(before: Sequence[float], after: Sequence[float]) -> Comparison:
    if not before or not after:
        side = "before" if not before else "after"
        return Comparison(None, None, None, None, None, None, None, None, f"no steps {side}")
    b = np.asarray(before, dtype=np.float64)
    a = np.asarray(after, dtype=np.float64)
    mb, ma = float(np.median(b)), float(np.median(a))
    differences, n, m = shift_differences(b, a)
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
        note=_sampled_note(b.size, a.size, n, m),
    )
    if not reachable(b.size, a.size, SIGNIFICANCE_LEVEL / 2.0):
        note = (
            f"thin evidence: {b.size} steps before, {a.size} after; the rank test needs"
            f" {steps_to_reach(SIGNIFICANCE_LEVEL / 2.0)} a side to reach"
            f" {100 * CONFIDENCE:g}% confidence"
        )
        apart = "above" if a.min() > b.max() else "below" if a.max() < b.min() else None
        if apart is not None:
            # The figures show the order plainly; say it, and why it still does not settle.
            least = min(1.0, 2.0 / math.comb(b.size + a.size, b.size))
            note += (
                f"; every step after is {apart} every step before (two-sided p = {least:.2f},"
                f" the least {b.size} against {a.size} steps can give)"
            )
        return msgspec.structs.replace(thin, note=note, apart=apart)
    p_value = mann_whitney_p(b, a)
    low, high = shift_interval(differences, n, m, SIGNIFICANCE_LEVEL / 2.0)
    return msgspec.structs.replace(
        thin, ci_low=low, ci_high=high, p_value=p_value, significant=p_value <= SIGNIFICANCE_LEVEL
    )


def shift_differences(b: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, int, int]:
    """The sorted after - before differences of every pair, and the sizes they come from. Up to
    :data:`MAX_PAIRS` pairs, every step's; beyond, each side is first thinned to evenly spaced
    order statistics (its sorted values at even ranks: the same distribution, fewer values), so
    the memory stays bounded and the interval, from fewer values, is wider, never narrower."""
    if b.size * a.size > MAX_PAIRS:
        side = math.isqrt(MAX_PAIRS)
        b, a = _thinned(b, side), _thinned(a, side)
    return np.sort(np.subtract.outer(a, b).ravel()), int(b.size), int(a.size)


def _thinned(values: np.ndarray, most: int) -> np.ndarray:
    if values.size <= most:
        return values
    ranks = np.round(np.linspace(0, values.size - 1, most)).astype(np.intp)
    return np.sort(values)[ranks]


def _sampled_note(n: int, m: int, used_n: int, used_m: int) -> str | None:
    if (used_n, used_m) == (n, m):
        return None
    return (
        f"shift and interval from {used_n:,} of {n:,} steps before and {used_m:,} of {m:,} after,"
        " evenly spaced in each side's order (bounded memory); the rank test uses every step"
    )


def reachable(n: int, m: int, tail: float) -> bool:
    """Whether a one-sided rank test of ``n`` against ``m`` values can reach ``tail`` at all: the
    most extreme of the C(n + m, n) equally likely orders has probability 1 / C(n + m, n)."""
    if n < 1 or m < 1 or tail <= 0.0:
        return False
    # In integers: C(n + m, n) of 30,000 steps a side has 18,000 digits, beyond any float.
    return math.comb(n + m, min(n, m, 64)) >= math.ceil(1.0 / tail)


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
    """Pairs (before, after) with after > before, ties counting one half: from the pairs up to
    :data:`MAX_PAIRS`, else from ranks (the after side's rank sum less its least possible)."""
    if b.size * a.size <= MAX_PAIRS:
        diff = np.subtract.outer(a, b)
        return float((diff > 0).sum()) + 0.5 * float((diff == 0).sum())
    ranks = _average_ranks(np.concatenate([b, a]))
    return float(ranks[b.size :].sum()) - a.size * (a.size + 1) / 2.0


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 1, tied values sharing the mean of their ranks."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], ordered.size]
    ranks = np.empty(values.size, dtype=np.float64)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


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
    before: Sequence[float], after: Sequence[float], tail: float = SIGNIFICANCE_LEVEL / 2.0
) -> tuple[list[float], list[float], int, int]:
    """Both sides' step times without their slow outliers, and how many each side lost.

    A step more than :data:`SLOW_STEP_SDS` robust standard deviations (:func:`robust_sd`, pooled
    over both sides) and :data:`SLOW_STEP_MIN_PCT` above its own side's median did not run the
    loop's usual work at the usual pace: a checkpoint, a GC pause, an evaluation, the profiler
    starting. Only slow steps: a stall adds time, nothing makes the same work faster. At most a
    fifth of a side (one step below ten) is left out, and enough steps stay for the test to reach
    its confidence (one tail's error ``tail``: the diff's two-sided test by default, the gate's
    one-sided one in :func:`gpuscope.compare.diff.gate.regression`), else nothing is: many slow
    steps are the run's usual pace. Step time is compared on what is left, so one checkpoint
    does not decide a gate; lost time per cause is compared on every step, so the checkpoint
    still shows there."""
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
    if (dropped[0] or dropped[1]) and not reachable(len(kept[0]), len(kept[1]), tail):
        return list(before), list(after), 0, 0  # leaving them out would leave too few to tell
    return kept[0], kept[1], dropped[0], dropped[1]


def left_out_note(before: int, after: int) -> str | None:
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
