"""``gpuscope scale RUN_A RUN_B ...``: the same job at different GPU counts, side by side."""

from __future__ import annotations

from pathlib import Path

import click

from gpuscope.commands._common import (
    PERCENT,
    PRICE,
    Number,
    chosen_format,
    input_errors_exit,
    output_options,
    rendered,
    show,
    write_chosen,
    write_json,
)
from gpuscope.render.base import SCALING_RENDERERS


@click.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--units-per-step",
    type=Number(above=True),
    help="Work one GPU does per step (e.g. its batch size); default: one GPU-step.",
)
@click.option(
    "--throughput-units",
    "units",
    help="What a unit is (samples, tokens, images); samples/tokens without --units-per-step"
    " are read from the recorded input shapes.",
)
@click.option(
    "--threshold",
    type=PERCENT,
    default=80.0,
    show_default=True,
    help="Scaling efficiency (%) below which gpuscope reports a finding.",
)
@click.option("--gpu-hour-usd", type=PRICE, help="Your price per GPU-hour.")
@click.option(
    "--json", "json_out", type=click.Path(path_type=Path), help="Write the report as JSON ('-')."
)
@click.option(
    "--force",
    is_flag=True,
    help="Compare runs whose kernel mixes differ (by default they are refused: not one workload).",
)
@output_options(SCALING_RENDERERS, "report")
@input_errors_exit
def scale(
    runs: tuple[Path, ...],
    units_per_step: float | None,
    units: str | None,
    threshold: float,
    gpu_hour_usd: float | None,
    json_out: Path | None,
    force: bool,
    output: Path | None,
    output_format: str | None,
) -> None:
    """Compare runs of one job at different GPU counts (each a trace or a folder of ranks):
    speed-up, efficiency per GPU, and where the loss goes (compute, communication, idle)."""
    if len(runs) < 2:
        raise click.UsageError("give at least two runs (a trace or a folder of ranks each)")
    chosen = chosen_format(output, output_format, SCALING_RENDERERS)
    from gpuscope.compare.scaling import ScalingOptions, scaling
    from gpuscope.readers import load
    from gpuscope.render.base import ScalingJson, ScalingTerminal

    options = ScalingOptions(units_per_step, units, threshold, gpu_hour_usd, force)
    report = scaling([load(run) for run in runs], options)
    if json_out is not None and write_json(json_out, rendered(ScalingJson(), report)):
        return
    if write_chosen(SCALING_RENDERERS, report, output, output_format, chosen):
        return
    show(ScalingTerminal(), report)
