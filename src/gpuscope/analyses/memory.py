"""What holds a GPU's memory: the peak, who allocated it, what the allocator keeps free, and why a
request failed. A pure function of a :class:`~gpuscope.model.MemoryRecord` (a snapshot, or the
allocator events a trace records) returning a :class:`MemoryReport` per device.

How each figure is computed (``docs/memory.md`` says the same with its limits):

* **Allocated over time** is the allocator's own count: an ``alloc`` adds its block's size, a
  ``free_completed`` (the block back in the cache once its streams are done) takes it away; a
  format that records the totals (Kineto's ``Total Allocated``) gives them directly. Reserved
  memory follows the segments (``segment_alloc``/``map`` add, ``segment_free``/``unmap`` take).
* **The baseline** (what was allocated when recording began) is never recorded: it is the
  allocated memory at the dump (the snapshot's blocks) less the net change the events record.
  Frees of blocks whose allocation was not recorded say that recording began mid-run (or that
  the ring buffer dropped entries): those blocks are part of the baseline, and are counted.
* **Who**: every block alive at the peak (recorded allocations not yet freed, blocks freed later
  whose allocation came before recording, blocks alive at the dump and never freed) is charged
  to the innermost frame of its stack that is the user's code (library frames: torch, other
  installed packages, the interpreter, C++ frames are skipped), sites on nearby lines of one
  function grouped, each with a category inferred from the phase the stack shows (optimizer
  ``step``, ``backward``, ``forward``, ``__init__``), how long the block lives, and the pool
  it is in; with how sure that inference is.
* **Reserved but unallocated**: at the peak, what the allocator had reserved beyond the peak's
  need (fragmentation that matters: reserved memory the peak could not use); at the dump, what
  is cached after the peak's phase (up to the peak's need: harmless, it serves the next step)
  and what is reserved beyond even that.
"""

from __future__ import annotations

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope._arrays import distinct, distinct_inverse, member
from gpuscope.analyses.memory_sites import (
    ACTIVATIONS,
    CATEGORIES,
    PHASE_OF,
    Live,
    MemorySite,
    StackFacts,
    annotated_phase,
    annotated_phases,
    covers,
    top_sites,
)
from gpuscope.model import (
    BlockState,
    MemoryAction,
    MemoryEvents,
    MemoryRecord,
)

#: Points of the drawn timeline.
TIMELINE_POINTS = 400


class Fragmentation(msgspec.Struct, frozen=True):
    """Reserved but unallocated memory at one moment, split by whether it matters."""

    free_bytes: int
    cached_bytes: int  # cached after a phase, up to the peak's need: harmless
    fragmented_bytes: int  # reserved beyond what the peak could use: it matters
    free_blocks: int | None  # None: the pieces are not known at that moment
    largest_free_bytes: int | None
    note: str


class OutOfMemory(msgspec.Struct, frozen=True):
    request_bytes: int | None  # None: the dump does not record the failed request
    device_free_bytes: int | None
    largest_free_bytes: int | None
    verdict: str  # weights | fragmentation | another_process | user_tensors | activations
    summary: str


class MemoryPoint(msgspec.Struct, frozen=True, array_like=True):
    time_ns: int  # -1: the source records no times (``event`` orders the points)
    event: int
    allocated_bytes: int
    reserved_bytes: int
    by_category: list[int]  # bytes per CATEGORIES entry


class MemoryReport(msgspec.Struct, frozen=True):
    source: str
    device: int
    format: str
    events: int
    peak_allocated_bytes: int
    reserved_at_peak_bytes: int
    peak_reserved_bytes: int
    peak_time_ns: int  # -1: no times recorded
    peak_event: int  # -1: the peak is the dump itself
    peak_phase: str  # forward | backward | optimizer step | setup | unknown (with how known)
    peak_phase_source: str  # "annotation ...", "the peak's allocation stack", "position"
    baseline_bytes: int
    baseline_note: str
    frees_before_alloc: int  # frees whose allocation was not recorded
    frees_before_alloc_bytes: int
    end_allocated_bytes: int
    end_reserved_bytes: int
    largest_request_bytes: int
    sites: list[MemorySite]  # at the peak, largest first
    rise_sites: list[MemorySite]  # allocations made during recording and alive at the peak
    categories: dict[str, int]  # bytes at the peak per category
    at_peak: Fragmentation
    at_end: Fragmentation
    oom: OutOfMemory | None
    settings: list[str]  # what the allocator settings mean for the fixes
    expandable_segments: bool | None
    timeline: list[MemoryPoint]
    device_total_bytes: int | None = None
    #: Activations alive at the peak that nothing freed later (inference keeps them only
    #: without ``no_grad``), and whether any backward was recorded at all.
    kept_activation_bytes: int = 0
    backward_recorded: bool = False


