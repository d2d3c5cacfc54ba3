"""Diagnosis: run every analysis on a job and gather the results renderers present.

Contract: :func:`diagnose` is pure (a :class:`~gpuscope.model.Job` in, a :class:`Diagnosis` out)
and never prints. One :class:`DeviceReport` per device per rank, in rank then device order.

The window: one-time start-up (context creation, lazy module loading, compilation, graph capture;
see :mod:`gpuscope.analyses.phases`) is not a bottleneck. When a trace has a steady state after
its start-up, every figure describes the steady state; ``Diagnosis.window`` says what was left
out and the first finding names it. ``Options(whole=True)`` analyses the whole trace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec
from msgspec.structs import replace

from gpuscope._aside import Helper, Later
from gpuscope.analyses.attribution import IdleAttribution, attribute_idle
from gpuscope.analyses.bounds import KernelBounds, kernel_bounds
from gpuscope.analyses.drawn import DeviceSeries, Drawn, device_series, drawn, kernel_time
from gpuscope.analyses.host import HostIndex, host_activity
from gpuscope.analyses.memory import MemoryReport
from gpuscope.analyses.operators import DeviceViews, HostScopes, device_views, host_scopes
from gpuscope.analyses.phases import (
    cut,
    kept_rows,
    rebase,
    startup_phases,
    steady_window,
)
from gpuscope.analyses.ranks import (
    Participant,
    RankAnalysis,
    RankSummary,
    analyse_ranks,
    summarise,
)
from gpuscope.analyses.timeline import (
    DeviceWork,
    KernelStat,
    Overlap,
    StepStat,
    StreamIdle,
    TemporalBreakdown,
    device_work,
    kernel_breakdown,
    overlap,
    step_breakdown,
    stream_idle,
    temporal_breakdown,
)
from gpuscope.analyses.whatif import Prediction, build_graph
from gpuscope.analyses.window import profiled_window, real_steps
from gpuscope.diagnosis.evidence import JobContext, TraceContext
from gpuscope.diagnosis.findings import (
    DeviceEvidence,
    Finding,
    Verdict,
    findings,
    price,
    rank_evidence,
    ranked,
    verdict,
    world_size,
)
from gpuscope.diagnosis.startup import (
    StartupEvidence,
    Window,
    revise,
    startup_evidence,
    window_of,
)
from gpuscope.facts import GpuFacts, device_facts
from gpuscope.model import DeviceInfo, Job, Kind, Trace

if TYPE_CHECKING:  # measurements (ncu, sampled utilisation) load only when a job has them
    from gpuscope.analyses.counters import CounterSummary, MeasuredBounds
    from gpuscope.analyses.samples import GpuUtilisation, SampleOptions


class Options(msgspec.Struct, frozen=True):
    top_kernels: int = 10
    gpu_hour_usd: float | None = None  # overrides the facts table's price
    samples: SampleOptions | None = None  # idle/gap thresholds of sampled inputs; None: defaults
    predict: bool = True  # replay each finding's fix for its predicted saving (analyses.whatif)
    whole: bool = False  # analyse the whole trace, start-up included
    gpu: str | None = None  # --gpu NAME: the device's name when the trace does not give one
    #: Compute what only the reports that draw or save the whole diagnosis read: the job's
    #: timeline and utilisation series (``Diagnosis.drawn``), each device's busy heat map and
    #: roofline points, each memory report's timeline and the views' links from findings'
    #: locations to module rows (``location_rows``). The HTML report draws them and ``--json``
    #: saves them; a command that only prints to a terminal skips them (None or empty then).
    charts: bool = True


class InputSummary(msgspec.Struct, frozen=True):
    path: str
    format: str
    schema: str
    rank: int | None
    world_size: int | None
    events: int
    steps: int
    #: The trace's wall-clock origin (Kineto's ``baseTimeNanoseconds``), when it records one.
    base_time_ns: int | None = None


class DeviceReport(msgspec.Struct, frozen=True):
    source: str
    rank: int | None
    world_size: int | None
    device: int
    info: DeviceInfo
    facts: GpuFacts | None
    span_start_ns: int
    span_end_ns: int
    temporal: TemporalBreakdown
    overlap: Overlap
    kernels: list[KernelStat]
    streams: list[StreamIdle]
    steps: list[StepStat]
    idle: IdleAttribution
    bounds: KernelBounds
    series: DeviceSeries  # what the reports draw of this device
    counters: MeasuredBounds | None = None  # set when an ncu report measured some kernels
    views: DeviceViews | None = None  # device time per module path and per operator
    #: Time spent spinning inside collectives for a late peer with nothing else running: busy on
    #: the timeline (HTA counts it so), but waiting, not work (set from the rank analysis).
    peer_wait_ns: int = 0

    @property
    def busy_pct(self) -> float:
        """Share of the span doing work: the timeline's busy time less the waiting for peers."""
        return self.temporal.pct(self.temporal.busy_ns - self.peer_wait_ns)


