"""The words every renderer uses for a predicted saving (a what-if ``Prediction``).

"if you fix it: step 44.00 -> 31.00 ms (29% faster; 25-33% over steps), $N per GPU-day".
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuscope.analyses.whatif import Prediction
from gpuscope.diagnosis.findings import Finding
from gpuscope.diagnosis.money import per_day
from gpuscope.units import ms

#: The figure a report's verdict shows for ``Verdict.wasted_usd_per_gpu_hour``.
HEADLINE_LABEL = "all fixes save per GPU-hour"


def headline(
    p: Prediction, saving_usd_per_gpu_hour: float | None, subject: str = "if you fix it"
) -> str:
    """Step time before and after, how much faster, the spread over steps, dollars per GPU-day.
    The dollars are those the diagnosis priced the prediction at (a finding's
    ``cost_usd_per_gpu_hour``, the verdict's ``wasted_usd_per_gpu_hour``), so that a saving it
    calls none is $0.00 here too."""
    faster = p.faster_pct
    text = f"{subject}: {p.unit} {p.step_ns / 1e6:,.2f} -> {ms(p.predicted_step_ns)}"
    if faster >= 0:
        text += f" ({faster:.0f}% faster"
    else:
        text += f" ({-faster:.0f}% slower"
    low, high = _pct(p.saving_low_ns_per_step, p), _pct(p.saving_high_ns_per_step, p)
    if p.steps > 1 and f"{low:.0f}" != f"{high:.0f}":
        text += f"; {low:.0f} to {high:.0f}% over {p.steps} steps"
    text += ")"
    gpu_day = per_day(saving_usd_per_gpu_hour, 1) if p.step_ns and p.unit == "step" else None
    if gpu_day is not None:
        text += f", ${gpu_day:,.2f} per GPU-day"
    return text


def _pct(saving_ns: float, p: Prediction) -> float:
    return 100.0 * saving_ns / p.step_ns if p.step_ns else 0.0


def details(p: Prediction) -> str:
    """The assumption, and the note when the saving is below what the finding names."""
    text = f"assumes {p.assumption}"
    return f"{text}; {p.note}" if p.note else text


def findings_title(found: Sequence[Finding]) -> str:
    """Findings come by what fixing each saves (diagnosis.findings.ranked): the replay's saving
    where there is one, else the time the finding measured."""
    if any(f.prediction is not None for f in found):
        return "Findings, what fixing saves first (the replay's saving beside each)"
    return "Findings, most time lost first"


def money(f: Finding) -> str | None:
    """A finding's dollars as what they are: a predicted saving, "saves nothing" (never a cost
    of $0.00 beside a large share), or, with predictions off, the time it names priced."""
    if f.cost_usd_per_gpu_hour is None:
        return None
    if f.prediction is None:
        text = f"${f.cost_usd_per_gpu_hour:,.2f}/GPU-hour of lost time"
    elif f.cost_usd_per_gpu_hour == 0.0:
        return "fixing it is predicted to save no step time ($0.00)"
    else:
        text = f"fixing it saves ${f.cost_usd_per_gpu_hour:,.2f}/GPU-hour"
    if f.cost_usd_per_day:
        text += f" (${f.cost_usd_per_day:,.0f}/day)"
    return text
