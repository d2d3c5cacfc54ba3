"""What sampled utilisation says about each GPU: how busy, how full, when idle, where unrecorded.

Contract: :func:`gpu_utilisation` is pure: one :class:`~gpuscope.model.GpuSamples` (plus the
GPU's facts, for its memory size when the samples lack it) in, one :class:`GpuUtilisation` out.

Definitions:

* *period*: the median time between consecutive samples. A sample stands for the time until the
  next one; when the next one is more than ``gap_factor`` (2) periods away, it stands for one
  period and the rest is a **gap**: time nothing recorded, counted neither idle nor busy.
* *covered*: the time the samples stand for (span from first sample to one period after the
  last, less the gaps).
* Mean and percentiles are over samples (a missing value, NaN, is left out). Percentiles are
  nearest-rank: the p-th percentile is the ``ceil(p/100 x n)``-th smallest value, a value that
  was actually sampled.
* *utilisation* is the coarse "GPU util" (NVML, nvidia-smi, ``DCGM_FI_DEV_GPU_UTIL``): the share of
  the sample period in which any kernel ran. *SM active* (DCGM ``SM_ACTIVE``) is the share of
  cycles an SM had a warp resident, averaged over SMs: a GPU can show 100% util and 10% SM active.
* An **idle stretch** is a run of consecutive samples below ``idle_util_pct`` lasting at least
  ``min_idle_ns``, not crossing a gap; utilisation decides, SM active when util was not recorded.
* Memory peak is the largest ``memory_used`` sample, and its share of the memory total the
  samples report (else the facts table's capacity).
* A GPU **worked** when at least one sample reached ``idle_util_pct``; one that never did, in
  the whole log, ran no work worth the name (a process may still hold a context on it).
* **Held idle**: the log ends in an idle stretch of at least ``held_idle_min_ns``, after the GPU
  worked, with at least ``held_memory_bytes`` used in every sample of it. That much memory is a
  CUDA context or more (a context alone takes a few hundred MiB; with no process, memory.used
  reads a few MiB): a process still holds the GPU after its work ended (a notebook kernel, a
  job blocked on a barrier or on input, a script that does not exit). The *work* figures are
  those of the samples before that stretch, so that the idle tail is not counted twice.
"""

from __future__ import annotations

import math

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope.facts import GpuFacts
from gpuscope.model import GpuSamples

#: What each recording measured, as the JSON's ``measured_from`` says it.
MEASURED_FROM = {
    "nvml-jsonl": "nvml-samples",
    "nvidia-smi-csv": "nvidia-smi-samples",
    "dcgmi-dmon": "dcgm-samples",
    "prometheus": "dcgm-exporter-samples",
}


class SampleOptions(msgspec.Struct, frozen=True):
    idle_util_pct: float = 5.0  # a sample below this is idle
    min_idle_ns: int = 10_000_000_000  # idle runs shorter than this are not stretches
    gap_factor: float = 2.0  # a spacing above this many periods is a gap
    held_idle_min_ns: int = 300_000_000_000  # an idle tail this long, memory held: held idle
    held_memory_bytes: int = 256 * 2**20  # a CUDA context or more: a process holds the GPU


class Distribution(msgspec.Struct, frozen=True):
    """Mean and nearest-rank percentiles of a sampled percentage."""

    samples: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float


class Stretch(msgspec.Struct, frozen=True):
    start_ns: int
    end_ns: int

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


class HeldIdle(Stretch, frozen=True):
    """The idle stretch that ends the log while memory stays allocated."""

    memory_bytes: int  # the least memory used in any of its samples
    activity_mean: float  # utilisation (or SM active) over it, below the idle threshold


class GpuUtilisation(msgspec.Struct, frozen=True):
    source: str
    measured_from: str  # "nvml-samples", "nvidia-smi-samples", "dcgm-samples", ...
    gpu: int
    name: str | None
    uuid: str | None
    samples: int
    start_ns: int
    end_ns: int  # one period after the last sample
    period_ns: int | None  # median spacing; None with a single sample
    covered_ns: int
    utilization: Distribution | None  # None: not recorded
    sm_active: Distribution | None
    dram_active: Distribution | None
    memory_peak_bytes: int | None
    memory_total_bytes: int | None
    memory_peak_pct: float | None
    power_mean_w: float | None
    idle: list[Stretch]
    gaps: list[Stretch]
    worked: bool | None = None  # None: neither utilisation nor SM activity recorded
    held_idle: HeldIdle | None = None
    #: Activity and covered time of the samples before the held-idle tail (all, without one).
    work: Distribution | None = None
    work_covered_ns: int = 0
    idle_below_pct: float = SampleOptions.idle_util_pct  # the threshold these figures used

    @property
    def span_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def idle_ns(self) -> int:
        return sum(s.dur_ns for s in self.idle)

    @property
    def gap_ns(self) -> int:
        return sum(s.dur_ns for s in self.gaps)

    @property
    def activity(self) -> Distribution | None:
        """What says whether the GPU worked: utilisation, else SM active."""
        return self.utilization or self.sm_active


def distribution(values: NDArray[np.float64]) -> Distribution | None:
    known = np.sort(values[~np.isnan(values)])
    n = int(known.size)
    if n == 0:
        return None

    def rank(p: float) -> float:
        return float(known[max(math.ceil(p / 100.0 * n), 1) - 1])

    return Distribution(
        samples=n,
        mean=float(known.mean()),
        p50=rank(50),
        p90=rank(90),
        p99=rank(99),
        max=float(known[-1]),
    )


