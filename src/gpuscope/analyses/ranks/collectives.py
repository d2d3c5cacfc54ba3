"""The collectives of one device, and the thresholds of the rank analysis.

Contract: :func:`collectives` lists a device's communication kernels with their kind, process
group, message bytes and trace rows (see the package docstring for how a group is named);
:class:`Participant` is what the rank analysis takes per device: a reference to the device's
result (:class:`DeviceResult`) plus what the result does not hold.
"""

from __future__ import annotations

from typing import Any, Protocol

import msgspec
import numpy as np
from numpy.typing import NDArray

from gpuscope._arrays import distinct
from gpuscope.analyses.attribution import IdleAttribution
from gpuscope.analyses.host import HostIndex
from gpuscope.analyses.timeline import (
    DeviceWork,
    Overlap,
    StepStat,
    TemporalBreakdown,
    WorkClass,
)
from gpuscope.classify import NamePattern
from gpuscope.facts import GpuFacts
from gpuscope.model import Kind

I64 = NDArray[np.int64]

#: A straggler causes at least this share of all the waiting inside the job's collectives...
STRAGGLER_MIN_CAUSED_SHARE = 0.05
#: ... arrives last by more than this on average (host jitter between ranks is tens of µs)...
STRAGGLER_MIN_LATE_NS = 50_000
#: ... and that often by chance (each rank equally likely to be last) only with this probability,
#: for all the ranks tested together (each test at this over the ranks still in question).
STRAGGLER_MAX_CHANCE = 0.1
#: A collective where some rank waited this long has a meaningful last arrival.
CONTESTED_WAIT_NS = 10_000
#: A collective this exposed (share of its duration with no compute) is "fully exposed".
FULLY_EXPOSED_SHARE = 0.9
#: Collectives moving less than this, or lasting less than SMALL_COLLECTIVE_NS when sizes are not
#: recorded, are dominated by their fixed cost: merging them saves most of it.
SMALL_MESSAGE_BYTES = 1 << 20
SMALL_COLLECTIVE_NS = 50_000

_KINDS: tuple[tuple[str, NamePattern], ...] = (
    ("reduce_scatter", NamePattern(r"reduce_?scatter")),
    ("all_reduce", NamePattern(r"all_?reduce")),
    ("all_gather", NamePattern(r"all_?gather")),
    ("all_to_all", NamePattern(r"all_?to_?all")),
    ("send_recv", NamePattern(r"send_?recv|\bsend\b|\brecv\b|p2p")),
    ("broadcast", NamePattern(r"broadcast|bcast")),
    ("barrier", NamePattern(r"barrier")),
    ("reduce", NamePattern(r"reduce")),
)
_ELEMENT_BYTES = {
    "double": 8,
    "float64": 8,
    "float": 4,
    "float32": 4,
    "int": 4,
    "int32": 4,
    "long": 8,
    "int64": 8,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "short": 2,
    "int16": 2,
    "byte": 1,
    "char": 1,
    "bool": 1,
    "uint8": 1,
    "int8": 1,
}
_NO_ARGS: dict[str, Any] = {}


# --- inputs -------------------------------------------------------------------------------------


class DeviceResult(Protocol):
    """What the per-device analyses found on one device, as the rank analysis reads it.

    :class:`gpuscope.diagnosis.DeviceReport` is one (structurally: the diagnosis imports this
    package, so this package names the report's shape instead of importing it)."""

    @property
    def source(self) -> str: ...
    @property
    def world_size(self) -> int | None: ...
    @property
    def device(self) -> int: ...
    @property
    def facts(self) -> GpuFacts | None: ...
    @property
    def temporal(self) -> TemporalBreakdown: ...
    @property
    def overlap(self) -> Overlap: ...
    @property
    def steps(self) -> list[StepStat]: ...
    @property
    def idle(self) -> IdleAttribution: ...


class Participant(msgspec.Struct, frozen=True):
    """One rank's device: its per-device result, and what that result does not hold: the
    classified device work (which holds the trace, alive only while the diagnosis runs), the
    rank (numbered in file order when the trace names none) and its trace's host index."""

    report: DeviceResult
    work: DeviceWork
    rank: int
    host: HostIndex | None = None

    @property
    def device(self) -> int:
        return self.report.device


# --- collectives of one device ------------------------------------------------------------------


class CollectiveTable(msgspec.Struct, frozen=True):
    """The communication kernels of one device, in start order, one entry per kernel."""

    rows: I64  # rows of the trace's events
    group: list[str]
    index: I64  # the n-th collective of its group on this device
    kind: list[str]
    start_ns: I64
    end_ns: I64
    message_bytes: I64  # -1: not recorded
    group_size: I64  # -1: not recorded

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    @property
    def dur_ns(self) -> I64:
        return self.end_ns - self.start_ns


def collective_kind(name: str) -> str:
    """``all_reduce``, ``all_gather``, ... from a collective's recorded name or its kernel's."""
    for kind, pattern in _KINDS:
        if pattern.search(name):
            return kind
    return "other"


