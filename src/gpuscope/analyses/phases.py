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
from enum import StrEnum
from functools import cache, lru_cache

import msgspec
import numpy as np
from msgspec.structs import replace
from numpy.typing import NDArray

from gpuscope._arrays import distinct, member
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
from gpuscope.runtime_apis import ALLOCATOR, runtime_role

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


class WarmupKind(StrEnum):
    CONTEXT_INIT = "context_init"
    MODULE_LOAD = "module_load"
    LIBRARY_INIT = "library_init"
    COMPILE = "compile"
    GRAPH_CAPTURE = "graph_capture"
    FIRST_STEP = "first_step"
    PROCESS_START = "process_start"
    EARLIER_WORK = "earlier_work"
    TEARDOWN = "teardown"


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
    WarmupKind.PROCESS_START: "process start-up",
    WarmupKind.EARLIER_WORK: "device work queued before the capture",
    WarmupKind.TEARDOWN: "teardown at exit",
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
    "teardown": WarmupKind.TEARDOWN,
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


#: ``dynamo_timed`` and ``record_function`` decorate a range's name: ``OutputGraph.call_user_
#: compiler (dynamo_timed)``, ``_compile.compile_inner (dynamo_timed)``. The family is the bare
#: function name: the suffix in parentheses and the qualifying class are taken off first.
_DECORATION = re.compile(r"\s+\([^()]*\)$")
_QUALIFIER = re.compile(r"^(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_]\w*$)")
#: User ranges (``record_function``, NVTX) whose name says they are one-time set-up: warm-up
#: iterations, compilation, initialisation (``MPI_Init``, ``model setup``). Whole words only
#: (case aside); an ``init`` word must end the name or a phrase (``MPI_Init``, ``init model``),
#: so ``init_hidden`` or ``reinitialize_weights`` do not count.
_SETUP_RANGE = re.compile(
    r"(?i)(?:^|[\W_])(?:warm[\W_]?ups?|warming|compil(?:e|ing|ation))(?:$|[\W_])"
    r"|(?:^|[\W_])(?:init|initiali[sz](?:e|ation)|set[\W_]?up|startup|start[\W_]up)(?:$|[^\w])"
)
_SETUP_RANGE_KIND = re.compile(r"(?i)compil")


def bare_name(name: str) -> str:
    """A range's function name without decoration (see :data:`_DECORATION`)."""
    bare = _DECORATION.sub("", name.strip())
    return _QUALIFIER.sub("", bare) if " " not in bare else bare


@lru_cache(maxsize=1 << 14)
def _named_kind(name: str) -> int:
    """Index into KIND_ORDER of a compile or capture range by name, -1 when neither."""
    if not any(hint in name for hint in _HINTS):
        return -1
    bare = bare_name(name)
    if _pattern(_COMPILE).search(name) or _pattern(_COMPILE).search(bare):
        return KIND_ORDER.index(WarmupKind.COMPILE)
    if _pattern(_CAPTURE_FRAME).search(name):
        return KIND_ORDER.index(WarmupKind.GRAPH_CAPTURE)
    return -1


def startup_phases(
    trace: Trace, host: HostIndex, window: tuple[int, int] | None = None
) -> list[Phase]:
    """Every start-up (and teardown) phase on the host side of ``trace``, by start time;
    ``window`` is the profiled window (:func:`~gpuscope.analyses.window.profiled_window`), whose
    edges the position rules read."""
    ev = trace.events
    phases: list[Phase] = []
    runtime = np.flatnonzero((ev.kind == Kind.RUNTIME) & (ev.device < 0))
    if runtime.size:
        phases += _runtime_phases(trace, host, runtime)
    named = np.flatnonzero(ev.of_kind(Kind.CPU_OP, Kind.ANNOTATION, Kind.PYTHON))
    if named.size:
        phases += _named_phases(trace, named)
        phases += _setup_ranges(trace)
        phases += _silent_compiles(trace, host, named)
        phases += _slow_first_calls(trace)
    phases += _silent_before_generated(trace, host)
    if window is not None:
        phases += _edges(trace, host, window)
    phases += _first_step(trace)
    phases.sort(key=lambda p: (p.start_ns, p.end_ns))
    return phases


