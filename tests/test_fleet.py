"""gpuscope fleet / fleet-report: rows per job and finding, engines agree, resume, reports."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from corpus import corpus
from gpuscope import fleet
from gpuscope.analyses.attribution import CAUSES
from gpuscope.cli import main
from gpuscope.render.fleet import busy_histogram, render_html, render_terminal
from gpuscope.render.html import embedded_figures
from gpuscope.testing.generator import (
    Checkpoint,
    GeneratorConfig,
    HostSync,
    SlowDataLoader,
    generate,
)

HAS_PYARROW = importlib.util.find_spec("pyarrow") is not None
HAS_RAY = importlib.util.find_spec("ray") is not None
needs_pyarrow = pytest.mark.skipif(not HAS_PYARROW, reason="pyarrow (gpuscope[fleet]) missing")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three generated jobs with known causes, and one file that is not a trace."""
    root = tmp_path_factory.mktemp("fleet")
    injections = [HostSync(), SlowDataLoader(ms=30), Checkpoint()]
    for i, inj in enumerate(injections):
        generate(GeneratorConfig(seed=i, steps=3, layers=2, inject=(inj,))).write(
            root / f"job{i}.json.gz"
        )
    (root / "broken.json").write_text("not a trace")
    return root


def test_every_cause_has_an_icse_category() -> None:
    # gpuscope.diagnosis.findings is shadowed by the function of that name: import the modules.
    titles = [
        importlib.import_module(f"gpuscope.diagnosis.{m}")._TITLES for m in ("findings", "sampled")
    ]
    causes = set(CAUSES).union(*titles)
    assert causes <= set(fleet.ICSE_CATEGORIES)
    assert {c for c, _ in fleet.ICSE_CATEGORIES.values()} <= {"data", "model", "job", "library"}
    assert fleet.category("data_loader") == ("data", "data preprocessing")
    assert fleet.category("checkpoint") == ("model", "checkpointing")


def test_rows_per_job_and_finding(jobs: Path) -> None:
    table = fleet.run(fleet.expand([str(jobs / "*")]), fleet.Engine(workers=1))
    by_name = {Path(j.path).name: j for j in table.jobs}
    assert sorted(by_name) == ["broken.json", "job0.json.gz", "job1.json.gz", "job2.json.gz"]
    broken = by_name["broken.json"]
    assert broken.status == "error" and broken.error and "broken.json" in broken.error
    assert broken.date_source == "mtime"
    assert [by_name[f"job{i}.json.gz"].top_cause for i in range(3)] == [
        "host_sync",
        "data_loader",
        "checkpoint",
    ]
    job1 = by_name["job1.json.gz"]
    assert job1.status == "ok" and job1.gpus == 1 and job1.devices == "NVIDIA H100 80GB HBM3"
    assert job1.date == "2025-01-01T00:00:01+00:00" and job1.date_source == "trace"
    assert job1.top_category == "data" and job1.idle_pct is not None and job1.idle_pct > 5
    mine = [f for f in table.findings if f.path == job1.path]
    assert job1.lost_gpu_hours == pytest.approx(sum(f.lost_ns for f in mine) / 3.6e12)
    assert job1.lost_usd == pytest.approx(job1.lost_gpu_hours * 4.92)
    # The saving is the diagnosis's all-fixes figure over the job's GPU-hours, not the lost time.
    assert job1.saving_usd_per_gpu_hour is not None and job1.span_ns and job1.gpus
    hours = job1.span_ns * job1.gpus / 3.6e12
    assert job1.saving_usd == pytest.approx(job1.saving_usd_per_gpu_hour * hours)
    assert 0 < job1.saving_usd < hours * 4.92


def test_local_pool_matches_in_process(jobs: Path) -> None:
    inputs = fleet.expand([str(jobs / "*")])
    done: list[str] = []
    one = fleet.run(inputs, fleet.Engine(workers=1))
    two = fleet.run(inputs, fleet.Engine(workers=2), on_done=done.append)
    assert one == two and sorted(done) == sorted(inputs)