def analyse_memory(
    record: MemoryRecord, device_total_bytes: dict[int, int] | None = None, timeline: bool = True
) -> list[MemoryReport]:
    """One report per device the record holds events or segments of; ``timeline``: with the
    drawn timeline (only a report that draws or saves it needs it; else it is empty)."""
    devices = sorted(
        {int(d) for d in distinct(record.events.device)}
        | {int(d) for d in distinct(record.segments.device)}
    )
    totals = device_total_bytes or {}
    return [_Device(record, d, totals.get(d)).report(timeline) for d in devices]


class _Device:
    def __init__(self, record: MemoryRecord, device: int, total: int | None) -> None:
        self.record = record
        self.device = device
        self.total = total
        ev = record.events
        mine = ev.device == device
        # (one device's events are all of them: no copy of millions of rows)
        self.ev = ev.take(np.flatnonzero(mine)) if len(ev) and not mine.all() else ev
        seg_rows = np.flatnonzero(record.segments.device == device)
        self.seg_sizes = record.segments.size_bytes[seg_rows]
        blocks = record.blocks
        self.block_rows = np.flatnonzero(member(blocks.segment, seg_rows))
        self.stacks = StackFacts(record.frames, record.stacks)
        self.backward = any(
            self.stacks.phase(int(x)) == "backward" for x in distinct(self.ev.stack)
        )

    def report(self, timeline: bool = True) -> MemoryReport:
        ev = self.ev
        n = len(ev)
        size = ev.size_bytes
        freeing = MemoryAction.FREE_COMPLETED
        if not (ev.action == freeing).any():  # older recorders: the request is the free
            freeing = MemoryAction.FREE_REQUESTED
        blocks = self.record.blocks
        held = blocks.state[self.block_rows] != BlockState.INACTIVE
        t = self._totals(freeing, held)
        note, end_alloc, end_reserved = t.note, t.end_allocated, t.end_reserved
        matched = _match(ev, freeing)
        orphans = matched.orphan_frees
        if orphans.size:
            note += (
                f"; {orphans.size:,} frees of blocks allocated before recording began"
                " (recording started mid-run, or the ring buffer dropped entries)"
            )
        p, peak, reserved_at_peak, peak_reserved, peak_time = _peak(ev, t)
        live = self._live_at(p, matched, held, peak)
        sites = top_sites(live, self.stacks, rise=False)
        rise = top_sites(live, self.stacks, rise=True)
        categories = {c: 0 for c in CATEGORIES}
        for c, b in zip(live.category, live.size, strict=True):
            categories[CATEGORIES[c]] += int(b)
        phase, phase_source = self._phase_at(p)
        if phase == "unknown" and live.size.size:
            # What is alive says where the step is: activations peak at the end of the forward.
            main = max(categories, key=lambda c: categories[c])
            if main in PHASE_OF:
                phase, phase_source = PHASE_OF[main], f"position: {main} hold most of the peak"
        allocs = size[ev.action == MemoryAction.ALLOC]
        largest = int(allocs.max()) if allocs.size else int(blocks.size_bytes.max(initial=0))
        free_sizes = blocks.size_bytes[self.block_rows][
            blocks.state[self.block_rows] == BlockState.INACTIVE
        ]
        oom = self._oom(peak, end_alloc, end_reserved, free_sizes, categories, sites)
        settings, expandable = _settings(self.record.settings, self.record.segments.expandable)
        return MemoryReport(
            source=self.record.source,
            device=self.device,
            format=self.record.format,
            events=n,
            peak_allocated_bytes=peak,
            reserved_at_peak_bytes=reserved_at_peak,
            peak_reserved_bytes=peak_reserved,
            peak_time_ns=peak_time,
            peak_event=p,
            peak_phase=phase,
            peak_phase_source=phase_source,
            baseline_bytes=t.baseline,
            baseline_note=note,
            frees_before_alloc=int(orphans.size),
            frees_before_alloc_bytes=int(size[orphans].sum()),
            end_allocated_bytes=end_alloc,
            end_reserved_bytes=end_reserved,
            largest_request_bytes=largest,
            sites=sites,
            rise_sites=rise,
            categories=categories,
            at_peak=_at_peak(peak, reserved_at_peak, p, free_sizes, largest),
            at_end=_at_end(peak, end_alloc, end_reserved, free_sizes, t.recorded),
            oom=oom,
            settings=settings,
            expandable_segments=expandable,
            timeline=_timeline(ev, t.allocated, t.reserved, live, matched) if timeline else [],
            device_total_bytes=self.total,
            kept_activation_bytes=int(live.size[(live.category == ACTIVATIONS) & live.kept].sum()),
            backward_recorded=self.backward,
        )

    def _totals(self, freeing: int, held: NDArray[np.bool_]) -> _Totals:
        """Bytes allocated and reserved after each event: as recorded, or (older recorders, no
        totals) worked back from the dump by the net change the events record."""
        ev = self.ev
        n = len(ev)
        action, size = ev.action, ev.size_bytes
        delta = np.where(action == MemoryAction.ALLOC, size, 0)
        delta -= np.where(action == freeing, size, 0)
        grow = member(action, (MemoryAction.SEGMENT_ALLOC, MemoryAction.SEGMENT_MAP))
        shrink = member(action, (MemoryAction.SEGMENT_FREE, MemoryAction.SEGMENT_UNMAP))
        rdelta = np.where(grow, size, 0) - np.where(shrink, size, 0)
        recorded = n > 0 and bool((ev.allocated_bytes >= 0).all())
        if recorded:
            allocated = ev.allocated_bytes.astype(np.int64)
            reserved = ev.reserved_bytes.astype(np.int64)
            baseline = int(allocated[0] - delta[0])
            end_alloc, end_reserved = int(allocated[-1]), int(reserved[-1])
            note = "recorded: the first event's total less its own size"
        else:
            blocks = self.record.blocks
            end_alloc = int(blocks.size_bytes[self.block_rows][held].sum())
            end_reserved = int(self.seg_sizes.sum())
            baseline = end_alloc - int(delta.sum())
            allocated = baseline + np.cumsum(delta)
            reserved = end_reserved - int(rdelta.sum()) + np.cumsum(rdelta)
            note = (
                "estimated: the allocated memory at the dump less the net change recorded"
                if n
                else "the dump itself (no events recorded)"
            )
        if baseline < 0:
            note += "; the events record more than the dump holds (entries dropped?): set to 0"
            allocated = allocated - baseline
            baseline = 0
        return _Totals(allocated, reserved, baseline, end_alloc, end_reserved, note, recorded)

    def _live_at(self, p: int, matched: _Matched, held: NDArray[np.bool_], peak: int) -> Live:
        """Every block alive at event ``p`` (-1: at the dump), with its stack, category and
        whether it was allocated during recording."""
        ev = self.ev
        alloc_rows = matched.alloc_rows
        free_of = matched.free_of
        if p >= 0:
            alive = (alloc_rows <= p) & ((free_of < 0) | (free_of > p))
            orphan_alive = matched.orphan_frees[matched.orphan_frees > p]
        else:
            alive = free_of < 0
            orphan_alive = matched.orphan_frees[:0]
        rows = alloc_rows[alive]
        blocks = self.record.blocks
        # Blocks held at the dump whose allocation was not recorded: alive all along.
        dump_rows = self.block_rows[held]
        unseen = ~_within(blocks.address[dump_rows], ev.address[alloc_rows])
        dump_rows = dump_rows[unseen]
        sizes = np.concatenate(
            [ev.size_bytes[rows], ev.size_bytes[orphan_alive], blocks.size_bytes[dump_rows]]
        )
        stacks = np.concatenate(
            [ev.stack[rows], ev.stack[orphan_alive], blocks.stack[dump_rows]]
        ).astype(np.int64)
        frees = np.concatenate(
            [free_of[alive], orphan_alive, np.full(dump_rows.size, -1, np.int64)]
        )
        pool = np.concatenate(
            [
                np.zeros(rows.size + orphan_alive.size, np.bool_),
                self.record.segments.graph_pool[blocks.segment[dump_rows]],
            ]
        )
        # What the totals count that no block accounts for (a trace's memory allocated before
        # recording, which it never names): one block without a stack, alive all along.
        missing = peak - int(sizes.sum())
        if missing > 0:
            sizes = np.append(sizes, missing)
            stacks = np.append(stacks, -1)
            frees = np.append(frees, -1)
            pool = np.append(pool, False)
        recorded = np.zeros(sizes.size, np.bool_)
        recorded[: rows.size] = True
        times = np.full(sizes.size, -1, np.int64)
        times[: rows.size] = ev.time_ns[rows]
        annotated = annotated_phases(self.record.annotations, times)
        # Blocks of one stack, fate and phase share a category: each distinct one decided once.
        decided: dict[tuple[int, bool, bool, bool, str | None], int] = {}
        category = np.array(
            [
                decided[key] if key in decided else decided.setdefault(key, self._category(*key))
                for key in zip(
                    stacks.tolist(),
                    (frees < 0).tolist(),
                    pool.tolist(),
                    recorded.tolist(),
                    annotated,
                    strict=True,
                )
            ],
            dtype=np.int64,
        )
        used, inverse = distinct_inverse(stacks)
        sure = np.array([self.stacks.confidence(s) for s in used.tolist()], dtype=np.int64)
        confidence = sure[inverse] if stacks.size else np.zeros(0, dtype=np.int64)
        return Live(sizes, stacks, category, confidence, recorded, frees < 0)

    def _category(
        self, stack: int, kept: bool, pool: bool, recorded: bool, annotated: str | None
    ) -> int:
        """The category of one live block (see the module docstring); ``kept``: never freed
        while recording; ``annotated``: the phase an annotation gives its allocation's time."""
        if pool:
            return CATEGORIES.index("CUDA-graph pool")
        phase = self.stacks.phase(stack)
        if phase == "unknown" and annotated is not None:
            phase = annotated
        name = {
            "communication": "communication buffers",
            "setup": "parameters",
            "optimizer step": "optimizer state" if kept else "temporaries",
            "backward": "gradients" if kept else "temporaries",
            "forward": "activations",
        }.get(phase)
        if name is None and self.stacks.user_factory(stack):
            name = "user tensors"  # made by the user's code, not computed by a forward
        if name is None and kept and recorded and not self.backward:
            name = "activations"  # inference with autograd on keeps what it allocates
        if name is None:
            name = "parameters" if kept and not recorded else "other"
        return CATEGORIES.index(name)

    def _phase_at(self, p: int) -> tuple[str, str]:
        if p < 0:
            return "unknown", "the peak is the dump itself"
        time_ns = int(self.ev.time_ns[p])
        if time_ns >= 0:
            named = annotated_phase(self.record.annotations, time_ns)
            if named:
                return named, "annotation " + next(
                    a.name for a in self.record.annotations if covers(a, time_ns)
                )
        stack = int(self.ev.stack[p])
        phase = self.stacks.phase(stack)
        if phase != "unknown":
            return phase, "the peak allocation's stack"
        return "unknown", "nothing recorded says"

    def _oom(
        self,
        peak: int,
        end_alloc: int,
        end_reserved: int,
        free_sizes: NDArray[np.int64],
        categories: dict[str, int],
        sites: list[MemorySite],
    ) -> OutOfMemory | None:
        """Why a request failed: an ``oom`` event, or a dump taken with the allocator full."""
        ev = self.ev
        ooms = np.flatnonzero(ev.action == MemoryAction.OOM)
        free_total = int(free_sizes.sum())
        largest = int(free_sizes.max()) if free_sizes.size else 0
        only_dump = len(ev) == 0 or bool((ev.action == MemoryAction.SNAPSHOT).all())
        full = end_reserved > 0 and free_total <= 0.01 * end_reserved
        if not ooms.size and not (only_dump and full):
            return None
        request = int(ev.size_bytes[ooms[-1]]) if ooms.size else None
        device_free = int(ev.address[ooms[-1]]) if ooms.size else None
        weights = categories["parameters"]
        held = max(end_alloc, peak)
        gib = 1 << 30
        if held and weights >= 0.8 * held:
            verdict = "weights"
            summary = (
                f"the weights alone hold {weights / gib:.2f} GiB of {held / gib:.2f} GiB"
                f" ({100 * weights / held:.0f}%) with {free_total / (1 << 20):,.0f} MiB free in"
                " the allocator: they do not fit; not fragmentation, and no allocator setting"
                " helps: offload or quantise the weights"
            )
        elif request is not None and free_total >= request > largest:
            verdict = "fragmentation"
            summary = (
                f"{free_total / gib:.2f} GiB is free in the allocator but in pieces of at most"
                f" {largest / gib:.2f} GiB, smaller than the {request / gib:.2f} GiB asked:"
                " fragmentation (expandable segments let free pieces merge)"
            )
        elif (
            self.total is not None
            and device_free is not None
            and self.total - end_reserved - device_free > 0.1 * self.total
        ):
            other = self.total - end_reserved - device_free
            verdict = "another_process"
            summary = f"another process (or context) holds {other / gib:.2f} GiB of the device"
        elif held and max(categories, key=categories.__getitem__) == "user tensors":
            made = categories["user tensors"]
            top = sites[0].location if sites else "the largest site"
            verdict = "user_tensors"
            summary = (
                f"tensors the program made itself (factory calls such as torch.empty, outside any"
                f" forward) hold {made / gib:.2f} GiB of {held / gib:.2f} GiB"
                f" ({100 * made / held:.0f}%); the largest site is {top}"
            )
        else:
            top = sites[0].location if sites else "the largest site"
            verdict = "activations"
            summary = f"the live tensors outgrow the device; the largest site is {top}"
        return OutOfMemory(
            request, device_free, largest if free_sizes.size else None, verdict, summary
        )


