"""Busy and idle against TraceLens's own figures, trace by trace.

TraceLens (AMD-AGI/TraceLens) writes a ``gpu_timeline.csv`` per trace: computation, exposed
communication and memcpy, busy, idle and total, in ms and %. Its copies live in the corpus
(``kineto/tracelens/reference/<trace>.gpu_timeline.csv``). TraceLens measures over the span of the
GPU's own work (first kernel to last); gpuscope's diagnosis measures over what was profiled (the
profiler steps, else the trace's own span; see docs/parity.md). So each trace is compared twice:

* on TraceLens's window (the device-side ``ProfilerStep`` range when the trace has one, else
  the device's own span): gpuscope's busy and idle there, which must agree within 1 percentage
  point;
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

import numpy as np

from gpuscope.analyses.intervals import clip
from gpuscope.analyses.timeline import device_work
from gpuscope.diagnosis import diagnose
from gpuscope.model import Kind, Trace
from gpuscope.readers import load

#: Agreement on TraceLens's own window, in percentage points.
TOLERANCE_PP = 1.0


def corpus_root() -> Path:
    default = Path(__file__).resolve().parents[2] / "shared" / "corpus"
    return Path(os.environ.get("GPUSCOPE_CORPUS", default))


def reference(path: Path) -> tuple[dict[str, tuple[float, float]], bool]:
    """TraceLens's rows (type -> (ms, %)), and whether it split the trace by recompute (then
    the rows are those of the kernels that are not recomputation, over their own span)."""
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    split = any("is_recompute" in r for r in rows)
    kept = [r for r in rows if r.get("is_recompute", "False") == "False"]
    return {r["type"]: (float(r["time ms"]), float(r["percent"])) for r in kept}, split


def tracelens_window(trace: Trace, device: int) -> tuple[int, int]:
    """TraceLens's span: the device-side ``ProfilerStep`` ranges (Kineto's
    ``gpu_user_annotation``) when they cover most of the device's work, else the device's own
    span (first device work to last)."""
    work = device_work(trace, device)
    lo, hi = work.span_start_ns, work.span_end_ns
    ev = trace.events
    rows = np.flatnonzero((ev.kind == Kind.GPU_ANNOTATION) & (ev.device == device))
    steps = [r for r in rows.tolist() if trace.name(r).startswith("ProfilerStep#")]
    if steps:
        a, b = int(ev.start_ns[steps].min()), int(ev.end_ns[steps].max())
        if 2 * (b - a) >= hi - lo:
            return a, b
    return lo, hi


def compare(trace_path: Path, ref: dict[str, tuple[float, float]]) -> dict[str, float]:
    """gpuscope's figures for the trace's busiest device beside TraceLens's."""
    job = load(trace_path)
    trace = job.traces[0]
    device = max(trace.device_ids, key=lambda d: device_work(trace, d).busy.total_ns)
    lo, hi = tracelens_window(trace, device)
    busy = clip(device_work(trace, device).busy, lo, hi).total_ns
    d = diagnose(job)
    report = next(r for r in d.devices if r.device == device)
    return {
        "tracelens_busy": ref["busy_time"][1],
        "tracelens_idle": ref["idle_time"][1],
        "tracelens_total_ms": ref["total_time"][0],
        "busy": 100.0 * busy / (hi - lo),
        "idle": 100.0 * (hi - lo - busy) / (hi - lo),
        "total_ms": (hi - lo) / 1e6,
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
        ref, split = reference(ref_path)
        r = compare(trace, ref)
        db, di = r["busy"] - r["tracelens_busy"], r["idle"] - r["tracelens_idle"]
        if split:
            name += " *"  # TraceLens's figures are of its non-recompute kernels: not compared
        else:
            worst = max(worst, abs(db), abs(di))
        print(
            f"{name:52} {r['tracelens_busy']:8.2f} {r['busy']:7.2f} {db:+6.2f}"
            f" {r['tracelens_idle']:8.2f} {r['idle']:7.2f} {di:+6.2f}"
            f" {r['tracelens_total_ms']:9.2f} {r['total_ms']:9.2f}"
            f"  {r['window_busy']:7.2f}% of {r['window_ms']:9.2f} ms"
        )
    print(
        "* TraceLens split this trace by activation recomputation and measured each part over"
        " its own span (docs/parity.md): not one window to compare"
    )
    verdict = "agree" if worst <= TOLERANCE_PP else "DISAGREE"
    print(
        f"\nlargest difference on TraceLens's window: {worst:.2f} pp"
        f" ({verdict}, bar {TOLERANCE_PP})"
    )
    return 0 if worst <= TOLERANCE_PP else 1


if __name__ == "__main__":
    sys.exit(main())
