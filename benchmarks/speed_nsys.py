"""gpuscope against nsys-ai on an Nsight Systems export, side by side in one run; and scaling.

Run from the repository root with gpuscope's environment::

    python benchmarks/speed_nsys.py [--export PATH] [--nsys-ai PATH] [--repeats 5]
                                    [--kernels 1000000] [--top-repeats 2] [--no-scaling]
                                    [--strict] [--json OUT]

Contract: prints one table of measurements and one of targets with PASS/FAIL (``--json OUT``
also writes them); exits 0, or 1 with ``--strict`` when a target fails.

a. Whole process, as users run each tool: ``gpuscope diagnose EXPORT`` against
   ``nsys-ai diagnose EXPORT`` (stdout to /dev/null), alternating, ``--repeats`` times each.
   nsys-ai writes next to the profile (a Parquet cache, and SQLite indexes into the export itself
   when it falls back to sqlite3) and into its working directory (a session): every *cold* run gets
   a fresh copy of the export in a fresh directory, which is what a user meets on a new profile;
   the *warm* runs reuse one copy whose cache the first run built. Wall time is the target; the
   CPU time of each process (all its threads) is reported beside it. Both tools run with a warm
   bytecode cache (``PYTHONDONTWRITEBYTECODE`` removed, ``PYTHONPYCACHEPREFIX`` in the temporary
   directory), as an installed tool runs. Before timing, DuckDB's
   ``sqlite_scanner`` extension is installed into nsys-ai's environment from the
   ``duckdb-extension-sqlite-scanner`` wheel (nsys-ai attaches the export with DuckDB, which
   otherwise tries to download the extension, fails offline and falls back to sqlite3). Target:
   gpuscope >= 5x faster than nsys-ai cold and warm (min and median; issue 31's bar is warm).
b. Linear in rows: the export's activity tables (kernels, copies, memsets, syncs, runtime calls,
   NVTX ranges) replicated 1x, 4x and enough times for ~``--kernels`` kernels, each copy shifted
   past the previous one's end with correlation ids offset to stay unique (SQL
   ``INSERT ... SELECT`` into a temporary copy); ``diagnose(load(path))`` in process on each.
   Target: CPU time per row at the largest size <= 1.5x the CPU time per row at 4x. CPU time,
   because wall time on a shared machine mostly measures the neighbours; wall is printed too.
"""

from __future__ import annotations

import argparse
import gc
import json
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from startup import FLOOR_LABEL, budget_note, floor_command, table, user_environment

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_EXPORT = ROOT.parent / "shared/corpus/nsys/nsys-ai/h100_2gpu_1s.sqlite"
DEFAULT_NSYS_AI = Path("/work/nsysai-venv/bin/nsys-ai")
SPEEDUP_TARGET = 5.0
LINEARITY_TARGET = 1.5
ACTIVITY_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS",
)
_INSTALL_EXTENSION = """
import pathlib, duckdb
try:
    import duckdb_extension_sqlite_scanner as wheel
except ImportError:
    print("no-wheel"); raise SystemExit
db = duckdb.connect()
known = "SELECT installed FROM duckdb_extensions() WHERE extension_name = 'sqlite_scanner'"
if not (db.execute(known).fetchone() or [False])[0]:
    shipped = pathlib.Path(wheel.__file__).parent / "extensions"
    db.execute(f"INSTALL '{next(shipped.glob('*/sqlite_scanner.duckdb_extension'))}'")
db.execute("LOAD sqlite_scanner")
print("duckdb", duckdb.__version__, "sqlite_scanner loaded")
"""


@dataclass(frozen=True)
class Series:
    label: str
    wall_s: list[float]
    cpu_s: list[float]  # user + system time of the process and its threads

    @property
    def min_s(self) -> float:
        return min(self.wall_s)

    @property
    def median_s(self) -> float:
        return statistics.median(self.wall_s)

    @property
    def cpu_min_s(self) -> float:
        return min(self.cpu_s)


@dataclass(frozen=True)
class Target:
    name: str
    measured: str
    target: str
    passed: bool


# --- a. whole process ----------------------------------------------------------------------------


def timed_run(command: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, all threads) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False
    )
    wall_s = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        stderr = done.stderr.decode(errors="replace").strip()[-400:]
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {stderr}")
    cpu_s = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall_s, cpu_s


def install_extension(nsys_ai: Path) -> str:
    """Install DuckDB's sqlite_scanner into nsys-ai's environment from its PyPI wheel."""
    python = nsys_ai.parent / "python"
    done = subprocess.run(
        [str(python), "-c", _INSTALL_EXTENSION], capture_output=True, text=True, check=False
    )
    if done.returncode != 0 or "no-wheel" in done.stdout:
        return (
            "sqlite_scanner NOT installed (pip install 'duckdb==1.5.5'"
            " 'duckdb-extension-sqlite-scanner==1.5.5' into nsys-ai's venv): nsys-ai falls back"
            " to sqlite3 after a failed download"
        )
    return done.stdout.strip().splitlines()[-1]  # DuckDB may draw a progress bar before it


