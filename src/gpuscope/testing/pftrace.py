"""Kineto JSON to ``.pftrace`` in PyTorch's layout: test data for the ``.pftrace`` reader.

Contract: :func:`to_pftrace` turns a Kineto document (a path or the decoded dict) into the bytes
PyTorch's native Perfetto exporter would write for the same run, in one of two layouts:

* ``"cuspy"`` (``torch/profiler/_cuspy/trace.py`` with ``cuspy_pftrace.cpp``, PyTorch main):
  gzip; a clock snapshot tying BOOTTIME and REALTIME to ``baseTimeNanoseconds``; one track
  descriptor per CPU process and thread; one interned-data packet (event names, categories, the
  render-stage specifications with one lane per ``(device, stream)`` named ``[NN] stream K``,
  the graphics context, kernel names as ``InternedComputeKernel`` in field 1000); then each group
  of slices as all its begins followed by all its ends (CPU events; the runtime calls, whose
  ``gpu_correlation``, field 3000, lists the event ids of the GPU work each launched; the
  synchronisations, on ``GPU N`` / ``stream K`` tracks); then one ``GpuRenderStageEvent`` per
  kernel, copy, memset and GPU annotation; then PM-sampling counters as ``GpuCounterEvent``\\ s.
* ``"monitor"`` (the older ``_cupti/monitor_trace.py`` with ``monitor_pftrace.cpp``): no
  compression, no clock snapshot, only event names interned, no categories; GPU work as slices on
  ``GPU N`` / ``stream K`` tracks, joined to their launches by ``flow_ids`` (the correlation id).

What the exporters leave out is left out here too: copy direction and memory kinds (a copy is
``Memcpy``), ``[memory]`` events, ``distributedInfo``, ``deviceProperties``, flow events, and the
``External id`` of GPU work. The real cuspy exporter also clamps overlapping kernels on one lane;
this converter does not (it changes no corpus trace's figures).
"""

from __future__ import annotations

import gzip
import random
import zlib
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from gpuscope.readers._io import read_bytes
from gpuscope.readers.kineto._values import to_ns
from gpuscope.readers.pftrace import schema as pb

__all__ = ["carried_only", "to_pftrace", "write_pftrace"]

_DEVICE_CATEGORIES = {"kernel": 1, "gpu_memcpy": 2, "gpu_memset": 3, "gpu_user_annotation": 4}
_STAGES = ((1, "Kernel", 2), (2, "Memcpy", 0), (3, "Memset", 0), (4, "Annotation", 0))
_STREAM_IID_BASE = 100
_RUNTIME = ("cuda_runtime", "cuda_driver")
_SKIPPED = frozenset({"Trace", "overhead", "ac2g", "flow"})
#: Kineto 2021's capitalised categories, as later traces (and the exporters) name them.
_OLD_CATEGORIES = {
    "Kernel": "kernel",
    "Memcpy": "gpu_memcpy",
    "Memset": "gpu_memset",
    "Runtime": "cuda_runtime",
    "Operator": "cpu_op",
}
_LAUNCH_NAMES = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchCooperativeKernel",
        "cudaLaunchCooperativeKernelMultiDevice",
        "cudaLaunchKernelExC",
        "cudaGraphLaunch",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
    }
)


#: Per category, the arguments a ``.pftrace`` carries (the rest are left out by the exporters).
_CARRIED_ARGS = {
    "kernel": ("device", "stream", "correlation", "grid", "block"),
    "gpu_memcpy": ("device", "stream", "correlation", "bytes"),
    "gpu_memset": ("device", "stream", "correlation", "bytes"),
    "gpu_user_annotation": ("device", "stream"),
    "cuda_runtime": ("correlation",),
    "cuda_driver": ("correlation",),
    "cuda_sync": ("device", "stream", "correlation"),
}


