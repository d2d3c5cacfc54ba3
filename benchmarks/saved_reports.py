"""Issue #17's figure: `gpuscope report out.json` (from `gpuscope diagnose --json out.json`) writes
the same HTML as `gpuscope report TRACE`, for every corpus file (and the multi-rank folder).

Runs the three commands in-process (click's runner: the command line's code, without a Python
start-up per run) and compares the two reports byte for byte; also checks that the saved
diagnosis reads back equal (its JSON encoding re-encodes to the same bytes). An input gpuscope
refuses (exit 2) must be refused by both `diagnose --json` and `report`.

    python benchmarks/saved_reports.py [CORPUS]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import msgspec
from click.testing import CliRunner

from gpuscope.cli import main
from gpuscope.diagnosis import saved

ROOT = Path(__file__).resolve().parents[1]


def inputs(corpus: Path) -> list[Path]:
    files = [
        p
        for p in sorted(corpus.rglob("*"))
        if p.is_file() and "LICENSES" not in p.parts and p.suffix != ".md"
    ]
    folders = sorted({p.parent for p in files if "rank" in p.parent.name.lower()})
    return files + folders


def check(source: Path, work: Path, runner: CliRunner) -> str:
    out, a, b = work / "saved.json", work / "a.html", work / "b.html"
    for p in (out, a, b):
        p.unlink(missing_ok=True)
    made = runner.invoke(main, ["diagnose", str(source), "--json", str(out)])
    drawn = runner.invoke(main, ["report", str(source), "-o", str(a)])
    if made.exit_code == 2 and drawn.exit_code == 2:
        return "refused"
    if made.exit_code != 0 or drawn.exit_code != 0:
        return f"FAILED (diagnose {made.exit_code}, report {drawn.exit_code})"
    again = runner.invoke(main, ["report", str(out), "-o", str(b)])
    if again.exit_code != 0:
        return f"FAILED (report of the saved JSON: {again.exit_code}: {again.output[-200:]})"
    data = msgspec.json.decode(out.read_bytes())[saved.SAVED_KEY]
    round_trip = msgspec.json.encode(saved.to_builtins(saved.from_builtins(data)))
    if round_trip != msgspec.json.encode(data):
        return "FAILED (the saved diagnosis does not read back equal)"
    if a.read_bytes() != b.read_bytes():
        return "DIFFERENT"
    return "identical"


def run(corpus: Path) -> int:
    runner = CliRunner()
    counts: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for source in inputs(corpus):
            started = time.perf_counter()
            outcome = check(source, Path(tmp), runner)
            counts[outcome.split(" ")[0]] = counts.get(outcome.split(" ")[0], 0) + 1
            took = time.perf_counter() - started
            print(f"{outcome:10} {took:6.1f} s  {source.relative_to(corpus)}", flush=True)
    print(" ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    return 0 if set(counts) <= {"identical", "refused"} else 1


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "corpus"))
