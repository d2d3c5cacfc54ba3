"""What bounds each kernel family, from hardware counters sampled over time (Nsight Systems
``GPU_METRICS``, CUPTI PM sampling in a Kineto or ``.pftrace`` trace), not from estimates.

Contract: :func:`metric_of` names the few counters this reads (:data:`METRICS`, one table);
:func:`family_counters` attributes each counter to the kernels it overlaps and sums them per
kernel name; :func:`counter_bound` says what bounds a family from its figures, and why, in words;
:func:`apply_counter_series` puts those bounds in place of
:func:`~gpuscope.analyses.bounds.kernel_bounds`' estimates for the kernels the counters cover.
All are pure; a trace without counters never reaches them.

How a sampled counter is read: each sample is the GPU-wide average over the period since the
previous one, so a sample's value holds from its time to the next sample's. A kernel's figure is
the time-weighted mean of the samples over its run; a family's, over all its launches. A stretch
between samples longer than :data:`GAP_FACTOR` sampling periods (the profiler dropped samples),
and a NaN value, are not measured: a kernel less than :data:`MIN_COVERAGE` measured keeps its
estimated bound. Counters are per GPU, not per kernel: kernels running at the same time on other
streams share the samples, so a family's figures describe the GPU while it ran.

The rule (:func:`counter_bound`) is Nsight Compute's Speed Of Light rule, applied to the sampled
units (:data:`~gpuscope.analyses.counters.LATENCY_BOUND_PCT`, 60% of peak): DRAM throughput
(read + write, or the total) at 60% of peak or more, and above the compute units, is
memory-bound; tensor pipes or instruction issue at 60% or more is compute-bound; both below is
latency-bound (too little work in flight to use either). Warps in flight and unallocated warps
are stated as evidence: DRAM near peak with few warps in flight and many warp slots unallocated
(the seed's Llama-2 decode attention: "Compute Warps in Flight 5-15%, Unallocated Warps in Active
SMs 50-80%, DRAM Read Throughput 80-100%") is bandwidth, not occupancy, that limits the kernel.
"""

from __future__ import annotations

import re
from enum import Enum

import numpy as np
from numpy.typing import NDArray

from gpuscope.analyses.bounds import Bound, KernelBounds
from gpuscope.analyses.counters import LATENCY_BOUND_PCT, FamilyBound, MeasuredBounds
from gpuscope.analyses.timeline import DeviceWork
from gpuscope.model import CounterSeries, Kind

#: A stretch between samples longer than this many sampling periods is a gap (samples dropped).
GAP_FACTOR = 3.0
#: A kernel with less than this share of its run measured keeps its estimated bound.
MIN_COVERAGE = 0.5


class Metric(Enum):
    SM_ACTIVE = "SM active"
    SM_ISSUE = "SM issue"
    TENSOR_ACTIVE = "tensor pipes active"
    DRAM = "DRAM throughput"
    DRAM_READ = "DRAM read"
    DRAM_WRITE = "DRAM write"
    WARPS_IN_FLIGHT = "warps in flight"
    UNALLOCATED_WARPS = "unallocated warps in active SMs"
    PCIE_RX = "PCIe RX"
    PCIE_TX = "PCIe TX"
    NVLINK_RX = "NVLink RX"
    NVLINK_TX = "NVLink TX"


#: Each counter read, by the names Nsight Systems (``GPU_METRICS``, ``[Throughput %]``), CUPTI PM
#: sampling (metric names) and PyTorch's exporter (its display labels) give it. Only percentages
#: of peak are read: a raw count or rate says nothing about a bound without the peak.
METRICS: tuple[tuple[Metric, re.Pattern[str]], ...] = tuple(
    (metric, re.compile(pattern, re.IGNORECASE))
    for metric, pattern in (
        (Metric.UNALLOCATED_WARPS, r"unallocated warps"),
        (Metric.WARPS_IN_FLIGHT, r"warps in flight|sm__warps_active"),
        (Metric.SM_ISSUE, r"^sms? issue|sm__inst_issued|issue active"),
        (Metric.TENSOR_ACTIVE, r"^tensor active|tensor_op|pipe_tensor|tensor.*active"),
        (Metric.SM_ACTIVE, r"^sms? active|sm__cycles_active"),
        (Metric.DRAM_READ, r"^dram read|dram__read_throughput|^hbm read|dram__bytes_read"),
        (Metric.DRAM_WRITE, r"^dram write|dram__write_throughput|^hbm write|dram__bytes_write"),
        (Metric.DRAM, r"^dram bw|^hbm bw|gpu__dram_throughput|dram__throughput"),
        (Metric.PCIE_RX, r"^pcie rx|pcie__read|pcie__rx"),
        (Metric.PCIE_TX, r"^pcie tx|pcie__write|pcie__tx"),
        (Metric.NVLINK_RX, r"^nvlink rx|nvlrx__"),
        (Metric.NVLINK_TX, r"^nvlink tx|nvltx__"),
    )
)
_PERCENT = re.compile(r"%|pct", re.IGNORECASE)


