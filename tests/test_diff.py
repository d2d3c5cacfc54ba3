"""Diff: ground-truth fixes are called significant, noise is not, and figures are per step."""

from __future__ import annotations

import itertools
import json
from functools import cache
from pathlib import Path

import pytest
from click.testing import CliRunner

from corpus import corpus
from gpuscope import generator as g
from gpuscope.analyses.diff import (
    GPU_BUSY,
    LOST_PREFIX,
    STEP_TIME,
    RunSummary,
    compare,
    diff,
    stable_name,
    summarize,
)
from gpuscope.cli import main
from gpuscope.diagnosis import diagnose
from gpuscope.errors import UnknownFormatError
from gpuscope.model import Job
from gpuscope.readers import kineto, load

SMALL = {"layers": 1, "hidden": 512, "seq_len": 256}


@cache
def summary(seed: int, steps: int = 5, inject: tuple[g.Injection, ...] = ()) -> RunSummary:
    """A small generated trace, read and diagnosed in-process (no file written)."""
    config = g.GeneratorConfig(seed=seed, steps=steps, inject=inject, **SMALL)
    trace = kineto.read(Path(f"seed{seed}.json"), g.generate(config).to_bytes())
    return summarize(diagnose(Job(source=f"seed{seed}", traces=[trace])))


@pytest.mark.parametrize(
    ("injection", "cause"),
    [(g.SlowDataLoader(ms=40), "data_loader"), (g.HostSync(), "host_sync")],
)
def test_a_known_fix_is_significant_and_its_finding_resolved(
    injection: g.Injection, cause: str
) -> None:
    result = diff(summary(1, inject=(injection,)), summary(2))
    step = result.metric(STEP_TIME)
    assert step is not None
    assert step.comparison.significant is True
    assert step.outcome == "better"
    assert step.comparison.change_pct is not None and step.comparison.change_pct < -10
    assert cause in [f.cause for f in result.resolved]
    assert cause not in [f.cause for f in result.new + result.persisting]
    lost = result.metric(LOST_PREFIX + cause)
    assert lost is not None and lost.outcome == "better"
    busy = result.metric(GPU_BUSY)
    assert busy is not None and busy.outcome == "better"


def test_the_reverse_is_a_significant_regression_with_a_new_finding() -> None:
    result = diff(summary(2), summary(1, inject=(g.SlowDataLoader(ms=40),)))
    step = result.metric(STEP_TIME)
    assert step is not None and step.outcome == "worse"
    assert [f.cause for f in result.new] == ["data_loader"]


def test_noise_between_seeds_is_not_called_significant() -> None:
    summaries = [summary(seed) for seed in range(101)]
    called = 0
    for before, after in itertools.pairwise(summaries):
        step = diff(before, after).metric(STEP_TIME)
        assert step is not None and step.comparison.significant is not None
        called += bool(step.comparison.significant)
    assert called <= 5, f"{called} of 100 no-change pairs called significant"


def test_different_step_counts_compare_per_step() -> None:
    short, long = summary(7, steps=4), summary(7, steps=12)
    assert (short.steps, long.steps) == (3, 11)  # the first step only marks where the next begins
    result = diff(short, long)
    for metric in result.metrics:
        assert metric.comparison.significant is not True, metric.name
    step = result.metric(STEP_TIME)
    assert step is not None and step.comparison.change_pct is not None
    assert abs(step.comparison.change_pct) < 2
    assert result.kernels == []  # same kernels per step, whatever the window's length


def test_fewer_than_three_steps_is_thin_evidence() -> None:
    result = diff(summary(3, steps=3), summary(4))
    step = result.metric(STEP_TIME)
    assert step is not None
    assert step.comparison.significant is None
    assert step.outcome == "unclear"
    assert "thin evidence" in (step.comparison.note or "")


def test_kernel_changes_name_added_and_removed_kernels() -> None:
    result = diff(summary(5, inject=(g.Fp32Gemm(),)), summary(6))
    status = {k.name: k.status for k in result.kernels}
    assert status.get("ampere_sgemm_128x64_tn") == "removed"
    assert "added" in status.values()
    assert "fp32_gemm" in [f.cause for f in result.resolved]


