"""Hostile, broken and huge inputs (issue #22): one clear line and exit 2, or a salvage with a
warning that says what was dropped; never a traceback, a hang or a silent change of meaning.

Each test builds the input that once broke gpuscope and asserts on what it reads or prints now.
"""

from __future__ import annotations

import gzip
import json
import os
import socket
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner, Result

from corpus import corpus
from gpuscope import _files
from gpuscope.cli import main
from gpuscope.errors import CorruptInputError, InputError
from gpuscope.history import History
from gpuscope.model import Kind, Trace
from gpuscope.readers import _scan, kineto, load
from gpuscope.render import printable
from gpuscope.testing.generator import GeneratorConfig, generate

# --- helpers -------------------------------------------------------------------------------------


def cli(*args: str, env: dict[str, str] | None = None) -> Result:
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback is a failure of the test, with its own traceback
    return result


def one_error_line(result: Result) -> str:
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuscope: error:"), result.stderr
    return lines[0]


def usage_error(result: Result) -> str:
    assert result.exit_code == 2, result.stderr
    assert "Error: Invalid value" in result.stderr, result.stderr
    return result.stderr


def kernel(i: int, **fields: Any) -> dict[str, Any]:
    return {
        "ph": "X", "cat": "kernel", "name": f"k{i % 3}", "pid": 0, "tid": 7,
        "ts": 1000 + 10 * i, "dur": 5,
        "args": {"device": 0, "stream": 7, "correlation": i}, **fields,
    }  # fmt: skip


def launch(i: int) -> dict[str, Any]:
    return {
        "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
        "ts": 998 + 10 * i, "dur": 1, "args": {"correlation": i},
    }  # fmt: skip


def events(n: int = 5) -> list[dict[str, Any]]:
    return [e for i in range(n) for e in (launch(i), kernel(i))]


def write_doc(path: Path, text: str | bytes) -> Path:
    data = text.encode() if isinstance(text, str) else text
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def document(evs: list[dict[str, Any]], **extra: Any) -> str:
    return json.dumps({"deviceProperties": [{"id": 0, "name": "NVIDIA H100"}], **extra,
                       "traceEvents": evs})  # fmt: skip


def both_ways(path: Path) -> tuple[Trace | str, Trace | str]:
    """(with the C scanner, without it): the trace read, or the error's reason."""

    def outcome() -> Trace | str:
        try:
            return kineto.read_file(path)
        except InputError as error:
            return f"{type(error).__name__}: {error.reason}"

    with_scanner = outcome()
    kscan, _scan._kscan = _scan._kscan, None
    try:
        without = outcome()
    finally:
        _scan._kscan = kscan
    return with_scanner, without


def assert_same(a: Trace | str, b: Trace | str) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    for name in ("kind", "name_id", "start_ns", "dur_ns", "pid", "tid", "device", "correlation"):
        assert np.array_equal(getattr(a.events, name), getattr(b.events, name)), name
    assert a.names == b.names
    assert a.warnings == b.warnings


# --- malformed values: counted and reported, the same both ways ---------------------------------

needs_scanner = pytest.mark.skipif(not _scan.scanner_built(), reason="the C scanner is not built")


@needs_scanner
@pytest.mark.parametrize(
    "bad",
    [
        {"cat": [1]},
        {"pid": [1, 2]},
        {"pid": "--5"},
        {"name": {}},
        {"args": {"device": 0, "stream": 7, "bytes": 12345678901234567890123}},
        {"args": {"device": 0, "est. achieved occupancy %": int("1" + "0" * 400)}},
        {"pid": "-9223372036854775809"},
        {"pid": 9223372036854775808},
        {"args": {"device": 0, "stream": 7, "correlation": "-9223372036854775809"}},
    ],
)
def test_values_of_the_wrong_type_read_the_same_both_ways_without_a_traceback(
    tmp_path: Path, bad: dict[str, Any]
) -> None:
    path = write_doc(tmp_path / "t.json", document([*events(), kernel(9, **bad)]))
    scanned, python = both_ways(path)
    assert_same(scanned, python)
    assert isinstance(scanned, Trace)
    assert int((scanned.events.kind == Kind.KERNEL).sum()) >= 5
    assert cli("diagnose", str(path), "--json", "-").exit_code == 0


