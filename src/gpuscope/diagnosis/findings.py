"""Findings and the verdict: what costs the most, what it costs in money, and what bounds the job.

Contract: :func:`findings` and :func:`verdict` are pure functions of per-device analysis results.
Findings are job-level (one per cause, summed over devices) and never count a nanosecond twice:
idle causes partition the idle time, exposed communication is busy time with no compute, and
the compute-side savings (FP32 GEMMs, unfused memory-bound chains) are capped at the compute time.
Their sum is therefore at most the window. With several ranks (:class:`RankEvidence`), exposed
communication spent waiting for a late rank is reported as ``straggler`` or ``collective_wait``
and taken out of ``exposed_communication``.

Cost: a finding that wastes a share ``s`` of device time costs ``s x price`` per GPU-hour and
``s x price x 24 x GPUs`` per day, where GPUs is the job's world size (or devices seen). With
predictions on, :mod:`gpuscope.diagnosis.predict` re-prices each finding from its fix's predicted
saving, and the verdict's dollars are the saving of all fixes replayed together.

Order: :func:`ranked` puts first what fixing saves most (:func:`worth_pct`: the predicted saving
where a fix was replayed, else the time the finding measured), and last what saves nothing; the
verdict's headline names the first finding that saves something as the one to fix first.

Verdict words (:data:`BOUND_WORDS`, the one set; README "What the diagnosis says" and
docs/verdicts.md): ``input``, ``host``, ``communication``, ``transfer``, ``memory``, ``compute``,
``latency`` and ``device`` from a timeline; samples and counters add theirs
(:mod:`gpuscope.diagnosis.sampled`).
"""

from __future__ import annotations

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope import causes
from gpuscope._arrays import distinct, member
from gpuscope.analyses.attribution import CAUSES, LocationStat
from gpuscope.analyses.bounds import Bound, KernelKind, exclusive_by_bound
from gpuscope.analyses.whatif import Prediction
from gpuscope.diagnosis import money
from gpuscope.diagnosis.copies import (
    COPY_GROUPS,
    CopyStat,
    copy_stats,
    exposed_transfers,
    exposed_transfers_by_group,
    fault_notes,
)
from gpuscope.diagnosis.evidence import DeviceEvidence, RawFinding
from gpuscope.diagnosis.fixes import FixEvidence, Hardware, advice
from gpuscope.diagnosis.rank_evidence import RankEvidence, rank_evidence
from gpuscope.facts import gpu_hour_price
from gpuscope.model import Kind, Trace
from gpuscope.units import duration

#: Findings smaller than this share of the window are not reported.
MIN_SHARE_PCT = 0.5
#: Memory-bound kernels must take this share of busy time before fusing them is a finding, and
#: half the busy time to be Bloated Context.
MEMORY_BOUND_FINDING_PCT = 30.0
BLOATED_CONTEXT_PCT = 50.0
#: Kernels of one chain are at most this far apart on their stream.
CHAIN_GAP_NS = 20_000

#: Idle causes by what the idle GPU waits for (data/causes.csv's ``waits_for``): the input
#: pipeline (the verdict's input share), the host's work (the input pipeline's included), or a
#: peer rank (the verdict counts it as communication).
INPUT_CAUSES = causes.waiting_for("input")
HOST_CAUSES = causes.waiting_for("host") | INPUT_CAUSES
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


#: A predicted saving below this share of the step is no saving: steps vary by more than that
#: from one to the next, and the replay is checked to 10% of the step (benchmarks/whatif.py).
NO_SAVING_PCT = 0.5
#: Causes whose time is no waste to fix per step: one-time start-up, paid once per process
#: (data/causes.csv's ``waits_for`` = startup).
_ONE_TIME = causes.waiting_for("startup")
#: Causes whose time nothing in the trace explains (``waits_for`` = unexplained): their remedy is a
#: better capture, which by itself saves no step time, so they cannot be fixed first.
_UNEXPLAINED = causes.waiting_for("unexplained")


