"""The rank section of the reports (terminal and JSON), and the ``scale`` / ``sweep`` reports.

Contract: every function here presents a result computed elsewhere
(:class:`~gpuscope.analyses.ranks.RankAnalysis`,
:class:`~gpuscope.compare.scaling.ScalingReport`, :class:`~gpuscope.compare.scaling.SweepReport`)
and computes nothing but unit conversions. ``*_document`` functions return plain JSON types
(documented in ``docs/json.md``); ``render_*`` functions write to a rich ``Console``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import msgspec
from msgspec.structs import asdict

from gpuscope.analyses.ranks import RankAnalysis, RankStat, StepCommunication, StragglerStat
from gpuscope.diagnosis.patterns import legend
from gpuscope.names import short_kernel_name
from gpuscope.render.layout import Table, Text
from gpuscope.units import gib, ms_or_na, pct, signed_ms, us

if TYPE_CHECKING:  # only named in annotations; the module loads with `scale`/`sweep`
    from rich.console import Console

    from gpuscope.compare.scaling import RunFinding, ScalingReport, StepSplit, SweepReport
    from gpuscope.render.plain import Printer

SCALING_SCHEMA = "gpuscope/scale-1"
SWEEP_SCHEMA = "gpuscope/sweep-1"


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None or math.isnan(value) else round(value, digits)


# --- ranks: JSON ---------------------------------------------------------------------------------


def ranks_document(a: RankAnalysis) -> dict[str, Any]:
    busiest, least = a.busiest, a.least_busy
    return {
        "world_size": a.world_size,
        "present": a.present,
        "missing": a.missing,
        "partial": a.partial,
        "notes": a.notes,
        "clocks_aligned": a.aligned,
        "busiest_rank": None if busiest is None else busiest.rank,
        "least_busy_rank": None if least is None else least.rank,
        "matched_collectives": a.matched_collectives,
        "collective_wait_ns": a.collective_wait_ns,
        "exposed_wait_ns": a.exposed_wait_ns,
        "straggler_exposed_wait_ns": a.straggler_exposed_wait_ns,
        "per_rank": [_rank(r) for r in a.ranks],
        "groups": [msgspec.structs.asdict(g) for g in a.groups],
        "stragglers": [
            {
                "rank": s.rank,
                "device": s.device,
                "last_arrivals": s.last_arrivals,
                "shared_collectives": s.shared,
                "last_share_pct": _round(s.share_pct),
                "mean_late_ns": round(s.mean_late_ns),
                "max_late_ns": s.max_late_ns,
                "caused_wait_ns": s.caused_wait_ns,
                "caused_exposed_wait_ns": s.caused_exposed_wait_ns,
                "late_window_ns": s.window_ns,
                "busy_in_window_ns": s.busy_in_window_ns,
                "top_kernels": [{"name": n, "ns": ns} for n, ns in s.top_kernels],
                "idle_causes": [{"cause": c, "ns": ns} for c, ns in s.idle_causes],
                "before_ns": s.before_ns,
                "idle_before": [{"what": w, "ns": ns} for w, ns in s.idle_before],
            }
            for s in a.stragglers
        ],
        "bandwidth": {
            "collectives": [
                {
                    "kind": b.kind,
                    "ranks": b.ranks,
                    "collectives": b.collectives,
                    "message_bytes": b.message_bytes,
                    "transfer_ns": b.transfer_ns,
                    "algorithm_gb_per_s": _round(b.algorithm_bytes_per_s / 1e9),
                    "bus_gb_per_s": _round(
                        None if b.bus_bytes_per_s is None else b.bus_bytes_per_s / 1e9
                    ),
                    "peak_gb_per_s": _round(
                        None if b.peak_bytes_per_s is None else b.peak_bytes_per_s / 1e9
                    ),
                    "bus_pct_of_peak": _round(b.bus_pct_of_peak),
                    "includes_wait": b.includes_wait,
                }
                for b in a.bandwidth
            ],
            "note": a.bandwidth_note,
        },
        "exposure": _exposure(a),
    }


def _steps(steps: list[StepCommunication]) -> list[dict[str, Any]]:
    return [msgspec.structs.asdict(s) for s in steps]


def _rank(r: RankStat) -> dict[str, Any]:
    return {
        "rank": r.rank,
        "device": r.device,
        "source": r.source,
        "clock_offset_ns": r.clock_offset_ns,
        "span_ns": r.span_ns,
        "busy_ns": r.busy_ns,
        "idle_ns": r.idle_ns,
        "compute_ns": r.compute_ns,
        "communication_ns": r.communication_ns,
        "exposed_communication_ns": r.exposed_communication_ns,
        "busy_pct": _round(r.busy_pct),
        "collectives": r.collectives,
        "collective_wait_ns": r.collective_wait_ns,
        "exposed_wait_ns": r.exposed_wait_ns,
        "last_arrivals": r.last_arrivals,
        "steps": _steps(r.steps),
    }


def _exposure(a: RankAnalysis) -> dict[str, Any]:
    e = a.exposure
    return {
        "communication_ns": e.communication_ns,
        "exposed_ns": e.exposed_ns,
        "collectives": e.collectives,
        "fully_exposed": e.fully_exposed,
        "fully_exposed_ns": e.fully_exposed_ns,
        "small": e.small,
        "small_exposed_ns": e.small_exposed_ns,
        "small_by": "message_size" if e.small_by_size else "duration",
        "mean_message_bytes": None if e.mean_message_bytes is None else round(e.mean_message_bytes),
        "locations": [
            {"location": w, "exposed_ns": ns, "collectives": n} for w, ns, n in e.locations
        ],
        "steps": _steps(e.steps),
    }


# --- ranks: terminal -----------------------------------------------------------------------------


#: Jobs with more ranks than this show no table of every rank in the terminal (the JSON has it).
TABLE_MAX_RANKS = 32


def render_ranks(a: RankAnalysis, console: Printer) -> None:
    for note in a.notes:
        console.print(Text(f"note: {note}", style="yellow"))
    if len(a.ranks) <= TABLE_MAX_RANKS:
        console.print(_rank_table(a))
    lines = [_balance(a), *(_straggler(s) for s in a.stragglers), *_bandwidth_lines(a)]
    if a.bandwidth_note:
        lines.append(Text(a.bandwidth_note, style="dim"))
    kept = [line for line in lines if line.plain]
    if kept:
        console.print(Text("\n").join(kept))


def _waiting_pct(r: RankStat) -> float | None:
    """Share of a rank's span spent inside collectives waiting for the last peer."""
    if r.collective_wait_ns is None or not r.span_ns:
        return None
    return 100.0 * r.collective_wait_ns / r.span_ns


