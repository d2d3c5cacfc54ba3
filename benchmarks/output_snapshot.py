"""Dump what `gpuscope diagnose` prints for a set of corpus inputs (the terminal report at several
widths, with and without colours, markdown, JSON, errors, help), or compare two such dumps byte
for byte: the check that work on start-up and the terminal renderer leaves every output as it was.

    python benchmarks/output_snapshot.py dump OUT_DIR [--tree TREE]
    python benchmarks/output_snapshot.py compare BEFORE_DIR AFTER_DIR

Each output comes from a whole process (``python -m gpuscope``, with TREE's ``src`` on
PYTHONPATH; default: this checkout), as a user runs it: stdout piped, its width from COLUMNS,
colours forced with FORCE_COLOR. `compare` names each output that differs and exits 1 if any does.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"

#: Inputs of every kind the terminal report draws: one device or several, ranks, memory,
#: sampled utilisation, hardware counters, Nsight Systems and ROCm traces.
INPUTS = [
    "kineto/hta/df_index_resolver/df_index_resolver.json.gz",
    "kineto/param-dlrm-8rank",
    "kineto/hta/memory_analysis/memory_timeline.raw.gz",
    "kineto/tracelens/mi300x_vllm_decode_hipgraph.json.gz",
    "kineto/tracelens/h100_qwen1.5-0.5b_inference.json.gz",
    "kineto/hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    "kineto/kineto-2021/v100_tiny_oldest_schema.json",
    "nsys/nsys-ai/h100_2gpu_1s.sqlite",
    "nsys/pipit/a100_cloverleaf.sqlite",
    "rocprof/mi350x_train_rocprofv3.json.gz",
    "metrics/superbench_nvml_8gpu.jsonl",
    "metrics/dcgm-exporter_dcp-metrics-included.csv",
    "ncu/b200_cublaslt_fp8_gemm.ncu.csv.log",
    "kineto/hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "kineto/hta/trace_filter/sampled_rank-0.json.gz",
]

#: (name, extra arguments, extra environment) of each output made of an input.
VARIANTS: list[tuple[str, list[str], dict[str, str]]] = [
    ("w60", [], {"COLUMNS": "60"}),
    ("w80", [], {}),
    ("w120", [], {"COLUMNS": "120"}),
    ("w200", [], {"COLUMNS": "200"}),
    ("color100", [], {"COLUMNS": "100", "FORCE_COLOR": "1"}),
    ("all-devices", ["--all-devices"], {"COLUMNS": "100"}),
    ("markdown", ["--format", "markdown"], {}),
    ("json", ["--json", "-"], {}),
    ("no-predict", ["--no-predict", "--top", "3"], {"COLUMNS": "90"}),
]

#: Outputs that need no trace: help texts and one-line errors.
OTHERS: list[tuple[str, list[str]]] = [
    ("help", ["--help"]),
    ("diagnose-help", ["diagnose", "--help"]),
    ("typo", ["diagnoze", "x"]),
    ("missing", ["diagnose", "/nonexistent/trace.json"]),
    ("not-a-trace", ["diagnose", str(ROOT / "pyproject.toml")]),
    ("bad-option", ["diagnose", "--top", "-1", "x"]),
    ("version", ["--version"]),
]


def run(tree: Path, args: list[str], env: dict[str, str]) -> bytes:
    environment = {
        k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR")
    }
    environment.update(env, PYTHONPATH=str(tree / "src"), TERM="xterm-256color")
    made = subprocess.run(
        [sys.executable, "-m", "gpuscope", *args],
        capture_output=True,
        env=environment,
        cwd="/tmp",
        check=False,
    )
    return b"exit %d\n--- stdout\n%s--- stderr\n%s" % (made.returncode, made.stdout, made.stderr)


def dump(out: Path, tree: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    for source in INPUTS:
        path = CORPUS / source
        stem = source.replace("/", "__")
        for name, extra, env in VARIANTS:
            (out / f"{stem}.{name}").write_bytes(run(tree, ["diagnose", str(path), *extra], env))
        print(stem, flush=True)
    for name, args in OTHERS:
        (out / f"_{name}").write_bytes(run(tree, args, {}))
    return 0


def compare(before: Path, after: Path) -> int:
    names = sorted({p.name for p in before.iterdir()} | {p.name for p in after.iterdir()})
    changed = 0
    for name in names:
        a, b = before / name, after / name
        if not (a.exists() and b.exists()) or a.read_bytes() != b.read_bytes():
            changed += 1
            print(f"differs: {name}")
    print(f"{len(names) - changed} of {len(names)} outputs identical")
    return 1 if changed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    dumping = sub.add_parser("dump")
    dumping.add_argument("out", type=Path)
    dumping.add_argument("--tree", type=Path, default=ROOT)
    comparing = sub.add_parser("compare")
    comparing.add_argument("before", type=Path)
    comparing.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.what == "dump":
        return dump(args.out, args.tree.resolve())
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
