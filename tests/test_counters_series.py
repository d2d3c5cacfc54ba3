"""Sampled hardware counters (Nsight Systems GPU_METRICS, CUPTI PM sampling in Kineto and
.pftrace): read as time series, attributed to the kernels they overlap, and deciding the bound
where they cover a kernel, on generated traces with planted bounds."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuscope import diagnose
from gpuscope.analyses.bounds import Bound
from gpuscope.analyses.counter_series import Metric, counter_bound, family_counters, metric_of
from gpuscope.analyses.timeline import device_work
from gpuscope.compare.scaling import SweepOptions, sweep
from gpuscope.readers import load
from gpuscope.readers.kineto import read as read_kineto
from gpuscope.testing.counters import CASES, CounterCase, Family, counter_trace, write_counter_case
from gpuscope.testing.pftrace import write_pftrace


@pytest.mark.parametrize(
    ("name", "metric"),
    [
        ("DRAM Read Bandwidth [Throughput %]", Metric.DRAM_READ),
        ("DRAM Write Bandwidth [Throughput %]", Metric.DRAM_WRITE),
        ("Compute Warps in Flight [Throughput %]", Metric.WARPS_IN_FLIGHT),
        ("Unallocated Warps in Active SMs [Throughput %]", Metric.UNALLOCATED_WARPS),
        ("SMs Active [Throughput %]", Metric.SM_ACTIVE),
        ("SM Issue [Throughput %]", Metric.SM_ISSUE),
        ("Tensor Active [Throughput %]", Metric.TENSOR_ACTIVE),
        ("PCIe RX Throughput [Throughput %]", Metric.PCIE_RX),
        ("dram__read_throughput.avg.pct_of_peak_sustained_elapsed", Metric.DRAM_READ),
        ("sm__warps_active.avg.pct_of_peak_sustained_active", Metric.WARPS_IN_FLIGHT),
        ("sm__cycles_active.avg.pct_of_peak_sustained_elapsed", Metric.SM_ACTIVE),
        ("DRAM BW (%)", Metric.DRAM),  # PyTorch's exporter's labels
        ("HBM Read (%)", Metric.DRAM_READ),
        ("SM Active (%)", Metric.SM_ACTIVE),
        ("NVLink RX", None),  # bytes: no peak to compare with
        ("Power (W)", None),
        ("GPC Clock Frequency [MHz]", None),
    ],
)
def test_counters_are_named_once_for_every_tool(name: str, metric: Metric | None) -> None:
    assert metric_of(name) is metric


def test_the_seeds_decode_attention_figures_are_memory_bound_in_words() -> None:
    figures = {
        Metric.WARPS_IN_FLIGHT: 9.0,
        Metric.UNALLOCATED_WARPS: 64.0,
        Metric.DRAM_READ: 91.0,
        Metric.SM_ISSUE: 15.0,
    }
    bound, words = counter_bound(figures)
    assert bound is Bound.MEMORY
    assert words.startswith("DRAM read 91%, warps in flight 9%, unallocated warps in active SMs")
    assert "memory-bound" in words
    assert counter_bound({Metric.TENSOR_ACTIVE: 80.0, Metric.DRAM_READ: 20.0})[0] is Bound.COMPUTE
    assert counter_bound({Metric.SM_ISSUE: 20.0, Metric.DRAM_READ: 20.0})[0] is Bound.LATENCY
    assert counter_bound({Metric.WARPS_IN_FLIGHT: 20.0})[0] is None  # not enough to say


def _kineto(samples: list[tuple[float, Any]], name: str = "DRAM BW (%)") -> dict[str, Any]:
    """Two kernels on one stream, 10-20 µs and 30-40 µs, and counter samples."""
    events: list[dict[str, Any]] = [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts, "dur": 10.0,
         "args": {"device": 0, "stream": 7, "correlation": i}}
        for i, ts in enumerate((10.0, 30.0))
    ]  # fmt: skip
    events += [
        {"ph": "C", "name": name, "pid": "GPU 0 Counters", "ts": t, "args": {"": v}}
        for t, v in samples
    ]
    return {"traceEvents": events}


def test_kineto_counter_tracks_read_by_both_readers(tmp_path: Path) -> None:
    doc = _kineto([(0.0, 10.0), (5.0, 90.5), (10.0, None), (15.0, 40.0)])
    path = tmp_path / "pm.json"
    path.write_text(json.dumps(doc))
    for trace in (load(path).traces[0], read_kineto(path, path.read_bytes())):
        (series,) = trace.counters
        assert (series.device, series.name, series.source) == (0, "DRAM BW (%)", "kineto")
        assert series.time_ns.tolist() == [0, 5_000, 10_000, 15_000]
        assert series.value[[0, 1, 3]].tolist() == [10.0, 90.5, 40.0]
        assert math.isnan(series.value[2])  # null: not measured


def test_a_kernels_figure_is_the_time_weighted_mean_of_the_samples_over_it(tmp_path: Path) -> None:
    # Samples every 5 µs: the first kernel (10-20 µs) sees 60 then 80; the second (30-40 µs)
    # sees 20 for its first half, then a NaN (unmeasured) half.
    samples = [(t, 0.0) for t in (0.0, 5.0)] + [(10.0, 60.0), (15.0, 80.0), (20.0, 0.0)]
    samples += [(25.0, 0.0), (30.0, 20.0), (35.0, None), (40.0, 0.0), (45.0, 0.0)]
    path = tmp_path / "pm.json"
    path.write_text(json.dumps(_kineto(samples)))
    trace = load(path).traces[0]
    (family,) = family_counters(device_work(trace, 0), trace.counters)
    assert (family.kernels, family.time_ns, family.measured_ns) == (2, 20_000, 15_000)
    # (60*5 + 80*5 + 20*5) / 15 µs measured
    assert family.figures_pct == {"DRAM throughput": pytest.approx(53.33, abs=0.01)}


def test_nsys_gpu_metrics_are_time_series_with_null_as_a_gap(tmp_path: Path) -> None:
    case = CounterCase("one", CASES[0].families[:1], fmt="nsys", steps=2)
    (trace,) = load(write_counter_case(case, tmp_path)).traces
    names = {s.name for s in trace.counters}
    assert "Unallocated Warps in Active SMs [Throughput %]" in names and len(names) == 7
    dram = next(s for s in trace.counters if s.name.startswith("DRAM Read"))
    assert dram.source == "nsys" and dram.device == 0
    assert np.all(np.diff(dram.time_ns) == 2_000)
    assert trace.metadata["gpu_metrics"][0]["samples"] == dram.time_ns.size  # the means still


@pytest.mark.parametrize("case", CASES[:1] + CASES[3:4] + CASES[-2:], ids=lambda c: c.name)
def test_counters_decide_the_planted_bounds(tmp_path: Path, case: CounterCase) -> None:
    result = diagnose(load(write_counter_case(case, tmp_path)))
    assert result.based_on == "timeline+counters"
    (device,) = result.devices
    assert device.counters is not None and device.counters.source in (
        "nsys GPU metrics",
        "PM sampling",
    )
    measured = {f.name: f.bound for f in device.counters.families}
    assert measured == {f.name: f.bound for f in case.families}
    assert result.verdict.bound_evidence.startswith("bounds measured by ")
    assert "fmha_decode_paged_attention_kernel" in result.verdict.bound_evidence
    assert "DRAM near its peak bandwidth, memory-bound" in result.verdict.bound_evidence


def test_the_estimate_would_have_said_otherwise(tmp_path: Path) -> None:
    """Without the counters, names decide: the decode attention reads compute-bound."""
    doc = counter_trace(CASES[0])
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e["ph"] != "C"]
    path = tmp_path / "no_counters.json"
    path.write_text(json.dumps(doc))
    result = diagnose(load(path))
    assert result.based_on == "timeline" and result.verdict.bound_evidence == ""
    assert result.devices[0].counters is None
    assert result.verdict.bound == "compute"  # attention and GEMMs by their names


def test_counters_under_no_kernel_are_a_stated_gap(tmp_path: Path) -> None:
    case = CounterCase("idle", CASES[0].families, fmt="kineto", steps=3, hostile="idle_only")
    result = diagnose(load(write_counter_case(case, tmp_path)))
    assert result.devices[0].counters is None
    assert result.verdict.bound_evidence.startswith(
        "hardware counters were sampled but cover no kernel"
    )


def test_pftrace_counters_decide_as_the_json_does(tmp_path: Path) -> None:
    source = write_counter_case(CASES[0], tmp_path)
    pftrace = write_pftrace(source, tmp_path / "run.pftrace")
    (trace,) = load(pftrace).traces
    assert {s.source for s in trace.counters} == {"pftrace"} and len(trace.counters) == 6
    result = diagnose(load(pftrace))
    measured = {f.name: f.bound for f in result.devices[0].counters.families}  # type: ignore[union-attr]
    assert measured == {f.name: f.bound for f in CASES[0].families}


def _sweep_runs(tmp_path: Path, bound: str, dur_ns: int, gap_ns: int) -> list[Any]:
    runs = []
    for batch in (1, 2, 4):
        family = Family("fmha_decode_paged_attention_kernel", bound, dur_ns * batch)
        case = CounterCase(f"{bound}_bs{batch}", [family], steps=8, gap_ns=gap_ns * batch)
        runs.append(load(write_counter_case(case, tmp_path)))
    return runs


def test_sweep_says_the_plateau_is_dram_saturated_where_counters_show_it(tmp_path: Path) -> None:
    report = sweep(_sweep_runs(tmp_path, "memory", 100_000, 6_000), SweepOptions((1, 2, 4)))
    assert report.knee_batch == 1
    assert all(p.dram_pct == pytest.approx(93, abs=3) for p in report.points)
    (finding,) = report.findings
    assert finding.title == "past batch 1 a larger batch buys latency, not throughput"
    assert "at batch 1 DRAM is saturated: DRAM at 9" in " ".join(finding.evidence)


def test_sweep_says_the_plateau_is_the_hosts_when_dram_is_not_saturated(tmp_path: Path) -> None:
    report = sweep(_sweep_runs(tmp_path, "latency", 20_000, 200_000), SweepOptions((1, 2, 4)))
    assert report.knee_batch == 1
    (finding,) = report.findings
    assert finding.title == "past batch 1 throughput stops growing, and DRAM is not why"
    assert finding.evidence[0].startswith("at batch 1 the run is launch- or host-limited: DRAM at")


def test_sweep_without_counters_says_nothing_about_dram(tmp_path: Path) -> None:
    runs = []
    for batch in (1, 2):
        doc = counter_trace(CounterCase(f"bs{batch}", CASES[0].families[:1], steps=4))
        doc["traceEvents"] = [e for e in doc["traceEvents"] if e["ph"] != "C"]
        path = tmp_path / f"bs{batch}.json"
        path.write_text(json.dumps(doc))
        runs.append(load(path))
    report = sweep(runs, SweepOptions((1, 2)))
    assert [p.dram_pct for p in report.points] == [None, None]
