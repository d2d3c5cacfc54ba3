"""The command line as a user meets it: exit codes, one-line errors, JSON on disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from corpus import corpus
from gpuscope.cli import main


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, check=False
    )


def test_diagnose_writes_versioned_json(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = CliRunner().invoke(
        main,
        ["diagnose", str(corpus("kineto/param-dlrm-8rank")), "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["schema"] == "gpuscope/diagnosis-1"
    assert [d["rank"] for d in doc["devices"]] == list(range(8))
    for d in doc["devices"]:
        assert d["idle_ns"] == d["span_ns"] - d["busy_ns"]
        exclusive = d["exclusive"]
        assert (
            exclusive["compute_ns"]
            + exclusive["communication_ns"]
            + exclusive["memcpy_ns"]
            + exclusive["memset_ns"]
            + exclusive["idle_ns"]
            == d["span_ns"]
        )
        assert sum(c["lost_ns"] for c in d["idle_causes"]) == d["idle_ns"]
    assert doc["verdict"]["bound"] in {"host", "memory", "compute", "communication"}
    # What fixing saves first (docs/verdicts.md): the replayed saving, else the time lost.
    worth = [
        f["prediction"]["faster_pct"] if f["prediction"] else 100 * f["share"]
        for f in doc["findings"]
        if f["cause"] != "warmup" and not (f["prediction"] and f["prediction"]["faster_pct"] < 0.5)
    ]
    assert worth == sorted(worth, reverse=True)
    assert sum(f["share"] for f in doc["findings"]) <= 1.0
    # The terminal report still printed.
    assert "Findings" in result.output


def test_json_to_stdout_is_only_json() -> None:
    result = CliRunner().invoke(
        main,
        ["diagnose", str(corpus("kineto/kineto-2021/v100_tiny_oldest_schema.json")), "--json", "-"],
    )
    assert result.exit_code == 0
    assert json.loads(result.output)["devices"][0]["name"] == "Tesla V100-DGXS-32GB"


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "the file is empty"),
        (b"not json at all", "not a profiler trace"),
        (b"\x1f\x8b\x08\x00\x00\x00", "gzip"),
        (
            b'{"traceEvents": [{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",'
            b' "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}',
            "GPU activity was not recorded",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, content: bytes, expected: str) -> None:
    path = tmp_path / "input.json"
    path.write_bytes(content)
    result = run("diagnose", str(path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(path) in lines[0] and expected in lines[0]
    assert "Traceback" not in result.stderr


def test_missing_path_exit_2(tmp_path: Path) -> None:
    result = run("diagnose", str(tmp_path / "missing.json.gz"))
    assert result.returncode == 2
    assert "no such file" in result.stderr and "Traceback" not in result.stderr


def test_price_override_changes_cost(tmp_path: Path) -> None:
    path = str(corpus("kineto/tracelens/mi300x_bert-small_inference.json.gz"))
    out = tmp_path / "a.json"
    CliRunner().invoke(main, ["diagnose", path, "--json", str(out), "--gpu-hour-usd", "2"])
    doc = json.loads(out.read_text())
    top = doc["findings"][0]
    assert doc["verdict"]["gpu_hour_usd"] == 2
    p = top["prediction"]
    # Dollars come from the predicted saving when the fix was replayed, else from the share.
    share = p["saving_ns_per_step"] / p["step_ns"] if p else top["share"]
    assert top["cost_usd_per_gpu_hour"] == pytest.approx(max(share, 0) * 2, rel=1e-3)


def test_piped_report_keeps_every_figure_of_the_kernel_table() -> None:
    # ``python -m gpuscope`` runs the console script (its early scan); piped, rich prints 80
    # columns: kernel names are cut short, never the figures.
    trace = corpus("kineto/hta/df_index_resolver/df_index_resolver.json.gz")
    done = run("diagnose", str(trace))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    table = lines[next(i for i, line in enumerate(lines) if "Top kernels by time" in line) :]
    nccl = next(line for line in table if "ncclKernel_AllReduce" in line)
    assert "communication" in nccl and "2,020" in nccl and "357.34 ms" in nccl and "35.7%" in nccl


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_console_script_keeps_numpy_to_one_blas_thread() -> None:
    """numpy's OpenBLAS would start a spinning thread per CPU, taking the CPU the scan needs."""
    count_threads = (
        "from gpuscope.console import _one_blas_thread; _one_blas_thread(); import numpy, os;"
        " print(len(os.listdir('/proc/self/task')), os.environ['OPENBLAS_NUM_THREADS'])"
    )
    env = {
        k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
    }
    ours = subprocess.run(
        [sys.executable, "-c", count_threads], capture_output=True, text=True, env=env, check=True
    )
    assert ours.stdout.split() == ["1", "1"]
    users = subprocess.run(
        [sys.executable, "-c", count_threads],
        capture_output=True,
        text=True,
        env={**env, "OPENBLAS_NUM_THREADS": "3"},
        check=True,
    )
    assert users.stdout.split()[1] == "3"  # the user's own setting stands


