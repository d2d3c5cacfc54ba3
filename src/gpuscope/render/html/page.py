"""The page: layout options, escaping, colours, and assembling sections into one HTML file.

Contract: :func:`assemble_page` puts a body and its sections' figures into
``report_template.html``; the figure JSON is made safe by :func:`script_json`, gzip-compressed and
base64-encoded (the browser unpacks it), and plotly.js is inlined once (:func:`plotly_block`).
:func:`embedded_figures` reads the figures back. See :mod:`gpuscope.render.html` for what the
report shows.
"""

from __future__ import annotations

import base64
import gzip
import html
import json
import re
from collections.abc import Sequence
from functools import cache
from importlib import resources
from typing import Any

import msgspec
import plotly.graph_objects as go  # type: ignore[import-untyped]
import plotly.io as pio  # type: ignore[import-untyped]

from gpuscope import causes
from gpuscope.analyses.attribution import CAUSES
from gpuscope.analyses.bounds import KernelKind
from gpuscope.diagnosis import DeviceReport


class HtmlOptions(msgspec.Struct, frozen=True):
    """Presentation limits. The resolution of the charts (timeline buckets and bars, utilisation
    buckets, roofline points) is the diagnosis' own: :mod:`gpuscope.analyses.drawn`."""

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


def escape(text: object) -> str:
    return html.escape(str(text), quote=True)


def name_cell(text: str, shown: str | None = None) -> str:
    """A kernel or frame name for a table cell: ``shown`` (a short form), clipped to a few lines,
    the whole name on hover."""
    return (
        f"<div class='clip' title='{escape(text)}'>{escape(text if shown is None else shown)}</div>"
    )


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
KINDS = [k.name.lower() for k in KernelKind]
CAUSE_NAMES = list(CAUSES)
MERGED_OPACITY = 0.5
#: Every chart's legend sits in rows under its plot, below the axis title: above it, the mode bar
#: (zoom, pan, download), which shows in the top right corner on hover, covered its last entries.
LAYOUT = {
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


class Section(msgspec.Struct, frozen=True):
    """One heading of the page: a chart, or a note saying why there is none."""

    id: str
    title: str
    note: str  # plain text
    figure: go.Figure | None
    after: str = ""  # HTML under the chart (the timeline's full list of lanes)


def assemble_page(title: str, body: str, sections: Sequence[Section]) -> str:
    figures = ",".join(
        f'{{"id":{json.dumps(s.id)},"figure":{pio.to_json(s.figure, validate=False)}}}'
        for s in sections
        if s.figure is not None
    )
    parts = {
        "title": escape(title),
        "body": body,
        "figures": packed(script_json(f"[{figures}]").encode()),
        "plotly": plotly_block(),
    }
    # One pass, so that nothing substituted is ever searched for another marker.
    return re.sub(r"<!--gpuscope:(\w+)-->", lambda m: parts[m.group(1)], _template())


@cache
def _template() -> str:
    return resources.files("gpuscope.render").joinpath("report_template.html").read_text("utf-8")


def packed(data: bytes) -> str:
    """gzip then base64: what the page's script unpacks (``mtime=0``: the same report twice is
    the same file)."""
    return base64.b64encode(gzip.compress(data, compresslevel=6, mtime=0)).decode("ascii")


@cache
def plotly_block() -> str:
    """The vendored plotly.js bundle (core, bar, heatmap) as the page inlines it (base64 of its
    gzip file)."""
    packed = resources.files("gpuscope.render").joinpath("vendor/plotly-gpuscope.min.js.gz")
    return base64.b64encode(packed.read_bytes()).decode("ascii")


def embedded_figures(page: str) -> list[dict[str, Any]]:
    """The figures a report embeds (``[{"id": ..., "figure": {...}}]``), unpacked."""
    match = re.search(r'<script [^>]*id="gpuscope-figures">([^<]*)</script>', page)
    if match is None:
        raise ValueError("not a gpuscope report: no figure data")
    figures: list[dict[str, Any]] = json.loads(gzip.decompress(base64.b64decode(match[1])))
    return figures


def section_html(s: Section) -> str:
    chart = f'<div class="chart" id="{s.id}"></div>' if s.figure is not None else ""
    note = f'<p class="note">{escape(s.note)}</p>' if s.note else ""
    return f"<section><h2>{escape(s.title)}</h2>{note}{chart}{s.after}</section>"


# --- devices and time origin ----------------------------------------------------------------
def device_label(d: DeviceReport, multi: bool) -> str:
    gpu = f"GPU {d.device}"
    return f"rank {d.rank} · {gpu}" if multi and d.rank is not None else gpu


def is_multi(devices: Sequence[DeviceReport]) -> bool:
    return len(devices) > 1
