"""The trace model: what every reader produces and every analysis consumes.

Contract:

* Times are integer nanoseconds (``int64``) on the trace's own clock. Units are in the names.
* Events are columnar (:class:`Events`, one numpy array per field, all of one length), sorted by
  ``start_ns``. Names are interned: ``Events.name_id`` indexes ``Trace.names``.
* Each event has exactly one :class:`Kind`. Device-side events (kernel, memcpy, memset, sync, GPU
  annotation) carry ``device >= 0`` and ``stream >= 0``; host-side events carry ``-1`` in both.
* "Not recorded" is explicit: ``-1`` for ids, sizes and counts, ``NaN`` for ratios; never ``0``.
* Id columns (:data:`ID_COLUMNS`: ``pid``, ``tid``, ``stream``, ``correlation``,
  ``external_id``, ``link``, ``python_id``, ``python_parent_id``, ``grid_blocks``,
  ``block_threads``) and ``bytes`` are ``int32`` when every value fits, else ``int64``
  (:func:`narrow`; a Kineto trace's 64-bit thread ids keep ``tid`` wide, one copy of 2 GiB
  keeps ``bytes`` wide): a table of millions of events takes ~40% less memory. Code reading them
  must not assume a width: widen (``astype(np.int64)``) before arithmetic that can leave 32 bits
  (shifts, products, offsets, masks such as ``& 0xFFFFFFFF``); numpy's sums widen by themselves.
  ``device`` is ``int32``; times are ``int64``.
* ``Events.link`` joins a launch (runtime call) and the device work it launched, both ways: for a
  device event it is the row of its runtime call, for a runtime call the row of its (first) device
  event, ``-1`` when unknown. Readers fill it from correlation ids or flow events.
* ``Events.extra`` (a read-only mapping, :class:`Extras`) holds the few arguments only some
  events have, shared among equal values: never mutate a value.
* :meth:`Events.take` of an ascending run of rows (a window) gives views of the columns, not
  copies: never write into a window's columns.

Readers know formats; nothing here does.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from enum import IntEnum
from functools import cached_property
from typing import Any

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope._arrays import among, distinct

I64 = NDArray[np.int64]
#: An id column: ``int32`` where every value fits, else ``int64`` (see :func:`narrow`).
Ids = NDArray[np.int32] | NDArray[np.int64]


class Kind(IntEnum):
    """What an event is. Stored as ``uint8`` in :attr:`Events.kind`."""

    KERNEL = 0
    MEMCPY = 1
    MEMSET = 2
    SYNC = 3  # device-side record of a synchronisation (Kineto ``cuda_sync``)
    RUNTIME = 4  # CUDA/HIP runtime or driver call on a host thread
    CPU_OP = 5  # framework operator (``aten::mm``)
    PYTHON = 6  # Python frame (``file.py(12): fn``)
    ANNOTATION = 7  # host-side user range (``ProfilerStep#3``, ``nccl:all_reduce``)
    GPU_ANNOTATION = 8  # a user range projected onto a device stream; not device work
    HOST_RUNNING = 9  # a host thread on a CPU (OS scheduling trace or CPU samples)


#: Kinds whose intervals make a device busy.
BUSY_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)


class CopyDirection(IntEnum):
    """Direction of a memory copy; ``NONE`` for everything that is not a memcpy."""

    NONE = 0
    H2D = 1
    D2H = 2
    D2D = 3
    P2P = 4
    OTHER = 5


_COLUMNS: dict[str, tuple[type[np.generic], int | float | bool]] = {
    "kind": (np.uint8, 0),
    "name_id": (np.int32, 0),
    "start_ns": (np.int64, 0),
    "dur_ns": (np.int64, 0),
    "pid": (np.int32, -1),
    "tid": (np.int32, -1),
    "device": (np.int32, -1),
    "stream": (np.int32, -1),
    "correlation": (np.int32, -1),
    "external_id": (np.int32, -1),
    "link": (np.int32, -1),
    "bytes": (np.int32, -1),
    "copy_direction": (np.uint8, 0),
    "pageable": (np.bool_, False),
    "python_id": (np.int32, -1),
    "python_parent_id": (np.int32, -1),
    "grid_blocks": (np.int32, -1),
    "block_threads": (np.int32, -1),
    "occupancy_pct": (np.float32, float("nan")),
}


#: Columns stored in 32 bits when every value fits (ids, row indices, counts, copy sizes).
ID_COLUMNS = frozenset(
    (
        "pid",
        "tid",
        "stream",
        "correlation",
        "external_id",
        "link",
        "python_id",
        "python_parent_id",
        "grid_blocks",
        "block_threads",
        "bytes",
    )
)
_I32 = np.iinfo(np.int32)


def narrow(values: Any) -> Ids:
    """An integer column as ``int32`` when every value fits (a copy only when it changes
    width), else as ``int64``. Ids and row indices rarely pass 2^31, and half the width is half
    the memory on a table of tens of millions of rows."""
    column = np.asarray(values)
    if column.size == 0 or column.dtype == np.int32:
        same: NDArray[np.int32] = column.astype(np.int32, copy=False)
        return same
    if column.dtype.kind not in "iu":
        return np.asarray(column, dtype=np.int64)
    low, high = column.min(), column.max()
    if low >= _I32.min and high <= _I32.max:
        return column.astype(np.int32)
    wide: NDArray[np.int64] = np.asarray(column, dtype=np.int64)
    return wide


class Extras(Mapping[int, dict[str, Any]]):
    """:attr:`Events.extra`: a read-only mapping of row -> arguments, kept as two arrays (the
    rows, ascending, and for each the index of its dict) and the distinct dicts once. Readers
    share one dict among equal arguments (the same shapes recur at every step): a Python dict of
    a million rows took ~16 bytes a row of the table more than these arrays."""

    __slots__ = ("_ids", "_rows", "_values")

    def __init__(self, rows: Any, ids: Any, values: list[dict[str, Any]]) -> None:
        self._rows = narrow(rows)
        self._ids: NDArray[np.int32] = np.asarray(ids, dtype=np.int32)
        self._values = values

    @classmethod
    def of(cls, extra: Mapping[int, dict[str, Any]]) -> Extras:
        """``extra`` as :class:`Extras` (itself when it is one already)."""
        if isinstance(extra, Extras):
            return extra
        rows = np.fromiter(extra.keys(), dtype=np.int64, count=len(extra))
        index: dict[int, int] = {}
        values: list[dict[str, Any]] = []
        ids = np.empty(len(extra), dtype=np.int32)
        for i, value in enumerate(extra.values()):
            j = index.setdefault(id(value), len(values))
            if j == len(values):
                values.append(value)
            ids[i] = j
        order = np.argsort(rows, kind="stable")
        return cls(rows[order], ids[order], values)

    def __getitem__(self, row: int) -> dict[str, Any]:
        i = int(np.searchsorted(self._rows, row))
        if i < self._rows.size and self._rows[i] == row:
            return self._values[int(self._ids[i])]
        raise KeyError(row)

    def __iter__(self) -> Iterator[int]:
        return iter(self._rows.tolist())

    def __len__(self) -> int:
        return int(self._rows.size)

    def items(self) -> Any:  # an ItemsView's iteration, without one lookup per row
        values = self._values
        return [
            (r, values[i]) for r, i in zip(self._rows.tolist(), self._ids.tolist(), strict=True)
        ]

    def values(self) -> Any:
        values = self._values
        return [values[i] for i in self._ids.tolist()]

    @property
    def rows(self) -> Ids:
        """The rows that have arguments, ascending."""
        return self._rows

    @classmethod
    def unsorted(cls, rows: Any, ids: Any, values: list[dict[str, Any]]) -> Extras:
        """From rows in any order (each once) and the index in ``values`` of each one's dict."""
        order = np.argsort(rows, kind="stable")
        return cls(np.asarray(rows)[order], np.asarray(ids)[order], values)

    def lookup(self, rows: Any) -> list[dict[str, Any] | None]:
        """The arguments of each of ``rows`` (None where it has none), in one search."""
        rows = np.asarray(rows, dtype=np.int64)
        if self._rows.size == 0:
            return [None] * int(rows.size)
        at = np.minimum(np.searchsorted(self._rows, rows), self._rows.size - 1)
        found = self._rows[at] == rows
        values = self._values
        return [
            values[i] if ok else None
            for i, ok in zip(self._ids[at].tolist(), found.tolist(), strict=True)
        ]

    def value_ids(self, rows: Any) -> NDArray[np.int32]:
        """For each of ``rows``, the index of its arguments in :attr:`distinct` (-1: none)."""
        rows = np.asarray(rows, dtype=np.int64)
        if self._rows.size == 0:
            return np.full(rows.shape, -1, dtype=np.int32)
        at = np.minimum(np.searchsorted(self._rows, rows), self._rows.size - 1)
        found: NDArray[np.int32] = np.where(self._rows[at] == rows, self._ids[at], -1).astype(
            np.int32
        )
        return found

    @property
    def distinct(self) -> list[dict[str, Any]]:
        """The distinct argument dicts (shared by the rows that have equal arguments)."""
        return self._values

    def remapped(self, new_row: NDArray[Any]) -> Extras:
        """The arguments at their rows in another table: row ``r`` goes to ``new_row[r]``, and
        is dropped where that is negative."""
        moved = new_row[self._rows]
        kept = moved >= 0
        return Extras.unsorted(moved[kept], self._ids[kept], self._values)

    def window(self, lo: int, hi: int) -> Extras:
        """The arguments of rows ``lo`` to ``hi`` (excluded), at rows counted from ``lo``."""
        a, b = np.searchsorted(self._rows, [lo, hi]).tolist()
        return Extras(self._rows[a:b] - lo, self._ids[a:b], self._values)

    def __reduce__(self) -> Any:
        return (Extras, (self._rows, self._ids, self._values))