def gpuscope_command() -> list[str]:
    script = Path(sys.executable).parent / "gpuscope"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "gpuscope"]


def whole_process(export: Path, nsys_ai: Path, repeats: int, tmp: Path) -> list[Series]:
    """gpuscope, nsys-ai cold (fresh copy, fresh directory) and nsys-ai warm, alternating."""
    warm_dir = tmp / "warm"
    warm_dir.mkdir()
    warm_copy = warm_dir / export.name
    shutil.copyfile(export, warm_copy)
    env = user_environment(tmp)
    timed_run([str(nsys_ai), "diagnose", str(warm_copy)], warm_dir, env)  # builds the warm cache
    ours = [*gpuscope_command(), "diagnose", str(export)]
    timed_run(ours, tmp, env)  # the same first-run courtesy: compiled bytecode, page cache
    # What no work at all costs: the interpreter and the libraries gpuscope diagnose imports.
    floor = floor_command("sqlite3")
    runs: dict[str, list[tuple[float, float]]] = {
        "gpuscope diagnose": [],
        FLOOR_LABEL: [],
        "nsys-ai cold": [],
        "nsys-ai warm": [],
    }
    for i in range(repeats):
        runs["gpuscope diagnose"].append(timed_run(ours, tmp, env))
        runs[FLOOR_LABEL].append(timed_run(floor, tmp, env))
        cold_dir = tmp / f"cold{i}"
        cold_dir.mkdir()
        cold_copy = cold_dir / export.name
        shutil.copyfile(export, cold_copy)
        cold = [str(nsys_ai), "diagnose", str(cold_copy)]
        runs["nsys-ai cold"].append(timed_run(cold, cold_dir, env))
        warm = [str(nsys_ai), "diagnose", str(warm_copy)]
        runs["nsys-ai warm"].append(timed_run(warm, warm_dir, env))
    return [Series(label, [w for w, _ in r], [c for _, c in r]) for label, r in runs.items()]


def speed_targets(series: list[Series]) -> list[Target]:
    by_label = {s.label: s for s in series}
    ours = by_label["gpuscope diagnose"]
    targets = []
    for label in ("nsys-ai cold", "nsys-ai warm"):
        theirs = by_label[label]
        at_min, at_median = theirs.min_s / ours.min_s, theirs.median_s / ours.median_s
        cpu = theirs.cpu_min_s / ours.cpu_min_s
        targets.append(
            Target(
                f"a. speed-up vs {label} (wall)",
                f"{at_min:.2f}x min, {at_median:.2f}x median; CPU time {cpu:.2f}x",
                f">= {SPEEDUP_TARGET:.0f}x",
                min(at_min, at_median) >= SPEEDUP_TARGET,
            )
        )
    return targets


# --- b. scaling ----------------------------------------------------------------------------------


def replicate(source: Path, copies: int, out: Path) -> dict[str, int]:
    """``copies`` copies of the activity tables in ``out``; returns row counts per table."""
    shutil.copyfile(source, out)
    db = sqlite3.connect(out)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    present = [t for t in ACTIVITY_TABLES if t in tables]
    bounds = db.execute(
        "SELECT MIN(lo), MAX(hi) FROM ("
        + " UNION ALL ".join(f"SELECT MIN(start) AS lo, MAX(end) AS hi FROM {t}" for t in present)
        + ")"
    ).fetchone()
    shift_ns = int(bounds[1] - bounds[0]) + 1_000_000
    correlation_step = 1 + max(
        int(db.execute(f"SELECT COALESCE(MAX(correlationId), 0) FROM {t}").fetchone()[0])
        for t in present
        if t != "NVTX_EVENTS"
    )
    for name in present:
        columns = [r[1] for r in db.execute(f"PRAGMA table_info('{name}')")]
        last_original = int(db.execute(f"SELECT COALESCE(MAX(rowid), 0) FROM {name}").fetchone()[0])
        for k in range(1, copies):
            select = [_shifted(c, k * shift_ns, k * correlation_step) for c in columns]
            db.execute(
                f"INSERT INTO {name} ({', '.join(columns)}) SELECT {', '.join(select)}"
                f" FROM {name} WHERE rowid <= {last_original}"
            )
    counts = {t: int(db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) for t in present}
    db.commit()
    db.close()
    return counts


def _shifted(column: str, shift_ns: int, correlation_step: int) -> str:
    if column in ("start", "end"):
        return f"{column} + {shift_ns}"
    if column == "correlationId":
        return f"{column} + {correlation_step}"
    return column


def in_process(path: Path) -> tuple[float, float]:
    """Wall and CPU seconds of ``diagnose(load(path))``."""
    from gpuscope.diagnosis import diagnose
    from gpuscope.readers import load

    gc.collect()
    start, start_cpu = time.perf_counter(), time.process_time()
    diagnose(load(path))
    return time.perf_counter() - start, time.process_time() - start_cpu


