"""The HTML report: one self-contained file that opens offline, its charts drawn with plotly.

Contract: :func:`render` turns a :class:`~gpuscope.diagnosis.Diagnosis` into the text of one HTML
file, :func:`render_diff` turns two (before, after) into a side-by-side comparison. plotly.js
(once), the figure data, the styles and the scripts are inline: the file needs no network.

Size and speed: plotly.js is the cartesian partial bundle (bar, scatter, heatmap: what the charts
use; ``vendor/README.md``), 1.5 MB instead of the full 4.8 MB. It and the figure data are inlined
gzip-compressed and base64-encoded, and unpacked by the browser (``DecompressionStream``) after
the page's text has shown: a report is well under 1.5 MB, and the verdict and findings appear
before any chart code is parsed. :func:`embedded_figures` reads the figures back from a page.

What it shows: the verdict and its cost; the findings with evidence, locations and fixes; a
zoomable timeline (per device, a lane for its idle time and one per stream; kernels coloured by
kind, idle segments by cause, with the cause and code location on hover); the busy share over
time; per-step stacked bars of where the time went; a ranks x steps heatmap of busy % for
multi-rank jobs; a roofline of the busiest device.

Nothing is measured here. The only arithmetic is layout: binning the diagnosis' busy and idle
intervals into time buckets and step windows, and, so that a large trace stays small and quick to
draw, merging kernels and idle gaps shorter than a timeline bucket into one bar per run of buckets.
Every idle gap at least one bucket long keeps its own bar, with its cause and location.

Safety: user-controlled text (kernel, frame and file names) is escaped for where it lands:
:func:`html.escape` in the page, :func:`plot_text` in plotly labels (plotly reads a few HTML tags
in them), and the figure JSON by :func:`script_json` (then base64: nothing in a kernel name can
end the script block that holds it).
"""

from __future__ import annotations

import base64
import gzip
import html
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import plotly.graph_objects as go  # type: ignore[import-untyped]
import plotly.io as pio  # type: ignore[import-untyped]
from numpy.typing import NDArray

from gpuscope import __version__, causes
from gpuscope._arrays import distinct
from gpuscope.analyses import diff
from gpuscope.analyses.attribution import CAUSES
from gpuscope.analyses.bounds import KernelKind, RooflinePoint, roofline_points
from gpuscope.analyses.intervals import Intervals, covered_ns, difference
from gpuscope.analyses.timeline import WorkClass
from gpuscope.analyses.whatif import Prediction
from gpuscope.diagnosis import DeviceReport, Diagnosis
from gpuscope.diagnosis.findings import Finding, Verdict
from gpuscope.diagnosis.patterns import PATTERNS, legend
from gpuscope.names import (
    percentage_change,
    plural,
    short_kernel_name,
    short_kernel_names,
    short_location,
)
from gpuscope.render import predicted
from gpuscope.render.views_html import FIGURE_ID as VIEWS_FIGURE_ID
from gpuscope.render.views_html import views_part

I64 = NDArray[np.int64]


@dataclass(frozen=True)
class HtmlOptions:
    """Layout limits. The defaults keep a report of a large trace a few MB and quick to draw."""

    timeline_buckets: int = 1600  # time buckets across the timeline at full zoom-out (~pixels)
    max_timeline_bars: int = 4000  # bars on the timeline, every lane together
    utilisation_buckets: int = 300
    heatmap_buckets: int = 40  # time buckets of the ranks heatmap when the trace has no steps
    roofline_points: int = 30
    label_chars: int = 160  # longer names are cut in chart labels (tables show them whole)


# --- escaping ----------------------------------------------------------------------------------

_SCRIPT_UNSAFE = re.compile("[<>&\u2028\u2029]")


def script_json(text: str) -> str:
    """JSON text made safe inside ``<script>``: ``<``, ``>``, ``&``, U+2028 and U+2029 become
    ``\\uXXXX`` escapes. These characters only occur inside JSON strings, where the escape means
    the same character, so the JSON still parses to the same value."""
    return _SCRIPT_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def plot_text(text: str, limit: int | None = None) -> str:
    """User text for a plotly label: cut to ``limit`` characters, then entity-escaped (plotly
    turns ``<b>``, ``<br>``, ``<a>`` and a few more tags into markup; entities it shows as text).
    """
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return html.escape(text, quote=False)


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _name(text: str, shown: str | None = None) -> str:
    """A kernel or frame name for a table cell: ``shown`` (a short form), clipped to a few lines,
    the whole name on hover."""
    return f"<div class='clip' title='{_e(text)}'>{_e(text if shown is None else shown)}</div>"


# --- colours -----------------------------------------------------------------------------------

