"""One interface for every renderer: ``render(subject, options) -> str | bytes``.

Contract: a renderer presents a result it is given and computes nothing (the diagnosis holds
every series a report draws; a comparison holds its :class:`~gpuscope.analyses.diff.RunDiff`).
The subject is one of three results:

* a :class:`~gpuscope.diagnosis.Diagnosis`: :class:`Terminal`, :class:`Json`, :class:`Html`
  and :class:`AnnotatedTrace` (which also needs the trace's own bytes, to add to them);
* a :class:`Comparison` of two diagnoses: :class:`DiffTerminal`, :class:`DiffJson`,
  :class:`DiffHtml`;
* a :class:`~gpuscope.fleet.FleetSummary`: :class:`FleetTerminal`, :class:`FleetHtml`.

The command line calls the modules behind these directly (they stream to a console, take a
path); this is the seam for code that wants any output of any result the same way, and what
``tests/test_renderers.py`` runs every renderer through.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

import msgspec

if TYPE_CHECKING:
    from rich.console import Console

    from gpuscope.analyses.diff import RunDiff
    from gpuscope.diagnosis import Diagnosis
    from gpuscope.fleet import FleetSummary

S_contra = TypeVar("S_contra", contravariant=True)


class RenderOptions(msgspec.Struct, frozen=True):
    width: int = 120  # terminal columns
    all_devices: bool = False  # the terminal shows every device's panel, not the extremes
    label_chars: int = 160  # longer names are cut in chart labels


class Comparison(msgspec.Struct, frozen=True):
    """Two diagnoses and what changed between them (computed by ``analyses.diff``)."""

    before: Diagnosis
    after: Diagnosis
    change: RunDiff
    before_name: str = "before"
    after_name: str = "after"


class Renderer(Protocol, Generic[S_contra]):
    def render(self, subject: S_contra, options: RenderOptions) -> str | bytes: ...


def _console(options: RenderOptions) -> tuple[Console, io.StringIO]:
    from rich.console import Console  # noqa: PLC0415

    out = io.StringIO()
    console = Console(file=out, width=options.width, emoji=False, markup=False, color_system=None)
    return console, out


class Terminal:
    def render(self, subject: Diagnosis, options: RenderOptions) -> str:
        from gpuscope.render import terminal  # noqa: PLC0415

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

        page_options = html.HtmlOptions(label_chars=options.label_chars)
        return html.render_diff(subject.before, subject.after, page_options, change=subject.change)


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


#: Every renderer, by the result it presents.
DIAGNOSIS_RENDERERS: dict[str, type[Terminal | Json | Html]] = {
    "terminal": Terminal,
    "json": Json,
    "html": Html,
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
