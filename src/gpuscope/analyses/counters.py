"""What bounds each kernel, from the counters Nsight Compute measured (not from estimates).

Contract: :func:`classify_kernel` gives one kernel's limiter from its Speed Of Light throughputs,
or ``None`` when the report lacks them; :func:`summarize` turns one report into per-name
statistics and time per limiter; :func:`apply_counters` puts the measured limiters in place of
:func:`~gpuscope.analyses.bounds.kernel_bounds`' estimates for the timeline kernels whose names
match, and says how much kernel time that covers. All are pure.

Thresholds are Nsight Compute's own, from its "GPU Speed Of Light Throughput" section rule
(``SOLBottleneck``, ``sections/SpeedOfLight.py`` shipped with Nsight Compute:
``latency_bound_threshold = 60``, ``no_bound_threshold = 80``, ``balanced_threshold = 10``,
``waves_threshold = 1``), whose text the reports carry: "Achieved compute throughput and/or
memory bandwidth below 60.0% of peak typically indicate latency issues". Compute (SM) and Memory
Throughput are "the achieved percentage of utilization with respect to the theoretical maximum"
(Nsight Compute Profiling Guide, Speed Of Light; NVIDIA developer forum "What is SOL?",
https://forums.developer.nvidia.com/t/what-is-sol-speed-of-light/191348). The rule's tree:

* both below 60% -> **latency**-bound (a "small grid" when waves per SM < 1);
* else, when both are below 80% and within 10 points of each other -> **balanced**;
* else the higher of the two is the limiter -> **compute**- or **memory**-bound (at 80% or more
  the unit is saturated: work must move to another unit).

Memory Throughput is the highest of DRAM, L1, L2 and shared memory throughput; DRAM Throughput
stands in when a report has only that.

Matching a timeline kernel to an ncu kernel, most exact first: the whole name (``void `` and
spacing ignored); the name without its parameter list; the bare function name (last ``::`` part,
no template arguments; mangled ``_Z`` names are decoded that far) when it names one ncu kernel
only. Device indices are not compared: ncu and the trace may number GPUs differently.
"""

from __future__ import annotations

import re
from enum import Enum

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope.analyses.bounds import Bound, KernelBounds
from gpuscope.analyses.intervals import union
from gpuscope.analyses.timeline import DeviceWork
from gpuscope.model import CounterKernel, Events, KernelCounters, Kind

LATENCY_BOUND_PCT = 60.0
NO_BOUND_PCT = 80.0
BALANCED_POINTS = 10.0
WAVES_THRESHOLD = 1.0


class Limiter(Enum):
    COMPUTE = "compute"
    MEMORY = "memory"
    LATENCY = "latency"
    BALANCED = "balanced"


class KernelLimit(msgspec.Struct, frozen=True):
    """One profiled launch and what bounds it."""

    kernel: CounterKernel
    limiter: Limiter | None  # None: the report has no Speed Of Light throughputs
    reason: str
    speedup_pct: float | None  # the largest "global" estimated speedup of its ncu rules


class CounterStat(msgspec.Struct, frozen=True):
    """Every profiled launch of one kernel name, duration-weighted where it averages."""

    name: str
    count: int
    total_ns: int | None  # None when no launch has a duration
    limiter: Limiter | None  # the limiter of most of its time
    sm_throughput_pct: float | None
    memory_throughput_pct: float | None
    dram_throughput_pct: float | None
    achieved_occupancy_pct: float | None
    theoretical_occupancy_pct: float | None
    waves_per_sm: float | None
    speedup_pct: float | None
    reason: str
    rules: list[str]  # unique rule texts, as "NAME: text"


class CounterSummary(msgspec.Struct, frozen=True):
    source: str
    format: str
    device_name: str | None
    devices: list[int]  # device indices ncu reported
    kernels: int  # launches
    measured_ns: int  # sum of launch durations
    time_ns_by_limiter: dict[Limiter, int]
    unclassified: int  # launches without Speed Of Light throughputs
    stats: list[CounterStat]  # costliest first
    limits: list[KernelLimit]


