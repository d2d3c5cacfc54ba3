"""Many GPUs: what the rank analysis adds to the findings (see :class:`RankEvidence`)."""

from __future__ import annotations

import msgspec

from gpuscope.analyses.attribution import LocationStat
from gpuscope.analyses.ranks import RankAnalysis, StragglerStat
from gpuscope.causes import describe
from gpuscope.diagnosis import money
from gpuscope.diagnosis.evidence import RawFinding
from gpuscope.diagnosis.fixes import advice, short_name, straggler_advice
from gpuscope.names import plural
from gpuscope.units import ms


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
        if len(analysis.stragglers) > 1:
            # Ranks that take turns: none is last at a majority, each costs the others time.
            turns = ", ".join(
                f"rank {s.rank} ({s.last_arrivals} of {s.shared})" for s in analysis.stragglers
            )
            notes.insert(0, f"{len(analysis.stragglers)} ranks take turns arriving last: {turns}")
        count = sum(s.last_arrivals for s in analysis.stragglers)
        lost = analysis.straggler_exposed_wait_ns
        raw.append((describe("straggler").pattern, "straggler", lost, count, [], notes, lost))
        # Ranks that take turns arriving last each get their own fix: their causes differ.
        fixes["straggler"] = " ".join(straggler_advice(s) for s in analysis.stragglers[:3])
    if analysis.collective_wait_ns is not None:
        other = analysis.exposed_wait_ns - analysis.straggler_exposed_wait_ns
        raw.append(
            (
                describe("collective_wait").pattern,
                "collective_wait",
                other,
                analysis.matched_collectives,
                [],
                [_collective_wait_note(analysis, other)],
                other,
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
        f" ({s.share_pct:.0f}%), {ms(s.mean_late_ns)} after the next-slowest rank on"
        f" average (max {ms(s.max_late_ns)}); the other ranks waited"
        f" {ms(s.caused_wait_ns)} inside those collectives,"
        f" {ms(s.caused_exposed_wait_ns)} of it with no compute alongside"
    )
    doing = [f"{short_name(n)} {ms(ns)}" for n, ns in s.top_kernels[:2]]
    doing += [f"idle ({cause}) {ms(ns)}" for cause, ns in s.idle_causes[:2]]
    if doing:
        text += f"; meanwhile rank {s.rank} ran " + ", ".join(doing)
    if s.idle_before:
        before = ", ".join(f"{what} {ms(ns)}" for what, ns in s.idle_before[:2])
        text += f"; before it arrived (from its previous collective) its GPU sat idle: {before}"
    return text


def _collective_wait_note(analysis: RankAnalysis, exposed_other_ns: int) -> str:
    text = (
        f"{ms(analysis.collective_wait_ns or 0)} waiting for the last rank inside"
        f" {analysis.matched_collectives:,} matched collectives across {len(analysis.ranks)} ranks"
        f" ({ms(exposed_other_ns)} of it exposed and not caused by a named straggler)"
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
            f"per GPU and step: {ms(mean_exposed)} exposed of {ms(mean_comm)}"
            f" of communication over {len(e.steps)} step{'s' if len(e.steps) > 1 else ''}"
            f" (most: {worst.name},"
            f" {ms(worst.exposed_ns)})"
        )
        if gpu_hour_usd is not None:
            per_1000 = (money.of_time(mean_exposed, gpu_hour_usd) or 0.0) * gpus * 1000
            text += f"; ${per_1000:,.2f} per 1,000 steps on {plural(gpus, 'GPU')}"
        notes.append(text)
    if analysis.exposed_wait_ns:
        notes.append(
            f"{ms(analysis.exposed_wait_ns)} of the exposed time is waiting for a late"
            " peer: counted under straggler / collective_wait, not here"
        )
    if e.collectives and e.fully_exposed:
        notes.append(
            f"{e.fully_exposed:,} of {e.collectives:,} collectives ran with no compute alongside"
            f" ({ms(e.fully_exposed_ns)} over {plural(per_gpu, 'GPU')}, not counting"
            " waits for a late peer)"
        )
        if e.fully_exposed_ns >= 0.5 * (e.exposed_ns - analysis.exposed_wait_ns):
            where = f" (issued at {e.locations[0][0]})" if e.locations else ""
            steps = max(len(e.steps), 1)
            hints.append(
                f"Most exposed time is collectives with nothing to overlap{where}: launch them"
                " during backward, not after it (DDP's gradient buckets do; a manual `all_reduce`"
                " after `loss.backward()` cannot overlap): up to"
                f" {ms(e.fully_exposed_ns / per_gpu / steps)} per step per GPU."
            )
    if e.small:
        what = "move under 1 MiB each" if e.small_by_size else "last under 50 µs each"
        notes.append(
            f"{e.small:,} collectives {what} ({ms(e.small_exposed_ns)} exposed):"
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