def bus_factor(kind: str, ranks: int) -> float | None:
    """NCCL's bus-bandwidth factor: what each rank's link carries per byte of message."""
    if ranks < 1:
        return None
    if kind == "all_reduce":
        return 2.0 * (ranks - 1) / ranks
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (ranks - 1) / ranks
    if kind in ("broadcast", "reduce", "send_recv"):
        return 1.0
    return None


def _message_bytes(args: dict[str, Any]) -> int:
    nelems = [args.get("in_msg_nelems"), args.get("out_msg_nelems")]
    known = [n for n in nelems if isinstance(n, int) and n >= 0]
    dtype = str(args.get("dtype") or "").lower().removeprefix("c10::").removeprefix("torch.")
    element = _ELEMENT_BYTES.get(dtype, 1 if dtype.startswith("float8") else 0)
    if not known or not element:
        return -1
    return max(known) * element


def _group_size(args: dict[str, Any]) -> int:
    size = args.get("group_size")
    return size if isinstance(size, int) else -1


def collectives(work: DeviceWork) -> CollectiveTable:
    """The device's communication kernels with their group, kind and message size."""
    trace = work.trace
    ev = trace.events
    rows = work.rows[work.work_class == WorkClass.COMMUNICATION]
    rows = rows[ev.kind[rows] == Kind.KERNEL]
    op_args = _collective_op_args(work)
    streams = ev.stream[rows].tolist()
    # A group named by its stream: the n-th communication stream, by order of first use.
    stream_group = {s: f"stream#{i}" for i, s in enumerate(dict.fromkeys(streams))}
    extra, names = ev.extra, trace.names
    if extra or op_args:
        externals = ev.external_id[rows].tolist()
        args = [
            extra.get(row) or op_args.get(external) or _NO_ARGS
            for row, external in zip(rows.tolist(), externals, strict=True)
        ]
    else:  # nothing recorded (Nsight Systems, many Kineto traces): no lookups per kernel
        return _by_stream(work, rows, streams, stream_group)
    groups = [
        f"pg:{a['process_group']}" if a.get("process_group") is not None else stream_group[s]
        for a, s in zip(args, streams, strict=True)
    ]
    index: list[int] = []
    seen: dict[str, int] = {}
    for group in groups:
        n = seen.get(group, 0)
        index.append(n)
        seen[group] = n + 1
    # A job has thousands of collectives and a few names: each name is matched once.
    kind_of: dict[str, str] = {}
    kinds: list[str] = []
    for a, name_id in zip(args, ev.name_id[rows].tolist(), strict=True):
        recorded = a.get("collective_name")
        name = str(recorded) if recorded else names[name_id]
        kind = kind_of.get(name)
        if kind is None:
            kind = kind_of[name] = collective_kind(name)
        kinds.append(kind)
    sizes = [_message_bytes(a) if a else -1 for a in args]
    group_sizes = [_group_size(a) for a in args]
    return CollectiveTable(
        rows=rows.astype(np.int64),
        group=groups,
        index=np.array(index, dtype=np.int64),
        kind=kinds,
        start_ns=ev.start_ns[rows],
        end_ns=ev.end_ns[rows],
        message_bytes=np.array(sizes, dtype=np.int64),
        group_size=np.array(group_sizes, dtype=np.int64),
    )


def _by_stream(
    work: DeviceWork, rows: I64, streams: list[int], stream_group: dict[int, str]
) -> CollectiveTable:
    """:func:`collectives` where nothing is recorded with the kernels: each one's group is its
    stream's, its kind its name's (decided once per name), its sizes unknown."""
    ev, names = work.trace.events, work.trace.names
    ids = ev.name_id[rows]
    kind_of = {i: collective_kind(names[i]) for i in distinct(ids).tolist()}
    # The n-th collective of its group: a running count per stream, in row order.
    position = {s: i for i, s in enumerate(stream_group)}
    code = np.array([position[s] for s in streams], dtype=np.int64)
    index = np.zeros(len(streams), dtype=np.int64)
    for c in range(len(stream_group)):
        mine = np.flatnonzero(code == c)
        index[mine] = np.arange(mine.size)
    unknown = np.full(len(streams), -1, dtype=np.int64)
    return CollectiveTable(
        rows=rows.astype(np.int64),
        group=[stream_group[s] for s in streams],
        index=index,
        kind=[kind_of[i] for i in ids.tolist()],
        start_ns=ev.start_ns[rows],
        end_ns=ev.end_ns[rows],
        message_bytes=unknown,
        group_size=unknown.copy(),
    )


def _collective_op_args(work: DeviceWork) -> dict[int, dict[str, Any]]:
    """``record_param_comms`` (and other host ops) with collective args, by External id."""
    ev = work.trace.events
    found: dict[int, dict[str, Any]] = {}
    for row, args in ev.extra.items():
        if "collective_name" in args and ev.kind[row] == Kind.CPU_OP and ev.external_id[row] >= 0:
            found[int(ev.external_id[row])] = args
    return found
