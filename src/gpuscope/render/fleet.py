"""The fleet report: a :class:`~gpuscope.fleet.FleetSummary` in the terminal and as HTML.

Contract: :func:`render_terminal` writes to a rich ``Console``; :func:`render_html` returns the
text of one self-contained HTML file (plotly.js inlined, user text escaped) built with the single
job report's page, escaping and section helpers from :mod:`gpuscope.render.html.page`. Neither
computes anything the summary does not hold.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import plotly.graph_objects as go  # type: ignore[import-untyped]
from rich.console import Console
from rich.table import Table
from rich.text import Text

from gpuscope import __version__
from gpuscope.fleet import FleetSummary, JobRow, Waste
from gpuscope.names import plural, short_path
from gpuscope.render.fit import distinct_tails, middle, name_room, number_column
from gpuscope.render.html.page import (
    LAYOUT,
    Section,
    assemble_page,
    escape,
    plot_text,
    section_html,
)
from gpuscope.units import usd

#: The causes' categories are those of Gao et al., "An Empirical Study on Low GPU Utilization of
#: Deep Learning Jobs" (ICSE 2024); the title says what they are, not only where they come from.
_CATEGORY_TITLE = "by category: data, model or job (as in a study of low GPU use, ICSE 2024)"


def _hours(value: float) -> str:
    return f"{value:,.2f}" if value == 0 or abs(value) >= 0.01 else f"{value:.2g}"


def _headline(s: FleetSummary) -> str:
    return (
        f"{plural(s.jobs, 'job')} ({s.failed} failed): {_hours(s.gpu_hours)} GPU-hours analysed, "
        f"{_hours(s.lost_gpu_hours)} GPU-hours lost ({usd(s.lost_usd)} of lost time);"
        f" fixing every finding would save {usd(s.saving_usd)} (predicted)"
    )


# --- terminal -----------------------------------------------------------------------------------


def render_terminal(s: FleetSummary, console: Console) -> None:
    console.print(_headline(s), highlight=False)
    console.print(_waste_table(_CATEGORY_TITLE, s.by_category))
    console.print(_waste_table("by cause", s.by_cause))
    console.print(_worst_table(s.worst, console.width))
    if s.failed_jobs:
        console.print(_failed_table(s.failed_jobs))
    if s.by_day:
        console.print(_waste_table("by day", s.by_day))


def _waste_table(title: str, rows: Sequence[Waste]) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("", overflow="fold")
    for name in ("GPU-hours", "USD", "jobs"):
        number_column(table, name)  # folded, never cut, in a terminal narrower than the table
    for w in rows:
        table.add_row(w.key, _hours(w.gpu_hours), usd(w.usd), str(w.jobs))
    return table


def _worst_table(rows: Sequence[JobRow], width: int) -> Table | Text:
    """The worst jobs, every figure whole: jobs by the shortest path tails that tell them apart
    (their basenames), shortened in the middle if need be; a job's bound stacked over its top
    cause, its dollars under its GPU-hours."""
    cells = [
        (
            f"{j.idle_pct:.1f}" if j.idle_pct is not None else "n/a",
            f"{j.bound or ''}\n{j.top_cause or ''}",
            f"{_hours(j.lost_gpu_hours or 0.0)}\n{usd(j.lost_usd)}",
            usd(j.saving_usd),
        )
        for j in rows
    ]
    headers = ("idle %", "bound\ntop cause", "lost GPU-h\nlost USD", "saving\nUSD")
    others = [[h, *(c[i] for c in cells)] for i, h in enumerate(headers)]
    fits = name_room(width, others)
    if fits is None:  # too narrow for the columns: each job a line, its figures under it
        return _worst_stacked(rows)
    room = fits
    table = Table(title="worst jobs", title_justify="left")
    table.add_column("job", no_wrap=True)
    for i, header in enumerate(headers):
        number_column(table, header, justify="left" if i == 1 else "right")
    room = min(room, _PATH_WIDTH)
    names = [
        _job_name(j.path, tail, room)
        for j, tail in zip(rows, distinct_tails([j.path for j in rows]), strict=True)
    ]
    for name, c in zip(names, cells, strict=True):
        table.add_row(name, *c)
    return table


def _worst_stacked(rows: Sequence[JobRow]) -> Text:
    """The worst jobs where no table fits: each job's path on its own line (wrapped, whole),
    its figures on the next."""
    text = Text("worst jobs\n", style="italic")
    for j in rows:
        idle = f"{j.idle_pct:.1f}%" if j.idle_pct is not None else "n/a"
        text.append(f"{j.path}\n", style="bold")
        text.append(
            f"  idle {idle} · {j.bound or '-'} · {j.top_cause or '-'} · lost"
            f" {_hours(j.lost_gpu_hours or 0.0)} GPU-h, {usd(j.lost_usd)} · saving"
            f" {usd(j.saving_usd)}\n"
        )
    return text


#: The widest job path shown.
_PATH_WIDTH = 60


def _job_name(path: str, tail: str, room: int) -> str:
    """A job's path in ``room`` characters: whole, else cut from the left at a folder (its last
    folders and file whole), else the shortest tail that tells it from the other jobs, shortened
    in its middle (a long folder name keeps its start and its run number)."""
    cut = short_path(path, room)
    if cut == path or (cut.startswith("…/") and cut.endswith(tail)):
        return cut
    return middle(tail, room)


def _failed_table(rows: Sequence[JobRow]) -> Table:
    table = Table(title="failed jobs (not analysed)", title_justify="left")
    table.add_column("job")
    table.add_column("why")
    for j in rows:
        table.add_row(short_path(j.path, 60), j.error or "")
    return table


# --- HTML ---------------------------------------------------------------------------------------


def render_html(s: FleetSummary) -> str:
    sections = [
        _bar_section("fleet-category", f"Waste {_CATEGORY_TITLE}", s.by_category),
        _bar_section("fleet-cause", "Waste by cause", s.by_cause),
        _histogram_section(s.idle_pcts),
        _trend_section(s.by_day),
    ]
    body = "\n".join(
        [
            f"<h1>gpuscope fleet report</h1><p class='dim'>gpuscope {escape(__version__)}</p>",
            f"<p class='verdict'>{escape(_headline(s))}</p>",
            *(section_html(x) for x in sections),
            _worst_html(s.worst),
            _failed_html(s.failed_jobs),
        ]
    )
    return assemble_page("gpuscope: fleet report", body, sections)


def _figure(data: list[go.BaseTraceType], x_title: str, y_title: str) -> go.Figure:
    figure = go.Figure(data=data)
    figure.update_layout(**LAYOUT, height=300, xaxis_title=x_title, yaxis_title=y_title)
    return figure


def _bar_section(id_: str, title: str, rows: Sequence[Waste]) -> Section:
    if not rows:
        return Section(id_, title, "No finding in the fleet.", None)
    bar = go.Bar(
        x=[plot_text(w.key, 60) for w in rows],
        y=[w.gpu_hours for w in rows],
        customdata=[[usd(w.usd), w.jobs] for w in rows],
        hovertemplate="%{x}: %{y:.4f} GPU-hours, %{customdata[0]}, %{customdata[1]} jobs"
        "<extra></extra>",
    )
    return Section(id_, title, "GPU-hours lost; hover for dollars.", _figure([bar], "", "GPU-h"))


def _histogram_section(idle_pcts: Sequence[float]) -> Section:
    id_, title = "fleet-utilisation", "Distribution of utilisation"
    if not idle_pcts:
        return Section(id_, title, "No job was analysed.", None)
    counts, edges = busy_histogram(idle_pcts)
    bars = go.Bar(
        x=[(a + b) / 2 for a, b in itertools.pairwise(edges)],
        y=counts,
        width=HISTOGRAM_BIN_PCT,
        customdata=[f"{a:g}-{b:g}%" for a, b in itertools.pairwise(edges)],
        hovertemplate="%{customdata} busy: %{y} jobs<extra></extra>",
    )
    note = "Jobs by share of their window the GPUs were busy (100 - idle %)."
    return Section(id_, title, note, _figure([bars], "busy %", "jobs"))


#: Width of a utilisation histogram bin, in percent.
HISTOGRAM_BIN_PCT = 5


def busy_histogram(idle_pcts: Sequence[float]) -> tuple[list[int], list[float]]:
    """Jobs per busy-% bin: 0-5, 5-10, ..., 95-100, the last bin closed, so that a job busy
    100% of its window is counted (a histogram of half-open bins drops it)."""
    edges = [float(x) for x in range(0, 100 + HISTOGRAM_BIN_PCT, HISTOGRAM_BIN_PCT)]
    counts = [0] * (len(edges) - 1)
    for idle in idle_pcts:
        busy = min(max(100.0 - idle, 0.0), 100.0)
        counts[min(int(busy // HISTOGRAM_BIN_PCT), len(counts) - 1)] += 1
    return counts, edges


def _trend_section(by_day: Sequence[Waste]) -> Section:
    id_, title = "fleet-trend", "Trend over time"
    if not by_day:
        return Section(id_, title, "No job carries a date.", None)
    line = go.Scatter(
        x=[w.key for w in by_day], y=[w.gpu_hours for w in by_day], mode="lines+markers"
    )
    return Section(id_, title, "GPU-hours lost per day.", _figure([line], "day", "GPU-h"))


def _failed_html(rows: Sequence[JobRow]) -> str:
    if not rows:
        return ""
    body = "".join(
        f"<tr><td class='mono'>{_path(j.path)}</td><td>{escape(j.error or '')}</td></tr>"
        for j in rows
    )
    head = "<tr><th>job</th><th>why it was not analysed</th></tr>"
    return f"<section><h2>Failed jobs</h2><table>{head}{body}</table></section>"


def _path(path: str) -> str:
    """A job's path cut from the left (its file or folder name stays), whole on hover."""
    return f"<span title='{escape(path)}'>{escape(short_path(path, 80))}</span>"


def _worst_html(rows: Sequence[JobRow]) -> str:
    body = "".join(
        f"<tr><td class='mono'>{_path(j.path)}</td><td class='num'>"
        f"{'n/a' if j.idle_pct is None else f'{j.idle_pct:.1f}'}</td>"
        f"<td>{escape(j.bound or '')}</td><td>{escape(j.top_cause or '')}</td>"
        f"<td class='num'>{_hours(j.lost_gpu_hours or 0.0)}</td>"
        f"<td class='num'>{escape(usd(j.lost_usd))}</td>"
        f"<td class='num'>{escape(usd(j.saving_usd))}</td></tr>"
        for j in rows
    )
    head = (
        "<tr><th>job</th><th class='num'>idle %</th><th>bound</th><th>top cause</th>"
        "<th class='num'>GPU-hours lost</th><th class='num'>USD</th>"
        "<th class='num'>saving USD (predicted)</th></tr>"
    )
    return f"<section><h2>Worst jobs</h2><table>{head}{body}</table></section>"
