"""A diagnosis is a value: saved as JSON it reads back equal, and a report drawn from the saved
file is the report drawn from the trace, byte for byte.

The whole corpus is checked by ``benchmarks/saved_reports.py`` (every file, through the CLI); here
a file of each input kind (Kineto, a multi-rank folder, Nsight Systems, rocprofv3, Nsight
Compute counters, NVML samples) and generated traces.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from click.testing import CliRunner

from corpus import corpus
from gpuscope import Diagnosis, diagnose, load
from gpuscope.cli import main
from gpuscope.diagnosis import saved
from gpuscope.render import json as json_renderer
from gpuscope.testing.generator import GeneratorConfig, HostSync, SlowDataLoader, generate

INPUTS = [
    "kineto/hta/trace_diff/test/test.json.gz",
    "kineto/param-dlrm-8rank",
    "nsys/nsys-ai/mfu_2gpu_before.sqlite",
    "rocprof/mi350x_train_rocprofv3.json.gz",
    "ncu/b200_cublaslt_fp8_gemm.ncu.csv.log",
    "metrics/superbench_nvml_8gpu.jsonl",
    "wild/a100_d2h_sync_cpu_loop.json.gz",
]


@cache
def _diagnosis(relative: str) -> Diagnosis:
    return diagnose(load(corpus(relative)))


def same(a: Any, b: Any, where: str = "diagnosis") -> None:
    """Field-by-field equality, with NaN equal to NaN and arrays compared by value and dtype."""
    if isinstance(a, msgspec.Struct):
        assert type(a) is type(b), where
        for name in a.__struct_fields__:
            same(getattr(a, name), getattr(b, name), f"{where}.{name}")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype, where
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), where
        for key in a:
            same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), where
    elif hasattr(a, "__dataclass_fields__"):
        assert type(a) is type(b), where
        for name in a.__dataclass_fields__:
            same(getattr(a, name), getattr(b, name), f"{where}.{name}")
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} != {b!r}"


def _round_trip(d: Diagnosis) -> Diagnosis:
    document = msgspec.json.decode(json_renderer.dumps(d))
    return saved.from_builtins(document[saved.SAVED_KEY])


@pytest.mark.parametrize("relative", INPUTS)
def test_a_saved_diagnosis_reads_back_equal(relative: str) -> None:
    d = _diagnosis(relative)
    same(d, _round_trip(d))


def test_the_saved_diagnosis_holds_no_trace() -> None:
    d = _diagnosis(INPUTS[1])
    assert d.drawn is not None and len(d.drawn.timeline.lanes) > len(d.devices)
    assert all(not hasattr(x, "work") for x in d.devices)
    # The per-step cause table is in the JSON document, not only in the HTML.
    document = msgspec.json.decode(json_renderer.dumps(d))
    table = document[saved.SAVED_KEY]["devices"][0]["series"]["step_causes"]
    assert len(table["compute_ns"]) == len(d.devices[0].steps) > 0


def test_report_of_the_saved_json_is_the_report_of_the_trace(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    generate(GeneratorConfig(steps=4, inject=(SlowDataLoader(), HostSync()))).write(trace)
    for i, source in enumerate([trace, corpus("kineto/param-dlrm-8rank")]):
        saved_json, from_trace, from_saved = (
            tmp_path / f"{i}{n}" for n in ("d.json", "a.html", "b.html")
        )
        runner = CliRunner()
        assert (
            runner.invoke(main, ["diagnose", str(source), "--json", str(saved_json)]).exit_code == 0
        )
        assert runner.invoke(main, ["report", str(source), "-o", str(from_trace)]).exit_code == 0
        assert (
            runner.invoke(main, ["report", str(saved_json), "-o", str(from_saved)]).exit_code == 0
        )
        assert from_trace.read_bytes() == from_saved.read_bytes()


def test_a_saved_diagnosis_is_never_sent_to_the_trace_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``report`` tells a saved diagnosis by its first bytes before any read-ahead: the trace
    reader, the read-ahead and the scanner see only the trace, which gets the read-ahead even
    when it comes second."""
    from gpuscope import readers
    from gpuscope._sniff import is_saved_diagnosis
    from gpuscope.readers import _early, _scan

    trace = tmp_path / "trace.json"
    generate(GeneratorConfig(steps=4, inject=(SlowDataLoader(),))).write(trace)
    saved_json = tmp_path / "saved.json"
    runner = CliRunner()
    assert runner.invoke(main, ["diagnose", str(trace), "--json", str(saved_json)]).exit_code == 0
    assert is_saved_diagnosis(saved_json) and not is_saved_diagnosis(trace)
    assert not is_saved_diagnosis(tmp_path) and not is_saved_diagnosis(tmp_path / "none")
    seen: list[tuple[str, Path]] = []
    for module, name in ((_early, "begin"), (_scan, "start"), (readers, "load")):
        real = getattr(module, name)

        def spy(path: Path, *args: Any, _real: Any = real, _name: str = name, **kw: Any) -> Any:
            seen.append((_name, Path(path)))
            return _real(path, *args, **kw)

        monkeypatch.setattr(module, name, spy)
    alone = runner.invoke(main, ["report", str(saved_json), "-o", str(tmp_path / "a.html")])
    assert alone.exit_code == 0, alone.output
    assert seen == []
    pair = runner.invoke(
        main, ["report", str(saved_json), str(trace), "-o", str(tmp_path / "b.html")]
    )
    assert pair.exit_code == 0, pair.output
    assert {path for _, path in seen} == {trace}
    assert [name for name, _ in seen][:2] == ["begin", "start"]  # read ahead, then loaded
    assert "load" in [name for name, _ in seen]


