"""The fuzz harness (``benchmarks/fuzz_cli.py``) at a few hundred cases: every input format,
the file system and the options, and the hostile families of issue #30 (tampered saved JSON,
special output files, MCP sessions, extreme timestamps, meaning-preserving rewrites, injection
into every command, concurrent writers and kills, odd environment variables), each case
reproducible from its seed and index.

Zero findings: no traceback, hang, odd exit status, error that is not one line, implausible
figure, changed verdict, control character in the terminal, input overwritten, special file
replaced, temporary left behind, or disagreement between the C scanner and the msgspec reader.
A campaign of thousands runs on demand: ``python benchmarks/fuzz_cli.py --runs 5000``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import fuzz_cli

CASES = 8 * len(fuzz_cli.categories(None))  # eight of each category


def test_a_few_hundred_hostile_inputs_give_no_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fuzz_cli, "QUICK", True)
    tally = fuzz_cli.campaign(CASES, seed=2024, timeout_s=60)
    assert tally.runs == CASES
    assert len(tally.by_category) == len(fuzz_cli.categories(None))
    assert tally.compared >= CASES // 2  # the Kineto inputs were read both ways
    assert [f"{f.case} {f.category} {f.kind}: {f.detail}" for f in tally.findings] == []


def test_a_case_is_the_same_for_the_same_seed_and_index(tmp_path: Path) -> None:
    seeds = fuzz_cli.Seeds.build()
    cats = fuzz_cli.categories(None)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = fuzz_cli.build_case(seeds, 7, 3, cats, tmp_path / "a")
    b = fuzz_cli.build_case(seeds, 7, 3, cats, tmp_path / "b")
    assert a.category == b.category
    assert a.kineto is not None and b.kineto is not None
    assert a.kineto.read_bytes() == b.kineto.read_bytes()


def test_the_judges_see_a_replaced_special_file_an_overwritten_input_and_a_leftover(
    tmp_path: Path,
) -> None:
    source = tmp_path / "in.json"
    source.write_bytes(b"{}")
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    case = fuzz_cli.Case(1, 2, "special-out", "", ["x"], inputs=[source], specials=[fifo])
    before = fuzz_cli._identities(case)
    source.write_bytes(b"{ }")
    fifo.unlink()
    fifo.write_bytes(b"a regular file now")
    (tmp_path / ".out.fifo.1.0123abcd.tmp").write_bytes(b"")
    seen: list[str] = []
    fuzz_cli._judge_files(case, before, lambda kind, detail: seen.append(kind))
    assert sorted(seen) == ["leftover", "overwritten", "replaced-special"]


def test_the_table_has_a_row_per_command_and_a_total() -> None:
    tally = fuzz_cli.Tally()
    tally.outcomes.update(
        {("diagnose", "answered"): 3, ("diagnose", "refused"): 1, ("mcp", "hang"): 2}
    )
    lines = fuzz_cli.table(tally).splitlines()
    assert lines[2].startswith("| `diagnose` | 4 | 3 | 1 | 0")
    assert lines[-1].startswith("| **all** | 6 | 3 | 1 | 0 | 0 | 2")


def test_the_judge_flags_implausible_figures() -> None:
    assert fuzz_cli.implausible({"idle_pct": 70512.0, "span_ns": -5, "cost_usd": float("nan")})
    assert fuzz_cli.implausible({"devices": [{"busy_pct": 50.0, "span_ns": 10}]}) == []