class Events(msgspec.Struct, dict=True):
    """Columnar event table. Every array has the same length; rows are sorted by ``start_ns``."""

    kind: NDArray[np.uint8]
    name_id: NDArray[np.int32]
    start_ns: I64
    dur_ns: I64
    pid: Ids
    tid: Ids
    device: NDArray[np.int32]
    stream: Ids
    correlation: Ids
    external_id: Ids
    link: Ids
    bytes: Ids
    copy_direction: NDArray[np.uint8]
    pageable: NDArray[np.bool_]
    python_id: Ids
    python_parent_id: Ids
    grid_blocks: Ids
    block_threads: Ids
    occupancy_pct: NDArray[np.float32]
    #: Sparse per-row arguments that only some events have (recorded shapes, collective sizes).
    #: An :class:`Extras` once built by :meth:`from_columns` or :meth:`take` (a plain dict where
    #: a caller builds the struct directly).
    extra: Mapping[int, dict[str, Any]] = msgspec.field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    @cached_property
    def end_ns(self) -> I64:
        return self.start_ns + self.dur_ns

    @classmethod
    def from_columns(
        cls, n: int, columns: dict[str, Any], extra: Mapping[int, dict[str, Any]]
    ) -> Events:
        """Build a table of ``n`` rows; columns not given take their "not recorded" value."""
        arrays: dict[str, Any] = {}
        for name, (dtype, missing) in _COLUMNS.items():
            given = columns.get(name)
            if given is None:
                arrays[name] = np.full(n, missing, dtype=dtype)
            elif name in ID_COLUMNS:
                arrays[name] = narrow(given)
            else:
                arrays[name] = np.asarray(given, dtype=dtype)
        return cls(**arrays, extra=Extras.of(extra))

    def take(self, rows: NDArray[np.intp]) -> Events:
        """A new table with ``rows`` in that order; ``link`` and ``extra`` are remapped.

        Rows that are one ascending run (a window from some row to another) are views of this
        table's columns, not copies: only ``link`` is new."""
        if rows.size and rows[-1] - rows[0] == rows.size - 1 and bool(np.all(np.diff(rows) == 1)):
            return self._slice(int(rows[0]), int(rows[-1]) + 1)
        # Row indices: 32 bits below 2^31 rows, as the link column itself (see ``narrow``).
        index = np.int32 if len(self) <= _I32.max else np.int64
        remap = np.full(len(self), -1, dtype=index)
        remap[rows] = np.arange(rows.shape[0], dtype=index)
        arrays = {name: getattr(self, name)[rows] for name in _COLUMNS}
        old_link = arrays["link"]
        arrays["link"] = narrow(np.where(old_link >= 0, remap[np.maximum(old_link, 0)], -1))
        return Events(**arrays, extra=Extras.of(self.extra).remapped(remap))

    def _slice(self, lo: int, hi: int) -> Events:
        arrays = {name: getattr(self, name)[lo:hi] for name in _COLUMNS}
        link = arrays["link"]
        inside = (link >= lo) & (link < hi)
        arrays["link"] = np.where(inside, link - lo, -1).astype(link.dtype)
        return Events(**arrays, extra=Extras.of(self.extra).window(lo, hi))

    def of_kind(self, *kinds: Kind) -> NDArray[np.bool_]:
        """Boolean mask of the rows whose kind is one of ``kinds``."""
        return among(self.kind, kinds)


