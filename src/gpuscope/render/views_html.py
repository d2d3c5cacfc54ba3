"""The module and operator views in the HTML report: an icicle chart and sortable tables.

Contract: :func:`views_part` turns the views of the busiest device of a
:class:`~gpuscope.diagnosis.Diagnosis` into the HTML of one section, the plotly figure it holds
(drawn by the page's script with the other figures) and the anchors a finding's code locations
link to. It computes nothing: rows and sums come from the diagnosis. User text is escaped for
where it lands (``html.escape`` in the page, entity-escaped in plotly labels).
"""

from __future__ import annotations

import html

import msgspec
import plotly.graph_objects as go  # type: ignore[import-untyped]

from gpuscope.analyses.operators import DeviceViews, ViewRow
from gpuscope.diagnosis import Diagnosis
from gpuscope.units import duration

FIGURE_ID = "chart-modules"
#: Rows of the tables (the module tree in tree order); the JSON holds them all.
MODULE_ROWS = 2000
OPERATOR_ROWS = 200
_LABEL_CHARS = 60


class ViewsPart(msgspec.Struct, frozen=True):
    html: str  # the section: "" when no device has views
    figure: go.Figure | None
    links: dict[str, str] = msgspec.field(default_factory=dict)  # code location -> "#anchor"


def views_part(diagnosis: Diagnosis) -> ViewsPart:
    shown = [d for d in diagnosis.devices if d.views is not None and d.views.busy_ns > 0]
    if not shown:
        return ViewsPart("", None)
    device = max(shown, key=lambda d: d.temporal.busy_ns)
    views = device.views
    assert views is not None
    where = ""
    if len(diagnosis.devices) > 1:
        rank = "?" if device.rank is None else str(device.rank)
        where = f" Rank {rank}, device {device.device}: the busiest of {len(diagnosis.devices)}."
    note = (
        f"GPU time of the work each {_UNIT.get(views.module_source, 'range')} launched "
        "(total: with what it calls; self: not inside a deeper one), and the idle time decided "
        "inside it. Busy time only: where streams overlap, each nanosecond counts once, so the "
        f"roots sum to the device's busy time.{where}"
    )
    links = {
        loc: f"#views-m-{row}" for loc, row in views.location_rows.items() if row < MODULE_ROWS
    }
    tree = _tree_rows(views)
    if len(tree) > MODULE_ROWS:
        note += f" The table shows the first {MODULE_ROWS:,} of {len(tree):,} paths (the JSON all)."
    operator_rows = views.operators[:OPERATOR_ROWS]
    links.update(
        {r.name: f"#views-o-{i}" for i, r in enumerate(operator_rows) if r.name not in links}
    )
    body = (
        f"<section id='views'><h2>Where the GPU time goes</h2><p class='note'>{_e(note)}</p>"
        f'<div class="chart" id="{FIGURE_ID}"></div>'
        f"<h3>By {_UNIT.get(views.module_source, 'range')} path</h3>"
        f"{_table('views-m', tree[:MODULE_ROWS], views.busy_ns, path=True)}"
        "<h3>By operator</h3>"
        f"{_table('views-o', [(r, r.name) for r in operator_rows], views.busy_ns, path=False)}"
        "</section>"
    )
    return ViewsPart(body, icicle(views), links)


_UNIT = {"nn.Module": "module", "forward frames": "forward()", "ranges": "range"}


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _tree_rows(views: DeviceViews) -> list[tuple[ViewRow, str]]:
    paths: list[str] = []
    for r in views.modules:
        paths.append(r.name if r.parent < 0 else f"{paths[r.parent]}/{r.name}")
    return list(zip(views.modules, paths, strict=True))