def worth_pct(f: Finding) -> float:
    """What fixing ``f`` saves, as a share: of the step, when its fix was replayed (under
    :data:`NO_SAVING_PCT`: nothing); else of device time, the time it measured (what the finding
    itself estimates fixing saves, for busy-time findings). One-time start-up saves nothing per
    step, whatever its length; nor does time nothing explains, whose only fix is to re-profile."""
    if f.prediction is not None:
        p = f.prediction
        share = 100.0 * max(p.saving_ns_per_step, 0.0) / p.step_ns if p.step_ns else 0.0
        return share if share >= NO_SAVING_PCT else 0.0
    if f.cause in _ONE_TIME | _UNEXPLAINED or f.pattern == "startup" or f.memory_bytes is not None:
        # Start-up is paid once; unexplained time has no fix to price; a memory finding is priced
        # in bytes, not time.
        return 0.0
    return f.share_pct


def ranked(found: list[Finding]) -> list[Finding]:
    """Findings by what fixing each saves (:func:`worth_pct`), most first; those that save nothing
    last, by the time they name. The order is what to fix first: a large share that is off the
    step's critical path (its time overlaps other work, or other waits take its place) comes
    after a small one whose fix moves every step's end. Among those that save nothing, time
    nothing explains comes last: it has no fix but to profile again with more recorded."""
    return sorted(found, key=lambda f: (-worth_pct(f), f.cause in _UNEXPLAINED, -f.lost_ns))


#: A per-day cost needs a window of at least this many steps: one step (or none) says nothing about
#: the days that follow it (it may be warm-up, a checkpoint or a one-off).
MIN_STEPS_PER_DAY = 3


def findings(
    evidence: list[DeviceEvidence],
    gpu_hour_usd: float | None,
    gpus: int,
    ranks: RankEvidence | None = None,
) -> list[Finding]:
    """Every finding of the job, ranked: idle causes, copies, exposed communication (less what
    the rank analysis attributes to late peers), the rank findings, then the compute-side
    savings; each priced and given its fix."""
    copies = copy_stats(evidence)
    raw = _idle_raw(evidence, copies) + _copy_raw(copies) + _communication_raw(evidence, ranks)
    raw += ranks.raw if ranks is not None else []
    raw += _compute_raw(evidence)
    return ranked(_priced(raw, evidence, copies, gpu_hour_usd, gpus, ranks))


def _idle_raw(evidence: list[DeviceEvidence], copies: dict[str, CopyStat]) -> list[RawFinding]:
    """One raw finding per idle cause; host-to-device copies and unified-memory migrations add
    the copies nothing hid to their idle cause's finding."""
    raw: list[RawFinding] = []
    for cause in CAUSES:
        lost = sum(e.idle.lost_ns(cause) for e in evidence)
        stats = [s for e in evidence for s in e.idle.causes if s.cause == cause]
        count = sum(s.gaps for s in stats)
        locations = _merge_locations([loc for s in stats for loc in s.locations])
        row = causes.describe(cause)
        note = [f"{count:,} idle gap{'' if count == 1 else 's'}, {duration(lost)} in all"]
        # Time that is no waste (one-time start-up, paid once per process) has no dollars.
        saving: int | None = lost if row.waste else None
        pattern = row.pattern
        h2d = copies["h2d"]
        if cause == "h2d_copy" and h2d.exposed_ns:
            pattern = _copy_pattern(h2d.exposed_ns, lost, pattern)
            note += h2d.notes("host-to-device")
            saving = lost + (h2d.saving_ns or 0)
            lost += h2d.exposed_ns
        um = copies["um"]
        if cause == "page_migration" and um.exposed_ns:
            pattern = _copy_pattern(um.exposed_ns, lost, pattern)
            # One finding for unified memory: the migrations nothing hid, and the driver's
            # fault service between them (idle), both gone once the data is prefetched.
            service = [f"{duration(lost)} of fault service between migrations"]
            note = um.notes("unified-memory page-migration") + (service if lost >= 5_000 else [])
            saving = lost + (um.saving_ns or 0)
            count = um.count  # the migrations, as for the other copy findings
            lost += um.exposed_ns
        if cause == "page_migration":
            note += fault_notes(evidence)
        raw.append((pattern, cause, lost, count, locations, note, saving))
    return raw


