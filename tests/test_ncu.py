"""Nsight Compute CSV: both layouts, locale numbers, the Speed Of Light classification, and
measured bounds replacing estimated ones on a timeline."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from corpus import corpus
from gpuscope.analyses.bounds import Bound
from gpuscope.analyses.counters import (
    Limiter,
    base_name,
    classify_kernel,
    counter_index,
    summarize,
)
from gpuscope.diagnosis import diagnose
from gpuscope.errors import CorruptInputError, EmptyTraceError, InputError
from gpuscope.model import CounterKernel, KernelCounters
from gpuscope.readers import load
from gpuscope.readers.ncu import decimal_mark, looks_like_ncu, parse_number, read
from gpuscope.readers.samples import (
    looks_like_counter_list,
    looks_like_dcgmi_dmon,
    looks_like_nvidia_smi,
    looks_like_nvml_jsonl,
    looks_like_prometheus,
)
from gpuscope.render.json import to_document
from gpuscope.testing.generator import GeneratorConfig, generate

NCU_CORPUS = "ncu/b200_cublaslt_fp8_gemm.ncu.csv.log"
GEMM = (
    "cutlass3x_sm100_tensorop_s64x256x32gemm_f8_f8_f32_f16_f16_64x256x128_1x1x1_0_tnn_align4_1sm"
    "_bias_f16_relu_aux_scalemax"
)

# `ncu --csv --page raw`: program output first, a units row after the header, en_US numbers.
RAW_PAGE = """\
==PROF== Connected to process 4242 (/usr/bin/python3)
step 0 loss 2.31
==PROF== Profiling "gemm_kernel" - 0: 0%....50%....100% - 9 passes
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size",\
"Grid Size","Device","CC","device__attribute_display_name","gpu__time_duration.sum",\
"sm__throughput.avg.pct_of_peak_sustained_elapsed",\
"gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",\
"dram__throughput.avg.pct_of_peak_sustained_elapsed",\
"sm__warps_active.avg.pct_of_peak_sustained_active","sm__maximum_warps_per_active_cycle_pct",\
"launch__waves_per_multiprocessor","launch__grid_size","launch__block_size"
"","","","","","","","","","","","","usecond","%","%","%","%","%","","",""
"0","4242","python3","host","gemm_kernel","1","7","(256, 1, 1)","(132, 4, 1)","0","9.0",\
"NVIDIA H100 80GB HBM3","1,234.50","85.3","40.1","38.2","45.5","50","3.88","528","256"
"1","4242","python3","host","copy_kernel","1","7","(128, 1, 1)","(1024, 1, 1)","0","9.0",\
"NVIDIA H100 80GB HBM3","12.25","12.7","91.4","91.4","88.1","100","1.94","1024","128"
==PROF== Disconnected from process 4242
"""

# An older `ncu --csv` (no rule columns, a Kernel Time column), written under a de_DE locale.
LONG_NO_RULES = """\
"ID","Process ID","Process Name","Host Name","Kernel Name","Kernel Time","Context","Stream",\
"Section Name","Metric Name","Metric Unit","Metric Value"
"0","77","app","h","void scale<float>(float*, int)","2021-Mar-01 10:00:00","1","7",\
"GPU Speed Of Light","Duration","usecond","1.234,5"
"0","77","app","h","void scale<float>(float*, int)","2021-Mar-01 10:00:00","1","7",\
"GPU Speed Of Light","SM [%]","%","23,59"
"0","77","app","h","void scale<float>(float*, int)","2021-Mar-01 10:00:00","1","7",\
"GPU Speed Of Light","Memory [%]","%","71,5"
"0","77","app","h","void scale<float>(float*, int)","2021-Mar-01 10:00:00","1","7",\
"Memory Workload Analysis","Memory Throughput","Gbyte/second","1.500,25"
"1","77","app","h","void scale<float>(float*, int)","2021-Mar-01 10:00:01","1","7",\
"GPU Speed Of Light","Duration","usecond","500"
"1","77","app","h","void scale<float>(float*, int)","2021-Mar-01 10:00:01","1","7",\
"GPU Speed Of Light","SM [%]","%","10"
"1","77","app","h","void scale<float>(float*, int)","2021-Mar-01 10:00:01","1","7",\
"GPU Speed Of Light","Memory [%]","%","20"
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, check=False
    )


# --- the corpus file ----------------------------------------------------------------------------


