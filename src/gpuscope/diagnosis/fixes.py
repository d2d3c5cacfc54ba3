"""What to change for each cause: concrete advice, in the words a PyTorch user would type.

Contract: :func:`advice` returns the fix for a finding's cause: its row's ``fix`` in
``data/causes.csv``, sharpened by the cause's refinement in :data:`REFINEMENTS` from typed
evidence (:class:`FixEvidence`: locations and names seen in the trace, its copies, the hardware it
ran on). The text is data for the renderers; nothing here measures.

Advice fits the evidence and the hardware, or it is not given:

* Precision follows the architecture's tensor cores: before Ampere (Volta, Turing) they take FP16
  only, which needs a ``GradScaler`` in training (FP16's range underflows gradients), and a
  Pascal GPU has no tensor cores at all; Ampere and Ada add TF32 and BF16; Hopper and Blackwell
  (and AMD CDNA3) add FP8. Unknown hardware gets the general advice, naming which GPUs take what.
* Work already launched as CUDA / HIP graphs gets no "capture a CUDA graph" advice: it is captured.
* Copies already from pinned memory get no "pin your memory" advice: overlap and size decide then;
  copies already on a stream of their own get no "use a side stream" advice.
* A program with no framework operators in its trace (CUDA C, MPI, HIP, TensorRT) gets the fix in
  CUDA / HIP runtime terms (``fix_runtime`` in ``data/causes.csv``), never PyTorch calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from gpuscope import causes, facts
from gpuscope.analyses.ranks import StragglerStat
from gpuscope.diagnosis.copies import CopyStat
from gpuscope.sanitise import middle
from gpuscope.units import ms


class Hardware(NamedTuple):
    """What the advice must fit: the GPU's architecture (``data/gpu_facts.csv``) and vendor."""

    architecture: str | None  # "volta", "ampere", "hopper", "cdna3"...; None when unknown
    vendor: str | None


#: Architectures by what their tensor (matrix) cores take.
_NO_TENSOR_CORES = facts.NO_TENSOR_CORES
_FP16_ONLY = facts.FP16_ONLY
_FP8 = frozenset({"hopper", "blackwell", "cdna3", "cdna4"})

#: The fix template of every cause (data/causes.csv); :func:`advice` sharpens it with evidence.
_FIXES: dict[str, str] = causes.fixes()
#: The fix in runtime terms, for programs with no framework operators (data/causes.csv).
_RUNTIME_FIXES: dict[str, str] = causes.runtime_fixes()
#: Refinements whose words fit any program (graph launches, not framework calls).
_RUNTIME_REFINED = frozenset({"launch_overhead", "h2d_copy"})


class FixEvidence(NamedTuple):
    """What a refinement reads: typed facts of one finding (never its evidence sentences)."""

    #: The finding's code locations and the host events behind it, as the trace names them.
    locations: tuple[str, ...] = ()
    #: Its copies, when they held the device with nothing else running (copy findings only).
    copies: CopyStat | None = None
    #: Most launches of the job are CUDA / HIP graph launches: the work is already captured.
    graph_launched: bool = False
    hardware: Hardware = Hardware(None, None)
    #: The trace records framework operators (PyTorch's ``aten::`` ops, Python frames): else the
    #: program drives the runtime itself and the advice is in runtime terms.
    framework: bool = True
    #: Some of the job's work is launched as graphs (though not the work after these gaps).
    some_graphs: bool = False

    def location_has(self, *words: str) -> bool:
        return any(w in loc for loc in self.locations for w in words)


#: A refinement: the cause's fix text, sharpened by what its finding's evidence shows.
Refinement = Callable[[str, FixEvidence], str]


def advice(cause: str, evidence: FixEvidence | None = None) -> str:
    """The fix for ``cause`` (its row's ``fix``), sharpened by its refinement from the evidence
    and fitted to the hardware."""
    e = evidence or FixEvidence()
    if not e.framework and cause in _RUNTIME_FIXES:
        text = _RUNTIME_FIXES[cause]
        refine = REFINEMENTS.get(cause) if cause in _RUNTIME_REFINED else None
        return refine(text, e) if refine is not None else text
    text = _FIXES.get(cause, _FIXES["unknown"])
    refine = REFINEMENTS.get(cause)
    return refine(text, e) if refine is not None else text


def _data_loader(text: str, e: FixEvidence) -> str:
    """PyTorch names the loader's iterator ``_SingleProcessDataLoaderIter`` when it runs in the
    training process (``num_workers=0``)."""
    if e.location_has("_SingleProcessDataLoaderIter"):
        return "The loader runs in the training process (`num_workers=0`). " + text
    return text


