"""What-if replay: the dependency graph reproduces the trace, and each fix's predicted step time
matches the generator's run with that fix applied (same seed)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from msgspec.structs import replace

from corpus import corpus
from gpuscope.analyses.whatif import ASSUMPTIONS, Edit, build_graph, replay, step_times
from gpuscope.cli import main
from gpuscope.diagnosis import Diagnosis, Options, diagnose
from gpuscope.diagnosis.findings import Finding
from gpuscope.readers import load
from gpuscope.testing import generator as gen

_SMALL = gen.GeneratorConfig(layers=2, steps=3)


def _write(cfg: gen.GeneratorConfig, folder: Path, name: str, world: int = 1) -> Path:
    if world == 1:
        return gen.generate(cfg).write(folder / f"{name}.json")
    target = folder / name
    target.mkdir()
    for rank, trace in enumerate(gen.generate_job(cfg, world_size=world)):
        trace.write(target / f"rank{rank}.json")
    return target


def _measured_step_ns(path: Path) -> float:
    """The median step, as predictions measure it (the first step's device time starts at its
    first work, so it is not like the others)."""
    graphs = [build_graph(t) for t in load(path).traces]
    return float(np.median([np.median(step_times(g, g.start, g.end)) for g in graphs]))


def test_replay_without_edits_reproduces_the_trace(tmp_path: Path) -> None:
    cfg = replace(_SMALL, inject=(gen.HostSync(), gen.PageableH2DCopy(mb=32.0)))
    trace = load(_write(cfg, tmp_path, "t")).traces[0]
    g = build_graph(trace)
    start, end, settled = replay(g, Edit.none(g))
    assert settled
    assert np.abs(start - g.start).max() <= 2_000
    assert np.abs(end - g.end).max() <= 2_000
    # Host syncs wait for the device: the graph has an edge into each.
    assert g.wait_src.size >= cfg.steps


@pytest.mark.parametrize(
    ("cause", "inject", "world"),
    [
        ("host_sync", (gen.HostSync(),), 1),
        ("data_loader", (gen.SlowDataLoader(ms=25.0),), 1),
        ("h2d_copy", (gen.PageableH2DCopy(mb=64.0),), 1),
        ("launch_overhead", (gen.TinyKernels(count=200), gen.HostSync()), 1),
        ("allocator", (gen.AllocatorChurn(),), 1),
        ("fp32_gemm", (gen.Fp32Gemm(),), 1),
        ("exposed_communication", (gen.ExposedCollective(ms=8.0),), 1),
        ("straggler", (gen.Straggler(rank=1, extra_ms=4.0),), 2),
    ],
)
def test_prediction_matches_the_fixed_run(
    tmp_path: Path, cause: str, inject: tuple[gen.Injection, ...], world: int
) -> None:
    cfg = replace(_SMALL, inject=inject)
    result = diagnose(load(_write(cfg, tmp_path, "before", world)))
    finding = next(f for f in result.findings if f.cause == cause)
    p = finding.prediction
    assert p is not None
    assert p.assumption == ASSUMPTIONS[cause]
    assert finding.predicted_saving_ns_per_step == p.saving_ns_per_step
    assert p.saving_low_ns_per_step <= p.saving_ns_per_step <= p.saving_high_ns_per_step
    truth = _measured_step_ns(_write(gen.apply_fix(cfg, cause), tmp_path, "after", world))
    assert p.predicted_step_ns == pytest.approx(truth, rel=0.10)
    # The fix saves something real here, and the dollars are the saving priced.
    assert p.saving_ns_per_step > 0.02 * p.step_ns
    assert result.verdict.gpu_hour_usd is not None
    priced = p.saving_ns_per_step / p.step_ns * result.verdict.gpu_hour_usd
    assert finding.cost_usd_per_gpu_hour == pytest.approx(priced)


def test_all_fixes_are_replayed_together_not_summed(tmp_path: Path) -> None:
    inject = (gen.HostSync(), gen.SlowDataLoader(ms=20.0), gen.PageableH2DCopy(mb=64.0))
    cfg = replace(_SMALL, inject=inject)
    result = diagnose(load(_write(cfg, tmp_path, "t")))
    together = result.all_fixes
    assert together is not None and together.cause == "all"
    each = [f.prediction for f in result.findings if f.prediction is not None]
    assert len(each) >= 2
    # Fixes overlap: together saves more than any one, less than their sum.
    assert together.saving_ns_per_step >= max(p.saving_ns_per_step for p in each)
    assert together.saving_ns_per_step < sum(p.saving_ns_per_step for p in each)
    assert together.predicted_step_ns > 0


def test_the_headline_prices_all_fixes_together_never_the_sum(tmp_path: Path) -> None:
    inject = (gen.HostSync(), gen.SlowDataLoader(ms=20.0), gen.PageableH2DCopy(mb=64.0))
    result = diagnose(load(_write(replace(_SMALL, inject=inject), tmp_path, "t")))
    v, together = result.verdict, result.all_fixes
    assert together is not None and v.gpu_hour_usd is not None
    expected = together.saving_ns_per_step / together.step_ns * v.gpu_hour_usd
    assert v.wasted_usd_per_gpu_hour == pytest.approx(expected)
    summed = sum(f.cost_usd_per_gpu_hour or 0.0 for f in result.findings)
    assert summed > v.wasted_usd_per_gpu_hour + 0.01  # the fixes overlap
    assert f"fixing it all would save about ${expected:.2f} per GPU-hour" in v.summary
    assert f"${summed:.2f}" not in v.summary


def test_a_fix_predicted_to_save_nothing_is_not_shown_as_a_cost() -> None:
    """DLRM 8-rank: the ranks' pageable host-to-device copies are 2.4% of device time, but each
    step waits for the host's launches (43% launch gaps) and for the late rank, not for them:
    the copy fix moves no step's end. Its share stays time; its dollars are $0, with the why."""
    from rich.console import Console

    from gpuscope.render import terminal

    result = diagnose(load(corpus("kineto/param-dlrm-8rank")))
    copies = next(f for f in result.findings if f.cause == "h2d_copy")
    assert copies.share_pct > 1 and copies.prediction is not None
    assert copies.prediction.saving_ns_per_step < 0.005 * copies.prediction.step_ns
    assert copies.cost_usd_per_gpu_hour == 0.0  # not its share of the price
    assert copies.prediction.note and "critical path" in copies.prediction.note
    out = io.StringIO()
    terminal.render(result, Console(file=out, width=200, color_system=None))
    shown = out.getvalue()
    assert "costliest" not in shown
    line = next(x for x in shown.splitlines() if x.startswith(f"{_rank(result, copies)}. h2d_copy"))
    assert "predicted to save no step time ($0.00)" in line and "/GPU-hour" not in line


