"""One rank's discrete-event simulation: host thread, device streams, the model's constants.

Contract: :class:`Sim` records host events and device work in integer ns; the program
(:mod:`gpuscope.testing._program`) drives it, :mod:`gpuscope.testing._output` reads it back.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, NamedTuple, TypeVar

import msgspec

from gpuscope.testing.config import DEVICES, JSON, DeviceSpec, Fp32Gemm, GeneratorConfig, Straggler
from gpuscope.testing.truth import Gap

# --- constants of the model -------------------------------------------------------------------

T0_NS = 4_200_000_000_000  # the trace clock's origin: ts ~ 4.2e9 µs keeps 3 decimals exact
BASE_TIME_NS = 1_735_689_600_000_000_000  # 2025-01-01T00:00:00Z
_REF_BATCH = 8
CLASSES = 4096  # output width of the head
HEAD_DIM = 128
_DRAM_EFFICIENCY = 0.85
FP32_SLOWDOWN = 8.0  # SIMT FP32 vs bf16 tensor cores, achieved
PINNED_GBPS = 24.0
_STAGE_GBPS = 6.0  # host memcpy into the driver's pinned staging buffer
_PAGEABLE_DMA_GBPS = 12.0
DTOH_GBPS = 10.0
BUS_GBPS = 360.0  # NCCL ring bus bandwidth (NVLink)
NCCL_FIXED_NS = 8_000
BF16 = "c10::BFloat16"
ITEMSIZE = {BF16: 2, "float": 4, "long": 8}
MODULE_LINE = 118
LOOP_LINE = 48
COPY_LINE = 49
STEP_LINE = 50
CALL_IMPL = "torch/nn/modules/module.py(1773): _call_impl"
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
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


class Kernel(msgspec.Struct, frozen=True):
    name: str
    dur_ns: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    regs: int
    smem: int


GEMM_SM90 = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
    "_execute_segment_k_off_kernel__5x_cublas"
)
GEMM_SM80 = (
    "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1"
    "_tensor16x8x16_kernel"
)
GEMM_DGRAD = (
    "sm80_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x32_stage4_warpsize2x2x1"
    "_tensor16x8x16_kernel"
)
GEMM_WGRAD = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn"
SGEMM = {"fwd": "ampere_sgemm_128x64_tn", "dgrad": "ampere_sgemm_128x64_nn"}
SGEMM_WGRAD = "volta_sgemm_128x64_nn"
FLASH_FWD = (
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4,"
    " false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4,"
    " cutlass::bfloat16_t> >, false, true, false, false, false, true, false>"
    "(pytorch_flash::Flash_fwd_params)"
)
FLASH_BWD = (
    "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<pytorch_flash::"
    "Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t,"
    " pytorch_flash::Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, false, false,"
    " false, false, false, false, false, false>(pytorch_flash::Flash_bwd_params)"
)
FLASH_DOT = (
    "void pytorch_flash::flash_bwd_dot_do_o_kernel<true, pytorch_flash::Flash_bwd_kernel_traits"
    "<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, pytorch_flash::"
    "Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> > >(pytorch_flash::Flash_bwd_params)"
)
LAYER_NORM = (
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>"
    "(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*,"
    " float*, c10::BFloat16*)"
)
LAYER_NORM_BWD = (
    "void at::native::(anonymous namespace)::layer_norm_grad_input_kernel_vectorized"
    "<c10::BFloat16, float>(c10::BFloat16 const*, c10::BFloat16 const*, float const*,"
    " float const*, c10::BFloat16 const*, c10::BFloat16*, int)"
)
SOFTMAX = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float, float,"
    " at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, c10::BFloat16 const*,"
    " int)"
)
SOFTMAX_BWD = (
    "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float,"
    " at::native::(anonymous namespace)::LogSoftMaxBackwardEpilogue>(float*, float const*,"
    " float const*, int)"
)
NLL = (
    "void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float,"
    " long>(float*, float*, float const*, long const*, float const*, bool, long, long, long, long)"
)
NLL_BWD = (
    "void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d<float, long>"
    "(float*, float const*, long const*, float const*, float const*, bool, int, int, long, long)"
)
SUM = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper_t"
    "<float, at::native::sum_functor<float, float, float>::operator()(at::TensorIterator&)::"
    "{lambda(float, float)#1}>, unsigned int, float, 4> >(at::native::ReduceOp<float,"
    " at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()"
    "(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4>)"
)
ARGMAX = (
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::"
    "ArgMaxOps<c10::BFloat16>, unsigned int, long, 4> >(at::native::ReduceOp<c10::BFloat16,"
    " at::native::ArgMaxOps<c10::BFloat16>, unsigned int, long, 4>)"
)
ADAM = (
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous"
    " namespace)::TensorListMetadata<{n}>, at::native::(anonymous namespace)::{functor}<float,"
    " {n}, {n}, 0>, {op}, float>(at::native::(anonymous namespace)::TensorListMetadata<{n}>,"
    " at::native::(anonymous namespace)::{functor}<float, {n}, {n}, 0>, {op}, float)"
)
NCCL_ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
FUNCTORS = {
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


def elementwise_name(kind: str) -> str:
    functor, arity = FUNCTORS[kind]
    array = f"std::array<char*, {arity}ul>"
    return (
        f"void at::native::vectorized_elementwise_kernel<4, {functor}, {array} >"
        f"(int, {functor}, {array})"
    )


def launch_args(spec: DeviceSpec, kernel: Kernel) -> JSON:
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


class Arg(NamedTuple):
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


def tensor_arg(dims: Sequence[int], dtype: str = BF16, strides: Sequence[int] | None = None) -> Arg:
    given = list(strides) if strides is not None else _contiguous(dims)
    return Arg(list(dims), dtype, given, "")


def scalar_arg(value: object) -> Arg:
    return Arg([], "Scalar", [], str(value))


def tensor_list_arg(shapes: Sequence[Sequence[int]]) -> Arg:
    return Arg([list(s) for s in shapes], "TensorList", [_contiguous(s) for s in shapes], "")


NO_ARG = Arg([], "", [], "")


def _shape_args(inputs: Sequence[Arg]) -> JSON:
    return {
        "Concrete Inputs": [a.concrete for a in inputs],
        "Input type": [a.type for a in inputs],
        "Input Strides": [a.strides for a in inputs],
        "Input Dims": [a.dims for a in inputs],
    }


def element_count(dims: Sequence[int]) -> int:
    return math.prod(dims)


# --- the simulation ---------------------------------------------------------------------------


class Work(msgspec.Struct, frozen=True):
    kind: str  # "kernel", "gpu_memcpy", "gpu_memset"
    name: str
    stream: int
    start: int
    end: int
    launch: int  # start of the runtime call that enqueued it
    correlation: int
    args: JSON
    comm: bool


class _Wait(msgspec.Struct, frozen=True):
    until: int  # the source stream's end when the event was recorded
    busy_from: int  # start of the source stream's last work
    location: str | None  # a gap location when compute waits for communication


class Blame(msgspec.Struct, frozen=True):
    start: int
    end: int
    cause: str
    location: str


class GpuRange(msgspec.Struct, frozen=True):
    name: str
    stream: int
    start: int
    end: int
    ext: int


class HostStep(msgspec.Struct, frozen=True):
    name: str
    start: int
    end: int
    ext: int


_I = TypeVar("_I")


class Sim:
    """Host thread and device streams of one rank; events are recorded in ns."""

    def __init__(self, cfg: GeneratorConfig, coll_end: Mapping[int, int]) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed * 1_000_003 + cfg.rank)
        self.spec = DEVICES[cfg.device]
        self.pid = 20_000 + 37 * (cfg.seed % 500) + cfg.rank
        self.now = T0_NS + 40_000
        self.host: list[JSON] = []
        self.works: list[Work] = []
        self.ready: dict[int, int] = {}
        self.last_start: dict[int, int] = {}
        self.waits: dict[int, _Wait] = {}
        self.py_stack: list[tuple[int, str]] = []
        self.ops: list[int] = []
        self.blames: list[Blame] = []
        self.comm_gaps: list[Gap] = []
        self.ranges: list[GpuRange] = []
        self.steps: list[HostStep] = []
        self.coll_end = coll_end
        self.coll_starts: list[int] = []
        self.coll_base: list[int] = []
        self.gemm_extra_ns = straggler_extra_ns(cfg, 0)
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
        inputs: Sequence[Arg] = (),
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
        self.blames.append(Blame(start, self.now, cause, where))

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
    ) -> Work:
        start = self._after_wait(stream, max(ready, self.ready.get(stream, 0)))
        if coll is not None:
            self.coll_starts.append(start)
            dur = max(dur, self.coll_end.get(coll, 0) - start)
        corr, comm = args["correlation"], coll is not None
        work = Work(kind, name, stream, start, start + dur, launch, corr, args, comm)
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
        kernel: Kernel,
        stream: int | None = None,
        api: str = "cudaLaunchKernel",
        extra: JSON | None = None,
        coll: int | None = None,
        call_us: float | None = None,
    ) -> Work:
        target = self.compute if stream is None else stream
        start, corr = self.runtime(api, self.cfg.launch_us if call_us is None else call_us)
        args = self._device_args(target, corr, kernel=True)
        args.update(launch_args(self.spec, kernel))
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

    def copy(self, name: str, nbytes: int, dur: int, call_us: float = 7.0) -> Work:
        """``cudaMemcpyAsync`` that only enqueues (pinned or device memory)."""
        start, corr = self.runtime("cudaMemcpyAsync", call_us)
        ready = start + round(self.cfg.launch_latency_us * 1000)
        args = _copy_args(self._device_args(self.compute, corr, kernel=False), nbytes, dur)
        return self.enqueue(
            "gpu_memcpy", name, self.compute, launch=start, ready=ready, dur=dur, args=args
        )

    def pageable_h2d(self, nbytes: int) -> Work:
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

    def memset(self, nbytes: int) -> Work:
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


def straggler_extra_ns(cfg: GeneratorConfig, step: int) -> int:
    """Each GEMM's extra time on a straggler whose GEMMs run slow in ``step``."""
    gemms = (4 * cfg.layers + 1) * (3 if cfg.mode == "train" else 1)
    extra = sum(s.extra_ms for s in straggling(cfg, step) if not s.on_host)
    return round(extra * 1e6 / gemms)


def straggling(cfg: GeneratorConfig, step: int) -> list[Straggler]:
    """The stragglers injected on this rank that are late in ``step``."""
    return [
        s
        for s in cfg.inject
        if isinstance(s, Straggler) and s.rank == cfg.rank and (not s.steps or step in s.steps)
    ]


def pinned_gb_per_s(device: str) -> float:
    """A pinned copy's rate (GB/s): what the facts table's host link gives (the replay's rate
    too), not a pageable copy's staging rate; :data:`PINNED_GBPS` for a GPU it does not know."""
    from gpuscope.facts import match_device  # noqa: PLC0415

    facts = match_device(device)
    rate = facts.pinned_copy_bytes_per_s if facts else None
    return rate / 1e9 if rate else PINNED_GBPS
