"""Start-up in the diagnosis: the window analysed, the finding for what was left out, and words.

Contract: :func:`startup_evidence` measures, on the whole trace, the device idle time before the
steady state begins and what start-up it was; :func:`revise` applies the start-up rules to the
steady state's findings and verdict: one-time costs are never extrapolated to dollars per day,
the headline says what was left out, and a window that is all start-up says so and how to profile
the steady state instead. Pure.
"""

from __future__ import annotations

import msgspec
import numpy as np
from msgspec.structs import replace

from gpuscope.analyses.attribution import WARMUP, KindStat, LocationStat, claim_startup
from gpuscope.analyses.host import HostIndex
from gpuscope.analyses.intervals import clip, gaps, union
from gpuscope.analyses.phases import KIND_WORDS, Phase, SteadyWindow, WarmupKind
from gpuscope.analyses.timeline import device_work
from gpuscope.causes import describe
from gpuscope.diagnosis.findings import Finding, Verdict
from gpuscope.diagnosis.fixes import FixEvidence, advice
from gpuscope.model import Trace
from gpuscope.units import ms, seconds_or_ms

#: A window whose idle time is at least this share start-up is all start-up.
STARTUP_ONLY_SHARE = 0.5

_KIND_FIX = {
    WarmupKind.CONTEXT_INIT: (
        "The CUDA context is created by the first CUDA call (here inside the code shown): start "
        "the profiler after it (`torch.cuda.init()` and one small op first)."
    ),
    WarmupKind.MODULE_LOAD: (
        "Kernels' modules load lazily on their first launch (CUDA 11.7+): profile after a first "
        "iteration, or set `CUDA_MODULE_LOADING=EAGER` so loading happens at start-up."
    ),
    WarmupKind.LIBRARY_INIT: (
        "cuBLAS/cuDNN set up their handles on first use: run one iteration before profiling."
    ),
    WarmupKind.COMPILE: (
        "Compilation (torch.compile, TorchScript, Triton autotuning) runs on the first calls: "
        "warm up with every input shape before profiling; `TORCH_LOGS=recompiles` shows "
        "recompilations in the steady state."
    ),
    WarmupKind.GRAPH_CAPTURE: (
        "CUDA-graph capture launches no kernels: profile the graph's replays, not its capture."
    ),
    WarmupKind.FIRST_STEP: (
        "The first step is much slower than the others: skip it with "
        "`torch.profiler.schedule(wait=1, warmup=1, active=3)`."
    ),
    WarmupKind.PROCESS_START: (
        "The capture starts with the process (imports, data, model set-up) before any GPU "
        "work: start the profiler at the loop (`torch.profiler.schedule`, or `nsys "
        "--capture-range=cudaProfilerApi` with `cudaProfilerStart` there)."
    ),
    WarmupKind.EARLIER_WORK: (
        "The first kernels waited in the queue behind work launched before the capture (or the "
        "host and device clocks disagree): that wait is not idle time; start the profiler one "
        "step earlier to see what ran."
    ),
    WarmupKind.TEARDOWN: (
        "The capture runs on past the work into the process's exit (freeing memory, unloading "
        "modules): stop the profiler when the loop ends."
    ),
}


#: The same, in runtime terms, for programs with no framework operators (CUDA C, MPI, HIP).
_KIND_FIX_RUNTIME = {
    WarmupKind.CONTEXT_INIT: (
        "The CUDA context is created by the first CUDA call: create it before the measured part "
        "(`cudaFree(0)` or `cudaSetDevice` first) and start the capture after it."
    ),
    WarmupKind.MODULE_LOAD: (
        "Kernels' modules load lazily on their first launch (CUDA 11.7+): launch each kernel "
        "once before the measured part, or set `CUDA_MODULE_LOADING=EAGER`."
    ),
    WarmupKind.LIBRARY_INIT: (
        "Library handles (cuBLAS, cuDNN, NCCL) are set up on first use: create them and run one "
        "iteration before the measured part."
    ),
    WarmupKind.COMPILE: (
        "Run-time compilation (NVRTC, JIT) happens on first use: compile ahead of time, or "
        "before the measured part."
    ),
    WarmupKind.GRAPH_CAPTURE: (
        "CUDA-graph capture launches no kernels: measure the graph's launches, not its capture."
    ),
    WarmupKind.FIRST_STEP: (
        "The first iterations are much slower than the others: leave them out of the capture."
    ),
    WarmupKind.PROCESS_START: (
        "The capture starts with the process, before any GPU work: capture the loop only "
        "(`nsys --capture-range=cudaProfilerApi` with `cudaProfilerStart` there)."
    ),
    WarmupKind.EARLIER_WORK: (
        "The first kernels waited in the queue behind work launched before the capture: that "
        "wait is not idle time; start the capture earlier to see what ran."
    ),
    WarmupKind.TEARDOWN: (
        "The capture runs on into the process's exit (freeing memory, unloading modules): stop "
        "it when the loop ends (`cudaProfilerStop`)."
    ),
}


