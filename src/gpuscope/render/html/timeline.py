"""The zoomable timeline: per device a lane of its idle gaps (coloured by cause) and one per
stream (kernels coloured by kind). So that a large trace stays small and quick to draw, kernels
and idle gaps shorter than a bucket merge into one bar per run of buckets; every idle gap at
least one bucket long keeps its own bar, with its cause and location.

A device with many streams or queues (a rocprof trace can hold hundreds, most with a kernel or
two) draws its :data:`STREAM_LANES` busiest and one lane of "other streams" holding the rest's
bars (each bar's hover still names its stream); every lane, with its kernel time, is listed in a
folded table under the chart. Hundreds of rows in a chart of at most 1,800 px would be drawn over
each other, and plotly's layout of that many category rows is what made such a report slow.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from functools import cache

import msgspec
import numpy as np
import plotly.graph_objects as go  # type: ignore[import-untyped]
from numpy.typing import NDArray

from gpuscope.analyses.drawn import Lane, Timeline
from gpuscope.diagnosis import DeviceReport, Diagnosis
from gpuscope.names import (
    short_kernel_name,
    short_location,
)
from gpuscope.render.html.page import (
    CAUSE_COLOURS,
    CAUSE_NAMES,
    KIND_COLOURS,
    KINDS,
    LAYOUT,
    MERGED_OPACITY,
    HtmlOptions,
    Section,
    device_label,
    is_multi,
    plot_text,
)
from gpuscope.units import duration, ms_or_s

I64 = NDArray[np.int64]

_short_kernel = cache(short_kernel_name)  # a timeline's hover texts name the same kernels often


#: Stream lanes drawn per device; the rest of its streams share one "other streams" lane.
STREAM_LANES = 8


class _Rows(msgspec.Struct, frozen=True):
    """Where each lane is drawn: its row, the rows' labels, and each lane's drawn time (kernel
    or idle time, the sum of its bars' own)."""

    of_lane: list[int]
    labels: list[str]
    time_ns: list[int]
    merged: int  # lanes drawn in an "other streams" row


class _Bars(msgspec.Struct):
    """Bars of one legend entry, individual or merged."""

    lane: list[int]
    start_ns: list[int]
    end_ns: list[int]
    text: list[str]


def timeline_section(d: Diagnosis, o: HtmlOptions, prefix: str) -> Section:
    assert d.drawn is not None  # a diagnosis with devices has its drawn series
    timeline = d.drawn.timeline
    labels = _lane_labels(d.devices, timeline)
    rows = _rows(timeline, labels, d.devices)
    figure = _timeline_figure(timeline, labels, rows, d.drawn.origins_ns, d.devices, o)
    note = (
        "Drag to zoom into a time range, double-click to zoom out. Kernels and idle gaps "
        f"shorter than {ms_or_s(timeline.bucket_ns)} are merged into paler bars (hover for what"
        " they hold); every longer idle gap has its own bar with its cause and code location."
    )
    after = ""
    if rows.merged:
        note += (
            f" {rows.merged:,} of {len(labels):,} lanes are drawn together in an"
            f' "other streams" lane per device (each device\'s {STREAM_LANES} busiest streams'
            " have their own); every lane is listed under the chart."
        )
        after = _lane_list(labels, rows)
    return Section(f"{prefix}chart-timeline", "GPU timeline", note, figure, after)


def _lane_time(lane: Lane) -> int:
    return int((lane.end_ns - lane.start_ns).sum()) + int(lane.run_busy_ns.sum())


def _rows(timeline: Timeline, labels: list[str], devices: Sequence[DeviceReport]) -> _Rows:
    """Each device's idle lane and its :data:`STREAM_LANES` busiest streams in rows of their
    own, in the timeline's order; the rest of its streams in one row after them (only when that
    row would hold more than one)."""
    time_ns = [_lane_time(lane) for lane in timeline.lanes]
    by_device: dict[int, list[int]] = {}
    for i, lane in enumerate(timeline.lanes):
        by_device.setdefault(lane.device, []).append(i)
    of_lane = [0] * len(timeline.lanes)
    row_labels: list[str] = []
    merged = 0
    for lanes in by_device.values():
        streams = [i for i in lanes if timeline.lanes[i].stream is not None]
        own = set(lanes)
        if len(streams) > STREAM_LANES + 1:
            busiest = sorted(streams, key=lambda i: -time_ns[i])[:STREAM_LANES]
            own = set(lanes) - set(streams) | set(busiest)
        for i in lanes:
            if i in own:
                of_lane[i] = len(row_labels)
                row_labels.append(labels[i])
        rest = [i for i in lanes if i not in own]
        if rest:
            device = device_label(devices[timeline.lanes[rest[0]].device], is_multi(devices))
            for i in rest:
                of_lane[i] = len(row_labels)
            row_labels.append(f"{device} · {len(rest)} other streams")
            merged += len(rest)
    return _Rows(of_lane, row_labels, time_ns, merged)


def _lane_list(labels: list[str], rows: _Rows) -> str:
    """Every lane, busiest first: its time and the row it is drawn in (a folded table)."""
    order = sorted(range(len(labels)), key=lambda i: -rows.time_ns[i])
    body = "".join(
        f"<tr><td class='mono'>{html.escape(labels[i])}</td>"
        f"<td class='num'>{duration(rows.time_ns[i])}</td>"
        f"<td>{html.escape(rows.labels[rows.of_lane[i]])}</td></tr>"
        for i in order
    )
    return (
        f"<details class='lanes'><summary>All {len(labels):,} lanes, busiest first</summary>"
        "<table><tr><th>lane</th><th class='num'>kernel or idle time</th><th>drawn in</th></tr>"
        f"{body}</table></details>"
    )


def _lane_labels(devices: Sequence[DeviceReport], timeline: Timeline) -> list[str]:
    multi = is_multi(devices)
    return [
        f"{device_label(devices[lane.device], multi)} · "
        + ("idle" if lane.stream is None else f"stream {lane.stream}")
        for lane in timeline.lanes
    ]


def _timeline_figure(
    timeline: Timeline,
    labels: list[str],
    rows: _Rows,
    origins: Sequence[int],
    devices: Sequence[DeviceReport],
    o: HtmlOptions,
) -> go.Figure:
    # A row holds lanes of one device only: one time origin per row.
    origin_of_row = np.zeros(len(rows.labels), dtype=np.int64)
    for i, lane in enumerate(timeline.lanes):
        origin_of_row[rows.of_lane[i]] = origins[lane.device]
    merged: dict[tuple[str, int], _Bars] = {}
    single: dict[tuple[str, int], _Bars] = {}
    multi = is_multi(devices)
    for i, lane in enumerate(timeline.lanes):
        device = device_label(devices[lane.device], multi)
        y = rows.of_lane[i]
        _add_single(y, lane, labels[i], device, timeline.names, o, single)
        _add_merged(y, lane, labels[i], timeline, merged)
    figure = go.Figure()
    for bars, opacity in ((merged, MERGED_OPACITY), (single, 1.0)):
        for key in sorted(bars, key=_legend_order):
            figure.add_trace(_bar_trace(key, bars[key], opacity, origin_of_row, key in single))
    _timeline_layout(figure, rows.labels)
    # What the merged bars are shorter than.
    figure.update_layout(meta={"bucket_ns": int(timeline.bucket_ns)})
    return figure


def _legend_order(key: tuple[str, int]) -> tuple[int, int]:
    return (0 if key[0] == "idle" else 1, key[1])


def _add_single(
    y: int,
    lane: Lane,
    label: str,
    device: str,
    names: list[str],
    o: HtmlOptions,
    into: dict[tuple[str, int], _Bars],
) -> None:
    family = "idle" if lane.stream is None else "kernel"
    for start, end, category, name in zip(
        lane.start_ns.tolist(),
        lane.end_ns.tolist(),
        lane.category.tolist(),
        lane.label.tolist(),
        strict=True,
    ):
        bars = into.setdefault((family, category), _Bars([], [], [], []))
        bars.lane.append(y)
        bars.start_ns.append(start)
        bars.end_ns.append(end)
        if family == "idle":
            text = f"idle: <b>{CAUSE_NAMES[category]}</b><br>{ms_or_s(end - start)} idle"
            if name >= 0:
                text += f"<br>at {plot_text(short_location(names[name], 100))}"
            bars.text.append(f"{text}<br>{plot_text(device)}")
        else:
            shown = plot_text(_short_kernel(names[name]), o.label_chars)
            bars.text.append(f"{shown}<br>{KINDS[category]} · {ms_or_s(end - start)}<br>{label}")


def _add_merged(
    y: int, lane: Lane, label: str, timeline: Timeline, into: dict[tuple[str, int], _Bars]
) -> None:
    family = "idle" if lane.stream is None else "kernel"
    names = CAUSE_NAMES if family == "idle" else KINDS
    what = "idle gaps" if family == "idle" else "kernels"
    width = timeline.bucket_ns
    for first, last, dominant, count, busy, located in zip(
        lane.run_start_ns.tolist(),
        lane.run_end_ns.tolist(),
        lane.run_category.tolist(),
        lane.run_count.tolist(),
        lane.run_busy_ns.tolist(),
        lane.run_label.tolist(),
        strict=True,
    ):
        bars = into.setdefault((family, dominant), _Bars([], [], [], []))
        bars.lane.append(y)
        bars.start_ns.append(first)
        bars.end_ns.append(last)
        share = 100.0 * busy / max(last - first, 1)
        at = ""
        if located >= 0:
            at = f"<br>longest at {plot_text(short_location(timeline.names[located], 100))}"
        bars.text.append(
            f"{count:,} {what} shorter than {ms_or_s(width)}, merged<br>"
            f"mostly <b>{names[dominant]}</b>; {ms_or_s(float(busy))} in all, "
            f"{share:.0f}% of this range{at}<br>{plot_text(label)}"
        )


def _bar_trace(
    key: tuple[str, int],
    bars: _Bars,
    opacity: float,
    origin_of_row: NDArray[np.int64],
    in_legend_elsewhere: bool,
) -> go.Bar:
    family, category = key
    name = CAUSE_NAMES[category] if family == "idle" else KINDS[category]
    colour = CAUSE_COLOURS[name] if family == "idle" else KIND_COLOURS[name]
    lanes = np.asarray(bars.lane, dtype=np.int64)
    start = np.asarray(bars.start_ns, dtype=np.int64) - origin_of_row[lanes]
    dur = np.asarray(bars.end_ns, dtype=np.int64) - np.asarray(bars.start_ns, dtype=np.int64)
    label = f"idle: {name}" if family == "idle" else name
    return go.Bar(
        orientation="h",
        y=lanes,
        base=np.round(start / 1e6, 6),
        x=np.round(dur / 1e6, 6),
        width=0.8,
        name=label,
        legendgroup=label,
        showlegend=opacity == 1.0 or not in_legend_elsewhere,
        marker={"color": colour, "opacity": opacity, "line": {"width": 0}},
        hovertext=bars.text,
        hovertemplate="%{hovertext}<extra></extra>",
        meta={"family": family, "category": name, "merged": opacity != 1.0},
    )


def _timeline_layout(figure: go.Figure, labels: list[str]) -> None:
    figure.update_layout(
        barmode="overlay",
        height=min(max(220, 90 + 26 * len(labels)), 1800),
        **LAYOUT,
        hovermode="closest",
        dragmode="zoom",
        xaxis={"title": {"text": "time (ms)"}, "showgrid": True, "zeroline": False},
        yaxis={
            "tickvals": list(range(len(labels))),
            "ticktext": [plot_text(label) for label in labels],
            "autorange": "reversed",
            "fixedrange": True,
            "automargin": True,
        },
    )