def _rank(result: Diagnosis, f: Finding) -> int:
    return result.findings.index(f) + 1


def test_start_up_is_left_out_of_every_edit() -> None:
    """HTA's alexnet: 30 s of context creation (6.5 s of cudaFree, cudaStreamCreate...) before
    the first kernel, then a 12.8 s pass the benchmark itself names
    ``[param|pytorch.model.alex_net|0|0|0|warmup|forward]`` (cuDNN's first convolutions), then an
    80 ms measured pass. The allocator calls are all inside that start-up: no fix is priced from
    them, and start-up is never predicted or priced."""
    result = diagnose(load(corpus("kineto/hta/critical_path/alexnet")))
    assert "allocator" not in [f.cause for f in result.findings]
    for f in result.findings:
        if f.cause == "warmup":
            assert f.prediction is None and f.cost_usd_per_day is None


def test_predictions_can_be_turned_off(tmp_path: Path) -> None:
    path = _write(replace(_SMALL, inject=(gen.HostSync(),)), tmp_path, "t")
    result = diagnose(load(path), Options(predict=False))
    assert result.all_fixes is None
    assert all(f.prediction is None for f in result.findings)
    # No replay, no saving: the headline states no dollars (the findings' sum is none).
    assert result.verdict.wasted_usd_per_gpu_hour is None
    assert "would save" not in result.verdict.summary
    out = tmp_path / "d.json"
    run = CliRunner().invoke(main, ["diagnose", str(path), "--no-predict", "--json", str(out)])
    assert run.exit_code == 0, run.output
    doc = json.loads(out.read_text())
    assert doc["all_fixes"] is None
    assert all(f["prediction"] is None for f in doc["findings"])


def test_terminal_says_what_the_fix_is_worth(tmp_path: Path) -> None:
    path = _write(
        replace(_SMALL, inject=(gen.HostSync(), gen.SlowDataLoader(ms=20.0))), tmp_path, "t"
    )
    run = CliRunner().invoke(main, ["diagnose", str(path)])
    assert run.exit_code == 0, run.output
    text = " ".join(run.output.split())
    assert "if you fix it: step" in text and "faster" in text and "per GPU-day" in text
    assert "All fixes together: step" in text