class Diagnosis(msgspec.Struct, frozen=True):
    source: str
    inputs: list[InputSummary]
    devices: list[DeviceReport]
    verdict: Verdict
    findings: list[Finding]
    warnings: list[str] = msgspec.field(default_factory=list)
    based_on: str = "timeline"  # "timeline", "timeline+ncu", "samples", "samples+ncu", "ncu"
    sampled: list[GpuUtilisation] = msgspec.field(default_factory=list)  # per sampled GPU
    counters: list[CounterSummary] = msgspec.field(default_factory=list)  # per ncu report
    ranks: RankAnalysis | None = None  # several ranks, or any collective: who waits for whom
    window: Window | None = None  # set when start-up was left out of the analysed window
    #: Every fix with an edit, replayed together as one edit set (never the findings' sum).
    all_fixes: Prediction | None = None
    drawn: Drawn | None = None  # the job's timeline and utilisation series (None: no devices)
    #: Device time per kernel name (stable part), per ``kernel_unit`` ("step", or "s": per second
    #: of span when there are no steps) and per device: what a diff compares.
    kernel_unit: str = "s"
    kernel_ns: dict[str, float] = msgspec.field(default_factory=dict)
    #: What holds each GPU's memory (allocator snapshots, or a trace's memory events).
    memory: list[MemoryReport] = msgspec.field(default_factory=list)


def diagnose(job: Job, options: Options | None = None) -> Diagnosis:
    options = options or Options()
    if job.memory and not (job.traces or job.counters or job.samples):
        from gpuscope.diagnosis.memory import diagnose_memory  # noqa: PLC0415

        return diagnose_memory(job, options)
    if job.counters or job.samples or any(t.counters for t in job.traces):
        # Kernel counters (ncu, sampled hardware counters) and sampled utilisation: their
        # modules load only when needed.
        from gpuscope.diagnosis.measured import diagnose_measured  # noqa: PLC0415

        return diagnose_measured(job, options)
    return diagnose_timelines(job, options).diagnosis


class TimelineDiagnosis(msgspec.Struct, frozen=True):
    diagnosis: Diagnosis
    gpu_hour_usd: float | None  # the price the timelines' devices gave, and its source
    price_source: str
    #: One per device, when asked for (``summarise_from``): what the cross-rank analysis of a
    #: job read on many workers needs of this job's devices (:mod:`gpuscope.distributed`).
    summaries: list[RankSummary] = msgspec.field(default_factory=list)


def diagnose_timelines(
    job: Job,
    options: Options,
    adjust: Callable[[KernelBounds, DeviceWork], MeasuredBounds | None] | None = None,
    summarise_from: int | None = None,
) -> TimelineDiagnosis:
    """The diagnosis of the job's timelines; ``adjust`` revises each device's kernel bounds
    first (with measured counters). ``summarise_from``: also reduce each device to a
    ``RankSummary``, numbering the ranks no trace names from it (the job is part of a larger one).

    The device work (which holds the trace) lives only while this runs: the reports and the
    diagnosis hold what the analyses computed from it, never the trace."""
    with Helper(parallel=_worth_a_helper(job)) as helper:
        return _timelines(job, options, adjust, summarise_from, helper)


