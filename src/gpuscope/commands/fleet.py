"""``gpuscope fleet`` and ``gpuscope fleet-report``: diagnose many jobs into one table, then
report on it. The work lives in :mod:`gpuscope.fleet`; these commands parse, call and render."""

from __future__ import annotations

import glob
import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpuscope.commands._common import EXIT_BAD_INPUT, PRICE, input_errors_exit, missing_extra, say
from gpuscope.names import plural

if TYPE_CHECKING:
    from gpuscope.engines import Engine
    from gpuscope.fleet import FleetTable


@click.command()
@click.argument("inputs", nargs=-1, required=True, metavar="PATHS_OR_GLOBS...")
@click.option("--out", "out", required=True, help="fleet.parquet, or a .json file (no pyarrow).")
@click.option("--json", "as_json", is_flag=True, help="Also print the new job rows as JSON.")
@click.option("--workers", type=click.IntRange(min=1), help="Local processes (default: cores).")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True)
@click.option("--ray-address", help="An existing Ray cluster (default: start a local one).")
@click.option("--gpu-hour-usd", type=PRICE, help="Your price per GPU-hour.")
@input_errors_exit
def fleet(
    inputs: tuple[str, ...],
    out: str,
    as_json: bool,
    workers: int | None,
    engine: str,
    ray_address: str | None,
    gpu_hour_usd: float | None,
) -> None:
    """Diagnose many jobs (traces, folders of ranks, nsys exports, metrics logs) into one table.

    Inputs already in OUT with the same size and mtime are skipped; a bad input is an error row.
    With --engine ray the workers read the paths themselves: on a remote cluster give paths all
    nodes see, or URLs (s3://..., with fsspec installed).
    """
    if ray_address and engine != "ray":
        raise click.UsageError("--ray-address needs --engine ray")
    _require_extras(out, engine)
    import json

    import msgspec

    from gpuscope import fleet as lib
    from gpuscope.engines import Engine

    unmatched = [p for p in inputs if not lib.is_url(p) and not glob.glob(p, recursive=True)]
    if len(unmatched) == len(inputs):
        # Nothing to diagnose at all (a glob that matched nothing, a path that is not there): a
        # table of error rows and exit 0 would read as a fleet that was diagnosed.
        listed = ", ".join(repr(p) for p in unmatched)
        say(f"gpuscope: error: {listed}: no file or folder matches; no job to diagnose")
        sys.exit(EXIT_BAD_INPUT)
    stored = lib.read(out)
    wanted = lib.expand(inputs)
    todo = lib.pending(wanted, stored)
    fresh = _run(todo, Engine(engine, workers, ray_address), gpu_hour_usd)
    lib.store(fresh, out)  # merged with the table as it is now (another run may have written)
    failed = sum(j.status != "ok" for j in fresh.jobs)
    skipped = len(wanted) - len(todo)
    say(
        f"wrote {out}: {plural(len(fresh.jobs), 'job')} diagnosed ({failed} failed),"
        f" {skipped} already there"
    )
    if as_json:
        click.echo(json.dumps([msgspec.structs.asdict(j) for j in fresh.jobs], indent=1))


def _require_extras(out: str, engine: str) -> None:
    if not out.endswith(".json") and importlib.util.find_spec("pyarrow") is None:
        missing_extra("writing Parquet (or give --out NAME.json)", "pyarrow", "fleet")
    if engine == "ray" and importlib.util.find_spec("ray") is None:
        missing_extra("--engine ray", "ray", "ray")


def _run(todo: list[str], engine: Engine, usd: float | None) -> FleetTable:
    """The fleet run, with a progress bar on stderr."""
    from rich.progress import Progress

    from gpuscope.fleet import run
    from gpuscope.render import console

    with Progress(transient=True, console=console(stderr=True)) as bar:
        task = bar.add_task("diagnosing", total=len(todo))
        return run(todo, engine, usd, on_done=lambda _p: bar.advance(task))


@click.command("fleet-report")
@click.argument("table", type=click.Path(path_type=Path, dir_okay=False))
@click.option("-o", "--output", type=click.Path(path_type=Path), help="HTML file.")
@click.option("--worst", type=click.IntRange(min=1), default=10, show_default=True)
@input_errors_exit
def fleet_report(table: Path, output: Path | None, worst: int) -> None:
    """Report on a fleet table: waste by cause and ICSE category, worst jobs, utilisation, trend."""
    _require_extras(str(table), "local")
    from gpuscope import fleet as lib
    from gpuscope.commands._common import rendered, show, write_output
    from gpuscope.render.base import FleetHtml, FleetTerminal

    if not table.exists():
        say(f"gpuscope: error: {table}: no such file")
        sys.exit(EXIT_BAD_INPUT)
    summary = lib.summarize(lib.read(table), worst=worst)
    show(FleetTerminal(), summary)
    if output is not None:
        page = rendered(FleetHtml(), summary)
        write_output(output, page, inputs=(table,))
        say(f"wrote {output} ({len(page) / 1e6:.1f} MB)")
