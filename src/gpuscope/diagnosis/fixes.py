"""What to change for each cause: concrete advice, in the words a PyTorch user would type.

Contract: :func:`advice` returns the fix for a finding's cause given what the evidence says
(locations, names seen in the trace) and the hardware it ran on. The text is data for the
renderers; nothing here measures.

Advice fits the evidence and the hardware, or it is not given:

* Precision follows the architecture's tensor cores: before Ampere (Volta, Turing) they take FP16
  only, which needs a ``GradScaler`` in training (FP16's range underflows gradients), and a
  Pascal GPU has no tensor cores at all; Ampere and Ada add TF32 and BF16; Hopper and Blackwell
  (and AMD CDNA3) add FP8. Unknown hardware gets the general advice, naming which GPUs take what.
* Work already launched as CUDA / HIP graphs gets no "capture a CUDA graph" advice: it is captured.
* Copies already from pinned memory get no "pin your memory" advice: overlap and size decide then.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from gpuscope.analyses.ranks import StragglerStat


class Hardware(NamedTuple):
    """What the advice must fit: the GPU's architecture (``data/gpu_facts.csv``) and vendor."""

    architecture: str | None  # "volta", "ampere", "hopper", "cdna3"...; None when unknown
    vendor: str | None


#: Architectures by what their tensor (matrix) cores take.
_NO_TENSOR_CORES = frozenset({"pascal", "maxwell"})
_FP16_ONLY = frozenset({"volta", "turing"})
_FP8 = frozenset({"hopper", "blackwell", "cdna3", "cdna4"})

