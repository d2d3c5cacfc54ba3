"""Findings and the verdict: what costs the most, what it costs in money, and what bounds the job.

Contract: :func:`findings` and :func:`verdict` are pure functions of per-device analysis results.
Findings are job-level (one per cause, summed over devices), sorted by the time they cost, and
never count a nanosecond twice: idle causes partition the idle time, exposed communication is busy
time with no compute, and the compute-side savings (FP32 GEMMs, unfused memory-bound chains) are
capped at the compute time. Their sum is therefore at most the window. With several ranks
(:class:`RankEvidence`), exposed communication spent waiting for a late rank is reported as
``straggler`` or ``collective_wait`` and taken out of ``exposed_communication``.

Cost: a finding that wastes a share ``s`` of device time costs ``s x price`` per GPU-hour and
``s x price x 24 x GPUs`` per day, where GPUs is the job's world size (or devices seen).
"""

from __future__ import annotations

from typing import TypeAlias

import msgspec
import numpy as np

from gpuscope import causes
from gpuscope._arrays import distinct
from gpuscope.analyses.attribution import Cause, IdleAttribution, LocationStat
from gpuscope.analyses.bounds import Bound, KernelBounds, KernelKind
from gpuscope.analyses.intervals import difference, union
from gpuscope.analyses.ranks import RankAnalysis, StragglerStat
from gpuscope.analyses.timeline import DeviceWork, Overlap, TemporalBreakdown
from gpuscope.analyses.whatif import Prediction
from gpuscope.diagnosis.fixes import advice, short_name, straggler_advice
from gpuscope.facts import GpuFacts, gpu_hour_price
from gpuscope.model import CopyDirection, Kind

#: A GPU that waits this share of the time (for the host or for peers) is bound by what it waits on.
STARVED_PCT = 25.0
#: Findings smaller than this share of the window are not reported.
MIN_SHARE_PCT = 0.5
#: Memory-bound kernels must take this share of busy time before fusing them is a finding, and
#: half the busy time to be Bloated Context.
MEMORY_BOUND_FINDING_PCT = 30.0
BLOATED_CONTEXT_PCT = 50.0
#: Kernels of one chain are at most this far apart on their stream.
CHAIN_GAP_NS = 20_000

HOST_CAUSES = frozenset(
    {
        Cause.HOST_SYNC,
        Cause.DATA_LOADER,
        Cause.H2D_COPY,
        Cause.LAUNCH_OVERHEAD,
        Cause.ALLOCATOR,
        Cause.CHECKPOINT,
        Cause.CPU_OTHER,
    }
)
_TITLES = causes.titles("idle", "timeline")  # data/causes.csv


class DeviceEvidence(msgspec.Struct, frozen=True):
    """Everything the findings need from one device."""

    rank: int | None
    device: int
    work: DeviceWork
    temporal: TemporalBreakdown
    overlap: Overlap
    idle: IdleAttribution
    bounds: KernelBounds
    facts: GpuFacts | None
    steps: int


class Finding(msgspec.Struct, frozen=True):
    pattern: str  # ghost_gpu | bloated_context | latency_mirage | tensor_cores_unused
    cause: str
    title: str
    lost_ns: int  # summed over the job's devices, over the whole window
    lost_ns_per_step: float | None
    share_pct: float  # of the job's device time (sum of spans)
    events: int  # gaps or kernels behind it
    cost_usd_per_gpu_hour: float | None
    cost_usd_per_day: float | None
    locations: list[LocationStat]
    evidence: list[str]
    fix: str
    #: What fixing it saves per GPU and step, replayed (None: no edit for this cause, or
    #: predictions off); ``prediction`` holds its range, the measured step and the assumption.
    predicted_saving_ns_per_step: float | None = None
    prediction: Prediction | None = None


class Verdict(msgspec.Struct, frozen=True):
    bound: str  # host | memory | compute | communication
    summary: str
    shares_pct: dict[str, float]  # share of device time per bound
    idle_pct: float
    wasted_usd_per_gpu_hour: float | None
    gpu_hour_usd: float | None
    price_source: str
    world_size: int
    figures: dict[str, float | None] = msgspec.field(default_factory=dict)