def _copy_pattern(copy_ns: int, idle_ns: int, idle_pattern: str) -> str:
    """The tag of a copy finding: ``copy_bound`` when most of its time is copies the device runs
    with nothing else (the GPU is busy moving data: a "held but idle" tag would contradict a
    99%-busy device), its idle cause's tag when most is idle gaps waiting for them."""
    return "copy_bound" if copy_ns > idle_ns else idle_pattern


def _copy_raw(copies: dict[str, CopyStat]) -> list[RawFinding]:
    """Device-to-host and peer-to-peer copies that held the device with nothing else running."""
    raw: list[RawFinding] = []
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
    return raw


def _communication_raw(
    evidence: list[DeviceEvidence], ranks: RankEvidence | None
) -> list[RawFinding]:
    """Communication with no compute alongside; waiting for a late peer is reported by the
    straggler / collective_wait findings instead."""
    exposed = sum(e.overlap.exposed_ns for e in evidence)
    comm = sum(e.overlap.communication_ns for e in evidence)
    exposed_note = [f"{duration(comm)} of communication, {duration(exposed)} of it exposed"]
    exposed_locations: list[LocationStat] = []
    if ranks is not None:
        exposed -= ranks.exposed_wait_ns
        exposed_note += ranks.exposed_notes
        exposed_locations = ranks.exposed_locations
    pattern = causes.describe("exposed_communication").pattern
    return [
        (pattern, "exposed_communication", exposed, 0, exposed_locations, exposed_note, exposed)
    ]


def _compute_raw(evidence: list[DeviceEvidence]) -> list[RawFinding]:
    """The compute-side savings (FP32 GEMMs, unfused memory-bound chains), capped together at
    the compute time so that no nanosecond is counted twice."""
    fp32_lost, fp32_note = _fp32_gemm_saving(evidence)
    mem_lost, mem_kernels, mem_note, mem_pattern = _memory_bound_saving(evidence)
    compute_total = sum(e.temporal.compute_ns for e in evidence)
    scale = min(1.0, compute_total / (fp32_lost + mem_lost)) if fp32_lost + mem_lost else 1.0
    fp32 = int(fp32_lost * scale)
    mem = int(mem_lost * scale)
    return [
        (causes.describe("fp32_gemm").pattern, "fp32_gemm", fp32, 0, [], fp32_note, fp32),
        (mem_pattern, "memory_bound", mem, mem_kernels, [], mem_note, mem),
    ]


def _priced(
    raw: list[RawFinding],
    evidence: list[DeviceEvidence],
    copies: dict[str, CopyStat],
    gpu_hour_usd: float | None,
    gpus: int,
    ranks: RankEvidence | None,
) -> list[Finding]:
    """The raw findings worth reporting, with their share, dollars, title and fix."""
    total_span = sum(e.temporal.span_ns for e in evidence)
    steps = max((e.steps for e in evidence), default=0)
    graph, some_graphs = _graph_launched(evidence)
    hardware = _hardware(evidence)
    framework = _framework(evidence)
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
            graph,
            hardware,
            framework,
            some_graphs,
        )
        cost_hour = (
            money.per_gpu_hour(saving / total_span, gpu_hour_usd)
            if saving is not None and total_span
            else None
        )
        per_day = money.per_day(cost_hour, gpus) if steps >= MIN_STEPS_PER_DAY else None
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
    return result


#: The copy group (diagnosis.copies) behind each copy finding: its fix reads the copies.
_COPY_GROUP_OF = {"h2d_copy": "h2d", "d2h_copy": "d2h", "p2p_copy": "p2p", "page_migration": "um"}


def graph_launched(trace: Trace, rows: NDArray[np.int64]) -> NDArray[np.bool_]:
    """Which device work ``rows`` a CUDA / HIP graph launch issued (``cudaGraphLaunch``,
    ``hipGraphLaunch``): that work is already captured, so a graph cannot remove its gaps."""
    ev = trace.events
    launches = ev.link[rows]
    found = np.zeros(rows.size, dtype=np.bool_)
    known = launches >= 0
    if not known.any():
        return found
    ids = ev.name_id[launches[known]]
    graph_ids = [i for i in distinct(ids).tolist() if "GraphLaunch" in trace.names[i]]
    if graph_ids:  # most traces launch no graph: nothing more to look up
        found[known] = member(ids, graph_ids)
    return found


