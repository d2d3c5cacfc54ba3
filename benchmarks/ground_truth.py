"""Print the labelled suite's confusion matrix: injected cause (rows) vs top finding (columns);
then the real traces of the corpus's ``wild/`` folder and the new ``kineto/tracelens/`` traces
against their known answers (MANIFEST.md), reported apart from the generated suite.

Run: ``python benchmarks/ground_truth.py``
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from gpuscope.diagnosis import Diagnosis, diagnose
from gpuscope.readers import load
from gpuscope.testing.groundtruth import confusion, run_suite


def main() -> None:
    outcomes = run_suite()
    matrix = confusion(outcomes)
    expected = sorted({e for e, _ in matrix})
    found = sorted({f or "none" for _, f in matrix})
    width = max(len(c) for c in expected + found) + 2
    print("injected \\ top finding".ljust(width) + "".join(f.rjust(width) for f in found))
    for e in expected:
        row = [matrix.get((e, None if f == "none" else f), 0) for f in found]
        print(e.ljust(width) + "".join(str(n).rjust(width) for n in row))
    right = sum(o.cause_right for o in outcomes)
    located = sum(o.location_right for o in outcomes if o.case.location and o.cause_right)
    with_location = sum(1 for o in outcomes if o.case.location and o.cause_right)
    print(f"\ntop finding right: {right}/{len(outcomes)} ({100 * right / len(outcomes):.1f}%)")
    print(f"location exact: {located}/{with_location}")
    memory()
    wild()
    counters()


def memory() -> None:
    """The generated memory snapshots (gpuscope.testing.memory), reported on their own."""
    from gpuscope.testing.memory import memory_suite

    outcomes = memory_suite()
    print("\nmemory snapshots: planted cause -> top memory finding (top site)")
    for o in outcomes:
        if not (o.cause_right and o.location_right):
            print(
                f"  WRONG {o.truth.cause} seed {o.seed}: {o.found} at {o.location}"
                f" (expected {o.truth.location})"
            )
    right = sum(o.cause_right for o in outcomes)
    located = sum(o.location_right for o in outcomes if o.cause_right)
    print(f"memory top finding right: {right}/{len(outcomes)} ({100 * right / len(outcomes):.1f}%)")
    print(f"memory top site exact: {located}/{right}")


def _excluded(d: Diagnosis) -> set[str]:
    return {e.kind for e in d.window.excluded} if d.window else set()


def _causes(d: Diagnosis, n: int) -> list[str]:
    return [f.cause for f in d.findings if f.pattern != "startup"][:n]


#: file -> (known answer, as MANIFEST.md words it; the check of gpuscope's answer against it)
WILD: dict[str, tuple[str, Callable[[Diagnosis], bool]]] = {
    "a100_cudagraph_capture_replay.json.gz": (
        "start-up (context creation), then the replays",
        # Start-up is stated and left out (it comes last: it saves nothing per step), led by the
        # context creation, and no allocator problem is made of its cudaFree.
        lambda d: (
            "context_init" in _excluded(d)
            and "allocator" not in _causes(d, 3)
            and any(
                f.pattern == "startup"
                and "CUDA context creation" in f.title.split(":")[1].split(",")[0]
                for f in d.findings
            )
        ),
    ),
    "a100pcie_particle_transformer_first_iter.json": (
        "warm-up: lazy module loading, JIT compile",
        lambda d: {"module_load", "compile"} <= _excluded(d),
    ),
    "a100_fusion_eager_vs_pt2.json.gz": (
        "launch overhead",
        lambda d: _causes(d, 1) == ["launch_overhead"],
    ),
    "a100_d2h_sync_cpu_loop.json.gz": (
        "host_sync, then launch_overhead",
        lambda d: _causes(d, 2) == ["host_sync", "launch_overhead"],
    ),
    "a100_nvlink_p2p_copy.json.gz": (
        "peer-to-peer copies saturate it: not host-bound",
        lambda d: d.verdict.bound != "host",
    ),
    "nsys_t4_uvm_softmax.sqlite": (
        "host work plus page migration",
        lambda d: set(_causes(d, 2)) == {"cpu_other", "page_migration"},
    ),
    "a100_switch_moe_fp32_coldstart.json": (
        "first ~479 ms start-up, then compute-bound on FP32 GEMMs",
        lambda d: (
            d.window is not None
            and 0.45e9 <= d.window.start_ns - _first_ns(d) <= 0.50e9
            and d.verdict.bound == "compute"
            and _causes(d, 1) == ["fp32_gemm"]
        ),
    ),
}

#: The new real traces of ``kineto/tracelens/`` with known answers in MANIFEST.md.
TRACELENS: dict[str, tuple[str, Callable[[Diagnosis], bool]]] = {
    "h100_timesformer_hf_pipeline.json.gz": (
        "CPU preprocessing (image_processing_videomae.py) first; busy ~41% of the step",
        lambda d: _host_first_at(d, "image_processing_videomae.py") and 39 <= _busy(d) <= 43,
    ),
    "mi300x_timesformer_hf_pipeline.json.gz": (
        "CPU preprocessing first; busy ~30.7% of the step",
        lambda d: _host_first_at(d, "preprocess") and 29 <= _busy(d) <= 32,
    ),
    "h100_owlv2_detection_pipeline.json.gz": (
        "per-label preprocessing on the host first; busy ~46.8%",
        lambda d: _causes(d, 1)[0] in _HOST and 45 <= _busy(d) <= 48.5,
    ),
    "mi300x_owlv2_detection_pipeline.json.gz": (
        "per-label preprocessing on the host first; busy ~30.3%",
        lambda d: _causes(d, 1)[0] in _HOST and 29 <= _busy(d) <= 31.5,
    ),
    "h100_falconsai_vit_classification.json.gz": (
        "host/launch-bound",
        lambda d: d.verdict.bound == "host" and _causes(d, 1) == ["launch_overhead"],
    ),
    "mi300x_falconsai_vit_classification.json.gz": (
        "host/launch-bound",
        lambda d: d.verdict.bound == "host" and _causes(d, 1) == ["launch_overhead"],
    ),
    "mi300x_vllm_prefilldecode_piecewise_graphs.json.gz": (
        "GPU-bound (MoE experts), not the host",
        lambda d: d.verdict.bound in ("compute", "memory"),
    ),
    "mi300x_xdit_sd3.5_diffusion.json.gz": (
        "host-bound in the compiled graph",
        lambda d: d.verdict.bound == "host",
    ),
}

_HOST = {"cpu_other", "data_loader", "launch_overhead", "host_sync"}


def _first_ns(d: Diagnosis) -> int:
    """Where the window the trace profiled begins: the earliest excluded phase, else the span."""
    starts = [e.start_ns for e in d.window.excluded] if d.window else []
    return min([*starts, *(x.span_start_ns for x in d.devices)])


def _busy(d: Diagnosis) -> float:
    return 100.0 - d.verdict.idle_pct


def _host_first_at(d: Diagnosis, where: str) -> bool:
    top = next((f for f in d.findings if f.pattern != "startup"), None)
    return (
        top is not None
        and top.cause in _HOST
        and any(where in (loc.location or "") for loc in top.locations[:1])
    )


def wild() -> None:
    root = Path(os.environ.get("GPUSCOPE_CORPUS", Path(__file__).parents[2] / "shared" / "corpus"))
    folder = root / "wild"
    if not folder.is_dir():
        print(f"\n(no {folder}: the real-trace table is skipped)")
        return
    print("\nreal traces (wild/ and kineto/tracelens/; MANIFEST.md's answers)")
    rows = []
    table = [(folder / n, a, c) for n, (a, c) in WILD.items()]
    table += [(root / "kineto" / "tracelens" / n, a, c) for n, (a, c) in TRACELENS.items()]
    for path, answer, check in table:
        name = path.name
        d = diagnose(load(path))
        said = ", ".join(_causes(d, 2))
        if d.window is not None:
            said = f"start-up left out ({', '.join(sorted(_excluded(d)))}); then {said}"
        rows.append((name, answer, f"{d.verdict.bound}-bound: {said}", check(d)))
    for name, answer, said, right in rows:
        print(f"  {'right' if right else 'WRONG'}  {name}")
        print(f"         known: {answer}\n         said:  {said}")
    print(f"real traces right: {sum(r[3] for r in rows)}/{len(rows)}")


def counters() -> None:
    """The generated counter cases (issue 33): each family's planted bound against the bound
    the counters gave, with the evidence printed."""
    from gpuscope.testing.counters import run_counter_suite

    outcomes = run_counter_suite()
    print("\ncounter cases (planted bound vs measured, gpuscope.testing.counters)")
    for o in outcomes:
        print(f"  {'right' if o.right else 'WRONG'}  {o.case}: {o.family}: planted {o.planted}")
        print(f"         said: {o.found}: {o.evidence}")
    right = sum(o.right for o in outcomes)
    print(f"counter cases right: {right}/{len(outcomes)} ({100 * right / len(outcomes):.1f}%)")


if __name__ == "__main__":
    main()
