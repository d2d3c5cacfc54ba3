"""The terminal report, drawn with rich.

Contract: :func:`render` writes a :class:`~gpuscope.diagnosis.Diagnosis` to a rich ``Console`` and
computes nothing: every figure comes from the diagnosis.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpuscope.analyses.bounds import Bound
from gpuscope.diagnosis import DeviceReport, Diagnosis
from gpuscope.diagnosis.findings import Finding, Verdict

_DETAILED_DEVICES = 2
_SPLIT_COLOURS = {
    "compute": "green",
    "communication": "magenta",
    "memcpy": "cyan",
    "memset": "blue",
    "idle": "red",
}


def render(diagnosis: Diagnosis, console: Console, *, all_devices: bool = False) -> None:
    for warning in diagnosis.warnings:
        console.print(Text(f"warning: {warning}", style="yellow"))
    console.print(_verdict(diagnosis.verdict))
    if diagnosis.findings:
        console.print(_findings(diagnosis.findings))
    devices = diagnosis.devices
    if len(devices) > 1:
        console.print(_device_table(devices))
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


_BOUND_STYLE = {"host": "red", "memory": "yellow", "compute": "green", "communication": "magenta"}


def _verdict(v: Verdict) -> Text:
    text = Text()
    text.append(v.summary, style=f"bold {_BOUND_STYLE.get(v.bound, 'white')}")
    if v.gpu_hour_usd is None:
        text.append(f"\n({v.price_source})", style="dim")
    else:
        text.append(f"\n(at ${v.gpu_hour_usd:.2f}/GPU-hour: {v.price_source})", style="dim")
    return text


def _findings(found: list[Finding]) -> Text:
    text = Text("\nFindings, costliest first\n", style="bold")
    for i, f in enumerate(found, 1):
        text.append(f"{i}. {f.cause}", style="bold")
        text.append(f"  {f.share_pct:.1f}% of device time")
        if f.lost_ns_per_step is not None:
            text.append(f" · {_ms(f.lost_ns_per_step)} per step")
        if f.cost_usd_per_gpu_hour is not None:
            text.append(f" · ${f.cost_usd_per_gpu_hour:.2f}/GPU-hour")
            text.append(f" (${f.cost_usd_per_day:,.0f}/day)" if f.cost_usd_per_day else "")
        text.append(f"  [{f.pattern}]\n", style="dim")
        text.append(f"   {f.title}; {'; '.join(f.evidence)}\n")
        for loc in f.locations[:3]:
            text.append("   at ", style="dim")
            text.append(loc.location, style="cyan")
            text.append(f"  {_ms(loc.lost_ns)} in {loc.gaps:,} gaps\n", style="dim")
        text.append("   fix: ", style="green")
        text.append(f"{f.fix}\n")
    return text


def _extremes(devices: list[DeviceReport]) -> list[DeviceReport]:
    by_busy = sorted(devices, key=lambda d: d.temporal.pct(d.temporal.busy_ns))
    return [by_busy[0], by_busy[-1]]


def _label(d: DeviceReport) -> str:
    rank = f"rank {d.rank}" if d.rank is not None else "rank ?"
    return f"{rank} · device {d.device}"


def _ms(ns: float) -> str:
    return f"{ns / 1e6:,.2f} ms"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}%"


def _device_table(devices: list[DeviceReport]) -> Table:
    table = Table(title="Devices", title_justify="left", expand=False)
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
            _ms(t.span_ns),
            _pct(t.pct(t.busy_ns)),
            _pct(t.pct(t.idle_ns)),
            _pct(t.pct(t.compute_ns)),
            _pct(t.pct(t.communication_ns)),
            _pct(t.pct(t.memory_ns)),
            _pct(d.overlap.overlap_pct),
        )
    return table


def _device_panel(d: DeviceReport) -> Panel:
    parts: list[Table | Text] = [_header(d), _split(d), _bounds(d), _idle_causes(d)]
    if d.steps:
        parts.append(_steps(d))
    parts.append(_kernels(d))
    parts.append(_streams(d))
    return Panel(Group(*parts), title=_label(d), title_align="left")


def _header(d: DeviceReport) -> Text:
    t = d.temporal
    text = Text()
    text.append(d.info.name or "unnamed device", style="bold")
    if d.facts is not None:
        f = d.facts
        peaks = []
        if f.bf16_flops_per_s:
            peaks.append(f"{f.bf16_flops_per_s / 1e12:,.0f} TFLOP/s BF16")
        if f.memory_bandwidth_bytes_per_s:
            peaks.append(f"{f.memory_bandwidth_bytes_per_s / 1e9:,.0f} GB/s")
        if f.usd_per_gpu_hour:
            peaks.append(f"${f.usd_per_gpu_hour:.2f}/GPU-hour")
        text.append(f"  ({f.display_name}: {', '.join(peaks)})", style="dim")
    else:
        text.append("  (not in the GPU facts table: peak figures unknown)", style="dim")
    steps = f"{len(d.steps)} profiler steps" if d.steps else "no profiler steps found"
    text.append(f"\nwindow {_ms(t.span_ns)} ({steps}); ")
    text.append(f"busy {_pct(t.pct(t.busy_ns))}", style="green")
    text.append(", ")
    text.append(f"idle {_pct(t.pct(t.idle_ns))}", style="red")
    if d.overlap.communication_ns:
        text.append(
            f"; {_pct(d.overlap.overlap_pct)} of communication overlapped by compute"
            f" ({_ms(d.overlap.exposed_ns)} exposed)"
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
    text.append(f"compute-bound {_ms(t[Bound.COMPUTE])}", style="green")
    text.append(", ")
    text.append(f"memory-bound {_ms(t[Bound.MEMORY])}", style="yellow")
    text.append(f", latency-bound (tiny kernels) {_ms(t[Bound.LATENCY])}")
    if b.gemm_ns:
        text.append(f"; {100 * b.fp32_gemm_ns / b.gemm_ns:.0f}% of GEMM time not on tensor cores")
    if b.mfu_pct is not None:
        text.append(f"\nMFU {b.mfu_pct:.1f}%, MBU {_pct(b.mbu_pct)}")
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
        top = c.locations[0].location if c.locations else "-"
        table.add_row(c.cause.value, _ms(c.lost_ns), _pct(c.share_pct), f"{c.gaps:,}", Text(top))
    return table


def _steps(d: DeviceReport) -> Table:
    table = Table(title="Steps", title_justify="left")
    table.add_column("step")
    table.add_column("duration", justify="right")
    table.add_column("GPU busy", justify="right")
    for s in d.steps:
        table.add_row(s.name, _ms(s.dur_ns), _pct(s.busy_pct))
    return table


def _kernels(d: DeviceReport) -> Table:
    table = Table(title="Top kernels by time", title_justify="left")
    table.add_column("kernel", overflow="ellipsis", max_width=44, no_wrap=True)
    table.add_column("class")
    table.add_column("count", justify="right")
    table.add_column("total", justify="right")
    table.add_column("share", justify="right")
    for k in d.kernels:
        table.add_row(
            Text(k.name),
            k.work_class.name.lower(),
            f"{k.count:,}",
            _ms(k.total_ns),
            _pct(k.share_of_busy_pct),
        )
    return table


def _streams(d: DeviceReport) -> Table:
    table = Table(title="Idle time per stream", title_justify="left")
    for column in ("stream", "idle", "host wait", "kernel wait", "other"):
        table.add_column(column, justify="right")
    for s in d.streams:
        table.add_row(
            str(s.stream),
            _ms(s.idle_ns),
            _ms(s.host_wait_ns),
            _ms(s.kernel_wait_ns),
            _ms(s.other_ns),
        )
    return table
