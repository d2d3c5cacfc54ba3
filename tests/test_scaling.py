"""Runs side by side: scaling over GPU counts and batch-size sweeps, against the generator's own
schedule (the knee and the efficiency it was built with)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from gpuscope import load
from gpuscope.cli import main
from gpuscope.compare.scaling import (
    ScalingOptions,
    SweepOptions,
    batch_from_name,
    scaling,
    sweep,
)
from gpuscope.errors import InputError
from gpuscope.model import Job
from gpuscope.render.ranks import render_scaling, render_sweep, scaling_document, sweep_document
from gpuscope.testing.generator import (
    BatchSweep,
    GeneratorConfig,
    ScalingSeries,
    generate_batch_sweep,
    generate_scaling_series,
)

Series = tuple[ScalingSeries, dict[int, Path]]
Sweep = tuple[BatchSweep, list[Path]]


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory) -> Series:
    built = generate_scaling_series(comm_ms_per_peer=1.5)
    return built, built.write(tmp_path_factory.mktemp("scale"), compress=False)


@pytest.fixture(scope="module")
def batches(tmp_path_factory: pytest.TempPathFactory) -> Sweep:
    built = generate_batch_sweep()
    return built, built.write(tmp_path_factory.mktemp("sweep"), compress=False)


def _jobs(paths: list[Path]) -> list[Job]:
    return [load(p) for p in paths]


# --- scale --------------------------------------------------------------------------------------


def test_scaling_efficiency_and_knee_match_the_simulation(series: Series) -> None:
    built, runs = series
    report = scaling(_jobs([runs[n] for n in (8, 1, 4, 2)]))  # any order: sorted by GPUs
    assert [p.gpus for p in report.points] == [1, 2, 4, 8]
    assert [p.gpus_source for p in report.points] == ["world_size"] * 4
    for p in report.points:
        assert p.efficiency_pct == pytest.approx(built.efficiency_pct[p.gpus], abs=0.1)
        # The series is device-bound, so its device span / steps is the period to within the
        # jitter of one step's edges; gpuscope measures whole steps on the device.
        assert p.step_ns == pytest.approx(built.step_ns[p.gpus], rel=2e-3)
    below = [p.gpus for p in report.points if p.efficiency_pct < report.threshold_pct]
    assert below[0] == built.knee_gpus == 4
    assert report.points[-1].speedup == pytest.approx(8 * built.efficiency_pct[8] / 100, rel=1e-3)


def test_scaling_loss_is_split_and_blamed_on_exposed_communication(series: Series) -> None:
    _, runs = series
    report = scaling(_jobs([runs[n] for n in (1, 2, 4, 8)]))
    for p in report.points[1:]:
        loss = p.loss
        assert loss is not None
        parts = loss.compute_ns + loss.exposed_communication_ns + loss.idle_ns + loss.other_ns
        assert parts == pytest.approx(loss.step_ns, abs=1.0)
        # The series adds an unoverlapped all-reduce of 1.5 ms per extra GPU to every step.
        assert loss.exposed_communication_ns == pytest.approx(1.5e6 * (p.gpus - 1), rel=0.03)
        assert abs(loss.compute_ns) < 0.02 * loss.step_ns
    (finding,) = report.findings
    assert finding.pattern == "latency_mirage" and finding.cause == "scaling_efficiency"
    assert "exposed communication grows" in finding.title
    assert "below 80% at 4 GPUs" in finding.evidence[0]
    assert finding.evidence[-1].startswith("cost per 1M GPU-steps: 1 GPUs $")
    costs = [p.usd_per_unit for p in report.points]
    assert all(c is not None for c in costs) and costs == sorted(costs)  # H100 price is known


def test_scaling_units_from_the_flag_or_from_recorded_shapes(series: Series) -> None:
    _, runs = series
    jobs = _jobs([runs[1], runs[8]])
    given = scaling(jobs, ScalingOptions(units_per_step=32, units="images"))
    assert given.units == "images" and given.units_source.startswith("--units-per-step")
    assert given.points[1].throughput_per_s == pytest.approx(
        32 * 8 / (given.points[1].step_ns / 1e9)
    )
    tokens = scaling(jobs, ScalingOptions(units="tokens"))
    assert tokens.units_source.startswith("batch size from recorded input shapes")
    assert [p.units_per_step_per_gpu for p in tokens.points] == [8 * 1024, 8 * 1024]
    assert scaling(jobs, ScalingOptions(threshold_pct=50)).findings == []


def test_scale_command_writes_json_and_prints_the_table(tmp_path: Path, series: Series) -> None:
    _, runs = series
    out = tmp_path / "scale.json"
    args = ["scale", str(runs[1]), str(runs[2]), str(runs[8]), "--json", str(out)]
    result = CliRunner().invoke(main, [*args, "--units-per-step", "8"])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["schema"] == "gpuscope/scale-1"
    assert [r["gpus"] for r in doc["runs"]] == [1, 2, 8]
    assert doc["runs"][0]["loss_per_gpu_step_ns"] is None
    split = doc["runs"][2]["per_gpu_step_ns"]
    assert all(isinstance(v, int) for v in split.values())
    assert doc["findings"][0]["cause"] == "scaling_efficiency"
    # The command runs its renderers through the one interface (render.base): what it prints
    # is the terminal renderer's text, what it writes the JSON renderer's bytes.
    from gpuscope.render.base import RenderOptions, ScalingJson, ScalingTerminal

    shown = CliRunner().invoke(main, ["scale", str(runs[1]), str(runs[8])])
    alike = scaling(_jobs([runs[1], runs[8]]))
    assert shown.stdout == ScalingTerminal().render(alike, RenderOptions(width=80))
    assert json.loads(ScalingJson().render(alike, RenderOptions()))["runs"][1]["gpus"] == 8
    console = Console(record=True, width=100)
    render_scaling(scaling(_jobs([runs[1], runs[8]])), console)
    text = console.export_text()
    assert "Scaling" in text and "8 GPUs: +" in text and "scaling_efficiency" in text
    alone = CliRunner().invoke(main, ["scale", str(runs[1])])
    assert alone.exit_code == 2
    missing = CliRunner().invoke(main, ["scale", str(runs[1]), str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "nope" in missing.output


def test_scale_refuses_a_different_workload_unless_forced(
    tmp_path: Path, series: Series, batches: Sweep
) -> None:
    _, runs = series
    _, files = batches
    other = files[0]  # an inference loop of memory-bound kernels, not the training job
    refused = CliRunner().invoke(main, ["scale", str(runs[1]), str(other)])
    assert refused.exit_code == 2
    assert "not the same workload" in refused.output and "--force" in refused.output
    forced = scaling(_jobs([runs[1], other]), ScalingOptions(force=True))
    assert any("not the same workload" in w for w in forced.warnings)
    with pytest.raises(InputError):
        scaling(_jobs([runs[1], other]))


# --- sweep --------------------------------------------------------------------------------------


def test_sweep_finds_the_knee_the_generator_built(batches: Sweep) -> None:
    built, files = batches
    report = sweep(_jobs(list(reversed(files))))
    assert report.batch_source == "recorded input shapes"
    assert [p.batch for p in report.points] == sorted(built.runs)
    for p in report.points:
        truth = _true_step_ns(built, p.batch)
        assert p.step_ns == pytest.approx(truth, rel=0.05 if p.batch == 1 else 0.02), p.batch
        assert p.throughput_per_s == pytest.approx(p.batch / (p.step_ns / 1e9), rel=1e-9)
    batches = sorted(built.runs)
    assert abs(batches.index(report.knee_batch) - batches.index(built.knee_batch)) <= 1
    assert report.knee_batch == built.knee_batch == 16
    assert report.best_batch == max(batches)


def _true_step_ns(built: BatchSweep, batch: int) -> float:
    """The loop's period: the slower of the host's step (the generator's own ProfilerStep
    durations: at small batches the host, loading the next batch, sets the pace) and the device's
    (device span / steps, exact when the device is behind: its queue never drains)."""
    host = built.runs[batch].truth.step_durations_ns
    return max(sum(host) / len(host), built.step_ns[batch])


def test_sweep_batch_1_latency_is_the_loops_period_not_span_over_steps(batches: Sweep) -> None:
    """Device span / steps leaves out the host-bound idle time before the first step's work and
    after the last's: at batch 1 it overstated throughput by 41%."""
    built, files = batches
    report = sweep(_jobs(files))
    first = report.points[0]
    assert first.batch == 1
    truth = _true_step_ns(built, 1)
    assert abs(first.step_ns / truth - 1) < 0.05
    assert built.step_ns[1] < 0.8 * truth  # the old measure was far off


