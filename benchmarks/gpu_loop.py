"""Prove the loop on a real GPU: profile, diagnose, fix, re-profile, compare.

``python benchmarks/gpu_loop.py --out DIR`` on a machine with a CUDA GPU:

1. profiles ``gpu_loop_train.py`` (four planted pathologies: a starved data loader, ``.item()``
   every step, pageable blocking copies, FP32 matmuls) with ``gpuscope profile`` (the PyTorch
   profiler, plus NVML samples when nvidia-ml-py is there) and diagnoses it;
2. measures each pathology alone: a run with only that one left in (every other fix on) against
   the run with every fix on. A pathology is measured beside the others fixed because one that
   costs 200 ms a step (the loader) hides the others' few ms in its run-to-run noise. For each it
   checks the finding is there, at the line of the training script that carries its
   ``# planted:`` comment or, where the trace records no finer place, in the function around that
   line (PyTorch's Python frames name a function and the line it was at when the profiler
   started or the frame was entered, not the line of each call inside it), runs ``gpuscope diff``
   and ``gpuscope check`` both ways, and tabulates the finding, its predicted saving, the measured
   saving and whether ``diff`` calls it significant;
3. checks that, with every pathology in, the first of them in the diagnosis is the one whose fix
   measured the largest saving;
4. runs ``gpuscope watch --prometheus`` during a run and reads its ``/metrics`` on localhost;
5. when ``ncu`` can read counters, profiles one GEMM and one elementwise kernel to CSV and checks
   gpuscope calls them compute-bound and memory-bound.

Everything it makes (traces, JSON, HTML, ``table.md``, ``summary.json``) goes under ``DIR``.

Without a CUDA GPU (or with ``--dry``) it checks its own plumbing instead and says plainly that the
GPU checks did not run: the training script runs on the CPU with every switch under ``gpuscope
profile`` (which must record its steps and then refuse to diagnose a CPU-only trace), and the
diagnose -> diff -> check -> table path runs on traces from gpuscope's generator with the same
four pathologies injected all together and one at a time (same seed), whose answers are known.

Exit status: 0 when every check that ran passed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TRAIN = HERE / "gpu_loop_train.py"
#: The planted pathologies and the finding cause each should produce.
PLANTED = {
    "data_loader": "data_loader",
    "host_sync": "host_sync",
    "h2d_copy": "h2d_copy",
    "fp32_gemm": "fp32_gemm",
}
#: A regression gate that the reverse comparison (fixed run as baseline) must trip.
GATE_PCT = 5.0


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Row:
    fix: str
    found: str  # "train.py:62", "found (no line)", "missing"
    predicted_ms: float | None
    measured_ms: float | None
    before_ms: float | None
    after_ms: float | None
    significant: bool | None
    gate: str  # what `check` said, both ways


@dataclass
class Loop:
    out: Path
    dry: bool
    checks: list[Check] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append(Check(name, ok, detail))
        mark = "ok  " if ok else "FAIL"
        print(f"[{mark}] {name}{': ' + detail if detail else ''}", flush=True)
        return ok


def gpuscope(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    """``gpuscope ARGS`` through this interpreter (works without the console script)."""
    return subprocess.run(
        [sys.executable, "-m", "gpuscope", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def planted_lines(script: Path = TRAIN) -> dict[str, int]:
    """The line of each ``# planted: NAME`` comment in the training script."""
    lines: dict[str, int] = {}
    for number, text in enumerate(script.read_text().splitlines(), start=1):
        match = re.search(r"#\s*planted:\s*(\w+)", text)
        if match:
            lines.setdefault(match.group(1), number)
    return lines


def enclosing_functions(script: Path, lines: dict[str, int]) -> dict[str, str]:
    """The name of the function around each planted line (innermost), read with ``ast``."""
    import ast

    tree = ast.parse(script.read_text())
    spans = [
        (node.lineno, node.end_lineno or node.lineno, node.name)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]
    found: dict[str, str] = {}
    for name, line in lines.items():
        around = [span for span in spans if span[0] <= line <= span[1]]
        if around:
            found[name] = max(around)[2]  # the innermost starts last
    return found


