"""Findings and the verdict: what costs the most, what it costs in money, and what bounds the job.

Contract: :func:`findings` and :func:`verdict` are pure functions of per-device analysis results.
Findings are job-level (one per cause, summed over devices), sorted by the time they cost, and
never count a nanosecond twice: idle causes partition the idle time, exposed communication is busy
time with no compute, and the compute-side savings (FP32 GEMMs, unfused memory-bound chains) are
capped at the compute time. Their sum is therefore at most the window. With several ranks
(:class:`RankEvidence`), exposed communication spent waiting for a late rank is reported as
``straggler`` or ``collective_wait`` and taken out of ``exposed_communication``.

Cost: a finding that wastes a share ``s`` of device time costs ``s x price`` per GPU-hour and
``s x price x 24 x GPUs`` per day, where GPUs is the job's world size (or devices seen). With
predictions on, :mod:`gpuscope.diagnosis.predict` re-prices each finding from its fix's predicted
saving, and the verdict's dollars are the saving of all fixes replayed together.
"""

from __future__ import annotations

import msgspec
import numpy as np

from gpuscope import causes
from gpuscope._arrays import distinct
from gpuscope.analyses.attribution import CAUSES, LocationStat
from gpuscope.analyses.bounds import Bound, KernelKind, exclusive_by_bound
from gpuscope.analyses.whatif import Prediction
from gpuscope.diagnosis.copies import (
    COPY_GROUPS,
    CopyStat,
    _copy_stats,
    exposed_transfers,
    exposed_transfers_by_group,
    fault_notes,
)
from gpuscope.diagnosis.evidence import DeviceEvidence, RawFinding
from gpuscope.diagnosis.fixes import FixEvidence, Hardware, advice
from gpuscope.diagnosis.rank_evidence import RankEvidence, rank_evidence
from gpuscope.facts import gpu_hour_price

#: Findings smaller than this share of the window are not reported.
MIN_SHARE_PCT = 0.5
#: Memory-bound kernels must take this share of busy time before fusing them is a finding, and
#: half the busy time to be Bloated Context.
MEMORY_BOUND_FINDING_PCT = 30.0
BLOATED_CONTEXT_PCT = 50.0
#: Kernels of one chain are at most this far apart on their stream.
CHAIN_GAP_NS = 20_000

#: Idle causes by what the idle GPU waits for (data/causes.csv's ``waits_for``): the host's own
#: work, or a peer rank (the verdict counts the latter as communication).
HOST_CAUSES = causes.waiting_for("host")
PEER_CAUSES = causes.waiting_for("peer")
_TITLES = causes.titles("idle", "timeline")  # data/causes.csv


class Finding(msgspec.Struct, frozen=True):
    pattern: str  # the cause's pattern in data/causes.csv (diagnosis.patterns), or a rule's
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
    #: Where its figures come from: "timeline", or the samples or counters that measured it
    #: ("nvml-samples", "ncu", ...).
    measured_from: str = "timeline"
    #: A memory finding (no time lost): the bytes it concerns, and the peak after its fix.
    memory_bytes: int | None = None
    predicted_peak_bytes: int | None = None


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
    #: Which evidence the bounds came from, when counters measured some kernels ("" otherwise:
    #: every bound is the roofline estimate from kernel names and recorded shapes).
    bound_evidence: str = ""


def price(evidence: list[DeviceEvidence], override: float | None) -> tuple[float | None, str]:
    return gpu_hour_price((e.facts for e in evidence), override)


def world_size(evidence: list[DeviceEvidence], declared: int | None) -> int:
    return declared if declared and declared > 0 else max(len(evidence), 1)


#: A per-day cost needs a window of at least this many steps: one step (or none) says nothing about
#: the days that follow it (it may be warm-up, a checkpoint or a one-off).
MIN_STEPS_PER_DAY = 3


