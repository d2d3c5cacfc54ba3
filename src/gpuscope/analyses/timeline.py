"""Where device time went: busy/idle, the split by kind of work, overlap, kernels, streams, steps.

Contract: every function is pure. :func:`device_work` builds the per-device view that the others
take; each returns a frozen struct of integer nanoseconds (and derived percentages).

Definitions (the same as HTA's where HTA has one):

* span: first device event start to last device event end on that device.
* busy: the union of kernel, memcpy and memset intervals over all streams; idle = span - busy.
* compute / communication / memcpy / memset: the union of that class's intervals (they overlap
  each other); the *exclusive* split assigns each busy nanosecond to one class, in the order
  compute > communication > memcpy > memset, so that the split plus idle sums to the span.
* overlap: the share of communication time during which compute also runs.
"""

from __future__ import annotations

from enum import IntEnum

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope._arrays import among, distinct
from gpuscope.analyses.intervals import (
    Intervals,
    covered_ns,
    intersection,
    union,
    weighted_pieces,
)
from gpuscope.classify import communication_of
from gpuscope.model import BUSY_KINDS, Kind, Trace

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

    @property
    def span_start_ns(self) -> int:
        return int(self.busy.start_ns[0])

    @property
    def span_end_ns(self) -> int:
        return int(self.busy.end_ns[-1])

    @property
    def span_ns(self) -> int:
        return self.span_end_ns - self.span_start_ns


def device_work(trace: Trace, device: int) -> DeviceWork:
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
    return DeviceWork(trace, device, rows.astype(np.int64), work_class, busy, by_class)


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


class StepStat(msgspec.Struct, frozen=True):
    name: str
    number: int
    start_ns: int  # of the step's window on the device clock
    end_ns: int
    busy_ns: int

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def busy_pct(self) -> float:
        return 100.0 * self.busy_ns / self.dur_ns if self.dur_ns > 0 else float("nan")


def step_breakdown(work: DeviceWork) -> list[StepStat]:
    """Per profiler step: its duration and how busy the device was inside it.

    A step's window on the device is its GPU-side annotation when the trace has one (kernels of a
    step run after the host has moved on), else the host-side step range; each window then starts
    where the previous one ended, so that idle time between steps is counted in the step that
    waited.
    """
    trace = work.trace
    if not trace.steps:
        return []
    ev = trace.events
    gpu_windows: dict[str, tuple[int, int]] = {}
    for row in np.flatnonzero((ev.kind == Kind.GPU_ANNOTATION) & (ev.device == work.device)):
        name = trace.names[int(ev.name_id[row])]
        if name.startswith("ProfilerStep#"):
            start = int(ev.start_ns[row])
            gpu_windows[name] = (start, start + int(ev.dur_ns[row]))
    windows = [gpu_windows.get(s.name, (s.start_ns, s.end_ns)) for s in trace.steps]
    lo = np.array([w[0] for w in windows], dtype=np.int64)
    hi = np.array([w[1] for w in windows], dtype=np.int64)
    # Steps tile the device's time: what idles between two steps' work (the next batch loading)
    # belongs to the step that waited for it.
    lo[1:] = np.minimum(lo[1:], hi[:-1])
    busy = covered_ns(work.busy, lo, hi)
    return [
        StepStat(s.name, s.number, int(lo[i]), int(hi[i]), int(busy[i]))
        for i, s in enumerate(trace.steps)
    ]
