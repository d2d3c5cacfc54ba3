"""The machine-readable diagnosis: one JSON document, versioned by its ``schema`` field.

Contract: :func:`to_document` maps a :class:`~gpuscope.diagnosis.Diagnosis` to plain JSON types;
``docs/json.md`` documents every field. Times are integer nanoseconds (``*_ns``), shares are
percentages (``*_pct``) of the device's span unless the field says otherwise, and a figure that
could not be measured is ``null``, never 0. Adding fields keeps the schema version; renaming or
removing one bumps it.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec
from msgspec.structs import asdict

from gpuscope import __version__
from gpuscope.analyses.attribution import CauseStat
from gpuscope.analyses.bounds import Bound, RooflinePoint
from gpuscope.analyses.counters import CounterStat, CounterSummary
from gpuscope.analyses.memory import MemoryReport
from gpuscope.analyses.memory_sites import CATEGORIES
from gpuscope.analyses.operators import DeviceViews, ViewRow
from gpuscope.analyses.samples import Distribution, GpuUtilisation
from gpuscope.analyses.whatif import Prediction
from gpuscope.diagnosis import DeviceReport, Diagnosis
from gpuscope.diagnosis.findings import Finding, Verdict
from gpuscope.facts import GpuFacts, match_device
from gpuscope.render.ranks import ranks_document

SCHEMA = "gpuscope/diagnosis-1"


def to_document(diagnosis: Diagnosis) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "gpuscope_version": __version__,
        "source": diagnosis.source,
        "inputs": [asdict(i) for i in diagnosis.inputs],
        "verdict": {**_verdict(diagnosis.verdict), "based_on": diagnosis.based_on},
        "findings": [_finding(f) for f in diagnosis.findings],
        "devices": [_device(d) for d in diagnosis.devices]
        + [_sampled_device(g) for g in diagnosis.sampled]
        + [_counter_device(c) for c in diagnosis.counters],
        "ranks": None if diagnosis.ranks is None else ranks_document(diagnosis.ranks),
        "all_fixes": _prediction(diagnosis.all_fixes),
        "warnings": list(diagnosis.warnings),
        # The steady state analysed when start-up was left out; null: the whole trace.
        "window": msgspec.to_builtins(diagnosis.window),
        # What holds each GPU's memory (docs/json.md, "memory"); [] without allocator records.
        "memory": [memory_document(m) for m in diagnosis.memory],
    }


def _verdict(v: Verdict) -> dict[str, Any]:
    return {
        "bound": v.bound,
        "summary": v.summary,
        "idle_pct": _pct(v.idle_pct),
        "shares_pct": {k: _pct(x) for k, x in v.shares_pct.items()},
        "figures": {k: _pct(x) for k, x in v.figures.items()},
        "wasted_usd_per_gpu_hour": _money(v.wasted_usd_per_gpu_hour),
        "gpu_hour_usd": v.gpu_hour_usd,
        "price_source": v.price_source,
        "world_size": v.world_size,
        "bound_evidence": v.bound_evidence,
    }


def _money(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _finding(f: Finding) -> dict[str, Any]:
    return {
        "pattern": f.pattern,
        "cause": f.cause,
        "title": f.title,
        "lost_ns": f.lost_ns,
        "lost_ns_per_step": None if f.lost_ns_per_step is None else round(f.lost_ns_per_step),
        "share": round(f.share_pct / 100.0, 6),
        "share_pct": _pct(f.share_pct),
        "events": f.events,
        "cost_usd_per_gpu_hour": _money(f.cost_usd_per_gpu_hour),
        "cost_usd_per_day": _money(f.cost_usd_per_day),
        "locations": [asdict(loc) for loc in f.locations],
        "evidence": f.evidence,
        "fix": f.fix,
        "max_gain_ns": f.lost_ns,
        "measured_from": f.measured_from,
        "predicted_saving_ns_per_step": (
            None
            if f.predicted_saving_ns_per_step is None
            else round(f.predicted_saving_ns_per_step)
        ),
        "prediction": _prediction(f.prediction),
        "memory_bytes": f.memory_bytes,
        "predicted_peak_bytes": f.predicted_peak_bytes,
    }


def _prediction(p: Prediction | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {
        "cause": p.cause,
        "assumption": p.assumption,
        "step_ns": round(p.step_ns),
        "predicted_step_ns": round(p.predicted_step_ns),
        "saving_ns_per_step": round(p.saving_ns_per_step),
        "saving_range_ns_per_step": [
            round(p.saving_low_ns_per_step),
            round(p.saving_high_ns_per_step),
        ],
        "faster_pct": _pct(p.faster_pct),
        "saving_ns": p.saving_ns,
        "removed_ns": p.removed_ns,
        "steps": p.steps,
        "note": p.note,
        "hides": p.hides,
    }


def dumps(diagnosis: Diagnosis) -> bytes:
    """The document, indented, with the saved diagnosis (:mod:`gpuscope.diagnosis.saved`) as its
    last field on one line: ``gpuscope report``, ``diff`` and ``fleet`` read it back."""
    from gpuscope.diagnosis import saved  # noqa: PLC0415 - only --json writes it

    document = msgspec.json.format(msgspec.json.encode(to_document(diagnosis)), indent=1)
    whole = msgspec.json.encode(saved.to_builtins(diagnosis))
    key = b'"' + saved.SAVED_KEY.encode() + b'"'
    return document.rstrip()[:-1].rstrip() + b",\n " + key + b": " + whole + b"\n}"


def _pct(value: float | None) -> float | None:
    if value is None or math.isnan(value):
        return None
    return round(value, 3)


def _device(d: DeviceReport) -> dict[str, Any]:
    return {
        "rank": d.rank,
        "world_size": d.world_size,
        "device": d.device,
        "name": d.info.name,
        "vendor": d.info.vendor,
        "num_sms": d.info.num_sms,
        "source": d.source,
        "measured_from": "timeline",
        "gpu": _facts(d.facts),
        "span_start_ns": d.span_start_ns,
        "span_end_ns": d.span_end_ns,
        **_time(d),
        "steps": [
            {
                "name": s.name,
                "number": s.number,
                "start_ns": s.start_ns,
                "dur_ns": s.dur_ns,
                "busy_ns": s.busy_ns,
                "busy_pct": _pct(s.busy_pct),
            }
            for s in d.steps
        ],
        "streams": [asdict(s) for s in d.streams],
        "idle_causes": [_idle_cause(c) for c in d.idle.causes],
        "bounds": _device_bounds(d),
        "roofline": {
            "kernels": [_point(p) for p in d.series.roofline_kernels],
            "operators": [_point(p) for p in d.series.roofline_operators],
        },
        "views": None if d.views is None else views_document(d.views),
        "top_kernels": [
            {
                "name": k.name,
                "class": k.work_class.name.lower(),
                "count": k.count,
                "total_ns": k.total_ns,
                "mean_ns": round(k.mean_ns, 1),
                "max_ns": k.max_ns,
                "share_pct": _pct(k.share_of_busy_pct),
            }
            for k in d.kernels
        ],
    }


def _time(d: DeviceReport) -> dict[str, Any]:
    """Where the device's span went: busy by kind of work, exclusive shares, and overlap."""
    t = d.temporal
    return {
        "span_ns": t.span_ns,
        "busy_ns": t.busy_ns,
        "waiting_for_peers_ns": d.peer_wait_ns,
        "idle_ns": t.idle_ns,
        "compute_ns": t.compute_ns,
        "communication_ns": t.communication_ns,
        "memcpy_ns": t.memcpy_ns,
        "memset_ns": t.memset_ns,
        "memory_ns": t.memory_ns,
        "busy_pct": _pct(d.busy_pct),
        "idle_pct": _pct(t.pct(t.idle_ns)),
        "compute_pct": _pct(t.pct(t.compute_ns)),
        "communication_pct": _pct(t.pct(t.communication_ns)),
        "memory_pct": _pct(t.pct(t.memory_ns)),
        "exclusive": {
            "compute_ns": t.exclusive_compute_ns,
            "communication_ns": t.exclusive_communication_ns,
            "memcpy_ns": t.exclusive_memcpy_ns,
            "memset_ns": t.exclusive_memset_ns,
            "idle_ns": t.idle_ns,
        },
        "overlap": {
            "communication_ns": d.overlap.communication_ns,
            "overlapped_ns": d.overlap.overlapped_ns,
            "exposed_ns": d.overlap.exposed_ns,
            "comp_comm_overlap_pct": _pct(d.overlap.overlap_pct),
        },
    }


