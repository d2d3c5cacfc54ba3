"""The terminal report, drawn with rich's objects (their subset in :mod:`gpuscope.render.layout`).

Contract: :func:`render` writes a :class:`~gpuscope.diagnosis.Diagnosis` to a rich ``Console``
(or to a :class:`~gpuscope.render.plain.PlainConsole`, which lays the same objects out as plain
text) and computes nothing: every figure comes from the diagnosis.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from gpuscope import causes
from gpuscope.analyses.attribution import CAUSES
from gpuscope.analyses.bounds import Bound
from gpuscope.analyses.drawn import STATE_COLUMNS
from gpuscope.analyses.whatif import Prediction
from gpuscope.diagnosis import DeviceReport, Diagnosis
from gpuscope.diagnosis.findings import Finding, Verdict
from gpuscope.diagnosis.patterns import legend
from gpuscope.names import plural, short_kernel_names, short_location
from gpuscope.render import predicted, sanitised
from gpuscope.render.fit import number_column
from gpuscope.render.layout import Group, Panel, Table, Text
from gpuscope.render.memory_text import render_memory
from gpuscope.render.ranks import render_ranks
from gpuscope.render.views import render_views
from gpuscope.units import gib, ms, pct, seconds

if TYPE_CHECKING:  # measured inputs' types: their modules load only for jobs that have them
    from gpuscope.analyses.counters import CounterSummary
    from gpuscope.analyses.samples import Distribution, GpuUtilisation
    from gpuscope.render.plain import Printer

_DETAILED_DEVICES = 2
_SPLIT_COLOURS = {
    "compute": "green",
    "communication": "magenta",
    "memcpy": "cyan",
    "memset": "blue",
    "idle": "red",
}


def render(diagnosis: Diagnosis, console: Printer, *, all_devices: bool = False) -> None:
    diagnosis = sanitised(diagnosis)  # names from the trace: no escape sequences, bounded
    for warning in diagnosis.warnings:
        console.print(Text(f"warning: {warning}", style="yellow"))
    console.print(_verdict(diagnosis.verdict))
    if diagnosis.findings:
        console.print(_findings(diagnosis.findings))
    if diagnosis.all_fixes is not None:
        console.print(_all_fixes(diagnosis.all_fixes, diagnosis.verdict.wasted_usd_per_gpu_hour))
    render_views(diagnosis, console)
    devices = diagnosis.devices
    if len(devices) > 1:
        console.print(_device_table(devices))
    if devices:
        console.print(idle_timeline(devices, console.width))
    if diagnosis.ranks is not None:
        render_ranks(diagnosis.ranks, console)
    detailed = devices if all_devices or len(devices) <= _DETAILED_DEVICES else _extremes(devices)
    if len(detailed) < len(devices):
        console.print(
            Text(
                f"Details for the least and most busy of {len(devices)} devices; "
                "--all-devices shows every one.",
                style="dim",
            )
        )
    for device in detailed:
        console.print(_device_panel(device))
    if diagnosis.memory:
        render_memory(diagnosis.memory, console)
    if diagnosis.sampled:
        console.print(_samples_table(diagnosis.sampled))
    for summary in diagnosis.counters:
        console.print(_counters_table(summary, console.width))


_BOUND_STYLE = {
    "host": "red",
    "memory": "yellow",
    "compute": "green",
    "communication": "magenta",
    "transfer": "cyan",
    "latency": "red",
}


def _verdict(v: Verdict) -> Text:
    text = Text()
    text.append(v.summary, style=f"bold {_BOUND_STYLE.get(v.bound, 'white')}")
    if v.bound_evidence:
        text.append(f"\n{v.bound_evidence}", style="dim")
    if v.gpu_hour_usd is None:
        text.append(f"\n({v.price_source})", style="dim")
    else:
        text.append(f"\n(at ${v.gpu_hour_usd:.2f}/GPU-hour: {v.price_source})", style="dim")
    return text


def _all_fixes(p: Prediction, saving_usd_per_gpu_hour: float | None) -> Text:
    text = Text(
        predicted.headline(p, saving_usd_per_gpu_hour, "All fixes together"), style="bold green"
    )
    text.append(
        "\n(replayed as one edit set: the findings' savings overlap and are not added up)",
        style="dim",
    )
    return text


def _findings(found: list[Finding]) -> Text:
    text = Text(f"\n{predicted.findings_title(found)}\n", style="bold")
    for i, f in enumerate(found, 1):
        text.append(f"{i}. {f.cause}", style="bold")
        if f.memory_bytes is not None:
            text.append(f"  {gib(f.memory_bytes)} ({f.share_pct:.0f}% of the peak)")
            if f.predicted_peak_bytes is not None:
                text.append(f" · peak after the fix ~{gib(f.predicted_peak_bytes)}")
        else:
            text.append(f"  {f.share_pct:.1f}% of {_time_of(f)}")
        if f.lost_ns_per_step is not None:
            text.append(f" · {ms(f.lost_ns_per_step)} per step")
        money = predicted.money(f)
        if money is not None:
            text.append(f" · {money}")
        text.append(f"  [{f.pattern}]\n", style="dim")
        text.append(f"   {f.title}; {'; '.join(f.evidence)}\n")
        if f.prediction is not None:
            text.append(
                f"   {predicted.headline(f.prediction, f.cost_usd_per_gpu_hour)}\n", style="green"
            )
            text.append(f"   {predicted.details(f.prediction)}\n", style="dim")
        for loc in f.locations[:3]:
            text.append("   at ", style="dim")
            text.append(short_location(loc.location), style="cyan")
            gaps = "1 gap" if loc.gaps == 1 else f"{loc.gaps:,} gaps"
            text.append(f"  {ms(loc.lost_ns)} in {gaps}\n", style="dim")
        text.append("   fix: ", style="green")
        text.append(f"{f.fix}\n")
    if found:
        text.append(legend(f.pattern for f in found) + "\n", style="dim")
    return text


def _extremes(devices: list[DeviceReport]) -> list[DeviceReport]:
    by_busy = sorted(devices, key=lambda d: d.busy_pct)
    return [by_busy[0], by_busy[-1]]


def _label(d: DeviceReport) -> str:
    rank = f"rank {d.rank}" if d.rank is not None else "rank ?"
    return f"{rank} · device {d.device}"


def _device_table(devices: list[DeviceReport]) -> Table:
    table = Table(title="Devices", title_justify="left")
    for column in (
        "rank",
        "device",
        "span",
        "busy",
        "idle",
        "compute",
        "comm",
        "memory",
        "overlap",
    ):
        table.add_column(column, justify="right" if column not in ("device",) else "left")
    for d in devices:
        t = d.temporal
        table.add_row(
            "?" if d.rank is None else str(d.rank),
            f"{d.device} {d.info.name or 'unknown'}",
            ms(t.span_ns),
            pct(d.busy_pct),
            pct(t.pct(t.idle_ns)),
            pct(t.pct(t.compute_ns)),
            pct(t.pct(t.communication_ns)),
            pct(t.pct(t.memory_ns)),
            pct(d.overlap.overlap_pct),
        )
    return table


def _device_panel(d: DeviceReport) -> Panel:
    parts: list[Table | Text] = [_header(d), _split(d), _bounds(d), _idle_causes(d)]
    if d.counters is not None and d.counters.measured_ns:
        parts.insert(3, _measured_bounds(d))
    if d.steps:
        parts.append(_steps(d))
    parts.append(_kernels(d))
    parts.append(_streams(d))
    # A Text title: a str would be read as markup, emoji codes too (":name:" in a device name).
    return Panel(Group(*parts), title=Text(_label(d)), title_align="left")


def _header(d: DeviceReport) -> Text:
    t = d.temporal
    text = Text()
    text.append(d.info.name or "unnamed device", style="bold")
    if d.facts is not None:
        f = d.facts
        peaks = []
        if f.bf16_flops_per_s:
            peaks.append(f"{f.bf16_flops_per_s / 1e12:,.0f} TFLOP/s {f.sixteen_bit}")
        if f.memory_bandwidth_bytes_per_s:
            peaks.append(f"{f.memory_bandwidth_bytes_per_s / 1e9:,.0f} GB/s")
        if f.usd_per_gpu_hour:
            peaks.append(f"${f.usd_per_gpu_hour:.2f}/GPU-hour")
        text.append(f"  ({f.display_name}: {', '.join(peaks)})", style="dim")
    else:
        text.append("  (not in the GPU facts table: peak figures unknown)", style="dim")
    steps = "no steps found"
    if d.steps:  # a step finder other than profiler steps says which (analyses.timeline)
        found = d.steps[0].source
        noun = "step" if len(d.steps) == 1 else "steps"
        steps = f"{len(d.steps)} profiler {noun}" if found == "profiler steps" else ""
        steps = steps or f"{len(d.steps)} {noun} from a {found}"
    text.append(f"\nwindow {ms(t.span_ns)} ({steps}); ")
    text.append(f"busy {pct(d.busy_pct)}", style="green")
    if d.peer_wait_ns:
        text.append(f" (not counting {pct(t.pct(d.peer_wait_ns))} waiting for a late peer)")
    text.append(", ")
    text.append(f"idle {pct(t.pct(t.idle_ns))}", style="red")
    if d.overlap.communication_ns:
        text.append(
            f"; {pct(d.overlap.overlap_pct)} of communication overlapped by compute"
            f" ({ms(d.overlap.exposed_ns)} exposed)"
        )
    return text


def _split(d: DeviceReport) -> Text:
    t = d.temporal
    parts = {
        "compute": t.exclusive_compute_ns,
        "communication": t.exclusive_communication_ns,
        "memcpy": t.exclusive_memcpy_ns,
        "memset": t.exclusive_memset_ns,
        "idle": t.idle_ns,
    }
    width = 60
    bar = Text()
    legend = Text()
    for name, value in parts.items():
        share = value / t.span_ns if t.span_ns else 0.0
        cells = round(share * width)
        bar.append("█" * cells, style=_SPLIT_COLOURS[name])
        legend.append(f"{name} {100 * share:.1f}%  ", style=_SPLIT_COLOURS[name])
    return Text.assemble("\n", bar, "\n", legend, "\n")


def _bounds(d: DeviceReport) -> Text:
    b = d.bounds
    t = b.time_ns_by_bound
    text = Text("busy time is ")
    text.append(f"compute-bound {ms(t[Bound.COMPUTE])}", style="green")
    text.append(", ")
    text.append(f"memory-bound {ms(t[Bound.MEMORY])}", style="yellow")
    text.append(f", latency-bound (tiny kernels) {ms(t[Bound.LATENCY])}")
    if t.get(Bound.UNCLASSIFIED):
        text.append(f", unclassified {ms(t[Bound.UNCLASSIFIED])}")
    if t.get(Bound.TRANSFER):
        text.append(f", copies over PCIe/NVLink {ms(t[Bound.TRANSFER])}")
    if b.gemm_ns:
        text.append(f"; {100 * b.fp32_gemm_ns / b.gemm_ns:.0f}% of GEMM time not on tensor cores")
    if b.mfu_pct is not None:
        text.append(f"\nMFU {b.mfu_pct:.1f}%, MBU {pct(b.mbu_pct)}")
        if b.achieved_flops_per_s:
            text.append(
                f" (while estimable kernels ran: {b.achieved_flops_per_s / 1e12:,.1f} TFLOP/s, "
                f"{(b.achieved_bytes_per_s or 0) / 1e9:,.0f} GB/s)"
            )
    else:
        text.append(f"\nMFU/MBU not estimable: {b.not_estimable_reason}", style="dim")
    return text


def _idle_causes(d: DeviceReport) -> Table:
    table = Table(title="Why the GPU was idle", title_justify="left")
    table.add_column("cause")
    table.add_column("lost", justify="right")
    table.add_column("share", justify="right")
    table.add_column("gaps", justify="right")
    table.add_column("top location")
    for c in d.idle.causes:
        top = short_location(c.locations[0].location, 60) if c.locations else "-"
        table.add_row(c.cause, ms(c.lost_ns), pct(c.share_pct), f"{c.gaps:,}", Text(top))
    return table


def _steps(d: DeviceReport) -> Table:
    table = Table(title="Steps", title_justify="left")
    table.add_column("step")
    table.add_column("duration", justify="right")
    table.add_column("GPU busy", justify="right")
    steps = list(d.steps)
    if len(steps) > _MAX_STEP_ROWS:
        # Thousands of steps (a long capture) made a table of thousands of rows, and its layout
        # took more memory than the analysis: the first ones and the slowest of the rest show.
        first = _MAX_STEP_ROWS // 2
        slowest = sorted(steps[first:], key=lambda s: s.dur_ns)[-(_MAX_STEP_ROWS - first) :]
        shown = set(map(id, steps[:first] + slowest))
        rest = [s for s in steps if id(s) not in shown]
        steps = [s for s in steps if id(s) in shown]
    else:
        rest = []
    for s in steps:
        table.add_row(s.name, ms(s.dur_ns), pct(s.busy_pct))
    if rest:
        middle = sorted(s.dur_ns for s in rest)[len(rest) // 2]
        table.add_row(f"{len(rest):,} more (median)", ms(middle), "")
    return table


#: The most steps listed one per row (the first half, then the slowest of the rest).
_MAX_STEP_ROWS = 20


def _kernels(d: DeviceReport) -> Table:
    table = Table(title="Top kernels by time", title_justify="left")
    # The figures keep their width and the kernel names give way, cut short (80 columns when
    # piped): rich narrows only the columns it may wrap.
    table.add_column("kernel", min_width=16, max_width=60)
    for column in ("class", "count", "total", "share"):
        table.add_column(column, justify="left" if column == "class" else "right", no_wrap=True)
    short = short_kernel_names(k.name for k in d.kernels)
    for k in d.kernels:
        table.add_row(
            Text(short[k.name], overflow="fold"),  # wraps: the end of a name tells kernels apart
            k.work_class.name.lower(),
            f"{k.count:,}",
            ms(k.total_ns),
            pct(k.share_of_busy_pct),
        )
    return table


def _streams(d: DeviceReport) -> Table:
    table = Table(title="Idle time per stream", title_justify="left")
    for column in ("stream", "idle", "host wait", "kernel wait", "other"):
        table.add_column(column, justify="right")
    for s in d.streams:
        table.add_row(
            str(s.stream),
            ms(s.idle_ns),
            ms(s.host_wait_ns),
            ms(s.kernel_wait_ns),
            ms(s.other_ns),
        )
    return table


def _measured_bounds(d: DeviceReport) -> Text:
    m = d.counters
    assert m is not None
    if m.source != "ncu":
        lines = [
            f"bounds measured by hardware counters ({m.source}) for {ms(m.measured_ns)} of"
            f" {ms(m.kernel_ns)} kernel time ({pct(m.measured_share_pct)}); the rest estimated",
            *m.evidence,
        ]
        return Text("\n".join(lines), style="dim")
    return Text(
        f"bounds measured by Nsight Compute for {ms(m.measured_ns)} of {ms(m.kernel_ns)}"
        f" kernel time ({pct(m.measured_share_pct)}; ncu kernels matched:"
        f" {len(m.matched_names)}); the rest estimated",
        style="dim",
    )


def _dist(d: Distribution | None) -> str:
    return "n/a" if d is None else f"{d.mean:.0f}%"


def _time_of(f: Finding) -> str:
    """What a finding's share is of: device time, sampled GPU time, or profiled kernel time."""
    source: str = getattr(f, "measured_from", "timeline")  # sampled and ncu findings say
    if source == "timeline":
        return "device time"
    return "profiled kernel time" if source == "ncu" else "sampled GPU time"