class ExcludedPhase(msgspec.Struct, frozen=True):
    kind: str
    start_ns: int
    end_ns: int


class Window(msgspec.Struct, frozen=True):
    """The time the verdict and findings describe, and the start-up left out before it."""

    start_ns: int
    end_ns: int
    excluded: list[ExcludedPhase]


class StartupEvidence(msgspec.Struct, frozen=True):
    """What was left out of one trace: its device idle time per kind of start-up."""

    window: SteadyWindow
    excluded_ns: int  # the profiled window's time before the steady state, and after it
    idle_ns: int  # device idle time in that stretch, summed over devices
    kinds: list[KindStat]
    devices: int
    teardown_ns: int = 0  # of ``excluded_ns``: the profiled window's time after the steady state


def startup_evidence(
    trace: Trace,
    host: HostIndex,
    phases: list[Phase],
    window: SteadyWindow,
    profiled: tuple[int, int] | None = None,
) -> StartupEvidence:
    """What was left out before ``window`` (from the start of the profiled window: the
    trace's steps or span, ``profiled``; else the first device work) and after it (teardown,
    to the profiled window's end)."""
    idle_ns = 0
    by_kind: dict[WarmupKind, tuple[int, str | None]] = {}
    first, last = window.start_ns, window.end_ns
    devices = trace.device_ids
    for device in devices:
        work = device_work(trace, device, profiled)
        lo, hi = work.span_start_ns, work.span_end_ns
        first, last = min(first, lo), max(last, hi)
        every = gaps(work.busy, lo, hi)
        before, after = clip(every, lo, window.start_ns), clip(every, window.end_ns, hi)
        idle = union(
            np.concatenate([before.start_ns, after.start_ns]),
            np.concatenate([before.end_ns, after.end_ns]),
        )
        idle_ns += idle.total_ns
        _, _, kinds = claim_startup(idle, host, phases)
        for k in kinds:
            ns, where = by_kind.get(k.kind, (0, None))
            by_kind[k.kind] = (ns + k.lost_ns, where or k.location)
    kinds = [KindStat(kind, ns, where) for kind, (ns, where) in by_kind.items()]
    kinds.sort(key=lambda k: -k.lost_ns)
    left_out = window.start_ns - first + last - window.end_ns
    return StartupEvidence(
        window, left_out, idle_ns, kinds, max(len(devices), 1), last - window.end_ns
    )


def window_of(found: list[StartupEvidence]) -> Window | None:
    if not found:
        return None
    return Window(
        start_ns=min(e.window.start_ns for e in found),
        end_ns=max(e.window.end_ns for e in found),
        excluded=[
            ExcludedPhase(p.kind.value, p.start_ns, p.end_ns)
            for e in found
            for p in e.window.excluded
        ],
    )


def _words(kinds: list[KindStat]) -> str:
    named = list(dict.fromkeys(KIND_WORDS[k.kind] for k in kinds if k.lost_ns > 0))
    return ", ".join(named[:3] or ["start-up"])


def _fix(kinds: list[WarmupKind], framework: bool = True) -> str:
    """Each kind's fix and the cause's; in runtime terms when the program records no framework
    operators (``framework`` False)."""
    if framework:
        return " ".join([*(_KIND_FIX[k] for k in kinds[:3]), advice(WARMUP)])
    general = advice(WARMUP, FixEvidence(framework=False))
    return " ".join([*(_KIND_FIX_RUNTIME[k] for k in kinds[:3]), general])