def _idle_cause(c: CauseStat) -> dict[str, Any]:
    return {
        "cause": c.cause,
        "lost_ns": c.lost_ns,
        "share_pct": _pct(c.share_pct),
        "gaps": c.gaps,
        "locations": [asdict(loc) for loc in c.locations],
        # warmup only: idle time per kind of start-up and the code that triggered it
        "kinds": [
            {"kind": k.kind.value, "lost_ns": k.lost_ns, "location": k.location} for k in c.kinds
        ],
    }


def _device_bounds(d: DeviceReport) -> dict[str, Any]:
    return {
        "time_ns": {b.name.lower(): d.bounds.time_ns_by_bound[b] for b in Bound},
        "gemm_ns": d.bounds.gemm_ns,
        "fp32_gemm_ns": d.bounds.fp32_gemm_ns,
        "estimated_share_pct": _pct(100.0 * d.bounds.estimated_share),
        "achieved_tflops": _scaled(d.bounds.achieved_flops_per_s, 1e12),
        "achieved_gb_per_s": _scaled(d.bounds.achieved_bytes_per_s, 1e9),
        "mfu_pct": _pct(d.bounds.mfu_pct),
        "mbu_pct": _pct(d.bounds.mbu_pct),
        "not_estimable_reason": d.bounds.not_estimable_reason,
        **_bounds_source(d),
    }


