"""What the diagnosis (issue 3) adds to the foundation (issue 2) on one trace, in one process.

Foundation: read the trace and run the timeline analyses (busy/idle, breakdowns, overlap, kernels,
streams, steps). Diagnosis: everything ``gpuscope.diagnose`` does on top (idle attribution, kernel
bounds, findings, verdict). Reports the best of N runs of each and the ratio; target: <= 30%.
``--predictions`` times ``diagnose`` with the what-if replay (the default) against
``--no-predict`` instead, alternating, on one loaded job; target (issue 18): <= 25% slower.

Run: ``python benchmarks/diagnosis_overhead.py [TRACE] [--runs N] [--predictions]``
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from gpuscope.analyses import timeline
from gpuscope.diagnosis import Options, diagnose
from gpuscope.model import Job
from gpuscope.readers import load

DEFAULT = (
    Path(__file__).resolve().parents[2]
    / "shared/corpus/kineto/hta/df_index_resolver/df_index_resolver.json.gz"
)


def foundation(job: Job) -> None:
    for trace in job.traces:
        for device in trace.device_ids:
            work = timeline.device_work(trace, device)
            timeline.temporal_breakdown(work)
            timeline.overlap(work)
            timeline.kernel_breakdown(work, top=10)
            timeline.stream_idle(work)
            timeline.step_breakdown(work)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--predictions", action="store_true", help="time the what-if replay")
    args = parser.parse_args()
    if args.predictions:
        predictions(args.trace, args.runs)
        return
    read_s, found_s, full_s = [], [], []
    for _ in range(args.runs):
        t0 = time.perf_counter()
        job = load(args.trace)
        t1 = time.perf_counter()
        foundation(job)
        t2 = time.perf_counter()
        diagnose(job)
        t3 = time.perf_counter()
        read_s.append(t1 - t0)
        found_s.append(t2 - t1)
        full_s.append(t3 - t2)
    base = min(read_s) + min(found_s)
    extra = min(full_s) - min(found_s)
    print(f"trace: {args.trace}")
    print(f"foundation (read + timeline analyses): {base * 1e3:8.1f} ms")
    print(f"diagnosis on top (attribution, bounds, findings): {extra * 1e3:8.1f} ms")
    verdict = "PASS" if extra <= 0.3 * base else "FAIL"
    print(f"diagnosis adds {100 * extra / base:.1f}% (target <= 30%): {verdict}")


def predictions(trace: Path, runs: int) -> None:
    """``diagnose`` with and without predictions, alternating so both see the same load."""
    job = load(trace)
    on, off = [], []
    for _ in range(runs):
        for predict, times in ((True, on), (False, off)):
            t0 = time.perf_counter()
            diagnose(job, Options(predict=predict))
            times.append(time.perf_counter() - t0)
    extra = min(on) / min(off) - 1.0
    print(f"trace: {trace}")
    print(f"diagnose --no-predict: {min(off) * 1e3:8.1f} ms (best of {runs})")
    print(f"diagnose (predictions): {min(on) * 1e3:8.1f} ms")
    verdict = "PASS" if extra <= 0.25 else "FAIL"
    print(f"predictions add {100 * extra:.1f}% (target <= 25%): {verdict}")


if __name__ == "__main__":
    main()
