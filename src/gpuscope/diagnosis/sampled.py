"""Findings and verdicts from measurements that are not a timeline: sampled utilisation
(nvidia-smi, NVML, DCGM) and Nsight Compute kernel counters.

Contract: every function is pure. :func:`sampled_findings` applies the rules below per GPU and
sums them per cause over the job's GPUs; :func:`counter_findings` does the same per kernel over
the profiled kernels; :func:`sampled_verdict` and :func:`counter_verdict` build the verdict of a
job that has no timeline. Findings are :class:`~gpuscope.diagnosis.findings.Finding` with
``measured_from`` naming what measured them.

What samples can say: NVML's "GPU util" is the share of each sample period in which some kernel
ran, so it tells a busy GPU from an idle one, and nothing more: not why it waited (host, data,
peers), nor whether its kernels were bound by compute or memory. The verdict therefore says
``underused`` (the GPUs ran kernels under ``BUSY_PCT`` of the time) or ``busy``, prices the idle
time whether or not a finding names it, and says which evidence would tell more (a profiler
trace; DCGM's SM and DRAM activity). Findings name what the samples do show.

Rules on samples, per GPU (mean utilisation ``u``, memory peak ``m`` as % of the GPU's memory):

* A GPU that never reached the idle threshold in the whole log never worked (``unused_gpu``):
  the job held it and ran nothing on it. It costs its idle share ``1 - u`` of its time. The
  batch-size rule below then says nothing about the others: a job that leaves GPUs unused has a
  placement or launch problem before a batch-size one (``small_batch`` reads ``low_utilization``).
* The log ends in a long idle stretch with memory still allocated (``held_idle``, see
  :mod:`gpuscope.analyses.samples`): the work ended and the process kept the GPU. It costs the
  stretch's idle time; the rules below look only at the samples before it.
* Gao et al., "An Empirical Study on Low GPU Utilization of Deep Learning Jobs", ICSE 2024:
  ``u <= 50%`` and ``m <= 50%`` -> the batch is too small (``small_batch``); ``u <= 50%`` and
  ``m > 80%`` -> memory stops a larger batch (``insufficient_memory``); ``u <= 50%`` otherwise (or
  memory not recorded) -> ``low_utilization``. Each costs the idle share ``1 - u`` of the time
  before any held-idle tail. Titles state the figures (``ran kernels 4% of the time``), never a
  fixed fraction.
* DCGM guidance (NVIDIA DCGM user guide, profiling metrics): SM active below 0.5 likely means the
  GPU is used ineffectively, and NVML "GPU util" only says some kernel ran. ``u > 50%`` with mean SM
  active ``s < 50%`` -> the coarse util is misleading (``misleading_gpu_util``); it costs
  ``u - s``, the share reported busy while the SMs were idle.

The costs are disjoint (the idle tail, ``1 - u`` before it, and ``u - s``), so a GPU's findings
never exceed its covered time. Shares are of the sampled GPU time (covered time, gaps excluded,
summed over GPUs).

On counters, per kernel: the largest "global" estimated speedup among Nsight Compute's own rules
(the share of the kernel's duration its fix could save) is the time lost, filed under the
kernel's measured limiter (``latency_bound``, ``memory_bound``, ``compute_bound``); shares are of
the profiled kernel time. Cost: share x price per GPU-hour, x 24 x GPUs per day, as for timeline
findings.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import msgspec

from gpuscope import causes
from gpuscope.analyses.attribution import LocationStat
from gpuscope.analyses.counters import CounterSummary, KernelLimit, Limiter
from gpuscope.analyses.samples import Distribution, GpuUtilisation
from gpuscope.diagnosis import money
from gpuscope.diagnosis.findings import MIN_SHARE_PCT, Finding, Verdict
from gpuscope.diagnosis.fixes import advice
from gpuscope.facts import gpu_hour_price, match_device
from gpuscope.units import gib, gib_or_mib, long_duration, seconds

#: ICSE 2024 thresholds (Gao et al.) and DCGM's SM-active guidance, all in percent.
LOW_UTILIZATION_PCT = 50.0
SMALL_BATCH_MEMORY_PCT = 50.0
INSUFFICIENT_MEMORY_PCT = 80.0
SM_ACTIVE_LOW_PCT = 50.0
#: GPUs that ran kernels at least this share of the sampled time are "busy": what is left idle is
#: small, and what bounds the kernels is for a trace or counters to say.
BUSY_PCT = 80.0

#: data/causes.csv; an ncu finding names the kernels, not their share of the busy time. Sample
#: findings' titles are made from their figures (``_sample_title``).
_TITLES = {**causes.titles("measured"), "memory_bound": "memory-bound kernels"}
_FIXES = {cause: advice(cause) for cause in _TITLES}
#: How the verdict's headline names a sampled finding.
_HEADLINE = {
    "unused_gpu": "GPUs that never ran work",
    "held_idle": "GPUs held idle after the work ended",
    "small_batch": "low utilisation with memory to spare: a larger batch may keep the GPUs busy",
    "insufficient_memory": "low utilisation, memory nearly full: memory may stop a larger batch",
    "low_utilization": "low utilisation",
    "misleading_gpu_util": "'GPU util' overstates how busy the SMs were",
}
_LIMITER_CAUSE = {
    Limiter.LATENCY: "latency_bound",
    Limiter.MEMORY: "memory_bound",
    Limiter.COMPUTE: "compute_bound",
    Limiter.BALANCED: "compute_bound",
}


class Price(msgspec.Struct, frozen=True):
    gpu_hour_usd: float | None
    source: str


def price_of(names: list[str | None], override: float | None) -> Price:
    """``--gpu-hour-usd``, else the facts table's price of the first known device name."""
    return Price(*gpu_hour_price((match_device(name) for name in names), override))