def sample_spans(
    time_ns: NDArray[np.int64], gap_factor: float
) -> tuple[int | None, NDArray[np.int64], list[Stretch]]:
    """The median period, how long each sample stands for, and the gaps between samples."""
    if time_ns.size < 2:
        return None, np.zeros(time_ns.size, dtype=np.int64), []
    spacing = np.diff(time_ns)
    period = int(np.median(spacing))
    is_gap = spacing > gap_factor * period
    widths = np.append(np.where(is_gap, period, spacing), period).astype(np.int64)
    gaps = [
        Stretch(int(time_ns[i]) + period, int(time_ns[i + 1]))
        for i in np.flatnonzero(is_gap).tolist()
    ]
    return period, widths, gaps


def idle_stretches(
    time_ns: NDArray[np.int64],
    widths: NDArray[np.int64],
    activity: NDArray[np.float64],
    options: SampleOptions,
) -> list[Stretch]:
    idle = ~np.isnan(activity) & (activity < options.idle_util_pct)
    stretches: list[Stretch] = []
    start: int | None = None
    for i in np.flatnonzero(idle).tolist():
        if start is None:
            start = int(time_ns[i])
        end = int(time_ns[i] + widths[i])
        # The run goes on only into the very next sample, idle too, with no gap between.
        if i + 1 < time_ns.size and idle[i + 1] and int(time_ns[i + 1]) == end:
            continue
        if end - start >= options.min_idle_ns:
            stretches.append(Stretch(start, end))
        start = None
    return stretches


def gpu_utilisation(
    samples: GpuSamples,
    source: str,
    fmt: str,
    facts: GpuFacts | None = None,
    options: SampleOptions | None = None,
) -> GpuUtilisation:
    options = options or SampleOptions()
    time_ns = samples.time_ns
    period, widths, gaps = sample_spans(time_ns, options.gap_factor)
    utilization = distribution(samples.utilization_pct)
    sm_active = _optional(samples.sm_active_pct)
    activity = samples.utilization_pct if utilization is not None else samples.sm_active_pct
    idle = idle_stretches(time_ns, widths, activity, options) if activity is not None else []
    worked = None
    held = None
    work, work_covered = (utilization or sm_active), int(widths.sum())
    if activity is not None and not np.isnan(activity).all():
        worked = bool(np.nanmax(activity) >= options.idle_util_pct)
        held = held_idle(time_ns, activity, samples.memory_used_bytes, idle, options)
        if held is not None:
            before = time_ns < held.start_ns
            work, work_covered = distribution(activity[before]), int(widths[before].sum())
    peak, total, peak_pct = _memory(samples, facts)
    power = _optional(samples.power_w)
    return GpuUtilisation(
        source=source,
        measured_from=MEASURED_FROM.get(fmt, f"{fmt}-samples"),
        gpu=samples.gpu,
        name=samples.name,
        uuid=samples.uuid,
        samples=int(time_ns.size),
        start_ns=int(time_ns[0]),
        end_ns=int(time_ns[-1]) + (period or 0),
        period_ns=period,
        covered_ns=int(widths.sum()),
        utilization=utilization,
        sm_active=sm_active,
        dram_active=_optional(samples.dram_active_pct),
        memory_peak_bytes=peak,
        memory_total_bytes=total,
        memory_peak_pct=peak_pct,
        power_mean_w=power.mean if power is not None else None,
        idle=idle,
        gaps=gaps,
        worked=worked,
        held_idle=held,
        work=work,
        work_covered_ns=work_covered,
        idle_below_pct=options.idle_util_pct,
    )


def held_idle(
    time_ns: NDArray[np.int64],
    activity: NDArray[np.float64],
    memory_used: NDArray[np.float64] | None,
    idle: list[Stretch],
    options: SampleOptions,
) -> HeldIdle | None:
    """The log's last idle stretch when it runs to the last sample, follows work, lasts at least
    ``held_idle_min_ns`` and keeps at least ``held_memory_bytes`` in every sample (see above)."""
    if not idle or memory_used is None:
        return None
    last = idle[-1]
    tail = time_ns >= last.start_ns
    if int(time_ns[-1]) >= last.end_ns or last.dur_ns < options.held_idle_min_ns:
        return None  # the log goes on after it, or it is short
    if not np.any(activity[~tail] >= options.idle_util_pct):
        return None  # no work before it: not "after the work ended"
    held = memory_used[tail]
    if np.isnan(held).any() or held.min() < options.held_memory_bytes:
        return None
    return HeldIdle(last.start_ns, last.end_ns, int(held.min()), float(np.nanmean(activity[tail])))


def _optional(values: NDArray[np.float64] | None) -> Distribution | None:
    return distribution(values) if values is not None else None


def _memory(
    samples: GpuSamples, facts: GpuFacts | None
) -> tuple[int | None, int | None, float | None]:
    used = samples.memory_used_bytes
    peak = None
    if used is not None and not np.isnan(used).all():
        peak = int(np.nanmax(used))
    total = samples.memory_total_bytes
    if total is None and facts is not None:
        total = facts.memory_bytes
    pct = 100.0 * peak / total if peak is not None and total else None
    return peak, total, pct
