"""Diff: ground-truth fixes are called significant, noise is not, and figures are per step."""

from __future__ import annotations

import itertools
import json
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from corpus import corpus
from gpuscope.cli import main
from gpuscope.compare.diff import (
    GPU_BUSY,
    ITERATIONS,
    LOST_PREFIX,
    STEP_TIME,
    RunSummary,
    compare,
    diff,
    regression,
    regression_line,
    summarize,
    typical_steps,
)
from gpuscope.diagnosis import diagnose
from gpuscope.model import Job
from gpuscope.names import stable_name
from gpuscope.readers import kineto, load
from gpuscope.testing import generator as g

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
    assert cause not in [f.cause for f in result.new]
    # The fixed run still waits once for its first batch, before the first kernel of its first
    # profiled step (the window opens where the step does): resolved, or persisting far smaller.
    if cause not in [f.cause for f in result.resolved]:
        (kept,) = [f for f in result.persisting if f.cause == cause]
        assert kept.before is not None and kept.after is not None
        assert kept.after.share_pct < 0.05 * kept.before.share_pct
    lost = result.metric(LOST_PREFIX + cause)
    assert lost is not None and lost.outcome == "better"
    busy = result.metric(GPU_BUSY)
    assert busy is not None and busy.outcome == "better"


def test_the_reverse_is_a_significant_regression_with_a_new_finding() -> None:
    result = diff(summary(2), summary(1, inject=(g.SlowDataLoader(ms=40),)))
    step = result.metric(STEP_TIME)
    assert step is not None and step.outcome == "worse"
    # New, or (the clean run's one wait for its first batch) persisting and far larger.
    grown = [
        f.cause
        for f in result.persisting
        if f.before and f.after and f.after.share_pct > 20 * f.before.share_pct
    ]
    assert [f.cause for f in result.new] + grown == ["data_loader"]


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


def test_too_few_steps_to_reach_the_confidence_is_thin_evidence() -> None:
    # Two values against four: the most extreme order has probability 1 / C(6, 2) = 1/15 > 2.5%.
    result = diff(summary(3, steps=3), summary(4))
    step = result.metric(STEP_TIME)
    assert step is not None
    assert step.comparison.significant is None
    assert step.outcome == "unclear"
    assert "thin evidence" in (step.comparison.note or "")
    # Three steps a side wholly apart: the note says so, and why the two-sided test cannot.
    apart = compare([7.8, 7.9, 7.85], [39.0, 38.0, 41.9])
    assert apart.significant is None and apart.note is not None
    assert "every step after is above every step before (two-sided p = 0.10" in apart.note
    assert apart.apart == "above" and compare([9.0, 9.5], [1.0, 2.0]).apart == "below"
    overlapping = compare([7.8, 7.9, 7.85], [7.7, 7.95, 7.86])
    assert "every step" not in (overlapping.note or "") and overlapping.apart is None


def test_kernel_changes_name_added_and_removed_kernels() -> None:
    result = diff(summary(5, inject=(g.Fp32Gemm(),)), summary(6))
    status = {k.name: k.status for k in result.kernels}
    assert status.get("ampere_sgemm_128x64_tn") == "removed"
    assert "added" in status.values()
    assert "fp32_gemm" in [f.cause for f in result.resolved]


