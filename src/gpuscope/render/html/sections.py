"""The page's text sections: the header, the verdict and its shares, the findings with their
evidence, locations and fixes, and the device and kernel tables (escaped with ``html.escape``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpuscope import __version__
from gpuscope.analyses.whatif import Prediction
from gpuscope.diagnosis import DeviceReport, Diagnosis
from gpuscope.diagnosis.findings import Finding, Verdict
from gpuscope.diagnosis.patterns import PATTERNS, legend
from gpuscope.names import (
    plural,
    short_kernel_names,
    short_location,
)
from gpuscope.render import predicted
from gpuscope.render.html.page import (
    device_label,
    escape,
    name_cell,
)
from gpuscope.units import duration, gib, usd_cents


def header_html(d: Diagnosis, title: str) -> str:
    """The title and what was read; the inputs come after the verdict (:func:`inputs_html`)."""
    return (
        f"<h1>{escape(title)}</h1><p class='dim'>gpuscope {escape(__version__)} · "
        f"<span class='mono'>{escape(d.source)}</span></p>"
    )


#: Inputs listed before the rest fold away: a job of many ranks would fill a phone's first
#: screens with paths.
SHOWN_INPUTS = 3


def inputs_html(d: Diagnosis) -> str:
    """The inputs read (the first :data:`SHOWN_INPUTS`, the rest a click away) and warnings."""
    items = [
        f"<li><span class='mono'>{escape(i.path)}</span> <span class='dim'>({escape(i.format)}, "
        f"{i.events:,} events, {plural(i.steps, 'step')}{_rank(i.rank)})</span></li>"
        for i in d.inputs
    ]
    listed = f"<ul class='dim inputs'>{''.join(items[:SHOWN_INPUTS])}</ul>"
    if len(items) > SHOWN_INPUTS:
        rest = len(items) - SHOWN_INPUTS
        listed += (
            f"<details class='inputs'><summary class='dim'>and {plural(rest, 'more input')}"
            f"</summary><ul class='dim inputs'>{''.join(items[SHOWN_INPUTS:])}</ul></details>"
        )
    warnings = "".join(f"<p class='warning'>warning: {escape(w)}</p>" for w in d.warnings)
    return f"{listed}{warnings}"


def _rank(rank: int | None) -> str:
    return "" if rank is None else f", rank {rank}"


def verdict_html(v: Verdict) -> str:
    figures = [
        ("bound", v.bound),
        # Counters alone (ncu) have no timeline: idle time is not measured, not "nan%".
        ("GPU idle", f"{v.idle_pct:.1f}%" if math.isfinite(v.idle_pct) else "n/a (no timeline)"),
        (predicted.HEADLINE_LABEL, usd_cents(v.wasted_usd_per_gpu_hour)),
        ("price per GPU-hour", usd_cents(v.gpu_hour_usd)),
        ("GPUs", str(v.world_size)),
    ]
    for key, label in (("mfu_pct", "MFU"), ("mbu_pct", "MBU")):
        value = v.figures.get(key)
        figures.append((label, "n/a" if value is None else f"{value:.1f}%"))
    cells = "".join(f"<div class='figure'>{escape(k)}<b>{escape(x)}</b></div>" for k, x in figures)
    return (
        f"<div class='verdict bound-{escape(v.bound)}' id='verdict'>{code_spans(v.summary)}</div>"
        f"<div class='figures'>{cells}</div>{_shares(v.shares_pct)}"
        f"<p class='note'>Price: {escape(v.price_source)}.</p>"
    )


_BOUND_COLOURS = {
    "host": "#d62728",
    "communication": "#9467bd",
    "memory": "#bcbd22",
    "compute": "#2ca02c",
    "transfer": "#17becf",
    "latency": "#ff7f0e",
    "device": "#7f7f7f",
    "input": "#8c564b",
}


def _shares(all_shares: dict[str, float]) -> str:
    # A share the input cannot give (NaN) is left out, never drawn or printed as "nan%".
    shares = {k: x for k, x in all_shares.items() if math.isfinite(x)}
    spans = "".join(
        f"<span style='width:{max(x, 0.0):.2f}%;background:{_BOUND_COLOURS.get(k, '#999')}' "
        f"title='{escape(k)} {x:.1f}%'></span>"
        for k, x in shares.items()
    )
    legend = " · ".join(f"{escape(k)} {x:.1f}%" for k, x in shares.items())
    # Samples split the time only into busy and idle (see gpuscope.diagnosis.sampled).
    whole = "sampled GPU time" if "busy" in shares else "device time by bound"
    return f"<div class='shares'>{spans}</div><p class='note'>{whole}: {legend}</p>"


def findings_html(
    found: Sequence[Finding],
    all_fixes_usd_per_gpu_hour: float | None = None,  # the verdict's wasted_usd_per_gpu_hour
    all_fixes: Prediction | None = None,
    links: dict[str, str] | None = None,
) -> str:
    if not found:
        return (
            "<section><h2>Findings</h2><p>No finding above the reporting threshold.</p></section>"
        )
    items = "".join(_finding(i, f, links or {}) for i, f in enumerate(found, 1))
    together = ""
    if all_fixes is not None:
        words = predicted.headline(all_fixes, all_fixes_usd_per_gpu_hour, "All fixes together")
        together = (
            f"<p class='prediction all-fixes'><b>{escape(words)}</b>"
            " (replayed as one edit set: the findings' savings overlap and are not added up)</p>"
        )
    tags = f"<p class='note'>{escape(legend(f.pattern for f in found))}</p>"
    return (
        f"<section id='findings'><h2>{predicted.findings_title(found)}</h2>{together}{items}{tags}"
        "</section>"
    )


def _finding(i: int, f: Finding, links: dict[str, str] | None = None) -> str:
    figures = [f"{f.share_pct:.1f}% of device time", f"{duration(f.lost_ns)} lost"]
    if f.memory_bytes is not None:  # a memory finding: bytes, not time
        figures = [f"{gib(f.memory_bytes)} ({f.share_pct:.0f}% of the memory peak)"]
        if f.predicted_peak_bytes is not None:
            figures.append(f"peak after the fix ~{gib(f.predicted_peak_bytes)}")
    if f.lost_ns_per_step is not None:
        figures.append(f"{duration(f.lost_ns_per_step)} per step")
    money = predicted.money(f)
    if money is not None:
        figures.append(money)
    evidence = "".join(f"<li>{code_spans(x)}</li>" for x in f.evidence)
    if f.prediction is not None:
        headline = escape(predicted.headline(f.prediction, f.cost_usd_per_gpu_hour))
        evidence = (
            f"<li class='prediction'><b>{headline}</b>;"
            f" {code_spans(predicted.details(f.prediction))}</li>{evidence}"
        )
    rows = "".join(
        f"<tr><td class='mono kernel'>{_linked(loc.location, links or {})}</td>"
        f"<td class='num'>{duration(loc.lost_ns)}</td><td class='num'>{loc.gaps:,}</td></tr>"
        for loc in f.locations
    )
    where = (
        "<table><tr><th>location</th><th class='num'>lost</th><th class='num'>gaps</th></tr>"
        f"{rows}</table>"
        if rows
        else ""
    )
    return (
        f"<article class='finding' data-cause='{escape(f.cause)}'>"
        f"<h3>{i}. {code_spans(f.title)} <span class='dim mono'>{escape(f.cause)} · "
        f"<span title='{escape(PATTERNS.get(f.pattern, ''))}'>[{escape(f.pattern)}]</span></span>"
        f"</h3><p>{escape(' · '.join(figures))}</p><ul>{evidence}</ul>{where}"
        f"<p class='fix'><b>Fix:</b> {code_spans(f.fix)}</p></article>"
    )


def _linked(location: str, links: dict[str, str]) -> str:
    """A finding's location, linked to its row of the module or operator view when it has one."""
    anchor = links.get(location)
    name = name_cell(location, short_location(location, 100))  # the whole location on hover
    if anchor is None:
        return name
    return f"<a href='{escape(anchor)}'>{name}</a>"


