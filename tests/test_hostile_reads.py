"""Inputs that once gave a traceback (issue #30, class 3): each is one line and exit 2, or a
result with a warning; each test builds the smallest input that showed it."""

from __future__ import annotations

import copy
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from corpus import corpus
from test_hostile import cli, document, events, one_error_line, write_doc
from test_rocprof import _document, _record


@pytest.fixture
def saved(tmp_path: Path) -> dict[str, Any]:
    trace = write_doc(tmp_path / "t.json", document(events()))
    out = tmp_path / "s.json"
    assert cli("diagnose", str(trace), "--json", str(out)).exit_code == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def test_runs_with_different_device_counts_compare_side_by_side(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    one = corpus("kineto/hta/trace_compare/base/base.json.gz")
    eight = corpus("kineto/param-dlrm-8rank")
    result = cli("report", str(one), str(eight), "-o", str(out))
    assert result.exit_code == 0, result.stderr
    assert out.read_bytes().count(b"class='cols'") >= 2


ROCPROF_HOSTILE: list[Any] = ["12", 1.5, True, [], {}, 2**64, -(2**64), 10**30, None]


@pytest.mark.parametrize("value", ROCPROF_HOSTILE, ids=repr)
@pytest.mark.parametrize(
    "where",
    ["start_timestamp", "thread_id", "kind", "bytes", "correlation_id", "dispatch_info", "pid",
     "grid", "agent", "record"],
)  # fmt: skip
def test_rocprof_values_of_any_type_or_size_read_without_a_traceback(
    tmp_path: Path, where: str, value: Any
) -> None:
    dispatch = {"agent_id": {"handle": 2}, "queue_id": {"handle": 9}, "kernel_id": 0,
                "workgroup_size": {"x": 256}, "grid_size": {"x": 1024}}  # fmt: skip
    kernels = [_record(11, 2, 2_000 + 100 * i, 2_050 + 100 * i, i, dispatch_info=dict(dispatch))
               for i in range(4)]  # fmt: skip
    copies = [_record(10, 2, 1_000, 1_200, 9, src_agent_id={"handle": 1},
                      dst_agent_id={"handle": 2}, bytes=64)]  # fmt: skip
    doc = _document(kernel_dispatch=kernels, memory_copy=copies)
    process = doc["rocprofiler-sdk-tool"][0]
    target = kernels[0]
    if where in ("start_timestamp", "thread_id", "kind", "correlation_id", "dispatch_info"):
        target[where] = value
    elif where == "bytes":
        copies[0]["bytes"] = value
    elif where == "pid":
        process["metadata"]["pid"] = value
    elif where == "grid":
        target["dispatch_info"]["grid_size"] = {"x": value}
    elif where == "agent":
        process["agents"][1]["logical_node_type_id"] = value
    else:
        kernels.append(value)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    result = cli("diagnose", str(path), "--json", "-")
    assert result.exit_code in (0, 2), result.stderr
    if result.exit_code == 2:
        one_error_line(result)


def test_an_nsys_export_with_a_text_cuda_id_reads(tmp_path: Path) -> None:
    path = tmp_path / "export.sqlite"
    path.write_bytes(corpus("nsys/pipit/a100_saxpy_mpi_rank0_schema2.9.sqlite").read_bytes())
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE TARGET_INFO_CUDA_DEVICE (pid, cudaId, gpuId)")
        db.execute("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (1, 'abc', 0)")
    assert cli("diagnose", str(path), "--json", "-").exit_code == 0
    with sqlite3.connect(path) as db:
        db.execute("UPDATE TARGET_INFO_GPU SET id = 'zz'")
    assert "a column holds a value of the wrong type" in one_error_line(cli("diagnose", str(path)))


def test_an_nsys_export_without_its_kernel_table_says_so() -> None:
    path = corpus("nsys/weatherbench2/rtx4060_no_kernel_table.sqlite")
    result = cli("diagnose", str(path), "--json", "-")
    assert result.exit_code == 0
    warnings = json.loads(result.stdout)["warnings"]
    assert any("no kernel table" in w for w in warnings), warnings


def test_nvml_lines_nested_5000_deep_are_one_line(tmp_path: Path) -> None:
    rows = [json.dumps({"time": f"2024-01-15 10:00:0{i}", "gpu_usage:0": 50}) for i in range(5)]
    rows.append('{"time": "2024-01-15 10:00:09", "gpu_usage:0": ' + "[" * 5000 + "]" * 5000 + "}")
    path = tmp_path / "monitor.jsonl"
    path.write_text("\n".join(rows) + "\n")
    assert "nested too deep" in one_error_line(cli("diagnose", str(path)))


@pytest.mark.parametrize("stamp", ["9" * 5000, str(2**64), "-5"])
def test_a_prometheus_timestamp_beyond_64_bits_is_one_line(tmp_path: Path, stamp: str) -> None:
    labels = 'gpu="0",UUID="GPU-1",modelName="NVIDIA A100-SXM4-80GB"'
    stamps = ["1705312800000", "1705312801000", stamp]
    path = tmp_path / "scrape.prom"
    path.write_text("".join(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} 30 {s}\n" for s in stamps))
    assert "is not milliseconds since 1970" in one_error_line(cli("diagnose", str(path)))


def _tamper(doc: dict[str, Any], how: str) -> str:
    doc = copy.deepcopy(doc)
    saved = doc["diagnosis"]
    device = saved["devices"][0]
    if how == "overflow":
        device["span_end_ns"] = 2**64
    elif how == "negative":
        device["span_start_ns"] = -(2**40)
    elif how == "inf":
        saved["verdict"]["figures"]["busy_pct"] = "inf"
    elif how == "percent":
        saved["verdict"]["idle_pct"] = 7000.0
    elif how == "missing":
        del saved["verdict"]
    elif how == "uneven":  # a column of the step table longer than the others
        device["series"]["step_causes"]["outside_ns"].append(5)
    elif how == "deep":
        saved["warnings"] = "@@"
        return json.dumps(doc).replace('"@@"', "[" * 20000 + "]" * 20000)
    return json.dumps(doc)


@pytest.mark.parametrize(
    "how", ["overflow", "negative", "inf", "percent", "missing", "uneven", "deep"]
)
def test_a_tampered_saved_diagnosis_is_one_line(
    tmp_path: Path, saved: dict[str, Any], how: str
) -> None:
    path = tmp_path / "tampered.json"
    path.write_text(_tamper(saved, how))
    for args in (
        ("report", str(path), "-o", str(tmp_path / "r.html")),
        ("diff", str(path), str(path)),
        ("check", str(path), "--max-idle-pct", "50"),
    ):
        assert "saved" in one_error_line(cli(*args)) or "JSON" in one_error_line(cli(*args))


def test_a_saved_diagnosis_reads_within_the_memory_budget(
    tmp_path: Path, saved: dict[str, Any]
) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(saved))
    line = one_error_line(cli("report", str(path), "-o", str(tmp_path / "r.html"),
                              "--max-memory", "1K"))  # fmt: skip
    assert "memory" in line


def test_history_limit_beyond_64_bits_lists(tmp_path: Path) -> None:
    env = {"GPUSCOPE_HISTORY": str(tmp_path / "h.sqlite")}
    trace = write_doc(tmp_path / "t.json", document(events()))
    assert cli("diagnose", str(trace), "--save", "--json", "-", env=env).exit_code == 0
    result = cli("history", "--limit", "99999999999999999999", env=env)
    assert result.exit_code == 0 and "Saved runs" in result.stdout


def test_a_history_whose_schema_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    env = {"GPUSCOPE_HISTORY": str(db)}
    trace = write_doc(tmp_path / "t.json", document(events()))
    assert cli("diagnose", str(trace), "--save", "--json", "-", env=env).exit_code == 0
    data = bytearray(db.read_bytes())
    at = data.index(b"CREATE TABLE runs")
    data[at + 13 : at + 17] = b"\x95\x95\x95\x95"
    db.write_bytes(bytes(data))
    for args in (("history",), ("diff", "1", "1"), ("diagnose", str(trace), "--save")):
        assert "history database" in one_error_line(cli(*args, env=env))
