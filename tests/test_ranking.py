"""What to fix first: findings ranked by what fixing saves, one set of verdict words, and late
ranks that take turns each named (issue 28, classes 6 and 8).

Generated cases carry their answer (the injected cause); corpus cases assert MANIFEST facts.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest

from corpus import corpus
from gpuscope import diagnose, load
from gpuscope.diagnosis import Diagnosis
from gpuscope.diagnosis.findings import BOUND_WORDS, INPUT_BOUND_PCT, worth_pct
from gpuscope.render.json import to_document
from gpuscope.testing import generator as gen
from gpuscope.testing.config import GeneratorConfig, HostSync, SlowDataLoader, Straggler


def _diagnose(tmp_path: Path, config: GeneratorConfig, world: int = 1) -> Diagnosis:
    if world == 1:
        return diagnose(load(gen.generate(config).write(tmp_path / "trace.json")))
    for rank, trace in enumerate(gen.generate_job(config, world_size=world)):
        trace.write(tmp_path / f"rank{rank}.json")
    return diagnose(load(tmp_path))


# --- rank by what fixing saves ------------------------------------------------------------------


def test_findings_come_by_what_fixing_saves(tmp_path: Path) -> None:
    """A sync at the end of each step keeps the host from fetching the next batch while the GPU
    works: removing it saves the loader's wait too, so it comes first and says why."""
    config = GeneratorConfig(
        seed=4,
        steps=5,
        inject=(SlowDataLoader(ms=12.0), HostSync(host_work_us=1500.0)),
    )
    d = _diagnose(tmp_path, config)
    worth = [worth_pct(f) for f in d.findings]
    assert worth == sorted(worth, reverse=True)
    first = d.findings[0]
    assert first.cause == "host_sync" and first.prediction is not None
    assert first.prediction.hides == ["data_loader"]
    assert worth_pct(first) > first.share_pct  # more than the time it names
    loader = next(f for f in d.findings if f.cause == "data_loader")
    assert loader.share_pct > first.share_pct  # the old order would have led with the loader
    assert "also hides data_loader" in (first.prediction.note or "")
    assert "fix first: the GPU waits while the host synchronises" in d.verdict.summary
    assert "as it also hides the data_loader time" in d.verdict.summary


def test_a_job_waiting_for_its_input_is_input_bound_first(tmp_path: Path) -> None:
    """TensorFlow's profiler's rule: 20% of the step waiting for input makes a job input-bound,
    whatever bounds its kernels."""
    d = _diagnose(tmp_path, GeneratorConfig(seed=2, steps=4, inject=(SlowDataLoader(ms=40.0),)))
    assert d.verdict.shares_pct["input"] >= INPUT_BOUND_PCT
    assert d.verdict.bound == "input"
    assert d.verdict.summary.startswith(
        "input-bound: the GPU waits for the data loader at train.py:"
    )
    # Under the bar the loader's wait is host time like any other.
    config = GeneratorConfig(seed=2, steps=4, inject=(SlowDataLoader(ms=2.0), HostSync()))
    d = _diagnose(tmp_path, config)
    assert d.verdict.shares_pct["input"] < INPUT_BOUND_PCT and d.verdict.bound != "input"


def test_the_demo_tells_one_story() -> None:
    """The demo waits 34% of its window on its data loader: input-bound, the loader named in the
    headline, and the 3% sync that saves more says it hides the loader's wait."""
    from importlib import resources

    demo = resources.files("gpuscope.examples").joinpath("demo_train.json.gz")
    d = diagnose(load(Path(str(demo))))
    assert d.verdict.bound == "input"
    assert d.verdict.summary.startswith(
        "input-bound: the GPU waits for the data loader at train.py:48 (train) 34% of the window"
    )
    assert "compute-bound" not in d.verdict.summary
    first = d.findings[0]
    assert first.cause == "host_sync" and first.prediction is not None
    assert first.prediction.hides == ["data_loader"]


@cache
def _corpus_diagnosis(relative: str) -> Diagnosis:
    return diagnose(load(corpus(relative)))


@pytest.mark.parametrize(
    "relative",
    [
        "kineto/hta/trace_diff/test/test.json.gz",  # fp32_gemm 23% of device time, saves $0.00
        "kineto/hta/df_index_resolver/df_index_resolver.json.gz",  # exposed comm. saves nothing
        "kineto/tracelens/b200_vllm_moe_fp8_rank0of8.json.gz",
    ],
)
def test_the_headline_never_leads_with_a_finding_that_saves_nothing(relative: str) -> None:
    d = _corpus_diagnosis(relative)
    assert d.findings and worth_pct(d.findings[0]) > 0.0, d.findings[0]
    savers = [f for f in d.findings if worth_pct(f) > 0.0]
    nothing = [f for f in d.findings if worth_pct(f) == 0.0]
    assert d.findings == savers + nothing
    assert d.verdict.bound in BOUND_WORDS
    for f in nothing:
        assert f"fix first: {f.title}" not in d.verdict.summary


