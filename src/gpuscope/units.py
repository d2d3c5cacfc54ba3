"""How quantities are written for people, once: times, sizes, percentages and dollars in every
report and evidence sentence (the JSON keeps the numbers, with their units in the keys)."""

from __future__ import annotations

import math


def ms(ns: float, digits: int = 2) -> str:
    """``12.35 ms``: nanoseconds as milliseconds."""
    return f"{ns / 1e6:,.{digits}f} ms"


def ms_or_na(ns: float | None) -> str:
    """:func:`ms`, or ``n/a`` when the figure is not known."""
    return "n/a" if ns is None else ms(ns)


def signed_ms(ns: float) -> str:
    """``+1.25 ms``: a change in milliseconds, with its sign."""
    return f"{ns / 1e6:+,.2f} ms"


def ms_or_s(ns: float) -> str:
    """``12.345 ms`` below a second, ``1.234 s`` from one second on (a timeline's scale)."""
    return f"{ns / 1e6:,.3f} ms" if ns < 1e9 else f"{ns / 1e9:,.3f} s"


def duration(ns: float) -> str:
    """A span of time in the unit that reads: ``5.4 h``, ``12.5 min``, ``4.56 s``, ``12.35 ms``,
    ``3.2 µs``. Hours and minutes keep one decimal and seconds two (three figures are what a
    reader compares); below a millisecond the figure is kept in µs rather than written
    ``0.00 ms``. For a table column that must line up, use :func:`ms`."""
    size = abs(ns)
    # Each threshold is where the smaller unit would round up to the larger (59.95 min: 1.0 h).
    if size >= 59.95 * 60e9:
        return f"{ns / 3600e9:,.1f} h"
    if size >= 59.995e9:
        return f"{ns / 60e9:.1f} min"
    if size >= 999.995e6:
        return f"{ns / 1e9:.2f} s"
    if size >= 999.95e3 or size == 0:
        return f"{ns / 1e6:.2f} ms"
    return f"{ns / 1e3:.1f} µs"


def seconds(ns: float, digits: int = 0) -> str:
    """``45 s``: nanoseconds as seconds (a sampled log's stretches)."""
    return f"{ns / 1e9:,.{digits}f} s"


def us(ns: float, digits: int = 1) -> str:
    """``3.2 µs``: nanoseconds as microseconds."""
    return f"{ns / 1e3:,.{digits}f} µs"


def seconds_or_ms(ns: float) -> str:
    """``1.23 s`` from one second on, ``12.3 ms`` below (a stretch of a profiled window)."""
    return f"{ns / 1e9:,.2f} s" if ns >= 1e9 else ms(ns, 1)


def long_duration(ns: float, gpu: str = "") -> str:
    """A long span in whole units: ``1.5 h`` from 90 minutes, ``12 min`` from two minutes, else
    ``45 s``; ``gpu="GPU-"`` names GPU time (summed over GPUs): ``3.0 GPU-h``."""
    seconds = ns / 1e9
    if seconds >= 5400:
        return f"{seconds / 3600:,.1f} {gpu}h"
    if seconds >= 120:
        return f"{seconds / 60:,.0f} {gpu}min"
    return f"{seconds:,.0f} {gpu}s"


#: Bytes in a GiB.
GIB = 1 << 30


def gib(size: float | None, unknown: str = "n/a", digits: int = 2) -> str:
    """``12.35 GiB``, or ``unknown``."""
    return unknown if size is None else f"{size / GIB:,.{digits}f} GiB"


def signed_gib(size: float) -> str:
    """``+1.25 GiB``: a change in GiB, with its sign."""
    return f"{size / GIB:+,.2f} GiB"


def gib_or_mib(size: float) -> str:
    """``1.5 GiB`` from a GiB on, ``512 MiB`` below."""
    return f"{size / GIB:,.1f} GiB" if size >= GIB else f"{size / (1 << 20):,.0f} MiB"


def pct(value: float | None) -> str:
    """``12.3%``, or ``n/a`` when the share is not known (None or NaN)."""
    return "n/a" if value is None or math.isnan(value) else f"{value:.1f}%"


def usd(value: float | None, unknown: str = "n/a") -> str:
    """``$1,234.57``, a small amount with two significant digits (``$0.0031``), or ``unknown``."""
    if value is None:
        return unknown
    return f"${value:,.2f}" if value == 0 or abs(value) >= 0.01 else f"${value:.2g}"


def usd_cents(value: float | None, unknown: str = "unknown") -> str:
    """``$1,234.57`` to the cent, or ``unknown``."""
    return unknown if value is None else f"${value:,.2f}"