KIND_COLOURS = {
    "gemm": "#2ca02c",
    "gemm_fp32": "#98df8a",
    "attention": "#17becf",
    "conv": "#1f77b4",
    "elementwise": "#bcbd22",
    "reduction": "#8c564b",
    "copy": "#7f7f7f",
    "communication": "#9467bd",
    "other": "#aec7e8",
}
CAUSE_COLOURS = {cause: colour for cause, (_, colour) in causes.idle_styles().items()}
_KINDS = [k.name.lower() for k in KernelKind]
_CAUSE_NAMES = [c.value for c in CAUSES]
_MERGED_OPACITY = 0.5
#: Every chart's legend sits in rows under its plot, below the axis title: above it, the mode bar
#: (zoom, pan, download), which shows in the top right corner on hover, covered its last entries.
_LAYOUT = {
    "margin": {"l": 10, "r": 10, "t": 30, "b": 40},
    "legend": {
        "orientation": "h",
        "x": 0,
        "xanchor": "left",
        "yref": "container",
        "y": 0,
        "yanchor": "bottom",
    },
    "template": "plotly_white",
}


# --- the page ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Section:
    """One heading of the page: a chart, or a note saying why there is none."""

    id: str
    title: str
    note: str  # plain text
    figure: go.Figure | None


def render(diagnosis: Diagnosis, options: HtmlOptions | None = None) -> str:
    """The report of one diagnosis, as the text of a self-contained HTML file."""
    options = options or HtmlOptions()
    sections = _sections(diagnosis, options, prefix="")
    views = views_part(diagnosis)
    body = "\n".join(
        [
            _header(diagnosis, "gpuscope report"),
            _verdict(diagnosis.verdict),
            _findings(
                diagnosis.findings,
                diagnosis.verdict.gpu_hour_usd,
                diagnosis.all_fixes,
                views.links,
            ),
            views.html,
            *(_section_html(s) for s in sections),
            _devices(diagnosis.devices),
        ]
    )
    drawn = [*sections, _Section(VIEWS_FIGURE_ID, "", "", views.figure)]
    return _page(f"gpuscope: {diagnosis.source}", body, drawn)


def _sections(d: Diagnosis, options: HtmlOptions, prefix: str) -> list[_Section]:
    if not d.devices:
        note = "The input holds no timeline of GPU work: there is nothing to draw."
        return [_Section(f"{prefix}chart-timeline", "GPU timeline", note, None)]
    sections = [
        _timeline_section(d.devices, options, prefix),
        _utilisation_section(d.devices, options, prefix),
        _steps_section(d.devices, prefix),
    ]
    if len(d.devices) > 1:
        sections.append(_heatmap_section(d.devices, options, prefix))
    sections.append(_roofline_section(d.devices, options, prefix))
    return sections


def _page(title: str, body: str, sections: Sequence[_Section]) -> str:
    figures = ",".join(
        f'{{"id":{json.dumps(s.id)},"figure":{pio.to_json(s.figure, validate=False)}}}'
        for s in sections
        if s.figure is not None
    )
    parts = {
        "title": _e(title),
        "body": body,
        "figures": _packed(script_json(f"[{figures}]").encode()),
        "plotly": plotly_block(),
    }
    # One pass, so that nothing substituted is ever searched for another marker.
    return re.sub(r"<!--gpuscope:(\w+)-->", lambda m: parts[m.group(1)], _template())


@cache
def _template() -> str:
    return resources.files("gpuscope.render").joinpath("report_template.html").read_text("utf-8")


def _packed(data: bytes) -> str:
    """gzip then base64: what the page's script unpacks (``mtime=0``: the same report twice is
    the same file)."""
    return base64.b64encode(gzip.compress(data, compresslevel=6, mtime=0)).decode("ascii")


@cache
def plotly_block() -> str:
    """The vendored plotly.js partial bundle as the page inlines it (base64 of its gzip file)."""
    packed = resources.files("gpuscope.render").joinpath("vendor/plotly-cartesian.min.js.gz")
    return base64.b64encode(packed.read_bytes()).decode("ascii")


def embedded_figures(page: str) -> list[dict[str, Any]]:
    """The figures a report embeds (``[{"id": ..., "figure": {...}}]``), unpacked."""
    match = re.search(r'<script [^>]*id="gpuscope-figures">([^<]*)</script>', page)
    if match is None:
        raise ValueError("not a gpuscope report: no figure data")
    figures: list[dict[str, Any]] = json.loads(gzip.decompress(base64.b64decode(match[1])))
    return figures


