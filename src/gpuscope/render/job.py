"""``diagnose --engine``: a job of many ranks diagnosed from per-rank summaries (terminal, JSON).

Contract: presents a :class:`~gpuscope.distributed.JobDiagnosis` computed elsewhere and computes
nothing but unit conversions. :func:`job_document` returns plain JSON types (schema
``gpuscope/job-1``, documented in ``docs/json.md``); :func:`render_job` writes to a rich
``Console``: the verdict, the failed ranks, the findings, the rank section (the table of every
rank only up to :data:`~gpuscope.render.ranks.TABLE_MAX_RANKS` ranks), scaling and kernels.
"""

from __future__ import annotations

from typing import Any

import msgspec
from rich.console import Console
from rich.text import Text

from gpuscope.distributed import JobDiagnosis
from gpuscope.names import short_kernel_name
from gpuscope.render.ranks import ranks_document, render_ranks
from gpuscope.units import ms, ms_or_na, pct

JOB_SCHEMA = "gpuscope/job-1"


def job_document(job: JobDiagnosis) -> dict[str, Any]:
    doc: dict[str, Any] = {"schema": JOB_SCHEMA}
    for name in job.__struct_fields__:
        if name != "ranks":
            doc[name] = msgspec.to_builtins(getattr(job, name))
    doc["summary_bytes_per_rank"] = round(job.bytes_per_rank)
    doc["ranks"] = None if job.ranks is None else ranks_document(job.ranks)
    return doc


def render_job(job: JobDiagnosis, console: Console) -> None:
    console.print(Text(f"Job {job.source}", style="bold"))
    console.print(Text(job.verdict))
    console.print(
        Text(
            f"{job.ranks_read} of {job.files} rank files read on the {job.engine} engine;"
            f" the driver held {job.bytes_per_rank / 1e3:,.1f} KB per rank",
            style="dim",
        )
    )
    for path, why in job.failed:
        console.print(Text(f"rank not read: {path}: {why}", style="yellow"))
    if job.skipped:
        console.print(Text(f"not traces, skipped: {', '.join(job.skipped)}", style="dim"))
    console.print(_findings(job))
    if job.ranks is not None:
        render_ranks(job.ranks, console)
    console.print(_scaling(job))
    if job.kernel_ns:
        top = ", ".join(f"{short_kernel_name(name)} {ms(ns)}" for name, ns in job.kernel_ns[:5])
        unit = "per step" if job.kernel_unit == "step" else "per second"
        console.print(Text(f"kernels, summed over ranks ({unit}): {top}", style="dim"))


def _findings(job: JobDiagnosis) -> Text:
    text = Text("Findings, summed over ranks", style="bold")
    for f in job.findings:
        text.append(
            f"\n{pct(f.share_pct):>6} {ms_or_na(f.lost_ns):>10}  {f.title}"
            f" (on {f.ranks} of {job.ranks_read} ranks)",
            style="",
        )
        text.append(f"\n{'':18}{f.fix}", style="dim")  # whole: the terminal wraps it
    return text


def _scaling(job: JobDiagnosis) -> Text:
    s = job.scaling
    text = Text(
        f"scaling: {pct(s.efficiency_pct)} of device time free of exposed communication"
        f" ({pct(s.exposed_communication_pct)} exposed, {pct(s.exposed_wait_pct)} of it waiting"
        " for a late rank)"
    )
    if s.step_ns_mean is not None and s.step_ns_slowest_rank is not None:
        text.append(
            f"; mean step {ms_or_na(s.step_ns_mean)}, slowest rank's"
            f" {ms_or_na(s.step_ns_slowest_rank)}"
            + (f" (+{s.imbalance_pct:.0f}%)" if s.imbalance_pct is not None else "")
        )
    return text
