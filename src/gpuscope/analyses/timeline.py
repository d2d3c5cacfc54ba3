"""Where device time went: busy/idle, the split by kind of work, overlap, kernels, streams, steps.

Contract: every function is pure. :func:`device_work` builds the per-device view that the others
take; each returns a frozen struct of integer nanoseconds (and derived percentages).

Definitions (the same as HTA's where HTA has one):

* span: first device event start to last device event end on that device; or, when the device
  work is given the profiled window (:func:`~gpuscope.analyses.window.profiled_window`: the
  profiled steps, else the trace's own span), that window (widened to the device work if it runs
  past it): the host's work before the first kernel and after the last is part of what was
  profiled, and the device idles through it.
* busy: the union of kernel, memcpy and memset intervals over all streams; idle = span - busy.
* compute / communication / memcpy / memset: the union of that class's intervals (they overlap
  each other); the *exclusive* split assigns each busy nanosecond to one class, in the order
  compute > communication > memcpy > memset, so that the split plus idle sums to the span.
* overlap: the share of communication time during which compute also runs.
"""

from __future__ import annotations

import re
from enum import IntEnum

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope._arrays import among, distinct, percentile
from gpuscope.analyses.intervals import (
    Intervals,
    covered_ns,
    intersection,
    union,
    weighted_pieces,
)
from gpuscope.classify import communication_of
from gpuscope.model import BUSY_KINDS, Kind, Step, Trace

#: HTA's threshold between a short "kernel wait" and a longer unexplained gap on one stream.
KERNEL_WAIT_THRESHOLD_NS = 30_000


class WorkClass(IntEnum):
    COMPUTE = 0
    COMMUNICATION = 1
    MEMCPY = 2
    MEMSET = 3


class DeviceWork(msgspec.Struct, frozen=True):
    """The device-side work of one device in one trace, classified; input to the analyses."""

    trace: Trace
    device: int
    rows: NDArray[np.int64]  # rows of trace.events, by start time
    work_class: NDArray[np.uint8]  # WorkClass per row
    busy: Intervals
    by_class: dict[WorkClass, Intervals]
    #: The profiled window (start, end) the span covers beside the device work; None: the
    #: device's own span.
    window: tuple[int, int] | None = None

    @property
    def span_start_ns(self) -> int:
        first = int(self.busy.start_ns[0])
        return first if self.window is None else min(first, self.window[0])

    @property
    def span_end_ns(self) -> int:
        last = int(self.busy.end_ns[-1])
        return last if self.window is None else max(last, self.window[1])

    @property
    def span_ns(self) -> int:
        return self.span_end_ns - self.span_start_ns


def device_work(trace: Trace, device: int, window: tuple[int, int] | None = None) -> DeviceWork:
    """The device's work in ``trace``; its span is ``window`` (widened to the work) when given,
    else the work's own extent."""
    ev = trace.events
    rows = np.flatnonzero(among(ev.kind, BUSY_KINDS) & (ev.device == device) & (ev.dur_ns > 0))
    kinds = ev.kind[rows]
    work_class = np.full(rows.shape, WorkClass.COMPUTE, dtype=np.uint8)
    kernels = np.flatnonzero(kinds == Kind.KERNEL)
    comm = communication_of(trace.names, ev.name_id[rows[kernels]])
    work_class[kernels[comm]] = WorkClass.COMMUNICATION
    work_class[kinds == Kind.MEMCPY] = WorkClass.MEMCPY
    work_class[kinds == Kind.MEMSET] = WorkClass.MEMSET
    starts, ends = ev.start_ns[rows], ev.end_ns[rows]
    by_class = {c: union(starts[work_class == c], ends[work_class == c]) for c in WorkClass}
    busy = union(starts, ends)
    return DeviceWork(trace, device, rows.astype(np.int64), work_class, busy, by_class, window)


# --- temporal breakdown ------------------------------------------------------------------------


class TemporalBreakdown(msgspec.Struct, frozen=True):
    span_ns: int
    busy_ns: int
    idle_ns: int
    compute_ns: int  # union of compute kernels (HTA's "compute")
    communication_ns: int
    memcpy_ns: int
    memset_ns: int
    memory_ns: int  # union of memcpy and memset
    # Exclusive split: these four plus idle_ns sum to span_ns.
    exclusive_compute_ns: int
    exclusive_communication_ns: int  # communication not overlapped by compute ("exposed")
    exclusive_memcpy_ns: int
    exclusive_memset_ns: int

    def pct(self, value_ns: int) -> float:
        return 100.0 * value_ns / self.span_ns if self.span_ns else float("nan")


