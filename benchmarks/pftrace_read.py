"""Read speed of PyTorch's ``.pftrace`` against the same run's Kineto JSON.

Each corpus trace is converted to ``.pftrace`` in each of PyTorch's layouts
(``gpuscope.testing.pftrace``: cuspy, gzip as the exporter writes it; monitor, plain) and the files
are read with ``gpuscope.readers.load`` (the JSON through the C scanner, the ``.pftrace`` through
the C walker, where they are built). Reported: the median of ``--runs`` alternating reads of each,
and their ratio (target: ``.pftrace`` within 2x).

    python benchmarks/pftrace_read.py [--runs 5] [--layout cuspy|monitor ...] [TRACE ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gpuscope.readers import load
from gpuscope.testing.pftrace import write_pftrace

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
TRACES = (
    "kineto/hta/df_index_resolver/df_index_resolver.json.gz",
    "kineto/hta/trace_diff/control/control.json.gz",
    "kineto/hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
)


def _seconds(path: Path) -> float:
    start = time.perf_counter()
    load(path)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--layout", action="append", choices=("cuspy", "monitor"), help="default: both"
    )
    args = parser.parse_args()
    traces = args.traces or [CORPUS / t for t in TRACES]
    print("| trace | layout | events | JSON read (s) | .pftrace read (s) | ratio |")
    print("|---|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="gpuscope-pftrace-") as scratch:
        for source in traces:
            for layout in args.layout or ("cuspy", "monitor"):
                converted = write_pftrace(source, Path(scratch) / "run.pftrace", layout)
                events = len(load(converted).traces[0].events)  # also warms both readers up
                load(source)
                json_s, pftrace_s = [], []
                for _ in range(args.runs):
                    json_s.append(_seconds(source))
                    pftrace_s.append(_seconds(converted))
                a, b = statistics.median(json_s), statistics.median(pftrace_s)
                print(
                    f"| {source.name} | {layout} | {events:,} | {a:.3f} | {b:.3f} | {b / a:.2f}x |"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
