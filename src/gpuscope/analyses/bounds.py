"""What bounds the busy time: FLOPs and bytes per kernel, set against the device's peaks.

Contract: :func:`kernel_bounds` takes one device's work and the GPU's facts (or None) and returns,
for every kernel, its work kind (GEMM on tensor cores or not, attention, convolution, elementwise,
reduction, copy, communication), its estimated FLOPs and bytes when the launching operator's
shapes were recorded (``record_shapes``), and whether it is compute-, memory- or latency-bound.
Run-level MFU and MBU are reported only when shapes cover most of the compute time; otherwise they
are None with the reason.

Without shapes or GPU facts a kernel is still classed, by what its name says and how long it ran:

* The name family says the work: GEMM / convolution / attention libraries (cuBLAS, cuBLASLt's
  ``nvjet``, CUTLASS, ``xmma``, ``sm80``/``sm90``/``sm100`` GEMMs, FlashAttention, ``fmha``,
  cuDNN, MIOpen, hipBLASLt ``Cijk``, Triton ``mm`` templates) run on tensor cores and are
  compute-bound when they are long enough to fill the GPU; elementwise, normalisation,
  reduction, copy, gather and scatter kernels do a few operations per byte, so DRAM bandwidth
  bounds them; collectives are communication.
* Duration says latency: a kernel shorter than :data:`SHORT_KERNEL_NS` (about what the host
  spends launching one) cannot amortise its launch and tail, whatever it computes. A long
  kernel is never latency-bound by its name or grid alone.
* A kernel whose name says none of these is ``UNCLASSIFIED``: busy time of unknown kind, never
  counted as host time.

:func:`exclusive_by_bound` splits a device's busy time among the bounds without counting a
nanosecond twice (compute before memory before latency before unclassified before communication
before transfers), so that with the idle time they add up to the window.

Estimates follow the usual conventions: a matmul of (M, K) by (K, N) is 2·M·K·N FLOPs; attention
is 4·B·H·Lq·Lk·D forward; elementwise ops move every input and output once.
"""

from __future__ import annotations

import math
import re
from enum import IntEnum
from functools import lru_cache
from typing import Any

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope._arrays import among, distinct
from gpuscope.analyses.timeline import DeviceWork, WorkClass
from gpuscope.classify import NamePattern, is_communication
from gpuscope.facts import GpuFacts
from gpuscope.model import CopyDirection, Extras, Kind

#: Kernels shorter than this are dominated by launch and tail latency: PyTorch spends about this
#: long on the host to dispatch and launch one kernel, so a stream of them cannot keep the GPU busy.
SHORT_KERNEL_NS = 5_000
#: Shapes must explain this share of compute-kernel time before MFU/MBU are given.
MIN_ESTIMATED_SHARE = 0.5


class KernelKind(IntEnum):
    GEMM = 0  # on tensor cores
    GEMM_FP32 = 1  # FP32 GEMM on CUDA cores (sgemm / simt)
    ATTENTION = 2
    CONV = 3
    ELEMENTWISE = 4
    REDUCTION = 5  # reductions, norms, softmax
    COPY = 6  # memcpy / memset / copy kernels
    COMMUNICATION = 7
    OTHER = 8


class Bound(IntEnum):
    COMPUTE = 0
    MEMORY = 1  # DRAM bandwidth
    LATENCY = 2
    COMMUNICATION = 3
    TRANSFER = 4  # host-device or peer copies: bounded by PCIe / NVLink, not DRAM
    UNCLASSIFIED = 5  # busy with kernels whose name says neither compute nor memory work