#: The events of a trace from which its diagnosis runs pieces on a helper thread: below it,
#: numpy's calls are too short for the overlap to pay for the GIL's hand-overs
#: (:mod:`gpuscope._aside`; measured across the corpus: ``benchmarks/helper_sweep.py``).
HELPER_MIN_EVENTS = 100_000
#: ... and up to which: beyond it the pieces' arrays are tens of MB of fresh memory each, page
#: faults set their pace (two threads faulting in one address space wait on each other), and
#: the pieces' memory is held at once: the replays' graph beside the device analyses took an
#: 8.6 GB trace (21.8 M events) over issue 31's 3 GiB.
HELPER_MAX_EVENTS = 1_000_000


def _worth_a_helper(job: Job) -> bool:
    """Whether a helper thread gains on the job: a trace long enough, none too long."""
    lengths = [len(t.events) for t in job.traces]
    return bool(lengths) and HELPER_MIN_EVENTS <= max(lengths) < HELPER_MAX_EVENTS


def _timelines(
    job: Job,
    options: Options,
    adjust: Callable[[KernelBounds, DeviceWork], MeasuredBounds | None] | None,
    summarise_from: int | None,
    helper: Helper,
) -> TimelineDiagnosis:
    """:func:`diagnose_timelines`, with the pieces that need nothing computed after them begun on
    ``helper``'s thread (:mod:`gpuscope._aside`): each device's idle attribution and, when fixes
    are replayed, each trace's graph (:func:`_analysed`); the memory section."""
    contexts, startup, memory_hosts = _traces_analysed(job, options, adjust, helper)
    later_memory = helper.start(_memory, memory_hosts, options)
    traces = [c.trace for c in contexts]
    evidence = [e for c in contexts for e in c.devices]
    devices = [e.report for e in evidence]
    works = [e.work for e in evidence]
    kinds = [k for d in devices for k in next((c.kinds for c in d.idle.causes if c.kinds), [])]
    gpus = world_size(evidence, max((t.world_size or 0 for t in job.traces), default=0))
    gpu_hour_usd, price_source = price(evidence, options.gpu_hour_usd)
    participants = _participants(contexts, devices, works, summarise_from or 0)
    ranks = _ranks(devices, participants)
    devices = _with_peer_waits(devices, ranks)
    extra = rank_evidence(ranks, gpu_hour_usd, gpus) if ranks is not None else None
    found = findings(evidence, gpu_hour_usd, gpus, extra)
    memory, memory_found = later_memory.result()
    all_fixes = None
    saving_usd: float | None = None
    if options.predict:
        from gpuscope.diagnosis.predict import predict, priced  # noqa: PLC0415

        job_context = JobContext(contexts, participants, ranks, gpu_hour_usd, gpus)
        found, all_fixes = predict(found, job_context)
        saving_usd = priced(found, all_fixes, gpu_hour_usd)
    # The headline's dollars are what fixing everything is predicted to save (the all-fixes
    # replay, priced), never the findings' dollars added up: their savings overlap.
    judged = verdict(
        evidence,
        found,
        gpu_hour_usd,
        price_source,
        gpus,
        saving_usd,
        ranks.exposed_wait_ns if ranks is not None else 0,
    )
    if startup or kinds:
        span = sum(d.temporal.span_ns for d in devices)
        # Runtime-level advice for programs with no framework operators (CUDA C, MPI, HIP).
        framework = any(t.events.of_kind(Kind.CPU_OP, Kind.PYTHON).any() for t in traces)
        found, judged = revise(found, judged, kinds, startup, span, options.whole, framework)
        found = ranked(found)  # what start-up adds saves nothing per step: it goes last
    # Memory findings cost bytes, not time: after the time findings, outside verdict and prices.
    found = found + memory_found
    kernel_unit, kernel_ns = kernel_time(works, [d.steps for d in devices])
    charts = None
    if works and options.charts:
        charts = drawn(works, [d.idle for d in devices], [d.bounds for d in devices])
    result = Diagnosis(
        source=job.source,
        inputs=[_input_summary(t, devices) for t in traces],
        devices=devices,
        verdict=judged,
        findings=found,
        warnings=job.warnings,
        ranks=ranks,
        window=window_of(startup),
        all_fixes=all_fixes,
        drawn=charts,
        kernel_unit=kernel_unit,
        kernel_ns=kernel_ns,
        memory=memory,
    )
    reduced = [summarise(p) for p in participants] if summarise_from is not None else []
    return TimelineDiagnosis(result, gpu_hour_usd, price_source, reduced)


