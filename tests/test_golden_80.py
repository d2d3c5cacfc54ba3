"""Golden output at 80 columns (issue 32): nothing the user needs is cut. ``diagnose`` on eight
inputs of every kind prints no "…" in a headline, evidence or fix line; ``diff``,
``fleet-report`` and ``history`` print every figure whole."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from corpus import corpus
from gpuscope.cli import main
from gpuscope.testing.generator import GeneratorConfig, HostSync, SlowDataLoader, generate
from gpuscope.testing.samples import dcgmi_dmon_log, nvidia_smi_log

#: A job name shortened in its middle: its start and its run number kept.
JOB_NAME = re.compile(r"\S*…\S*run00\d")
#: Table rows and a finding's code locations may shorten names; sentences may not.
_NAME_LINES = ("│", "┃", "   at ")

CORPUS_INPUTS = [
    "kineto/tracelens/h100_qwen1.5-0.5b_inference.json.gz",
    "kineto/param-dlrm-8rank",
    "nsys/nsys-ai/h100_2gpu_1s.sqlite",
    "rocprof/mi350x_train_rocprofv3.json.gz",
    "ncu/b200_cublaslt_fp8_gemm.ncu.csv.log",
    "metrics/superbench_nvml_8gpu.jsonl",
]


def run80(*args: str, env: dict[str, str] | None = None, width: int = 80) -> str:
    result = CliRunner(env={"COLUMNS": str(width), **(env or {})}).invoke(main, list(args))
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= width
    return result.stdout


def sentence_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if not line.lstrip(" ").startswith(_NAME_LINES)]


@pytest.mark.parametrize("name", [*CORPUS_INPUTS, "nvidia-smi", "dcgmi-dmon"])
def test_diagnose_at_80_columns_cuts_no_sentence(name: str, tmp_path: Path) -> None:
    if name == "nvidia-smi":
        path = nvidia_smi_log().write(tmp_path)
    elif name == "dcgmi-dmon":
        path = dcgmi_dmon_log().write(tmp_path)
    else:
        path = corpus(name)
    output = run80("diagnose", str(path))
    # A sentence cut ends in "…" ("so …", "w…"); a long kernel name inside evidence may be
    # shortened with the figures after it kept.
    cut = [line for line in sentence_lines(output) if line.rstrip().endswith("…")]
    assert not cut, cut
    assert "fix: " in output or "Findings" not in output
    if "Sampled utilisation" in output:  # every heading and figure of the samples table whole
        assert "…" not in output.split("Sampled utilisation")[1]


def test_diff_fleet_report_and_history_show_every_figure(tmp_path: Path) -> None:
    nsys = corpus("nsys/nsys-ai")
    diff = run80("diff", str(nsys / "mfu_2gpu_before.sqlite"), str(nsys / "mfu_2gpu_after.sqlite"))
    assert "…" not in diff.split("Kernel changes")[0]  # the per-step figures, whole
    # One quantity, two statistics, each named: the table's medians, the findings' means.
    words = " ".join(diff.split())  # as read, lines joined
    assert "Per step: median" in words and "(mean per step: 1.26 ms → 2.75 ms)" in words
    kernel_rows = [line for line in diff.split("Kernel changes")[1].splitlines() if "s │" in line]
    assert len(kernel_rows) == 4
    for row in kernel_rows:  # before, after and the change: three whole figures a row
        figures = [cell.strip() for cell in row.split("│")[3:6]]
        assert all(re.fullmatch(r"[+-]?[\d.,]+ (ms|µs)", f) for f in figures), row
    # Each in the unit that reads: the smallest kernels in µs, not "0.00 ms".
    assert "0.00 ms" not in diff.split("Kernel changes")[1]

    jobs = tmp_path / "jobs"
    for i, inject in enumerate([HostSync(), SlowDataLoader(ms=30)]):
        folder = jobs / f"experiment-llama-finetune-with-a-long-name-run{i:03d}"
        folder.mkdir(parents=True)
        generate(GeneratorConfig(seed=i, steps=3, layers=1, inject=(inject,))).write(
            folder / "rank0.json.gz"
        )
    table = tmp_path / "fleet.json"
    CliRunner().invoke(main, ["fleet", str(jobs / "*"), "--out", str(table), "--workers", "1"])
    report = run80("fleet-report", str(table))
    worst = report.split("worst jobs")[1].split("by day")[0]
    assert "run000" in worst and "run001" in worst  # the jobs can be told apart
    assert "data_loader" in worst and "$" in worst
    assert "…" not in JOB_NAME.sub("", worst)  # only the job names give way, their ends kept

    env = {"GPUSCOPE_HISTORY": str(tmp_path / "history.sqlite")}
    for folder in sorted(jobs.iterdir()):
        run80("diagnose", str(folder), "--save", "--label", "a-long-label-for-this-run", env=env)
    for args in ((), ("--metric", "step_time_ns")):
        history = run80("history", *args, env=env)
        assert "…" not in history
        # The last column, whole: each run's top finding.
        assert history.count("data_loader") == 1 and history.count("host_sync") == 1
        assert history.count(" ms │") == 2  # each run's step time

    # Narrower still, the rows stack (a name on its line, its figures under it): nothing cut.
    for width in (40, 60):
        narrow = run80("fleet-report", str(table), width=width)
        assert "…" not in JOB_NAME.sub("", narrow)
        assert "…" not in run80("history", env=env, width=width)
        diff = run80(
            "diff",
            str(nsys / "mfu_2gpu_before.sqlite"),
            str(nsys / "mfu_2gpu_after.sqlite"),
            width=width,
        )
        assert "…" not in diff.split("Kernel changes")[0]
        assert diff.count("+375.5 µs") == 1  # the SendRecv kernel's change, whole


def test_a_job_diagnosed_rank_by_rank_prints_its_fixes_whole() -> None:
    output = run80("diagnose", str(corpus("kineto/param-dlrm-8rank")), "--engine", "local")
    cut = [line for line in sentence_lines(output) if line.rstrip().endswith("…")]
    assert not cut, cut
    assert "DataLoader(" in output  # a fix that was cut at 160 characters, whole
