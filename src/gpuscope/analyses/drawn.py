"""What the reports draw, computed once at the resolution they draw it, as plain data.

Contract: pure functions of one device's analysed work (:class:`DeviceSeries`, per device) or of
all of a job's (:class:`Drawn`, per job). The results hold numbers and names only, never the
trace: a :class:`~gpuscope.diagnosis.Diagnosis` that holds them can be saved, loaded and drawn
again without the trace, and the trace can be freed once it exists. Renderers only lay these
numbers out (bucket edges, colours, labels); they compute none of them.

Resolution: a report draws a few thousand bars and a few hundred points, whatever the trace's
size, so that is what is kept:

* the timeline (:class:`Timeline`): per device a lane of its idle gaps and one per stream of its
  kernels; an item at least one bucket long (:data:`TIMELINE_BUCKETS` across the job's span,
  doubled until every lane together needs at most :data:`MAX_TIMELINE_BARS` bars) is kept alone,
  with its name or code location; shorter ones are merged into runs of adjacent buckets that
  share a dominant category (count, time and the longest member's location kept);
* busy share over time (:data:`UTILISATION_BUCKETS` slices of each device's span, or of the
  job's common axis from :data:`HEATMAP_FROM_DEVICES` devices on), and over
  :data:`HEATMAP_SLICES` slices of each span for the ranks heatmap of traces without steps;
* the idle timeline of the terminal (:data:`STATE_COLUMNS` slices: time busy and lost to each
  cause);
* per step, where its window's time went (:class:`StepCauses`);
* the roofline's points (:data:`ROOFLINE_POINTS` costliest kernel and operator names);
* the diff's kernel time per stable name (:func:`kernel_time`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from itertools import count, pairwise

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope._arrays import bucket_edges, distinct
from gpuscope.analyses.attribution import CAUSES, IdleAttribution
from gpuscope.analyses.bounds import KernelBounds, KernelKind, RooflinePoint, roofline_points
from gpuscope.analyses.intervals import Intervals, covered_ns, covered_per_bucket, difference
from gpuscope.analyses.timeline import DeviceWork, StepStat, WorkClass
from gpuscope.model import Ids
from gpuscope.names import stable_name

I64 = NDArray[np.int64]

#: Time buckets across the timeline at full zoom-out (~pixels).
TIMELINE_BUCKETS = 1600
#: Bars on the timeline, every lane together.
MAX_TIMELINE_BARS = 4000
UTILISATION_BUCKETS = 300
#: Time slices of the ranks heatmap when the trace has no steps.
HEATMAP_SLICES = 40
ROOFLINE_POINTS = 30
#: Columns of the terminal's idle timeline.
STATE_COLUMNS = 60
#: From this many devices on, utilisation over time is a heat map (a row per device) on one
#: time axis, not a line per device.
HEATMAP_FROM_DEVICES = 3
#: Kinds of kernel (``KernelKind``) and idle causes, as the timeline's categories index them.
_CATEGORIES = max(len(CAUSES), len(KernelKind))


class StepCauses(msgspec.Struct, frozen=True):
    """Each step window of a device (``StepStat`` start to end) cut into busy parts, time lost to
    each idle cause, and time outside the device's activity (before its first work): the parts
    add up to the window. One value per step, in step order."""

    compute_ns: list[int]
    exposed_communication_ns: list[int]  # communication with no compute alongside
    memcpy_memset_ns: list[int]  # the rest of the busy time
    lost_ns: dict[str, list[int]]  # per idle cause (every cause of ``CAUSES``, in that order)
    outside_ns: list[int]


class DeviceSeries(msgspec.Struct, frozen=True):
    """The series of one device that the reports draw."""

    step_causes: StepCauses
    #: Time busy, then lost to each idle cause (``CAUSES`` order), in each of
    #: :data:`STATE_COLUMNS` equal slices of the span.
    states_ns: list[list[int]]
    #: Busy share of each of :data:`HEATMAP_SLICES` equal slices of the span.
    slices_busy_pct: list[float]
    roofline_kernels: list[RooflinePoint]
    roofline_operators: list[RooflinePoint]


class Lane(msgspec.Struct, frozen=True):
    """One lane of the timeline (columns as arrays: a report of a large job draws thousands of
    bars, held compactly): the idle gaps of a device (``stream`` None), or the kernels of
    one of its streams. ``category`` indexes ``KernelKind`` (kernels) or ``CAUSES`` (idle gaps);
    ``label`` indexes :attr:`Timeline.names`: the kernel's name, or the gap's code location
    (-1: none)."""

    device: int  # position in the diagnosis' devices
    stream: int | None
    start_ns: I64  # items at least one bucket long, each drawn alone
    end_ns: I64
    category: I64
    label: I64
    run_start_ns: I64  # runs of shorter items, merged
    run_end_ns: I64
    run_category: I64  # the category with the most time in the run
    run_count: I64
    run_busy_ns: I64  # the members' summed length
    run_label: I64  # the longest member's location (-1: none, and always for kernels)


class Timeline(msgspec.Struct, frozen=True):
    bucket_ns: int  # items shorter than this are merged
    names: list[str]
    lanes: list[Lane]


class Drawn(msgspec.Struct, frozen=True):
    """The job-level series: one time axis for every device."""

    origins_ns: list[int]  # per device: where its time axis starts
    timeline: Timeline
    #: Per device, busy % of :data:`UTILISATION_BUCKETS` slices: of its own span, or, from
    #: :data:`HEATMAP_FROM_DEVICES` devices on, of the job's common axis (``utilisation_axis``).
    utilisation_pct: list[list[float]]
    utilisation_axis_ns: tuple[int, int] | None = None  # (lo, hi) from the origins


def _busy_pct(busy: Intervals, edges: I64) -> NDArray[np.float64]:
    width = np.maximum(np.diff(edges), 1).astype(np.float64)
    return 100.0 * covered_per_bucket(busy, edges) / width


def _gaps_by_cause(idle: IdleAttribution) -> list[Intervals]:
    """The device's idle gaps of each cause (``CAUSES`` order), each in time order: one stable
    sort by cause rather than a pass over every gap per cause."""
    g = idle.gaps
    order = np.argsort(g.cause, kind="stable")
    cut = np.searchsorted(g.cause[order], np.arange(len(CAUSES) + 1)).tolist()
    starts, ends = g.start_ns[order], g.end_ns[order]
    return [Intervals(starts[a:b], ends[a:b]) for a, b in pairwise(cut)]


# --- per device --------------------------------------------------------------------------------


def device_series(
    work: DeviceWork,
    idle: IdleAttribution,
    bounds: KernelBounds,
    steps: list[StepStat],
    charts: bool = True,
) -> DeviceSeries:
    """The device's series; ``charts``: with those only the HTML report draws and the JSON
    saves (the busy heat map, the roofline points; else they are empty): the terminal draws
    the states, a saved run's summary reads the step causes."""
    lo, hi = work.span_start_ns, work.span_end_ns
    edges = bucket_edges(lo, hi, STATE_COLUMNS)
    gaps = _gaps_by_cause(idle)
    states = [covered_per_bucket(iv, edges) for iv in (work.busy, *gaps)]
    if not charts:
        return DeviceSeries(
            step_causes(work, gaps, steps), [s.tolist() for s in states], [], [], []
        )
    return DeviceSeries(
        step_causes=step_causes(work, gaps, steps),
        states_ns=[s.tolist() for s in states],
        slices_busy_pct=_busy_pct(work.busy, bucket_edges(lo, hi, HEATMAP_SLICES)).tolist(),
        roofline_kernels=roofline_points(bounds, work, by="kernel", top=ROOFLINE_POINTS),
        roofline_operators=roofline_points(bounds, work, by="operator", top=ROOFLINE_POINTS),
    )


