"""The zoomable timeline: per device a lane of its idle gaps (coloured by cause) and one per
stream (kernels coloured by kind). So that a large trace stays small and quick to draw, kernels
and idle gaps shorter than a bucket merge into one bar per run of buckets; every idle gap at
least one bucket long keeps its own bar, with its cause and location."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache

import numpy as np
import plotly.graph_objects as go  # type: ignore[import-untyped]
from numpy.typing import NDArray

from gpuscope._arrays import distinct
from gpuscope.diagnosis import DeviceReport
from gpuscope.names import (
    short_kernel_name,
    short_location,
)
from gpuscope.render.html.page import (
    _CAUSE_NAMES,
    _KINDS,
    _LAYOUT,
    _MERGED_OPACITY,
    CAUSE_COLOURS,
    KIND_COLOURS,
    HtmlOptions,
    _device_label,
    _is_multi,
    _ms,
    _origins,
    _Section,
    plot_text,
)

I64 = NDArray[np.int64]

_short_kernel = cache(short_kernel_name)  # a timeline's hover texts name the same kernels often


@dataclass(frozen=True)
class _Lane:
    """Items to draw on one lane: kernels of one stream, or the idle segments of one device."""

    y: int
    device: int  # index of its device in the diagnosis
    label: str
    family: str  # "kernel" or "idle"
    start_ns: I64
    end_ns: I64
    category: NDArray[np.intp]  # index into _KINDS or _CAUSE_NAMES
    describe: Callable[[int], str]  # hover text of item i, already plotly-escaped
    location: Sequence[str | None] = ()  # code location per item, for idle segments


@dataclass
class _Bars:
    """Bars of one legend entry, individual or merged."""

    lane: list[int]
    start_ns: list[int]
    end_ns: list[int]
    text: list[str]


def _timeline_section(devices: Sequence[DeviceReport], o: HtmlOptions, prefix: str) -> _Section:
    lanes = _lanes(devices, o)
    lo = min(d.span_start_ns for d in devices)
    hi = max(d.span_end_ns for d in devices)
    origins = _origins(devices)
    width = _bucket_width(lanes, lo, hi, o)
    figure = _timeline_figure(lanes, width, origins, devices)
    note = (
        "Drag to zoom into a time range, double-click to zoom out. Kernels and idle gaps "
        f"shorter than {_ms(width)} are merged into paler bars (hover for what they hold); "
        "every longer idle gap has its own bar with its cause and code location."
    )
    return _Section(f"{prefix}chart-timeline", "GPU timeline", note, figure)


def _lanes(devices: Sequence[DeviceReport], o: HtmlOptions) -> list[_Lane]:
    multi = _is_multi(devices)
    lanes: list[_Lane] = []
    for i, d in enumerate(devices):
        label = _device_label(d, multi)
        lanes.append(_idle_lane(d, (len(lanes), i), label))
        streams = d.work.trace.events.stream[d.work.rows]
        for stream in distinct(streams).tolist():
            where = (len(lanes), i)
            lanes.append(_stream_lane(d, where, f"{label} · stream {stream}", stream, o))
    return lanes


def _idle_lane(d: DeviceReport, where: tuple[int, int], label: str) -> _Lane:
    g = d.idle.gaps

    def describe(i: int) -> str:
        cause = _CAUSE_NAMES[int(g.cause[i])]
        location = g.location[i]
        text = f"idle: <b>{cause}</b><br>{_ms(int(g.end_ns[i] - g.start_ns[i]))} idle"
        if location is not None:
            text += f"<br>at {plot_text(short_location(location, 100))}"
        return f"{text}<br>{plot_text(label)}"

    cause = g.cause.astype(np.intp)
    lane = _Lane(*where, f"{label} · idle", "idle", g.start_ns, g.end_ns, cause, describe)
    return replace(lane, location=g.location)


def _stream_lane(
    d: DeviceReport, where: tuple[int, int], label: str, stream: int, o: HtmlOptions
) -> _Lane:
    ev = d.work.trace.events
    on_stream = np.flatnonzero(ev.stream[d.work.rows] == stream)
    rows = d.work.rows[on_stream]
    kinds = d.bounds.kind[on_stream].astype(np.intp)
    names = d.work.trace.names

    def describe(i: int) -> str:
        row = int(rows[i])
        name = plot_text(_short_kernel(names[int(ev.name_id[row])]), o.label_chars)
        return f"{name}<br>{_KINDS[int(kinds[i])]} · {_ms(int(ev.dur_ns[row]))}<br>{label}"

    return _Lane(*where, label, "kernel", ev.start_ns[rows], ev.end_ns[rows], kinds, describe)


def _bucket_width(lanes: Sequence[_Lane], lo: int, hi: int, o: HtmlOptions) -> int:
    """The narrowest bucket that keeps the bar count within budget: finer than a pixel at full
    zoom-out when the budget allows (detail for zooming in), coarser when it does not."""
    width = max((hi - lo) // max(16 * o.timeline_buckets, 1), 1)
    while width < hi - lo:
        bars = 0
        for lane in lanes:
            long = (lane.end_ns - lane.start_ns) >= width
            bars += int(long.sum()) + _runs(lane, ~long, lo, width)[0].size
        if bars <= o.max_timeline_bars:
            break
        width *= 2
    return int(width)


def _runs(lane: _Lane, members: NDArray[np.bool_], lo: int, width: int) -> tuple[I64, I64]:
    """Runs of adjacent buckets whose short items share a dominant category.

    Returns each member's run (``-1`` for non-members) and each run's dominant category."""
    index = np.flatnonzero(members)
    run_of = np.full(lane.start_ns.size, -1, dtype=np.int64)
    if index.size == 0:
        return np.zeros(0, dtype=np.int64), run_of
    start, end = lane.start_ns[index], lane.end_ns[index]
    bucket = ((start + end) // 2 - lo) // width
    categories = max(len(_KINDS), len(_CAUSE_NAMES))
    occupied, inverse = np.unique(bucket, return_inverse=True)
    weight = np.bincount(
        inverse * categories + lane.category[index],
        weights=(end - start).astype(np.float64),
        minlength=occupied.size * categories,
    ).reshape(occupied.size, categories)
    dominant = weight.argmax(axis=1)
    new_run = np.ones(occupied.size, dtype=bool)
    new_run[1:] = (occupied[1:] != occupied[:-1] + 1) | (dominant[1:] != dominant[:-1])
    run_id = np.cumsum(new_run) - 1
    run_of[index] = run_id[inverse]
    return dominant[new_run].astype(np.int64), run_of


def _timeline_figure(
    lanes: Sequence[_Lane], width: int, origins: Sequence[int], devices: Sequence[DeviceReport]
) -> go.Figure:
    origin_of_lane = np.array([origins[lane.device] for lane in lanes], dtype=np.int64)
    merged: dict[tuple[str, int], _Bars] = {}
    single: dict[tuple[str, int], _Bars] = {}
    lo = min(d.span_start_ns for d in devices)
    for lane in lanes:
        _add_single(lane, width, single)
        _add_merged(lane, lo, width, merged)
    figure = go.Figure()
    for bars, opacity in ((merged, _MERGED_OPACITY), (single, 1.0)):
        for key in sorted(bars, key=_legend_order):
            figure.add_trace(_bar_trace(key, bars[key], opacity, origin_of_lane, key in single))
    _timeline_layout(figure, lanes)
    figure.update_layout(meta={"bucket_ns": int(width)})  # what the merged bars are shorter than
    return figure


def _legend_order(key: tuple[str, int]) -> tuple[int, int]:
    return (0 if key[0] == "idle" else 1, key[1])


def _add_single(lane: _Lane, width: int, into: dict[tuple[str, int], _Bars]) -> None:
    long = np.flatnonzero((lane.end_ns - lane.start_ns) >= width)
    for i in long.tolist():
        bars = into.setdefault((lane.family, int(lane.category[i])), _Bars([], [], [], []))
        bars.lane.append(lane.y)
        bars.start_ns.append(int(lane.start_ns[i]))
        bars.end_ns.append(int(lane.end_ns[i]))
        bars.text.append(lane.describe(i))


def _add_merged(lane: _Lane, lo: int, width: int, into: dict[tuple[str, int], _Bars]) -> None:
    short = (lane.end_ns - lane.start_ns) < width
    dominant, run_of = _runs(lane, short, lo, width)
    if dominant.size == 0:
        return
    members = np.flatnonzero(run_of >= 0)
    run = run_of[members]
    first = np.full(dominant.size, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.zeros(dominant.size, dtype=np.int64)
    np.minimum.at(first, run, lane.start_ns[members])
    np.maximum.at(last, run, lane.end_ns[members])
    names = _CAUSE_NAMES if lane.family == "idle" else _KINDS
    count = np.bincount(run, minlength=dominant.size)
    busy = np.bincount(
        run,
        weights=(lane.end_ns - lane.start_ns)[members].astype(np.float64),
        minlength=dominant.size,
    )
    where = _run_locations(lane, members, run, dominant.size)
    for r in range(dominant.size):
        bars = into.setdefault((lane.family, int(dominant[r])), _Bars([], [], [], []))
        bars.lane.append(lane.y)
        bars.start_ns.append(int(first[r]))
        bars.end_ns.append(int(last[r]))
        share = 100.0 * busy[r] / max(int(last[r] - first[r]), 1)
        what = "idle gaps" if lane.family == "idle" else "kernels"
        location = where[r]
        at = f"<br>longest at {plot_text(short_location(location, 100))}" if location else ""
        bars.text.append(
            f"{int(count[r]):,} {what} shorter than {_ms(width)}, merged<br>"
            f"mostly <b>{names[int(dominant[r])]}</b>; {_ms(busy[r])} in all, "
            f"{share:.0f}% of this range{at}<br>{plot_text(lane.label)}"
        )


def _run_locations(lane: _Lane, members: NDArray[np.intp], run: I64, runs: int) -> list[str | None]:
    """Per run, the location of its longest member that has one (None for kernels)."""
    found: list[str | None] = [None] * runs
    if not lane.location:
        return found
    length = (lane.end_ns - lane.start_ns)[members]
    for k in np.argsort(-length, kind="stable").tolist():
        r, location = int(run[k]), lane.location[int(members[k])]
        if found[r] is None and location is not None:
            found[r] = location
    return found


def _bar_trace(
    key: tuple[str, int],
    bars: _Bars,
    opacity: float,
    origin_of_lane: NDArray[np.int64],
    in_legend_elsewhere: bool,
) -> go.Bar:
    family, category = key
    name = _CAUSE_NAMES[category] if family == "idle" else _KINDS[category]
    colour = CAUSE_COLOURS[name] if family == "idle" else KIND_COLOURS[name]
    lanes = np.asarray(bars.lane, dtype=np.int64)
    start = np.asarray(bars.start_ns, dtype=np.int64) - origin_of_lane[lanes]
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


def _timeline_layout(figure: go.Figure, lanes: Sequence[_Lane]) -> None:
    figure.update_layout(
        barmode="overlay",
        height=min(max(220, 90 + 26 * len(lanes)), 1800),
        **_LAYOUT,
        hovermode="closest",
        dragmode="zoom",
        xaxis={"title": {"text": "time (ms)"}, "showgrid": True, "zeroline": False},
        yaxis={
            "tickvals": [lane.y for lane in lanes],
            "ticktext": [plot_text(lane.label) for lane in lanes],
            "autorange": "reversed",
            "fixedrange": True,
            "automargin": True,
        },
    )