def findings(
    evidence: list[DeviceEvidence],
    gpu_hour_usd: float | None,
    gpus: int,
    ranks: RankEvidence | None = None,
) -> list[Finding]:
    total_span = sum(e.temporal.span_ns for e in evidence)
    steps = max((e.steps for e in evidence), default=0)
    raw: list[RawFinding] = []
    copies = _copy_stats(evidence)
    for cause in CAUSES:
        lost = sum(e.idle.lost_ns(cause) for e in evidence)
        stats = [s for e in evidence for s in e.idle.causes if s.cause == cause]
        count = sum(s.gaps for s in stats)
        locations = _merge_locations([loc for s in stats for loc in s.locations])
        row = causes.describe(cause)
        note = [f"{count:,} idle gap{'' if count == 1 else 's'}, {lost / 1e6:,.2f} ms in all"]
        # Time that is no waste (one-time start-up, paid once per process) has no dollars.
        saving: int | None = lost if row.waste else None
        h2d = copies["h2d"]
        if cause == "h2d_copy" and h2d.exposed_ns:
            note += h2d.notes("host-to-device")
            saving = lost + (h2d.saving_ns or 0)
            lost += h2d.exposed_ns
        um = copies["um"]
        if cause == "page_migration" and um.exposed_ns:
            # One finding for unified memory: the migrations nothing hid, and the driver's
            # fault service between them (idle), both gone once the data is prefetched.
            service = [f"{lost / 1e6:,.2f} ms of fault service between migrations"]
            note = um.notes("unified-memory page-migration") + (service if lost >= 5_000 else [])
            saving = lost + (um.saving_ns or 0)
            count = um.count  # the migrations, as for the other copy findings
            lost += um.exposed_ns
        if cause == "page_migration":
            note += fault_notes(evidence)
        raw.append((row.pattern, cause, lost, count, locations, note, saving))
    for group, cause_name, words in (
        ("d2h", "d2h_copy", "device-to-host"),
        ("p2p", "p2p_copy", "peer-to-peer"),
    ):
        stat = copies[group]
        if stat.exposed_ns:
            raw.append(
                (
                    causes.describe(cause_name).pattern,
                    cause_name,
                    stat.exposed_ns,
                    stat.count,
                    [],
                    stat.notes(words),
                    stat.saving_ns,
                )
            )
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
        (
            causes.describe("exposed_communication").pattern,
            "exposed_communication",
            exposed,
            0,
            exposed_locations,
            exposed_note,
            exposed,
        )
    )
    raw += ranks.raw if ranks is not None else []
    fp32_lost, fp32_note = _fp32_gemm_saving(evidence)
    mem_lost, mem_kernels, mem_note, mem_pattern = _memory_bound_saving(evidence)
    compute_total = sum(e.temporal.compute_ns for e in evidence)
    scale = min(1.0, compute_total / (fp32_lost + mem_lost)) if fp32_lost + mem_lost else 1.0
    fp32 = int(fp32_lost * scale)
    raw.append((causes.describe("fp32_gemm").pattern, "fp32_gemm", fp32, 0, [], fp32_note, fp32))
    mem = int(mem_lost * scale)
    raw.append((mem_pattern, "memory_bound", mem, mem_kernels, [], mem_note, mem))

    graph_launched = _graph_launched(evidence)
    hardware = _hardware(evidence)
    result: list[Finding] = []
    for pattern, cause_name, lost, count, locations, note, saving in raw:
        share = 100.0 * lost / total_span if total_span else 0.0
        kept = ranks is not None and cause_name in ranks.always
        if (share < MIN_SHARE_PCT or lost <= 0) and not kept:
            continue
        of = _COPY_GROUP_OF.get(cause_name)
        fix_evidence = FixEvidence(
            tuple(loc.location for loc in locations),
            copies[of] if of is not None and copies[of].exposed_ns else None,
            graph_launched,
            hardware,
        )
        cost_hour = (
            saving / total_span * gpu_hour_usd
            if gpu_hour_usd is not None and saving is not None and total_span
            else None
        )
        per_day = (
            cost_hour * 24 * gpus if cost_hour is not None and steps >= MIN_STEPS_PER_DAY else None
        )
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
                cost_usd_per_day=per_day,
                locations=locations,
                evidence=note,
                fix=(ranks.fixes.get(cause_name) if ranks else None)
                or advice(cause_name, fix_evidence),
            )
        )
    result.sort(key=lambda f: -f.lost_ns)
    return result