def test_rank_test_matches_reference_values() -> None:
    # Exact Mann-Whitney, 5 against 5 (252 orders): U = 15 has P(U >= 15) = 87/252, two-sided
    # 0.6905 (scipy.stats.mannwhitneyu(..., method="exact"), R's wilcox.test).
    c = compare([1, 3, 5, 7, 9], [2, 4, 6, 8, 10])
    assert c.p_value == pytest.approx(174 / 252, abs=1e-9)
    assert c.significant is False
    # Complete separation: 2/252. The Hodges-Lehmann shift is the median of the 25 differences
    # (5), its 95% interval [D(3), D(23)] = [2, 8] (P(U <= 2) = 4/252 <= 2.5% < P(U <= 3)).
    c = compare([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
    assert c.p_value == pytest.approx(2 / 252, abs=1e-9)
    assert c.significant is True
    assert (c.change, c.ci_low, c.ci_high) == (5.0, 2.0, 8.0)
    assert (c.before_median, c.after_median) == (3.0, 8.0)
    assert compare([5, 5, 5, 5], [5, 5, 5, 5]).significant is False
    assert compare([5, 5, 5, 5], [6, 6, 6, 6]).significant is True  # ties: normal approximation


def test_one_slow_step_does_not_hide_a_regression() -> None:
    # +10% on every step; the baseline has one step twice as slow (a checkpoint). A mean-based
    # test calls this noise; the medians and ranks do not.
    before = [100.0, 101.0, 99.0, 100.5, 200.0, 99.5, 100.2, 100.8]
    after = [110.0, 111.0, 109.0, 110.5, 109.5, 110.2, 110.8, 109.8]
    c = compare(before, after)
    assert c.significant is True
    assert c.change_pct == pytest.approx(9.7, abs=0.5)


def test_the_gate_is_over_inconclusive_or_within() -> None:
    base = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 100.8, 99.8]
    worse = [v * 1.3 for v in base]
    assert regression(base, worse, 10.0).verdict == "over"
    assert regression(base, worse, 40.0).verdict == "within"
    # +30% measured on three steps a side: the rank test cannot reach 95% one-sided with
    # 3 against 3 only at the most extreme order (1/20 = 5%), so that order decides.
    few = regression(base[:2], worse[:2], 10.0)
    assert few.verdict == "inconclusive" and few.lower_pct is None
    assert few.steps_needed is not None and few.steps_needed >= 3
    # Over the bound by less than the noise: more steps would settle it.
    noisy_before = [100.0, 104.0, 96.0, 102.0, 98.0]
    noisy_after = [v * 1.12 for v in [98.0, 102.0, 96.0, 104.0, 100.0]]
    r = regression(noisy_before, noisy_after, 10.0)
    assert r.verdict == "inconclusive"
    assert r.steps_needed is not None and r.steps_needed > 5


def test_few_steps_wholly_beyond_the_bound_fail_and_overlap_stays_inconclusive() -> None:
    """The gate's one-sided exact test on generated runs of 3 and 4 steps a side (the H200 loop's
    profiles): a separation beyond the bound has p = 1 / C(n + m, n) <= 5%, so 5x slower fails,
    5x faster passes, and overlapping samples over the bound stay inconclusive."""
    rng = np.random.default_rng(28)
    for n in (3, 4):
        base = list(100.0 + rng.normal(0.0, 2.0, n))
        slow = [5.0 * v for v in 100.0 + rng.normal(0.0, 2.0, n)]
        over = regression(base, slow, 10.0)
        assert over.verdict == "over" and over.lower_pct is not None and over.lower_pct > 300.0
        assert (over.before_steps, over.after_steps) == (n, n)
        assert "at least +" in regression_line(over)
        faster = regression(slow, base, 10.0)
        assert faster.verdict == "within" and faster.change_pct < -70.0
    # 3 against 3: over exactly when every run step, less the bound, is above every baseline
    # step (the one order with p = 1/20); any overlap leaves p >= 2/20: inconclusive.
    verdicts: dict[bool, set[str]] = {True: set(), False: set()}
    for _ in range(400):
        b = list(100.0 + rng.normal(0.0, 5.0, 3))
        a = list(100.0 * rng.uniform(1.0, 1.4) + rng.normal(0.0, 5.0, 3))
        r = regression(b, a, 10.0)
        separated = min(a) - 0.1 * float(np.median(b)) > max(b)
        verdicts[separated].add(r.verdict)
        assert (r.verdict == "over") == separated
    assert verdicts[True] == {"over"} and verdicts[False] == {"inconclusive", "within"}
    # The same few steps with one of them inside the other run's range: not beyond noise.
    overlap = regression([100.0, 102.0, 98.0], [125.0, 101.0, 130.0], 10.0)
    assert overlap.verdict == "inconclusive" and overlap.change_pct > 10.0
    assert overlap.steps_needed is not None and overlap.steps_needed > 3


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
    # change: the Hodges-Lehmann shift, in % of the median before
    assert step["change_pct"] == pytest.approx(100 * step["change"] / step["before"], abs=0.01)
    assert step["ci_low"] <= step["change"] <= step["ci_high"]
    assert {"gpu_busy_pct", "cost_usd_per_gpu_hour", "lost_ns_per_step.data_loader"} <= set(metrics)
    findings = doc["findings"]
    # Resolved, or left as the fixed run's one wait for its first batch (see above).
    kept = [f for f in findings.get("persisting", []) if f["cause"] == "data_loader"]
    assert [f["cause"] for f in findings["resolved"]] == ["data_loader"] or len(kept) == 1
    assert findings["new"] == []
    assert "step time" in result.output


def test_cli_diff_of_a_missing_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["diff", str(tmp_path / "nope.json"), str(tmp_path)])
    assert result.exit_code == 2
    assert "no such file, folder or saved run id" in result.output


