"""Where a whole ``gpuscope diagnose FILE`` process spends its time: wall and CPU milliseconds and
page faults at each phase's end, and what a page fault costs on this machine.

    python benchmarks/phases.py [FILE] [--runs 9]

Each run is one ``gpuscope diagnose FILE`` process as the console script runs it (stdout to
/dev/null), started through a driver that stamps each phase as it ends (printed in the order
their medians end; "takes" is from the row above):

- ``interpreter``: Python is up (site included) and runs the driver's first line;
- ``read begun``: the console script has started reading the trace (``_early.start``);
- ``scan done``: the scan thread has the columns (Kineto files; on its own thread, so it
  overlaps the imports);
- ``imports done``: the command has imported what it needs and calls ``load``;
- ``loaded``: the model is built (``load`` returns);
- ``diagnosed``: ``diagnose`` returns;
- ``exit``: the report is written, just before the process exits.

Wall times count from just before the process is spawned (``CLOCK_MONOTONIC``, shared by the
processes), so ``interpreter`` includes the spawn; CPU is the process's, every thread together;
faults are minor page faults (``ru_minflt``), every thread together. The medians over
``--runs`` are printed, and then the cost of one fault here: a fresh page touched for the first
time. The kernel maps each new page a process touches, so a run's faults are about its peak
resident memory over 4 KiB, and on a virtual machine each costs several microseconds (2.9-4.2
on the 2-CPU VM of issue 31: benchmarks/README.md). Less memory is less time there.

The driver runs in :func:`startup.user_environment`, as the speed benchmarks run
gpuscope: bytecode cached, written by one untimed run first.

The driver wraps internal functions (``gpuscope.readers._early.start``, ``_scan.Scan._run``,
``gpuscope.readers.load``, ``gpuscope.diagnosis.diagnose``, ``console._exit_now``): a tool for
finding where time goes, not a contract.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from startup import table, user_environment

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT.parent / "shared/corpus/kineto/hta/df_index_resolver/df_index_resolver.json.gz"
PHASES = (
    "interpreter",
    "read begun",
    "scan done",
    "imports done",
    "loaded",
    "diagnosed",
    "exit",
)

#: The driver: ``python -c DRIVER SPAWNED_NS FILE``. Prints one JSON line of stamps on stderr.
DRIVER = r"""
import os, resource, sys, time
spawned_ns = int(sys.argv[1])
stamps = {}
def stamp(name):
    if name not in stamps:
        stamps[name] = ((time.monotonic_ns() - spawned_ns) / 1e6, time.process_time() * 1e3,
                        resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
stamp("interpreter")
import gpuscope.console as console
from gpuscope.readers import _early, _scan

def timed(function, after):
    def wrapper(*args, **kwargs):
        result = function(*args, **kwargs)
        stamp(after)
        return result
    return wrapper

scan_run = _scan.Scan._run
_scan.Scan._run = timed(scan_run, "scan done")
_early.start = timed(_early.start, "read begun")
original_begin = _early.begin

def begin(*args, **kwargs):
    # run_diagnose calls begin, then imports load and diagnose: patch them as they import.
    import gpuscope.diagnosis as diagnosis
    import gpuscope.readers as readers
    load = readers.load
    def timed_load(*a, **k):
        stamp("imports done")
        result = load(*a, **k)
        stamp("loaded")
        return result
    readers.load = timed_load
    diagnosis.diagnose = timed(diagnosis.diagnose, "diagnosed")
    return original_begin(*args, **kwargs)

_early.begin = begin
exit_now = console._exit_now
def exit_stamped(code):
    sys.stdout.flush()
    stamp("exit")
    print(__import__("json").dumps(stamps), file=sys.stderr)
    exit_now(code)
console._exit_now = exit_stamped
sys.argv = ["gpuscope", "diagnose", sys.argv[2]]
console.main()
"""

#: Touches fresh pages one at a time: the cost of a minor fault, in µs.
FAULT_PROBE = r"""
import mmap, time
pages = 8192
memory = mmap.mmap(-1, pages * 4096)
start = time.perf_counter()
for at in range(0, pages * 4096, 4096):
    memory[at] = 1
print((time.perf_counter() - start) / pages * 1e6)
"""


def one_run(path: Path, env: dict[str, str]) -> dict[str, tuple[float, float, int]]:
    spawned = time.monotonic_ns()
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(spawned), str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"phases: gpuscope diagnose {path} failed: {done.stderr.strip()[-400:]}")
    line = done.stderr.strip().splitlines()[-1]
    return {name: tuple(values) for name, values in json.loads(line).items()}


def fault_cost_us() -> float:
    runs = [
        float(
            subprocess.run(
                [sys.executable, "-c", FAULT_PROBE], capture_output=True, text=True, check=True
            ).stdout
        )
        for _ in range(5)
    ]
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = user_environment(Path(tmp))
        one_run(args.file, env)  # bytecode written, file in the page cache
        runs = [one_run(args.file, env) for _ in range(args.runs)]
    medians = {
        name: tuple(
            statistics.median(run[name][i] for run in runs if name in run) for i in range(3)
        )
        for name in PHASES
        if any(name in run for run in runs)
    }
    rows = [("phase", "ends, ms", "takes, ms", "CPU, ms", "faults", "new")]
    before: tuple[float, ...] = (0.0, 0.0, 0.0)
    # In the order they end: the scan and the imports race, on two threads.
    for name, (wall, cpu, faults) in sorted(medians.items(), key=lambda item: item[1][0]):
        rows.append(
            (
                name,
                f"{wall:.1f}",
                f"{wall - before[0]:.1f}",
                f"{cpu:.1f}",
                f"{faults:.0f}",
                f"{faults - before[2]:.0f}",
            )
        )
        before = (wall, cpu, faults)
    print(f"gpuscope diagnose {args.file.name}: medians of {args.runs} runs")
    print(table(rows))
    cost = fault_cost_us()
    total = statistics.median(run["exit"][2] for run in runs)
    print(
        f"a page fault costs {cost:.2f} µs here (a fresh page's first touch): the run's"
        f" {total:,.0f} faults are ~{total * cost / 1e3:.0f} ms of CPU"
    )


if __name__ == "__main__":
    main()
