"""Invariants every diagnosis keeps, on every corpus file and every case of the labelled suite.

A verdict must never contradict its own evidence (issue #15): the bound is the largest share it
reports; a device busy at least 80% of its window is never host-bound; every number the headline
states is a figure of the JSON; no NaN or infinity reaches JSON, terminal or HTML; the shares of one
whole add up; a finding's dollars are its fix's predicted saving, the headline's the saving of all
fixes replayed together, and no replay saves more than its edits remove.
"""

from __future__ import annotations

import io
import json
import math
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from corpus import corpus_root
from gpuscope import diagnose, load
from gpuscope.analyses.attribution import CAUSES
from gpuscope.diagnosis import Diagnosis
from gpuscope.diagnosis.findings import BOUND_WORDS, BUSY_NOT_HOST_PCT, INPUT_BOUND_PCT
from gpuscope.errors import InputError
from gpuscope.render import json as json_renderer
from gpuscope.render import terminal
from gpuscope.testing import generator as g
from gpuscope.testing.groundtruth import labelled_suite
from test_saved import _round_trip as round_trip
from test_saved import same


def _corpus_inputs() -> list[str]:
    root = corpus_root()
    if not root.exists():
        return ["<corpus missing>"]
    found = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and "LICENSES" not in p.parts and p.suffix != ".md"
    )
    return [*found, "kineto/param-dlrm-8rank"]  # and one multi-rank job, as a folder


@pytest.fixture(scope="module")
def generated() -> Iterator[dict[str, Path]]:
    with tempfile.TemporaryDirectory() as tmp:
        yield {
            c.name: g.generate(c.config).write(Path(tmp) / f"{c.name}.json.gz")
            for c in labelled_suite()
        }


@pytest.mark.parametrize("relative", _corpus_inputs())
def test_corpus_diagnosis_keeps_the_invariants(relative: str) -> None:
    from corpus import corpus

    path = corpus(relative.replace("<corpus missing>", "."))
    try:
        d = diagnose(load(path))
    except InputError as exc:
        # Not a profile gpuscope reads (no GPU activity, a memory timeline...): refused with a
        # reason naming the file, never a verdict made up from nothing.
        assert path.name in str(exc), exc
        return
    check_invariants(d)
    # Issue #17: every corpus diagnosis is a value that a saved JSON document gives back equal.
    same(d, round_trip(d))


@pytest.mark.parametrize("case", [c.name for c in labelled_suite()])
def test_generated_diagnosis_keeps_the_invariants(case: str, generated: dict[str, Path]) -> None:
    check_invariants(diagnose(load(generated[case])))


def check_invariants(d: Diagnosis) -> None:
    v = d.verdict
    finite_shares = {k: x for k, x in v.shares_pct.items() if math.isfinite(x)}
    timeline = d.based_on.startswith("timeline") and d.devices
    if timeline or d.based_on == "ncu":
        # Shares of one whole add up, and the bound is the largest (of the busy shares when the
        # device is busy most of the time; waiting for the input pipeline is host time unless it
        # makes the job input-bound first).
        assert sum(finite_shares.values()) == pytest.approx(100.0, abs=0.01), v.shares_pct
        candidates = dict(finite_shares)
        waiting_input = candidates.pop("input", 0.0)
        if waiting_input >= INPUT_BOUND_PCT:
            assert v.bound == "input", v.summary
        else:
            if "host" in candidates:
                candidates["host"] += waiting_input
            if timeline and v.figures["busy_pct"] >= BUSY_NOT_HOST_PCT:
                candidates.pop("host")
            assert candidates[v.bound] == pytest.approx(max(candidates.values())), (v.bound, v)
        if timeline:
            assert v.bound in BOUND_WORDS, v.bound  # one documented set of words
    if timeline:
        if 100.0 - v.idle_pct >= BUSY_NOT_HOST_PCT:
            # Busy most of the time: never host-bound; copies that fill it say so.
            assert v.bound != "host", v.summary
        # The verdict's sentence names its bound (a start-up window may preface it).
        assert f"{v.bound}-bound: " in v.summary, v.summary
        idle = sum(dev.temporal.idle_ns for dev in d.devices)
        span = sum(dev.temporal.span_ns for dev in d.devices)
        assert v.idle_pct == pytest.approx(100.0 * idle / span)
    _numbers_are_figures(d)
    _dollars_are_savings(d)
    _no_nan_anywhere(d)