def test_nsys_before_after_pair_diffs_end_to_end() -> None:
    """mfu_2gpu has no profiler steps. Its NVTX ``FSDP::pre_forward`` ranges (one per block)
    are hooks that hold a sliver of the launches, so they are not iterations; the device's
    repeating 119-kernel sequence, with the device waiting before each, is: per iteration the
    after run is about 10.5% slower, well beyond the iteration-to-iteration noise."""
    before = summarize(diagnose(load(corpus("nsys/nsys-ai/mfu_2gpu_before.sqlite"))))
    after = summarize(diagnose(load(corpus("nsys/nsys-ai/mfu_2gpu_after.sqlite"))))
    result = diff(before, after)
    names = [m.name for m in result.metrics]
    assert names[:4] == [STEP_TIME, ITERATIONS, GPU_BUSY, "cost_usd_per_gpu_hour"]
    assert before.devices == after.devices == 2
    for side in (before, after):
        assert side.step_source == "repeating kernel sequence (119 kernels per iteration)"
    assert (before.steps, after.steps) == (15, 13)
    assert not any("steps found differently" in n for n in result.notes)
    step = result.metric(STEP_TIME)
    assert step is not None and step.outcome == "worse"
    assert step.comparison.change_pct == pytest.approx(10.5, abs=1.0)
    assert step.comparison.p_value is not None and step.comparison.p_value < 0.005
    assert result.kernels, "the fix changed which kernels run"


def test_slow_outlier_steps_are_left_out_of_step_time_only() -> None:
    before = [100.0, 101.0, 99.0, 100.5, 140.0, 99.5, 100.2, 100.8, 99.8, 100.1]
    after = [110.0, 111.0, 109.0, 110.5, 109.5, 110.2, 110.8, 109.8, 110.1, 109.9]
    kept_b, kept_a, left_b, left_a = typical_steps(before, after)
    assert (left_b, left_a) == (1, 0) and 140.0 not in kept_b and kept_a == after
    # Many slow steps are the run's pace, not outliers; a 0.5% slower step is jitter.
    assert typical_steps([100.0, 140.0, 100.0, 140.0, 100.0], after)[2] == 0
    assert typical_steps([100.0, 100.1, 100.0, 100.5, 100.0], [100.0] * 5)[2] == 0


@pytest.mark.parametrize("width", [80, 100])
def test_the_metrics_table_keeps_cause_names_whole_within_the_terminal(width: int) -> None:
    """A cause's name is one word: the table fits the terminal and folds figures, not names
    (``launch_overhe`` / ``ad`` at 80 columns, before)."""
    import io

    from rich.console import Console

    from gpuscope.render.diff import render

    folder = Path(__file__).resolve().parent / "data" / "h200" / "loop"
    before, after = (
        summarize(diagnose(load(folder / n))) for n in ("only-h2d_copy.json.gz", "fix-all.json.gz")
    )
    out = io.StringIO()
    render(diff(before, after), Console(file=out, width=width), "b", "a")
    text = out.getvalue()
    assert max(map(len, text.splitlines())) <= width
    table = text.split("Findings")[0]
    for cause in ("launch_overhead", "h2d_copy", "cpu_other"):
        assert f"│ {cause}" in table, table