def launch_gap_work(e: DeviceEvidence) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The device work that ended each launch-overhead idle gap (its row), and the gap's length."""
    gaps = e.idle.gaps
    launch = gaps.cause == CAUSES.index("launch_overhead")
    ends, lengths = gaps.end_ns[launch], gaps.end_ns[launch] - gaps.start_ns[launch]
    rows = e.work.rows
    if rows.size == 0:
        return rows[:0], lengths[:0]
    starts = e.work.trace.events.start_ns[rows]
    at = np.minimum(np.searchsorted(starts, ends), rows.size - 1)
    hit = starts[at] == ends
    return rows[at[hit]], lengths[hit]


def _graph_launched(evidence: list[DeviceEvidence]) -> tuple[bool, bool]:
    """Whether half the launch-overhead idle time or more sits before work a graph launch issued
    (the work is already a CUDA / HIP graph, so capturing it saves nothing more). Judged per gap:
    eager work between graph replays (text encoders, attention outside piecewise graphs) is not
    captured, and a graph would remove its gaps. Second: whether any of the job's work is
    graph-launched at all."""
    graph = total = 0
    for e in evidence:
        rows, lengths = launch_gap_work(e)
        total += int(lengths.sum())
        graph += int(lengths[graph_launched(e.work.trace, rows)].sum())
    if not total or graph * 2 >= total:
        return bool(total), False
    some = any(graph_launched(e.work.trace, e.work.rows).any() for e in evidence)
    return False, some


def _framework(evidence: list[DeviceEvidence]) -> bool:
    """Whether the program runs under a framework whose calls the advice may name: its trace
    records framework operators or Python frames (PyTorch's ``aten::`` ops); a CUDA C, MPI, HIP
    or TensorRT program's trace holds runtime calls (and NVTX ranges) only."""
    for e in evidence:
        ev = e.work.trace.events
        if ev.of_kind(Kind.CPU_OP, Kind.PYTHON).any():
            return True
    return False


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
    note = [f"{duration(fp32_ns)} of FP32 GEMMs on CUDA cores: {share:.0f}% of GEMM time"]
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
        f"memory-bound kernels run {duration(memory_ns)}: {share:.0f}% of busy time",
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
#: A job whose GPU waits this share of its window or more for its input pipeline is input-bound
#: first, whatever bounds its kernels: TensorFlow's profiler calls a step "highly input bound" at
#: 20% of its time waiting for input, as no kernel speed-up shortens a step spent waiting for data.
INPUT_BOUND_PCT = 20.0

#: The verdict's words from a timeline, each with what it means: the one documented set
#: (README "What the diagnosis says", docs/verdicts.md). Samples and counters have their own
#: (``busy`` / ``underused``; ``latency`` / ``memory`` / ``compute`` from Nsight Compute).
BOUND_WORDS: dict[str, str] = {
    "input": "the GPU waits for the input pipeline (the data loader) 20% of the window or more",
    "host": "the GPU is idle most of the window, waiting for the host",
    "communication": "communication with no compute alongside, or waiting for peers, takes most",
    "transfer": "copies with nothing else running take most of the window",
    "memory": "kernels bounded by memory bandwidth take most of the window",
    "compute": "kernels bounded by compute take most of the window",
    "latency": "kernels shorter than a launch take most of the window",
    "device": "the device's own kernels take most of the window, but the trace does not say what"
    " bounds them (no shapes, names that say neither compute nor memory work)",
}