def metric_of(name: str) -> Metric | None:
    """The counter a series measures, when it is one of :data:`METRICS` as a percentage."""
    if not _PERCENT.search(name):
        return None
    return next((metric for metric, pattern in METRICS if pattern.search(name)), None)


def _coverage(
    series: CounterSeries, starts: NDArray[np.int64], ends: NDArray[np.int64]
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Per interval, the integral of the series' value and the measured time over it (ns)."""
    t = series.time_ns.astype(np.int64)
    v = series.value.astype(np.float64)
    if t.size == 0:
        zero = np.zeros(starts.size, dtype=np.float64)
        return zero, zero
    period = float(np.median(np.diff(t))) if t.size > 1 else 0.0
    if period <= 0:
        zero = np.zeros(starts.size, dtype=np.float64)
        return zero, zero
    edges = np.append(t, t[-1] + period).astype(np.float64)
    width = np.diff(edges)
    measured = ~np.isnan(v) & (width <= GAP_FACTOR * period)
    value = np.where(measured, v, 0.0)
    value_area = np.concatenate(([0.0], np.cumsum(value * width)))
    measured_area = np.concatenate(([0.0], np.cumsum(np.where(measured, width, 0.0))))
    a, b = starts.astype(np.float64), ends.astype(np.float64)
    integral = np.interp(b, edges, value_area) - np.interp(a, edges, value_area)
    covered = np.interp(b, edges, measured_area) - np.interp(a, edges, measured_area)
    return integral, covered


def family_counters(work: DeviceWork, series: list[CounterSeries]) -> list[FamilyBound]:
    """Every kernel family the counters cover, costliest first (see the module docstring)."""
    ev = work.trace.events
    rows = work.rows[ev.kind[work.rows] == Kind.KERNEL]
    if rows.size == 0:
        return []
    starts, ends = ev.start_ns[rows], ev.end_ns[rows]
    dur = np.maximum(ends - starts, 1).astype(np.float64)
    names, family = np.unique(ev.name_id[rows], return_inverse=True)
    family = family.reshape(-1)
    area: dict[Metric, NDArray[np.float64]] = {}
    covered_by: dict[Metric, NDArray[np.float64]] = {}
    for s in series:
        metric = metric_of(s.name)
        if metric is None or metric in area:
            continue
        integral, covered = _coverage(s, starts, ends)
        area[metric] = np.bincount(family, weights=integral, minlength=names.size).astype(
            np.float64
        )
        covered_by[metric] = np.bincount(family, weights=covered, minlength=names.size).astype(
            np.float64
        )
    if not area:
        return []
    time = np.bincount(family, weights=dur, minlength=names.size)
    counts = np.bincount(family, minlength=names.size)
    out: list[FamilyBound] = []
    for j in np.argsort(-time, kind="stable").tolist():
        measured = max(float(c[j]) for c in covered_by.values())
        if measured < MIN_COVERAGE * time[j]:
            continue
        figures = {
            m: float(area[m][j] / covered_by[m][j])
            for m in area
            if covered_by[m][j] >= MIN_COVERAGE * time[j]
        }
        bound, evidence = counter_bound(figures)
        out.append(
            FamilyBound(
                name=work.trace.names[int(names[j])],
                kernels=int(counts[j]),
                time_ns=int(time[j]),
                measured_ns=int(measured),
                bound=None if bound is None else bound.name.lower(),
                figures_pct={m.value: round(v, 2) for m, v in figures.items()},
                evidence=evidence,
            )
        )
    return out


def counter_bound(figures: dict[Metric, float]) -> tuple[Bound | None, str]:
    """The bound the figures give by the Speed Of Light rule (module docstring), and why."""
    dram = figures.get(Metric.DRAM)
    read, write = figures.get(Metric.DRAM_READ), figures.get(Metric.DRAM_WRITE)
    if read is not None or write is not None:
        both = min((read or 0.0) + (write or 0.0), 100.0)
        dram = both if dram is None else max(dram, both)
    units = [figures[m] for m in (Metric.TENSOR_ACTIVE, Metric.SM_ISSUE) if m in figures]
    compute = max(units) if units else None
    words = _figures_text(figures)
    if dram is not None and dram >= LATENCY_BOUND_PCT and (compute is None or dram >= compute):
        return Bound.MEMORY, f"{words}: DRAM near its peak bandwidth, memory-bound"
    if compute is not None and compute >= LATENCY_BOUND_PCT:
        return Bound.COMPUTE, f"{words}: the SMs' pipes near their peak, compute-bound"
    if dram is not None and compute is not None:
        return (
            Bound.LATENCY,
            f"{words}: neither DRAM nor the SMs near peak (below {LATENCY_BOUND_PCT:.0f}%),"
            " latency-bound: too little work in flight",
        )
    return None, f"{words}: not enough counters to say what bounds it"


_ORDER = (
    Metric.DRAM_READ,
    Metric.DRAM_WRITE,
    Metric.DRAM,
    Metric.WARPS_IN_FLIGHT,
    Metric.UNALLOCATED_WARPS,
    Metric.SM_ACTIVE,
    Metric.SM_ISSUE,
    Metric.TENSOR_ACTIVE,
)


def _figures_text(figures: dict[Metric, float]) -> str:
    shown = [f"{m.value} {figures[m]:.0f}%" for m in _ORDER if m in figures]
    return ", ".join(shown) if shown else "no counters"


def apply_counter_series(
    bounds: KernelBounds, work: DeviceWork, series: list[CounterSeries]
) -> MeasuredBounds | None:
    """``bounds`` with each covered kernel's bound replaced by the one its family's counters
    give; None when the counters cover no kernel (the estimates stand)."""
    families = [f for f in family_counters(work, series) if f.bound is not None]
    if not families:
        return None
    trace = work.trace
    ev = trace.events
    rows = bounds.rows
    by_name = {f.name: f for f in families}
    bound = bounds.bound.copy()
    measured = np.zeros(rows.size, dtype=bool)
    kernel = (ev.kind[rows] == Kind.KERNEL) & (bound != Bound.COMMUNICATION)
    names = np.asarray(trace.names, dtype=object)
    for k in np.flatnonzero(kernel).tolist():
        family = by_name.get(str(names[int(ev.name_id[rows[k]])]))
        if family is not None and family.bound is not None:
            bound[k] = Bound[family.bound.upper()]
            measured[k] = True
    return MeasuredBounds.replacing(
        bounds,
        ev,
        bound,
        measured,
        kernel,
        [f.name for f in families],
        source=_source(series),
        evidence=[f"{f.name} ({f.kernels:,} launches): {f.evidence}" for f in families[:5]],
        families=families,
    )


def _source(series: list[CounterSeries]) -> str:
    kinds = {s.source for s in series}
    return "nsys GPU metrics" if kinds == {"nsys"} else "PM sampling"


def device_series(series: list[CounterSeries], device: int) -> list[CounterSeries]:
    """The series of one device that are counters this reads."""
    return [s for s in series if s.device == device and metric_of(s.name) is not None]


#: The DRAM counters, read + write or the total, as :func:`counter_bound` reads them.
_DRAM = (Metric.DRAM, Metric.DRAM_READ, Metric.DRAM_WRITE)


def dram_pct_while_busy(work: DeviceWork, series: list[CounterSeries]) -> float | None:
    """The DRAM throughput (% of peak, read + write or the total) averaged over the time the
    device is busy, as the counters measured it; None without DRAM counters covering half of it."""
    busy = work.busy
    if len(busy) == 0:
        return None
    measured: dict[Metric, float] = {}
    total = float(busy.total_ns)
    for s in series:
        metric = metric_of(s.name)
        if metric not in _DRAM or metric in measured:
            continue
        integral, covered = _coverage(s, busy.start_ns, busy.end_ns)
        if covered.sum() >= MIN_COVERAGE * total:
            measured[metric] = float(integral.sum() / covered.sum())
    if not measured:
        return None
    both = min(measured.get(Metric.DRAM_READ, 0.0) + measured.get(Metric.DRAM_WRITE, 0.0), 100.0)
    return max(measured.get(Metric.DRAM, 0.0), both)
