"""One diagnosis' report: the sections in page order."""

from __future__ import annotations

from gpuscope.diagnosis import Diagnosis
from gpuscope.render.html.charts import (
    _heatmap_section,
    _roofline_section,
    _steps_section,
    _utilisation_section,
)
from gpuscope.render.html.memory import memory_sections
from gpuscope.render.html.page import (
    HtmlOptions,
    _page,
    _Section,
    _section_html,
)
from gpuscope.render.html.sections import _devices, _findings, _header, _inputs, _verdict
from gpuscope.render.html.timeline import _timeline_section
from gpuscope.render.views_html import FIGURE_ID as VIEWS_FIGURE_ID
from gpuscope.render.views_html import views_part


def render(diagnosis: Diagnosis, options: HtmlOptions | None = None) -> str:
    """The report of one diagnosis, as the text of a self-contained HTML file."""
    options = options or HtmlOptions()
    sections = _sections(diagnosis, options, prefix="")
    views = views_part(diagnosis)
    body = "\n".join(
        [
            _header(diagnosis, "gpuscope report"),
            _verdict(diagnosis.verdict),  # the answer first, what was read after it
            _inputs(diagnosis),
            _findings(
                diagnosis.findings,
                diagnosis.verdict.gpu_hour_usd,
                diagnosis.all_fixes,
                views.links,
            ),
            views.html,
            *(_section_html(s) for s in sections),
            _devices(diagnosis.devices),
        ]
    )
    drawn = [*sections, _Section(VIEWS_FIGURE_ID, "", "", views.figure)]
    return _page(f"gpuscope: {diagnosis.source}", body, drawn)


def _sections(d: Diagnosis, options: HtmlOptions, prefix: str) -> list[_Section]:
    if not d.devices:
        if d.memory:  # a memory snapshot: memory is all there is to draw
            return memory_sections(d, prefix)
        note = "The input holds no timeline of GPU work: there is nothing to draw."
        return [_Section(f"{prefix}chart-timeline", "GPU timeline", note, None)]
    sections = [
        _timeline_section(d, options, prefix),
        _utilisation_section(d, prefix),
        _steps_section(d.devices, prefix),
    ]
    if len(d.devices) > 1:
        sections.append(_heatmap_section(d.devices, options, prefix))
    sections.append(_roofline_section(d.devices, options, prefix))
    return sections + memory_sections(d, prefix)