#: A stretch of the launching thread with nothing recorded, this long, is silence to explain.
SILENCE_MIN_NS = 1_000_000
#: Silence before a generated kernel's first launch is its compilation when at least this long:
#: Inductor takes tens of ms to load a compiled graph from its cache and seconds to compile one;
#: shorter silences are ordinary host work the trace does not record.
COMPILE_SILENCE_MIN_NS = 20_000_000
#: Kernels generated at run time (Inductor/Triton, nvFuser, NVRTC-built): their first launch
#: follows their compilation.
_GENERATED_KERNEL = re.compile(
    r"^triton_|^triton\w*_kernel|^(?:kernel|fused)_?\d+|^CudaCodeGen|nvfuser"
)


def _silences(trace: Trace, host: HostIndex, lo: int, hi: int) -> Intervals:
    """Stretches of ``[lo, hi)`` in which the launching thread recorded nothing new: no host
    event of it starts or ends there (a frame that encloses the whole stretch only says the
    program runs), each at least :data:`SILENCE_MIN_NS`."""
    ev = trace.events
    pid, tid = host.main_thread
    rows = host.rows_of_thread(pid, tid)
    rows = rows[ev.device[rows] < 0]
    if hi - lo < SILENCE_MIN_NS:
        return Intervals.empty()
    marks = np.concatenate([ev.start_ns[rows], ev.end_ns[rows], [lo, hi]])
    marks = distinct(np.clip(marks, lo, hi))
    step = np.diff(marks)
    long = np.flatnonzero(step >= SILENCE_MIN_NS)
    return Intervals(marks[long].astype(np.int64), marks[long + 1].astype(np.int64))


def _device_extent(trace: Trace) -> tuple[int, int] | None:
    ev = trace.events
    device = ev.of_kind(*BUSY_KINDS) & (ev.dur_ns > 0)
    if not device.any():
        return None
    return int(ev.start_ns[device].min()), int(ev.end_ns[device].max())


def _edges(trace: Trace, host: HostIndex, window: tuple[int, int]) -> list[Phase]:
    """Start-up and teardown by position. Before the first device work of a trace without
    profiled steps the program is starting (imports, reading data, building the model): silence
    there (nothing recorded on the launching thread) is process start-up. After the last device
    work, freeing device memory and unloading modules is the process exiting, and silence is its
    teardown. Inside profiled steps nothing is start-up by position: a step repeats, so what it
    does before its first kernel (preprocessing a request) is paid every time. Before the first
    device work, time it already waited in the queue is work from before the capture."""
    extent = _device_extent(trace)
    if extent is None:
        return []
    first, last = extent
    ev = trace.events
    found: list[Phase] = []
    # The first device work was launched well before it ran, and nothing recorded ran before
    # it: the device was busy with work queued before the capture began (or the host and
    # device clocks disagree). That stretch is not idle time of this capture.
    device = np.flatnonzero(ev.of_kind(*BUSY_KINDS) & (ev.dur_ns > 0) & (ev.start_ns == first))
    launcher = ev.link[device]
    # Queued when its launch call returned (a first launch may spend long loading a module).
    launched = ev.end_ns[launcher[launcher >= 0]]
    if launched.size and first - int(launched.min()) >= SILENCE_MIN_NS:
        at = int(launched.min())
        found.append(Phase(WarmupKind.EARLIER_WORK, at, first, int(launcher[launcher >= 0][0])))
        first = at
    if not trace.steps:
        lead = _silences(trace, host, window[0], first)
        for a, b in zip(lead.start_ns.tolist(), lead.end_ns.tolist(), strict=True):
            found.append(Phase(WarmupKind.PROCESS_START, a, b, -1))
        tail = _silences(trace, host, last, window[1])
        for a, b in zip(tail.start_ns.tolist(), tail.end_ns.tolist(), strict=True):
            found.append(Phase(WarmupKind.TEARDOWN, a, b, -1))
    # Memory released after the last device work, before the end: the program is exiting.
    exiting = (ev.kind == Kind.RUNTIME) & (ev.start_ns >= last)
    frees = np.flatnonzero(exiting & (host.activity == HostActivity.ALLOCATOR))
    for r in frees.tolist():
        if runtime_role(trace.name(r)) in ALLOCATOR and "Free" in trace.name(r):
            found.append(Phase(WarmupKind.TEARDOWN, int(ev.start_ns[r]), int(ev.end_ns[r]), r))
    return found


