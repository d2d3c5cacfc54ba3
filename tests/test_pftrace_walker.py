"""The C ``.pftrace`` walker (``readers/pftrace/_pfscan.c``) against its pure-Python twin (the
packet-by-packet protobuf reader): the same trace, column for column, on a corpus trace in both
of PyTorch's layouts, on documents built here (stray ends, begins never closed, ids of odd
types, names inline) and on damaged bytes; and the walker's own refusals, in one line."""

from __future__ import annotations

import gzip
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from corpus import corpus
from gpuscope.errors import InputError
from gpuscope.model import Trace
from gpuscope.readers import load
from gpuscope.readers.pftrace import _columns
from gpuscope.readers.pftrace import schema as pb
from gpuscope.testing.pftrace import damaged, to_pftrace, write_pftrace
from gpuscope.testing.same import trace_difference

pytestmark = pytest.mark.skipif(_columns._pfscan is None, reason="the C walker is not built")


def _both(path: Path) -> tuple[Trace | str, Trace | str]:
    """(walker, protobuf) reads of one file: each a trace or its one-line error."""
    results: list[Trace | str] = []
    for walker in (_columns._pfscan, None):
        saved, _columns._pfscan = _columns._pfscan, walker
        try:
            results.append(load(path).traces[0])
        except InputError as error:
            results.append(str(error))
        finally:
            _columns._pfscan = saved
    return results[0], results[1]


def assert_same(a: Trace | str, b: Trace | str) -> None:
    assert type(a) is type(b), (a, b)
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    assert trace_difference(a, b) is None