def test_corpus_long_format_with_rules() -> None:
    counters = read(corpus(NCU_CORPUS))
    assert counters.format == "ncu-csv"
    assert counters.schema == "ncu-long-rules"
    assert len(counters.kernels) == 1
    k = counters.kernels[0]
    assert k.name == GEMM
    # As written in the file: "Duration","ns","406240" and "Compute (SM) Throughput","%","23.59".
    assert k.duration_ns == 406_240
    assert k.sm_throughput_pct == pytest.approx(23.59)
    assert k.memory_throughput_pct == pytest.approx(21.68)
    assert k.dram_throughput_pct == pytest.approx(0.74)
    assert k.achieved_occupancy_pct == pytest.approx(15.53)
    assert k.theoretical_occupancy_pct == pytest.approx(18.75)
    assert k.waves_per_sm == pytest.approx(1.89)
    assert (k.grid_blocks, k.block_threads, k.device, k.num_sms) == (288, 384, 0, 152)
    assert k.metrics["Elapsed Cycles"] == 508_757
    names = [r.name for r in k.rules]
    assert names[0] == "SOLBottleneck"
    assert "below 60.0% of peak typically indicate latency issues" in k.rules[0].text
    launch = next(r for r in k.rules if r.speedup_pct == 50)
    assert (launch.name, launch.type, launch.speedup_type) == (
        "LaunchConfiguration",
        "OPT",
        "global",
    )


def test_corpus_kernel_is_latency_bound_and_costs_what_ncu_estimates() -> None:
    result = diagnose(load(corpus(NCU_CORPUS)))
    assert result.based_on == "ncu"
    (summary,) = result.counters
    assert summary.time_ns_by_limiter[Limiter.LATENCY] == 406_240
    assert summary.stats[0].limiter is Limiter.LATENCY
    # No timeline: the verdict is the measured limiters' time; latency-bound kernels are device
    # time, never host time, and no idle or communication share is claimed.
    assert result.verdict.bound == "latency"
    assert result.verdict.shares_pct == pytest.approx(
        {"latency": 100.0, "memory": 0.0, "compute": 0.0}
    )
    assert "Nsight Compute" in result.verdict.summary
    # One sentence, no contradiction: the kernels' time (100%) and the saving (50%) are named so.
    assert "latency-bound kernels take 100% of the profiled kernel time" in result.verdict.summary
    assert "could save up to 50% of the profiled kernel time" in result.verdict.summary
    top = result.findings[0]
    # The largest "global" estimated speedup of its rules (LaunchConfiguration: 50%).
    assert (top.cause, top.lost_ns, top.share_pct) == ("latency_bound", 203_120, 50.0)


