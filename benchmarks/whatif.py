"""What-if replay against truth: each prediction checked on the run with the fix applied.

For each case the generator makes a run with pathologies injected; ``gpuscope`` diagnoses it and
predicts the step time if one finding's fix were applied (``Finding.prediction``). The generator
then makes the same run (same seed) with that pathology fixed
(:func:`gpuscope.testing.generator.apply_fix`)
and its step time is measured the same way (mean device time per step, start-up left out). The
issue's bar: predicted within 10% of the fixed run in >= 90% of cases, within 25% in all.

Usage: ``python benchmarks/whatif.py [--quick] [--json OUT]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from msgspec.structs import replace

from gpuscope.analyses.whatif import build_graph, step_times
from gpuscope.diagnosis import diagnose
from gpuscope.readers import load
from gpuscope.testing import generator as gen

#: One pathology per fix, sized to show; the fix is applied to the first listed.
_SHAPES: dict[str, list[tuple[gen.Injection, ...]]] = {
    "data_loader": [(gen.SlowDataLoader(ms=40.0),), (gen.SlowDataLoader(ms=6.0), gen.HostSync())],
    "host_sync": [(gen.HostSync(),), (gen.HostSync(host_work_us=4000.0), gen.TinyKernels())],
    "h2d_copy": [(gen.PageableH2DCopy(),), (gen.PageableH2DCopy(mb=64.0), gen.HostSync())],
    "launch_overhead": [(gen.TinyKernels(),), (gen.TinyKernels(count=300), gen.HostSync())],
    "allocator": [(gen.AllocatorChurn(),), (gen.AllocatorChurn(count=8), gen.HostSync())],
    "fp32_gemm": [(gen.Fp32Gemm(),), (gen.Fp32Gemm(share=0.5), gen.HostSync())],
    "exposed_communication": [(gen.ExposedCollective(),), (gen.ExposedCollective(ms=8.0),)],
    "straggler": [(gen.Straggler(rank=1, extra_ms=5.0),), (gen.Straggler(rank=2, extra_ms=3.0),)],
}
_VARIANTS: list[dict[str, Any]] = [
    {},
    {"device": "NVIDIA A100-SXM4-80GB"},
    {"batch_size": 4},
    {"layers": 2, "mode": "train"},
]


def cases(quick: bool) -> list[tuple[str, gen.GeneratorConfig, int]]:
    """(cause, config, world size: 1 for one rank) covering every fix."""
    found = []
    seeds = [0] if quick else [0, 1]
    for cause, shapes in _SHAPES.items():
        for shape in shapes:
            for v, variant in enumerate(_VARIANTS if not quick else _VARIANTS[:1]):
                for seed in seeds:
                    cfg = replace(gen.GeneratorConfig(seed=seed * 7 + v, steps=5), **variant)
                    cfg = replace(cfg, inject=shape)
                    world = 4 if cause == "straggler" else 1
                    if cause == "straggler" and v > 1:
                        continue  # four ranks per case: two variants are enough
                    found.append((cause, cfg, world))
    return found


def _run(cfg: gen.GeneratorConfig, world: int, folder: Path, name: str) -> Path:
    if world == 1:
        return gen.generate(cfg).write(folder / f"{name}.json")
    target = folder / name
    target.mkdir()
    for rank, trace in enumerate(gen.generate_job(cfg, world_size=world)):
        trace.write(target / f"rank{rank}.json")
    return target


def _measured_step_ns(path: Path) -> float:
    job = load(path)
    per = [step_times(g, g.start, g.end) for g in (build_graph(t) for t in job.traces)]
    return float(np.mean([p.mean() for p in per if p.size]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="one variant per shape")
    parser.add_argument("--json", type=Path, help="write every case here")
    args = parser.parse_args()
    rows: list[dict[str, Any]] = []
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for i, (cause, cfg, world) in enumerate(cases(args.quick)):
            before = _run(cfg, world, folder, f"b{i}")
            after = _run(gen.apply_fix(cfg, cause), world, folder, f"a{i}")
            result = diagnose(load(before))
            finding = next((f for f in result.findings if f.cause == cause), None)
            truth = _measured_step_ns(after)
            p = finding.prediction if finding is not None else None
            error = (p.predicted_step_ns - truth) / truth if p is not None else None
            rows.append(
                {
                    "cause": cause,
                    "injected": [type(x).__name__ for x in cfg.inject],
                    "device": cfg.device,
                    "batch": cfg.batch_size,
                    "layers": cfg.layers,
                    "seed": cfg.seed,
                    "ranks": world,
                    "step_ms": p.step_ns / 1e6 if p else None,
                    "predicted_ms": p.predicted_step_ns / 1e6 if p else None,
                    "fixed_run_ms": truth / 1e6,
                    "error_pct": 100 * error if error is not None else None,
                }
            )
            shown = f"{100 * error:+6.1f}%" if error is not None else "no prediction"
            print(
                f"{cause:22s} {'+'.join(rows[-1]['injected']):36s} {cfg.device[7:18]:11s}"
                f" b{cfg.batch_size} L{cfg.layers} r{world}: "
                + (
                    f"{p.step_ns / 1e6:7.2f} -> predicted {p.predicted_step_ns / 1e6:7.2f},"
                    f" fixed run {truth / 1e6:7.2f} ms  {shown}"
                    if p
                    else shown
                ),
                flush=True,
            )
    errors = np.array([abs(r["error_pct"]) if r["error_pct"] is not None else np.inf for r in rows])
    within10 = float((errors <= 10).mean() * 100)
    worst = float(errors.max())
    covered = sorted({r["cause"] for r in rows})
    print(
        f"\n{len(rows)} runs, fixes {', '.join(covered)}: {within10:.0f}% within 10%,"
        f" worst {worst:.1f}% ({time.perf_counter() - began:.0f} s)"
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    ok = within10 >= 90 and worst <= 25 and (args.quick or len(rows) >= 60)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
