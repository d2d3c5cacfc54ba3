"""One interface for every renderer: ``render(subject, options) -> str | bytes``.

Contract: a renderer presents a result it is given and computes nothing (the diagnosis holds
every series a report draws; a comparison holds its :class:`~gpuscope.compare.diff.RunDiff`).
The subject is one of these results:

* a :class:`~gpuscope.diagnosis.Diagnosis`: :class:`Terminal`, :class:`Json`, :class:`Html`,
  :class:`Markdown`, :class:`AgentAnswer` (what ``gpuscope mcp`` answers) and
  :class:`AnnotatedTrace` (which also needs the trace's own bytes, to add to them);
* a :class:`Comparison` of two runs: :class:`DiffTerminal`, :class:`DiffJson`,
  :class:`DiffHtml`;
* a :class:`~gpuscope.distributed.JobDiagnosis` (``diagnose --engine``): :class:`JobTerminal`,
  :class:`JobJson`;
* a :class:`~gpuscope.fleet.FleetSummary`: :class:`FleetTerminal`, :class:`FleetHtml`;
* :class:`SavedRuns` (the history's runs and a metric's trend): :class:`HistoryTerminal`,
  :class:`HistoryJson`;
* a :class:`~gpuscope.compare.scaling.ScalingReport`: :class:`ScalingTerminal`,
  :class:`ScalingJson`; a :class:`~gpuscope.compare.scaling.SweepReport`:
  :class:`SweepTerminal`, :class:`SweepJson`.

The command line picks every renderer from the registries below, by ``--format`` or by the
suffix of the output file (:func:`format_of`: ``-o report.md``), and runs it through this
interface (``gpuscope.commands._common.show`` prints a text one laid out for the terminal it
prints to, with that terminal's width and colours in the :class:`RenderOptions`), and
``tests/test_renderers.py`` runs every renderer through it. The one output outside it is the
annotated trace the ``annotate`` command writes: it streams a trace of gigabytes a piece at a
time, which a renderer returning its whole output cannot.
"""

from __future__ import annotations

import io
from collections.abc import Collection
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

import msgspec

if TYPE_CHECKING:
    from rich.console import Console

    from gpuscope.compare.diff import RunDiff
    from gpuscope.compare.scaling import ScalingReport, SweepReport
    from gpuscope.diagnosis import Diagnosis
    from gpuscope.distributed import JobDiagnosis
    from gpuscope.fleet import FleetSummary
    from gpuscope.history import StoredRun

S_contra = TypeVar("S_contra", contravariant=True)


class RenderOptions(msgspec.Struct, frozen=True):
    width: int = 120  # terminal columns
    all_devices: bool = False  # the terminal shows every device's panel, not the extremes
    label_chars: int = 160  # longer names are cut in chart labels
    #: The terminal the text goes to: its colours (rich's name: "standard", "256", "truecolor";
    #: None: none) and whether it is one. A command passes its console's, so that text made
    #: here prints as the renderer printing to that console would.
    color_system: str | None = None
    terminal: bool = False


class Comparison(msgspec.Struct, frozen=True):
    """Two runs and what changed between them (computed by ``analyses.diff``). The diagnoses
    are None for a run the history saved (a summary, no diagnosis): the HTML comparison, which
    draws them, needs both."""

    before: Diagnosis | None
    after: Diagnosis | None
    change: RunDiff
    before_name: str = "before"
    after_name: str = "after"


class SavedRuns(msgspec.Struct, frozen=True):
    """Runs the history saved, newest first, and the metric whose trend is shown (None: the
    step time)."""

    runs: list[StoredRun]
    metric: str | None = None


class Renderer(Protocol, Generic[S_contra]):
    def render(self, subject: S_contra, options: RenderOptions) -> str | bytes: ...


def _console(options: RenderOptions) -> tuple[Console, io.StringIO]:
    from rich.console import Console  # noqa: PLC0415

    out = io.StringIO()
    console = Console(
        file=out,
        width=options.width,
        emoji=False,
        markup=False,
        color_system=options.color_system,  # type: ignore[arg-type]
        force_terminal=options.terminal,
    )
    return console, out