def test_corpus_json_says_what_was_measured(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    result = run_cli("diagnose", str(corpus(NCU_CORPUS)), "--json", str(out))
    assert result.returncode == 0, result.stderr
    doc = json.loads(out.read_text())
    assert doc["verdict"]["based_on"] == "ncu"
    assert doc["verdict"]["idle_pct"] is None  # ncu replays kernels: idle is not measured
    (device,) = doc["devices"]
    assert device["measured_from"] == "ncu"
    top = device["counters"]["top_kernels"][0]
    assert (top["limiter"], top["sm_throughput_pct"], top["total_ns"]) == ("latency", 23.59, 406240)
    assert doc["findings"][0]["measured_from"] == "ncu"
    assert doc["inputs"][0]["format"] == "ncu-csv"
    assert "Nsight Compute counters" in result.stdout


# --- fixtures in other layouts ------------------------------------------------------------------


def test_raw_page_with_program_output_and_units_row(tmp_path: Path) -> None:
    counters = load(write(tmp_path, "raw.csv", RAW_PAGE)).counters[0]
    assert (counters.format, counters.schema) == ("ncu-csv-raw", "ncu-raw")
    assert counters.device_name == "NVIDIA H100 80GB HBM3"
    gemm, copy = counters.kernels
    assert gemm.duration_ns == 1_234_500  # "1,234.50" usecond
    assert (gemm.sm_throughput_pct, gemm.memory_throughput_pct) == (85.3, 40.1)
    assert (gemm.grid_blocks, gemm.block_threads, gemm.waves_per_sm) == (528, 256, 3.88)
    assert copy.duration_ns == 12_250
    assert classify_kernel(gemm)[0] is Limiter.COMPUTE
    assert classify_kernel(copy)[0] is Limiter.MEMORY


def test_long_format_without_rules_and_decimal_commas(tmp_path: Path) -> None:
    counters = load(write(tmp_path, "old.csv", LONG_NO_RULES)).counters[0]
    assert counters.schema == "ncu-long"
    first, second = counters.kernels
    assert first.duration_ns == 1_234_500  # "1.234,5" usecond
    assert second.duration_ns == 500_000
    assert first.sm_throughput_pct == pytest.approx(23.59)
    # The byte/s "Memory Throughput" of another section is not the percentage.
    assert first.memory_throughput_pct == pytest.approx(71.5)
    assert first.metrics["Memory Throughput"] == pytest.approx(1500.25)
    assert first.rules == []
    summary = summarize(counters)
    (stat,) = summary.stats
    assert (stat.count, stat.total_ns) == (2, 1_734_500)
    # Duration-weighted: (23.59 x 1,234,500 + 10 x 500,000) / 1,734,500.
    assert stat.sm_throughput_pct == pytest.approx((23.59 * 1_234_500 + 10 * 500_000) / 1_734_500)
    # The first launch is memory-bound (71.5%), the second latency-bound: memory has more time.
    assert summary.time_ns_by_limiter[Limiter.MEMORY] == 1_234_500
    assert summary.time_ns_by_limiter[Limiter.LATENCY] == 500_000
    assert stat.limiter is Limiter.MEMORY


@pytest.mark.parametrize(
    ("text", "mark", "value"),
    [
        ("1,234.5", ".", 1234.5),
        ("1,234,567", ".", 1234567.0),
        ("1.234,5", ",", 1234.5),
        ("23,59", ",", 23.59),
        ("1 234,5", ",", 1234.5),
        ("406240", ".", 406240.0),
        ("PolicySpread", ".", None),
        ("", ".", None),
        ("n/a", ",", None),
    ],
)
def test_locale_numbers(text: str, mark: str, value: float | None) -> None:
    assert parse_number(text, mark) == value


def test_decimal_mark_comes_from_unambiguous_values() -> None:
    assert decimal_mark(["1,234", "23,59"]) == ","  # "23,59" can only be a decimal comma
    assert decimal_mark(["1,234", "0.74"]) == "."
    assert decimal_mark(["1,234"]) == "."  # ambiguous: ncu's en_US default


def sol(sm: float | None, memory: float | None, waves: float | None = None) -> CounterKernel:
    return CounterKernel(0, "k", 0, 1000, sm, memory, None, None, None, waves, None, None)


@pytest.mark.parametrize(
    ("sm", "memory", "waves", "limiter"),
    [
        (23.59, 21.68, 1.89, Limiter.LATENCY),  # both below 60%
        (30.0, 10.0, 0.4, Limiter.LATENCY),  # and a small grid
        (70.0, 65.0, None, Limiter.BALANCED),  # within 10 points, both below 80%
        (72.0, 40.0, None, Limiter.COMPUTE),
        (45.0, 75.0, None, Limiter.MEMORY),
        (85.0, 82.0, None, Limiter.COMPUTE),  # saturated: the higher unit limits
        (None, 50.0, None, None),
    ],
)
def test_speed_of_light_rule(
    sm: float | None, memory: float | None, waves: float | None, limiter: Limiter | None
) -> None:
    found, reason = classify_kernel(sol(sm, memory, waves))
    assert found is limiter
    if waves is not None and waves < 1:
        assert "small grid" in reason


# --- bad input ----------------------------------------------------------------------------------


def test_truncated_csv_is_one_line_and_exit_2(tmp_path: Path) -> None:
    text = corpus(NCU_CORPUS).read_text()
    cut = write(tmp_path, "cut.csv", text[: text.index('"Launch Statistics","Grid Size"') + 10])
    with pytest.raises(CorruptInputError, match="cut off"):
        read(cut)
    result = run_cli("diagnose", str(cut))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert str(cut) in line


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('"ID","Kernel Name","Foo"\n"0","k","1"\n', CorruptInputError),  # no metric known
        ("==PROF== Connected\n==PROF== No kernels were profiled.\n", EmptyTraceError),
        (RAW_PAGE.split('"0","4242"', maxsplit=1)[0], EmptyTraceError),  # a header, no kernel
    ],
)
def test_unusable_ncu_logs(tmp_path: Path, text: str, error: type[InputError]) -> None:
    path = write(tmp_path, "bad.csv", text)
    with pytest.raises(error):
        load(path)
    result = run_cli("diagnose", str(path))
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1


def test_sniffers_claim_only_their_format() -> None:
    ncu_head = corpus(NCU_CORPUS).read_bytes()
    kineto_head = b'{\n  "schemaVersion": 1,\n  "traceEvents": [\n'
    sqlite_head = b"SQLite format 3\x00" + b"\x00" * 100
    assert looks_like_ncu(ncu_head) and looks_like_ncu(RAW_PAGE.encode())
    for other in (kineto_head, sqlite_head, b"timestamp, utilization.gpu [%]\n"):
        assert not looks_like_ncu(other)
    sample_sniffers = (
        looks_like_nvidia_smi,
        looks_like_nvml_jsonl,
        looks_like_dcgmi_dmon,
        looks_like_prometheus,
        looks_like_counter_list,
    )
    for sniff in sample_sniffers:
        for other in (ncu_head, kineto_head, sqlite_head, LONG_NO_RULES.encode()):
            assert not sniff(other), sniff.__name__