def _balance(a: RankAnalysis) -> Text:
    text = Text()
    busiest, least = a.busiest, a.least_busy
    if busiest is None or least is None or len(a.ranks) < 2:
        return text
    # Busy is work: time spinning inside a collective for a late peer with nothing else running
    # is waiting (RankStat.busy_pct). Kernel time alone makes the rank that waits most look
    # busiest: say so when that rank differs from the one that works most.
    by_kernels = max(a.ranks, key=lambda r: r.busy_ns / r.span_ns if r.span_ns else 0.0)
    waiting = _waiting_pct(by_kernels)
    if by_kernels is not busiest and waiting is not None and by_kernels.span_ns:
        text.append(
            f"rank {by_kernels.rank} has the most kernel time"
            f" ({pct(100.0 * by_kernels.busy_ns / by_kernels.span_ns)}) but waits inside"
            f" collectives for {pct(waiting)} of its time; "
        )
    text.append(
        f"busiest rank {busiest.rank} ({pct(busiest.busy_pct)} busy, not counting waits for a"
        f" late peer), least busy rank {least.rank} ({pct(least.busy_pct)})"
    )
    if a.collective_wait_ns is not None:
        text.append(
            f"; {ms_or_na(a.collective_wait_ns)} waiting inside {a.matched_collectives:,} matched"
            f" collectives, {ms_or_na(a.exposed_wait_ns)} of it exposed"
            + ("" if a.aligned else " (clocks not aligned)")
        )
    return text