def price(evidence: list[DeviceEvidence], override: float | None) -> tuple[float | None, str]:
    return gpu_hour_price((e.facts for e in evidence), override)


def world_size(evidence: list[DeviceEvidence], declared: int | None) -> int:
    return declared if declared and declared > 0 else max(len(evidence), 1)


def findings(
    evidence: list[DeviceEvidence],
    gpu_hour_usd: float | None,
    gpus: int,
    ranks: RankEvidence | None = None,
) -> list[Finding]:
    total_span = sum(e.temporal.span_ns for e in evidence)
    steps = max((e.steps for e in evidence), default=0)
    raw: list[tuple[str, str, int, int, list[LocationStat], list[str]]] = []
    transfers = [exposed_transfers(e) for e in evidence]
    h2d_exposed = sum(t[0] for t in transfers)
    d2h_exposed = sum(t[1] for t in transfers)
    for cause in Cause:
        lost = sum(e.idle.lost_ns(cause) for e in evidence)
        stats = [s for e in evidence for s in e.idle.causes if s.cause is cause]
        count = sum(s.gaps for s in stats)
        locations = _merge_locations([loc for s in stats for loc in s.locations])
        pattern = "latency_mirage" if cause is Cause.COMMUNICATION_WAIT else "ghost_gpu"
        note = [f"{count:,} idle gap{'' if count == 1 else 's'}, {lost / 1e6:,.2f} ms in all"]
        if cause is Cause.H2D_COPY and h2d_exposed:
            lost += h2d_exposed
            note.append(
                f"{h2d_exposed / 1e6:,.2f} ms of host-to-device copies with no compute alongside"
            )
        raw.append((pattern, cause.value, lost, count, locations, note))
    if d2h_exposed:
        note = [
            f"{d2h_exposed / 1e6:,.2f} ms of device-to-host or peer copies, no compute alongside"
        ]
        raw.append(("ghost_gpu", "d2h_copy", d2h_exposed, 0, [], note))
    exposed = sum(e.overlap.exposed_ns for e in evidence)
    comm = sum(e.overlap.communication_ns for e in evidence)
    exposed_note = [f"{comm / 1e6:,.2f} ms of communication, {exposed / 1e6:,.2f} ms of it exposed"]
    exposed_locations: list[LocationStat] = []
    if ranks is not None:
        # Waiting for a late peer is reported by the straggler / collective_wait findings.
        exposed -= ranks.exposed_wait_ns
        exposed_note += ranks.exposed_notes
        exposed_locations = ranks.exposed_locations
    raw.append(
        ("latency_mirage", "exposed_communication", exposed, 0, exposed_locations, exposed_note)
    )
    raw += ranks.raw if ranks is not None else []
    fp32_lost, fp32_note = _fp32_gemm_saving(evidence)
    mem_lost, mem_kernels, mem_note, mem_pattern = _memory_bound_saving(evidence)
    compute_total = sum(e.temporal.compute_ns for e in evidence)
    scale = min(1.0, compute_total / (fp32_lost + mem_lost)) if fp32_lost + mem_lost else 1.0
    raw.append(("tensor_cores_unused", "fp32_gemm", int(fp32_lost * scale), 0, [], fp32_note))
    raw.append((mem_pattern, "memory_bound", int(mem_lost * scale), mem_kernels, [], mem_note))

    result: list[Finding] = []
    for pattern, cause_name, lost, count, locations, note in raw:
        share = 100.0 * lost / total_span if total_span else 0.0
        kept = ranks is not None and cause_name in ranks.always
        if (share < MIN_SHARE_PCT or lost <= 0) and not kept:
            continue
        seen = [loc.location for loc in locations] + note
        cost_hour = share / 100.0 * gpu_hour_usd if gpu_hour_usd is not None else None
        result.append(
            Finding(
                pattern=pattern,
                cause=cause_name,
                title=_TITLES[cause_name],
                lost_ns=int(lost),
                lost_ns_per_step=lost / len(evidence) / steps if steps else None,
                share_pct=share,
                events=count,
                cost_usd_per_gpu_hour=cost_hour,
                cost_usd_per_day=cost_hour * 24 * gpus if cost_hour is not None else None,
                locations=locations,
                evidence=note,
                fix=(ranks.fixes.get(cause_name) if ranks else None) or advice(cause_name, seen),
            )
        )
    result.sort(key=lambda f: -f.lost_ns)
    return result


