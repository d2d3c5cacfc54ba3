"""What to simulate: the injections (one per cause), the devices, and :class:`GeneratorConfig`.

Contract: plain frozen records, validated when built; :mod:`gpuscope.testing.generator` turns a
config into a trace. An injection is the one place that knows how its cause looks in a trace.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import msgspec

JSON: TypeAlias = dict[str, Any]


# --- injections: the one place that knows how each cause looks in a trace ---------------------


class HostSync(msgspec.Struct, frozen=True):
    """``loss.item()`` at ``line``: a 4-byte DtoH copy, a stream sync, then Python-only work."""

    line: int = 57
    every_n_steps: int = 1
    host_work_us: float = 1500.0
    fixed: bool = False  # the value is read later: the copy stays, the stream sync goes


class SlowDataLoader(msgspec.Struct, frozen=True):
    """Each step starts with ``ms`` in ``enumerate(DataLoader)#...__next__`` (line 48)."""

    ms: float = 15.0


class PageableH2DCopy(msgspec.Struct, frozen=True):
    """The batch is copied from pageable memory: the host stages it while the GPU waits."""

    mb: float = 128.0
    line: int = 49
    fixed: bool = False  # the batch comes from pinned memory, copied asynchronously


class TinyKernels(msgspec.Struct, frozen=True):
    """``count`` tiny elementwise ops whose host cost exceeds their kernel time (launch-bound).

    They run at the top of the step, so the gaps show once the GPU has caught up with the host
    (every step when the loop also syncs, as with :class:`HostSync`)."""

    count: int = 100
    kernel_us: float = 3.0
    host_us_per_op: float = 20.0
    line: int = 52
    fixed: bool = False  # replayed as a CUDA graph: one launch, the kernels back to back


class AllocatorChurn(msgspec.Struct, frozen=True):
    """``count`` allocations per step that miss the caching allocator: ``cudaFree`` (which
    synchronises the device) and ``cudaMalloc`` inside ``aten::empty``."""

    count: int = 4
    line: int = 54
    free_us: float = 400.0
    malloc_us: float = 250.0
    fixed: bool = False  # the caching allocator serves them: no cudaFree / cudaMalloc


class Fp32Gemm(msgspec.Struct, frozen=True):
    """A ``share`` of the model's linear layers run FP32 GEMMs without tensor cores."""

    share: float = 1.0


class MemoryBoundChain(msgspec.Struct, frozen=True):
    """A chain of large elementwise ops (add, mul, gelu) at ~85% of DRAM bandwidth."""

    ops: int = 48
    mb_per_op: float = 512.0


class ExposedCollective(msgspec.Struct, frozen=True):
    """An all-reduce after backward that the compute stream waits for (no overlap)."""

    mb: float = 256.0
    ms: float = 5.0
    line: int = 39
    fixed: bool = False  # its data is ready early: it does not wait for compute to drain


class Checkpoint(msgspec.Struct, frozen=True):
    """``torch.save`` at ``line`` every ``every_n_steps`` steps, blocking the host for ``ms``."""

    ms: float = 40.0
    line: int = 59
    every_n_steps: int = 2


class Startup(msgspec.Struct, frozen=True):
    """One-time start-up before the first step, at ``line`` (a warm-up call of the model), as a
    profile taken from the start records it. A first kernel runs, then, by ``kind``:
    ``context_init``: a ``cudaFree`` of ``ms`` inside the first ``aten::mm`` (cuBLAS's
    ``cudaFree(0)`` creating the context); ``module_load``: the first launch of the GEMM takes
    ``ms`` (lazy loading); ``compile``: Dynamo's ``compile_inner`` range and its
    ``convert_frame`` frame for ``ms`` before the first forward; ``graph_capture``: a capture
    (launches that run no kernels) and a ``cudaGraphInstantiate``, ``ms`` in all. The steps that
    follow are the steady state. Truth: its idle time is ``warmup``."""

    kind: str = "context_init"
    ms: float = 600.0
    line: int = 44


STARTUP_KINDS = ("context_init", "module_load", "compile", "graph_capture")


class Straggler(msgspec.Struct, frozen=True):
    """Rank ``rank``'s GEMMs are slower by ``extra_ms`` per step in total: it joins every
    collective late and the other ranks wait inside their NCCL kernels.

    ``steps``: only in these steps (empty: every step), so that two stragglers can take turns.
    ``on_host``: the rank's host spends ``extra_ms`` in Python (at ``line``) before it launches the
    step's forward, instead of its GEMMs running slower: it issues its work late."""

    rank: int = 1
    extra_ms: float = 5.0
    steps: tuple[int, ...] = ()
    on_host: bool = False
    line: int = 33


Injection: TypeAlias = (
    HostSync
    | SlowDataLoader
    | PageableH2DCopy
    | TinyKernels
    | AllocatorChurn
    | Fp32Gemm
    | MemoryBoundChain
    | ExposedCollective
    | Checkpoint
    | Straggler
    | Startup
)

#: Gap causes, as written in :attr:`Truth.gaps`.
CAUSES = (
    "host_sync",
    "data_loader",
    "h2d_copy",
    "launch_overhead",
    "allocator",
    "checkpoint",
    "communication_wait",
    "warmup",
)

