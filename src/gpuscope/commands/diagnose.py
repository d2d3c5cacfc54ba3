"""``gpuscope diagnose`` and ``gpuscope demo``."""

from __future__ import annotations

from pathlib import Path

import click

from gpuscope.commands._common import (
    PRICE,
    gpu_option,
    input_errors_exit,
    max_memory_option,
    missing_extra,
    prefetched,
    rendered,
    say,
    show,
    whole_option,
    write_json,
)
from gpuscope.commands._run import run_diagnose
from gpuscope.render.base import DIAGNOSIS_RENDERERS, format_of

FORMATS = list(DIAGNOSIS_RENDERERS)


@click.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--json",
    "json_out",
    type=click.Path(path_type=Path),
    help="Write the diagnosis as JSON ('-': stdout).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    help="Write the diagnosis to this file in the format its suffix names (.json, .html, .md,"
    " .txt) or --format names ('-': stdout).",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(list(DIAGNOSIS_RENDERERS)),
    help="The format of -o's file, or of stdout without -o (default: -o's suffix, else the"
    " terminal's).",
)
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="Kernels to list per device.",
)
@click.option("--all-devices", is_flag=True, help="Detail every device, not just the extremes.")
@click.option(
    "--gpu-hour-usd", type=PRICE, help="Your price per GPU-hour (overrides the facts table)."
)
@max_memory_option
@gpu_option
@whole_option
@click.option("--save", is_flag=True, help="Save the run's summary to the history.")
@click.option("--label", help="Label the saved run (implies --save).")
@click.option(
    "--no-predict",
    is_flag=True,
    help="Do not replay each finding's fix to predict its saving (a little faster).",
)
@click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    help="Diagnose a folder of per-rank traces rank by rank: each rank reduced to a summary of"
    " a few KB on a local process pool or on Ray, the job diagnosed from the summaries"
    " (default: the whole job in this process).",
)
@click.option("--workers", type=click.IntRange(min=1), help="--engine: processes (default: cores).")
@click.option("--ray-address", help="--engine ray: an existing cluster (default: a local one).")
@input_errors_exit
def diagnose(
    path: Path,
    json_out: Path | None,
    output: Path | None,
    output_format: str | None,
    top: int,
    all_devices: bool,
    gpu_hour_usd: float | None,
    gpu_name: str | None,
    save: bool,
    label: str | None,
    whole: bool,
    no_predict: bool,
    engine: str | None,
    workers: int | None,
    ray_address: str | None,
) -> None:
    """Diagnose a trace file, or a folder of per-rank traces of one job."""
    if engine is not None:
        others = {"-o": output, "--format": output_format, "--save": save or label}
        given = [name for name, value in others.items() if value] + ["--all-devices"] * all_devices
        if given:
            raise click.UsageError(f"--engine shows the terminal or writes --json, not {given[0]}")
        if ray_address and engine != "ray":
            raise click.UsageError("--ray-address needs --engine ray")
        run_job(path, json_out, engine, workers, ray_address, (top, gpu_hour_usd, whole, gpu_name))
        return
    if workers is not None or ray_address is not None:
        raise click.UsageError("--workers and --ray-address go with --engine")
    try:
        chosen = format_of(None if output is None else str(output), output_format, FORMATS)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="'-o' / '--output'") from None
    run_diagnose(
        path,
        json_out,
        prefetch=prefetched(),
        output=None if output is None and output_format is None else (output or Path("-")),
        output_format=chosen,
        top=top,
        all_devices=all_devices,
        gpu_hour_usd=gpu_hour_usd,
        gpu=gpu_name,
        save=save or label is not None,
        label=label,
        whole=whole,
        predict=not no_predict,
    )


@click.command()
@click.option("--json", "json_out", type=click.Path(path_type=Path), help="Also write the JSON.")
@input_errors_exit
def demo(json_out: Path | None) -> None:
    """Diagnose the example training trace shipped with gpuscope."""
    from importlib import resources

    example = resources.files("gpuscope.examples").joinpath("demo_train.json.gz")
    with resources.as_file(example) as path:
        say(f"Example trace: {path}")
        click.echo(err=True)
        run_diagnose(path, json_out)


def run_job(
    path: Path,
    json_out: Path | None,
    engine: str,
    workers: int | None,
    ray_address: str | None,
    settings: tuple[int, float | None, bool, str | None],
) -> None:
    """``diagnose --engine``: the job's ranks reduced on the engine, the job diagnosed from
    their summaries (:mod:`gpuscope.distributed`); each rank that could not be read is named in
    one line on stderr, and the job is diagnosed from the others."""
    import importlib.util

    if engine == "ray" and importlib.util.find_spec("ray") is None:
        missing_extra("--engine ray", "ray", "ray")
    from rich.progress import Progress

    from gpuscope.diagnosis import Options
    from gpuscope.distributed import diagnose_job, rank_files
    from gpuscope.engines import Engine
    from gpuscope.render import base, console

    top, gpu_hour_usd, whole, gpu = settings
    options = Options(top_kernels=top, gpu_hour_usd=gpu_hour_usd, whole=whole, gpu=gpu)
    files = rank_files(path) if path.is_dir() else [path]
    with Progress(transient=True, console=console(stderr=True)) as bar:
        task = bar.add_task("reading ranks", total=len(files))
        job = diagnose_job(
            path, Engine(engine, workers, ray_address), options, lambda _i: bar.advance(task)
        )
    for file, why in job.failed:
        say(f"gpuscope: warning: {file}: rank not read ({why}); the job is diagnosed without it")
    to_stdout = False
    if json_out is not None:
        to_stdout = write_json(json_out, rendered(base.JobJson(), job))
    if not to_stdout:
        show(base.JobTerminal(), job)
