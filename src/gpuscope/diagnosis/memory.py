"""The memory diagnosis: findings about what holds a GPU's memory, priced in bytes.

Contract: :func:`memory_findings` turns :class:`~gpuscope.analyses.memory.MemoryReport`s into
:class:`~gpuscope.diagnosis.findings.Finding`s (the one finding type: ``memory_bytes`` is what the
finding concerns, ``predicted_peak_bytes`` the peak after its fix; no time is lost, so
``lost_ns`` is 0); :func:`diagnose_memory` makes the whole diagnosis of a job that holds only
allocator snapshots. Each rule is a function of one report with the one signature
``(MemoryReport) -> Finding | None`` in ``MEMORY_RULES``; its docstring says which mechanism of
the caching allocator or of autograd it encodes. The titles and fixes come from
``data/causes.csv``; the rules add the bytes.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuscope import causes
from gpuscope.analyses.host import HostIndex
from gpuscope.analyses.memory import MemoryReport, analyse_memory
from gpuscope.analyses.memory_sites import MemorySite
from gpuscope.analyses.memory_trace import trace_record
from gpuscope.diagnosis import Diagnosis, InputSummary, Options
from gpuscope.diagnosis.findings import Finding, Verdict
from gpuscope.facts import device_facts
from gpuscope.model import Job, Trace
from gpuscope.units import gib

GIB = 1 << 30
#: A category must hold this share of the peak to be the peak's story.
MAIN_SHARE = 0.4
#: Activation checkpointing keeps a checkpointed block's input and recomputes the rest: with the
#: usual transformer block it stores about a third of the block's activations (an assumption,
#: said with the figure).
CHECKPOINT_KEEPS = 1 / 3


def _finding(
    cause: str, report: MemoryReport, size: int, after: int | None, evidence: list[str], fix: str
) -> Finding:
    peak = report.peak_allocated_bytes or 1
    return Finding(
        pattern=causes.cause_table()[cause].pattern,
        cause=cause,
        title=causes.title(cause),
        lost_ns=0,
        lost_ns_per_step=None,
        share_pct=100 * size / peak,
        events=sum(s.blocks for s in report.sites),
        cost_usd_per_gpu_hour=None,
        cost_usd_per_day=None,
        locations=[],
        evidence=evidence,
        fix=fix,
        measured_from=report.format,
        memory_bytes=size,
        predicted_peak_bytes=after,
    )


def _phase(phase: str) -> str:
    return "in an unknown phase" if phase == "unknown" else f"in the {phase}"


def _sites_of(report: MemoryReport, category: str) -> list[MemorySite]:
    return [s for s in report.sites if s.category == category]


def _where(sites: list[MemorySite]) -> str:
    return ", ".join(f"{s.location} ({gib(s.bytes)})" for s in sites[:3])


# --- the rules ---------------------------------------------------------------------------------


def weights_exceed_memory(report: MemoryReport) -> Finding | None:
    """Parameters (blocks allocated by ``__init__``/weight loading and never freed) fill the
    allocator at an out-of-memory: no activation or allocator setting is to blame, the model's
    weights alone do not fit, so only fewer bytes per weight (quantising) or fewer weights on
    the GPU (offloading, sharding) help. Offloading streams weights from CPU memory as each
    layer runs: the GPU then holds the one in use and the next, prefetched."""
    oom = report.oom
    if oom is None or oom.verdict != "weights":
        return None
    weights = report.categories["parameters"]
    peak = report.peak_allocated_bytes
    after_int8 = peak - weights // 2
    sites = _sites_of(report, "parameters")
    largest = max((s.largest_block_bytes for s in sites), default=0)
    streamed = peak - weights + min(2 * largest, weights)
    evidence = [
        oom.summary,
        f"weights at {_where(sites)}",
        f"int8 weights: peak {gib(after_int8)}; 4-bit: "
        f"{gib(peak - weights * 3 // 4)} (from 16-bit weights)",
        f"offloaded, streamed a layer at a time (the largest weight block, {gib(largest)}, in use"
        f" and the next prefetched): peak ~{gib(streamed)}",
    ]
    capacity = _capacity(report)
    must = (
        0 if capacity is None else min(max(peak + (oom.request_bytes or 0) - capacity, 0), weights)
    )
    if capacity is not None and must > 0:
        evidence.append(
            f"to fit the {gib(capacity)} this process can have, offload at least {gib(must)}"
            f" of the weights ({100 * must / (weights or 1):.0f}%): peak ~{gib(peak - must)}"
        )
    return _finding(
        "weights_exceed_memory",
        report,
        weights,
        after_int8,
        evidence,
        causes.fix("weights_exceed_memory"),
    )


def _capacity(report: MemoryReport) -> int | None:
    """The memory this process can have: the device's (``--gpu``, a trace's device facts), or
    what it had reserved plus what the device still had free at the out-of-memory."""
    if report.device_total_bytes is not None:
        return report.device_total_bytes
    oom = report.oom
    if oom is not None and oom.device_free_bytes is not None:
        return report.end_reserved_bytes + oom.device_free_bytes
    return None


def activation_peak(report: MemoryReport) -> Finding | None:
    """Autograd keeps each forward's outputs until backward uses them, so the peak of a training
    step is usually the end of the forward, made of activations: checkpointing a block keeps
    only its input and recomputes the rest in backward; halving the micro-batch halves them
    (with gradient accumulation keeping the effective batch); attention written by hand keeps
    T x T scores and probabilities that SDPA / flash attention never materialise."""
    acts = report.categories["activations"]
    peak = report.peak_allocated_bytes
    if not peak or acts < MAIN_SHARE * peak or not report.backward_recorded:
        return None
    sites = _sites_of(report, "activations")
    module = sites[0].chain[-1] if sites and sites[0].chain else "each transformer block"
    checkpoint_after = peak - int(acts * (1 - CHECKPOINT_KEEPS))
    half_after = peak - acts // 2
    evidence = [
        f"activations hold {gib(acts)} of the {gib(peak)} peak ({100 * acts / peak:.0f}%),"
        f" {_phase(report.peak_phase)}",
        f"largest: {_where(sites)}",
        f"checkpointing at {module}: peak ~{gib(checkpoint_after)}"
        f" (keeps ~{CHECKPOINT_KEEPS:.0%} of them, an assumption)",
        f"half the micro-batch with 2 accumulation steps: peak ~{gib(half_after)}",
    ]
    scores = [s for s in sites if _is_attention(s)]
    if scores:
        saved = sum(s.bytes for s in scores)
        evidence.append(
            f"attention scores/probabilities {gib(saved)} at {_where(scores)}: SDPA / flash"
            f" attention never stores them: peak ~{gib(peak - saved)}"
        )
    headroom = _headroom(report, acts)
    if headroom:
        evidence.append(headroom)
    return _finding(
        "activation_peak", report, acts, checkpoint_after, evidence, causes.fix("activation_peak")
    )


def _inference(report: MemoryReport) -> bool:
    """A forward whose activations nothing frees, with no backward anywhere: inference."""
    acts = report.categories["activations"]
    return not report.backward_recorded and acts > 0 and report.kept_activation_bytes >= 0.8 * acts


def inference_keeps_activations(report: MemoryReport) -> Finding | None:
    """With autograd on, every forward keeps the intermediate tensors its backward would need;
    an inference pass that never runs backward frees them only when the outputs die, so memory
    grows layer by layer. Under ``torch.inference_mode()`` / ``no_grad()`` each layer's
    intermediates are freed as soon as the next layer has used them: the peak is about the
    weights plus one layer's working set."""
    acts = report.categories["activations"]
    peak = report.peak_allocated_bytes
    if not peak or acts < MAIN_SHARE * peak or not _inference(report):
        return None
    sites = _sites_of(report, "activations")
    # Without autograd a layer's input and output are alive together, nothing more.
    largest = 2 * max((s.largest_block_bytes for s in sites), default=0)
    after = peak - acts + largest
    return _finding(
        "inference_keeps_activations",
        report,
        acts,
        after,
        [
            f"{gib(report.kept_activation_bytes)} of activations kept to the peak"
            f" ({gib(peak)}) and never freed, with no backward recorded",
            f"largest: {_where(sites)}",
            f"under torch.inference_mode(): peak ~{gib(after)} (the rest, plus the largest"
            " activation twice: a layer's input and output)",
        ],
        causes.fix("inference_keeps_activations"),
    )


