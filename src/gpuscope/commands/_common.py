"""What every command shares: exit codes and the one-line error for bad input."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import click

from gpuscope.commands._output import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_OK,
    input_errors_exit,
    missing_extra,
    rendered,
    say,
    show,
    write_json,
    write_output,
    write_rendered,
)

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_CHECK_FAILED",
    "EXIT_OK",
    "GROWTH_PERCENT",
    "PERCENT",
    "PRICE",
    "Number",
    "chosen_format",
    "diagnosis_of",
    "gpu_option",
    "input_errors_exit",
    "max_memory_option",
    "missing_extra",
    "output_options",
    "prefetched",
    "rendered",
    "say",
    "show",
    "whole_option",
    "write_chosen",
    "write_json",
    "write_output",
    "write_rendered",
]

if TYPE_CHECKING:
    from pathlib import Path

    from gpuscope.render.base import Renderer

F = TypeVar("F", bound=Callable[..., Any])
S = TypeVar("S")


class Number(click.ParamType[float]):
    """A finite number within bounds: the one validator of every numeric option.

    ``float()`` takes ``nan``, ``inf`` and ``-5``, and click's ``FloatRange`` lets NaN through
    (every comparison with it is false): a CI gate given ``--max-idle-pct nan`` (an unset
    variable) could then never fail, and a price of ``nan`` printed "$nan". Refused with a
    usage error (exit 2) naming the option instead.
    """

    name = "number"

    def __init__(
        self, minimum: float = 0.0, maximum: float | None = None, *, above: bool = False
    ) -> None:
        self.minimum = minimum
        self.maximum = maximum
        self.above = above  # strictly above the minimum (a duration, a price of zero is fine)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float) and math.isfinite(value):
            number = value
        else:
            try:
                number = float(value)
            except (TypeError, ValueError):
                self.fail(f"{value!r} is not a number", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        low = number <= self.minimum if self.above else number < self.minimum
        if low or (self.maximum is not None and number > self.maximum):
            self.fail(f"{value!r} is not in {self._range()}", param, ctx)
        return number

    def _range(self) -> str:
        low = f"{'>' if self.above else '>='} {self.minimum:g}"
        return low if self.maximum is None else f"{low} and <= {self.maximum:g}"


#: A price or cost in USD.
PRICE = Number(0.0)


def _known_gpu(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A ``--gpu`` name the facts table knows, or one line and exit 2: a name that matches no
    GPU would otherwise be ignored without a word, and the peaks and price stay unknown."""
    if value is None:
        return None
    from gpuscope.facts import family_facts, match_device

    if match_device(value) is None and family_facts(value) is None:
        say(
            f"gpuscope: error: --gpu {value!r} is not a GPU gpuscope knows"
            " (data/gpu_facts.csv): give a name such as 'H100 SXM', 'A100-SXM4-80GB' or 'MI300X'"
        )
        sys.exit(EXIT_BAD_INPUT)
    return value


#: Options several trace commands share, defined once.
gpu_option = click.option(
    "--gpu",
    "gpu_name",
    metavar="NAME",
    callback=_known_gpu,
    help="The GPU's name (e.g. 'H100 SXM', 'A100-SXM4-80GB') when the trace does not name it.",
)
whole_option = click.option(
    "--whole",
    is_flag=True,
    help="Analyse the whole trace, start-up included (default: the steady state after it).",
)


