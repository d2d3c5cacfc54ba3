"""Copies over a link (host-to-device, device-to-host, peer-to-peer, unified-memory page
migrations): how long each group held the device with nothing else running, how fast it moved
data against the link's peak, and what overlapping or speeding them up could give back.

Contract: pure functions of :class:`~gpuscope.diagnosis.evidence.DeviceEvidence`.
"""

from __future__ import annotations

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope._arrays import distinct, member
from gpuscope.analyses.bounds import Bound
from gpuscope.analyses.intervals import difference, union
from gpuscope.analyses.timeline import WorkClass
from gpuscope.diagnosis.evidence import DeviceEvidence
from gpuscope.facts import GpuFacts
from gpuscope.model import CopyDirection
from gpuscope.units import duration


class CopyStat(msgspec.Struct, frozen=True):
    """The job's copies of one kind: how long they held the device with nothing else running,
    how fast they moved data against the link's peak, and from which host memory."""

    count: int
    exposed_ns: int
    copy_ns: int  # union of the copies
    bytes: int  # -1 when the trace records no sizes
    pageable: int  # copies from / to pageable host memory
    pinned: int  # copies the trace names as from / to pinned host memory
    link: str | None
    link_bytes_per_s: float | None  # one direction of the link
    saving_ns: int | None  # None: not estimable
    slowest_bytes_per_s: float | None = None  # of one copy
    fastest_bytes_per_s: float | None = None
    #: Copies on a stream that runs no compute kernel: already on a side stream of their own.
    side_stream: int = 0

    @property
    def achieved_bytes_per_s(self) -> float | None:
        return self.bytes / (self.copy_ns / 1e9) if self.bytes > 0 and self.copy_ns else None

    def notes(self, words: str) -> list[str]:
        text = [
            f"{duration(self.exposed_ns)} of {words} copies with nothing else running"
            f" ({self.count:,} copies, {duration(self.copy_ns)} in all)"
        ]
        achieved = self.achieved_bytes_per_s
        if achieved is not None:
            line = f"they moved {self.bytes / 1e9:,.2f} GB at {achieved / 1e9:,.1f} GB/s"
            if self.slowest_bytes_per_s and self.fastest_bytes_per_s and self.count > 1:
                line += (
                    f" (one copy: {self.slowest_bytes_per_s / 1e9:,.1f} to"
                    f" {self.fastest_bytes_per_s / 1e9:,.1f} GB/s)"
                )
            if self.link_bytes_per_s:
                line += (
                    f", {100 * achieved / self.link_bytes_per_s:.0f}% of {self.link}'s"
                    f" {self.link_bytes_per_s / 1e9:,.0f} GB/s per direction"
                )
            text.append(line)
        if self.pageable:
            text.append(f"{self.pageable:,} of {self.count:,} copies use pageable host memory")
        if self.pinned and self.pinned == self.count:
            text.append("every copy uses pinned host memory")
        elif self.pinned and self.pinned * 2 >= self.count:
            text.append(f"{self.pinned:,} of {self.count:,} copies already use pinned host memory")
        if self.saving_ns is None:
            text.append(
                "saving not estimable: nothing runs to hide the copies under and the link's"
                " bandwidth is unknown (pass --gpu NAME)"
            )
        return text


#: Copy groups: host-to-device, device-to-host, between GPUs, and unified-memory page migrations
#: (the driver moving pages a processor touched: their fix is prefetching, not pinning).
COPY_GROUPS = ("h2d", "d2h", "p2p", "um")
_GROUP_DIRECTION = {"h2d": CopyDirection.H2D, "d2h": CopyDirection.D2H, "p2p": CopyDirection.P2P}


def _copy_groups(e: DeviceEvidence) -> dict[str, NDArray[np.bool_]]:
    """Which of the device's transfer rows (``e.bounds.rows``) fall in each copy group."""
    ev = e.work.trace.events
    rows = e.bounds.rows
    over_link = e.bounds.bound == Bound.TRANSFER
    names = e.work.trace.names
    ids = ev.name_id[rows]
    used = distinct(ids[over_link]) if over_link.any() else np.zeros(0, dtype=np.int32)
    um_names = np.zeros(len(names), dtype=np.bool_)
    um_names[used] = [names[i].startswith("Unified Memory") for i in used.tolist()]
    um = over_link & um_names[ids]
    direction = ev.copy_direction[rows]
    groups = {g: over_link & ~um & (direction == d) for g, d in _GROUP_DIRECTION.items()}
    groups["um"] = um
    return groups


