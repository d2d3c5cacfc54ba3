"""The C event scanner gives exactly the trace the msgspec reader gives, or hands over to it.

Every Kineto file of the corpus is read both ways and compared column by column; generated
documents with odd value types, escapes, pieces cut mid-event and broken endings probe the edges.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from corpus import corpus, corpus_root
from gpuscope.model import Kind, Trace
from gpuscope.readers import _early, _scan, kineto
from gpuscope.readers._io import read_bytes
from gpuscope.testing.same import trace_difference

pytestmark = pytest.mark.skipif(
    not _scan.scanner_built() and os.environ.get("CI", "").lower() != "true",
    reason="the C scanner is not built here",
)


def test_the_scanner_is_built_in_ci() -> None:
    # CI installs with a compiler: a silent fall back to the slow reader would go unnoticed.
    assert _scan.scanner_built()


def scan_read(path: Path) -> Trace:
    return kineto._read_scanned(path, _scan.Scan(path))


def read_both(path: Path) -> tuple[Trace, Trace]:
    """(C scanner, msgspec reader) on one file; the latter piecewise or, where it must, whole."""
    scanned = scan_read(path)
    try:
        reference = kineto._read_streamed(path)
    except (kineto.NotStreamableError, kineto.msgspec.DecodeError):
        content = read_bytes(path)
        reference = kineto.read(path, content.data, truncated_stream=content.truncated)
    return scanned, reference


def assert_same_trace(a: Trace, b: Trace) -> None:
    assert trace_difference(a, b) is None


def kineto_corpus_files() -> list[str]:
    root = corpus_root() / "kineto"
    names = sorted(
        str(p.relative_to(corpus_root()))
        for p in root.rglob("*")
        if p.name.endswith((".json", ".json.gz"))
        and "execution_trace/benchmark_simple_add_et" not in str(p)
    )
    return names or ["kineto/hta/df_index_resolver/df_index_resolver.json.gz"]


@pytest.mark.parametrize("relative", kineto_corpus_files())
def test_corpus_traces_read_the_same_both_ways(relative: str) -> None:
    scanned, reference = read_both(corpus(relative))
    assert len(scanned.events) > 0
    assert_same_trace(scanned, reference)


def test_the_corpus_has_the_traces_this_module_relies_on() -> None:
    # ROCm sizes written as strings, triton's "grid(100,)", MTIA flows, 2021 capitals.
    names = kineto_corpus_files()
    assert len(names) >= 45
    for expected in ("amd_trace", "triton_example", "mtia_trace_single_rank", "kineto-2021"):
        assert any(expected in n for n in names)


# --- generated documents -------------------------------------------------------------------------


def write(tmp_path: Path, events: list[Any], name: str = "t.json", **doc: Any) -> Path:
    path = tmp_path / name
    document = {
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100"}],
        **doc,
        "traceEvents": events,
    }
    text = json.dumps(document)
    path.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
    return path


def kernel(i: int, **args: Any) -> dict[str, Any]:
    base = {"device": 0, "stream": 7, "correlation": i, "grid": [4, 2, 1], "block": [128, 1, 1]}
    return {
        "ph": "X", "cat": "kernel", "name": f"k{i % 3}", "pid": 0, "tid": 7,
        "ts": 100 + 10 * i, "dur": 5, "args": {**base, **args},
    }  # fmt: skip


def launch(i: int) -> dict[str, Any]:
    return {
        "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
        "ts": 98 + 10 * i, "dur": 1, "args": {"correlation": i, "External id": i},
    }  # fmt: skip


def test_odd_but_valid_values_read_as_the_lenient_reader_reads_them(tmp_path: Path) -> None:
    events: list[Any] = [launch(i) for i in range(6)]
    events += [
        kernel(0, stream="7", bytes="2560"),  # ROCm writes numbers as strings
        kernel(1, stream="0x0", size=" 12 "),  # not decimal: -1; spaces: int() strips them
        kernel(2, correlation=2.0, grid=[2, None, 1]),  # a float id; a null in the grid
        kernel(3, grid="grid(100,)", block=None, device=None),
        kernel(4, **{"est. achieved occupancy %": None, "External id": True}),
        {**kernel(5), "pid": "stream 7", "tid": "12", "name": "say \"hi\"\\n é"},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)",
         "pid": 0, "tid": 7, "ts": 5.25, "dur": 1.5,
         "args": {"device": 0, "stream": 7, "correlation": 9, "bytes": 4096.0}},
        {"ph": "i", "s": "t", "name": "marker", "ts": "not a number", "pid": [], "tid": {}},
    ]  # fmt: skip
    path = write(tmp_path, events)
    scanned = scan_read(path)
    whole = kineto.read(path, path.read_bytes())
    assert_same_trace(scanned, whole)
    ev = scanned.events
    kernels = ev.kind == Kind.KERNEL
    assert sorted(ev.correlation[kernels].tolist()) == [0, 1, 2, 3, 4, 5]  # 2.0 read as 2
    assert ev.bytes[ev.kind == Kind.MEMCPY].tolist() == [4096]
    assert 'say "hi"\\n é' in scanned.names


@pytest.mark.parametrize("piece_bytes", [64, 256, 4096])
def test_pieces_cut_anywhere_give_the_same_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, piece_bytes: int
) -> None:
    """Pieces smaller than one event make the scanner stop mid-event and read on."""
    events = [e for i in range(40) for e in (launch(i), kernel(i, **{"Input Dims": [[i, 2]]}))]
    path = write(tmp_path, events, name="t.json.gz", distributedInfo={"rank": 3})
    reference = scan_read(path)
    monkeypatch.setattr(_scan, "PIECE_BYTES", piece_bytes)
    monkeypatch.setattr(_scan, "FEED_BYTES", 32)
    assert_same_trace(scan_read(path), reference)
    assert reference.rank == 3 and len(reference.events.extra) == 40


def test_a_file_cut_mid_event_keeps_the_whole_events(tmp_path: Path) -> None:
    events = [e for i in range(30) for e in (launch(i), kernel(i))]
    text = json.dumps({"traceEvents": events})
    for cut in (len(text) // 2, len(text) - 3):
        path = tmp_path / f"cut{cut}.json"
        path.write_text(text[:cut])
        scanned = scan_read(path)
        assert 0 < len(scanned.events) < 60
        assert scanned.warnings and "ends mid-write" in scanned.warnings[-1]
        whole = kineto.read(path, path.read_bytes())
        assert np.array_equal(scanned.events.start_ns, whole.events.start_ns)
    # Only the document's last brace lost: every event is whole, nothing to warn about.
    path = tmp_path / "brace.json"
    path.write_text(text[:-1])
    assert len(scan_read(path).events) == 60


@pytest.mark.parametrize(
    "text",
    [
        b'{"traceEvents": [{"ph": "X", "cat": "kernel"} {"ph": "X"}]}',  # no comma
        b'{"traceEvents": [{"ph": "X", "name": "a\x01b"}]}',  # raw control character
        b'{"traceEvents": [{"ph": "X", "cat": 3}]}',  # a category that is not a string
        b'{"traceEvents": [{"ph": "X", "ts": "12"}]}',  # a time written as a string
        b'{"traceEvents": [1, 2]}',  # events that are not objects
    ],
)
def test_what_the_scanner_does_not_follow_goes_to_the_msgspec_reader(
    tmp_path: Path, text: bytes
) -> None:
    path = tmp_path / "odd.json"
    path.write_bytes(text)
    with pytest.raises(_scan.NotScannableError):
        scan_read(path)


@pytest.mark.parametrize("odd", [b'{"ph": "Q", "name": "x"}', b'{"name": "x"}', b'{"ph": 5}'])
def test_an_event_of_unknown_phase_is_skipped_by_the_scanner_too(
    tmp_path: Path, odd: bytes
) -> None:
    # One odd event no longer hands the whole file to the msgspec reader (ten times as costly):
    # the scanner skips it, as that reader does (its phase is not "X").
    kernel = b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2}'
    path = tmp_path / "odd.json"
    path.write_bytes(b'{"traceEvents": [' + kernel + b", " + odd + b"]}")
    scanned, reference = read_both(path)
    assert_same_trace(scanned, reference)
    assert len(scanned.events) == 1


# --- property: any mix of value types reads the same both ways ------------------------------------

_ints = st.one_of(
    st.integers(-(2**40), 2**40),
    st.none(),
    st.booleans(),
    st.floats(-1e6, 1e6, allow_nan=False),
    st.sampled_from(["7", " 12 ", "0x0", "-3", "", "abc", "+4"]),
)
_dims = st.one_of(
    st.none(), st.lists(st.integers(0, 64), max_size=3), st.just("grid(1,)"), st.just([1, 2.5])
)
_event = st.fixed_dictionaries(
    {
        "ph": st.sampled_from(["X", "X", "X", "i", "s", "f", "M"]),
        "cat": st.sampled_from(
            ["kernel", "cuda_runtime", "cpu_op", "gpu_memcpy", "python_function", "Kernel", "x"]
        ),
        "name": st.text(max_size=12),
        "pid": st.one_of(st.integers(0, 9), st.sampled_from(["3", "stream 7", "x"])),
        "tid": st.integers(0, 9),
        "ts": st.one_of(st.integers(0, 10**12), st.floats(0, 1e12, allow_nan=False)),
        "dur": st.one_of(st.integers(0, 10**6), st.floats(0, 1e6, allow_nan=False)),
        "args": st.fixed_dictionaries(
            {},
            optional={
                "correlation": _ints, "stream": _ints, "device": _ints, "External id": _ints,
                "bytes": _ints, "Python id": _ints, "Python parent id": _ints, "size": _ints,
                "grid": _dims, "block": _dims,
                "est. achieved occupancy %": st.one_of(st.none(), st.floats(0, 100)),
                "Input Dims": st.one_of(st.none(), st.lists(st.lists(st.integers(0, 9)))),
                "Collective name": st.one_of(st.none(), st.sampled_from(["allreduce"]), st.just(5)),
                "Call stack": st.one_of(st.none(), st.just("a.py(1): f;b.py(2): g"), st.just(7)),
            },
        ),
    }
)  # fmt: skip


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(events=st.lists(_event, min_size=1, max_size=12))
def test_any_value_types_read_the_same_as_the_msgspec_reader(
    tmp_path: Path, events: list[dict[str, Any]]
) -> None:
    events = [*events, kernel(0)]  # at least one device event
    path = write(tmp_path, events)
    # What the user gets with the scanner (its columns, or the msgspec reader where it declines)
    # against what they get without it: compared on every input, declined or not.
    with_scanner = kineto.read_file(path)
    kscan, _scan._kscan = _scan._kscan, None
    try:
        without = kineto.read_file(path)
    finally:
        _scan._kscan = kscan
    assert_same_trace(with_scanner, without)
    try:
        scanned = scan_read(path)
    except _scan.NotScannableError:
        declined = True
    else:
        declined = False
        assert_same_trace(scanned, with_scanner)
    # A property that holds because the scanner declines everything would test nothing: every
    # input whose values are all of the types Kineto writes must be read by the scanner itself.
    if all(_plain(e) for e in events):
        assert not declined, "the scanner declined a document of plain values"


def _plain(event: dict[str, Any]) -> bool:
    """Values of the types the profiler writes: the scanner reads such a document itself."""
    args = event.get("args", {})
    ints = ("correlation", "stream", "device", "External id", "bytes", "Python id", "size")
    return (
        all(type(args.get(k, 0)) is int for k in (*ints, "Python parent id"))
        and all(type(args.get(k, [])) is list and all(type(x) is int for x in args.get(k, []))
                for k in ("grid", "block"))
        and type(args.get("est. achieved occupancy %", 0.0)) in (int, float)
        and args.get("Collective name") in (None, "allreduce")
        and type(event["pid"]) is int
    )  # fmt: skip


def test_without_the_scanner_the_msgspec_reader_reads_the_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = corpus("kineto/param-dlrm-8rank/worker0_step_12.1694128201545.pt.trace.json.gz")
    with_scanner = kineto.read_file(path)
    monkeypatch.setattr(_scan, "_kscan", None)
    assert _scan.start(path) is None
    assert_same_trace(kineto.read_file(path), with_scanner)


def test_an_early_scan_of_a_file_that_is_not_kineto_is_none(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text("timestamp, utilization.gpu [%]\n")
    assert _scan.start(tmp_path / "a.csv") is None
    assert _scan.start(tmp_path / "missing.json") is None
    assert _scan.start(tmp_path) is None


# --- the file: gzip members, corrupt or cut-off data, the thread ------------------------------


def gzip_document(events: list[dict[str, Any]]) -> bytes:
    return gzip.compress(
        json.dumps({"traceEvents": events, "distributedInfo": {"rank": 1}}).encode()
    )


def test_gzip_data_corrupt_after_whole_events_is_an_error_of_the_file(tmp_path: Path) -> None:
    from gpuscope.errors import CorruptInputError

    data = bytearray(gzip_document([e for i in range(400) for e in (launch(i), kernel(i))]))
    data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)  # zeroes mid-stream
    path = tmp_path / "corrupt.json.gz"
    path.write_bytes(bytes(data))
    # The scanner meets the corrupt data, or the garbage it inflates to first (then the msgspec
    # reader takes the file over, and meets the corrupt data): one error either way.
    with pytest.raises(CorruptInputError, match=r"corrupt\.json\.gz.*corrupt gzip data \(Error -3"):
        kineto.read_file(path)


def test_a_gzip_stream_cut_off_keeps_the_whole_events(tmp_path: Path) -> None:
    data = gzip_document([e for i in range(400) for e in (launch(i), kernel(i))])
    path = tmp_path / "cut.json.gz"
    path.write_bytes(data[: len(data) * 2 // 3])
    scanned = scan_read(path)
    assert 0 < len(scanned.events) < 800
    assert "ends mid-write" in scanned.warnings[-1]


def test_gzip_members_one_after_another_read_as_one_document(tmp_path: Path) -> None:
    whole = gzip_document([e for i in range(50) for e in (launch(i), kernel(i))])
    text = gzip.decompress(whole)
    path = tmp_path / "members.json.gz"
    cut = [0, 10, len(text) // 2, len(text)]  # an empty member and two halves
    path.write_bytes(b"".join(gzip.compress(text[a:b]) for a, b in itertools.pairwise(cut)))
    one = tmp_path / "one.json.gz"
    one.write_bytes(whole)
    assert_same_trace(scan_read(path), scan_read(one))
    assert scan_read(path).rank == 1


def test_flow_and_counter_texts_past_16_mb_are_deflated_and_read_the_same(tmp_path: Path) -> None:
    # The scanner deflates its text of flow events, and its text of counter events, once either
    # passes 16 MB (PLAIN_BYTES in _kscan.c); kernels without correlation ids are then linked
    # through the flows inflated again, and the counters are decoded from theirs.
    pad = "x" * 4000
    events: list[dict[str, Any]] = []
    for i in range(20):
        device_work = kernel(i)
        del device_work["args"]["correlation"]
        events += [launch(i), device_work]
        events += [
            {"ph": "s", "cat": "ac2g", "id": i, "pid": 1, "tid": 1, "ts": 98 + 10 * i},
            {"ph": "f", "cat": "ac2g", "id": i, "pid": 0, "tid": 7, "ts": 100 + 10 * i, "bp": "e"},
            {"ph": "C", "name": "DRAM BW (%)", "pid": "GPU 0 Counters", "ts": 100 + 10 * i,
             "args": {"": 5 * i}},
        ]  # fmt: skip
    for j in range(4300):  # ~17 MB of each kind, matching nothing
        events += [
            {"ph": "t", "cat": "padding", "id": 1000 + j, "pid": 5, "tid": 5, "ts": 1, "name": pad},
            {"ph": "C", "name": pad, "pid": "CPU Counters", "ts": 1, "args": {"": 1}},
        ]
    scanned, reference = read_both(write(tmp_path, events, name="t.json.gz"))
    assert_same_trace(scanned, reference)
    kernels = scanned.events.of_kind(Kind.KERNEL)
    assert int(kernels.sum()) == 20 and bool((scanned.events.link[kernels] >= 0).all())
    assert [(c.device, c.name, len(c.time_ns)) for c in scanned.counters] == [
        (0, "DRAM BW (%)", 20)
    ]


def test_zlib_ng_and_zlib_inflate_the_same(tmp_path: Path) -> None:
    from zlib_ng import zlib_ng

    from gpuscope.readers import _kscan

    events = [e for i in range(300) for e in (launch(i), kernel(i, **{"Input Dims": [[i]]}))]
    path = write(tmp_path, events, name="t.json.gz")
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(path.read_bytes()[:-200])
    assert _scan.ZLIB_NG_INFLATES or os.environ.get("CI", "").lower() != "true"
    try:
        for trace in (path, cut):
            assert _kscan.use_zlib_ng(None) is False
            with_zlib = scan_read(trace)
            _kscan.use_zlib_ng(zlib_ng.__file__)
            assert_same_trace(scan_read(trace), with_zlib)
        assert "ends mid-write" in with_zlib.warnings[-1]
    finally:
        _kscan.use_zlib_ng(zlib_ng.__file__)


def test_a_scan_on_the_callers_thread_reads_the_same(tmp_path: Path) -> None:
    path = write(tmp_path, [e for i in range(20) for e in (launch(i), kernel(i))], name="t.json.gz")
    threaded = scan_read(path)
    with _scan.unthreaded():
        assert_same_trace(scan_read(path), threaded)


def test_the_console_script_scans_the_one_kineto_file_on_its_command_line(
    tmp_path: Path,
) -> None:
    trace = write(tmp_path, [launch(0), kernel(0)], name="t.json")
    other = tmp_path / "out.json"
    other.write_text('{"schema": "gpuscope/diagnosis-1"}')
    prefetch = _early.start(["--json", str(other), str(trace), "--top", "5"])
    assert prefetch is not None and prefetch.scan is not None
    early = prefetch.scan
    assert prefetch.scan_for(other) is None  # for its own file only
    assert prefetch.scan_for(trace) is early  # handed over, once
    assert prefetch.scan_for(trace) is None
    assert _early.begin(trace, prefetch) is prefetch  # a command takes the console's prefetch
    fresh = _early.begin(trace, None)  # or starts its own scan
    assert fresh is not None and fresh.scan is not None and fresh.scan is not early
    two = write(tmp_path, [launch(0), kernel(0)], name="u.json")
    assert _early.start([str(trace), str(two)]) is None  # two traces: no guess