def _numbers_are_figures(d: Diagnosis) -> None:
    """Every percentage and dollar figure of the headline is a JSON figure, as rounded there."""
    doc = json.loads(json_renderer.dumps(d))
    verdict = doc["verdict"]
    figures: list[float] = [verdict["idle_pct"] or 0.0]
    figures += [x for x in verdict["shares_pct"].values() if x is not None]
    figures += [x for x in verdict["figures"].values() if x is not None]
    # The largest finding it names (a start-up window puts what it left out first).
    figures += [f["share_pct"] for f in doc["findings"][:2] if f["share_pct"] is not None]
    # The verdict's own sentence: a start-up preface states the window's figures (docs/phases.md).
    sentence = d.verdict.summary[d.verdict.summary.find(f"{d.verdict.bound}-bound") :]
    for text in re.findall(r"(\d[\d,]*(?:\.\d+)?)%", sentence):
        value = float(text.replace(",", ""))
        decimals = len(text.split(".")[1]) if "." in text else 0
        assert any(round(f, decimals) == value for f in figures), (text, sentence)
    for text in re.findall(r"\$(\d[\d,]*\.\d\d) per GPU-hour", d.verdict.summary):
        # The unrounded figure: the JSON's three decimals rounded again to two can differ.
        wasted = d.verdict.wasted_usd_per_gpu_hour
        assert wasted is not None and f"{wasted:,.2f}" == text


def _dollars_are_savings(d: Diagnosis) -> None:
    """Money follows predictions (diagnosis.predict): a finding's dollars are never more than its
    fix's predicted saving, priced, and a finding with no prediction has none; the headline's
    dollars are the all-fixes replay's saving, priced, never the findings' dollars added up; no
    replay predicts more than its edits take out of the graph; the compute-side savings are less
    than the work they name."""
    price = d.verdict.gpu_hour_usd
    predictions = [f.prediction for f in d.findings if f.prediction is not None]
    for p in [*predictions, *([d.all_fixes] if d.all_fixes else [])]:
        # A saving larger than the time the edits remove is a replay error (the alexnet case).
        assert p.removed_ns is not None and p.saving_ns <= p.removed_ns + 1_000, p
        assert p.predicted_step_ns >= 0, p
    if price is not None and d.based_on.startswith("timeline"):
        for f in d.findings:
            if f.prediction is None:
                if f.cause in CAUSES:
                    assert f.cost_usd_per_gpu_hour is None, f  # idle time, not a saving
                elif f.cost_usd_per_gpu_hour is not None:  # busy time: its own estimate
                    assert f.cost_usd_per_gpu_hour <= f.share_pct / 100.0 * price + 1e-9, f
                continue
            saving = max(f.prediction.saving_ns_per_step, 0.0) / f.prediction.step_ns * price
            assert f.cost_usd_per_gpu_hour is not None, f
            assert f.cost_usd_per_gpu_hour <= saving + 1e-9, f
            if f.cost_usd_per_gpu_hour == 0.0:
                assert f.prediction.note, f  # a fix that saves nothing says why
        wasted = d.verdict.wasted_usd_per_gpu_hour
        if d.all_fixes is None:
            # Nothing replayed: nothing to fix ($0), or a saving not known (None); never a sum.
            assert wasted in (None, 0.0), wasted
        else:
            a = d.all_fixes
            assert (
                wasted is not None
                and wasted <= max(a.saving_ns_per_step, 0.0) / a.step_ns * (price) + 1e-9
            )
        # The JSON's headline dollars are the all-fixes figure, and the sum over findings is not
        # shown as a saving (unless it happens to be that figure).
        doc = json.loads(json_renderer.dumps(d))
        assert doc["verdict"]["wasted_usd_per_gpu_hour"] == (
            None if wasted is None else pytest.approx(wasted, abs=1e-4)
        )
        costs = [f.cost_usd_per_gpu_hour or 0.0 for f in d.findings]
        summed = f"${sum(costs):,.2f}"
        if len([c for c in costs if c]) > 1 and wasted is not None and f"${wasted:,.2f}" != summed:
            assert summed not in d.verdict.summary, d.verdict.summary
    by_cause = {f.cause: f for f in d.findings}
    if "fp32_gemm" in by_cause:
        assert by_cause["fp32_gemm"].lost_ns < sum(dev.bounds.fp32_gemm_ns for dev in d.devices)
    for f in d.findings:
        if f.cost_usd_per_day is not None:
            assert max(i.steps for i in d.inputs) >= 3, f  # no per-day figure from one step


_NOT_A_NUMBER = re.compile(r"\b(nan|inf|infinity)\b", re.IGNORECASE)


def _no_nan_anywhere(d: Diagnosis) -> None:
    text = json_renderer.dumps(d)

    def refuse(constant: str) -> Any:
        raise AssertionError(f"{constant} in the JSON")

    json.loads(text, parse_constant=refuse)
    out = io.StringIO()
    terminal.render(d, Console(file=out, width=120, color_system=None), all_devices=True)
    shown = out.getvalue()
    assert not _NOT_A_NUMBER.search(shown), _NOT_A_NUMBER.search(shown)


@pytest.mark.parametrize(
    "relative",
    ["ncu/b200_cublaslt_fp8_gemm.ncu.csv.log", "metrics/superbench_nvml_8gpu.jsonl"],
)
def test_report_of_measurements_shows_no_nan(relative: str, tmp_path: Path) -> None:
    from corpus import corpus
    from gpuscope.render import html

    d = diagnose(load(corpus(relative)))
    page = html.render(d)
    visible = re.sub(r"<script.*?</script>", "", page, flags=re.DOTALL)
    assert "nan%" not in visible.lower()
    assert not re.search(r"\bNaN\b", visible)
