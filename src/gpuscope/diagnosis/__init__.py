"""Diagnosis: run every analysis on a job and gather the results renderers present.

Contract: :func:`diagnose` is pure (a :class:`~gpuscope.model.Job` in, a :class:`Diagnosis` out)
and never prints. One :class:`DeviceReport` per device per rank, in rank then device order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuscope.analyses.attribution import IdleAttribution, attribute_idle
from gpuscope.analyses.bounds import KernelBounds, kernel_bounds
from gpuscope.analyses.host import HostIndex, host_activity
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
from gpuscope.diagnosis.findings import (
    DeviceEvidence,
    Finding,
    Verdict,
    findings,
    price,
    verdict,
    world_size,
)
from gpuscope.facts import GpuFacts, match_device
from gpuscope.model import DeviceInfo, Job, Trace


@dataclass(frozen=True)
class Options:
    top_kernels: int = 10
    gpu_hour_usd: float | None = None  # overrides the facts table's price


@dataclass(frozen=True)
class InputSummary:
    path: str
    format: str
    schema: str
    rank: int | None
    world_size: int | None
    events: int
    steps: int


@dataclass(frozen=True)
class DeviceReport:
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
    work: DeviceWork  # the classified device work the figures above come from


@dataclass(frozen=True)
class Diagnosis:
    source: str
    inputs: list[InputSummary]
    devices: list[DeviceReport]
    verdict: Verdict
    findings: list[Finding]
    warnings: list[str] = field(default_factory=list)


def diagnose(job: Job, options: Options | None = None) -> Diagnosis:
    options = options or Options()
    devices: list[DeviceReport] = []
    evidence: list[DeviceEvidence] = []
    for trace in job.traces:
        host = host_activity(trace)
        for device in trace.device_ids:
            report = _device_report(trace, device, options, host)
            devices.append(report)
            evidence.append(_evidence(trace, report))
    declared = max((t.world_size or 0 for t in job.traces), default=0)
    gpus = world_size(evidence, declared)
    gpu_hour_usd, price_source = price(evidence, options.gpu_hour_usd)
    found = findings(evidence, gpu_hour_usd, gpus)
    return Diagnosis(
        source=job.source,
        inputs=[_input_summary(t) for t in job.traces],
        devices=devices,
        verdict=verdict(evidence, found, gpu_hour_usd, price_source, gpus),
        findings=found,
        warnings=job.warnings,
    )


def _device_report(trace: Trace, device: int, options: Options, host: HostIndex) -> DeviceReport:
    work = device_work(trace, device)
    info = trace.devices.get(device) or DeviceInfo(device, None, None, None, None, None)
    facts = match_device(info.name, num_sms=info.num_sms)
    return DeviceReport(
        source=trace.source,
        rank=trace.rank,
        world_size=trace.world_size,
        device=device,
        info=info,
        facts=facts,
        span_start_ns=work.span_start_ns,
        span_end_ns=work.span_end_ns,
        temporal=temporal_breakdown(work),
        overlap=overlap(work),
        kernels=kernel_breakdown(work, top=options.top_kernels),
        streams=stream_idle(work),
        steps=step_breakdown(work),
        idle=attribute_idle(work, host),
        bounds=kernel_bounds(work, facts),
        work=work,
    )


def _evidence(trace: Trace, report: DeviceReport) -> DeviceEvidence:
    return DeviceEvidence(
        rank=report.rank,
        device=report.device,
        work=report.work,
        temporal=report.temporal,
        overlap=report.overlap,
        idle=report.idle,
        bounds=report.bounds,
        facts=report.facts,
        steps=len(trace.steps),
    )


def _input_summary(trace: Trace) -> InputSummary:
    return InputSummary(
        path=trace.source,
        format=trace.format,
        schema=trace.schema,
        rank=trace.rank,
        world_size=trace.world_size,
        events=len(trace.events),
        steps=len(trace.steps),
    )
