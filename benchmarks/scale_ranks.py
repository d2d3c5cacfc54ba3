"""One job of many ranks on an engine: wall time, cost per rank and the driver's peak memory.

Generates jobs of ``--ranks`` (64, 256 and 1,024) small ranks with :mod:`gpuscope.testing` (2
steps of one layer, a straggler planted at rank ``n/2 + 5``) under ``--tmp`` (``/tmp``), then,
each in a fresh interpreter, diagnoses each job with ``gpuscope.distributed.diagnose_job`` on the
local pool and on a local Ray cluster (when ray is installed), both of ``--workers`` (2) CPUs, and
prints: wall time (Ray's includes starting it), wall time per rank, the driver's peak resident
memory (``ru_maxrss`` of the driver process alone: the pool's workers and Ray's are other
processes), the bytes the driver held per rank (the reports, encoded), and whether the planted
straggler was named. Every engine must give the same diagnosis (a digest of its JSON, less the
engine's name).

    python benchmarks/scale_ranks.py                       # 64, 256 and 1,024 ranks
    python benchmarks/scale_ranks.py --ranks 64 --no-ray
    python benchmarks/scale_ranks.py --one-process 64 256  # and the one-process diagnose
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpuscope.testing.generator import GeneratorConfig, Straggler, generate_job


def straggler_of(ranks: int) -> int:
    return ranks // 2 + 5


def build(folder: Path, ranks: int) -> float:
    """The job's rank files under ``folder`` (made once, kept for the next run); seconds spent."""
    done = folder / ".complete"
    if done.exists():
        return 0.0
    started = time.perf_counter()
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    config = GeneratorConfig(
        seed=3, steps=2, layers=1, inject=(Straggler(rank=straggler_of(ranks), extra_ms=2.0),)
    )
    for rank, trace in enumerate(generate_job(config, world_size=ranks)):
        trace.write(folder / f"rank{rank:04d}.json.gz")
    done.touch()
    return time.perf_counter() - started


def child(folder: Path, engine: str, workers: int) -> None:
    """One measured run, in its own interpreter; prints one JSON line."""
    from msgspec.structs import replace

    from gpuscope.distributed import diagnose_job
    from gpuscope.engines import Engine
    from gpuscope.render.job import job_document

    started = time.perf_counter()
    if engine == "one-process":
        from gpuscope import diagnose, load

        d = diagnose(load(folder))
        named = [s.rank for s in d.ranks.stragglers] if d.ranks is not None else []
        ranks, per_rank, digest = len(d.devices), None, None
    else:
        job = diagnose_job(folder, Engine(engine, workers))
        named = [s.rank for s in job.ranks.stragglers] if job.ranks is not None else []
        ranks, per_rank = job.ranks_read, job.bytes_per_rank
        document = job_document(replace(job, engine=""))
        digest = hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()
    seconds = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps(
            {
                "ranks": ranks,
                "seconds": seconds,
                "driver_peak_mib": peak_kib / 1024,
                "bytes_per_rank": per_rank,
                "stragglers": named,
                "digest": digest,
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
    parser.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tmp", type=Path, default=Path("/tmp"))
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--one-process", type=int, nargs="*", default=[], metavar="RANKS")
    parser.add_argument("--child", nargs=3, metavar=("FOLDER", "ENGINE", "WORKERS"))
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), args.child[1], int(args.child[2]))
        return
    engines = ["local"]
    if not args.no_ray and importlib.util.find_spec("ray") is not None:
        engines.append("ray")
    print("ranks  engine       wall s  ms/rank  driver peak  KB/rank  straggler")
    for ranks in args.ranks:
        folder = args.tmp / f"gpuscope-scale-ranks-{ranks}"
        spent = build(folder, ranks)
        size = sum(p.stat().st_size for p in folder.iterdir())
        if spent:
            print(
                f"# {ranks} ranks generated in {spent:.0f} s: {size / 1e6:.0f} MB gzip in {folder}"
            )
        digests = set()
        runs = engines + (["one-process"] if ranks in args.one_process else [])
        for engine in runs:
            r = measure(folder, engine, args.workers)
            if r["digest"] is not None:
                digests.add(r["digest"])
            per_rank = "" if r["bytes_per_rank"] is None else f"{r['bytes_per_rank'] / 1e3:7.1f}"
            named = r["stragglers"] == [straggler_of(ranks)]
            print(
                f"{ranks:5}  {engine:11} {r['seconds']:7.1f}  {1e3 * r['seconds'] / ranks:7.1f}"
                f"  {r['driver_peak_mib']:7.0f} MiB  {per_rank:>7}  "
                + ("named" if named else f"WRONG {r['stragglers']}")
            )
        print("# same diagnosis on every engine" if len(digests) == 1 else "# ENGINES DIFFER")


if __name__ == "__main__":
    main()
