"""What ``gpuscope mcp`` answers about a diagnosis, for a coding agent: a renderer like the
others (compact first; one finding in full on request), of plain JSON values.

Contract: :func:`answer` and :func:`explanation` lay out a
:class:`~gpuscope.diagnosis.Diagnosis` as ``dict`` s of JSON types and compute nothing;
``gpuscope.commands._agent`` reads and caches the diagnoses and calls them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuscope.analyses.operators import DeviceViews
    from gpuscope.diagnosis import Diagnosis
    from gpuscope.diagnosis.findings import Finding

#: Locations and view rows in the compact answer; :func:`explanation` gives them all.
COMPACT_LOCATIONS = 3
COMPACT_ROWS = 8


def answer(d: Diagnosis) -> dict[str, Any]:
    """The verdict, the findings with their top locations, and where the GPU time goes."""
    v = d.verdict
    views = _busiest_views(d)
    return {
        "source": d.source,
        "verdict": {
            "bound": v.bound,
            "summary": v.summary,
            "idle_pct": _round(v.idle_pct, 1),
            "wasted_usd_per_gpu_hour": _round(v.wasted_usd_per_gpu_hour, 2),
            "gpu_hour_usd": v.gpu_hour_usd,
        },
        "findings": [_compact(i, f, views) for i, f in enumerate(d.findings, 1)],
        "devices": [
            {
                "rank": r.rank,
                "device": r.device,
                "name": r.info.name,
                "busy_pct": _round(r.busy_pct, 1),
            }
            for r in d.devices[:COMPACT_ROWS]
        ],
        "modules": [] if views is None else _top_modules(views),
        "operators": [] if views is None else _top_operators(views),
        "warnings": d.warnings[:COMPACT_ROWS],
        "next": "explain_finding(path, n) gives finding n in full; render_report writes "
        "the HTML report with the whole module tree",
    }


def explanation(d: Diagnosis, finding: int) -> dict[str, Any]:
    """Finding ``finding`` (1-based, which must exist) in full: evidence, every location with
    its module row, the fix."""
    from gpuscope.render.json import to_document  # noqa: PLC0415

    full = to_document(d)["findings"][finding - 1]
    views = _busiest_views(d)
    if views is not None:
        for loc in full["locations"]:
            row = views.location_rows.get(loc["location"])
            loc["module"] = None if row is None else views.path(row)
    return {"finding": finding, **full}


def _busiest_views(d: Diagnosis) -> DeviceViews | None:
    shown = [r for r in d.devices if r.views is not None and r.views.busy_ns > 0]
    if not shown:
        return None
    return max(shown, key=lambda r: r.temporal.busy_ns).views


def _compact(i: int, f: Finding, views: DeviceViews | None) -> dict[str, Any]:
    where = []
    for loc in f.locations[:COMPACT_LOCATIONS]:
        entry: dict[str, Any] = {
            "location": loc.location,
            "lost_ms": _round(loc.lost_ns / 1e6, 2),
            "gaps": loc.gaps,
        }
        row = None if views is None else views.location_rows.get(loc.location)
        if views is not None and row is not None:
            entry["module"] = views.path(row)
        where.append(entry)
    return {
        "finding": i,
        "cause": f.cause,
        "pattern": f.pattern,
        "title": f.title,
        "share_pct": _round(f.share_pct, 1),
        "lost_ms": _round(f.lost_ns / 1e6, 2),
        "cost_usd_per_gpu_hour": _round(f.cost_usd_per_gpu_hour, 2),
        "locations": where,
    }


def _top_modules(views: DeviceViews) -> list[dict[str, Any]]:
    from gpuscope.render.views import top_module_rows  # noqa: PLC0415

    rows = views.module_types
    result = []
    for r in top_module_rows(views):
        path = [r.name]
        up = r.parent
        while up >= 0:
            path.append(rows[up].name)
            up = rows[up].parent
        result.append(
            {
                "module": "/".join(reversed(path)),
                "calls": r.calls,
                "gpu_ms": _round(r.total_ns / 1e6, 2),
                "share_pct": _round(100.0 * r.total_ns / views.busy_ns, 1),
                "self_ms": _round(r.self_ns / 1e6, 2),
                "idle_caused_ms": _round(r.idle_ns / 1e6, 2),
            }
        )
    return result


def _top_operators(views: DeviceViews) -> list[dict[str, Any]]:
    rows = sorted(views.operators, key=lambda r: (-r.self_ns, r.name))[:COMPACT_ROWS]
    return [
        {
            "operator": r.name,
            "launches": r.self_launches,
            "self_ms": _round(r.self_ns / 1e6, 2),
            "share_pct": _round(100.0 * r.self_ns / views.busy_ns, 1),
            "total_ms": _round(r.total_ns / 1e6, 2),
        }
        for r in rows
    ]


def _round(value: float | None, digits: int) -> float | None:
    if value is None or math.isnan(value):  # not available
        return None
    return round(value, digits)
