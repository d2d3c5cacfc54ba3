"""Re-create, one at a time, the HTA 0.5.0 behaviours that make its figures differ from gpuscope's.

Contract: :func:`emulated_work` builds a :class:`~gpuscope.analyses.timeline.DeviceWork` from
gpuscope's own model of a trace, on HTA's default window (:func:`drop_last_step`), with the chosen
:class:`Behaviour` s switched on; gpuscope's own :func:`temporal_breakdown` and :func:`overlap` then
compute the figures from it. With no behaviour it selects and classifies exactly what
:func:`~gpuscope.analyses.timeline.device_work` does, so any change in a figure is that
behaviour's doing. Nothing here changes gpuscope; this is a benchmark/test aid that explains
differences, not a second implementation of HTA.

The behaviours, each from HTA 0.5.0's source (``docs/parity.md`` has the numbers):

* ``ROUNDING``: when a trace has fractional-µs timestamps HTA shrinks every event inward to whole
  µs before anything else (``ts = ceil(ts)``, ``end = floor(ts + dur)``), so a 0.6 µs kernel lasts
  0 or -1 µs (``trace_parser.py:round_down_time_stamps``). Applied to the whole trace before the
  window, as HTA does, with HTA's float64 sum ``ts + dur`` (at 1.7e15 µs a float64 holds only
  quarter µs, so the sum is rounded before the floor).
* ``STREAM_ARG``: HTA counts every event that has a ``stream`` arg as GPU time, whatever its
  category: ``cuda_sync`` (``Stream Sync``, ``Context Sync``, ``Stream Wait Event``) and host
  ``cpu_op`` rows such as Inductor's ``triton_*`` launchers. Needs the raw JSON for the host rows
  (gpuscope's model keeps no stream on host events). Their type comes from HTA's name rules.
* ``NAME_TYPING``: HTA types device work by name alone: communication is ``^nccl.*Kernel``, so
  ``multimem_all_reduce`` and DeepEP ``dispatch``/``combine`` are compute; anything containing
  ``Memcpy``/``Sync`` or starting with ``Memset`` is not compute.
* ``MTIA_DMA``: HTA ignores device events with no ``stream`` arg (137 MTIA ``dma_request``
  events); gpuscope puts them on their ``tid``'s queue. Needs the raw JSON.

HTA's MEMORY and OTHER types have no gpuscope class: they are stored as ``MEMCPY`` and
``MEMSET`` here; only compute, communication and the busy union enter the compared figures.
"""

from __future__ import annotations

import enum
import gzip
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from msgspec.structs import replace
from numpy.typing import NDArray

from gpuscope.analyses.intervals import union
from gpuscope.analyses.timeline import DeviceWork, WorkClass, device_work
from gpuscope.analyses.window import drop_last_step
from gpuscope.model import BUSY_KINDS, Kind, Trace

try:  # a benchmark-only dependency; the stdlib decoder gives the same result, slower
    import orjson

    def _loads(data: bytes) -> Any:
        return orjson.loads(data)

except ImportError:  # pragma: no cover - depends on the environment
    import json

    def _loads(data: bytes) -> Any:
        return json.loads(data)


class Behaviour(enum.Enum):
    ROUNDING = "rounding"
    STREAM_ARG = "stream-arg"
    NAME_TYPING = "name-typing"
    MTIA_DMA = "mtia-dma"


#: One line per behaviour, for tables and test messages.
DESCRIPTION: dict[Behaviour, str] = {
    Behaviour.ROUNDING: "HTA rounds float-µs events inward to whole µs",
    Behaviour.STREAM_ARG: "HTA counts cuda_sync / cpu_op rows with a stream arg as GPU time",
    Behaviour.NAME_TYPING: "HTA types by name (^nccl.*Kernel): other collectives are compute",
    Behaviour.MTIA_DMA: "HTA drops device events without a stream arg (MTIA dma)",
}

#: Behaviours that need :func:`raw_streams` (the model alone does not carry what they need).
NEEDS_RAW = frozenset({Behaviour.STREAM_ARG, Behaviour.MTIA_DMA})

_HTA_COMMUNICATION = re.compile(r"^nccl.*Kernel")
_HTA_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_HTA_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")


def hta_kernel_type(name: str) -> WorkClass:
    """HTA's ``get_kernel_type``, mapped to gpuscope's classes (MEMORY→MEMCPY, OTHER→MEMSET)."""
    if _HTA_COMMUNICATION.match(name):
        return WorkClass.COMMUNICATION
    if _HTA_MEMORY.match(name):
        return WorkClass.MEMCPY
    if not _HTA_NOT_COMPUTE.match(name):
        return WorkClass.COMPUTE
    return WorkClass.MEMSET


# --- raw JSON: what HTA reads that gpuscope's model does not keep --------------------------------


@dataclass(frozen=True)
class RawStreams:
    """HTA's ``stream`` for events of one raw trace file, keyed by ``(name, start_ns)``.

    ``host``: events with a usable ``args.stream`` whose kind gpuscope keeps on the host.
    ``missing``: device events (kernel / memcpy / memset / ``mtia_ccp_events``) with no usable
    ``args.stream``, which HTA gives stream -1.
    """

    host: dict[tuple[str, int], int]
    missing: frozenset[tuple[str, int]]


_DEVICE_CATEGORIES = frozenset(
    {"kernel", "gpu_memcpy", "gpu_memset", "memcpy", "memset", "mtia_ccp_events"}
)
_HOST_CATEGORIES = frozenset(
    {"cpu_op", "operator", "cuda_runtime", "runtime", "cuda_driver", "user_annotation"}
)