def test_a_saving_the_diagnosis_calls_none_is_no_dollars_in_any_renderer() -> None:
    """Dollars follow from the diagnosis' price of a prediction (diagnosis.money), never from a
    renderer's own formula: a replay that saves under NO_SAVING_PCT of the step is $0.00 in the
    finding's figures and in its "if you fix it" line alike (the line said $0.09 per GPU-day
    beside "predicted to save no step time ($0.00)")."""
    from gpuscope.analyses.whatif import Prediction
    from gpuscope.render import markdown, predicted

    tiny = Prediction("launch_overhead", "graphs", 95.66e6, 95.57e6, 0.09e6, 0.0, 2e6, 450_000, 5)
    assert predicted.headline(tiny, 0.0).endswith(
        "(0% faster; 0 to 2% over 5 steps), $0.00 per GPU-day"
    )
    assert predicted.headline(tiny, 0.5).endswith(", $12.00 per GPU-day")
    assert predicted.headline(tiny, None).endswith("over 5 steps)")
    window = replace(tiny, unit="window")
    assert "per GPU-day" not in predicted.headline(window, 0.5)
    found = Finding(
        pattern="ghost_gpu",
        cause="launch_overhead",
        title="the CPU cannot launch kernels fast enough",
        lost_ns=7_440_000,
        lost_ns_per_step=1_490_000.0,
        share_pct=1.5,
        events=6_094,
        cost_usd_per_gpu_hour=0.0,
        cost_usd_per_day=0.0,
        locations=[],
        evidence=[],
        fix="capture the step in a CUDA graph",
        prediction=tiny,
    )
    lines = markdown._finding(1, found)
    assert "predicted to save no step time ($0.00)" in lines[2]
    assert any(line.endswith("$0.00 per GPU-day") for line in lines)


def test_dlrm_straggler_saving_is_its_lateness_not_the_waiting() -> None:
    """Rank 7 arrives last, but ranks 2 and 6 within 0.5 ms: had it arrived with the next-slowest
    rank, the others would wait about 9.2 ms less in all (by hand), not 35 ms."""
    result = diagnose(load(corpus("kineto/param-dlrm-8rank")))
    straggler = next(f for f in result.findings if f.cause == "straggler")
    p = straggler.prediction
    assert p is not None
    assert straggler.lost_ns > 30e6  # what the waiting costs in all
    assert 0 < p.saving_ns <= 9.2e6 * 1.2
    # Less than the lateness shortens the steps: the JSON says why.
    assert p.note is not None and "9.1" in p.note


@pytest.mark.parametrize(
    "inject",
    [
        (gen.HostSync(), gen.TinyKernels(count=50)),
        (gen.PageableH2DCopy(mb=16.0), gen.ExposedCollective(), gen.AllocatorChurn()),
    ],
)
def test_one_pass_solver_and_numpy_fixpoint_agree(
    tmp_path: Path, inject: tuple[gen.Injection, ...]
) -> None:
    """The C solver (when built) and its numpy twin give the same schedule, edited or not."""
    from gpuscope.analyses.whatif import schedule

    if schedule._replay is None:
        pytest.skip("the replay extension is not built here")
    trace = load(_write(replace(_SMALL, inject=inject), tmp_path, "t")).traces[0]
    g = build_graph(trace)
    edit = Edit.none(g)
    edit.dur[~g.host] //= 2  # an edit that moves everything
    edit.gap[g.host] //= 3
    for e in (Edit.none(g), edit):
        fast = replay(g, e)
        twin = replay(g, e, python=True)
        assert fast[2] and twin[2]
        assert np.array_equal(fast[0], twin[0]) and np.array_equal(fast[1], twin[1])