class Terminal:
    def render(self, subject: Diagnosis, options: RenderOptions) -> str:
        from gpuscope.render import terminal  # noqa: PLC0415

        if options.color_system is None:  # a pipe, a file: the same text without rich's cost
            from gpuscope.render.plain import PlainConsole, UnsupportedError  # noqa: PLC0415

            plain = PlainConsole(options.width)
            try:
                terminal.render(subject, plain, all_devices=options.all_devices)
                return plain.text()
            except UnsupportedError:  # something only rich lays out (a narrow terminal, CJK names)
                pass
        console, out = _console(options)
        terminal.render(subject, console, all_devices=options.all_devices)
        return out.getvalue()


class Json:
    def render(self, subject: Diagnosis, options: RenderOptions) -> bytes:
        from gpuscope.render import json  # noqa: PLC0415

        return json.dumps(subject)


class Html:
    def render(self, subject: Diagnosis, options: RenderOptions) -> str:
        from gpuscope.render import html  # noqa: PLC0415

        return html.render(subject, html.HtmlOptions(label_chars=options.label_chars))


class Markdown:
    def render(self, subject: Diagnosis, options: RenderOptions) -> str:
        from gpuscope.render import markdown  # noqa: PLC0415

        return markdown.render(subject)


class AgentAnswer:
    """What ``gpuscope mcp`` answers about a diagnosis (compact JSON, for a coding agent)."""

    def render(self, subject: Diagnosis, options: RenderOptions) -> bytes:
        from gpuscope.render import agent  # noqa: PLC0415

        return _indented(agent.answer(subject))


class AnnotatedTrace:
    """The trace the diagnosis was made from, with its idle causes and findings added."""

    def __init__(self, trace: bytes, source: str) -> None:
        self.trace = trace
        self.source = source

    def render(self, subject: Diagnosis, options: RenderOptions) -> bytes:
        from gpuscope.render.annotate import annotate  # noqa: PLC0415

        return annotate(self.trace, subject, self.source)


class DiffTerminal:
    def render(self, subject: Comparison, options: RenderOptions) -> str:
        from gpuscope.render import diff  # noqa: PLC0415

        console, out = _console(options)
        diff.render(subject.change, console, subject.before_name, subject.after_name)
        return out.getvalue()


class DiffJson:
    def render(self, subject: Comparison, options: RenderOptions) -> bytes:
        from gpuscope.render import diff  # noqa: PLC0415

        return diff.dumps(subject.change, subject.before_name, subject.after_name)


class DiffHtml:
    def render(self, subject: Comparison, options: RenderOptions) -> str:
        from gpuscope.render import html  # noqa: PLC0415

        if subject.before is None or subject.after is None:
            raise ValueError("an HTML comparison draws both diagnoses: a saved run has none")
        page_options = html.HtmlOptions(label_chars=options.label_chars)
        return html.render_diff(subject.before, subject.after, page_options, change=subject.change)


class JobTerminal:
    def render(self, subject: JobDiagnosis, options: RenderOptions) -> str:
        from gpuscope.render import job  # noqa: PLC0415

        console, out = _console(options)
        job.render_job(subject, console)
        return out.getvalue()


class JobJson:
    def render(self, subject: JobDiagnosis, options: RenderOptions) -> bytes:
        from gpuscope.render import job  # noqa: PLC0415

        return _indented(job.job_document(subject))


class FleetTerminal:
    def render(self, subject: FleetSummary, options: RenderOptions) -> str:
        from gpuscope.render import fleet  # noqa: PLC0415

        console, out = _console(options)
        fleet.render_terminal(subject, console)
        return out.getvalue()


class FleetHtml:
    def render(self, subject: FleetSummary, options: RenderOptions) -> str:
        from gpuscope.render import fleet  # noqa: PLC0415

        return fleet.render_html(subject)