_KIND_PATTERNS: tuple[tuple[KernelKind, NamePattern], ...] = (
    (KernelKind.ELEMENTWISE, NamePattern(r"epilogue|splitKreduce")),  # GEMM helpers
    (
        KernelKind.ATTENTION,
        NamePattern(r"flash|fmha|attention|attn_fwd|attn_bwd|paged_attention|mha_fwd|mha_bwd"),
    ),
    (
        KernelKind.GEMM_FP32,
        # cuBLAS names the math a kernel issues: ``..._ffma_...`` is FP32 fused multiply-add on
        # the CUDA cores (``sm80_xmma_gemm_f32f32_f32f32_f32_..._ffma``), where a TF32 one says
        # ``tf32`` and issues tensor-core MMAs; implicit-GEMM convolutions say ``fprop``/``dgrad``.
        NamePattern(r"sgemm|_simt_|gemmSN_|gemv2T_kernel|gemvx|\bdot_kernel|xmma_gemm_\w*_ffma"),
    ),
    (KernelKind.CONV, NamePattern(r"igemm|implicit_gemm")),  # convolutions as implicit GEMMs
    (
        KernelKind.GEMM,
        NamePattern(
            r"gemm|xmma|cutlass|nvjet|matmul|s16816|h16816|884|1688|wgmma|cublasLt|Cijk_|_mm_|bmm"
            r"|triton_tem_|triton_mm|\bmm_kernel|grouped_mm|deep_gemm|fp8_gemm|hgemm",
        ),
    ),
    (
        KernelKind.CONV,
        NamePattern(r"conv|implicit_gemm|winograd|cudnn|miopen|igemm|fprop|dgrad|wgrad"),
    ),
    (
        KernelKind.REDUCTION,
        NamePattern(
            r"reduce|norm|softmax|sum_kernel|mean|argmax|argmin|topk|scan|cross_entropy"
            r"|triton_red|triton_per|sort|cumsum|histogram|nll_loss",
        ),
    ),
    (
        KernelKind.COPY,
        NamePattern(
            r"copy|CatArray|gather|scatter|index|transpose|permute|cat_|embedding|memcpy|memset"
            r"|pack|unpack|pad_|roll|flip|repeat|concat|split",
        ),
    ),
    (
        KernelKind.ELEMENTWISE,
        NamePattern(
            r"elementwise|vectorized|unrolled|Functor|fill|triton_poi|activation|gelu|silu|relu"
            r"|TensorOp|dropout|cast|quant|rotary|rope|swiglu|add_kernel|mul_kernel|bias|"
            r"philox|distribution|uniform|normal_|arange|clamp|where|masked|zero",
        ),
    ),
)

_ELEMENT_BYTES = {
    "double": 8,
    "float": 4,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "long int": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1,
}
_HALF_TYPES = frozenset({"c10::Half", "c10::BFloat16"})
_FP8_TYPES = frozenset(
    {"c10::Float8_e4m3fn", "c10::Float8_e5m2", "c10::Float8_e4m3fnuz", "c10::Float8_e5m2fnuz"}
)


class Estimate(msgspec.Struct, frozen=True):
    flops: float
    bytes: float
    precision: str  # "fp8", "bf16", "fp32": which peak applies


class KernelBounds(msgspec.Struct, frozen=True):
    rows: NDArray[np.int64]  # kernel rows of the trace (same order as the arrays below)
    kind: NDArray[np.uint8]  # KernelKind
    bound: NDArray[np.uint8]  # Bound
    flops: NDArray[np.float64]  # NaN when not estimable
    bytes: NDArray[np.float64]
    op_row: NDArray[np.int64]  # the CPU operator that launched each kernel, -1 when unknown
    time_ns_by_bound: dict[Bound, int]  # union of each bound's kernels
    gemm_ns: int
    fp32_gemm_ns: int  # GEMM time not on tensor cores
    estimated_share: float  # of compute-kernel time with a FLOP estimate
    achieved_flops_per_s: float | None  # over the kernels with estimates, while they ran
    achieved_bytes_per_s: float | None
    mfu_pct: float | None  # estimated FLOPs / (span x peak)
    mbu_pct: float | None
    not_estimable_reason: str | None


@lru_cache(maxsize=1 << 14)
def kernel_kind_of_name(name: str) -> KernelKind:
    """The kind of a (non-communication) kernel, from its name; OTHER when nothing matches.
    Remembered per name: the devices and ranks of one job run the same kernels."""
    for kind, pattern in _KIND_PATTERNS:
        if pattern.search(name):
            return kind
    return KernelKind.OTHER