def test_diff_of_saved_runs_is_the_diff_of_the_traces(tmp_path: Path) -> None:
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    generate(GeneratorConfig(steps=6, inject=(SlowDataLoader(),))).write(before)
    generate(GeneratorConfig(steps=6, inject=(HostSync(),), seed=1)).write(after)
    runner = CliRunner()
    for trace in (before, after):
        out = trace.with_suffix(".saved.json")
        assert runner.invoke(main, ["diagnose", str(trace), "--json", str(out)]).exit_code == 0
    from_traces = runner.invoke(main, ["diff", str(before), str(after), "--json", "-"])
    saved_before, _ = (p.with_suffix(".saved.json") for p in (before, after))
    from_saved = runner.invoke(main, ["diff", str(saved_before), str(after), "--json", "-"])
    assert from_traces.exit_code == from_saved.exit_code == 0
    a, b = msgspec.json.decode(from_traces.stdout), msgspec.json.decode(from_saved.stdout)
    a.pop("before", None), b.pop("before", None)  # the names differ: trace vs saved file
    assert a == b


def test_a_json_document_without_the_saved_diagnosis_is_bad_input(tmp_path: Path) -> None:
    old = tmp_path / "old.json"
    old.write_text('{"schema": "gpuscope/diagnosis-1", "source": "x"}')
    result = CliRunner().invoke(main, ["report", str(old), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 2
    assert "without the saved diagnosis" in result.output and "Traceback" not in result.output


# --- idle causes are saved by name ---------------------------------------------------------------

DATA = Path(__file__).parent / "data"


def _cause_names(d: Diagnosis) -> dict[str, Any]:
    """The positional idle-cause columns of ``d`` as names (what a saved file must keep)."""
    from gpuscope.analyses.attribution import CAUSES

    assert d.drawn is not None
    return {
        "devices": [
            {
                "gaps": [CAUSES[c] for c in x.idle.gaps.cause.tolist()],
                "states": {c: sum(x.series.states_ns[i + 1]) for i, c in enumerate(CAUSES)},
            }
            for x in d.devices
        ],
        "idle_lanes": [
            {
                "category": [CAUSES[c] for c in lane.category.tolist()],
                "run_category": [CAUSES[c] for c in lane.run_category.tolist()],
            }
            for lane in d.drawn.timeline.lanes
            if lane.stream is None
        ],
    }


def test_a_diagnosis_saved_before_causes_had_names_reads_the_same() -> None:
    """``saved_v1_whole.json`` was written by gpuscope at f47e360 (``diagnose --whole --json``
    of a generated trace with six injected causes), when a gap's cause was its position in an
    enum; ``.expected.json`` holds those positions as names, as that code read them."""
    old = saved.read(DATA / "saved_v1_whole.json")
    expected = msgspec.json.decode((DATA / "saved_v1_whole.expected.json").read_bytes())
    names = _cause_names(old)
    expected_states = [{k: v for k, v in d["states"].items()} for d in expected["devices"]]
    assert [d["gaps"] for d in names["devices"]] == [d["gaps"] for d in expected["devices"]]
    assert [
        {k: v for k, v in d["states"].items() if k in e}
        for d, e in zip(names["devices"], expected_states, strict=True)
    ] == expected_states
    assert names["idle_lanes"] == expected["idle_lanes"]
    assert {"warmup", "data_loader", "h2d_copy"} <= set(names["devices"][0]["gaps"])
    # Everything else reads as it was written (fields added since take their defaults).
    document = msgspec.json.decode((DATA / "saved_v1_whole.json").read_bytes())[saved.SAVED_KEY]
    again = saved.to_builtins(old)
    for key in ("findings", "verdict", "inputs", "window", "all_fixes", "kernel_ns"):
        assert _as_written(again[key], document[key]) == document[key], key


def _as_written(value: Any, written: Any) -> Any:
    """``value`` without the dictionary keys ``written`` lacks (fields added since)."""
    if isinstance(value, dict) and isinstance(written, dict):
        return {k: _as_written(v, written[k]) for k, v in value.items() if k in written}
    if isinstance(value, list) and isinstance(written, list) and len(value) == len(written):
        return [_as_written(v, w) for v, w in zip(value, written, strict=True)]
    return value


def test_the_order_of_the_cause_table_does_not_change_a_saved_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A file saved with one order of idle causes reads the same under another (a row added
    anywhere in data/causes.csv moves the codes; the names saved with them map them back)."""
    from gpuscope.analyses import attribution

    d = saved.read(DATA / "saved_v1_whole.json")
    written = saved.to_builtins(d)
    assert written[saved.CAUSES_KEY] == list(attribution.CAUSES)
    before = _cause_names(d)
    shuffled = tuple(reversed(attribution.CAUSES))
    monkeypatch.setattr(attribution, "CAUSES", shuffled)
    monkeypatch.setattr(saved, "CAUSES", shuffled)
    again = saved.from_builtins(written)
    assert _cause_names(again) == before
    # The frozen order of files saved without names.
    assert saved.LEGACY_IDLE_CAUSES[:3] == ("host_sync", "data_loader", "h2d_copy")
    assert len(saved.LEGACY_IDLE_CAUSES) == 11 and saved.LEGACY_IDLE_CAUSES[9] == "warmup"


def test_a_memory_diagnosis_saved_before_a_category_existed_reads_and_renders(
    tmp_path: Path,
) -> None:
    """Memory categories are appended: a file saved with fewer lists the older ones in order,
    and reads back with the new ones at zero (the HTML and JSON renderers zip them strictly)."""
    from gpuscope.analyses.memory_sites import CATEGORIES

    d = diagnose(load(Path(__file__).parent / "data" / "h200" / "oom_snapshot.pickle.gz"))
    document = msgspec.json.decode(json_renderer.dumps(d))
    kept = CATEGORIES[:-1]
    for report in document[saved.SAVED_KEY]["memory"]:
        report["categories"] = {k: v for k, v in report["categories"].items() if k in kept}
        for point in report["timeline"]:
            del point[4][len(kept) :]  # array-like: [time, event, allocated, reserved, by_category]
    path = tmp_path / "old.json"
    path.write_bytes(msgspec.json.encode(document))
    old = saved.read(path)
    (m,) = old.memory
    assert m.categories[CATEGORIES[-1]] == 0
    assert all(len(p.by_category) == len(CATEGORIES) for p in m.timeline)
    result = CliRunner().invoke(main, ["report", str(path), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
