"""One-time start-up and the steady state after it.

Contract: :func:`startup_phases` finds, on the host side of one trace, the intervals spent in
one-time start-up work, each a :class:`Phase` with a :class:`WarmupKind`; :func:`steady_window`
chooses where the steady state begins (or says there is none to separate); :func:`cut` returns
the trace from that time on. Pure: nothing here prices, words or renders anything.

Why start-up is not a bottleneck: the first CUDA call creates a context (hundreds of ms to
seconds), the first launch of a kernel whose module was not loaded yet loads it (CUDA 11.7+ loads
modules lazily), cuBLAS/cuDNN set up their handles on first use, ``torch.compile`` and TorchScript
compile on their first calls, and CUDA-graph capture records launches that run no kernels. Each
is paid once per process. A profile that starts at the first step holds mostly this, and blaming
it on the API the host happened to be inside (``cudaFree``, ``cudaLaunchKernel``) sends the user
to the wrong place. How each phase is recognised (see docs/phases.md for where the names come
from):

- ``context_init``: a runtime/driver call that creates or retains the context (``cuInit``,
  ``cudaSetDevice``...; see ``data/runtime_apis.csv``), or any runtime call that neither launches,
  copies nor synchronises, lasts at least :data:`CONTEXT_MIN_NS` with the device idle for most of
  it (not waiting for queued work), is among the first two calls of its name, and is far longer
  than its later calls (the first ``cudaFree``/``cudaMalloc`` or
  ``cudaStreamIsCapturing`` that PyTorch makes is where the context gets created);
- ``module_load``: ``cuModuleLoad*``/``cuLibraryLoad*``/``hipModuleLoad*``, or the first launch of
  a kernel that takes at least :data:`MODULE_LOAD_MIN_NS` (a launch takes microseconds; a lazily
  loaded module is loaded inside the first launch that needs it);
- ``library_init``: handle creation of the vendor libraries (``cublasCreate``, ``cudnnCreate``,
  ``hipblasCreate``, ``miopenCreate``...);
- ``compile``: the compiler's own ranges (Dynamo ``compile_inner``/``bytecode_tracing``/
  ``call_user_compiler``, Inductor ``compile_fx``, AOTAutograd ``create_aot_dispatcher_function``,
  Triton autotuning and compilation, NVRTC and nvFuser), and the silence before a TorchScript
  function's first ``fallback_function``: the profiling executor optimises the graph before its
  first recorded op, so the host records nothing while it compiles;
- ``graph_capture``: ``cudaStreamBeginCapture``..``EndCapture`` (and HIP's), ``*GraphInstantiate``,
  and ``torch.cuda.graph``'s ``__enter__``/``__exit__`` (a ``gc.collect`` and a synchronisation);
  launches made while capturing run no kernels, so the device's "idle" there is not idle;
- ``first_step``: with at least four profiler steps, a first step more than twice the median of
  the others (and :data:`FIRST_STEP_MIN_NS` longer).
"""

from __future__ import annotations

import re
from enum import Enum
from functools import cache, lru_cache
from statistics import median

import msgspec
import numpy as np
from msgspec.structs import replace
from numpy.typing import NDArray

from gpuscope._arrays import distinct
from gpuscope.analyses.host import HostActivity, HostIndex
from gpuscope.analyses.intervals import (
    Intervals,
    clip,
    difference,
    gaps,
    intersection,
    union,
)
from gpuscope.model import BUSY_KINDS, Kind, Trace
from gpuscope.runtime_apis import runtime_role

#: A start-up call lasts at least this long: context creation takes 100 ms to seconds, and an
#: ordinary allocator or query call microseconds to a few milliseconds.
CONTEXT_MIN_NS = 20_000_000
#: ... and this many times the median of the later calls of the same name, when there are some.
CONTEXT_RATIO = 10
#: A kernel launch takes 5-20 µs; a first launch this long loaded the kernel's module.
MODULE_LOAD_MIN_NS = 1_000_000
#: A first step counts when it is this much longer than the median of the others (and twice it).
FIRST_STEP_MIN_NS = 10_000_000
#: TorchScript's silent compile before a scripted function: at least this long.
SILENT_COMPILE_MIN_NS = 1_000_000
#: The steady state holds at least this many steps, or this share of the device's busy time.
STEADY_MIN_STEPS = 3
STEADY_MIN_BUSY_SHARE = 0.5
#: ... and, without steps, at least this many kernels and copies: a few kernels after a first
#: launch are not a steady state to describe.
STEADY_MIN_WORK = 10
#: What is left out must be mostly start-up: this share of its idle time inside the phases,
#: and start-up must matter: at least this share of the device's span (a 50 µs module load in a
#: one-second trace is not worth a window).
EXCLUDED_STARTUP_SHARE = 0.5
EXCLUDED_MIN_SPAN_SHARE = 0.1