def kernel_bounds(work: DeviceWork, facts: GpuFacts | None) -> KernelBounds:
    trace = work.trace
    ev = trace.events
    rows = work.rows
    classes = work.work_class
    # Only compute work is kinded by name (communication and copies are set below), and each
    # distinct name once: the patterns are costly and most of a trace's names are not kernels.
    kind = np.full(rows.size, KernelKind.OTHER, dtype=np.uint8)
    compute = np.flatnonzero(classes == WorkClass.COMPUTE)
    name_ids = ev.name_id[rows[compute]]
    name_kinds = np.zeros(len(trace.names), dtype=np.uint8)
    used = np.flatnonzero(np.bincount(name_ids, minlength=len(trace.names)))
    # Communication names are only compute work when a caller classed the work by other rules.
    name_kinds[used] = [
        KernelKind.COMMUNICATION if is_communication(n) else kernel_kind_of_name(n)
        for n in (trace.names[i] for i in used.tolist())
    ]
    kind[compute] = name_kinds[name_ids]
    kind[classes == WorkClass.COMMUNICATION] = KernelKind.COMMUNICATION
    kind[(classes == WorkClass.MEMCPY) | (classes == WorkClass.MEMSET)] = KernelKind.COPY

    flops, nbytes, precision, op_row = _estimates(work, kind)
    dur = ev.dur_ns[rows].astype(np.float64)
    bound = _bounds(work, kind, flops, nbytes, precision, dur, facts)

    time_by_bound: dict[Bound, int] = {}
    from gpuscope.analyses.intervals import union  # noqa: PLC0415

    starts, ends = ev.start_ns[rows], ev.end_ns[rows]
    for b in Bound:
        mask = bound == b
        time_by_bound[b] = union(starts[mask], ends[mask]).total_ns
    gemm = (kind == KernelKind.GEMM) | (kind == KernelKind.GEMM_FP32)
    compute = classes == WorkClass.COMPUTE
    estimated = compute & ~np.isnan(flops)
    compute_time = float(dur[compute].sum())
    share = float(dur[estimated].sum()) / compute_time if compute_time else 0.0
    est_time_s = float(dur[estimated].sum()) / 1e9
    achieved_flops = float(np.nansum(flops[estimated])) / est_time_s if est_time_s else None
    achieved_bytes = float(np.nansum(nbytes[estimated])) / est_time_s if est_time_s else None
    mfu, mbu, reason = _utilisation(work, flops, nbytes, precision, share, facts)
    return KernelBounds(
        rows=rows,
        kind=kind,
        bound=bound,
        flops=flops,
        bytes=nbytes,
        op_row=op_row,
        time_ns_by_bound=time_by_bound,
        gemm_ns=int(dur[gemm].sum()),
        fp32_gemm_ns=int(dur[kind == KernelKind.GEMM_FP32].sum()),
        estimated_share=share,
        achieved_flops_per_s=achieved_flops,
        achieved_bytes_per_s=achieved_bytes,
        mfu_pct=mfu,
        mbu_pct=mbu,
        not_estimable_reason=reason,
    )


#: Which bound a nanosecond of busy time belongs to when several kinds of work overlap: the work
#: that keeps the SMs busy first, then what only occupies links (collectives, then copies), which
#: is "exposed" exactly when nothing above it runs.
EXCLUSIVE_ORDER = (
    Bound.COMPUTE,
    Bound.MEMORY,
    Bound.LATENCY,
    Bound.UNCLASSIFIED,
    Bound.COMMUNICATION,
    Bound.TRANSFER,
)


def exclusive_by_bound(bounds: KernelBounds, work: DeviceWork) -> dict[Bound, int]:
    """The device's busy time split among the bounds, each nanosecond once (see
    :data:`EXCLUSIVE_ORDER`): the parts add up to the busy time."""
    from gpuscope.analyses.intervals import union, weighted_pieces  # noqa: PLC0415

    ev = work.trace.events
    starts, ends = ev.start_ns[bounds.rows], ev.end_ns[bounds.rows]
    sets = [
        (union(starts[bounds.bound == b], ends[bounds.bound == b]), 1 << i)
        for i, b in enumerate(EXCLUSIVE_ORDER)
    ]
    points, covering = weighted_pieces(sets)
    result = dict.fromkeys(Bound, 0)
    if points.size < 2:
        return result
    length = np.diff(points)
    claimed = np.zeros(length.size, dtype=np.bool_)
    for i, b in enumerate(EXCLUSIVE_ORDER):
        mine = ((covering & (1 << i)) != 0) & ~claimed
        result[b] = int(length[mine].sum())
        claimed |= mine
    return result