def finding_for(diagnosis: dict[str, Any], cause: str) -> dict[str, Any] | None:
    return next((f for f in diagnosis.get("findings", []) if f.get("cause") == cause), None)


def found_at(
    finding: dict[str, Any] | None, script_name: str, line: int | None, function: str | None = None
) -> str:
    """Where the finding points, judged against the planted line: ``(planted line)`` when it
    names that line, ``(planted function)`` when it names the function around it in the script
    (all a Python frame records), else the location it gives."""
    if finding is None:
        return "missing"
    locations = [str(loc.get("location", "")) for loc in finding.get("locations", [])]
    if line is not None:
        wanted = f"{script_name}:{line}"
        if any(wanted in loc for loc in locations):
            return f"{wanted} (planted line)"
        if function is not None:
            pattern = re.compile(rf"{re.escape(script_name)}:\d+ \({re.escape(function)}\)")
            named = next((loc for loc in locations if pattern.search(loc)), None)
            if named is not None:
                return f"{named} (planted function)"
    return f"found at {locations[0]}" if locations else "found (no line)"


def predicted_ms(finding: dict[str, Any] | None) -> float | None:
    """The diagnosis' predicted saving per step, when it makes one (issue #18's replay)."""
    if finding is None:
        return None
    value = finding.get("predicted_saving_ns_per_step")
    if isinstance(value, dict):  # {"value": ..., "low": ..., "high": ...}
        value = value.get("value")
    return None if value is None else float(value) / 1e6


def step_metric(diff: dict[str, Any]) -> dict[str, Any] | None:
    for metric in diff.get("metrics", []):
        if metric.get("name") in ("step_time_ns", "device_step_time_ns"):
            return metric
    return None


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# --- the comparison both modes share ------------------------------------------------------------


@dataclass
class Pair:
    """A run with a pathology in (``before``, and its diagnosis) and the run with it fixed."""

    before: Path
    before_json: dict[str, Any]
    after: Path


def compare(
    loop: Loop,
    pairs: dict[str, Pair],
    script_name: str,
    lines: dict[str, int | None],
    functions: dict[str, str] | None = None,
) -> None:
    """Found-at-line, diff and gate for each pair; fills ``loop.rows``."""
    functions = functions or {}
    for fix, pair in pairs.items():
        before, after = pair.before, pair.after
        cause = PLANTED.get(fix)
        finding = finding_for(pair.before_json, cause) if cause else None
        found = found_at(finding, script_name, lines.get(fix), functions.get(fix)) if cause else "-"
        if cause:
            at_line = "planted" in found or (lines.get(fix) is None and finding is not None)
            loop.check(f"{fix}: found at its line (or its function)", at_line, found)
        diff_path = loop.out / f"diff-{fix}.json"
        result = gpuscope("diff", str(before), str(after), "--json", str(diff_path))
        diff = read_json(diff_path) if result.returncode == 0 else None
        loop.check(f"{fix}: diff ran", diff is not None, result.stderr.strip()[-200:])
        metric = step_metric(diff or {})
        before_ms = after_ms = measured = None
        significant = None
        if metric is not None and metric.get("before") is not None:
            before_ms = float(metric["before"]) / 1e6
            after_ms = float(metric["after"]) / 1e6
            measured = before_ms - after_ms
            significant = bool(metric.get("significant"))
            loop.check(f"{fix}: measured saving positive", measured > 0, f"{measured:+.2f} ms/step")
        # The fixed run must pass the gate against the pathological one, and the pathological
        # run must fail it against the fixed one (a regression of the size of the fix).
        forward = gpuscope(
            "check", str(after), "--baseline", str(before), "--max-regression-pct", str(GATE_PCT)
        )
        reverse = gpuscope(
            "check", str(before), "--baseline", str(after), "--max-regression-pct", str(GATE_PCT)
        )
        gate = (
            f"fixed vs before: exit {forward.returncode};"
            f" before vs fixed: exit {reverse.returncode}"
        )
        loop.check(f"{fix}: check passes the fix", forward.returncode == 0, gate)
        if measured is not None and after_ms and measured / after_ms * 100 > 2 * GATE_PCT:
            loop.check(f"{fix}: check catches the reverse", reverse.returncode == 1, gate)
        loop.rows.append(
            Row(fix, found, predicted_ms(finding), measured, before_ms, after_ms, significant, gate)
        )


