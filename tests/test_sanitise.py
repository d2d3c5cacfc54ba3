"""Every command that prints goes through one sanitiser (:mod:`gpuscope.sanitise`): an escape
sequence, a C1 control (U+009B opens a sequence on its own), a bidirectional override or a line
separator in a path, a label or a name reaches the terminal as U+FFFD, and rich markup in user
text prints as itself (issue #30, class 2)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from gpuscope.sanitise import one_line, printable
from test_hostile import cli, document, events, one_error_line, write_doc

#: What must never reach the terminal from user text.
LEAK = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
HOSTILE = "a\x1b]0;pwned\x07b\u202ec\u009b31md\u2028e"


def assert_clean(*texts: str) -> None:
    for text in texts:
        assert LEAK.search(text) is None, repr(text)


@pytest.fixture
def hostile_trace(tmp_path: Path) -> Path:
    return write_doc(tmp_path / f"{HOSTILE}.json", document(events()))


def test_the_sanitiser_replaces_every_kind_of_control() -> None:
    assert printable(HOSTILE) == "a\ufffd]0;pwned\ufffdb\ufffdc\ufffd31md\ufffde"
    assert one_line("two\nlines\x1b[2J") == "two lines\ufffd[2J"
    assert printable("[link=http://x]y[/link] :fire:") == "[link=http://x]y[/link] :fire:"


def test_an_error_line_naming_a_hostile_path_is_clean(tmp_path: Path) -> None:
    line = one_error_line(cli("diagnose", str(tmp_path / HOSTILE)))
    assert_clean(line)
    assert "\ufffd]0;pwned" in line


def test_a_usage_error_quoting_a_hostile_value_is_clean(hostile_trace: Path) -> None:
    result = cli("report", str(hostile_trace), str(hostile_trace), str(hostile_trace))
    assert result.exit_code == 2
    assert_clean(result.stderr)


def test_diff_and_check_print_hostile_names_clean(tmp_path: Path, hostile_trace: Path) -> None:
    plain = write_doc(tmp_path / "plain.json", document(events()))
    result = cli("diff", str(hostile_trace), str(plain))
    assert result.exit_code == 0, result.stderr
    assert "\ufffd]0;pwned" in result.stdout
    assert_clean(result.stdout, result.stderr)
    for bound in ("1", "100"):
        result = cli("check", str(hostile_trace), "--max-idle-pct", bound)
        assert result.exit_code in (0, 1)
        assert_clean(result.stdout, result.stderr)


def test_history_labels_are_neither_escapes_nor_markup(tmp_path: Path) -> None:
    trace = write_doc(tmp_path / "t.json", document(events()))
    env = {"GPUSCOPE_HISTORY": str(tmp_path / "h.sqlite")}
    for label in ("[b]L[/b]", f"x{HOSTILE}"):
        result = cli("diagnose", str(trace), "--label", label, "--json", "-", env=env)
        assert result.exit_code == 0
    result = cli("history", env={**env, "COLUMNS": "200"})
    assert result.exit_code == 0
    assert "[b]L[/b]" in result.stdout  # markup printed as typed
    assert_clean(result.stdout, result.stderr)


def test_fleet_report_and_scale_print_hostile_paths_clean(
    tmp_path: Path, hostile_trace: Path
) -> None:
    table = tmp_path / "fleet.json"
    assert cli("fleet", str(hostile_trace), "--out", str(table), "--workers", "1").exit_code == 0
    result = cli("fleet-report", str(table))
    assert result.exit_code == 0, result.stderr
    assert_clean(result.stdout, result.stderr)
    other = tmp_path / f"{HOSTILE}2.json"
    shutil.copy(hostile_trace, other)
    result = cli("scale", str(hostile_trace), str(other))
    assert_clean(result.stdout, result.stderr)