INJECTED_NAME: dict[type, str] = {
    HostSync: "host_sync",
    SlowDataLoader: "data_loader",
    PageableH2DCopy: "h2d_copy",
    TinyKernels: "launch_overhead",
    AllocatorChurn: "allocator",
    Fp32Gemm: "fp32_gemm",
    MemoryBoundChain: "memory_bound",
    ExposedCollective: "exposed_communication",
    Checkpoint: "checkpoint",
    Straggler: "straggler",
    Startup: "warmup",
}

# --- devices ----------------------------------------------------------------------------------


class DeviceSpec(msgspec.Struct, frozen=True):
    """What ``deviceProperties`` says about a GPU, plus its DRAM bandwidth for the time model."""

    name: str
    num_sms: int
    total_mem: int
    major: int
    minor: int
    dram_gbps: float
    smem_per_sm: int
    smem_optin: int


DEVICES: dict[str, DeviceSpec] = {
    spec.name: spec
    for spec in (
        DeviceSpec("NVIDIA H100 80GB HBM3", 132, 85_018_279_936, 9, 0, 3352.0, 233_472, 232_448),
        DeviceSpec("NVIDIA H200", 132, 150_754_820_096, 9, 0, 4800.0, 233_472, 232_448),
        DeviceSpec("NVIDIA A100-SXM4-80GB", 108, 85_097_971_712, 8, 0, 2039.0, 167_936, 166_912),
        DeviceSpec("NVIDIA B200", 148, 191_503_138_816, 10, 0, 8000.0, 233_472, 232_448),
    )
}

# --- configuration ----------------------------------------------------------------------------


class GeneratorConfig(msgspec.Struct, frozen=True):
    """What to simulate. Durations are µs at ``batch_size`` 8 and are jittered a few percent."""

    seed: int = 0
    steps: int = 5
    mode: str = "train"  # "train" or "inference"
    layers: int = 4  # transformer blocks: 10 forward ops each
    hidden: int = 2048
    seq_len: int = 1024
    batch_size: int = 8  # GEMM/attention time scales as batch**0.9, bytes linearly
    gemm_us: float = 120.0  # one [tokens x hidden] @ [hidden x hidden] bf16 GEMM
    attention_us: float = 150.0  # flash attention forward, per layer
    host_overhead_us: float = 4.0  # dispatch cost of each cpu_op level
    launch_us: float = 5.5  # cudaLaunchKernel call
    launch_latency_us: float = 5.0  # launch call start to earliest kernel start
    dataloader_us: float = 300.0  # a healthy DataLoader.__next__
    device: str = "NVIDIA H100 80GB HBM3"
    rank: int = 0
    world_size: int = 1
    record_shapes: bool = True
    with_stack: bool = True
    compute_stream: int = 7
    comm_stream: int = 20
    collectives_per_step: int | None = None  # None: 2 when world_size > 1, else 0
    script: str = "train.py"
    inject: tuple[Injection, ...] = ()
    #: Every kernel takes this many times as long (a slower build, library or clock): a known
    #: regression for before/after comparisons.
    kernel_scale: float = 1.0
    #: Step-to-step noise: each step's kernels take a factor drawn once per step from a normal of
    #: this standard deviation in % (clocks, contention); 0 draws nothing (the bytes are those
    #: of a config without it).
    step_noise_pct: float = 0.0

    def __post_init__(self) -> None:
        problems = _config_problems(self)
        if problems:
            raise ValueError("GeneratorConfig: " + "; ".join(problems))

    @property
    def collectives(self) -> int:
        """All-reduces per step overlapped with backward (forward in inference)."""
        if self.collectives_per_step is not None:
            return self.collectives_per_step
        return 2 if self.world_size > 1 else 0


def _config_problems(cfg: GeneratorConfig) -> list[str]:
    checks = [
        (
            cfg.mode in ("train", "inference"),
            f"mode must be 'train' or 'inference', not {cfg.mode!r}",
        ),
        (cfg.steps >= 1 and cfg.layers >= 1, "steps and layers must be >= 1"),
        (cfg.batch_size >= 1 and cfg.seq_len >= 1, "batch_size and seq_len must be >= 1"),
        (cfg.hidden >= 128 and cfg.hidden % 128 == 0, "hidden must be a multiple of 128"),
        (cfg.world_size >= 1 and 0 <= cfg.rank < cfg.world_size, "need 0 <= rank < world_size"),
        (cfg.device in DEVICES, f"unknown device {cfg.device!r}; known: {sorted(DEVICES)}"),
        (cfg.compute_stream != cfg.comm_stream, "compute and comm streams must differ"),
        ((cfg.collectives_per_step or 0) >= 0, "collectives_per_step must be >= 0"),
        (cfg.kernel_scale > 0 and cfg.step_noise_pct >= 0, "kernel_scale > 0, step_noise_pct >= 0"),
        (all(isinstance(i, tuple(INJECTED_NAME)) for i in cfg.inject), "unknown injection"),
        (
            all(i.kind in STARTUP_KINDS for i in cfg.inject if isinstance(i, Startup)),
            f"Startup.kind must be one of {', '.join(STARTUP_KINDS)}",
        ),
    ]
    return [message for ok, message in checks if not ok]
