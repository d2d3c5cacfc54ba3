"""Deterministic simulator that writes real PyTorch profiler (Kineto) traces with known answers.

Contract:

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

import gzip
import itertools
import json
import math
import random
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple, TypeAlias, TypeVar

JSON: TypeAlias = dict[str, Any]

# --- injections: the one place that knows how each cause looks in a trace ---------------------


@dataclass(frozen=True)
class HostSync:
    """``loss.item()`` at ``line``: a 4-byte DtoH copy, a stream sync, then Python-only work."""

    line: int = 57
    every_n_steps: int = 1
    host_work_us: float = 1500.0
    fixed: bool = False  # the value is read later: the copy stays, the stream sync goes


@dataclass(frozen=True)
class SlowDataLoader:
    """Each step starts with ``ms`` in ``enumerate(DataLoader)#...__next__`` (line 48)."""

    ms: float = 15.0


@dataclass(frozen=True)
class PageableH2DCopy:
    """The batch is copied from pageable memory: the host stages it while the GPU waits."""

    mb: float = 128.0
    line: int = 49
    fixed: bool = False  # the batch comes from pinned memory, copied asynchronously


@dataclass(frozen=True)
class TinyKernels:
    """``count`` tiny elementwise ops whose host cost exceeds their kernel time (launch-bound).

    They run at the top of the step, so the gaps show once the GPU has caught up with the host
    (every step when the loop also syncs, as with :class:`HostSync`)."""

    count: int = 100
    kernel_us: float = 3.0
    host_us_per_op: float = 20.0
    line: int = 52
    fixed: bool = False  # replayed as a CUDA graph: one launch, the kernels back to back


@dataclass(frozen=True)
class AllocatorChurn:
    """``count`` allocations per step that miss the caching allocator: ``cudaFree`` (which
    synchronises the device) and ``cudaMalloc`` inside ``aten::empty``."""

    count: int = 4
    line: int = 54
    free_us: float = 400.0
    malloc_us: float = 250.0
    fixed: bool = False  # the caching allocator serves them: no cudaFree / cudaMalloc


@dataclass(frozen=True)
class Fp32Gemm:
    """A ``share`` of the model's linear layers run FP32 GEMMs without tensor cores."""

    share: float = 1.0


@dataclass(frozen=True)
class MemoryBoundChain:
    """A chain of large elementwise ops (add, mul, gelu) at ~85% of DRAM bandwidth."""

    ops: int = 48
    mb_per_op: float = 512.0


@dataclass(frozen=True)
class ExposedCollective:
    """An all-reduce after backward that the compute stream waits for (no overlap)."""

    mb: float = 256.0
    ms: float = 5.0
    line: int = 39
    fixed: bool = False  # its data is ready early: it does not wait for compute to drain


@dataclass(frozen=True)
class Checkpoint:
    """``torch.save`` at ``line`` every ``every_n_steps`` steps, blocking the host for ``ms``."""

    ms: float = 40.0
    line: int = 59
    every_n_steps: int = 2


@dataclass(frozen=True)
class Startup:
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


@dataclass(frozen=True)
class Straggler:
    """Rank ``rank``'s GEMMs are slower by ``extra_ms`` per step in total: it joins every
    collective late and the other ranks wait inside their NCCL kernels."""

    rank: int = 1
    extra_ms: float = 5.0


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

_INJECTED_NAME: dict[type, str] = {
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


@dataclass(frozen=True)
class DeviceSpec:
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


@dataclass(frozen=True)
class GeneratorConfig:
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
        (all(isinstance(i, tuple(_INJECTED_NAME)) for i in cfg.inject), "unknown injection"),
        (
            all(i.kind in STARTUP_KINDS for i in cfg.inject if isinstance(i, Startup)),
            f"Startup.kind must be one of {', '.join(STARTUP_KINDS)}",
        ),
    ]
    return [message for ok, message in checks if not ok]


# --- ground truth -----------------------------------------------------------------------------


class Gap(NamedTuple):
    """One GPU-idle interval an injection caused, on the trace's clock."""

    start_ns: int
    end_ns: int
    cause: str
    location: str

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass(frozen=True)
class DeviceTruth:
    """Unions of device intervals, in ns."""

    span_ns: int  # first device event start to last end
    busy_ns: int  # kernels, memcpys and memsets on any stream
    compute_ns: int  # non-communication kernels
    communication_ns: int  # NCCL kernels
    memcpy_ns: int
    memset_ns: int


@dataclass(frozen=True)
class Truth:
    """The known answers for one generated trace."""

    device: int
    devices: dict[int, DeviceTruth]
    step_durations_ns: tuple[int, ...]  # host ProfilerStep#N annotations
    kernel_count: int
    gaps: tuple[Gap, ...]
    injected: tuple[str, ...]
    lost_ns_by_cause: dict[str, int]

    @property
    def span_ns(self) -> int:
        return self.devices[self.device].span_ns

    @property
    def busy_ns(self) -> int:
        return self.devices[self.device].busy_ns

    @property
    def idle_ns(self) -> int:
        return self.span_ns - self.busy_ns

    @property
    def compute_ns(self) -> int:
        return self.devices[self.device].compute_ns

    @property
    def communication_ns(self) -> int:
        return self.devices[self.device].communication_ns

    @property
    def memcpy_ns(self) -> int:
        return self.devices[self.device].memcpy_ns

    @property
    def memset_ns(self) -> int:
        return self.devices[self.device].memset_ns


@dataclass(frozen=True)
class GeneratedTrace:
    """A Kineto document and its ground truth."""

    document: JSON
    truth: Truth

    def to_bytes(self, compress: bool = False) -> bytes:
        """The document as Kineto lays it out (one event per line); gzip with mtime 0."""
        data = _dumps(self.document).encode()
        return gzip.compress(data, compresslevel=9, mtime=0) if compress else data

    def write(self, path: str | Path) -> Path:
        """Write the document; gzip when the name ends in ``.gz``."""
        target = Path(path)
        target.write_bytes(self.to_bytes(compress=target.name.endswith(".gz")))
        return target


# --- constants of the model -------------------------------------------------------------------

_T0_NS = 4_200_000_000_000  # the trace clock's origin: ts ~ 4.2e9 µs keeps 3 decimals exact
_BASE_TIME_NS = 1_735_689_600_000_000_000  # 2025-01-01T00:00:00Z
_REF_BATCH = 8
_CLASSES = 4096  # output width of the head
_HEAD_DIM = 128
_DRAM_EFFICIENCY = 0.85
_FP32_SLOWDOWN = 8.0  # SIMT FP32 vs bf16 tensor cores, achieved
_PINNED_GBPS = 24.0
_STAGE_GBPS = 6.0  # host memcpy into the driver's pinned staging buffer
_PAGEABLE_DMA_GBPS = 12.0
_DTOH_GBPS = 10.0
_BUS_GBPS = 360.0  # NCCL ring bus bandwidth (NVLink)
_NCCL_FIXED_NS = 8_000
_BF16 = "c10::BFloat16"
_ITEMSIZE = {_BF16: 2, "float": 4, "long": 8}
_MODULE_LINE = 118
_LOOP_LINE = 48
_COPY_LINE = 49
_STEP_LINE = 50
_CALL_IMPL = "torch/nn/modules/module.py(1773): _call_impl"
_LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
_CBID = {
    "cudaLaunchKernel": 211,
    "cudaLaunchKernelExC": 430,
    "cudaMemcpyAsync": 41,
    "cudaMemsetAsync": 51,
    "cudaStreamSynchronize": 131,
    "cudaEventRecord": 135,
    "cudaStreamWaitEvent": 147,
    "cudaFree": 22,
    "cudaMalloc": 20,
    "cudaStreamBeginCapture": 319,
    "cudaStreamEndCapture": 320,
    "cudaGraphInstantiate": 308,
    "cudaGraphLaunch": 311,
}

#: Runtime API names the generator writes (tests check each classified one has a HIP twin).
RUNTIME_NAMES = tuple(_CBID)

# --- kernels ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Kernel:
    name: str
    dur_ns: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    regs: int
    smem: int


