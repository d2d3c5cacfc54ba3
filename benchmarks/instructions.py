"""Instructions of ``gpuscope diagnose`` on three corpus files, against a committed budget.

    python benchmarks/instructions.py            # measure; exit 1 when a file is over budget
    python benchmarks/instructions.py --write    # measure and write the counts as the budget
    python benchmarks/instructions.py --json OUT # also write what was measured

Wall time on a shared machine moves by 10-30% from hour to hour; the number of instructions a
run executes does not. Each file is diagnosed once under valgrind's cachegrind (no cache
simulation), every process counted (the console script's forked reader included), and the total
compared with ``benchmarks/instructions.json``: more than :data:`TOLERANCE` above it fails.
``scripts/check`` runs this when valgrind is installed.

What makes a count repeatable:

- The run is the user's: bytecode compiled once beforehand into a private cache (an untimed run
  outside valgrind), so the count is the program's work, not the compiler's on its source
  (comments and docstrings cost nothing).
- A fixed environment: hash seed 0 (set and dict orders of strings), one BLAS thread, a fixed
  terminal width, no colour, address space randomisation off (``setarch -R``) where it can be.
- Output to a file, never a terminal.

The budget is raised only in a commit that says why (a new analysis on every run is a reason; a
slower implementation of an old one is not). Cost: ~15 s of CPU for the three files under
valgrind, run two at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUDGET = ROOT / "benchmarks" / "instructions.json"
#: The corpus files: a 54 MB Kineto trace with every analysis busy (memory events, start-up,
#: predictions), an Nsight Systems export of two GPUs (read by the forked child), and a ROCm
#: trace of HIP graphs.
FILES = (
    "kineto/hta/df_index_resolver/df_index_resolver.json.gz",
    "nsys/nsys-ai/h100_2gpu_1s.sqlite",
    "kineto/tracelens/mi300x_vllm_prefilldecode_piecewise_graphs.json.gz",
)
#: How far above its budget a count may go before the check fails.
TOLERANCE = 0.05
_REFS = re.compile(r"^==\d+== I\s+refs:\s+([\d,]+)", re.MULTILINE)


def corpus_root() -> Path:
    return Path(os.environ.get("GPUSCOPE_CORPUS", ROOT.parent / "shared" / "corpus"))


def environment(cache: Path) -> dict[str, str]:
    """The fixed environment every measured run gets."""
    keep = ("PATH", "HOME", "VIRTUAL_ENV")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(
        PYTHONHASHSEED="0",
        PYTHONPYCACHEPREFIX=str(cache),
        OPENBLAS_NUM_THREADS="1",
        LANG="C.UTF-8",
        LC_ALL="C.UTF-8",
        COLUMNS="100",
        LINES="50",
        TERM="dumb",
        NO_COLOR="1",
    )
    return env


def _command(path: Path) -> list[str]:
    return [sys.executable, "-m", "gpuscope", "diagnose", str(path)]


def count(path: Path, work: Path, env: dict[str, str]) -> int:
    """Instructions of one ``gpuscope diagnose`` of ``path``, every process added up."""
    work.mkdir(parents=True, exist_ok=True)
    with (work / "warm.txt").open("wb") as out:
        warm = subprocess.run(
            _command(path), check=False, env=env, stdout=out, stderr=subprocess.PIPE
        )
    if warm.returncode != 0:
        raise RuntimeError(f"{path}: gpuscope diagnose failed: {warm.stderr.decode()[-400:]}")
    setarch = [shutil.which("setarch") or "", "-R"] if shutil.which("setarch") else []
    if (
        setarch
        and subprocess.run([*setarch, "true"], capture_output=True, check=False).returncode != 0
    ):
        setarch = []  # a container that forbids personality(2)
    valgrind = [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        "--trace-children=yes",
        f"--cachegrind-out-file={work}/cg.%p",
    ]
    with (work / "report.txt").open("wb") as out:
        done = subprocess.run(
            [*setarch, *valgrind, *_command(path)],
            check=False,
            env=env,
            stdout=out,
            stderr=subprocess.PIPE,
        )
    log = done.stderr.decode(errors="replace")
    if done.returncode != 0:
        raise RuntimeError(f"{path}: valgrind run failed ({done.returncode}): {log[-400:]}")
    refs = [int(m.replace(",", "")) for m in _REFS.findall(log)]
    if not refs:
        raise RuntimeError(f"{path}: no instruction count in valgrind's output: {log[-400:]}")
    return sum(refs)


def measure(files: list[str]) -> dict[str, int]:
    corpus = corpus_root()
    with tempfile.TemporaryDirectory(prefix="gpuscope-instructions-") as tmp:
        env = environment(Path(tmp) / "pycache")
        jobs = [(name, corpus / name, Path(tmp) / str(i)) for i, name in enumerate(files)]
        with ThreadPoolExecutor(max_workers=2) as pool:
            counted = list(pool.map(lambda job: count(job[1], job[2], env), jobs))
    return dict(zip(files, counted, strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the counts as the budget")
    parser.add_argument("--json", type=Path, help="also write the counts measured here")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("instructions: valgrind is not installed; nothing measured")
        return 0
    missing = [f for f in FILES if not (corpus_root() / f).exists()]
    if missing:  # a failure in CI, as the tests' corpus (tests/corpus.py); a skip elsewhere
        print(f"instructions: corpus file(s) missing under {corpus_root()}: {', '.join(missing)}")
        return 1 if os.environ.get("CI", "").lower() == "true" else 0
    counts = measure(list(FILES))
    if args.json is not None:
        args.json.write_text(json.dumps(counts, indent=1) + "\n")
    if args.write:
        BUDGET.write_text(json.dumps(counts, indent=1) + "\n")
        for name, n in counts.items():
            print(f"{name}: {n:,} instructions (written as the budget)")
        return 0
    budget: dict[str, int] = json.loads(BUDGET.read_text())
    failed = False
    for name, n in counts.items():
        allowed = budget.get(name)
        if allowed is None:
            print(f"{name}: {n:,} instructions, no budget (run with --write)")
            failed = True
            continue
        change = n / allowed - 1
        over = change > TOLERANCE
        failed |= over
        verdict = "OVER BUDGET" if over else "ok"
        print(f"{name}: {n:,} instructions, budget {allowed:,} ({change:+.1%}): {verdict}")
    if failed:
        print(
            f"instructions: above the budget by more than {TOLERANCE:.0%}; find the cost"
            " (valgrind --tool=callgrind) or raise benchmarks/instructions.json in a commit"
            " that says why"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
