"""What the findings read from one device, and the raw form of a finding before it is priced."""

from __future__ import annotations

from typing import TypeAlias

import msgspec

from gpuscope.analyses.attribution import IdleAttribution, LocationStat
from gpuscope.analyses.bounds import KernelBounds
from gpuscope.analyses.timeline import DeviceWork, Overlap, TemporalBreakdown
from gpuscope.facts import GpuFacts


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


#: (pattern, cause, lost_ns, events, locations, evidence, saving_ns): ``saving_ns`` is what fixing
#: the cause would save, which the dollars price; None when it cannot be estimated (no dollars).
RawFinding: TypeAlias = tuple[str, str, int, int, list[LocationStat], list[str], int | None]
