"""``gpuscope diff BEFORE AFTER``: what changed between two runs, step for step.

BEFORE and AFTER are each a trace file, a folder of traces, or the id of a saved run
(``gpuscope history``); a path that exists wins over an id.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpuscope.commands._common import (
    PRICE,
    chosen_format,
    input_errors_exit,
    max_memory_option,
    output_options,
    rendered,
    say,
    show,
    whole_option,
    write_chosen,
    write_json,
)
from gpuscope.render.base import COMPARISON_RENDERERS

if TYPE_CHECKING:
    from gpuscope.compare.diff import RunSummary
    from gpuscope.diagnosis import Diagnosis


@click.command()
@click.argument("before")
@click.argument("after")
@click.option(
    "--json",
    "json_out",
    type=click.Path(path_type=Path),
    help="Write the diff as JSON ('-': stdout).",
)
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="Kernel changes to list.",
)
@click.option("--gpu-hour-usd", type=PRICE, help="Your price per GPU-hour (for traces).")
@max_memory_option
@whole_option
@click.option(
    "--items-per-step",
    type=click.FloatRange(min=0.0, min_open=True),
    help="Samples or tokens one step processes: adds items per second to iterations per second.",
)
@output_options(COMPARISON_RENDERERS, "diff")
@input_errors_exit
def diff(
    before: str,
    after: str,
    json_out: Path | None,
    top: int,
    gpu_hour_usd: float | None,
    whole: bool,
    items_per_step: float | None,
    output: Path | None,
    output_format: str | None,
) -> None:
    """Compare two runs: step time and throughput, GPU busy, lost time per cause, cost, kernels,
    findings. Per-step medians, compared by a rank test (docs/ci-gate.md)."""
    from gpuscope.compare.diff import diff as diff_runs
    from gpuscope.render.base import Comparison, DiffJson, DiffTerminal

    chosen = chosen_format(output, output_format, COMPARISON_RENDERERS)
    drawn = chosen == "html"  # the HTML comparison draws both diagnoses: kept only for it
    old, old_name, old_diagnosis = run_of(before, gpu_hour_usd, whole, keep=drawn)
    new, new_name, new_diagnosis = run_of(after, gpu_hour_usd, whole, keep=drawn)
    result = diff_runs(old, new, top_kernels=top, items_per_step=items_per_step)
    # A saved run is a summary: the comparison holds no diagnoses (nor needs them for text).
    pair = Comparison(old_diagnosis, new_diagnosis, result, old_name, new_name)
    if json_out is not None and write_json(json_out, rendered(DiffJson(), pair)):
        return
    if write_chosen(COMPARISON_RENDERERS, pair, output, output_format, chosen):
        return
    show(DiffTerminal(), pair)


def summary_of(
    ref: str, gpu_hour_usd: float | None = None, whole: bool = False
) -> tuple[RunSummary, str]:
    """The summary of a trace file or folder, or of a saved run given by its id; and a name
    (:func:`run_of`)."""
    summary, name, _ = run_of(ref, gpu_hour_usd, whole)
    return summary, name


def run_of(
    ref: str, gpu_hour_usd: float | None = None, whole: bool = False, *, keep: bool = False
) -> tuple[RunSummary, str, Diagnosis | None]:
    """The summary of a trace file or folder, or of a saved run given by its id; a name; and
    with ``keep``, the diagnosis (a saved run has none: refused in one line, since ``keep`` is
    for a comparison that draws it). A trace whose start-up was left out says so on stderr, so
    that a steady window is never compared with a warm-up one unannounced."""
    import os.path

    from gpuscope.compare.diff import summarize
    from gpuscope.errors import InputError
    from gpuscope.history import run_id

    path = Path(ref)
    exists = os.path.exists(path)  # False, not an error, for a name too long to exist
    number = None if exists else run_id(ref)
    if number is not None:
        from gpuscope.history import History

        with History(readonly=True) as history:
            run = history.get(number)
        name = f"run {run.id}" + (f" ({run.label})" if run.label else "")
        if keep:
            raise InputError(
                ref,
                f"{name} is saved as a summary, and an HTML comparison draws both diagnoses"
                " (give traces or files that diagnose --json wrote)",
            )
        return run.summary, name, None
    if not exists:
        raise InputError(path, "no such file, folder or saved run id")
    from gpuscope.commands._common import diagnosis_of

    result = diagnosis_of(path, gpu_hour_usd, whole)
    if result.window is not None:
        say(
            f"gpuscope: {path}: start-up left out, its steady state compared"
            " (--whole compares everything)"
        )
    return summarize(result), str(path), result if keep else None
