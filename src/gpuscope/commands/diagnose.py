"""``gpuscope diagnose`` and ``gpuscope demo``."""

from __future__ import annotations

from pathlib import Path

import click

from gpuscope.commands._common import (
    PRICE,
    gpu_option,
    input_errors_exit,
    max_memory_option,
    prefetched,
    rendered,
    say,
    show,
    whole_option,
    write_json,
    write_rendered,
)
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
) -> None:
    """Diagnose a trace file, or a folder of per-rank traces of one job."""
    try:
        chosen = format_of(None if output is None else str(output), output_format, FORMATS)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="'-o' / '--output'") from None
    run_diagnose(
        path,
        json_out,
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


def run_diagnose(
    path: Path,
    json_out: Path | None,
    *,
    output: Path | None = None,
    output_format: str = "terminal",
    top: int = 10,
    all_devices: bool = False,
    gpu_hour_usd: float | None = None,
    gpu: str | None = None,
    save: bool = False,
    label: str | None = None,
    whole: bool = False,
    predict: bool = True,
) -> None:
    from gpuscope.readers import _early

    # A Kineto file is inflated and scanned on a thread of its own (outside the GIL) while numpy,
    # the analyses and the renderers import; the read then only assembles the columns. The
    # console script has usually started it already (see gpuscope.console).
    prefetch = _early.begin(path, prefetched())
    from gpuscope.diagnosis import Options, diagnose
    from gpuscope.readers import load
    from gpuscope.render import base
    from gpuscope.sanitise import sanitised

    # The charts' series are computed only when a renderer that draws or saves them runs.
    charts = json_out is not None or (output is not None and output_format != "terminal")
    options = Options(
        top_kernels=top,
        gpu_hour_usd=gpu_hour_usd,
        whole=whole,
        predict=predict,
        gpu=gpu,
        charts=charts,
    )
    result = diagnose(load(path, prefetch=prefetch), options)
    # The diagnosis is shown (or written) first: a history that cannot take the run (locked,
    # corrupt, read-only) then costs the save alone, with its own line and exit 2.
    to_stdout = False
    if json_out is not None:
        to_stdout = write_json(json_out, rendered(base.Json(), result))
    if output is not None and not (str(output) == "-" and output_format == "terminal"):
        renderer = base.DIAGNOSIS_RENDERERS[output_format]()
        text = output_format in ("terminal", "markdown")  # no escape sequences from the trace
        to_stdout |= write_rendered(output, renderer, sanitised(result) if text else result)
    if not to_stdout:
        show(base.Terminal(), result, all_devices=all_devices)
    if save:
        from gpuscope.commands.history import save_run
        from gpuscope.compare.diff import summarize

        run_id = save_run(summarize(result), path, label)
        say(f"gpuscope: saved as run {run_id}")