def attention_scores(report: MemoryReport) -> Finding | None:
    """Attention written as ``softmax(q @ k.T) @ v`` materialises a T x T score tensor and its
    softmax per head: their size grows with the square of the sequence length, and in inference
    (no backward) they are the largest tensors alive. SDPA's flash and memory-efficient kernels
    compute attention in tiles and never store them. Training's activation peak names the same
    sites in its own finding."""
    peak = report.peak_allocated_bytes
    if not peak or report.backward_recorded:
        return None
    sites = [s for s in report.sites if _is_attention(s)]
    size = sum(s.bytes for s in sites)
    if size < 0.25 * peak:
        return None
    return _finding(
        "attention_scores",
        report,
        size,
        peak - size,
        [
            f"attention scores and probabilities hold {gib(size)} of the {gib(peak)} peak"
            f" ({100 * size / peak:.0f}%) at {_where(sites)}"
            + (f" ({', '.join(sorted({s.operator for s in sites if s.operator}))})"),
            f"SDPA / flash attention never stores them: peak ~{gib(peak - size)}",
            "their size grows with the square of the sequence length: a longer input than the"
            " model expects (more frames, more tokens) multiplies them",
        ],
        causes.fix("attention_scores"),
    )


def _is_attention(site: MemorySite) -> bool:
    words = " ".join([site.function, site.operator, *site.chain]).lower()
    return any(w in words for w in ("softmax", "attention", "attn", "scores", "bmm"))


