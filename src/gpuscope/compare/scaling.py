"""Runs of one job side by side: scaling over GPU counts, and sweeps over batch sizes.

Contract: :func:`scaling` and :func:`sweep` are pure functions of already-loaded
:class:`~gpuscope.model.Job` objects (one per run: a trace, or a folder of per-rank traces) and
typed options; they return typed reports and never print. A run without a device timeline raises
:class:`~gpuscope.errors.InputError` naming it.

Figures per run are per GPU and per step, averaged over the run's GPUs:

* step time = the mean of the per-step device windows (``analyses.timeline.step_breakdown``:
  profiler steps, repeated ranges or kernel cycles, each from the end of the previous step's
  device work to the end of its own; the first only marks where the second begins), the whole
  span as one step when there are not two steps. Device span / steps would leave out the idle time
  before the first step's work and after the last's: with few host-bound steps, most of a step;
* its split inside those windows: compute, exposed communication (communication with no compute
  alongside), idle, and other (memcpy/memset under neither): the four sum to the step time
  exactly;
* GPUs = the declared ``world_size``, else the number of ranks (devices) present.

**Scaling.** Runs must be one workload: their compute kernel mixes (share of compute time by
kernel name) must have :data:`MIN_SAME_WORKLOAD` in common with the run with the fewest GPUs,
else :class:`~gpuscope.errors.InputError` (unless ``force``: then a warning). Work per GPU per
step is ``units_per_step`` (per GPU), else the batch size read from recorded input shapes when
the units are samples or tokens, else one "GPU-step". Throughput =
work x GPUs / step time. Against the run with the fewest GPUs (n0): speed-up = throughput ratio,
efficiency = speed-up / (n / n0), and the loss per GPU-step = step time - ideal step time (the
base run's step scaled by the work per GPU), split into the growth of each of the four parts over
its own ideal: compute growth + exposed-communication growth + idle growth + other = loss. Below
``threshold_pct`` efficiency a ``latency_mirage`` finding names the largest growth and the dollars
per unit of work at each size.

**Sweep.** Batch sizes come from the options, else the leading dimension most operators' inputs
share (recorded shapes), else the file or folder name (``bs32``, ``batch_32``); the source is
reported. Throughput = batch x GPUs / step time. The knee is the smallest batch within
``tolerance_pct`` (5%) of the best throughput, or, under a latency limit, the best-throughput
batch whose step fits it. When the knee's busy time is mostly memory-bound (kernel bounds), a
``bloated_context`` finding reports the latency the larger batches add and the memory the knee's
batch frees against the largest batch: from sampled device memory when recorded, else estimated
from recorded input shapes (the first operand of every kernel-launching operator in one step:
activations, which scale with batch); ``memory_source`` says which.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import msgspec
import numpy as np

from gpuscope.analyses.bounds import Bound, kernel_bounds
from gpuscope.analyses.counter_series import (
    apply_counter_series,
    device_series,
    dram_pct_while_busy,
)
from gpuscope.analyses.counters import LATENCY_BOUND_PCT
from gpuscope.analyses.intervals import Intervals, covered_ns, difference
from gpuscope.analyses.timeline import DeviceWork, WorkClass, device_work, step_breakdown
from gpuscope.diagnosis import money
from gpuscope.errors import InputError
from gpuscope.facts import GpuFacts, gpu_hour_price, match_device
from gpuscope.model import Job, Kind, Trace
from gpuscope.units import gib, ms, signed_ms

#: Busy time this memory-bound (share of busy) makes the knee Bloated Context.
MEMORY_BOUND_PCT = 50.0
#: Share of compute-kernel time two runs must have in common to count as one workload (scale).
MIN_SAME_WORKLOAD = 0.5
_STABLE_DIGITS = re.compile(r"\d+")
_BATCH_IN_NAME = re.compile(r"(?:^|[^a-z0-9])(?:bs|batch|batch_?size|b)[-_=]?(\d+)(?![0-9])", re.I)
_ELEMENT_BYTES = {
    "double": 8,
    "float": 4,
    "c10::half": 2,
    "c10::bfloat16": 2,
    "long int": 8,
    "long": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
}


# --- per run ------------------------------------------------------------------------------------


class StepSplit(msgspec.Struct, frozen=True):
    """One GPU's step, split so that the parts sum to ``step_ns``."""

    step_ns: float
    compute_ns: float
    exposed_communication_ns: float
    idle_ns: float
    other_ns: float  # memcpy and memset not under compute or communication