def _samples_table(gpus: list[GpuUtilisation]) -> Table:
    periods = sorted({g.period_ns for g in gpus if g.period_ns})
    every = f", a sample every {seconds(periods[0], 1)}" if len(periods) == 1 else ""
    table = Table(
        title=f"Sampled utilisation ({plural(len(gpus), 'GPU')}{every})",
        title_justify="left",
    )
    columns = ["GPU", "samples", "util", "p50", "p90", "p99"]
    sm = any(g.sm_active for g in gpus)
    dram = any(g.dram_active for g in gpus)
    # SM and DRAM activity share a column ("12%/3%"), two-word headings take two lines: at 80
    # columns nothing is cut, and a figure folds onto a second line at worst.
    active = "/".join(["SM"] * sm + ["DRAM"] * dram)
    columns += [f"{active}\nactive"] * (sm or dram) + ["memory\npeak", "idle", "gaps"]
    table.add_column(columns[0], overflow="fold")
    for column in columns[1:]:
        number_column(table, column)
    for g in gpus:
        table.add_row(*_samples_row(g, sm, dram))
    return table


def _samples_row(g: GpuUtilisation, sm: bool, dram: bool) -> list[str | Text]:
    u = g.utilization
    row: list[str | Text] = [Text(f"{g.gpu} {g.name or ''}".strip()), f"{g.samples:,}"]
    row += [_dist(u)] + ["n/a" if u is None else f"{v:.0f}%" for v in _ranks(u)]
    if sm or dram:
        row.append("/".join([_dist(g.sm_active)] * sm + [_dist(g.dram_active)] * dram))
    row += [
        _memory(g),
        f"{len(g.idle)}: {seconds(g.idle_ns)}",
        f"{len(g.gaps)}: {seconds(g.gap_ns)}",
    ]
    return row