def carried_only(source: Path | dict[str, Any], layout: str = "cuspy") -> dict[str, Any]:
    """The Kineto document with only what a ``.pftrace`` of the same run carries: copies named
    ``Memcpy``, no device properties, ``distributedInfo``, flows or ``[memory]`` events, GPU work
    and runtime calls with only their device, stream, correlation, sizes and launch dimensions.
    The monitor layout has no categories either: user annotations other than steps read as
    operators. Its diagnosis is the one a ``.pftrace`` of the run must give."""
    doc = _document(source)
    kept: list[dict[str, Any]] = []
    for given in doc.get("traceEvents") or []:
        if not isinstance(given, dict) or given.get("ph") != "X":
            if isinstance(given, dict) and given.get("ph") == "C":
                kept.append(given)  # counter samples are carried (GpuCounterEvent)
            continue
        if given.get("cat") in _SKIPPED:
            continue
        event = dict(given)
        category = event.get("cat")
        if category in _CARRIED_ARGS:
            args = _args(event)
            event["args"] = {k: args[k] for k in _CARRIED_ARGS[category] if k in args}
        if category == "gpu_memcpy":
            event["name"] = "Memcpy"
        is_step = str(event.get("name", "")).startswith("ProfilerStep#")
        if layout == "monitor" and category == "user_annotation" and not is_step:
            event["cat"] = "cpu_op"
        kept.append(event)
    carried = {"traceEvents": kept}
    if "baseTimeNanoseconds" in doc:
        carried["baseTimeNanoseconds"] = doc["baseTimeNanoseconds"]
    return carried


def write_pftrace(source: Path | dict[str, Any], out: Path, layout: str = "cuspy") -> Path:
    """Write :func:`to_pftrace`'s bytes to ``out``."""
    out.write_bytes(to_pftrace(source, layout))
    return out


def to_pftrace(source: Path | dict[str, Any], layout: str = "cuspy") -> bytes:
    """The ``.pftrace`` bytes of a Kineto document in ``layout`` (``"cuspy"`` or ``"monitor"``)."""
    if layout not in ("cuspy", "monitor"):
        raise ValueError(f"layout {layout!r}: 'cuspy' or 'monitor'")
    doc = _document(source)
    writer = _Writer(doc, cuspy=layout == "cuspy")
    data: bytes = writer.trace.SerializeToString()
    return gzip.compress(data, compresslevel=1) if layout == "cuspy" else data