class RunFigures(msgspec.Struct, frozen=True):
    source: str
    gpus: int
    gpus_source: str  # "world_size" or "ranks present"
    steps: int
    split: StepSplit
    facts: GpuFacts | None


def run_figures(job: Job) -> RunFigures:
    """Per GPU and step, the mean over the run's devices."""
    if not job.traces:
        raise InputError(job.source, "no device timeline in this run (a trace is needed)")
    parts: list[StepSplit] = []
    counts: list[int] = []
    facts: GpuFacts | None = None
    for trace in job.traces:
        for device in trace.device_ids:
            split, steps = _device_split(device_work(trace, device))
            parts.append(split)
            counts.append(steps)
            info = trace.devices.get(device)
            if facts is None and info is not None:
                facts = match_device(info.name, num_sms=info.num_sms)
    declared = max((t.world_size or 0 for t in job.traces), default=0)
    return RunFigures(
        source=job.source,
        gpus=declared or len(parts),
        gpus_source="world_size" if declared else "ranks present",
        steps=max(counts),
        split=_mean_split(parts),
        facts=facts,
    )


def _device_split(work: DeviceWork) -> tuple[StepSplit, int]:
    """One device's mean step and its split, over its whole steps on the device
    (``timeline.step_breakdown``: each from the end of the previous step's work to the end of its
    own; the first only marks where the second begins). The device span divided by the step
    count would leave out the idle time before the first step's work and after the last's: with
    few host-bound steps that is most of a step. Without two steps, the whole span is one."""
    steps = step_breakdown(work)
    if len(steps) >= 2:
        lo, hi, count = steps[1].start_ns, steps[-1].end_ns, len(steps) - 1
    else:
        lo, hi, count = work.span_start_ns, work.span_end_ns, 1
    window_lo = np.array([lo], dtype=np.int64)
    window_hi = np.array([hi], dtype=np.int64)

    def inside(iv: Intervals) -> float:
        return float(covered_ns(iv, window_lo, window_hi)[0])

    c = work.by_class
    compute = inside(c[WorkClass.COMPUTE])
    exposed = inside(difference(c[WorkClass.COMMUNICATION], c[WorkClass.COMPUTE]))
    busy = inside(work.busy)
    other = busy - compute - exposed  # memcpy and memset under neither
    idle = (hi - lo) - busy
    split = StepSplit(
        (hi - lo) / count, compute / count, exposed / count, idle / count, other / count
    )
    return split, max(len(steps), 1)


def _mean_split(parts: list[StepSplit]) -> StepSplit:
    n = len(parts)
    return StepSplit(
        sum(p.step_ns for p in parts) / n,
        sum(p.compute_ns for p in parts) / n,
        sum(p.exposed_communication_ns for p in parts) / n,
        sum(p.idle_ns for p in parts) / n,
        sum(p.other_ns for p in parts) / n,
    )


class RunFinding(msgspec.Struct, frozen=True):
    pattern: str  # latency_mirage | bloated_context
    cause: str  # scaling_efficiency | batch_knee
    title: str
    evidence: list[str]
    fix: str


# --- scaling ------------------------------------------------------------------------------------


class ScalingOptions(msgspec.Struct, frozen=True):
    units_per_step: float | None = None  # work units one GPU processes per step
    units: str | None = None  # what a unit is: "samples", "tokens", "images"...
    threshold_pct: float = 80.0
    gpu_hour_usd: float | None = None
    force: bool = False  # compare runs whose kernel mixes differ (see :func:`same_workload`)


class ScalingPoint(msgspec.Struct, frozen=True):
    source: str
    gpus: int
    gpus_source: str
    steps: int
    units_per_step_per_gpu: float
    step_ns: float
    throughput_per_s: float  # units per second, whole job
    speedup: float
    efficiency_pct: float
    split: StepSplit
    loss: StepSplit | None  # growth over the ideal per GPU-step; None for the base run
    usd_per_unit: float | None


class ScalingReport(msgspec.Struct, frozen=True):
    units: str
    units_source: str
    threshold_pct: float
    gpu_hour_usd: float | None
    price_source: str
    points: list[ScalingPoint]  # fewest GPUs first
    findings: list[RunFinding]
    warnings: list[str]


