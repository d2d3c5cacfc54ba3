"""The labelled suite: generated traces with one injected cause each, and the answer expected.

Contract: :func:`labelled_suite` returns at least 40 deterministic cases, varied in size (steps,
layers) and mix (a weaker second cause in some), each with the cause that must come out as the
top finding and, for idle causes, the exact ``file.py:LINE`` it must point at. Some cases start
with one-time start-up (:class:`~gpuscope.testing.config.Startup`): the start-up left out is
stated as its own finding (it saves nothing per step), so their top finding is the first one of
the steady state; the ``warmup`` cases expect the start-up left out itself. :func:`run_suite`
diagnoses them and returns the confusion matrix. Tests assert on it;
``benchmarks/ground_truth.py`` prints it.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import msgspec

from gpuscope.diagnosis import diagnose
from gpuscope.readers import load
from gpuscope.testing import generator as g


class Case(msgspec.Struct, frozen=True):
    name: str
    config: g.GeneratorConfig
    expected: str  # the top finding's cause
    location: str | None  # "train.py:57" for idle causes


class Outcome(msgspec.Struct, frozen=True):
    case: Case
    top_cause: str | None
    top_location: str | None

    @property
    def cause_right(self) -> bool:
        return self.top_cause == self.case.expected

    @property
    def location_right(self) -> bool:
        if self.case.location is None:
            return True
        return (
            self.top_location is not None and self.top_location.split(" (")[0] == self.case.location
        )


_Injections = Callable[[int], tuple[g.Injection, ...]]

#: cause -> (injections for seed s, expected location)
_CAUSES: dict[str, tuple[_Injections, str | None]] = {
    "host_sync": (lambda s: (g.HostSync(host_work_us=1500 + 500 * (s % 3)),), "train.py:57"),
    "data_loader": (lambda s: (g.SlowDataLoader(ms=40 + 5 * s),), "train.py:48"),
    "h2d_copy": (lambda s: (g.PageableH2DCopy(mb=64 + 32 * (s % 4)),), "train.py:49"),
    "launch_overhead": (
        lambda s: (g.TinyKernels(count=200 + 50 * (s % 3)), g.HostSync(host_work_us=100)),
        "train.py:52",
    ),
    "allocator": (lambda s: (g.AllocatorChurn(count=6 + 2 * (s % 3)),), "train.py:54"),
    "checkpoint": (lambda s: (g.Checkpoint(every_n_steps=1 + s % 2),), "train.py:59"),
    "exposed_communication": (lambda s: (g.ExposedCollective(ms=4 + s),), None),
    "fp32_gemm": (lambda s: (g.Fp32Gemm(share=1.0 - 0.1 * (s % 3)),), None),
    "memory_bound": (lambda s: (g.MemoryBoundChain(ops=40 + 8 * (s % 3)),), None),
    "warmup": (
        lambda s: (g.Startup(kind=g.STARTUP_KINDS[s % 4], ms=300 + 100 * s),),
        "train.py:44",
    ),
}
SEEDS = 5


def labelled_suite() -> list[Case]:
    cases: list[Case] = []
    for cause, (inject, location) in _CAUSES.items():
        for seed in range(SEEDS):
            injections = inject(seed)
            if seed >= 3 and cause not in ("host_sync", "launch_overhead"):
                # A weaker second cause: the injected one must still come out on top.
                injections = (*injections, g.HostSync(host_work_us=150))
            if seed == 2 and cause != "warmup":
                # Start-up first: the steady state's answer must not change.
                kind = g.STARTUP_KINDS[len(cases) % len(g.STARTUP_KINDS)]
                injections = (g.Startup(kind=kind), *injections)
            config = g.GeneratorConfig(
                seed=seed,
                steps=3 + seed % 4,
                layers=2 + seed % 3,
                world_size=2 if cause == "exposed_communication" else 1,
                inject=injections,
            )
            cases.append(Case(f"{cause}-{seed}", config, cause, location))
    return cases


def run_suite(cases: list[Case] | None = None) -> list[Outcome]:
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases or labelled_suite():
            path = g.generate(case.config).write(Path(tmp) / f"{case.name}.json.gz")
            found = diagnose(load(path)).findings
            left_out = [f for f in found if f.pattern == "startup"]
            if case.expected == "warmup" and left_out:
                found = left_out  # the start-up left out, stated (it saves nothing per step)
            else:
                found = [f for f in found if f.pattern != "startup"]
            top = found[0] if found else None
            location = top.locations[0].location if top and top.locations else None
            outcomes.append(Outcome(case, top.cause if top else None, location))
    return outcomes


def confusion(outcomes: list[Outcome]) -> Counter[tuple[str, str | None]]:
    return Counter((o.case.expected, o.top_cause) for o in outcomes)
