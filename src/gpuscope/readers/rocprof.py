"""Reader for rocprofv3's JSON output (rocprofiler-sdk, ``rocprofv3 --json``): one process's
kernel dispatches, memory copies and HIP API calls, as one :class:`~gpuscope.model.Trace`.

Contract: :func:`looks_like_rocprof` sniffs the first bytes; :func:`read` returns a
:class:`~gpuscope.model.Job` of one trace per process in the file, or raises ``InputError``.

The format (rocprofiler-sdk's ``generateJSON``): ``{"rocprofiler-sdk-tool": [PROCESS, ...]}``,
each PROCESS with

* ``agents``: CPUs (``type`` 1) and GPUs (``type`` 2). A GPU's ``logical_node_type_id`` is its
  index among the GPUs, the device number HIP and PyTorch use; ``product_name`` its marketing
  name, ``name`` its ISA (``gfx950``), ``cu_count`` its compute units.
* ``kernel_symbols``: a kernel's names by ``kernel_id`` (``demangled_kernel_name``, as Kineto
  writes kernel names on ROCm).
* ``buffer_records``: ``kernel_dispatch`` (``dispatch_info`` holds the agent, queue, kernel id,
  and the grid and workgroup sizes in work-items), ``memory_copy`` (``src_agent_id``,
  ``dst_agent_id``, ``bytes``) and ``hip_api`` (host calls). Every record has
  ``start_timestamp`` / ``end_timestamp`` in nanoseconds on one clock, ``thread_id``, ``kind`` and
  ``operation`` (indexes into ``strings.buffer_records``, which names them) and
  ``correlation_id.internal``, shared by a HIP call and the device work it launched.
* ``metadata``: the process id and its command line.

A record without both timestamps is skipped and counted in a warning. Work on a HIP stream keeps
its stream handle; work rocprofv3 did not tie to a stream (handle 0) takes its hardware queue's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from gpuscope.errors import CorruptInputError, EmptyTraceError
from gpuscope.model import CopyDirection, DeviceInfo, Events, Job, Kind, Trace
from gpuscope.readers._io import read_bytes
from gpuscope.readers._links import link_launches

_HEAD = re.compile(rb'^\s*\{\s*"rocprofiler-sdk-tool"\s*:')
_GPU_AGENT = 2
#: MEMORY_COPY operations, as rocprofiler-sdk names them, and their direction.
_COPY_DIRECTIONS = {
    "MEMORY_COPY_HOST_TO_DEVICE": CopyDirection.H2D,
    "MEMORY_COPY_DEVICE_TO_HOST": CopyDirection.D2H,
    "MEMORY_COPY_DEVICE_TO_DEVICE": CopyDirection.D2D,
    "MEMORY_COPY_HOST_TO_HOST": CopyDirection.OTHER,
}
#: Kineto's names for the same copies, so that rules keyed on names read both alike.
_COPY_NAMES = {
    CopyDirection.H2D: "Memcpy HtoD",
    CopyDirection.D2H: "Memcpy DtoH",
    CopyDirection.D2D: "Memcpy DtoD",
    CopyDirection.P2P: "Memcpy PtoP",
    CopyDirection.OTHER: "Memcpy",
}


def looks_like_rocprof(head: bytes) -> bool:
    return _HEAD.match(head) is not None


def read(path: Path) -> Job:
    content = read_bytes(path)
    try:
        document = msgspec.json.decode(content.data)
    except msgspec.DecodeError as error:
        cut = " (the file is cut off)" if content.truncated else ""
        raise CorruptInputError(path, f"rocprofv3 JSON that does not parse{cut}: {error}") from None
    processes = document.get("rocprofiler-sdk-tool") if isinstance(document, dict) else None
    if not isinstance(processes, list) or not processes:
        raise CorruptInputError(path, "rocprofv3 JSON without a process record")
    traces = [_trace(path, p) for p in processes if isinstance(p, dict)]
    traces = [t for t in traces if t.device_ids]  # a process that launched nothing is no rank
    if not traces:
        raise EmptyTraceError(
            path,
            "a rocprofv3 trace without kernel dispatches or memory copies (run rocprofv3"
            " with --kernel-trace --memory-copy-trace)",
        )
    return Job(source=str(path), traces=traces)


class _Columns:
    """Rows collected record by record, then handed to numpy once."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.name_ids: dict[str, int] = {}
        self.cols: dict[str, list[Any]] = {
            k: []
            for k in (
                "kind",
                "name_id",
                "start_ns",
                "dur_ns",
                "tid",
                "device",
                "stream",
                "correlation",
                "bytes",
                "copy_direction",
                "grid_blocks",
                "block_threads",
            )
        }

    def name(self, text: str) -> int:
        found = self.name_ids.get(text)
        if found is None:
            found = self.name_ids[text] = len(self.names)
            self.names.append(text)
        return found

    def add(self, **row: Any) -> None:
        for key, column in self.cols.items():
            column.append(row.get(key, -1 if key not in ("copy_direction",) else 0))