def _within(values: NDArray[np.int64], among: NDArray[np.int64]) -> NDArray[np.bool_]:
    """``np.isin(values, among)`` by binary search: ``np.isin`` takes the distinct values of
    both first, 20 s for the millions of allocations of a GB snapshot."""
    if not values.size or not among.size:
        return np.zeros(values.size, np.bool_)
    ordered = np.sort(among)
    at = np.minimum(np.searchsorted(ordered, values), ordered.size - 1)
    return np.asarray(ordered[at] == values)


class _Totals(msgspec.Struct, frozen=True):
    """One device's memory after each event, and where its figures come from."""

    allocated: NDArray[np.int64]  # bytes allocated after each event
    reserved: NDArray[np.int64]  # bytes the allocator reserved after each event
    baseline: int  # bytes allocated before the first event
    end_allocated: int
    end_reserved: int
    note: str  # how the baseline was found
    recorded: bool  # the events carry the allocator's totals


def _peak(ev: MemoryEvents, t: _Totals) -> tuple[int, int, int, int, int]:
    """The peak's event (-1: the dump), bytes allocated and reserved there, the most reserved
    at any time, and the peak's time (-1: the dump)."""
    if len(ev):
        p = int(np.argmax(t.allocated))
        peak, reserved_at_peak = int(t.allocated[p]), int(t.reserved[p])
        peak_reserved = max(int(t.reserved.max()), t.end_reserved)
        peak_time = int(ev.time_ns[p])
    else:
        p, peak, reserved_at_peak, peak_time = -1, t.end_allocated, t.end_reserved, -1
        peak_reserved = t.end_reserved
    if t.end_allocated > peak:  # the dump holds more than any recorded moment
        p, peak, reserved_at_peak, peak_time = -1, t.end_allocated, t.end_reserved, -1
    return p, peak, reserved_at_peak, peak_reserved, peak_time


