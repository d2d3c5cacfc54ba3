"""The CPU time of ``diagnose(job, options)`` in one process, as ``gpuscope diagnose FILE`` runs it
(terminal options: ``Options(top_kernels=10, charts=False)``), in two checkouts, alternating.

    python benchmarks/diagnosis_cpu.py BEFORE_TREE AFTER_TREE [FILE...] [--rounds 5] [--repeats 10]

Each round starts one process per checkout (its ``src`` first on ``PYTHONPATH``, bytecode
cached, its C extensions as built there) that reads the file and times, with
``time.process_time``, the first diagnosis (what a command pays: first-use imports and caches
included) and the median of ``--repeats`` more. Checkouts alternate within each round so that a
shared machine's drift falls on both; the medians over rounds are printed, and their sums
over the files. Default file: ``df_index_resolver`` (issue 31). A file one checkout cannot
diagnose stops the run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT.parent / "shared/corpus/kineto/hta/df_index_resolver/df_index_resolver.json.gz"

#: Run in each child: read, then time the first diagnosis and the median of the repeats.
CHILD = """
import gc, json, statistics, sys, time
from pathlib import Path
from gpuscope.diagnosis import Options, diagnose
from gpuscope.readers import load

job = load(Path(sys.argv[1]))
options = Options(top_kernels=10, charts=False)
start = time.process_time()
diagnose(job, options)
first = time.process_time() - start
again = []
for _ in range(int(sys.argv[2])):
    gc.collect()
    start = time.process_time()
    diagnose(job, options)
    again.append(time.process_time() - start)
print(json.dumps({"first": first, "median": statistics.median(again) if again else first}))
"""


def measure(tree: Path, path: Path, repeats: int, cache: Path) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"), PYTHONPYCACHEPREFIX=str(cache))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    run = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(repeats)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(run.stdout.splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("files", type=Path, nargs="*")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    trees = {"before": args.before.resolve(), "after": args.after.resolve()}
    totals = {name: [0.0, 0.0] for name in trees}
    files = args.files or [DEFAULT]
    with tempfile.TemporaryDirectory() as tmp:
        for path in files:
            for name, tree in trees.items():  # untimed: each checkout's bytecode compiled once
                measure(tree, path, 0, Path(tmp) / name)
            seen: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
            for _ in range(args.rounds):
                for name, tree in trees.items():
                    seen[name].append(measure(tree, path, args.repeats, Path(tmp) / name))
            print(path.name)
            for name, runs in seen.items():
                first = statistics.median(r["first"] for r in runs) * 1e3
                again = statistics.median(r["median"] for r in runs) * 1e3
                totals[name][0] += first
                totals[name][1] += again
                print(f"  {name:6}  first diagnosis {first:6.1f} ms   later ones {again:6.1f} ms")
    if len(files) > 1:
        print(f"all {len(files)} files")
        for name, (first, again) in totals.items():
            print(f"  {name:6}  first diagnosis {first:6.0f} ms   later ones {again:6.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
