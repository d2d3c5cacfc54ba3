"""One ``.pftrace`` decoded into the model (see the package docstring for what becomes what).

The C walker's columns are read by :mod:`._columns` where it is built; else (and wherever the
walker declines a file) the packets are decoded by protobuf and walked once here, collecting plain
lists, the walker's pure-Python twin. Either way the Kineto reader's column builder
(:class:`~gpuscope.readers.kineto._columns.Columns`) then makes the table, the launch links, the
steps and the devices exactly as it does for the same run's JSON, so that the two diagnose alike.
"""

from __future__ import annotations

import re
from collections import deque
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from gpuscope.errors import CorruptInputError, EmptyTraceError
from gpuscope.model import CounterSeries, Kind, Trace
from gpuscope.readers.kineto._columns import Columns
from gpuscope.readers.kineto._shape import SKIP, Args, Document, LenientArgs
from gpuscope.readers.kineto._values import coerce_args, extras_of
from gpuscope.readers.pftrace import schema as pb

#: What a ``.pftrace`` does not carry, so what no finding can be made from.
NOT_CARRIED = (
    "copy direction and pinned or pageable host memory (copies are named Memcpy)",
    "[memory] events (allocations, memory in use)",
    "rank and world size (distributedInfo)",
    "device properties (GPU name, SMs, memory: pass --gpu NAME for peaks and prices)",
    "the External id of GPU work",
)

#: What the diagnosis says it cannot find from a ``.pftrace`` (the findings :data:`NOT_CARRIED`
#: would need).
NOT_CARRIED_WARNING = (
    "{path}: a .pftrace carries no copy direction, [memory] events, distributedInfo or device"
    " properties: no finding about host-to-device copies or pageable memory, the allocator or"
    " memory in use, or ranks, and no peaks or prices unless --gpu names the GPU"
)
#: Why a trace whose slices are all of kinds the model does not keep is empty.
NO_PROFILER_EVENTS = "no profiler events (no CPU ops, kernels or runtime calls)"
_GPU_PROCESS = re.compile(r"^GPU (\d+)$")
STREAM_NAME = re.compile(r"stream (-?\d+)\s*$")
_SYNC_NAMES = frozenset(
    {"Unknown", "Event Sync", "Stream Wait Event", "Stream Sync", "Context Sync"}
)
STAGE_CATEGORY = {
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "Annotation": "gpu_user_annotation",
}
#: Arguments that make a row's extras (shapes, collectives, call stacks, peer copies).
EXTRA_KEYS = frozenset({"Input Dims", "Collective name", "Call stack", "fromDevice", "toDevice"})
_ARGS_OF = msgspec.convert
#: Arguments that differ from row to row and are not kept as extras (ids, not shapes).
ID_NAMES = ("External id", "external id", "correlation", "Python id", "Python parent id", "cbid")
_ROW_KEYS = frozenset(ID_NAMES)


class Decoded(msgspec.Struct):
    trace: Trace
    packets: int
    lost_tail: bool


class _Rows:
    """The events read so far, one list per column."""

    def __init__(self) -> None:
        self.category: list[str | None] = []
        self.name: list[str] = []
        self.start: list[int] = []
        self.end: list[int] = []
        self.pid: list[int] = []
        self.tid: list[int] = []
        self.device: list[int] = []
        self.stream: list[int] = []
        self.correlation: list[int] = []
        self.args: list[dict[str, Any] | None] = []
        self.grid: list[int] = []
        self.block: list[int] = []
        self.bytes: list[int] = []

    def add(
        self,
        category: str | None,
        name: str,
        start: int,
        end: int,
        where: tuple[int, int, int, int],
        args: dict[str, Any] | None,
    ) -> int:
        self.category.append(category)
        self.name.append(name)
        self.start.append(start)
        self.end.append(end)
        pid, tid, device, stream = where
        self.pid.append(pid)
        self.tid.append(tid)
        self.device.append(device)
        self.stream.append(stream)
        self.correlation.append(-1)
        self.args.append(args)
        self.grid.append(-1)
        self.block.append(-1)
        self.bytes.append(-1)
        return len(self.name) - 1


class _Track(msgspec.Struct):
    pid: int
    tid: int
    name: str
    parent: int