def step_causes(work: DeviceWork, gaps: list[Intervals], steps: list[StepStat]) -> StepCauses:
    """``gaps``: the device's idle gaps per cause (:func:`_gaps_by_cause`)."""
    lo = np.array([s.start_ns for s in steps], dtype=np.int64)
    hi = np.array([s.end_ns for s in steps], dtype=np.int64)
    compute = work.by_class[WorkClass.COMPUTE]
    compute_ns = covered_ns(compute, lo, hi)
    exposed = covered_ns(difference(work.by_class[WorkClass.COMMUNICATION], compute), lo, hi)
    busy = np.array([s.busy_ns for s in steps], dtype=np.int64)
    memory = np.maximum(busy - compute_ns - exposed, 0)
    lost = {c: covered_ns(iv, lo, hi) for c, iv in zip(CAUSES, gaps, strict=True)}
    accounted = compute_ns + exposed + memory + sum(lost.values(), np.zeros(lo.shape, np.int64))
    return StepCauses(
        compute_ns=compute_ns.tolist(),
        exposed_communication_ns=exposed.tolist(),
        memcpy_memset_ns=memory.tolist(),
        lost_ns={k: v.tolist() for k, v in lost.items()},
        outside_ns=np.maximum(hi - lo - accounted, 0).tolist(),
    )


# --- per job -----------------------------------------------------------------------------------


