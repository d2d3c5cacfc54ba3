"""The ``gpuscope`` command: a thin shell over the library.

Each command parses its arguments, calls the library, renders, and maps errors to exit codes:
0 success, 1 a check failed (later commands), 2 bad input (one line on stderr, never a traceback).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import click

from gpuscope.errors import InputError

F = TypeVar("F", bound=Callable[..., Any])

EXIT_BAD_INPUT = 2


def _input_errors_exit(func: F) -> F:
    """Turn an :class:`InputError` into one line on stderr and exit code 2."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except InputError as error:
            click.echo(f"gpuscope: error: {error}", err=True)
            sys.exit(EXIT_BAD_INPUT)

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpuscope")
def main() -> None:
    """Why your GPUs are idle, what it costs, and what to change."""


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "--json",
    "json_out",
    type=click.Path(path_type=Path),
    help="Write the diagnosis as JSON ('-' for stdout).",
)
@click.option("--top", default=10, show_default=True, help="Kernels to list per device.")
@click.option("--all-devices", is_flag=True, help="Detail every device, not just the extremes.")
@click.option(
    "--gpu-hour-usd", type=float, help="Your price per GPU-hour (overrides the facts table)."
)
@_input_errors_exit
def diagnose(
    path: Path, json_out: Path | None, top: int, all_devices: bool, gpu_hour_usd: float | None
) -> None:
    """Diagnose a trace file, or a folder of per-rank traces of one job."""
    _diagnose(path, json_out, top, all_devices, gpu_hour_usd)


@main.command()
@click.option(
    "--json", "json_out", type=click.Path(path_type=Path), help="Also write the diagnosis as JSON."
)
@_input_errors_exit
def demo(json_out: Path | None) -> None:
    """Diagnose the example training trace shipped with gpuscope."""
    example = resources.files("gpuscope.examples").joinpath("demo_train.json.gz")
    with resources.as_file(example) as path:
        click.echo(f"Example trace: {path}\n", err=True)
        _diagnose(path, json_out, 10, False, None)


def _diagnose(
    path: Path, json_out: Path | None, top: int, all_devices: bool, gpu_hour_usd: float | None
) -> None:
    from gpuscope.diagnosis import Options, diagnose
    from gpuscope.readers import load
    from gpuscope.render import json as json_renderer

    diagnosis = diagnose(load(path), Options(top_kernels=top, gpu_hour_usd=gpu_hour_usd))
    if json_out is not None:
        data = json_renderer.dumps(diagnosis)
        if str(json_out) == "-":
            sys.stdout.buffer.write(data + b"\n")
            return
        json_out.write_bytes(data + b"\n")
    from rich.console import Console

    from gpuscope.render import terminal

    terminal.render(diagnosis, Console(), all_devices=all_devices)