_FIXES: dict[str, str] = {
    "host_sync": (
        "Remove host synchronisations from the step loop: `.item()`, `.cpu()`, `.tolist()`, "
        "`print(tensor)`, `torch.cuda.synchronize()` and data-dependent ops such as "
        "`torch.nonzero` make the CPU wait until the GPU drains, so the GPU then waits for the "
        "CPU. "
        "Accumulate metrics on the GPU and read them every N steps; "
        "`torch.cuda.set_sync_debug_mode('warn')` points at every sync."
    ),
    "data_loader": (
        "Feed the GPU faster: `DataLoader(..., num_workers=N, pin_memory=True, "
        "persistent_workers=True, prefetch_factor=2)` with N up to the CPU cores per GPU; move "
        "heavy preprocessing (decoding, augmentation) to the workers, to the GPU (e.g. DALI), or "
        "offline; read from local disk rather than remote storage."
    ),
    "h2d_copy": (
        "Copy from pinned memory without blocking: `DataLoader(pin_memory=True)` (or "
        "`tensor.pin_memory()`), then `.to(device, non_blocking=True)`; a copy from pageable "
        "memory is staged by the CPU and blocks it. Copy once per batch, not per tensor."
    ),
    "launch_overhead": (
        "The CPU cannot launch kernels as fast as the GPU runs them: capture the step in a CUDA "
        "graph (`torch.compile(model, mode='reduce-overhead')` or `torch.cuda.graphs`), fuse small "
        "ops with `torch.compile`, use foreach/fused optimizers, or raise the batch size (or use "
        "gradient accumulation) so that each kernel does more work."
    ),
    "allocator": (
        "Stop allocator churn: avoid `torch.cuda.empty_cache()` in the loop, keep tensor shapes "
        "stable, and set `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` so the caching "
        "allocator stops calling cudaFree/cudaMalloc (cudaFree synchronises the device)."
    ),
    "communication_wait": (
        "The GPU waits for a peer: find the straggler (`gpuscope diagnose` on the folder of all "
        "ranks), balance work across ranks, and overlap collectives with compute (DDP "
        "`bucket_cap_mb`, FSDP prefetching) so that a late peer costs less."
    ),
    "checkpoint": (
        "Save asynchronously: `torch.distributed.checkpoint.async_save`, or copy the state to CPU "
        "and write it from a background thread; checkpoint less often."
    ),
    "cpu_other": (
        "The CPU is busy with its own work between launches: move it off the step's critical path "
        "(to the data loader, a background thread or every N steps), use fused/foreach optimizers "
        "(`torch.optim.AdamW(..., fused=True)`), or capture the step with `torch.compile`."
    ),
    "unknown": (
        "Nothing recorded on the host explains these gaps: re-profile with "
        "`with_stack=True, record_shapes=True` and CPU activities so gpuscope can attribute them."
    ),
    "collective_wait": (
        "Ranks take turns being late: balance the work per rank (equal batch and sequence lengths,"
        " sharded tables of equal cost), keep per-rank host work (logging, metrics, checkpoints on"
        " rank 0) off the step, and overlap collectives with compute so that waiting is hidden."
    ),
    "exposed_communication": (
        "Overlap communication with compute: with DDP keep `gradient_as_bucket_view=True` and tune "
        "`bucket_cap_mb` so all-reduce starts during backward; with FSDP enable "
        "`backward_prefetch`/`forward_prefetch`; issue fewer, larger collectives; for tensor "
        "parallelism, check whether fewer GPUs per replica serve the same load."
    ),
    "fp32_gemm": (
        "Run matmuls on tensor cores: `torch.autocast('cuda', dtype=torch.bfloat16)` for mixed "
        "precision, or at least `torch.set_float32_matmul_precision('high')` (TF32 on Ampere and "
        "newer)."
    ),
    "p2p_copy": (
        "Copies between GPUs hold the device: check the topology (`nvidia-smi topo -m`) — GPUs"
        " without NVLink between them copy over PCIe or through host memory; enable peer access"
        " (`torch.cuda.can_device_access_peer`), keep tensors on the GPU that uses them, copy on a"
        " side stream so compute overlaps, and move data with NCCL collectives, which pick the"
        " fastest path, rather than many `.to('cuda:N')` copies."
    ),
    "page_migration": (
        "Unified (managed) memory migrates page by page when a processor first touches it, and"
        " the GPU stalls on each fault: prefetch the buffers before the kernels that use them"
        " (`cudaMemPrefetchAsync(ptr, bytes, device, stream)`, and back to the CPU before host"
        " loops read them), set `cudaMemAdvise` (`SetPreferredLocation`, `SetReadMostly`), or use"
        " explicit device buffers with `cudaMemcpyAsync` from pinned memory."
    ),
    "memory_bound": (
        "Memory-bound kernels dominate: fuse chains of elementwise/normalisation ops "
        "(`torch.compile`), keep activations in bf16, use fused attention (SDPA / FlashAttention); "
        "for LLM decode, a larger batch stops paying once DRAM bandwidth saturates: quantise "
        "weights/KV cache instead."
    ),
}


def advice(cause: str, seen: Sequence[str] = (), hardware: Hardware | None = None) -> str:
    """The fix for ``cause``, sharpened by names seen in the evidence and fitted to the hardware."""
    hw = hardware or Hardware(None, None)
    text = _FIXES.get(cause, _FIXES["unknown"])
    joined = " ".join(seen)
    pinned = "every copy uses pinned host memory" in joined
    mostly_pinned = "already use pinned host memory" in joined
    if cause == "data_loader" and "_SingleProcessDataLoaderIter" in joined:
        text = "The loader runs in the training process (`num_workers=0`). " + text
    if cause == "h2d_copy" and (pinned or mostly_pinned):
        text = (
            ""
            if pinned
            else "Pin the few copies that still come from pageable memory (`pin_memory=True`). "
        ) + (
            "The copies already come from pinned memory: pinning will not help more. Overlap them"
            " with compute: copy the next batch on a side stream (`torch.cuda.Stream`,"
            " `non_blocking=True`) while this one runs, keep data resident on the GPU across"
            " steps, or move less (smaller dtypes, decode on the GPU)."
        )
    elif cause == "h2d_copy" and "copies with nothing else running" in joined:
        text += (
            " When the copies are large and already pinned, overlap them with compute: copy the"
            " next batch on a side stream (`torch.cuda.Stream`, `non_blocking=True`) while this one"
            " runs, keep data resident on the GPU across steps, or move less (smaller dtypes,"
            " decode on the GPU)."
        )
    if cause == "d2h_copy":
        text = (
            "Keep results on the GPU: copies to the host (`.cpu()`, `.numpy()`, `.tolist()`,"
            " logging tensors) stall the step; batch them every N steps"
            + (
                " and issue them with `non_blocking=True` on a side stream (they already use"
                " pinned memory)."
                if pinned
                else " into pinned buffers with `non_blocking=True`."
            )
        )
    if cause == "host_sync" and ("item" in joined or "_local_scalar_dense" in joined):
        text = "`.item()` in the step loop forces a sync. " + text
    if cause == "launch_overhead" and ("graph-launched" in seen or "GraphLaunch" in joined):
        text = (
            "The work is already launched as CUDA/HIP graphs, so capturing more will not remove"
            " these gaps: they sit between graph launches, where the host prepares the next one."
            " Put more of the step in each graph (fewer, larger graphs), move the host work"
            " between replays off the loop, or raise the batch size so each replay does more."
        )
    if cause in ("fp32_gemm", "memory_bound"):
        text = _precision_fit(cause, text, hw)
    return text


