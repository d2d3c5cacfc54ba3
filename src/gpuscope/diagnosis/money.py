"""How dollars follow from time, written once: every price a diagnosis, a comparison or a report
shows comes from these functions.

A GPU-hour costs ``price`` (``--gpu-hour-usd``, else ``data/gpu_facts.csv``). Time lost on a
share ``s`` of a GPU's time costs ``s x price`` per GPU-hour, ``s x price x 24`` per GPU-day and
``s x price x 24 x GPUs`` per day for a job of that many GPUs; ``t`` nanoseconds of one GPU's time
cost ``t / 3.6e12 x price``.
"""

from __future__ import annotations

NS_PER_HOUR = 3_600 * 10**9
HOURS_PER_DAY = 24


def per_gpu_hour(share: float, price: float | None) -> float | None:
    """Dollars per GPU-hour of time lost on ``share`` (a fraction, 0 to 1) of a GPU's time."""
    return None if price is None else share * price


def per_gpu_day(share: float, price: float | None) -> float | None:
    """Dollars per GPU-day of time lost on ``share`` of a GPU's time."""
    hour = per_gpu_hour(share, price)
    return None if hour is None else hour * HOURS_PER_DAY


def per_day(usd_per_gpu_hour: float | None, gpus: int) -> float | None:
    """Dollars per day of a job of ``gpus`` GPUs losing ``usd_per_gpu_hour`` on each."""
    return None if usd_per_gpu_hour is None else usd_per_gpu_hour * HOURS_PER_DAY * gpus


def of_time(ns: float, price: float | None) -> float | None:
    """Dollars of ``ns`` nanoseconds of one GPU's time."""
    return None if price is None else ns / NS_PER_HOUR * price


def per_unit(price: float | None, gpus: int, units_per_s: float) -> float | None:
    """Dollars per unit of work (a sample, a token) of a job of ``gpus`` GPUs that does
    ``units_per_s`` units a second."""
    return None if price is None else price * gpus / 3600.0 / units_per_s