# --- samples ------------------------------------------------------------------------------------


def sample_cause(g: GpuUtilisation) -> str | None:
    """The ICSE 2024 rule that applies to one GPU's work (before any held-idle tail), or None
    when its utilisation is not low."""
    u = g.work
    if u is None or u.mean > LOW_UTILIZATION_PCT:
        return None
    m = g.memory_peak_pct
    if m is not None and m <= SMALL_BATCH_MEMORY_PCT:
        return "small_batch"
    if m is not None and m > INSUFFICIENT_MEMORY_PCT:
        return "insufficient_memory"
    return "low_utilization"


def misleading_util(g: GpuUtilisation) -> bool:
    """DCGM: coarse util high (> 50%) while SMs are active under half the time."""
    u, s = g.utilization, g.sm_active
    return (
        u is not None
        and s is not None
        and u.mean > LOW_UTILIZATION_PCT
        and s.mean < SM_ACTIVE_LOW_PCT
    )


def sampled_findings(gpus: list[GpuUtilisation], price: Price) -> list[Finding]:
    total_ns = sum(g.covered_ns for g in gpus)
    any_unused = any(g.worked is False for g in gpus)
    lost: dict[str, list[tuple[GpuUtilisation, float]]] = {}
    for g in gpus:
        activity = g.activity
        if g.worked is False and activity is not None:
            lost.setdefault("unused_gpu", []).append(
                (g, (1.0 - activity.mean / 100.0) * g.covered_ns)
            )
            continue
        held = g.held_idle
        if held is not None:
            share = 1.0 - held.activity_mean / 100.0
            lost.setdefault("held_idle", []).append((g, share * held.dur_ns))
        cause = sample_cause(g)
        if cause == "small_batch" and any_unused:
            cause = "low_utilization"
        if cause is not None and g.work is not None:
            share = 1.0 - g.work.mean / 100.0
            lost.setdefault(cause, []).append((g, share * g.work_covered_ns))
        if misleading_util(g) and g.utilization is not None and g.sm_active is not None:
            share = (g.utilization.mean - g.sm_active.mean) / 100.0
            lost.setdefault("misleading_gpu_util", []).append((g, share * g.covered_ns))
    found = [
        _sample_finding(cause, members, total_ns, price, gpus) for cause, members in lost.items()
    ]
    return _kept(found)