class DeviceInfo(msgspec.Struct, frozen=True):
    """What the trace says about one device. ``None`` means the trace did not say."""

    index: int  # the device id used in ``Events.device``
    name: str | None
    vendor: str | None  # "nvidia", "amd", "mtia"
    num_sms: int | None
    total_memory_bytes: int | None
    compute_capability: str | None


class Step(msgspec.Struct, frozen=True):
    """One profiler step (``ProfilerStep#12``) or step-like range, on the host clock."""

    name: str
    number: int
    start_ns: int
    end_ns: int

    @property
    def dur_ns(self) -> int:
        return self.end_ns - self.start_ns


class CounterSeries(msgspec.Struct):
    """One hardware counter of one GPU sampled over time (Nsight Systems ``GPU_METRICS``, CUPTI
    PM sampling in a Kineto or ``.pftrace`` trace). ``name`` is the counter as the tool names
    it; ``value[i]`` holds from ``time_ns[i]`` to the next sample (NaN: not measured)."""

    device: int
    name: str
    time_ns: I64  # on the trace's clock, ascending
    value: NDArray[np.float64]
    source: str  # "nsys", "kineto", "pftrace"


class Trace(msgspec.Struct):
    """One profile of one process (one rank): the unit every analysis works on."""

    source: str
    format: str  # "kineto", "nsys", ...
    schema: str  # reader-specific generation, e.g. "kineto-2021", "kineto-float-us"
    rank: int | None
    world_size: int | None
    devices: dict[int, DeviceInfo]
    names: list[str]
    events: Events
    steps: list[Step]
    warnings: list[str] = msgspec.field(default_factory=list)
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    #: The allocator's events the trace records (Kineto ``[memory]``, Nsight Systems memory
    #: usage), None when it records none.
    memory: MemoryEvents | None = None
    #: Sampled hardware counters (empty when the trace has none; see :class:`CounterSeries`).
    counters: list[CounterSeries] = msgspec.field(default_factory=list)

    def name(self, row: int) -> str:
        return self.names[int(self.events.name_id[row])]

    @property
    def device_ids(self) -> list[int]:
        """Devices that have device-side work, in ascending order."""
        ev = self.events
        ids = distinct(ev.device[ev.of_kind(*BUSY_KINDS)])
        return [int(i) for i in ids]


