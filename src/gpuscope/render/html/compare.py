"""The before/after report: what changed per step, findings resolved and new, kernel changes,
then each side's verdict, findings and charts in two columns."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go  # type: ignore[import-untyped]

from gpuscope.analyses.attribution import CAUSES
from gpuscope.compare.diff import (
    COST,
    EXPOSED_COMMUNICATION,
    GPU_BUSY,
    ITEMS,
    ITERATIONS,
    LOST_PREFIX,
    SIGNIFICANCE_LEVEL,
    STEP_TIME,
    MetricDiff,
    RunDiff,
)
from gpuscope.diagnosis import Diagnosis
from gpuscope.names import (
    percentage_change,
)
from gpuscope.render import diff as diff_words
from gpuscope.render.html.page import (
    LAYOUT,
    HtmlOptions,
    Section,
    assemble_page,
    escape,
    name_cell,
    section_html,
)
from gpuscope.render.html.report import report_sections
from gpuscope.render.html.sections import (
    code_spans,
    findings_html,
    header_html,
    inputs_html,
    verdict_html,
)
from gpuscope.units import duration


def render_diff(
    before: Diagnosis,
    after: Diagnosis,
    options: HtmlOptions | None = None,
    *,
    change: RunDiff,
) -> str:
    """Two diagnoses side by side: what changed per step (``change``, with whether it beats the
    noise: :func:`gpuscope.compare.diff.diff` of their summaries), findings resolved and new,
    kernel changes, then each one's verdict, findings and charts in two columns."""
    options = options or HtmlOptions()
    comparison = [_step_comparison(change), _cause_comparison(change, before, after)]
    left = report_sections(before, options, prefix="before-")
    right = report_sections(after, options, prefix="after-")
    body = "\n".join(
        [
            "<h1>gpuscope: before and after</h1>",
            _diff_notes(change),
            _metric_table(change),
            _finding_changes(change),
            _prediction_checks(change),
            *(section_html(s) for s in comparison),
            _kernel_changes(change),
            _columns(_side(before, "Before"), _side(after, "After")),
            *(_columns(a, b) for a, b in _paired(left, right)),
        ]
    )
    title = f"gpuscope: {before.source} vs {after.source}"
    return assemble_page(title, body, [*comparison, *left, *right])


def _paired(left: list[Section], right: list[Section]) -> list[tuple[str, str]]:
    """The two runs' sections side by side, matched by heading in the order they come: a run
    with sections the other lacks (per-rank charts of an 8-rank job beside a one-GPU run) gets
    them beside an empty column, never a mismatched pair."""
    waiting: dict[str, list[Section]] = {}
    for b in right:
        waiting.setdefault(b.title, []).append(b)
    pairs = []
    for a in left:
        same = waiting.get(a.title)
        pairs.append((section_html(a), section_html(same.pop(0)) if same else ""))
    pairs += [("", section_html(b)) for rest in waiting.values() for b in rest]
    return pairs


def _columns(left: str, right: str) -> str:
    return f"<div class='cols'><div>{left}</div><div>{right}</div></div>"


def _side(d: Diagnosis, title: str) -> str:
    found = findings_html(d.findings, d.verdict.wasted_usd_per_gpu_hour, d.all_fixes)
    return f"{header_html(d, title)}{verdict_html(d.verdict)}{inputs_html(d)}{found}"


def _diff_notes(change: RunDiff) -> str:
    notes = "".join(f"<p class='warning'>{escape(n)}</p>" for n in change.notes)
    return (
        f"<p class='dim'>before: <span class='mono'>{escape(change.before.source)}</span> · after: "
        f"<span class='mono'>{escape(change.after.source)}</span></p>{notes}"
    )


_OUTCOME_COLOURS = {"better": "#2ca02c", "worse": "#d62728", "unchanged": "#5d6675"}