def _sample_finding(
    cause: str,
    members: list[tuple[GpuUtilisation, float]],
    total_ns: int,
    price: Price,
    gpus: list[GpuUtilisation],
) -> Finding:
    lost_ns = int(sum(ns for _, ns in members))
    ranked = sorted(members, key=lambda m: -m[1])
    evidence = [_gpu_evidence(g) for g, _ in ranked[:4]]
    evidence += [f"... and {len(members) - 4} more GPUs"] if len(members) > 4 else []
    fix = None
    if cause == "unused_gpu" and not any(g.worked for g in gpus):
        fix = (
            "Nothing ran on the GPU during the log: check that the job reached its GPU work"
            " (`torch.cuda.is_available()`, the model and batches moved with `.to('cuda')`),"
            " that it was sampled while it ran, or release the GPU."
        )
    if cause == "held_idle" and price.gpu_hour_usd is not None:
        hours = lost_ns / money.NS_PER_HOUR
        evidence.append(
            f"{hours:,.2f} GPU-hours held idle:"
            f" about ${money.of_time(lost_ns, price.gpu_hour_usd) or 0.0:,.2f}"
            f" at ${price.gpu_hour_usd:.2f}/GPU-hour"
        )
    found = _finding(
        pattern=causes.describe(cause).pattern,
        cause=cause,
        title=_sample_title(cause, [g for g, _ in members], len(gpus)),
        lost_ns=lost_ns,
        total_ns=total_ns,
        events=len(members),
        locations=[],  # a GPU is not a place in the user's code
        evidence=evidence,
        price=price,
        gpus=len(gpus),
        measured_from=members[0][0].measured_from,
    )
    if cause == "held_idle":  # a tail at the end of one job is not a daily rate
        found = msgspec.structs.replace(found, cost_usd_per_day=None)
    if fix is not None:  # no GPU of the log worked: placing ranks is not the question
        found = msgspec.structs.replace(found, fix=fix)
    return found


def _sample_title(cause: str, members: list[GpuUtilisation], of: int) -> str:
    """The finding's title, with the figures of the GPUs it names (never a fixed fraction)."""
    who = f"GPU {members[0].gpu}" if len(members) == 1 else f"{len(members)} GPUs"
    if cause == "unused_gpu":
        what = f"{who} of {of} never ran work" if of > 1 else "the GPU never ran work"
        allocated = max((g.memory_peak_bytes or 0 for g in members), default=0)
        held = f", yet {gib_or_mib(allocated)} of memory was allocated" if allocated else ""
        return f"{what}: no sample reached {members[0].idle_below_pct:.0f}% utilisation{held}"
    if cause == "held_idle":
        held_ns = sum(g.held_idle.dur_ns for g in members if g.held_idle is not None)
        memory = min(g.held_idle.memory_bytes for g in members if g.held_idle is not None)
        below = members[0].idle_below_pct
        return (
            f"{who} held idle after the work ended: {long_duration(held_ns)} at under {below:.0f}%"
            f" utilisation with at least {gib_or_mib(memory)} still allocated"
        )
    if cause == "misleading_gpu_util":
        u = _member_mean(members, lambda g: g.utilization)
        sm = _member_mean(members, lambda g: g.sm_active)
        return (
            f"'GPU util' says {u:.0f}% but SMs were active {sm:.0f}% of the time ({who}):"
            " the kernels fill a small part of the GPU"
        )
    ran = f"{who} ran kernels {_member_mean(members, lambda g: g.work):.0f}% of the time"
    peak = max((g.memory_peak_pct or 0.0 for g in members), default=0.0)
    if cause == "small_batch":
        them = "it" if len(members) == 1 else "them"
        return f"{ran} with at most {peak:.0f}% of memory used: a larger batch may keep {them} busy"
    if cause == "insufficient_memory":
        # memory.used counts what the process reserved, the caching allocator's free blocks too.
        return f"{ran} with memory {peak:.0f}% full: memory may stop a larger batch"
    return f"{ran}: it idled the rest"


