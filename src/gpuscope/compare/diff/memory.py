"""What grew in memory between two runs: the peak, and the bytes each allocation site held at
it (from each run's :class:`~gpuscope.analyses.memory.MemoryReport`, as summarised in the
:class:`~gpuscope.compare.diff.summary.RunSummary` the history keeps)."""

from __future__ import annotations

import msgspec

from gpuscope.analyses.memory import MemoryReport

#: Sites listed, largest change first.
TOP_SITE_CHANGES = 10


class SiteChange(msgspec.Struct, frozen=True):
    location: str
    before_bytes: int
    after_bytes: int

    @property
    def change_bytes(self) -> int:
        return self.after_bytes - self.before_bytes


class MemoryDiff(msgspec.Struct, frozen=True):
    peak_before_bytes: int | None  # None: that side records no memory
    peak_after_bytes: int | None
    sites: list[SiteChange]  # largest change first


def site_bytes(reports: list[MemoryReport]) -> dict[str, int]:
    """Bytes at the peak per site (``location``, or ``location (category)`` when a location
    holds several categories), summed over the reports."""
    held: dict[str, int] = {}
    for report in reports:
        for site in report.sites:
            held[site.location] = held.get(site.location, 0) + site.bytes
    return held


def memory_diff(
    peak_before: int | None,
    before: dict[str, int],
    peak_after: int | None,
    after: dict[str, int],
) -> MemoryDiff | None:
    if peak_before is None and peak_after is None:
        return None
    changes = [
        SiteChange(name, before.get(name, 0), after.get(name, 0))
        for name in sorted(set(before) | set(after))
    ]
    changes = [c for c in changes if c.change_bytes]
    changes.sort(key=lambda c: -abs(c.change_bytes))
    return MemoryDiff(peak_before, peak_after, changes[:TOP_SITE_CHANGES])