def _section_html(s: _Section) -> str:
    chart = f'<div class="chart" id="{s.id}"></div>' if s.figure is not None else ""
    note = f'<p class="note">{_e(s.note)}</p>' if s.note else ""
    return f"<section><h2>{_e(s.title)}</h2>{note}{chart}</section>"


def _header(d: Diagnosis, title: str) -> str:
    inputs = "".join(
        f"<li><span class='mono'>{_e(i.path)}</span> <span class='dim'>({_e(i.format)}, "
        f"{i.events:,} events, {plural(i.steps, 'step')}{_rank(i.rank)})</span></li>"
        for i in d.inputs[:16]
    )
    more = f"<li class='dim'>and {len(d.inputs) - 16} more</li>" if len(d.inputs) > 16 else ""
    warnings = "".join(f"<p class='warning'>warning: {_e(w)}</p>" for w in d.warnings)
    return (
        f"<h1>{_e(title)}</h1><p class='dim'>gpuscope {_e(__version__)} · "
        f"<span class='mono'>{_e(d.source)}</span></p><ul class='dim'>{inputs}{more}</ul>"
        f"{warnings}"
    )


def _rank(rank: int | None) -> str:
    return "" if rank is None else f", rank {rank}"


def _verdict(v: Verdict) -> str:
    figures = [
        ("bound", v.bound),
        # Counters alone (ncu) have no timeline: idle time is not measured, not "nan%".
        ("GPU idle", f"{v.idle_pct:.1f}%" if math.isfinite(v.idle_pct) else "n/a (no timeline)"),
        ("wasted per GPU-hour", _usd(v.wasted_usd_per_gpu_hour)),
        ("price per GPU-hour", _usd(v.gpu_hour_usd)),
        ("GPUs", str(v.world_size)),
    ]
    for key, label in (("mfu_pct", "MFU"), ("mbu_pct", "MBU")):
        value = v.figures.get(key)
        figures.append((label, "n/a" if value is None else f"{value:.1f}%"))
    cells = "".join(f"<div class='figure'>{_e(k)}<b>{_e(x)}</b></div>" for k, x in figures)
    return (
        f"<div class='verdict bound-{_e(v.bound)}' id='verdict'>{_e(v.summary)}</div>"
        f"<div class='figures'>{cells}</div>{_shares(v.shares_pct)}"
        f"<p class='note'>Price: {_e(v.price_source)}.</p>"
    )


_BOUND_COLOURS = {
    "host": "#d62728",
    "communication": "#9467bd",
    "memory": "#bcbd22",
    "compute": "#2ca02c",
    "transfer": "#17becf",
    "latency": "#ff7f0e",
    "unclassified": "#7f7f7f",
}


def _shares(all_shares: dict[str, float]) -> str:
    # A share the input cannot give (NaN) is left out, never drawn or printed as "nan%".
    shares = {k: x for k, x in all_shares.items() if math.isfinite(x)}
    spans = "".join(
        f"<span style='width:{max(x, 0.0):.2f}%;background:{_BOUND_COLOURS.get(k, '#999')}' "
        f"title='{_e(k)} {x:.1f}%'></span>"
        for k, x in shares.items()
    )
    legend = " · ".join(f"{_e(k)} {x:.1f}%" for k, x in shares.items())
    # Samples split the time only into busy and idle (see gpuscope.diagnosis.sampled).
    whole = "sampled GPU time" if "busy" in shares else "device time by bound"
    return f"<div class='shares'>{spans}</div><p class='note'>{whole}: {legend}</p>"


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}"


def _findings(
    found: Sequence[Finding],
    gpu_hour_usd: float | None = None,
    all_fixes: Prediction | None = None,
    links: dict[str, str] | None = None,
) -> str:
    if not found:
        return (
            "<section><h2>Findings</h2><p>No finding above the reporting threshold.</p></section>"
        )
    items = "".join(_finding(i, f, gpu_hour_usd, links or {}) for i, f in enumerate(found, 1))
    together = ""
    if all_fixes is not None:
        together = (
            f"<p class='prediction all-fixes'><b>"
            f"{_e(predicted.headline(all_fixes, gpu_hour_usd, 'All fixes together'))}</b>"
            " (replayed as one edit set: the findings' savings overlap and are not added up)</p>"
        )
    tags = f"<p class='note'>{_e(legend(f.pattern for f in found))}</p>"
    return (
        f"<section id='findings'><h2>Findings, costliest first</h2>{together}{items}{tags}"
        "</section>"
    )


