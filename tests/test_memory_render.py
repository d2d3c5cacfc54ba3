"""The memory diagnosis in every output: terminal, JSON and the HTML report's charts."""

from __future__ import annotations

import json

from click.testing import CliRunner

from corpus import corpus
from gpuscope.cli import main
from gpuscope.diagnosis import diagnose
from gpuscope.readers import load
from gpuscope.render.html import render as render_html
from gpuscope.render.html.page import embedded_figures
from gpuscope.render.json import to_document

SNAPSHOT = "memory/cs336_step_cached_free.pickle"


def test_the_json_document_holds_the_memory_report() -> None:
    document = json.loads(json.dumps(to_document(diagnose(load(corpus(SNAPSHOT))))))
    (memory,) = document["memory"]
    assert memory["sites"][0]["location"] == "model.py:39"
    assert memory["sites"][0]["category"] == "activations"
    assert set(memory["timeline"][0]["by_category"]) >= {"activations", "parameters"}
    assert document["verdict"]["bound"] == "memory_capacity"
    finding = document["findings"][0]
    assert finding["cause"] == "activation_peak" and finding["memory_bytes"] > 11 * 2**30
    assert finding["predicted_peak_bytes"] < memory["peak_allocated_bytes"]


def test_the_report_draws_the_timeline_by_category_the_sites_and_the_reserved_memory() -> None:
    page = render_html(diagnose(load(corpus(SNAPSHOT))))
    figures = {f["id"]: f["figure"] for f in embedded_figures(page)}
    timeline = figures["memory-0-timeline"]["data"]
    names = [trace["name"] for trace in timeline]
    assert "activations" in names and names[-1] == "reserved"
    assert all(trace.get("stackgroup") == "allocated" for trace in timeline[:-1])
    sites = figures["memory-0-sites"]["data"][0]
    assert sites["y"][-1] == "model.py:39"  # the largest, drawn on top
    reserved = figures["memory-0-fragmentation"]["data"]
    assert [trace["name"] for trace in reserved] == ["allocated", "cached (harmless)", "fragmented"]
    assert "GiB (85% of the memory peak)" in page


def test_a_trace_with_memory_events_has_the_memory_charts_after_the_time_charts() -> None:
    page = render_html(
        diagnose(load(corpus("kineto/tracelens/h100_timesformer_hf_pipeline.json.gz")))
    )
    ids = [f["id"] for f in embedded_figures(page)]
    assert "chart-timeline" in ids or any(i.startswith("chart-") for i in ids)
    assert "memory-0-timeline" in ids and ids.index("memory-0-timeline") > 0


def test_the_terminal_says_who_holds_the_peak() -> None:
    result = CliRunner().invoke(main, ["diagnose", str(corpus(SNAPSHOT))])
    assert result.exit_code == 0, result.output
    assert "Who holds the peak" in result.output
    assert "activation_peak" in result.output and "peak after the fix" in result.output
    assert "cached" in result.output and "harmless" in result.output


def test_the_agent_answers_memory_questions() -> None:
    from gpuscope.commands._agent import Session

    session = Session()
    answer = session.memory(str(corpus("memory/oom_flexgen_opt6.7b_weights.pickle")), sites=2)
    (report,) = answer["memory"]
    assert report["oom"]["verdict"] == "weights"
    assert "timeline" not in report and len(report["sites"]) <= 2
    assert answer["findings"][0]["cause"] == "weights_exceed_memory"
    assert answer["note"] is None
    trace = corpus("kineto/tracelens/mi300x_vllm_prefilldecode_piecewise_graphs.json.gz")
    empty = session.memory(str(trace))
    assert empty["memory"] == [] and "profile_memory" in empty["note"]
