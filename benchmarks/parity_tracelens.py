"""Busy and idle against TraceLens's own figures, trace by trace.

TraceLens (AMD-AGI/TraceLens) writes a ``gpu_timeline.csv`` per trace: computation, exposed
communication and memcpy, busy, idle and total, in ms and %. Its copies live in the corpus
(``kineto/tracelens/reference/<trace>.gpu_timeline.csv``). TraceLens measures over the span of the
GPU's own work (first kernel to last); gpuscope's diagnosis measures over what was profiled (the
profiler steps, else the trace's own span; see docs/parity.md). So each trace is compared twice:

* on TraceLens's window: gpuscope's temporal breakdown over the device's own span
  (``device_work(trace, device)`` without a window), which must agree within 1 percentage point;
* as diagnosed: gpuscope's busy % over the profiled window, with the difference explained by the
  host time before the first kernel and after the last (printed beside it).

Run: ``python benchmarks/parity_tracelens.py`` (exit status 1 when a trace disagrees on TraceLens's
window by more than 1 pp).
"""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

from gpuscope.analyses.timeline import device_work, temporal_breakdown
from gpuscope.diagnosis import diagnose
from gpuscope.readers import load

#: Agreement on TraceLens's own window, in percentage points.
TOLERANCE_PP = 1.0


def corpus_root() -> Path:
    default = Path(__file__).resolve().parents[2] / "shared" / "corpus"
    return Path(os.environ.get("GPUSCOPE_CORPUS", default))


def reference(path: Path) -> dict[str, tuple[float, float]]:
    """TraceLens's rows: type -> (ms, %)."""
    with path.open(newline="") as f:
        return {r["type"]: (float(r["time ms"]), float(r["percent"])) for r in csv.DictReader(f)}


def compare(trace_path: Path, ref: dict[str, tuple[float, float]]) -> dict[str, float]:
    """gpuscope's figures for the trace's busiest device beside TraceLens's."""
    job = load(trace_path)
    trace = job.traces[0]
    device = max(trace.device_ids, key=lambda d: device_work(trace, d).busy.total_ns)
    own = temporal_breakdown(device_work(trace, device))
    d = diagnose(job)
    report = next(r for r in d.devices if r.device == device)
    return {
        "tracelens_busy": ref["busy_time"][1],
        "tracelens_idle": ref["idle_time"][1],
        "tracelens_total_ms": ref["total_time"][0],
        "busy": own.pct(own.busy_ns),
        "idle": own.pct(own.idle_ns),
        "total_ms": own.span_ns / 1e6,
        "window_busy": report.temporal.pct(report.temporal.busy_ns),
        "window_ms": report.temporal.span_ns / 1e6,
    }


def main() -> int:
    root = corpus_root() / "kineto" / "tracelens"
    refs = sorted((root / "reference").glob("*.gpu_timeline.csv"))
    if not refs:
        print(f"no TraceLens references under {root / 'reference'}")
        return 1
    print(
        f"{'trace':52} {'TL busy':>8} {'busy':>7} {'Δ pp':>6} {'TL idle':>8} {'idle':>7}"
        f" {'Δ pp':>6} {'TL span':>9} {'span':>9}  {'diagnosed: busy of window':>26}"
    )
    worst = 0.0
    for ref_path in refs:
        name = ref_path.name.removesuffix(".gpu_timeline.csv")
        trace = root / f"{name}.json.gz"
        r = compare(trace, reference(ref_path))
        db, di = r["busy"] - r["tracelens_busy"], r["idle"] - r["tracelens_idle"]
        worst = max(worst, abs(db), abs(di))
        print(
            f"{name:52} {r['tracelens_busy']:8.2f} {r['busy']:7.2f} {db:+6.2f}"
            f" {r['tracelens_idle']:8.2f} {r['idle']:7.2f} {di:+6.2f}"
            f" {r['tracelens_total_ms']:9.2f} {r['total_ms']:9.2f}"
            f"  {r['window_busy']:7.2f}% of {r['window_ms']:9.2f} ms"
        )
    verdict = "agree" if worst <= TOLERANCE_PP else "DISAGREE"
    print(
        f"\nlargest difference on TraceLens's window: {worst:.2f} pp"
        f" ({verdict}, bar {TOLERANCE_PP})"
    )
    return 0 if worst <= TOLERANCE_PP else 1


if __name__ == "__main__":
    sys.exit(main())