def _estimates(
    work: DeviceWork, kind: NDArray[np.uint8]
) -> tuple[NDArray[np.float64], NDArray[np.float64], list[str | None], NDArray[np.int64]]:
    """FLOPs and bytes per kernel, from the shapes of the operator that launched it."""
    ev = work.trace.events
    n = work.rows.size
    flops = np.full(n, np.nan)
    nbytes = np.full(n, np.nan)
    extra = Extras.of(ev.extra)
    op_rows = extra.rows[ev.kind[extra.rows] == Kind.CPU_OP].astype(np.int64)
    if op_rows.size == 0:
        return flops, nbytes, [None] * n, np.full(n, -1, dtype=np.int64)
    # Temporaries are dropped as soon as they are used: on tens of millions of events each is
    # tens of megabytes, and this was the peak of a diagnosis.
    # Kernels carry the External id of the operator that launched them.
    op_ext = ev.external_id[op_rows]
    order = np.argsort(op_ext, kind="stable")
    op_ext, op_rows = op_ext[order], op_rows[order]
    kernel_ext = ev.external_id[work.rows]
    pos = np.minimum(np.searchsorted(op_ext, kernel_ext), op_ext.size - 1)
    matched = (kernel_ext >= 0) & (op_ext[pos] == kernel_ext)
    op_of_kernel = np.where(matched, op_rows[pos], -1)
    del op_ext, order, op_rows, kernel_ext, pos
    dur = ev.dur_ns[work.rows].astype(np.float64)
    # An op's work is shared among its kernels by duration (a GEMM and its epilogue, say).
    # Vectorised over kernels: per-kernel Python dicts took ~60 bytes a row of the trace at the
    # peak of a diagnosis (millions of kernels); durations are whole nanoseconds, so the sums
    # are exact in any order.
    kernels = np.flatnonzero(matched)
    ops, of_op = np.unique(op_of_kernel[kernels], return_inverse=True)
    op_total = np.bincount(of_op, weights=dur[kernels], minlength=ops.size)
    estimated = kernels[kind[kernels] != KernelKind.COMMUNICATION]
    del kernels, of_op, matched
    position = np.searchsorted(ops, op_of_kernel[estimated])
    needed = distinct(position)
    op_flops = np.full(ops.size, np.nan)
    op_bytes = np.full(ops.size, np.nan)
    op_precision = np.full(ops.size, None, dtype=object)
    # One estimate per operator name and recorded arguments (the readers share one dict among
    # equal arguments, and the same shapes recur at every step), not one per operator call.
    needed_ops = ops[needed]
    args_id = extra.value_ids(needed_ops).astype(np.int64)  # >= 0: operators have arguments
    pair = (ev.name_id[needed_ops].astype(np.int64) << 32) | args_id
    _, first, of_pair = np.unique(pair, return_index=True, return_inverse=True)
    pair_flops = np.full(first.size, np.nan)
    pair_bytes = np.full(first.size, np.nan)
    pair_precision = np.full(first.size, None, dtype=object)
    for j, (op, a) in enumerate(
        zip(needed_ops[first].tolist(), args_id[first].tolist(), strict=True)
    ):
        est = estimate_op(work.trace.name(op), extra.distinct[a])
        if est is not None:
            pair_flops[j], pair_bytes[j], pair_precision[j] = est.flops, est.bytes, est.precision
    op_flops[needed] = pair_flops[of_pair]
    op_bytes[needed] = pair_bytes[of_pair]
    op_precision[needed] = pair_precision[of_pair]
    del needed, needed_ops, args_id, pair, first, of_pair, ops
    total = op_total[position]
    weight = np.ones(estimated.size)
    np.divide(dur[estimated], total, out=weight, where=total > 0)
    flops[estimated] = op_flops[position] * weight
    nbytes[estimated] = op_bytes[position] * weight
    del total, weight, op_flops, op_bytes, op_total
    chosen = np.full(n, None, dtype=object)
    chosen[estimated] = op_precision[position]
    precision: list[str | None] = chosen.tolist()
    return flops, nbytes, precision, op_of_kernel.astype(np.int64, copy=False)


def _numel(dims: Any) -> int:
    if not isinstance(dims, list) or not all(isinstance(d, int) for d in dims):
        return 0
    return math.prod(dims) if dims else 1


def _precision(types: list[str]) -> str:
    if any(t in _FP8_TYPES for t in types):
        return "fp8"
    if any(t in _HALF_TYPES for t in types):
        return "bf16"
    return "fp32"