# --- measured counters replace estimates on a timeline -------------------------------------------

ADD = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>,"
    " std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<c10::BFloat16>,"
    " std::array<char*, 3ul>)"
)
XMMA = (
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_"
    "segment_k_off_kernel__5x_cublas"
)
LN_GRAD = "layer_norm_grad_input_kernel_vectorized"  # how ncu prints the bare function name


def ncu_long(rows: list[tuple[int, str, float, float, float]]) -> str:
    """A long-format report: (id, name, duration ns, SM %, memory %) per launch."""
    lines = ['"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"']
    for launch, name, dur, sm, memory in rows:
        quoted = name.replace('"', '""')
        for metric, unit, value in (
            ("Duration", "ns", dur),
            ("Compute (SM) Throughput", "%", sm),
            ("Memory Throughput", "%", memory),
        ):
            lines.append(f'"{launch}","{quoted}","SOL","{metric}","{unit}","{value}"')
    return "\n".join(lines) + "\n"


def test_measured_bounds_replace_estimates_for_matching_kernels(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    generate(GeneratorConfig(seed=11, steps=3, layers=2)).write(folder / "rank0.json")
    report = ncu_long(
        [
            (0, XMMA, 50_000, 30.0, 85.0),  # a GEMM the estimate calls compute-bound: memory
            (1, ADD, 8_000, 90.0, 40.0),  # an add the estimate calls memory-bound: compute
            (2, LN_GRAD, 9_000, 20.0, 15.0),  # matched by its bare name: latency
            (3, "kernel_not_in_the_trace", 1_000, 95.0, 10.0),
        ]
    )
    write(folder, "kernels.ncu.csv", "==PROF== Connected to process 1\n" + report)
    job = load(folder)
    assert len(job.traces) == 1 and len(job.counters) == 1
    estimated = diagnose(load(folder / "rank0.json")).devices[0]
    result = diagnose(job)
    device = result.devices[0]
    assert result.based_on == "timeline+ncu"
    m = device.counters
    assert m is not None
    # The diagnosis holds no trace: the rows of its kernel bounds are the job's (no start-up cut).
    assert result.window is None
    (trace,) = job.traces
    names = [trace.name(int(r)) for r in device.bounds.rows]
    for name, bound in ((XMMA, Bound.MEMORY), (ADD, Bound.COMPUTE)):
        rows = np.array([n == name for n in names])
        assert rows.any() and m.measured[rows].all()
        assert (device.bounds.bound[rows] == bound).all()
        assert (estimated.bounds.bound[rows] != bound).all()
    ln = np.array(["layer_norm_grad_input_kernel_vectorized<" in n for n in names])
    assert (device.bounds.bound[ln] == Bound.LATENCY).all()
    assert sorted(m.matched_names) == sorted([XMMA, ADD, LN_GRAD])
    dur = trace.events.dur_ns[device.bounds.rows]
    assert m.measured_ns == int(dur[m.measured].sum())
    doc = to_document(result)
    bounds = doc["devices"][0]["bounds"]
    assert doc["devices"][0]["measured_from"] == "timeline"
    assert bounds["measured_from"] == "ncu+estimated"
    assert bounds["measured_kernel_ns"] == m.measured_ns
    assert doc["verdict"]["based_on"] == "timeline+ncu"
    assert [d["measured_from"] for d in doc["devices"]] == ["timeline", "ncu"]


def test_kernel_names_match_across_spellings() -> None:
    assert base_name(ADD) == "vectorized_elementwise_kernel"
    assert base_name("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEE") == (
        "vectorized_elementwise_kernel"
    )
    assert base_name("_Z6kernelPfi") == "kernel"
    assert base_name("void (anonymous namespace)::softmax_warp<float>(float*)") == "softmax_warp"
    counters = load_text_counters(
        ncu_long([(0, "vectorized_elementwise_kernel", 1000, 90.0, 10.0)])
    )
    index = counter_index([summarize(counters)])
    stat = index.lookup(ADD)
    assert stat is not None and stat.limiter is Limiter.COMPUTE
    # A bare name two different ncu kernels share matches neither.
    two = load_text_counters(
        ncu_long([(0, "void f<1>(int)", 1000, 90.0, 10.0), (1, "void f<2>(int)", 1000, 9.0, 1.0)])
    )
    assert counter_index([summarize(two)]).lookup("void f<3>(int)") is None
    assert counter_index([summarize(two)]).lookup("f<2>(int)") is not None


def load_text_counters(text: str) -> KernelCounters:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "k.csv"
        path.write_text(text)
        return read(path)
