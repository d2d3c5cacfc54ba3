"""The memory part of the terminal report: peak, who holds it, what is reserved but free, and an
out-of-memory's verdict, from the diagnosis's :class:`~gpuscope.analyses.memory.MemoryReport`s.
Computes nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuscope.analyses.memory import MemoryReport
from gpuscope.render.layout import Table, Text
from gpuscope.units import gib

if TYPE_CHECKING:
    from gpuscope.render.plain import Printer


def render_memory(reports: list[MemoryReport], console: Printer) -> None:
    for report in reports:
        console.print(_summary(report))
        if report.sites:
            console.print(_sites(report))


def _summary(r: MemoryReport) -> Text:
    text = Text(f"\nMemory · device {r.device} · {r.source}\n", style="bold")
    text.append(
        f"peak {gib(r.peak_allocated_bytes)} allocated, {gib(r.reserved_at_peak_bytes)}"
        f" reserved at it (most reserved {gib(r.peak_reserved_bytes)}),"
        f" phase: {r.peak_phase} ({r.peak_phase_source})\n"
    )
    text.append(f"baseline {gib(r.baseline_bytes)}: {r.baseline_note}\n", style="dim")
    if r.frees_before_alloc:
        text.append(
            f"{r.frees_before_alloc:,} frees precede their allocations"
            f" ({gib(r.frees_before_alloc_bytes)}): recording began mid-run\n",
            style="yellow",
        )
    shown = ", ".join(f"{k} {gib(v)}" for k, v in r.categories.items() if v)
    text.append(f"at the peak: {shown}\n")
    for label, frag in (("at the peak", r.at_peak), ("at the end", r.at_end)):
        pieces = (
            ""
            if frag.free_blocks is None
            else f", {frag.free_blocks:,} free blocks, largest {gib(frag.largest_free_bytes)}"
        )
        text.append(
            f"reserved but free {label}: {gib(frag.free_bytes)} = cached {gib(frag.cached_bytes)}"
            f" (harmless) + fragmented {gib(frag.fragmented_bytes)}{pieces}\n",
            style="dim",
        )
    if r.oom is not None:
        asked = "" if r.oom.request_bytes is None else f"asked {gib(r.oom.request_bytes)}; "
        text.append(f"out of memory: {asked}{r.oom.summary}\n", style="bold red")
    for note in r.settings:
        text.append(f"allocator: {note}\n", style="yellow")
    return text


def _sites(r: MemoryReport) -> Table:
    table = Table(title="Who holds the peak", title_justify="left")
    for column in ("site", "bytes", "blocks", "category", "sure", "chain"):
        table.add_column(column, justify="right" if column in ("bytes", "blocks") else "left")
    for s in r.sites:
        table.add_row(
            s.location,
            gib(s.bytes),
            f"{s.blocks:,}",
            s.category,
            s.confidence,
            " <- ".join(s.chain[1:]) if len(s.chain) > 1 else "",
        )
    return table