class CounterRule(msgspec.Struct, frozen=True):
    """One of Nsight Compute's own rule results for a kernel, as the report words it."""

    name: str  # "SOLBottleneck", "TheoreticalOccupancy", ...
    type: str  # "OPT" (optimisation), "WRN", "INF", "ERR"
    text: str
    speedup_type: str | None  # "global" (share of the kernel's duration) or "local"
    speedup_pct: float | None  # the rule's estimated speedup, None when it gives none


class CounterKernel(msgspec.Struct, frozen=True):
    """One kernel as Nsight Compute measured it. ``None``: the report did not have the metric."""

    id: int
    name: str
    device: int | None
    duration_ns: int | None
    sm_throughput_pct: float | None  # "Compute (SM) Throughput"
    memory_throughput_pct: float | None
    dram_throughput_pct: float | None
    achieved_occupancy_pct: float | None
    theoretical_occupancy_pct: float | None
    waves_per_sm: float | None
    grid_blocks: int | None
    block_threads: int | None
    metrics: dict[str, float] = msgspec.field(default_factory=dict)  # every numeric metric, by name
    rules: list[CounterRule] = msgspec.field(default_factory=list)  # the report's own rule results
    num_sms: int | None = None


class KernelCounters(msgspec.Struct):
    """A kernel-level report (Nsight Compute): measured counters, no timeline."""

    source: str
    format: str  # "ncu-csv", "ncu-csv-raw"
    device_name: str | None
    kernels: list[CounterKernel]
    warnings: list[str] = msgspec.field(default_factory=list)
    schema: str = ""  # "ncu-long-rules", "ncu-long", "ncu-raw"