def decode(path: Path, data: bytes, *, lost_tail: bool) -> Decoded:
    """Raises protobuf's ``DecodeError`` for bytes that are not a ``Trace``."""
    from gpuscope.readers.pftrace._columns import read_columns  # noqa: PLC0415 - a cycle

    fast = read_columns(path, data, lost_tail=lost_tail)
    if fast is not None:
        return fast
    message = pb.Trace.FromString(data)
    reader = PacketReader(path)  # the packets one by one, whatever their order
    for packet in message.packet:
        reader.packet(packet)
    del message
    return Decoded(reader.finish(lost_tail), reader.packets, lost_tail)


class PacketReader:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.packets = 0
        self.base_ns: int | None = None
        self.names: dict[int, str] = {}
        self.categories: dict[int, str] = {}
        self.stages: dict[int, str] = {}
        self.kernels: dict[int, str] = {}
        self.counter_names: dict[int, tuple[int, dict[int, str]]] = {}
        self.tracks: dict[int, _Track] = {}
        self.rows = _Rows()
        self.open: dict[int, deque[int]] = {}  # per track: its open begins, oldest first
        self.unclosed = 0
        self.unopened = 0
        self.launches: list[tuple[int, list[int]]] = []  # (runtime row, render event ids)
        self.flows: list[tuple[int, int]] = []  # (row, flow id)
        self.event_rows: dict[int, int] = {}  # render-stage event id -> row
        self.samples: dict[tuple[int, str], tuple[list[int], list[float]]] = {}
        self.has_categories = False
        self.nested: dict[bytes, Any] = {}

    # --- packets ---------------------------------------------------------------------------------

    def packet(self, packet: Any) -> None:
        self.packets += 1
        which = packet.WhichOneof("data")
        if which == "track_event":
            self.track_event(packet.timestamp, packet.track_event)
        elif which == "gpu_render_stage_event":
            self.render_stage(packet.timestamp, packet.gpu_render_stage_event)
        elif which == "gpu_counter_event":
            self.counter(packet.timestamp, packet.gpu_counter_event)
        elif which == "track_descriptor":
            self.track(packet.track_descriptor)
        elif which == "interned_data":
            self.interned(packet.interned_data)
        elif which == "clock_snapshot":
            for clock in packet.clock_snapshot.clocks:
                if clock.clock_id == pb.CLOCK_BOOTTIME:
                    self.base_ns = clock.timestamp

    def track(self, descriptor: Any) -> None:
        if descriptor.HasField("thread"):
            thread = descriptor.thread
            name = as_text(thread.thread_name or descriptor.name)
            self.tracks[descriptor.uuid] = _Track(
                thread.pid, thread.tid, name, descriptor.parent_uuid
            )
        else:
            process = descriptor.process
            name = as_text(process.process_name or descriptor.name)
            self.tracks[descriptor.uuid] = _Track(process.pid, -1, name, 0)

    def interned(self, data: Any) -> None:
        for entry in data.event_names:
            self.names[entry.iid] = as_text(entry.name)
        for entry in data.event_categories:
            self.categories[entry.iid] = as_text(entry.name)
            self.has_categories = True
        for spec in data.gpu_specifications:
            self.stages[spec.iid] = as_text(spec.name)
        for kernel in data.compute_kernels:
            self.kernels[kernel.iid] = as_text(kernel.demangled_name or kernel.name)
        for counters in data.gpu_counter_descriptors:
            named = {s.counter_id: as_text(s.name) for s in counters.counter_descriptor.specs}
            self.counter_names[counters.iid] = (counters.gpu_id, named)

    def track_event(self, timestamp: int, event: Any) -> None:
        kind = event.type
        uuid = event.track_uuid
        if kind == pb.SLICE_END:
            queue = self.open.get(uuid)
            if queue:
                self.rows.end[queue.popleft()] = timestamp
            else:
                self.unopened += 1
            return
        if kind != pb.SLICE_BEGIN:
            return
        name = self.names.get(event.name_iid, "") if event.name_iid else as_text(event.name)
        category = None
        if event.category_iids:
            category = self.categories.get(event.category_iids[0])
        elif event.categories:
            category = as_text(event.categories[0])
        annotations = event.debug_annotations
        args = annotation_values(annotations, self.nested) if annotations else None
        track = self.tracks.get(uuid)
        where = self.where(track, args)
        row = self.rows.add(category, name, timestamp, timestamp, where, args)
        queue = self.open.get(uuid)
        if queue is None:
            queue = self.open[uuid] = deque()
        queue.append(row)
        if args is not None and "correlation" in args:
            self.rows.correlation[row] = as_int(args["correlation"]) or -1
        if event.HasField("gpu_correlation"):
            ids = list(event.gpu_correlation.render_stage_submission_event_ids)
            if ids:
                self.launches.append((row, ids))
        elif event.flow_ids:
            self.flows.append((row, event.flow_ids[0]))

    def where(self, track: _Track | None, args: dict[str, Any] | None) -> tuple[int, int, int, int]:
        """pid, tid, device and stream of a slice on ``track``."""
        device = as_int(args.get("device")) if args else None
        lane = as_int(args.get("stream")) if args else None
        return where(self.tracks, track, device, lane)

    def render_stage(self, timestamp: int, stage: Any) -> None:
        stage_name = self.stages.get(stage.stage_iid, "")
        category = STAGE_CATEGORY.get(stage_name)
        if category is None:
            return  # graph event-record and host-callback nodes: no device work
        lane = self.stages.get(stage.hw_queue_iid, "")
        match = STREAM_NAME.search(lane)
        stream = int(match.group(1)) if match else int(stage.hw_queue_iid)
        if stage.name_iid:
            name = self.names.get(stage.name_iid, stage_name)
        elif stage.kernel_iid:
            name = self.kernels.get(stage.kernel_iid, stage_name)
        else:
            name = as_text(stage.name) or stage_name
        device = stage.gpu_id
        rows = self.rows
        row = rows.add(
            category,
            name,
            timestamp,
            timestamp + stage.duration,
            (device, stream, device, stream),
            None,
        )
        self.event_rows[stage.event_id] = row
        if category == "kernel" and stage.HasField("launch"):
            grid, block = stage.launch.grid_size, stage.launch.workgroup_size
            rows.grid[row] = grid.x * max(grid.y, 1) * max(grid.z, 1) or -1
            rows.block[row] = block.x * max(block.y, 1) * max(block.z, 1) or -1
        elif category in ("gpu_memcpy", "gpu_memset"):
            for extra in stage.extra_data:
                if extra.name == "bytes":
                    rows.bytes[row] = as_int(extra.value) or -1

    def counter(self, timestamp: int, event: Any) -> None:
        gpu, named = self.counter_names.get(event.counter_descriptor_iid, (event.gpu_id, {}))
        if event.HasField("counter_descriptor"):
            named = {s.counter_id: as_text(s.name) for s in event.counter_descriptor.specs}
        for counter in event.counters:
            value = getattr(counter, counter.WhichOneof("value") or "double_value")
            name = named.get(counter.counter_id, f"counter {counter.counter_id}")
            times, values = self.samples.setdefault((gpu, name), ([], []))
            times.append(timestamp)
            values.append(float(value))

    # --- the model ------------------------------------------------------------------------------

    def finish(self, lost_tail: bool) -> Trace:
        rows = self.rows
        if not rows.name:
            raise EmptyTraceError(
                self.path, "a Perfetto trace without slices or GPU render stages (no events)"
            )
        self.unclosed = sum(len(q) for q in self.open.values())
        base = self.base_ns or 0
        self._correlate()
        categories = [c if c is not None else self._guess(i) for i, c in enumerate(rows.category)]
        columns = Columns(lenient=False)
        columns.events = len(categories)
        codes = np.array([columns._kind_code(c) for c in categories], dtype=np.uint8)
        keep = np.flatnonzero(codes != SKIP)
        if keep.size == 0:
            raise EmptyTraceError(self.path, NO_PROFILER_EVENTS)
        args = [rows.args[i] for i in keep.tolist()]
        from_args = _arg_columns(args, ("External id", "bytes", "Python id", "Python parent id"))
        kept = {
            name: np.asarray(values, dtype=np.int64)[keep]
            for name, values in (
                ("start", rows.start),
                ("end", rows.end),
                ("pid", rows.pid),
                ("tid", rows.tid),
                ("device", rows.device),
                ("stream", rows.stream),
                ("correlation", rows.correlation),
                ("bytes", rows.bytes),
                ("grid", rows.grid),
                ("block", rows.block),
            )
        }
        name_id = columns._intern([rows.name[i] for i in keep.tolist()])
        piece = table(columns, codes[keep], name_id, kept, from_args, base)
        rows_with, value_ids = self._extras(columns, args)
        return self.model(columns, piece, rows_with, value_ids)

    def model(
        self,
        columns: Columns,
        piece: dict[str, np.ndarray],
        extra_rows: list[int],
        extra_ids: list[int],
    ) -> Trace:
        """The trace from its kept rows' columns (``piece``) and kept arguments (the rows that
        have some, and for each its index among ``columns``' shared values)."""
        for name, values in piece.items():
            columns.parts[name] = [values]
        if extra_rows:
            columns.extra_rows.append(np.array(extra_rows, dtype=np.int64))
            columns.extra_ids.append(np.array(extra_ids, dtype=np.int32))
        columns.rows = int(piece["kind"].size)
        trace = columns.finish(
            self.path, Document(baseTimeNanoseconds=self.base_ns), lost_tail=False
        )
        trace.format = "pftrace"
        trace.schema = "pftrace-cuspy" if self.has_categories else "pftrace-monitor"
        trace.metadata["not_carried"] = list(NOT_CARRIED)
        trace.warnings.append(NOT_CARRIED_WARNING.format(path=self.path))
        trace.counters = self._series(self.base_ns or 0)
        if self.unclosed:
            trace.warnings.append(
                f"{self.path}: {self.unclosed:,} slice(s) begin but never end (read as instants)"
            )
        return trace

    def _correlate(self) -> None:
        """Launches and the GPU work they launched share one correlation id: the launch's own
        ``correlation`` argument when it has one, else a number of its own."""
        rows = self.rows
        fresh = -2
        for row, ids in self.launches:
            key = as_int((rows.args[row] or {}).get("correlation"))
            if key is None:
                key, fresh = fresh, fresh - 1
            rows.correlation[row] = key
            for event_id in ids:
                target = self.event_rows.get(event_id)
                if target is not None:
                    rows.correlation[target] = key
        for row, flow in self.flows:
            rows.correlation[row] = flow & 0x7FFFFFFF
        if fresh < -2:  # ids of our own: made positive, beyond every recorded one
            top = max(rows.correlation, default=0) + 1
            rows.correlation[:] = [top - c if c <= -2 else c for c in rows.correlation]

    def _guess(self, row: int) -> str:
        rows = self.rows
        args = rows.args[row] or {}
        runtime = "cbid" in args or rows.correlation[row] >= 0
        return guess(rows.name[row], rows.device[row], runtime, "Python id" in args)

    def _extras(
        self, columns: Columns, args: list[dict[str, Any] | None]
    ) -> tuple[list[int], list[int]]:
        """The kept arguments (shapes, collectives, ...) of each row, as the Kineto reader keeps
        them; worked out once per distinct set (nested values are shared, see annotation_values)."""
        rows: list[int] = []
        ids: list[int] = []
        done: dict[tuple[Any, ...], int] = {}
        for row, values in enumerate(args):
            if not values or EXTRA_KEYS.isdisjoint(values):
                continue
            key = extras_key(values)
            value_id = done.get(key)
            if value_id is None:
                value_id = done[key] = self._extra_id(columns, values)
            if value_id >= 0:
                rows.append(row)
                ids.append(value_id)
        return rows, ids

    @staticmethod
    def _extra_id(columns: Columns, values: dict[str, Any]) -> int:
        try:
            typed = _ARGS_OF(values, Args)
        except msgspec.ValidationError:
            typed = coerce_args(_ARGS_OF(values, LenientArgs))
        kept = extras_of(typed)
        return columns._value_id(columns._shared(kept)) if kept else -1

    def _series(self, base: int) -> list[CounterSeries]:
        series = []
        for (gpu, name), (times, values) in sorted(self.samples.items()):
            order = np.argsort(np.asarray(times, dtype=np.int64), kind="stable")
            series.append(
                CounterSeries(
                    device=gpu,
                    name=name,
                    time_ns=np.asarray(times, dtype=np.int64)[order] - base,
                    value=np.asarray(values, dtype=np.float64)[order],
                    source="pftrace",
                )
            )
        return series