def _member_mean(
    members: list[GpuUtilisation], value: Callable[[GpuUtilisation], Distribution | None]
) -> float:
    """A distribution's mean over the GPUs of a finding, weighted by their covered time."""
    pairs = [(value(g), g.covered_ns or 1) for g in members]
    known = [(d.mean, w) for d, w in pairs if d is not None]
    total = sum(w for _, w in known)
    return sum(v * w for v, w in known) / total if total else math.nan


def _gpu_evidence(g: GpuUtilisation) -> str:
    parts = []
    if g.utilization is not None:
        u = g.utilization
        parts.append(f"util mean {u.mean:.0f}% (p50 {u.p50:.0f}%, p90 {u.p90:.0f}%)")
    if g.sm_active is not None:
        parts.append(f"SM active mean {g.sm_active.mean:.0f}%")
    if g.memory_peak_bytes is not None:
        share = (
            f" ({g.memory_peak_pct:.0f}% of {gib(g.memory_total_bytes, digits=1)})"
            if (g.memory_peak_pct is not None and g.memory_total_bytes)
            else ""
        )
        parts.append(f"memory peak {gib(g.memory_peak_bytes)}{share}")
    else:
        parts.append("memory not recorded")
    if g.idle:
        stretches = "1 idle stretch" if len(g.idle) == 1 else f"{len(g.idle)} idle stretches"
        parts.append(f"{stretches}, {seconds(g.idle_ns)}")
    if g.held_idle is not None:
        h = g.held_idle
        parts.append(
            f"the last {long_duration(h.dur_ns)} at {h.activity_mean:.0f}% with"
            f" {gib_or_mib(h.memory_bytes)} or more allocated"
        )
    return f"GPU {g.gpu}: " + ", ".join(parts)


def sampled_verdict(gpus: list[GpuUtilisation], found: list[Finding], price: Price) -> Verdict:
    """The verdict of a job known only from samples: how much of the time the GPUs ran kernels
    (``busy`` or ``underused``; ``unknown`` when no activity was recorded), the idle time priced,
    and what would say more. Shares are ``busy`` and ``idle`` of the sampled time: samples do not
    split the time by what bounds it."""
    covered = sum(g.covered_ns for g in gpus) or 1
    busy = _weighted(gpus, lambda g: g.activity.mean if g.activity else None)
    sm = _weighted(gpus, lambda g: g.sm_active.mean if g.sm_active else None)
    dram = _weighted(gpus, lambda g: g.dram_active.mean if g.dram_active else None)
    idle = math.nan if busy is None else 100.0 - busy
    if busy is None:
        bound, shares = "unknown", {}
    else:
        bound = "busy" if busy >= BUSY_PCT else "underused"
        shares = {"busy": busy, "idle": idle}
    # Idle GPU time is paid for whether or not a finding names its cause; SMs idle under a
    # "busy" util (misleading_gpu_util) are paid for too.
    idle_sms = sum(f.share_pct for f in found if f.cause == "misleading_gpu_util")
    wasted = (
        None
        if price.gpu_hour_usd is None or busy is None
        else (idle + idle_sms) / 100.0 * price.gpu_hour_usd
    )
    unused = [g for g in gpus if g.worked is False]
    held_ns = sum(g.held_idle.dur_ns for g in gpus if g.held_idle is not None)
    n = len(gpus)
    # Wall time and GPU time named apart: 8 GPUs sampled for 55 s are 7 GPU-minutes.
    wall_ns = max(g.end_ns for g in gpus) - min(g.start_ns for g in gpus) if gpus else 0
    sampled = (
        f", {long_duration(covered)} sampled"
        if n == 1
        else f" over {long_duration(wall_ns)}, {long_duration(covered, 'GPU-')} sampled"
    )
    gpus_word = f"{n} GPU{'s' if n != 1 else ''}"
    text = f"{bound}, from sampled utilisation ({gpus_word}{sampled}, no timeline): "
    if busy is None:
        text += "no utilisation or SM activity was recorded, only memory"
    else:
        text += (
            f"the GPU{'s' if n != 1 else ''} ran kernels {busy:.0f}% of the time and idled"
            f" {idle:.0f}%"
        )
    if unused:
        text += f"; {len(unused)} of {n} GPUs never ran work"
    if held_ns:
        text += f"; held idle after the work ended for {held_ns / money.NS_PER_HOUR:,.2f} GPU-hours"
    if found:
        # Named without figures of its own: every percentage of the headline is a verdict figure.
        top = found[0]
        text += (
            f"; the top finding: {_HEADLINE.get(top.cause, top.cause)}"
            f" ({top.share_pct:.0f}% of the sampled GPU time)"
        )
    if wasted is not None:
        text += f"; about ${wasted:.2f} per GPU-hour wasted"
    text += "; " + _what_would_tell_more(sm is not None)
    return Verdict(
        bound=bound,
        summary=text,
        shares_pct=shares,
        idle_pct=idle,
        wasted_usd_per_gpu_hour=wasted,
        gpu_hour_usd=price.gpu_hour_usd,
        price_source=price.source,
        world_size=max(n, 1),
        figures={
            "utilization_mean_pct": busy,
            "sm_active_mean_pct": sm,
            "dram_active_mean_pct": dram,
            "memory_peak_pct": max(
                (g.memory_peak_pct for g in gpus if g.memory_peak_pct is not None), default=None
            ),
            "idle_stretches_pct": 100.0 * sum(g.idle_ns for g in gpus) / covered,
            "held_idle_pct": 100.0 * held_ns / covered,
            "unused_gpus": float(len(unused)),
            "sampling_gaps_pct": 100.0
            * sum(g.gap_ns for g in gpus)
            / (sum(g.span_ns for g in gpus) or 1),
        },
    )


