"""diagnose --engine: a job's ranks reduced to summaries on workers, the job diagnosed from them.

The answers must be those of the one-process diagnosis of the same folder (the same rank
analysis, the same findings), on every engine; a rank that cannot be read is named and left out.
"""

from __future__ import annotations

import importlib.util
import json
import os
from functools import cache
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner

from corpus import corpus
from gpuscope import diagnose, load
from gpuscope.cli import main
from gpuscope.diagnosis import Diagnosis
from gpuscope.distributed import JobDiagnosis, diagnose_job, reduce_rank
from gpuscope.engines import Engine, session
from gpuscope.testing.generator import GeneratorConfig, Straggler, generate_job

DLRM = "kineto/param-dlrm-8rank"
HAS_RAY = importlib.util.find_spec("ray") is not None


@cache
def _dlrm() -> tuple[Diagnosis, JobDiagnosis]:
    folder = corpus(DLRM)
    return diagnose(load(folder)), diagnose_job(folder, Engine(workers=1))


def _lost(findings: list[object]) -> dict[str, int]:
    return {f.cause: f.lost_ns for f in findings}  # type: ignore[attr-defined]


def test_dlrm_from_summaries_is_the_one_process_diagnosis() -> None:
    full, job = _dlrm()
    assert job.ranks == full.ranks  # clocks, waits, stragglers, exposure, bandwidth: all of it
    assert job.ranks is not None and [s.rank for s in job.ranks.stragglers] == [7]
    assert job.ranks.stragglers[0].idle_causes[0][0] == "launch_overhead"  # read again, on a worker
    # Each cause's lost time, summed over ranks, is the one-process figure (to rounding).
    full_lost, job_lost = _lost(full.findings), _lost(job.findings)
    assert full_lost.keys() == job_lost.keys()
    for cause, ns in full_lost.items():
        assert job_lost[cause] == pytest.approx(ns, abs=8), cause
    assert job.ranks_read == job.files == 8 and job.failed == []
    assert "straggler: rank 7" in job.verdict


def test_a_dlrm_rank_is_a_few_kilobytes_on_the_driver() -> None:
    _, job = _dlrm()
    report = reduce_rank(str(sorted(corpus(DLRM).iterdir())[0]), 0)
    assert len(report.summaries) == 1
    assert len(msgspec.msgpack.encode(report.summaries[0])) < 4_000
    assert report.nbytes < 16_000 and job.bytes_per_rank < 16_000


@pytest.fixture(scope="module")
def job64(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """64 ranks, rank 37 late by 2 ms at every step (small ranks: 2 steps of 1 layer)."""
    folder = tmp_path_factory.mktemp("job64")
    config = GeneratorConfig(seed=3, steps=2, layers=1, inject=(Straggler(rank=37, extra_ms=2.0),))
    for rank, trace in enumerate(generate_job(config, world_size=64)):
        trace.write(folder / f"rank{rank}.json")
    return folder


def test_64_ranks_on_a_pool_name_the_planted_straggler_as_one_process_does(job64: Path) -> None:
    job = diagnose_job(job64, Engine(workers=2))
    assert job.ranks is not None and [s.rank for s in job.ranks.stragglers] == [37]
    assert [r.rank for r in job.rank_rows] == list(range(64))  # rank order, not file-name order
    full = diagnose(load(job64))
    assert job.ranks == full.ranks
    assert _lost(job.findings) == _lost(full.findings)
    assert job.bytes_per_rank < 8_000


def test_a_rank_that_cannot_be_read_is_named_and_the_rest_diagnosed(tmp_path: Path) -> None:
    config = GeneratorConfig(seed=1, steps=2, layers=1, inject=(Straggler(rank=2, extra_ms=2.0),))
    for rank, trace in enumerate(generate_job(config, world_size=4)):
        trace.write(tmp_path / f"rank{rank}.json")
    (tmp_path / "rank1.json").write_bytes(b'{"traceEvents": [{"ph": "X", "ts": 1')  # cut short
    (tmp_path / "notes.txt").write_text("not a trace")
    job = diagnose_job(tmp_path, Engine(workers=1))
    assert [Path(p).name for p, _ in job.failed] == ["rank1.json"]
    assert [Path(p).name for p in job.skipped] == ["notes.txt"]
    assert job.ranks_read == 3 and job.files == 4
    assert job.verdict.startswith("diagnosed from 3 of 4 ranks (1 could not be read)")
    assert job.ranks is not None and [s.rank for s in job.ranks.stragglers] == [2]
    result = CliRunner().invoke(main, ["diagnose", str(tmp_path), "--engine", "local"])
    assert result.exit_code == 0, result.output
    warned = [line for line in result.stderr.splitlines() if "rank not read" in line]
    assert len(warned) == 1 and "rank1.json" in warned[0]


def _square_or_die(x: int) -> int:
    if x == 2:
        os._exit(3)  # the worker killed mid-task (out of memory, a lost node)
    return x * x


def test_a_worker_that_dies_fails_its_items_not_the_run() -> None:
    with session(Engine(workers=2), 4) as runner:
        out = runner.map(_square_or_die, [(i,) for i in range(4)], failed=lambda _i, _e: -1)
    assert out[2] == -1  # the pool breaks: items still pending with it fail too
    assert all(v in (i * i, -1) for i, v in enumerate(out))


def test_cli_engine_json_and_usage(tmp_path: Path) -> None:
    folder = str(corpus(DLRM))
    out = tmp_path / "job.json"
    result = CliRunner().invoke(
        main, ["diagnose", folder, "--engine", "local", "--workers", "1", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["schema"] == "gpuscope/job-1" and doc["ranks_read"] == 8
    assert doc["ranks"]["stragglers"][0]["rank"] == 7
    assert "straggler: rank 7" in result.stdout
    for extra in (["-o", "x.html"], ["--save"]):
        bad = CliRunner().invoke(main, ["diagnose", folder, "--engine", "local", *extra])
        assert bad.exit_code == 2 and "--engine" in bad.output
    bad = CliRunner().invoke(main, ["diagnose", folder, "--workers", "2"])
    assert bad.exit_code == 2 and "go with --engine" in bad.output


@pytest.mark.skipif(
    not HAS_RAY and os.environ.get("CI") != "true",
    reason="ray (gpuscope[ray]) is not installed; CI installs it through the test extra",
)
def test_ray_gives_the_local_answer() -> None:
    """The one Ray test (starting Ray costs seconds): the 8 DLRM ranks on a local Ray of two
    CPUs give the local engine's diagnosis, straggler detail included."""
    _, local = _dlrm()
    on_ray = diagnose_job(corpus(DLRM), Engine("ray", workers=2))
    assert on_ray.engine == "ray"
    assert msgspec.structs.replace(on_ray, engine="local") == local


def test_engine_ray_without_ray_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a)
    )
    result = CliRunner().invoke(main, ["diagnose", str(corpus(DLRM)), "--engine", "ray"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "--engine ray needs ray" in result.stderr