def _trace(path: Path, process: dict[str, Any]) -> Trace:
    agents = [a for a in _list(process.get("agents")) if isinstance(a, dict)]
    gpus = {_handle(a.get("id")): a for a in agents if a.get("type") == _GPU_AGENT}
    device_of = {h: _device_index(a, i) for i, (h, a) in enumerate(gpus.items())}
    symbols = {
        _int(s.get("kernel_id")): str(s.get("demangled_kernel_name") or s.get("kernel_name"))
        for s in _list(process.get("kernel_symbols"))
        if isinstance(s, dict)
    }
    operations = _operations(_dict(process.get("strings")))
    records = _dict(process.get("buffer_records"))
    out = _Columns()
    skipped = 0
    skipped += _dispatches(_list(records.get("kernel_dispatch")), device_of, symbols, out)
    skipped += _copies(_list(records.get("memory_copy")), device_of, operations, out)
    skipped += _hip_calls(_list(records.get("hip_api")), operations, out)
    metadata = _dict(process.get("metadata"))
    pid = _int(metadata.get("pid"))
    events = _events(out, pid)
    warnings = []
    if skipped:
        warnings.append(
            f"{path}: {skipped} records without usable start and end timestamps skipped"
        )
    return Trace(
        source=str(path),
        format="rocprofv3",
        schema="rocprofiler-sdk-json",
        rank=None,
        world_size=None,
        devices={device_of[h]: _device_info(device_of[h], a) for h, a in gpus.items()},
        names=out.names,
        events=events,
        steps=[],
        warnings=warnings,
        metadata={"pid": pid, "command": metadata.get("command")},
    )


#: The largest value a column holds (int64): a larger integer in a record is a corrupt one.
_INT64_MAX = 2**63 - 1


def _int(value: Any, default: int = -1) -> int:
    """An integer field as the column stores it; anything else (a string, a float, a list, a
    boolean, an integer beyond 64 bits: a hand-edited or corrupt record) reads as ``default``."""
    if type(value) is not int or not -_INT64_MAX <= value <= _INT64_MAX:
        return default
    return value


def _device_index(agent: dict[str, Any], position: int) -> int:
    """The GPU's logical index; its position among the GPU agents where that is missing or not
    a plausible index (the device column is 32-bit)."""
    index = _int(agent.get("logical_node_type_id"))
    return index if 0 <= index < 1 << 16 else position


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _handle(value: Any) -> int:
    return _int(value.get("handle")) if isinstance(value, dict) else -1


def _operations(strings: dict[str, Any]) -> dict[tuple[int, int], str]:
    """(record kind, operation) -> the operation's name, from ``strings.buffer_records``."""
    names: dict[tuple[int, int], str] = {}
    for kind, entry in enumerate(_list(strings.get("buffer_records"))):
        for op, name in enumerate(_list(_dict(entry).get("operations"))):
            names[(kind, op)] = str(name)
    return names


def _times(record: Any) -> tuple[int, int] | None:
    """(start, duration) in ns; None for a record that is no object, or whose times are not
    64-bit integers with the end at or after the start."""
    if not isinstance(record, dict):
        return None
    start, end = _int(record.get("start_timestamp"), -2), _int(record.get("end_timestamp"), -2)
    if start < 0 or end < start:
        return None
    return start, end - start


def _stream(record: dict[str, Any], queue: int) -> int:
    stream = _handle(record.get("stream_id"))
    return stream if stream > 0 else queue