def temporal_breakdown(work: DeviceWork) -> TemporalBreakdown:
    c = work.by_class
    compute = c[WorkClass.COMPUTE]
    length, covering = _class_pieces(work)

    def only(wanted: WorkClass, *above: WorkClass) -> int:
        """Time ``wanted`` covers and none of the classes ``above`` it does."""
        mask = sum(1 << a for a in above)
        return int(length[(covering & (1 << wanted) != 0) & (covering & mask == 0)].sum())

    memory = (1 << WorkClass.MEMCPY) | (1 << WorkClass.MEMSET)
    busy_ns = work.busy.total_ns
    return TemporalBreakdown(
        span_ns=work.span_ns,
        busy_ns=busy_ns,
        idle_ns=work.span_ns - busy_ns,
        compute_ns=compute.total_ns,
        communication_ns=c[WorkClass.COMMUNICATION].total_ns,
        memcpy_ns=c[WorkClass.MEMCPY].total_ns,
        memset_ns=c[WorkClass.MEMSET].total_ns,
        memory_ns=int(length[covering & memory != 0].sum()),
        exclusive_compute_ns=compute.total_ns,
        exclusive_communication_ns=only(WorkClass.COMMUNICATION, WorkClass.COMPUTE),
        exclusive_memcpy_ns=only(WorkClass.MEMCPY, WorkClass.COMPUTE, WorkClass.COMMUNICATION),
        exclusive_memset_ns=only(
            WorkClass.MEMSET, WorkClass.COMPUTE, WorkClass.COMMUNICATION, WorkClass.MEMCPY
        ),
    )