_MATMUL = frozenset(
    {
        "aten::mm",
        "aten::addmm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::matmul",
        "aten::linear",
        "aten::_scaled_mm",
    }
)
_ATTENTION = re.compile(
    r"^aten::_?(?:scaled_dot_product|_scaled_dot_product|_flash_attention|_efficient_attention|flash_attn)|flash_attn"
)
_CONV = re.compile(
    r"^aten::(?:convolution|_convolution|conv\dd|cudnn_convolution|miopen_convolution)"
)
_COPY_OP = re.compile(r"^aten::(?:copy_|_to_copy|to|clone|contiguous|cat)$")
_NORM_SOFTMAX = re.compile(r"norm|softmax|log_softmax", re.I)
_ELEMENTWISE = re.compile(
    r"^aten::(?:add|sub|mul|div|gelu|relu|silu|sigmoid|tanh|exp|pow|sqrt|rsqrt|neg|abs|clamp|where|"
    r"masked_fill|dropout|native_dropout|fill_|copy_|_to_copy|to|clone|contiguous|threshold|"
    r"gelu_backward|silu_backward|threshold_backward|sigmoid_backward|tanh_backward|addcmul|addcdiv|"
    r"lerp|maximum|minimum|cat|_foreach_\w+)_?$"
)


def estimate_op(name: str, extra: dict[str, Any]) -> Estimate | None:
    """FLOPs and bytes of one operator from its recorded input shapes, or None."""
    dims = extra.get("input_dims")
    types = extra.get("input_types") or []
    if not isinstance(dims, list) or not dims:
        return None
    types = [t if isinstance(t, str) else "" for t in types]
    element = max((_ELEMENT_BYTES.get(t, 0) for t in types), default=0) or 4
    tensors = [d for d in dims if isinstance(d, list) and d]
    precision = _precision(types)
    if name in _MATMUL:
        return _matmul(name, tensors, element, precision)
    if _ATTENTION.search(name):
        return _attention(tensors, element, precision)
    if _CONV.search(name) and len(tensors) >= 2:
        x, w = tensors[0], tensors[1]
        if len(x) >= 3 and len(w) >= 3:
            out_spatial = math.prod(x[2:])  # stride 1, "same" padding: an upper bound
            flops = 2.0 * x[0] * w[0] * out_spatial * math.prod(w[1:])
            moved = (_numel(x) + _numel(w) + x[0] * w[0] * out_spatial) * element
            return Estimate(flops, float(moved), precision)
        return None
    numel_in = sum(_numel(t) for t in tensors)
    if numel_in == 0:
        return None
    largest = max(_numel(t) for t in tensors)
    if _NORM_SOFTMAX.search(name):
        return Estimate(5.0 * largest, float(2 * largest * element), "fp32")
    if _ELEMENTWISE.search(name):
        moved = (numel_in + largest) * element
        work = 0.0 if _COPY_OP.search(name) else float(largest)
        return Estimate(work, float(moved), "fp32")
    return None


def _matmul(name: str, t: list[list[int]], element: int, precision: str) -> Estimate | None:
    if name in ("aten::addmm", "aten::baddbmm") and len(t) >= 3:
        t = t[1:]
    if len(t) < 2:
        return None
    a, b = t[0], t[1]
    if name == "aten::linear":  # weight is (N, K)
        if len(b) != 2:
            return None
        m = math.prod(a[:-1]) if len(a) > 1 else 1
        k, n = a[-1], b[0]
        batch = 1
    elif len(a) == 3 and len(b) == 3:
        batch, m, k, n = a[0], a[1], a[2], b[2]
    elif len(a) >= 2 and len(b) == 2:
        batch, m, k, n = 1, math.prod(a[:-1]), a[-1], b[1]
    else:
        return None
    flops = 2.0 * batch * m * k * n
    moved = batch * (m * k + k * n + m * n) * element
    return Estimate(flops, float(moved), precision)


def _attention(t: list[list[int]], element: int, precision: str) -> Estimate | None:
    if len(t) < 3 or len(t[0]) != 4 or len(t[1]) != 4:
        return None
    b, h, lq, d = t[0]
    lk = t[1][2]
    flops = 4.0 * b * h * lq * lk * d
    moved = (_numel(t[0]) + _numel(t[1]) + _numel(t[2]) + b * h * lq * d) * element
    return Estimate(flops, float(moved), precision)


