"""The records :func:`~gpuscope.analyses.ranks.analyse_ranks` returns."""

from __future__ import annotations

import msgspec

# --- results ------------------------------------------------------------------------------------


class StepCommunication(msgspec.Struct, frozen=True):
    """Communication inside one profiler step of one device."""

    name: str
    number: int
    dur_ns: int
    communication_ns: int
    exposed_ns: int
    collectives: int


class RankStat(msgspec.Struct, frozen=True):
    rank: int
    device: int
    source: str
    clock_offset_ns: int | None  # this rank's clock minus the reference rank's; None: not aligned
    span_ns: int
    busy_ns: int
    idle_ns: int
    compute_ns: int
    communication_ns: int
    exposed_communication_ns: int
    collectives: int
    collective_wait_ns: int | None  # waiting inside collectives for the last peer; None: 1 rank
    exposed_wait_ns: int | None  # the part of that wait with no compute alongside
    last_arrivals: int
    steps: list[StepCommunication]

    @property
    def busy_pct(self) -> float:
        """Share of the span doing work: spinning inside a collective for a late peer with
        nothing else running (``exposed_wait_ns``) is waiting, never work."""
        work = self.busy_ns - (self.exposed_wait_ns or 0)
        return 100.0 * work / self.span_ns if self.span_ns else float("nan")


class StragglerStat(msgspec.Struct, frozen=True):
    rank: int
    device: int
    last_arrivals: int
    shared: int  # contested collectives it took part in (some rank waited in them)
    mean_late_ns: float  # after the next-slowest rank, when it arrived last
    max_late_ns: int
    caused_wait_ns: int  # other ranks' wait inside the collectives it arrived last at
    caused_exposed_wait_ns: int
    window_ns: int  # its own time between the next-slowest rank's arrival and its own
    busy_in_window_ns: int
    top_kernels: list[tuple[str, int]]  # (name, ns inside those windows), largest first
    idle_causes: list[tuple[str, int]]  # (cause, ns inside those windows)
    #: Its own time from its previous collective to each late arrival, and its device's idle
    #: time in it by cause and line ("cpu_other at train.py:33"): what its host did before.
    before_ns: int = 0
    idle_before: list[tuple[str, int]] = msgspec.field(default_factory=list)

    @property
    def share_pct(self) -> float:
        return 100.0 * self.last_arrivals / self.shared if self.shared else 0.0


class StragglerDetail(msgspec.Struct, frozen=True):
    """What a straggler did in the windows the cross-rank analysis found, from its own trace:
    while the others waited (its busy time, kernels and idle causes there) and before it
    arrived (its idle time by cause and line). See :class:`StragglerStat`."""

    busy_in_window_ns: int = 0
    top_kernels: list[tuple[str, int]] = msgspec.field(default_factory=list)
    idle_causes: list[tuple[str, int]] = msgspec.field(default_factory=list)
    idle_before: list[tuple[str, int]] = msgspec.field(default_factory=list)


class GroupStat(msgspec.Struct, frozen=True):
    name: str  # "pg:0" or "stream#0" (the n-th communication stream, when no group is recorded)
    kinds: list[str]
    ranks: list[int]
    matched: int  # collectives matched on every rank of the group
    recorded: list[int]  # collectives recorded per rank, in ``ranks`` order


class BandwidthStat(msgspec.Struct, frozen=True):
    kind: str
    ranks: int  # group size used for the bus factor
    collectives: int  # with a recorded message size
    message_bytes: int
    transfer_ns: int
    algorithm_bytes_per_s: float
    bus_bytes_per_s: float | None
    peak_bytes_per_s: float | None  # the link's peak per direction
    includes_wait: bool  # durations from one rank only: waiting included, a lower bound

    @property
    def bus_pct_of_peak(self) -> float | None:
        if self.bus_bytes_per_s is None or not self.peak_bytes_per_s:
            return None
        return 100.0 * self.bus_bytes_per_s / self.peak_bytes_per_s


class ExposureSummary(msgspec.Struct, frozen=True):
    """Communication with nothing to hide it, summed over the ranks present, and why."""

    steps: list[StepCommunication]  # mean over ranks, per step number
    communication_ns: int
    exposed_ns: int
    collectives: int
    fully_exposed: int  # collectives with >= FULLY_EXPOSED_SHARE of their time exposed
    fully_exposed_ns: int  # their exposed time less waiting for a late rank (as below)
    small: int  # collectives dominated by their fixed cost
    small_exposed_ns: int
    small_by_size: bool  # "small" judged by message size (else by duration)
    mean_message_bytes: float | None
    locations: list[tuple[str, int, int]]  # (where issued, exposed ns less waiting, collectives)


class RankAnalysis(msgspec.Struct, frozen=True):
    world_size: int | None
    present: list[int]
    missing: list[int]
    notes: list[str]
    aligned: bool
    ranks: list[RankStat]
    groups: list[GroupStat]
    matched_collectives: int
    collective_wait_ns: int | None
    exposed_wait_ns: int
    straggler_exposed_wait_ns: int
    stragglers: list[StragglerStat]
    bandwidth: list[BandwidthStat]
    bandwidth_note: str | None
    exposure: ExposureSummary

    @property
    def partial(self) -> bool:
        return bool(self.missing)

    @property
    def busiest(self) -> RankStat | None:
        return max(self.ranks, key=lambda r: r.busy_pct) if self.ranks else None

    @property
    def least_busy(self) -> RankStat | None:
        return min(self.ranks, key=lambda r: r.busy_pct) if self.ranks else None