def test_sweep_knee_is_memory_bound_and_frees_memory(batches: Sweep) -> None:
    _, files = batches
    report = sweep(_jobs(files))
    knee = next(p for p in report.points if p.batch == report.knee_batch)
    assert knee.memory_bound_pct is not None and knee.memory_bound_pct >= 50
    (finding,) = report.findings
    assert finding.pattern == "bloated_context" and finding.cause == "batch_knee"
    assert report.memory_source.startswith("estimated from recorded input shapes")
    assert report.memory_compared_batch == 128
    freed = report.memory_freed_bytes
    largest = report.points[-1].memory_bytes
    assert freed is not None and largest is not None and knee.memory_bytes is not None
    assert freed == largest - knee.memory_bytes > 0
    # Activations scale with the batch: 128 / 16 = 8 times as many bytes.
    assert largest / knee.memory_bytes == pytest.approx(8, rel=0.05)
    assert "frees about" in finding.evidence[-1]


def test_sweep_under_a_latency_limit_picks_the_best_batch_that_fits(batches: Sweep) -> None:
    built, files = batches
    limit_ms = built.step_ns[32] / 1e6 + 0.1
    report = sweep(_jobs(files), SweepOptions(max_latency_ms=limit_ms))
    assert report.knee_batch == 32 and "under" in report.knee_rule
    tight = sweep(_jobs(files), SweepOptions(max_latency_ms=0.001))
    assert tight.knee_batch == 1 and tight.warnings