def _straggler(s: StragglerStat) -> Text:
    text = Text(f"straggler: rank {s.rank}", style="bold magenta")
    text.append(
        f" last at {s.last_arrivals} of {s.shared} collectives ({s.share_pct:.0f}%), late by"
        f" {ms_or_na(s.mean_late_ns)} on average; others waited {ms_or_na(s.caused_wait_ns)}"
        f" ({ms_or_na(s.caused_exposed_wait_ns)} exposed)",
        style="",
    )
    if s.top_kernels:
        text.append(f"\n  meanwhile it ran {short_kernel_name(s.top_kernels[0][0])}", style="dim")
    if s.idle_causes:
        cause, ns = s.idle_causes[0]
        text.append(f"\n  and was idle {ms_or_na(ns)} ({cause})", style="dim")
    return text


def _bandwidth_lines(a: RankAnalysis) -> list[Text]:
    lines: list[Text] = []
    for b in a.bandwidth:
        text = Text(
            f"{b.kind} x{b.collectives:,} on {b.ranks} ranks: algorithm bandwidth"
            f" {b.algorithm_bytes_per_s / 1e9:,.1f} GB/s"
        )
        if b.bus_bytes_per_s is not None:
            text.append(f", bus {b.bus_bytes_per_s / 1e9:,.1f} GB/s")
        if b.bus_pct_of_peak is not None:
            text.append(f" ({b.bus_pct_of_peak:.0f}% of the link's peak per direction)")
        lines.append(text)
    return lines


def _rank_table(a: RankAnalysis) -> Table:
    table = Table(title="Ranks", title_justify="left")
    columns = ("rank", "busy", "idle", "comm", "exposed", "waiting", "last", "clock offset")
    for column in columns:
        table.add_column(column, justify="right")
    for r in a.ranks:
        table.add_row(
            str(r.rank),
            pct(r.busy_pct),
            ms_or_na(r.idle_ns),
            ms_or_na(r.communication_ns),
            ms_or_na(r.exposed_communication_ns),
            ms_or_na(r.collective_wait_ns),
            f"{r.last_arrivals:,}",
            "n/a" if r.clock_offset_ns is None else us(r.clock_offset_ns),
        )
    return table


# --- scale ---------------------------------------------------------------------------------------


def scaling_document(report: ScalingReport) -> dict[str, Any]:
    return {
        "schema": SCALING_SCHEMA,
        "units": report.units,
        "units_source": report.units_source,
        "threshold_pct": report.threshold_pct,
        "gpu_hour_usd": report.gpu_hour_usd,
        "price_source": report.price_source,
        "runs": [
            {
                "source": p.source,
                "gpus": p.gpus,
                "gpus_source": p.gpus_source,
                "steps": p.steps,
                "units_per_step_per_gpu": p.units_per_step_per_gpu,
                "step_ns": round(p.step_ns),
                "throughput_per_s": _round(p.throughput_per_s),
                "speedup": _round(p.speedup),
                "efficiency_pct": _round(p.efficiency_pct),
                "per_gpu_step_ns": _split(p.split),
                "loss_per_gpu_step_ns": None if p.loss is None else _split(p.loss),
                "usd_per_unit": p.usd_per_unit,
            }
            for p in report.points
        ],
        "findings": [asdict(f) for f in report.findings],
        "warnings": report.warnings,
    }


def _split(s: StepSplit) -> dict[str, int]:
    return {k: round(v) for k, v in asdict(s).items()}