def _hta_stream(value: Any) -> int:
    """HTA's ``normalize_gpu_stream_numbers``: ``int(stream)``, -1 when that fails."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def _us_to_ns(value: int | float) -> int:
    """The reader's µs→ns conversion, for one value (whole µs, then rounded nanoseconds)."""
    if isinstance(value, int):
        return value * 1000
    whole = int(np.floor(value))
    return whole * 1000 + int(np.rint((value - whole) * 1000.0))


def raw_streams(path: Path) -> RawStreams:
    """Read one trace file's JSON and collect the stream facts the behaviours need."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    host: dict[tuple[str, int], int] = {}
    missing: set[tuple[str, int]] = set()
    for event in _loads(data).get("traceEvents", []):
        if event.get("ph") != "X" or "dur" not in event or "ts" not in event:
            continue
        category = str(event.get("cat", "")).lower()
        args = event.get("args")
        stream = _hta_stream(args.get("stream")) if isinstance(args, dict) else -1
        key = (str(event.get("name", "")), _us_to_ns(event["ts"]))
        if category in _HOST_CATEGORIES and stream >= 0:
            host[key] = stream
        elif category in _DEVICE_CATEGORIES and stream < 0:
            missing.add(key)
    return RawStreams(host, frozenset(missing))


# --- the behaviours, applied to gpuscope's model -------------------------------------------------


def round_inward(trace: Trace) -> Trace:
    """Every event shrunk inward to whole µs, as HTA does to float-µs traces.

    ``ceil`` keeps the start order, so the table stays sorted. Durations can become 0 or -1 µs;
    gpuscope's interval union ignores such events (HTA counts an isolated -1 µs as -1 µs busy).
    Traces already in whole µs are unchanged.
    """
    ev = trace.events
    start = -((-ev.start_ns) // 1000) * 1000
    # HTA adds the two float64 µs values; at ~1.7e15 µs (ns_resolution) a float64 holds only
    # quarter µs, so the sum is rounded before the floor. Rebuild the floats the file held.
    start_us = (ev.start_ns // 1000).astype(np.float64) + (ev.start_ns % 1000) / 1000.0
    end_us = np.floor(start_us + ev.dur_ns / 1000.0)
    end = end_us.astype(np.int64) * 1000
    return replace(trace, events=replace(ev, start_ns=start, dur_ns=end - start))


def _with_hta_streams(trace: Trace, raw: RawStreams) -> tuple[Trace, NDArray[np.bool_]]:
    """``trace`` with HTA's stream on host rows, and the mask of device rows HTA gives stream -1.

    The host stream goes into the ``stream`` column (``-1`` for host rows in gpuscope's model,
    and not read by the window), so that it survives :func:`drop_last_step`; the returned mask
    is turned into ``stream = -2`` for the same reason.
    """
    ev = trace.events
    names = trace.names
    stream = ev.stream.copy()
    host_rows = np.flatnonzero(ev.device < 0)
    for row in host_rows.tolist():
        key = (names[int(ev.name_id[row])], int(ev.start_ns[row]))
        hta = raw.host.get(key)
        if hta is not None:
            stream[row] = hta
    missing = np.zeros(len(ev), dtype=np.bool_)
    if raw.missing:
        for row in np.flatnonzero(ev.of_kind(*BUSY_KINDS)).tolist():
            if (names[int(ev.name_id[row])], int(ev.start_ns[row])) in raw.missing:
                missing[row] = True
    stream[missing] = -2
    return replace(trace, events=replace(ev, stream=stream)), missing


def emulated_work(
    trace: Trace,
    device: int,
    behaviours: Iterable[Behaviour] = (),
    raw: RawStreams | None = None,
) -> DeviceWork:
    """The device work HTA would analyse on ``device``, with only ``behaviours`` of HTA's on.

    Always on HTA's default window. ``raw`` (from :func:`raw_streams`) is required for the
    behaviours in :data:`NEEDS_RAW`.
    """
    chosen = frozenset(behaviours)
    if chosen & NEEDS_RAW and raw is None:
        raise ValueError(f"{sorted(b.value for b in chosen & NEEDS_RAW)} need raw_streams()")
    if raw is not None and chosen & NEEDS_RAW:  # first: raw events are keyed by exact start
        trace, _ = _with_hta_streams(trace, raw)
    if Behaviour.ROUNDING in chosen:
        trace = round_inward(trace)
    trace = drop_last_step(trace)
    if not chosen - {Behaviour.ROUNDING}:
        return device_work(trace, device)

    ev = trace.events
    base = device_work(trace, device)
    rows = base.rows
    work_class = base.work_class.copy()
    if Behaviour.MTIA_DMA in chosen:
        keep = ev.stream[rows] != -2
        rows, work_class = rows[keep], work_class[keep]
    if Behaviour.NAME_TYPING in chosen:
        work_class = np.array(
            [hta_kernel_type(trace.names[int(i)]) for i in ev.name_id[rows]], dtype=np.uint8
        )
    if Behaviour.STREAM_ARG in chosen:
        sync = ev.of_kind(Kind.SYNC) & (ev.device == device)
        host = (ev.device < 0) & (ev.stream >= 0)
        extra = np.flatnonzero((sync | host) & (ev.dur_ns > 0))
        extra_class = [hta_kernel_type(trace.names[int(i)]) for i in ev.name_id[extra]]
        rows = np.concatenate([rows, extra.astype(np.int64)])
        work_class = np.concatenate([work_class, np.array(extra_class, dtype=np.uint8)])
        order = np.argsort(ev.start_ns[rows], kind="stable")
        rows, work_class = rows[order], work_class[order]
    starts, ends = ev.start_ns[rows], ev.end_ns[rows]
    by_class = {c: union(starts[work_class == c], ends[work_class == c]) for c in WorkClass}
    return DeviceWork(trace, device, rows, work_class, union(starts, ends), by_class)