class WarmupKind(str, Enum):
    CONTEXT_INIT = "context_init"
    MODULE_LOAD = "module_load"
    LIBRARY_INIT = "library_init"
    COMPILE = "compile"
    GRAPH_CAPTURE = "graph_capture"
    FIRST_STEP = "first_step"


#: When phases overlap, the idle time goes to the first kind here (the most specific cause).
KIND_ORDER = list(WarmupKind)

#: How a kind is named in a sentence.
KIND_WORDS = {
    WarmupKind.CONTEXT_INIT: "CUDA context creation",
    WarmupKind.MODULE_LOAD: "lazy module loading",
    WarmupKind.LIBRARY_INIT: "library set-up",
    WarmupKind.COMPILE: "compilation",
    WarmupKind.GRAPH_CAPTURE: "CUDA-graph capture",
    WarmupKind.FIRST_STEP: "a slow first step",
}


class Phase(msgspec.Struct, frozen=True):
    kind: WarmupKind
    start_ns: int
    end_ns: int
    row: int  # the host event that marks it, -1 when none


class SteadyWindow(msgspec.Struct, frozen=True):
    """Where the steady state begins, and the start-up phases left out before it."""

    start_ns: int
    end_ns: int
    excluded: list[Phase]


_ROLE_KIND = {
    "context": WarmupKind.CONTEXT_INIT,
    "module_load": WarmupKind.MODULE_LOAD,
    "library_init": WarmupKind.LIBRARY_INIT,
    "graph_instantiate": WarmupKind.GRAPH_CAPTURE,
}
#: Compiler ranges: ``record_function`` names of Dynamo/Inductor/AOTAutograd (torch 2.x
#: ``dynamo_timed`` names them after the function), their Python frames, Triton's compiler and
#: autotuner, NVRTC and nvFuser. Per-call wrappers (``Torch-Compiled Region``, ``TorchDynamo Cache
#: Lookup``, ``CompiledFunction``) run on every step and are not compilation.
_COMPILE = (
    r"^(?:_compile\.)?compile_inner$|^bytecode_tracing$|^(?:OutputGraph\.)?call_user_compiler$"
    r"|^compile_fx(?:_inner)?$|^fx_codegen_and_compile$|^create_aot_dispatcher_function$"
    r"|^aot_dispatch_\w+$|^async_compile\.wait$|^inductor_compile$|^TritonBundler\b"
    r"|torch/_dynamo/convert_frame\.py\(\d+\): (?:_compile|compile_inner)$"
    r"|torch/_dynamo/output_graph\.py\(\d+\): call_user_compiler$"
    r"|torch/_inductor/compile_fx\.py\(\d+\): compile_fx(?:_inner)?$"
    r"|torch/_functorch/aot_autograd\.py\(\d+\): create_aot_dispatcher_function$"
    r"|torch/_inductor/runtime/triton_heuristics\.py\(\d+\):"
    r" (?:autotune_to_one_config|benchmark_all_configs|precompile)$"
    r"|triton/compiler/compiler\.py\(\d+\): compile$"
    r"|\bnvrtc\w*|\bnvFuser\b.*[Cc]ompile|FusionExecutor::compileFusion|^CudaCodeGen"
)
_CAPTURE_FRAME = (
    r"torch/cuda/graphs\.py\(\d+\): (?:__enter__|__exit__|capture_begin|capture_end)$"
    r"|\bcapture_model$|CUDAGraphRunner\.capture$"
)
#: Every compile or capture name above contains one of these: a name without any is decided
#: without running the regular expressions (a trace has thousands of distinct frame names).
_HINTS = (
    "compile",
    "Compile",
    "tracing",
    "aot_dispatch",
    "triton_heuristics",
    "nvrtc",
    "TritonBundler",
    "CudaCodeGen",
    "graphs.py",
    "capture",
)


@cache
def _pattern(source: str) -> re.Pattern[str]:
    return re.compile(source)


