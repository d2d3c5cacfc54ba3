"""PyTorch's native Perfetto export (``.pftrace``): the reader, on documents built here (exact
values: pairing, launches, lanes, counters), on corpus Kineto traces converted to both of
PyTorch's layouts (the same diagnosis as the JSON, for everything both carry), and on bad input."""

from __future__ import annotations

import contextlib
import gzip
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from click.testing import CliRunner

from corpus import corpus
from gpuscope import diagnose
from gpuscope.cli import main
from gpuscope.errors import CorruptInputError
from gpuscope.model import Kind
from gpuscope.readers import load
from gpuscope.readers.pftrace import NOT_CARRIED, looks_like_pftrace
from gpuscope.readers.pftrace import schema as pb
from gpuscope.testing.pftrace import carried_only, damaged, to_pftrace, write_pftrace

#: Three modern corpus traces: one GPU with start-up and copies (alexnet), one rank of an
#: 8-rank job with collectives (DLRM), and one with nanosecond timestamps and shapes.
CORPUS = (
    "kineto/hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    "kineto/param-dlrm-8rank/worker0_step_12.1694128201545.pt.trace.json.gz",
    "kineto/hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
)
BASE_NS = 1_700_000_000_000_000_000


# --- a document built here ----------------------------------------------------------------------