def scaling(jobs: list[Job], options: ScalingOptions | None = None) -> ScalingReport:
    options = options or ScalingOptions()
    runs = sorted((run_figures(j) for j in jobs), key=lambda r: r.gpus)
    workload_warnings = _check_workloads(jobs, runs[0].source, options.force)
    units, source, per_gpu = _units(jobs, runs, options)
    price, price_source = _price(runs, options.gpu_hour_usd)
    warnings = list(workload_warnings)
    counts = [r.gpus for r in runs]
    if len(set(counts)) < len(counts):
        warnings.append(f"several runs have the same GPU count ({counts}): compare like with like")
    base, base_work = runs[0], per_gpu[runs[0].source]
    base_throughput = base_work * base.gpus / (base.split.step_ns / 1e9)
    points: list[ScalingPoint] = []
    for run in runs:
        work = per_gpu[run.source]
        throughput = work * run.gpus / (run.split.step_ns / 1e9)
        speedup = throughput / base_throughput
        ratio = work / base_work
        points.append(
            ScalingPoint(
                source=run.source,
                gpus=run.gpus,
                gpus_source=run.gpus_source,
                steps=run.steps,
                units_per_step_per_gpu=work,
                step_ns=run.split.step_ns,
                throughput_per_s=throughput,
                speedup=speedup,
                efficiency_pct=100.0 * speedup / (run.gpus / base.gpus),
                split=run.split,
                loss=None if run is base else _growth(run.split, base.split, ratio),
                usd_per_unit=money.per_unit(price, run.gpus, throughput),
            )
        )
    found = _scaling_findings(points, options.threshold_pct, units)
    return ScalingReport(
        units, source, options.threshold_pct, price, price_source, points, found, warnings
    )


def kernel_mix(job: Job) -> dict[str, float]:
    """Share of the run's compute-kernel time by kernel name (ids taken out): what the job runs.
    Communication is left out: its kernels and their share change with the GPU count."""
    totals: dict[str, float] = {}
    for trace in job.traces:
        ev = trace.events
        for device in trace.device_ids:
            work = device_work(trace, device)
            rows = work.rows[work.work_class == WorkClass.COMPUTE]
            rows = rows[ev.kind[rows] == Kind.KERNEL]
            for name_id, dur in zip(
                ev.name_id[rows].tolist(), ev.dur_ns[rows].tolist(), strict=True
            ):
                name = _STABLE_DIGITS.sub("N", trace.names[name_id])
                totals[name] = totals.get(name, 0.0) + dur
    whole = sum(totals.values()) or 1.0
    return {name: t / whole for name, t in totals.items()}


def same_workload(a: dict[str, float], b: dict[str, float]) -> float:
    """The share of compute time the two kernel mixes have in common (0-1): the sum over kernel
    names of the smaller share. The same job at another GPU count runs the same kernels in about
    the same proportions (per-GPU shapes shift them a little); another job runs other kernels."""
    return sum(min(share, b.get(name, 0.0)) for name, share in a.items())


def _check_workloads(jobs: list[Job], base_source: str, force: bool) -> list[str]:
    """Refuse runs whose kernel mix differs from the base run's (fewest GPUs) unless ``force``:
    efficiency between different workloads means nothing (it can exceed 100% many times)."""
    mixes = {job.source: kernel_mix(job) for job in jobs}
    base = mixes[base_source]
    warnings = []
    for job in jobs:
        if job.source == base_source:
            continue
        common = same_workload(base, mixes[job.source])
        if common >= MIN_SAME_WORKLOAD:
            continue
        message = (
            f"not the same workload as {base_source}: only {100 * common:.0f}% of the compute"
            " kernel time is in kernels both runs launch"
        )
        if not force:
            raise InputError(job.source, message + " (pass --force to compare anyway)")
        warnings.append(f"{job.source}: {message}; compared anyway (--force)")
    return warnings


def _growth(split: StepSplit, base: StepSplit, ratio: float) -> StepSplit:
    """Each part's growth over the base run's, scaled to this run's work per GPU."""
    return StepSplit(
        split.step_ns - base.step_ns * ratio,
        split.compute_ns - base.compute_ns * ratio,
        split.exposed_communication_ns - base.exposed_communication_ns * ratio,
        split.idle_ns - base.idle_ns * ratio,
        split.other_ns - base.other_ns * ratio,
    )