def _finding(
    i: int, f: Finding, gpu_hour_usd: float | None = None, links: dict[str, str] | None = None
) -> str:
    figures = [f"{f.share_pct:.1f}% of device time", f"{f.lost_ns / 1e6:,.2f} ms lost"]
    if f.lost_ns_per_step is not None:
        figures.append(f"{f.lost_ns_per_step / 1e6:,.2f} ms per step")
    if f.cost_usd_per_gpu_hour is not None:
        figures.append(f"${f.cost_usd_per_gpu_hour:,.2f} per GPU-hour")
    if f.cost_usd_per_day is not None:
        figures.append(f"${f.cost_usd_per_day:,.0f} per day")
    evidence = "".join(f"<li>{_e(x)}</li>" for x in f.evidence)
    if f.prediction is not None:
        evidence = (
            f"<li class='prediction'><b>{_e(predicted.headline(f.prediction, gpu_hour_usd))}</b>;"
            f" {_e(predicted.details(f.prediction))}</li>{evidence}"
        )
    rows = "".join(
        f"<tr><td class='mono kernel'>{_linked(loc.location, links or {})}</td>"
        f"<td class='num'>{loc.lost_ns / 1e6:,.2f} ms</td><td class='num'>{loc.gaps:,}</td></tr>"
        for loc in f.locations
    )
    where = (
        "<table><tr><th>location</th><th class='num'>lost</th><th class='num'>gaps</th></tr>"
        f"{rows}</table>"
        if rows
        else ""
    )
    return (
        f"<article class='finding' data-cause='{_e(f.cause)}'>"
        f"<h3>{i}. {_e(f.title)} <span class='dim mono'>{_e(f.cause)} · "
        f"<span title='{_e(PATTERNS.get(f.pattern, ''))}'>[{_e(f.pattern)}]</span></span>"
        f"</h3><p>{_e(' · '.join(figures))}</p><ul>{evidence}</ul>{where}"
        f"<p class='fix'><b>Fix:</b> {_code_spans(f.fix)}</p></article>"
    )


def _linked(location: str, links: dict[str, str]) -> str:
    """A finding's location, linked to its row of the module or operator view when it has one."""
    anchor = links.get(location)
    name = _name(location, short_location(location, 100))  # the whole location on hover
    if anchor is None:
        return name
    return f"<a href='{_e(anchor)}'>{name}</a>"


def _code_spans(text: str) -> str:
    """Escaped text whose `backticked` parts are set as code."""
    parts = text.split("`")
    return "".join(f"<code>{_e(p)}</code>" if i % 2 else _e(p) for i, p in enumerate(parts))


def _devices(devices: Sequence[DeviceReport]) -> str:
    if not devices:
        return ""
    rows = "".join(_device_row(d) for d in devices)
    head = "".join(
        f"<th class='num'>{h}</th>" if h not in ("device", "GPU") else f"<th>{h}</th>"
        for h in ("device", "GPU", "span", "busy", "idle", "compute", "comm", "memory", "MFU")
    )
    detailed = devices if len(devices) <= 2 else _extremes(devices)
    kernels = "".join(_kernel_table(d, len(devices) > 1) for d in detailed)
    return f"<section><h2>Devices</h2><table>{head}{rows}</table>{kernels}</section>"


def _device_row(d: DeviceReport) -> str:
    t = d.temporal
    cells = [
        _e(_device_label(d, True)),
        _e(d.info.name or "unknown"),
        f"{t.span_ns / 1e6:,.2f} ms",
        *(
            f"{t.pct(x):.1f}%"
            for x in (t.busy_ns, t.idle_ns, t.compute_ns, t.communication_ns, t.memory_ns)
        ),
        "n/a" if d.bounds.mfu_pct is None else f"{d.bounds.mfu_pct:.1f}%",
    ]
    tds = "".join(
        f"<td>{c}</td>" if i < 2 else f"<td class='num'>{c}</td>" for i, c in enumerate(cells)
    )
    return f"<tr>{tds}</tr>"


def _extremes(devices: Sequence[DeviceReport]) -> list[DeviceReport]:
    by_busy = sorted(devices, key=lambda d: d.temporal.busy_ns / max(d.temporal.span_ns, 1))
    return [by_busy[0], by_busy[-1]]


_short_kernel = cache(short_kernel_name)  # a timeline's hover texts name the same kernels often


def _kernel_table(d: DeviceReport, multi: bool) -> str:
    short = short_kernel_names(k.name for k in d.kernels)
    rows = "".join(
        f"<tr><td class='mono kernel'>{_name(k.name, short[k.name])}</td>"
        f"<td>{_e(k.work_class.name.lower())}</td>"
        f"<td class='num'>{k.count:,}</td><td class='num'>{k.total_ns / 1e6:,.2f} ms</td>"
        f"<td class='num'>{k.share_of_busy_pct:.1f}%</td></tr>"
        for k in d.kernels
    )
    return (
        f"<h3>Top kernels · {_e(_device_label(d, multi))}</h3><table><tr><th>kernel</th>"
        "<th>class</th><th class='num'>count</th><th class='num'>total</th>"
        f"<th class='num'>share</th></tr>{rows}</table>"
    )