def _doc() -> dict[str, Any]:
    """One step: an op launching two kernels on stream 7 and a copy on stream 9; a kernel on
    stream 7 that touches the next; a PM-sampling counter track."""

    def x(cat: str, name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
        return {"ph": "X", "cat": cat, "name": name, "pid": 11, "tid": 22, "ts": ts, "dur": dur,
                "args": args}  # fmt: skip

    events = [
        x("user_annotation", "ProfilerStep#3", 0.0, 100.0),
        x("cpu_op", "aten::mm", 1.0, 20.0, **{"External id": 5, "Input Dims": [[8, 8], [8, 8]]}),
        x("cuda_runtime", "cudaLaunchKernel", 2.0, 3.0, correlation=41),
        x("cuda_runtime", "cudaLaunchKernel", 6.0, 3.0, correlation=42),
        x("cuda_runtime", "cudaMemcpyAsync", 10.0, 3.0, correlation=43),
        x(
            "kernel",
            "gemm_a",
            10.0,
            10.0,
            device=0,
            stream=7,
            correlation=41,
            grid=[4, 2, 1],
            block=[128, 1, 1],
        ),
        x(
            "kernel",
            "gemm_b",
            20.0,
            5.5,
            device=0,
            stream=7,
            correlation=42,
            grid=[1, 1, 1],
            block=[32, 1, 1],
        ),
        x(
            "gpu_memcpy",
            "Memcpy HtoD (Pinned -> Device)",
            14.0,
            4.0,
            device=0,
            stream=9,
            correlation=43,
            bytes=4096,
        ),
    ]
    counters = [
        {"ph": "C", "name": "DRAM BW (%)", "pid": "GPU 0 Counters", "ts": t, "args": {"": v}}
        for t, v in ((10.0, 91.0), (15.0, 88.5), (20.0, 12.0))
    ]
    return {"traceEvents": events + counters, "baseTimeNanoseconds": BASE_NS}


@pytest.mark.parametrize("layout", ["cuspy", "monitor"])
def test_a_small_document_reads_with_exact_values(tmp_path: Path, layout: str) -> None:
    path = write_pftrace(_doc(), tmp_path / "run.pftrace", layout)
    assert (path.read_bytes()[:2] == b"\x1f\x8b") == (layout == "cuspy")  # gzip, whatever the name
    (trace,) = load(path).traces
    ev = trace.events
    assert trace.format == "pftrace" and trace.schema == f"pftrace-{layout}"
    kernels = np.flatnonzero(ev.of_kind(Kind.KERNEL))
    assert [trace.name(int(r)) for r in kernels] == ["gemm_a", "gemm_b"]
    # Relative to the clock snapshot's base, as Kineto's; the monitor layout has no snapshot.
    origin = 0 if layout == "cuspy" else BASE_NS
    assert ev.start_ns[kernels].tolist() == [origin + 10_000, origin + 20_000]
    assert ev.dur_ns[kernels].tolist() == [10_000, 5_500]
    assert ev.device[kernels].tolist() == [0, 0] and ev.stream[kernels].tolist() == [7, 7]
    (copy,) = np.flatnonzero(ev.of_kind(Kind.MEMCPY))
    assert trace.name(int(copy)) == "Memcpy" and int(ev.stream[copy]) == 9
    assert int(ev.bytes[copy]) == 4096
    # Every launch is joined to the work it launched, as in the JSON.
    launches = [int(ev.link[r]) for r in (*kernels, copy)]
    assert [trace.name(r) for r in launches] == ["cudaLaunchKernel"] * 2 + ["cudaMemcpyAsync"]
    assert [int(ev.start_ns[r]) - origin for r in launches] == [2_000, 6_000, 10_000]
    assert [s.number for s in trace.steps] == [3]
    assert trace.metadata["not_carried"] == list(NOT_CARRIED)
    assert any("a .pftrace carries no copy direction" in w for w in trace.warnings)
    if layout == "cuspy":
        assert trace.metadata["base_time_ns"] == BASE_NS
        assert ev.grid_blocks[kernels].tolist() == [8, 1]
        assert ev.block_threads[kernels].tolist() == [128, 32]
        (series,) = trace.counters
        assert (series.device, series.name) == (0, "DRAM BW (%)")
        assert series.time_ns.tolist() == [10_000, 15_000, 20_000]
        assert series.value.tolist() == [91.0, 88.5, 12.0]
    (op,) = np.flatnonzero(ev.of_kind(Kind.CPU_OP))
    assert trace.events.extra[int(op)]["input_dims"] == [[8, 8], [8, 8]]


def _slices(spans: list[tuple[int, int]]) -> bytes:
    """One group of slices on one thread track, written as PyTorch writes a group: every
    begin, then every end, in the same order."""
    trace = pb.Trace()
    track = trace.packet.add().track_descriptor
    track.uuid, track.thread.pid, track.thread.tid, track.thread.thread_name = 1, 5, 6, "main"
    interned = trace.packet.add(sequence_flags=pb.SEQ_INCREMENTAL_STATE_CLEARED).interned_data
    interned.event_categories.add(iid=1, name="cpu_op")
    for i in range(len(spans)):
        interned.event_names.add(iid=i + 1, name=f"op{i}")
    for i, (start, _) in enumerate(spans):
        event = trace.packet.add(timestamp=start).track_event
        event.type, event.track_uuid, event.name_iid = pb.SLICE_BEGIN, 1, i + 1
        event.category_iids.append(1)
    for _, end in spans:
        event = trace.packet.add(timestamp=end).track_event
        event.type, event.track_uuid = pb.SLICE_END, 1
    data: bytes = trace.SerializeToString()
    return data


@pytest.mark.parametrize(
    "spans",
    [
        [(0, 10), (10, 20)],  # touching
        [(0, 10), (5, 15)],  # overlapping: nesting would close op1 at 10
        [(0, 30), (5, 15), (15, 30)],  # nested, one ending with its parent
    ],
)
def test_the_kth_end_closes_the_kth_begin_of_the_group(tmp_path: Path, spans: list[Any]) -> None:
    from gpuscope.readers.pftrace._decode import decode

    decoded = decode(tmp_path / "x.pftrace", _slices(spans), lost_tail=False)
    ev = decoded.trace.events
    got = sorted(
        (decoded.trace.name(r), int(ev.start_ns[r]), int(ev.end_ns[r])) for r in range(len(ev))
    )
    assert got == [(f"op{i}", s, e) for i, (s, e) in enumerate(spans)]


# --- corpus traces in PyTorch's layouts --------------------------------------------------------


def _summary(path: Path) -> tuple[Any, ...]:
    result = diagnose(load(path))
    return (
        msgspec.json.encode(result.findings),
        msgspec.json.encode(result.verdict),
        [
            (
                d.device,
                d.temporal,
                d.bounds.time_ns_by_bound,
                [(c.cause, c.lost_ns) for c in d.idle.causes],
            )
            for d in result.devices
        ],
    )


@pytest.mark.parametrize("layout", ["cuspy", "monitor"])
@pytest.mark.parametrize("name", CORPUS)
def test_corpus_traces_as_pftrace_diagnose_as_their_json(
    tmp_path: Path, name: str, layout: str
) -> None:
    """The same run as JSON and as ``.pftrace`` gives the same diagnosis, for everything both
    carry: the JSON with only what the layout carries diagnoses exactly as the ``.pftrace``."""
    source = corpus(name)
    carried = tmp_path / "carried.json"
    carried.write_bytes(msgspec.json.encode(carried_only(source, layout)))
    pftrace = write_pftrace(source, tmp_path / "run.pftrace", layout)
    assert _summary(pftrace) == _summary(carried)
    # The timeline itself is the JSON's: the same busy time on every device.
    full, converted = diagnose(load(source)), diagnose(load(pftrace))
    assert [d.temporal.busy_ns for d in converted.devices] == [
        d.temporal.busy_ns for d in full.devices
    ]


def test_sniff_accepts_both_layouts_and_nothing_else() -> None:
    doc = _doc()
    for layout in ("cuspy", "monitor"):
        data = to_pftrace(doc, layout)
        head = gzip.decompress(data)[:65536] if layout == "cuspy" else data[:65536]
        assert looks_like_pftrace(head)
    for other in (
        b'{"traceEvents": []}',
        b'\n{"traceEvents": []}',
        b"SQLite format 3\x00" + bytes(84),
        b"ID,API Name,Kernel Name\n",
        b"\n\x05hello",
        b"",
    ):
        assert not looks_like_pftrace(other), other


# --- bad input ----------------------------------------------------------------------------------


def _cli(*args: str) -> Any:
    result = CliRunner().invoke(main, list(args), catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def test_malformed_protobuf_is_one_line_naming_the_file(tmp_path: Path) -> None:
    good = to_pftrace(_doc(), "monitor")
    bad = tmp_path / "bad.pftrace"
    bad.write_bytes(good[:40] + b"\x0a\xff\xff\xff\xff\x0f" + b"\x07" * 64)
    with pytest.raises(CorruptInputError, match="malformed protobuf"):
        load(bad)
    result = _cli("diagnose", str(bad))
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert str(bad) in line and "malformed protobuf" in line


def test_a_file_cut_mid_write_reads_its_whole_packets_with_a_warning(tmp_path: Path) -> None:
    data = gzip.decompress(to_pftrace(_doc(), "cuspy"))
    cut = tmp_path / "cut.pftrace"
    cut.write_bytes(data[: len(data) - 7])  # the last counter sample is cut
    (trace,) = load(cut).traces
    assert any("ends mid-write" in w for w in trace.warnings)
    assert int(trace.events.of_kind(Kind.KERNEL).sum()) == 2


def test_names_that_are_not_utf8_read_with_replacement_characters(tmp_path: Path) -> None:
    data = bytearray(to_pftrace(_doc(), "monitor"))
    data[data.index(b"gemm_a")] = 0xFF  # protobuf hands such a string over as bytes
    path = tmp_path / "latin.pftrace"
    path.write_bytes(bytes(data))
    (trace,) = load(path).traces
    assert "\ufffdemm_a" in trace.names


@pytest.mark.parametrize("layout", ["cuspy", "monitor"])
def test_damaged_files_read_or_fail_in_one_line(tmp_path: Path, layout: str) -> None:
    """Bytes cut, flipped, inserted or dropped anywhere: a trace or an InputError, never
    another exception (a traceback)."""
    import random

    from gpuscope.errors import InputError

    rng = random.Random(layout)
    base = to_pftrace(_doc(), layout)
    base = gzip.decompress(base) if layout == "cuspy" else base
    path = tmp_path / "damaged.pftrace"
    for _ in range(150):
        path.write_bytes(damaged(base, rng))
        with contextlib.suppress(InputError):
            load(path)