def test_arguments_nested_a_hundred_thousand_deep_are_one_line(tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    text = document(events()).replace('"correlation": 4}', '"correlation": 4, "x": ' + deep + "}")
    line = one_error_line(cli("diagnose", str(write_doc(tmp_path / "deep.json", text))))
    assert "nested too deep" in line


@pytest.mark.parametrize("props", ["1", "true", '"x"', "[1, 2]"])
def test_device_properties_of_another_type_are_ignored(tmp_path: Path, props: str) -> None:
    text = document(events()).replace('[{"id": 0, "name": "NVIDIA H100"}]', props)
    path = write_doc(tmp_path / "props.json", text)
    trace = load(path).traces[0]
    assert trace.devices[0].name is None
    assert cli("diagnose", str(path)).exit_code == 0


@needs_scanner
@pytest.mark.parametrize(
    ("ts", "dur", "reason"),
    [
        ('"not-a-number"', "5", "not a number in range"),
        ("null", "5", "not a number in range"),
        ("1000", "null", "not a number in range"),
        ("1e400", "5", "not a number in range"),
        ("1000", "-5", "negative duration"),
    ],
)
def test_events_with_unusable_times_are_skipped_and_counted(
    tmp_path: Path, ts: str, dur: str, reason: str
) -> None:
    evs = events()
    text = document(evs)
    odd = (
        json.dumps(kernel(7))
        .replace('"ts": 1070', f'"ts": {ts}')
        .replace('"dur": 5', f'"dur": {dur}')
    )
    text = text.replace('"traceEvents": [', '"traceEvents": [' + odd + ", ")
    path = write_doc(tmp_path / "times.json", text)
    scanned, python = both_ways(path)
    assert_same(scanned, python)
    assert isinstance(scanned, Trace)
    assert int((scanned.events.kind == Kind.KERNEL).sum()) == 5  # the odd one skipped
    assert any("1 events with a" in w and reason in w for w in scanned.warnings), scanned.warnings
    assert scanned.events.start_ns.min() > 0  # nothing moved to the clock's origin


# --- the scanner and the msgspec reader agree ----------------------------------------------------


@needs_scanner
def test_keys_written_with_escapes_read_as_the_keys_they_are(tmp_path: Path) -> None:
    text = document(events()).replace('"ts":', '"t\\u0073":').replace('"dur":', '"d\\u0075r":')
    scanned, python = both_ways(write_doc(tmp_path / "escaped.json", text))
    assert_same(scanned, python)
    assert isinstance(scanned, Trace)
    assert scanned.events.start_ns.min() == 998_000  # not 0
    assert set(scanned.events.dur_ns[scanned.events.kind == Kind.KERNEL].tolist()) == {5000}


@needs_scanner
def test_only_the_top_level_trace_events_count(tmp_path: Path) -> None:
    decoy = {"traceEvents": [kernel(99)]}
    before = document(events()).replace("{", '{"meta": ' + json.dumps(decoy) + ", ", 1)
    scanned, python = both_ways(write_doc(tmp_path / "nested.json", before))
    assert_same(scanned, python)
    assert isinstance(scanned, Trace)
    assert len(scanned.events) == 10  # the five launches and kernels, not the decoy
    # A second top-level key: the last wins, as in every JSON parser.
    twice = document(events())[:-1] + ', "traceEvents": ' + json.dumps([launch(0), kernel(0)]) + "}"
    scanned, python = both_ways(write_doc(tmp_path / "twice.json", twice))
    assert_same(scanned, python)
    assert isinstance(scanned, Trace) and len(scanned.events) == 2


@needs_scanner
def test_duplicate_keys_last_wins_both_ways(tmp_path: Path) -> None:
    text = document(events()).replace('"dur": 5', '"dur": 5, "dur": 7')
    scanned, python = both_ways(write_doc(tmp_path / "dup.json", text))
    assert_same(scanned, python)
    assert isinstance(scanned, Trace)
    assert set(scanned.events.dur_ns[scanned.events.kind == Kind.KERNEL].tolist()) == {7000}


def test_an_out_of_range_number_late_in_a_complete_file_is_not_a_truncation(
    tmp_path: Path,
) -> None:
    evs = events(30)
    evs[-1]["args"]["est. achieved occupancy %"] = "PLACEHOLDER"
    text = document(evs).replace('"PLACEHOLDER"', "1e400")
    trace = load(write_doc(tmp_path / "late.json", text)).traces[0]
    assert not any("mid-write" in w for w in trace.warnings)
    assert int((trace.events.kind == Kind.KERNEL).sum()) == 30


def test_corruption_in_a_complete_file_is_an_error_not_a_salvage(tmp_path: Path) -> None:
    text = document(events(30))
    middle = text.index('"cat"', len(text) // 2)
    path = write_doc(tmp_path / "flip.json", text[:middle] + "}" + text[middle + 1 :])
    with pytest.raises(CorruptInputError, match="not valid JSON"):
        kineto.read_file(path)


# --- file system --------------------------------------------------------------------------------


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    line = one_error_line(cli("diagnose", str(fifo)))
    assert "not a regular file (a named pipe)" in line


def test_a_name_too_long_is_one_line(tmp_path: Path) -> None:
    line = one_error_line(cli("diagnose", str(tmp_path / ("x" * 300 + ".json"))))
    assert "File name too long" in line or "no such file" in line


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    path = write_doc(tmp_path / "t.json", document(events()))
    path.chmod(0)
    assert "cannot be read" in one_error_line(cli("diagnose", str(path)))


# --- outputs: atomic, never over an input -------------------------------------------------------


def test_no_command_writes_over_its_input(tmp_path: Path) -> None:
    trace = write_doc(tmp_path / "t.json", document(events()))
    before = trace.read_bytes()
    os.link(trace, tmp_path / "hard.json")
    (tmp_path / "soft.json").symlink_to(trace)
    for target in (trace, tmp_path / "hard.json", tmp_path / "soft.json"):
        line = one_error_line(cli("diagnose", str(trace), "--json", str(target)))
        assert "is one of the command's inputs" in line
        assert one_error_line(cli("report", str(trace), "-o", str(target)))
    assert trace.read_bytes() == before


def test_history_json_never_overwrites_the_history(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite"
    History(db).close()
    before = db.read_bytes()
    result = cli("history", "--json", str(db), env={"GPUSCOPE_HISTORY": str(db)})
    assert "is one of the command's inputs" in one_error_line(result)
    assert db.read_bytes() == before


def test_a_write_that_fails_leaves_the_old_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out.json"
    out.write_bytes(b"the old report")

    def full_disk(*_: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_files.os, "replace", full_disk)
    with pytest.raises(InputError, match="No space left"):
        _files.write_output(out, b"x" * 1000)
    assert out.read_bytes() == b"the old report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # no temporary left


def test_an_atomic_write_replaces_and_keeps_the_mode(tmp_path: Path) -> None:
    out = tmp_path / "out.html"
    out.write_bytes(b"old")
    out.chmod(0o640)
    _files.write_output(out, b"new")
    assert out.read_bytes() == b"new"
    assert out.stat().st_mode & 0o777 == 0o640


# --- options --------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-5", "x"])
def test_prices_and_bounds_must_be_finite_and_not_negative(tmp_path: Path, value: str) -> None:
    trace = str(write_doc(tmp_path / "t.json", document(events())))
    assert "--gpu-hour-usd" in usage_error(cli("diagnose", trace, "--gpu-hour-usd", value))
    assert "--max-idle-pct" in usage_error(cli("check", trace, "--max-idle-pct", value))
    assert "--max-cost-usd-per-gpu-hour" in usage_error(
        cli("check", trace, "--max-cost-usd-per-gpu-hour", value)
    )


def test_a_percentage_bound_over_100_and_a_negative_top_are_refused(tmp_path: Path) -> None:
    trace = str(write_doc(tmp_path / "t.json", document(events())))
    usage_error(cli("check", trace, "--max-idle-pct", "101"))
    usage_error(cli("diagnose", trace, "--top", "-5"))
    assert cli("check", trace, "--max-idle-pct", "100").exit_code == 0


# --- names and the terminal -----------------------------------------------------------------------


def test_a_huge_name_is_cut_and_classified_on_a_prefix(tmp_path: Path) -> None:
    huge = "ncclDevKernel_AllReduce_" + "a" * (4 << 20)
    evs = events()
    evs[1]["name"] = huge
    path = write_doc(tmp_path / "huge.json.gz", document(evs))
    trace = load(path).traces[0]
    assert max(len(n) for n in trace.names) == kineto.MAX_NAME_CHARS + 1
    assert any("names longer than" in w for w in trace.warnings)
    result = cli("diagnose", str(path))
    assert result.exit_code == 0
    assert len(result.stdout) < 200_000


def test_terminal_output_strips_control_characters_and_reads_no_markup(tmp_path: Path) -> None:
    evs = events()
    evs[1]["name"] = "\x1b]0;pwned\x07\x1b[2J[link=http://evil.example/]click[/link]"
    text = document(evs).replace("NVIDIA H100", "[bold]H100[/bold]\u202e")
    result = cli("diagnose", str(write_doc(tmp_path / "t.json", text)), "--all-devices")
    assert result.exit_code == 0
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "\u202e" not in result.stdout
    assert "[link=http://evil.exa" in result.stdout  # shown as it is, not obeyed
    assert "[bold]H100[/bold]" in result.stdout
    assert printable("a\x1bb\x9bc\nd") == "a\ufffdb\ufffdc\nd"


# --- samples and Nsight Systems: implausible values dropped and counted ---------------------------


def test_a_corrupt_nvidia_smi_timestamp_is_dropped_not_a_54_year_gap(tmp_path: Path) -> None:
    lines = ["timestamp, index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]"]
    for i in range(10):
        stamp = "1970/01/01 00:00:01.000" if i == 5 else f"2024/01/15 10:00:{i:02d}.000"
        lines.append(f"{stamp}, 0, NVIDIA H100 80GB HBM3, 50 %, 2048 MiB, 81559 MiB")
    path = tmp_path / "smi.csv"
    path.write_text("\n".join(lines) + "\n")
    samples = load(path).samples[0]
    span_s = (samples.gpus[0].time_ns.max() - samples.gpus[0].time_ns.min()) / 1e9
    assert span_s == 9
    assert any("more than 31 days" in w for w in samples.warnings)


def test_a_percentage_over_100_is_ignored_with_a_warning(tmp_path: Path) -> None:
    labels = 'gpu="0",UUID="GPU-1",modelName="NVIDIA A100-SXM4-80GB",Hostname="n1"'
    text = "".join(
        f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {u} {1705312800000 + 1000 * i}\n"
        f"DCGM_FI_PROF_SM_ACTIVE{{{labels}}} {s} {1705312800000 + 1000 * i}\n"
        for i, (u, s) in enumerate([(50, 0.4), (70512, 0.5), (60, 705.12)])
    )
    path = tmp_path / "metrics.prom"
    path.write_text(text)
    samples = load(path).samples[0]
    gpu = samples.gpus[0]
    assert np.nanmax(gpu.utilization_pct) == 60
    assert gpu.sm_active_pct is not None and np.nanmax(gpu.sm_active_pct) <= 100
    assert any("out of range" in w for w in samples.warnings)
    document_ = json.loads(cli("diagnose", str(path), "--json", "-").stdout)
    assert "70512" not in json.dumps(document_)


def nsys_copy(tmp_path: Path, statement: str) -> Path:
    source = corpus("nsys/nsys-ai/h100_2gpu_1s.sqlite")
    path = tmp_path / "export.sqlite"
    path.write_bytes(source.read_bytes())
    with sqlite3.connect(path) as db:
        db.execute(statement)
    return path


def test_nsys_kernels_that_end_before_they_start_are_counted(tmp_path: Path) -> None:
    path = nsys_copy(
        tmp_path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 1000 WHERE rowid <= 10"
    )
    job = load(path)
    warnings = [w for t in job.traces for w in t.warnings]
    assert any("10 event(s) that end before they start" in w for w in warnings), warnings


def test_an_nsys_kernel_ending_in_146_years_is_dropped(tmp_path: Path) -> None:
    path = nsys_copy(
        tmp_path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = 4611686018427387904 WHERE rowid = 1"
    )
    result = json.loads(cli("diagnose", str(path), "--json", "-").stdout)
    spans = [d["span_ns"] for d in result["devices"]]
    assert max(spans) < 10 * 1_000_000_000, spans


def test_an_export_cut_while_read_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "export.sqlite"
    data = corpus("nsys/nsys-ai/h100_2gpu_1s.sqlite").read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert "truncated" in one_error_line(cli("diagnose", str(path)))


# --- history --------------------------------------------------------------------------------------


def test_the_diagnosis_prints_before_a_save_that_fails(tmp_path: Path) -> None:
    trace = write_doc(tmp_path / "t.json", document(events()))
    db = tmp_path / "history.sqlite"
    db.write_bytes(b"not a database at all" * 100)
    result = cli("diagnose", str(trace), "--save", env={"GPUSCOPE_HISTORY": str(db)})
    assert result.exit_code == 2
    assert "GPU is idle" in " ".join(result.stdout.split())  # the diagnosis came first
    assert result.stderr.strip().startswith("gpuscope: error:")


def test_a_corrupt_row_is_skipped_with_a_warning_and_a_foreign_table_is_one_line(
    tmp_path: Path,
) -> None:
    db = tmp_path / "history.sqlite"
    trace = write_doc(tmp_path / "t.json", document(events()))
    env = {"GPUSCOPE_HISTORY": str(db)}
    assert cli("diagnose", str(trace), "--save", "--json", "-", env=env).exit_code == 0
    assert cli("diagnose", str(trace), "--save", "--json", "-", env=env).exit_code == 0
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE runs SET metrics = '{broken' WHERE id = 1")
    result = cli("history", env=env)
    assert result.exit_code == 0
    assert "skipped 1 saved run(s)" in result.stderr
    assert "corrupt" in one_error_line(cli("diff", "1", "2", env=env))
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as connection:
        connection.execute("CREATE TABLE runs (a, b)")
        connection.execute("PRAGMA user_version = 2")
    one_error_line(cli("history", env={"GPUSCOPE_HISTORY": str(foreign)}))


def test_a_read_only_history_can_be_listed(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "history.sqlite"
    trace = write_doc(tmp_path / "t.json", document(events()))
    env = {"GPUSCOPE_HISTORY": str(db)}
    assert cli("diagnose", str(trace), "--save", "--json", "-", env=env).exit_code == 0
    uri = f"file:{db}?mode=ro"
    with History(db, readonly=True) as store:
        assert len(store.runs()) == 1
    assert sqlite3.connect(uri, uri=True).execute("SELECT count(*) FROM runs").fetchone() == (1,)
    db.chmod(0o444)
    folder.chmod(0o555)
    try:
        result = cli("history", env=env)
        assert result.exit_code == 0, result.stderr
        assert "run" in result.stdout.lower() or "1" in result.stdout
    finally:
        folder.chmod(0o755)
    assert cli("history", env={"GPUSCOPE_HISTORY": str(tmp_path / "none.sqlite")}).exit_code == 0
    assert not (tmp_path / "none.sqlite").exists()  # listing creates nothing


def test_a_lock_held_past_the_timeout_is_one_line_after_the_diagnosis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuscope import history

    db = tmp_path / "history.sqlite"
    History(db).close()
    monkeypatch.setattr(history, "BUSY_TIMEOUT_MS", 100)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        trace = write_doc(tmp_path / "t.json", document(events()))
        result = cli("diagnose", str(trace), "--save", env={"GPUSCOPE_HISTORY": str(db)})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "GPU is idle" in " ".join(result.stdout.split())
    assert "locked by another gpuscope" in one_error_line(result)


# --- watch ----------------------------------------------------------------------------------------


def test_watch_binds_localhost_for_an_empty_address_and_refuses_bad_ones() -> None:
    from gpuscope.watch import MetricsServer, ServeError, listen_address

    assert listen_address("", 0)[1][0] == "127.0.0.1"
    with pytest.raises(ServeError, match="not an address"):
        listen_address("no.such.host.invalid", 0)
    server = MetricsServer(0, "")
    try:
        assert server.httpd.server_address[0] == "127.0.0.1"
        with pytest.raises(ServeError, match="cannot serve"):
            MetricsServer(server.port, "127.0.0.1")  # the port is in use
    finally:
        server.close()


@pytest.mark.skipif(not socket.has_ipv6, reason="no IPv6")
def test_watch_serves_on_ipv6() -> None:
    from gpuscope.watch import MetricsServer, ServeError

    try:
        server = MetricsServer(0, "::1")
    except ServeError as error:
        pytest.skip(f"no IPv6 loopback here: {error}")
    try:
        server.publish([], [])
        with socket.create_connection(("::1", server.port), timeout=5) as s:
            s.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            reply = b""
            while chunk := s.recv(4096):
                reply += chunk
        assert b"# TYPE gpuscope_gpu_processes gauge" in reply
    finally:
        server.close()


def test_watch_connections_time_out() -> None:
    from gpuscope import watch

    assert 0 < watch.CONNECTION_TIMEOUT_S <= 60


# --- generated traces stay readable after all this ------------------------------------------------


def test_a_generated_trace_reads_without_warnings(tmp_path: Path) -> None:
    path = generate(GeneratorConfig(steps=2, layers=1)).write(tmp_path / "g.json")
    assert load(path).traces[0].warnings == []


@needs_scanner
def test_a_file_cut_just_after_an_event_keeps_it_both_ways(tmp_path: Path) -> None:
    text = ",\n".join(json.dumps(e) for e in events(6))
    cut = '{"traceEvents": [\n' + text.rsplit(",\n", 1)[0] + ",\n"  # ends "},\n"
    scanned, python = both_ways(write_doc(tmp_path / "cut.json", cut))
    assert_same(scanned, python)
    assert isinstance(scanned, Trace) and len(scanned.events) == 11


def test_an_integer_beyond_a_double_in_a_time_is_skipped(tmp_path: Path) -> None:
    text = document(events()).replace('"dur": 5', '"dur": ' + "1" + "0" * 400, 1)
    trace = load(write_doc(tmp_path / "big.json", text)).traces[0]
    assert any("not a number in range" in w for w in trace.warnings)