def _device_label(d: DeviceReport, multi: bool) -> str:
    gpu = f"GPU {d.device}"
    return f"rank {d.rank} · {gpu}" if multi and d.rank is not None else gpu


def _is_multi(devices: Sequence[DeviceReport]) -> bool:
    return len(devices) > 1


# --- time origin -------------------------------------------------------------------------------


def _origins(devices: Sequence[DeviceReport]) -> list[int]:
    """Where each device's time axis starts: one origin for all when their clocks agree (the
    spans lie within ten spans of each other), else each device's own first activity."""
    starts = [d.span_start_ns for d in devices]
    widest = max(d.temporal.span_ns for d in devices)
    if max(starts) - min(starts) <= 10 * max(widest, 1):
        return [min(starts)] * len(devices)
    return starts


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.3f} ms" if ns < 1e9 else f"{ns / 1e9:,.3f} s"


# --- timeline ----------------------------------------------------------------------------------


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


# --- utilisation over time ---------------------------------------------------------------------


def _bucket_edges(lo: int, hi: int, buckets: int) -> I64:
    """``buckets + 1`` integer edges splitting ``[lo, hi]`` evenly."""
    return np.linspace(lo, hi, max(buckets, 1) + 1).round().astype(np.int64)


def _busy_pct(d: DeviceReport, edges: I64) -> NDArray[np.float64]:
    width = np.maximum(np.diff(edges), 1).astype(np.float64)
    return 100.0 * covered_ns(d.work.busy, edges[:-1], edges[1:]) / width


def _utilisation_section(devices: Sequence[DeviceReport], o: HtmlOptions, prefix: str) -> _Section:
    width_ns = max(d.temporal.span_ns for d in devices) / max(o.utilisation_buckets, 1)
    note = f"Share of each {_ms(width_ns)} bucket in which the device ran any work."
    if len(devices) >= HEATMAP_FROM_DEVICES:
        figure = _utilisation_heatmap(devices, o)
        note += " One row per GPU: overlapping lines would hide each other."
    else:
        figure = _utilisation_lines(devices, o)
    return _Section(f"{prefix}chart-utilisation", "Utilisation over time", note, figure)


#: From this many devices on, utilisation over time is a heat map (a row per device), not lines.
HEATMAP_FROM_DEVICES = 3


def _utilisation_lines(devices: Sequence[DeviceReport], o: HtmlOptions) -> go.Figure:
    figure = go.Figure()
    multi = _is_multi(devices)
    for d, origin in zip(devices, _origins(devices), strict=True):
        edges = _bucket_edges(d.span_start_ns, d.span_end_ns, o.utilisation_buckets)
        middle = (edges[:-1] + edges[1:]) / 2 - origin
        figure.add_trace(
            go.Scatter(
                x=np.round(middle / 1e6, 6),
                y=np.round(_busy_pct(d, edges), 2),
                mode="lines",
                name=_device_label(d, multi),
                hovertemplate="%{x:.3f} ms: %{y:.1f}% busy<extra>%{fullData.name}</extra>",
            )
        )
    figure.update_layout(
        height=300,
        **_LAYOUT,
        xaxis={"title": {"text": "time (ms)"}},
        yaxis={"title": {"text": "busy %"}, "range": [0, 102], "automargin": True},
        showlegend=multi,
    )
    return figure


def _utilisation_heatmap(devices: Sequence[DeviceReport], o: HtmlOptions) -> go.Figure:
    """Busy % per device (rows) and time bucket (columns) on one time axis: the devices' own
    buckets, placed at their time from the common origin (or their own, when clocks differ)."""
    origins = _origins(devices)
    lo = min(d.span_start_ns - origin for d, origin in zip(devices, origins, strict=True))
    hi = max(d.span_end_ns - origin for d, origin in zip(devices, origins, strict=True))
    edges = _bucket_edges(lo, hi, o.utilisation_buckets)
    rows = []
    for d, origin in zip(devices, origins, strict=True):
        busy = _busy_pct(d, edges + origin)
        outside = (edges[1:] + origin <= d.span_start_ns) | (edges[:-1] + origin >= d.span_end_ns)
        shown = np.where(outside, np.nan, np.round(busy, 1))
        rows.append([None if np.isnan(v) else float(v) for v in shown])
    middle = (edges[:-1] + edges[1:]) / 2
    figure = go.Figure(
        go.Heatmap(
            z=rows,
            x=np.round(middle / 1e6, 6).tolist(),
            y=[_device_label(d, True) for d in devices],
            zmin=0,
            zmax=100,
            colorscale="RdYlGn",
            colorbar={"title": {"text": "busy %"}},
            hovertemplate="%{y} · %{x:.3f} ms<br>%{z:.1f}% busy<extra></extra>",
        )
    )
    figure.update_layout(
        height=min(max(220, 90 + 22 * len(devices)), 1400),
        **_LAYOUT,
        xaxis={"title": {"text": "time (ms)"}},
        yaxis={"autorange": "reversed", "automargin": True, "type": "category"},
    )
    return figure


