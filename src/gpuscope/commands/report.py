"""``gpuscope report``: the HTML report of one trace, or of two side by side."""

from __future__ import annotations

from pathlib import Path

import click

from gpuscope.commands._common import (
    PRICE,
    diagnosis_of,
    gpu_option,
    input_errors_exit,
    max_memory_option,
    prefetched,
    rendered,
    say,
    whole_option,
    write_output,
)


@click.command()
@click.argument(
    "paths",
    nargs=-1,
    required=True,
    metavar="TRACE | BEFORE AFTER",
    type=click.Path(path_type=Path),
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path),
    default=Path("report.html"),
    show_default=True,
    help="The file to write: HTML, or the format its suffix names (.json, .md, .txt).",
)
@click.option(
    "--gpu-hour-usd", type=PRICE, help="Your price per GPU-hour (overrides the facts table)."
)
@max_memory_option
@gpu_option
@whole_option
@input_errors_exit
def report(
    paths: tuple[Path, ...],
    output: Path,
    gpu_hour_usd: float | None,
    gpu_name: str | None,
    whole: bool,
) -> None:
    """Write a self-contained HTML report of TRACE (a file or a folder of per-rank traces, or
    a JSON file that `gpuscope diagnose --json` saved).

    Given two, BEFORE and AFTER, the report compares them side by side.
    """
    if len(paths) > 2:
        raise click.UsageError("give one trace, or two to compare: BEFORE AFTER")
    from gpuscope._sniff import is_saved_diagnosis
    from gpuscope.readers import _early

    # A saved diagnosis is told from a trace by its first bytes, before any read-ahead: it is
    # decoded, never sent to the trace reader. The first trace's read overlaps the imports (see
    # diagnose), the console script's when it began that one.
    first = next((p for p in paths if not is_saved_diagnosis(p)), None)
    prefetch = _early.begin(first, prefetched()) if first is not None else None
    from gpuscope.render import base
    from gpuscope.sanitise import sanitised

    prefetches = [prefetch if p is first else None for p in paths]
    diagnoses = [
        diagnosis_of(p, gpu_hour_usd, whole, gpu_name, prefetch=f)
        for p, f in zip(paths, prefetches, strict=True)
    ]
    # The output's suffix picks the renderer (.json, .md, .txt); any other name is HTML.
    chosen = base.SUFFIX_FORMATS.get(output.suffix.lower(), "html")
    if len(diagnoses) == 1:
        text = chosen in ("terminal", "markdown")  # no escape sequences from the trace
        d = sanitised(diagnoses[0]) if text else diagnoses[0]
        page = rendered(base.DIAGNOSIS_RENDERERS[chosen](), d)
    else:
        from gpuscope.compare import diff

        if chosen not in base.COMPARISON_RENDERERS:
            raise click.UsageError(f"a comparison has no {chosen} format: write .html or .json")
        change = diff.diff(diff.summarize(diagnoses[0]), diff.summarize(diagnoses[1]))
        renderer = base.COMPARISON_RENDERERS[chosen]()
        page = rendered(renderer, base.Comparison(diagnoses[0], diagnoses[1], change))
    write_output(output, page)
    say(f"wrote {output} ({len(page) / 1e6:.1f} MB)")