def exposed_transfers(e: DeviceEvidence) -> tuple[int, int]:
    """Host-to-device and device-to-host copy time with no compute or communication alongside:
    the GPU's engines wait for data to cross PCIe/NVLink."""
    ev = e.work.trace.events
    rows = e.bounds.rows
    over_link = e.bounds.bound == Bound.TRANSFER
    if not over_link.any():
        return 0, 0
    starts, ends = ev.start_ns[rows], ev.end_ns[rows]
    busy_work = ~over_link & (ev.kind[rows] == Kind.KERNEL)
    hidden_by = union(starts[busy_work], ends[busy_work])
    direction = ev.copy_direction[rows]
    result = []
    for wanted in (
        over_link & (direction == CopyDirection.H2D),
        over_link & (direction != CopyDirection.H2D),
    ):
        copies = union(starts[wanted], ends[wanted])
        result.append(difference(copies, hidden_by).total_ns)
    return result[0], result[1]


def _merge_locations(locations: list[LocationStat]) -> list[LocationStat]:
    merged: dict[str, list[int]] = {}
    for loc in locations:
        entry = merged.setdefault(loc.location, [0, 0])
        entry[0] += loc.lost_ns
        entry[1] += loc.gaps
    top = sorted(merged.items(), key=lambda kv: -kv[1][0])[:5]
    return [LocationStat(w, v[0], v[1]) for w, v in top]


def _fp32_gemm_saving(evidence: list[DeviceEvidence]) -> tuple[float, list[str]]:
    """FP32 GEMM time x (1 - FP32 peak / tensor-core peak): what tensor cores would save."""
    saving = 0.0
    fp32_ns = 0
    gemm_ns = 0
    for e in evidence:
        fp32_ns += e.bounds.fp32_gemm_ns
        gemm_ns += e.bounds.gemm_ns
        f = e.facts
        tensor = (f.tf32_flops_per_s or f.bf16_flops_per_s) if f else None
        plain = f.fp32_flops_per_s if f else None
        speedup = tensor / plain if tensor and plain else 2.0  # unknown device: a modest guess
        saving += e.bounds.fp32_gemm_ns * (1.0 - 1.0 / max(speedup, 1.0))
    share = 100.0 * fp32_ns / gemm_ns if gemm_ns else 0.0
    note = [f"{fp32_ns / 1e6:,.2f} ms of FP32 GEMMs on CUDA cores: {share:.0f}% of GEMM time"]
    return saving, note


