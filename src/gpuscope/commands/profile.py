"""``gpuscope profile -- python train.py ARGS``: record a profile of a script, then diagnose it.

The script runs unchanged in this process under the PyTorch profiler (``gpuscope.capture``):
warm-up steps are skipped, a few steps are recorded, the trace (and NVML samples, when NVML is
there) is written to ``--out``, and the diagnosis is printed.

Exit codes: 0 the capture was diagnosed; 2 no diagnosis: PyTorch is missing, nothing was recorded
(the script ended during warm-up), the trace holds no GPU activity (no CUDA device: the CPU
trace is still written, and what was and was not recorded is listed), or the script itself
failed (its traceback is printed; what it ran before is still diagnosed).
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

from gpuscope.commands._common import EXIT_BAD_INPUT, Number, input_errors_exit, missing_extra, say
from gpuscope.names import plural

if TYPE_CHECKING:
    from gpuscope.capture import CaptureResult


@click.command(context_settings={"allow_interspersed_args": False})
@click.option("--steps", default=5, show_default=True, help="Steps to record.")
@click.option("--warmup", default=3, show_default=True, help="Steps to skip first.")
@click.option(
    "--seconds", type=Number(above=True), help="Record steps for this long instead of --steps."
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path),
    help="Folder for the trace [default: gpuscope-traces/TIME].",
)
@click.option("--json", "json_out", type=click.Path(path_type=Path), help="Also write the JSON.")
@click.option("--save", is_flag=True, help="Save the run's summary to the history.")
@click.option("--label", help="Label the saved run (implies --save).")
@click.option("--no-nvml", is_flag=True, help="Do not sample GPUs through NVML.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@input_errors_exit
def profile(
    steps: int,
    warmup: int,
    seconds: float | None,
    out_dir: Path | None,
    json_out: Path | None,
    save: bool,
    label: str | None,
    no_nvml: bool,
    command: tuple[str, ...],
) -> None:
    """Profile a training or inference script, unchanged, and diagnose it.

    \b
    gpuscope profile -- python train.py --lr 3e-4
    gpuscope profile --steps 10 --warmup 5 --out traces/ -- python -m my.trainer
    """
    from gpuscope import capture

    try:
        facts = capture.environment()
    except capture.TorchMissingError:
        missing_extra("gpuscope profile", "PyTorch", "torch")
        return
    out = out_dir or Path("gpuscope-traces") / datetime.now().strftime("%Y%m%d-%H%M%S")
    try:
        options = capture.CaptureOptions(steps, warmup, seconds, nvml=not no_nvml)
        missing = capture.missing_script(command)
    except ValueError as error:
        _fail(str(error))
    if missing:
        _fail(missing)
    devices = ", ".join(facts.devices) if facts.cuda else "no CUDA device: CPU only"
    what = f"{seconds:g} s of steps" if seconds else plural(steps, "step")
    say(
        f"gpuscope: profiling {' '.join(command)}: skip {plural(warmup, 'step')}, record {what}"
        f" (torch {facts.torch_version}; {devices}) -> {out}"
    )
    result = capture.run_script(command, out, options)
    _report(result)
    problem: str | None = "nothing was recorded; no trace written"
    if result.traces:
        problem = _diagnose(result, json_out, save or label is not None, label)
    if result.script_error or result.exit_code:
        if problem:
            say(f"gpuscope: {problem}")
        said = (result.script_error or "").strip()
        if said and "\n" not in said:  # raise SystemExit("message"): its words, not "see above"
            _fail(f"the script failed (exit status {result.exit_code}): {said}", result.exit_code)
        _fail(
            f"the script failed (exit status {result.exit_code}); see its output above",
            result.exit_code,
        )
    if problem:
        _fail(problem)


def _report(result: CaptureResult) -> None:
    if result.script_error:
        from gpuscope.sanitise import printable

        click.echo(printable(result.script_error, limit=100_000), err=True, nl=False)
    say(f"gpuscope: {plural(result.steps_seen, 'step')} seen in the script")
    if result.recorded:
        say(f"gpuscope: recorded: {', '.join(result.recorded)}")
    for missing in result.not_recorded:
        say(f"gpuscope: not recorded: {missing}")
    for path in result.traces:
        say(f"gpuscope: trace written: {path}")


def _diagnose(
    result: CaptureResult, json_out: Path | None, save: bool, label: str | None
) -> str | None:
    """Diagnose the capture folder; the reason when it cannot be diagnosed."""
    from gpuscope.commands._run import run_diagnose
    from gpuscope.errors import EmptyTraceError

    try:
        run_diagnose(result.out_dir, json_out, save=save, label=label)
    except EmptyTraceError as error:
        return (
            f"no diagnosis: GPU activity was not recorded, so there is no GPU timeline"
            f" ({error.reason}); the CPU trace is in {result.out_dir}"
        )
    return None


def _fail(message: str, exit_code: int = EXIT_BAD_INPUT) -> NoReturn:
    """One line, then exit: with the script's own status when the script failed (a wrapper in a
    job scheduler or a shell ``&&`` chain reads it as it would without gpuscope), else 2."""
    say(f"gpuscope: error: {message}")
    sys.exit(exit_code if 0 < exit_code < 256 else EXIT_BAD_INPUT)