class GpuSamples(msgspec.Struct):
    """Sampled utilisation of one GPU. Arrays share ``time_ns``; NaN marks a missing value."""

    gpu: int
    name: str | None
    time_ns: I64
    utilization_pct: NDArray[np.float64]  # coarse "GPU util": share of time any kernel ran
    sm_active_pct: NDArray[np.float64] | None = None  # DCGM SM active, when recorded
    dram_active_pct: NDArray[np.float64] | None = None
    memory_used_bytes: NDArray[np.float64] | None = None
    memory_total_bytes: int | None = None
    power_w: NDArray[np.float64] | None = None
    uuid: str | None = None


class SampleSet(msgspec.Struct):
    """A log of sampled GPU metrics (nvidia-smi, NVML, DCGM): no timeline of kernels."""

    source: str
    format: str  # "nvidia-smi-csv", "nvml-jsonl", "dcgmi-dmon", "prometheus"
    gpus: list[GpuSamples]
    warnings: list[str] = msgspec.field(default_factory=list)


class Job(msgspec.Struct):
    """All the inputs of one job: timelines (one per rank or process), and any kernel counter
    reports and sampled metrics given with them."""

    source: str
    traces: list[Trace]
    counters: list[KernelCounters] = msgspec.field(default_factory=list)
    samples: list[SampleSet] = msgspec.field(default_factory=list)
    notes: list[str] = msgspec.field(default_factory=list)  # warnings about the job as a whole
    memory: list[MemoryRecord] = msgspec.field(default_factory=list)  # allocator snapshots

    @property
    def warnings(self) -> list[str]:
        found = list(self.notes)
        found += [w for t in self.traces for w in t.warnings]
        found += [w for m in self.memory for w in m.warnings]
        found += [w for c in self.counters for w in c.warnings]
        found += [w for s in self.samples for w in s.warnings]
        return found

    @classmethod
    def merge(cls, source: str, parts: list[Job]) -> Job:
        traces = [t for p in parts for t in p.traces]
        traces.sort(key=lambda t: (t.rank if t.rank is not None else 1 << 30, t.source))
        return cls(
            source=source,
            traces=traces,
            counters=[c for p in parts for c in p.counters],
            samples=[s for p in parts for s in p.samples],
            memory=[m for p in parts for m in p.memory],
        )


# --- device memory: the caching allocator's events and state ------------------------------------


class MemoryAction(IntEnum):
    """What one allocator event did (PyTorch's ``TraceEntry`` actions), as ``uint8``."""

    ALLOC = 0  # a tensor's block handed out
    FREE_REQUESTED = 1  # freed by the program; held until the streams that used it are done
    FREE_COMPLETED = 2  # back in the allocator's cache
    SEGMENT_ALLOC = 3  # cudaMalloc: reserved memory grows
    SEGMENT_FREE = 4  # cudaFree: reserved memory shrinks
    SEGMENT_MAP = 5  # expandable segments: pages mapped
    SEGMENT_UNMAP = 6
    OOM = 7  # a request that failed: ``size_bytes`` asked, ``address`` the device's free bytes
    SNAPSHOT = 8  # the moment a snapshot was taken