def _memory_bound_saving(evidence: list[DeviceEvidence]) -> tuple[float, int, list[str], str]:
    """Fusing a chain of k back-to-back memory-bound kernels moves the data once instead of k
    times: the chain's time x (1 - 1/k) is the most fusion can save."""
    saving = 0.0
    kernels = 0
    memory_ns = 0
    busy_ns = 0
    for e in evidence:
        b = e.bounds
        memory_ns += b.time_ns_by_bound[Bound.MEMORY]
        busy_ns += e.temporal.busy_ns
        ev = e.work.trace.events
        fusable = (b.bound == Bound.MEMORY) & (
            (b.kind == KernelKind.ELEMENTWISE) | (b.kind == KernelKind.REDUCTION)
        )
        rows = b.rows
        streams, row_starts, row_ends = ev.stream[rows], ev.start_ns[rows], ev.end_ns[rows]
        for stream in distinct(streams):
            on_stream = np.flatnonzero(streams == stream)
            starts, ends = row_starts[on_stream], row_ends[on_stream]
            is_fusable = fusable[on_stream]
            # A chain continues while kernels stay fusable and follow each other closely.
            follows = np.empty(on_stream.size, dtype=bool)
            follows[0] = False
            follows[1:] = (
                is_fusable[1:] & is_fusable[:-1] & (starts[1:] - ends[:-1] <= CHAIN_GAP_NS)
            )
            chain_id = np.cumsum(~follows)
            members = chain_id[is_fusable]
            durations = (ends - starts)[is_fusable].astype(np.float64)
            if members.size == 0:
                continue
            # Chain ids never decrease: each chain is one run of equal ids (np.unique without
            # its sort, which dominated this finding).
            new_chain = np.empty(members.size, dtype=np.bool_)
            new_chain[0] = True
            np.not_equal(members[1:], members[:-1], out=new_chain[1:])
            index = np.cumsum(new_chain) - 1
            counts = np.bincount(index)
            totals = np.bincount(index, weights=durations)
            saving += float((totals * (1.0 - 1.0 / counts)).sum())
            kernels += int(counts[counts > 1].sum())
    share = 100.0 * memory_ns / busy_ns if busy_ns else 0.0
    pattern = "bloated_context" if share >= BLOATED_CONTEXT_PCT else "fusion"
    note = [
        f"memory-bound kernels run {memory_ns / 1e6:,.2f} ms: {share:.0f}% of busy time",
        f"{kernels:,} kernels in back-to-back chains of memory-bound ops that fusion would merge",
    ]
    achieved = [e.bounds.achieved_bytes_per_s for e in evidence if e.bounds.achieved_bytes_per_s]
    peak = next((e.facts.memory_bandwidth_bytes_per_s for e in evidence if e.facts), None)
    if achieved and peak:
        note.append(
            f"kernels with recorded shapes moved {max(achieved) / 1e9:,.0f} GB/s"
            f" ({100 * max(achieved) / peak:.0f}% of the {peak / 1e9:,.0f} GB/s peak)"
        )
    if share < MEMORY_BOUND_FINDING_PCT:
        saving = 0.0  # fusion is worth a look, but memory-bound work does not dominate
    return saving, kernels, note, pattern


def verdict(
    evidence: list[DeviceEvidence],
    found: list[Finding],
    gpu_hour_usd: float | None,
    price_source: str,
    gpus: int,
) -> Verdict:
    span = sum(e.temporal.span_ns for e in evidence) or 1
    idle = sum(e.temporal.idle_ns for e in evidence)
    host = sum(e.idle.lost_ns(c) for e in evidence for c in HOST_CAUSES)
    comm = sum(e.overlap.exposed_ns + e.idle.lost_ns(Cause.COMMUNICATION_WAIT) for e in evidence)
    memory = sum(e.bounds.time_ns_by_bound[Bound.MEMORY] for e in evidence)
    compute = sum(e.bounds.time_ns_by_bound[Bound.COMPUTE] for e in evidence)
    latency = sum(e.bounds.time_ns_by_bound[Bound.LATENCY] for e in evidence)
    transfer = sum(sum(exposed_transfers(e)) for e in evidence)
    shares = {
        "host": 100.0 * (host + latency + transfer) / span,
        "communication": 100.0 * comm / span,
        "memory": 100.0 * memory / span,
        "compute": 100.0 * compute / span,
    }
    bound = _bound(shares)
    wasted_share = sum(f.share_pct for f in found)
    wasted = wasted_share / 100.0 * gpu_hour_usd if gpu_hour_usd is not None else None
    return Verdict(
        bound=bound,
        summary=_summary(bound, shares, 100.0 * idle / span, found, wasted),
        shares_pct=shares,
        idle_pct=100.0 * idle / span,
        wasted_usd_per_gpu_hour=wasted,
        gpu_hour_usd=gpu_hour_usd,
        price_source=price_source,
        world_size=gpus,
        figures={
            "idle_host_pct": 100.0 * host / span,
            "latency_bound_kernels_pct": 100.0 * latency / span,
            "exposed_transfer_pct": 100.0 * transfer / span,
            "exposed_communication_pct": 100.0 * comm / span,
            "memory_bound_pct": 100.0 * memory / span,
            "compute_bound_pct": 100.0 * compute / span,
            "mfu_pct": _mean([e.bounds.mfu_pct for e in evidence]),
            "mbu_pct": _mean([e.bounds.mbu_pct for e in evidence]),
        },
    )