def classify_kernel(kernel: CounterKernel) -> tuple[Limiter | None, str]:
    """The kernel's limiter by Nsight Compute's Speed Of Light rule, and why, in words."""
    sm = kernel.sm_throughput_pct
    memory = kernel.memory_throughput_pct
    if memory is None:
        memory = kernel.dram_throughput_pct
    if sm is None or memory is None:
        return None, "no Speed Of Light throughput in the report"
    figures = f"compute {sm:.0f}%, memory {memory:.0f}% of peak"
    if sm < LATENCY_BOUND_PCT and memory < LATENCY_BOUND_PCT:
        waves = kernel.waves_per_sm
        if waves is not None and waves < WAVES_THRESHOLD:
            return Limiter.LATENCY, f"{figures}; small grid: {waves:.2f} waves per SM"
        return Limiter.LATENCY, f"{figures}: both below {LATENCY_BOUND_PCT:.0f}%"
    if max(sm, memory) < NO_BOUND_PCT and abs(sm - memory) < BALANCED_POINTS:
        return Limiter.BALANCED, f"{figures}: within {BALANCED_POINTS:.0f} points"
    dram = kernel.dram_throughput_pct
    if memory > sm >= NO_BOUND_PCT and dram is not None and dram < LATENCY_BOUND_PCT:
        # ncu's memory throughput is its busiest memory unit (L1/shared, L2 or DRAM). With the
        # SMs near peak too and DRAM well below it, that traffic is the SMs' own on-chip operand
        # staging (a GEMM's tiles through shared memory): more DRAM bandwidth would not help.
        return Limiter.COMPUTE, f"{figures}, DRAM {dram:.0f}%: the memory traffic stays on chip"
    return (Limiter.COMPUTE if sm >= memory else Limiter.MEMORY), figures


def global_speedup_pct(kernel: CounterKernel) -> float | None:
    """The largest share of the kernel's duration one of its rules estimates could be saved."""
    found = [
        r.speedup_pct
        for r in kernel.rules
        if r.speedup_pct is not None and (r.speedup_type or "").lower() == "global"
    ]
    return max(found) if found else None


def summarize(counters: KernelCounters) -> CounterSummary:
    limits = [
        KernelLimit(k, *classify_kernel(k), speedup_pct=global_speedup_pct(k))
        for k in counters.kernels
    ]
    by_limiter = dict.fromkeys(Limiter, 0)
    for limit in limits:
        if limit.limiter is not None:
            by_limiter[limit.limiter] += limit.kernel.duration_ns or 0
    groups: dict[str, list[KernelLimit]] = {}
    for limit in limits:
        groups.setdefault(limit.kernel.name, []).append(limit)
    stats = sorted((_stat(name, group) for name, group in groups.items()), key=_cost)
    return CounterSummary(
        source=counters.source,
        format=counters.format,
        device_name=counters.device_name,
        devices=sorted({k.device for k in counters.kernels if k.device is not None}),
        kernels=len(limits),
        measured_ns=sum(k.duration_ns or 0 for k in counters.kernels),
        time_ns_by_limiter=by_limiter,
        unclassified=sum(1 for limit in limits if limit.limiter is None),
        stats=stats,
        limits=limits,
    )


def _cost(stat: CounterStat) -> tuple[int, str]:
    return (-(stat.total_ns or 0), stat.name)


def _stat(name: str, group: list[KernelLimit]) -> CounterStat:
    durations = [lim.kernel.duration_ns for lim in group]
    known = [d for d in durations if d is not None]
    weights = [float(d) if d else 1.0 for d in durations]

    def mean(values: list[float | None]) -> float | None:
        pairs = [(v, w) for v, w in zip(values, weights, strict=True) if v is not None]
        total = sum(w for _, w in pairs)
        return sum(v * w for v, w in pairs) / total if pairs and total else None

    kernels = [lim.kernel for lim in group]
    top = _dominant(group)
    rules = list(dict.fromkeys(f"{r.name}: {r.text}" for k in kernels for r in k.rules if r.text))
    speedups = [lim.speedup_pct for lim in group if lim.speedup_pct is not None]
    return CounterStat(
        name=name,
        count=len(group),
        total_ns=sum(known) if known else None,
        limiter=top.limiter,
        sm_throughput_pct=mean([k.sm_throughput_pct for k in kernels]),
        memory_throughput_pct=mean([k.memory_throughput_pct for k in kernels]),
        dram_throughput_pct=mean([k.dram_throughput_pct for k in kernels]),
        achieved_occupancy_pct=mean([k.achieved_occupancy_pct for k in kernels]),
        theoretical_occupancy_pct=mean([k.theoretical_occupancy_pct for k in kernels]),
        waves_per_sm=mean([k.waves_per_sm for k in kernels]),
        speedup_pct=max(speedups) if speedups else None,
        reason=top.reason,
        rules=rules,
    )


