"""The module and operator views in the terminal: the top rows, under the findings.

Contract: :func:`render_views` writes the views of one device of a
:class:`~gpuscope.diagnosis.Diagnosis` (the busiest) to a rich ``Console`` and computes nothing
but which rows to show. The whole tree is in the JSON and the HTML report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuscope.analyses.operators import DeviceViews, ViewRow
from gpuscope.diagnosis import DeviceReport, Diagnosis
from gpuscope.render.layout import Table, Text
from gpuscope.units import ms

if TYPE_CHECKING:
    from gpuscope.render.plain import Printer

#: Module rows shown: the costliest first down the tree, while they take this share of busy time.
MODULE_ROWS = 10
MODULE_MIN_SHARE_PCT = 2.0
OPERATOR_ROWS = 8


def render_views(diagnosis: Diagnosis, console: Printer) -> None:
    shown = [d for d in diagnosis.devices if d.views is not None and d.views.busy_ns > 0]
    if not shown:
        return
    device = max(shown, key=lambda d: d.temporal.busy_ns)
    views = device.views
    assert views is not None
    console.print(modules_table(views, _label(device, len(diagnosis.devices))))
    console.print(operators_table(views))


def _label(d: DeviceReport, devices: int) -> str:
    if devices == 1:
        return ""
    rank = f"rank {d.rank}" if d.rank is not None else "rank ?"
    return f" ({rank} · device {d.device}, the busiest)"


def top_module_rows(views: DeviceViews) -> list[ViewRow]:
    """The module-class tree cut where rows get small: each shown row's parent is shown."""
    rows = views.module_types
    shown: list[ViewRow] = []
    kept: set[int] = set()
    for i, r in enumerate(rows):
        if len(shown) == MODULE_ROWS:
            break
        big = 100.0 * r.total_ns >= MODULE_MIN_SHARE_PCT * views.busy_ns
        if big and (r.parent < 0 or r.parent in kept):
            kept.add(i)
            shown.append(r)
    return shown


def modules_table(views: DeviceViews, where: str = "") -> Table:
    by = {"nn.Module": "module", "forward frames": "forward()", "ranges": "range"}
    title = f"Where the GPU time goes, by {by.get(views.module_source, 'range')}{where}"
    table = Table(title=title, title_justify="left")
    table.add_column(by.get(views.module_source, "range"), min_width=16, max_width=60)
    for column in ("calls", "GPU time", "share", "self", "idle caused"):
        table.add_column(column, justify="right", no_wrap=True)
    for r in top_module_rows(views):
        name = Text("  " * r.depth + r.name, overflow="ellipsis", no_wrap=True)
        table.add_row(
            name,
            f"{r.calls:,}" if r.calls else "-",
            ms(r.total_ns),
            _share(r.total_ns, views.busy_ns),
            ms(r.self_ns),
            ms(r.idle_ns),
        )
    return table


def operators_table(views: DeviceViews) -> Table:
    table = Table(title="Operators by the GPU time of their own kernels", title_justify="left")
    table.add_column("operator", min_width=16, max_width=60)
    for column in ("calls", "launches", "self", "share", "total"):
        table.add_column(column, justify="right", no_wrap=True)
    rows = sorted(views.operators, key=lambda r: (-r.self_ns, r.name))[:OPERATOR_ROWS]
    for r in rows:
        table.add_row(
            Text(r.name, overflow="ellipsis", no_wrap=True),
            f"{r.calls:,}" if r.calls else "-",
            f"{r.self_launches:,}",
            ms(r.self_ns),
            _share(r.self_ns, views.busy_ns),
            ms(r.total_ns),
        )
    return table


def _share(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "n/a"
