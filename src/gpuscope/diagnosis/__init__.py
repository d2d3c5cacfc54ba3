"""Diagnosis: run every analysis on a job and gather the results renderers present.

Contract: :func:`diagnose` is pure (a :class:`~gpuscope.model.Job` in, a :class:`Diagnosis` out)
and never prints. One :class:`DeviceReport` per device per rank, in rank then device order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuscope.analyses.timeline import (
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


@dataclass(frozen=True)
class Diagnosis:
    source: str
    inputs: list[InputSummary]
    devices: list[DeviceReport]
    warnings: list[str] = field(default_factory=list)


def diagnose(job: Job, options: Options | None = None) -> Diagnosis:
    options = options or Options()
    devices = [
        _device_report(trace, device, options)
        for trace in job.traces
        for device in trace.device_ids
    ]
    return Diagnosis(
        source=job.source,
        inputs=[_input_summary(t) for t in job.traces],
        devices=devices,
        warnings=job.warnings,
    )


def _device_report(trace: Trace, device: int, options: Options) -> DeviceReport:
    work = device_work(trace, device)
    info = trace.devices.get(device) or DeviceInfo(device, None, None, None, None, None)
    return DeviceReport(
        source=trace.source,
        rank=trace.rank,
        world_size=trace.world_size,
        device=device,
        info=info,
        facts=match_device(info.name, num_sms=info.num_sms),
        span_start_ns=work.span_start_ns,
        span_end_ns=work.span_end_ns,
        temporal=temporal_breakdown(work),
        overlap=overlap(work),
        kernels=kernel_breakdown(work, top=options.top_kernels),
        streams=stream_idle(work),
        steps=step_breakdown(work),
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