def test_console_script_exits_at_once_with_everything_written(tmp_path: Path) -> None:
    """The trace commands end with os._exit: the output must be whole, the exit code sys.exit's,
    and atexit handlers run."""
    trace = corpus("kineto/kineto-2021/v100_tiny_oldest_schema.json")
    with_atexit = (
        "import atexit, sys; atexit.register(lambda: print('atexit ran', file=sys.stderr));"
        " sys.argv = ['gpuscope', *sys.argv[1:]]; from gpuscope.console import main; main()"
    )

    def console(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-c", with_atexit, *args]
        return subprocess.run(command, capture_output=True, text=True, check=False)

    as_json = console("diagnose", str(trace), "--json", "-")
    assert as_json.returncode == 0 and as_json.stderr == "atexit ran\n"
    assert json.loads(as_json.stdout)["devices"][0]["name"] == "Tesla V100-DGXS-32GB"
    report = console("diagnose", str(trace))
    assert report.returncode == 0 and report.stdout.rstrip().endswith("╯")
    missing = console("diagnose", str(tmp_path / "none.json"))
    assert missing.returncode == 2 and missing.stderr.endswith("atexit ran\n")
    usage = console("diagnose")
    assert usage.returncode == 2 and "Missing argument" in usage.stderr


@pytest.mark.parametrize(
    ("relative", "expected"),
    [
        ("kineto/hta/execution_trace/benchmark_simple_add_et.json.gz", "a PyTorch execution trace"),
        ("kineto/hta/memory_analysis/memory_timeline.raw.gz", "a PyTorch memory timeline"),
    ],
)
def test_the_profilers_other_outputs_are_named(relative: str, expected: str) -> None:
    path = corpus(relative)
    result = CliRunner().invoke(main, ["diagnose", str(path)])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1 and f"{path}: {expected}" in result.output


@pytest.mark.parametrize("command", ["diagnose", "diff"])
def test_an_output_that_cannot_be_written_is_one_line_and_exit_2(
    tmp_path: Path, command: str
) -> None:
    trace = str(corpus("kineto/kineto-2021/v100_tiny_oldest_schema.json"))
    out = tmp_path / "no" / "such" / "folder" / "out.json"
    traces = [trace] if command == "diagnose" else [trace, trace]
    result = CliRunner().invoke(main, [command, *traces, "--json", str(out)])
    assert result.exit_code == 2
    assert (
        result.output == f"gpuscope: error: {out}: cannot be written (No such file or directory)\n"
    )


def test_the_quick_exit_commands_are_commands() -> None:
    from gpuscope.cli import COMMANDS
    from gpuscope.console import READS_A_TRACE, RUN_ONCE

    assert READS_A_TRACE <= RUN_ONCE <= set(COMMANDS)
    assert set(COMMANDS) - RUN_ONCE == {"watch", "profile", "fleet", "mcp"}


@pytest.mark.parametrize("args", [(), ("--json", "-")])
def test_a_reader_that_leaves_early_is_no_failure(args: tuple[str, ...]) -> None:
    """`gpuscope diagnose X | head -1`: the reader closed the pipe before gpuscope wrote; the
    command still exits 0 and prints no error."""
    demo = Path(__file__).parent.parent / "src/gpuscope/examples/demo_train.json.gz"
    read_end, write_end = os.pipe()
    os.close(read_end)  # gone before the first write: every write fails with EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gpuscope", "diagnose", str(demo), *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (0, "")


def test_the_gate_says_loudly_when_the_browser_tests_cannot_run() -> None:
    env = {**os.environ, "GPUSCOPE_CHROMIUM": "/nonexistent/chromium", "CI": ""}
    root = Path(__file__).parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "tests/test_browser.py", "-k", "hostile"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        cwd=root,
    )
    assert done.returncode == 0, done.stdout  # skipped, not failed, outside CI
    tail = done.stdout.strip().splitlines()
    assert any("THE BROWSER TESTS DID NOT RUN" in line for line in tail[-4:]), tail
    assert "/nonexistent/chromium is not installed" in done.stdout
