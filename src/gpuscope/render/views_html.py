"""The module and operator views in the HTML report: an icicle chart and sortable tables.

Contract: :func:`views_part` turns the views of the busiest device of a
:class:`~gpuscope.diagnosis.Diagnosis` into the HTML of one section, the plotly figure it holds
(drawn by the page's script with the other figures) and the anchors a finding's code locations
link to. It computes nothing: rows and sums come from the diagnosis. User text is escaped for
where it lands (``html.escape`` in the page, entity-escaped in plotly labels).
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

import plotly.graph_objects as go  # type: ignore[import-untyped]

from gpuscope.analyses.operators import DeviceViews, ViewRow
from gpuscope.diagnosis import Diagnosis

FIGURE_ID = "chart-modules"
#: Rows of the operator table; the module table shows every row of the tree.
OPERATOR_ROWS = 200
_LABEL_CHARS = 60


@dataclass(frozen=True)
class ViewsPart:
    html: str  # the section: "" when no device has views
    figure: go.Figure | None
    links: dict[str, str] = field(default_factory=dict)  # code location -> "#anchor"


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
    links = {loc: f"#views-m-{row}" for loc, row in views.location_rows.items()}
    operator_rows = views.operators[:OPERATOR_ROWS]
    links.update(
        {r.name: f"#views-o-{i}" for i, r in enumerate(operator_rows) if r.name not in links}
    )
    body = (
        f"<section id='views'><h2>Where the GPU time goes</h2><p class='note'>{_e(note)}</p>"
        f'<div class="chart" id="{FIGURE_ID}"></div>'
        f"<h3>By {_UNIT.get(views.module_source, 'range')} path</h3>"
        f"{_table('views-m', _tree_rows(views), views.busy_ns, path=True)}"
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
            (r.total_ns, _ms(r.total_ns)),
            (share, f"{share:.1f}%"),
            (r.self_ns, _ms(r.self_ns)),
            (r.kernel_ns, _ms(r.kernel_ns)),
            (r.idle_ns, _ms(r.idle_ns)),
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


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.2f} ms"


def icicle(views: DeviceViews) -> go.Figure:
    """The module tree, instances of a class merged, as an icicle sized by GPU time."""
    rows = views.module_types
    ids = [f"m{i}" for i in range(len(rows))]
    paths: list[str] = []
    for r in rows:
        paths.append(r.name if r.parent < 0 else f"{paths[r.parent]}/{r.name}")
    hover = [
        f"{_plot(p)}<br>GPU time {_ms(r.total_ns)} ({100.0 * r.total_ns / views.busy_ns:.1f}%)"
        f"<br>self {_ms(r.self_ns)} · calls {r.calls:,} · idle caused {_ms(r.idle_ns)}"
        for r, p in zip(rows, paths, strict=True)
    ]
    figure = go.Figure(
        go.Icicle(
            ids=ids,
            labels=[_plot(r.name, _LABEL_CHARS) for r in rows],
            parents=["" if r.parent < 0 else ids[r.parent] for r in rows],
            values=[r.total_ns / 1e6 for r in rows],
            branchvalues="total",
            hovertext=hover,
            hoverinfo="text",
            tiling={"orientation": "v"},
            maxdepth=6,
        )
    )
    figure.update_layout(margin={"t": 10, "l": 10, "r": 10, "b": 10}, height=420)
    return figure


def _plot(text: str, limit: int | None = None) -> str:
    """User text for a plotly label: cut, then entity-escaped (plotly reads a few tags)."""
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return html.escape(text, quote=False)
