"""Deterministic simulator that writes real PyTorch profiler (Kineto) traces with known answers.

Contract (the records live in :mod:`~gpuscope.testing.config` and
:mod:`~gpuscope.testing.truth`, the simulation in ``_sim``/``_program``/``_output``; this module
re-exports them all):

* :func:`generate` simulates one rank of a training (or inference) loop and returns a
  :class:`GeneratedTrace`: ``.document`` is the Chrome-trace dict PyTorch 2.x's profiler writes
  (float µs ``ts``/``dur`` with three decimals, ``baseTimeNanoseconds``, ``schemaVersion`` 1,
  ``deviceProperties``, ``distributedInfo``, ``traceName``, ``M`` metadata, the ``Trace`` span and
  the window instants); ``.truth`` is the :class:`Truth` computed from the simulation's own
  schedule with plain interval code (never :mod:`gpuscope.analyses`).
* :func:`generate_job` simulates every rank of a job; collectives couple the ranks (a collective
  kernel ends when the last rank has joined plus its transfer time).
* Same config, same bytes: the only randomness is ``random.Random`` seeded by (seed, rank), and
  :meth:`GeneratedTrace.write` gzips with ``mtime=0``.
* Times are integer nanoseconds on the trace's own clock, so every truth time equals
  ``round(ts * 1000)`` of the document's events. Each rank's clock is offset by a few µs.
* Timing model: a small discrete-event simulation. The host thread advances by each op's CPU time
  (dispatch overhead, launch call); device work starts at ``max(launch + latency, end of the
  previous work on its stream, end of any cross-stream wait)``. Syncs block the host until the
  queue drains.
* Streams: compute work on ``compute_stream`` (7), NCCL kernels on ``comm_stream`` (20); the
  device index (kernel ``pid``, ``args.device``) is the rank.
* Truth gaps: each GPU-idle interval (no kernel, memcpy or memset on any stream) that an injection
  caused, attributed by what the host was doing (a sliver after the host work, such as the next
  launch, belongs to the same gap), located at the user's Python line ("train.py:57").
  ``communication_wait`` gaps are different: the compute stream waits for the NCCL stream, so
  the device runs only communication during them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec
from msgspec.structs import replace

from gpuscope.testing._output import Interval, ground_truth, kineto_document
from gpuscope.testing._program import run_program
from gpuscope.testing._sim import RUNTIME_NAMES, Sim
from gpuscope.testing.config import (
    CAUSES,
    DEVICES,
    STARTUP_KINDS,
    AllocatorChurn,
    Checkpoint,
    DeviceSpec,
    ExposedCollective,
    Fp32Gemm,
    GeneratorConfig,
    HostSync,
    Injection,
    MemoryBoundChain,
    PageableH2DCopy,
    SlowDataLoader,
    Startup,
    Straggler,
    TinyKernels,
)
from gpuscope.testing.truth import (
    DeviceTruth,
    Gap,
    GeneratedTrace,
    Truth,
)

# The whole generator's public surface, so that one import serves a test.
__all__ = [
    "CAUSES",
    "DEVICES",
    "FIXABLE",
    "RUNTIME_NAMES",
    "STARTUP_KINDS",
    "AllocatorChurn",
    "BatchSweep",
    "Checkpoint",
    "DeviceSpec",
    "DeviceTruth",
    "ExposedCollective",
    "Fp32Gemm",
    "Gap",
    "GeneratedTrace",
    "GeneratorConfig",
    "HostSync",
    "Injection",
    "Interval",
    "MemoryBoundChain",
    "PageableH2DCopy",
    "ScalingSeries",
    "SlowDataLoader",
    "Startup",
    "Straggler",
    "TinyKernels",
    "Truth",
    "apply_fix",
    "generate",
    "generate_batch_sweep",
    "generate_job",
    "generate_scaling_series",
]


# --- entry points -----------------------------------------------------------------------------


def _clock_offset_ns(rank: int) -> int:
    """Ranks' clocks disagree by a few µs, as separate hosts' do."""
    return rank * 2_750 + (rank % 3) * 410


def _simulate(cfg: GeneratorConfig, coll_end: Mapping[int, int]) -> Sim:
    sim = Sim(cfg, coll_end)
    run_program(sim)
    return sim


def _package(sim: Sim) -> GeneratedTrace:
    offset = _clock_offset_ns(sim.cfg.rank)
    return GeneratedTrace(document=kineto_document(sim, offset), truth=ground_truth(sim, offset))


def generate(config: GeneratorConfig) -> GeneratedTrace:
    """Simulate one rank (collectives, if any, take their transfer time only)."""
    return _package(_simulate(config, {}))


def generate_job(config: GeneratorConfig, world_size: int = 8) -> list[GeneratedTrace]:
    """Simulate every rank of a ``world_size`` job; trace ``i`` is rank ``i`` on device ``i``.

    A collective ends when its last rank has started it plus its transfer time, so a straggler's
    late arrival shows as longer NCCL kernels on the other ranks. Solved by fixed-point iteration:
    end times only grow, and each pass settles at least one more collective."""
    stragglers = [s.rank for s in config.inject if isinstance(s, Straggler)]
    if world_size < 2 or any(not 0 <= rank < world_size for rank in stragglers):
        raise ValueError("generate_job: need world_size >= 2 and straggler ranks below it")
    configs = [replace(config, rank=r, world_size=world_size) for r in range(world_size)]
    ends: dict[int, int] = {}
    sims = [_simulate(c, ends) for c in configs]
    for _ in range(len(sims[0].coll_base) + 1):
        new_ends = {
            k: max(s.coll_starts[k] for s in sims) + base
            for k, base in enumerate(sims[0].coll_base)
        }
        if new_ends == ends:
            break
        ends = new_ends
        sims = [_simulate(c, ends) for c in configs]
    return [_package(sim) for sim in sims]


# --- what-if truth: the same run with one pathology fixed ------------------------------------

#: Fixes :func:`apply_fix` knows, by the cause a finding names.
FIXABLE = (
    "data_loader",
    "host_sync",
    "h2d_copy",
    "launch_overhead",
    "allocator",
    "fp32_gemm",
    "exposed_communication",
    "straggler",
)


def apply_fix(config: GeneratorConfig, cause: str) -> GeneratorConfig:
    """The same run (same seed) with the pathology behind ``cause`` fixed as its fix says: the
    data loader keeps up (a prefetched batch), the sync goes (the copy stays), the batch comes
    from pinned memory asynchronously, the tiny kernels replay from a CUDA graph, the caching
    allocator serves the allocations, the GEMMs run on tensor cores (bf16), the exposed
    all-reduce no longer waits for compute, the straggler runs as fast as the others."""
    if cause not in FIXABLE:
        raise ValueError(f"apply_fix: no fix for {cause!r}; known: {', '.join(FIXABLE)}")
    dropped = {
        "data_loader": SlowDataLoader,
        "fp32_gemm": Fp32Gemm,
        "straggler": Straggler,
    }.get(cause)
    flagged = {
        "host_sync": HostSync,
        "h2d_copy": PageableH2DCopy,
        "launch_overhead": TinyKernels,
        "allocator": AllocatorChurn,
        "exposed_communication": ExposedCollective,
    }.get(cause)
    inject: list[Injection] = []
    for injection in config.inject:
        if dropped is not None and isinstance(injection, dropped):
            continue
        fix = flagged is not None and isinstance(injection, flagged)
        inject.append(replace(injection, fixed=True) if fix else injection)
    return replace(config, inject=tuple(inject))


# --- series of runs: scaling over GPU counts, sweeps over batch sizes -------------------------


def _step_ns(traces: Sequence[GeneratedTrace], steps: int) -> float:
    """Mean over ranks of device span / steps: the per-GPU step time the series are judged by."""
    return sum(t.truth.span_ns for t in traces) / len(traces) / steps


class ScalingSeries(msgspec.Struct, frozen=True):
    """The same training job at several GPU counts; its known answers come from the schedule.

    Each step ends with an all-reduce after backward that nothing overlaps and whose time grows
    by ``comm_ms_per_peer`` per extra GPU (a slow network's latency term), so the per-GPU step
    grows with the GPU count while the work per GPU stays the same (weak scaling)."""

    runs: dict[int, list[GeneratedTrace]]  # by GPU count; rank order
    steps: int
    step_ns: dict[int, float]  # per GPU: mean device span / steps
    efficiency_pct: dict[int, float]  # step time at the fewest GPUs / step time here
    threshold_pct: float
    knee_gpus: int | None  # the fewest GPUs whose efficiency falls below the threshold

    def write(self, folder: str | Path, *, compress: bool = True) -> dict[int, Path]:
        """``folder/gpus{n}/rank{r}.json.gz`` (``.json`` without ``compress``) per run; returns
        the run folders by GPU count."""
        suffix = ".json.gz" if compress else ".json"
        written: dict[int, Path] = {}
        for gpus, traces in self.runs.items():
            run = Path(folder) / f"gpus{gpus}"
            run.mkdir(parents=True, exist_ok=True)
            for rank, trace in enumerate(traces):
                trace.write(run / f"rank{rank}{suffix}")
            written[gpus] = run
        return written


def generate_scaling_series(
    gpu_counts: Sequence[int] = (1, 2, 4, 8),
    *,
    seed: int = 0,
    comm_ms_per_peer: float = 1.0,
    base: GeneratorConfig | None = None,
    threshold_pct: float = 80.0,
) -> ScalingSeries:
    """Simulate ``base`` (default: 3 training steps of 2 layers) at each GPU count."""
    config = base or GeneratorConfig(seed=seed, steps=3, layers=2)
    runs: dict[int, list[GeneratedTrace]] = {}
    for gpus in sorted(gpu_counts):
        if gpus == 1:
            runs[gpus] = [generate(replace(config, world_size=1, rank=0, collectives_per_step=0))]
            continue
        slow = ExposedCollective(mb=64.0, ms=comm_ms_per_peer * (gpus - 1))
        runs[gpus] = generate_job(replace(config, inject=(*config.inject, slow)), world_size=gpus)
    step = {gpus: _step_ns(traces, config.steps) for gpus, traces in runs.items()}
    first = min(step)
    efficiency = {gpus: 100.0 * step[first] / s for gpus, s in step.items()}
    below = [gpus for gpus, e in efficiency.items() if e < threshold_pct]
    return ScalingSeries(
        runs, config.steps, step, efficiency, threshold_pct, min(below) if below else None
    )


class BatchSweep(msgspec.Struct, frozen=True):
    """The same inference job at several batch sizes; its known answers come from the schedule.

    Each step reads ``kv_mb_per_sample`` x batch MB per op through a chain of memory-bound ops
    (a KV cache): past the batch where the device's step outlasts the host's, throughput stays
    flat and the busy time is memory-bound."""

    runs: dict[int, GeneratedTrace]  # by batch size
    steps: int
    step_ns: dict[int, float]  # device span / steps
    throughput_per_s: dict[int, float]  # samples per second
    tolerance_pct: float
    knee_batch: int  # the smallest batch within tolerance_pct of the best throughput

    def write(self, folder: str | Path, *, compress: bool = True) -> list[Path]:
        """``folder/bs{batch}.json.gz`` (``.json`` without ``compress``) per run, smallest
        batch first."""
        target = Path(folder)
        target.mkdir(parents=True, exist_ok=True)
        suffix = ".json.gz" if compress else ".json"
        return [trace.write(target / f"bs{b}{suffix}") for b, trace in sorted(self.runs.items())]


def generate_batch_sweep(
    batch_sizes: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128),
    *,
    seed: int = 0,
    kv_mb_per_sample: float = 19.0,
    base: GeneratorConfig | None = None,
    tolerance_pct: float = 5.0,
) -> BatchSweep:
    """Simulate ``base`` (default: 3 host-heavy inference steps of one layer with small GEMMs) at
    each batch size; with the defaults the knee is at batch 16."""
    config = base or GeneratorConfig(
        seed=seed,
        steps=3,
        mode="inference",
        layers=1,
        gemm_us=30.0,
        attention_us=40.0,
        dataloader_us=3000.0,
    )
    runs: dict[int, GeneratedTrace] = {}
    for batch in sorted(batch_sizes):
        chain = MemoryBoundChain(ops=12, mb_per_op=kv_mb_per_sample * batch)
        runs[batch] = generate(replace(config, batch_size=batch, inject=(*config.inject, chain)))
    step = {b: _step_ns([t], config.steps) for b, t in runs.items()}
    throughput = {b: b / (s / 1e9) for b, s in step.items()}
    best = max(throughput.values())
    knee = min(b for b, t in throughput.items() if t >= best * (1 - tolerance_pct / 100))
    return BatchSweep(runs, config.steps, step, throughput, tolerance_pct, knee)
