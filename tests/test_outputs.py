"""Every output path (``--json``, ``-o``, ``--out``, MCP ``render_report``) goes through one
writer (:mod:`gpuscope._files`): a regular file is replaced atomically, a device or a FIFO with a
reader is written through, a symlink is followed, anything else (or an input) is refused in one
line, and no temporary is left behind (issue #30, class 1)."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gpuscope import _files
from gpuscope.errors import InputError
from test_hostile import cli, document, events, one_error_line, write_doc


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    return write_doc(tmp_path / "t.json", document(events()))


@pytest.fixture
def saved(tmp_path: Path, trace: Path) -> Path:
    out = tmp_path / "s.json"
    assert cli("diagnose", str(trace), "--json", str(out)).exit_code == 0
    return out


def test_a_character_device_is_written_through_not_replaced(tmp_path: Path) -> None:
    # A private null device: a regression must not replace the machine's own /dev/null.
    device = tmp_path / "null"
    try:
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        device.write_bytes(b"")
    except OSError:
        pytest.skip("cannot make a device node here (not root, or a nodev file system)")
    before = device.stat()
    _files.write_output(device, b"discarded")
    after = device.stat()
    assert (after.st_ino, after.st_rdev, after.st_mode) == (
        before.st_ino,
        before.st_rdev,
        before.st_mode,
    )


def test_a_fifo_with_a_reader_gets_the_output_and_stays_a_fifo(tmp_path: Path, trace: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    for _ in range(200):  # the reader has the FIFO open once a non-blocking writer can open it
        try:
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            break
        except OSError:
            threading.Event().wait(0.01)
    # That probe was a writer too: the reader saw end of file; read again for the real one.
    reader.join()
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    for _ in range(200):
        result = cli("diagnose", str(trace), "--json", str(fifo))
        if result.exit_code == 0:
            break
        threading.Event().wait(0.01)
    reader.join(10)
    assert result.exit_code == 0, result.stderr
    assert got[-1].startswith(b"{") and b'"schema"' in got[-1]
    assert fifo.is_fifo()


def test_a_fifo_nobody_reads_is_one_line_not_a_wait(tmp_path: Path, trace: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    assert "FIFO that nobody reads" in one_error_line(
        cli("diagnose", str(trace), "--json", str(fifo))
    )
    assert fifo.is_fifo()


@pytest.mark.parametrize("kind", ["socket", "directory"])
def test_a_socket_or_a_directory_is_refused_in_one_line(
    tmp_path: Path, trace: Path, saved: Path, kind: str
) -> None:
    target = tmp_path / kind
    if kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(target))
    else:
        target.mkdir()
    for args in (
        ("report", str(saved), "-o", str(target)),
        ("diagnose", str(trace), "--json", str(target)),
    ):
        assert f"is a {kind}" in one_error_line(cli(*args))
    assert target.is_socket() if kind == "socket" else target.is_dir()


def test_a_symlink_is_followed_and_stays_a_link(tmp_path: Path, saved: Path) -> None:
    link = tmp_path / "latest.html"
    link.symlink_to("real.html")  # dangling: the file it names is made
    assert cli("report", str(saved), "-o", str(link)).exit_code == 0
    assert link.is_symlink() and (tmp_path / "real.html").read_bytes().startswith(b"<!")
    assert cli("report", str(saved), "-o", str(link)).exit_code == 0  # and then replaced
    assert link.is_symlink()


def test_a_saved_diagnosis_is_an_input_of_every_command(tmp_path: Path, saved: Path) -> None:
    before = saved.read_bytes()
    for args in (
        ("report", str(saved), "-o", str(saved)),
        ("diff", str(saved), str(saved), "--json", str(saved)),
    ):
        assert "is one of the command's inputs" in one_error_line(cli(*args))
    assert saved.read_bytes() == before


def test_annotate_onto_its_input_is_one_line(trace: Path) -> None:
    before = trace.read_bytes()
    assert "is one of the command's inputs" in one_error_line(
        cli("annotate", str(trace), "-o", str(trace))
    )
    assert trace.read_bytes() == before


def test_no_temporary_is_left_after_a_write_or_a_failed_one(tmp_path: Path) -> None:
    out = tmp_path / "out.json"

    def pieces() -> object:
        yield b"half"
        raise InputError("t.json", "cut")

    with pytest.raises(InputError):
        _files.write_output(out, pieces())  # type: ignore[arg-type]
    _files.write_output(out, b"whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_temporary_left_by_a_killed_process_is_swept(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    stale = tmp_path / f".out.json.{int(dead.stdout)}.0123abcd.tmp"
    stale.write_bytes(b"half")
    other = tmp_path / f".other.json.{int(dead.stdout)}.0123abcd.tmp"
    other.write_bytes(b"not ours")
    _files.write_output(out, b"whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name, "out.json"]


def test_sigterm_during_a_write_removes_the_temporary(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    out.write_bytes(b"old")
    script = (
        "import os, signal, sys, time\n"
        "from gpuscope import _files\n"
        "def pieces():\n"
        "    yield b'x'\n"
        "    print('writing', flush=True)\n"
        "    time.sleep(30)\n"
        "    yield b'y'\n"
        "_files._temporary_name = (\n"
        "    lambda t: t.parent / f'.{t.name}.{os.getpid()}.0123abcd.tmp')\n"
        "import os as _o\n"
        "_o.O_TMPFILE = None\n"
        "del _o.O_TMPFILE\n"  # a named temporary: the case where one could be left
        f"_files.write_output({str(out)!r}, pieces())\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "writing\n"
    assert any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
    child.send_signal(signal.SIGTERM)
    assert child.wait(10) == 128 + signal.SIGTERM
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    assert out.read_bytes() == b"old"


def test_history_refuses_a_fifo_and_an_input_and_never_blocks(tmp_path: Path, trace: Path) -> None:
    fifo = tmp_path / "h.fifo"
    os.mkfifo(fifo)
    env = {"GPUSCOPE_HISTORY": str(fifo)}
    for args in (
        ("history",),
        ("diff", "#1", str(trace)),
        ("check", str(trace), "--baseline", "1", "--max-regression-pct", "5"),
    ):
        assert "is not a regular file" in one_error_line(cli(*args, env=env))
    before = trace.read_bytes()
    result = cli("diagnose", str(trace), "--save", env={"GPUSCOPE_HISTORY": str(trace)})
    assert "is one of the command's inputs" in one_error_line(result)
    assert trace.read_bytes() == before


def test_listing_a_history_makes_no_files_beside_it(tmp_path: Path, trace: Path) -> None:
    db = tmp_path / "h" / "history.sqlite"
    env = {"GPUSCOPE_HISTORY": str(db)}
    assert cli("diagnose", str(trace), "--save", "--json", "-", env=env).exit_code == 0
    names = sorted(p.name for p in db.parent.iterdir())
    assert cli("history", env=env).exit_code == 0
    assert cli("diff", "1", "1", env=env).exit_code == 0
    assert sorted(p.name for p in db.parent.iterdir()) == names == ["history.sqlite"]
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_two_fleet_runs_into_one_table_keep_every_job(tmp_path: Path) -> None:
    traces = [write_doc(tmp_path / f"t{i}.json", document(events(3 + i))) for i in range(4)]
    table = tmp_path / "fleet.json"
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuscope",
                "fleet",
                str(traces[2 * i]),
                str(traces[2 * i + 1]),
                "--out",
                str(table),
                "--workers",
                "1",
            ],
            stderr=subprocess.PIPE,
        )
        for i in range(2)
    ]
    assert [r.wait(120) for r in runs] == [0, 0]
    from gpuscope import fleet

    assert sorted(Path(j.path).name for j in fleet.read(table).jobs) == [t.name for t in traces]