def excluded_finding(
    found: list[StartupEvidence], steady_span_ns: int, framework: bool = True
) -> Finding:
    """The start-up left out of the window: first in the list, never priced (it is paid once)."""
    idle = sum(e.idle_ns for e in found)
    excluded = sum(e.excluded_ns * e.devices for e in found)
    merged: dict[WarmupKind, list[int | str | None]] = {}
    for e in found:
        for k in e.kinds:
            entry = merged.setdefault(k.kind, [0, k.location])
            entry[0] = int(entry[0] or 0) + k.lost_ns
    kinds = sorted(merged.items(), key=lambda kv: -int(kv[1][0] or 0))
    stats = [
        KindStat(kind, int(v[0] or 0), v[1] if isinstance(v[1], str) else None) for kind, v in kinds
    ]
    evidence = [
        f"{seconds_or_ms(excluded)} of the profiled window is start-up or teardown, left out;"
        f" the device idles {ms(idle)} of it"
    ]
    evidence += [
        f"{k.kind.value}: {ms(k.lost_ns)} idle ({KIND_WORDS[k.kind]})"
        + (f" at {k.location}" if k.location else "")
        for k in stats
    ]
    whole = excluded + steady_span_ns
    return Finding(
        pattern=describe(WARMUP).pattern,
        cause=WARMUP,
        title=f"start-up left out of the steady state: {_words(stats)}",
        lost_ns=idle,
        lost_ns_per_step=None,
        share_pct=100.0 * idle / whole if whole else 0.0,
        events=len(stats),
        cost_usd_per_gpu_hour=None,
        cost_usd_per_day=None,
        locations=[LocationStat(k.location, k.lost_ns, 1) for k in stats if k.location],
        evidence=evidence,
        fix=_fix([k.kind for k in stats], framework),
    )


def revise(
    found: list[Finding],
    verdict: Verdict,
    kinds_in_window: list[KindStat],
    startup: list[StartupEvidence],
    steady_span_ns: int,
    whole: bool = False,
    framework: bool = True,
) -> tuple[list[Finding], Verdict]:
    """Start-up rules on the findings and the verdict (see the module docstring); the fixes in
    runtime terms when the program records no framework operators (``framework`` False)."""
    revised: list[Finding] = []
    for finding in found:
        f = finding
        if f.cause == WARMUP:
            kinds = sorted(kinds_in_window, key=lambda k: -k.lost_ns)
            f = replace(
                finding,
                title=f"one-time start-up in the window: {_words(kinds)}",
                cost_usd_per_gpu_hour=None,
                cost_usd_per_day=None,
                evidence=f.evidence + [f"{k.kind.value}: {ms(k.lost_ns)}" for k in kinds],
                fix=_fix([k.kind for k in kinds], framework),
            )
        revised.append(f)
    summary = verdict.summary
    warm_ns = sum(k.lost_ns for k in kinds_in_window)
    idle_ns = verdict.idle_pct / 100.0 * steady_span_ns
    if startup:
        teardown = sum(e.teardown_ns for e in startup) / len(startup)
        excluded = sum(e.excluded_ns for e in startup) / len(startup) - teardown
        kinds = sorted((k for e in startup for k in e.kinds), key=lambda k: -k.lost_ns)
        edges = f"the first {seconds_or_ms(excluded)} is start-up" if excluded > 0 else ""
        if teardown > 0:
            edges += (" and " if edges else "") + f"the last {seconds_or_ms(teardown)} teardown"
        summary = f"{edges} ({_words(kinds)}): left out; steady state: {summary}"
        revised.insert(0, excluded_finding(startup, steady_span_ns, framework))
    elif whole and warm_ns:
        words = _words(sorted(kinds_in_window, key=lambda k: -k.lost_ns))
        summary = (
            f"whole trace, start-up included ({100.0 * warm_ns / steady_span_ns:.0f}% of it is"
            f" one-time {words}): {summary}"
        )
    elif warm_ns and warm_ns >= STARTUP_ONLY_SHARE * idle_ns:
        # All start-up: nothing here is paid again, so nothing is extrapolated per day.
        revised = [replace(f, cost_usd_per_day=None) for f in revised]
        summary = (
            f"start-up only: {100.0 * warm_ns / steady_span_ns:.0f}% of the window is one-time"
            f" start-up ({_words(sorted(kinds_in_window, key=lambda k: -k.lost_ns))}) and no"
            " steady state follows it; profile the steady state (a `torch.profiler.schedule`"
            " with wait/warmup steps, after `torch.compile` has warmed up). As recorded: " + summary
        )
    return revised, replace(verdict, summary=summary)