class _Matched(msgspec.Struct, frozen=True):
    alloc_rows: NDArray[np.int64]
    free_of: NDArray[np.int64]  # per alloc row: the row that freed it, -1 never
    orphan_frees: NDArray[np.int64]  # frees whose allocation was not recorded


def _match(ev: MemoryEvents, freeing: int) -> _Matched:
    """Each allocation to the free that ended it: the next free of the same address."""
    rows = np.flatnonzero((ev.action == MemoryAction.ALLOC) | (ev.action == freeing))
    order = rows[np.argsort(ev.address[rows], kind="stable")]  # by address, then by row
    is_alloc = ev.action[order] == MemoryAction.ALLOC
    address = ev.address[order]
    same_next = np.zeros(order.size, np.bool_)
    same_next[:-1] = address[:-1] == address[1:]
    pair = np.zeros(order.size, np.bool_)
    pair[:-1] = same_next[:-1] & is_alloc[:-1] & ~is_alloc[1:]
    free_of_sorted = np.full(order.size, -1, np.int64)
    free_of_sorted[:-1] = np.where(pair[:-1], order[1:], -1)
    freed_by_pair = np.zeros(order.size, np.bool_)
    freed_by_pair[1:] = pair[:-1]
    orphan = np.sort(order[~is_alloc & ~freed_by_pair])
    alloc_order = np.argsort(order[is_alloc], kind="stable")
    return _Matched(
        alloc_rows=order[is_alloc][alloc_order].astype(np.int64),
        free_of=free_of_sorted[is_alloc][alloc_order],
        orphan_frees=orphan.astype(np.int64),
    )


