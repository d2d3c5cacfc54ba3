"""Bandwidth per kind of collective, and per-step exposure of communication.

Contract: see the package docstring (**Bandwidth**, **Exposure**).
"""

from __future__ import annotations

import numpy as np

from gpuscope.analyses.ranks.collectives import (
    FULLY_EXPOSED_SHARE,
    I64,
    SMALL_COLLECTIVE_NS,
    SMALL_MESSAGE_BYTES,
    CollectiveTable,
    bus_factor,
)
from gpuscope.analyses.ranks.matching import MatchedGroup
from gpuscope.analyses.ranks.results import (
    BandwidthStat,
    ExposureSummary,
    RankStat,
    StepCommunication,
)
from gpuscope.analyses.ranks.summary import LOCATED_COLLECTIVES, RankSummary

# --- bandwidth ----------------------------------------------------------------------------------


def collective_bandwidth(
    summaries: list[RankSummary], tables: list[CollectiveTable], groups: list[MatchedGroup]
) -> tuple[list[BandwidthStat], str | None]:
    """Per kind: recorded message bytes over the transfer time (the last arrival's duration)."""
    totals, unsized = _bandwidth_totals(summaries, tables, groups)
    peak = next((s.link_bytes_per_s / 2 for s in summaries if s.link_bytes_per_s), None)
    stats: list[BandwidthStat] = []
    for (kind, ranks, alone), (count, nbytes, ns) in sorted(totals.items()):
        if ns <= 0:
            continue
        algbw = nbytes / (ns / 1e9)
        factor = bus_factor(kind, ranks)
        busbw = None if factor is None else algbw * factor
        stats.append(BandwidthStat(kind, ranks, count, nbytes, ns, algbw, busbw, peak, alone))
    note = None
    if unsized and not stats:
        note = (
            f"message sizes not recorded for {unsized} collectives (no 'In msg nelems' / 'dtype'"
            " args on the NCCL kernels or their record_param_comms ops)"
        )
    elif stats and all(s.includes_wait for s in stats):
        note = "durations from one rank include waiting for its peers: bandwidths are lower bounds"
    return stats, note


def _bandwidth_totals(
    summaries: list[RankSummary], tables: list[CollectiveTable], groups: list[MatchedGroup]
) -> tuple[dict[tuple[str, int, bool], list[int]], int]:
    """(kind, ranks, one rank only) -> [collectives, bytes, transfer ns]; and how many collectives
    had no recorded size."""
    totals: dict[tuple[str, int, bool], list[int]] = {}
    unsized = 0
    for g in groups:
        alone = len(g.members) < 2
        durations = g.end_ns - g.start_ns
        transfer = durations[0] if alone else durations.min(axis=0)
        first = tables[g.members[0]]
        if g.count == 0:
            continue
        # The largest size any rank recorded, per collective of the group.
        sizes = np.stack(
            [tables[m].message_bytes[g.positions[k]] for k, m in enumerate(g.members)]
        ).max(axis=0)
        sized = np.flatnonzero(sizes > 0)
        unsized += g.count - int(sized.size)
        declared = summaries[g.members[0]].world_size or 1
        at = g.positions[0, sized]
        recorded_sizes = first.group_size[at].tolist()
        columns = (at.tolist(), sizes[sized].tolist(), transfer[sized].tolist(), recorded_sizes)
        for position, nbytes, ns, recorded in zip(*columns, strict=True):
            ranks = recorded if recorded > 0 else max(len(g.members), declared)
            entry = totals.setdefault((first.kind[position], ranks, alone), [0, 0, 0])
            entry[0] += 1
            entry[1] += nbytes
            entry[2] += ns
    return totals, unsized


# --- exposure -----------------------------------------------------------------------------------


def step_exposure(
    summaries: list[RankSummary],
    tables: list[CollectiveTable],
    ranks: list[RankStat],
    exposed_waits: list[I64],
) -> ExposureSummary:
    """Exposure per collective, less the time it spent waiting for a late rank (reported apart):
    what overlapping or merging collectives can still gain."""
    comm = sum(s.overlap_communication_ns for s in summaries)
    exposed_total = sum(s.exposed_communication_ns for s in summaries)
    fully, fully_ns, small, small_ns, count = 0, 0, 0, 0, 0
    sized = [int(b) for t in tables for b in t.message_bytes.tolist() if b > 0]
    by_size = len(sized) >= sum(len(t) for t in tables) / 2 and bool(sized)
    locations: dict[str, list[int]] = {}
    for s, t, waited in zip(summaries, tables, exposed_waits, strict=True):
        if len(t) == 0:
            continue
        count += len(t)
        with_wait = s.column("uncovered_ns")
        full = with_wait >= FULLY_EXPOSED_SHARE * np.maximum(t.dur_ns, 1)
        exposed = np.maximum(with_wait - waited, 0)
        fully += int(full.sum())
        fully_ns += int(exposed[full].sum())
        is_small = (
            (t.message_bytes >= 0) & (t.message_bytes < SMALL_MESSAGE_BYTES)
            if by_size
            else t.dur_ns < SMALL_COLLECTIVE_NS
        )
        small += int(is_small.sum())
        small_ns += int(exposed[is_small].sum())
        if s.located:
            _locate(s, exposed, locations)
    top = sorted(locations.items(), key=lambda kv: -kv[1][0])[:5]
    return ExposureSummary(
        steps=_mean_steps(ranks),
        communication_ns=comm,
        exposed_ns=exposed_total,
        collectives=count,
        fully_exposed=fully,
        fully_exposed_ns=fully_ns,
        small=small,
        small_exposed_ns=small_ns,
        small_by_size=by_size,
        mean_message_bytes=float(np.mean(sized)) if sized else None,
        locations=[(where, v[0], v[1]) for where, v in top if v[0] > 0],
    )


def _locate(s: RankSummary, exposed: I64, into: dict[str, list[int]]) -> None:
    """Where the costliest exposed collectives were issued, in the user's code when known."""
    order = np.argsort(-exposed, kind="stable")[:LOCATED_COLLECTIVES]
    order = order[exposed[order] > 0]
    location = s.column("location")[order]
    for at, ns in zip(location.tolist(), exposed[order].tolist(), strict=True):
        entry = into.setdefault(s.locations[at], [0, 0])
        entry[0] += ns
        entry[1] += 1


def _mean_steps(ranks: list[RankStat]) -> list[StepCommunication]:
    """Per step number, the mean over ranks that recorded it."""
    by_number: dict[int, list[StepCommunication]] = {}
    for r in ranks:
        for s in r.steps:
            by_number.setdefault(s.number, []).append(s)
    result: list[StepCommunication] = []
    for number in sorted(by_number):
        group = by_number[number]
        n = len(group)
        result.append(
            StepCommunication(
                name=group[0].name,
                number=number,
                dur_ns=sum(s.dur_ns for s in group) // n,
                communication_ns=sum(s.communication_ns for s in group) // n,
                exposed_ns=sum(s.exposed_ns for s in group) // n,
                collectives=round(sum(s.collectives for s in group) / n),
            )
        )
    return result