def guess(name: str, device: int, runtime: bool, python: bool) -> str:
    """The category of a slice in a trace without categories (the monitor layout): on a
    device, by name; a runtime call has a ``cbid`` or a correlation id (``runtime``), a Python
    frame a ``Python id`` (``python``)."""
    if device >= 0:
        if name in _SYNC_NAMES:
            return "cuda_sync"
        if name.startswith("Memcpy"):
            return "gpu_memcpy"
        if name.startswith("Memset"):
            return "gpu_memset"
        return "kernel"
    if runtime:
        return "cuda_runtime"
    if python:
        return "python_function"
    if name.startswith("ProfilerStep#"):
        return "user_annotation"
    return "cpu_op"


def extras_key(values: dict[str, Any]) -> tuple[Any, ...]:
    """What decides a row's kept arguments: its arguments other than ids (a nested value by
    identity: equal encodings share one, see annotation_values)."""
    return tuple(
        (k, id(v) if isinstance(v, (list, dict)) else v)
        for k, v in values.items()
        if k not in _ROW_KEYS
    )


def table(
    columns: Columns,
    kinds: np.ndarray,
    name_id: np.ndarray,
    kept: dict[str, np.ndarray],
    from_args: dict[str, np.ndarray],
    base: int,
) -> dict[str, np.ndarray]:
    """The model's columns of the kept rows: their kinds and interned names, their ``kept`` values
    (start, end, pid, tid, device, stream, correlation, bytes, grid, block) and the integer
    arguments ``from_args`` (External id, bytes, Python id, Python parent id)."""
    is_device = np.isin(
        kinds, [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC, Kind.GPU_ANNOTATION]
    )
    linked = np.isin(kinds, [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC, Kind.RUNTIME])
    python = kinds == Kind.PYTHON
    start, end = kept["start"], kept["end"]
    return {
        "kind": kinds,
        "name_id": name_id,
        "start_ns": start - base,
        "dur_ns": np.maximum(end - start, 0),
        "pid": kept["pid"],
        "tid": kept["tid"],
        "device": np.where(is_device, kept["device"], -1),
        "stream": np.where(is_device, kept["stream"], -1),
        "correlation": np.where(linked, kept["correlation"], -1),
        "external_id": from_args["External id"],
        "bytes": np.maximum(kept["bytes"], from_args["bytes"]),
        "python_id": np.where(python, from_args["Python id"], -1),
        "python_parent_id": np.where(python, from_args["Python parent id"], -1),
        "grid_blocks": kept["grid"],
        "block_threads": kept["block"],
        "occupancy_pct": np.full(kinds.size, np.nan, dtype=np.float32),
    }


