"""The diagnosis as Markdown (``gpuscope diagnose TRACE -o report.md``): the verdict, its
figures, and each finding with its evidence, locations and fix, for a pull request or a wiki.

Contract: :func:`render` lays out a :class:`~gpuscope.diagnosis.Diagnosis` and computes nothing.
Text from the trace (kernel and function names, paths, locations) is escaped, so that a name
can neither format the page nor carry HTML into a viewer that renders it; the fixes are
gpuscope's own words and keep their code spans.
"""

from __future__ import annotations

import re

from gpuscope.diagnosis import Diagnosis
from gpuscope.diagnosis.findings import Finding
from gpuscope.render import predicted
from gpuscope.units import ms, pct, usd_cents

#: What Markdown would read as formatting inside a line (every line of trace text here starts
#: with gpuscope's own words, so the line-start markers ``#``, ``-``, ``1.`` need no escape).
_SPECIAL = re.compile(r"([\\`*_{}\[\]|~])")


def text(value: str) -> str:
    """Trace text made literal: HTML special characters as entities, Markdown's escaped, one
    line."""
    value = value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _SPECIAL.sub(r"\\\1", " ".join(value.split()))


def render(d: Diagnosis) -> str:
    v = d.verdict
    lines = [
        f"# gpuscope: {text(d.source)}",
        "",
        f"**{text(v.summary)}**",
        "",
        "| | |",
        "|---|---|",
        f"| bound | {text(v.bound)} |",
        f"| GPU idle | {pct(v.idle_pct)} |",
        f"| {predicted.HEADLINE_LABEL} | {usd_cents(v.wasted_usd_per_gpu_hour)} |",
        f"| price per GPU-hour | {usd_cents(v.gpu_hour_usd)} ({text(v.price_source)}) |",
        f"| GPUs | {v.world_size} |",
    ]
    if d.all_fixes is not None:
        lines += [
            "",
            text(predicted.headline(d.all_fixes, v.wasted_usd_per_gpu_hour, "All fixes together")),
        ]
    lines += ["", f"## {predicted.findings_title(d.findings)}", ""]
    if not d.findings:
        lines.append("No finding: nothing wastes a share of the device time worth reporting.")
    for i, f in enumerate(d.findings, 1):
        lines += _finding(i, f)
    if d.warnings:
        lines += ["", "## Warnings", "", *(f"- {text(w)}" for w in d.warnings)]
    return "\n".join(lines) + "\n"


def _finding(i: int, f: Finding) -> list[str]:
    figures = [f"{f.share_pct:.1f}% of device time"]
    if f.lost_ns_per_step is not None:
        figures.append(f"{ms(f.lost_ns_per_step)} per step")
    money = predicted.money(f)
    if money is not None:
        figures.append(money)
    lines = [
        f"### {i}. {text(f.title)}",
        "",
        f"`{f.cause}` \\[{f.pattern}\\]: " + text(" · ".join(figures)),
        "",
    ]
    if f.prediction is not None:
        lines += [text(predicted.headline(f.prediction, f.cost_usd_per_gpu_hour)), ""]
    lines += [f"- {text(e)}" for e in f.evidence]
    lines += [
        f"- at {text(loc.location)}: {ms(loc.lost_ns)} in {loc.gaps:,} gap"
        + ("" if loc.gaps == 1 else "s")
        for loc in f.locations
    ]
    return [*lines, "", f"**Fix:** {f.fix}", ""]