def _h2d_copy(text: str, e: FixEvidence) -> str:
    """Copies that already come from pinned memory gain nothing from pinning: overlap decides;
    copies already on a stream of their own need no side stream: they need to start earlier."""
    c = e.copies
    if c is None:
        return text
    if c.side_stream and c.side_stream * 2 >= c.count:
        pin = "" if c.pinned == c.count else "Pin the copies from pageable memory first. "
        how = (
            "`non_blocking=True` from pinned memory"
            if e.framework
            else "`cudaMemcpyAsync` from pinned memory, an event before the kernels that use it"
        )
        return pin + (
            "The copies already run on a stream of their own, and still nothing runs beside"
            " them: the compute waits for their data. Start them earlier (prefetch the next"
            f" batch while this one computes, {how}), keep data resident on the GPU across"
            " steps, or move less (smaller dtypes, decode on the GPU)."
        )
    if not e.framework:
        return text
    if c.pinned and c.pinned * 2 >= c.count:
        return (
            ""
            if c.pinned == c.count
            else "Pin the few copies that still come from pageable memory (`pin_memory=True`). "
        ) + (
            "The copies already come from pinned memory: pinning will not help more. Overlap them"
            " with compute: copy the next batch on a side stream (`torch.cuda.Stream`,"
            " `non_blocking=True`) while this one runs, keep data resident on the GPU across"
            " steps, or move less (smaller dtypes, decode on the GPU)."
        )
    return text + (
        " When the copies are large and already pinned, overlap them with compute: copy the"
        " next batch on a side stream (`torch.cuda.Stream`, `non_blocking=True`) while this one"
        " runs, keep data resident on the GPU across steps, or move less (smaller dtypes,"
        " decode on the GPU)."
    )


def _d2h_copy(text: str, e: FixEvidence) -> str:
    """Copies to pinned buffers need only to leave the step: a side stream, not pinning."""
    if e.copies is None or not e.copies.pinned or e.copies.pinned != e.copies.count:
        return text
    return (
        "Keep results on the GPU: copies to the host (`.cpu()`, `.numpy()`, `.tolist()`,"
        " logging tensors) stall the step; batch them every N steps and issue them with"
        " `non_blocking=True` on a side stream (they already use pinned memory)."
    )


def _host_sync(text: str, e: FixEvidence) -> str:
    """``.item()`` reads a scalar through ``aten::_local_scalar_dense``, which syncs."""
    if e.location_has("item", "_local_scalar_dense"):
        return "`.item()` in the step loop forces a sync. " + text
    return text


def _launch_overhead(text: str, e: FixEvidence) -> str:
    """Work already launched as graphs gets no "capture a CUDA graph" advice; eager work between
    graph replays is told to join the graph, whose capture it is not yet part of."""
    if not (e.graph_launched or e.location_has("GraphLaunch")):
        if e.some_graphs:
            return (
                "Part of the step already replays as a CUDA/HIP graph; these gaps sit before the"
                " eager work launched between replays (input copies, encoders, attention outside"
                " the captured pieces): capture that work too (one graph per step), or move it"
                " off the loop. " + text
            )
        return text
    return (
        "The work is already launched as CUDA/HIP graphs, so capturing more will not remove"
        " these gaps: they sit between graph launches, where the host prepares the next one."
        " Put more of the step in each graph (fewer, larger graphs), move the host work"
        " between replays off the loop, or raise the batch size so each replay does more."
    )


def _fp32_gemm(text: str, e: FixEvidence) -> str:
    return _precision_fit("fp32_gemm", text, e.hardware)


def _memory_bound(text: str, e: FixEvidence) -> str:
    return _precision_fit("memory_bound", text, e.hardware)


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


#: The refinement of each cause's fix, by the cause's name (causes not here: the row's fix).
REFINEMENTS: dict[str, Refinement] = {
    "data_loader": _data_loader,
    "h2d_copy": _h2d_copy,
    "d2h_copy": _d2h_copy,
    "host_sync": _host_sync,
    "launch_overhead": _launch_overhead,
    "fp32_gemm": _fp32_gemm,
    "memory_bound": _memory_bound,
}


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
            f" {ms(idle_before)}, mostly {what}, while the others' GPUs went on to the"
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
    """A kernel name in at most ``width`` characters, cut in its middle: its namespace and its
    end (template arguments, the part that tells two instances apart) both stay."""
    return middle(name, width)