def _what_would_tell_more(has_sm_activity: bool) -> str:
    """Utilisation says whether a kernel ran, not why the GPU waited nor what bounds it."""
    more = (
        "utilisation says when kernels ran, not why the GPU waited nor what bounds them:"
        " a profiler trace (`gpuscope profile`, or torch.profiler) says why"
    )
    if not has_sm_activity:
        more += ", and DCGM's SM and DRAM activity (`dcgmi dmon -e 1002,1005`) how full it was"
    return more


def _weighted(
    gpus: list[GpuUtilisation], value: Callable[[GpuUtilisation], float | None]
) -> float | None:
    """The mean of a per-GPU figure, weighted by each GPU's covered time."""
    pairs = [(value(g), g.covered_ns or 1) for g in gpus]
    known = [(v, w) for v, w in pairs if v is not None]
    total = sum(w for _, w in known)
    return sum(v * w for v, w in known) / total if known and total else None


# --- counters -----------------------------------------------------------------------------------


def counter_findings(summaries: list[CounterSummary], price: Price) -> list[Finding]:
    total_ns = sum(s.measured_ns for s in summaries)
    lost: dict[str, list[tuple[KernelLimit, float]]] = {}
    for summary in summaries:
        for limit in summary.limits:
            cause = _LIMITER_CAUSE.get(limit.limiter) if limit.limiter else None
            dur = limit.kernel.duration_ns
            if cause is None or dur is None or limit.speedup_pct is None:
                continue
            lost.setdefault(cause, []).append((limit, dur * limit.speedup_pct / 100.0))
    gpus = max(len({d for s in summaries for d in s.devices}), 1)
    found = [
        _counter_finding(cause, members, total_ns, price, gpus) for cause, members in lost.items()
    ]
    return _kept(found)


def _counter_finding(
    cause: str,
    members: list[tuple[KernelLimit, float]],
    total_ns: int,
    price: Price,
    gpus: int,
) -> Finding:
    first = max(members, key=lambda m: m[1])[0]
    # The rules that estimate the largest saving first: they name the fix worth most.
    by_saving = sorted(
        (r for r in first.kernel.rules if r.text),
        key=lambda r: -(r.speedup_pct or 0.0) if r.speedup_type == "global" else 0.0,
    )
    evidence = [
        f"{len(members)} profiled launch(es); {first.kernel.name[:80]}: {first.reason},"
        f" ncu's rules estimate up to {first.speedup_pct:.0f}% shorter",
        *(f"{r.name}: {r.text}" for r in by_saving[:2]),
    ]
    return _finding(
        pattern="bloated_context" if cause == "memory_bound" else "ghost_gpu",
        cause=cause,
        lost_ns=int(sum(ns for _, ns in members)),
        total_ns=total_ns,
        events=len(members),
        locations=[],
        evidence=evidence,
        price=price,
        gpus=gpus,
        measured_from="ncu",
    )