def _units(
    jobs: list[Job], runs: list[RunFigures], options: ScalingOptions
) -> tuple[str, str, dict[str, float]]:
    """What a unit of work is, where the count came from, and units per GPU per step by run."""
    if options.units_per_step is not None:
        name = options.units or "units"
        return name, "--units-per-step (per GPU)", {r.source: options.units_per_step for r in runs}
    if options.units in ("samples", "tokens", "sequences"):
        counts: dict[str, float] = {}
        for job in jobs:
            shape = _batch_shape(job.traces)
            if shape is None:
                break
            batch, seq = shape
            counts[job.source] = float(batch * seq if options.units == "tokens" else batch)
        else:
            return options.units, "batch size from recorded input shapes (per GPU)", counts
    return (
        "GPU-steps",
        "one unit per GPU per step (pass --units-per-step)",
        {r.source: 1.0 for r in runs},
    )


def _price(runs: list[RunFigures], override: float | None) -> tuple[float | None, str]:
    return gpu_hour_price((r.facts for r in runs), override, purpose="price a unit of work")


_GROWTH_FIX = {
    "exposed communication": (
        "Communication grows with the GPU count and is not hidden: overlap it with compute (DDP"
        " `bucket_cap_mb`, FSDP prefetching), issue fewer and larger collectives, use a faster"
        " link or a hierarchical algorithm across nodes, or stop at the GPU count where the cost"
        " per unit is lowest."
    ),
    "idle": (
        "Idle time grows with the GPU count: ranks wait for each other (a straggler, uneven work)"
        " or for their hosts; run `gpuscope diagnose` on the largest run's folder to see which."
    ),
    "compute": (
        "Compute per GPU grows faster than the work per GPU: smaller per-GPU shapes run less"
        " efficiently, or work is replicated on every rank; keep the per-GPU batch large enough."
    ),
    "other": "Copies grow with the GPU count: check host-device and peer copies per step.",
}


def _scaling_findings(points: list[ScalingPoint], threshold: float, units: str) -> list[RunFinding]:
    below = [p for p in points if p.loss is not None and p.efficiency_pct < threshold]
    if not below:
        return []
    first, worst = below[0], below[-1]
    assert worst.loss is not None
    parts = {
        "compute": worst.loss.compute_ns,
        "exposed communication": worst.loss.exposed_communication_ns,
        "idle": worst.loss.idle_ns,
        "other": worst.loss.other_ns,
    }
    largest = max(parts, key=lambda k: parts[k])
    drop = f"efficiency falls below {threshold:.0f}% at {first.gpus} GPUs"
    if first is worst:
        drop += f": {worst.efficiency_pct:.0f}%"
    else:
        drop += f" ({first.efficiency_pct:.0f}%) and reaches {worst.efficiency_pct:.0f}% at"
        drop += f" {worst.gpus} GPUs"
    evidence = [
        f"{drop} (speed-up {worst.speedup:.2f}x on {worst.gpus / points[0].gpus:g}x the GPUs)",
        f"at {worst.gpus} GPUs each GPU-step is {ms(worst.loss.step_ns)} over ideal: "
        + ", ".join(f"{k} {signed_ms(v)}" for k, v in parts.items()),
    ]
    priced = [p for p in points if p.usd_per_unit is not None]
    if priced:
        evidence.append(
            f"cost per 1M {units}: "
            + ", ".join(f"{p.gpus} GPUs ${(p.usd_per_unit or 0) * 1e6:,.2f}" for p in priced)
        )
    return [
        RunFinding(
            pattern="latency_mirage",
            cause="scaling_efficiency",
            title=f"more GPUs buy less: {largest} grows with the GPU count",
            evidence=evidence,
            fix=_GROWTH_FIX[largest],
        )
    ]


# --- sweep --------------------------------------------------------------------------------------


class SweepOptions(msgspec.Struct, frozen=True):
    batch_sizes: tuple[int, ...] | None = None  # one per run, in the order given
    max_latency_ms: float | None = None
    tolerance_pct: float = 5.0