#: The copy group (diagnosis.copies) behind each copy finding: its fix reads the copies.
_COPY_GROUP_OF = {"h2d_copy": "h2d", "d2h_copy": "d2h", "p2p_copy": "p2p", "page_migration": "um"}


def _graph_launched(evidence: list[DeviceEvidence]) -> bool:
    """Whether half the launches or more are graph launches (the work is already a CUDA / HIP
    graph, so capturing it saves nothing more)."""
    graph = total = 0
    for e in evidence:
        ev = e.work.trace.events
        launches = ev.link[e.work.rows]
        launches = launches[launches >= 0]
        total += int(launches.size)
        if launches.size:
            names = e.work.trace.names
            ids, counts = np.unique(ev.name_id[launches], return_counts=True)
            graph += sum(
                int(c)
                for i, c in zip(ids.tolist(), counts.tolist(), strict=True)
                if "GraphLaunch" in names[i]
            )
    return bool(total) and graph * 2 >= total


def _hardware(evidence: list[DeviceEvidence]) -> Hardware:
    """The architecture the advice must fit: the first known device's."""
    for e in evidence:
        if e.facts is not None:
            return Hardware(e.facts.architecture, e.facts.vendor)
    return Hardware(None, None)


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
    # Memory-bound work that dominates is Bloated Context, not only unfused kernels.
    pattern = (
        "bloated_context"
        if share >= BLOATED_CONTEXT_PCT
        else causes.describe("memory_bound").pattern
    )
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


#: A device busy at least this share of its window is bound by the work it runs, never by the host:
#: the host cannot be what limits a GPU that is rarely waiting for it.
BUSY_NOT_HOST_PCT = 80.0


def verdict(
    evidence: list[DeviceEvidence],
    found: list[Finding],
    gpu_hour_usd: float | None,
    price_source: str,
    gpus: int,
    saving_usd_per_gpu_hour: float | None = None,
) -> Verdict:
    """The bound is the largest share of device time, of a partition of the window: idle time
    split by what it waits for (the host, or peers inside collectives), busy time split by what
    bounds its work (:func:`~gpuscope.analyses.bounds.exclusive_by_bound`). The shares add up to
    100%. A job busy :data:`BUSY_NOT_HOST_PCT` or more of the time is bound by the largest busy
    share: copies that fill it make it transfer-bound, not host-bound."""
    span = sum(e.temporal.span_ns for e in evidence) or 1
    idle = sum(e.temporal.idle_ns for e in evidence)
    comm_wait = sum(e.idle.lost_ns(c) for e in evidence for c in PEER_CAUSES)
    host_causes = sum(e.idle.lost_ns(c) for e in evidence for c in HOST_CAUSES)
    busy = dict.fromkeys(Bound, 0)
    for e in evidence:
        for b, ns in exclusive_by_bound(e.bounds, e.work).items():
            busy[b] += ns
    shares = {
        "host": 100.0 * (idle - comm_wait) / span,
        "communication": 100.0 * (busy[Bound.COMMUNICATION] + comm_wait) / span,
        "transfer": 100.0 * busy[Bound.TRANSFER] / span,
        "memory": 100.0 * busy[Bound.MEMORY] / span,
        "compute": 100.0 * busy[Bound.COMPUTE] / span,
        "latency": 100.0 * busy[Bound.LATENCY] / span,
        "unclassified": 100.0 * busy[Bound.UNCLASSIFIED] / span,
    }
    idle_pct = 100.0 * idle / span
    bound = _bound(shares, 100.0 - idle_pct)
    # What fixing every finding is predicted to save, priced (diagnosis.predict.priced): never
    # the findings' dollars added up, as their fixes overlap.
    wasted = saving_usd_per_gpu_hour if gpu_hour_usd is not None else None
    transfers = _transfer_split(evidence)
    return Verdict(
        bound=bound,
        summary=_summary(bound, shares, idle_pct, found, wasted, transfers, span),
        shares_pct=shares,
        idle_pct=idle_pct,
        wasted_usd_per_gpu_hour=wasted,
        gpu_hour_usd=gpu_hour_usd,
        price_source=price_source,
        world_size=gpus,
        figures={
            "busy_pct": 100.0 - idle_pct,
            "idle_host_pct": 100.0 * host_causes / span,
            "idle_unexplained_pct": 100.0 * (idle - comm_wait - host_causes) / span,
            "latency_bound_kernels_pct": shares["latency"],
            "unclassified_kernels_pct": shares["unclassified"],
            "exposed_transfer_pct": shares["transfer"],
            "exposed_h2d_pct": 100.0 * transfers["h2d"] / span,
            "exposed_d2h_pct": 100.0 * transfers["d2h"] / span,
            "exposed_p2p_pct": 100.0 * transfers["p2p"] / span,
            "exposed_page_migration_pct": 100.0 * transfers["um"] / span,
            "exposed_communication_pct": shares["communication"],
            "memory_bound_pct": shares["memory"],
            "compute_bound_pct": shares["compute"],
            "mfu_pct": _mean([e.bounds.mfu_pct for e in evidence]),
            "mbu_pct": _mean([e.bounds.mbu_pct for e in evidence]),
        },
    )