# --- steps -------------------------------------------------------------------------------------

_STEP_PARTS = ["compute", "communication (exposed)", "memcpy / memset"]
_OUTSIDE = "no device activity yet"


def step_parts(d: DeviceReport) -> tuple[list[str], dict[str, NDArray[np.float64]]]:
    """Each step window of a device cut into busy parts, idle causes and time outside its span."""
    lo = np.array([s.start_ns for s in d.steps], dtype=np.int64)
    hi = np.array([s.end_ns for s in d.steps], dtype=np.int64)
    classes = d.work.by_class
    compute = classes[WorkClass.COMPUTE]
    parts = {
        "compute": covered_ns(compute, lo, hi),
        "communication (exposed)": covered_ns(
            difference(classes[WorkClass.COMMUNICATION], compute), lo, hi
        ),
    }
    busy = np.array([s.busy_ns for s in d.steps], dtype=np.int64)
    parts["memcpy / memset"] = np.maximum(busy - parts["compute"] - parts[_STEP_PARTS[1]], 0)
    g = d.idle.gaps
    for code, cause in enumerate(_CAUSE_NAMES):
        mine = g.cause == code
        parts[cause] = covered_ns(Intervals(g.start_ns[mine], g.end_ns[mine]), lo, hi)
    accounted = sum(parts.values())
    parts[_OUTSIDE] = np.maximum(hi - lo - accounted, 0)
    return [s.name for s in d.steps], {k: v.astype(np.float64) for k, v in parts.items()}


def _steps_section(devices: Sequence[DeviceReport], prefix: str) -> _Section:
    title = "Where each step's time went"
    with_steps = [d for d in devices if d.steps]
    if not with_steps:
        return _Section(f"{prefix}chart-steps", title, "The trace has no profiler steps.", None)
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
    return _Section(f"{prefix}chart-steps", title, note, figure)


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
        **_LAYOUT,
        yaxis={"title": {"text": "ms"}, "automargin": True},
        xaxis={"automargin": True},
    )
    return figure


# --- ranks heatmap -----------------------------------------------------------------------------


def _heatmap_section(devices: Sequence[DeviceReport], o: HtmlOptions, prefix: str) -> _Section:
    title = "Busy % by rank and step"
    labels = [_device_label(d, True) for d in devices]
    if any(d.steps for d in devices):
        columns, z = _step_matrix(devices)
        note = "Share of each step in which each GPU ran any work."
    else:
        columns, z = _time_matrix(devices, o.heatmap_buckets)
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
        **_LAYOUT,
        yaxis={"autorange": "reversed", "automargin": True, "type": "category"},
        xaxis={"type": "category", "automargin": True},
    )
    return _Section(f"{prefix}chart-heatmap", title, note, figure)


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


def _time_matrix(
    devices: Sequence[DeviceReport], buckets: int
) -> tuple[list[str], list[list[float | None]]]:
    z: list[list[float | None]] = []
    for d in devices:
        edges = _bucket_edges(d.span_start_ns, d.span_end_ns, buckets)
        z.append([round(float(x), 2) for x in _busy_pct(d, edges)])
    return [f"{100 * i / buckets:.0f}%" for i in range(buckets)], z


# --- roofline ----------------------------------------------------------------------------------


def _roofline_section(devices: Sequence[DeviceReport], o: HtmlOptions, prefix: str) -> _Section:
    title = "Roofline"
    busiest = max(devices, key=lambda d: d.temporal.busy_ns)
    points = [
        p
        for p in roofline_points(busiest.bounds, busiest.work, top=o.roofline_points)
        if p.flops and p.bytes
    ]
    label = _device_label(busiest, _is_multi(devices))
    if not points:
        note = (
            f"No kernel of {label} has recorded shapes to estimate its FLOPs and bytes from "
            "(profile with record_shapes=True)."
        )
        return _Section(f"{prefix}chart-roofline", title, note, None)
    figure = _roofline_figure(busiest, points, o)
    note = (
        f"Kernels of {label} (the busiest GPU) with recorded shapes: achieved TFLOP/s against "
        "arithmetic intensity, each point sized by its time"
    )
    note += "." if busiest.facts else "; the device is not in the facts table, so no roofs."
    return _Section(f"{prefix}chart-roofline", title, note, figure)


