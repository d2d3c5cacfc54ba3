"""Sampled utilisation: nvidia-smi, NVML JSON lines, dcgmi dmon and dcgm-exporter scrapes, the
per-GPU figures (checked against sums done here by hand), the ICSE 2024 and DCGM rules, and the
one-line errors."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from corpus import corpus
from gpuscope.analyses.samples import SampleOptions, gpu_utilisation
from gpuscope.diagnosis import Options, diagnose
from gpuscope.errors import CorruptInputError, EmptyTraceError, InputError, UnknownFormatError
from gpuscope.facts import match_device
from gpuscope.readers import load
from gpuscope.render.json import to_document
from gpuscope.testing.generator import GeneratorConfig, generate

NVML_CORPUS = "metrics/superbench_nvml_8gpu.jsonl"
COUNTER_LIST = "metrics/dcgm-exporter_dcp-metrics-included.csv"
H100 = "NVIDIA H100 80GB HBM3"
GIB = 2**30
MIB = 2**20

# GPU 0: busy, then 12 s idle, then busy again; little memory. GPU 1: steadily 70%, memory full.
UTIL_0 = [90.0] * 5 + [0.0] * 12 + [80.0] * 3
UTIL_1 = [70.0] * 20


def nearest_rank(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(math.ceil(p / 100 * len(ordered)), 1) - 1]


def smi_csv(units: bool = True) -> str:
    """``nvidia-smi --query-gpu=timestamp,index,name,utilization.gpu,memory.used,memory.total
    --format=csv[,nounits] -l 1`` for two GPUs, 20 samples each."""
    pct, mib = (" %", " MiB") if units else ("", "")
    lines = ["timestamp, index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]"]
    for i in range(20):
        stamp = f"2024/01/15 10:00:{i:02d}.000"
        lines.append(f"{stamp}, 0, {H100}, {UTIL_0[i]:.0f}{pct}, 2048{mib}, 81559{mib}")
        lines.append(f"{stamp}, 1, {H100}, {UTIL_1[i]:.0f}{pct}, 75000{mib}, 81559{mib}")
    return "\n".join(lines) + "\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, check=False
    )


# --- nvidia-smi ---------------------------------------------------------------------------------


@pytest.mark.parametrize("units", [True, False])
def test_nvidia_smi_values_with_and_without_units(tmp_path: Path, units: bool) -> None:
    job = load(write(tmp_path, "smi.csv", smi_csv(units)))
    (samples,) = job.samples
    assert samples.format == "nvidia-smi-csv"
    gpu0, gpu1 = samples.gpus
    assert (gpu0.gpu, gpu0.name, gpu1.gpu) == (0, H100, 1)
    assert list(gpu0.utilization_pct) == UTIL_0
    assert gpu0.memory_used_bytes is not None and gpu0.memory_used_bytes[0] == 2048 * MIB
    assert gpu0.memory_total_bytes == 81559 * MIB
    assert int(gpu0.time_ns[1] - gpu0.time_ns[0]) == 1_000_000_000


def test_per_gpu_figures_by_hand(tmp_path: Path) -> None:
    samples = load(write(tmp_path, "smi.csv", smi_csv())).samples[0]
    g = gpu_utilisation(samples.gpus[0], samples.source, samples.format)
    u = g.utilization
    assert u is not None
    assert u.mean == pytest.approx(sum(UTIL_0) / len(UTIL_0))  # 34.5
    assert (u.p50, u.p90, u.p99) == (
        nearest_rank(UTIL_0, 50),
        nearest_rank(UTIL_0, 90),
        nearest_rank(UTIL_0, 99),
    )
    assert (u.p50, u.p90, u.p99) == (0.0, 90.0, 90.0)
    assert (g.samples, g.period_ns, g.covered_ns) == (20, 1_000_000_000, 20_000_000_000)
    assert g.memory_peak_bytes == 2048 * MIB
    assert g.memory_peak_pct == pytest.approx(100 * 2048 / 81559)
    assert g.measured_from == "nvidia-smi-samples"
    # Twelve samples below 5%, each standing for 1 s: one 12-s idle stretch, from the 6th sample.
    (stretch,) = g.idle
    assert stretch.dur_ns == 12_000_000_000
    assert stretch.start_ns == int(samples.gpus[0].time_ns[5])
    assert g.gaps == []


def test_sampling_gaps_are_neither_idle_nor_busy(tmp_path: Path) -> None:
    lines = ["timestamp, index, utilization.gpu [%]"]
    for second in (0, 1, 2, 3, 10, 11, 12):  # nothing recorded between 4 s and 10 s
        lines.append(f"2024/01/15 10:00:{second:02d}.000, 0, 0 %")
    samples = load(write(tmp_path, "gappy.csv", "\n".join(lines) + "\n")).samples[0]
    options = SampleOptions(min_idle_ns=3_000_000_000)
    g = gpu_utilisation(samples.gpus[0], samples.source, samples.format, options=options)
    assert g.period_ns == 1_000_000_000  # the median spacing
    (gap,) = g.gaps
    assert (gap.start_ns - g.start_ns, gap.dur_ns) == (4_000_000_000, 6_000_000_000)
    assert g.covered_ns == 7_000_000_000
    # The idle run stops at the gap: 4 s before it, 3 s after it, the gap counted in neither.
    assert [s.dur_ns for s in g.idle] == [4_000_000_000, 3_000_000_000]
    assert g.idle_ns + g.gap_ns == g.span_ns


def test_small_batch_finding_and_its_cost(tmp_path: Path) -> None:
    result = diagnose(load(write(tmp_path, "smi.csv", smi_csv())))
    assert result.based_on == "samples"
    (finding,) = result.findings  # GPU 1 is 70% busy: no rule applies to it
    assert (finding.pattern, finding.cause, finding.events) == ("ghost_gpu", "small_batch", 1)
    mean0 = sum(UTIL_0) / len(UTIL_0)
    lost_ns = (1 - mean0 / 100) * 20_000_000_000
    assert finding.lost_ns == int(lost_ns)
    assert finding.share_pct == pytest.approx(100 * lost_ns / 40_000_000_000)
    facts = match_device(H100)
    assert facts is not None and facts.usd_per_gpu_hour
    assert finding.cost_usd_per_gpu_hour == pytest.approx(
        finding.share_pct / 100 * facts.usd_per_gpu_hour
    )
    assert finding.cost_usd_per_day == pytest.approx(finding.cost_usd_per_gpu_hour * 24 * 2)
    # The user's price wins.
    priced = diagnose(load(tmp_path / "smi.csv"), Options(gpu_hour_usd=2.0))
    assert priced.findings[0].cost_usd_per_gpu_hour == pytest.approx(finding.share_pct / 100 * 2)
    v = result.verdict
    busy = (mean0 + 70.0) / 2  # both GPUs cover 20 s
    assert v.idle_pct == pytest.approx(100 - busy)
    assert v.bound == "underused"  # utilisation alone cannot say host, memory or compute
    assert v.shares_pct == {"busy": pytest.approx(busy), "idle": pytest.approx(100 - busy)}
    # All idle time is priced, not only the finding's.
    assert v.wasted_usd_per_gpu_hour == pytest.approx((100 - busy) / 100 * facts.usd_per_gpu_hour)
    assert "sampled utilisation" in v.summary


def test_samples_json_and_terminal(tmp_path: Path) -> None:
    path = write(tmp_path, "smi.csv", smi_csv())
    out = tmp_path / "out.json"
    result = run_cli("diagnose", str(path), "--json", str(out))
    assert result.returncode == 0, result.stderr
    doc = json.loads(out.read_text())
    assert doc["verdict"]["based_on"] == "samples"
    assert [d["measured_from"] for d in doc["devices"]] == ["nvidia-smi-samples"] * 2
    d0 = doc["devices"][0]
    assert d0["samples"]["utilization"]["mean_pct"] == pytest.approx(34.5)
    assert d0["samples"]["idle_ns"] == 12_000_000_000
    assert d0["gpu"]["key"] == match_device(H100).key  # type: ignore[union-attr]
    assert doc["findings"][0]["measured_from"] == "nvidia-smi-samples"
    assert doc["inputs"][0]["format"] == "nvidia-smi-csv"
    assert "Sampled utilisation" in result.stdout


# --- NVML JSON lines (the corpus) ---------------------------------------------------------------


def test_nvml_corpus_by_hand() -> None:
    path = corpus(NVML_CORPUS)
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    job = load(path)
    (samples,) = job.samples
    assert samples.format == "nvml-jsonl"
    assert len(samples.gpus) == 8
    result = diagnose(job)
    assert len(result.sampled) == 8
    for g in result.sampled:
        raw = [float(r[f"gpu_usage:{g.gpu}"]) for r in records]
        assert g.utilization is not None
        assert g.utilization.mean == pytest.approx(sum(raw) / len(raw))
        assert g.memory_peak_bytes == max(r[f"gpu_mem_used:{g.gpu}"] for r in records)
        assert g.memory_total_bytes == records[0][f"gpu_mem_total:{g.gpu}"]
        assert g.period_ns == 11_000_000_000  # "04:19:35", "04:19:46", ...
    assert result.sampled[0].utilization.mean == pytest.approx((56 + 56 + 55 + 30 + 0) / 5)  # type: ignore[union-attr]
    # Every GPU is under 50% busy with 2% of its memory used: the batch is too small (ICSE 2024).
    (finding,) = result.findings
    assert (finding.cause, finding.events) == ("small_batch", 8)
    assert finding.cost_usd_per_gpu_hour is None  # the log names no GPU model
    doc = to_document(result)
    assert {d["measured_from"] for d in doc["devices"]} == {"nvml-samples"}


# --- dcgmi dmon ---------------------------------------------------------------------------------

DMON = """\
#Entity   ID    GPUTL  SMACT  DRAMA  FBUSD
ID
{rows}
"""


def dmon_text() -> str:
    rows = []
    for _ in range(10):
        rows.append("GPU 0           95     0.300  0.100  10240")
        rows.append("GPU 1           N/A    0.900  0.500  20480")
        rows.append("GPU-I 3         N/A    0.100  0.100  100")
    return DMON.format(rows="\n".join(rows))


def test_dcgmi_dmon_and_misleading_gpu_util(tmp_path: Path) -> None:
    job = load(write(tmp_path, "dmon.txt", dmon_text()))
    (samples,) = job.samples
    assert samples.format == "dcgmi-dmon"
    assert [g.gpu for g in samples.gpus] == [0, 1]  # the MIG instance is skipped, with a warning
    assert any("GPU-I" in w for w in samples.warnings)
    assert any("1 s apart" in w for w in samples.warnings)
    result = diagnose(job)
    g0, g1 = result.sampled
    assert g0.utilization is not None and g0.sm_active is not None and g0.dram_active is not None
    assert (g0.utilization.mean, g0.sm_active.mean) == (95.0, pytest.approx(30.0))
    assert g0.dram_active.mean == pytest.approx(10.0)
    assert g0.memory_peak_bytes == 10240 * MIB
    assert g1.utilization is None and g1.activity is not None  # SM active stands in
    (finding,) = result.findings
    assert finding.cause == "misleading_gpu_util"
    # Reported busy but SMs idle: util - SM active, of GPU 0's time, over both GPUs' time.
    assert finding.share_pct == pytest.approx((95 - 30) / 2)
    assert to_document(result)["devices"][0]["measured_from"] == "dcgm-samples"


# --- dcgm-exporter ------------------------------------------------------------------------------

LABELS = 'gpu="0",UUID="GPU-1a2b",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="n1"'


def scrape(util: int, used_mib: int, free_mib: int, sm: float, stamp: str = "") -> str:
    return f"""\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{{LABELS}}} {util}{stamp}
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{{{LABELS}}} {used_mib}{stamp}
DCGM_FI_DEV_FB_FREE{{{LABELS}}} {free_mib}{stamp}
DCGM_FI_PROF_SM_ACTIVE{{{LABELS}}} {sm}{stamp}
DCGM_FI_DEV_SM_CLOCK{{{LABELS}}} 1410{stamp}
"""


def test_prometheus_scrapes_and_insufficient_memory(tmp_path: Path) -> None:
    text = scrape(20, 70000, 11000, 0.15) + scrape(30, 72000, 9000, 0.25)
    job = load(write(tmp_path, "metrics.prom", text))
    (samples,) = job.samples
    assert samples.format == "prometheus"
    (gpu,) = samples.gpus
    assert (gpu.name, gpu.uuid) == ("NVIDIA A100-SXM4-80GB", "GPU-1a2b")
    assert list(gpu.utilization_pct) == [20.0, 30.0]
    assert gpu.sm_active_pct is not None and list(gpu.sm_active_pct) == [15.0, 25.0]
    assert gpu.memory_total_bytes == 81000 * MIB  # used + free
    assert int(gpu.time_ns[1] - gpu.time_ns[0]) == 30_000_000_000  # assumed, with a warning
    assert samples.warnings
    result = diagnose(job)
    (g,) = result.sampled
    assert g.memory_peak_pct == pytest.approx(100 * 72000 / 81000)
    (finding,) = result.findings
    assert finding.cause == "insufficient_memory"  # 25% busy, memory 89% full
    assert finding.share_pct == pytest.approx(75.0)
    facts = match_device("NVIDIA A100-SXM4-80GB")
    assert facts is not None and facts.usd_per_gpu_hour
    assert result.verdict.gpu_hour_usd == facts.usd_per_gpu_hour


def test_prometheus_timestamps_are_used(tmp_path: Path) -> None:
    text = scrape(20, 1000, 80000, 0.2, " 1700000000000") + scrape(
        40, 1000, 80000, 0.2, " 1700000005000"
    )
    (gpu,) = load(write(tmp_path, "metrics.prom", text)).samples[0].gpus
    assert int(gpu.time_ns[1] - gpu.time_ns[0]) == 5_000_000_000


def test_counter_list_is_not_a_recording(tmp_path: Path) -> None:
    path = corpus(COUNTER_LIST)
    with pytest.raises(UnknownFormatError, match="not a recording"):
        load(path)
    result = run_cli("diagnose", str(path))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert str(path) in line and "not a recording" in line
    # In a folder it is skipped, and the recording next to it is read.
    folder = tmp_path / "metrics"
    folder.mkdir()
    shutil.copy(path, folder / "dcp-metrics-included.csv")
    shutil.copy(corpus(NVML_CORPUS), folder / "monitor.jsonl")
    job = load(folder)
    assert (len(job.samples), len(job.traces)) == (1, 0)


# --- a timeline with samples --------------------------------------------------------------------


def test_timeline_devices_keep_their_shape_next_to_samples(tmp_path: Path) -> None:
    generate(GeneratorConfig(seed=11, steps=3, layers=2)).write(tmp_path / "rank0.json")
    timeline_only = to_document(diagnose(load(tmp_path / "rank0.json")))
    write(tmp_path, "smi.csv", smi_csv())
    doc = to_document(diagnose(load(tmp_path)))
    assert doc["verdict"]["based_on"] == "timeline"
    assert [d["measured_from"] for d in doc["devices"]] == ["timeline"] + ["nvidia-smi-samples"] * 2
    before, after = timeline_only["devices"][0], doc["devices"][0]
    assert after == before
    assert doc["verdict"]["summary"] == timeline_only["verdict"]["summary"]
    sampled = [f for f in doc["findings"] if f["measured_from"] == "nvidia-smi-samples"]
    assert [f["cause"] for f in sampled] == ["small_batch"]


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text", "error"),
    [
        ("cut.csv", smi_csv()[:-30], CorruptInputError),  # the last row cut mid-write
        ("header.csv", "timestamp, index, utilization.gpu [%]\n", EmptyTraceError),
        (
            "power.csv",
            "timestamp, power.draw [W]\n2024/01/15 10:00:00.000, 250 W\n",
            CorruptInputError,
        ),
        (
            "cut.jsonl",
            '{"time": "2021-12-06 04:19:35", "gpu_usage:0": 5}\n{"time": "20',
            CorruptInputError,
        ),
        ("dmon.txt", "#Entity ID GPUTL SMACT\nGPU 0 45\n", CorruptInputError),
        ("dmon2.txt", "#Entity ID TEMP POWR\nGPU 0 45 200\n", CorruptInputError),
    ],
)
def test_bad_samples_are_one_line_and_exit_2(
    tmp_path: Path, name: str, text: str, error: type[InputError]
) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(error):
        load(path)
    result = run_cli("diagnose", str(path))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert str(path) in line