def _setup_ranges(trace: Trace) -> list[Phase]:
    """User ranges named for one-time set-up (see :data:`_SETUP_RANGE`): a ``warmup`` or
    ``compile`` range around the first iterations, ``MPI_Init``. The user said what it is."""
    ev = trace.events
    rows = np.flatnonzero(ev.kind == Kind.ANNOTATION)
    if not rows.size:
        return []
    ids = ev.name_id[rows]
    used = np.flatnonzero(np.bincount(ids, minlength=len(trace.names)))
    kind_of = np.full(len(trace.names), -1, dtype=np.int8)
    for i in used.tolist():
        name = trace.names[i]
        if name.startswith("ProfilerStep") or not _SETUP_RANGE.search(name):
            continue
        compile_ = _SETUP_RANGE_KIND.search(name) is not None
        kind = WarmupKind.COMPILE if compile_ else WarmupKind.FIRST_STEP
        if not compile_ and re.search(r"(?i)init|set[\W_]?up|start", name):
            kind = WarmupKind.LIBRARY_INIT
        kind_of[i] = KIND_ORDER.index(kind)
    hit = rows[kind_of[ids] >= 0]
    return [
        Phase(KIND_ORDER[int(kind_of[ev.name_id[r]])], int(ev.start_ns[r]), int(ev.end_ns[r]), r)
        for r in hit.tolist()
    ]


def _slow_first_calls(trace: Trace) -> list[Phase]:
    """An operator's first call that takes far longer than its later ones (at least
    :data:`CONTEXT_MIN_NS`, and :data:`CONTEXT_RATIO` times their median) paid for a one-time
    set-up inside it: cuDNN's benchmark mode times several algorithms (with event syncs) on a
    convolution's first call per shape, cuBLAS and cuDNN create their handles and workspaces, a
    lazily loaded module is loaded. The syncs inside it are that autotuning, not the program
    waiting on results. Only the outermost op counts (its children are the same set-up), and
    only one that calls the runtime inside."""
    ev = trace.events
    all_ops = np.flatnonzero(ev.kind == Kind.CPU_OP)
    # The calls of one operator on one thread, in row order: each one's first row and count.
    key = ev.name_id[all_ops].astype(np.int64) << 32 | (
        ev.tid[all_ops].astype(np.int64) & 0xFFFFFFFF
    )
    # Only an operator with a call that long can have a first call that long: the calls of the
    # others are left out before sorting (a few keys of tens of thousands).
    kept = member(key, distinct(key[ev.dur_ns[all_ops] >= CONTEXT_MIN_NS]))
    all_ops, key = all_ops[kept], key[kept]
    order = np.argsort(key, kind="stable")
    ordered = key[order]
    first = np.ones(order.size, dtype=np.bool_)
    first[1:] = ordered[1:] != ordered[:-1]
    starts = np.flatnonzero(first)
    counts = np.diff(np.append(starts, order.size))
    firsts = all_ops[order[starts]]
    long_first = (ev.dur_ns[firsts] >= CONTEXT_MIN_NS) & (counts >= 2)
    group_of = {
        int(r): (int(b), int(n))
        for r, b, n in zip(firsts[long_first], starts[long_first], counts[long_first], strict=True)
    }
    ops = np.sort(firsts[long_first])
    # Set-up for the device calls the runtime: an op that makes no runtime call (a cast on the
    # CPU, a first ``torch.load``) is the host's own work, whatever its first call costs.
    runtime = np.flatnonzero(ev.kind == Kind.RUNTIME)
    runtime_starts = ev.start_ns[runtime]
    found: list[Phase] = []
    covered_until = -1
    for r in ops.tolist():
        if int(ev.start_ns[r]) < covered_until:
            continue
        begin, calls = group_of[r]
        same = all_ops[order[begin : begin + calls]]
        later = ev.dur_ns[same[1:]]
        lo, hi = int(ev.start_ns[r]), int(ev.end_ns[r])
        inside = runtime[(runtime_starts >= lo) & (runtime_starts < hi)]
        inside = inside[ev.tid[inside] == ev.tid[r]]
        # One long runtime call inside is that call's phase (context creation, a module
        # load), found by its own rule; the op's set-up is what remains besides it.
        longest = int(ev.dur_ns[inside].max()) if inside.size else hi - lo
        setup = hi - lo - longest >= CONTEXT_MIN_NS
        if setup and ev.dur_ns[r] >= CONTEXT_RATIO * float(np.median(later)):
            found.append(Phase(WarmupKind.LIBRARY_INIT, int(ev.start_ns[r]), int(ev.end_ns[r]), r))
            covered_until = int(ev.end_ns[r])
    return found


