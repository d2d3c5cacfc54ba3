"""What to change for each cause: concrete advice, in the words a PyTorch user would type.

Contract: :func:`advice` returns the fix for a finding's cause given what the evidence says
(locations, names seen in the trace). The text is data for the renderers; nothing here
measures.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuscope.analyses.ranks import StragglerStat

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
    "warmup": (
        "This is one-time start-up, paid once per process: profile the steady state instead. "
        "Use `torch.profiler.schedule(wait=1, warmup=2, active=3)` so the first steps are not "
        "recorded, run a few iterations (and every `torch.compile` shape) before profiling, "
        "profile CUDA-graph replays rather than their capture, and set "
        "`CUDA_MODULE_LOADING=EAGER` when first-launch module loading must not stall a server."
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
    "memory_bound": (
        "Memory-bound kernels dominate: fuse chains of elementwise/normalisation ops "
        "(`torch.compile`), keep activations in bf16, use fused attention (SDPA / FlashAttention); "
        "for LLM decode, a larger batch stops paying once DRAM bandwidth saturates: quantise "
        "weights/KV cache instead."
    ),
}


def advice(cause: str, seen: Sequence[str] = ()) -> str:
    """The fix for ``cause``, sharpened by names seen in the evidence."""
    text = _FIXES.get(cause, _FIXES["unknown"])
    joined = " ".join(seen)
    if cause == "data_loader" and "_SingleProcessDataLoaderIter" in joined:
        text = "The loader runs in the training process (`num_workers=0`). " + text
    if cause == "h2d_copy" and "copies with no compute alongside" in joined:
        text += (
            " When the copies are large and already pinned, overlap them with compute: copy the"
            " next batch on a side stream (`torch.cuda.Stream`, `non_blocking=True`) while this one"
            " runs, keep data resident on the GPU across steps, or move less (smaller dtypes,"
            " decode on the GPU)."
        )
    if cause == "d2h_copy":
        text = (
            "Keep results on the GPU: copies to the host (`.cpu()`, `.numpy()`, `.tolist()`,"
            " logging tensors) stall the step; batch them every N steps into pinned buffers with"
            " `non_blocking=True`."
        )
    if cause == "host_sync" and ("item" in joined or "_local_scalar_dense" in joined):
        text = "`.item()` in the step loop forces a sync. " + text
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