_TORCHSCRIPT_FALLBACK = "fallback_function"


@lru_cache(maxsize=1 << 14)
def _named_kind(name: str) -> int:
    """Index into KIND_ORDER of a compile or capture range by name, -1 when neither."""
    if not any(hint in name for hint in _HINTS):
        return -1
    if _pattern(_COMPILE).search(name):
        return KIND_ORDER.index(WarmupKind.COMPILE)
    if _pattern(_CAPTURE_FRAME).search(name):
        return KIND_ORDER.index(WarmupKind.GRAPH_CAPTURE)
    return -1


def startup_phases(trace: Trace, host: HostIndex) -> list[Phase]:
    """Every start-up phase on the host side of ``trace``, by start time."""
    ev = trace.events
    phases: list[Phase] = []
    runtime = np.flatnonzero((ev.kind == Kind.RUNTIME) & (ev.device < 0))
    if runtime.size:
        phases += _runtime_phases(trace, host, runtime)
    named = np.flatnonzero(ev.of_kind(Kind.CPU_OP, Kind.ANNOTATION, Kind.PYTHON))
    if named.size:
        phases += _named_phases(trace, named)
        phases += _silent_compiles(trace, host, named)
    phases += _first_step(trace)
    phases.sort(key=lambda p: (p.start_ns, p.end_ns))
    return phases


_ROLES = ["none", "capture_begin", "capture_end", *_ROLE_KIND]


def _role_codes(trace: Trace, rows: NDArray[np.int64]) -> NDArray[np.int8]:
    """Per row, the index into :data:`_ROLES` of its start-up role (0: none), decided once per
    distinct name: a trace has a handful of runtime names and maybe millions of calls."""
    ids = trace.events.name_id[rows]
    used = np.flatnonzero(np.bincount(ids, minlength=len(trace.names)))
    of_id = np.zeros(len(trace.names), dtype=np.int8)
    for i in used.tolist():
        role = runtime_role(trace.names[i])
        of_id[i] = _ROLES.index(role) if role in _ROLES else 0
    return of_id[ids]


def _runtime_phases(trace: Trace, host: HostIndex, runtime: NDArray[np.int64]) -> list[Phase]:
    ev = trace.events
    found: list[Phase] = []
    dur = ev.dur_ns[runtime]
    code = _role_codes(trace, runtime)
    activity = host.activity[runtime]

    # Explicit start-up APIs: context, module loading, library handles, graph instantiation.
    for name, kind in _ROLE_KIND.items():
        for r in runtime[code == _ROLES.index(name)].tolist():
            found.append(Phase(kind, int(ev.start_ns[r]), int(ev.end_ns[r]), r))

    # A first call far longer than its later calls of the same name creates the context.
    quiet = (activity != HostActivity.LAUNCH) & (activity != HostActivity.HOST_SYNC)
    quiet &= activity != HostActivity.H2D_COPY
    quiet &= code == 0
    long_rows = runtime[quiet & (dur >= CONTEXT_MIN_NS)]
    if long_rows.size:
        # A call that waited for queued device work (cudaFree synchronises) is not start-up:
        # the context is created while the device has nothing to run.
        # Only the device work overlapping these few calls is looked at (a union of all of it
        # would sort every kernel of the trace).
        device = np.flatnonzero(ev.of_kind(*BUSY_KINDS) & (ev.dur_ns > 0))
        d0, d1 = ev.start_ns[device], ev.end_ns[device]
        quiet_rows = []
        for r in long_rows.tolist():
            lo, hi = int(ev.start_ns[r]), int(ev.end_ns[r])
            inside = (d0 < hi) & (d1 > lo)
            busy = clip(union(d0[inside], d1[inside]), lo, hi).total_ns
            if 2 * busy < hi - lo:
                quiet_rows.append(r)
        long_rows = np.array(quiet_rows, dtype=np.int64)
    for pid in distinct(ev.pid[long_rows]).tolist():
        mine = runtime[ev.pid[runtime] == pid]
        for r in long_rows[ev.pid[long_rows] == pid].tolist():
            same = mine[ev.name_id[mine] == ev.name_id[r]]
            position = int(np.searchsorted(same, r))
            later = ev.dur_ns[same[2:]]
            far_longer = later.size < 3 or ev.dur_ns[r] >= CONTEXT_RATIO * median(later.tolist())
            if position < 2 and far_longer:
                found.append(
                    Phase(WarmupKind.CONTEXT_INIT, int(ev.start_ns[r]), int(ev.end_ns[r]), r)
                )

    # The first launch of a kernel that takes milliseconds loaded its module.
    slow = runtime[(activity == HostActivity.LAUNCH) & (dur >= MODULE_LOAD_MIN_NS)]
    slow = slow[ev.link[slow] >= 0]
    if slow.size:
        launches = runtime[(activity == HostActivity.LAUNCH) & (ev.link[runtime] >= 0)]
        kernel_name = ev.name_id[ev.link[launches]]
        # The first launch of each kernel name (np.unique would import numpy.ma: 90 ms).
        order = np.argsort(kernel_name, kind="stable")
        named = kernel_name[order]
        first = np.ones(order.size, dtype=np.bool_)
        first[1:] = named[1:] != named[:-1]
        firsts = set(launches[order[first]].tolist())
        for r in slow.tolist():
            if r in firsts:
                found.append(
                    Phase(WarmupKind.MODULE_LOAD, int(ev.start_ns[r]), int(ev.end_ns[r]), r)
                )

    # Capture: from BeginCapture to the next EndCapture on the same thread.
    begins = runtime[code == _ROLES.index("capture_begin")]
    for r in begins.tolist():
        thread = host.rows_of_thread(int(ev.pid[r]), int(ev.tid[r]))
        after = thread[thread > r]
        ends = [
            a
            for a in after[ev.kind[after] == Kind.RUNTIME].tolist()
            if runtime_role(trace.name(a)) == "capture_end"
        ][:1]
        end_ns = int(ev.end_ns[ends[0]]) if ends else int(ev.end_ns[r])
        found.append(Phase(WarmupKind.GRAPH_CAPTURE, int(ev.start_ns[r]), end_ns, r))
    return found