def _bound(shares: dict[str, float]) -> str:
    """Waiting first: a GPU starved by the host or its peers for a large share of the time is
    bound by them, whatever its kernels are. Otherwise the busy time's kernels decide."""
    waste = max(("host", "communication"), key=lambda k: shares[k])
    if shares[waste] >= STARVED_PCT:
        return waste
    return max(shares, key=lambda k: shares[k])


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _summary(
    bound: str,
    shares: dict[str, float],
    idle_pct: float,
    found: list[Finding],
    wasted: float | None,
) -> str:
    top = found[0] if found else None
    text = f"{bound}-bound: the GPU is idle {idle_pct:.0f}% of the window"
    if top is not None:
        idle_only = top.cause in {c.value for c in Cause} and top.share_pct <= idle_pct + 1e-9
        if idle_only:
            text += f", {top.share_pct:.0f} points of it lost because {top.title}"
        else:
            text += f"; the costliest finding: {top.title} ({top.share_pct:.0f}% of device time)"
    if wasted is not None:
        text += f"; about ${wasted:.2f} per GPU-hour wasted"
    return text


# --- many GPUs: what the rank analysis adds -----------------------------------------------------

RawFinding: TypeAlias = tuple[str, str, int, int, list[LocationStat], list[str]]


class RankEvidence(msgspec.Struct, frozen=True):
    """What the rank analysis adds to the findings: exposed time spent waiting for a late peer,
    moved out of ``exposed_communication`` into ``straggler`` / ``collective_wait`` (so nothing
    counts twice), per-step evidence and sharper fixes for ``exposed_communication``."""

    exposed_wait_ns: int
    raw: list[RawFinding]
    exposed_notes: list[str]
    exposed_locations: list[LocationStat]
    fixes: dict[str, str]
    always: frozenset[str] = frozenset()  # reported even when they cost little in this window


def rank_evidence(analysis: RankAnalysis, gpu_hour_usd: float | None, gpus: int) -> RankEvidence:
    raw: list[RawFinding] = []
    fixes: dict[str, str] = {}
    if analysis.stragglers:
        notes = [_straggler_note(s) for s in analysis.stragglers[:3]]
        count = sum(s.last_arrivals for s in analysis.stragglers)
        lost = analysis.straggler_exposed_wait_ns
        raw.append(("latency_mirage", "straggler", lost, count, [], notes))
        fixes["straggler"] = straggler_advice(analysis.stragglers[0])
    if analysis.collective_wait_ns is not None:
        other = analysis.exposed_wait_ns - analysis.straggler_exposed_wait_ns
        raw.append(
            (
                "latency_mirage",
                "collective_wait",
                other,
                analysis.matched_collectives,
                [],
                [_collective_wait_note(analysis, other)],
            )
        )
        fixes["collective_wait"] = advice("collective_wait")
    notes, fix = _exposure_evidence(analysis, gpu_hour_usd, gpus)
    fixes["exposed_communication"] = fix
    locations = [LocationStat(w, ns, count) for w, ns, count in analysis.exposure.locations]
    # A named straggler is reported even when the others hid their wait under compute in this
    # window: they drift ahead of it step by step until they cannot.
    always = frozenset({"straggler"} if analysis.stragglers else set())
    return RankEvidence(analysis.exposed_wait_ns, raw, notes, locations, fixes, always)


def _straggler_note(s: StragglerStat) -> str:
    text = (
        f"rank {s.rank} arrived last at {s.last_arrivals} of {s.shared} collectives"
        f" ({s.share_pct:.0f}%), {s.mean_late_ns / 1e6:,.2f} ms after the next-slowest rank on"
        f" average (max {s.max_late_ns / 1e6:,.2f} ms); the other ranks waited"
        f" {s.caused_wait_ns / 1e6:,.2f} ms inside those collectives,"
        f" {s.caused_exposed_wait_ns / 1e6:,.2f} ms of it with no compute alongside"
    )
    doing = [f"{short_name(n)} {ns / 1e6:,.2f} ms" for n, ns in s.top_kernels[:2]]
    doing += [f"idle ({cause}) {ns / 1e6:,.2f} ms" for cause, ns in s.idle_causes[:2]]
    if doing:
        text += f"; meanwhile rank {s.rank} ran " + ", ".join(doing)
    return text


