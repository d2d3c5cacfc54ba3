"""What the findings read from one device, and the raw form of a finding before it is priced."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

import msgspec

from gpuscope.analyses.attribution import IdleAttribution, LocationStat
from gpuscope.analyses.bounds import KernelBounds
from gpuscope.analyses.timeline import DeviceWork, Overlap, TemporalBreakdown
from gpuscope.facts import GpuFacts

if TYPE_CHECKING:
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