def origins(spans: Sequence[tuple[int, int]]) -> list[int]:
    """Where each device's time axis starts: one origin for all when their clocks agree (the
    spans lie within ten spans of each other), else each device's own first activity."""
    starts = [lo for lo, _ in spans]
    widest = max(hi - lo for lo, hi in spans)
    if max(starts) - min(starts) <= 10 * max(widest, 1):
        return [min(starts)] * len(spans)
    return starts


def drawn(
    works: Sequence[DeviceWork],
    idle: Sequence[IdleAttribution],
    bounds: Sequence[KernelBounds],
) -> Drawn:
    """The job's timeline and utilisation series (at least one device)."""
    spans = [(w.span_start_ns, w.span_end_ns) for w in works]
    axis = origins(spans)
    if len(works) >= HEATMAP_FROM_DEVICES:
        lo = min(s - o for (s, _), o in zip(spans, axis, strict=True))
        hi = max(e - o for (_, e), o in zip(spans, axis, strict=True))
        edges = bucket_edges(lo, hi, UTILISATION_BUCKETS)
        rows = [_busy_pct(w.busy, edges + o).tolist() for w, o in zip(works, axis, strict=True)]
        common: tuple[int, int] | None = (lo, hi)
    else:
        rows = [
            _busy_pct(w.busy, bucket_edges(s, e, UTILISATION_BUCKETS)).tolist()
            for w, (s, e) in zip(works, spans, strict=True)
        ]
        common = None
    return Drawn(axis, timeline(works, idle, bounds), rows, common)


class _Items(msgspec.Struct, frozen=True):
    """One lane's items. Every lane's are held at once (a row or more per kernel), so the
    per-item codes are 8 bits (fewer than 256 categories) and labels 32 bits where they fit;
    their sums and products are taken in 64 bits (``_runs``)."""

    device: int
    stream: int | None
    start_ns: I64
    end_ns: I64
    category: NDArray[np.uint8]
    label: Ids  # into the names table, -1: none
    code: NDArray[np.uint8]  # the category's position among the lane's own (``kinds``)
    kinds: NDArray[np.intp]  # the categories the lane has, in order
    length_ns: I64
    mid_ns: I64  # the midpoint, from the timeline's origin: which bucket an item falls in


def _items(
    device: int,
    stream: int | None,
    start_ns: I64,
    end_ns: I64,
    category: NDArray[np.generic],
    label: Ids,
    lo: int,
) -> _Items:
    """A lane's items, with its categories numbered among its own: a lane holds a few of the
    kinds or causes, so the runs' per-bucket tables are that much smaller. What every bucket
    width tried reads (length, midpoint) is worked out once."""
    cat = category.astype(np.uint8)  # kinds and causes: _CATEGORIES < 256
    present = np.flatnonzero(np.bincount(cat, minlength=_CATEGORIES))
    position = np.zeros(_CATEGORIES, dtype=np.uint8)
    position[present] = np.arange(present.size)
    length = end_ns - start_ns
    mid = (start_ns + end_ns) // 2 - lo
    return _Items(
        device,
        stream,
        start_ns,
        end_ns,
        cat,
        label,
        position[cat],
        present,
        length,
        mid,
    )


def _labels(location: list[str | None], names: dict[str, int]) -> I64:
    """Each gap's location as an index into ``names`` (-1: none), numbering new ones in order of
    first appearance. One pass in C over the gaps (a large trace has tens of thousands, at a
    handful of locations): a default dictionary numbers each location the first time it is
    seen, and a small table turns those numbers into ``names``' indices."""
    first_seen: defaultdict[str | None, int] = defaultdict(count().__next__)
    seen = np.fromiter(map(first_seen.__getitem__, location), dtype=np.int64, count=len(location))
    table = [-1 if where is None else names.setdefault(where, len(names)) for where in first_seen]
    return np.array(table, dtype=np.int64)[seen]