def verdict(
    evidence: list[DeviceEvidence],
    found: list[Finding],
    gpu_hour_usd: float | None,
    price_source: str,
    gpus: int,
    saving_usd_per_gpu_hour: float | None = None,
    peer_wait_ns: int = 0,
) -> Verdict:
    """The bound is the largest share of device time, of a partition of the window: idle time
    split by what it waits for (the input pipeline, the rest of the host, or peers inside
    collectives), busy time split by what bounds its work
    (:func:`~gpuscope.analyses.bounds.exclusive_by_bound`). The shares add up to 100%. Waiting
    :data:`INPUT_BOUND_PCT` or more for the input pipeline makes a job input-bound first. A job
    busy :data:`BUSY_NOT_HOST_PCT` or more of the time is bound by the largest busy share: copies
    that fill it make it transfer-bound, not host-bound. ``found`` is in :func:`ranked` order: the
    headline names its first finding that saves something as the one to fix first.

    ``peer_wait_ns`` is the time ranks spent spinning inside collectives for a late peer with
    nothing else running (the rank analysis's exposed wait): a collective kernel that waits keeps
    the GPU "busy" while it does no work, so that time counts as waiting in the busy figure (and
    as communication in the bound, with the summary saying it is waiting)."""
    w = _window(evidence)
    shares = w.shares_pct
    idle_pct = 100.0 * w.idle_ns / w.span_ns
    waiting_pct = 100.0 * min(peer_wait_ns, w.busy_ns[Bound.COMMUNICATION]) / w.span_ns
    key = _bound(shares, 100.0 - idle_pct - waiting_pct)
    # What fixing every finding is predicted to save, priced (diagnosis.predict.priced): never
    # the findings' dollars added up, as their fixes overlap.
    wasted = saving_usd_per_gpu_hour if gpu_hour_usd is not None else None
    transfers = _transfer_split(evidence)
    first = next((f for f in found if worth_pct(f) > 0.0), None)
    return Verdict(
        bound=key,
        summary=_summary(
            key, shares, (idle_pct, waiting_pct), found, first, wasted, transfers, w.span_ns
        ),
        shares_pct=shares,
        idle_pct=idle_pct,
        wasted_usd_per_gpu_hour=wasted,
        gpu_hour_usd=gpu_hour_usd,
        price_source=price_source,
        world_size=gpus,
        figures=_figures(evidence, w, waiting_pct, transfers, first),
    )


class _Window(msgspec.Struct, frozen=True):
    """The devices' windows added up, and the partition of them the verdict's shares are."""

    span_ns: int  # 1 for an empty window, so that shares divide by it
    idle_ns: int
    peer_idle_ns: int  # idle time waiting for peers (PEER_CAUSES)
    host_idle_ns: int  # idle time of the host causes (HOST_CAUSES)
    busy_ns: dict[Bound, int]  # busy time by what bounds its work
    shares_pct: dict[str, float]  # BOUND_WORDS' keys; they add up to 100


def _window(evidence: list[DeviceEvidence]) -> _Window:
    span = sum(e.temporal.span_ns for e in evidence) or 1
    idle = sum(e.temporal.idle_ns for e in evidence)
    comm_wait = sum(e.idle.lost_ns(c) for e in evidence for c in PEER_CAUSES)
    loader = sum(e.idle.lost_ns(c) for e in evidence for c in INPUT_CAUSES)
    host_causes = sum(e.idle.lost_ns(c) for e in evidence for c in HOST_CAUSES)
    busy = dict.fromkeys(Bound, 0)
    for e in evidence:
        for b, ns in exclusive_by_bound(e.bounds, e.work).items():
            busy[b] += ns
    shares = {
        "input": 100.0 * loader / span,
        "host": 100.0 * (idle - comm_wait - loader) / span,
        "communication": 100.0 * (busy[Bound.COMMUNICATION] + comm_wait) / span,
        "transfer": 100.0 * busy[Bound.TRANSFER] / span,
        "memory": 100.0 * busy[Bound.MEMORY] / span,
        "compute": 100.0 * busy[Bound.COMPUTE] / span,
        "latency": 100.0 * busy[Bound.LATENCY] / span,
        "device": 100.0 * busy[Bound.UNCLASSIFIED] / span,
    }
    return _Window(span, idle, comm_wait, host_causes, busy, shares)


def _figures(
    evidence: list[DeviceEvidence],
    w: _Window,
    waiting_pct: float,
    transfers: dict[str, int],
    first: Finding | None,
) -> dict[str, float | None]:
    """The verdict's figures (docs/json.md): its shares under their documented names, and the
    idle, transfer and efficiency figures beside them."""
    span, shares = w.span_ns, w.shares_pct
    idle_pct = 100.0 * w.idle_ns / span
    return {
        "busy_pct": 100.0 - idle_pct - waiting_pct,
        "waiting_for_peers_pct": waiting_pct,
        "idle_host_pct": 100.0 * w.host_idle_ns / span,
        "idle_unexplained_pct": 100.0 * (w.idle_ns - w.peer_idle_ns - w.host_idle_ns) / span,
        "idle_input_pct": shares["input"],
        "latency_bound_kernels_pct": shares["latency"],
        "unclassified_kernels_pct": shares["device"],
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
        "fix_first_saving_pct": worth_pct(first) if first is not None else None,
    }


