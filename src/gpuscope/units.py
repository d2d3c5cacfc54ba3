"""How quantities are written for people, once: milliseconds, percentages and dollars in every
report (the JSON keeps the numbers, with their units in the keys)."""

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