def render_scaling(report: ScalingReport, console: Console) -> None:
    for warning in report.warnings:
        console.print(Text(f"warning: {warning}", style="yellow"))
    title = f"Scaling: throughput in {report.units}/s; step and its split per GPU, in ms"
    table = Table(title=title, title_justify="left")
    for column in ("GPUs", "step", "thr/s", "speed-up", "eff.", "compute", "comm", "idle", "$/1M"):
        table.add_column(column, justify="right")
    for p in report.points:
        s = p.split
        table.add_row(
            str(p.gpus),
            f"{p.step_ns / 1e6:,.2f}",
            f"{p.throughput_per_s:,.1f}",
            f"{p.speedup:.2f}x",
            pct(p.efficiency_pct),
            f"{s.compute_ns / 1e6:,.2f}",
            f"{s.exposed_communication_ns / 1e6:,.2f}",
            f"{s.idle_ns / 1e6:,.2f}",
            "n/a" if p.usd_per_unit is None else f"${p.usd_per_unit * 1e6:,.2f}",
        )
    console.print(table)
    text = Text(
        f"units: {report.units_source}; $/1M {report.units}: {report.price_source}\n", style="dim"
    )
    for p in report.points:
        if p.loss is None:
            continue
        loss = p.loss
        text.append(
            f"{p.gpus} GPUs: {signed_ms(loss.step_ns)} per GPU-step over ideal = compute"
            f" {signed_ms(loss.compute_ns)}, exposed communication"
            f" {signed_ms(loss.exposed_communication_ns)}, idle {signed_ms(loss.idle_ns)},"
            f" other {signed_ms(loss.other_ns)}\n"
        )
    _append_findings(text, report.findings, "bold magenta")
    console.print(text)


# --- sweep ---------------------------------------------------------------------------------------


def _append_findings(text: Text, findings: list[RunFinding], cause_style: str) -> None:
    for f in findings:
        text.append(f"\n{f.cause}", style=cause_style)
        text.append(f"  [{f.pattern}]\n", style="dim")
        text.append(f"   {f.title}; {'; '.join(f.evidence)}\n")
        text.append("   fix: ", style="green")
        text.append(f"{f.fix}\n")
    if findings:
        text.append(legend(f.pattern for f in findings) + "\n", style="dim")


def sweep_document(report: SweepReport) -> dict[str, Any]:
    return {
        "schema": SWEEP_SCHEMA,
        "batch_source": report.batch_source,
        "max_latency_ms": report.max_latency_ms,
        "knee_batch": report.knee_batch,
        "knee_rule": report.knee_rule,
        "best_batch": report.best_batch,
        "runs": [
            {
                "source": p.source,
                "batch": p.batch,
                "gpus": p.gpus,
                "steps": p.steps,
                "step_ns": round(p.step_ns),
                "throughput_per_s": _round(p.throughput_per_s),
                "relative_throughput_pct": _round(p.relative_pct),
                "busy_pct": _round(p.busy_pct),
                "memory_bound_pct_of_busy": _round(p.memory_bound_pct),
                "memory_bytes": p.memory_bytes,
            }
            for p in report.points
        ],
        "memory": {
            "source": report.memory_source,
            "freed_bytes": report.memory_freed_bytes,
            "compared_with_batch": report.memory_compared_batch,
        },
        "findings": [asdict(f) for f in report.findings],
        "warnings": report.warnings,
    }


def render_sweep(report: SweepReport, console: Console) -> None:
    for warning in report.warnings:
        console.print(Text(f"warning: {warning}", style="yellow"))
    table = Table(title="Batch sweep", title_justify="left")
    for column in ("batch", "step latency", "throughput/s", "of best", "busy", "memory-bound"):
        table.add_column(column, justify="right")
    for p in report.points:
        knee = p.batch == report.knee_batch
        table.add_row(
            f"{p.batch}{' ◀ knee' if knee else ''}",
            ms_or_na(p.step_ns),
            f"{p.throughput_per_s:,.1f}",
            pct(p.relative_pct),
            pct(p.busy_pct),
            pct(p.memory_bound_pct),
            style="bold" if knee else None,
        )
    console.print(table)
    text = Text(f"batch sizes from {report.batch_source}; knee: {report.knee_rule}\n", style="dim")
    # At the largest batch the knee frees nothing: no "batch 64 instead of 64" line.
    if report.memory_freed_bytes is not None and report.knee_batch != report.memory_compared_batch:
        text.append(
            f"batch {report.knee_batch} instead of {report.memory_compared_batch} frees about"
            f" {gib(report.memory_freed_bytes)} ({report.memory_source})\n"
        )
    _append_findings(text, report.findings, "bold yellow")
    console.print(text)