def _traces_analysed(
    job: Job,
    options: Options,
    adjust: Callable[[KernelBounds, DeviceWork], MeasuredBounds | None] | None,
    helper: Helper,
) -> tuple[list[TraceContext], list[StartupEvidence], list[tuple[Trace, HostIndex]]]:
    """Each trace analysed (:func:`_analysed`), what start-up each left out, and the whole
    traces that record allocations with their host index (what the memory section reads)."""
    contexts: list[TraceContext] = []
    startup: list[StartupEvidence] = []
    memory_hosts: list[tuple[Trace, HostIndex]] = []
    for given in job.traces:
        context, left_out = _analysed(given, options, adjust, helper, graph=options.predict)
        if given.memory is not None:  # read over the whole trace, start-up included
            memory_hosts.append((given, host_activity(given) if left_out else context.host))
        contexts.append(context)
        startup += [left_out] if left_out is not None else []
    return contexts, startup, memory_hosts


def participants_of(job: Job, options: Options, first_rank: int = 0) -> list[Participant]:
    """The job's devices as :func:`diagnose_timelines` analyses them (each trace cut to its
    steady state unless ``options.whole``), one participant per device: what a straggler's
    detail is read from when its rank is read again on a worker (:mod:`gpuscope.distributed`)."""
    with Helper(parallel=_worth_a_helper(job)) as helper:
        contexts = [_analysed(given, options, None, helper)[0] for given in job.traces]
    evidence = [e for c in contexts for e in c.devices]
    devices, works = [e.report for e in evidence], [e.work for e in evidence]
    return _participants(contexts, devices, works, first_rank)


def _memory(
    traces: list[tuple[Trace, HostIndex]], options: Options
) -> tuple[list[MemoryReport], list[Finding]]:
    """The memory reports and findings of the traces that record allocator events."""
    if not traces:
        return [], []
    from gpuscope.diagnosis.memory import trace_memory  # noqa: PLC0415

    return trace_memory(traces, options)


def _analysed(
    given: Trace,
    options: Options,
    adjust: Callable[[KernelBounds, DeviceWork], MeasuredBounds | None] | None,
    helper: Helper,
    *,
    graph: bool = False,
) -> tuple[TraceContext, StartupEvidence | None]:
    """One trace analysed: cut to its steady state (unless ``options.whole``), its host events
    classified, and every device's report and evidence; and what start-up was left out.
    ``graph``: also begin the replays' graph of the trace as analysed (``TraceContext.graph``)."""
    trace = replace(given, steps=real_steps(given))
    profiled = profiled_window(trace)
    bounds = None if profiled is None else (profiled.start_ns, profiled.end_ns)
    host = host_activity(trace)
    phases = startup_phases(trace, host, bounds)
    window = steady_window(trace, phases, bounds) if phases and not options.whole else None
    left_out = None
    if window is not None:
        left_out = startup_evidence(trace, host, phases, window, bounds)
        kept = kept_rows(trace, window.start_ns, window.end_ns)
        trace = cut(trace, window.start_ns, window.end_ns)
        bounds = (window.start_ns, window.end_ns)
        host = host_activity(trace)
        inside = [p for p in phases if window.start_ns < p.end_ns and p.start_ns < bounds[1]]
        phases = rebase(inside, kept)
    context = TraceContext(trace, host, phases)
    ids = trace.device_ids
    works = [device_work(trace, device, bounds) for device in ids]
    # Begun in the order they are needed: each device's idle attribution (its report), then the
    # graph (the predictions, once every report and finding is made).
    idles = [helper.start(attribute_idle, work, host, phases) for work in works]
    if graph and ids:
        context.graph = helper.start(build_graph, trace)
    # Meanwhile, what the views read: the analysed window's ranges (the trace as cut, when it was).
    scopes = host_scopes(trace) if ids else None
    for work, idle in zip(works, idles, strict=True):
        report = _device_report(trace, work, options, idle, scopes, adjust)
        context.devices.append(_evidence(trace, report, work))
    return context, left_out