class SweepPoint(msgspec.Struct, frozen=True):
    source: str
    batch: int
    gpus: int
    steps: int
    step_ns: float
    throughput_per_s: float  # samples per second, whole job
    relative_pct: float  # of the best throughput
    busy_pct: float
    memory_bound_pct: float | None  # of busy time, at this batch
    memory_bytes: int | None
    #: DRAM throughput while busy, % of peak, as hardware counters measured it (None: no counters)
    dram_pct: float | None = None


class SweepReport(msgspec.Struct, frozen=True):
    batch_source: str
    max_latency_ms: float | None
    knee_batch: int
    knee_rule: str
    best_batch: int
    points: list[SweepPoint]  # by batch
    memory_source: str
    memory_freed_bytes: int | None
    memory_compared_batch: int | None
    findings: list[RunFinding]
    warnings: list[str]


def sweep(jobs: list[Job], options: SweepOptions | None = None) -> SweepReport:
    options = options or SweepOptions()
    batches, batch_source = _batches(jobs, options.batch_sizes)
    memory_source = _memory_source(jobs)
    rows = []
    for job, batch in zip(jobs, batches, strict=True):
        run = run_figures(job)
        throughput = batch * run.gpus / (run.split.step_ns / 1e9)
        rows.append((batch, job, run, throughput))
    rows.sort(key=lambda r: r[0])
    best = max(r[3] for r in rows)
    points = [
        SweepPoint(
            source=run.source,
            batch=batch,
            gpus=run.gpus,
            steps=run.steps,
            step_ns=run.split.step_ns,
            throughput_per_s=throughput,
            relative_pct=100.0 * throughput / best,
            busy_pct=100.0 * (1.0 - run.split.idle_ns / run.split.step_ns),
            memory_bound_pct=_memory_bound_pct(job),
            memory_bytes=_memory_bytes(job, memory_source),
            dram_pct=_dram_pct(job),
        )
        for batch, job, run, throughput in rows
    ]
    knee, rule, warnings = _knee(points, options)
    best_batch = max(points, key=lambda p: p.throughput_per_s).batch
    largest = points[-1]
    knee_point = next(p for p in points if p.batch == knee)
    freed = None
    # Memory is compared only between two different batches, and only when the smaller one
    # holds less: "batch 64 instead of 64 frees 0.00 GiB" says nothing.
    if (
        knee_point.batch != largest.batch
        and knee_point.memory_bytes is not None
        and largest.memory_bytes is not None
        and largest.memory_bytes > knee_point.memory_bytes
    ):
        freed = largest.memory_bytes - knee_point.memory_bytes
    top = max(points, key=lambda p: p.throughput_per_s)
    if top.throughput_per_s > knee_point.throughput_per_s * (1 + options.tolerance_pct / 100):
        # A latency limit, not a throughput plateau, set the knee: larger batches do buy
        # throughput, and the rule says how much; "buys latency, not throughput" would contradict
        # the table.
        rule += (
            f"; batch {top.batch} gives {top.throughput_per_s / knee_point.throughput_per_s:,.1f}x"
            f" its throughput at {ms(top.step_ns)} a step"
        )
        found = []
    else:
        found = _sweep_findings(knee_point, largest, freed, memory_source)
    return SweepReport(
        batch_source=batch_source,
        max_latency_ms=options.max_latency_ms,
        knee_batch=knee,
        knee_rule=rule,
        best_batch=best_batch,
        points=points,
        memory_source=memory_source,
        memory_freed_bytes=freed,
        memory_compared_batch=largest.batch if freed is not None else None,
        findings=found,
        warnings=warnings,
    )


def _knee(points: list[SweepPoint], options: SweepOptions) -> tuple[int, str, list[str]]:
    tolerance = options.tolerance_pct
    if options.max_latency_ms is not None:
        limit_ns = options.max_latency_ms * 1e6
        fitting = [p for p in points if p.step_ns <= limit_ns]
        if fitting:
            top = max(fitting, key=lambda p: (p.throughput_per_s, -p.batch))
            rule = f"the best throughput with a step under {options.max_latency_ms:g} ms"
            return top.batch, rule, []
        warning = f"no batch size keeps a step under {options.max_latency_ms:g} ms"
        return points[0].batch, "the smallest batch (none fits the latency limit)", [warning]
    knee = next(p for p in points if p.relative_pct >= 100.0 - tolerance)
    return knee.batch, f"the smallest batch within {tolerance:g}% of the best throughput", []


