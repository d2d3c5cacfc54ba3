"""What a new user reads agrees with itself (issue 32): sentences with their own numbers, labels
with the facts, and the small refusals a command owes (one line, a non-zero exit)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from corpus import corpus
from gpuscope import load
from gpuscope.cli import main
from gpuscope.compare.diff.gate import regression
from gpuscope.compare.scaling import SweepOptions, sweep
from gpuscope.diagnosis import diagnose
from gpuscope.facts import match_device
from gpuscope.sanitise import MAX_SHOWN_CHARS, sanitised
from gpuscope.testing.generator import generate_batch_sweep
from gpuscope.testing.samples import dcgmi_dmon_log, nvidia_smi_log

ROOT = Path(__file__).resolve().parents[1]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuscope", *args], capture_output=True, text=True, check=False
    )


# --- words agree with their numbers -------------------------------------------------------------


def test_a_faster_run_passes_the_gate_however_few_its_steps() -> None:
    # 10.6% faster on too few steps for the rank test: the estimate is within the bound, so the
    # gate passes (it was "inconclusive", exit 3, for want of steps to prove a slowdown).
    r = regression([100.0, 101.0, 99.0], [89.4], max_pct=5.0)
    assert r.lower_pct is None and r.change_pct == pytest.approx(-10.6)
    assert r.verdict == "within"
    # Over the bound on the same few steps stays inconclusive.
    assert regression([100.0, 101.0, 99.0], [120.0], max_pct=5.0).verdict == "inconclusive"


def test_sweep_under_a_latency_cap_says_what_larger_batches_buy(tmp_path: Path) -> None:
    built = generate_batch_sweep()
    jobs = [load(p) for p in built.write(tmp_path, compress=False)]
    plateau = sweep(jobs)  # the throughput plateau sets the knee: that finding stands
    assert plateau.knee_batch == 16
    assert any("buys latency, not throughput" in f.title for f in plateau.findings)
    step = {p.batch: p for p in plateau.points}
    cap_ms = (step[8].step_ns + step[16].step_ns) / 2e6  # batch 8 fits, 16 does not
    report = sweep(jobs, SweepOptions(max_latency_ms=cap_ms))
    assert report.knee_batch == 8
    gain = step[128].throughput_per_s / step[8].throughput_per_s
    assert gain > 1.3
    assert f"batch 128 gives {gain:,.1f}x its throughput" in report.knee_rule
    # No sentence says that larger batches buy latency, not throughput: the table says otherwise.
    assert not any("not throughput" in f.title for f in report.findings)


def test_a_memory_refusal_names_the_figure_that_broke_the_budget() -> None:
    trace = corpus("kineto/tracelens/h100_qwen1.5-0.5b_inference.json.gz")
    result = cli("diagnose", str(trace), "--max-memory", "100M")
    assert result.returncode == 2, result.stderr
    line = result.stderr.splitlines()[-1]
    # The line names the budget and the figure that broke it.
    assert re.search(r"budget of 100 MB: .*\d+ (kB|MB|GB)", line), result.stderr
    if "columns" in line:  # stopped by the scan's share of the budget: that share, and why
        assert "would outgrow the 1 MB they may take" in line, result.stderr
        assert "the budget is below the program's own 150 MB" in line, result.stderr


def test_a_scan_on_a_thread_names_the_budget_it_began_under() -> None:
    """The console script starts the read before the command line is parsed, under the
    ``--max-memory`` it found; the command line then resets the process's budget until its own
    option sets it again. A refusal raised on the scan's thread in that moment named the default
    budget (17.5 GB here) instead of the 100 MB the read ran under."""
    from gpuscope.errors import InputError
    from gpuscope.readers import _early
    from gpuscope.readers._io import set_memory_budget

    trace = corpus("kineto/tracelens/h100_qwen1.5-0.5b_inference.json.gz")
    prefetch = _early.start(["diagnose", str(trace), "--max-memory", "100M"])
    set_memory_budget(None)  # what the command line does before its option is read
    try:
        if prefetch is None:
            pytest.skip("the C scanner is not built: nothing reads on a thread")
        with pytest.raises(InputError, match="budget of 100 MB"):
            load(trace, prefetch=prefetch)
    finally:
        set_memory_budget(None)


@pytest.mark.parametrize(
    ("name", "label"),
    [("Tesla V100-SXM2-32GB", "FP16"), ("Tesla T4", "FP16"), ("NVIDIA H100 80GB HBM3", "BF16")],
)
def test_the_16_bit_peak_is_labelled_with_its_precision(name: str, label: str) -> None:
    facts = match_device(name)
    assert facts is not None and facts.sixteen_bit == label


def test_dlrm_on_v100_shows_an_fp16_peak() -> None:
    result = cli("diagnose", str(corpus("kineto/param-dlrm-8rank")))
    assert result.returncode == 0, result.stderr
    assert "125 TFLOP/s FP16" in result.stdout and "TFLOP/s BF16" not in result.stdout


def test_sampled_headline_names_wall_time_and_gpu_time(tmp_path: Path) -> None:
    log = nvidia_smi_log()  # 2 GPUs, 20 samples a second apart
    summary = diagnose(load(log.write(tmp_path))).verdict.summary
    assert "(2 GPUs over 20 s, 40 GPU-s sampled, no timeline)" in summary
    nvml = diagnose(load(corpus("metrics/superbench_nvml_8gpu.jsonl"))).verdict.summary
    assert "(8 GPUs over 55 s, 7 GPU-min sampled, no timeline)" in nvml


def test_long_sentences_are_kept_whole_and_only_long_names_shortened(tmp_path: Path) -> None:
    result = diagnose(load(dcgmi_dmon_log().write(tmp_path)))
    long_name = "k" * 1000
    finding = result.findings[0]
    padded = finding.evidence[0] + " " + "word " * 200 + long_name + "_end"
    import msgspec

    grown = msgspec.structs.replace(
        result, findings=[msgspec.structs.replace(finding, evidence=[padded])]
    )
    shown = sanitised(grown).findings[0].evidence[0]
    assert len(padded) > MAX_SHOWN_CHARS
    assert shown.startswith(padded[:-1100]) and shown.endswith("k_end")  # both ends stay
    assert shown.count("…") == 1 and len(shown) < len(padded)


def test_copies_that_fill_a_busy_device_are_not_tagged_idle() -> None:
    # 51 GB of host-to-device copies fill 95% of the window and the GPU is idle 1%: the copy
    # finding is copy-bound, not "held but idle" as a data-loader wait is.
    result = diagnose(load(corpus("nsys/nsys-ai/h100_2gpu_1s.sqlite")))
    (copy,) = [f for f in result.findings if f.cause == "h2d_copy"]
    assert copy.share_pct > 90 and copy.pattern == "copy_bound"
    # Peer copies saturating NVLink are copy-bound too (the file's known answer).
    p2p = diagnose(load(corpus("wild/a100_nvlink_p2p_copy.json.gz")))
    assert [f.pattern for f in p2p.findings if f.cause == "p2p_copy"] == ["copy_bound"]


# --- the small ones -----------------------------------------------------------------------------


def test_an_unknown_gpu_name_is_refused_in_one_line() -> None:
    trace = corpus("wild/a100_d2h_sync_cpu_loop.json.gz")
    result = cli("diagnose", str(trace), "--gpu", "Banana 9000")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "gpuscope: error: --gpu 'Banana 9000' is not a GPU gpuscope knows (data/gpu_facts.csv):"
        " give a name such as 'H100 SXM', 'A100-SXM4-80GB' or 'MI300X'"
    ]
    assert cli("diagnose", str(trace), "--gpu", "A100-SXM4-80GB").returncode == 0


def test_a_fleet_glob_matching_nothing_exits_non_zero(tmp_path: Path) -> None:
    out = tmp_path / "fleet.json"
    run = CliRunner().invoke(main, ["fleet", str(tmp_path / "jobs" / "*"), "--out", str(out)])
    assert run.exit_code == 2
    assert run.stderr.strip().endswith("no file or folder matches; no job to diagnose")
    assert not out.exists()


def test_a_mistyped_command_gets_a_suggestion() -> None:
    run = CliRunner().invoke(main, ["diagnoze", "x"])
    assert run.exit_code == 2
    assert "no such command 'diagnoze'; did you mean 'diagnose'?" in run.stderr


def test_profile_output_is_ignored_by_git() -> None:
    lines = (ROOT / ".gitignore").read_text().splitlines()
    assert "gpuscope-traces/" in lines  # gpuscope profile's default output folder


def test_readme_python_version_agrees_with_requires_python() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11"
    assert "(Python 3.11 or newer)" in (ROOT / "README.md").read_text()