def _ranks(devices: list[DeviceReport], participants: list[Participant]) -> RankAnalysis | None:
    """The rank analysis when there is more than one GPU or any collective."""
    multi = len(devices) > 1 or any((d.world_size or 0) > 1 for d in devices)
    if not devices or not (multi or any(d.temporal.communication_ns for d in devices)):
        return None
    return analyse_ranks(participants)


def _with_peer_waits(devices: list[DeviceReport], ranks: RankAnalysis | None) -> list[DeviceReport]:
    """Each device's report with its rank's waiting for late peers (see ``peer_wait_ns``)."""
    if ranks is None:
        return devices
    waits = {(r.source, r.device): r.exposed_wait_ns or 0 for r in ranks.ranks}
    return [
        msgspec.structs.replace(d, peer_wait_ns=waits.get((d.source, d.device), 0)) for d in devices
    ]


def _participants(
    contexts: list[TraceContext],
    devices: list[DeviceReport],
    works: list[DeviceWork],
    first_rank: int = 0,
) -> list[Participant]:
    """One participant per device report; ranks a trace does not name are numbered in file
    order (from ``first_rank``)."""
    host_of = {c.trace.source: c.host for c in contexts}
    return [
        Participant(
            report=d,
            work=work,
            rank=d.rank if d.rank is not None else first_rank + position,
            host=host_of.get(d.source),
        )
        for position, (d, work) in enumerate(zip(devices, works, strict=True))
    ]


def _device_report(
    trace: Trace,
    work: DeviceWork,
    options: Options,
    later_idle: Later[IdleAttribution],
    scopes: HostScopes | None,
    adjust: Callable[[KernelBounds, DeviceWork], MeasuredBounds | None] | None,
) -> DeviceReport:
    """One device's report; what reads its idle attribution (begun on the helper thread) is
    computed last."""
    device = work.device
    info = trace.devices.get(device) or DeviceInfo(device, None, None, None, None, None)
    facts = device_facts(info.name, num_sms=info.num_sms, gpu=options.gpu)
    bounds = kernel_bounds(work, facts)
    measured = adjust(bounds, work) if adjust is not None else None
    if measured is not None:
        bounds = measured.bounds
    steps = step_breakdown(work)
    temporal, overlapped = temporal_breakdown(work), overlap(work)
    kernels, streams = kernel_breakdown(work, top=options.top_kernels), stream_idle(work)
    idle = later_idle.result()
    return DeviceReport(
        source=trace.source,
        rank=trace.rank,
        world_size=trace.world_size,
        device=device,
        info=info,
        facts=facts,
        span_start_ns=work.span_start_ns,
        span_end_ns=work.span_end_ns,
        temporal=temporal,
        overlap=overlapped,
        kernels=kernels,
        streams=streams,
        steps=steps,
        idle=idle,
        bounds=bounds,
        series=device_series(work, idle, bounds, steps, options.charts),
        counters=measured,
        views=None if scopes is None else device_views(work, idle, scopes, options.charts),
    )


def _evidence(trace: Trace, report: DeviceReport, work: DeviceWork) -> DeviceEvidence:
    """The device's evidence; its steps are the step table's (profiler steps, else a repeated
    range or kernel sequence): one count of steps for every figure called "per step"."""
    return DeviceEvidence(report, work, steps=len(report.steps))


def _input_summary(trace: Trace, devices: list[DeviceReport]) -> InputSummary:
    """The input's summary; its steps are its devices' step tables' (see :func:`_evidence`)."""
    found = [len(d.steps) for d in devices if d.source == trace.source]
    return InputSummary(
        path=trace.source,
        format=trace.format,
        schema=trace.schema,
        rank=trace.rank,
        world_size=trace.world_size,
        events=len(trace.events),
        steps=max(found, default=len(trace.steps)),
        base_time_ns=_int_or_none(trace.metadata.get("base_time_ns")),
    )


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) else None