def test_time_nothing_explains_is_not_fixed_first() -> None:
    """MI300X DDP rank 0: 64% of the window is exposed communication, whose replay saves nothing
    (its all-reduces are launched after backward, with no compute left to overlap); 2% is idle
    time nothing explains. Neither saves step time, so the larger leads, and the reason the
    replay saves nothing is the late launch, not 'off the critical path'."""
    d = _corpus_diagnosis("kineto/tracelens/mi300x_resnet_ddp_rank0of8.json.gz")
    causes = [f.cause for f in d.findings]
    assert causes.index("exposed_communication") < causes.index("unknown")
    unknown = d.findings[causes.index("unknown")]
    assert worth_pct(unknown) == 0.0 and unknown.share_pct > 2.0
    comm = d.findings[causes.index("exposed_communication")]
    assert comm.prediction is not None and comm.share_pct > 60.0
    assert "launched after the compute they could overlap" in (comm.prediction.note or "")


def test_verdict_words_are_one_documented_set() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    docs = (Path(__file__).resolve().parents[1] / "docs" / "verdicts.md").read_text()
    for word in BOUND_WORDS:
        assert f"`{word}`" in readme and f"`{word}`" in docs, word
    assert "unclassified-bound" not in readme


# --- late ranks that take turns ------------------------------------------------------------------


def test_two_ranks_that_take_turns_arriving_last_are_both_named(tmp_path: Path) -> None:
    """Ranks 2 and 5 each issue their work 4 ms late at alternate steps (a host-side stall at
    train.py:33); a per-step sync realigns the ranks. Neither is last at a majority of the
    collectives, both cost the others time: both are named, with what their host did first."""
    config = GeneratorConfig(
        seed=3,
        steps=8,
        layers=2,
        inject=(
            Straggler(rank=2, extra_ms=4.0, steps=(0, 2, 4, 6), on_host=True),
            Straggler(rank=5, extra_ms=4.0, steps=(1, 3, 5, 7), on_host=True),
            HostSync(),
        ),
    )
    d = _diagnose(tmp_path, config, world=8)
    assert d.ranks is not None
    named = {s.rank: s for s in d.ranks.stragglers}
    assert set(named) == {2, 5}
    for s in named.values():
        assert s.last_arrivals == 8 and s.shared == 16  # half each, a majority for neither
        assert s.caused_wait_ns > 0
        assert s.idle_before and s.idle_before[0][0] == "cpu_other at train.py:33 (train)"
    finding = next(f for f in d.findings if f.cause == "straggler")
    assert (
        finding.evidence[0]
        == "2 ranks take turns arriving last: rank 2 (8 of 16), rank 5 (8 of 16)"
    )
    assert "Rank 2's host issues its work late" in finding.fix
    assert "Rank 5's host issues its work late" in finding.fix
    # Spinning inside the collectives for them is waiting, not work.
    assert d.verdict.figures["waiting_for_peers_pct"] is not None
    assert d.verdict.figures["waiting_for_peers_pct"] > 1.0
    assert d.verdict.figures["busy_pct"] == pytest.approx(
        100.0 - d.verdict.idle_pct - d.verdict.figures["waiting_for_peers_pct"]
    )


def test_dlrm_names_rank_7_only() -> None:
    """The 8 DLRM ranks: rank 7 arrives last at 5 of 8 contested all-reduces (MANIFEST: rank
    imbalance and communication waits); no other rank is last often enough to be named."""
    d = _corpus_diagnosis("kineto/param-dlrm-8rank")
    assert d.ranks is not None
    assert [s.rank for s in d.ranks.stragglers] == [7]
    assert d.ranks.stragglers[0].last_arrivals == 5


def test_every_busy_figure_leaves_out_waiting_for_peers() -> None:
    """Spinning inside a collective for a late peer is waiting: each device's busy share (its
    panel, the devices table, the JSON) is its rank's, not the timeline's, which counts it."""
    d = _corpus_diagnosis("kineto/param-dlrm-8rank")
    assert d.ranks is not None
    by_rank = {r.rank: r for r in d.ranks.ranks}
    waited = [dev for dev in d.devices if dev.peer_wait_ns]
    assert len(waited) == 8
    for dev in d.devices:
        assert dev.rank is not None
        assert dev.busy_pct == pytest.approx(by_rank[dev.rank].busy_pct)
        timeline = dev.temporal.pct(dev.temporal.busy_ns)
        assert dev.busy_pct < timeline
    rank1 = next(dev for dev in d.devices if dev.rank == 1)
    assert rank1.temporal.pct(rank1.temporal.busy_ns) > 60.0
    assert rank1.busy_pct < 10.0
    assert _device_json(d, 1)["busy_pct"] == pytest.approx(rank1.busy_pct, abs=0.01)


def _device_json(d: Diagnosis, rank: int) -> dict[str, Any]:
    device: dict[str, Any] = next(x for x in to_document(d)["devices"] if x["rank"] == rank)
    return device
