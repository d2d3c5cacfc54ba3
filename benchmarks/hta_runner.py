"""Time Holistic Trace Analysis (HTA) 0.5.0 on one Kineto trace and print its figures as JSON.

Run with the interpreter of a separate virtualenv that has ``holistictraceanalysis==0.5.0``
(never gpuscope's own environment)::

    /work/hta-venv/bin/python benchmarks/hta_runner.py TRACE_PATH [--json OUT]

TRACE_PATH is a trace file (``.json`` or ``.json.gz``, symlinked into a temporary directory
because HTA reads directories) or a directory of per-rank traces. The script times, with
``time.perf_counter``, ``TraceAnalysis`` loading, ``get_temporal_breakdown``,
``get_idle_time_breakdown`` and ``get_comm_comp_overlap`` (all with HTA's default options and
``visualize=False``; each step's exception is reported instead of raised), and prints one JSON
object with the timings, the figures and the peak RSS (``ru_maxrss``) to stdout. As in HTA's
defaults, the idle breakdown covers rank 0 only (a ``ValueError`` on traces with no rank 0).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import resource
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

TEMPORAL_COLUMNS = (
    "idle_time(us)",
    "compute_time(us)",
    "non_compute_time(us)",
    "kernel_time(us)",
    "idle_time_pctg",
    "compute_time_pctg",
    "non_compute_time_pctg",
)


def _clean(value: Any) -> Any:
    """Turn numpy scalars into plain JSON values (NaN becomes null)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _records(df: pd.DataFrame, columns: tuple[str, ...]) -> list[dict[str, Any]]:
    return [{c: _clean(v) for c, v in row.items()} for row in df[list(columns)].to_dict("records")]


def _timed(step: Callable[[], Any], timings: dict[str, float]) -> tuple[Any, str | None]:
    """Run one HTA step, recording its wall time under ``timings[step name]``."""
    name = getattr(step, "__name__", "step")
    start = time.perf_counter()
    try:
        result, error = step(), None
    except Exception as exc:  # HTA fails on some real traces; report, do not raise
        result, error = None, f"{type(exc).__name__}: {exc}"
    timings[name] = round(time.perf_counter() - start, 3)
    return result, error


def run(trace: Path) -> dict[str, Any]:
    """Load ``trace`` with HTA, run the three analyses and return timings and figures."""
    start = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis  # imported here: import time is measured

    logging.disable(logging.CRITICAL)  # HTA logs INFO/WARNING to stdout
    timings: dict[str, float] = {"import_hta": round(time.perf_counter() - start, 3)}
    out: dict[str, Any] = {"input": str(trace), "timings_s": timings}
    with tempfile.TemporaryDirectory(prefix="hta_runner_") as tmp:
        trace_dir = trace
        if trace.is_file():
            trace_dir = Path(tmp)
            (trace_dir / trace.name).symlink_to(trace.resolve())

        def load() -> TraceAnalysis:
            return TraceAnalysis(trace_dir=str(trace_dir))

        analysis, error = _timed(load, timings)
    if analysis is None:
        out["load_error"] = error
    else:
        _analyse(analysis, out, timings)
    timings["total"] = round(time.perf_counter() - start, 3)
    # ru_maxrss is KiB on Linux (bytes on macOS). HTA parses several ranks in forked workers,
    # whose peak (the largest child's) is reported apart.
    unit = 1 << 20 if sys.platform == "darwin" else 1 << 10
    for key, who in (
        ("peak_rss_mib", resource.RUSAGE_SELF),
        ("peak_rss_children_mib", resource.RUSAGE_CHILDREN),
    ):
        out[key] = round(resource.getrusage(who).ru_maxrss / unit, 1)
    return out


def _analyse(analysis: Any, out: dict[str, Any], timings: dict[str, float]) -> None:
    """Run the three HTA analyses on a loaded ``TraceAnalysis``, filling ``out``."""
    out["ranks"] = sorted(int(r) for r in analysis.t.traces)

    def temporal() -> pd.DataFrame:
        return analysis.get_temporal_breakdown(visualize=False)

    def idle() -> pd.DataFrame:
        return analysis.get_idle_time_breakdown(visualize=False)[0]

    def overlap() -> pd.DataFrame:
        return analysis.get_comm_comp_overlap(visualize=False)

    df, error = _timed(temporal, timings)
    out["temporal"] = {"error": error} if df is None else _records(df, ("rank", *TEMPORAL_COLUMNS))
    df, error = _timed(idle, timings)
    idle_cols = ("rank", "stream", "idle_category", "idle_time", "idle_time_ratio")
    out["idle"] = {"error": error} if df is None else _records(df, idle_cols)
    df, error = _timed(overlap, timings)
    overlap_cols = ("rank", "comp_comm_overlap_pctg")
    out["overlap"] = {"error": error} if df is None else _records(df, overlap_cols)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time HTA 0.5.0 on one Kineto trace.")
    parser.add_argument("trace", type=Path, help="Kineto trace file or directory of rank traces")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write the JSON here")
    args = parser.parse_args(argv)
    if not args.trace.exists():
        parser.error(f"no such trace: {args.trace}")
    warnings.filterwarnings("ignore")  # pandas Future/Deprecation warnings from HTA
    text = json.dumps(run(args.trace), indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
