"""The CI gate: exit 0 when every bound holds, 1 with one line when one breaks, 2 for bad input,
3 when too few steps tell whether step time is over the bound."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpuscope.compare.diff import decisive
from gpuscope.testing import generator as g

SMALL = {"layers": 1, "hidden": 512, "seq_len": 256}


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("check")
    configs = {
        "slow": g.GeneratorConfig(seed=1, steps=6, inject=(g.SlowDataLoader(ms=40),), **SMALL),
        "fast": g.GeneratorConfig(seed=2, steps=6, **SMALL),
        "fast_again": g.GeneratorConfig(seed=3, steps=8, **SMALL),
        "slow_short": g.GeneratorConfig(
            seed=4, steps=2, inject=(g.SlowDataLoader(ms=40),), **SMALL
        ),
    }
    return {name: g.generate(c).write(folder / f"{name}.json.gz") for name, c in configs.items()}


def check(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuscope", "check", *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )


def test_idle_bound(traces: dict[str, Path]) -> None:
    broken = check(traces["slow"], "--max-idle-pct", "20")
    assert broken.returncode == 1
    assert broken.stdout == ""
    assert len(broken.stderr.strip().splitlines()) == 1
    assert "check failed" in broken.stderr and "GPU idle" in broken.stderr
    kept = check(traces["fast"], "--max-idle-pct", "20")
    assert kept.returncode == 0, kept.stderr
    assert "check passed" in kept.stdout


def test_a_close_bound_prints_the_digits_that_decided(traces: dict[str, Path]) -> None:
    from gpuscope.commands.diff import summary_of

    idle = summary_of(str(traces["slow"]), None)[0].idle_pct
    bound = f"{math.floor((idle - 0.001) * 100) / 100:.2f}"  # two decimals, just below it
    broken = check(traces["slow"], "--max-idle-pct", bound)
    assert broken.returncode == 1
    shown = re.search(r"GPU idle ([0-9.]+)% \(max ([0-9.]+)%\)", broken.stderr)
    assert shown is not None and shown[2] == bound
    assert float(shown[1]) > float(bound)  # the printed figure shows why it failed
    assert decisive(52.3449, 52.34) == "52.345" and decisive(33.24, 20) == "33.2"
    assert decisive(0.034, 0.03, 2) == "0.034" and decisive(1.5, 1.5) == "1.5"


def test_cost_bound(traces: dict[str, Path]) -> None:
    broken = check(traces["slow"], "--max-cost-usd-per-gpu-hour", "0.5")
    assert broken.returncode == 1
    assert "predicted saving $" in broken.stderr
    assert check(traces["fast"], "--max-cost-usd-per-gpu-hour", "0.5").returncode == 0


def test_step_time_regression_against_a_baseline(traces: dict[str, Path]) -> None:
    regressed = check(traces["slow"], "--baseline", traces["fast"], "--max-regression-pct", "5")
    assert regressed.returncode == 1
    line = regressed.stderr.strip()
    assert "\n" not in line and "step time" in line and "max +5%" in line
    improved = check(traces["fast"], "--baseline", traces["slow"], "--max-regression-pct", "5")
    assert improved.returncode == 0, improved.stderr
    # Same code, other seed and step count: within noise, so the gate holds.
    noise = check(traces["fast_again"], "--baseline", traces["fast"], "--max-regression-pct", "2")
    assert noise.returncode == 0, noise.stderr
    assert "at most +" in noise.stdout and "at 95% confidence" in noise.stdout


def test_too_few_steps_are_inconclusive_exit_3(traces: dict[str, Path]) -> None:
    # Two steps give one per-step value: no order of 1 against 5 values reaches 95% one-sided
    # (1/6), however large the slowdown: the gate says so and how many steps would settle it.
    result = check(traces["slow_short"], "--baseline", traces["fast"], "--max-regression-pct", "5")
    assert result.returncode == 3, result.stderr
    line = result.stderr.strip()
    assert "\n" not in line and "check inconclusive" in line
    assert "too few steps" in line and "steps a side would settle it" in line


@pytest.mark.parametrize("steps", [4, 5])  # 3 and 4 per-step values a side
def test_few_steps_five_times_slower_fail_and_faster_pass(tmp_path: Path, steps: int) -> None:
    """The H200 loop's case: profiles of a few steps, one run 5x slower in every step. With
    every step beyond every baseline step the exact one-sided p is 1/20 (3 a side) or 1/70 (4):
    the gate fails it (exit 1), not "inconclusive" (exit 3); the reverse passes (exit 0)."""
    base = g.GeneratorConfig(seed=5, steps=steps, step_noise_pct=2.0, **SMALL)
    slow = g.GeneratorConfig(seed=6, steps=steps, step_noise_pct=2.0, kernel_scale=5.0, **SMALL)
    base_path = g.generate(base).write(tmp_path / "base.json.gz")
    slow_path = g.generate(slow).write(tmp_path / "slow.json.gz")
    over = check(slow_path, "--baseline", base_path, "--max-regression-pct", "10")
    assert over.returncode == 1, over.stderr
    line = over.stderr.strip()
    assert "check failed" in line and f"medians of {steps - 1} and {steps - 1} steps" in line
    shown = re.search(r"\(\+([0-9.]+)%, max \+10%.*at least \+([0-9.]+)% at 95% confidence", line)
    assert shown is not None and float(shown[1]) > 200.0 and float(shown[2]) > 10.0
    passed = check(base_path, "--baseline", slow_path, "--max-regression-pct", "10")
    assert passed.returncode == 0, passed.stderr


def test_the_issue_pair_regresses_beyond_the_bound() -> None:
    """HTA's trace_diff: the test run's device steps are ~117 ms against ~77 ms, every one."""
    from corpus import corpus

    root = corpus("kineto/hta/trace_diff")
    result = check(root / "test", "--baseline", root / "control", "--max-regression-pct", "10")
    assert result.returncode == 1, result.stderr
    assert "+51.3%" in result.stderr and "at least +" in result.stderr
    reverse = check(root / "control", "--baseline", root / "test", "--max-regression-pct", "10")
    assert reverse.returncode == 0, reverse.stderr


def test_nsys_exports_gate_on_their_iterations() -> None:
    """The exports' repeated NVTX ranges (``AllToAll4D``, ``FlashAttnFunc``: one per layer,
    holding 7% of the launches) are not steps; the repeating kernel sequence is (119 kernels, the
    device waiting before each)."""
    from corpus import corpus

    root = corpus("nsys/nsys-ai")
    before, after = root / "mfu_2gpu_before.sqlite", root / "mfu_2gpu_after.sqlite"
    over = check(after, "--baseline", before, "--max-regression-pct", "5")
    assert over.returncode == 1, over.stderr
    assert "+10.5%" in over.stderr and "medians of 12 and 15 steps" in over.stderr
    # +10.5% against a 10% bound, with a lower bound of about +5%: more steps would tell.
    unsure = check(after, "--baseline", before, "--max-regression-pct", "10")
    assert unsure.returncode == 3, unsure.stderr
    assert check(before, "--baseline", after, "--max-regression-pct", "10").returncode == 0


def test_baseline_by_saved_run_id(traces: dict[str, Path], tmp_path: Path) -> None:
    env = {**os.environ, "GPUSCOPE_HISTORY": str(tmp_path / "history.sqlite")}
    saved = subprocess.run(
        [sys.executable, "-m", "gpuscope", "diagnose", str(traces["fast"]), "--save"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert saved.returncode == 0, saved.stderr
    assert "saved as run 1" in saved.stderr
    result = check(traces["slow"], "--baseline", "1", "--max-regression-pct", "10", env=env)
    assert result.returncode == 1
    assert "vs baseline" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "nothing to check"),
        (("--baseline", "x.json"), "go together"),
        (("--max-idle-pct", "5", "--gpu-hour-usd", "2"), None),
        (("--baseline", "x.json", "--max-regression-pct", "nan"), "finite number"),
    ],
)
def test_bad_input_exits_2(
    traces: dict[str, Path], tmp_path: Path, args: tuple[str, ...], message: str | None
) -> None:
    target = traces["fast"] if message else tmp_path / "missing.json"
    result = check(target, *args)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert (message or "no such file") in result.stderr