class _Writer:
    def __init__(self, doc: dict[str, Any], *, cuspy: bool) -> None:
        self.cuspy = cuspy
        self.base_ns = int(doc.get("baseTimeNanoseconds") or 0)
        self.trace = pb.Trace()
        self.names: dict[str, int] = {}
        self.categories: dict[str, int] = {}
        self.tracks: dict[tuple[Any, ...], int] = {}
        self.track_packets: list[Any] = []
        self.process_names: dict[Any, str] = {}
        self.thread_names: dict[tuple[Any, Any], str] = {}
        events = [_modern(e) for e in doc.get("traceEvents") or [] if isinstance(e, dict)]
        for e in events:
            if e.get("ph") == "M":
                args = e.get("args") or {}
                if e.get("name") == "process_name":
                    self.process_names[e.get("pid")] = str(args.get("name", ""))
                elif e.get("name") == "thread_name":
                    self.thread_names[(e.get("pid"), e.get("tid"))] = str(args.get("name", ""))
        complete = [e for e in events if e.get("ph") == "X" and e.get("cat") not in _SKIPPED]
        times = to_ns([e.get("ts", 0) for e in complete]) if complete else np.zeros(0, np.int64)
        durs = to_ns([e.get("dur", 0) for e in complete]) if complete else np.zeros(0, np.int64)
        rows = [
            (e, self.base_ns + int(t), self.base_ns + int(t) + max(int(d), 0))
            for e, t, d in zip(complete, times.tolist(), durs.tolist(), strict=True)
        ]
        device = [r for r in rows if r[0].get("cat") in _DEVICE_CATEGORIES]
        syncs = [r for r in rows if r[0].get("cat") == "cuda_sync"]
        runtime = {cat: [r for r in rows if r[0].get("cat") == cat] for cat in _RUNTIME}
        cpu = [
            r
            for r in rows
            if r[0].get("cat") not in _DEVICE_CATEGORIES
            and r[0].get("cat") not in _RUNTIME
            and r[0].get("cat") != "cuda_sync"
        ]
        packets: list[Any] = []
        if cuspy:
            device.sort(key=lambda r: _DEVICE_CATEGORIES[r[0]["cat"]])  # the exporter's order
            event_ids = {id(r[0]): i + 1 for i, r in enumerate(device)}
            by_correlation: dict[int, list[int]] = {}
            for r in device:
                corr = _int((r[0].get("args") or {}).get("correlation"))
                if corr is not None and r[0]["cat"] != "gpu_user_annotation":
                    by_correlation.setdefault(corr, []).append(event_ids[id(r[0])])
            packets += self._group(cpu, annotate=True)
            for cat in _RUNTIME:
                packets += self._group(runtime[cat], launches=by_correlation)
            packets += self._group(syncs, gpu=True)
            packets += self._render_stages(device)
            packets += self._counters(events)
        else:
            packets += self._group(cpu, annotate=True)
            for cat in _RUNTIME:
                packets += self._group(runtime[cat], flows=True)
            packets += self._group(syncs, gpu=True)
            packets += self._group(device, gpu=True, flows=True)
        self._header()
        self.trace.packet.extend(packets)

    # --- the header: clock, tracks, interned data ----------------------------------------------

    def _header(self) -> None:
        if self.cuspy:
            clock = self.trace.packet.add(timestamp=self.base_ns, trusted_packet_sequence_id=1)
            clock.clock_snapshot.clocks.add(clock_id=pb.CLOCK_BOOTTIME, timestamp=self.base_ns)
            clock.clock_snapshot.clocks.add(clock_id=pb.CLOCK_REALTIME, timestamp=self.base_ns)
        self.trace.packet.extend(self.track_packets)
        head = self.trace.packet.add(
            trusted_packet_sequence_id=1, sequence_flags=pb.SEQ_INCREMENTAL_STATE_CLEARED
        )
        interned = head.interned_data
        for name, iid in self.names.items():
            interned.event_names.add(iid=iid, name=name)
        if not self.cuspy:
            return
        for name, iid in self.categories.items():
            interned.event_categories.add(iid=iid, name=name)
        for iid, name, category in _STAGES:
            interned.gpu_specifications.add(iid=iid, name=name, category=category)
        for (device, stream), iid in sorted(self.lanes.items(), key=lambda kv: kv[1]):
            del device
            interned.gpu_specifications.add(
                iid=iid, name=f"[{stream:0{self.lane_width}d}] stream {stream}", category=0
            )
        interned.graphics_contexts.add(iid=1, pid=self.first_pid)
        for name, iid in self.kernels.items():
            interned.compute_kernels.add(iid=iid, demangled_name=name)
        for gpu, iid in self.counter_iids.items():
            descriptor = interned.gpu_counter_descriptors.add(iid=iid, gpu_id=gpu)
            for counter_id, name in enumerate(self.counter_names):
                descriptor.counter_descriptor.specs.add(counter_id=counter_id, name=name)

    def _name(self, name: str) -> int:
        return self.names.setdefault(name, len(self.names) + 1)

    def _track(self, pid: Any, tid: Any, *, gpu: bool) -> int:
        process = ("p", pid)
        if process not in self.tracks:
            uuid = self.tracks[process] = len(self.tracks) + 1
            label = f"GPU {pid}" if gpu else self.process_names.get(pid) or str(pid)
            packet = pb.TracePacket()
            packet.track_descriptor.uuid = uuid
            packet.track_descriptor.process.pid = _small(pid)
            packet.track_descriptor.process.process_name = label
            self.track_packets.append(packet)
        thread = ("t", pid, tid)
        if thread not in self.tracks:
            uuid = self.tracks[thread] = len(self.tracks) + 1
            label = f"stream {tid}" if gpu else self.thread_names.get((pid, tid)) or str(tid)
            packet = pb.TracePacket()
            packet.track_descriptor.uuid = uuid
            packet.track_descriptor.parent_uuid = self.tracks[process]
            packet.track_descriptor.thread.pid = _small(pid)
            packet.track_descriptor.thread.tid = _small(tid)
            packet.track_descriptor.thread.thread_name = label
            self.track_packets.append(packet)
        return self.tracks[thread]

    @property
    def first_pid(self) -> int:
        first = next((k[1] for k in self.tracks if k[0] == "p"), 0)
        return _small(first)

    # --- slices: a group's begins, then its ends ----------------------------------------------

    def _group(
        self,
        rows: list[tuple[dict[str, Any], int, int]],
        *,
        annotate: bool = False,
        gpu: bool = False,
        flows: bool = False,
        launches: dict[int, list[int]] | None = None,
    ) -> list[Any]:
        begins: list[Any] = []
        ends: list[Any] = []
        for event, start, end in rows:
            args = _args(event)
            if gpu:
                track = self._track(_int(args.get("device")), _int(args.get("stream")), gpu=True)
            else:
                track = self._track(event.get("pid"), event.get("tid"), gpu=False)
            packet = pb.TracePacket(
                timestamp=start,
                trusted_packet_sequence_id=1,
                sequence_flags=pb.SEQ_NEEDS_INCREMENTAL_STATE,
            )
            slice_ = packet.track_event
            slice_.type = pb.SLICE_BEGIN
            slice_.track_uuid = track
            name = str(event.get("name", ""))
            if gpu and event.get("cat") == "gpu_memcpy":
                name = "Memcpy"  # the exporters name copies by kind only
            slice_.name_iid = self._name(name)
            category = str(event.get("cat", ""))
            if self.cuspy and category:
                slice_.category_iids.append(
                    self.categories.setdefault(category, len(self.categories) + 1)
                )
            correlation = _int(args.get("correlation"))
            if flows and correlation:
                slice_.flow_ids.append(correlation)
            if annotate:
                for key, value in args.items():
                    _annotation(slice_.debug_annotations.add(name=str(key)), value)
            elif gpu or not self.cuspy:
                for key in ("device", "stream", "correlation", "bytes"):
                    value = _int(args.get(key))
                    if value is not None:
                        slice_.debug_annotations.add(name=key, int_value=value)
            else:
                if correlation is not None:
                    slice_.debug_annotations.add(name="correlation", int_value=correlation)
                if launches is not None and correlation is not None and name in _LAUNCH_NAMES:
                    launched = launches.get(correlation, [])
                    slice_.gpu_correlation.render_stage_submission_event_ids.extend(launched)
                elif launches is not None and correlation is not None:
                    launched = launches.get(correlation, [])
                    if launched and name.startswith(("cudaMemcpy", "cudaMemset")):
                        slice_.gpu_correlation.render_stage_submission_event_ids.extend(launched)
            begins.append(packet)
            end_packet = pb.TracePacket(timestamp=end, trusted_packet_sequence_id=1)
            end_packet.track_event.type = pb.SLICE_END
            end_packet.track_event.track_uuid = track
            ends.append(end_packet)
        return begins + ends

    # --- GPU work as render stages --------------------------------------------------------------

    def _render_stages(self, rows: list[tuple[dict[str, Any], int, int]]) -> list[Any]:
        self.lanes: dict[tuple[int, int], int] = {}
        self.kernels: dict[str, int] = {}
        keyed = []
        for event, start, end in rows:
            args = _args(event)
            device = _int(args.get("device"))
            stream = _int(args.get("stream"))
            device = _int(event.get("pid")) if device is None else device
            stream = _int(event.get("tid")) if stream is None else stream
            keyed.append((event, args, start, end, device or 0, stream or 0))
        for _, _, _, _, device, stream in keyed:
            self.lanes.setdefault((device, stream), 0)
        for j, lane in enumerate(sorted(self.lanes)):
            self.lanes[lane] = _STREAM_IID_BASE + j
        self.lane_width = len(str(max((s for _, s in self.lanes), default=0)))
        packets = []
        for event_id, (event, args, start, end, device, stream) in enumerate(keyed, 1):
            category = event["cat"]
            packet = pb.TracePacket(
                timestamp=start,
                trusted_packet_sequence_id=1,
                sequence_flags=pb.SEQ_NEEDS_INCREMENTAL_STATE,
            )
            stage = packet.gpu_render_stage_event
            stage.event_id = event_id
            stage.duration = end - start
            stage.gpu_id = device
            stage.hw_queue_iid = self.lanes[(device, stream)]
            stage.stage_iid = _DEVICE_CATEGORIES[category]
            stage.context = 1
            if category in ("kernel", "gpu_user_annotation"):
                name = str(event.get("name", ""))
                stage.name_iid = self._name(name)
            if category == "kernel":
                stage.kernel_iid = self.kernels.setdefault(name, len(self.kernels) + 1)
                grid, block = args.get("grid"), args.get("block")
                if isinstance(grid, list) and isinstance(block, list) and _dims(grid, block):
                    launch = stage.launch
                    launch.grid_size.x, launch.grid_size.y, launch.grid_size.z = grid
                    launch.workgroup_size.x, launch.workgroup_size.y, launch.workgroup_size.z = (
                        block
                    )
            for key, value in (
                ("device id", device),
                ("stream id", stream),
                ("correlation", _int(args.get("correlation"))),
                ("bytes", _int(args.get("bytes"))),
            ):
                if value:
                    stage.extra_data.add(name=key, value=str(value))
            packets.append(packet)
        return packets

    # --- PM-sampling counters ---------------------------------------------------------------------

    def _counters(self, events: list[dict[str, Any]]) -> list[Any]:
        """Kineto's ``"GPU N Counters"`` counter events as ``GpuCounterEvent``\\ s."""
        self.counter_iids: dict[int, int] = {}
        self.counter_names: list[str] = []
        packets = []
        ids: dict[str, int] = {}
        samples = [
            e for e in events if e.get("ph") == "C" and str(e.get("pid", "")).endswith(" Counters")
        ]
        for e in samples:
            gpu = _int(str(e["pid"]).split()[1]) if len(str(e["pid"]).split()) > 2 else None
            value = next(iter((e.get("args") or {}).values()), None)
            if gpu is None or not isinstance(value, (int, float)):
                continue
            name = str(e.get("name", ""))
            counter_id = ids.setdefault(name, len(ids))
            if counter_id == len(self.counter_names):
                self.counter_names.append(name)
            iid = self.counter_iids.setdefault(gpu, len(self.counter_iids) + 1)
            packet = pb.TracePacket(
                timestamp=self.base_ns + int(to_ns([e.get("ts", 0)])[0]),
                trusted_packet_sequence_id=1,
                sequence_flags=pb.SEQ_NEEDS_INCREMENTAL_STATE,
            )
            packet.gpu_counter_event.counter_descriptor_iid = iid
            packet.gpu_counter_event.counters.add(counter_id=counter_id, double_value=float(value))
            packets.append(packet)
        return packets