def _silent_before_generated(trace: Trace, host: HostIndex) -> list[Phase]:
    """Silence on the launching thread that ends with the first launch of a kernel generated at
    run time (``triton_*``): Inductor (or nvFuser, NVRTC) compiled it there. Compilation runs on
    the host between the last recorded event and that launch, and unless the compiler's own
    ranges are recorded, nothing marks it; the kernel cannot launch before it is built."""
    ev = trace.events
    launches = np.flatnonzero((ev.kind == Kind.RUNTIME) & (ev.link >= 0))
    if not launches.size:
        return []
    kernel = ev.link[launches]
    ids = ev.name_id[kernel]
    used = np.flatnonzero(np.bincount(ids, minlength=len(trace.names)))
    generated = np.zeros(len(trace.names), dtype=np.bool_)
    generated[used] = [_GENERATED_KERNEL.search(trace.names[i]) is not None for i in used.tolist()]
    if not generated[ids].any():
        return []
    order = np.argsort(ids, kind="stable")
    first = np.ones(order.size, dtype=np.bool_)
    first[1:] = ids[order][1:] != ids[order][:-1]
    firsts = launches[order[first]]
    firsts = firsts[generated[ev.name_id[ev.link[firsts]]]]
    found: list[Phase] = []
    for pid, tid in {(int(ev.pid[r]), int(ev.tid[r])) for r in firsts.tolist()}:
        thread = host.rows_of_thread(pid, tid)
        thread = thread[ev.device[thread] < 0]
        marks = distinct(np.concatenate([ev.start_ns[thread], ev.end_ns[thread]]))
        if marks.size < 2:
            continue
        step = np.diff(marks)
        silent = np.flatnonzero(step >= SILENCE_MIN_NS)
        silent_end = marks[silent + 1]
        mine = launches[(ev.pid[launches] == pid) & (ev.tid[launches] == tid)]
        launched = np.sort(ev.start_ns[mine])
        for r in firsts[(ev.pid[firsts] == pid) & (ev.tid[firsts] == tid)].tolist():
            t = int(ev.start_ns[r])
            # The last silence before the launch, with nothing launched between the two.
            k = int(np.searchsorted(silent_end, t, side="right")) - 1
            if k < 0:
                continue
            a, b = int(marks[silent[k]]), int(silent_end[k])
            if b - a < COMPILE_SILENCE_MIN_NS:
                continue
            between = np.searchsorted(launched, t) - np.searchsorted(launched, b)
            if between == 0:
                found.append(Phase(WarmupKind.COMPILE, a, b, r))
    return found


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
            far_longer = later.size < 3 or ev.dur_ns[r] >= CONTEXT_RATIO * _median(later.tolist())
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
    typical = float(_median([s.dur_ns for s in steps[1:]]))
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


def steady_window(
    trace: Trace, phases: list[Phase], window: tuple[int, int] | None = None
) -> SteadyWindow | None:
    """Where the steady state begins and ends: the latest end of a start-up phase such that
    what follows holds at least :data:`STEADY_MIN_STEPS` steps or :data:`STEADY_MIN_BUSY_SHARE`
    of the device time (in :data:`STEADY_MIN_WORK` kernels and copies or more), and what
    precedes it is mostly start-up (its idle time mostly inside phases, and at least
    :data:`EXCLUDED_MIN_SPAN_SHARE` of the span); and, after the last device work, the start of
    teardown when the rest is mostly teardown. ``window`` is the profiled window (the span is
    that window, widened to the device work). None when neither end has anything to leave out."""
    if not phases:
        return None
    ev = trace.events
    device = np.flatnonzero(ev.of_kind(*BUSY_KINDS) & (ev.dur_ns > 0))
    if device.size == 0:
        return None
    busy = union(ev.start_ns[device], ev.end_ns[device])
    starts = np.sort(ev.start_ns[device])
    first, last = int(busy.start_ns[0]), int(busy.end_ns[-1])
    lo, hi = (first, last) if window is None else (min(first, window[0]), max(last, window[1]))
    total = busy.total_ns
    idle = gaps(busy, lo, hi)
    covered = phase_intervals(phases)
    all_phases = union(
        np.concatenate([c.start_ns for c in covered.values()]),
        np.concatenate([c.end_ns for c in covered.values()]),
    )
    end = _teardown_start(phases, idle, all_phases, (lo, hi), last)
    step_starts = np.array(sorted(s.start_ns for s in trace.steps), dtype=np.int64)
    for begin in sorted({p.end_ns for p in phases}, reverse=True):
        if begin <= lo or begin >= last:
            continue
        after = clip(busy, begin, hi).total_ns
        steps_after = int(step_starts.size - np.searchsorted(step_starts, begin))
        work_after = int(device.size - np.searchsorted(starts, begin))
        steady = (trace.steps and steps_after >= STEADY_MIN_STEPS) or (
            after >= STEADY_MIN_BUSY_SHARE * total and work_after >= STEADY_MIN_WORK
        )
        if not steady:
            continue
        before_idle = clip(idle, lo, begin)
        startup = intersection(before_idle, all_phases).total_ns
        enough = startup >= EXCLUDED_MIN_SPAN_SHARE * (hi - lo)
        if enough and startup >= EXCLUDED_STARTUP_SHARE * before_idle.total_ns:
            # Teardown is weighed against the steady state that is left, not the whole span.
            end = _teardown_start(phases, idle, all_phases, (begin, hi), last)
            excluded = [p for p in phases if p.start_ns < begin and p.end_ns > lo]
            excluded += [p for p in phases if p.end_ns > end and p.start_ns < hi]
            return SteadyWindow(begin, end, excluded)
    if end < hi:
        return SteadyWindow(lo, end, [p for p in phases if p.end_ns > end and p.start_ns < hi])
    return None