class HistoryTerminal:
    def render(self, subject: SavedRuns, options: RenderOptions) -> str:
        from gpuscope.render import diff  # noqa: PLC0415

        console, out = _console(options)
        diff.render_history(subject.runs, console, subject.metric)
        return out.getvalue()


class HistoryJson:
    def render(self, subject: SavedRuns, options: RenderOptions) -> bytes:
        from gpuscope.render import diff  # noqa: PLC0415

        return _indented(diff.history_document(subject.runs, subject.metric))


class ScalingTerminal:
    def render(self, subject: ScalingReport, options: RenderOptions) -> str:
        from gpuscope.render import ranks  # noqa: PLC0415

        console, out = _console(options)
        ranks.render_scaling(subject, console)
        return out.getvalue()


class ScalingJson:
    def render(self, subject: ScalingReport, options: RenderOptions) -> bytes:
        from gpuscope.render import ranks  # noqa: PLC0415

        return _indented(ranks.scaling_document(subject))


class SweepTerminal:
    def render(self, subject: SweepReport, options: RenderOptions) -> str:
        from gpuscope.render import ranks  # noqa: PLC0415

        console, out = _console(options)
        ranks.render_sweep(subject, console)
        return out.getvalue()


class SweepJson:
    def render(self, subject: SweepReport, options: RenderOptions) -> bytes:
        from gpuscope.render import ranks  # noqa: PLC0415

        return _indented(ranks.sweep_document(subject))


def _indented(document: object) -> bytes:
    return msgspec.json.format(msgspec.json.encode(document), indent=1)


#: Every renderer, by the result it presents and by its format's name (``--format``).
DIAGNOSIS_RENDERERS: dict[str, type[Terminal | Json | Html | Markdown | AgentAnswer]] = {
    "terminal": Terminal,
    "json": Json,
    "html": Html,
    "markdown": Markdown,
    "agent": AgentAnswer,
}
COMPARISON_RENDERERS: dict[str, type[DiffTerminal | DiffJson | DiffHtml]] = {
    "terminal": DiffTerminal,
    "json": DiffJson,
    "html": DiffHtml,
}
FLEET_RENDERERS: dict[str, type[FleetTerminal | FleetHtml]] = {
    "terminal": FleetTerminal,
    "html": FleetHtml,
}
SCALING_RENDERERS: dict[str, type[ScalingTerminal | ScalingJson]] = {
    "terminal": ScalingTerminal,
    "json": ScalingJson,
}
SWEEP_RENDERERS: dict[str, type[SweepTerminal | SweepJson]] = {
    "terminal": SweepTerminal,
    "json": SweepJson,
}
HISTORY_RENDERERS: dict[str, type[HistoryTerminal | HistoryJson]] = {
    "terminal": HistoryTerminal,
    "json": HistoryJson,
}

#: The format an output file's suffix names (``-o report.html``), as pyinstrument picks its
#: renderer: ``.txt`` is the terminal's text without colours.
SUFFIX_FORMATS = {
    ".json": "json",
    ".html": "html",
    ".htm": "html",
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "terminal",
}


def format_of(output: str | None, chosen: str | None, formats: Collection[str]) -> str:
    """The output format: ``chosen`` (``--format``), else the one ``output``'s suffix names, else
    the terminal's. Raises ``ValueError`` saying why when it is not one of ``formats``."""
    if chosen is None and output is not None and output != "-":
        suffix = output[output.rfind(".") :].lower() if "." in output.rsplit("/", 1)[-1] else ""
        chosen = SUFFIX_FORMATS.get(suffix)
        if chosen is None:
            raise ValueError(
                f"cannot tell the format from the suffix of {output!r}: name it with --format"
                f" ({', '.join(formats)}) or end the name in"
                f" {', '.join(k for k, v in SUFFIX_FORMATS.items() if v in formats)}"
            )
    chosen = chosen or "terminal"
    if chosen not in formats:
        raise ValueError(f"this output has no {chosen} format: one of {', '.join(formats)}")
    return chosen
