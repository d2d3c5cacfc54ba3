"""Diagnosis from measurements: Nsight Compute counters and sampled utilisation, with or without
timelines. Loaded only for jobs that have them (see :func:`gpuscope.diagnosis.diagnose`).
"""

from __future__ import annotations

from msgspec.structs import replace

from gpuscope.analyses.bounds import KernelBounds
from gpuscope.analyses.counter_series import apply_counter_series, device_series
from gpuscope.analyses.counters import (
    CounterSummary,
    MeasuredBounds,
    apply_counters,
    counter_index,
    summarize,
)
from gpuscope.analyses.samples import gpu_utilisation
from gpuscope.analyses.timeline import DeviceWork
from gpuscope.diagnosis import (
    DeviceReport,
    Diagnosis,
    InputSummary,
    Options,
    diagnose_timelines,
)
from gpuscope.diagnosis.sampled import (
    Price,
    counter_findings,
    counter_verdict,
    price_of,
    sampled_findings,
    sampled_verdict,
)
from gpuscope.facts import match_device
from gpuscope.model import Job


def diagnose_measured(job: Job, options: Options) -> Diagnosis:
    counters = [summarize(c) for c in job.counters]
    index = counter_index(counters) if counters else None

    def adjust(bounds: KernelBounds, work: DeviceWork) -> MeasuredBounds | None:
        """Measured limiters in place of the estimated bounds: Nsight Compute's for the kernels
        a report matches, else the sampled hardware counters' for the kernels they cover."""
        sampled = None
        series = device_series(work.trace.counters, work.device)
        if series:
            sampled = apply_counter_series(bounds, work, series)
        if index is not None:
            ncu = apply_counters(sampled.bounds if sampled else bounds, work, index)
            if ncu.measured_ns or sampled is None:
                return ncu
        return sampled

    timelines = diagnose_timelines(job, options, adjust)
    price = Price(timelines.gpu_hour_usd, timelines.price_source)
    return _with_measurements(timelines.diagnosis, job, counters, options, price)


def _with_measurements(
    result: Diagnosis,
    job: Job,
    counters: list[CounterSummary],
    options: Options,
    timeline_price: Price,
) -> Diagnosis:
    """Add what samples and counters say; without a timeline, they make the verdict."""
    sampled = [
        gpu_utilisation(g, s.source, s.format, match_device(g.name), options.samples)
        for s in job.samples
        for g in s.gpus
        if g.time_ns.size
    ]
    names = [g.name for g in sampled] + [c.device_name for c in counters] + [options.gpu]
    price = price_of(names, options.gpu_hour_usd)
    inputs = result.inputs + _measured_inputs(job)
    if job.traces:
        if price.gpu_hour_usd is None:
            price = timeline_price
        sources = {
            d.counters.source for d in result.devices if d.counters and d.counters.measured_ns
        }
        based_on = "timeline+ncu" if "ncu" in sources else "timeline"
        if sources - {"ncu"}:
            based_on += "+counters"
        return replace(
            result,
            verdict=replace(
                result.verdict,
                bound_evidence=bound_evidence(
                    result.devices, sampled=any(t.counters for t in job.traces)
                ),
            ),
            inputs=inputs,
            findings=result.findings + sampled_findings(sampled, price),
            based_on=based_on,
            sampled=sampled,
            counters=counters,
        )
    from_counters = counter_findings(counters, price)
    if sampled:
        from_samples = sampled_findings(sampled, price)
        verdict_ = sampled_verdict(sampled, from_samples, price)
        found, based_on = from_samples + from_counters, "samples+ncu" if counters else "samples"
    else:
        verdict_ = counter_verdict(counters, from_counters, price)
        found, based_on = from_counters, "ncu"
    return replace(
        result,
        inputs=inputs,
        verdict=verdict_,
        findings=found,
        based_on=based_on,
        sampled=sampled,
        counters=counters,
    )


def _measured_inputs(job: Job) -> list[InputSummary]:
    counters = [
        InputSummary(c.source, c.format, c.schema, None, None, len(c.kernels), 0)
        for c in job.counters
    ]
    samples = [
        InputSummary(
            s.source, s.format, s.format, None, None, sum(int(g.time_ns.size) for g in s.gpus), 0
        )
        for s in job.samples
    ]
    return counters + samples


def bound_evidence(devices: list[DeviceReport], *, sampled: bool = False) -> str:
    """Which evidence the verdict's bounds used: measured counters for how much kernel time,
    from what, with the costliest family's figures; the rest is the roofline estimate.
    ``sampled``: the traces hold sampled counters (said when they measured no kernel)."""
    measured = [d.counters for d in devices if d.counters is not None and d.counters.measured_ns]
    if not measured:
        if sampled:
            return (
                "hardware counters were sampled but cover no kernel (gaps, NaN, or no kernel"
                " under the samples): bounds estimated from kernel names and shapes (roofline)"
            )
        return ""
    kernel_ns = sum(d.counters.kernel_ns for d in devices if d.counters is not None)
    covered = sum(m.measured_ns for m in measured)
    share = 100.0 * covered / kernel_ns if kernel_ns else 0.0
    sources = " and ".join(dict.fromkeys(m.source for m in measured))
    text = f"bounds measured by {sources} for {share:.0f}% of kernel time"
    if covered < kernel_ns:
        text += ", the rest estimated from kernel names and shapes (roofline)"
    first = next((e for m in measured for e in m.evidence), None)
    return f"{text}; {first}" if first else text
