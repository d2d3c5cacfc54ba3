"""The report's memory sections, from the diagnosis's memory reports: allocated and reserved
memory over time stacked by category, who holds the peak, and where reserved memory goes at the
peak and at the end (allocated, cached, fragmented). Computes nothing."""

from __future__ import annotations

import plotly.graph_objects as go  # type: ignore[import-untyped]

from gpuscope.analyses.memory import MemoryReport
from gpuscope.analyses.memory_sites import CATEGORIES
from gpuscope.diagnosis import Diagnosis
from gpuscope.render.html.page import LAYOUT, Section, plot_text
from gpuscope.units import gib

GIB = float(1 << 30)
#: One colour per category (CATEGORIES order).
CATEGORY_COLOURS = dict(
    zip(
        CATEGORIES,
        (
            *("#1f77b4", "#ff7f0e", "#9467bd", "#d62728", "#bcbd22", "#17becf", "#e377c2"),
            *("#b0b0b0", "#8c564b"),
        ),
        strict=True,
    )
)
#: Reports drawn (one per device of each record); the JSON has them all.
DRAWN_REPORTS = 4


def memory_sections(d: Diagnosis, prefix: str) -> list[Section]:
    sections: list[Section] = []
    for n, report in enumerate(d.memory[:DRAWN_REPORTS]):
        key = f"{prefix}memory-{n}"
        label = f"device {report.device}" + (f" · {report.source}" if len(d.memory) > 1 else "")
        sections += [
            Section(
                f"{key}-timeline",
                f"Memory over time ({label})",
                _timeline_note(report),
                _timeline(report) if report.timeline else None,
            ),
            Section(
                f"{key}-sites",
                f"Who holds the peak ({label})",
                f"Peak {gib(report.peak_allocated_bytes)} in the {report.peak_phase}"
                f" ({report.peak_phase_source}); the user's line of each allocation, library"
                " frames skipped.",
                _sites(report) if report.sites else None,
            ),
            Section(
                f"{key}-fragmentation",
                f"Reserved memory ({label})",
                "Reserved = allocated + cached (the peak's need: harmless) + fragmented"
                " (reserved beyond it). " + report.at_end.note,
                _fragmentation(report),
            ),
        ]
    return sections


def _timeline_note(r: MemoryReport) -> str:
    if not r.timeline:
        return "The snapshot records no events over time: only its state at the dump."
    note = (
        f"Allocated memory by category (in the shares alive at the peak), reserved as a line;"
        f" the baseline {gib(r.baseline_bytes)} is {r.baseline_note}."
    )
    if r.frees_before_alloc:
        note += (
            f" {r.frees_before_alloc:,} frees precede their allocations: recording began mid-run."
        )
    return note


def _timeline(r: MemoryReport) -> go.Figure:
    timed = all(p.time_ns >= 0 for p in r.timeline)
    origin = r.timeline[0].time_ns if timed else 0
    x = [(p.time_ns - origin) / 1e6 if timed else p.event for p in r.timeline]
    figure = go.Figure()
    for i, category in enumerate(CATEGORIES):
        y = [p.by_category[i] / GIB for p in r.timeline]
        if any(y):
            figure.add_trace(
                go.Scatter(
                    x=x,
                    y=y,
                    name=category,
                    stackgroup="allocated",
                    line={"width": 0},
                    fillcolor=CATEGORY_COLOURS[category],
                )
            )
    figure.add_trace(
        go.Scatter(
            x=x,
            y=[p.reserved_bytes / GIB for p in r.timeline],
            name="reserved",
            line={"color": "#333333", "dash": "dot"},
        )
    )
    figure.update_layout(
        **LAYOUT,
        height=320,
        xaxis_title="ms since the first event" if timed else "event",
        yaxis_title="GiB",
    )
    return figure


def _sites(r: MemoryReport) -> go.Figure:
    sites = list(reversed(r.sites))
    figure = go.Figure(
        go.Bar(
            x=[s.bytes / GIB for s in sites],
            y=[plot_text(s.location, 60) for s in sites],
            orientation="h",
            marker={"color": [CATEGORY_COLOURS.get(s.category, "#b0b0b0") for s in sites]},
            text=[plot_text(f"{s.category} ({s.confidence})", 60) for s in sites],
            hovertext=[plot_text(" <- ".join(s.chain) or s.location, 200) for s in sites],
        )
    )
    figure.update_layout(**LAYOUT, height=60 + 28 * len(sites), xaxis_title="GiB")
    return figure


def _fragmentation(r: MemoryReport) -> go.Figure:
    moments = ["at the peak", "at the end"]
    allocated = [r.peak_allocated_bytes / GIB, r.end_allocated_bytes / GIB]
    cached = [r.at_peak.cached_bytes / GIB, r.at_end.cached_bytes / GIB]
    fragmented = [r.at_peak.fragmented_bytes / GIB, r.at_end.fragmented_bytes / GIB]
    figure = go.Figure()
    for name, values, colour in (
        ("allocated", allocated, "#1f77b4"),
        ("cached (harmless)", cached, "#98df8a"),
        ("fragmented", fragmented, "#d62728"),
    ):
        figure.add_trace(go.Bar(x=moments, y=values, name=name, marker={"color": colour}))
    figure.update_layout(**LAYOUT, barmode="stack", height=300, yaxis_title="GiB")
    return figure
