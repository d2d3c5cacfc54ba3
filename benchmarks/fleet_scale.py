"""How fast ``gpuscope fleet`` gets through many small jobs, and what each worker holds.

Generates ``--jobs`` (1,000) varied jobs with :mod:`gpuscope.testing` into a temporary folder:
seeds, step and layer counts, devices and one injected cause per job vary, and every tenth job is
a two-rank folder. Then, each in a fresh interpreter, runs :func:`gpuscope.fleet.run` with 1 and 2
local workers (and a local Ray cluster of 2 CPUs when ray is installed; its time includes starting
Ray) and prints jobs/s and the peak resident memory of a worker (``ru_maxrss``: the process
itself for 1 worker, its largest child for a pool; Ray's workers are not children of the driver,
so n/a there). All engines must give identical rows.

    python benchmarks/fleet_scale.py                 # 1,000 jobs
    python benchmarks/fleet_scale.py --jobs 200 --no-ray
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpuscope.testing import generator as g

INJECTIONS = [
    g.HostSync,
    g.SlowDataLoader,
    g.PageableH2DCopy,
    g.TinyKernels,
    g.AllocatorChurn,
    g.Fp32Gemm,
    g.MemoryBoundChain,
    g.Checkpoint,
]


def build(folder: Path, jobs: int) -> list[str]:
    """``jobs`` inputs under ``folder``: mostly single traces, every tenth a two-rank folder."""
    rng = random.Random(0)
    paths = []
    for i in range(jobs):
        config = g.GeneratorConfig(
            seed=i,
            steps=rng.randint(3, 8),
            layers=rng.randint(2, 6),
            device=rng.choice(sorted(g.DEVICES)),
            inject=(rng.choice(INJECTIONS)(),),
        )
        if i % 10 == 9:
            job = folder / f"job{i:04d}"
            job.mkdir()
            for rank, trace in enumerate(g.generate_job(config, world_size=2)):
                trace.write(job / f"rank{rank}.json.gz")
        else:
            job = g.generate(config).write(folder / f"job{i:04d}.json.gz")
        paths.append(str(job))
    return paths


def child(folder: Path, engine: str, workers: int) -> None:
    """One measured run, in its own interpreter; prints one JSON line."""
    from gpuscope import fleet

    inputs = fleet.expand([str(folder / "job*")])
    started = time.perf_counter()
    table = fleet.run(inputs, fleet.Engine(engine, workers))
    seconds = time.perf_counter() - started
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    peak_kib = own if engine == "local" and workers == 1 else children
    digest = json.dumps([str(j) for j in table.jobs] + [str(f) for f in table.findings])
    print(
        json.dumps(
            {
                "jobs": len(table.jobs),
                "failed": sum(j.status != "ok" for j in table.jobs),
                "seconds": seconds,
                "peak_worker_mib": peak_kib / 1024 if engine == "local" else None,
                "digest": hashlib.sha256(digest.encode()).hexdigest(),
            }
        )
    )


def measure(folder: Path, engine: str, workers: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", str(folder), engine, str(workers)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--child", nargs=3, metavar=("FOLDER", "ENGINE", "WORKERS"))
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), args.child[1], int(args.child[2]))
        return
    runs = [("local", 1), ("local", 2)]
    if not args.no_ray and importlib.util.find_spec("ray") is not None:
        runs.append(("ray", 2))
    with tempfile.TemporaryDirectory(prefix="gpuscope-fleet-") as tmp:
        started = time.perf_counter()
        build(Path(tmp), args.jobs)
        size = sum(p.stat().st_size for p in Path(tmp).rglob("*") if p.is_file())
        print(
            f"{args.jobs} jobs, {size / 1e6:.1f} MB, generated in "
            f"{time.perf_counter() - started:.1f} s"
        )
        digests = set()
        for engine, workers in runs:
            r = measure(Path(tmp), engine, workers)
            digests.add(r["digest"])
            peak = "n/a" if r["peak_worker_mib"] is None else f"{r['peak_worker_mib']:.0f} MiB"
            print(
                f"{engine:5} x{workers}: {r['jobs'] / r['seconds']:7.1f} jobs/s "
                f"({r['seconds']:.1f} s, {r['failed']:.0f} failed), peak per worker {peak}"
            )
        print("identical rows across runs" if len(digests) == 1 else "ROWS DIFFER across runs")


if __name__ == "__main__":
    main()