def _ranks(d: Distribution | None) -> list[float | None]:
    return [None, None, None] if d is None else [d.p50, d.p90, d.p99]


def _memory(g: GpuUtilisation) -> str:
    if g.memory_peak_bytes is None:
        return "n/a"
    share = f" {g.memory_peak_pct:.0f}%" if g.memory_peak_pct is not None else ""
    return f"{gib(g.memory_peak_bytes, digits=1)}{share}"


def _counters_table(c: CounterSummary, width: int) -> Table:
    title = (
        f"Nsight Compute counters: {c.kernels} launch(es), {ms(c.measured_ns)} profiled"
        " (throughput and occupancy in % of peak)"
    )
    table = Table(title=title, title_justify="left")
    # The other columns and the borders take 62 characters; the kernel name gets the rest.
    table.add_column("kernel", overflow="ellipsis", no_wrap=True, max_width=max(12, width - 62))
    widths = {"n": 3, "time": 9, "SM/mem/DRAM": 11, "occ/theo": 8}
    for column, min_width in widths.items():
        table.add_column(column, justify="right", no_wrap=True, min_width=min_width)
    table.add_column("bound", no_wrap=True, min_width=8)
    short = short_kernel_names(s.name for s in c.stats[:10])
    for s in c.stats[:10]:
        table.add_row(
            Text(short[s.name]),
            f"{s.count:,}",
            "n/a" if s.total_ns is None else ms(s.total_ns),
            "/".join(
                _int_pct(v)
                for v in (s.sm_throughput_pct, s.memory_throughput_pct, s.dram_throughput_pct)
            ),
            f"{_int_pct(s.achieved_occupancy_pct)}/{_int_pct(s.theoretical_occupancy_pct)}",
            "n/a" if s.limiter is None else s.limiter.value,
        )
    return table