@pytest.mark.parametrize("layout", ["cuspy", "monitor"])
def test_a_corpus_trace_reads_the_same_both_ways(tmp_path: Path, layout: str) -> None:
    source = corpus("kineto/hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    walked, decoded = _both(write_pftrace(source, tmp_path / "run.pftrace", layout))
    assert isinstance(walked, Trace) and len(walked.events) > 40_000
    assert_same(walked, decoded)


def _doc() -> dict[str, Any]:
    def x(cat: str, name: str, ts: float, dur: float, tid: int = 22, **args: Any) -> Any:
        return {"ph": "X", "cat": cat, "name": name, "pid": 11, "tid": tid, "ts": ts, "dur": dur,
                "args": args}  # fmt: skip

    events = [
        x("user_annotation", "ProfilerStep#3", 0.0, 100.0),
        x("cpu_op", "aten::mm", 1.0, 20.0, **{"External id": 5, "Input Dims": [[8, 8], [8]]}),
        x("cpu_op", "aten::mm", 30.0, 20.0, **{"External id": 6, "Input Dims": [[8, 8], [8]]}),
        x("cpu_op", "aten::add", 31.0, 2.0, tid=23, **{"External id": "7", "Input Dims": []}),
        x("python_function", "f", 0.5, 60.0, **{"Python id": 3, "Python parent id": 1}),
        x("cuda_runtime", "cudaLaunchKernel", 2.0, 3.0, correlation=41, cbid=211),
        x("cuda_runtime", "cudaLaunchKernel", 6.0, 3.0, correlation=0),
        x("cuda_runtime", "cudaMemcpyAsync", 10.0, 3.0, correlation=43),
        x("kernel", "k", 10.0, 10.0, device=0, stream=7, correlation=41, grid=[4, 2, 1]),
        x("kernel", "k2", 20.0, 5.5, device=0, stream=7, correlation=0),
        x("gpu_memcpy", "Memcpy HtoD", 14.0, 4.0, device=0, stream=9, correlation=43, bytes=64),
    ]
    counters = [
        {"ph": "C", "name": "SM active", "pid": "GPU 0 Counters", "ts": t, "args": {"": v}}
        for t, v in ((10.0, 91.0), (15.0, 88.5))
    ]
    return {"traceEvents": events + counters, "baseTimeNanoseconds": 1_700_000_000_000_000_000}


@pytest.mark.parametrize("layout", ["cuspy", "monitor"])
def test_a_built_document_reads_the_same_both_ways(tmp_path: Path, layout: str) -> None:
    path = write_pftrace(_doc(), tmp_path / "run.pftrace", layout)
    walked, decoded = _both(path)
    assert isinstance(walked, Trace)
    assert_same(walked, decoded)


def _hand_made(rng: random.Random) -> bytes:
    """Slices on three tracks (one a GPU stream), begins and ends in a random order (ends with
    none open, begins never closed), names interned or inline, ids of every annotation type,
    launches naming render stages, flows."""
    trace = pb.Trace()
    for uuid, (pid, tid, name, parent) in {
        1: (5, 6, "main", 0), 2: (5, 7, "worker", 0), 3: (0, 7, "stream 7", 9)
    }.items():  # fmt: skip
        track = trace.packet.add().track_descriptor
        track.uuid, track.parent_uuid = uuid, parent
        track.thread.pid, track.thread.tid, track.thread.thread_name = pid, tid, name
    gpu = trace.packet.add().track_descriptor
    gpu.uuid, gpu.process.pid, gpu.process.process_name = 9, 0, "GPU 0"
    interned = trace.packet.add().interned_data
    for iid, name in ((1, "cpu_op"), (2, "cuda_runtime"), (3, "kernel")):
        interned.event_categories.add(iid=iid, name=name)
    for iid, name in ((1, "op"), (2, "cudaLaunchKernel"), (3, "gemm"), (4, "Memcpy")):
        interned.event_names.add(iid=iid, name=name)
    for iid, name in ((1, "Kernel"), (2, "Memcpy"), (10, "[07] stream 7")):
        interned.gpu_specifications.add(iid=iid, name=name)
    ids = ("correlation", "External id", "Python id", "cbid", "device", "stream", "bytes")
    for _ in range(rng.randrange(5, 60)):
        packet = trace.packet.add(timestamp=rng.randrange(1000))
        if rng.random() < 0.15:
            stage = packet.gpu_render_stage_event
            stage.event_id, stage.duration = rng.randrange(6), rng.randrange(50)
            stage.stage_iid, stage.hw_queue_iid = rng.choice((1, 2, 7)), rng.choice((10, 11))
            stage.extra_data.add(name="bytes", value=rng.choice(("64", "x", "")))
            stage.launch.grid_size.x = rng.randrange(3)
            continue
        event = packet.track_event
        event.track_uuid = rng.choice((1, 2, 3, 4))
        event.type = rng.choice((1, 1, 2, 2, 3))
        if rng.random() < 0.7:
            event.name_iid = rng.randrange(6)
        elif rng.random() < 0.5:
            event.name = rng.choice(("inline", "Memset", "ProfilerStep#1", "Event Sync"))
        if rng.random() < 0.5:
            event.category_iids.append(rng.randrange(5))
        elif rng.random() < 0.3:
            event.categories.append(rng.choice(("cpu_op", "odd")))
        for _ in range(rng.randrange(4)):
            a = event.debug_annotations.add(name=rng.choice(ids))
            match rng.randrange(6):
                case 0:
                    a.int_value = rng.randrange(-3, 50)
                case 1:
                    a.uint_value = rng.choice((3, 2**63 + 1))
                case 2:
                    a.string_value = rng.choice(("12", "x"))
                case 3:
                    a.bool_value = True
                case 4:
                    a.double_value = 1.5
                case _:
                    a.array_values.add(int_value=4)
        if rng.random() < 0.2:
            event.gpu_correlation.render_stage_submission_event_ids.extend(
                rng.randrange(6) for _ in range(rng.randrange(3))
            )
        elif rng.random() < 0.2:
            event.flow_ids.append(rng.randrange(2**64))
    if rng.random() < 0.1:  # names redefined after the events: the walker leaves it to protobuf
        trace.packet.add().interned_data.event_names.add(iid=1, name="renamed")
    data: bytes = trace.SerializeToString()
    return data


def test_hand_made_documents_read_the_same_both_ways(tmp_path: Path) -> None:
    rng = random.Random(33)
    path = tmp_path / "made.pftrace"
    traces = 0
    for _ in range(150):
        path.write_bytes(_hand_made(rng))
        walked, decoded = _both(path)
        assert_same(walked, decoded)
        traces += isinstance(walked, Trace)
    assert traces > 100  # most are traces, not errors


@pytest.mark.parametrize("layout", ["cuspy", "monitor"])
def test_damaged_bytes_read_the_same_both_ways(tmp_path: Path, layout: str) -> None:
    """Cut, flipped, inserted or dropped bytes: the same trace, or the same one-line error."""
    rng = random.Random(layout)
    base = to_pftrace(_doc(), layout)
    base = gzip.decompress(base) if layout == "cuspy" else base
    path = tmp_path / "damaged.pftrace"
    for _ in range(200):
        path.write_bytes(damaged(base, rng))
        walked, decoded = _both(path)
        assert_same(walked, decoded)


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b"\x0a\x05\x5a\x03\x48", "a length past the end"),  # a track event longer than its packet
        (b"\x0a\x03\x5a\x01\x48", "a truncated varint"),  # type without its value
        (b"\x0a\x02\x5a\xff", "a truncated length"),
        (b"\x0a\x0b" + b"\x40" + b"\xff" * 10, "a truncated varint"),  # an 11-byte timestamp
        (b"\x0b\x0c", "a group"),
        (b"\x0a\x02\x5a\x00\x0f", "an invalid wire type"),
        (b"\x0a\x04\x5a\x00\x62\x00", "more than one data field"),
    ],
)
def test_the_walker_refuses_what_it_does_not_follow_in_one_line(data: bytes, why: str) -> None:
    assert _columns._pfscan is not None
    with pytest.raises(ValueError, match=why) as refused:
        _columns._pfscan.scan(data, _columns._WANTED_BYTES, _columns._ID_BYTES)
    assert "\n" not in str(refused.value)


def test_skipped_fields_of_every_wire_type_are_stepped_over() -> None:
    """Fields the reader does not use (varint, fixed64, length-delimited, fixed32), in a packet
    and in a slice, packed or not, leave the columns as they were."""
    assert _columns._pfscan is not None
    packet = pb.TracePacket(timestamp=7)
    packet.track_event.type, packet.track_event.track_uuid = 1, 5
    plain = pb.Trace(packet=[packet]).SerializeToString()
    unknown = b"\xa8\x1f\x05" + b"\xb1\x1f" + bytes(8) + b"\xba\x1f\x02ab" + b"\xbd\x1f" + bytes(4)
    inner = packet.track_event.SerializeToString() + unknown
    event = b"\x5a" + bytes([len(inner)]) + inner
    body = b"\x40\x07" + unknown + event
    noisy = b"\x0a" + bytes([len(body)]) + body + b"\x10\x01"  # and an unknown Trace field
    scan = _columns._pfscan.scan
    assert scan(noisy, (), ())[:2] == scan(plain, (), ())[:2]
    marks = np.frombuffer(scan(noisy, (), ())[0], dtype=np.int64)
    assert marks.tolist() == [0, 7, 1, 5]