def _collective_wait_note(analysis: RankAnalysis, exposed_other_ns: int) -> str:
    text = (
        f"{(analysis.collective_wait_ns or 0) / 1e6:,.2f} ms waiting for the last rank inside"
        f" {analysis.matched_collectives:,} matched collectives across {len(analysis.ranks)} ranks"
        f" ({exposed_other_ns / 1e6:,.2f} ms of it exposed and not caused by a named straggler)"
    )
    busiest, least = analysis.busiest, analysis.least_busy
    if busiest is not None and least is not None and busiest is not least:
        text += (
            f"; busiest rank {busiest.rank} ({busiest.busy_pct:.0f}% busy), least busy rank"
            f" {least.rank} ({least.busy_pct:.0f}%)"
        )
    return text


def _exposure_evidence(
    analysis: RankAnalysis, gpu_hour_usd: float | None, gpus: int
) -> tuple[list[str], str]:
    """Exposed communication per step, what it costs, and which fix would gain what."""
    e = analysis.exposure
    notes: list[str] = []
    hints: list[str] = []
    per_gpu = max(len(analysis.ranks), 1)
    if e.steps:
        mean_exposed = sum(s.exposed_ns for s in e.steps) / len(e.steps)
        mean_comm = sum(s.communication_ns for s in e.steps) / len(e.steps)
        worst = max(e.steps, key=lambda s: s.exposed_ns)
        text = (
            f"per GPU and step: {mean_exposed / 1e6:,.2f} ms exposed of {mean_comm / 1e6:,.2f} ms"
            f" of communication over {len(e.steps)} step{'s' if len(e.steps) > 1 else ''}"
            f" (most: {worst.name},"
            f" {worst.exposed_ns / 1e6:,.2f} ms)"
        )
        if gpu_hour_usd is not None:
            per_1000 = mean_exposed / 3.6e12 * gpu_hour_usd * gpus * 1000
            text += f"; ${per_1000:,.2f} per 1,000 steps on {gpus} GPUs"
        notes.append(text)
    if analysis.exposed_wait_ns:
        notes.append(
            f"{analysis.exposed_wait_ns / 1e6:,.2f} ms of the exposed time is waiting for a late"
            " peer: counted under straggler / collective_wait, not here"
        )
    if e.collectives and e.fully_exposed:
        notes.append(
            f"{e.fully_exposed:,} of {e.collectives:,} collectives ran with no compute alongside"
            f" ({e.fully_exposed_ns / 1e6:,.2f} ms over {per_gpu} GPUs, waiting aside)"
        )
        if e.fully_exposed_ns >= 0.5 * (e.exposed_ns - analysis.exposed_wait_ns):
            where = f" (issued at {e.locations[0][0]})" if e.locations else ""
            steps = max(len(e.steps), 1)
            hints.append(
                f"Most exposed time is collectives with nothing to overlap{where}: launch them"
                " during backward, not after it (DDP's gradient buckets do; a manual `all_reduce`"
                " after `loss.backward()` cannot overlap): up to"
                f" {e.fully_exposed_ns / per_gpu / steps / 1e6:,.2f} ms per step per GPU."
            )
    if e.small:
        what = "move under 1 MiB each" if e.small_by_size else "last under 50 µs each"
        notes.append(
            f"{e.small:,} collectives {what} ({e.small_exposed_ns / 1e6:,.2f} ms exposed):"
            " their fixed latency dominates"
        )
        if e.small_exposed_ns >= 0.2 * max(e.exposed_ns - analysis.exposed_wait_ns, 1):
            hints.append(
                "Merge small collectives: raise DDP `bucket_cap_mb` (default 25), flatten tensors"
                " into one buffer or use coalesced collectives, so the fixed cost is paid once."
            )
    if e.mean_message_bytes is not None:
        notes.append(f"collective messages average {e.mean_message_bytes / 2**20:,.1f} MiB")
    for b in analysis.bandwidth:
        if b.bus_pct_of_peak is not None and not b.includes_wait:
            notes.append(
                f"{b.kind} bus bandwidth {(b.bus_bytes_per_s or 0) / 1e9:,.0f} GB/s,"
                f" {b.bus_pct_of_peak:.0f}% of the link's {(b.peak_bytes_per_s or 0) / 1e9:,.0f}"
                " GB/s per direction"
            )
    return notes, " ".join([*hints, advice("exposed_communication")])