def views_document(v: DeviceViews) -> dict[str, Any]:
    """The module tree (preorder; ``parent`` indexes the same list) and the operator table."""

    def row(r: ViewRow, path: str | None) -> dict[str, Any]:
        share = 100.0 * r.total_ns / v.busy_ns if v.busy_ns else None
        fields = asdict(r)
        if path is None:
            del fields["parent"], fields["depth"]
        else:
            fields["path"] = path
        return {**fields, "share_of_busy_pct": _pct(share)}

    def tree(rows: list[ViewRow]) -> list[dict[str, Any]]:
        paths: list[str] = []
        for r in rows:
            paths.append(r.name if r.parent < 0 else f"{paths[r.parent]}/{r.name}")
        return [row(r, p) for r, p in zip(rows, paths, strict=True)]

    return {
        "busy_ns": v.busy_ns,
        "idle_ns": v.idle_ns,
        "module_source": v.module_source,
        "modules": tree(v.modules),
        "module_types": tree(v.module_types),
        "operators": [row(r, None) for r in v.operators],
        "location_rows": dict(v.location_rows),
    }


def _point(p: RooflinePoint) -> dict[str, Any]:
    return {
        "name": p.name,
        "kind": p.kind,
        "bound": p.bound,
        "count": p.count,
        "total_ns": p.total_ns,
        "flops": p.flops,
        "bytes": p.bytes,
        "achieved_tflops": _scaled(p.flops_per_s, 1e12),
        "achieved_gb_per_s": _scaled(p.bytes_per_s, 1e9),
        "flops_per_byte": None if p.intensity is None else round(p.intensity, 3),
    }


def _scaled(value: float | None, unit: float) -> float | None:
    return None if value is None else round(value / unit, 3)


def _facts(facts: GpuFacts | None) -> dict[str, Any] | None:
    if facts is None:
        return None
    return asdict(facts)


def _bounds_source(d: DeviceReport) -> dict[str, Any]:
    """Where each kernel's bound came from: Nsight Compute where a report matched, else names and
    shapes (estimated)."""
    m = d.counters
    if m is None or not m.measured_ns:
        return {"measured_from": "estimated", "measured_kernel_ns": 0, "measured_share_pct": 0.0}
    return {
        "measured_from": m.source if m.measured_ns == m.kernel_ns else f"{m.source}+estimated",
        "measured_evidence": m.evidence,
        "measured_kernel_ns": m.measured_ns,
        "measured_share_pct": _pct(m.measured_share_pct),
        "ncu_kernels_matched": m.matched_names,
    }


def _identity(
    device: int | None, name: str | None, source: str, measured_from: str
) -> dict[str, Any]:
    """The identity fields every ``devices[]`` entry has, whatever measured it."""
    return {
        "rank": None,
        "world_size": None,
        "device": device,
        "name": name,
        "vendor": None,
        "num_sms": None,
        "source": source,
        "measured_from": measured_from,
        "gpu": _facts(match_device(name)),
    }


