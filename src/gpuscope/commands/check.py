"""``gpuscope check TARGET``: a CI gate. Exit 0 when every bound holds, 1 with a one-line reason
when one is broken, 2 for bad input (including a bound that cannot be checked, such as a cost
bound on an unknown device without ``--gpu-hour-usd``, or a bound that is not a number), 3 when
the step time against a baseline is inconclusive: too few steps to tell at the gate's confidence,
with the number of steps that would settle it (docs/ci-gate.md)."""

from __future__ import annotations

import math
import sys
from typing import NoReturn

import click

from gpuscope.commands._common import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    PERCENT,
    PRICE,
    input_errors_exit,
    max_memory_option,
    say,
)

#: The evidence cannot decide a bound yet: more steps would (distinct from a broken bound).
EXIT_INCONCLUSIVE = 3


@click.command()
@click.argument("target")
@click.option("--max-idle-pct", type=PERCENT, help="Fail when the GPU is idle more than this.")
@click.option(
    "--max-cost-usd-per-gpu-hour",
    type=PRICE,
    help="Fail when fixing every finding is predicted to save more than this per GPU-hour.",
)
@click.option("--baseline", help="Trace, folder or saved run id to compare step time with.")
@click.option(
    "--max-regression-pct",
    type=float,  # checked below, in one line (finite); see _common.Number for the others
    help="With --baseline: fail when the median step time is over the baseline's by more than"
    " this at 95% confidence (exit 3: too few steps to tell).",
)
@max_memory_option
@click.option("--gpu-hour-usd", type=PRICE, help="Your price per GPU-hour.")
@input_errors_exit
def check(
    target: str,
    max_idle_pct: float | None,
    max_cost_usd_per_gpu_hour: float | None,
    baseline: str | None,
    max_regression_pct: float | None,
    gpu_hour_usd: float | None,
) -> None:
    """Exit 1 with a one-line reason when the run breaks a bound (CI gate)."""
    from gpuscope.commands.diff import summary_of
    from gpuscope.compare.diff import Bounds
    from gpuscope.compare.diff import check as check_run
    from gpuscope.compare.diff import diff as diff_runs

    for option, value in (
        ("--max-idle-pct", max_idle_pct),
        ("--max-cost-usd-per-gpu-hour", max_cost_usd_per_gpu_hour),
        ("--max-regression-pct", max_regression_pct),
        ("--gpu-hour-usd", gpu_hour_usd),
    ):
        if value is not None and not math.isfinite(value):
            _bad_input(f"{option} must be a finite number, not {value}")
    if (baseline is None) != (max_regression_pct is None):
        _bad_input("--baseline and --max-regression-pct go together")
    if max_idle_pct is None and max_cost_usd_per_gpu_hour is None and baseline is None:
        _bad_input(
            "nothing to check: give --max-idle-pct, --max-cost-usd-per-gpu-hour"
            " or --baseline with --max-regression-pct"
        )
    summary, name = summary_of(target, gpu_hour_usd)
    compared = None
    if baseline is not None:
        compared = diff_runs(summary_of(baseline, gpu_hour_usd)[0], summary)
    bounds = Bounds(max_idle_pct, max_cost_usd_per_gpu_hour, max_regression_pct)
    outcome = check_run(summary, bounds, compared)
    if outcome.unavailable:
        _bad_input(f"{name}: {outcome.unavailable[0]}")
    if outcome.reasons:
        say(f"gpuscope: check failed: {name}: {'; '.join(outcome.reasons)}")
        sys.exit(EXIT_CHECK_FAILED)
    if outcome.inconclusive:
        say(f"gpuscope: check inconclusive: {name}: {'; '.join(outcome.inconclusive)}")
        sys.exit(EXIT_INCONCLUSIVE)
    say(f"gpuscope: check passed: {name}: {'; '.join(outcome.passed)}", err=False)


def _bad_input(message: str) -> NoReturn:
    say(f"gpuscope: error: {message}")
    sys.exit(EXIT_BAD_INPUT)