_GEMM_SM90 = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
    "_execute_segment_k_off_kernel__5x_cublas"
)
_GEMM_SM80 = (
    "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1"
    "_tensor16x8x16_kernel"
)
_GEMM_DGRAD = (
    "sm80_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x32_stage4_warpsize2x2x1"
    "_tensor16x8x16_kernel"
)
_GEMM_WGRAD = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn"
_SGEMM = {"fwd": "ampere_sgemm_128x64_tn", "dgrad": "ampere_sgemm_128x64_nn"}
_SGEMM_WGRAD = "volta_sgemm_128x64_nn"
_FLASH_FWD = (
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4,"
    " false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4,"
    " cutlass::bfloat16_t> >, false, true, false, false, false, true, false>"
    "(pytorch_flash::Flash_fwd_params)"
)
_FLASH_BWD = (
    "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<pytorch_flash::"
    "Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t,"
    " pytorch_flash::Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, false, false,"
    " false, false, false, false, false, false>(pytorch_flash::Flash_bwd_params)"
)
_FLASH_DOT = (
    "void pytorch_flash::flash_bwd_dot_do_o_kernel<true, pytorch_flash::Flash_bwd_kernel_traits"
    "<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, pytorch_flash::"
    "Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> > >(pytorch_flash::Flash_bwd_params)"
)
_LAYER_NORM = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
    "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*,"
    " float*, c10::BFloat16*)"
)
_LAYER_NORM_BWD = (
    "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized"
    "<c10::BFloat16, float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*,"
    " float const*, c10::BFloat16 const*, c10::BFloat16*, int)"
)
_SOFTMAX = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, float,"
    " at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, c10::BFloat16 const*,"
    " int)"
)
_SOFTMAX_BWD = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float,"
    " at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(float*, float const*,"
    " float const*, int)"
)
_NLL = (
    "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float,"
    " long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)"
)
_NLL_BWD = (
    "void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, long>"
    "(float*, float const*, long const*, float const*, float const*, bool, int, int, long, long)"
)
_SUM = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t"
    "<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::"
    "{lambda(float, float)#1}>, unsigned int, float, 4> >(at::native::ReduceOp<float,"
    " at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()"
    "(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)"
)
_ARGMAX = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::"
    "ArgMaxOps<c10::BFloat16>, unsigned int, long, 4> >(at::native::ReduceOp<c10::BFloat16,"
    " at::native::ArgMaxOps<c10::BFloat16>, unsigned int, long, 4>)"
)
_ADAM = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous"
    " namespace)::TensorListMetadata<{n}>, at::native::(anonymous namespace)::{functor}<float,"
    " {n}, {n}, 0>, {op}, float>(at::native::(anonymous namespace)::TensorListMetadata<{n}>,"
    " at::native::(anonymous namespace)::{functor}<float, {n}, {n}, 0>, {op}, float)"
)
_NCCL_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
_FUNCTORS = {
    "add": ("at::native::CUDAFunctor_add<c10::BFloat16>", 3),
    "mul": (
        "at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16,"
        " at::native::binary_internal::MulFunctor<float> >",
        3,
    ),
    "gelu": (
        "at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::"
        "{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
        "{lambda(c10::BFloat16)#1}",
        2,
    ),
    "gelu_backward": (
        "at::native::GeluBackwardCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::"
        "{lambda()#2}::operator()() const::{lambda()#4}::operator()() const::"
        "{lambda(c10::BFloat16, c10::BFloat16)#1}",
        3,
    ),
    "add_f32": ("at::native::CUDAFunctor_add<float>", 3),
    "mul_f32": (
        "at::native::BinaryFunctor<float, float, float, at::native::binary_internal::"
        "MulFunctor<float> >",
        3,
    ),
    "fill": ("at::native::FillFunctor<float>", 1),
}


def _elementwise_name(kind: str) -> str:
    functor, arity = _FUNCTORS[kind]
    array = f"std::array<char*, {arity}ul>"
    return (
        f"void at::native::vectorized_elementwise_kernel<4, {functor}, {array} >"
        f"(int, {functor}, {array})"
    )


def _launch_args(spec: DeviceSpec, kernel: _Kernel) -> JSON:
    """The launch-configuration args Kineto derives from CUPTI, for ``kernel`` on ``spec``."""
    blocks = kernel.grid[0] * kernel.grid[1] * kernel.grid[2]
    threads = kernel.block[0] * kernel.block[1] * kernel.block[2]
    warps_per_block = max(1, math.ceil(threads / 32))
    blocks_per_sm = blocks / spec.num_sms
    limit = min(
        32,
        64 // warps_per_block,
        65536 // max(1, kernel.regs * threads),
        spec.smem_per_sm // kernel.smem if kernel.smem else 32,
    )
    occupancy = min(100, int(min(blocks_per_sm, limit) * warps_per_block * 100 / 64))
    return {
        "registers per thread": kernel.regs,
        "shared memory": kernel.smem,
        "blocks per SM": round(blocks_per_sm, 6),
        "warps per SM": round(blocks_per_sm * warps_per_block, 6),
        "grid": list(kernel.grid),
        "block": list(kernel.block),
        "est. achieved occupancy %": occupancy,
    }


# --- recorded shapes --------------------------------------------------------------------------


class _Arg(NamedTuple):
    dims: list[Any]
    type: str
    strides: list[Any]
    concrete: str


def _contiguous(dims: Sequence[int]) -> list[int]:
    strides: list[int] = []
    step = 1
    for size in reversed(dims):
        strides.insert(0, step)
        step *= max(1, size)
    return strides


def _t(dims: Sequence[int], dtype: str = _BF16, strides: Sequence[int] | None = None) -> _Arg:
    given = list(strides) if strides is not None else _contiguous(dims)
    return _Arg(list(dims), dtype, given, "")


def _s(value: object) -> _Arg:
    return _Arg([], "Scalar", [], str(value))


def _tensors(shapes: Sequence[Sequence[int]]) -> _Arg:
    return _Arg([list(s) for s in shapes], "TensorList", [_contiguous(s) for s in shapes], "")


_NONE = _Arg([], "", [], "")


def _shape_args(inputs: Sequence[_Arg]) -> JSON:
    return {
        "Concrete Inputs": [a.concrete for a in inputs],
        "Input type": [a.type for a in inputs],
        "Input Strides": [a.strides for a in inputs],
        "Input Dims": [a.dims for a in inputs],
    }


def _numel(dims: Sequence[int]) -> int:
    return math.prod(dims)


# --- the simulation ---------------------------------------------------------------------------


@dataclass
class _Work:
    kind: str  # "kernel", "gpu_memcpy", "gpu_memset"
    name: str
    stream: int
    start: int
    end: int
    launch: int  # start of the runtime call that enqueued it
    correlation: int
    args: JSON
    comm: bool


@dataclass(frozen=True)
class _Wait:
    until: int  # the source stream's end when the event was recorded
    busy_from: int  # start of the source stream's last work
    location: str | None  # a gap location when compute waits for communication


@dataclass(frozen=True)
class _Blame:
    start: int
    end: int
    cause: str
    location: str


@dataclass(frozen=True)
class _GpuRange:
    name: str
    stream: int
    start: int
    end: int
    ext: int


@dataclass(frozen=True)
class _HostStep:
    name: str
    start: int
    end: int
    ext: int


_I = TypeVar("_I")