def table(rows: Sequence[Row]) -> str:
    def ms(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2f}"

    out = [
        "| fix | planted finding | predicted saving (ms/step) | measured saving (ms/step)"
        " | step before -> after (ms) | diff significant | gate |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        sig = "n/a" if r.significant is None else ("yes" if r.significant else "no")
        out.append(
            f"| {r.fix} | {r.found} | {ms(r.predicted_ms)} | {ms(r.measured_ms)}"
            f" | {ms(r.before_ms)} -> {ms(r.after_ms)} | {sig} | {r.gate} |"
        )
    return "\n".join(out) + "\n"


# --- GPU mode -----------------------------------------------------------------------------------


def profile(loop: Loop, name: str, fixes: Sequence[str], extra: Sequence[str] = ()) -> Path | None:
    run_dir = loop.out / name
    json_out = loop.out / f"{name}.json"
    command = [sys.executable, str(TRAIN), *(a for f in fixes for a in ("--fix", f)), *extra]
    result = gpuscope(
        "profile",
        "--warmup",
        "3",
        "--steps",
        "10",
        "--out",
        str(run_dir),
        "--json",
        str(json_out),
        "--",
        *command,
        timeout_s=400,
    )
    (loop.out / f"{name}.log").write_text(result.stdout + result.stderr)
    ok = loop.check(
        f"profile {name}",
        result.returncode == 0 and json_out.exists(),
        result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "",
    )
    return run_dir if ok else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def watch_during(loop: Loop, fixes: Sequence[str]) -> None:
    port = free_port()
    watcher = subprocess.Popen(
        [sys.executable, "-m", "gpuscope", "watch", "--prometheus", str(port), "--interval", "0.5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    trainer = subprocess.Popen(
        [sys.executable, str(TRAIN), "--steps", "30", *(a for f in fixes for a in ("--fix", f))],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    body = ""
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and watcher.poll() is None:
            time.sleep(1.0)
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    body = r.read().decode()
                if "gpuscope" in body:
                    break
    finally:
        trainer.kill()
        watcher.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            watcher.wait(5)
    (loop.out / "watch-metrics.txt").write_text(body)
    lines = [x for x in body.splitlines() if x and not x.startswith("#")]
    detail = f"{len(lines)} samples" if body else (watcher.stderr.read() if watcher.stderr else "")
    loop.check("watch serves /metrics on localhost", "gpuscope" in body, detail.strip()[-200:])


NCU_SCRIPT = """
import torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
x = torch.randn(1 << 28, device="cuda")
torch.cuda.synchronize()
c = a @ b          # compute-bound GEMM
y = x * 2.0 + 1.0  # memory-bound elementwise
torch.cuda.synchronize()
"""


def ncu_check(loop: Loop) -> None:
    ncu = shutil.which("ncu")
    if ncu is None:
        loop.check("ncu", True, "not run: ncu is not on PATH")
        return
    script = loop.out / "ncu_kernels.py"
    script.write_text(NCU_SCRIPT)
    csv = loop.out / "kernels.ncu.csv"
    with csv.open("w") as sink:
        result = subprocess.run(
            [
                ncu,
                "--csv",
                "--clock-control",
                "none",
                "--section",
                "SpeedOfLight",
                sys.executable,
                str(script),
            ],
            stdout=sink,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
            check=False,
        )
    if result.returncode != 0 or "ERR_NVGPUCTRPERM" in csv.read_text():
        loop.check("ncu", True, f"not run: ncu could not read counters ({result.stderr[-200:]})")
        return
    out = loop.out / "kernels.ncu.json"
    gpuscope("diagnose", str(csv), "--json", str(out))
    data = read_json(out) or {}
    kernels = [
        k for d in data.get("devices", []) for k in (d.get("counters") or {}).get("top_kernels", [])
    ]
    gemm = next(
        (k for k in kernels if re.search(r"gemm|nvjet|cutlass|xmma", k["name"], re.I)), None
    )
    # `x * 2.0 + 1.0`, not randn's Philox kernels (`distribution_elementwise_...`: compute).
    elementwise = next((k for k in kernels if "vectorized_elementwise" in k["name"].lower()), None)
    loop.check(
        "ncu: the GEMM is compute-bound",
        bool(gemm and gemm.get("limiter") == "compute"),
        str(gemm and gemm.get("limiter")),
    )
    loop.check(
        "ncu: the elementwise kernel is memory-bound",
        bool(elementwise and elementwise.get("limiter") == "memory"),
        str(elementwise and elementwise.get("limiter")),
    )


def heads_the_diagnosis(loop: Loop, diagnosis: dict[str, Any]) -> None:
    """With every pathology in, the first finding must be the one whose fix measured the largest
    saving on its own (the first thing to fix, issue 28's ranking)."""
    measured = {r.fix: r.measured_ms for r in loop.rows if r.fix in PLANTED}
    known = {fix: ms for fix, ms in measured.items() if ms is not None}
    if not known:
        return
    best = max(known, key=lambda fix: known[fix])
    findings = [f for f in diagnosis.get("findings", []) if f.get("cause") in PLANTED.values()]
    first = findings[0].get("cause") if findings else None
    loop.check(
        f"all pathologies in: the first of them found is {PLANTED[best]} (largest measured saving)",
        first == PLANTED[best],
        f"first: {first}; measured ms/step: "
        + ", ".join(f"{fix} {ms:.1f}" for fix, ms in known.items()),
    )


def gpu_mode(loop: Loop) -> None:
    planted = planted_lines()
    functions = enclosing_functions(TRAIN, planted)
    lines: dict[str, int | None] = dict(planted)
    # TF32 is a process-wide switch: its finding names kernels, not a line to edit.
    lines["fp32_gemm"] = None
    base = profile(loop, "base", [])
    everything = profile(loop, "fix-all", list(PLANTED))
    if base is None or everything is None:
        return
    base_json = read_json(loop.out / "base.json") or {}
    gpuscope("report", str(base), "-o", str(loop.out / "base.html"))
    gpuscope("report", str(everything), "-o", str(loop.out / "fix-all.html"))
    pairs: dict[str, Pair] = {}
    for fix in PLANTED:
        run = profile(loop, f"only-{fix}", [f for f in PLANTED if f != fix])
        if run is not None:
            pairs[fix] = Pair(run, read_json(loop.out / f"only-{fix}.json") or {}, everything)
    pairs["all"] = Pair(base, base_json, everything)
    compare(loop, pairs, TRAIN.name, lines, functions)
    heads_the_diagnosis(loop, base_json)
    watch_during(loop, [])
    ncu_check(loop)


# --- dry mode -----------------------------------------------------------------------------------


def dry_mode(loop: Loop) -> None:
    print(
        "gpu_loop: DRY MODE: no CUDA GPU here; the GPU checks did NOT run. Checking the"
        " plumbing only.",
        flush=True,
    )
    small = [
        "--device",
        "cpu",
        "--steps",
        "8",
        "--batch",
        "32",
        "--width",
        "64",
        "--layers",
        "2",
        "--read-ms",
        "1",
        "--workers",
        "1",
    ]
    for fixes in ([], list(PLANTED)):
        result = subprocess.run(
            [sys.executable, str(TRAIN), *small, *(a for f in fixes for a in ("--fix", f))],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        loop.check(
            f"training script runs on the CPU ({'all fixes' if fixes else 'no fix'})",
            result.returncode == 0,
            result.stderr.strip()[-200:],
        )
    capture = loop.out / "cpu-capture"
    result = gpuscope(
        "profile",
        "--warmup",
        "1",
        "--steps",
        "3",
        "--out",
        str(capture),
        "--",
        sys.executable,
        str(TRAIN),
        *small,
        timeout_s=400,
    )
    (loop.out / "cpu-capture.log").write_text(result.stdout + result.stderr)
    traces = list(capture.glob("*.json.gz")) if capture.exists() else []
    loop.check(
        "gpuscope profile records the script's steps", bool(traces), f"{len(traces)} trace file(s)"
    )
    loop.check(
        "gpuscope profile refuses to diagnose a CPU-only trace (exit 2)",
        result.returncode == 2 and "GPU activity was not recorded" in result.stderr,
        f"exit {result.returncode}",
    )

    from gpuscope.testing.generator import (
        Fp32Gemm,
        GeneratorConfig,
        HostSync,
        PageableH2DCopy,
        SlowDataLoader,
        generate,
    )

    injections = {
        "data_loader": SlowDataLoader(ms=60.0),  # longer than a step, as on the GPU
        "host_sync": HostSync(),
        "h2d_copy": PageableH2DCopy(),
        "fp32_gemm": Fp32Gemm(),
    }
    generated = loop.out / "generated"
    generated.mkdir(exist_ok=True)

    def write(name: str, without: Sequence[str]) -> tuple[Path, dict[str, Any]]:
        cfg = GeneratorConfig(
            seed=7, steps=8, inject=tuple(v for k, v in injections.items() if k not in without)
        )
        path = generate(cfg).write(generated / f"{name}.json.gz")
        json_path = loop.out / f"{name}.json"
        result = gpuscope("diagnose", str(path), "--json", str(json_path))
        loop.check(
            f"diagnose the generated run {name}", result.returncode == 0, result.stderr[-200:]
        )
        return path, read_json(json_path) or {}

    base, base_json = write("base", [])
    everything, _ = write("fix-all", list(PLANTED))
    pairs = {}
    for fix in PLANTED:
        only, only_json = write(f"only-{fix}", [f for f in PLANTED if f != fix])
        pairs[fix] = Pair(only, only_json, everything)
    pairs["all"] = Pair(base, base_json, everything)
    # The generator's own lines: the loop (48), the copy (49), the .item() (57).
    lines: dict[str, int | None] = {
        "data_loader": 48,
        "h2d_copy": 49,
        "host_sync": 57,
        "fp32_gemm": None,
    }
    compare(loop, pairs, "train.py", lines)
    heads_the_diagnosis(loop, base_json)
    result = gpuscope("report", str(base), "-o", str(loop.out / "base.html"))
    loop.check(
        "report writes the HTML", result.returncode == 0 and (loop.out / "base.html").exists()
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="Folder for everything made.")
    parser.add_argument("--dry", action="store_true", help="Plumbing only, even with a GPU.")
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    started = time.monotonic()
    try:
        import torch
    except ImportError:
        print("gpu_loop: PyTorch is not installed (pip install -e '.[torch]')", file=sys.stderr)
        return 1
    gpu = torch.cuda.is_available()
    loop = Loop(out, dry=args.dry or not gpu)
    if loop.dry:
        dry_mode(loop)
    else:
        print(f"gpu_loop: GPU mode on {torch.cuda.get_device_name(0)}", flush=True)
        gpu_mode(loop)
    elapsed = time.monotonic() - started
    rendered = table(loop.rows)
    (out / "table.md").write_text(rendered)
    failed = [c for c in loop.checks if not c.ok]
    summary = {
        "mode": "dry (no GPU checks ran)" if loop.dry else "gpu",
        "device": None if loop.dry else torch.cuda.get_device_name(0),
        "elapsed_s": round(elapsed, 1),
        "checks": [c.__dict__ for c in loop.checks],
        "rows": [r.__dict__ for r in loop.rows],
        "failed": len(failed),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print()
    print(rendered)
    verdict = "PASS" if not failed else f"FAIL ({len(failed)} checks)"
    mode = "DRY MODE: plumbing only, the GPU checks did NOT run" if loop.dry else "GPU mode"
    print(f"gpu_loop: {verdict}; {mode}; {elapsed:.0f} s; everything is in {out}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