def _class_pieces(work: DeviceWork) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The device's time cut at every start and end of every class's intervals: each piece's
    length, and which classes cover it (bit ``1 << class``). One sort of every boundary answers
    all of the exclusive split at once, where differences and unions would sort once each."""
    points, covering = weighted_pieces([(work.by_class[c], 1 << c) for c in WorkClass])
    return np.diff(points), covering


# --- compute / communication overlap -----------------------------------------------------------


class Overlap(msgspec.Struct, frozen=True):
    communication_ns: int
    overlapped_ns: int  # communication time during which compute also ran
    exposed_ns: int  # communication time with no compute alongside

    @property
    def overlap_pct(self) -> float | None:
        """Share of communication overlapped by compute; None when there is no communication."""
        if self.communication_ns == 0:
            return None
        return 100.0 * self.overlapped_ns / self.communication_ns


def overlap(work: DeviceWork) -> Overlap:
    comm = work.by_class[WorkClass.COMMUNICATION]
    both = intersection(comm, work.by_class[WorkClass.COMPUTE]).total_ns
    return Overlap(comm.total_ns, both, comm.total_ns - both)


# --- kernels -----------------------------------------------------------------------------------


class KernelStat(msgspec.Struct, frozen=True):
    name: str
    work_class: WorkClass
    count: int
    total_ns: int
    mean_ns: float
    max_ns: int
    share_of_busy_pct: float  # of the sum of kernel time on the device (kernels overlap)


def kernel_breakdown(work: DeviceWork, top: int | None = None) -> list[KernelStat]:
    """Time per distinct device-work name, largest first."""
    ev = work.trace.events
    names = ev.name_id[work.rows]
    durations = ev.dur_ns[work.rows]
    unique, inverse = _unique_ids(names, len(work.trace.names))
    totals = np.bincount(inverse, weights=durations).astype(np.int64)
    counts = np.bincount(inverse)
    maxima = np.zeros(unique.size, dtype=np.int64)
    np.maximum.at(maxima, inverse, durations)
    classes = np.zeros(unique.size, dtype=np.uint8)
    classes[inverse] = work.work_class
    grand_total = max(int(durations.sum()), 1)
    order = np.argsort(-totals, kind="stable")
    if top is not None:
        order = order[:top]
    return [
        KernelStat(
            name=work.trace.names[int(unique[i])],
            work_class=WorkClass(int(classes[i])),
            count=int(counts[i]),
            total_ns=int(totals[i]),
            mean_ns=float(totals[i]) / float(counts[i]),
            max_ns=int(maxima[i]),
            share_of_busy_pct=100.0 * float(totals[i]) / grand_total,
        )
        for i in order
    ]


def _unique_ids(ids: NDArray[np.int32], count: int) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """``np.unique(ids, return_inverse=True)`` for ids in ``[0, count)``, by counting rather than
    sorting (several times faster on a device's tens of thousands of kernels)."""
    unique = np.flatnonzero(np.bincount(ids, minlength=count))
    position = np.zeros(max(count, 1), dtype=np.intp)
    position[unique] = np.arange(unique.size)
    return unique, position[ids]


# --- per-stream idle ---------------------------------------------------------------------------


class StreamIdle(msgspec.Struct, frozen=True):
    """Idle time between consecutive work on one stream, split as HTA splits it."""

    stream: int
    span_ns: int
    busy_ns: int
    idle_ns: int
    host_wait_ns: int  # the next work was not yet launched when the stream went idle
    kernel_wait_ns: int  # launched already, short gap (< 30 µs): launch latency between kernels
    other_ns: int


def stream_idle(work: DeviceWork) -> list[StreamIdle]:
    ev = work.trace.events
    result: list[StreamIdle] = []
    streams = ev.stream[work.rows]
    for stream in distinct(streams):
        rows = work.rows[streams == stream]
        starts, ends = ev.start_ns[rows], ev.end_ns[rows]
        busy = union(starts, ends)
        span = int(busy.end_ns[-1] - busy.start_ns[0])
        # Gaps between consecutive work on the stream, and the work that follows each gap.
        reach = np.maximum.accumulate(ends)
        gap = starts[1:] - reach[:-1]
        after = rows[1:]
        has_gap = gap > 0
        gap, after, prev_end = gap[has_gap], after[has_gap], reach[:-1][has_gap]
        launcher = ev.link[after]
        launch_ns = np.where(launcher >= 0, ev.start_ns[np.maximum(launcher, 0)], -1)
        host_wait = (launcher >= 0) & (launch_ns >= prev_end)
        kernel_wait = ~host_wait & (gap < KERNEL_WAIT_THRESHOLD_NS)
        result.append(
            StreamIdle(
                stream=int(stream),
                span_ns=span,
                busy_ns=busy.total_ns,
                idle_ns=span - busy.total_ns,
                host_wait_ns=int(gap[host_wait].sum()),
                kernel_wait_ns=int(gap[kernel_wait].sum()),
                other_ns=int(gap[~host_wait & ~kernel_wait].sum()),
            )
        )
    return result


# --- steps -------------------------------------------------------------------------------------

#: Fewest repetitions of a user range, or of a kernel sequence, that make it an iteration.
MIN_REPEATS = 3
#: Share of kernels whose name recurs one cycle later for a kernel sequence to count as a loop.
CYCLE_MATCH = 0.9
#: Cycle lengths tried when looking for a repeating kernel sequence (the most frequent distances
#: between two launches of one kernel).
_CYCLE_CANDIDATES = 32
PROFILER_STEPS = "profiler steps"
_DIGITS = re.compile(r"\d+")


class FoundSteps(msgspec.Struct, frozen=True):
    """A trace's iterations on the host clock, and where they came from (``source`` is None when
    the trace has neither profiler steps nor a repeated range)."""

    steps: list[Step]
    source: str | None


class StepStat(msgspec.Struct, frozen=True):
    name: str
    number: int
    start_ns: int  # of the step's window, on the device clock when ``timed_on`` is "device"
    end_ns: int
    busy_ns: int
    timed_on: str = "device"  # "device": from its own device work; "host": it launched none
    source: str = PROFILER_STEPS  # profiler steps, a repeated range, or a kernel sequence

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def busy_pct(self) -> float:
        return 100.0 * self.busy_ns / self.dur_ns if self.dur_ns > 0 else float("nan")


def find_steps(trace: Trace) -> FoundSteps:
    """The trace's iterations on the host: its profiler steps (``ProfilerStep#N``, or step-named
    NVTX ranges, as the readers found them); failing those, the repeated user range (NVTX push/pop
    in an nsys export, ``record_function`` in a Kineto trace) that covers the most host time.

    A training or serving loop runs the same code each iteration, so a range its code opens once
    per iteration recurs at the loop's period; the one covering the most time is the outermost
    (a ``train_step`` range contains its ``forward``). A family is the name with its numbers
    taken out (``blocks.3`` and ``blocks.4`` are one range opened by each FSDP block); one that
    overlaps itself is recursion, not a loop. Each repetition starts an iteration that lasts until
    the next one starts (the work a block launches after its ``pre_forward`` range closes is still
    that block's), so ``c`` repetitions give ``c - 1`` whole steps, and ``c`` when the ranges
    cover most of the loop (a ``train_step`` range wraps its iteration, so the last one ends where
    it closes). Fewer than :data:`MIN_REPEATS` steps are no loop.
    """
    if trace.steps:
        return FoundSteps(list(trace.steps), PROFILER_STEPS)
    ev = trace.events
    rows = np.flatnonzero(ev.kind == Kind.ANNOTATION)
    if rows.size <= MIN_REPEATS:
        return FoundSteps([], None)
    family = {i: _DIGITS.sub("N", trace.names[i]) for i in distinct(ev.name_id[rows]).tolist()}
    members: dict[tuple[str, int], list[int]] = {}
    for row, name_id, tid in zip(
        rows.tolist(), ev.name_id[rows].tolist(), ev.tid[rows].tolist(), strict=True
    ):
        members.setdefault((family[name_id], tid), []).append(row)
    best: tuple[int, int, str, NDArray[np.int64]] | None = None
    launched = _launch_times(trace)
    for (name, _tid), chosen in members.items():
        if len(chosen) < MIN_REPEATS:
            continue
        picked = np.array(chosen, dtype=np.int64)
        starts, ends = ev.start_ns[picked], ev.end_ns[picked]
        if np.any(starts[1:] < ends[:-1]):
            continue
        if not _iteration_like(ends - starts, starts, ends, launched):
            continue
        covered = int((ends - starts).sum())
        key = (covered, -picked.size)
        if best is None or key > (best[0], best[1]):
            best = (covered, -picked.size, name, picked)
    if best is None:
        return FoundSteps([], None)
    picked = best[3]
    starts = ev.start_ns[picked].tolist()
    steps = [
        Step(trace.name(int(row)), number, starts[number], starts[number + 1])
        for number, row in enumerate(picked[:-1].tolist())
    ]
    durations = ev.dur_ns[picked]
    if 2 * int(durations[:-1].sum()) >= starts[-1] - starts[0]:
        # The range wraps the iteration (a ``train_step`` range): the last one ends where it ends.
        steps.append(
            Step(
                trace.name(int(picked[-1])), len(steps), starts[-1], starts[-1] + int(durations[-1])
            )
        )
    if len(steps) < MIN_REPEATS:
        return FoundSteps([], None)
    tool = "NVTX" if trace.format == "nsys" else "record_function"
    return FoundSteps(steps, f"repeated {tool} range '{best[2]}'")


#: Repetitions of an iteration last comparably long: the middle 80% within this factor.
COMPARABLE_RATIO = 4.0
#: ... and hold the launches of at least this share of the device work launched in the trace.
CONTAINED_SHARE = 0.5


def _launch_times(trace: Trace) -> NDArray[np.int64]:
    """Sorted host times of the calls that launched device work."""
    ev = trace.events
    return np.sort(ev.start_ns[(ev.kind == Kind.RUNTIME) & (ev.link >= 0)])


def _iteration_like(
    durations: NDArray[np.int64],
    starts: NDArray[np.int64],
    ends: NDArray[np.int64],
    launched: NDArray[np.int64],
) -> bool:
    """Whether repeated ranges are iterations: a loop's body does the same work each time, so
    its ranges last comparably long (the middle 80% within :data:`COMPARABLE_RATIO`), and it
    issues the GPU work, so the ranges hold the launches of most of it
    (:data:`CONTAINED_SHARE`). Ranges around one source line each (DLProf/pyprof markers) or
    around a logging call repeat too, but hold a sliver of the work."""
    low, high = percentile(durations, 10), percentile(durations, 90)  # (np.percentile: numpy.ma)
    if high > COMPARABLE_RATIO * max(float(low), 1.0):
        return False
    if launched.size == 0:
        return True
    inside = np.searchsorted(launched, ends) - np.searchsorted(launched, starts)
    return int(inside.sum()) >= CONTAINED_SHARE * launched.size


def step_breakdown(work: DeviceWork, found: FoundSteps | None = None) -> list[StepStat]:
    """Per step (:func:`find_steps`; failing those, a repeating kernel sequence): its window on
    the device and how busy the device was inside it.

    A step is timed on the device whenever it launched device work: the host runs ahead of the
    device (a step's launches return long before its kernels run) and pays its own stalls at
    other moments (a sync, the next batch), so host step ranges swing while the device does the
    same work each step. Work belongs to the step whose host window holds its launch call. A
    step's device window runs from the end of the previous step's work to the end of its own, so
    the device's idle time before a step's first kernel (waiting for the next batch) belongs to
    the step that waited. The first step's predecessor is not in the trace: its window starts
    where the host began it (or earlier device work ended, if later); the host's lead over the
    device makes it unlike the others, so per-step statistics use it only when it is alone.
    Without launch links a GPU step annotation gives the window, else the host range
    ("timed_on" says "host").
    """
    found = found if found is not None else find_steps(work.trace)
    if not found.steps:
        return _kernel_cycles(work)
    steps = found.steps
    source = found.source or PROFILER_STEPS
    first, last = _launched_work(work, steps)
    gpu_windows = _gpu_step_windows(work) if not np.any(last >= 0) else {}
    lo = np.empty(len(steps), dtype=np.int64)
    hi = np.empty(len(steps), dtype=np.int64)
    on_device = np.zeros(len(steps), dtype=np.bool_)
    for i, s in enumerate(steps):
        if last[i] >= 0:
            lo[i], hi[i], on_device[i] = first[i], last[i], True
            if i and on_device[i - 1] and hi[i - 1] < hi[i]:
                lo[i] = hi[i - 1]  # the device's idle time before a step belongs to it
        elif s.name in gpu_windows:
            (lo[i], hi[i]), on_device[i] = gpu_windows[s.name], True
            if i and on_device[i - 1]:
                lo[i] = min(lo[i], hi[i - 1])  # the idle time before a step belongs to it
        else:
            lo[i], hi[i] = s.start_ns, s.end_ns
    if on_device[0] and last[0] >= 0:
        lo[0] = _first_window_start(work, steps[0].start_ns, int(first[0]))
    busy = covered_ns(work.busy, lo, hi)
    return [
        StepStat(
            s.name,
            s.number,
            int(lo[i]),
            int(hi[i]),
            int(busy[i]),
            "device" if on_device[i] else "host",
            source,
        )
        for i, s in enumerate(steps)
    ]


def _first_window_start(work: DeviceWork, host_start_ns: int, first_ns: int) -> int:
    """Where the first step's device window starts: its predecessor is not in the trace, so the
    device idle before its first kernel counts from the moment the host began the step, or from
    the end of earlier device work if that came later (the device was free for this step)."""
    ev = work.trace.events
    earlier = work.rows[ev.start_ns[work.rows] < first_ns]
    reach = int(ev.end_ns[earlier].max()) if earlier.size else host_start_ns
    return min(first_ns, max(host_start_ns, reach))


def _launched_work(
    work: DeviceWork, steps: list[Step]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """First start and last end of the device work each step launched (-1: none), by the host
    time of each launch call (``Events.link``)."""
    ev = work.trace.events
    count = len(steps)
    first = np.full(count, -1, dtype=np.int64)
    last = np.full(count, -1, dtype=np.int64)
    launcher = ev.link[work.rows]
    linked = launcher >= 0
    if not np.any(linked):
        return first, last
    rows = work.rows[linked]
    launched_at = ev.start_ns[launcher[linked]]
    host_start = np.array([s.start_ns for s in steps], dtype=np.int64)
    host_end = np.array([s.end_ns for s in steps], dtype=np.int64)
    index = np.searchsorted(host_start, launched_at, side="right") - 1
    inside = (index >= 0) & (launched_at < host_end[np.maximum(index, 0)])
    index, rows = index[inside], rows[inside]
    if not index.size:
        return first, last
    big = np.iinfo(np.int64).max
    lowest = np.full(count, big, dtype=np.int64)
    np.minimum.at(lowest, index, ev.start_ns[rows])
    np.maximum.at(last, index, ev.end_ns[rows])
    first = np.where(lowest < big, lowest, -1)
    return first, last


def _gpu_step_windows(work: DeviceWork) -> dict[str, tuple[int, int]]:
    """``ProfilerStep#N`` ranges Kineto projects onto the device (``gpu_user_annotation``)."""
    trace, ev = work.trace, work.trace.events
    windows: dict[str, tuple[int, int]] = {}
    for row in np.flatnonzero((ev.kind == Kind.GPU_ANNOTATION) & (ev.device == work.device)):
        name = trace.names[int(ev.name_id[row])]
        if name.startswith("ProfilerStep#"):
            start = int(ev.start_ns[row])
            windows[name] = (start, start + int(ev.dur_ns[row]))
    return windows


def _kernel_cycles(work: DeviceWork) -> list[StepStat]:
    """Iterations found from the device's kernel names alone, for traces with neither steps nor
    repeated ranges: a loop launches the same kernels in the same order every iteration, so the
    name sequence repeats with the loop's period. The shortest cycle length at which (nearly)
    every kernel recurs one cycle later is the iteration (a layer's cycle fails at the layers'
    edges; multiples of the iteration match as well but are not the shortest). Cycles start at
    the kernel that most often follows idle time: between iterations the device waits for the
    host (the next batch, the optimizer's sync), inside one it rarely does."""
    ev = work.trace.events
    kernels = work.rows[ev.kind[work.rows] == Kind.KERNEL]
    period = _cycle_length(ev.name_id[kernels])
    if period is None:
        return []
    starts = ev.start_ns[kernels]
    reach = np.maximum.accumulate(ev.end_ns[kernels])
    idle_before = np.zeros(kernels.size, dtype=np.float64)
    idle_before[1:] = np.maximum(starts[1:] - reach[:-1], 0)
    by_phase = np.bincount(np.arange(kernels.size) % period, weights=idle_before)
    phase = int(np.argmax(by_phase))
    if not _waits_between(idle_before, period, phase):
        return []
    bounds = np.arange(phase, kernels.size + 1, period)
    if bounds.size - 1 < MIN_REPEATS - 1:
        return []
    lo = np.array([reach[b - 1] if b else starts[b] for b in bounds[:-1].tolist()])
    hi = reach[bounds[1:] - 1]
    busy = covered_ns(work.busy, lo.astype(np.int64), hi.astype(np.int64))
    source = f"repeating kernel sequence ({period} kernels per iteration)"
    return [
        StepStat(f"iteration {k}", k, int(lo[k]), int(hi[k]), int(busy[k]), "device", source)
        for k in range(bounds.size - 1)
    ]


#: The device waits between iterations: the mean idle time before a cycle's first kernel is at
#: least this many times the mean idle time before the others.
BOUNDARY_RATIO = 4.0


def _waits_between(idle_before: NDArray[np.float64], period: int, phase: int) -> bool:
    """Whether the cycles are iterations rather than layers: between iterations the device
    waits for the host (the next batch, the optimizer's sync, the next request), so the idle
    time before each cycle's first kernel stands out on average (:data:`BOUNDARY_RATIO`); the
    layers of one forward pass repeat the same kernels too, with nothing between them but the
    launch latency every kernel waits."""
    at = np.arange(idle_before.size) % period == phase
    at[0] = False  # before the first kernel: whatever preceded the trace
    if not at.any():
        return False
    boundary = float(np.mean(idle_before[at]))
    inside = float(np.mean(idle_before[~at])) if (~at).any() else 0.0
    return boundary > 0 and boundary >= BOUNDARY_RATIO * inside


def _cycle_length(ids: NDArray[np.int32]) -> int | None:
    """The shortest period at which the name sequence repeats (see :func:`_kernel_cycles`)."""
    n = int(ids.size)
    if n < 2 * MIN_REPEATS:
        return None
    order = np.argsort(ids, kind="stable")
    same = ids[order][1:] == ids[order][:-1]
    distances = np.diff(order)[same]
    distances = distances[(distances > 0) & (distances <= n // MIN_REPEATS)]
    if not distances.size:
        return None
    values, counts = np.unique(distances, return_counts=True)
    tried = values[np.argsort(-counts, kind="stable")[:_CYCLE_CANDIDATES]].tolist()
    match = {int(k): float(np.mean(ids[k:] == ids[:-k])) for k in tried}
    best = max(match.values())
    if best < CYCLE_MATCH:
        return None
    return min(k for k, m in match.items() if m >= best - 0.01)


def on_demand_migration(trace: Trace, rows: NDArray[np.int64]) -> NDArray[np.bool_]:
    """Which rows are unified-memory migrations the driver started on its own: a processor touched
    a page resident elsewhere (``Page fault``), the driver moved its neighbours too (``Speculative
    prefetch``), evicted pages to make room, or followed access counters. Only ``User prefetch``
    (``cudaMemPrefetchAsync``) is launched by the program. Readers name migrations
    ``Unified Memory HtoD (Page fault)``."""
    names = trace.names
    ids = trace.events.name_id[rows]
    used = distinct(ids)
    flag = np.zeros(len(names), dtype=np.bool_)
    flag[used] = [_ON_DEMAND.match(names[i]) is not None for i in used.tolist()]
    return flag[ids]


_ON_DEMAND = re.compile(r"^Unified Memory \w+ \((?!User prefetch\))")