@pytest.mark.skipif(
    not HAS_RAY and os.environ.get("CI") != "true",
    reason="ray (gpuscope[ray]) is not installed; CI installs it through the test extra",
)
def test_ray_engine_matches_local(jobs: Path) -> None:
    import ray

    inputs = fleet.expand([str(jobs / "*")])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = fleet.run(inputs, fleet.Engine("ray"))
    finally:
        ray.shutdown()
    assert on_ray == fleet.run(inputs, fleet.Engine(workers=1))


def test_json_round_trip_and_resume(jobs: Path, tmp_path: Path) -> None:
    out = tmp_path / "fleet.json"
    run = CliRunner().invoke(main, ["fleet", str(jobs / "*"), "--out", str(out), "--workers", "1"])
    assert run.exit_code == 0, run.output
    assert "4 jobs diagnosed (1 failed), 0 already there" in run.stderr
    doc = json.loads(out.read_text())
    assert doc["schema"] == "gpuscope/fleet-2" and len(doc["jobs"]) == 4
    assert {f["category"] for f in doc["findings"]} >= {"data", "model"}
    (jobs / "job0.json.gz").touch()  # a changed input is diagnosed again
    again = CliRunner().invoke(main, ["fleet", str(jobs / "*"), "--out", str(out), "--json"])
    assert "1 job diagnosed (0 failed), 3 already there" in again.stderr
    assert [Path(j["path"]).name for j in json.loads(again.stdout)] == ["job0.json.gz"]
    assert fleet.read(out) == fleet.read(out) and len(fleet.read(out).jobs) == 4


@needs_pyarrow
def test_parquet_round_trip(jobs: Path, tmp_path: Path) -> None:
    table = fleet.run(fleet.expand([str(jobs / "*")]), fleet.Engine(workers=1))
    fleet.write(table, tmp_path / "f.parquet")
    assert (tmp_path / "f.findings.parquet").exists()
    assert fleet.read(tmp_path / "f.parquet") == table


def test_parquet_without_pyarrow_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a)
    )
    run = CliRunner().invoke(main, ["fleet", "x", "--out", str(tmp_path / "f.parquet")])
    assert run.exit_code == 2
    assert run.stderr.strip().count("\n") == 0 and "pip install -e '" in run.stderr
    assert "[fleet]'" in run.stderr


def test_fleet_report_terminal_and_html(jobs: Path, tmp_path: Path) -> None:
    weird = tmp_path / "<img src=x onerror=alert(1)>.json.gz"
    generate(GeneratorConfig(seed=9, steps=3, layers=2, inject=(HostSync(),))).write(weird)
    out = tmp_path / "fleet.json"
    fleet.write(fleet.run([*fleet.expand([str(jobs / "*")]), str(weird)]), out)
    html_path = tmp_path / "fleet.html"
    run = CliRunner().invoke(main, ["fleet-report", str(out), "-o", str(html_path)])
    assert run.exit_code == 0, run.output
    assert "5 jobs (1 failed)" in run.stdout and "by category: data, model or job" in run.stdout
    assert "checkpoint" in run.stdout and "2025-01-01" in run.stdout
    page = html_path.read_text()
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    ids = [f["id"] for f in embedded_figures(page)]
    assert ids == ["fleet-category", "fleet-cause", "fleet-utilisation", "fleet-trend"]


def test_summary_groups_waste(jobs: Path) -> None:
    table = fleet.run(fleet.expand([str(jobs / "*.gz")]), fleet.Engine(workers=1))
    s = fleet.summarize(table, worst=2)
    assert s.jobs == 3 and s.failed == 0 and len(s.worst) == 2 and len(s.idle_pcts) == 3
    assert sum(w.gpu_hours for w in s.by_cause) == pytest.approx(s.lost_gpu_hours)
    assert sum(w.gpu_hours for w in s.by_category) == pytest.approx(s.lost_gpu_hours)
    assert [w.key for w in s.by_day] == ["2025-01-01"]