def _table(prefix: str, rows: list[tuple[ViewRow, str]], busy_ns: int, *, path: bool) -> str:
    head = ["path" if path else "operator", "calls", "launches", "GPU time", "share", "self"]
    head += ["kernel time", "idle caused"]
    cells = "".join(
        f"<th class='{'num' if i else ''}' data-sort='{'text' if i == 0 else 'num'}'>{_e(h)}</th>"
        for i, h in enumerate(head)
    )
    body = []
    for i, (r, name) in enumerate(rows):
        share = 100.0 * r.total_ns / busy_ns if busy_ns else 0.0
        numbers = [
            (r.calls, f"{r.calls:,}"),
            (r.launches, f"{r.launches:,}"),
            (r.total_ns, duration(r.total_ns)),
            (share, f"{share:.1f}%"),
            (r.self_ns, duration(r.self_ns)),
            (r.kernel_ns, duration(r.kernel_ns)),
            (r.idle_ns, duration(r.idle_ns)),
        ]
        tds = "".join(f"<td class='num' data-v='{v}'>{text}</td>" for v, text in numbers)
        body.append(
            f"<tr id='{prefix}-{i}'><td class='mono kernel' data-v='{_e(name)}'>{_e(name)}</td>"
            f"{tds}</tr>"
        )
    rows_html = "".join(body)
    return (
        f"<table class='sortable'><thead><tr>{cells}</tr></thead><tbody>{rows_html}</tbody></table>"
    )


def icicle(views: DeviceViews) -> go.Figure:
    """The module tree, instances of a class merged, as an icicle sized by GPU time: one row of
    bars per depth, each bar under its parent and as wide as its GPU time. Drawn with bars, as
    the timeline is, so that it needs no other part of plotly."""
    rows = views.module_types
    offset = [0] * len(rows)
    filled: dict[int, int] = {}  # parent row (-1: the top) -> GPU time already laid under it
    paths: list[str] = []
    for i, r in enumerate(rows):
        paths.append(r.name if r.parent < 0 else f"{paths[r.parent]}/{r.name}")
        start = 0 if r.parent < 0 else offset[r.parent]
        offset[i] = start + filled.get(r.parent, 0)
        filled[r.parent] = filled.get(r.parent, 0) + r.total_ns
    shown = [i for i, r in enumerate(rows) if r.total_ns > 0]
    busy = views.busy_ns or 1
    hover = [
        f"{_plot(paths[i])}<br>GPU time {duration(rows[i].total_ns)} "
        f"({100.0 * rows[i].total_ns / busy:.1f}%)<br>self {duration(rows[i].self_ns)} · calls "
        f"{rows[i].calls:,} · idle caused {duration(rows[i].idle_ns)}"
        for i in shown
    ]
    root_of: list[int] = []
    for i, r in enumerate(rows):
        root_of.append(i if r.parent < 0 else root_of[r.parent])
    bars = go.Bar(
        orientation="h",
        y=[rows[i].depth for i in shown],
        x=[rows[i].total_ns / 1e6 for i in shown],
        base=[offset[i] / 1e6 for i in shown],
        text=[_plot(rows[i].name, _LABEL_CHARS) for i in shown],
        textposition="inside",
        insidetextanchor="middle",
        hovertext=hover,
        hovertemplate="%{hovertext}<extra></extra>",
        marker={
            "color": [_PALETTE[root_of[i] % len(_PALETTE)] for i in shown],
            "line": {"color": "#ffffff", "width": 1},
        },
    )
    depth = max((rows[i].depth for i in shown), default=0)
    figure = go.Figure(bars)
    figure.update_layout(
        margin={"t": 10, "l": 10, "r": 10, "b": 40},
        height=min(100 + 44 * (depth + 1), 520),
        bargap=0.04,
        showlegend=False,
        xaxis={"title": {"text": "GPU time (ms)"}},
        yaxis={"autorange": "reversed", "showticklabels": False},
        uniformtext={"minsize": 9, "mode": "hide"},
    )
    return figure


_PALETTE = ["#4c78a8", "#f58518", "#54a24b", "#b279a2", "#e45756", "#72b7b2", "#9d755d"]


def _plot(text: str, limit: int | None = None) -> str:
    """User text for a plotly label: cut, then entity-escaped (plotly reads a few tags)."""
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return html.escape(text, quote=False)
