"""The HTML report: self-contained, escaped, small on large traces; the diff view; the command.

Reports are checked through what they embed: the page's HTML and the figure JSON in its
``gpuscope-figures`` script block. ``test_browser.py`` draws them in Chromium.
"""

from __future__ import annotations

import base64
import json
import re
from functools import cache
from html import escape
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import msgspec
import numpy as np
import plotly.graph_objects as go  # type: ignore[import-untyped]
import pytest
from click.testing import CliRunner

from corpus import corpus
from gpuscope import Diagnosis, diagnose, load
from gpuscope.analyses.attribution import CAUSES
from gpuscope.analyses.drawn import MAX_TIMELINE_BARS, UTILISATION_BUCKETS
from gpuscope.cli import main
from gpuscope.compare import diff
from gpuscope.diagnosis import DeviceReport
from gpuscope.facts import match_device
from gpuscope.render import html
from gpuscope.render.html.charts import roofs
from gpuscope.render.html.timeline import STREAM_LANES
from gpuscope.testing.generator import (
    GeneratedTrace,
    GeneratorConfig,
    HostSync,
    SlowDataLoader,
    TinyKernels,
    generate,
)
from gpuscope.units import duration

#: Names that would run script if a report put them into the page as HTML. Each sets a window
#: flag that the browser test asserts stays unset.
EVIL_KERNEL = (
    "</script><script>window.__gpuscope_xss = 1</script>"
    '<img src=x onerror="window.__gpuscope_xss = 2">'
)
EVIL_FILE = "evil<img src=x onerror=window.__gpuscope_xss=3></script>.py"
XSS_FLAG = "__gpuscope_xss"
LARGE = "kineto/hta/df_index_resolver/df_index_resolver.json.gz"
RANKS = "kineto/param-dlrm-8rank"
#: The corpus trace with the most timeline lanes: 567 queues of one MI350X, most with a kernel.
MANY_LANES = "rocprof/mi350x_train_rocprofv3.json.gz"
#: The longest module table (439 paths): the one that made a phone page 230,000 px tall.
LONG_TABLE = "kineto/tracelens/b200_vllm_moe_fp8_rank0of8.json.gz"


# --- helpers (test_browser.py uses them too) -----------------------------------------------------


def slow_loader_trace(steps: int = 5) -> GeneratedTrace:
    """A training loop that waits 15 ms per step for its data loader, syncs, launches tiny ops."""
    config = GeneratorConfig(steps=steps, inject=(SlowDataLoader(), HostSync(), TinyKernels()))
    return generate(config)


def hostile(trace: GeneratedTrace) -> GeneratedTrace:
    """The same trace with HTML/JS in its kernel names and in the user's Python file name."""
    events = []
    for original in trace.document["traceEvents"]:
        event = dict(original)
        name = event.get("name")
        if event.get("cat") == "kernel" and isinstance(name, str) and "gemm" in name:
            event["name"] = EVIL_KERNEL + name
        if event.get("cat") == "python_function" and isinstance(name, str):
            event["name"] = name.replace("train.py", EVIL_FILE)
        events.append(event)
    return GeneratedTrace({**trace.document, "traceEvents": events}, trace.truth)


def without_steps(trace: GeneratedTrace) -> GeneratedTrace:
    """The same trace with its ProfilerStep ranges renamed: a trace with no steps."""
    events = [
        {**e, "name": e["name"].replace("ProfilerStep#", "Iteration ")}
        if isinstance(e.get("name"), str)
        else e
        for e in trace.document["traceEvents"]
    ]
    return GeneratedTrace({**trace.document, "traceEvents": events}, trace.truth)


def report_of(trace: GeneratedTrace, path: Path) -> tuple[Diagnosis, str]:
    """Write ``trace`` to ``path``'s folder, diagnose it and render its report."""
    trace.write(path.with_suffix(".json"))
    diagnosis = diagnose(load(path.with_suffix(".json")))
    page = html.render(diagnosis)
    path.write_text(page, encoding="utf-8")
    return diagnosis, page


