"""``gpuscope diagnose FILE`` run: the read, the diagnosis, and what is shown or written. It
needs no command-line library: the click command (:mod:`gpuscope.commands.diagnose`) calls it
with the options it parsed, and the console script calls it directly for a command line that
names one trace and nothing else (:func:`run_plain`), where importing click (~17 ms) would be
a tenth of the whole run."""

from __future__ import annotations

import sys
from pathlib import Path

from gpuscope.commands._output import (
    input_errors_exit,
    one_command,
    rendered,
    say,
    show,
    write_json,
    write_rendered,
)


def run_plain(path: str, prefetch: object) -> None:
    """``gpuscope diagnose PATH`` with every option at its default, as click would run it:
    inside :func:`~gpuscope.commands._output.one_command` (as ``cli._Commands.invoke`` runs
    every command), with the same one-line errors (``input_errors_exit``), and an interrupt
    "Aborted!" with exit 1 (click's own handling)."""
    try:
        with one_command():
            input_errors_exit(run_diagnose)(Path(path), None, prefetch=prefetch)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        say("Aborted!")
        sys.exit(1)  # click's exit status for an abort


def _import_ahead(*, kineto: bool, predict: bool, shown: bool) -> None:
    """Import now, while the read begun ahead goes on, what the command loads on first use after
    it: the Kineto reader's modules, the replays' (``predict``), and the terminal report's
    (``shown``: printed as text; without colours, the plain layout). The read runs beside on a
    thread of its own without the GIL (or in a child process), and once the command waits for it,
    it takes the second core too; so on two cores an import made beside the read costs about
    half what it costs once the read is done (-3 ms of ~200 on ``df_index_resolver``:
    benchmarks/README.md, issue 31 session 13). A module the command then does not need costs
    its import and nothing else."""
    if kineto:
        import gpuscope.readers.kineto
    if predict:
        import gpuscope.diagnosis.predict
    if shown:
        import gpuscope.render.terminal
        from gpuscope.render import plain_width

        if plain_width() is not None:
            import gpuscope.render.plain  # noqa: F401


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
    prefetch: object = None,
) -> None:
    """Diagnose ``path`` and show or write the result, as ``gpuscope diagnose`` does;
    ``prefetch``: the console script's read begun ahead, if any."""
    from gpuscope.readers import _early

    # A Kineto file is inflated and scanned on a thread of its own (outside the GIL) while numpy,
    # the analyses and the renderers import; the read then only assembles the columns. The
    # console script has usually started it already (see gpuscope.console).
    begun = _early.begin(path, prefetch)
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
    if begun is not None:
        shown = json_out is None and (output is None or output_format == "terminal")
        _import_ahead(kineto=begun.scan is not None, predict=predict, shown=shown)
    result = diagnose(load(path, prefetch=begun), options)
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