def _distribution(d: Distribution | None) -> dict[str, Any] | None:
    if d is None:
        return None
    return {
        "samples": d.samples,
        "mean_pct": _pct(d.mean),
        "p50_pct": _pct(d.p50),
        "p90_pct": _pct(d.p90),
        "p99_pct": _pct(d.p99),
        "max_pct": _pct(d.max),
    }


def _sampled_device(g: GpuUtilisation) -> dict[str, Any]:
    busy = g.activity.mean if g.activity is not None else None
    return {
        **_identity(g.gpu, g.name, g.source, g.measured_from),
        "span_start_ns": g.start_ns,
        "span_end_ns": g.end_ns,
        "span_ns": g.span_ns,
        "busy_pct": _pct(busy),
        "idle_pct": None if busy is None else _pct(100.0 - busy),
        "samples": {
            "count": g.samples,
            "uuid": g.uuid,
            "period_ns": g.period_ns,
            "covered_ns": g.covered_ns,
            "utilization": _distribution(g.utilization),
            "sm_active": _distribution(g.sm_active),
            "dram_active": _distribution(g.dram_active),
            "memory_peak_bytes": g.memory_peak_bytes,
            "memory_total_bytes": g.memory_total_bytes,
            "memory_peak_pct": _pct(g.memory_peak_pct),
            "power_mean_w": None if g.power_mean_w is None else round(g.power_mean_w, 1),
            "idle_stretches": [
                {"start_ns": s.start_ns, "end_ns": s.end_ns, "dur_ns": s.dur_ns} for s in g.idle
            ],
            "idle_ns": g.idle_ns,
            "gaps": [
                {"start_ns": s.start_ns, "end_ns": s.end_ns, "dur_ns": s.dur_ns} for s in g.gaps
            ],
            "gap_ns": g.gap_ns,
            "worked": g.worked,
            "held_idle": None
            if g.held_idle is None
            else {
                "start_ns": g.held_idle.start_ns,
                "end_ns": g.held_idle.end_ns,
                "dur_ns": g.held_idle.dur_ns,
                "memory_bytes": g.held_idle.memory_bytes,
                "activity_mean_pct": _pct(g.held_idle.activity_mean),
            },
        },
    }


def _counter_device(c: CounterSummary) -> dict[str, Any]:
    device = c.devices[0] if len(c.devices) == 1 else None
    return {
        **_identity(device, c.device_name, c.source, "ncu"),
        "counters": {
            "format": c.format,
            "devices": c.devices,
            "kernels": c.kernels,
            "profiled_kernel_ns": c.measured_ns,
            "time_ns_by_limiter": {k.value: v for k, v in c.time_ns_by_limiter.items()},
            "unclassified_kernels": c.unclassified,
            "top_kernels": [_counter_stat(s) for s in c.stats[:30]],
        },
    }


def _counter_stat(s: CounterStat) -> dict[str, Any]:
    return {
        "name": s.name,
        "count": s.count,
        "total_ns": s.total_ns,
        "limiter": None if s.limiter is None else s.limiter.value,
        "reason": s.reason,
        "sm_throughput_pct": _pct(s.sm_throughput_pct),
        "memory_throughput_pct": _pct(s.memory_throughput_pct),
        "dram_throughput_pct": _pct(s.dram_throughput_pct),
        "achieved_occupancy_pct": _pct(s.achieved_occupancy_pct),
        "theoretical_occupancy_pct": _pct(s.theoretical_occupancy_pct),
        "waves_per_sm": None if s.waves_per_sm is None else round(s.waves_per_sm, 3),
        "estimated_speedup_pct": _pct(s.speedup_pct),
        "rules": s.rules,
    }


def memory_document(m: MemoryReport) -> dict[str, Any]:
    """A memory report as plain JSON; the timeline's points as objects, categories named."""
    document: dict[str, Any] = msgspec.to_builtins(m)
    document["timeline"] = [
        {
            "time_ns": p.time_ns,
            "event": p.event,
            "allocated_bytes": p.allocated_bytes,
            "reserved_bytes": p.reserved_bytes,
            "by_category": dict(zip(CATEGORIES, p.by_category, strict=True)),
        }
        for p in m.timeline
    ]
    return document
