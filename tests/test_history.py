"""The run history: round trips, filters, schema migration, concurrent writers, the CLI."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuscope.cli import main
from gpuscope.compare.diff import RunSummary, summarize
from gpuscope.diagnosis import diagnose
from gpuscope.errors import InputError
from gpuscope.history import SCHEMA_VERSION, History, default_path, git_commit, source_sha256
from gpuscope.model import Job
from gpuscope.readers import kineto
from gpuscope.testing import generator as g

SMALL = {"layers": 1, "hidden": 512, "seq_len": 256}
ROOT = Path(__file__).resolve().parents[1]


def small_summary(seed: int = 0, inject: tuple[g.Injection, ...] = ()) -> RunSummary:
    config = g.GeneratorConfig(seed=seed, steps=5, inject=inject, **SMALL)
    trace = kineto.read(Path("t.json"), g.generate(config).to_bytes())
    return summarize(diagnose(Job(source=f"seed{seed}", traces=[trace])))


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "history.sqlite"
    monkeypatch.setenv("GPUSCOPE_HISTORY", str(path))
    return path


def test_a_saved_run_comes_back_whole(db: Path) -> None:
    summary = small_summary(1, (g.SlowDataLoader(ms=40),))
    with History() as history:
        run_id = history.save(summary, label="baseline", git_commit="abc123", source_sha256="f00")
        run = history.get(run_id)
    assert history.path == db == default_path()
    assert run.summary == summary
    assert (run.label, run.git_commit, run.source_sha256) == ("baseline", "abc123", "f00")
    assert run.device == summary.device
    assert run.created_at.endswith("+00:00")
    stored = sqlite3.connect(db).execute("SELECT findings FROM runs").fetchone()[0]
    assert [f["cause"] for f in json.loads(stored)] == ["data_loader"]


def test_runs_filter_by_label_newest_first(db: Path) -> None:
    summary = small_summary()
    with History() as history:
        ids = [history.save(summary, label=label) for label in ("a", "b", "a", "a")]
        assert [r.id for r in history.runs(label="a")] == [ids[3], ids[2], ids[0]]
        assert [r.id for r in history.runs(limit=2)] == [ids[3], ids[2]]
        with pytest.raises(InputError, match="no saved run with id 999"):
            history.get(999)


def test_an_old_schema_is_migrated_and_keeps_its_runs(db: Path) -> None:
    summary = small_summary()
    with History(db, upto=1) as old:
        assert old.version == 1
        run_id = old.save(summary, label="v1")
    with History(db) as history:
        assert history.version == SCHEMA_VERSION
        assert history.get(run_id).label == "v1"
    indexes = sqlite3.connect(db).execute("SELECT name FROM sqlite_master WHERE type = 'index'")
    assert "runs_by_label" in [row[0] for row in indexes]


def test_a_newer_schema_or_a_foreign_file_is_refused(db: Path, tmp_path: Path) -> None:
    History(db).close()
    sqlite3.connect(db).execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(InputError, match="newer than this gpuscope"):
        History(db)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database" * 100)
    with pytest.raises(InputError, match="not a gpuscope history database"):
        History(junk)


_WRITER = """
import sys
from gpuscope.compare.diff import RunSummary
from gpuscope.history import History
summary = RunSummary("w", None, 1, None, 0.0, None, 0, {}, "s", {}, [])
with History() as history:
    for i in range(int(sys.argv[1])):
        history.save(summary, label=sys.argv[2])
"""


def test_several_processes_write_at_once(db: Path) -> None:
    writers, each = 4, 15
    env = {**os.environ, "GPUSCOPE_HISTORY": str(db)}
    procs = [
        subprocess.Popen([sys.executable, "-c", _WRITER, str(each), f"w{n}"], env=env)
        for n in range(writers)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0] * writers
    with History(db) as history:
        runs = history.runs()
    assert len(runs) == writers * each
    assert len({r.id for r in runs}) == writers * each
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_git_commit_and_source_hash(tmp_path: Path) -> None:
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if head.returncode == 0:
        assert git_commit(ROOT) == head.stdout.strip()
    assert git_commit(Path("/")) is None
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "a.json").write_text("one")
    first = source_sha256(folder)
    assert source_sha256(folder) == first
    (folder / "a.json").write_text("two")
    assert source_sha256(folder) != first
    assert len(source_sha256(folder / "a.json")) == 64


def test_diagnose_save_then_history_and_diff_by_run_id(db: Path, tmp_path: Path) -> None:
    slow = g.generate(
        g.GeneratorConfig(seed=1, steps=5, inject=(g.SlowDataLoader(ms=40),), **SMALL)
    )
    fast = g.generate(g.GeneratorConfig(seed=2, steps=5, **SMALL))
    runner = CliRunner()
    for trace, label in ((slow, "before"), (fast, "after")):
        path = trace.write(tmp_path / f"{label}.json.gz")
        result = runner.invoke(main, ["diagnose", str(path), "--save", "--label", label])
        assert result.exit_code == 0, result.output
    listing = runner.invoke(main, ["history", "--metric", "step_time_ns"])
    assert listing.exit_code == 0, listing.output
    assert "before" in listing.output and "after" in listing.output
    assert "oldest → newest" in listing.output
    doc = json.loads(runner.invoke(main, ["history", "--label", "after", "--json", "-"]).output)
    assert [r["label"] for r in doc["runs"]] == ["after"]
    assert doc["runs"][0]["step_time_ns"] < 10e6
    result = runner.invoke(main, ["diff", "1", "2", "--json", "-"])
    assert result.exit_code == 0, result.output
    diffed = json.loads(result.output)
    assert diffed["before"]["name"] == "run 1 (before)"
    # Resolved, or left as the fixed run's one wait for its first batch (the window opens where
    # the first step does, before its first kernel).
    findings = diffed["findings"]
    kept = [f for f in findings.get("persisting", []) if f["cause"] == "data_loader"]
    assert [f["cause"] for f in findings["resolved"]] == ["data_loader"] or len(kept) == 1
    unknown = runner.invoke(main, ["history", "--metric", "nonsense"])
    assert unknown.exit_code == 2
    for name in ("idle_pct", "step_time_ns", "gpu_busy_pct", "cost_usd_per_gpu_hour"):
        assert name in unknown.output  # every valid metric, not only the first run's
    assert "lost_ns_per_step.data_loader" in unknown.output
    # The history command runs its renderers through the one interface (render.base).
    from gpuscope.history import History
    from gpuscope.render.base import HistoryJson, HistoryTerminal, RenderOptions, SavedRuns

    with History(readonly=True) as store:
        saved = SavedRuns(store.runs(limit=20), "step_time_ns")
    assert listing.output == HistoryTerminal().render(saved, RenderOptions(width=80))
    assert json.loads(HistoryJson().render(saved, RenderOptions()))["metric"] == "step_time_ns"
