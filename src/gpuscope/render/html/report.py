"""One diagnosis' report: the sections in page order."""

from __future__ import annotations

from gpuscope.diagnosis import Diagnosis
from gpuscope.render.html.charts import (
    heatmap_section,
    roofline_section,
    steps_section,
    utilisation_section,
)
from gpuscope.render.html.memory import memory_sections
from gpuscope.render.html.page import (
    HtmlOptions,
    Section,
    assemble_page,
    section_html,
)
from gpuscope.render.html.sections import (
    devices_html,
    findings_html,
    header_html,
    inputs_html,
    verdict_html,
)
from gpuscope.render.html.timeline import timeline_section
from gpuscope.render.views_html import FIGURE_ID as VIEWS_FIGURE_ID
from gpuscope.render.views_html import views_part


def render(diagnosis: Diagnosis, options: HtmlOptions | None = None) -> str:
    """The report of one diagnosis, as the text of a self-contained HTML file."""
    options = options or HtmlOptions()
    sections = report_sections(diagnosis, options, prefix="")
    views = views_part(diagnosis)
    body = "\n".join(
        [
            header_html(diagnosis, "gpuscope report"),
            verdict_html(diagnosis.verdict),  # the answer first, what was read after it
            inputs_html(diagnosis),
            findings_html(
                diagnosis.findings,
                diagnosis.verdict.wasted_usd_per_gpu_hour,
                diagnosis.all_fixes,
                views.links,
            ),
            views.html,
            *(section_html(s) for s in sections),
            devices_html(diagnosis.devices),
        ]
    )
    drawn = [*sections, Section(VIEWS_FIGURE_ID, "", "", views.figure)]
    return assemble_page(f"gpuscope: {diagnosis.source}", body, drawn)


def report_sections(d: Diagnosis, options: HtmlOptions, prefix: str) -> list[Section]:
    if not d.devices:
        if d.memory:  # a memory snapshot: memory is all there is to draw
            return memory_sections(d, prefix)
        note = "The input holds no timeline of GPU work: there is nothing to draw."
        return [Section(f"{prefix}chart-timeline", "GPU timeline", note, None)]
    sections = [
        timeline_section(d, options, prefix),
        utilisation_section(d, prefix),
        steps_section(d.devices, prefix),
    ]
    if len(d.devices) > 1:
        sections.append(heatmap_section(d.devices, options, prefix))
    sections.append(roofline_section(d.devices, options, prefix))
    return sections + memory_sections(d, prefix)
