"""Predictions: a job's graphs replayed under an edit set, as a saving per step with its range.

Contract in :mod:`gpuscope.analyses.whatif`.
"""

from __future__ import annotations

import math

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope._arrays import median, percentile
from gpuscope.analyses.whatif.edits import ASSUMPTIONS, EditInputs, apply_edit, removed_ns
from gpuscope.analyses.whatif.graph import Edit, Graph
from gpuscope.analyses.whatif.schedule import replay, step_times
from gpuscope.units import ms

I64 = NDArray[np.int64]


# --- predictions ------------------------------------------------------------------------------


class Prediction(msgspec.Struct, frozen=True):
    """What a fix is worth, per GPU and step, from replaying the trace with it applied."""

    cause: str  # a finding's cause, or "all" for every fix together
    assumption: str
    step_ns: float  # measured: the median step (median over ranks of each rank's median)
    predicted_step_ns: float
    saving_ns_per_step: float  # per GPU
    saving_low_ns_per_step: float  # the spread over steps
    saving_high_ns_per_step: float
    saving_ns: int  # over the steps replayed, summed over ranks (as findings' lost_ns is)
    steps: int  # steps replayed per rank
    note: str | None = None
    #: The most the edits can save, summed over ranks (``edits.removed_ns``): ``saving_ns`` never
    #: exceeds it; None where no bound was computed (a saved diagnosis from before it).
    removed_ns: int | None = None
    #: "step" when the trace has steps; "window" when it has none: the whole window is replayed
    #: as one, nothing is called a step and nothing is extrapolated per day.
    unit: str = "step"
    #: Other findings' causes whose time this fix hides (its saving includes theirs): fixing
    #: them after it saves less than half of what they save alone (diagnosis.predict).
    hides: list[str] = msgspec.field(default_factory=list)

    @property
    def faster_pct(self) -> float:
        return 100.0 * self.saving_ns_per_step / self.step_ns if self.step_ns else 0.0


def _steps_of(g: Graph, edit: Edit) -> tuple[NDArray[np.float64], bool]:
    start, end, settled = replay(g, edit)
    return step_times(g, start, end), settled


def _step_part(g: Graph, rows: I64, ns: I64) -> int:
    """The sum of ``ns`` over the rows whose work falls in the steps replayed."""
    nodes = g.node_of_row[rows]
    known = nodes >= 0
    k = g.step_of[nodes[known]]
    return int(ns[known][k >= 0].sum())


class Replayer:
    """The graphs of a job's traces, their baseline replays, and predictions for edit sets."""

    def __init__(self, graphs: list[Graph], inputs: list[EditInputs], stragglers: set[int]) -> None:
        self.graphs = graphs
        self.inputs = inputs
        self.stragglers = stragglers  # graph positions of straggler ranks
        self.measured = [step_times(g, g.start, g.end) for g in graphs]
        self.baseline = [_steps_of(g, Edit.none(g))[0] for g in graphs]

    def predict(self, causes: list[str], name: str | None = None) -> Prediction | None:
        causes = [c for c in causes if c in ASSUMPTIONS]
        if not causes or not self.graphs:
            return None
        per_rank: list[NDArray[np.float64]] = []
        predicted: list[NDArray[np.float64]] = []  # per rank: each step's time with the fix
        skip = self.stragglers if "straggler" in causes else set()
        waiting_removed = 0
        removed = 0
        for i, (g, inputs) in enumerate(zip(self.graphs, self.inputs, strict=True)):
            edit = Edit.none(g)
            for cause in causes:
                apply_edit(g, inputs, cause, edit)
            after, settled = _steps_of(g, edit)
            if not settled:
                return None  # a promise the replay could not check: none rather than too much
            if after.size != self.baseline[i].size or i in skip:
                continue
            per_rank.append(self.baseline[i] - after)
            predicted.append(self.measured[i] - per_rank[-1])
            removed += removed_ns(g, edit)
            if "straggler" in causes:
                waiting_removed += int(
                    _step_part(g, inputs.collective_rows, inputs.straggler_cut_ns)
                )
            elif "collective_wait" in causes:
                waiting_removed += int(_step_part(g, inputs.collective_rows, inputs.wait_ns))
        measured = [m for m in self.measured if m.size]
        if not per_rank or not measured or not any(p.size for p in predicted):
            return None
        pooled = np.concatenate(per_rank)
        # One step everywhere: the measured step is the median step, as in the step table (the
        # first step's device time starts at its first work, not where the host began it, so a
        # mean would understate it), and the predicted one the median of the steps with the fix
        # applied; the saving is their difference.
        step_ns = float(median([median(m) for m in measured]))
        fixed_ns = float(median([median(p) for p in predicted if p.size]))
        saving = step_ns - fixed_ns
        if not (math.isfinite(saving) and step_ns > 0.0 and saving <= step_ns):
            # A step predicted to take less than nothing: the replay met times it cannot order
            # (shuffled or corrupt); no prediction rather than an impossible one.
            return None
        # Removing waits cannot slow a step down: a replay that says so met times out of order
        # (a shuffled trace). The fix then saves nothing, never a negative amount.
        saving = max(saving, 0.0)
        total = max(round(float(pooled.sum())), 0)
        note = None
        if waiting_removed and len(causes) == 1:
            note = (
                f"the other ranks would wait {ms(waiting_removed)} less inside"
                f" collectives in all; {ms(total)} of that shortens their steps: the"
                " rest of the waiting ran alongside other work, or the work after it waited for"
                " the host, which keeps its time"
            )
        low, high = (
            (float(pooled.min()), float(pooled.max()))
            if pooled.size < 10
            else (float(percentile(pooled, 10)), float(percentile(pooled, 90)))
        )
        cause = name or causes[0]
        assumption = (
            ASSUMPTIONS[causes[0]] if len(causes) == 1 else "each fix as its own finding assumes"
        )
        return Prediction(
            cause=cause,
            assumption=assumption,
            step_ns=step_ns,
            predicted_step_ns=step_ns - saving,
            saving_ns_per_step=saving,
            saving_low_ns_per_step=min(low, step_ns),
            saving_high_ns_per_step=min(high, step_ns),
            saving_ns=total,
            steps=max(int(m.size) for m in measured),
            note=note,
            removed_ns=removed,
            unit="step" if any(g.trace.steps for g in self.graphs) else "window",
        )
