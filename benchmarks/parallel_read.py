"""Reading a folder of per-rank traces: one file after another against all cores.

Builds a folder of N ranks the size of HTA's largest test trace (``df_index_resolver``, 54 MB of
JSON, 123k events), by symlinks (duplicate ranks) or, with ``--distinct-ranks``, by copies whose
``distributedInfo.rank`` is rewritten, then times ``gpuscope.load`` on it with
``GPUSCOPE_WORKERS=1`` and with ``--workers`` processes, best of ``--repeat``, and prints the
ratio. The parsed jobs must be identical. A control runs a CPU-bound loop in one process and in
``--workers`` processes: the most any parallel code can gain on this machine right now (on a
machine shared with other work it can be far below the number of cores).

    python benchmarks/parallel_read.py                 # 8 ranks, 2 workers
    python benchmarks/parallel_read.py --ranks 8 --workers 4 --distinct-ranks
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT.parent / "shared/corpus/kineto/hta/df_index_resolver/df_index_resolver.json.gz"


def build_folder(folder: Path, ranks: int, distinct: bool) -> None:
    if not distinct:
        for rank in range(ranks):
            (folder / f"rank{rank}.json.gz").symlink_to(SOURCE)
        return
    data = gzip.decompress(SOURCE.read_bytes())
    info = re.compile(rb'("distributedInfo"\s*:\s*\{[^}]*"rank"\s*:\s*)\d+')
    for rank in range(ranks):
        rewritten = info.sub(lambda m, r=rank: m.group(1) + str(r).encode(), data, count=1)
        (folder / f"rank{rank}.json.gz").write_bytes(gzip.compress(rewritten, compresslevel=1))


def _cpu_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def timed_load(folder: Path, workers: int, repeat: int) -> tuple[float, float, object]:
    """Best wall time of ``repeat`` loads, the CPU seconds (all processes) of that load, the job."""
    from gpuscope import load

    os.environ["GPUSCOPE_WORKERS"] = str(workers)
    best, cpu, job = float("inf"), 0.0, None
    for _ in range(repeat):
        cpu_start, start = _cpu_s(), time.perf_counter()
        job = load(folder)
        wall = time.perf_counter() - start
        if wall < best:
            best, cpu = wall, _cpu_s() - cpu_start
    return best, cpu, job


def _burn(n: int) -> int:
    total = 0
    for i in range(n):
        total += i * i
    return total


def cpu_ceiling(workers: int, n: int = 8_000_000) -> float:
    """Speed-up of a perfectly parallel CPU-bound loop in ``workers`` processes (started first)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    start = time.perf_counter()
    for _ in range(workers):
        _burn(n)
    alone = time.perf_counter() - start
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        list(pool.map(_burn, [1] * workers))
        start = time.perf_counter()
        list(pool.map(_burn, [n] * workers))
        together = time.perf_counter() - start
    return alone / together


def signature(job: object) -> list[tuple[int | None, int, int]]:
    traces = job.traces  # type: ignore[attr-defined]
    return [(t.rank, len(t.events), int(t.events.start_ns.sum())) for t in traces]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--distinct-ranks", action="store_true")
    args = parser.parse_args()
    if not SOURCE.exists():
        print(f"missing {SOURCE}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        build_folder(folder, args.ranks, args.distinct_ranks)
        load_before = os.getloadavg()[0]
        sequential, cpu_a, job_a = timed_load(folder, 1, args.repeat)
        parallel, cpu_b, job_b = timed_load(folder, args.workers, args.repeat)
    same = signature(job_a) == signature(job_b)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{args.ranks} ranks of {SOURCE.name}, {cores} cores available,")
    print(f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(f"one after another: {sequential:6.2f} s wall, {cpu_a:6.2f} s CPU")
    print(f"{args.workers} readers:         {parallel:6.2f} s wall, {cpu_b:6.2f} s CPU (all)")
    print(f"speed-up:          {sequential / parallel:6.2f}x   identical jobs: {same}")
    ceiling = cpu_ceiling(args.workers)
    print(f"control: a CPU-bound loop gains {ceiling:.2f}x in {args.workers} processes")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
