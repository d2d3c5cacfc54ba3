"""Reader for PyTorch's native Perfetto export (``.pftrace``), offline, with ``protobuf``.

Contract: :func:`looks_like_pftrace` sniffs the first bytes (already un-gzipped) for a Perfetto
``Trace`` whose first packets are ones PyTorch writes; :func:`read` returns a
:class:`~gpuscope.model.Job` with one :class:`~gpuscope.model.Trace` (``format`` ``"pftrace"``),
or raises :class:`~gpuscope.errors.InputError` with one line naming the file: a malformed
protobuf is ``CorruptInputError``, never a traceback.

The layouts (see :mod:`gpuscope.testing.pftrace`, which writes both): PyTorch main's
``torch/profiler/_cuspy/trace.py`` + ``cuspy_pftrace.cpp`` ("cuspy") and the older
``_cupti/monitor_trace.py`` + ``monitor_pftrace.cpp`` ("monitor"). What becomes what:

* ``ClockSnapshot``: its BOOTTIME time is the trace's base (Kineto's ``baseTimeNanoseconds``);
  times are kept relative to it, as the Kineto reader keeps them.
* ``TrackDescriptor``: thread tracks give each slice its ``pid`` and ``tid``; a track under a
  process named ``GPU N`` with a thread named ``stream K`` is device ``N``, stream ``K``.
* ``InternedData``: event names, categories (``cpu_op``, ``cuda_runtime``, ... decide the kind,
  as the Kineto categories do), render-stage specifications (the stages ``Kernel``, ``Memcpy``,
  ``Memset``, ``Annotation``; the lanes ``[NN] stream K``), kernel names (field 1000).
* ``TrackEvent`` slices: the exporter writes each group's begins, then all of that group's ends,
  so the k-th end on a track closes the k-th begin of the group on that track (in order). Pairing
  by time nesting would pair slices that touch or overlap wrongly. Debug annotations are the
  JSON's ``args`` (``External id``, ``Python id``, shapes, ...). Without categories (monitor),
  a slice on a ``GPU N`` track is device work (``Memcpy``/``Memset`` by name), one with a
  ``cbid`` or flow id on a CPU thread a runtime call, one with a ``Python id`` a Python frame.
* ``GpuRenderStageEvent``: kernels, copies, memsets and GPU annotations, on their lane's device
  and stream; a kernel's launch dimensions give its grid and block sizes; ``extra_data``
  ``bytes`` a copy's size.
* Launches: a runtime slice's ``gpu_correlation`` (``TrackEvent`` field 3000) names the render
  stages it launched; the monitor layout's ``flow_ids`` join a launch to its GPU slice. Either
  becomes a shared correlation id, and the launch links as in a Kineto trace.
* ``GpuCounterEvent``: PM-sampling and environment counters, per GPU, as counter series
  (``Trace.counters``).

Not in the file, so not in the diagnosis (``Trace.metadata["not_carried"]`` lists them): copy
direction and pinned/pageable memory, ``[memory]`` events, ``distributedInfo`` (rank and world
size), device properties (name, SMs, memory) and GPU work's ``External id``.

Speed: a C walker (``_pfscan.c``, see :mod:`._columns`) reads the slices and render stages
straight from the wire format into columns, and numpy pairs and joins them; only the few other
packets (clock, tracks, interned data, counters) go through protobuf. Where the walker is not
built, or does not follow a file, protobuf decodes every packet and Python reads each in turn
(``_decode.PacketReader``: the same trace, several times slower). benchmarks/pftrace_read.py
measures it against the same run's JSON.
"""

from __future__ import annotations

import gc
from pathlib import Path

from gpuscope.errors import CorruptInputError, EmptyTraceError
from gpuscope.model import Job
from gpuscope.readers._io import memory_budget, read_bytes
from gpuscope.readers.pftrace._decode import NOT_CARRIED, Decoded, decode
from gpuscope.readers.pftrace._frame import looks_like_pftrace, whole_packets

__all__ = ["NOT_CARRIED", "looks_like_pftrace", "read"]

#: A decoded trace takes up to this many times its bytes in protobuf and Python objects.
DECODED_FACTOR = 12


def read(path: Path) -> Job:
    content = read_bytes(path, limit=memory_budget() // DECODED_FACTOR)
    data = content.data
    was_enabled = gc.isenabled()
    gc.disable()  # millions of short-lived objects and no cycles
    try:
        decoded = _decode(path, data, truncated=content.truncated)
    finally:
        if was_enabled:
            gc.enable()
    trace = decoded.trace
    if decoded.lost_tail:
        trace.warnings.append(
            f"{path}: the file ends mid-write; read the {decoded.packets:,} whole packets"
            " before the cut, the rest is lost"
        )
    return Job(source=str(path), traces=[trace])


def _decode(path: Path, data: bytes, *, truncated: bool) -> Decoded:
    from google.protobuf.message import DecodeError  # noqa: PLC0415 - protobuf loads on use

    try:
        return decode(path, data, lost_tail=truncated)
    except DecodeError:
        pass
    end = whole_packets(data)
    if end <= 0:
        raise CorruptInputError(path, "not a readable Perfetto trace (malformed protobuf)")
    try:
        return decode(path, data[:end], lost_tail=True)
    except DecodeError:
        raise CorruptInputError(
            path, "not a readable Perfetto trace (malformed protobuf)"
        ) from None
    except EmptyTraceError:
        raise