class _Sim:
    """Host thread and device streams of one rank; events are recorded in ns."""

    def __init__(self, cfg: GeneratorConfig, coll_end: Mapping[int, int]) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed * 1_000_003 + cfg.rank)
        self.spec = DEVICES[cfg.device]
        self.pid = 20_000 + 37 * (cfg.seed % 500) + cfg.rank
        self.now = _T0_NS + 40_000
        self.host: list[JSON] = []
        self.works: list[_Work] = []
        self.ready: dict[int, int] = {}
        self.last_start: dict[int, int] = {}
        self.waits: dict[int, _Wait] = {}
        self.py_stack: list[tuple[int, str]] = []
        self.ops: list[int] = []
        self.blames: list[_Blame] = []
        self.comm_gaps: list[Gap] = []
        self.ranges: list[_GpuRange] = []
        self.steps: list[_HostStep] = []
        self.coll_end = coll_end
        self.coll_starts: list[int] = []
        self.coll_base: list[int] = []
        self.gemm_extra_ns = _straggler_extra_ns(cfg)
        self.step_speed = cfg.kernel_scale  # times as long as nominal, this step
        self._next_py = 0
        self._next_ext = 0
        self._next_corr = 7_000 + 100_000 * cfg.rank

    # injections
    def all(self, kind: type[_I]) -> list[_I]:
        return [i for i in self.cfg.inject if isinstance(i, kind)]

    def first(self, kind: type[_I]) -> _I | None:
        found = self.all(kind)
        return found[0] if found else None

    # clocks
    def jitter(self, us: float, spread: float = 0.1) -> int:
        return max(0, round(us * 1000 * self.rng.uniform(1 - spread, 1 + spread)))

    def tick(self, us: float, spread: float = 0.1) -> None:
        self.now += self.jitter(us, spread)

    def kernel_ns(self, us: float) -> int:
        return max(1_000, round(self.jitter(us, 0.02) * self.step_speed))

    @property
    def compute(self) -> int:
        return self.cfg.compute_stream

    @property
    def comm(self) -> int:
        return self.cfg.comm_stream

    def stream_end(self, stream: int | None = None) -> int:
        """When the stream (every stream when None) has finished all work enqueued so far."""
        streams = [stream] if stream is not None else list(self.ready) + list(self.waits)
        ends = [self.ready.get(s, 0) for s in streams]
        ends += [self.waits[s].until for s in streams if s in self.waits]
        return max(ends, default=0)

    # host events
    def user_frame(self, line: int, function: str) -> str:
        return f"{self.cfg.script}({line}): {function}"

    def location(self) -> str:
        prefix = self.cfg.script + "("
        for _, name in reversed(self.py_stack):
            if name.startswith(prefix):
                return f"{self.cfg.script}:{name[len(prefix) : name.index(')')]}"
        return f"{self.cfg.script}:0"

    def _event(self, cat: str, name: str, start: int, args: JSON) -> JSON:
        event = {"ph": "X", "cat": cat, "name": name, "pid": self.pid, "tid": self.pid}
        event.update({"ts": start, "dur": 0, "args": args})
        return event

    @contextmanager
    def _span(self, cat: str, name: str, args: JSON, emit: bool = True) -> Iterator[None]:
        event = self._event(cat, name, self.now, args)
        if emit:
            self.host.append(event)
        yield
        event["dur"] = self.now - event["ts"]

    @contextmanager
    def frame(self, name: str, enter_us: float = 1.2, exit_us: float = 0.3) -> Iterator[None]:
        """A ``python_function`` event (emitted only with ``with_stack``; it costs time anyway)."""
        self._next_py += 1
        parent = self.py_stack[-1][0] if self.py_stack else None
        args = {"Python parent id": parent, "Python id": self._next_py}
        self.py_stack.append((self._next_py, name))
        with self._span("python_function", name, args, emit=self.cfg.with_stack):
            self.tick(enter_us)
            yield
            self.tick(exit_us)
        self.py_stack.pop()

    @contextmanager
    def op(
        self,
        name: str,
        inputs: Sequence[_Arg] = (),
        cost_us: float | None = None,
        extra: JSON | None = None,
    ) -> Iterator[None]:
        """A ``cpu_op``; ``cost_us`` of dispatch is spent around its children."""
        self._next_ext += 1
        args: JSON = {"External id": self._next_ext, "Record function id": 0}
        args.update(extra or {})
        if self.cfg.record_shapes and inputs:
            args.update(_shape_args(inputs))
        cost = self.cfg.host_overhead_us if cost_us is None else cost_us
        self.ops.append(self._next_ext)
        with self._span("cpu_op", name, args):
            self.tick(cost * 0.6)
            yield
            self.tick(cost * 0.4)
        self.ops.pop()

    @contextmanager
    def annotation(self, name: str) -> Iterator[int]:
        """A ``user_annotation`` (``record_function``); yields its External id."""
        self._next_ext += 1
        ext = self._next_ext
        with self._span("user_annotation", name, {"External id": ext, "Record function id": 0}):
            self.tick(0.8)
            yield ext
            self.tick(0.4)

    @contextmanager
    def blame(self, cause: str) -> Iterator[None]:
        """Device idleness while the host is inside this block is caused by ``cause``."""
        start, where = self.now, self.location()
        yield
        self.blames.append(_Blame(start, self.now, cause, where))

    def blame_if(self, condition: bool, cause: str) -> AbstractContextManager[None]:
        return self.blame(cause) if condition else nullcontext()

    def runtime(self, name: str, us: float, *, after: int | None = None) -> tuple[int, int]:
        """A ``cuda_runtime`` call lasting ``us`` (past ``after`` when it blocks until then)."""
        self._next_corr += 1
        args: JSON = {"External id": self.ops[-1]} if self.ops else {}
        args.update({"cbid": _CBID[name], "correlation": self._next_corr})
        start = self.now
        self.now = max(start, after if after is not None else start) + self.jitter(us)
        event = self._event("cuda_runtime", name, start, args)
        event["dur"] = self.now - start
        self.host.append(event)
        return start, self._next_corr

    # device work
    def _device_args(self, stream: int, correlation: int, kernel: bool) -> JSON:
        args: JSON = {"External id": self.ops[-1]} if self.ops else {}
        if kernel:
            args["queued"] = 0
        args.update({"device": self.cfg.rank, "context": 1, "stream": stream})
        args["correlation"] = correlation
        return args

    def enqueue(
        self,
        kind: str,
        name: str,
        stream: int,
        *,
        launch: int,
        ready: int,
        dur: int,
        args: JSON,
        coll: int | None = None,
    ) -> _Work:
        start = self._after_wait(stream, max(ready, self.ready.get(stream, 0)))
        if coll is not None:
            self.coll_starts.append(start)
            dur = max(dur, self.coll_end.get(coll, 0) - start)
        corr, comm = args["correlation"], coll is not None
        work = _Work(kind, name, stream, start, start + dur, launch, corr, args, comm)
        self.ready[stream] = work.end
        self.last_start[stream] = start
        self.works.append(work)
        return work

    def _after_wait(self, stream: int, start: int) -> int:
        wait = self.waits.pop(stream, None)
        if wait is None or wait.until <= start:
            return start
        if wait.location is not None:
            gap_start = max(start, wait.busy_from)
            self.comm_gaps.append(Gap(gap_start, wait.until, "communication_wait", wait.location))
        return wait.until

    def launch(
        self,
        kernel: _Kernel,
        stream: int | None = None,
        api: str = "cudaLaunchKernel",
        extra: JSON | None = None,
        coll: int | None = None,
        call_us: float | None = None,
    ) -> _Work:
        target = self.compute if stream is None else stream
        start, corr = self.runtime(api, self.cfg.launch_us if call_us is None else call_us)
        args = self._device_args(target, corr, kernel=True)
        args.update(_launch_args(self.spec, kernel))
        args.update(extra or {})
        ready = start + round(self.cfg.launch_latency_us * 1000)
        return self.enqueue(
            "kernel",
            kernel.name,
            target,
            launch=start,
            ready=ready,
            dur=kernel.dur_ns,
            args=args,
            coll=coll,
        )

    def copy(self, name: str, nbytes: int, dur: int, call_us: float = 7.0) -> _Work:
        """``cudaMemcpyAsync`` that only enqueues (pinned or device memory)."""
        start, corr = self.runtime("cudaMemcpyAsync", call_us)
        ready = start + round(self.cfg.launch_latency_us * 1000)
        args = _copy_args(self._device_args(self.compute, corr, kernel=False), nbytes, dur)
        return self.enqueue(
            "gpu_memcpy", name, self.compute, launch=start, ready=ready, dur=dur, args=args
        )

    def pageable_h2d(self, nbytes: int) -> _Work:
        """Pageable HtoD: the call syncs the stream, stages the bytes, and the DMA ends it."""
        drain = self.stream_end(self.compute)
        start, corr = self.runtime("cudaMemcpyAsync", nbytes / _STAGE_GBPS / 1000, after=drain)
        dma = round(nbytes / _PAGEABLE_DMA_GBPS)
        ready = max(self.now - dma, drain)
        args = _copy_args(self._device_args(self.compute, corr, kernel=False), nbytes, dma)
        name = "Memcpy HtoD (Pageable -> Device)"
        return self.enqueue(
            "gpu_memcpy", name, self.compute, launch=start, ready=ready, dur=dma, args=args
        )

    def memset(self, nbytes: int) -> _Work:
        start, corr = self.runtime("cudaMemsetAsync", 4.0)
        ready = start + round(self.cfg.launch_latency_us * 1000)
        dur = self.kernel_ns(1.5)
        args = _copy_args(self._device_args(self.compute, corr, kernel=False), nbytes, dur)
        return self.enqueue(
            "gpu_memset",
            "Memset (Device)",
            self.compute,
            launch=start,
            ready=ready,
            dur=dur,
            args=args,
        )

    def stream_sync(self, stream: int) -> None:
        self.runtime("cudaStreamSynchronize", 2.0, after=self.stream_end(stream))

    def stream_wait(self, dst: int, src: int, location: str | None) -> None:
        """``cudaEventRecord`` on ``src`` and ``cudaStreamWaitEvent`` on ``dst``."""
        self.runtime("cudaEventRecord", 1.5)
        self.runtime("cudaStreamWaitEvent", 1.2)
        until = self.ready.get(src, 0)
        old = self.waits.get(dst)
        if old is None or until > old.until:
            self.waits[dst] = _Wait(until, self.last_start.get(src, until), location)

    # model helpers
    @property
    def tokens(self) -> int:
        return self.cfg.batch_size * self.cfg.seq_len

    @property
    def batch_scale(self) -> float:
        return float((self.cfg.batch_size / _REF_BATCH) ** 0.9)

    def memory_ns(self, nbytes: float) -> int:
        """A memory-bound kernel: bytes moved at ~85% of DRAM bandwidth (bytes / GB/s = ns)."""
        ns = nbytes / (_DRAM_EFFICIENCY * self.spec.dram_gbps) * self.step_speed
        return max(1_500, round(ns))

    def fp32(self, linear_index: int) -> bool:
        share = max((i.share for i in self.all(Fp32Gemm)), default=0.0)
        return linear_index < round(share * (4 * self.cfg.layers + 1))