def _headroom(report: MemoryReport, acts: int) -> str | None:
    """The largest batch that fits: activations scale with the batch, the rest does not."""
    total = report.device_total_bytes
    if total is None or acts <= 0:
        return None
    fixed = report.peak_allocated_bytes - acts
    scale = (0.95 * total - fixed) / acts
    return (
        f"headroom: activations scale with the batch; on this {gib(total)} device about"
        f" {scale:.1f}x the batch fits (5% kept for the allocator)"
    )


def lazy_optimizer_state(report: MemoryReport) -> Finding | None:
    """Adam-style optimizers create their state (two tensors per parameter) inside the first
    ``step()``, on top of the step's own temporaries: the peak lands in the optimizer step.
    Creating the state before the first step (or a fused optimizer, which updates in place
    without per-parameter temporaries) moves it out of the peak; 8-bit state is a quarter of
    fp32's."""
    if report.peak_phase != "optimizer step":
        return None
    state = sum(
        s.bytes for s in report.rise_sites if s.category in ("optimizer state", "temporaries")
    )
    if state <= 0:
        return None
    rise = report.peak_allocated_bytes - report.baseline_bytes
    sites = [s for s in report.rise_sites if s.category in ("optimizer state", "temporaries")]
    return _finding(
        "lazy_optimizer_state",
        report,
        state,
        report.peak_allocated_bytes - min(state, max(rise, 0)),
        [
            f"the peak ({gib(report.peak_allocated_bytes)}) is in the optimizer step"
            f" ({report.peak_phase_source}), {gib(max(rise, 0))} above the"
            f" {gib(report.baseline_bytes)} held before it",
            f"allocated in the step: {_where(sites)}",
        ],
        causes.fix("lazy_optimizer_state"),
    )


def allocator_fragmentation(report: MemoryReport) -> Finding | None:
    """The caching allocator splits segments into blocks and reuses a free block only for a
    request that fits in it: free memory in pieces smaller than the requests is reserved but
    useless. At an out-of-memory with enough free bytes but no piece large enough, that is the
    failure; expandable segments map pages into one growing segment, so pieces can merge."""
    oom = report.oom
    frag = report.at_peak
    reserved = report.reserved_at_peak_bytes or 1
    failed = oom is not None and oom.verdict == "fragmentation"
    # Without the pieces (a trace's totals, a dump after the peak) reserved memory above the
    # peak may be an earlier, larger peak's cache: only the pieces prove fragmentation.
    pieces = frag.free_blocks is not None
    if not failed and (
        not pieces or frag.fragmented_bytes < 0.25 * reserved or frag.fragmented_bytes < GIB
    ):
        return None
    evidence = [
        f"{gib(frag.fragmented_bytes)} reserved but unusable at the peak"
        f" ({100 * frag.fragmented_bytes / reserved:.0f}% of {gib(reserved)} reserved)",
    ]
    if oom is not None:
        evidence.append(oom.summary)
    evidence += report.settings
    fix = causes.fix("allocator_fragmentation")
    if report.expandable_segments:
        fix = (
            "expandable_segments is already on, so it is not the fix: "
            "free the largest requests sooner or make their sizes regular."
        )
    return _finding(
        "allocator_fragmentation",
        report,
        frag.fragmented_bytes,
        report.peak_allocated_bytes,
        evidence,
        fix,
    )