def timeline(
    works: Sequence[DeviceWork], idle: Sequence[IdleAttribution], bounds: Sequence[KernelBounds]
) -> Timeline:
    names: dict[str, int] = {}
    lanes: list[_Items] = []
    lo = min(w.span_start_ns for w in works)
    hi = max(w.span_end_ns for w in works)
    for i, (w, g, b) in enumerate(zip(works, idle, bounds, strict=True)):
        gaps = g.gaps
        where = _labels(gaps.location, names)
        lanes.append(_items(i, None, gaps.start_ns, gaps.end_ns, gaps.cause, where, lo))
        ev = w.trace.events
        streams = ev.stream[w.rows]
        for stream in distinct(streams).tolist():
            on_stream = np.flatnonzero(streams == stream)
            rows = w.rows[on_stream]
            # Name ids are small non-negative integers: a table over them, no sort.
            ids = ev.name_id[rows]
            used = np.flatnonzero(np.bincount(ids))
            local = np.zeros(used[-1] + 1 if used.size else 0, dtype=np.int32)
            local[used] = [names.setdefault(w.trace.names[k], len(names)) for k in used.tolist()]
            kinds = b.kind[on_stream]
            labels = local[ids]
            lanes.append(
                _items(i, int(stream), ev.start_ns[rows], ev.end_ns[rows], kinds, labels, lo)
            )
    width, runs = _bucket_width(lanes, lo, hi)
    return Timeline(
        width, list(names), [_lane(items, width, r) for items, r in zip(lanes, runs, strict=True)]
    )


class _Buckets(msgspec.Struct, frozen=True):
    """A lane's short items (shorter than the width) at one bucket width."""

    index: NDArray[np.intp]  # the short items
    bucket: I64  # each one's bucket, counted from the lane's first occupied one
    occupied: I64  # the occupied buckets, ascending


class _Runs(msgspec.Struct, frozen=True):
    """A lane's runs at one bucket width."""

    buckets: _Buckets
    category: I64  # each run's dominant category
    first: I64  # each run's first bucket