def code_spans(text: str) -> str:
    """Escaped text whose `backticked` parts are set as code."""
    parts = text.split("`")
    return "".join(f"<code>{escape(p)}</code>" if i % 2 else escape(p) for i, p in enumerate(parts))


def devices_html(devices: Sequence[DeviceReport]) -> str:
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
        escape(device_label(d, True)),
        escape(d.info.name or "unknown"),
        duration(t.span_ns),
        f"{d.busy_pct:.1f}%",
        *(f"{t.pct(x):.1f}%" for x in (t.idle_ns, t.compute_ns, t.communication_ns, t.memory_ns)),
        "n/a" if d.bounds.mfu_pct is None else f"{d.bounds.mfu_pct:.1f}%",
    ]
    tds = "".join(
        f"<td>{c}</td>" if i < 2 else f"<td class='num'>{c}</td>" for i, c in enumerate(cells)
    )
    return f"<tr>{tds}</tr>"


def _extremes(devices: Sequence[DeviceReport]) -> list[DeviceReport]:
    by_busy = sorted(devices, key=lambda d: d.busy_pct)
    return [by_busy[0], by_busy[-1]]


def _kernel_table(d: DeviceReport, multi: bool) -> str:
    short = short_kernel_names(k.name for k in d.kernels)
    rows = "".join(
        f"<tr><td class='mono kernel'>{name_cell(k.name, short[k.name])}</td>"
        f"<td>{escape(k.work_class.name.lower())}</td>"
        f"<td class='num'>{k.count:,}</td><td class='num'>{duration(k.total_ns)}</td>"
        f"<td class='num'>{k.share_of_busy_pct:.1f}%</td></tr>"
        for k in d.kernels
    )
    return (
        f"<h3>Top kernels · {escape(device_label(d, multi))}</h3><table><tr><th>kernel</th>"
        "<th>class</th><th class='num'>count</th><th class='num'>total</th>"
        f"<th class='num'>share</th></tr>{rows}</table>"
    )
