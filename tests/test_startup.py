"""The console script's start-up: what it imports before a command runs, and how long that takes.

Every command pays for the command line's imports, so a heavy module imported at the top of the
CLI (numpy, rich, plotly, torch) slows all of them, ``gpuscope --help`` included. Commands import
what they need inside themselves; these tests catch an import that slipped to the top.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from corpus import corpus

#: Libraries the command line must not import before a command asks for them.
HEAVY = ("numpy", "msgspec", "rich", "plotly", "torch", "pyarrow", "ray", "pynvml", "mcp")
#: Generous: ~45 ms is usual on a 2-CPU VM; an import of plotly or torch costs far more.
CLI_IMPORT_BOUND_MS = 400


def test_the_command_line_imports_no_heavy_library() -> None:
    code = (
        "import json, sys, gpuscope.console, gpuscope.cli;"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    imported = set(json.loads(out.stdout))
    assert not imported & set(HEAVY), imported & set(HEAVY)


def test_the_command_line_imports_quickly() -> None:
    """Best of three runs of ``-X importtime``, so that one slow moment of a busy machine does
    not fail it."""
    best_us = min(_cli_import_us() for _ in range(3))
    assert best_us < CLI_IMPORT_BOUND_MS * 1000, f"gpuscope.cli imports in {best_us / 1000:.0f} ms"


def _cli_import_us() -> int:
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import gpuscope.console, gpuscope.cli"],
        capture_output=True,
        text=True,
        check=True,
    )
    total = 0
    for line in out.stderr.splitlines():
        match = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S+)$", line)
        if match and match.group(2) in ("gpuscope.console", "gpuscope.cli"):
            total += int(match.group(1))  # cumulative, top-level packages only
    return total


def test_library_calls_leave_gc_and_environment_as_they_found_them() -> None:
    """``gpuscope.load`` pauses the cyclic GC while it builds the columns (no cycles are made),
    and gives it back as it was; ``diagnose`` touches neither the GC nor the environment."""
    import gc
    import os
    from importlib import resources

    import gpuscope

    before_env = dict(os.environ)
    threshold = gc.get_threshold()
    for enabled in (True, False):
        (gc.enable if enabled else gc.disable)()
        try:
            with resources.as_file(
                resources.files("gpuscope.examples").joinpath("demo_train.json.gz")
            ) as demo:
                gpuscope.diagnose(gpuscope.load(demo))
            assert gc.isenabled() is enabled
            assert gc.get_threshold() == threshold
        finally:
            gc.enable()
    assert dict(os.environ) == before_env


def test_the_read_ahead_starts_before_typing_re_and_pathlib_load() -> None:
    """The console script starts a Kineto file's scan before the modules every command needs
    anyway but the scan does not (typing, re, enum, pathlib: ~9 ms on a 2-CPU VM)."""
    from importlib import resources

    demo = resources.files("gpuscope.examples").joinpath("demo_train.json.gz")
    code = (
        "import sys; import gpuscope.console as c; c._tune_malloc()\n"
        "from gpuscope.readers import _early\n"
        "before = sorted(m for m in ('typing', 're', 'enum', 'pathlib') if m in sys.modules)\n"
        f"prefetch = _early.start([{str(demo)!r}])\n"
        "import json  # json imports re\n"
        "print(json.dumps([before, prefetch is not None and prefetch.scan is not None]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == [[], True]


def test_a_scan_begun_on_the_typed_name_fails_naming_the_file_as_the_command_does(
    tmp_path: Path,
) -> None:
    """The read-ahead scans ``./trace.json.gz`` as typed; a refusal raised on the scan's
    thread names it as the command does (``trace.json.gz``, as pathlib prints it)."""
    (tmp_path / "trace.json.gz").symlink_to(corpus(_BIG))
    made = subprocess.run(
        [sys.executable, "-m", "gpuscope", "diagnose", "./trace.json.gz", "--max-memory", "100M"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert made.returncode == 2
    assert made.stderr.startswith("gpuscope: error: trace.json.gz: too big for the memory budget")


#: A Kineto trace whose columns outgrow what a 100 MB budget allows a read.
_BIG = "kineto/tracelens/h100_qwen1.5-0.5b_inference.json.gz"


def _console(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gpuscope", *args],
        capture_output=True,
        env={**os.environ, "COLUMNS": "100"},
        cwd=cwd,
        check=False,
    )


def _imports_click(run: subprocess.CompletedProcess[bytes]) -> bool:
    return any(re.search(rb"\|\s+click$", line) for line in run.stderr.splitlines())


def test_diagnose_of_one_trace_runs_without_click_and_prints_what_click_would() -> None:
    """``gpuscope diagnose TRACE`` alone runs without the command-line library; any option (here
    ``--top 10``, the default) goes through click, with the same bytes out and the same exit."""
    trace = str(corpus("kineto/hta/df_index_resolver/df_index_resolver.json.gz"))
    plain, through_click = _console("diagnose", trace), _console("diagnose", trace, "--top", "10")
    assert not _imports_click(plain) and _imports_click(through_click)
    assert plain.returncode == through_click.returncode == 0
    assert plain.stdout == through_click.stdout and plain.stdout.count(b"\n") > 20


def test_one_trace_that_cannot_be_read_fails_in_one_line_without_click(tmp_path: Path) -> None:
    """The same one-line error and exit 2 as the click command gives; help still goes to click."""
    (tmp_path / "t.json").write_text('{"traceEvents": [')
    plain = _console("diagnose", "t.json", cwd=tmp_path)
    through_click = _console("diagnose", "t.json", "--top", "10", cwd=tmp_path)
    assert not _imports_click(plain)
    assert plain.returncode == through_click.returncode == 2
    error = [line for line in plain.stderr.splitlines() if not line.startswith(b"import time")]
    assert error == [
        b"gpuscope: error: t.json: the file ends mid-write before its first whole event"
    ]
    assert error == [
        line for line in through_click.stderr.splitlines() if not line.startswith(b"import time")
    ]
    assert b"gpuscope diagnose [OPTIONS] PATH" in _console("diagnose", "--help").stdout