def _set_max_memory(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    from gpuscope.readers._io import parse_size, set_memory_budget

    if value is None:
        return
    try:
        set_memory_budget(parse_size(value))
    except ValueError as error:
        raise click.BadParameter(str(error), ctx, param) from None


max_memory_option = click.option(
    "--max-memory",
    metavar="SIZE",
    callback=_set_max_memory,
    expose_value=False,
    is_eager=True,
    help="Refuse an input that would need more memory than SIZE (e.g. 4G) to read and analyse, "
    "with one line (default: GPUSCOPE_MAX_MEMORY, else 80% of the available memory).",
)
#: A percentage bound.
PERCENT = Number(0.0, 100.0)
#: A growth in percent (a regression bound; may exceed 100).
GROWTH_PERCENT = Number(0.0)


def output_options(formats: Collection[str], what: str) -> Callable[[F], F]:
    """``-o/--output`` and ``--format``, as ``diagnose`` has them, for a command whose renderers
    (one registry of :mod:`gpuscope.render.base`) are ``formats``; ``what`` names its result."""
    from pathlib import Path

    suffixes = ", ".join(sorted({k for k, v in _suffix_formats().items() if v in formats}))
    output = click.option(
        "-o",
        "--output",
        type=click.Path(path_type=Path),
        help=f"Write the {what} to this file in the format its suffix names ({suffixes}) or"
        " --format names ('-': stdout).",
    )
    chosen = click.option(
        "--format",
        "output_format",
        type=click.Choice(list(formats)),
        help="The format of -o's file, or of stdout without -o (default: -o's suffix, else the"
        " terminal's).",
    )

    def decorate(func: F) -> F:
        return output(chosen(func))

    return decorate


def _suffix_formats() -> dict[str, str]:
    from gpuscope.render.base import SUFFIX_FORMATS

    return SUFFIX_FORMATS


def chosen_format(output: Path | None, output_format: str | None, formats: Collection[str]) -> str:
    """The format ``-o`` and ``--format`` name (:func:`gpuscope.render.base.format_of`); a suffix
    or a format this output has not is a usage error naming the ones it has."""
    from gpuscope.render.base import format_of

    try:
        return format_of(None if output is None else str(output), output_format, formats)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="'-o' / '--output'") from None


def write_chosen(
    renderers: Mapping[str, Callable[[], Renderer[S]]],
    subject: S,
    output: Path | None,
    output_format: str | None,
    chosen: str,
) -> bool:
    """Write ``subject`` as ``-o`` / ``--format`` asked (``chosen``: :func:`chosen_format`), the
    renderer taken from ``renderers`` (a registry of :mod:`gpuscope.render.base`). True when it
    went to stdout: it is then the command's only output; False when nothing was asked or it
    went to a file (the terminal's report is then shown as without them)."""
    from pathlib import Path

    from gpuscope.sanitise import sanitised

    if output is None and output_format is None:
        return False
    target = output or Path("-")
    if str(target) == "-" and chosen == "terminal":
        show(renderers[chosen](), subject)
        return True
    text = chosen in ("terminal", "markdown")  # no escape sequences from the inputs
    return write_rendered(target, renderers[chosen](), sanitised(subject) if text else subject)


def prefetched() -> object:
    """The console script's read begun ahead (click's context object), or None: see
    :mod:`gpuscope.readers._early`."""
    context = click.get_current_context(silent=True)
    return context.obj if context is not None else None


def diagnosis_of(
    path: Path,
    gpu_hour_usd: float | None = None,
    whole: bool = False,
    gpu_name: str | None = None,
    prefetch: Any = None,
) -> Any:
    """The diagnosis of a trace (a file or a folder), or the one saved in a JSON document that
    ``gpuscope diagnose --json`` wrote. A saved diagnosis is final: options that change how a
    trace is diagnosed are refused with it (a usage error), never silently ignored."""
    from gpuscope.diagnosis import saved

    if saved.is_saved(path):
        given = [
            name
            for name, value in (
                ("--gpu-hour-usd", gpu_hour_usd),
                ("--whole", whole or None),
                ("--gpu", gpu_name),
            )
            if value is not None
        ]
        if given:
            raise click.UsageError(
                f"{path} is a saved diagnosis: {', '.join(given)} applies only to a trace"
            )
        return saved.read(path)
    from gpuscope.diagnosis import Options, diagnose
    from gpuscope.readers import load

    options = Options(gpu_hour_usd=gpu_hour_usd, whole=whole, gpu=gpu_name)
    return diagnose(load(path, prefetch=prefetch), options)