@cache
def corpus_diagnosis(relative: str) -> Diagnosis:
    return diagnose(load(corpus(relative)))


def figures(page: str) -> dict[str, dict[str, Any]]:
    """The figures a report embeds, by chart id."""
    return {f["id"]: f["figure"] for f in html.embedded_figures(page)}


def plotly_array(value: Any) -> list[Any]:
    """A figure's array as a list: plotly writes numpy arrays as ``{"dtype", "bdata"}``."""
    if isinstance(value, dict):
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"]).tolist()
    return list(value)


def timeline_bars(figure: dict[str, Any]) -> int:
    return sum(len(trace["hovertext"]) for trace in figure["data"])


# --- escaping ------------------------------------------------------------------------------------


def test_script_json_leaves_nothing_that_ends_a_script_and_parses_back() -> None:
    value = {"name": "</script><script>alert(1)</script> <!-- & \u2028 \u2029 >", "n": [1, 2.5]}
    text = html.script_json(json.dumps(value, ensure_ascii=False))
    assert not set(text) & {"<", ">", "&", "\u2028", "\u2029"}
    assert json.loads(text) == value


def test_plot_text_shows_tags_as_text_and_cuts_long_names() -> None:
    assert html.plot_text("<b>x</b> & y") == "&lt;b&gt;x&lt;/b&gt; &amp; y"
    assert html.plot_text("a" * 50, limit=10) == "a" * 9 + "…"


# --- one report ----------------------------------------------------------------------------------


def test_report_is_one_self_contained_file(tmp_path: Path) -> None:
    diagnosis, page = report_of(slow_loader_trace(), tmp_path / "report.html")
    # Three script blocks: the figure data, plotly.js (inlined once), the page's own script.
    assert page.count("<script") == 3 and page.count("</script>") == 3
    plotly_js = html.plotly_block()
    assert page.count(plotly_js) == 1
    own = page.replace(plotly_js, "")
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", own)
    assert '<link rel="stylesheet"' not in page
    charts = figures(page)
    assert set(charts) == {
        "chart-timeline",
        "chart-utilisation",
        "chart-steps",
        "chart-roofline",
        "chart-modules",
    }
    for chart_id, figure in charts.items():
        assert f'id="{chart_id}"' in page
        assert figure["data"], chart_id
    assert escape(diagnosis.verdict.summary) in page
    assert "the GPU waits for the data loader" in page  # the top finding's title
    assert "DataLoader(..., num_workers=N" in page  # its fix, as text


def test_timeline_shows_each_data_loader_wait_with_cause_and_location(tmp_path: Path) -> None:
    diagnosis, page = report_of(slow_loader_trace(), tmp_path / "report.html")
    timeline = figures(page)["chart-timeline"]
    waits = [
        t
        for t in timeline["data"]
        if t["meta"] == {"family": "idle", "category": "data_loader", "merged": False}
    ]
    gaps = diagnosis.devices[0].idle.gaps
    loader = int((gaps.cause == CAUSES.index("data_loader")).sum())
    # Five steps, five waits: the first, before the first kernel, is inside the first step.
    assert len(waits) == 1 and len(waits[0]["hovertext"]) == loader == 5
    assert all("train.py:48" in text and "data_loader" in text for text in waits[0]["hovertext"])


def test_every_step_adds_up_to_its_window(tmp_path: Path) -> None:
    diagnosis, _ = report_of(slow_loader_trace(), tmp_path / "report.html")
    device = diagnosis.devices[0]
    names, parts = html.step_parts(device)
    total = sum(parts.values())
    windows = np.array([s.dur_ns for s in device.steps], dtype=np.float64)
    assert names == [s.name for s in device.steps]
    np.testing.assert_allclose(total, windows)
    busy = parts["compute"] + parts["communication (exposed)"] + parts["memcpy / memset"]
    np.testing.assert_allclose(busy, [s.busy_ns for s in device.steps])