def _dispatches(
    records: Sequence[Any], device_of: dict[int, int], symbols: dict[int, str], out: _Columns
) -> int:
    skipped = 0
    for r in records:
        times = _times(r)
        info = _dict(r.get("dispatch_info")) if times is not None else {}
        if times is None:
            skipped += 1
            continue
        grid, group = info.get("grid_size"), info.get("workgroup_size")
        threads = _volume(group)
        kernel_id = _int(info.get("kernel_id"))
        out.add(
            kind=Kind.KERNEL,
            name_id=out.name(symbols.get(kernel_id, f"kernel {kernel_id}")),
            start_ns=times[0],
            dur_ns=times[1],
            tid=_int(r.get("thread_id")),
            device=device_of.get(_handle(info.get("agent_id")), -1),
            stream=_stream(r, _handle(info.get("queue_id"))),
            correlation=_correlation(r),
            # HIP's grid size counts work-items; CUDA's (and the model's) counts blocks.
            grid_blocks=-(-_volume(grid) // threads) if threads > 0 and _volume(grid) > 0 else -1,
            block_threads=threads if threads > 0 else -1,
        )
    return skipped


def _copies(
    records: Sequence[Any],
    device_of: dict[int, int],
    operations: dict[tuple[int, int], str],
    out: _Columns,
) -> int:
    skipped = 0
    for r in records:
        times = _times(r)
        if times is None:
            skipped += 1
            continue
        src, dst = (
            device_of.get(_handle(r.get("src_agent_id"))),
            device_of.get(_handle(r.get("dst_agent_id"))),
        )
        op = operations.get((_int(r.get("kind")), _int(r.get("operation"))), "")
        direction = _COPY_DIRECTIONS.get(op, CopyDirection.OTHER)
        if direction == CopyDirection.D2D and src is not None and dst is not None and src != dst:
            direction = CopyDirection.P2P
        device = dst if dst is not None else src  # a copy runs on the GPU it involves
        out.add(
            kind=Kind.MEMCPY,
            name_id=out.name(_COPY_NAMES[direction]),
            start_ns=times[0],
            dur_ns=times[1],
            tid=_int(r.get("thread_id")),
            device=-1 if device is None else device,
            stream=_stream(r, 0),
            correlation=_correlation(r),
            bytes=_int(r.get("bytes")),
            copy_direction=direction,
        )
    return skipped


def _hip_calls(
    records: Sequence[Any], operations: dict[tuple[int, int], str], out: _Columns
) -> int:
    skipped = 0
    for r in records:
        times = _times(r)
        if times is None:
            skipped += 1
            continue
        kind, op = _int(r.get("kind")), _int(r.get("operation"))
        out.add(
            kind=Kind.RUNTIME,
            name_id=out.name(operations.get((kind, op), f"HIP call {op}")),
            start_ns=times[0],
            dur_ns=times[1],
            tid=_int(r.get("thread_id")),
            correlation=_correlation(r),
        )
    return skipped


def _correlation(record: dict[str, Any]) -> int:
    value = record.get("correlation_id")
    return _int(value.get("internal")) if isinstance(value, dict) else -1


def _volume(size: Any) -> int:
    """Work-items (or a work-group's size): -1 where a dimension is not a positive integer or
    the product would not fit a 64-bit column."""
    if not isinstance(size, dict):
        return -1
    volume = 1
    for axis in "xyz":
        extent = _int(size.get(axis, 1))
        if extent <= 0:
            return -1
        volume *= extent
    return volume if volume <= _INT64_MAX else -1


def _events(out: _Columns, pid: int) -> Events:
    n = len(out.cols["kind"])
    columns: dict[str, Any] = dict(out.cols)
    columns["pid"] = np.full(n, pid, dtype=np.int64)
    host = np.asarray(out.cols["kind"], dtype=np.uint8) == Kind.RUNTIME
    columns["device"] = np.where(host, -1, np.asarray(out.cols["device"], dtype=np.int32))
    columns["stream"] = np.where(host, -1, np.asarray(out.cols["stream"], dtype=np.int64))
    table = Events.from_columns(n, columns, {})
    order = np.argsort(table.start_ns, kind="stable")
    table = table.take(order)
    link_launches(table)
    return table


def _device_info(index: int, agent: dict[str, Any]) -> DeviceInfo:
    cus = agent.get("cu_count")
    return DeviceInfo(
        index=index,
        name=str(agent.get("product_name") or "") or None,
        vendor="amd",
        num_sms=cus if 0 < _int(cus) < 1 << 20 else None,
        total_memory_bytes=None,
        compute_capability=str(agent.get("name") or "") or None,
    )
