"""``gpuscope watch``: live GPU utilisation, SM activity, memory and processes through NVML,
flagging GPUs that idle while a process holds them, optionally as Prometheus gauges.
The sampling lives in :mod:`gpuscope.watch`; this module parses, loops and draws."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from gpuscope.commands._common import EXIT_BAD_INPUT, PERCENT, Number, missing_extra, say

if TYPE_CHECKING:
    from rich.table import Table

    from gpuscope.watch import GpuSample, IdleAlert, IdleTracker, MetricsServer, Sampler

GIB = 2**30


@click.command()
@click.option("--interval", type=Number(0.05), default=1.0, show_default=True)
@click.option(
    "--idle-threshold-pct",
    type=PERCENT,
    default=5.0,
    show_default=True,
    help="At or below this utilisation a GPU counts as idle.",
)
@click.option(
    "--idle-after-s",
    type=Number(0.0),
    default=60.0,
    show_default=True,
    help="Flag a held GPU idle this long.",
)
@click.option("--prometheus", "port", type=click.IntRange(0, 65535), help="Serve /metrics.")
@click.option(
    "--bind",
    default="127.0.0.1",
    show_default=True,
    help="Address for --prometheus (empty: localhost; an IPv6 address such as ::1 works too).",
)
@click.option("--once", is_flag=True, help="Sample once, print, exit.")
def watch(
    interval: float,
    idle_threshold_pct: float,
    idle_after_s: float,
    port: int | None,
    bind: str,
    once: bool,
) -> None:
    """Watch local GPUs: utilisation, SM activity, memory, processes, idle-but-held alerts."""
    from gpuscope.watch import (
        IdleTracker,
        MetricsServer,
        NvmlUnavailableError,
        Sampler,
        ServeError,
        listen_address,
        load_nvml,
    )

    if port is not None:
        try:
            import prometheus_client  # noqa: F401 - /metrics is written by the official client
        except ImportError:
            missing_extra("gpuscope watch --port", "prometheus_client", "nvml")
        try:  # a bad address is said before NVML loads: it is the user's to fix either way
            listen_address(bind, port)
        except ServeError as error:
            say(f"gpuscope: error: {error}")
            sys.exit(EXIT_BAD_INPUT)
    try:
        nvml = load_nvml()
    except NvmlUnavailableError as error:
        say(f"gpuscope: error: {error}")
        sys.exit(EXIT_BAD_INPUT)
    sampler = Sampler(nvml)
    tracker = IdleTracker(idle_threshold_pct, idle_after_s)
    try:
        server = MetricsServer(port, bind) if port is not None else None
    except ServeError as error:
        nvml.nvmlShutdown()
        say(f"gpuscope: error: {error}")
        sys.exit(EXIT_BAD_INPUT)
    if server is not None:
        host = bind.strip() or "127.0.0.1"
        host = f"[{host}]" if ":" in host and not host.startswith("[") else host
        say(f"serving http://{host}:{server.port}/metrics")
    try:
        _loop(sampler, tracker, server, interval, once)
    except KeyboardInterrupt:
        pass
    finally:
        sampler.close()
        if server is not None:
            server.close()
        nvml.nvmlShutdown()


def _loop(
    sampler: Sampler,
    tracker: IdleTracker,
    server: MetricsServer | None,
    interval: float,
    once: bool,
) -> None:
    """Sample, flag, publish and draw every ``interval`` seconds (once with ``--once``)."""
    from rich.live import Live

    from gpuscope.render import console

    def tick() -> Table:
        samples = sampler.sample()
        alerts = tracker.update(samples)
        if server is not None:
            server.publish(samples, alerts)
        return table(samples, alerts)

    if once:
        console().print(tick())
        return
    with Live(tick(), auto_refresh=False) as live:
        while True:
            time.sleep(interval)
            live.update(tick(), refresh=True)


def table(samples: Sequence[GpuSample], alerts: Sequence[IdleAlert]) -> Table:
    """One row per GPU; n/a where NVML cannot say; IDLE where a held GPU idles too long."""
    from rich.table import Table
    from rich.text import Text

    flagged = {a.index: a for a in alerts}
    out = Table(title="gpuscope watch", title_justify="left")
    for name in ("GPU", "name", "util %", "SM active %", "memory GiB", "processes", "state"):
        out.add_column(name, justify="right" if "%" in name or "GiB" in name else "left")
    for s in samples:
        alert = flagged.get(s.index)
        out.add_row(
            str(s.index),
            s.name,
            _pct(s.utilization_pct),
            _pct(s.sm_active_pct),
            _memory(s),
            ", ".join(f"{p.pid} {p.name or '?'}" for p in s.processes) or "-",
            Text(f"IDLE {alert.idle_s:.0f} s while held", style="bold red") if alert else "",
        )
    return out


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def _memory(s: GpuSample) -> str:
    if s.memory_used_bytes is None or s.memory_total_bytes is None:
        return "n/a"
    return f"{s.memory_used_bytes / GIB:.1f} / {s.memory_total_bytes / GIB:.1f}"
