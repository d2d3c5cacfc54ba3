"""The annotated trace: the original events untouched, plus gpuscope's tracks on a new process."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from corpus import corpus
from gpuscope import Diagnosis, diagnose, load
from gpuscope.analyses.attribution import CAUSES
from gpuscope.cli import main
from gpuscope.render.annotate import CATEGORY, PROCESS_NAME
from test_report import hostile, slow_loader_trace


def annotate(source: Path, target: Path) -> dict[str, Any]:
    result = CliRunner().invoke(main, ["annotate", str(source), "-o", str(target)])
    assert result.exit_code == 0, result.output
    return read(target)


def read(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    value: dict[str, Any] = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    return value


def assert_originals_kept(original: dict[str, Any], annotated: dict[str, Any]) -> int:
    """Every original event, in place and equal after a JSON round trip; returns their count."""
    before, after = original["traceEvents"], annotated["traceEvents"]
    assert len(after) > len(before)
    assert json.dumps(after[: len(before)]) == json.dumps(before)
    assert {k: v for k, v in annotated.items() if k != "gpuscope"} == {
        **original,
        "traceEvents": after,
    }
    return len(before)


def new_events(annotated: dict[str, Any], count: int) -> tuple[int, list[dict[str, Any]]]:
    added = annotated["traceEvents"][count:]
    pids = {e["pid"] for e in added}
    assert len(pids) == 1
    pid = pids.pop()
    assert pid not in {e.get("pid") for e in annotated["traceEvents"][:count]}
    return pid, added


def to_ns(us: float) -> int:
    """µs from a trace to ns, as the reader converts them (whole µs, then the fraction)."""
    return int(us) * 1000 + round((us - int(us)) * 1000)


def assert_gaps_match(added: list[dict[str, Any]], diagnosis: Diagnosis) -> None:
    """One complete event per idle segment, with its exact time, cause and location."""
    slices = [e for e in added if e["ph"] == "X"]
    gaps = [(d, i) for d in diagnosis.devices for i in range(d.idle.gaps.start_ns.size)]
    assert len(slices) == len(gaps)
    for event, (device, i) in zip(slices, gaps, strict=True):
        g = device.idle.gaps
        assert event["cat"] == CATEGORY and event["name"] == CAUSES[int(g.cause[i])]
        assert to_ns(event["ts"]) == int(g.start_ns[i])
        assert to_ns(event["dur"]) == int(g.end_ns[i] - g.start_ns[i])
        assert event["args"]["cause"] == event["name"]
        assert event["args"]["location"] == g.location[i]


def test_annotated_trace_keeps_the_trace_and_adds_one_process(tmp_path: Path) -> None:
    trace = slow_loader_trace()
    trace.write(tmp_path / "trace.json.gz")
    annotated = annotate(tmp_path / "trace.json.gz", tmp_path / "annotated.json.gz")
    count = assert_originals_kept(trace.document, annotated)
    pid, added = new_events(annotated, count)
    names = {(e["name"], e["args"].get("name")) for e in added if e["ph"] == "M"}
    assert ("process_name", PROCESS_NAME) in names and ("thread_name", "findings") in names
    diagnosis = diagnose(load(tmp_path / "trace.json.gz"))
    assert_gaps_match(added, diagnosis)
    instants = [e for e in added if e["ph"] == "i"]
    assert [e["name"] for e in instants] == ["gpuscope verdict"] + [
        f"finding {i}: {f.cause}" for i, f in enumerate(diagnosis.findings, 1)
    ]
    assert all(e["s"] == "t" and e["tid"] == 0 for e in instants)
    loader = next(e for e in instants if e["name"].endswith("data_loader"))
    assert "train.py:48 (train)" in loader["args"]["locations"]
    block = annotated["gpuscope"]
    assert block["pid"] == pid and block["verdict"]["summary"] == diagnosis.verdict.summary


def test_annotated_trace_reads_back_to_the_same_diagnosis(tmp_path: Path) -> None:
    slow_loader_trace(steps=3).write(tmp_path / "trace.json")
    annotate(tmp_path / "trace.json", tmp_path / "annotated.json")
    before = diagnose(load(tmp_path / "trace.json"))
    after = diagnose(load(tmp_path / "annotated.json"))
    assert after.verdict.summary == before.verdict.summary
    assert [f.lost_ns for f in after.findings] == [f.lost_ns for f in before.findings]


def test_hostile_names_stay_data(tmp_path: Path) -> None:
    trace = hostile(slow_loader_trace(steps=3))
    trace.write(tmp_path / "trace.json")
    annotated = annotate(tmp_path / "trace.json", tmp_path / "annotated.json")
    assert_originals_kept(trace.document, annotated)


def test_corpus_trace_is_kept_and_annotated(tmp_path: Path) -> None:
    source = corpus("kineto/tracelens/h100_qwen1.5-0.5b_inference.json.gz")
    annotated = annotate(source, tmp_path / "annotated.json")
    count = assert_originals_kept(read(source), annotated)
    _, added = new_events(annotated, count)
    assert_gaps_match(added, diagnose(load(source)))


def test_folder_of_ranks_gives_one_annotated_file_per_rank(tmp_path: Path) -> None:
    folder = corpus("kineto/param-dlrm-8rank")
    result = CliRunner().invoke(main, ["annotate", str(folder), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    for source in sorted(folder.iterdir()):
        annotated = read(tmp_path / "out" / source.name)
        count = assert_originals_kept(read(source), annotated)
        _, added = new_events(annotated, count)
        assert sum(e["ph"] == "X" for e in added) > 0


def test_annotate_never_writes_over_its_input(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    slow_loader_trace(steps=2).write(path)
    before = path.read_bytes()
    result = CliRunner().invoke(main, ["annotate", str(path), "-o", str(path)])
    assert result.exit_code == 2 and "is one of the command's inputs" in result.output
    assert path.read_bytes() == before


def test_annotate_refuses_a_timeline_of_another_format_in_one_line(tmp_path: Path) -> None:
    from gpuscope.testing.pftrace import write_pftrace

    source = tmp_path / "trace.json"
    slow_loader_trace(steps=2).write(source)
    pftrace = write_pftrace(source, tmp_path / "run.pftrace", "cuspy")
    result = CliRunner().invoke(main, ["annotate", str(pftrace), "-o", str(tmp_path / "o.json")])
    assert result.exit_code == 2
    (line,) = result.output.strip().splitlines()
    assert str(pftrace) in line
    assert "holds a timeline in the pftrace format, and only Kineto" in line