def _dominant(group: list[KernelLimit]) -> KernelLimit:
    """The launch whose limiter covers the most time in the group (ties: the first)."""
    time: dict[Limiter | None, int] = {}
    for lim in group:
        time[lim.limiter] = time.get(lim.limiter, 0) + (lim.kernel.duration_ns or 1)
    best = max(time, key=lambda key: (key is not None, time[key]))
    return next(lim for lim in group if lim.limiter is best)


# --- matching timeline kernels ------------------------------------------------------------------


class CounterIndex(msgspec.Struct, frozen=True):
    """Measured limiters by kernel name, at the three levels of exactness."""

    exact: dict[str, CounterStat]
    no_params: dict[str, CounterStat]
    base: dict[str, CounterStat]  # only bare names that one ncu kernel has

    def lookup(self, name: str) -> CounterStat | None:
        full = _normal(name)
        return (
            self.exact.get(full)
            or self.no_params.get(_strip_params(full))
            or self.base.get(base_name(name))
        )


def counter_index(summaries: list[CounterSummary]) -> CounterIndex:
    stats = [s for summary in summaries for s in summary.stats if s.limiter is not None]
    exact: dict[str, CounterStat] = {}
    no_params: dict[str, CounterStat] = {}
    bases: dict[str, list[CounterStat]] = {}
    for stat in stats:
        full = _normal(stat.name)
        exact.setdefault(full, stat)
        no_params.setdefault(_strip_params(full), stat)
        bases.setdefault(base_name(stat.name), []).append(stat)
    unique = {
        b: group[0]
        for b, group in bases.items()
        if b and len({_strip_params(_normal(s.name)) for s in group}) == 1
    }
    return CounterIndex(exact, no_params, unique)


class FamilyBound(msgspec.Struct, frozen=True):
    """One kernel family's bound as sampled hardware counters measured it (see
    ``analyses.counter_series``)."""

    name: str
    kernels: int  # launches
    time_ns: int  # their summed duration
    measured_ns: int  # of which the counters cover
    bound: str | None  # "memory", "compute", "latency"; None: not enough counters to say
    figures_pct: dict[str, float]  # counter -> time-weighted mean over the measured time
    evidence: str  # the figures and the rule, in words


class MeasuredBounds(msgspec.Struct, frozen=True):
    """Kernel bounds with the measured limiters in place where counters measured the kernels."""

    bounds: KernelBounds
    measured: NDArray[np.bool_]  # per row of ``bounds``: the bound came from ncu
    measured_ns: int  # summed duration of those kernels
    kernel_ns: int  # summed duration of all kernels on the device
    matched_names: list[str]  # the ncu kernel names that matched at least one kernel
    #: What measured them: "ncu" (Nsight Compute), "nsys GPU metrics" or "PM sampling" (hardware
    #: counters sampled over time, see ``analyses.counter_series``).
    source: str = "ncu"
    evidence: list[str] = msgspec.field(default_factory=list)  # the figures, per kernel family
    families: list[FamilyBound] = msgspec.field(default_factory=list)  # sampled counters only

    @property
    def measured_share_pct(self) -> float | None:
        return 100.0 * self.measured_ns / self.kernel_ns if self.kernel_ns else None

    @classmethod
    def replacing(
        cls,
        bounds: KernelBounds,
        ev: Events,
        bound: NDArray[np.uint8],
        measured: NDArray[np.bool_],
        kernel: NDArray[np.bool_],
        matched_names: list[str],
        source: str = "ncu",
        evidence: list[str] | None = None,
        families: list[FamilyBound] | None = None,
    ) -> MeasuredBounds:
        """``bounds`` with ``bound`` (per row) in their place, ``measured`` marking the rows whose
        bound counters gave, and the time per bound recomputed from the new bounds."""
        rows = bounds.rows
        dur = ev.dur_ns[rows]
        starts, ends = ev.start_ns[rows], ev.end_ns[rows]
        by_bound = {b: union(starts[bound == b], ends[bound == b]).total_ns for b in Bound}
        return cls(
            bounds=msgspec.structs.replace(bounds, bound=bound, time_ns_by_bound=by_bound),
            measured=measured,
            measured_ns=int(dur[measured].sum()),
            kernel_ns=int(dur[kernel].sum()),
            matched_names=matched_names,
            source=source,
            evidence=evidence or [],
            families=families or [],
        )