MEMORY_RULES: list[Callable[[MemoryReport], Finding | None]] = [
    weights_exceed_memory,
    allocator_fragmentation,
    lazy_optimizer_state,
    inference_keeps_activations,
    activation_peak,
    attention_scores,
]


def memory_findings(reports: list[MemoryReport]) -> list[Finding]:
    found = [f for r in reports for rule in MEMORY_RULES if (f := rule(r)) is not None]
    failed = any(r.oom is not None for r in reports)
    # An out-of-memory's own verdict comes first; then the largest.
    return sorted(
        found, key=lambda f: (not (failed and f.cause in _OOM_CAUSES), -(f.memory_bytes or 0))
    )


_OOM_CAUSES = frozenset({"weights_exceed_memory", "allocator_fragmentation"})


def memory_verdict(reports: list[MemoryReport], found: list[Finding]) -> Verdict:
    top = max(reports, key=lambda r: r.peak_allocated_bytes)
    peak = top.peak_allocated_bytes or 1
    shares = {k: 100 * v / peak for k, v in top.categories.items() if v}
    main = max(shares, key=lambda k: shares[k]) if shares else "nothing"
    summary = (
        f"Memory peak {gib(top.peak_allocated_bytes)} allocated, {gib(top.reserved_at_peak_bytes)}"
        f" reserved, {_phase(top.peak_phase)}; {main} hold {shares.get(main, 0):.0f}% of it"
    )
    if top.oom is not None:
        summary += f". Out of memory: {top.oom.summary}"
    elif found:
        summary += f". Top: {found[0].title}"
    return Verdict(
        bound="memory_capacity",
        summary=summary,
        shares_pct=shares,
        idle_pct=float("nan"),
        wasted_usd_per_gpu_hour=None,
        gpu_hour_usd=None,
        price_source="memory is priced in bytes, not dollars",
        world_size=len(reports),
        figures={
            "peak_allocated_gib": top.peak_allocated_bytes / GIB,
            "reserved_at_peak_gib": top.reserved_at_peak_bytes / GIB,
        },
    )


def memory_reports(job: Job, device_total_bytes: int | None = None) -> list[MemoryReport]:
    """One report per device of each snapshot; ``device_total_bytes`` (``--gpu``) gives the
    headroom."""
    totals = None if device_total_bytes is None else dict.fromkeys(range(64), device_total_bytes)
    return [r for record in job.memory for r in analyse_memory(record, totals)]


def trace_memory(
    traces: list[tuple[Trace, HostIndex]], options: Options
) -> tuple[list[MemoryReport], list[Finding]]:
    """The memory reports and findings of traces that record allocator events."""
    reports: list[MemoryReport] = []
    for trace, host in traces:
        record = trace_record(trace, host)
        if record is None:
            continue
        totals = {d: i.total_memory_bytes for d, i in trace.devices.items() if i.total_memory_bytes}
        if options.gpu and not totals:
            facts = device_facts(None, gpu=options.gpu)
            if facts is not None and facts.memory_bytes:
                totals = dict.fromkeys(range(64), facts.memory_bytes)
        reports += analyse_memory(record, totals, timeline=options.charts)
    return reports, memory_findings(reports)


def diagnose_memory(job: Job, options: Options) -> Diagnosis:
    """The diagnosis of a job that holds allocator snapshots only."""
    facts = device_facts(None, gpu=options.gpu) if options.gpu else None
    reports = memory_reports(job, facts.memory_bytes if facts is not None else None)
    found = memory_findings(reports)
    return Diagnosis(
        source=job.source,
        inputs=[
            InputSummary(
                path=m.source,
                format=m.format,
                schema=m.schema,
                rank=None,
                world_size=None,
                events=len(m.events),
                steps=0,
            )
            for m in job.memory
        ],
        devices=[],
        verdict=memory_verdict(reports, found),
        findings=found,
        warnings=job.warnings,
        based_on="memory",
        memory=reports,
    )