def _named_phases(trace: Trace, named: NDArray[np.int64]) -> list[Phase]:
    ev = trace.events
    ids = ev.name_id[named]
    used = np.flatnonzero(np.bincount(ids, minlength=len(trace.names)))
    kind_of = np.full(len(trace.names), -1, dtype=np.int8)
    kind_of[used] = [_named_kind(trace.names[i]) for i in used.tolist()]
    hit = named[kind_of[ids] >= 0]
    return [
        Phase(KIND_ORDER[int(kind_of[ev.name_id[r]])], int(ev.start_ns[r]), int(ev.end_ns[r]), r)
        for r in hit.tolist()
    ]


def _silent_compiles(trace: Trace, host: HostIndex, named: NDArray[np.int64]) -> list[Phase]:
    """TorchScript's profiling executor optimises a scripted function on its first calls before
    running it; the host records nothing meanwhile. The silence on the thread just before the
    function's first ``fallback_function`` is that compile."""
    try:
        fallback_id = trace.names.index(_TORCHSCRIPT_FALLBACK)
    except ValueError:
        return []
    ev = trace.events
    fallbacks = named[ev.name_id[named] == fallback_id]
    found: list[Phase] = []
    seen: set[tuple[int, int]] = set()
    for r in fallbacks.tolist():
        key = (int(ev.pid[r]), int(ev.tid[r]))
        if key in seen:
            continue
        seen.add(key)
        thread = host.rows_of_thread(*key)
        thread = thread[ev.device[thread] < 0]
        # The scripted function is the outermost op still open when the fallback starts.
        t = int(ev.start_ns[r])
        ops = thread[(ev.kind[thread] == Kind.CPU_OP) & (ev.start_ns[thread] <= t)]
        ops = ops[ev.end_ns[ops] >= ev.end_ns[r]]
        begin = int(ev.start_ns[ops].max()) if ops.size else t
        # The latest-starting enclosing op is the fallback itself; take the one enclosing it.
        enclosing = ops[ev.start_ns[ops] < t] if ops.size else ops
        if enclosing.size:
            begin = int(ev.start_ns[enclosing].max())
        before = thread[ev.end_ns[thread] <= begin]
        if before.size == 0:
            continue
        silent_from = int(ev.end_ns[before].max())
        if begin - silent_from >= SILENT_COMPILE_MIN_NS:
            function = int(enclosing[np.argmax(ev.start_ns[enclosing])]) if enclosing.size else r
            found.append(Phase(WarmupKind.COMPILE, silent_from, begin, function))
    return found