def _bound(shares: dict[str, float], busy_pct: float) -> str:
    """Input first when the GPU waits that long for data; else the largest share; when the device
    is busy most of the time, the largest busy share."""
    if shares["input"] >= INPUT_BOUND_PCT:
        return "input"
    idle_keys = ("input", "host")
    candidates = (
        [k for k in shares if k not in idle_keys]
        if busy_pct >= BUSY_NOT_HOST_PCT
        else [k for k in shares if k != "input"]
    )
    # Waiting for the input pipeline under the 20% bar is host time like any other.
    merged = {**shares, "host": shares["host"] + shares["input"]}
    return max(candidates, key=lambda k: merged[k])


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
    "device": "kernels of unknown bound (no shapes, names say neither compute nor memory) take",
}
_TRANSFER_WORDS = {
    "p2p": "peer-to-peer copies between GPUs",
    "h2d": "host-to-device copies",
    "d2h": "device-to-host copies",
    "um": "unified-memory page migrations",
}


def _summary(
    key: str,
    shares: dict[str, float],
    idle_waiting_pct: tuple[float, float],
    found: list[Finding],
    first: Finding | None,
    wasted: float | None,
    transfers: dict[str, int],
    span_ns: int,
) -> str:
    """One sentence whose every number is a figure of the verdict or of its first finding: the
    bound, then the one finding to fix first (the first of :func:`ranked` that saves something)."""
    idle_pct, waiting_pct = idle_waiting_pct
    if key == "input":
        loader = next((f for f in found if f.cause == "data_loader"), None)
        where = f" at {loader.locations[0].location}" if loader and loader.locations else ""
        text = (
            f"input-bound: the GPU waits for the data loader{where} {shares['input']:.0f}% of the"
            f" window; the GPU is idle {idle_pct:.0f}%"
        )
    elif key == "host":
        text = f"host-bound: the GPU is idle {idle_pct:.0f}% of the window"
    elif key == "transfer":
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
            f"{key}-bound: {_BOUND_WORDS[key]} {shares[key]:.0f}% of the window;"
            f" the GPU is idle {idle_pct:.0f}%"
        )
    if waiting_pct >= 1.0:
        text += (
            f"; {waiting_pct:.0f}% more is spent inside collectives waiting for a late peer with"
            " nothing else running (waiting, not work)"
        )
    if first is not None and key == "input" and first.cause == "data_loader":
        text += f"; fixing it is {worth_pct(first):.0f}% faster per step"
    elif first is not None:
        text += "; " + _fix_first(first)
    elif found:
        top = found[0]
        if top.cause == "unknown":
            text += (
                f"; {top.share_pct:.0f}% of device time is idle with nothing recorded on the host"
                " to say why"
            )
        else:
            text += f"; no finding's fix is predicted to shorten the step ({top.title})"
    if wasted is not None:
        text += f"; fixing it all would save about ${wasted:.2f} per GPU-hour"
    return text


def _fix_first(f: Finding) -> str:
    """The finding to fix first, with what fixing it saves (the replay's, else its own time)."""
    where = f" at {f.locations[0].location}" if f.locations else ""
    if f.prediction is not None:
        hides = f.prediction.hides
        also = f", as it also hides the {' and '.join(hides)} time" if hides else ""
        return f"fix first: {f.title}{where} ({worth_pct(f):.0f}% faster per step{also})"
    if f.cause == "unknown":
        return (
            f"{f.share_pct:.0f}% of device time is idle with nothing recorded on the host to"
            " say why"
        )
    return f"fix first: {f.title}{where} ({f.share_pct:.0f}% of device time)"


__all__ = [
    "BOUND_WORDS",
    "BUSY_NOT_HOST_PCT",
    "COPY_GROUPS",
    "INPUT_BOUND_PCT",
    "MIN_SHARE_PCT",
    "NO_SAVING_PCT",
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
    "ranked",
    "verdict",
    "world_size",
    "worth_pct",
]
