"""The terminal report, drawn with rich.

Contract: :func:`render` writes a :class:`~gpuscope.diagnosis.Diagnosis` to a rich ``Console`` and
computes nothing: every figure comes from the diagnosis.
"""

from __future__ import annotations

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from gpuscope.diagnosis import DeviceReport, Diagnosis

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
    parts: list[Table | Text] = [_header(d), _split(d)]
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
    table.add_column("kernel", overflow="ellipsis", max_width=70, no_wrap=True)
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
