"""The report's charts other than the timeline: busy share over time, where each step's time
went, the ranks x steps heatmap and the roofline of the busiest device."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go  # type: ignore[import-untyped]
from numpy.typing import NDArray

from gpuscope._arrays import bucket_edges
from gpuscope.analyses.bounds import RooflinePoint
from gpuscope.analyses.drawn import (
    HEATMAP_SLICES,
    UTILISATION_BUCKETS,
    Drawn,
)
from gpuscope.diagnosis import DeviceReport, Diagnosis
from gpuscope.facts import NO_TENSOR_CORES
from gpuscope.render.html.page import (
    CAUSE_COLOURS,
    CAUSE_NAMES,
    KIND_COLOURS,
    LAYOUT,
    HtmlOptions,
    Section,
    device_label,
    is_multi,
    plot_text,
)
from gpuscope.units import ms_or_s

I64 = NDArray[np.int64]


def utilisation_section(d: Diagnosis, prefix: str) -> Section:
    assert d.drawn is not None  # a diagnosis with devices has its drawn series
    devices = d.devices
    width_ns = max(x.temporal.span_ns for x in devices) / max(UTILISATION_BUCKETS, 1)
    note = f"Share of each {ms_or_s(width_ns)} bucket in which the device ran any work."
    if d.drawn.utilisation_axis_ns is not None:
        figure = _utilisation_heatmap(devices, d.drawn)
        note += " One row per GPU: overlapping lines would hide each other."
    else:
        figure = _utilisation_lines(devices, d.drawn)
    return Section(f"{prefix}chart-utilisation", "Utilisation over time", note, figure)


def _utilisation_lines(devices: Sequence[DeviceReport], drawn: Drawn) -> go.Figure:
    figure = go.Figure()
    multi = is_multi(devices)
    for d, origin, busy in zip(devices, drawn.origins_ns, drawn.utilisation_pct, strict=True):
        edges = bucket_edges(d.span_start_ns, d.span_end_ns, UTILISATION_BUCKETS)
        middle = (edges[:-1] + edges[1:]) / 2 - origin
        figure.add_trace(
            go.Scatter(
                x=np.round(middle / 1e6, 6),
                y=np.round(np.asarray(busy, dtype=np.float64), 2),
                mode="lines",
                name=device_label(d, multi),
                hovertemplate="%{x:.3f} ms: %{y:.1f}% busy<extra>%{fullData.name}</extra>",
            )
        )
    figure.update_layout(
        height=300,
        **LAYOUT,
        xaxis={"title": {"text": "time (ms)"}},
        yaxis={"title": {"text": "busy %"}, "range": [0, 102], "automargin": True},
        showlegend=multi,
    )
    return figure


def _utilisation_heatmap(devices: Sequence[DeviceReport], drawn: Drawn) -> go.Figure:
    """Busy % per device (rows) and time bucket (columns) on one time axis: the devices' own
    buckets, placed at their time from the common origin (or their own, when clocks differ)."""
    assert drawn.utilisation_axis_ns is not None
    lo, hi = drawn.utilisation_axis_ns
    edges = bucket_edges(lo, hi, UTILISATION_BUCKETS)
    rows = []
    for d, origin, pct in zip(devices, drawn.origins_ns, drawn.utilisation_pct, strict=True):
        busy = np.asarray(pct, dtype=np.float64)
        outside = (edges[1:] + origin <= d.span_start_ns) | (edges[:-1] + origin >= d.span_end_ns)
        shown = np.where(outside, np.nan, np.round(busy, 1))
        rows.append([None if np.isnan(v) else float(v) for v in shown])
    middle = (edges[:-1] + edges[1:]) / 2
    figure = go.Figure(
        go.Heatmap(
            z=rows,
            x=np.round(middle / 1e6, 6).tolist(),
            y=[device_label(d, True) for d in devices],
            zmin=0,
            zmax=100,
            colorscale="RdYlGn",
            colorbar={"title": {"text": "busy %"}},
            hovertemplate="%{y} · %{x:.3f} ms<br>%{z:.1f}% busy<extra></extra>",
        )
    )
    figure.update_layout(
        height=min(max(220, 90 + 22 * len(devices)), 1400),
        **LAYOUT,
        xaxis={"title": {"text": "time (ms)"}},
        yaxis={"autorange": "reversed", "automargin": True, "type": "category"},
    )
    return figure


# --- steps -------------------------------------------------------------------------------------

_STEP_PARTS = ["compute", "communication (exposed)", "memcpy / memset"]
_OUTSIDE = "no device activity yet"


def step_parts(d: DeviceReport) -> tuple[list[str], dict[str, NDArray[np.float64]]]:
    """Each step window of a device cut into busy parts, idle causes and time outside its span
    (the diagnosis' per-step cause table, :class:`~gpuscope.analyses.drawn.StepCauses`)."""
    table = d.series.step_causes
    parts = {
        "compute": table.compute_ns,
        "communication (exposed)": table.exposed_communication_ns,
        "memcpy / memset": table.memcpy_memset_ns,
        **{cause: table.lost_ns[cause] for cause in CAUSE_NAMES},
        _OUTSIDE: table.outside_ns,
    }
    return [s.name for s in d.steps], {
        k: np.asarray(v, dtype=np.int64).astype(np.float64) for k, v in parts.items()
    }


def steps_section(devices: Sequence[DeviceReport], prefix: str) -> Section:
    title = "Where each step's time went"
    with_steps = [d for d in devices if d.steps]
    if not with_steps:
        return Section(f"{prefix}chart-steps", title, "The trace has no profiler steps.", None)
    order: list[str] = []
    totals: dict[str, dict[str, float]] = {}
    for d in with_steps:
        names, parts = step_parts(d)
        for i, name in enumerate(names):
            if name not in totals:
                order.append(name)
                totals[name] = {}
            for part, values in parts.items():
                totals[name][part] = totals[name].get(part, 0.0) + float(values[i])
    figure = _step_figure(order, totals)
    note = "Each step window split into busy work and idle time by cause"
    note += ", summed over every GPU." if len(with_steps) > 1 else "."
    return Section(f"{prefix}chart-steps", title, note, figure)


def _step_figure(order: list[str], totals: dict[str, dict[str, float]]) -> go.Figure:
    colours = {
        "compute": "#2ca02c",
        "communication (exposed)": "#9467bd",
        "memcpy / memset": "#7f7f7f",
        **CAUSE_COLOURS,
        _OUTSIDE: "#e8e8e8",
    }
    figure = go.Figure()
    x = [plot_text(n) for n in order]
    for part, colour in colours.items():
        y = [totals[n].get(part, 0.0) / 1e6 for n in order]
        if not any(y):
            continue
        label = part if part in _STEP_PARTS or part == _OUTSIDE else f"idle: {part}"
        figure.add_trace(
            go.Bar(
                x=x,
                y=np.round(y, 6),
                name=label,
                marker={"color": colour},
                hovertemplate="%{x}<br>%{y:.3f} ms<extra>%{fullData.name}</extra>",
            )
        )
    figure.update_layout(
        barmode="stack",
        height=340,
        **LAYOUT,
        yaxis={"title": {"text": "ms"}, "automargin": True},
        xaxis={"automargin": True},
    )
    return figure


# --- ranks heatmap -----------------------------------------------------------------------------


def heatmap_section(devices: Sequence[DeviceReport], o: HtmlOptions, prefix: str) -> Section:
    title = "Busy % by rank and step"
    labels = [device_label(d, True) for d in devices]
    if any(d.steps for d in devices):
        columns, z = _step_matrix(devices)
        note = "Share of each step in which each GPU ran any work."
    else:
        columns, z = _time_matrix(devices)
        title = "Busy % by rank over time"
        note = "The trace has no profiler steps: columns are equal slices of each GPU's span."
    figure = go.Figure(
        go.Heatmap(
            z=z,
            x=columns,
            y=labels,
            zmin=0,
            zmax=100,
            colorscale="RdYlGn",
            colorbar={"title": {"text": "busy %"}},
            hovertemplate="%{y} · %{x}<br>%{z:.1f}% busy<extra></extra>",
        )
    )
    figure.update_layout(
        height=min(max(220, 80 + 24 * len(devices)), 1400),
        **LAYOUT,
        yaxis={"autorange": "reversed", "automargin": True, "type": "category"},
        xaxis={"type": "category", "automargin": True},
    )
    return Section(f"{prefix}chart-heatmap", title, note, figure)


def _step_matrix(devices: Sequence[DeviceReport]) -> tuple[list[str], list[list[float | None]]]:
    numbers = sorted({s.number for d in devices for s in d.steps})
    column = {n: i for i, n in enumerate(numbers)}
    z: list[list[float | None]] = []
    for d in devices:
        row: list[float | None] = [None] * len(numbers)
        for s in d.steps:
            row[column[s.number]] = None if s.dur_ns <= 0 else round(s.busy_pct, 2)
        z.append(row)
    return [f"step {n}" for n in numbers], z


def _time_matrix(devices: Sequence[DeviceReport]) -> tuple[list[str], list[list[float | None]]]:
    z: list[list[float | None]] = [
        [round(float(x), 2) for x in d.series.slices_busy_pct] for d in devices
    ]
    return [f"{100 * i / HEATMAP_SLICES:.0f}%" for i in range(HEATMAP_SLICES)], z


# --- roofline ----------------------------------------------------------------------------------


def roofline_section(devices: Sequence[DeviceReport], o: HtmlOptions, prefix: str) -> Section:
    title = "Roofline"
    busiest = max(devices, key=lambda d: d.temporal.busy_ns)
    points = [p for p in busiest.series.roofline_kernels if p.flops and p.bytes]
    label = device_label(busiest, is_multi(devices))
    if not points:
        note = (
            f"No kernel of {label} has recorded shapes to estimate its FLOPs and bytes from "
            "(profile with record_shapes=True)."
        )
        return Section(f"{prefix}chart-roofline", title, note, None)
    figure = _roofline_figure(busiest, points, o)
    note = (
        f"Kernels of {label} (the busiest GPU) with recorded shapes: achieved TFLOP/s against "
        "arithmetic intensity, each point sized by its time"
    )
    note += "." if busiest.facts else "; the device is not in the facts table, so no roofs."
    return Section(f"{prefix}chart-roofline", title, note, figure)


def _roofline_figure(d: DeviceReport, points: list[RooflinePoint], o: HtmlOptions) -> go.Figure:
    intensity = np.array([p.intensity or 0.0 for p in points])
    achieved = np.array([(p.flops_per_s or 0.0) / 1e12 for p in points])
    longest = max(p.total_ns for p in points)
    figure = go.Figure()
    roofs(figure, d, float(intensity.min()) / 4, float(intensity.max()) * 4)
    figure.add_trace(
        go.Scatter(
            x=intensity,
            y=achieved,
            mode="markers",
            name="kernels",
            marker={
                "size": [8 + 34 * (p.total_ns / longest) ** 0.5 for p in points],
                "color": [KIND_COLOURS.get(p.kind, "#999") for p in points],
                "line": {"width": 1, "color": "#333"},
                "opacity": 0.8,
            },
            hovertext=[_point_text(p, o) for p in points],
            hovertemplate="%{hovertext}<extra></extra>",
        )
    )
    figure.update_layout(
        height=420,
        **LAYOUT,
        hovermode="closest",
        xaxis={"type": "log", "title": {"text": "arithmetic intensity (FLOP/byte)"}},
        yaxis={"type": "log", "title": {"text": "achieved TFLOP/s"}, "automargin": True},
    )
    return figure


def _point_text(p: RooflinePoint, o: HtmlOptions) -> str:
    return (
        f"{plot_text(p.name, o.label_chars)}<br>{p.kind} · {p.bound}-bound · {p.count:,} launches"
        f"<br>{ms_or_s(p.total_ns)} · {(p.flops_per_s or 0) / 1e12:,.2f} TFLOP/s · "
        f"{(p.bytes_per_s or 0) / 1e9:,.0f} GB/s · {p.intensity or 0:,.1f} FLOP/byte"
    )


def roofs(figure: go.Figure, d: DeviceReport, x_lo: float, x_hi: float) -> None:
    """The device's roofs on a roofline (memory bandwidth up to each peak it has), each named by
    the precision of its peak; none for a device not in the facts table."""
    f = d.facts
    if f is None or not f.memory_bandwidth_bytes_per_s:
        return
    bandwidth = f.memory_bandwidth_bytes_per_s
    # The 16-bit peak is BF16's, or FP16's on GPUs without BF16 (V100, T4), and not a tensor
    # core's on GPUs without them.
    sixteen = f.sixteen_bit if f.architecture in NO_TENSOR_CORES else f"{f.sixteen_bit} tensor"
    peaks = [
        ("FP8 tensor", f.fp8_flops_per_s),
        (sixteen, f.bf16_flops_per_s),
        ("TF32 tensor", f.tf32_flops_per_s),
        ("FP32", f.fp32_flops_per_s),
    ]
    for name, peak in peaks:
        if not peak:
            continue
        ridge = peak / bandwidth
        xs = [min(x_lo, ridge / 4), ridge, max(x_hi, ridge * 4)]
        ys = [min(x * bandwidth, peak) / 1e12 for x in xs]
        figure.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                name=f"{name} roof",
                line={"dash": "dot", "width": 1.5},
                hovertemplate=f"{name}: %{{y:,.0f}} TFLOP/s peak, "
                f"{bandwidth / 1e9:,.0f} GB/s<extra></extra>",
            )
        )
