"""The HTML report: one self-contained file that opens offline, its charts drawn with plotly.

Contract: :func:`render` turns a :class:`~gpuscope.diagnosis.Diagnosis` into the text of one HTML
file, :func:`render_diff` turns two (before, after) into a side-by-side comparison. plotly.js
(once), the figure data, the styles and the scripts are inline: the file needs no network.

Size and speed: plotly.js is built with only its core and the bar and heatmap traces, what the
charts use (``vendor/README.md``): 1.2 MB instead of the full 4.8 MB, and quick to start. It and
the figure data are inlined gzip-compressed and base64-encoded, and unpacked by the browser
(``DecompressionStream``) after the page's text has shown: a report is well under 1.5 MB, and
the verdict and findings appear before any chart code is parsed. :func:`embedded_figures`
reads the figures back from a page. The charts are drawn one at a time, the one on the window
first, each once: the page sets their margins from its own measure of their labels and legends,
where plotly would otherwise lay each out twice; a chart that fails says so in its box and the
others still draw.

What it shows: the verdict and its cost first, then the inputs (three listed, the rest folded);
the findings with evidence, locations and fixes; a zoomable timeline (per device, a lane for its
idle time and one per stream, the busiest few when there are many and an "other streams" lane
for the rest; kernels coloured by kind, idle segments by cause, with the cause and code
location on hover); the busy share over time; per-step stacked bars of where the time went; a
ranks x steps heatmap of busy % for multi-rank jobs; a roofline of the busiest device.

Screens: the page fits a phone (390 px) as well as a desktop: tables scroll inside their own
box and fold beyond 20 rows, long names break, a chart grows by the rows its legend takes on a
narrow screen. Durations are written in the unit that reads (:func:`gpuscope.units.duration`),
backticked words in the diagnosis' text as code.

Nothing is measured here. The only arithmetic is layout: binning the diagnosis' busy and idle
intervals into time buckets and step windows, and, so that a large trace stays small and quick to
draw, merging kernels and idle gaps shorter than a timeline bucket into one bar per run of buckets.
Every idle gap at least one bucket long keeps its own bar, with its cause and location.

Safety: user-controlled text (kernel, frame and file names) is escaped for where it lands:
:func:`html.escape` in the page, :func:`plot_text` in plotly labels (plotly reads a few HTML tags
in them), and the figure JSON by :func:`script_json` (then base64: nothing in a kernel name can
end the script block that holds it).
"""

from gpuscope.analyses.drawn import HEATMAP_FROM_DEVICES
from gpuscope.render.html.charts import step_parts
from gpuscope.render.html.compare import render_diff
from gpuscope.render.html.page import (
    CAUSE_COLOURS,
    KIND_COLOURS,
    HtmlOptions,
    embedded_figures,
    plot_text,
    plotly_block,
    script_json,
)
from gpuscope.render.html.report import render

__all__ = [
    "CAUSE_COLOURS",
    "HEATMAP_FROM_DEVICES",
    "KIND_COLOURS",
    "HtmlOptions",
    "embedded_figures",
    "plot_text",
    "plotly_block",
    "render",
    "render_diff",
    "script_json",
    "step_parts",
]