def _int_pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


# --- idle timeline -------------------------------------------------------------------------------

_TIMELINE_COLUMNS = STATE_COLUMNS  # the diagnosis keeps this many slices of each span
_TIMELINE_DEVICES = 16
#: Each column's dominant state: its character and colour (the HTML report's colours).
_STATES = {"busy": ("█", "#2ca02c"), **causes.idle_styles()}  # data/causes.csv


def idle_timeline(devices: list[DeviceReport], width: int = 120) -> Text:
    """One line per device: each column is an equal slice of its span, drawn as what took most
    of that slice (busy, or the cause of the idle time), with a legend of the states shown.
    Up to 60 columns, fewer when the line would not fit in ``width`` characters."""
    shown = devices[:_TIMELINE_DEVICES]
    label = max(len(_label(d)) for d in shown)
    columns = max(min(_TIMELINE_COLUMNS, width - label - 16), 10)
    text = Text(f"\nIdle timeline (each column 1/{columns} of the device's span)\n", style="bold")
    seen: set[str] = set()
    for d in shown:
        states = _column_states(d, columns)
        seen.update(states)
        text.append(f"{_label(d):<{label}} │")
        for state in states:
            char, colour = _STATES[state]
            text.append(char, style=colour)
        text.append(f"│ {ms(d.temporal.span_ns)}\n")
    if len(devices) > len(shown):
        text.append(f"(the first {len(shown)} of {len(devices)} devices)\n", style="dim")
    for state, (char, colour) in _STATES.items():
        if state in seen:
            text.append(f"{char} {state}  ", style=colour)
    return text


def _column_states(d: DeviceReport, columns: int) -> list[str]:
    """The dominant state of each of ``columns`` equal slices of the device's span, from the
    diagnosis' time per state in :data:`~gpuscope.analyses.drawn.STATE_COLUMNS` slices (a
    narrower terminal's column takes the share of each slice it overlaps)."""
    states = np.asarray(d.series.states_ns, dtype=np.float64)  # (state, slice)
    fine = states.shape[1]
    if columns != fine:
        edges = np.linspace(0.0, 1.0, fine + 1)
        coarse = np.linspace(0.0, 1.0, columns + 1)
        overlap = np.clip(
            np.minimum(coarse[1:, None], edges[None, 1:])
            - np.maximum(coarse[:-1, None], edges[None, :-1]),
            0.0,
            None,
        )
        states = states @ (overlap * fine).T
    names = ["busy", *CAUSES]
    return [names[i] for i in states.argmax(axis=0).tolist()]