def test_welch_test_matches_reference_values() -> None:
    # scipy.stats.ttest_ind([2, 3, 4, 5, 6], [1, 2, 3, 4, 5], equal_var=False): t=1, p=0.3466
    c = compare([1, 2, 3, 4, 5], [2, 3, 4, 5, 6])
    assert c.p_value == pytest.approx(0.34659, abs=1e-4)
    assert c.significant is False
    # 99% interval: 1 +- t(0.995, df=8) * 1 = 1 +- 3.3554
    assert c.ci_low == pytest.approx(1 - 3.3554, abs=1e-3)
    assert c.ci_high == pytest.approx(1 + 3.3554, abs=1e-3)
    assert compare([5, 5, 5], [5, 5, 5]).significant is False
    assert compare([5, 5, 5], [6, 6, 6]).significant is True


def test_names_match_by_their_stable_part() -> None:
    assert stable_name("ProfilerStep#123") == stable_name("ProfilerStep#7")
    assert stable_name("aten::mm, seq = 12, op_id = 5") == stable_name(
        "aten::mm, seq = 99, op_id = 1"
    )
    assert stable_name("<built-in method item of Tensor object at 0x7f3a2c1b6f20>") == stable_name(
        "<built-in method item of Tensor object at 0x7f00aa>"
    )
    assert stable_name("Flash_fwd_kernel_traits<128, 64>") == "Flash_fwd_kernel_traits<128, 64>"


def test_cli_diff_writes_metrics_and_findings(tmp_path: Path) -> None:
    before = g.generate(
        g.GeneratorConfig(seed=1, steps=5, inject=(g.SlowDataLoader(ms=40),), **SMALL)
    )
    after = g.generate(g.GeneratorConfig(seed=2, steps=6, **SMALL))
    out = tmp_path / "diff.json"
    result = CliRunner().invoke(
        main,
        [
            "diff",
            str(before.write(tmp_path / "before.json.gz")),
            str(after.write(tmp_path / "after.json.gz")),
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["schema"] == "gpuscope/diff-1"
    metrics = {m["name"]: m for m in doc["metrics"]}
    step = metrics["step_time_ns"]
    assert step["significant"] is True
    assert step["after"] < step["before"]
    assert len(step["before_per_step"]) == 4 and len(step["after_per_step"]) == 5
    assert step["change_pct"] == pytest.approx(100 * (step["after"] / step["before"] - 1), abs=0.01)
    assert {"gpu_busy_pct", "cost_usd_per_gpu_hour", "lost_ns_per_step.data_loader"} <= set(metrics)
    assert [f["cause"] for f in doc["findings"]["resolved"]] == ["data_loader"]
    assert doc["findings"]["new"] == []
    assert "step time" in result.output and "resolved" in result.output


def test_cli_diff_of_a_missing_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["diff", str(tmp_path / "nope.json"), str(tmp_path)])
    assert result.exit_code == 2
    assert "no such file, folder or saved run id" in result.output


def test_nsys_before_after_pair_diffs_end_to_end() -> None:
    before_path = corpus("nsys/nsys-ai/mfu_2gpu_before.sqlite")
    after_path = corpus("nsys/nsys-ai/mfu_2gpu_after.sqlite")
    try:
        before_job = load(before_path)
    except UnknownFormatError:
        pytest.skip("gpuscope cannot read Nsight Systems .sqlite exports yet")
    before = summarize(diagnose(before_job))
    after = summarize(diagnose(load(after_path)))
    result = diff(before, after)
    names = [m.name for m in result.metrics]
    assert names[:3] == [STEP_TIME, GPU_BUSY, "cost_usd_per_gpu_hour"]
    assert before.devices == after.devices == 2
    for side in (before, after):
        assert side.kernel_ns, "kernels were compared"
    assert result.kernels, "the fix changed which kernels run"
    busy = result.metric(GPU_BUSY)
    assert busy is not None and busy.comparison.before_mean is not None
    assert busy.comparison.after_mean is not None
    if before.steps == 0 or after.steps == 0:  # no step ranges: shares over the whole capture
        assert busy.comparison.significant is None