def _precision_fit(cause: str, text: str, hw: Hardware) -> str:
    arch = hw.architecture
    if arch is None:
        return text
    if cause == "memory_bound":
        if arch in _FP16_ONLY or arch in _NO_TENSOR_CORES:
            return text.replace("keep activations in bf16", "keep activations in fp16")
        return text
    if arch in _NO_TENSOR_CORES:
        return (
            f"This GPU ({arch.title()}) has no tensor cores: FP16 runs at twice the FP32 rate, so"
            " `torch.autocast('cuda', dtype=torch.float16)` with a `torch.cuda.amp.GradScaler`"
            " for training roughly halves matmul time; a newer GPU gains far more."
        )
    if arch in _FP16_ONLY:
        return (
            f"Run matmuls on tensor cores: this GPU ({arch.title()}) has FP16 tensor cores only"
            " (no TF32 or BF16), so use `torch.autocast('cuda', dtype=torch.float16)` with a"
            " `torch.cuda.amp.GradScaler` in training (FP16's range needs loss scaling)."
        )
    text = (
        "Run matmuls on tensor cores: `torch.autocast('cuda', dtype=torch.bfloat16)` for mixed"
        " precision, or at least `torch.set_float32_matmul_precision('high')` (TF32)."
    )
    if arch in _FP8:
        text += (
            f" This GPU ({arch.title()}) also runs FP8: Transformer Engine or torchao's float8"
            " training doubles GEMM throughput again where accuracy allows."
        )
    return text


def straggler_advice(s: StragglerStat) -> str:
    """What to do about one straggler rank: balance its work, or fix its host."""
    busy_share = s.busy_in_window_ns / s.window_ns if s.window_ns else 0.0
    if busy_share >= 0.5 or not s.idle_causes:
        top = short_name(s.top_kernels[0][0], 50) if s.top_kernels else "its kernels"
        head = (
            f"Rank {s.rank} computes longer than its peers before each collective (busy"
            f" {100 * busy_share:.0f}% of the time they waited, mostly {top}): give it less work"
            " (balance data shards, sequence lengths or embedding tables across ranks) or check its"
            " GPU for throttling or low clocks (`nvidia-smi -q -d PERFORMANCE,CLOCK`)."
        )
    else:
        cause = s.idle_causes[0][0]
        head = (
            f"Rank {s.rank}'s GPU sat idle {100 * (1 - busy_share):.0f}% of the time the others"
            f" waited, mostly {cause}: its host is the slow part. " + advice(cause)
        )
    return (
        head + " Overlapping collectives with compute (DDP `bucket_cap_mb`, FSDP prefetching)"
        " makes a late rank cost less."
    )


def short_name(name: str, width: int = 60) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"