def counter_verdict(summaries: list[CounterSummary], found: list[Finding], price: Price) -> Verdict:
    """The verdict of a job known only from Nsight Compute: the measured limiters' time shares."""
    total = sum(s.measured_ns for s in summaries) or 1
    time = dict.fromkeys(Limiter, 0)
    for summary in summaries:
        for limiter, ns in summary.time_ns_by_limiter.items():
            time[limiter] += ns
    balanced = 100.0 * time[Limiter.BALANCED] / total
    # Latency-bound kernels are device time, not host time; with no timeline there is no idle
    # or communication share to report (left out, never NaN).
    shares = {
        "latency": 100.0 * time[Limiter.LATENCY] / total,
        "memory": 100.0 * time[Limiter.MEMORY] / total,
        "compute": 100.0 * time[Limiter.COMPUTE] / total + balanced,
    }
    bound = max(shares, key=lambda k: shares[k])
    kernels = sum(s.kernels for s in summaries)
    text = (
        f"{bound}-bound, from Nsight Compute counters ({kernels} kernel launch(es), no timeline):"
        f" latency-bound kernels take {shares['latency']:.0f}% of the profiled kernel time,"
        f" memory-bound {shares['memory']:.0f}%, compute-bound {shares['compute'] - balanced:.0f}%"
        f", balanced {balanced:.0f}%"
    )
    wasted = _wasted(found, price)
    if found:
        # The finding's share is what ncu's rules estimate fixing it saves, not the kernels' time.
        top = found[0]
        text += (
            f"; the top finding: {top.title}; fixing it could save up to"
            f" {top.share_pct:.0f}% of the profiled kernel time"
        )
    if wasted is not None:
        text += f"; about ${wasted:.2f} per GPU-hour wasted"
    return Verdict(
        bound=bound,
        summary=text,
        shares_pct=shares,
        idle_pct=math.nan,
        wasted_usd_per_gpu_hour=wasted,
        gpu_hour_usd=price.gpu_hour_usd,
        price_source=price.source,
        world_size=max(len({d for s in summaries for d in s.devices}), 1),
        figures={
            "latency_bound_kernels_pct": shares["latency"],
            "memory_bound_pct": shares["memory"],
            "compute_bound_pct": 100.0 * time[Limiter.COMPUTE] / total,
            "balanced_pct": balanced,
            "profiled_kernel_ns": float(sum(s.measured_ns for s in summaries)),
        },
    )


# --- shared -------------------------------------------------------------------------------------


def _finding(
    *,
    pattern: str,
    cause: str,
    title: str | None = None,
    lost_ns: int,
    total_ns: int,
    events: int,
    locations: list[LocationStat],
    evidence: list[str],
    price: Price,
    gpus: int,
    measured_from: str,
) -> Finding:
    share = 100.0 * lost_ns / total_ns if total_ns else 0.0
    hour = money.per_gpu_hour(share / 100.0, price.gpu_hour_usd)
    return Finding(
        pattern=pattern,
        cause=cause,
        title=_TITLES[cause] if title is None else title,
        lost_ns=lost_ns,
        lost_ns_per_step=None,
        share_pct=share,
        events=events,
        cost_usd_per_gpu_hour=hour,
        cost_usd_per_day=money.per_day(hour, gpus),
        locations=locations,
        evidence=evidence,
        fix=_FIXES[cause],
        measured_from=measured_from,
    )


def _kept(found: list[Finding]) -> list[Finding]:
    kept = [f for f in found if f.share_pct >= MIN_SHARE_PCT and f.lost_ns > 0]
    return sorted(kept, key=lambda f: -f.lost_ns)


def _wasted(found: list[Finding], price: Price) -> float | None:
    if price.gpu_hour_usd is None:
        return None
    return sum(f.share_pct for f in found) / 100.0 * price.gpu_hour_usd