def test_sweep_batch_sizes_from_the_list_or_the_file_names(tmp_path: Path) -> None:
    base = GeneratorConfig(
        steps=2,
        mode="inference",
        layers=1,
        gemm_us=30.0,
        attention_us=40.0,
        dataloader_us=3000.0,
        record_shapes=False,
    )
    files = generate_batch_sweep((4, 16, 64), base=base).write(tmp_path / "runs", compress=False)
    named = sweep(_jobs(files))
    assert named.batch_source == "file names" and [p.batch for p in named.points] == [4, 16, 64]
    assert named.memory_freed_bytes is None  # no shapes, no memory samples: not estimated
    given = sweep(_jobs(files), SweepOptions(batch_sizes=(4, 16, 64)))
    assert given.batch_source == "--batch-sizes" and given.knee_batch == named.knee_batch
    with pytest.raises(InputError, match="2 batch sizes for 3 runs"):
        sweep(_jobs(files), SweepOptions(batch_sizes=(4, 16)))
    assert batch_from_name("runs/llama_bs32.json.gz") == 32
    assert batch_from_name("batch_size=8/rank0.json") == 8
    assert batch_from_name("trace.json") is None


def test_sweep_command_json_and_terminal(tmp_path: Path, batches: Sweep) -> None:
    _, files = batches
    out = tmp_path / "sweep.json"
    result = CliRunner().invoke(main, ["sweep", *map(str, files), "--json", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["schema"] == "gpuscope/sweep-1" and doc["knee_batch"] == 16
    from gpuscope.render.base import RenderOptions, SweepJson

    assert out.read_bytes() == SweepJson().render(sweep(_jobs(files)), RenderOptions()) + b"\n"
    assert [r["batch"] for r in doc["runs"]] == [1, 2, 4, 8, 16, 32, 64, 128]
    assert doc["memory"]["freed_bytes"] > 0 and doc["findings"][0]["pattern"] == "bloated_context"
    bad = CliRunner().invoke(main, ["sweep", *map(str, files[:2]), "--batch-sizes", "1,x"])
    assert bad.exit_code == 2
    console = Console(record=True, width=100)
    report = sweep(_jobs(files))
    render_sweep(report, console)
    text = console.export_text()
    assert "16 ◀ knee" in text and "batch_knee" in text
    assert sweep_document(report)["knee_rule"].startswith("the smallest batch within 5%")
    assert scaling_document(scaling(_jobs(files[:2])))["runs"][0]["gpus"] == 1


def test_sweep_whose_knee_is_its_largest_batch_frees_nothing_and_says_nothing(
    batches: Sweep,
) -> None:
    _, files = batches
    report = sweep(_jobs(files[:5]))  # batches 1 to 16: the knee is the largest
    assert report.knee_batch == 16
    assert report.memory_compared_batch is None and report.memory_freed_bytes is None
    console = Console(record=True, width=100)
    render_sweep(report, console)
    text = console.export_text()
    assert "16 ◀ knee" in text and "instead of" not in text
    assert not any("instead of" in e for f in report.findings for e in f.evidence)