def _roofline_figure(d: DeviceReport, points: list[RooflinePoint], o: HtmlOptions) -> go.Figure:
    intensity = np.array([p.intensity or 0.0 for p in points])
    achieved = np.array([(p.flops_per_s or 0.0) / 1e12 for p in points])
    longest = max(p.total_ns for p in points)
    figure = go.Figure()
    _roofs(figure, d, float(intensity.min()) / 4, float(intensity.max()) * 4)
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
        **_LAYOUT,
        hovermode="closest",
        xaxis={"type": "log", "title": {"text": "arithmetic intensity (FLOP/byte)"}},
        yaxis={"type": "log", "title": {"text": "achieved TFLOP/s"}, "automargin": True},
    )
    return figure


def _point_text(p: RooflinePoint, o: HtmlOptions) -> str:
    return (
        f"{plot_text(p.name, o.label_chars)}<br>{p.kind} · {p.bound}-bound · {p.count:,} launches"
        f"<br>{_ms(p.total_ns)} · {(p.flops_per_s or 0) / 1e12:,.2f} TFLOP/s · "
        f"{(p.bytes_per_s or 0) / 1e9:,.0f} GB/s · {p.intensity or 0:,.1f} FLOP/byte"
    )


def _roofs(figure: go.Figure, d: DeviceReport, x_lo: float, x_hi: float) -> None:
    f = d.facts
    if f is None or not f.memory_bandwidth_bytes_per_s:
        return
    bandwidth = f.memory_bandwidth_bytes_per_s
    peaks = [
        ("FP8 tensor", f.fp8_flops_per_s),
        ("BF16 tensor", f.bf16_flops_per_s),
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


# --- before / after ----------------------------------------------------------------------------


def render_diff(before: Diagnosis, after: Diagnosis, options: HtmlOptions | None = None) -> str:
    """Two diagnoses side by side: what changed per step (with whether it beats the noise, from
    :mod:`gpuscope.analyses.diff`), findings resolved and new, kernel changes, then each one's
    verdict, findings and charts in two columns."""
    options = options or HtmlOptions()
    change = diff.diff(diff.summarize(before), diff.summarize(after))
    comparison = [_step_comparison(change), _cause_comparison(change, before, after)]
    left = _sections(before, options, prefix="before-")
    right = _sections(after, options, prefix="after-")
    body = "\n".join(
        [
            "<h1>gpuscope: before and after</h1>",
            _diff_notes(change),
            _metric_table(change),
            _finding_changes(change),
            *(_section_html(s) for s in comparison),
            _kernel_changes(change),
            _columns(_side(before, "Before"), _side(after, "After")),
            *(
                _columns(_section_html(a), _section_html(b))
                for a, b in zip(left, right, strict=True)
            ),
        ]
    )
    title = f"gpuscope: {before.source} vs {after.source}"
    return _page(title, body, [*comparison, *left, *right])


def _columns(left: str, right: str) -> str:
    return f"<div class='cols'><div>{left}</div><div>{right}</div></div>"


def _side(d: Diagnosis, title: str) -> str:
    found = _findings(d.findings, d.verdict.gpu_hour_usd, d.all_fixes)
    return f"{_header(d, title)}{_verdict(d.verdict)}{found}"


def _diff_notes(change: diff.RunDiff) -> str:
    notes = "".join(f"<p class='warning'>{_e(n)}</p>" for n in change.notes)
    return (
        f"<p class='dim'>before: <span class='mono'>{_e(change.before.source)}</span> · after: "
        f"<span class='mono'>{_e(change.after.source)}</span></p>{notes}"
    )


_OUTCOME_COLOURS = {"better": "#2ca02c", "worse": "#d62728", "unchanged": "#5d6675"}


def _metric_label(name: str) -> str:
    labels = {
        diff.STEP_TIME: "step time",
        diff.ITERATIONS: "iterations per second",
        diff.ITEMS: "items per second",
        diff.GPU_BUSY: "GPU busy",
        diff.COST: "waste per GPU-hour",
    }
    return labels.get(name, name.replace(diff.LOST_PREFIX, "lost per step: "))


def _metric_value(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "ns":
        return f"{value / 1e6:,.3f} ms"
    if unit == "pct":
        return f"{value:.1f}%"
    if unit == "per_s":
        return f"{value:,.4g}/s"
    return f"${value:,.2f}"


def _metric_row(m: diff.MetricDiff) -> str:
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
    note = f" <span class='dim'>({_e(c.note)})</span>" if c.note else ""
    return (
        f"<tr><td>{_e(_metric_label(m.name))}</td>"
        f"<td class='num'>{_metric_value(c.before_median, m.unit)}</td>"
        f"<td class='num'>{_metric_value(c.after_median, m.unit)}</td>"
        f"<td class='num'>{change}</td><td class='num'>{interval}</td>"
        f"<td class='num'>{'n/a' if c.p_value is None else f'{c.p_value:.3g}'}</td>"
        f"<td style='color:{colour}'><b>{_e(outcome)}</b>{note}</td></tr>"
    )


def _metric_table(change: diff.RunDiff) -> str:
    rows = "".join(_metric_row(m) for m in change.metrics)
    level = 100 * (1 - diff.SIGNIFICANCE_LEVEL)
    return (
        "<section id='diff-metrics'><h2>What changed, per step</h2>"
        f"<p class='note'>Medians over steps; the change is the Hodges-Lehmann shift and the"
        f" interval its {level:g}% confidence interval (Mann-Whitney); 'unchanged' means within"
        " step-to-step noise.</p>"
        "<table><tr><th>metric</th><th class='num'>before</th><th class='num'>after</th>"
        "<th class='num'>change</th><th class='num'>interval</th><th class='num'>p</th>"
        f"<th>outcome</th></tr>{rows}</table></section>"
    )


def _finding_changes(change: diff.RunDiff) -> str:
    groups = (
        ("resolved", change.resolved),
        ("new", change.new),
        ("still there", change.persisting),
    )
    items = "".join(
        f"<li><b>{_e(label)}</b>: "
        + (", ".join(f"{_e(f.cause)} ({_e(f.title)})" for f in found) or "none")
        + "</li>"
        for label, found in groups
    )
    return f"<section><h2>Findings</h2><ul>{items}</ul></section>"


def _kernel_changes(change: diff.RunDiff) -> str:
    if not change.kernels:
        return ""
    unit = "per step" if change.kernel_unit == "step" else "per second of device span"
    rows = "".join(
        f"<tr><td class='mono kernel'>{_name(k.name)}</td><td>{_e(k.status)}</td>"
        f"<td class='num'>{k.before_ns / 1e6:,.3f} ms</td>"
        f"<td class='num'>{k.after_ns / 1e6:,.3f} ms</td></tr>"
        for k in change.kernels
    )
    return (
        f"<section><h2>Kernels that changed most</h2><p class='note'>Device time {unit}, per "
        "GPU.</p><table><tr><th>kernel</th><th>change</th><th class='num'>before</th>"
        f"<th class='num'>after</th></tr>{rows}</table></section>"
    )


_SIDES = (("before", "#9aa5b8"), ("after", "#1f77b4"))


def _step_comparison(change: diff.RunDiff) -> _Section:
    title = "Step time, step by step"
    step = change.metric(diff.STEP_TIME)
    busy = change.metric(diff.GPU_BUSY)
    if step is None or not (step.before or step.after):
        return _Section("diff-chart-steps", title, "Neither trace has profiler steps.", None)
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
        **_LAYOUT,
        xaxis={"title": {"text": "step (the first recorded step only opens the second)"}},
        yaxis={"title": {"text": "ms"}, "automargin": True},
    )
    note = "Each step on the device, from the end of the previous step's work to its own."
    return _Section("diff-chart-steps", title, note, figure)


def _cause_comparison(change: diff.RunDiff, before: Diagnosis, after: Diagnosis) -> _Section:
    lost = [m for m in change.metrics if m.name.startswith(diff.LOST_PREFIX)]
    if lost and all(m.comparison.before_mean is not None for m in lost):
        keys = [m.name.removeprefix(diff.LOST_PREFIX) for m in lost]
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
        **_LAYOUT,
        xaxis={"title": {"text": unit}},
        yaxis={"autorange": "reversed", "automargin": True},
    )
    return _Section("diff-chart-causes", "Lost time by cause: before vs after", note, figure)


def _cause_shares(d: Diagnosis) -> dict[str, float]:
    """Each idle cause's and exposed communication's share of the job's device time, in %."""
    span = max(sum(x.temporal.span_ns for x in d.devices), 1)
    shares = {c.value: 100.0 * sum(x.idle.lost_ns(c) for x in d.devices) / span for c in CAUSES}
    exposed = sum(x.overlap.exposed_ns for x in d.devices)
    shares[diff.EXPOSED_COMMUNICATION] = 100.0 * exposed / span
    return shares