def _peak_flops(facts: GpuFacts, precision: str | None, kind: int) -> float | None:
    if kind == KernelKind.GEMM_FP32 or precision is None or precision == "fp32":
        if (
            kind in (KernelKind.GEMM, KernelKind.ATTENTION, KernelKind.CONV)
            and facts.tf32_flops_per_s
        ):
            return facts.tf32_flops_per_s
        return facts.fp32_flops_per_s
    if precision == "fp8" and facts.fp8_flops_per_s:
        return facts.fp8_flops_per_s
    return facts.bf16_flops_per_s


#: Kernels classed against the roofline at a time (see ``_bounds``).
_ROOFLINE_BLOCK = 1 << 16


def _bounds(
    work: DeviceWork,
    kind: NDArray[np.uint8],
    flops: NDArray[np.float64],
    nbytes: NDArray[np.float64],
    precision: list[str | None],
    dur: NDArray[np.float64],
    facts: GpuFacts | None,
) -> NDArray[np.uint8]:
    ev = work.trace.events
    rows = work.rows
    compute_kinds = among(
        kind, (KernelKind.GEMM, KernelKind.GEMM_FP32, KernelKind.ATTENTION, KernelKind.CONV)
    )
    # The name family decides when shapes cannot: tensor-core libraries compute, the rest of the
    # named families stream memory, and a name that says nothing is unclassified (never host).
    bound = np.where(compute_kinds, Bound.COMPUTE, Bound.MEMORY).astype(np.uint8)
    bound[kind == KernelKind.OTHER] = Bound.UNCLASSIFIED
    # Share of the roofline's attainable throughput each kernel reached (NaN when unknown).
    attained = np.full(rows.size, np.nan)
    if facts is not None and facts.memory_bandwidth_bytes_per_s:
        bandwidth = facts.memory_bandwidth_bytes_per_s
        every = np.flatnonzero(~np.isnan(flops) & (nbytes > 0) & (dur > 0))
        # One peak per precision and kernel kind (a few pairs), then the kernels vectorised a
        # block at a time: a loop per kernel cost seconds and a Python object per kernel, and
        # all at once a dozen temporary arrays of millions of kernels at a diagnosis's peak.
        for first in range(0, every.size, _ROOFLINE_BLOCK):
            known = every[first : first + _ROOFLINE_BLOCK]
            labels = [precision[k] for k in known.tolist()]
            label_code = {label: i for i, label in enumerate(dict.fromkeys(labels))}
            pair = np.fromiter(map(label_code.__getitem__, labels), np.int64, len(labels)) * 256
            pair += kind[known]
            pairs, of_pair = np.unique(pair, return_inverse=True)
            by_code = list(label_code)
            pair_peak = np.array(
                [_peak_flops(facts, by_code[p >> 8], p & 255) or 0.0 for p in pairs.tolist()],
                dtype=np.float64,
            )
            peak = pair_peak[of_pair]
            has_peak = peak != 0
            k, peak = known[has_peak], peak[has_peak]
            intensity = flops[k] / nbytes[k]
            bound[k] = np.where(intensity >= peak / bandwidth, Bound.COMPUTE, Bound.MEMORY)
            roof = np.minimum(peak, intensity * bandwidth)
            with np.errstate(divide="ignore", invalid="ignore"):
                attained[k] = np.where(roof > 0, (flops[k] / (dur[k] / 1e9)) / roof, np.nan)
    # Shorter than a launch: launch and tail latency bound it, unless it reached a good share of
    # its roof anyway. A long kernel is not latency-bound for its grid alone: a grouped GEMM of
    # few large tiles still keeps its SMs' tensor cores busy for its whole duration.
    starved = dur < SHORT_KERNEL_NS
    reached_roof = ~np.isnan(attained) & (attained >= 0.3)
    bound[starved & ~reached_roof] = Bound.LATENCY
    bound[kind == KernelKind.COMMUNICATION] = Bound.COMMUNICATION
    direction = ev.copy_direction[rows]
    over_link = (ev.kind[rows] == Kind.MEMCPY) & among(
        direction, (CopyDirection.H2D, CopyDirection.D2H, CopyDirection.P2P)
    )
    bound[over_link] = Bound.TRANSFER
    return bound