def copy_stats(evidence: list[DeviceEvidence]) -> dict[str, CopyStat]:
    """Per copy group, summed over devices. The saving is what overlap and bandwidth can give
    back: the exposed time could hide under the device's other work, and a copy slower than the
    link could run at its peak; a copy already at link speed with nothing to hide under is the
    work itself, and saves nothing."""
    result: dict[str, CopyStat] = {}
    per_device = [(e, _copy_groups(e), exposed_transfers_by_group(e)) for e in evidence]
    for group in COPY_GROUPS:
        count = exposed = copy_ns = nbytes = pageable = pinned = side = 0
        saving: int | None = 0
        link: str | None = None
        link_bw: float | None = None
        rates: list[float] = []
        for e, groups, exposed_by in per_device:
            ev = e.work.trace.events
            mine = groups[group]
            if not mine.any():
                continue
            picked = e.bounds.rows[mine]
            ex = exposed_by[group]
            span = union(ev.start_ns[picked], ev.end_ns[picked]).total_ns
            sizes = ev.bytes[picked]
            sized = (sizes > 0) & (ev.dur_ns[picked] > 0)
            moved = int(sizes[sized].sum())
            rates += (sizes[sized] / (ev.dur_ns[picked][sized] / 1e9)).tolist()
            direction = _GROUP_DIRECTION.get(group, CopyDirection.H2D)
            peak = _link_peak(e.facts, direction)
            other_busy = e.temporal.busy_ns - e.temporal.exclusive_memcpy_ns
            faster = 0.0
            if peak and moved and span:
                faster = max(0.0, 1.0 - (moved / (span / 1e9)) / peak) * ex
            elif not other_busy and group != "um":
                saving = None  # nothing to hide under, and no link speed to compare with
            if group == "um":
                faster = float(ex)  # prefetched pages move once, in bulk, before the kernel runs
            if saving is not None:
                saving += int(min(ex, other_busy + faster))
            count += int(mine.sum())
            exposed += ex
            copy_ns += span
            nbytes += moved
            pageable += int(ev.pageable[picked].sum())
            pinned += _pinned(e, picked)
            compute = e.work.rows[e.work.work_class == WorkClass.COMPUTE]
            side += int((~member(ev.stream[picked], ev.stream[compute])).sum())
            if peak and e.facts is not None:
                link = e.facts.interconnect if direction == CopyDirection.P2P else "the host link"
                link_bw = peak
        result[group] = CopyStat(
            count,
            exposed,
            copy_ns,
            nbytes if nbytes else -1,
            pageable,
            pinned,
            link,
            link_bw,
            saving,
            min(rates) if rates else None,
            max(rates) if rates else None,
            side,
        )
    return result


def _pinned(e: DeviceEvidence, rows: NDArray[np.int64]) -> int:
    """Copies whose name says pinned host memory (``Memcpy HtoD (Pinned -> Device)``)."""
    names = e.work.trace.names
    ids, counts = np.unique(e.work.trace.events.name_id[rows], return_counts=True)
    return sum(
        int(c)
        for i, c in zip(ids.tolist(), counts.tolist(), strict=True)
        if "pinned" in names[i].lower()
    )


def _link_peak(facts: GpuFacts | None, direction: CopyDirection) -> float | None:
    """One direction of the link a copy crosses: the GPU-to-GPU link for peer copies, the host
    link (the PCIe slot, or NVLink-C2C on a superchip) for host copies."""
    if facts is None:
        return None
    if direction == CopyDirection.P2P:
        return facts.interconnect_bytes_per_s / 2 if facts.interconnect_bytes_per_s else None
    return facts.host_link_bytes_per_s / 2 if facts.host_link_bytes_per_s else None


def exposed_transfers_by_group(e: DeviceEvidence) -> dict[str, int]:
    """Copy time over a link with nothing else running on the device (no kernel of any kind and
    no on-device copy), per copy group (:data:`COPY_GROUPS`, taken in that order where copies of
    several overlap): the GPU's engines wait for data to cross PCIe/NVLink."""
    ev = e.work.trace.events
    rows = e.bounds.rows
    result = dict.fromkeys(COPY_GROUPS, 0)
    over_link = e.bounds.bound == Bound.TRANSFER
    if not over_link.any():
        return result
    starts, ends = ev.start_ns[rows], ev.end_ns[rows]
    hidden_by = union(starts[~over_link], ends[~over_link])
    for group, wanted in _copy_groups(e).items():
        copies = difference(union(starts[wanted], ends[wanted]), hidden_by)
        result[group] = copies.total_ns
        hidden_by = union(
            np.concatenate([hidden_by.start_ns, copies.start_ns]),
            np.concatenate([hidden_by.end_ns, copies.end_ns]),
        )
    return result


def exposed_transfers(e: DeviceEvidence) -> tuple[int, int]:
    """Host-to-device copy time, and the other copies over a link, with nothing else running."""
    by = exposed_transfers_by_group(e)
    return by["h2d"], by["d2h"] + by["p2p"] + by["um"]


def fault_notes(evidence: list[DeviceEvidence]) -> list[str]:
    """The unified-memory page faults an export recorded (``trace.metadata``
    ``["unified_memory_faults"]``, from nsys's ``CUDA_UM_*`` tables), once per trace: CPU faults
    name the code that touched managed memory resident on a GPU, the loop to prefetch before."""
    traces = {id(e.work.trace): e.work.trace for e in evidence}
    cpu = gpu = groups = 0
    sites: dict[str, int] = {}
    for trace in traces.values():
        faults = trace.metadata.get("unified_memory_faults") or {}
        cpu += faults.get("cpu_page_faults", 0)
        gpu += faults.get("gpu_page_faults", 0)
        groups += faults.get("gpu_fault_groups", 0)
        for site, n in faults.get("cpu_fault_sites", {}).items():
            sites[site] = sites.get(site, 0) + n
    text = []
    if cpu:
        site, n = max(sites.items(), key=lambda kv: kv[1], default=("", 0))
        where = f", {n:,} of them in {site}" if site else ""
        text.append(f"{cpu:,} CPU page faults on managed memory{where}")
    if gpu:
        text.append(f"{gpu:,} GPU page faults in {groups:,} groups while kernels ran")
    return text