def test_the_solvers_chain_sweep_and_kahn_pass_agree_on_a_real_graph() -> None:
    """The C solver sweeps chains of consecutive nodes and runs Kahn's algorithm on any other
    numbering: the same graph with its nodes shuffled (so Kahn's runs) has the same schedule,
    and both agree with the numpy twin; a cycle is refused by both."""
    from gpuscope.analyses.whatif import schedule

    if schedule._replay is None:
        pytest.skip("the replay extension is not built here")
    alexnet = "kineto/hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"
    g = build_graph(load(corpus(alexnet)).traces[0])
    n = g.start.size
    prev = np.arange(n, dtype=np.int64) - 1
    prev[g.first] = -1
    ls, ld, lw = (np.concatenate([g.launch_src, g.wake_src]),
                  np.concatenate([g.launch_dst, g.wake_dst]),
                  np.concatenate([g.launch_delay, g.wake_delay]))  # fmt: skip
    edges = (ls, ld, lw, g.event_src, g.event_dst, g.wait_src, g.wait_dst, g.wait_tail)
    twin = replay(g, Edit.none(g), python=True)
    s, e = np.empty(n, np.int64), np.empty(n, np.int64)
    assert schedule._replay.solve(prev, g.gap, g.dur, g.fixed, *edges, s, e)
    assert np.array_equal(s, twin[0]) and np.array_equal(e, twin[1])
    new = np.random.default_rng(0).permutation(n)  # node v is numbered new[v]
    moved = [new[x] for x in (ls, ld)] + [lw]
    moved += [new[g.event_src], new[g.event_dst], new[g.wait_src], new[g.wait_dst], g.wait_tail]
    shuffled_prev = np.full(n, -1, dtype=np.int64)
    shuffled_prev[new] = np.where(prev >= 0, new[np.maximum(prev, 0)], -1)
    columns = []
    for column in (g.gap, g.dur, g.fixed):
        shuffled = np.empty(n, np.int64)
        shuffled[new] = column
        columns.append(shuffled)
    s2, e2 = np.empty(n, np.int64), np.empty(n, np.int64)
    assert schedule._replay.solve(shuffled_prev, *columns, *moved, s2, e2)
    assert np.array_equal(s2[new], s) and np.array_equal(e2[new], e)
    # A launch edge back to the call that launched: a cycle, refused either way.
    back = (np.append(ls, ld[0]), np.append(ld, ls[0]), np.append(lw, 0), *edges[3:])
    assert not schedule._replay.solve(prev, g.gap, g.dur, g.fixed, *back, s, e)
    cycle = (new[back[0]], new[back[1]], back[2], *moved[3:])
    assert not schedule._replay.solve(shuffled_prev, *columns, *cycle, s2, e2)


def test_diff_checks_the_prediction_against_the_fixed_run(tmp_path: Path) -> None:
    cfg = replace(_SMALL, steps=5, inject=(gen.HostSync(),))
    before = _write(cfg, tmp_path, "before")
    after = _write(gen.apply_fix(cfg, "host_sync"), tmp_path, "after")
    out = tmp_path / "diff.json"
    run = CliRunner().invoke(main, ["diff", str(before), str(after), "--json", str(out)])
    assert run.exit_code == 0, run.output
    checks = {c["cause"]: c for c in json.loads(out.read_text())["predictions"]}
    assert abs(checks["host_sync"]["error_pct"]) < 10
    assert "predicted on before, fixing host_sync" in " ".join(run.output.split())
    # The HTML before/after report shows the same check, in the same words and figures.
    from gpuscope.compare.diff import diff, summarize
    from gpuscope.render import html

    b, a = diagnose(load(before)), diagnose(load(after))
    page = html.render_diff(b, a, change=diff(summarize(b), summarize(a)))
    section = re.search(r"<section id='prediction-check'>(.*?)</section>", page, re.DOTALL)
    assert section is not None
    c = checks["host_sync"]
    shown = (
        f"fixing host_sync: step {c['before_step_ns'] / 1e6:,.2f} -&gt;"
        f" {c['predicted_step_ns'] / 1e6:,.2f} ms; measured after:"
        f" {c['after_step_ns'] / 1e6:,.2f} ms, the median of every step ({c['error_pct']:+.1f}%)"
    )
    assert shown in section.group(1), section.group(1)


def test_an_install_without_the_compiled_solver_gives_the_same_diagnosis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The numpy twins (the replay's fixpoint, the interval sweep) are what a user without a
    compiler runs: on a real trace whose longest zig-zag takes hundreds of replay passes, the
    diagnosis is the compiled one, figure for figure (at 64 passes its top fix went unpriced)."""
    from gpuscope.analyses import intervals
    from gpuscope.analyses.whatif import schedule
    from gpuscope.render.json import dumps

    job = load(corpus("kineto/hta/df_index_resolver/df_index_resolver.json.gz"))
    compiled = dumps(diagnose(job))
    monkeypatch.setattr(schedule, "_replay", None)
    monkeypatch.setattr(intervals, "_swept_last_containing", None)
    assert dumps(diagnose(job)) == compiled
