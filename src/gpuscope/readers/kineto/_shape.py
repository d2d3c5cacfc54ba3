"""The decoded shape of a Kineto document: the msgspec structs and decoders the pure-Python reader
decodes into, and the tables that turn categories into the model's kinds.

Only the fields gpuscope uses are declared, so msgspec skips the rest without allocating them.
"""

from __future__ import annotations

import re
from operator import attrgetter
from typing import Any, Union

import msgspec

from gpuscope.model import CopyDirection, Kind

#: Where the events array starts.
ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[')

# --- the decoded shape -----------------------------------------------------------------------


class Args(msgspec.Struct, gc=False):
    correlation: int = -1
    stream: int = -1
    device: int = -1
    external_id: int = msgspec.field(default=-1, name="External id")
    external_id_2021: int = msgspec.field(default=-1, name="external id")
    bytes: int = -1
    python_id: int = msgspec.field(default=-1, name="Python id")
    python_parent_id: int | None = msgspec.field(default=-1, name="Python parent id")
    grid: list[int] | None = None
    block: list[int] | None = None
    occupancy_pct: float = msgspec.field(default=float("nan"), name="est. achieved occupancy %")
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    input_type: Any = msgspec.field(default=None, name="Input type")
    concrete_inputs: Any = msgspec.field(default=None, name="Concrete Inputs")
    collective_name: str | None = msgspec.field(default=None, name="Collective name")
    in_msg_nelems: int | None = msgspec.field(default=None, name="In msg nelems")
    out_msg_nelems: int | None = msgspec.field(default=None, name="Out msg nelems")
    group_size: int | None = msgspec.field(default=None, name="Group size")
    dtype: str | None = None
    pg_name: str | None = msgspec.field(default=None, name="Process Group Name")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    size: int | None = None  # MTIA DMA size in bytes
    # 2021 traces' Python stack of an op, innermost frame first: "train.py(42): step;...".
    call_stack: str | None = msgspec.field(default=None, name="Call stack")
    # A copy between two GPUs (CUPTI's peer-to-peer memcpy record): source and destination.
    from_device: int | None = msgspec.field(default=None, name="fromDevice")
    to_device: int | None = msgspec.field(default=None, name="toDevice")


# The same fields as Args, any JSON type: the fallback when a writer put odd types in ``args``.
LenientArgs = msgspec.defstruct(
    "LenientArgs",
    [(f.name, Any, None) for f in msgspec.structs.fields(Args)],
    rename={f.name: f.encode_name for f in msgspec.structs.fields(Args)},
    gc=False,
)


class Event(msgspec.Struct, tag="X", tag_field="ph", gc=False):
    """A complete event (``"ph": "X"``): the only phase the model is built from."""

    cat: str = ""
    name: str = ""
    pid: Any = None
    tid: Any = None
    ts: int | float = 0
    dur: int | float = 0
    args: Args | None = None


def _skipped_phase(phase: str) -> type:
    # Decoding other phases into field-less structs skips their content without allocating it.
    return msgspec.defstruct(f"_Phase_{phase}", [], tag=phase, tag_field="ph", gc=False)


class CounterEvent(msgspec.Struct, tag="C", tag_field="ph", gc=False):
    """A counter sample (``"ph": "C"``): hardware counters per GPU (see ``_counters``)."""

    name: Any = ""
    pid: Any = None
    ts: Any = None
    args: Any = None


_CHROME_PHASES = "BEiIsftPNODbneMRcVpSTF"
_AnyEvent = Union[(Event, CounterEvent, *(_skipped_phase(p) for p in _CHROME_PHASES))]  # type: ignore[valid-type]


class _Flow(msgspec.Struct, gc=False):
    ph: str = ""
    cat: Any = ""
    id: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = 0


class _MaybeMemory(msgspec.Struct, gc=False):
    """Any event, decoded only as far as telling a ``[memory]`` instant event apart: its
    arguments stay raw JSON until it is one."""

    ph: Any = ""
    name: Any = ""
    tid: Any = None
    ts: Any = 0
    args: msgspec.Raw = msgspec.Raw()


class _MemoryArgs(msgspec.Struct, gc=False):
    """A ``[memory]`` event's arguments (PyTorch's profiler: ``Device Type`` is c10's
    DeviceType, 0 CPU, 1 CUDA, 6 HIP; ``Bytes`` is negative for a free; the totals are after it;
    ROCm 6 adds ``finished``)."""

    bytes: Any = msgspec.field(default=None, name="Bytes")
    address: Any = msgspec.field(default=None, name="Addr")
    device: Any = msgspec.field(default=None, name="Device Id")
    device_type: Any = msgspec.field(default=None, name="Device Type")
    allocated: Any = msgspec.field(default=None, name="Total Allocated")
    reserved: Any = msgspec.field(default=None, name="Total Reserved")
    order: Any = msgspec.field(default=None, name="Ev Idx")


class _MemoryDocument(msgspec.Struct, gc=False):
    traceEvents: list[_MaybeMemory] | None = None  # noqa: N815


class _FlowDocument(msgspec.Struct, gc=False):
    traceEvents: list[_Flow] | None = None  # noqa: N815


class _LenientEvent(msgspec.Struct, gc=False):
    ph: Any = ""
    cat: Any = ""
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = 0.0
    dur: Any = 0.0
    id: Any = None
    bp: Any = ""
    args: LenientArgs | None = None  # type: ignore[valid-type]


class Document(msgspec.Struct):
    traceEvents: list[_AnyEvent] | None = None  # type: ignore[valid-type]  # noqa: N815 - the format's own key
    deviceProperties: list[dict[str, Any]] | None = None  # noqa: N815
    computeProperties: list[dict[str, Any]] | None = None  # noqa: N815
    distributedInfo: dict[str, Any] | None = None  # noqa: N815
    baseTimeNanoseconds: int | None = None  # noqa: N815
    schemaVersion: Any = None  # noqa: N815
    roctracer_version: Any = None
    hip_runtime_version: Any = None


class LenientDocument(msgspec.Struct):
    traceEvents: list[_LenientEvent] | None = None  # noqa: N815
    deviceProperties: Any = None  # noqa: N815
    computeProperties: Any = None  # noqa: N815
    distributedInfo: Any = None  # noqa: N815
    baseTimeNanoseconds: Any = None  # noqa: N815
    schemaVersion: Any = None  # noqa: N815
    roctracer_version: Any = None
    hip_runtime_version: Any = None


DOCUMENT_DECODER = msgspec.json.Decoder(Document)
EVENTS_DECODER = msgspec.json.Decoder(list[_AnyEvent])  # type: ignore[valid-type]
FLOWS_DECODER = msgspec.json.Decoder(list[_Flow])
META_DECODER = DOCUMENT_DECODER  # the document without its events
FLOW_DECODER = msgspec.json.Decoder(_FlowDocument)
MAYBE_MEMORY_DECODER = msgspec.json.Decoder(list[_MaybeMemory], float_hook=float)
MEMORY_DOCUMENT_DECODER = msgspec.json.Decoder(_MemoryDocument, float_hook=float)
MEMORY_ARGS_DECODER = msgspec.json.Decoder(_MemoryArgs, float_hook=float)
CATEGORY = attrgetter("cat")
EVENT_NAME = attrgetter("name")
EVENT_PID = attrgetter("pid")
TID = attrgetter("tid")
TS = attrgetter("ts")
DUR = attrgetter("dur")
OCCUPANCY = attrgetter("occupancy_pct")
SKIP = 255
# float_hook: a number beyond a double (``1e400``) is valid JSON; it decodes as infinity and is
# then refused as a value (see bad_times), rather than failing the whole document.
LENIENT_DECODER = msgspec.json.Decoder(LenientDocument, float_hook=float)
EMPTY_ARGS = Args()
LENIENT_EVENTS_DECODER = msgspec.json.Decoder(list[_LenientEvent], float_hook=float)

# Categories, matched case-insensitively (2021 traces capitalise them).
KIND_OF_CATEGORY: dict[str, Kind] = {
    "kernel": Kind.KERNEL,
    "cuda_profiler_range": Kind.KERNEL,
    "mtia_ccp_events": Kind.KERNEL,
    "gpu_memcpy": Kind.MEMCPY,
    "memcpy": Kind.MEMCPY,
    "gpu_memset": Kind.MEMSET,
    "memset": Kind.MEMSET,
    "cuda_sync": Kind.SYNC,
    "cuda_runtime": Kind.RUNTIME,
    "runtime": Kind.RUNTIME,
    "cuda_driver": Kind.RUNTIME,
    "mtia_runtime": Kind.RUNTIME,
    "cpu_op": Kind.CPU_OP,
    "operator": Kind.CPU_OP,
    "python_function": Kind.PYTHON,
    "python": Kind.PYTHON,
    "user_annotation": Kind.ANNOTATION,
    "gpu_user_annotation": Kind.GPU_ANNOTATION,
}
DEVICE_KINDS = frozenset({Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC, Kind.GPU_ANNOTATION})
LINKED_KINDS = frozenset({Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC, Kind.RUNTIME})
FLOW_CATEGORIES = frozenset({"ac2g", "async", "async_cpu_to_gpu", "async_gpu"})
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
MEMCPY_DIRECTION = {
    "htod": CopyDirection.H2D,
    "dtoh": CopyDirection.D2H,
    "dtod": CopyDirection.D2D,
    "ptop": CopyDirection.P2P,
}