def where(
    tracks: dict[int, _Track], track: _Track | None, device: int | None, lane: int | None
) -> tuple[int, int, int, int]:
    """pid, tid, device and stream of a slice on ``track`` whose annotations name ``device``
    and ``lane`` (None: not named): on a ``GPU N`` process's ``stream K`` thread, device N and
    stream K unless the annotations say otherwise."""
    if track is None:
        return -1, -1, -1, -1
    parent = tracks.get(track.parent)
    gpu = _GPU_PROCESS.match(parent.name) if parent is not None else None
    if gpu is None:
        return track.pid, track.tid, -1, -1
    stream = STREAM_NAME.search(track.name)
    return (
        track.pid,
        track.tid,
        int(gpu.group(1)) if device is None else device,
        (int(stream.group(1)) if stream else track.tid) if lane is None else lane,
    )


#: The arguments the model reads (the Kineto reader's, and a runtime call's ``cbid``): the
#: others (strides, sequence numbers, ...) are not decoded at all.
WANTED_KEYS = frozenset(f.encode_name for f in msgspec.structs.fields(Args)) | {"cbid"}


def annotation_values(annotations: Any, nested: dict[bytes, Any]) -> dict[str, Any]:
    """The wanted arguments of a slice. A list or dict value (shapes, types) is decoded once per
    distinct encoding (``nested``): the same shapes recur at every step."""
    args = {}
    for a in annotations:
        name = a.name
        if name in WANTED_KEYS:
            which = a.WhichOneof("value")
            if which is not None:
                args[name] = getattr(a, which)
            else:
                key = a.SerializeToString()
                value = nested.get(key, nested)
                if value is nested:
                    value = nested[key] = _value(a)
                args[name] = value
    return args


def _value(annotation: Any) -> Any:
    which = annotation.WhichOneof("value")
    if which is not None:
        return getattr(annotation, which)
    if annotation.dict_entries:
        return {a.name: _value(a) for a in annotation.dict_entries}
    if annotation.array_values:
        return [_value(a) for a in annotation.array_values]
    return None


def _arg_columns(args: list[dict[str, Any] | None], keys: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Integer arguments as columns (-1 where a row lacks one or it is no integer)."""
    columns = {key: np.full(len(args), -1, dtype=np.int64) for key in keys}
    for row, values in enumerate(args):
        if not values:
            continue
        for key in keys:
            value = values.get(key)
            if value is not None:
                number = as_int(value)
                if number is not None:
                    columns[key][row] = number
    return columns


def as_text(value: str | bytes) -> str:
    """A string field: protobuf hands over bytes for one that is not UTF-8 (a damaged file)."""
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else None
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


__all__ = ["NOT_CARRIED", "CorruptInputError", "Decoded", "decode"]