def _copy_args(args: JSON, nbytes: int, dur: int) -> JSON:
    args.update({"bytes": nbytes, "memory bandwidth (GB/s)": nbytes / max(1, dur)})
    return args


def _straggler_extra_ns(cfg: GeneratorConfig) -> int:
    gemms = (4 * cfg.layers + 1) * (3 if cfg.mode == "train" else 1)
    extra = sum(s.extra_ms for s in cfg.inject if isinstance(s, Straggler) and s.rank == cfg.rank)
    return round(extra * 1e6 / gemms)


# --- kernels of the model ---------------------------------------------------------------------


def _gemm(sim: _Sim, role: str, m: int, k: int, n: int, *, fp32: bool) -> _Kernel:
    """A GEMM of [m x k] @ [k x n]; ``role`` is fwd, dgrad or wgrad."""
    cfg = sim.cfg
    ratio = m * k * n / (sim.tokens * cfg.hidden * cfg.hidden)
    us = cfg.gemm_us * ratio * sim.batch_scale * (_FP32_SLOWDOWN if fp32 else 1.0)
    dur = sim.kernel_ns(us) + sim.gemm_extra_ns
    tiles = (math.ceil(n / 128), math.ceil(m / 128), 1)
    if fp32:
        name = _SGEMM.get(role, _SGEMM_WGRAD)
        return _Kernel(
            name, dur, (math.ceil(n / 64), math.ceil(m / 128), 1), (128, 1, 1), 122, 12544
        )
    if role == "fwd" and sim.spec.major >= 9:
        return _Kernel(_GEMM_SM90, dur, (sim.spec.num_sms, 1, 1), (384, 1, 1), 168, 231_424)
    name = {"fwd": _GEMM_SM80, "dgrad": _GEMM_DGRAD}.get(role, _GEMM_WGRAD)
    return _Kernel(name, dur, tiles, (256, 1, 1), 238, 81_920)


def _elementwise(
    sim: _Sim, kind: str, numel: int, nbytes: float, us: float | None = None
) -> _Kernel:
    dur = sim.kernel_ns(us) if us is not None else sim.memory_ns(nbytes)
    grid = (max(1, min(math.ceil(numel / 512), 2**31 - 1)), 1, 1)
    return _Kernel(_elementwise_name(kind), dur, grid, (128, 1, 1), 24, 0)


def _row_kernel(sim: _Sim, name: str, rows: int, nbytes: float) -> _Kernel:
    return _Kernel(name, sim.memory_ns(nbytes), (rows, 1, 1), (32, 4, 1), 40, 24)


