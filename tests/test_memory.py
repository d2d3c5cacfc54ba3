"""Bounded memory (issue #22 item 3): a Kineto trace is read a slice at a time on every path, a
gzip bomb stops at a reported limit, a memory budget refuses a too-big input with one line, and
pieces cut anywhere (inside strings, escapes, numbers) read as the whole document does.

The figures on 2 GB and 8 GB traces are in benchmarks/README.md (benchmarks/memory.py).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuscope.errors import InputError
from gpuscope.model import Trace, narrow
from gpuscope.readers import _io, _scan, kineto
from gpuscope.testing.generator import GeneratorConfig, generate
from gpuscope.testing.same import trace_difference
from test_hostile import cli, one_error_line

needs_scanner = pytest.mark.skipif(not _scan.scanner_built(), reason="the C scanner is not built")


def same_trace(a: Trace, b: Trace) -> None:
    assert trace_difference(a, b) is None


def without_scanner(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_scan, "_kscan", None)


@pytest.fixture(params=["scanner", "msgspec"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test once with the C scanner and once with the msgspec reader."""
    if request.param == "scanner" and not _scan.scanner_built():
        pytest.skip("the C scanner is not built")
    if request.param == "msgspec":
        without_scanner(monkeypatch)
    return str(request.param)


# --- nothing is read whole ------------------------------------------------------------------------


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("scanner", [True, False])
def test_a_trace_is_never_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, compressed: bool, scanner: bool
) -> None:
    if scanner and not _scan.scanner_built():
        pytest.skip("the C scanner is not built")
    generated = generate(GeneratorConfig(seed=1, steps=2))
    path = tmp_path / ("t.json.gz" if compressed else "t.json")
    path.write_bytes(generated.to_bytes(compress=compressed))
    expected = kineto.read(path, generated.to_bytes())
    if not scanner:
        without_scanner(monkeypatch)

    def whole(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the file was read whole")

    monkeypatch.setattr(Path, "read_bytes", whole)
    monkeypatch.setattr(kineto, "read_bytes", whole)
    monkeypatch.setattr(_scan, "PIECE_BYTES", 4096)  # many pieces, even for a small file
    monkeypatch.setattr(_scan, "FEED_BYTES", 512)
    same_trace(kineto.read_file(path), expected)


def test_one_odd_event_reads_leniently_in_its_piece_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An event with a value of an odd type used to send the whole file to the whole-document
    # reader (ten times the memory): now only its piece is decoded leniently.
    document = generate(GeneratorConfig(seed=1, steps=2)).document
    document["traceEvents"][40]["pid"] = [1, 2]
    document["traceEvents"][41]["ph"] = "Q"  # an unknown phase
    data = json.dumps(document).encode()
    path = tmp_path / "odd.json"
    path.write_bytes(data)
    expected = kineto.read(path, data)
    monkeypatch.setattr(kineto, "read_bytes", lambda *a, **k: pytest.fail("read whole"))
    monkeypatch.setattr(_scan, "PIECE_BYTES", 8192)
    same_trace(kineto.read_file(path), expected)
    without_scanner(monkeypatch)
    same_trace(kineto.read_file(path), expected)


# --- pieces cut anywhere -------------------------------------------------------------------------

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_number = st.one_of(
    st.integers(0, 10**15), st.floats(0, 1e12, allow_nan=False).map(lambda f: round(f, 3))
)


@st.composite
def documents(draw: st.DrawFn) -> bytes:
    events = []
    for i in range(draw(st.integers(1, 12))):
        events.append(
            {
                "ph": "X",
                "cat": draw(st.sampled_from(["kernel", "cuda_runtime", "cpu_op"])),
                "name": draw(_text) + '"\\/\b\u00e9\U0001f600',
                "pid": draw(st.integers(-5, 2**40)),
                "tid": draw(st.one_of(st.integers(0, 99), st.just("stream 7"))),
                "ts": draw(_number),
                "dur": draw(_number),
                "args": {"device": 0, "correlation": i, "Input Dims": [[i, 2]], "x": draw(_text)},
            }
        )
    ascii_only = draw(st.booleans())  # \u escapes everywhere, or raw UTF-8
    return json.dumps(
        {"traceEvents": events, "displayTimeUnit": "ns"}, ensure_ascii=ascii_only
    ).encode()


@given(data=documents(), piece=st.integers(16, 300), compressed=st.booleans())
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_pieces_cut_inside_strings_escapes_and_numbers_read_as_the_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes, piece: int, compressed: bool
) -> None:
    path = tmp_path / ("p.json.gz" if compressed else "p.json")
    path.write_bytes(gzip.compress(data, mtime=0) if compressed else data)
    expected = kineto.read(path, data)
    with monkeypatch.context() as patch:
        patch.setattr(_scan, "PIECE_BYTES", piece)
        patch.setattr(_scan, "FEED_BYTES", max(piece // 3, 1))
        if _scan.scanner_built():
            same_trace(kineto._read_scanned(path, _scan.Scan(path)), expected)
        same_trace(kineto._read_streamed(path), expected)


# --- limits --------------------------------------------------------------------------------------


def bomb(path: Path, inflated: int) -> Path:
    """A small gzip Kineto file whose one kernel name inflates to ``inflated`` bytes."""
    head = b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "'
    tail = b'", "pid": 0, "tid": 7, "ts": 1, "dur": 2, "args": {"device": 0}}]}'
    packer = gzip.GzipFile(path, "wb", compresslevel=9, mtime=0)
    with packer:
        packer.write(head)
        block = b"a" * (1 << 20)
        for _ in range(inflated >> 20):
            packer.write(block)
        packer.write(tail)
    return path


def test_a_gzip_bomb_stops_at_the_reported_limit(tmp_path: Path, reader: str) -> None:
    path = bomb(tmp_path / "bomb.json.gz", 24 << 20)
    assert path.stat().st_size < 64 << 10
    result = cli("diagnose", str(path), env={"GPUSCOPE_MAX_INFLATE": "4M"})
    line = one_error_line(result)
    assert "inflates to more than 4 MB" in line and "decompression bomb" in line, line
    # The default limit: 200 times the file's size, at least 256 MiB.
    assert _io.inflate_limit(path.stat().st_size) == 256 << 20


def test_the_limit_holds_when_read_whole_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = bomb(tmp_path / "bomb.json.gz", 8 << 20)
    monkeypatch.setenv("GPUSCOPE_MAX_INFLATE", "2M")
    with pytest.raises(InputError, match="inflates to more than 2 MB"):
        _io.read_bytes(path)


def test_an_input_over_the_memory_budget_is_one_line(tmp_path: Path, reader: str) -> None:
    path = tmp_path / "t.json.gz"
    # 17,600 events: past the 1 MB floor of the columns' share even at 77 bytes a row.
    path.write_bytes(generate(GeneratorConfig(seed=2, steps=32)).to_bytes(compress=True))
    try:
        line = one_error_line(cli("diagnose", str(path), "--max-memory", "1K"))
        assert "too big for the memory budget of 1 kB" in line and "--max-memory" in line, line
        assert cli("diagnose", str(path), "--max-memory", "4G").exit_code == 0
    finally:
        _io.set_memory_budget(None)


def test_max_memory_takes_sizes_and_refuses_others() -> None:
    assert _io.parse_size("512M") == 512 << 20
    assert _io.parse_size("1.5GiB") == 3 << 29
    assert _io.parse_size("4096") == 4096
    for bad in ("", "-1G", "lots", "nan", "0"):
        with pytest.raises(ValueError):
            _io.parse_size(bad)
    result = cli("diagnose", "x.json", "--max-memory", "lots")
    assert result.exit_code == 2 and "--max-memory" in result.stderr, result.stderr


def test_the_default_budget_follows_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUSCOPE_MAX_MEMORY", raising=False)
    available = _io._available_memory()
    assert available > 0
    assert _io.memory_budget() == int(available * _io.BUDGET_SHARE)
    monkeypatch.setenv("GPUSCOPE_MAX_MEMORY", "3G")
    assert _io.memory_budget() == 3 << 30


# --- annotate -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
@pytest.mark.parametrize("cut", [False, True])
def test_annotate_copies_the_trace_in_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, cut: bool
) -> None:
    from gpuscope.diagnosis import Options, diagnose
    from gpuscope.readers import load
    from gpuscope.render.annotate import annotate

    data = generate(GeneratorConfig(seed=4, steps=3)).to_bytes()
    if cut:  # a trace cut off mid-write: its partial last event is left out, as read
        data = data[: len(data) * 2 // 3]
    path = tmp_path / name
    path.write_bytes(gzip.compress(data, mtime=0) if name.endswith(".gz") else data)
    job = load(path)
    expected = json.loads(annotate(data, diagnose(job, Options()), str(path)))
    monkeypatch.setattr(_io, "read_bytes", lambda *a, **k: pytest.fail("read whole"))
    monkeypatch.setattr(Path, "read_bytes", lambda *a, **k: pytest.fail("read whole"))
    monkeypatch.setattr(_scan, "PIECE_BYTES", 1 << 16)
    out = tmp_path / ("out.json.gz" if name.endswith(".gz") else "out.json")
    result = cli("annotate", str(path), "-o", str(out))
    assert result.exit_code == 0, result.stderr
    written = out.open("rb").read()
    written = gzip.decompress(written) if out.name.endswith(".gz") else written
    assert json.loads(written) == expected


def with_other_keys(data: bytes, before: bytes = b"", after: bytes = b"") -> bytes:
    """A generated document with more keys before its events and after them."""
    body = data.rstrip()
    assert body.startswith(b"{") and body.endswith(b"}")
    return b"{" + before + body[1:-1] + after + b"}"


def test_a_long_text_after_the_events_is_held_within_the_budget(
    tmp_path: Path, reader: str
) -> None:
    """The document's other keys are decoded whole: a text after the events longer than the
    budget allows is not gathered by the piecewise readers (it once was, whatever the budget:
    600 MB of it took 2.4 GB under ``--max-memory 1G``) but goes to the whole-document reader,
    whose bound refuses it in one line; a short one still reads."""
    data = generate(GeneratorConfig(seed=4, steps=3)).to_bytes()  # 0.6 MB
    long = tmp_path / "long.json"
    long.write_bytes(with_other_keys(data, after=b', "junk": "' + b"j" * (6 << 20) + b'"'))
    short = tmp_path / "short.json"
    short.write_bytes(with_other_keys(data, after=b', "junk": "' + b"j" * (200 << 10) + b'"'))
    try:
        for command, flag in (("diagnose", "--json"), ("annotate", "-o")):
            out = str(tmp_path / f"{command}.json")
            line = one_error_line(cli(command, str(long), flag, out, "--max-memory", "32M"))
            assert "too big for the memory budget of 32 MB: read whole" in line, line
            result = cli(command, str(short), flag, out, "--max-memory", "32M")
            assert result.exit_code == 0, result.stderr
    finally:
        _io.set_memory_budget(None)


def test_annotate_refuses_a_document_it_would_hold_whole_past_the_budget(tmp_path: Path) -> None:
    """A layout the pieces do not follow (an events array nested before the real one) is
    annotated whole, which takes about 8 times its text (benchmarks/README.md): past the
    budget's share, one line and no output, where ``diagnose`` (whole at 1/8) still answers."""
    from gpuscope.render.annotate import WHOLE_DOCUMENT_FACTOR

    data = generate(GeneratorConfig(seed=4, steps=8)).to_bytes()
    path = tmp_path / "nested.json"
    path.write_bytes(with_other_keys(data, before=b'"meta": {"traceEvents": []}, '))
    size = path.stat().st_size  # 1.7 MB
    budget = (16 << 20) if size * WHOLE_DOCUMENT_FACTOR > 16 << 20 else pytest.fail(str(size))
    out = tmp_path / "out.json"
    try:
        assert cli("diagnose", str(path), "--max-memory", "16M").exit_code == 0
        line = one_error_line(cli("annotate", str(path), "-o", str(out), "--max-memory", "16M"))
        assert f"too big for the memory budget of {_io.size_text(budget)}" in line, line
        assert not out.exists()
        result = cli("annotate", str(path), "-o", str(out), "--max-memory", "32M")
        assert result.exit_code == 0, result.stderr
        written = json.loads(out.read_bytes())
        assert (
            written["traceEvents"][: len(json.loads(data)["traceEvents"])]
            == json.loads(data)["traceEvents"]
        )
    finally:
        _io.set_memory_budget(None)


# --- narrow columns -------------------------------------------------------------------------------


def test_narrow_keeps_32_bits_only_when_every_value_fits() -> None:
    fits = np.array([-1, 0, 2**31 - 1], dtype=np.int64)
    assert narrow(fits).dtype == np.int32
    assert narrow(fits).tolist() == fits.tolist()
    for wide in ([-1, 2**31], [-(2**31) - 1, 5], [0, 2**62]):
        column = narrow(np.array(wide, dtype=np.int64))
        assert column.dtype == np.int64
        assert column.tolist() == wide
    assert narrow(np.array([], dtype=np.int64)).dtype == np.int32


def kernel_and_launch(i: int, big: int) -> list[dict[str, Any]]:
    """A launch and its kernel, whose ids are ``big`` plus ``i`` (``big`` 0: small ids)."""
    ids = {"correlation": big + i, "External id": big + i}
    return [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": big + 1,
         "ts": 98 + 10 * i, "dur": 1, "args": ids},
        {"ph": "X", "cat": "kernel", "name": f"k{i % 3}", "pid": 0, "tid": 7,
         "ts": 100 + 10 * i, "dur": 5,
         "args": {**ids, "device": 0, "stream": big + 7, "grid": [big + 4, 1, 1],
                  "block": [128, 1, 1], "est. achieved occupancy %": 100.00000001 if i else 50}},
        {"ph": "X", "cat": "python_function", "name": "f.py(1): f", "pid": 1, "tid": big + 1,
         "ts": 97 + 10 * i, "dur": 4,
         "args": {"Python id": big + 2 * i, "Python parent id": big + 2 * i - 1}},
    ]  # fmt: skip


def test_ids_past_32_bits_read_exactly_in_64(tmp_path: Path, reader: str) -> None:
    """Columns are int32 while their values fit, int64 from the first that does not: a trace
    whose ids pass 2^31 only after its first events (the scanner then widens the column it has
    filled) reads the same ids as one that is small throughout, shifted."""
    big = 2**40
    early = [e for i in range(67) for e in kernel_and_launch(i, 0)]
    small_events = early + [e for i in range(100, 300) for e in kernel_and_launch(i, 0)]
    # The same events, but past 32 bits from the 202nd on: the columns widen mid-way.
    mixed_events = early + [e for i in range(100, 300) for e in kernel_and_launch(i, big)]
    small = kineto.read_file(write_trace(tmp_path / "small.json", small_events))
    mixed = kineto.read_file(write_trace(tmp_path / "mixed.json.gz", mixed_events))
    reference = kineto.read(
        tmp_path / "mixed.json.gz", json.dumps({"traceEvents": mixed_events}).encode()
    )
    same_trace(mixed, reference)
    ev_small, ev = small.events, mixed.events
    late = ev.start_ns >= (97 + 10 * 100) * 1000  # ns: the first event of the big ids
    for name in ("correlation", "external_id", "stream", "python_id", "python_parent_id", "tid"):
        assert getattr(ev, name).dtype == np.int64, name
        assert getattr(ev_small, name).dtype == np.int32, name
        wide, narrow_ = getattr(ev, name), getattr(ev_small, name).astype(np.int64)
        shifted = late & (narrow_ >= 0) & ((ev.kind != 0) | (name != "tid"))
        assert np.array_equal(wide[shifted], narrow_[shifted] + big), name
        assert np.array_equal(wide[~shifted], narrow_[~shifted]), name
    assert ev.grid_blocks.dtype == np.int64 and ev_small.grid_blocks.dtype == np.int32
    # A copy of 3 GiB: sizes widen too, exactly.
    args = {"device": 0, "stream": 7, "bytes": 3 << 30}
    copy = {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0,
            "tid": 7, "ts": 5000, "dur": 9, "args": args}  # fmt: skip
    sized = kineto.read_file(write_trace(tmp_path / "copy.json.gz", [*small_events, copy])).events
    assert sized.bytes.dtype == np.int64 and ev_small.bytes.dtype == np.int32
    assert sized.bytes.max() == 3 << 30
    # Launches link to their kernels whatever the width of the ids.
    assert np.array_equal(ev.link, ev_small.link)
    # An occupancy a hair over 100% is out of range either way: counted, not rounded into range.
    assert np.isnan(ev.occupancy_pct[ev.kind == 0][1:]).all()
    assert any("occupancy" in w for w in mixed.warnings)


def write_trace(path: Path, events: list[dict[str, Any]]) -> Path:
    text = json.dumps({"traceEvents": events}).encode()
    path.write_bytes(gzip.compress(text) if path.name.endswith(".gz") else text)
    return path


def test_a_window_of_contiguous_rows_shares_the_table() -> None:
    trace = kineto.read(Path("g.json"), generate(GeneratorConfig(seed=3, steps=3)).to_bytes())
    ev = trace.events
    n = len(ev)
    rows = np.arange(n // 3, n, dtype=np.intp)
    window = ev.take(rows)
    for name in ("start_ns", "dur_ns", "kind", "name_id", "pid", "correlation"):
        assert np.shares_memory(getattr(window, name), getattr(ev, name)), name
    # The same rows taken as a copy (one row out of order forces it) link the same way.
    shuffled = rows.copy()
    shuffled[[0, 1]] = shuffled[[1, 0]]
    copied = ev.take(shuffled)
    assert not np.shares_memory(copied.start_ns, ev.start_ns)
    assert np.array_equal(copied.link[2:], window.link[2:])
    assert copied.extra.keys() - {0, 1} == window.extra.keys() - {0, 1}
    linked = window.link >= 0
    assert np.array_equal(window.link[linked] + n // 3, ev.link[rows][linked])
