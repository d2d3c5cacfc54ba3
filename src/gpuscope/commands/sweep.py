"""``gpuscope sweep RUN ...``: the same job at several batch sizes, and where the knee is."""

from __future__ import annotations

from pathlib import Path

import click

from gpuscope.commands._common import Number, input_errors_exit, rendered, show, write_json


def _batch_list(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        sizes = tuple(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise click.BadParameter("a comma-separated list of integers, e.g. 1,8,32") from None
    if not sizes or min(sizes) < 1:
        raise click.BadParameter("batch sizes must be positive integers")
    return sizes


@click.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--batch-sizes",
    callback=_batch_list,
    help="One batch size per run, in order (e.g. 1,8,32); default: recorded input shapes,"
    " else names like bs32.",
)
@click.option(
    "--max-latency-ms", type=Number(above=True), help="Pick the best batch whose step fits this."
)
@click.option(
    "--json", "json_out", type=click.Path(path_type=Path), help="Write the report as JSON ('-')."
)
@input_errors_exit
def sweep(
    runs: tuple[Path, ...],
    batch_sizes: tuple[int, ...] | None,
    max_latency_ms: float | None,
    json_out: Path | None,
) -> None:
    """Compare runs of one job at several batch sizes: throughput and step latency per batch,
    the knee, and whether the busy time is memory-bound there."""
    if len(runs) < 2:
        raise click.UsageError("give at least two runs (one per batch size)")
    from gpuscope.compare.scaling import SweepOptions
    from gpuscope.compare.scaling import sweep as run_sweep
    from gpuscope.readers import load
    from gpuscope.render.base import SweepJson, SweepTerminal

    report = run_sweep([load(run) for run in runs], SweepOptions(batch_sizes, max_latency_ms))
    if json_out is not None and write_json(json_out, rendered(SweepJson(), report)):
        return
    show(SweepTerminal(), report)