def _at_peak(
    peak: int, reserved: int, p: int, free_sizes: NDArray[np.int64], largest: int
) -> Fragmentation:
    free = max(reserved - peak, 0)
    if p < 0:  # the dump is the peak: its pieces are known
        small = int(free_sizes[free_sizes < largest].sum())
        return Fragmentation(
            free,
            free - small,
            small,
            int(free_sizes.size),
            int(free_sizes.max()) if free_sizes.size else 0,
            "the pieces at the dump; smaller than the largest request: fragmented",
        )
    return Fragmentation(
        free,
        0,
        free,
        None,
        None,
        "reserved at the peak that the peak could not use (the pieces are known at the dump)",
    )


def _at_end(
    peak: int, end_alloc: int, end_reserved: int, free_sizes: NDArray[np.int64], totals: bool
) -> Fragmentation:
    free = max(end_reserved - end_alloc, 0)
    cached = min(free, max(peak - end_alloc, 0))
    return Fragmentation(
        free,
        cached,
        free - cached,
        None if totals else int(free_sizes.size),
        None if totals or not free_sizes.size else int(free_sizes.max()),
        "cached up to the peak's need: serves the next step; beyond it: reserved for nothing",
    )


def _settings(
    settings: dict[str, object], expandable_segments: NDArray[np.bool_]
) -> tuple[list[str], bool | None]:
    notes: list[str] = []
    given = settings.get("expandable_segments")
    expandable = (
        bool(given) if isinstance(given, bool) else (True if expandable_segments.any() else None)
    )
    conf = str(settings.get("PYTORCH_CUDA_ALLOC_CONF") or "")
    split = settings.get("max_split_size")
    if expandable:
        notes.append("expandable_segments is already on: it is not the fix")
        if "max_split_size_mb" in conf or (isinstance(split, int) and 0 < split < 1 << 62):
            notes.append(
                "max_split_size_mb together with expandable segments lets reserved memory grow"
                " without bound (pytorch/pytorch#193400): drop max_split_size_mb"
            )
    return notes, expandable


