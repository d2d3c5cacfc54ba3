"""What samples can and cannot say (issue #15, item 7): GPUs that never worked, GPUs held idle
after the work ended, a verdict that says "underused" or "busy" and never a bound utilisation
cannot show, idle time priced with or without a finding, titles whose figures are the data's, and
logs written by other tools (UTF-16, a byte-order mark, ``;`` or tab separators, other headers).

Every log is built here, with known figures; the NVML corpus file checks the verdict's shape.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from corpus import corpus
from gpuscope.diagnosis import Diagnosis, Options, diagnose
from gpuscope.facts import match_device
from gpuscope.model import Job
from gpuscope.readers import load
from gpuscope.render import html
from gpuscope.render.json import to_document

H100 = "NVIDIA H100 80GB HBM3"
MIB = 2**20
GIB = 2**30
HOUR_NS = 3_600 * 10**9
NVML_CORPUS = "metrics/superbench_nvml_8gpu.jsonl"


def price() -> float:
    facts = match_device(H100)
    assert facts is not None and facts.usd_per_gpu_hour
    return facts.usd_per_gpu_hour


def smi_log(rows: list[tuple[int, float, float]], period_s: int = 1) -> str:
    """nvidia-smi --query-gpu=timestamp,index,name,utilization.gpu,memory.used,memory.total
    --format=csv -l PERIOD: ``rows`` are (gpu, util %, memory used MiB), one sample per GPU per
    period in the order given (all GPUs of a moment, then the next moment)."""
    gpus = len({g for g, _, _ in rows})
    lines = ["timestamp, index, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]"]
    for i, (gpu, util, used) in enumerate(rows):
        t = (i // gpus) * period_s
        stamp = f"2024/01/15 {t // 3600:02d}:{t // 60 % 60:02d}:{t % 60:02d}.000"
        lines.append(f"{stamp}, {gpu}, {H100}, {util:.0f} %, {used:.0f} MiB, 81559 MiB")
    return "\n".join(lines) + "\n"


def diagnosed(tmp_path: Path, text: str, name: str = "smi.csv") -> Diagnosis:
    path = tmp_path / name
    path.write_text(text)
    return diagnose(load(path))


def no_overclaim(d: Diagnosis) -> None:
    """Utilisation never yields a bound it cannot see, a fixed 'half the time', or NaN."""
    v = d.verdict
    assert v.bound in ("busy", "underused")
    text = " ".join([v.summary, *(f.title for f in d.findings)])
    for word in ("compute-bound", "memory-bound", "host-bound", "half the time", "nan"):
        assert word not in text, (word, text)
    assert sum(v.shares_pct.values()) == pytest.approx(100.0)
    assert "profiler trace" in v.summary  # what would tell more


# --- GPUs that never worked ---------------------------------------------------------------------


def test_a_gpu_never_used_is_named_and_the_batch_is_not_blamed(tmp_path: Path) -> None:
    # GPU 0 runs at 40% with 2 GiB of 80 (a "small batch" on its own); GPU 1 only holds a
    # context (500 MiB) for the whole 100 s.
    rows: list[tuple[int, float, float]] = []
    for _ in range(100):
        rows += [(0, 40.0, 2048.0), (1, 0.0, 500.0)]
    d = diagnosed(tmp_path, smi_log(rows))
    no_overclaim(d)
    by_cause = {f.cause: f for f in d.findings}
    assert set(by_cause) == {"unused_gpu", "low_utilization"}  # not small_batch
    unused = by_cause["unused_gpu"]
    assert unused.title == (
        "GPU 1 of 2 never ran work: no sample reached 5% utilisation,"
        " yet 500 MiB of memory was allocated"
    )
    assert unused.lost_ns == 100 * 10**9  # all of GPU 1's time
    assert unused.share_pct == pytest.approx(50.0)  # of both GPUs' sampled time
    assert unused.cost_usd_per_gpu_hour == pytest.approx(0.5 * price())
    assert "torchrun" in unused.fix
    low = by_cause["low_utilization"]
    assert low.title == "GPU 0 ran kernels 40% of the time: it idled the rest"
    assert low.share_pct == pytest.approx(30.0)  # 60% of GPU 0's half
    v = d.verdict
    assert v.bound == "underused"
    assert v.idle_pct == pytest.approx(80.0)
    assert v.figures["unused_gpus"] == 1
    assert "1 of 2 GPUs never ran work" in v.summary
    assert "batch" not in v.summary
    doc = to_document(d)
    assert [dev["samples"]["worked"] for dev in doc["devices"]] == [True, False]


def test_a_log_where_no_gpu_worked_asks_whether_the_job_reached_the_gpu(tmp_path: Path) -> None:
    d = diagnosed(tmp_path, smi_log([(0, 0.0, 0.0)] * 60))
    no_overclaim(d)
    (finding,) = d.findings
    assert finding.cause == "unused_gpu"
    assert finding.title == "the GPU never ran work: no sample reached 5% utilisation"
    assert "torch.cuda.is_available()" in finding.fix and "torchrun" not in finding.fix
    assert d.verdict.idle_pct == pytest.approx(100.0)


# --- held idle after the work ended ---------------------------------------------------------------


def held_log(tail_mib: float) -> str:
    """``nvidia-smi -l 60``: 2 h at 90% with 60 GiB, then 5 h at 0% with ``tail_mib`` used."""
    rows = [(0, 90.0, 61440.0)] * 120 + [(0, 0.0, tail_mib)] * 300
    return smi_log(rows, period_s=60)


def test_a_gpu_held_idle_after_the_work_ended_is_priced_in_hours_and_dollars(
    tmp_path: Path,
) -> None:
    d = diagnosed(tmp_path, held_log(61440.0))
    no_overclaim(d)
    (finding,) = d.findings  # the 2 h of work ran at 90%: no low-utilisation finding
    assert finding.cause == "held_idle"
    assert finding.title == (
        "GPU 0 held idle after the work ended: 5.0 h at under 5% utilisation"
        " with at least 60.0 GiB still allocated"
    )
    assert finding.lost_ns == 5 * HOUR_NS
    assert finding.share_pct == pytest.approx(100 * 5 / 7)
    assert f"5.00 GPU-hours held idle: about ${5 * price():,.2f}" in " ".join(finding.evidence)
    (g,) = d.sampled
    assert g.held_idle is not None and g.held_idle.memory_bytes == 60 * GIB
    assert g.work is not None and g.work.mean == pytest.approx(90.0)  # the work, without the tail
    v = d.verdict
    assert v.bound == "underused"
    busy = 90.0 * 2 / 7
    assert v.idle_pct == pytest.approx(100 - busy)
    assert v.figures["held_idle_pct"] == pytest.approx(100 * 5 / 7)
    assert "held idle after the work ended for 5.00 GPU-hours" in v.summary
    doc = to_document(d)
    assert doc["devices"][0]["samples"]["held_idle"]["dur_ns"] == 5 * HOUR_NS


def test_an_idle_tail_without_memory_is_not_held(tmp_path: Path) -> None:
    # The process exited (memory back to a few MiB): the idle tail is not "held".
    d = diagnosed(tmp_path, held_log(4.0))
    no_overclaim(d)
    assert "held_idle" not in {f.cause for f in d.findings}
    assert d.sampled[0].held_idle is None
    (finding,) = d.findings  # 26% over the whole log, 75% of memory at peak
    assert finding.cause == "low_utilization"
    assert finding.title == "GPU 0 ran kernels 26% of the time: it idled the rest"


# --- the verdict: busy or underused, idle priced, figures from the data -------------------------


def test_idle_is_priced_with_no_finding(tmp_path: Path) -> None:
    d = diagnosed(tmp_path, smi_log([(0, 83.0, 40960.0)] * 60))
    no_overclaim(d)
    assert d.findings == []  # 83% busy: no rule applies
    v = d.verdict
    assert v.bound == "busy"
    assert v.wasted_usd_per_gpu_hour == pytest.approx(0.17 * price())
    assert f"about ${0.17 * price():.2f} per GPU-hour wasted" in v.summary
    assert "$0.00" not in v.summary


def test_titles_state_the_figures_not_a_fixed_fraction(tmp_path: Path) -> None:
    # 4% on average (some samples at 20%, most at 0%), 2 GiB of 80: the old title said "the
    # GPU idles half the time".
    rows = [(0, 20.0 if i % 5 == 0 else 0.0, 2048.0) for i in range(100)]
    d = diagnosed(tmp_path, smi_log(rows))
    no_overclaim(d)
    (finding,) = d.findings
    assert finding.cause == "small_batch"
    assert finding.title == (
        "GPU 0 ran kernels 4% of the time with at most 3% of memory used:"
        " a larger batch may keep it busy"
    )
    assert d.verdict.summary.startswith(
        "underused, from sampled utilisation (1 GPU, 100 s sampled, no timeline): the GPU ran"
        " kernels 4% of the time and idled 96%"
    )
    # Every percentage of the headline is a figure of the JSON, as rounded there.
    doc = to_document(d)
    figures = [doc["verdict"]["idle_pct"], *doc["verdict"]["figures"].values()]
    figures += [doc["findings"][0]["share_pct"]]
    for text in re.findall(r"(\d+)%", d.verdict.summary):
        assert any(f is not None and round(f) == int(text) for f in figures), text


def test_the_nvml_corpus_is_underused_not_host_bound() -> None:
    d = diagnose(load(corpus(NVML_CORPUS)))
    no_overclaim(d)
    v = d.verdict
    assert v.bound == "underused"
    assert v.shares_pct["busy"] == pytest.approx(32.575)  # the 8 GPUs' mean utilisation
    (finding,) = d.findings
    assert finding.cause == "small_batch"
    assert finding.title.startswith("8 GPUs ran kernels 33% of the time with at most 2% of memory")
    assert v.wasted_usd_per_gpu_hour is None  # the log names no GPU: unpriced, and it says why
    priced = diagnose(load(corpus(NVML_CORPUS)), Options(gpu_hour_usd=2.0))
    assert priced.verdict.wasted_usd_per_gpu_hour == pytest.approx((100 - 32.575) / 100 * 2.0)
    page = html.render(d)
    visible = re.sub(r"<script.*?</script>", "", page, flags=re.DOTALL)
    assert "nan%" not in visible.lower()
    assert "sampled GPU time: busy 32.6% · idle 67.4%" in visible


# --- logs written by other tools ------------------------------------------------------------------

PLAIN = "Time,GPU_ID,Utilization\n" + "".join(
    f"2024-01-15 10:00:{i:02d},{gpu},{util}\n"
    for i in range(30)
    for gpu, util in ((0, 60 if i < 20 else 0), (1, 15))
)


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("plain.csv", PLAIN.encode()),
        ("bom.csv", PLAIN.encode("utf-8-sig")),
        ("windows.csv", PLAIN.replace("\n", "\r\n").encode("utf-16")),  # PowerShell's redirect
        ("utf16le.csv", PLAIN.encode("utf-16-le")),  # no byte-order mark
        ("semicolon.csv", PLAIN.replace(",", ";").encode()),
        ("tab.tsv", PLAIN.replace(",", "\t").encode()),
        (
            "quoted.csv",
            PLAIN.replace("Time,GPU_ID,Utilization", '"timestamp","gpu","util (%)"').encode(),
        ),
    ],
)
def test_logs_of_other_tools_read_alike(tmp_path: Path, name: str, data: bytes) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    (samples,) = load(path).samples
    assert samples.format == "nvidia-smi-csv"
    g0, g1 = samples.gpus
    assert (g0.gpu, g1.gpu) == (0, 1)
    assert list(g0.utilization_pct) == [60.0] * 20 + [0.0] * 10
    assert list(g1.utilization_pct) == [15.0] * 30
    assert int(g0.time_ns[1] - g0.time_ns[0]) == 10**9
    assert not samples.warnings  # the times were read, not assumed


def test_other_headers_name_memory_and_gpus_in_their_own_words(tmp_path: Path) -> None:
    text = "Timestamp;GPU;GPU Utilization (%);Memory Used (MiB);mem_total\n" + "".join(
        f"{1_700_000_000 + i};GPU {gpu};{50};{1024};{85_899_345_920}\n"
        for i in range(5)
        for gpu in (0, 1)
    )
    (samples,) = load_text(tmp_path, text).samples
    g0, g1 = samples.gpus
    assert (g0.gpu, g1.gpu) == (0, 1)
    assert g0.memory_used_bytes is not None and g0.memory_used_bytes[0] == 1024 * MIB
    assert g0.memory_total_bytes == 80 * GIB  # no unit and too large for MiB: NVML's bytes
    assert int(g0.time_ns[1] - g0.time_ns[0]) == 10**9  # epoch seconds
    assert not math.isnan(g0.utilization_pct[0])


def load_text(tmp_path: Path, text: str) -> Job:
    path = tmp_path / "log.csv"
    path.write_text(text)
    return load(path)