# --- the report ----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", type=Path, default=DEFAULT_EXPORT)
    parser.add_argument("--nsys-ai", type=Path, default=DEFAULT_NSYS_AI)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kernels", type=int, default=1_000_000, help="kernels at the top size")
    parser.add_argument("--top-repeats", type=int, default=2, help="runs at the top size")
    parser.add_argument("--no-scaling", action="store_true", help="skip part b")
    parser.add_argument("--json", type=Path, metavar="OUT", help="also write results as JSON")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target fails")
    args = parser.parse_args(argv)
    if not args.export.exists():
        parser.error(f"no such export: {args.export}")
    rows: list[tuple[str, ...]] = [("measurement", "min s", "median s", "note")]
    targets: list[Target] = []
    note = ""
    result: dict[str, object] = {"export": str(args.export)}
    with tempfile.TemporaryDirectory(prefix="speed_nsys_") as tmp_name:
        tmp = Path(tmp_name)
        if args.nsys_ai.exists():
            extension = install_extension(args.nsys_ai)
            series = whole_process(args.export, args.nsys_ai, args.repeats, tmp)
            for s in series:
                rows.append((s.label, f"{s.min_s:.3f}", f"{s.median_s:.3f}", ""))
            rows.append(("(nsys-ai's DuckDB)", "", "", extension))
            targets += speed_targets(series)
            by_label = {s.label: s for s in series}
            note = budget_note(
                "nsys-ai cold",
                by_label["nsys-ai cold"].min_s,
                by_label[FLOOR_LABEL].min_s,
                by_label["gpuscope diagnose"].min_s,
                SPEEDUP_TARGET,
            )
            result["whole_process"] = [asdict(s) for s in series]
            result["duckdb_extension"] = extension
        else:
            print(
                f"nsys-ai not found at {args.nsys_ai}; part a skipped. To create it:\n"
                "  python3 -m venv /work/nsysai-venv && /work/nsysai-venv/bin/pip install"
                " nsys-ai 'duckdb==1.5.5' 'duckdb-extension-sqlite-scanner==1.5.5'\n",
                file=sys.stderr,
            )
        if not args.no_scaling:
            runs = (args.repeats, args.top_repeats)
            scaling = scale(args.export, args.kernels, runs, tmp, rows)
            targets.append(scaling_target(scaling))
            result["scaling"] = scaling
    print(f"export: {args.export}\n")
    print(table(rows))
    print()
    target_rows = [("target", "measured", "goal", "result")]
    target_rows += [(t.name, t.measured, t.target, "PASS" if t.passed else "FAIL") for t in targets]
    print(table(target_rows))
    print(note)
    if args.json:
        result["targets"] = [asdict(t) for t in targets]
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 1 if args.strict and not all(t.passed for t in targets) else 0


def scale(
    export: Path,
    kernels: int,
    runs: tuple[int, int],
    tmp: Path,
    rows: list[tuple[str, ...]],
) -> list[dict[str, float]]:
    """``runs``: how often to time the small sizes, and the largest (each takes a while)."""
    repeats, top_repeats = runs
    base = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    base_kernels = int(
        base.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    )
    base.close()
    sizes = sorted({1, 4, max(4, round(kernels / base_kernels))})
    results = []
    for copies in sizes:
        path = tmp / f"x{copies}.sqlite"
        counts = replicate(export, copies, path)
        n_rows = sum(counts.values())
        times = [in_process(path) for _ in range(repeats if copies < 16 else top_repeats)]
        wall = min(t[0] for t in times)
        cpu = min(t[1] for t in times)
        results.append(
            {
                "copies": copies,
                "kernels": counts["CUPTI_ACTIVITY_KIND_KERNEL"],
                "rows": n_rows,
                "wall_s": wall,
                "cpu_s": cpu,
                "ns_per_row": cpu / n_rows * 1e9,
                "wall_ns_per_row": wall / n_rows * 1e9,
            }
        )
        rows.append(
            (
                f"load + diagnose {copies}x",
                f"{wall:.3f}",
                f"{statistics.median(t[0] for t in times):.3f}",
                f"{counts['CUPTI_ACTIVITY_KIND_KERNEL']:,} kernels, {n_rows:,} rows;"
                f" CPU {cpu:.3f} s = {cpu / n_rows * 1e9:,.0f} ns/row"
                f" (wall {wall / n_rows * 1e9:,.0f})",
            )
        )
        path.unlink()
    return results


def scaling_target(scaling: list[dict[str, float]]) -> Target:
    at_4x = next(s for s in scaling if s["copies"] == 4)
    top = scaling[-1]
    ratio = top["ns_per_row"] / at_4x["ns_per_row"]
    return Target(
        f"b. CPU ns/row at {int(top['kernels']):,} kernels / at 4x",
        f"{ratio:.2f} ({top['ns_per_row']:.0f} / {at_4x['ns_per_row']:.0f} ns)",
        f"<= {LINEARITY_TARGET}",
        ratio <= LINEARITY_TARGET,
    )


if __name__ == "__main__":
    sys.exit(main())
