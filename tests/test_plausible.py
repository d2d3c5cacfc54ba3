"""Impossible times are set aside or refused, never turned into figures (issue #30, class 4):
every reader's events pass :mod:`gpuscope.readers._plausible`; predictions stay between no
saving and the whole step; samples at one instant give no dollars."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest

from gpuscope.testing.generator import GeneratorConfig, HostSync, generate
from test_hostile import cli, one_error_line

YEAR_US = 365 * 86_400 * 10**6


@pytest.fixture(scope="module")
def intact() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(
        generate(GeneratorConfig(seed=5, steps=4, layers=2, inject=(HostSync(),))).to_bytes()
    )
    return doc


def run(tmp_path: Path, doc: dict[str, Any], name: str = "t.json") -> dict[str, Any]:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    result = cli("diagnose", str(path), "--json", "-")
    assert result.exit_code == 0, result.stderr
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def timed(doc: dict[str, Any], cat: str) -> list[dict[str, Any]]:
    return [e for e in doc["traceEvents"] if e.get("cat") == cat and "ts" in e]


def test_a_generated_trace_has_nothing_set_aside(tmp_path: Path, intact: dict[str, Any]) -> None:
    assert not [w for w in run(tmp_path, intact)["warnings"] if "impossible" in w]


@pytest.mark.parametrize(
    ("cat", "field", "shift", "reason"),
    [
        ("cuda_runtime", "ts", 133 * YEAR_US, "far from the rest"),
        ("kernel", "ts", 158 * YEAR_US, "far from the rest"),
        ("kernel", "dur", 10 * YEAR_US, "lasting over 31 days"),
        ("cpu_op", "ts", None, "far from the rest"),  # moved to ts=0
    ],
)
def test_one_event_of_impossible_time_is_set_aside_and_named(
    tmp_path: Path, intact: dict[str, Any], cat: str, field: str, shift: int | None, reason: str
) -> None:
    doc = copy.deepcopy(intact)
    event = timed(doc, cat)[len(timed(doc, cat)) // 2]
    if shift is None:
        event["ts"] = 0
    else:
        event[field] += shift
    got, want = run(tmp_path, doc), run(tmp_path, intact, "intact.json")
    (warning,) = [w for w in got["warnings"] if "impossible" in w]
    assert f"set aside 1 event(s) with impossible times (1 {reason}" in warning
    assert warning.endswith(event["name"][:60]) or event["name"][:60] in warning
    assert got["verdict"]["bound"] == want["verdict"]["bound"]
    assert got["verdict"]["idle_pct"] == pytest.approx(want["verdict"]["idle_pct"], abs=1.0)


def test_negated_timestamps_are_refused(tmp_path: Path, intact: dict[str, Any]) -> None:
    doc = copy.deepcopy(intact)
    for event in doc["traceEvents"]:
        if "ts" in event:
            event["ts"] = -event["ts"] - 1
    path = tmp_path / "negated.json"
    path.write_text(json.dumps(doc))
    assert "no event has a plausible time" in one_error_line(cli("diagnose", str(path)))


def _shares(value: Any, key: str = "") -> list[float]:
    if isinstance(value, dict):
        return [x for k, v in value.items() for x in _shares(v, k)]
    if isinstance(value, list):
        return [x for v in value for x in _shares(v, key)]
    return [value] if key.endswith("_pct") and isinstance(value, float) else []


@pytest.mark.parametrize("seed", range(3))
def test_shuffled_timestamps_give_no_impossible_figure(
    tmp_path: Path, intact: dict[str, Any], seed: int
) -> None:
    doc = copy.deepcopy(intact)
    stamps = [e["ts"] for e in doc["traceEvents"] if "ts" in e]
    random.Random(seed).shuffle(stamps)
    for event, stamp in zip((e for e in doc["traceEvents"] if "ts" in e), stamps, strict=True):
        event["ts"] = stamp
    got = run(tmp_path, doc)
    predictions = [f["prediction"] for f in got["findings"] if f.get("prediction")]
    if got.get("all_fixes"):
        predictions.append(got["all_fixes"])
    for p in predictions:
        assert 0 <= p["predicted_step_ns"] <= p["step_ns"] + abs(p["saving_ns_per_step"])
        assert p["saving_ns_per_step"] <= p["step_ns"]
    assert all(0.0 <= x <= 100.0 for x in _shares(got["verdict"]))


def test_samples_all_at_one_instant_give_no_dollars(tmp_path: Path) -> None:
    lines = ["timestamp, index, name, utilization.gpu [%], memory.used [MiB]"]
    lines += [f"2024/01/15 10:00:00.000, 0, NVIDIA H100 80GB HBM3, {40 + i} %, 2048 MiB"
              for i in range(6)]  # fmt: skip
    path = tmp_path / "smi.csv"
    path.write_text("\n".join(lines) + "\n")
    assert "carry one time" in one_error_line(cli("diagnose", str(path)))
