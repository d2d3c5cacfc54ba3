"""The simulated program: one training (or inference) loop, and each injection's shape in it.

Contract: :func:`run_program` drives a :class:`~gpuscope.testing._sim.Sim` through the loop the
config describes; each injection blames the device idleness it causes on its cause and line.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

from gpuscope.testing._sim import (
    ADAM,
    ARGMAX,
    BF16,
    BUS_GBPS,
    CALL_IMPL,
    CLASSES,
    COPY_LINE,
    DTOH_GBPS,
    FLASH_BWD,
    FLASH_DOT,
    FLASH_FWD,
    FP32_SLOWDOWN,
    FUNCTORS,
    GEMM_DGRAD,
    GEMM_SM80,
    GEMM_SM90,
    GEMM_WGRAD,
    HEAD_DIM,
    ITEMSIZE,
    LAYER_NORM,
    LAYER_NORM_BWD,
    LOADER,
    LOOP_LINE,
    MODULE_LINE,
    NCCL_ALLREDUCE,
    NCCL_FIXED_NS,
    NLL,
    NLL_BWD,
    NO_ARG,
    SGEMM,
    SGEMM_WGRAD,
    SOFTMAX,
    SOFTMAX_BWD,
    STEP_LINE,
    SUM,
    Arg,
    GpuRange,
    HostStep,
    Kernel,
    Sim,
    element_count,
    elementwise_name,
    launch_args,
    pinned_gb_per_s,
    scalar_arg,
    straggler_extra_ns,
    straggling,
    tensor_arg,
    tensor_list_arg,
)
from gpuscope.testing.config import (
    JSON,
    AllocatorChurn,
    Checkpoint,
    ExposedCollective,
    GeneratorConfig,
    HostSync,
    MemoryBoundChain,
    PageableH2DCopy,
    SlowDataLoader,
    Startup,
    TinyKernels,
)

# --- kernels of the model ---------------------------------------------------------------------


def _gemm(sim: Sim, role: str, m: int, k: int, n: int, *, fp32: bool) -> Kernel:
    """A GEMM of [m x k] @ [k x n]; ``role`` is fwd, dgrad or wgrad."""
    cfg = sim.cfg
    ratio = m * k * n / (sim.tokens * cfg.hidden * cfg.hidden)
    us = cfg.gemm_us * ratio * sim.batch_scale * (FP32_SLOWDOWN if fp32 else 1.0)
    dur = sim.kernel_ns(us) + sim.gemm_extra_ns
    tiles = (math.ceil(n / 128), math.ceil(m / 128), 1)
    if fp32:
        name = SGEMM.get(role, SGEMM_WGRAD)
        return Kernel(
            name, dur, (math.ceil(n / 64), math.ceil(m / 128), 1), (128, 1, 1), 122, 12544
        )
    if role == "fwd" and sim.spec.major >= 9:
        return Kernel(GEMM_SM90, dur, (sim.spec.num_sms, 1, 1), (384, 1, 1), 168, 231_424)
    name = {"fwd": GEMM_SM80, "dgrad": GEMM_DGRAD}.get(role, GEMM_WGRAD)
    return Kernel(name, dur, tiles, (256, 1, 1), 238, 81_920)


def _elementwise(sim: Sim, kind: str, numel: int, nbytes: float, us: float | None = None) -> Kernel:
    dur = sim.kernel_ns(us) if us is not None else sim.memory_ns(nbytes)
    grid = (max(1, min(math.ceil(numel / 512), 2**31 - 1)), 1, 1)
    return Kernel(elementwise_name(kind), dur, grid, (128, 1, 1), 24, 0)


def _row_kernel(sim: Sim, name: str, rows: int, nbytes: float) -> Kernel:
    return Kernel(name, sim.memory_ns(nbytes), (rows, 1, 1), (32, 4, 1), 40, 24)


def _flash(sim: Sim, name: str, scale: float) -> Kernel:
    cfg = sim.cfg
    grid = (math.ceil(cfg.seq_len / 128), cfg.hidden // HEAD_DIM, cfg.batch_size)
    dur = sim.kernel_ns(cfg.attention_us * scale * sim.batch_scale)
    return Kernel(name, dur, grid, (128, 1, 1), 255, 49_152)


# --- the program: one training (or inference) loop -------------------------------------------


def run_program(sim: Sim) -> None:
    with sim.frame(sim.user_frame(MODULE_LINE, "<module>")):
        sim.tick(20.0)
        for startup in sim.all(Startup):
            _startup(sim, startup)
        for index in range(sim.cfg.steps):
            _step(sim, index)
        sim.tick(15.0)


def _loop_function(sim: Sim) -> str:
    return "train" if sim.cfg.mode == "train" else "evaluate"


def _step(sim: Sim, index: int) -> None:
    name = f"ProfilerStep#{index}"
    start = sim.now
    if sim.cfg.step_noise_pct:
        noise = sim.rng.gauss(1.0, sim.cfg.step_noise_pct / 100.0)
        sim.step_speed = sim.cfg.kernel_scale * max(noise, 0.5)
    sim.gemm_extra_ns = straggler_extra_ns(sim.cfg, index)
    with sim.annotation(name) as ext:
        _load_batch(sim)
        _copy_batch(sim)
        for late in straggling(sim.cfg, index):
            if late.on_host:
                with sim.frame(sim.user_frame(late.line, _loop_function(sim))):
                    sim.tick(late.extra_ms * 1000, spread=0.03)
        for tiny in sim.all(TinyKernels):
            _tiny_kernels(sim, tiny)
        with sim.frame(sim.user_frame(STEP_LINE, _loop_function(sim))):
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
    sim.steps.append(HostStep(name, start, sim.now, ext))


def _load_batch(sim: Sim) -> None:
    slow = sim.first(SlowDataLoader)
    us = slow.ms * 1000 if slow is not None else sim.cfg.dataloader_us
    with (
        sim.frame(sim.user_frame(LOOP_LINE, _loop_function(sim))),
        sim.frame("torch/utils/data/dataloader.py(708): __next__"),
        sim.annotation(LOADER),
        sim.blame_if(slow is not None, "data_loader"),
        sim.frame("torch/utils/data/dataloader.py(764): _next_data"),
        sim.frame("torch/utils/data/_utils/fetch.py(49): fetch"),
    ):
        sim.tick(us, spread=0.03)


def _copy_batch(sim: Sim) -> None:
    pageable = sim.first(PageableH2DCopy)
    line = pageable.line if pageable is not None else COPY_LINE
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


def _to_device(sim: Sim, dims: list[int], dtype: str, pageable: bool) -> None:
    src = tensor_arg(dims, dtype)
    nbytes = element_count(dims) * ITEMSIZE[dtype]
    flag = "False" if pageable else "True"
    with (
        sim.op("aten::to", [src, NO_ARG, NO_ARG, scalar_arg(flag), scalar_arg("False"), NO_ARG]),
        sim.op("aten::_to_copy", [src, NO_ARG, NO_ARG, NO_ARG, NO_ARG, scalar_arg(flag), NO_ARG]),
    ):
        with sim.op("aten::empty_strided", [NO_ARG, NO_ARG, NO_ARG, NO_ARG, NO_ARG, NO_ARG], 2.0):
            pass
        with sim.op("aten::copy_", [tensor_arg(dims, dtype), src, scalar_arg(flag)]):
            if pageable:
                sim.pageable_h2d(nbytes)
            else:
                dur = 1_500 + round(nbytes / pinned_gb_per_s(sim.spec.name))
                sim.copy("Memcpy HtoD (Pinned -> Device)", nbytes, dur)


def _tiny_kernels(sim: Sim, tiny: TinyKernels) -> None:
    dims = [sim.cfg.batch_size, 64]
    cost = max(0.5, tiny.host_us_per_op - sim.cfg.launch_us)
    if tiny.fixed:
        _graphed_tiny_kernels(sim, tiny)
        return
    with sim.frame(sim.user_frame(tiny.line, _loop_function(sim))), sim.blame("launch_overhead"):
        for index in range(tiny.count):
            op, kind = (("aten::add", "add_f32"), ("aten::mul", "mul_f32"))[index % 2]
            with sim.op(op, [tensor_arg(dims, "float"), tensor_arg(dims, "float")], cost_us=cost):
                sim.launch(_elementwise(sim, kind, element_count(dims), 0, us=tiny.kernel_us))


def _graphed_tiny_kernels(sim: Sim, tiny: TinyKernels) -> None:
    """The same kernels replayed from a CUDA graph: one launch call, then back to back."""
    dims = [sim.cfg.batch_size, 64]
    with sim.frame(sim.user_frame(tiny.line, _loop_function(sim))):
        start, corr = sim.runtime("cudaGraphLaunch", 10.0)
        ready = start + round(sim.cfg.launch_latency_us * 1000)
        for index in range(tiny.count):
            kind = ("add_f32", "mul_f32")[index % 2]
            kernel = _elementwise(sim, kind, element_count(dims), 0, us=tiny.kernel_us)
            args = sim._device_args(sim.compute, corr, kernel=True)
            args.update(launch_args(sim.spec, kernel))
            sim.enqueue(
                "kernel",
                kernel.name,
                sim.compute,
                launch=start,
                ready=ready,
                dur=kernel.dur_ns,
                args=args,
            )


def _train_step(sim: Sim) -> None:
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


def _infer_step(sim: Sim) -> None:
    with sim.frame(sim.user_frame(36, "infer_step")):
        _forward(sim)
    with sim.frame(sim.user_frame(37, "infer_step")):
        _argmax(sim)
    for exposed in sim.all(ExposedCollective):
        with sim.frame(sim.user_frame(exposed.line, "infer_step")):
            _exposed_collective(sim, exposed)


# forward


@contextmanager
def _module(sim: Sim, forward: str) -> Iterator[None]:
    with sim.frame(CALL_IMPL), sim.frame(forward):
        yield


def _forward(sim: Sim) -> None:
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
        _linear(sim, 4 * cfg.layers, cfg.hidden, CLASSES)


def _block_forward(sim: Sim, layer: int) -> None:
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


def _activation(sim: Sim, width: int) -> list[int]:
    return [sim.cfg.batch_size, sim.cfg.seq_len, width]


def _linear(sim: Sim, index: int, d_in: int, d_out: int) -> None:
    with (
        _module(sim, "torch/nn/modules/linear.py(125): forward"),
        sim.frame("<built-in function linear>"),
    ):
        if sim.fp32(index):
            _linear_fp32(sim, d_in, d_out)
        else:
            _linear_bf16(sim, d_in, d_out)


def _linear_bf16(sim: Sim, d_in: int, d_out: int) -> None:
    x, tokens = tensor_arg(_activation(sim, d_in)), sim.tokens
    weight_t = tensor_arg([d_in, d_out], strides=[1, d_in])
    with (
        sim.op("aten::linear", [x, tensor_arg([d_out, d_in]), tensor_arg([d_out])]),
        sim.op(
            "aten::addmm",
            [
                tensor_arg([d_out]),
                tensor_arg([tokens, d_in]),
                weight_t,
                scalar_arg(1),
                scalar_arg(1),
            ],
        ),
    ):
        sim.launch(_gemm(sim, "fwd", tokens, d_in, d_out, fp32=False))


def _linear_fp32(sim: Sim, d_in: int, d_out: int) -> None:
    x, tokens = tensor_arg(_activation(sim, d_in), "float"), sim.tokens
    weight_t = tensor_arg([d_in, d_out], "float", strides=[1, d_in])
    with (
        sim.op("aten::linear", [x, tensor_arg([d_out, d_in], "float"), NO_ARG]),
        sim.op("aten::matmul", [x, weight_t]),
        sim.op("aten::mm", [tensor_arg([tokens, d_in], "float"), weight_t]),
    ):
        sim.launch(_gemm(sim, "fwd", tokens, d_in, d_out, fp32=True))


def _layer_norm(sim: Sim) -> None:
    hidden = sim.cfg.hidden
    x, w = tensor_arg(_activation(sim, hidden)), tensor_arg([hidden])
    inputs = [
        x,
        Arg([], "ScalarList", [], f"[{hidden}]"),
        w,
        w,
        scalar_arg("1.0000000000000001e-05"),
    ]
    with (
        _module(sim, "torch/nn/modules/normalization.py(217): forward"),
        sim.op("aten::layer_norm", [*inputs, scalar_arg("True")]),
        sim.op("aten::native_layer_norm", inputs),
    ):
        sim.launch(_row_kernel(sim, LAYER_NORM, sim.tokens, 2 * sim.tokens * hidden * 2))


def _attention(sim: Sim) -> None:
    cfg = sim.cfg
    q = tensor_arg([cfg.batch_size, cfg.hidden // HEAD_DIM, cfg.seq_len, HEAD_DIM])
    scale = scalar_arg(f"{HEAD_DIM**-0.5:g}")
    with (
        sim.frame("<built-in function scaled_dot_product_attention>"),
        sim.op(
            "aten::scaled_dot_product_attention",
            [q, q, q, NO_ARG, scalar_arg("0."), scalar_arg("True"), scale],
        ),
        sim.op(
            "aten::_scaled_dot_product_flash_attention",
            [q, q, q, scalar_arg("0."), scalar_arg("True")],
        ),
    ):
        sim.launch(_flash(sim, FLASH_FWD, 1.0))


def _add(sim: Sim, width: int) -> None:
    x = tensor_arg(_activation(sim, width))
    with sim.op("aten::add", [x, x, scalar_arg(1)]):
        numel = sim.tokens * width
        sim.launch(_elementwise(sim, "add", numel, 3 * numel * 2))


def _gelu(sim: Sim) -> None:
    width = 4 * sim.cfg.hidden
    with (
        _module(sim, "torch/nn/modules/activation.py(734): forward"),
        sim.op("aten::gelu", [tensor_arg(_activation(sim, width)), NO_ARG]),
    ):
        numel = sim.tokens * width
        sim.launch(_elementwise(sim, "gelu", numel, 2 * numel * 2))


def _memory_chain(sim: Sim, chain: MemoryBoundChain) -> None:
    """Large bf16 elementwise ops; Input Dims give the bytes, durations follow from them."""
    rows = max(1, round(chain.mb_per_op * 2**20 / 2 / 1024))
    x = tensor_arg([rows, 1024])
    numel = rows * 1024
    for index in range(chain.ops):
        kind = ("add", "mul", "gelu")[index % 3]
        inputs = {"add": [x, x, scalar_arg(1)], "mul": [x, x], "gelu": [x, NO_ARG]}[kind]
        with sim.op(f"aten::{kind}", inputs):
            sim.launch(_elementwise(sim, kind, numel, FUNCTORS[kind][1] * numel * 2))


def _loss(sim: Sim) -> None:
    logits, target = tensor_arg([sim.tokens, CLASSES]), tensor_arg([sim.tokens], "long")
    reduction = [scalar_arg(1), scalar_arg(-100)]
    with (
        sim.frame("torch/nn/functional.py(3462): cross_entropy"),
        sim.op("aten::cross_entropy_loss", [logits, target, NO_ARG, *reduction, scalar_arg("0.")]),
    ):
        with (
            sim.op("aten::log_softmax", [logits, scalar_arg(1), NO_ARG]),
            sim.op("aten::_log_softmax", [logits, scalar_arg(1), scalar_arg("False")]),
        ):
            nbytes = sim.tokens * CLASSES * (2 + 4)
            sim.launch(_row_kernel(sim, SOFTMAX, sim.tokens, nbytes))
        with (
            sim.op(
                "aten::nll_loss_nd", [tensor_arg([sim.tokens, CLASSES], "float"), target, NO_ARG]
            ),
            sim.op("aten::nll_loss_forward", [tensor_arg([sim.tokens, CLASSES], "float"), target]),
        ):
            sim.launch(Kernel(NLL, sim.kernel_ns(8.0), (1, 1, 1), (32, 1, 1), 32, 0))


def _argmax(sim: Sim) -> None:
    logits = tensor_arg([sim.tokens, CLASSES])
    with (
        sim.frame("<built-in method argmax of Tensor object at 0x7f3a2c1ba2f0>"),
        sim.op("aten::argmax", [logits, scalar_arg(-1), scalar_arg("False")]),
    ):
        kernel = Kernel(
            ARGMAX,
            sim.memory_ns(sim.tokens * CLASSES * 2),
            (sim.tokens // 4, 1, 1),
            (32, 16, 1),
            32,
            16,
        )
        sim.launch(kernel)


# backward


@contextmanager
def _autograd(sim: Sim, function: str) -> Iterator[None]:
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


def _backward(sim: Sim) -> None:
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


def _loss_backward(sim: Sim) -> None:
    tokens = sim.tokens
    with _autograd(sim, "NllLossBackward0"), sim.op("aten::nll_loss_backward"):
        sim.launch(
            Kernel(
                NLL_BWD,
                sim.memory_ns(tokens * CLASSES * 4),
                (tokens // 128, 1, 1),
                (128, 1, 1),
                32,
                0,
            )
        )
    with _autograd(sim, "LogSoftmaxBackward0"), sim.op("aten::_log_softmax_backward_data"):
        sim.launch(_row_kernel(sim, SOFTMAX_BWD, tokens, tokens * CLASSES * 10))
    _linear_backward(sim, 4 * sim.cfg.layers, sim.cfg.hidden, CLASSES, bias_sum=True)


def _block_backward(sim: Sim, layer: int) -> None:
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
        sim.launch(_flash(sim, FLASH_DOT, 0.1))
        sim.launch(_flash(sim, FLASH_BWD, 2.4))
    _linear_backward(sim, 4 * layer, hidden, 3 * hidden, memset=True)
    _layer_norm_backward(sim)


def _layer_norm_backward(sim: Sim) -> None:
    nbytes = 3 * sim.tokens * sim.cfg.hidden * 2
    with _autograd(sim, "NativeLayerNormBackward0"), sim.op("aten::native_layer_norm_backward"):
        sim.launch(_row_kernel(sim, LAYER_NORM_BWD, sim.tokens, nbytes))


def _linear_backward(
    sim: Sim, index: int, d_in: int, d_out: int, *, memset: bool = False, bias_sum: bool = False
) -> None:
    fp32 = sim.fp32(index)
    dtype, tokens = ("float" if fp32 else BF16), sim.tokens
    with _autograd(sim, "MmBackward0" if fp32 else "AddmmBackward0"):
        with sim.op(
            "aten::mm", [tensor_arg([tokens, d_out], dtype), tensor_arg([d_out, d_in], dtype)]
        ):
            sim.launch(_gemm(sim, "dgrad", tokens, d_out, d_in, fp32=fp32))
        grad_t = tensor_arg([d_out, tokens], dtype, strides=[1, d_out])
        with sim.op("aten::mm", [grad_t, tensor_arg([tokens, d_in], dtype)]):
            if memset:
                sim.memset(4096)
            sim.launch(_gemm(sim, "wgrad", d_out, tokens, d_in, fp32=fp32))
        if bias_sum and not fp32:
            with sim.op(
                "aten::sum", [tensor_arg([tokens, d_out]), Arg([], "ScalarList", [], "[0]")]
            ):
                grid = (math.ceil(d_out / 32), 1, 1)
                sim.launch(
                    Kernel(SUM, sim.memory_ns(tokens * d_out * 2), grid, (32, 16, 1), 32, 16)
                )


def _optimizer_step(sim: Sim) -> None:
    params = _parameter_shapes(sim.cfg)
    with (
        sim.frame("torch/optim/optimizer.py(485): wrapper"),
        sim.annotation("Optimizer.step#AdamW.step"),
        sim.frame("torch/optim/optimizer.py(79): _use_grad"),
        sim.frame("torch/optim/adam.py(213): step"),
        sim.frame("torch/optim/adam.py(540): _multi_tensor_adam"),
    ):
        nbytes = 4 * sum(element_count(p) for p in params)
        lists = tensor_list_arg(params)
        for op, lists_used, functor, binary in (
            ("aten::_foreach_lerp_", 3, "TernaryOpScalarFunctor", "at::native::LerpFunctor<float>"),
            ("aten::_foreach_mul_", 1, "BinaryOpScalarFunctor", "std::multiplies<float>"),
            ("aten::_foreach_addcmul_", 3, "PointwiseOpScalarFunctor", "std::multiplies<float>"),
            ("aten::_foreach_sqrt", 2, "UnaryOpFunctor", "at::native::Sqrt<float>"),
            ("aten::_foreach_div_", 2, "BinaryOpListAlphaFunctor", "std::divides<float>"),
            ("aten::_foreach_add_", 2, "BinaryOpListAlphaFunctor", "std::plus<float>"),
        ):
            with sim.op(op, [lists] * min(lists_used, 2) + [scalar_arg(1)]):
                name = ADAM.format(n=lists_used, functor=functor, op=binary)
                dur = sim.memory_ns(nbytes * (lists_used + 1))
                sim.launch(Kernel(name, dur, (4 * sim.spec.num_sms, 1, 1), (512, 1, 1), 32, 0))


def _zero_grad(sim: Sim) -> None:
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
    return block * cfg.layers + [[CLASSES, h], [CLASSES]]


# collectives


def _slots(units: int, count: int) -> list[int]:
    """How many collectives to launch after each of ``units`` (never after the last one)."""
    per = [0] * units
    for index in range(count):
        per[max(0, round((index + 1) * (units - 1) / count) - 1)] += 1
    return per


def _bucket_collectives(sim: Sim, count: int) -> None:
    if count == 0:
        return
    nelems = sum(element_count(p) for p in _parameter_shapes(sim.cfg)) // max(
        1, sim.cfg.collectives
    )
    for _ in range(count):
        _collective(sim, nelems, _nccl_ns(sim.cfg.world_size, nelems * 2))


def _nccl_ns(world_size: int, nbytes: int) -> int:
    factor = 2 * (world_size - 1) / world_size if world_size > 1 else 0.1
    return NCCL_FIXED_NS + round(factor * nbytes / BUS_GBPS)


def _collective(sim: Sim, nelems: int, base_ns: int, after_compute: bool = True) -> None:
    coll = len(sim.coll_base)
    sim.coll_base.append(base_ns)
    collective = _collective_args(sim.cfg, nelems)
    with sim.op("record_param_comms", extra=_param_comms_args(collective)):
        if after_compute:
            sim.stream_wait(sim.comm, sim.compute, None)
        with sim.annotation("nccl:all_reduce") as ext:
            kernel = Kernel(NCCL_ALLREDUCE, base_ns, (16, 1, 1), (512, 1, 1), 96, 103_808)
            work = sim.launch(kernel, sim.comm, "cudaLaunchKernelExC", collective, coll)
            sim.ranges.append(GpuRange("nccl:all_reduce", sim.comm, work.start, work.end, ext))


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


def _exposed_collective(sim: Sim, exposed: ExposedCollective) -> None:
    with (
        sim.frame("torch/distributed/c10d_logger.py(81): wrapper"),
        sim.frame("torch/distributed/distributed_c10d.py(2806): all_reduce"),
    ):
        nelems, base = round(exposed.mb * 2**20 / 2), round(exposed.ms * 1e6)
        _collective(sim, nelems, base, after_compute=not exposed.fixed)
        sim.stream_wait(sim.compute, sim.comm, sim.location())


# injected statements of the loop


def _host_sync(sim: Sim, sync: HostSync) -> None:
    scalar = tensor_arg([], "float")
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


def _python_work(sim: Sim, us: float) -> None:
    with (
        sim.frame("logging/__init__.py(1517): info"),
        sim.frame("logging/__init__.py(1664): _log"),
        sim.frame("logging/__init__.py(1690): handle"),
    ):
        sim.tick(us, spread=0.03)


def _checkpoint(sim: Sim, checkpoint: Checkpoint) -> None:
    dims = [4096, 4096]
    state = tensor_arg(dims)
    with (
        sim.frame(sim.user_frame(checkpoint.line, _loop_function(sim))),
        sim.blame("checkpoint"),
        sim.frame("torch/serialization.py(944): save"),
        sim.frame("torch/serialization.py(1190): _save"),
    ):
        with (
            sim.op(
                "aten::to",
                [state, NO_ARG, NO_ARG, scalar_arg("False"), scalar_arg("False"), NO_ARG],
            ),
            sim.op(
                "aten::_to_copy",
                [state, NO_ARG, NO_ARG, NO_ARG, NO_ARG, scalar_arg("False"), NO_ARG],
            ),
            sim.op("aten::copy_", [tensor_arg(dims), state, scalar_arg("False")]),
        ):
            nbytes = element_count(dims) * 2
            sim.copy("Memcpy DtoH (Device -> Pageable)", nbytes, round(nbytes / DTOH_GBPS))
            sim.stream_sync(sim.compute)  # copy_ to pageable memory is not non_blocking
        with sim.frame("<built-in method write_record of PyCapsule object at 0x7f3a2d0c1e70>"):
            sim.tick(checkpoint.ms * 1000, spread=0.03)


def _startup(sim: Sim, startup: Startup) -> None:
    """A warm-up call of the model: a first small kernel (so the device's span begins), the
    start-up of ``startup.kind``, then the first GEMM."""
    cfg = sim.cfg
    tokens, hidden = sim.tokens, cfg.hidden
    x = tensor_arg([tokens, hidden])
    us = startup.ms * 1000
    with sim.frame(sim.user_frame(startup.line, "warmup")), sim.blame("warmup"):
        with sim.op("aten::zeros", [scalar_arg(str([tokens, hidden]))]), sim.op("aten::fill_", [x]):
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
                with sim.op("aten::mm", [x, tensor_arg([hidden, hidden])]):
                    sim.runtime("cudaLaunchKernel", cfg.launch_us)
            with sim.frame("torch/cuda/graphs.py(192): __exit__"):
                sim.runtime("cudaStreamEndCapture", 3.0)
                sim.runtime("cudaGraphInstantiate", us * 0.99)
        weight = tensor_arg([hidden, hidden])
        with sim.op("aten::mm", [x, weight]):
            if startup.kind == "context_init":
                sim.runtime("cudaFree", us, after=sim.stream_end())
            call_us = us if startup.kind == "module_load" else None
            sim.launch(_gemm(sim, "fwd", tokens, hidden, hidden, fp32=False), call_us=call_us)
        sim.tick(30.0)


def _allocator_churn(sim: Sim, churn: AllocatorChurn) -> None:
    dims = [sim.cfg.batch_size, sim.cfg.seq_len, 4 * sim.cfg.hidden]
    sizes = [scalar_arg(str(dims)), scalar_arg(6), NO_ARG, scalar_arg(0), NO_ARG, NO_ARG]
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
            with sim.op("aten::fill_", [tensor_arg(dims, "float"), scalar_arg("0.")]):
                numel = element_count(dims)
                sim.launch(_elementwise(sim, "fill", numel, numel * 4))
