"""Diffs and the run history, for the terminal (rich) and as JSON.

Contract: every function presents a :class:`~gpuscope.compare.diff.RunDiff` or a list of
:class:`~gpuscope.history.StoredRun` and computes nothing beyond formatting. The diff document
(``"schema": "gpuscope/diff-1"``) has ``metrics: [{name, unit, better, before, after, change,
change_pct, ci_low, ci_high, p_value, significant, outcome, note, before_mean, after_mean,
before_per_step, after_per_step}]`` (before/after: medians per step; change: the Hodges-Lehmann
shift, its interval at ``confidence_level``), each side's ``step_source``, ``kernels`` (per
``kernel_unit``) and ``findings: {resolved, new, persisting}``. Times are ns, shares %, money
USD, throughput per second; unknown is null.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuscope import __version__
from gpuscope.compare.diff import (
    CONFIDENCE,
    COST,
    GPU_BUSY,
    ITEMS,
    ITERATIONS,
    LOST_PREFIX,
    STEP_TIME,
    Comparison,
    FindingChange,
    FindingSummary,
    KernelChange,
    MetricDiff,
    PredictionCheck,
    RunDiff,
    RunSummary,
)
from gpuscope.compare.diff.memory import MemoryDiff
from gpuscope.history import StoredRun
from gpuscope.names import listed, percentage_change, plural, short_kernel_names
from gpuscope.render.fit import middle, name_room, number_column
from gpuscope.units import duration, gib, ms, signed_gib

SCHEMA = "gpuscope/diff-1"
HISTORY_SCHEMA = "gpuscope/history-1"
_OUTCOME_STYLE = {"better": "green", "worse": "red", "unchanged": "dim", "unclear": "yellow"}
_SPARK = "▁▂▃▄▅▆▇█"
_NAME_WIDTH = 70


# --- JSON ---------------------------------------------------------------------------------------


def to_document(d: RunDiff, before_name: str, after_name: str) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "gpuscope_version": __version__,
        "confidence_level": CONFIDENCE,
        "method": "Mann-Whitney rank test, Hodges-Lehmann shift and interval",
        "before": _side(d.before, before_name),
        "after": _side(d.after, after_name),
        "metrics": [_metric(m) for m in d.metrics],
        "kernel_unit": d.kernel_unit,
        "kernels": [_kernel(k) for k in d.kernels],
        "findings": {
            "resolved": [_finding_change(f) for f in d.resolved],
            "new": [_finding_change(f) for f in d.new],
            "persisting": [_finding_change(f) for f in d.persisting],
        },
        "notes": list(d.notes),
        # What grew in memory, by site (null: neither side records memory).
        "memory": None
        if d.memory is None
        else {
            "peak_before_bytes": d.memory.peak_before_bytes,
            "peak_after_bytes": d.memory.peak_after_bytes,
            "sites": [
                {
                    "location": c.location,
                    "before_bytes": c.before_bytes,
                    "after_bytes": c.after_bytes,
                    "change_bytes": c.change_bytes,
                }
                for c in d.memory.sites
            ],
        },
        "predictions": [
            {
                "cause": c.cause,
                "before_step_ns": round(c.before_step_ns),
                "predicted_step_ns": round(c.predicted_step_ns),
                "after_step_ns": round(c.after_step_ns),
                "error_pct": round(c.error_pct, 2),
                "also_changed": c.also_changed,
            }
            for c in d.predictions
        ],
    }


def prediction_line(c: PredictionCheck) -> str:
    """A fix's prediction (made on "before") beside what "after" measured, and the other
    causes after changed, which the prediction does not cover."""
    line = (
        f"predicted on before, fixing {c.cause}: step {c.before_step_ns / 1e6:,.2f} ->"
        f" {ms(c.predicted_step_ns)}; measured after:"
        f" {ms(c.after_step_ns)}, the median of every step ({c.error_pct:+.1f}%)"
    )
    if c.comparable:
        return line
    return (
        f"{line}; after also changed {listed(c.also_changed)} beyond noise, which this fix"
        " alone does not"
    )


def predictions_note(d: RunDiff) -> str | None:
    """Several fixes made at once: each prediction was made for its fix alone."""
    if len(d.predictions) < 2:
        return None
    return (
        f"each prediction is its own fix alone; this run looks like {len(d.predictions)}"
        " of them at once"
    )


def dumps(d: RunDiff, before_name: str, after_name: str) -> bytes:
    return msgspec.json.format(
        msgspec.json.encode(to_document(d, before_name, after_name)), indent=1
    )


def _side(s: RunSummary, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "source": s.source,
        "device": s.device,
        "devices": s.devices,
        "steps": s.steps,
        "step_source": s.step_source,
        "gpu_hour_usd": s.gpu_hour_usd,
        "idle_pct": _round(s.idle_pct),
        "no_steps_reason": s.no_steps_reason,
    }


def _metric(m: MetricDiff) -> dict[str, Any]:
    c = m.comparison
    return {
        "name": m.name,
        "unit": m.unit,
        "better": m.better,
        "before": _round(c.before_median),
        "after": _round(c.after_median),
        "before_mean": _round(c.before_mean),
        "after_mean": _round(c.after_mean),
        "change": _round(c.change),
        "change_pct": _round(c.change_pct),
        "ci_low": _round(c.ci_low),
        "ci_high": _round(c.ci_high),
        "p_value": None if c.p_value is None else float(f"{c.p_value:.4g}"),
        "significant": c.significant,
        "outcome": m.outcome,
        "note": c.note,
        "before_steps": len(m.before),
        "after_steps": len(m.after),
        "before_per_step": [_round(v) for v in m.before],
        "after_per_step": [_round(v) for v in m.after],
    }


def _kernel(k: KernelChange) -> dict[str, Any]:
    return {
        "name": k.name,
        "status": k.status,
        "before_ns": _round(k.before_ns),
        "after_ns": _round(k.after_ns),
        "change_ns": _round(k.change_ns),
        "change_pct": _round(k.change_pct),
    }


def _finding_change(f: FindingChange) -> dict[str, Any]:
    return {
        "cause": f.cause,
        "title": f.title,
        "before": _finding(f.before),
        "after": _finding(f.after),
    }


def _finding(f: FindingSummary | None) -> dict[str, Any] | None:
    if f is None:
        return None
    return {
        "pattern": f.pattern,
        "lost_ns_per_step": _round(f.lost_ns_per_step),
        "share_pct": _round(f.share_pct),
        "cost_usd_per_gpu_hour": _round(f.cost_usd_per_gpu_hour),
    }


def _round(value: float | None) -> float | None:
    if value is None or math.isnan(value):
        return None
    return round(value, 4)


# --- terminal -----------------------------------------------------------------------------------


def render(d: RunDiff, console: Console, before_name: str, after_name: str) -> None:
    console.print(
        Text(f"{before_name} → {after_name}", style="bold")
        + Text(
            f"  ({_steps(d.before)} before, {_steps(d.after)} after; per-step medians,"
            f" rank test at {100 * CONFIDENCE:.0f}% confidence)",
            style="dim",
        )
    )
    for note in d.notes:
        console.print(Text(f"note: {note}", style="yellow"))
    console.print(_metrics_table(d, console.width))
    if d.memory is not None:
        console.print(_memory(d.memory))
    console.print(_findings(d))
    for c in d.predictions:
        console.print(Text(prediction_line(c), style="cyan"))
    alone = predictions_note(d)
    if alone is not None:
        console.print(Text(f"({alone})", style="dim"))
    if d.kernels:
        console.print(_kernels_table(d, console.width))


def _steps(s: RunSummary) -> str:
    if not s.steps:
        return "no steps"
    return plural(s.steps, "step") + (
        f" from a {s.step_source}"
        if s.step_source and not s.step_source.startswith("profiler")
        else ""
    )


def _label(name: str) -> str:
    labels = {
        STEP_TIME: "step time",
        ITERATIONS: "iterations/s",
        ITEMS: "items/s",
        GPU_BUSY: "GPU busy",
        COST: "lost $/GPU-h",
    }
    if name in labels:
        return labels[name]
    return name.removeprefix(LOST_PREFIX) + " lost/step" if name.startswith(LOST_PREFIX) else name


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "ns":
        return f"{ms(value)}"
    if unit == "pct":
        return f"{value:.1f}%"
    if unit == "per_s":
        return f"{value:,.4g}/s" if value < 1000 else f"{value:,.0f}/s"
    return f"${value:,.2f}"


def _cell(median: float | None, values: list[float], unit: str) -> Text:
    text = Text(_value(median, unit))
    if len(values) >= 2:
        low, high = _value(min(values), unit), _value(max(values), unit)
        # Spaced, so that a narrow column breaks the range at the dash, never inside a figure.
        text.append(f"\n{low.removesuffix(' ms')} – {high}", style="dim")
    return text


def change_text(c: Comparison, unit: str) -> str:
    """A metric's change, saying what kind: for a percentage, the difference in percentage points
    and the relative change named as such (busy 40% -> 50% is +10.0 percentage points, +25%
    relative); for times and dollars, the relative change."""
    if unit == "pct" and c.change is not None:
        return percentage_change(c.change, c.change_pct)
    if c.change_pct is not None:
        return f"{c.change_pct:+.1f}%"
    if c.change is not None:
        return f"{'+' if c.change >= 0 else ''}{_value(c.change, unit)}"
    return "n/a"


#: The widest the diff table's figure columns need be, in characters (a range: "30.54 – 50.85").
FIGURE_WIDTH = 15


def _metrics_table(d: RunDiff, width: int) -> Table:
    table = Table(title="Per step: median, and min–max over steps", title_justify="left")
    # Every cell wraps at its spaces (a metric's name, a range at its dash, a change in
    # percentage points) and no column is cut: rich narrows a column to its longest word.
    # Narrowed evenly, a cause's name (one word: ``launch_overhead``) would be folded inside
    # while the figures beside it wrap at spaces: in a narrow terminal the names keep their
    # width and the figures share what is left (borders and padding take 16 characters).
    words = [w for m in d.metrics for w in _label(m.name).split()]
    names = max(map(len, words), default=6)
    figures = None
    if width < names + 16 + 4 * FIGURE_WIDTH + len(" lost/step"):
        figures = max((width - names - 16) // 4, 6)
    table.add_column("metric", overflow="fold", min_width=names, max_width=figures and names)
    for column in ("before", "after", "change", "vs noise"):
        number_column(table, column, max_width=figures)
    for m in d.metrics:
        c = m.comparison
        change = change_text(c, m.unit)
        verdict = Text(m.outcome, style=_OUTCOME_STYLE[m.outcome])
        if c.p_value is not None:
            verdict.append(f"\np={c.p_value:.2g}", style="dim")
            if c.note:  # slow outlier steps left out of the comparison
                verdict.append(f"\n{c.note.removeprefix('left out as outliers: ')} left out")
        elif c.note:
            short = f"every step {c.apart}; too few to test" if c.apart else c.note.split(":")[0]
            verdict.append(f"\n{short}", style="dim")
        table.add_row(
            _label(m.name),
            _cell(c.before_median, m.before, m.unit),
            _cell(c.after_median, m.after, m.unit),
            change,
            verdict,
        )
    return table


def _memory(m: MemoryDiff) -> Text:
    text = Text("\nMemory\n", style="bold")
    text.append(f"  peak {gib(m.peak_before_bytes, 'none')} → {gib(m.peak_after_bytes, 'none')}\n")
    for c in m.sites:
        style = "red" if c.change_bytes > 0 else "green"
        verb = "grew" if c.change_bytes > 0 else "shrank"
        text.append(f"  {verb:6s} ", style=style)
        text.append(
            f"{c.location}: {gib(c.before_bytes, 'none')} → {gib(c.after_bytes, 'none')}"
            f" ({signed_gib(c.change_bytes)})\n"
        )
    return text


def _findings(d: RunDiff) -> Text:
    text = Text("\nFindings\n", style="bold")
    if not (d.resolved or d.new or d.persisting):
        text.append("  none before or after\n", style="dim")
    for heading, items, style in (
        ("resolved", d.resolved, "green"),
        ("new", d.new, "red"),
        ("persisting", d.persisting, "yellow"),
    ):
        for f in items:
            text.append(f"  {heading:<10}", style=f"bold {style}")
            text.append(f" {f.cause}: {f.title}")
            # The table above gives medians; a finding's figure is its mean over steps.
            timed = any(
                x is not None and x.lost_ns_per_step is not None for x in (f.before, f.after)
            )
            change = f"{_per_step(f.before)} → {_per_step(f.after)}"
            shown = f"mean per step: {change}" if timed else f"{change} per step"
            text.append(f"  ({shown})\n", style="dim")
    return text


def _per_step(f: FindingSummary | None) -> str:
    if f is None:
        return "none"
    if f.lost_ns_per_step is None:
        return f"{f.share_pct:.1f}%"
    return _value(f.lost_ns_per_step, "ns")


def _kernels_table(d: RunDiff, width: int) -> Table | Text:
    """Each kernel's device time before and after: every figure whole. The kernel names give
    way (shortened in the middle, both ends kept); where even that leaves no room, each kernel
    is a line of its own with its figures under it."""
    unit = "step" if d.kernel_unit == "step" else "second"
    title = f"Kernel changes, device time per {unit}"
    short = short_kernel_names(k.name for k in d.kernels)  # template arguments elided first
    rows = [
        (
            k.status,
            short[k.name].removeprefix("void "),
            # In the unit that reads: a kernel of a few µs is not "0.00 ms", nor its change.
            duration(k.before_ns),
            duration(k.after_ns),
            f"{'+' if k.change_ns >= 0 else ''}{duration(k.change_ns)}",
        )
        for k in d.kernels
    ]
    figures = [["before", *(r[2] for r in rows)], ["after", *(r[3] for r in rows)]]
    figures.append(["Δ", *(r[4] for r in rows)])
    room = name_room(width, [["change", *(r[0] for r in rows)], *figures])
    if room is None:
        text = Text(f"{title}\n", style="italic")
        for status, name, before, after, change in rows:
            text.append(f"{status:<8}", style=_STATUS_STYLE.get(status, ""))
            text.append(f"{name}\n         {before} → {after} ({change})\n")
        return text
    table = Table(title=title, title_justify="left")
    table.add_column("change", no_wrap=True)
    table.add_column("kernel", no_wrap=True)
    for column in ("before", "after", "Δ"):
        number_column(table, column)
    for status, name, before, after, change in rows:
        table.add_row(
            Text(status, style=_STATUS_STYLE.get(status, "")),
            middle(name, min(room, _NAME_WIDTH)),
            before,
            after,
            change,
        )
    return table


_STATUS_STYLE = {"added": "red", "slower": "red", "removed": "green", "faster": "green"}


# --- history ------------------------------------------------------------------------------------


def history_document(runs: list[StoredRun], metric: str | None) -> dict[str, Any]:
    return {
        "schema": HISTORY_SCHEMA,
        "metric": metric,
        "runs": [
            {
                "id": r.id,
                "created_at": r.created_at,
                "label": r.label,
                "git_commit": r.git_commit,
                "source": r.source,
                "source_sha256": r.source_sha256,
                "device": r.device,
                "steps": r.summary.steps,
                "step_time_ns": _round(r.summary.headline(STEP_TIME)),
                "gpu_busy_pct": _round(r.summary.headline(GPU_BUSY)),
                "idle_pct": _round(r.summary.idle_pct),
                "cost_usd_per_gpu_hour": _round(r.summary.headline(COST)),
                "findings": [f.cause for f in r.summary.findings],
                **({"value": _round(r.summary.headline(metric))} if metric else {}),
            }
            for r in runs
        ],
    }


def render_history(runs: list[StoredRun], console: Console, metric: str | None) -> None:
    """The saved runs, newest first, in 80 columns with every figure whole: a run's time is
    stacked over its commit and its step time over its busy share (or the metric over its change),
    and a long label or cause wraps rather than running off the edge."""
    if not runs:
        console.print(Text("No saved runs (gpuscope diagnose TRACE --save).", style="dim"))
        return
    if not _history_fits(runs, console.width, metric):
        console.print(_history_stacked(runs, metric))
        return
    table = Table(title="Saved runs, newest first", title_justify="left")
    table.add_column("id", justify="right", no_wrap=True)
    table.add_column("time (UTC)\ncommit", no_wrap=True)
    table.add_column("label", overflow="fold")
    if metric:
        number_column(table, f"{_label(metric)}\nvs prev.")
    else:
        number_column(table, "step time\nbusy")
        number_column(table, "lost\n$/GPU-h")
    table.add_column("top finding", overflow="fold")
    for i, r in enumerate(runs):
        s = r.summary
        row = [
            str(r.id),
            r.created_at.replace("T", " ")[5:16] + "\n" + (r.git_commit or "")[:7],
            r.label or "",
        ]
        if metric:
            previous = runs[i + 1].summary if i + 1 < len(runs) else None
            row.append("\n".join(_trend_cells(s, previous, metric)))
        else:
            step = _value(s.headline(STEP_TIME), "ns")
            row += [
                f"{step}\n{_value(s.headline(GPU_BUSY), 'pct')}",
                _value(s.headline(COST), "usd"),
            ]
        row.append(s.findings[0].cause if s.findings else "")
        table.add_row(*row)
    console.print(table)
    if metric:
        console.print(_sparkline(runs, metric))


def _history_fits(runs: list[StoredRun], width: int, metric: str | None) -> bool:
    """Whether the history table fits ``width`` with each figure and cause on one line and a
    label column of at least :data:`~gpuscope.render.fit.MIN_NAME` characters."""
    causes = ["top finding", *(r.summary.findings[0].cause for r in runs if r.summary.findings)]
    figures = [["9,999.99 ms"], ["$9,999.99"]] if not metric else [["9,999.99 ms", "+999.9%"]]
    return name_room(width, [[str(runs[0].id)], ["12-31 23:59"], *figures, causes]) is not None


def _history_stacked(runs: list[StoredRun], metric: str | None) -> Text:
    """The saved runs where no table fits: a run's id, time, commit and label on one line, its
    figures and top finding on the next (wrapped, never cut)."""
    text = Text("Saved runs, newest first\n", style="italic")
    for i, r in enumerate(runs):
        s = r.summary
        head = [str(r.id), r.created_at.replace("T", " ")[5:16], (r.git_commit or "")[:7]]
        text.append("  ".join(p for p in [*head, r.label or ""] if p) + "\n", style="bold")
        if metric:
            previous = runs[i + 1].summary if i + 1 < len(runs) else None
            value, change = _trend_cells(s, previous, metric)
            figures = f"{_label(metric)} {value}" + (f" ({change} vs prev.)" if change else "")
        else:
            figures = (
                f"step {_value(s.headline(STEP_TIME), 'ns')} · busy"
                f" {_value(s.headline(GPU_BUSY), 'pct')} · lost"
                f" {_value(s.headline(COST), 'usd')}/GPU-h"
            )
        top = s.findings[0].cause if s.findings else "none"
        text.append(f"  {figures} · top finding {top}\n")
    return text


def _unit_of(metric: str) -> str:
    if metric.endswith("_pct"):
        return "pct"
    return "usd" if metric == COST else "ns"


def _trend_cells(s: RunSummary, previous: RunSummary | None, metric: str) -> list[str]:
    value = s.headline(metric)
    before = previous.headline(metric) if previous else None
    change = ""
    if value is not None and before:
        change = f"{100 * (value - before) / before:+.1f}%"
    return [_value(value, _unit_of(metric)), change]


def _sparkline(runs: list[StoredRun], metric: str) -> Text:
    values = [r.summary.headline(metric) for r in reversed(runs)]
    known = [v for v in values if v is not None]
    if len(known) < 2:
        return Text("")
    low, high = min(known), max(known)
    span = (high - low) or 1.0
    marks = "".join(
        " " if v is None else _SPARK[int((v - low) / span * (len(_SPARK) - 1))] for v in values
    )
    return Text(f"{_label(metric)}, oldest → newest: {marks}", style="cyan")