def _bound(shares: dict[str, float], busy_pct: float) -> str:
    """The largest share; when the device is busy most of the time, the largest busy share."""
    candidates = [k for k in shares if k != "host"] if busy_pct >= BUSY_NOT_HOST_PCT else shares
    return max(candidates, key=lambda k: shares[k])


def _transfer_split(evidence: list[DeviceEvidence]) -> dict[str, int]:
    """Exposed copy time (nothing else on the device) by copy group, summed over devices."""
    total = dict.fromkeys(COPY_GROUPS, 0)
    for e in evidence:
        for group, ns in exposed_transfers_by_group(e).items():
            total[group] += ns
    return total


def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


_BOUND_WORDS = {
    "communication": "communication with no compute to hide it, or waiting for peers, takes",
    "memory": "memory-bound kernels (DRAM bandwidth) take",
    "compute": "compute-bound kernels take",
    "latency": "kernels shorter than a launch take",
    "unclassified": "kernels whose names say neither compute nor memory work take",
}
_TRANSFER_WORDS = {
    "p2p": "peer-to-peer copies between GPUs",
    "h2d": "host-to-device copies",
    "d2h": "device-to-host copies",
    "um": "unified-memory page migrations",
}


def _summary(
    bound: str,
    shares: dict[str, float],
    idle_pct: float,
    found: list[Finding],
    wasted: float | None,
    transfers: dict[str, int],
    span_ns: int,
) -> str:
    """One sentence whose every number is a figure of the verdict or of its top finding."""
    if bound == "host":
        text = f"host-bound: the GPU is idle {idle_pct:.0f}% of the window"
    elif bound == "transfer":
        text = f"transfer-bound: copies with nothing else running fill {shares['transfer']:.0f}%"
        main = max(_TRANSFER_WORDS, key=lambda d: transfers[d])
        if transfers[main]:
            text += (
                f" of the window, mostly {_TRANSFER_WORDS[main]}"
                f" ({100.0 * transfers[main] / span_ns:.0f}%)"
            )
        else:
            text += " of the window"
        text += f"; the GPU is idle {idle_pct:.0f}%"
    else:
        text = (
            f"{bound}-bound: {_BOUND_WORDS[bound]} {shares[bound]:.0f}% of the window;"
            f" the GPU is idle {idle_pct:.0f}%"
        )
    top = found[0] if found else None
    if top is not None:
        idle_only = top.cause in CAUSES and top.share_pct <= idle_pct + 1e-9
        if idle_only and bound == "host":
            text += f", {top.share_pct:.0f} percentage points of it lost because {top.title}"
        else:
            text += f"; the largest finding: {top.title} ({top.share_pct:.0f}% of device time)"
    if wasted is not None:
        text += f"; fixing it all would save about ${wasted:.2f} per GPU-hour"
    return text


__all__ = [
    "BUSY_NOT_HOST_PCT",
    "COPY_GROUPS",
    "MIN_SHARE_PCT",
    "CopyStat",
    "DeviceEvidence",
    "Finding",
    "RankEvidence",
    "RawFinding",
    "Verdict",
    "exposed_transfers",
    "exposed_transfers_by_group",
    "findings",
    "price",
    "rank_evidence",
    "verdict",
    "world_size",
]
