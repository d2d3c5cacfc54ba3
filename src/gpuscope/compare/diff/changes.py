"""Two run summaries compared: per-metric shifts, kernel changes, findings resolved and new, and
how close each resolved finding's predicted saving came.

Contract in :mod:`gpuscope.compare.diff`.
"""

from __future__ import annotations

import msgspec
import numpy as np

from gpuscope.analyses.attribution import CAUSES
from gpuscope.compare.diff.memory import MemoryDiff, memory_diff
from gpuscope.compare.diff.stats import Comparison, compare, left_out_note, typical_steps
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
    headline,
)

#: Kernel changes listed in a diff, and the smallest change listed (% of the kernel's time
#: before; kernels added or removed are always listed).
TOP_KERNEL_CHANGES = 10
KERNEL_CHANGE_MIN_PCT = 2.0


# --- diffs --------------------------------------------------------------------------------------


class MetricDiff(msgspec.Struct, frozen=True):
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


class KernelChange(msgspec.Struct, frozen=True):
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


class FindingChange(msgspec.Struct, frozen=True):
    """One cause's finding on both sides of a diff (None on a side that does not have it): a
    view of two findings, so its cause and title are theirs (before's when both have it)."""

    before: FindingSummary | None
    after: FindingSummary | None

    @property
    def cause(self) -> str:
        return self._either.cause

    @property
    def title(self) -> str:
        return self._either.title

    @property
    def _either(self) -> FindingSummary:
        side = self.before or self.after
        assert side is not None, "a finding change has a finding on at least one side"
        return side


class PredictionCheck(msgspec.Struct, frozen=True):
    """A fix's predicted step time (made on "before") beside "after"'s measured.

    The replay of one fix predicts the run in which only that cause changes, with the causes
    its fix hides. ``also_changed`` names the other causes whose time lost per step moved beyond
    noise between the two runs: after's step time then measures those changes too, and the gap
    between prediction and measurement measures those too, not the replay alone
    (``comparable`` is False)."""

    cause: str
    before_step_ns: float
    predicted_step_ns: float
    after_step_ns: float
    also_changed: list[str] = msgspec.field(default_factory=list)

    @property
    def comparable(self) -> bool:
        return not self.also_changed

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted_step_ns - self.after_step_ns) / self.after_step_ns


class RunDiff(msgspec.Struct, frozen=True):
    before: RunSummary
    after: RunSummary
    metrics: list[MetricDiff]
    kernel_unit: str
    kernels: list[KernelChange]
    resolved: list[FindingChange]
    new: list[FindingChange]
    persisting: list[FindingChange]
    notes: list[str]
    predictions: list[PredictionCheck] = msgspec.field(default_factory=list)
    memory: MemoryDiff | None = None  # what grew in memory, by site (None: no memory record)

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
    metrics = _metric_diffs(before, after, items_per_step)
    return RunDiff(
        before=before,
        after=after,
        metrics=metrics,
        kernel_unit=unit,
        kernels=_kernel_changes(before, after, unit, top_kernels),
        resolved=resolved,
        new=new,
        persisting=persisting,
        notes=notes,
        predictions=_prediction_checks(before, after, resolved, persisting, metrics),
        memory=memory_diff(
            before.memory_peak_bytes,
            before.memory_sites,
            after.memory_peak_bytes,
            after.memory_sites,
        ),
    )


def _prediction_checks(
    before: RunSummary,
    after: RunSummary,
    resolved: list[FindingChange],
    persisting: list[FindingChange],
    metrics: list[MetricDiff],
) -> list[PredictionCheck]:
    """How close the prediction of each fix this run looks like it made came: before's step
    time less the saving, against after's step time (both measured here the same way).

    The fixes it looks like it made: the findings gone after, and those still there whose time
    lost per step fell beyond noise; but not one whose fall another of them explains (a fix the
    replay found hides it: an ``.item()`` removed also ends the loader's waits it exposed). Each
    check names the other causes that moved beyond noise and its fix does not hide: the run
    then measured more than that fix (see :class:`PredictionCheck`)."""
    b, a = headline(before, STEP_TIME), headline(after, STEP_TIME)
    if not b or not a:
        return []
    moved = {
        m.name.removeprefix(LOST_PREFIX): m.outcome
        for m in metrics
        if m.name.startswith(LOST_PREFIX) and m.outcome in ("better", "worse")
    }
    fixed = [f.before for f in resolved if f.before is not None]
    fixed += [f.before for f in persisting if f.before and moved.get(f.cause) == "better"]
    hidden = {cause for f in fixed for cause in f.hides}
    return [
        PredictionCheck(
            f.cause,
            b,
            b - f.predicted_saving_ns_per_step,
            a,
            [cause for cause in moved if cause != f.cause and cause not in f.hides],
        )
        for f in fixed
        if f.predicted_saving_ns_per_step is not None and f.cause not in hidden
    ]


def _metric_diffs(
    before: RunSummary, after: RunSummary, items_per_step: float | None
) -> list[MetricDiff]:
    causes = [*CAUSES, EXPOSED_COMMUNICATION]
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
                comparison = msgspec.structs.replace(
                    compare(typical_b, typical_a), note=left_out_note(left_b, left_a)
                )
        if (not b or not a) and name in before.window and name in after.window:
            comparison = _compare_windows(before.window[name], after.window[name])
        elif (not b and before.steps) or (not a and after.steps):
            side = "before" if not b and before.steps else "after"
            reason = "the device has no price (pass --gpu-hour-usd)" if name == COST else "no data"
            comparison = msgspec.structs.replace(comparison, note=f"not available {side}: {reason}")
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
    resolved = [FindingChange(f, None) for c, f in b.items() if c not in a]
    new = [FindingChange(None, f) for c, f in a.items() if c not in b]
    persisting = [FindingChange(f, a[c]) for c, f in b.items() if c in a]
    return resolved, new, persisting
