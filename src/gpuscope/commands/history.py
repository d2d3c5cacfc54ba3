"""``gpuscope history``: saved runs, newest first, and the trend of one metric.

Runs are saved by ``gpuscope diagnose --save`` and ``gpuscope profile --save``; the database is
``$GPUSCOPE_HISTORY`` or ``history.sqlite`` in the user data directory (``gpuscope.history``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpuscope.commands._common import (
    chosen_format,
    input_errors_exit,
    output_options,
    rendered,
    say,
    show,
    write_chosen,
    write_json,
)
from gpuscope.render.base import HISTORY_RENDERERS

if TYPE_CHECKING:
    from gpuscope.compare.diff import RunSummary


@click.command()
@click.option("--label", help="Only runs saved with this label.")
@click.option(
    "--limit",
    type=click.IntRange(min=0, max=2**63 - 1, clamp=True),
    default=20,
    show_default=True,
    help="Newest runs to show.",
)
@click.option(
    "--metric",
    help="Show this metric's trend: step_time_ns, gpu_busy_pct, idle_pct,"
    " cost_usd_per_gpu_hour, lost_ns_per_step.CAUSE.",
)
@click.option(
    "--json", "json_out", type=click.Path(path_type=Path), help="Write the runs as JSON ('-')."
)
@output_options(HISTORY_RENDERERS, "runs")
@input_errors_exit
def history(
    label: str | None,
    limit: int,
    metric: str | None,
    json_out: Path | None,
    output: Path | None,
    output_format: str | None,
) -> None:
    """List saved runs (filter by label) and the trend of a metric."""
    chosen = chosen_format(output, output_format, HISTORY_RENDERERS)
    from gpuscope.compare.diff import all_metric_names, metric_names
    from gpuscope.errors import InputError
    from gpuscope.history import History
    from gpuscope.render.base import HistoryJson, HistoryTerminal, SavedRuns

    with History(readonly=True) as store:
        runs = store.runs(label=label, limit=limit)
        path = store.path
    if store.skipped:
        say(f"gpuscope: warning: {path}: skipped {store.skipped} saved run(s) that do not decode")
    if metric and runs and all(metric not in metric_names(r.summary) for r in runs):
        known = ", ".join(all_metric_names())
        raise InputError(path, f"no run has the metric {metric!r}; known: {known}")
    saved = SavedRuns(runs, metric)
    if json_out is not None and write_json(json_out, rendered(HistoryJson(), saved)):
        return
    if write_chosen(HISTORY_RENDERERS, saved, output, output_format, chosen):
        return
    show(HistoryTerminal(), saved)


def save_run(summary: RunSummary, source: Path, label: str | None) -> int:
    """Store a run's summary with its git commit and source hash; returns the run id."""
    from gpuscope.history import History, git_commit, source_sha256

    with History() as store:
        return store.save(
            summary, label=label, git_commit=git_commit(), source_sha256=source_sha256(source)
        )
