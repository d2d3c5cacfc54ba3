"""``gpuscope annotate``: the trace itself, plus tracks of idle time by cause and the findings."""

from __future__ import annotations

import gzip
from pathlib import Path

import click

from gpuscope.commands._common import (
    PRICE,
    input_errors_exit,
    max_memory_option,
    prefetched,
    say,
    write_output,
)
from gpuscope.errors import InputError, UnknownFormatError


@click.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(path_type=Path),
    help="The annotated trace (gzip when it ends in .gz); a folder when PATH is a folder.",
)
@click.option(
    "--gpu-hour-usd", type=PRICE, help="Your price per GPU-hour (overrides the facts table)."
)
@max_memory_option
@input_errors_exit
def annotate(path: Path, output: Path, gpu_hour_usd: float | None) -> None:
    """Write TRACE with gpuscope's tracks added, for Perfetto UI or chrome://tracing.

    For a folder of per-rank traces, OUTPUT is a folder that gets one annotated file per trace.
    """
    from gpuscope.readers import _early

    prefetch = _early.begin(path, prefetched())  # the read overlaps the imports (see diagnose)
    from gpuscope.diagnosis import Options, diagnose
    from gpuscope.readers import load
    from gpuscope.readers._io import memory_budget, read_bytes
    from gpuscope.readers.kineto import NotStreamableError
    from gpuscope.render.annotate import WHOLE_DOCUMENT_FACTOR, annotate_file
    from gpuscope.render.annotate import annotate as annotated

    job = load(path, prefetch=prefetch)
    _require_chrome_traces(path, [(t.source, t.format) for t in job.traces])
    sources = [t.source for t in job.traces]
    result = diagnose(job, Options(gpu_hour_usd=gpu_hour_usd))
    del job  # the copies need the diagnosis only: the model's table goes before they are written
    for source, target in _targets(path, output, sources).items():
        compress = target.name.endswith(".gz")
        try:  # read and written a piece at a time: a trace of gigabytes is never held whole
            write_output(target, annotate_file(Path(source), result, source, compress=compress))
        except NotStreamableError:  # an unusual layout: the whole document, within the budget
            limit = memory_budget() // WHOLE_DOCUMENT_FACTOR
            data = annotated(read_bytes(Path(source), limit=limit).data, result, source)
            if compress:
                data = gzip.compress(data, compresslevel=6, mtime=0)
            write_output(target, data)
        say(f"wrote {target}")


def _require_chrome_traces(path: Path, traces: list[tuple[str, str]]) -> None:
    """The annotated copy is Chrome-trace JSON: only Kineto traces can get one."""
    if not traces:
        raise UnknownFormatError(path, "holds no timeline to annotate")
    for source, format_name in traces:
        if format_name != "kineto":
            raise UnknownFormatError(
                source,
                f"holds a timeline in the {format_name} format, and only Kineto (Chrome-trace"
                " JSON) timelines are annotated",
            )


def _targets(path: Path, output: Path, sources: list[str]) -> dict[str, Path]:
    """Where each trace's annotated copy goes (never over an input: the write refuses it)."""
    if path.is_dir():
        try:
            output.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise InputError(output, f"cannot be made a folder ({error.strerror})") from None
        targets = {s: output / Path(s).name for s in sources}
    else:
        targets = {sources[0]: output}
    return targets