class BlockState(IntEnum):
    ALLOCATED = 0  # "active_allocated"
    PENDING_FREE = 1  # "active_pending_free": freed, waiting for its streams
    INACTIVE = 2  # cached, free


class MemoryFrame(msgspec.Struct, frozen=True):
    file: str
    line: int
    function: str


class MemoryEvents(msgspec.Struct, dict=True):
    """Allocator events, one numpy array per field, in recorded order. ``stack`` indexes
    ``MemoryRecord.stacks`` (-1: none recorded); ``tid`` is the host thread (-1: not recorded);
    ``allocated_bytes``/``reserved_bytes`` are the totals after the event when the format
    records them (Kineto, Nsight Systems), else -1. Times are ns on the source's clock, -1 when
    not recorded."""

    action: NDArray[np.uint8]
    device: NDArray[np.int32]
    address: I64
    size_bytes: I64
    stream: I64
    time_ns: I64
    stack: NDArray[np.int32]
    tid: I64
    allocated_bytes: I64
    reserved_bytes: I64

    def __len__(self) -> int:
        return len(self.action)

    @classmethod
    def from_columns(cls, n: int, columns: dict[str, Any]) -> MemoryEvents:
        """Events from the columns given; a column not given is "not recorded" (-1)."""
        types: dict[str, type[np.generic]] = {f: np.int64 for f in cls.__struct_fields__}
        types |= {"action": np.uint8, "device": np.int32, "stack": np.int32}
        made: dict[str, Any] = {
            name: np.asarray(columns[name], dtype=dtype)
            if name in columns
            else np.full(n, -1, dtype=dtype)
            for name, dtype in types.items()
        }
        return cls(**made)

    def take(self, rows: NDArray[np.intp] | NDArray[np.bool_]) -> MemoryEvents:
        return MemoryEvents(**{f: getattr(self, f)[rows] for f in self.__struct_fields__})


class MemorySegments(msgspec.Struct, dict=True):
    """The allocator's segments (cudaMalloc'd ranges) at the snapshot, one row each."""

    device: NDArray[np.int32]
    address: I64
    size_bytes: I64
    stream: I64
    expandable: NDArray[np.bool_]
    graph_pool: NDArray[np.bool_]  # in a CUDA-graph private pool (pool id other than (0, 0))


class MemoryBlocks(msgspec.Struct, dict=True):
    """The blocks the segments are cut into at the snapshot: ``segment`` is the row in
    :class:`MemorySegments`; ``state`` a :class:`BlockState`; ``stack`` as in MemoryEvents."""

    segment: NDArray[np.int32]
    address: I64
    size_bytes: I64
    requested_bytes: I64
    state: NDArray[np.uint8]
    stack: NDArray[np.int32]


class MemoryAnnotation(msgspec.Struct, frozen=True):
    """A user range the allocator recorded (``external_annotations``: ``Optimizer.step``...)."""

    name: str
    device: int
    start_ns: int
    end_ns: int  # -1: never closed


class MemoryRecord(msgspec.Struct):
    """One allocator snapshot (``torch.cuda.memory._snapshot()``): the segments and blocks at
    the moment it was taken, the events recorded before it, and where each allocation came
    from (``stacks``: frame ids, innermost first, into ``frames``)."""

    source: str
    format: str  # "torch-snapshot"
    schema: str  # "snapshot-2.1+" (time stamps, annotations), "snapshot-old" (block histories)
    segments: MemorySegments
    blocks: MemoryBlocks
    events: MemoryEvents
    frames: list[MemoryFrame]
    stacks: list[list[int]]
    annotations: list[MemoryAnnotation] = msgspec.field(default_factory=list)
    settings: dict[str, Any] = msgspec.field(default_factory=dict)  # allocator_settings
    warnings: list[str] = msgspec.field(default_factory=list)