def test_hostile_names_are_escaped_everywhere(tmp_path: Path) -> None:
    _, page = report_of(hostile(slow_loader_trace(steps=3)), tmp_path / "report.html")
    assert page.count("<script") == 3 and page.count("</script>") == 3
    assert "<img" not in page and 'onerror="window' not in page
    assert "&lt;img src=x onerror=window.__gpuscope_xss=3&gt;" in page  # a location, as text
    assert "&lt;/script&gt;&lt;script&gt;window.__gpuscope_xss = 1" in page  # a kernel, as text
    texts = [t for f in figures(page).values() for tr in f["data"] for t in tr.get("hovertext", [])]
    assert any("&lt;img src=x onerror=" in t for t in texts)


def test_trace_without_steps_says_so(tmp_path: Path) -> None:
    # One iteration: no profiler step, no repeated range, no repeating kernel sequence.
    _, page = report_of(without_steps(slow_loader_trace(steps=1)), tmp_path / "report.html")
    assert "chart-steps" not in figures(page)
    assert "The trace has no profiler steps." in page


# --- large and multi-rank traces -----------------------------------------------------------------


def test_large_trace_report_is_small_and_keeps_every_long_idle_gap() -> None:
    diagnosis = corpus_diagnosis(LARGE)
    page = html.render(diagnosis)
    assert len(page.encode()) < 10_000_000
    timeline = figures(page)["chart-timeline"]
    assert timeline_bars(timeline) <= MAX_TIMELINE_BARS
    bucket_ns = timeline["layout"]["meta"]["bucket_ns"]
    single = [
        t for t in timeline["data"] if t["meta"]["family"] == "idle" and not t["meta"]["merged"]
    ]
    gaps = diagnosis.devices[0].idle.gaps
    long = (gaps.end_ns - gaps.start_ns) >= bucket_ns
    assert sum(len(t["hovertext"]) for t in single) == int(long.sum()) > 0
    for t in single:
        code = CAUSES.index(t["meta"]["category"])
        assert len(t["hovertext"]) == int((long & (gaps.cause == code)).sum())


def test_ranks_report_has_a_heatmap_row_per_rank() -> None:
    page = html.render(corpus_diagnosis(RANKS))
    heatmap = figures(page)["chart-heatmap"]["data"][0]
    assert heatmap["type"] == "heatmap"
    assert heatmap["y"] == [f"rank {r} · GPU {r}" for r in range(8)]
    assert all(row[0] is not None and 0 <= row[0] <= 100 for row in heatmap["z"])


def test_verdict_comes_first_and_inputs_beyond_three_fold_away() -> None:
    page = html.render(corpus_diagnosis(RANKS))
    verdict = page.index("id='verdict'")
    shown = re.search(r"<ul class='dim inputs'>(.*?)</ul>", page)
    assert shown is not None and verdict < shown.start()
    assert shown[1].count("<li>") == 3
    folded = re.search(
        r"<details class='inputs'><summary[^>]*>(.*?)</summary>(.*?)</details>", page
    )
    assert folded is not None and folded[1] == "and 5 more inputs"
    assert folded[2].count("<li>") == 5