def _first_step(trace: Trace) -> list[Phase]:
    steps = sorted(trace.steps, key=lambda s: s.start_ns)
    if len(steps) < 4:
        return []
    first = steps[0].dur_ns
    typical = float(median([s.dur_ns for s in steps[1:]]))
    if first > 2 * typical and first - typical >= FIRST_STEP_MIN_NS:
        return [Phase(WarmupKind.FIRST_STEP, steps[0].start_ns, steps[0].end_ns, -1)]
    return []


def phase_intervals(phases: list[Phase]) -> dict[WarmupKind, Intervals]:
    """The time of each kind, without overlaps between kinds (earlier in KIND_ORDER wins)."""
    result: dict[WarmupKind, Intervals] = {}
    taken = Intervals.empty()
    for kind in KIND_ORDER:
        mine = [p for p in phases if p.kind is kind]
        if not mine:
            continue
        iv = union(
            np.array([p.start_ns for p in mine], dtype=np.int64),
            np.array([p.end_ns for p in mine], dtype=np.int64),
        )
        own = difference(iv, taken) if len(taken) else iv
        if len(own):
            result[kind] = own
            taken = union(
                np.concatenate([taken.start_ns, own.start_ns]),
                np.concatenate([taken.end_ns, own.end_ns]),
            )
    return result


def steady_window(trace: Trace, phases: list[Phase]) -> SteadyWindow | None:
    """Where the steady state begins: the latest end of a start-up phase such that what follows
    holds at least :data:`STEADY_MIN_STEPS` steps or :data:`STEADY_MIN_BUSY_SHARE` of the
    device time (in :data:`STEADY_MIN_WORK` kernels and copies or more), and what precedes it
    is mostly start-up (its idle time mostly inside phases, and at least
    :data:`EXCLUDED_MIN_SPAN_SHARE` of the span).
    None when there is no phase, or no such point (start-up and work are interleaved)."""
    if not phases:
        return None
    ev = trace.events
    device = np.flatnonzero(ev.of_kind(*BUSY_KINDS) & (ev.dur_ns > 0))
    if device.size == 0:
        return None
    busy = union(ev.start_ns[device], ev.end_ns[device])
    starts = np.sort(ev.start_ns[device])
    lo, hi = int(busy.start_ns[0]), int(busy.end_ns[-1])
    total = busy.total_ns
    idle = gaps(busy, lo, hi)
    covered = phase_intervals(phases)
    all_phases = union(
        np.concatenate([c.start_ns for c in covered.values()]),
        np.concatenate([c.end_ns for c in covered.values()]),
    )
    step_starts = np.array(sorted(s.start_ns for s in trace.steps), dtype=np.int64)
    for end in sorted({p.end_ns for p in phases}, reverse=True):
        if end <= lo or end >= hi:
            continue
        after = clip(busy, end, hi).total_ns
        steps_after = int(step_starts.size - np.searchsorted(step_starts, end))
        work_after = int(device.size - np.searchsorted(starts, end))
        steady = (trace.steps and steps_after >= STEADY_MIN_STEPS) or (
            after >= STEADY_MIN_BUSY_SHARE * total and work_after >= STEADY_MIN_WORK
        )
        if not steady:
            continue
        before_idle = clip(idle, lo, end)
        startup = intersection(before_idle, all_phases).total_ns
        enough = startup >= EXCLUDED_MIN_SPAN_SHARE * (hi - lo)
        if enough and startup >= EXCLUDED_STARTUP_SHARE * before_idle.total_ns:
            excluded = [p for p in phases if p.start_ns < end and p.end_ns > lo]
            return SteadyWindow(end, hi, excluded)
    return None


def cut(trace: Trace, start_ns: int) -> Trace:
    """The trace from ``start_ns`` on: device work that starts then or later, host events still
    running then or later (an enclosing Python frame stays, so code locations resolve), and the
    steps that begin then or later."""
    ev = trace.events
    on_device = ev.of_kind(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC, Kind.GPU_ANNOTATION)
    keep = np.where(on_device, ev.start_ns >= start_ns, ev.end_ns > start_ns)
    rows = np.flatnonzero(keep)
    return replace(
        trace,
        events=ev.take(rows),
        steps=[s for s in trace.steps if s.start_ns >= start_ns],
        warnings=list(trace.warnings),
        metadata=dict(trace.metadata),
    )