def _document(source: Path | dict[str, Any]) -> dict[str, Any]:
    if isinstance(source, dict):
        return source
    doc: dict[str, Any] = msgspec.json.decode(read_bytes(source).data, type=dict[str, Any])
    return doc


def _args(event: dict[str, Any]) -> dict[str, Any]:
    args = event.get("args")
    return args if isinstance(args, dict) else {}


def _modern(event: dict[str, Any]) -> dict[str, Any]:
    category = event.get("cat")
    if isinstance(category, str) and category in _OLD_CATEGORIES:
        return {**event, "cat": _OLD_CATEGORIES[category]}
    return event


def _annotation(target: Any, value: Any) -> None:
    """A JSON value as a ``DebugAnnotation``, as the exporters' ``emitJsonValue`` writes it."""
    if isinstance(value, dict):
        for key, inner in value.items():
            _annotation(target.dict_entries.add(name=str(key)), inner)
    elif isinstance(value, list):
        for inner in value:
            _annotation(target.array_values.add(), inner)
    elif isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, float):
        target.double_value = value
    elif isinstance(value, int) and -(2**63) <= value < 2**63:
        target.int_value = value
    elif isinstance(value, str):
        target.string_value = value
    else:
        target.string_value = "null" if value is None else str(value)


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return None


def _dims(*values: list[Any]) -> bool:
    """Launch dimensions as the exporters write them: three non-negative integers each."""
    return all(
        len(value) == 3 and all(_int(v) is not None and v >= 0 for v in value) for value in values
    )


def _small(value: Any) -> int:
    """The exporters' ``pid_int``: a non-negative int32 for any id (strings numbered)."""
    if isinstance(value, int):
        return value & 0x7FFFFFFF
    return zlib.crc32(str(value).encode()) % 1000 + 1_000_000


def damaged(data: bytes, rng: random.Random, edits: int = 1) -> bytes:
    """``data`` with ``edits`` random damages, each a cut at a byte, a byte changed, a few random
    bytes inserted or a few dropped; never empty (one zero byte), as a reader must refuse that
    too. For the tests and fuzzers that hold readers to one line on damaged input."""
    out = bytearray(data)
    for _ in range(edits):
        at = rng.randrange(max(len(out), 1))
        match rng.randrange(4):
            case 0:
                out = out[:at]
            case 1 if out:
                out[at] = rng.randrange(256)
            case 2:
                out[at:at] = rng.randbytes(rng.randrange(1, 12))
            case _:
                del out[at : at + rng.randrange(1, 24)]
    return bytes(out) or b"\x00"