@pytest.mark.skipif(importlib.util.find_spec("fsspec") is None, reason="fsspec not installed")
def test_url_inputs_are_downloaded_in_the_worker(jobs: Path) -> None:
    import fsspec

    memory = fsspec.filesystem("memory")
    memory.pipe("/fleet/job1.json.gz", (jobs / "job1.json.gz").read_bytes())
    table = fleet.run(["memory://fleet/job1.json.gz"], fleet.Engine(workers=1))
    local = fleet.run([str(jobs / "job1.json.gz")], fleet.Engine(workers=1))
    assert table.jobs[0].status == "ok" and table.jobs[0].size_bytes is None
    assert table.jobs[0].top_cause == local.jobs[0].top_cause == "data_loader"
    assert [f.lost_ns for f in table.findings] == [f.lost_ns for f in local.findings]
    assert fleet.pending(["memory://fleet/job1.json.gz"], table)  # URLs are read again


def test_a_fleet_1_table_is_read_as_lost_time_with_no_saving(tmp_path: Path) -> None:
    """fleet-1 called the findings' lost time "wasted" and its per-GPU-hour figure added the
    findings' dollars up: read as lost time, and as no saving."""
    old = tmp_path / "old.json"
    job = {"path": "a", "size_bytes": 1, "mtime_ns": 1, "status": "ok"}
    job |= {"wasted_usd_per_gpu_hour": 3.12, "wasted_gpu_hours": 2.0, "wasted_usd": 9.84}
    old.write_text(json.dumps({"schema": "gpuscope/fleet-1", "jobs": [job], "findings": []}))
    (row,) = fleet.read(old).jobs
    assert (row.lost_gpu_hours, row.lost_usd) == (2.0, 9.84)
    assert row.saving_usd_per_gpu_hour is None and row.saving_usd is None
    s = fleet.summarize(fleet.read(old))
    assert s.lost_gpu_hours == 2.0 and s.saving_usd is None


def test_report_on_a_file_that_is_not_a_table(tmp_path: Path) -> None:
    bad = tmp_path / "fleet.json"
    bad.write_text('{"schema": "something-else"}')
    run = CliRunner().invoke(main, ["fleet-report", str(bad)])
    assert run.exit_code == 2
    assert run.stderr.startswith("gpuscope: error: ") and "not a gpuscope fleet table" in run.stderr


def test_gpu_hours_count_the_ranks_present_not_the_declared_world(tmp_path: Path) -> None:
    for rank in sorted(corpus("kineto/param-dlrm-8rank").glob("worker[01]_*")):
        (tmp_path / rank.name).symlink_to(rank)
    (job,) = fleet.diagnose_input(str(tmp_path)).jobs
    assert job.status == "ok" and job.gpus == 2  # 2 of a world of 8 ranks were traced


def _job(path: str, hours: float | None, usd: float | None, status: str = "ok") -> fleet.JobRow:
    error = None if status == "ok" else "not a trace"
    return fleet.JobRow(path, 1, 1, status, error, lost_gpu_hours=hours, lost_usd=usd)


def test_worst_jobs_rank_by_gpu_hours_priced_or_not_and_failed_jobs_are_listed() -> None:
    table = fleet.FleetTable(
        [
            _job("priced", 1.0, 3.9),
            _job("nvml_unknown_gpu", 10.0, None),  # most of the waste, no price
            _job("small", 0.1, 0.39),
            _job("broken", None, None, status="error"),
        ]
    )
    s = fleet.summarize(table, worst=2)
    assert [j.path for j in s.worst] == ["nvml_unknown_gpu", "priced"]
    assert [(j.path, j.error) for j in s.failed_jobs] == [("broken", "not a trace")]
    console = Console(record=True, width=120)
    render_terminal(s, console)
    text = console.export_text()
    assert "failed jobs" in text and "broken" in text and "not a trace" in text
    assert "Failed jobs" in render_html(s) and "nvml_unknown_gpu" in render_html(s)


def test_utilisation_histogram_keeps_jobs_at_100_pct() -> None:
    counts, edges = busy_histogram([0.0, 100.0, 2.5, 50.0])  # idle %: busy 100, 0, 97.5, 50
    assert edges[0] == 0 and edges[-1] == 100 and len(counts) == 20
    assert sum(counts) == 4 and counts[-1] == 2 and counts[0] == 1 and counts[10] == 1