def _timeline(
    ev: MemoryEvents,
    allocated: NDArray[np.int64],
    reserved: NDArray[np.int64],
    live: Live,
    matched: _Matched,
) -> list[MemoryPoint]:
    """At most TIMELINE_POINTS points, each the highest moment of its stretch of events (the
    peak is always drawn). Categories are split in the shares of the blocks alive at the
    peak: a drawing aid, said in docs/memory.md."""
    n = len(ev)
    if not n:
        return []
    starts = distinct(np.linspace(0, n, min(n, TIMELINE_POINTS) + 1).astype(np.int64)[:-1])
    bucket = np.repeat(np.arange(starts.size), np.diff(np.append(starts, n)))
    highest = np.maximum.reduceat(allocated, starts)
    at_max = np.flatnonzero(allocated == highest[bucket])
    first = np.ones(at_max.size, dtype=np.bool_)
    first[1:] = bucket[at_max[1:]] != bucket[at_max[:-1]]
    picks = at_max[first].tolist()
    total = float(live.size.sum()) or 1.0
    shares = [float(live.size[live.category == i].sum()) / total for i in range(len(CATEGORIES))]
    return [
        MemoryPoint(t, i, a, r, [int(a * share) for share in shares])
        for t, i, a, r in zip(
            ev.time_ns[picks].tolist(),
            picks,
            allocated[picks].tolist(),
            reserved[picks].tolist(),
            strict=True,
        )
    ]