def _flash(sim: _Sim, name: str, scale: float) -> _Kernel:
    cfg = sim.cfg
    grid = (math.ceil(cfg.seq_len / 128), cfg.hidden // _HEAD_DIM, cfg.batch_size)
    dur = sim.kernel_ns(cfg.attention_us * scale * sim.batch_scale)
    return _Kernel(name, dur, grid, (128, 1, 1), 255, 49_152)


# --- the program: one training (or inference) loop -------------------------------------------


def _run_program(sim: _Sim) -> None:
    with sim.frame(sim.user_frame(_MODULE_LINE, "<module>")):
        sim.tick(20.0)
        for startup in sim.all(Startup):
            _startup(sim, startup)
        for index in range(sim.cfg.steps):
            _step(sim, index)
        sim.tick(15.0)


def _loop_function(sim: _Sim) -> str:
    return "train" if sim.cfg.mode == "train" else "evaluate"


def _step(sim: _Sim, index: int) -> None:
    name = f"ProfilerStep#{index}"
    start = sim.now
    if sim.cfg.step_noise_pct:
        noise = sim.rng.gauss(1.0, sim.cfg.step_noise_pct / 100.0)
        sim.step_speed = sim.cfg.kernel_scale * max(noise, 0.5)
    with sim.annotation(name) as ext:
        _load_batch(sim)
        _copy_batch(sim)
        for tiny in sim.all(TinyKernels):
            _tiny_kernels(sim, tiny)
        with sim.frame(sim.user_frame(_STEP_LINE, _loop_function(sim))):
            if sim.cfg.mode == "train":
                _train_step(sim)
            else:
                _infer_step(sim)
        for churn in sim.all(AllocatorChurn):
            _allocator_churn(sim, churn)
        for sync in sim.all(HostSync):
            if index % sync.every_n_steps == sync.every_n_steps - 1:
                _host_sync(sim, sync)
        for checkpoint in sim.all(Checkpoint):
            if index % checkpoint.every_n_steps == checkpoint.every_n_steps - 1:
                _checkpoint(sim, checkpoint)
    sim.steps.append(_HostStep(name, start, sim.now, ext))


def _load_batch(sim: _Sim) -> None:
    slow = sim.first(SlowDataLoader)
    us = slow.ms * 1000 if slow is not None else sim.cfg.dataloader_us
    with (
        sim.frame(sim.user_frame(_LOOP_LINE, _loop_function(sim))),
        sim.frame("torch/utils/data/dataloader.py(708): __next__"),
        sim.annotation(_LOADER),
        sim.blame_if(slow is not None, "data_loader"),
        sim.frame("torch/utils/data/dataloader.py(764): _next_data"),
        sim.frame("torch/utils/data/_utils/fetch.py(49): fetch"),
    ):
        sim.tick(us, spread=0.03)


def _copy_batch(sim: _Sim) -> None:
    pageable = sim.first(PageableH2DCopy)
    line = pageable.line if pageable is not None else _COPY_LINE
    with (
        sim.frame(sim.user_frame(line, _loop_function(sim))),
        sim.frame("<built-in method to of Tensor object at 0x7f3a2c1b9e40>"),
    ):
        if pageable is None:
            _to_device(sim, [sim.cfg.batch_size, sim.cfg.seq_len], "long", pageable=False)
            return
        columns = max(1, round(pageable.mb * 2**20 / 4 / sim.cfg.batch_size))
        with sim.blame_if(not pageable.fixed, "h2d_copy"):
            dims = [sim.cfg.batch_size, columns]
            _to_device(sim, dims, "float", pageable=not pageable.fixed)


def _to_device(sim: _Sim, dims: list[int], dtype: str, pageable: bool) -> None:
    src = _t(dims, dtype)
    nbytes = _numel(dims) * _ITEMSIZE[dtype]
    flag = "False" if pageable else "True"
    with (
        sim.op("aten::to", [src, _NONE, _NONE, _s(flag), _s("False"), _NONE]),
        sim.op("aten::_to_copy", [src, _NONE, _NONE, _NONE, _NONE, _s(flag), _NONE]),
    ):
        with sim.op("aten::empty_strided", [_NONE, _NONE, _NONE, _NONE, _NONE, _NONE], 2.0):
            pass
        with sim.op("aten::copy_", [_t(dims, dtype), src, _s(flag)]):
            if pageable:
                sim.pageable_h2d(nbytes)
            else:
                dur = 1_500 + round(nbytes / _PINNED_GBPS)
                sim.copy("Memcpy HtoD (Pinned -> Device)", nbytes, dur)


def _tiny_kernels(sim: _Sim, tiny: TinyKernels) -> None:
    dims = [sim.cfg.batch_size, 64]
    cost = max(0.5, tiny.host_us_per_op - sim.cfg.launch_us)
    if tiny.fixed:
        _graphed_tiny_kernels(sim, tiny)
        return
    with sim.frame(sim.user_frame(tiny.line, _loop_function(sim))), sim.blame("launch_overhead"):
        for index in range(tiny.count):
            op, kind = (("aten::add", "add_f32"), ("aten::mul", "mul_f32"))[index % 2]
            with sim.op(op, [_t(dims, "float"), _t(dims, "float")], cost_us=cost):
                sim.launch(_elementwise(sim, kind, _numel(dims), 0, us=tiny.kernel_us))


def _graphed_tiny_kernels(sim: _Sim, tiny: TinyKernels) -> None:
    """The same kernels replayed from a CUDA graph: one launch call, then back to back."""
    dims = [sim.cfg.batch_size, 64]
    with sim.frame(sim.user_frame(tiny.line, _loop_function(sim))):
        start, corr = sim.runtime("cudaGraphLaunch", 10.0)
        ready = start + round(sim.cfg.launch_latency_us * 1000)
        for index in range(tiny.count):
            kind = ("add_f32", "mul_f32")[index % 2]
            kernel = _elementwise(sim, kind, _numel(dims), 0, us=tiny.kernel_us)
            args = sim._device_args(sim.compute, corr, kernel=True)
            args.update(_launch_args(sim.spec, kernel))
            sim.enqueue(
                "kernel",
                kernel.name,
                sim.compute,
                launch=start,
                ready=ready,
                dur=kernel.dur_ns,
                args=args,
            )


def _train_step(sim: _Sim) -> None:
    with sim.frame(sim.user_frame(36, "train_step")):
        _forward(sim)
    with sim.frame(sim.user_frame(37, "train_step")):
        _loss(sim)
    with sim.frame(sim.user_frame(38, "train_step")):
        _backward(sim)
    for exposed in sim.all(ExposedCollective):
        with sim.frame(sim.user_frame(exposed.line, "train_step")):
            _exposed_collective(sim, exposed)
    with sim.frame(sim.user_frame(40, "train_step")):
        _optimizer_step(sim)
    with sim.frame(sim.user_frame(41, "train_step")):
        _zero_grad(sim)


def _infer_step(sim: _Sim) -> None:
    with sim.frame(sim.user_frame(36, "infer_step")):
        _forward(sim)
    with sim.frame(sim.user_frame(37, "infer_step")):
        _argmax(sim)
    for exposed in sim.all(ExposedCollective):
        with sim.frame(sim.user_frame(exposed.line, "infer_step")):
            _exposed_collective(sim, exposed)


# forward


@contextmanager
def _module(sim: _Sim, forward: str) -> Iterator[None]:
    with sim.frame(_CALL_IMPL), sim.frame(forward):
        yield


def _forward(sim: _Sim) -> None:
    cfg = sim.cfg
    inference = cfg.mode == "inference"
    slots = _slots(cfg.layers + 1, cfg.collectives if inference else 0)
    with _module(sim, "model.py(64): forward"):
        for layer in range(cfg.layers):
            with _module(sim, "model.py(31): forward"):
                _block_forward(sim, layer)
            _bucket_collectives(sim, slots[layer])
        for chain in sim.all(MemoryBoundChain):
            _memory_chain(sim, chain)
        _linear(sim, 4 * cfg.layers, cfg.hidden, _CLASSES)


def _block_forward(sim: _Sim, layer: int) -> None:
    hidden = sim.cfg.hidden
    _layer_norm(sim)
    _linear(sim, 4 * layer, hidden, 3 * hidden)
    _attention(sim)
    _linear(sim, 4 * layer + 1, hidden, hidden)
    _add(sim, hidden)
    _layer_norm(sim)
    _linear(sim, 4 * layer + 2, hidden, 4 * hidden)
    _gelu(sim)
    _linear(sim, 4 * layer + 3, 4 * hidden, hidden)
    _add(sim, hidden)


def _activation(sim: _Sim, width: int) -> list[int]:
    return [sim.cfg.batch_size, sim.cfg.seq_len, width]


def _linear(sim: _Sim, index: int, d_in: int, d_out: int) -> None:
    with (
        _module(sim, "torch/nn/modules/linear.py(125): forward"),
        sim.frame("<built-in function linear>"),
    ):
        if sim.fp32(index):
            _linear_fp32(sim, d_in, d_out)
        else:
            _linear_bf16(sim, d_in, d_out)


def _linear_bf16(sim: _Sim, d_in: int, d_out: int) -> None:
    x, tokens = _t(_activation(sim, d_in)), sim.tokens
    weight_t = _t([d_in, d_out], strides=[1, d_in])
    with (
        sim.op("aten::linear", [x, _t([d_out, d_in]), _t([d_out])]),
        sim.op("aten::addmm", [_t([d_out]), _t([tokens, d_in]), weight_t, _s(1), _s(1)]),
    ):
        sim.launch(_gemm(sim, "fwd", tokens, d_in, d_out, fp32=False))


def _linear_fp32(sim: _Sim, d_in: int, d_out: int) -> None:
    x, tokens = _t(_activation(sim, d_in), "float"), sim.tokens
    weight_t = _t([d_in, d_out], "float", strides=[1, d_in])
    with (
        sim.op("aten::linear", [x, _t([d_out, d_in], "float"), _NONE]),
        sim.op("aten::matmul", [x, weight_t]),
        sim.op("aten::mm", [_t([tokens, d_in], "float"), weight_t]),
    ):
        sim.launch(_gemm(sim, "fwd", tokens, d_in, d_out, fp32=True))


def _layer_norm(sim: _Sim) -> None:
    hidden = sim.cfg.hidden
    x, w = _t(_activation(sim, hidden)), _t([hidden])
    inputs = [x, _Arg([], "ScalarList", [], f"[{hidden}]"), w, w, _s("1.0000000000000001e-05")]
    with (
        _module(sim, "torch/nn/modules/normalization.py(217): forward"),
        sim.op("aten::layer_norm", [*inputs, _s("True")]),
        sim.op("aten::native_layer_norm", inputs),
    ):
        sim.launch(_row_kernel(sim, _LAYER_NORM, sim.tokens, 2 * sim.tokens * hidden * 2))


def _attention(sim: _Sim) -> None:
    cfg = sim.cfg
    q = _t([cfg.batch_size, cfg.hidden // _HEAD_DIM, cfg.seq_len, _HEAD_DIM])
    scale = _s(f"{_HEAD_DIM**-0.5:g}")
    with (
        sim.frame("<built-in function scaled_dot_product_attention>"),
        sim.op("aten::scaled_dot_product_attention", [q, q, q, _NONE, _s("0."), _s("True"), scale]),
        sim.op("aten::_scaled_dot_product_flash_attention", [q, q, q, _s("0."), _s("True")]),
    ):
        sim.launch(_flash(sim, _FLASH_FWD, 1.0))


def _add(sim: _Sim, width: int) -> None:
    x = _t(_activation(sim, width))
    with sim.op("aten::add", [x, x, _s(1)]):
        numel = sim.tokens * width
        sim.launch(_elementwise(sim, "add", numel, 3 * numel * 2))


def _gelu(sim: _Sim) -> None:
    width = 4 * sim.cfg.hidden
    with (
        _module(sim, "torch/nn/modules/activation.py(734): forward"),
        sim.op("aten::gelu", [_t(_activation(sim, width)), _NONE]),
    ):
        numel = sim.tokens * width
        sim.launch(_elementwise(sim, "gelu", numel, 2 * numel * 2))


def _memory_chain(sim: _Sim, chain: MemoryBoundChain) -> None:
    """Large bf16 elementwise ops; Input Dims give the bytes, durations follow from them."""
    rows = max(1, round(chain.mb_per_op * 2**20 / 2 / 1024))
    x = _t([rows, 1024])
    numel = rows * 1024
    for index in range(chain.ops):
        kind = ("add", "mul", "gelu")[index % 3]
        inputs = {"add": [x, x, _s(1)], "mul": [x, x], "gelu": [x, _NONE]}[kind]
        with sim.op(f"aten::{kind}", inputs):
            sim.launch(_elementwise(sim, kind, numel, _FUNCTORS[kind][1] * numel * 2))


def _loss(sim: _Sim) -> None:
    logits, target = _t([sim.tokens, _CLASSES]), _t([sim.tokens], "long")
    reduction = [_s(1), _s(-100)]
    with (
        sim.frame("torch/nn/functional.py(3462): cross_entropy"),
        sim.op("aten::cross_entropy_loss", [logits, target, _NONE, *reduction, _s("0.")]),
    ):
        with (
            sim.op("aten::log_softmax", [logits, _s(1), _NONE]),
            sim.op("aten::_log_softmax", [logits, _s(1), _s("False")]),
        ):
            nbytes = sim.tokens * _CLASSES * (2 + 4)
            sim.launch(_row_kernel(sim, _SOFTMAX, sim.tokens, nbytes))
        with (
            sim.op("aten::nll_loss_nd", [_t([sim.tokens, _CLASSES], "float"), target, _NONE]),
            sim.op("aten::nll_loss_forward", [_t([sim.tokens, _CLASSES], "float"), target]),
        ):
            sim.launch(_Kernel(_NLL, sim.kernel_ns(8.0), (1, 1, 1), (32, 1, 1), 32, 0))


def _argmax(sim: _Sim) -> None:
    logits = _t([sim.tokens, _CLASSES])
    with (
        sim.frame("<built-in method argmax of Tensor object at 0x7f3a2c1ba2f0>"),
        sim.op("aten::argmax", [logits, _s(-1), _s("False")]),
    ):
        kernel = _Kernel(
            _ARGMAX,
            sim.memory_ns(sim.tokens * _CLASSES * 2),
            (sim.tokens // 4, 1, 1),
            (32, 16, 1),
            32,
            16,
        )
        sim.launch(kernel)


# backward


@contextmanager
def _autograd(sim: _Sim, function: str) -> Iterator[None]:
    with (
        sim.op(f"autograd::engine::evaluate_function: {function}", cost_us=2.0),
        sim.op(function, cost_us=2.0),
    ):
        yield


_BACKWARD_FRAMES = (
    "torch/_tensor.py(648): backward",
    "torch/autograd/__init__.py(353): backward",
    "torch/autograd/graph.py(824): _engine_run_backward",
    "<built-in method run_backward of torch._C._EngineBase object at 0x7f8e5c2d1a40>",
)


def _backward(sim: _Sim) -> None:
    cfg = sim.cfg
    slots = _slots(cfg.layers + 1, cfg.collectives)
    with (
        sim.frame(_BACKWARD_FRAMES[0]),
        sim.frame(_BACKWARD_FRAMES[1]),
        sim.frame(_BACKWARD_FRAMES[2]),
        sim.frame(_BACKWARD_FRAMES[3]),
    ):
        _loss_backward(sim)
        _bucket_collectives(sim, slots[0])
        for unit, layer in enumerate(reversed(range(cfg.layers)), start=1):
            _block_backward(sim, layer)
            _bucket_collectives(sim, slots[unit])
        if cfg.collectives:
            sim.stream_wait(sim.compute, sim.comm, sim.location())  # DDP finalize_backward


def _loss_backward(sim: _Sim) -> None:
    tokens = sim.tokens
    with _autograd(sim, "NllLossBackward0"), sim.op("aten::nll_loss_backward"):
        sim.launch(
            _Kernel(
                _NLL_BWD,
                sim.memory_ns(tokens * _CLASSES * 4),
                (tokens // 128, 1, 1),
                (128, 1, 1),
                32,
                0,
            )
        )
    with _autograd(sim, "LogSoftmaxBackward0"), sim.op("aten::_log_softmax_backward_data"):
        sim.launch(_row_kernel(sim, _SOFTMAX_BWD, tokens, tokens * _CLASSES * 10))
    _linear_backward(sim, 4 * sim.cfg.layers, sim.cfg.hidden, _CLASSES, bias_sum=True)


def _block_backward(sim: _Sim, layer: int) -> None:
    hidden = sim.cfg.hidden
    _linear_backward(sim, 4 * layer + 3, 4 * hidden, hidden)
    with _autograd(sim, "GeluBackward0"), sim.op("aten::gelu_backward"):
        numel = sim.tokens * 4 * hidden
        sim.launch(_elementwise(sim, "gelu_backward", numel, 3 * numel * 2))
    _linear_backward(sim, 4 * layer + 2, hidden, 4 * hidden)
    _layer_norm_backward(sim)
    _linear_backward(sim, 4 * layer + 1, hidden, hidden)
    with (
        _autograd(sim, "ScaledDotProductFlashAttentionBackward0"),
        sim.op("aten::_scaled_dot_product_flash_attention_backward"),
        sim.op("aten::_flash_attention_backward"),
    ):
        sim.launch(_flash(sim, _FLASH_DOT, 0.1))
        sim.launch(_flash(sim, _FLASH_BWD, 2.4))
    _linear_backward(sim, 4 * layer, hidden, 3 * hidden, memset=True)
    _layer_norm_backward(sim)


def _layer_norm_backward(sim: _Sim) -> None:
    nbytes = 3 * sim.tokens * sim.cfg.hidden * 2
    with _autograd(sim, "NativeLayerNormBackward0"), sim.op("aten::native_layer_norm_backward"):
        sim.launch(_row_kernel(sim, _LAYER_NORM_BWD, sim.tokens, nbytes))


def _linear_backward(
    sim: _Sim, index: int, d_in: int, d_out: int, *, memset: bool = False, bias_sum: bool = False
) -> None:
    fp32 = sim.fp32(index)
    dtype, tokens = ("float" if fp32 else _BF16), sim.tokens
    with _autograd(sim, "MmBackward0" if fp32 else "AddmmBackward0"):
        with sim.op("aten::mm", [_t([tokens, d_out], dtype), _t([d_out, d_in], dtype)]):
            sim.launch(_gemm(sim, "dgrad", tokens, d_out, d_in, fp32=fp32))
        grad_t = _t([d_out, tokens], dtype, strides=[1, d_out])
        with sim.op("aten::mm", [grad_t, _t([tokens, d_in], dtype)]):
            if memset:
                sim.memset(4096)
            sim.launch(_gemm(sim, "wgrad", d_out, tokens, d_in, fp32=fp32))
        if bias_sum and not fp32:
            with sim.op("aten::sum", [_t([tokens, d_out]), _Arg([], "ScalarList", [], "[0]")]):
                grid = (math.ceil(d_out / 32), 1, 1)
                sim.launch(
                    _Kernel(_SUM, sim.memory_ns(tokens * d_out * 2), grid, (32, 16, 1), 32, 16)
                )


def _optimizer_step(sim: _Sim) -> None:
    params = _parameter_shapes(sim.cfg)
    with (
        sim.frame("torch/optim/optimizer.py(485): wrapper"),
        sim.annotation("Optimizer.step#AdamW.step"),
        sim.frame("torch/optim/optimizer.py(79): _use_grad"),
        sim.frame("torch/optim/adam.py(213): step"),
        sim.frame("torch/optim/adam.py(540): _multi_tensor_adam"),
    ):
        nbytes = 4 * sum(_numel(p) for p in params)
        lists = _tensors(params)
        for op, lists_used, functor, binary in (
            ("aten::_foreach_lerp_", 3, "TernaryOpScalarFunctor", "at::native::LerpFunctor<float>"),
            ("aten::_foreach_mul_", 1, "BinaryOpScalarFunctor", "std::multiplies<float>"),
            ("aten::_foreach_addcmul_", 3, "PointwiseOpScalarFunctor", "std::multiplies<float>"),
            ("aten::_foreach_sqrt", 2, "UnaryOpFunctor", "at::native::Sqrt<float>"),
            ("aten::_foreach_div_", 2, "BinaryOpListAlphaFunctor", "std::divides<float>"),
            ("aten::_foreach_add_", 2, "BinaryOpListAlphaFunctor", "std::plus<float>"),
        ):
            with sim.op(op, [lists] * min(lists_used, 2) + [_s(1)]):
                name = _ADAM.format(n=lists_used, functor=functor, op=binary)
                dur = sim.memory_ns(nbytes * (lists_used + 1))
                sim.launch(_Kernel(name, dur, (4 * sim.spec.num_sms, 1, 1), (512, 1, 1), 32, 0))


def _zero_grad(sim: _Sim) -> None:
    with (
        sim.frame("torch/optim/optimizer.py(1009): zero_grad"),
        sim.annotation("Optimizer.zero_grad#AdamW.zero_grad"),
    ):
        sim.tick(25.0)


def _parameter_shapes(cfg: GeneratorConfig) -> list[list[int]]:
    h = cfg.hidden
    block = [
        [h],
        [h],
        [3 * h, h],
        [3 * h],
        [h, h],
        [h],
        [h],
        [h],
        [4 * h, h],
        [4 * h],
        [h, 4 * h],
        [h],
    ]
    return block * cfg.layers + [[_CLASSES, h], [_CLASSES]]


# collectives


def _slots(units: int, count: int) -> list[int]:
    """How many collectives to launch after each of ``units`` (never after the last one)."""
    per = [0] * units
    for index in range(count):
        per[max(0, round((index + 1) * (units - 1) / count) - 1)] += 1
    return per


def _bucket_collectives(sim: _Sim, count: int) -> None:
    if count == 0:
        return
    nelems = sum(_numel(p) for p in _parameter_shapes(sim.cfg)) // max(1, sim.cfg.collectives)
    for _ in range(count):
        _collective(sim, nelems, _nccl_ns(sim.cfg.world_size, nelems * 2))


def _nccl_ns(world_size: int, nbytes: int) -> int:
    factor = 2 * (world_size - 1) / world_size if world_size > 1 else 0.1
    return _NCCL_FIXED_NS + round(factor * nbytes / _BUS_GBPS)


def _collective(sim: _Sim, nelems: int, base_ns: int, after_compute: bool = True) -> None:
    coll = len(sim.coll_base)
    sim.coll_base.append(base_ns)
    collective = _collective_args(sim.cfg, nelems)
    with sim.op("record_param_comms", extra=_param_comms_args(collective)):
        if after_compute:
            sim.stream_wait(sim.comm, sim.compute, None)
        with sim.annotation("nccl:all_reduce") as ext:
            kernel = _Kernel(_NCCL_ALLREDUCE, base_ns, (16, 1, 1), (512, 1, 1), 96, 103_808)
            work = sim.launch(kernel, sim.comm, "cudaLaunchKernelExC", collective, coll)
            sim.ranges.append(_GpuRange("nccl:all_reduce", sim.comm, work.start, work.end, ext))


def _collective_args(cfg: GeneratorConfig, nelems: int) -> JSON:
    return {
        "Collective name": "allreduce",
        "In msg nelems": nelems,
        "Out msg nelems": nelems,
        "Group size": cfg.world_size,
        "dtype": "BFloat16",
        "In split size": "[]",
        "Out split size": "[]",
        "Process Group Name": "0",
        "Process Group Description": "default_pg",
        "Process Group Ranks": str(list(range(cfg.world_size))),
    }


def _param_comms_args(c: JSON) -> JSON:
    """``record_param_comms`` carries the same fields, in the order PyTorch writes them."""
    keys = ("Process Group Name", "Global rank stride", "Out msg nelems", "Process Group Ranks")
    more = ("Group size", "Global rank start", "In msg nelems", "In split size", "Out split size")
    tail = ("dtype", "Process Group Description", "Collective name")
    fixed = {"Global rank stride": 1, "Global rank start": 0}
    return {key: c.get(key, fixed.get(key)) for key in keys + more + tail}


def _exposed_collective(sim: _Sim, exposed: ExposedCollective) -> None:
    with (
        sim.frame("torch/distributed/c10d_logger.py(81): wrapper"),
        sim.frame("torch/distributed/distributed_c10d.py(2806): all_reduce"),
    ):
        nelems, base = round(exposed.mb * 2**20 / 2), round(exposed.ms * 1e6)
        _collective(sim, nelems, base, after_compute=not exposed.fixed)
        sim.stream_wait(sim.compute, sim.comm, sim.location())


# injected statements of the loop


def _host_sync(sim: _Sim, sync: HostSync) -> None:
    scalar = _t([], "float")
    with (
        sim.frame(sim.user_frame(sync.line, _loop_function(sim))),
        sim.blame_if(not sync.fixed, "host_sync"),
    ):
        with (
            sim.frame("<built-in method item of Tensor object at 0x7f3a2c1b6f20>"),
            sim.op("aten::item", [scalar]),
            sim.op("aten::_local_scalar_dense", [scalar]),
        ):
            sim.copy("Memcpy DtoH (Device -> Pageable)", 4, sim.kernel_ns(1.4), call_us=6.0)
            if not sync.fixed:
                sim.stream_sync(sim.compute)
        _python_work(sim, sync.host_work_us)


def _python_work(sim: _Sim, us: float) -> None:
    with (
        sim.frame("logging/__init__.py(1517): info"),
        sim.frame("logging/__init__.py(1664): _log"),
        sim.frame("logging/__init__.py(1690): handle"),
    ):
        sim.tick(us, spread=0.03)


def _checkpoint(sim: _Sim, checkpoint: Checkpoint) -> None:
    dims = [4096, 4096]
    state = _t(dims)
    with (
        sim.frame(sim.user_frame(checkpoint.line, _loop_function(sim))),
        sim.blame("checkpoint"),
        sim.frame("torch/serialization.py(944): save"),
        sim.frame("torch/serialization.py(1190): _save"),
    ):
        with (
            sim.op("aten::to", [state, _NONE, _NONE, _s("False"), _s("False"), _NONE]),
            sim.op("aten::_to_copy", [state, _NONE, _NONE, _NONE, _NONE, _s("False"), _NONE]),
            sim.op("aten::copy_", [_t(dims), state, _s("False")]),
        ):
            nbytes = _numel(dims) * 2
            sim.copy("Memcpy DtoH (Device -> Pageable)", nbytes, round(nbytes / _DTOH_GBPS))
            sim.stream_sync(sim.compute)  # copy_ to pageable memory is not non_blocking
        with sim.frame("<built-in method write_record of PyCapsule object at 0x7f3a2d0c1e70>"):
            sim.tick(checkpoint.ms * 1000, spread=0.03)


def _startup(sim: _Sim, startup: Startup) -> None:
    """A warm-up call of the model: a first small kernel (so the device's span begins), the
    start-up of ``startup.kind``, then the first GEMM."""
    cfg = sim.cfg
    tokens, hidden = sim.tokens, cfg.hidden
    x = _t([tokens, hidden])
    us = startup.ms * 1000
    with sim.frame(sim.user_frame(startup.line, "warmup")), sim.blame("warmup"):
        with sim.op("aten::zeros", [_s(str([tokens, hidden]))]), sim.op("aten::fill_", [x]):
            sim.launch(_elementwise(sim, "fill", tokens * hidden, tokens * hidden * 2))
        sim.tick(30.0)
        if startup.kind == "compile":
            with (
                sim.frame("torch/_dynamo/convert_frame.py(1017): _compile"),
                sim.annotation("compile_inner"),
            ):
                sim.tick(us, spread=0.02)
        elif startup.kind == "graph_capture":
            with sim.frame("torch/cuda/graphs.py(186): __enter__"):
                sim.runtime("cudaStreamBeginCapture", 3.0)
            for _ in range(8):  # captured launches record into the graph and run no kernels
                with sim.op("aten::mm", [x, _t([hidden, hidden])]):
                    sim.runtime("cudaLaunchKernel", cfg.launch_us)
            with sim.frame("torch/cuda/graphs.py(192): __exit__"):
                sim.runtime("cudaStreamEndCapture", 3.0)
                sim.runtime("cudaGraphInstantiate", us * 0.99)
        weight = _t([hidden, hidden])
        with sim.op("aten::mm", [x, weight]):
            if startup.kind == "context_init":
                sim.runtime("cudaFree", us, after=sim.stream_end())
            call_us = us if startup.kind == "module_load" else None
            sim.launch(_gemm(sim, "fwd", tokens, hidden, hidden, fp32=False), call_us=call_us)
        sim.tick(30.0)


def _allocator_churn(sim: _Sim, churn: AllocatorChurn) -> None:
    dims = [sim.cfg.batch_size, sim.cfg.seq_len, 4 * sim.cfg.hidden]
    sizes = [_s(str(dims)), _s(6), _NONE, _s(0), _NONE, _NONE]
    with (
        sim.frame(sim.user_frame(churn.line, _loop_function(sim))),
        sim.blame_if(not churn.fixed, "allocator"),
    ):
        for _ in range(churn.count):
            with (
                sim.frame("<built-in method empty of type object at 0x7f3a4e2b0d60>"),
                sim.op("aten::empty", sizes),
            ):
                if not churn.fixed:
                    sim.runtime("cudaFree", churn.free_us, after=sim.stream_end())
                    sim.runtime("cudaMalloc", churn.malloc_us)
            with sim.op("aten::fill_", [_t(dims, "float"), _s("0.")]):
                numel = _numel(dims)
                sim.launch(_elementwise(sim, "fill", numel, numel * 4))


# --- truth ------------------------------------------------------------------------------------


Interval: TypeAlias = tuple[int, int]


def _union(intervals: Iterable[Interval]) -> list[Interval]:
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(merged: Sequence[Interval]) -> int:
    return sum(end - start for start, end in merged)


def _holes(merged: Sequence[Interval]) -> list[Interval]:
    return [(a[1], b[0]) for a, b in itertools.pairwise(merged) if b[0] > a[1]]


def _attribute(holes: Sequence[Interval], blames: Sequence[_Blame]) -> list[Gap]:
    """Split each idle hole among the blamed host blocks overlapping it; slivers go to the
    block before them (the first block also takes the hole's start)."""
    gaps: list[Gap] = []
    for low, high in holes:
        pieces = sorted(
            (max(low, b.start), b.cause, b.location)
            for b in blames
            if b.start < high and b.end > low
        )
        if not pieces:
            continue
        starts = [low] + [p[0] for p in pieces[1:]]
        ends = [*starts[1:], high]
        for start, end, (_, cause, where) in zip(starts, ends, pieces, strict=True):
            if end > start:
                gaps.append(Gap(start, end, cause, where))
    return _merge_gaps(gaps)


def _merge_gaps(gaps: Iterable[Gap]) -> list[Gap]:
    merged: list[Gap] = []
    for gap in sorted(gaps):
        last = merged[-1] if merged else None
        if last and (last.end_ns, last.cause, last.location) == (
            gap.start_ns,
            gap.cause,
            gap.location,
        ):
            merged[-1] = last._replace(end_ns=gap.end_ns)
        else:
            merged.append(gap)
    return merged


def _device_truth(works: Sequence[_Work]) -> DeviceTruth:
    def union_of(keep: Iterable[_Work]) -> list[Interval]:
        return _union((w.start, w.end) for w in keep)

    kernels = [w for w in works if w.kind == "kernel"]
    return DeviceTruth(
        span_ns=max(w.end for w in works) - min(w.start for w in works),
        busy_ns=_length(union_of(works)),
        compute_ns=_length(union_of(w for w in kernels if not w.comm)),
        communication_ns=_length(union_of(w for w in kernels if w.comm)),
        memcpy_ns=_length(union_of(w for w in works if w.kind == "gpu_memcpy")),
        memset_ns=_length(union_of(w for w in works if w.kind == "gpu_memset")),
    )


def _truth(sim: _Sim, offset: int) -> Truth:
    holes = _holes(_union((w.start, w.end) for w in sim.works))
    gaps = _attribute(holes, sim.blames) + [g for g in sim.comm_gaps if g.end_ns > g.start_ns]
    gaps = [g._replace(start_ns=g.start_ns + offset, end_ns=g.end_ns + offset) for g in gaps]
    lost: dict[str, int] = {}
    for gap in gaps:
        lost[gap.cause] = lost.get(gap.cause, 0) + gap.dur_ns
    injected = dict.fromkeys(_INJECTED_NAME[type(i)] for i in sim.cfg.inject)
    return Truth(
        device=sim.cfg.rank,
        devices={sim.cfg.rank: _device_truth(sim.works)},
        step_durations_ns=tuple(s.end - s.start for s in sim.steps),
        kernel_count=sum(1 for w in sim.works if w.kind == "kernel"),
        gaps=tuple(sorted(gaps)),
        injected=tuple(injected),
        lost_ns_by_cause=lost,
    )


# --- the document -----------------------------------------------------------------------------


def _us(ns: int) -> float:
    """ns as float µs; exact to the ns when read back as round(ts * 1000)."""
    return ns / 1000


def _host_events(sim: _Sim, offset: int) -> list[JSON]:
    out = []
    for event in sim.host:
        copy = dict(event)
        copy.update(ts=_us(event["ts"] + offset), dur=_us(event["dur"]), args=dict(event["args"]))
        out.append(copy)
    return out


def _device_events(sim: _Sim, offset: int) -> list[JSON]:
    out: list[JSON] = []
    device = sim.cfg.rank
    for w in sim.works:
        event = {"ph": "X", "cat": w.kind, "name": w.name, "pid": device, "tid": w.stream}
        event.update(ts=_us(w.start + offset), dur=_us(w.end - w.start), args=dict(w.args))
        out.append(event)
        flow = {"ph": "s", "id": w.correlation, "pid": sim.pid, "tid": sim.pid}
        out.append({**flow, "ts": _us(w.launch + offset), "cat": "ac2g", "name": "ac2g"})
        end = {"ph": "f", "id": w.correlation, "pid": device, "tid": w.stream}
        out.append({**end, "ts": _us(w.start + offset), "cat": "ac2g", "name": "ac2g", "bp": "e"})
    return out


def _gpu_annotations(sim: _Sim, offset: int) -> list[JSON]:
    ranges = list(sim.ranges)
    for step in sim.steps:
        inside = [w for w in sim.works if step.start <= w.launch < step.end]
        if inside:
            start, end = min(w.start for w in inside), max(w.end for w in inside)
            ranges.append(_GpuRange(step.name, sim.compute, start, end, step.ext))
    out: list[JSON] = []
    for r in ranges:
        event = {"ph": "X", "cat": "gpu_user_annotation", "name": r.name, "pid": sim.cfg.rank}
        event.update(tid=r.stream, ts=_us(r.start + offset), dur=_us(r.end - r.start))
        event["args"] = {"External id": r.ext}
        out.append(event)
    return out


def _number_events(events: Sequence[JSON]) -> None:
    """``Ev Idx``: operators and annotations first, then Python frames, each in time order."""
    ops = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation")]
    frames = [e for e in events if e.get("cat") == "python_function"]
    for index, event in enumerate(ops + frames):
        event["args"]["Ev Idx"] = index


def _metadata(sim: _Sim, window: int) -> list[JSON]:
    ts = _us(window)
    out: list[JSON] = []

    def meta(name: str, pid: int | str, tid: int | str, args: JSON) -> None:
        out.append({"name": name, "ph": "M", "ts": ts, "pid": pid, "tid": tid, "args": args})

    meta("process_name", sim.pid, 0, {"name": "python3"})
    meta("process_labels", sim.pid, 0, {"labels": "CPU"})
    meta("process_sort_index", sim.pid, 0, {"sort_index": sim.pid})
    for device in range(sim.cfg.world_size):
        meta("process_name", device, 0, {"name": "python3"})
        meta("process_labels", device, 0, {"labels": f"GPU {device}"})
        meta("process_sort_index", device, 0, {"sort_index": 5_000_000 + device})
    for stream in sorted({w.stream for w in sim.works}):
        meta("thread_name", sim.cfg.rank, stream, {"name": f"stream {stream} "})
        meta("thread_sort_index", sim.cfg.rank, stream, {"sort_index": stream})
    meta("thread_name", sim.pid, sim.pid, {"name": f"thread {sim.pid} (pt_main_thread)"})
    meta("thread_sort_index", sim.pid, sim.pid, {"sort_index": sim.pid})
    return out


def _window_events(window: int, end: int) -> list[JSON]:
    span: JSON = {"ph": "X", "cat": "Trace", "ts": _us(window), "dur": _us(end - window)}
    span.update(pid="Spans", tid="PyTorch Profiler", name="PyTorch Profiler (0)")
    span["args"] = {"Op count": 0}
    sort: JSON = {
        "name": "process_sort_index",
        "ph": "M",
        "ts": _us(window),
        "pid": "Spans",
        "tid": 0,
    }
    sort["args"] = {"sort_index": 536_870_912}
    start: JSON = {"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g"}
    start.update(pid="Traces", tid="Trace PyTorch Profiler", ts=_us(window))
    stop: JSON = {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": ""}
    stop["ts"] = _us(end + 180_000)
    return [span, sort, start, stop]


def _device_properties(spec: DeviceSpec, count: int) -> list[JSON]:
    return [
        {
            "id": device,
            "name": spec.name,
            "totalGlobalMem": spec.total_mem,
            "computeMajor": spec.major,
            "computeMinor": spec.minor,
            "maxThreadsPerBlock": 1024,
            "maxThreadsPerMultiprocessor": 2048,
            "regsPerBlock": 65536,
            "warpSize": 32,
            "sharedMemPerBlock": 49152,
            "numSms": spec.num_sms,
            "regsPerMultiprocessor": 65536,
            "sharedMemPerBlockOptin": spec.smem_optin,
            "sharedMemPerMultiprocessor": spec.smem_per_sm,
        }
        for device in range(count)
    ]


def _distributed_info(cfg: GeneratorConfig) -> JSON:
    ranks = list(range(cfg.world_size))
    group: JSON = {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl"}
    group.update(pg_size=cfg.world_size, ranks=ranks)
    info: JSON = {"backend": "nccl", "rank": cfg.rank, "world_size": cfg.world_size}
    info.update(pg_count=1, pg_config=[group], nccl_version="2.21.5")
    return info


def _document(sim: _Sim, offset: int) -> JSON:
    cfg = sim.cfg
    events = _host_events(sim, offset) + _device_events(sim, offset) + _gpu_annotations(sim, offset)
    events.sort(key=lambda e: e["ts"])
    _number_events(events)
    window = _T0_NS + offset
    end = max([w.end for w in sim.works] + [sim.now]) + offset + 50_000
    events += _metadata(sim, window) + _window_events(window, end)
    doc: JSON = {
        "schemaVersion": 1,
        "deviceProperties": _device_properties(sim.spec, cfg.world_size),
    }
    doc.update(cupti_version=24, cuda_runtime_version=12060, cuda_driver_version=12080)
    doc["distributedInfo"] = _distributed_info(cfg)
    doc.update({"record_shapes": 1} if cfg.record_shapes else {})
    doc.update({"with_stack": 1} if cfg.with_stack else {})
    doc["trace_id"] = f"{sim.rng.getrandbits(128):032X}"
    doc.update(displayTimeUnit="ms", baseTimeNanoseconds=_BASE_TIME_NS + cfg.seed % 1000 * 10**9)
    doc["traceEvents"] = events
    doc["traceName"] = f"./log/node0_{sim.pid}.{(_BASE_TIME_NS + end) // 10**6}.pt.trace.json"
    return doc


def _dumps(document: JSON) -> str:
    """Kineto's layout: one top-level key per line, one event per line."""
    lines = []
    for key, value in document.items():
        if key == "traceEvents":
            body = ",\n  ".join(json.dumps(e) for e in value)
            lines.append(f'  "traceEvents": [\n  {body}\n  ]')
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


# --- entry points -----------------------------------------------------------------------------


def _clock_offset_ns(rank: int) -> int:
    """Ranks' clocks disagree by a few µs, as separate hosts' do."""
    return rank * 2_750 + (rank % 3) * 410


def _simulate(cfg: GeneratorConfig, coll_end: Mapping[int, int]) -> _Sim:
    sim = _Sim(cfg, coll_end)
    _run_program(sim)
    return sim


def _package(sim: _Sim) -> GeneratedTrace:
    offset = _clock_offset_ns(sim.cfg.rank)
    return GeneratedTrace(document=_document(sim, offset), truth=_truth(sim, offset))


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
        inject.append(replace(injection, fixed=True) if fix else injection)  # type: ignore[arg-type]
    return replace(config, inject=tuple(inject))


# --- series of runs: scaling over GPU counts, sweeps over batch sizes -------------------------


def _step_ns(traces: Sequence[GeneratedTrace], steps: int) -> float:
    """Mean over ranks of device span / steps: the per-GPU step time the series are judged by."""
    return sum(t.truth.span_ns for t in traces) / len(traces) / steps


@dataclass(frozen=True)
class ScalingSeries:
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


@dataclass(frozen=True)
class BatchSweep:
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
