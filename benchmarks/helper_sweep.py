"""Where the diagnosis's helper thread pays: each corpus timeline diagnosed in process with the
helper and without, alternating, and the ratio of the medians (below 1: the helper is faster).

    python benchmarks/helper_sweep.py [--repeats 7] [FILE ...]

Default files: the Kineto and Nsight Systems timelines of ``../shared/corpus``. The helper is
forced on (``HELPER_MIN_EVENTS`` 0, no ceiling) or off (one CPU) whatever the trace's length, so
the rows show what ``diagnosis.HELPER_MIN_EVENTS`` and ``HELPER_MAX_EVENTS`` were chosen from
(benchmarks/README.md, issue 31 session 13). Rows are sorted by events; a file that does not
read or holds no timeline is left out.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from pathlib import Path

from gpuscope import _aside, diagnosis
from gpuscope.diagnosis import Options, diagnose
from gpuscope.errors import InputError
from gpuscope.readers import load

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"


def _files() -> list[Path]:
    kineto = [p for p in (CORPUS / "kineto").rglob("*.json*") if "reference" not in p.parts]
    return sorted(kineto + list((CORPUS / "nsys").rglob("*.sqlite")))


def _median_ms(job: object, options: Options, helper: bool, repeats: int) -> float:
    diagnosis.HELPER_MIN_EVENTS, diagnosis.HELPER_MAX_EVENTS = (0, 1 << 62) if helper else (1, 0)
    times = []
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        diagnose(job, options)  # type: ignore[arg-type]
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    _aside._cpus = lambda: 2  # the comparison itself; the machine needs two cores for it
    options = Options(top_kernels=10, charts=False)  # as `gpuscope diagnose` runs
    rows = []
    for path in args.files or _files():
        try:
            job = load(path)
        except InputError:
            continue
        if not job.traces:
            continue
        diagnose(job, options)  # first-use imports and caches, untimed
        on = off = 0.0
        for _ in range(2):  # alternating halves: drift falls on both
            on += _median_ms(job, options, True, args.repeats) / 2
            off += _median_ms(job, options, False, args.repeats) / 2
        events = sum(len(t.events) for t in job.traces)
        rows.append((events, len(job.traces), on, off, path))
    print(f"{'events':>9} {'traces':>6} {'helper ms':>9} {'alone ms':>9} {'ratio':>6}  file")
    for events, traces, on, off, path in sorted(rows, key=lambda r: r[0]):
        name = path.relative_to(CORPUS) if path.is_relative_to(CORPUS) else path
        print(f"{events:>9,} {traces:>6} {on:>9.1f} {off:>9.1f} {on / off:>6.2f}  {name}")


if __name__ == "__main__":
    main()