def _utilisation(
    work: DeviceWork,
    flops: NDArray[np.float64],
    nbytes: NDArray[np.float64],
    precision: list[str | None],
    share: float,
    facts: GpuFacts | None,
) -> tuple[float | None, float | None, str | None]:
    if facts is None:
        return None, None, "the device is not in the GPU facts table"
    if share < MIN_ESTIMATED_SHARE:
        return (
            None,
            None,
            (
                f"recorded shapes explain {100 * share:.0f}% of compute time"
                " (profile with record_shapes=True)"
            ),
        )
    span_s = work.span_ns / 1e9
    known = ~np.isnan(flops)
    half = sum(1 for p in precision if p in ("bf16", "fp8"))
    peak = (
        facts.bf16_flops_per_s
        if half * 2 >= sum(1 for p in precision if p)
        else (facts.tf32_flops_per_s or facts.fp32_flops_per_s)
    )
    mfu = 100.0 * float(flops[known].sum()) / (span_s * peak) if peak and span_s else None
    bw = facts.memory_bandwidth_bytes_per_s
    mbu = 100.0 * float(nbytes[known].sum()) / (span_s * bw) if bw and span_s else None
    return mfu, mbu, None


class RooflinePoint(msgspec.Struct, frozen=True):
    """Kernels (or operators) of one name on the roofline: time, work, and where they sit."""

    name: str
    kind: str
    bound: str  # the bound of most of its time
    count: int
    total_ns: int
    flops: float | None  # None when no shapes were recorded for it
    bytes: float | None

    @property
    def flops_per_s(self) -> float | None:
        return self.flops / (self.total_ns / 1e9) if self.flops and self.total_ns else None

    @property
    def bytes_per_s(self) -> float | None:
        return self.bytes / (self.total_ns / 1e9) if self.bytes and self.total_ns else None

    @property
    def intensity(self) -> float | None:
        return self.flops / self.bytes if self.flops and self.bytes else None


def roofline_points(
    bounds: KernelBounds, work: DeviceWork, *, by: str = "kernel", top: int = 30
) -> list[RooflinePoint]:
    """Time, FLOPs and bytes per kernel name (``by="kernel"``) or launching operator
    (``by="operator"``), costliest first."""
    ev = work.trace.events
    if by == "operator":
        keep = bounds.op_row >= 0
        keys = ev.name_id[bounds.op_row[keep]]
    else:
        keep = np.ones(bounds.rows.size, dtype=bool)
        keys = ev.name_id[bounds.rows]
    if not keep.any():
        return []
    dur = ev.dur_ns[bounds.rows][keep].astype(np.float64)
    flops, nbytes = bounds.flops[keep], bounds.bytes[keep]
    kinds, bound = bounds.kind[keep], bounds.bound[keep]
    # Tallied per name id directly (ids are small non-negative integers): no sort.
    counts_by_id = np.bincount(keys)
    unique = np.flatnonzero(counts_by_id)
    ids = counts_by_id.size
    totals = np.bincount(keys, weights=dur)[unique]
    counts = counts_by_id[unique]
    # The costliest names' FLOPs and bytes, prevailing kind (most kernels) and bound (most
    # time), tallied in one pass over their kernels rather than one pass per name.
    costliest = np.argsort(-totals, kind="stable")[:top]
    place = np.full(ids, -1, dtype=np.intp)
    place[unique[costliest]] = np.arange(costliest.size)
    at = place[keys]
    mine = at >= 0
    kind_count = np.bincount(
        at[mine] * len(KernelKind) + kinds[mine], minlength=costliest.size * len(KernelKind)
    ).reshape(costliest.size, len(KernelKind))
    bound_ns = np.bincount(
        at[mine] * len(Bound) + bound[mine],
        weights=dur[mine],
        minlength=costliest.size * len(Bound),
    ).reshape(costliest.size, len(Bound))
    known = mine & ~np.isnan(flops)
    flop_sum = np.bincount(at[known], weights=flops[known], minlength=costliest.size)
    byte_sum = np.bincount(at[known], weights=nbytes[known], minlength=costliest.size)
    has = np.bincount(at[known], minlength=costliest.size) > 0
    points: list[RooflinePoint] = []
    for j, i in enumerate(costliest.tolist()):
        points.append(
            RooflinePoint(
                name=work.trace.names[int(unique[i])],
                kind=KernelKind(int(kind_count[j].argmax())).name.lower(),
                bound=Bound(int(bound_ns[j].argmax())).name.lower(),
                count=int(counts[i]),
                total_ns=int(totals[i]),
                flops=float(flop_sum[j]) if has[j] else None,
                bytes=float(byte_sum[j]) if has[j] else None,
            )
        )
    return points