def _teardown_start(
    phases: list[Phase], idle: Intervals, all_phases: Intervals, span: tuple[int, int], last: int
) -> int:
    """Where teardown begins after the last device work (``last``): the earliest teardown
    phase there, when phases cover most of the idle time from it to the end and at least
    :data:`EXCLUDED_MIN_SPAN_SHARE` of the span (a millisecond of exit in a long trace is not
    worth a window: it stays in it, as start-up time); else the span's end."""
    lo, hi = span
    down = [p for p in phases if p.kind is WarmupKind.TEARDOWN and p.end_ns > last]
    if not down or hi <= last:
        return hi
    begin = max(last, min(p.start_ns for p in down))
    rest = clip(idle, begin, hi)
    explained = intersection(rest, all_phases).total_ns
    enough = explained >= EXCLUDED_MIN_SPAN_SHARE * (hi - lo)
    if enough and explained >= EXCLUDED_STARTUP_SHARE * rest.total_ns:
        return begin
    return hi


def kept_rows(trace: Trace, start_ns: int, end_ns: int | None = None) -> NDArray[np.int64]:
    """The rows :func:`cut` keeps, ascending."""
    ev = trace.events
    on_device = ev.of_kind(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC, Kind.GPU_ANNOTATION)
    keep = np.where(on_device, ev.start_ns >= start_ns, ev.end_ns > start_ns)
    if end_ns is not None:
        keep &= ev.start_ns < end_ns
    return np.flatnonzero(keep).astype(np.int64)


def rebase(phases: list[Phase], rows: NDArray[np.int64]) -> list[Phase]:
    """``phases`` with their rows renumbered into a trace holding only ``rows`` (ascending,
    :func:`kept_rows`); a phase whose row was not kept keeps no row (-1)."""
    at = np.searchsorted(rows, [p.row for p in phases]).tolist()
    return [
        replace(p, row=i if p.row >= 0 and i < rows.size and int(rows[i]) == p.row else -1)
        for p, i in zip(phases, at, strict=True)
    ]


def cut(trace: Trace, start_ns: int, end_ns: int | None = None) -> Trace:
    """The trace from ``start_ns`` on (to ``end_ns``, when given): device work that starts
    then or later, host events still running then or later (an enclosing Python frame stays, so
    code locations resolve), and the steps that begin then or later; before ``end_ns``, what
    starts before it."""
    ev = trace.events
    rows = kept_rows(trace, start_ns, end_ns)
    return replace(
        trace,
        events=ev.take(rows),
        steps=[
            s
            for s in trace.steps
            if s.start_ns >= start_ns and (end_ns is None or s.start_ns < end_ns)
        ],
        warnings=list(trace.warnings),
        metadata=dict(trace.metadata),
    )


def _median(values: list[int]) -> float:
    """``statistics.median`` of a non-empty list (the middle value, or the mean of the middle
    two), without importing :mod:`statistics` (and :mod:`random`, :mod:`fractions` with it: ~6
    ms of start-up)."""
    ordered = sorted(values)
    half = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[half]
    return (ordered[half - 1] + ordered[half]) / 2
