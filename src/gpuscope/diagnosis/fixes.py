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

from gpuscope import causes
from gpuscope.analyses.ranks import StragglerStat


class Hardware(NamedTuple):
    """What the advice must fit: the GPU's architecture (``data/gpu_facts.csv``) and vendor."""

    architecture: str | None  # "volta", "ampere", "hopper", "cdna3"...; None when unknown
    vendor: str | None


#: Architectures by what their tensor (matrix) cores take.
_NO_TENSOR_CORES = frozenset({"pascal", "maxwell"})
_FP16_ONLY = frozenset({"volta", "turing"})
_FP8 = frozenset({"hopper", "blackwell", "cdna3", "cdna4"})

#: The fix template of every cause (data/causes.csv); :func:`advice` sharpens it with evidence.
_FIXES: dict[str, str] = causes.fixes()


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
    """What to do about one straggler rank: fix its host when its GPU sat idle before it arrived
    (the host issued its work late), else balance its work or check its GPU."""
    busy_share = s.busy_in_window_ns / s.window_ns if s.window_ns else 0.0
    idle_before = sum(ns for _, ns in s.idle_before)
    late_total = s.mean_late_ns * s.last_arrivals
    if s.idle_before and idle_before >= 0.5 * late_total:
        what = s.idle_before[0][0]
        head = (
            f"Rank {s.rank}'s host issues its work late: before its late arrivals its GPU sat idle"
            f" {idle_before / 1e6:,.2f} ms, mostly {what}, while the others' GPUs went on to the"
            " collective. Take that host work off the step (or even it out across ranks: every"
            " rank pays for the slowest host). " + advice(what.split(" at ")[0])
        )
    elif busy_share >= 0.5 or not s.idle_causes:
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