_TO_BOUND = {
    Limiter.COMPUTE: Bound.COMPUTE,
    Limiter.MEMORY: Bound.MEMORY,
    Limiter.LATENCY: Bound.LATENCY,
}


def as_bound(stat: CounterStat) -> Bound | None:
    """The timeline's :class:`Bound` for a measured limiter; balanced counts as the higher unit."""
    if stat.limiter is None:
        return None
    if stat.limiter is Limiter.BALANCED:
        sm = stat.sm_throughput_pct or 0.0
        memory = stat.memory_throughput_pct or stat.dram_throughput_pct or 0.0
        return Bound.COMPUTE if sm >= memory else Bound.MEMORY
    return _TO_BOUND[stat.limiter]


def apply_counters(bounds: KernelBounds, work: DeviceWork, index: CounterIndex) -> MeasuredBounds:
    """``bounds`` with every matching kernel's bound replaced by the one ncu measured."""
    trace = work.trace
    ev = trace.events
    rows = bounds.rows
    bound = bounds.bound.copy()
    measured = np.zeros(rows.size, dtype=bool)
    matched: dict[str, None] = {}
    kernel = (ev.kind[rows] == Kind.KERNEL) & (bound != Bound.COMMUNICATION)
    looked_up: dict[int, CounterStat | None] = {}
    for k in np.flatnonzero(kernel).tolist():
        name_id = int(ev.name_id[rows[k]])
        if name_id not in looked_up:
            looked_up[name_id] = index.lookup(trace.names[name_id])
        stat = looked_up[name_id]
        new = as_bound(stat) if stat is not None else None
        if stat is None or new is None:
            continue
        bound[k] = new
        measured[k] = True
        matched[stat.name] = None
    return MeasuredBounds.replacing(bounds, ev, bound, measured, kernel, list(matched))


# --- kernel names -------------------------------------------------------------------------------

_SPACE = re.compile(r"\s+")
_MANGLED_PART = re.compile(r"\d+")


def _normal(name: str) -> str:
    text = _SPACE.sub(" ", name.strip())
    text = text.removeprefix("void ")
    return text.replace(" >", ">").replace("< ", "<").replace(", ", ",")


def _strip_params(name: str) -> str:
    """The name without its trailing parameter list ``(...)``."""
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        ch = name[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
            if depth == 0:
                return name[:i] if i > 0 else name
        if depth == 0 and ch != ")":
            return name
    return name


def base_name(name: str) -> str:
    """The bare function name: ``void ns::f<4, T>(int)`` -> ``f``; ``_ZN2at6native3fooI...`` ->
    ``foo``."""
    text = name.strip()
    if text.startswith("_Z"):
        return _mangled_base(text) or text
    text = text.replace("(anonymous namespace)", "anon")
    kept: list[str] = []
    depth = 0
    for ch in text:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(depth - 1, 0)
        elif depth == 0:
            if ch == "(":
                break
            kept.append(ch)
    last = "".join(kept).strip().split("::")[-1].split()
    return last[-1] if last else ""


def _mangled_base(name: str) -> str | None:
    """The last source name of an Itanium-mangled ``_Z`` name, before template arguments."""
    i = 2
    nested = name[i : i + 1] == "N"
    i += 1 if nested else 0
    while i < len(name) and name[i] in "rVK":
        i += 1
    last = None
    while i < len(name):
        if name.startswith("St", i):
            i += 2
            continue
        match = _MANGLED_PART.match(name, i)
        if match is None:
            break
        length = int(match.group())
        start = match.end()
        last = name[start : start + length]
        i = start + length
        if not nested:
            break
    return last