def _metric_label(name: str) -> str:
    labels = {
        STEP_TIME: "step time",
        ITERATIONS: "iterations per second",
        ITEMS: "items per second",
        GPU_BUSY: "GPU busy",
        COST: "lost time per GPU-hour",
    }
    return labels.get(name, name.replace(LOST_PREFIX, "lost per step: "))


def _metric_value(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "ns":
        return duration(value)
    if unit == "pct":
        return f"{value:.1f}%"
    if unit == "per_s":
        return f"{value:,.4g}/s"
    return f"${value:,.2f}"


def _metric_row(m: MetricDiff) -> str:
    c = m.comparison
    change = "n/a" if c.change_pct is None else f"{c.change_pct:+.1f}%"
    if m.unit == "pct" and c.change is not None:
        change = percentage_change(c.change, c.change_pct)
    interval = (
        "n/a"
        if c.ci_low is None or c.ci_high is None
        else f"{_metric_value(c.ci_low, m.unit)} … {_metric_value(c.ci_high, m.unit)}"
    )
    outcome = m.outcome
    colour = _OUTCOME_COLOURS.get(outcome, "#8a5300")
    note = f" <span class='dim'>({escape(c.note)})</span>" if c.note else ""
    return (
        f"<tr><td>{escape(_metric_label(m.name))}</td>"
        f"<td class='num'>{_metric_value(c.before_median, m.unit)}</td>"
        f"<td class='num'>{_metric_value(c.after_median, m.unit)}</td>"
        f"<td class='num'>{change}</td><td class='num'>{interval}</td>"
        f"<td class='num'>{'n/a' if c.p_value is None else f'{c.p_value:.3g}'}</td>"
        f"<td style='color:{colour}'><b>{escape(outcome)}</b>{note}</td></tr>"
    )


def _metric_table(change: RunDiff) -> str:
    rows = "".join(_metric_row(m) for m in change.metrics)
    level = 100 * (1 - SIGNIFICANCE_LEVEL)
    return (
        "<section id='diff-metrics'><h2>What changed, per step</h2>"
        f"<p class='note'>Medians over steps; the change is the Hodges-Lehmann shift and the"
        f" interval its {level:g}% confidence interval (Mann-Whitney); 'unchanged' means within"
        " step-to-step noise.</p>"
        "<table><tr><th>metric</th><th class='num'>before</th><th class='num'>after</th>"
        "<th class='num'>change</th><th class='num'>interval</th><th class='num'>p</th>"
        f"<th>outcome</th></tr>{rows}</table></section>"
    )


def _prediction_checks(change: RunDiff) -> str:
    """How close the predictions made on "before" came to what "after" measured (the words of
    the terminal diff)."""
    if not change.predictions:
        return ""
    items = "".join(f"<li>{escape(diff_words.prediction_line(c))}</li>" for c in change.predictions)
    note = diff_words.predictions_note(change)
    tail = f"<p class='note'>{escape(note)}.</p>" if note else ""
    return (
        "<section id='prediction-check'><h2>Predicted on before, measured after</h2>"
        f"<ul>{items}</ul>{tail}</section>"
    )


def _finding_changes(change: RunDiff) -> str:
    groups = (
        ("resolved", change.resolved),
        ("new", change.new),
        ("still there", change.persisting),
    )
    items = "".join(
        f"<li><b>{escape(label)}</b>: "
        + (", ".join(f"{escape(f.cause)} ({code_spans(f.title)})" for f in found) or "none")
        + "</li>"
        for label, found in groups
    )
    return f"<section><h2>Findings</h2><ul>{items}</ul></section>"


def _kernel_changes(change: RunDiff) -> str:
    if not change.kernels:
        return ""
    unit = "per step" if change.kernel_unit == "step" else "per second of device span"
    rows = "".join(
        f"<tr><td class='mono kernel'>{name_cell(k.name)}</td><td>{escape(k.status)}</td>"
        f"<td class='num'>{duration(k.before_ns)}</td>"
        f"<td class='num'>{duration(k.after_ns)}</td></tr>"
        for k in change.kernels
    )
    return (
        f"<section><h2>Kernels that changed most</h2><p class='note'>Device time {unit}, per "
        "GPU.</p><table><tr><th>kernel</th><th>change</th><th class='num'>before</th>"
        f"<th class='num'>after</th></tr>{rows}</table></section>"
    )


_SIDES = (("before", "#9aa5b8"), ("after", "#1f77b4"))


def _step_comparison(change: RunDiff) -> Section:
    title = "Step time, step by step"
    step = change.metric(STEP_TIME)
    busy = change.metric(GPU_BUSY)
    if step is None or not (step.before or step.after):
        return Section("diff-chart-steps", title, "Neither trace has profiler steps.", None)
    figure = go.Figure()
    for (label, colour), values, shares in (
        (_SIDES[0], step.before, busy.before if busy else []),
        (_SIDES[1], step.after, busy.after if busy else []),
    ):
        figure.add_trace(
            go.Bar(
                x=list(range(1, len(values) + 1)),
                y=np.round(np.asarray(values, dtype=np.float64) / 1e6, 6),
                name=label,
                marker={"color": colour},
                customdata=[round(x, 1) for x in shares] or None,
                hovertemplate="step %{x}: %{y:.3f} ms"
                + (", %{customdata}% busy" if shares else "")
                + "<extra>%{fullData.name}</extra>",
            )
        )
    figure.update_layout(
        barmode="group",
        height=320,
        **LAYOUT,
        xaxis={"title": {"text": "step (the first recorded step only opens the second)"}},
        yaxis={"title": {"text": "ms"}, "automargin": True},
    )
    note = "Each step on the device, from the end of the previous step's work to its own."
    return Section("diff-chart-steps", title, note, figure)


def _cause_comparison(change: RunDiff, before: Diagnosis, after: Diagnosis) -> Section:
    lost = [m for m in change.metrics if m.name.startswith(LOST_PREFIX)]
    if lost and all(m.comparison.before_mean is not None for m in lost):
        keys = [m.name.removeprefix(LOST_PREFIX) for m in lost]
        values = [
            [(getattr(m.comparison, f"{side}_mean") or 0.0) / 1e6 for m in lost]
            for side in ("before", "after")
        ]
        unit, note = "ms per step", "Time lost per step to each cause (mean over steps)."
    else:
        totals = [_cause_shares(before), _cause_shares(after)]
        keys = [k for k in totals[0] if totals[0][k] or totals[1][k]]
        values = [[t[k] for k in keys] for t in totals]
        unit, note = "% of device time", "Share of device time lost to each cause."
    figure = go.Figure()
    for (label, colour), xs in zip(_SIDES, values, strict=True):
        figure.add_trace(
            go.Bar(
                y=keys,
                x=np.round(xs, 6),
                orientation="h",
                name=label,
                marker={"color": colour},
                hovertemplate=f"%{{y}}: %{{x:,.3f}} {unit}<extra>%{{fullData.name}}</extra>",
            )
        )
    figure.update_layout(
        barmode="group",
        height=max(240, 80 + 44 * len(keys)),
        **LAYOUT,
        xaxis={"title": {"text": unit}},
        yaxis={"autorange": "reversed", "automargin": True},
    )
    return Section("diff-chart-causes", "Lost time by cause: before vs after", note, figure)


def _cause_shares(d: Diagnosis) -> dict[str, float]:
    """Each idle cause's and exposed communication's share of the job's device time, in %."""
    span = max(sum(x.temporal.span_ns for x in d.devices), 1)
    shares = {c: 100.0 * sum(x.idle.lost_ns(c) for x in d.devices) / span for c in CAUSES}
    exposed = sum(x.overlap.exposed_ns for x in d.devices)
    shares[EXPOSED_COMMUNICATION] = 100.0 * exposed / span
    return shares
