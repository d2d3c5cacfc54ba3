"""The part of Perfetto's ``perfetto_trace.proto`` that PyTorch's ``.pftrace`` export uses, as
protobuf message classes built at import time (no generated code, no ``protoc``, no download).

Only the fields gpuscope reads are declared; protobuf keeps every other field as unknown bytes and
skips it. Field numbers are Perfetto's own (``protos/perfetto/trace/...``), checked against the
``perfetto`` wheel's bundled ``perfetto_trace_pb2``. Two fields PyTorch writes by number, which the
public protos do not declare where PyTorch puts them, are declared here so that they decode like
any other field:

* ``TrackEvent`` field 3000, ``GpuCorrelation`` (``render_stage_submission_event_ids`` = 1): the
  render-stage event ids a launch slice launched (``cuspy_pftrace.cpp``; Perfetto's
  ``GpuTrackEvent`` extension). It stands in for the JSON's correlation ids and ``ac2g`` flows.
* ``InternedData`` field 1000, ``InternedComputeKernel`` (``iid`` 1, ``name`` 2,
  ``demangled_name`` 3): the kernel names a render stage's ``kernel_iid`` refers to.

The same classes write ``.pftrace`` files in :mod:`gpuscope.testing.pftrace`.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "gpuscope.perfetto"

_F = descriptor_pb2.FieldDescriptorProto
_TYPES = {
    "uint64": _F.TYPE_UINT64,
    "int64": _F.TYPE_INT64,
    "uint32": _F.TYPE_UINT32,
    "int32": _F.TYPE_INT32,
    "bool": _F.TYPE_BOOL,
    "double": _F.TYPE_DOUBLE,
    "string": _F.TYPE_STRING,
    "fixed64": _F.TYPE_FIXED64,
}

#: message -> [(field, number, type, repeated)]; a type that is not a scalar names a message.
_MESSAGES: dict[str, list[tuple[str, int, str, bool]]] = {
    "Trace": [("packet", 1, "TracePacket", True)],
    "TracePacket": [
        ("timestamp", 8, "uint64", False),
        ("timestamp_clock_id", 58, "uint32", False),
        ("clock_snapshot", 6, "ClockSnapshot", False),
        ("trusted_packet_sequence_id", 10, "uint32", False),
        ("track_event", 11, "TrackEvent", False),
        ("interned_data", 12, "InternedData", False),
        ("sequence_flags", 13, "uint32", False),
        ("gpu_counter_event", 52, "GpuCounterEvent", False),
        ("gpu_render_stage_event", 53, "GpuRenderStageEvent", False),
        ("track_descriptor", 60, "TrackDescriptor", False),
    ],
    "ClockSnapshot": [("clocks", 1, "Clock", True)],
    "Clock": [("clock_id", 1, "uint32", False), ("timestamp", 2, "uint64", False)],
    "TrackDescriptor": [
        ("uuid", 1, "uint64", False),
        ("name", 2, "string", False),
        ("process", 3, "ProcessDescriptor", False),
        ("thread", 4, "ThreadDescriptor", False),
        ("parent_uuid", 5, "uint64", False),
    ],
    "ProcessDescriptor": [("pid", 1, "int32", False), ("process_name", 6, "string", False)],
    "ThreadDescriptor": [
        ("pid", 1, "int32", False),
        ("tid", 2, "int64", False),
        ("thread_name", 5, "string", False),
    ],
    "TrackEvent": [
        ("category_iids", 3, "uint64", True),
        ("debug_annotations", 4, "DebugAnnotation", True),
        ("type", 9, "int32", False),
        ("name_iid", 10, "uint64", False),
        ("track_uuid", 11, "uint64", False),
        ("categories", 22, "string", True),
        ("name", 23, "string", False),
        ("flow_ids", 47, "fixed64", True),
        ("gpu_correlation", 3000, "GpuCorrelation", False),
    ],
    "GpuCorrelation": [("render_stage_submission_event_ids", 1, "uint64", True)],
    "DebugAnnotation": [
        ("name_iid", 1, "uint64", False),
        ("bool_value", 2, "bool", False),
        ("uint_value", 3, "uint64", False),
        ("int_value", 4, "int64", False),
        ("double_value", 5, "double", False),
        ("string_value", 6, "string", False),
        ("legacy_json_value", 9, "string", False),
        ("name", 10, "string", False),
        ("dict_entries", 11, "DebugAnnotation", True),
        ("array_values", 12, "DebugAnnotation", True),
    ],
    "InternedData": [
        ("event_categories", 1, "EventCategory", True),
        ("event_names", 2, "EventName", True),
        ("debug_annotation_names", 3, "EventName", True),
        ("graphics_contexts", 23, "InternedGraphicsContext", True),
        ("gpu_specifications", 24, "InternedGpuRenderStageSpecification", True),
        ("gpu_counter_descriptors", 47, "InternedGpuCounterDescriptor", True),
        ("compute_kernels", 1000, "InternedComputeKernel", True),
    ],
    "EventCategory": [("iid", 1, "uint64", False), ("name", 2, "string", False)],
    "EventName": [("iid", 1, "uint64", False), ("name", 2, "string", False)],
    "InternedGraphicsContext": [("iid", 1, "uint64", False), ("pid", 2, "int32", False)],
    "InternedGpuRenderStageSpecification": [
        ("iid", 1, "uint64", False),
        ("name", 2, "string", False),
        ("category", 4, "int32", False),
    ],
    "InternedComputeKernel": [
        ("iid", 1, "uint64", False),
        ("name", 2, "string", False),
        ("demangled_name", 3, "string", False),
    ],
    "InternedGpuCounterDescriptor": [
        ("iid", 1, "uint64", False),
        ("counter_descriptor", 2, "GpuCounterDescriptor", False),
        ("gpu_id", 3, "int32", False),
    ],
    "GpuCounterDescriptor": [("specs", 1, "GpuCounterSpec", True)],
    "GpuCounterSpec": [("counter_id", 1, "uint32", False), ("name", 2, "string", False)],
    "GpuCounterEvent": [
        ("counter_descriptor", 1, "GpuCounterDescriptor", False),
        ("counters", 2, "GpuCounter", True),
        ("gpu_id", 3, "int32", False),
        ("counter_descriptor_iid", 4, "uint64", False),
    ],
    "GpuCounter": [
        ("counter_id", 1, "uint32", False),
        ("int_value", 2, "int64", False),
        ("double_value", 3, "double", False),
    ],
    "GpuRenderStageEvent": [
        ("event_id", 1, "uint64", False),
        ("duration", 2, "uint64", False),
        ("context", 5, "uint64", False),
        ("extra_data", 6, "ExtraData", True),
        ("gpu_id", 11, "int32", False),
        ("hw_queue_iid", 13, "uint64", False),
        ("stage_iid", 14, "uint64", False),
        ("name", 17, "string", False),
        ("event_wait_ids", 18, "uint64", True),
        ("kernel_iid", 19, "uint64", False),
        ("name_iid", 20, "uint64", False),
        ("launch", 21, "ComputeKernelLaunch", False),
    ],
    "ExtraData": [("name", 1, "string", False), ("value", 2, "string", False)],
    "ComputeKernelLaunch": [
        ("grid_size", 1, "Dim3", False),
        ("workgroup_size", 2, "Dim3", False),
    ],
    "Dim3": [("x", 1, "uint32", False), ("y", 2, "uint32", False), ("z", 3, "uint32", False)],
}


#: message -> (oneof name, its fields): one ``WhichOneof`` call says which is set.
_ONEOFS: dict[str, tuple[str, frozenset[str]]] = {
    "TracePacket": (
        "data",
        frozenset(
            {
                "clock_snapshot",
                "track_event",
                "interned_data",
                "gpu_counter_event",
                "gpu_render_stage_event",
                "track_descriptor",
            }
        ),
    ),
    "DebugAnnotation": (
        "value",
        frozenset(
            {
                "bool_value",
                "uint_value",
                "int_value",
                "double_value",
                "string_value",
                "legacy_json_value",
            }
        ),
    ),
    "GpuCounter": ("value", frozenset({"int_value", "double_value"})),
}


def _build() -> dict[str, Any]:
    file = descriptor_pb2.FileDescriptorProto(
        name="gpuscope_perfetto_subset.proto", package=_PACKAGE, syntax="proto2"
    )
    for message, fields in _MESSAGES.items():
        proto = file.message_type.add(name=message)
        oneof, members = _ONEOFS.get(message, ("", frozenset()))
        if oneof:
            proto.oneof_decl.add(name=oneof)
        for name, number, kind, repeated in fields:
            field = proto.field.add(name=name, number=number)
            if name in members:
                field.oneof_index = 0
            field.label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
            if kind in _TYPES:
                field.type = _TYPES[kind]
            else:
                field.type = _F.TYPE_MESSAGE
                field.type_name = f".{_PACKAGE}.{kind}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {
        m: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{m}"))
        for m in _MESSAGES
    }


_CLASSES = _build()
Trace: Any = _CLASSES["Trace"]
TracePacket: Any = _CLASSES["TracePacket"]
TrackEvent: Any = _CLASSES["TrackEvent"]

#: ``TrackEvent.Type``.
SLICE_BEGIN = 1
SLICE_END = 2
#: ``TracePacket.SequenceFlags``.
SEQ_INCREMENTAL_STATE_CLEARED = 1
SEQ_NEEDS_INCREMENTAL_STATE = 2
#: ``BuiltinClock``.
CLOCK_REALTIME = 1
CLOCK_BOOTTIME = 6
