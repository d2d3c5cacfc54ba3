"""What the findings read from one device, the raw form of a finding before it is priced, and
the per-trace and per-job context a diagnosis carries while it runs (instead of dictionaries
keyed by trace and long argument lists)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import msgspec

from gpuscope.analyses.attribution import IdleAttribution, LocationStat
from gpuscope.analyses.bounds import KernelBounds
from gpuscope.analyses.host import HostIndex
from gpuscope.analyses.phases import Phase
from gpuscope.analyses.ranks import Participant, RankAnalysis
from gpuscope.analyses.timeline import DeviceWork, Overlap, TemporalBreakdown
from gpuscope.facts import GpuFacts
from gpuscope.model import Trace

if TYPE_CHECKING:
    from gpuscope._aside import Later
    from gpuscope.analyses.whatif import Graph
    from gpuscope.diagnosis import DeviceReport


class DeviceEvidence(msgspec.Struct, frozen=True):
    """Everything the findings need from one device: its report, and what the report does not
    keep (the classified device work, which holds the trace, and the trace's step count)."""

    report: DeviceReport
    work: DeviceWork
    steps: int

    @property
    def rank(self) -> int | None:
        return self.report.rank

    @property
    def device(self) -> int:
        return self.report.device

    @property
    def temporal(self) -> TemporalBreakdown:
        return self.report.temporal

    @property
    def overlap(self) -> Overlap:
        return self.report.overlap

    @property
    def idle(self) -> IdleAttribution:
        return self.report.idle

    @property
    def bounds(self) -> KernelBounds:
        return self.report.bounds

    @property
    def facts(self) -> GpuFacts | None:
        return self.report.facts


#: (pattern, cause, lost_ns, events, locations, evidence, saving_ns): ``saving_ns`` is what fixing
#: the cause would save, which the dollars price; None when it cannot be estimated (no dollars).
RawFinding: TypeAlias = tuple[str, str, int, int, list[LocationStat], list[str], int | None]


class TraceContext(msgspec.Struct):
    """One trace (one rank) while the diagnosis runs: the trace as analysed (cut to its steady
    window when it was), its host events classified, the start-up phases left in its window,
    and the evidence of each of its devices. It holds the trace, so it lives only while the
    diagnosis runs; what the diagnosis keeps is the reports."""

    trace: Trace
    host: HostIndex
    phases: list[Phase]
    devices: list[DeviceEvidence] = msgspec.field(default_factory=list)
    #: The replays' graph of ``trace``, begun on the diagnosis's helper thread when fixes are
    #: replayed (None: the prediction builds it).
    graph: Later[Graph] | None = None


class JobContext(msgspec.Struct):
    """What a prediction reads of the whole job: its traces, its devices as rank participants,
    the rank analysis (None for one GPU without collectives), the price and the job's GPUs."""

    traces: list[TraceContext]
    participants: list[Participant]
    ranks: RankAnalysis | None
    gpu_hour_usd: float | None
    gpus: int