def test_many_lanes_draw_as_the_busiest_plus_other_with_every_lane_listed() -> None:
    diagnosis = corpus_diagnosis(MANY_LANES)
    assert diagnosis.drawn is not None
    lanes = diagnosis.drawn.timeline.lanes
    assert len(lanes) == 567
    page = html.render(diagnosis)
    timeline = figures(page)["chart-timeline"]
    rows = timeline["layout"]["yaxis"]["ticktext"]
    # The idle lane, the 8 busiest queues, and one row holding the other 558.
    assert len(rows) == 1 + STREAM_LANES + 1
    assert rows[0] == "GPU 0 · idle" and rows[-1] == "GPU 0 · 558 other streams"
    busy = sorted(
        (int((x.end_ns - x.start_ns).sum() + x.run_busy_ns.sum()), f"GPU 0 · stream {x.stream}")
        for x in lanes
        if x.stream is not None
    )
    assert set(rows[1:-1]) == {label for _, label in busy[-STREAM_LANES:]}
    # Every bar is still drawn, each in its lane's row; the hover names the queue it ran on.
    bars = sum(x.start_ns.size + x.run_start_ns.size for x in lanes)
    assert timeline_bars(timeline) == bars
    other = len(rows) - 1
    quiet = {label for _, label in busy[:-STREAM_LANES]}
    in_other = [
        text
        for trace in timeline["data"]
        for y, text in zip(plotly_array(trace["y"]), trace["hovertext"], strict=True)
        if y == other
    ]
    assert len(in_other) == sum(
        x.start_ns.size + x.run_start_ns.size
        for x in lanes
        if f"GPU 0 · stream {x.stream}" in quiet
    )
    assert all(text.rsplit("<br>", 1)[-1] in quiet for text in in_other)
    # The full list, a click away: every lane, busiest first.
    listed = re.search(r"<details class='lanes'>.*?</details>", page, re.S)
    assert listed is not None and listed[0].count("<tr><td") == 567
    assert "All 567 lanes, busiest first" in listed[0]


def test_backticks_are_code_and_durations_read_in_their_unit(tmp_path: Path) -> None:
    diagnosis, _ = report_of(slow_loader_trace(), tmp_path / "report.html")
    top = diagnosis.findings[0]
    finding = msgspec.structs.replace(
        top, title="call `torch.cuda.synchronize` less", lost_ns=19_426_203_000_000
    )
    verdict = msgspec.structs.replace(diagnosis.verdict, summary="profile after `torch.compile`")
    page = html.render(msgspec.structs.replace(diagnosis, verdict=verdict, findings=[finding]))
    assert "profile after <code>torch.compile</code>" in page
    assert "call <code>torch.cuda.synchronize</code> less" in page
    assert "`" not in re.sub(r"<script.*?</script>", "", page, flags=re.S)
    assert "5.4 h lost" in page and "19,426,203" not in page


@pytest.mark.parametrize(
    ("ns", "shown"),
    [
        (19_426_203_000_000, "5.4 h"),
        (3_597_000_000_000, "1.0 h"),  # 59.95 min rounds to the hour
        (754_000_000_000, "12.6 min"),
        (59_990_000_000, "59.99 s"),
        (4_561_000_000, "4.56 s"),
        (999_999_000, "1.00 s"),
        (12_345_000, "12.35 ms"),
        (999_000, "999.0 µs"),
        (3_200, "3.2 µs"),
        (0, "0.00 ms"),
    ],
)
def test_duration_is_written_in_the_unit_that_reads(ns: int, shown: str) -> None:
    assert duration(ns) == shown


def test_utilisation_of_many_ranks_is_a_row_each_not_overlapping_lines(tmp_path: Path) -> None:
    diagnosis = corpus_diagnosis(RANKS)
    page = html.render(diagnosis)
    (rows,) = figures(page)["chart-utilisation"]["data"]
    assert rows["type"] == "heatmap" and rows["y"] == [f"rank {r} · GPU {r}" for r in range(8)]
    assert len(rows["x"]) == UTILISATION_BUCKETS
    # Each rank's row, over the buckets within its span, averages to its busy share.
    for device, z in zip(diagnosis.devices, rows["z"], strict=True):
        shares = [v for v in z if v is not None]
        busy_pct = 100 * device.temporal.busy_ns / device.temporal.span_ns
        assert sum(shares) / len(shares) == pytest.approx(busy_pct, abs=3)
    _, one = report_of(slow_loader_trace(steps=3), tmp_path / "one.html")
    single = figures(one)["chart-utilisation"]["data"]
    assert [t["type"] for t in single] == ["scatter"]  # one device: its line