def _plateau(knee: SweepPoint) -> str | None:
    """Why throughput stops growing past the knee, from the counters measured there: DRAM
    saturated (the kernels move bytes as fast as DRAM allows, so a larger batch only queues more
    bytes), or not saturated while the GPU waits between kernels (launch- or host-limited: a
    larger batch cannot help a GPU that is idle for the host), or neither (the kernels' own
    latency or compute). None without counters."""
    if knee.dram_pct is None:
        return None
    measured = f"DRAM at {knee.dram_pct:.0f}% of peak bandwidth while busy (hardware counters)"
    if knee.dram_pct >= LATENCY_BOUND_PCT:
        return f"at batch {knee.batch} DRAM is saturated: {measured}"
    if knee.busy_pct < BUSY_PLATEAU_PCT:
        return (
            f"at batch {knee.batch} the run is launch- or host-limited: {measured}, the GPU busy"
            f" only {knee.busy_pct:.0f}% of a step"
        )
    return (
        f"at batch {knee.batch} neither DRAM nor the host limits it: {measured}, the GPU busy"
        f" {knee.busy_pct:.0f}% of a step (the kernels' compute or latency)"
    )


#: Below this busy share of a step, a plateau is the host's: the GPU waits between kernels.
BUSY_PLATEAU_PCT = 80.0


def _sweep_findings(
    knee: SweepPoint, largest: SweepPoint, freed: int | None, memory_source: str
) -> list[RunFinding]:
    plateau = _plateau(knee)
    if knee.memory_bound_pct is None or knee.memory_bound_pct < MEMORY_BOUND_PCT:
        if plateau is None or knee.batch == largest.batch:
            return []
        return [
            RunFinding(
                pattern="ghost_gpu",
                cause="batch_knee",
                title=f"past batch {knee.batch} throughput stops growing, and DRAM is not why",
                evidence=[plateau],
                fix=(
                    f"Batch {knee.batch} is as fast as larger ones: cut the host's work per step"
                    " (CUDA graphs, fewer and fused launches, a faster data path) before growing"
                    " the batch."
                ),
            )
        ]
    evidence = [
        f"at batch {knee.batch} the busy time is {knee.memory_bound_pct:.0f}% memory-bound:"
        " DRAM bandwidth, not compute, bounds a step",
        f"batch {largest.batch} gives {largest.relative_pct - knee.relative_pct:+.1f} percentage"
        " points of"
        f" throughput for {signed_ms(largest.step_ns - knee.step_ns)} per step"
        f" ({knee.step_ns / 1e6:,.2f} -> {ms(largest.step_ns)})",
    ]
    if plateau is not None:
        evidence.append(plateau)
    if freed is not None and knee.batch != largest.batch:
        evidence.append(
            f"batch {knee.batch} instead of {largest.batch} frees about {gib(freed)}"
            f" ({memory_source})"
        )
    return [
        RunFinding(
            pattern="bloated_context",
            cause="batch_knee",
            title=f"past batch {knee.batch} a larger batch buys latency, not throughput",
            evidence=evidence,
            fix=(
                f"Serve or train at batch {knee.batch}: larger batches only queue more bytes behind"
                " the same memory bandwidth. Use the freed memory for more replicas or a longer"
                " context, and cut the bytes per step (quantised weights / KV cache, fused"
                " kernels) to move the knee."
            ),
        )
    ]


def _batches(jobs: list[Job], given: tuple[int, ...] | None) -> tuple[list[int], str]:
    if given is not None:
        if len(given) != len(jobs):
            raise InputError(
                jobs[0].source, f"{len(given)} batch sizes for {len(jobs)} runs: give one per run"
            )
        return list(given), "--batch-sizes"
    from_shapes = [_batch_shape(j.traces) for j in jobs]
    if all(s is not None for s in from_shapes):
        batches = [s[0] for s in from_shapes if s is not None]
        if len(set(batches)) == len(batches):
            return batches, "recorded input shapes"
    from_names = [batch_from_name(j.source) for j in jobs]
    if all(b is not None for b in from_names):
        return [b for b in from_names if b is not None], "file names"
    unknown = next(j.source for j, b in zip(jobs, from_names, strict=True) if b is None)
    raise InputError(
        unknown,
        "cannot tell its batch size (no input shapes, no 'bs32' in the name): pass --batch-sizes",
    )