def _bucket_width(lanes: Sequence[_Items], lo: int, hi: int) -> tuple[int, list[_Runs]]:
    """The narrowest bucket that keeps the bar count within budget: finer than a pixel at full
    zoom-out when the budget allows (detail for zooming in), coarser when it does not. Also the
    lanes' runs at that width.

    Every long item is a bar, and every stretch of adjacent occupied buckets holds at least one
    run (a change of dominant category only adds runs): a width over budget on either count is
    over budget, and the runs are only counted where both allow."""
    width = max((hi - lo) // max(16 * TIMELINE_BUCKETS, 1), 1)
    while True:
        last = width >= hi - lo
        long = sum(int(np.count_nonzero(lane.length_ns >= width)) for lane in lanes)
        if last or long <= MAX_TIMELINE_BARS:
            buckets = [_buckets(lane, width) for lane in lanes]
            if last or long + sum(_stretches(b) for b in buckets) <= MAX_TIMELINE_BARS:
                runs = [_runs(lane, b) for lane, b in zip(lanes, buckets, strict=True)]
                if last or long + sum(r.category.size for r in runs) <= MAX_TIMELINE_BARS:
                    return int(width), runs
        width *= 2


def _buckets(lane: _Items, width: int) -> _Buckets:
    index = np.flatnonzero(lane.length_ns < width)
    bucket = lane.mid_ns[index] // width
    if index.size == 0:
        return _Buckets(index, bucket, bucket)
    if np.any(bucket[1:] < bucket[:-1]):
        bucket -= bucket.min()
        return _Buckets(index, bucket, np.flatnonzero(np.bincount(bucket)))
    # In order, as a stream's kernels and a device's gaps almost always are: no table needed.
    bucket -= bucket[0]
    new = np.empty(bucket.size, dtype=np.bool_)
    new[0] = True
    np.not_equal(bucket[1:], bucket[:-1], out=new[1:])
    return _Buckets(index, bucket, bucket[new])


def _stretches(b: _Buckets) -> int:
    if b.occupied.size == 0:
        return 0
    return 1 + int(np.count_nonzero(b.occupied[1:] != b.occupied[:-1] + 1))


def _runs(lane: _Items, b: _Buckets) -> _Runs:
    """Runs of adjacent buckets whose short items share a dominant category.

    The weight table spans every bucket from the first occupied one to the last (a few thousand
    at most: the job's span over the width), so no item needs its bucket's rank."""
    if b.index.size == 0:
        return _Runs(b, b.occupied, b.occupied)
    kinds = max(lane.kinds.size, 1)
    span = int(b.occupied[-1]) + 1
    weight = np.bincount(
        b.bucket * kinds + lane.code[b.index],  # int64: the codes widen
        weights=lane.length_ns[b.index].astype(np.float64),
        minlength=span * kinds,
    ).reshape(span, kinds)[b.occupied]
    # The lowest category on a tie, as over every category: the lane's own are in order.
    dominant = lane.kinds[weight.argmax(axis=1)] if lane.kinds.size else weight.argmax(axis=1)
    occupied = b.occupied
    new_run = np.ones(occupied.size, dtype=bool)
    new_run[1:] = (occupied[1:] != occupied[:-1] + 1) | (dominant[1:] != dominant[:-1])
    return _Runs(b, dominant[new_run].astype(np.int64), occupied[new_run])


def _lane(items: _Items, width: int, runs: _Runs) -> Lane:
    long = np.flatnonzero(items.length_ns >= width)
    members, dominant = runs.buckets.index, runs.category
    count = dominant.size
    # Each member's run: how many runs start at or before its bucket, less one.
    starts = np.zeros(int(runs.buckets.occupied[-1]) + 1 if count else 0, dtype=np.int64)
    starts[runs.first] = 1
    run = (np.cumsum(starts) - 1)[runs.buckets.bucket]
    first = np.full(count, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.zeros(count, dtype=np.int64)
    np.minimum.at(first, run, items.start_ns[members])
    np.maximum.at(last, run, items.end_ns[members])
    busy = np.bincount(run, weights=items.length_ns[members].astype(np.float64), minlength=count)
    located = np.full(count, -1, dtype=np.int64)
    if items.stream is None and count:
        located = _longest_label(items, members, run, count)
    i64 = np.int64
    return Lane(
        device=items.device,
        stream=items.stream,
        start_ns=items.start_ns[long].astype(i64),
        end_ns=items.end_ns[long].astype(i64),
        category=items.category[long].astype(i64),
        label=items.label[long].astype(i64),
        run_start_ns=first,
        run_end_ns=last,
        run_category=dominant.astype(i64),
        run_count=np.bincount(run, minlength=count).astype(i64),
        run_busy_ns=busy.astype(i64),
        run_label=located,
    )


def _longest_label(items: _Items, members: NDArray[np.intp], run: I64, count: int) -> I64:
    """Per run, the location of its longest member that has one (the first in item order
    among equally long ones, as drawn); -1 where no member has one. ``members`` (ascending)
    are the items in runs, ``run`` each one's run."""
    located = np.full(count, -1, dtype=np.int64)
    has = items.label[members] >= 0
    labelled, owner = members[has], run[has]
    if labelled.size == 0:
        return located
    length = items.length_ns[labelled]
    longest = np.full(count, -1, dtype=np.int64)
    np.maximum.at(longest, owner, length)
    # Of each run's longest, the first: ``labelled`` is in item order.
    candidates = np.flatnonzero(length == longest[owner])
    earliest = np.full(count, labelled.size, dtype=np.int64)
    np.minimum.at(earliest, owner[candidates], candidates)
    found = earliest < labelled.size
    located[found] = items.label[labelled[earliest[found]]]
    return located


# --- the diff's kernel time ----------------------------------------------------------------------


def step_periods(steps: Sequence[StepStat]) -> tuple[I64, I64]:
    """Each step's window on the device (``analyses.timeline.step_breakdown``): they tile the
    device's time, each from the end of the previous step's work to the end of its own. The
    first step, whose predecessor is not in the trace, starts where the host began it: it gains
    the host's lead over the device, so it only marks where the second begins (N steps give
    N - 1 values) unless it is the only one."""
    kept = steps[1:] if len(steps) > 1 else steps
    starts = np.array([s.start_ns for s in kept], dtype=np.int64)
    ends = np.array([s.end_ns for s in kept], dtype=np.int64)
    return starts, np.maximum(ends, starts)


def kernel_time(
    works: Sequence[DeviceWork], steps: Sequence[list[StepStat]]
) -> tuple[str, dict[str, float]]:
    """Device time per kernel name (by its stable part), per step (unit ``"step"``; the steps
    every device has) or per second of span (``"s"``, when a device has no steps), and per
    device."""
    count = min((len(step_periods(s)[0]) for s in steps), default=0)
    totals: dict[str, float] = {}
    for work, mine in zip(works, steps, strict=True):
        if count:
            lo, hi = step_periods(mine)
            window = (int(lo[0]), int(hi[count - 1]))
            units = float(count)
        else:
            window = (work.span_start_ns, work.span_end_ns)
            units = max(work.span_end_ns - work.span_start_ns, 1) / 1e9
        ev = work.trace.events
        starts = ev.start_ns[work.rows]
        inside = work.rows[(starts >= window[0]) & (starts < window[1])]
        # Per name first (by id: no sort), then merged by stable name: one regex per name, not
        # per kernel.
        ids = ev.name_id[inside]
        used = np.flatnonzero(np.bincount(ids))
        per_name = np.bincount(ids, weights=ev.dur_ns[inside])[used]
        for name_id, ns in zip(used.tolist(), per_name.tolist(), strict=True):
            name = stable_name(work.trace.names[name_id])
            totals[name] = totals.get(name, 0.0) + ns / units
    devices = max(len(works), 1)
    return ("step" if count else "s"), {name: ns / devices for name, ns in totals.items()}