# --- before / after ------------------------------------------------------------------------------


def test_diff_shows_the_data_loader_fix_as_better(tmp_path: Path) -> None:
    slow = slow_loader_trace(steps=6)
    fixed = generate(GeneratorConfig(steps=6, inject=(HostSync(), TinyKernels())))
    slow.write(tmp_path / "before.json")
    fixed.write(tmp_path / "after.json")
    before, after = (diagnose(load(tmp_path / f"{n}.json")) for n in ("before", "after"))
    change = diff.diff(diff.summarize(before), diff.summarize(after))
    page = html.render_diff(before, after, change=change)
    charts = figures(page)
    assert {"diff-chart-steps", "diff-chart-causes", "before-chart-timeline"} <= set(charts)
    assert "after-chart-timeline" in charts
    row = re.search(r"<tr><td>lost per step: data_loader</td>(.*?)</tr>", page)
    assert row is not None and ">better<" in row.group(1)
    # A healthy loader still costs a little: the finding stays, smaller.
    assert re.search(r"<b>still there</b>: [^<]*data_loader", page)
    # Durations in the unit that reads: the step time's medians and each changed kernel's time.
    step = change.metric(diff.STEP_TIME)
    assert step is not None and step.comparison.before_median is not None
    assert f"<td class='num'>{duration(step.comparison.before_median)}</td>" in page
    for k in change.kernels:
        assert f"<td class='num'>{duration(k.before_ns)}</td>" in page


@pytest.mark.parametrize(
    ("gpu", "sixteen_bit"),
    [
        ("Tesla V100-SXM2-16GB", "FP16 tensor"),
        ("Tesla T4", "FP16 tensor"),
        ("NVIDIA A100-SXM4-80GB", "BF16 tensor"),
    ],
)
def test_roofline_names_the_precision_each_peak_is_of(gpu: str, sixteen_bit: str) -> None:
    """V100 and T4 have no BF16: their 16-bit peak is FP16's, and the roof says so."""
    facts = match_device(gpu)
    assert facts is not None and facts.bf16_flops_per_s
    figure = go.Figure()
    roofs(figure, cast(DeviceReport, SimpleNamespace(facts=facts)), 1.0, 100.0)
    drawn = [trace.name for trace in figure.data]
    assert f"{sixteen_bit} roof" in drawn
    assert ("BF16 tensor roof" in drawn) == (sixteen_bit == "BF16 tensor")


# --- the command ---------------------------------------------------------------------------------


def test_report_command_writes_the_file(tmp_path: Path) -> None:
    slow_loader_trace(steps=3).write(tmp_path / "trace.json.gz")
    out = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(tmp_path / "trace.json.gz"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "chart-timeline" in figures(out.read_text(encoding="utf-8"))


def test_report_command_rejects_bad_input_in_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    runner = CliRunner()
    result = runner.invoke(main, ["report", str(bad), "-o", str(tmp_path / "r.html")])
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0 and str(bad) in result.output
    three = runner.invoke(main, ["report", str(bad), str(bad), str(bad)])
    assert three.exit_code == 2 and "BEFORE AFTER" in three.output


@pytest.mark.parametrize("columns", [120, 60])
def test_terminal_idle_timeline_has_one_line_per_device(columns: int) -> None:
    from gpuscope.render.terminal import idle_timeline

    diagnosis = corpus_diagnosis(RANKS)
    text = idle_timeline(diagnosis.devices, columns).plain
    lines = [line for line in text.splitlines() if "│" in line]
    assert len(lines) == 8
    drawn = {len(line.split("│")[1]) for line in lines}
    assert len(drawn) == 1 and drawn.pop() <= 60
    assert "L launch_overhead" in text and "█ busy" in text