def batch_from_name(path: str) -> int | None:
    """``bs32``, ``batch_32``, ``batch-size=32`` in a file or folder name."""
    name = Path(path).name
    for stem in (name, Path(path).parent.name):
        match = _BATCH_IN_NAME.search(stem)
        if match:
            return int(match.group(1))
    return None


def _batch_shape(traces: list[Trace]) -> tuple[int, int] | None:
    """(batch, sequence) from the leading dimensions most operators' inputs share: the first
    input of operators taking a tensor of three or more dimensions ([B, S, H], [B, heads, S, D])."""
    leading: Counter[tuple[int, int]] = Counter()
    for trace in traces:
        ev = trace.events
        for row, args in ev.extra.items():
            dims = args.get("input_dims")
            if ev.kind[row] != Kind.CPU_OP or not isinstance(dims, list) or not dims:
                continue
            first = dims[0]
            if (
                isinstance(first, list)
                and len(first) >= 3
                and all(isinstance(d, int) for d in first)
            ):
                seq = first[1] if len(first) == 3 else first[2]
                leading[(first[0], seq)] += 1
    if not leading:
        return None
    return leading.most_common(1)[0][0]


def _memory_source(jobs: list[Job]) -> str:
    if all(any(g.memory_used_bytes is not None for s in j.samples for g in s.gpus) for j in jobs):
        return "sampled device memory (peak used)"
    return "estimated from recorded input shapes: activations of one step"


def _memory_bytes(job: Job, source: str) -> int | None:
    if source.startswith("sampled"):
        peaks = [
            float(np.nanmax(g.memory_used_bytes))
            for s in job.samples
            for g in s.gpus
            if g.memory_used_bytes is not None and g.memory_used_bytes.size
        ]
        return round(max(peaks)) if peaks else None
    estimates = [_activation_bytes(t) for t in job.traces]
    known = [e for e in estimates if e is not None]
    return max(known) if known else None


def _activation_bytes(trace: Trace) -> int | None:
    """Bytes of the first operand of every kernel-launching operator inside the first step."""
    ev = trace.events
    launched = set(ev.external_id[ev.of_kind(Kind.KERNEL)].tolist())
    lo, hi = (trace.steps[0].start_ns, trace.steps[0].end_ns) if trace.steps else (None, None)
    total = 0
    seen = False
    for row, args in ev.extra.items():
        if ev.kind[row] != Kind.CPU_OP or int(ev.external_id[row]) not in launched:
            continue
        if lo is not None and not lo <= int(ev.start_ns[row]) < (hi or 0):
            continue
        dims, types = args.get("input_dims"), args.get("input_types") or []
        if not isinstance(dims, list) or not dims or not isinstance(dims[0], list):
            continue
        first = dims[0]
        if not first or not all(isinstance(d, int) for d in first):
            continue
        kind = str(types[0]).lower() if types else ""
        total += int(np.prod(first)) * _ELEMENT_BYTES.get(kind, 4)
        seen = True
    return total if seen else None


def _memory_bound_pct(job: Job) -> float | None:
    """Memory-bound share of busy time, over the run's devices (measured by hardware counters
    where they cover kernels, see ``analyses.counter_series``)."""
    memory, busy = 0, 0
    for trace in job.traces:
        for device in trace.device_ids:
            work = device_work(trace, device)
            info = trace.devices.get(device)
            facts = match_device(info.name, num_sms=info.num_sms) if info else None
            bounds = kernel_bounds(work, facts)
            series = device_series(trace.counters, device) if trace.counters else []
            measured = apply_counter_series(bounds, work, series) if series else None
            if measured is not None:
                bounds = measured.bounds
            memory += bounds.time_ns_by_bound[Bound.MEMORY]
            busy += work.busy.total_ns
    return 100.0 * memory / busy if busy else None


def _dram_pct(job: Job) -> float | None:
    """DRAM throughput while busy (% of peak) as counters measured it, busy-time weighted over
    the run's devices; None when no device has DRAM counters."""
    weighted, weights = 0.0, 0
    for trace in job.traces:
        if not trace.counters:
            continue
        for device in trace.device_ids:
            work = device_work(trace, device)
            pct = dram_pct_while_busy(work, device_series(trace.counters, device))
            if pct is not None:
                weighted += pct * work.busy.total_ns
                weights += work.busy.total_ns
    return weighted / weights if weights else None
