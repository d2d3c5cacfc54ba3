"""Many GPUs: per-rank figures against the real 8-rank DLRM trace (checked with plain Python),
stragglers injected by the generator, exposed collectives, one rank of many, parallel reading."""

from __future__ import annotations

import gzip
import json
import random
import statistics
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from corpus import corpus
from gpuscope import diagnose, load
from gpuscope.diagnosis import Diagnosis
from gpuscope.errors import CorruptInputError
from gpuscope.readers import PARALLEL_MIN_BYTES, folder_workers
from gpuscope.render.json import to_document
from gpuscope.render.terminal import render
from gpuscope.testing.generator import (
    ExposedCollective,
    GeneratorConfig,
    Straggler,
    generate_job,
)

DLRM = "kineto/param-dlrm-8rank"

# --- plain-Python ground truth for the DLRM files -------------------------------------------------


def _union(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(intervals: list[tuple[int, int]]) -> int:
    return sum(end - start for start, end in intervals)


def _minus(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """Length of ``a`` not covered by ``b`` (both merged)."""
    covered = 0
    for a0, a1 in a:
        for b0, b1 in b:
            covered += max(0, min(a1, b1) - max(a0, b0))
    return _length(a) - covered


def _plain(path: Path) -> dict[str, Any]:
    """Busy, idle, communication and exposed communication of one rank, from the JSON itself."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    work = [
        e
        for e in doc["traceEvents"]
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    ]
    work = [e for e in work if e["dur"] > 0]
    ns = [(round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000)) for e in work]
    is_comm = [e["cat"] == "kernel" and "nccl" in e["name"].lower() for e in work]
    comm = _union([iv for iv, c in zip(ns, is_comm, strict=True) if c])
    compute = _union(
        [iv for iv, c, e in zip(ns, is_comm, work, strict=True) if not c and e["cat"] == "kernel"]
    )
    busy = _union(ns)
    # The profiled window: the ProfilerStep ranges (where the host began the first step, to
    # the later of the last one's end and its device work's), widened to the device work.
    steps = [
        (round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000))
        for e in doc["traceEvents"]
        if e.get("ph") == "X"
        and str(e.get("name", "")).startswith("ProfilerStep#")
        and e.get("cat") != "gpu_user_annotation"
    ]
    span = max(end for _, end in ns + steps) - min(start for start, _ in ns + steps)
    return {
        "rank": doc["distributedInfo"]["rank"],
        "span_ns": span,
        "busy_ns": _length(busy),
        "idle_ns": span - _length(busy),
        "communication_ns": _length(comm),
        "exposed_ns": _minus(comm, compute),
        "collectives": sorted(iv for iv, c in zip(ns, is_comm, strict=True) if c),
    }


@cache
def _dlrm() -> tuple[Diagnosis, list[dict[str, Any]]]:
    folder = corpus(DLRM)
    plain = sorted((_plain(f) for f in folder.iterdir()), key=lambda p: p["rank"])
    return diagnose(load(folder)), plain


def test_dlrm_per_rank_figures_match_plain_python() -> None:
    d, plain = _dlrm()
    assert d.ranks is not None
    assert [r.rank for r in d.ranks.ranks] == list(range(8))
    assert d.ranks.present == list(range(8)) and d.ranks.missing == [] and d.ranks.world_size == 8
    for got, want in zip(d.ranks.ranks, plain, strict=True):
        assert (got.span_ns, got.busy_ns, got.idle_ns) == (
            want["span_ns"],
            want["busy_ns"],
            want["idle_ns"],
        )
        assert got.communication_ns == want["communication_ns"]
        assert got.exposed_communication_ns == want["exposed_ns"]
        assert got.collectives == len(want["collectives"]) == 8


def test_dlrm_busiest_least_busy_and_collective_wait_are_consistent() -> None:
    d, plain = _dlrm()
    assert d.ranks is not None
    share = {p["rank"]: p["busy_ns"] / p["span_ns"] for p in plain}
    assert d.ranks.busiest is not None and d.ranks.least_busy is not None
    # By the files' kernel time rank 1 looks busiest (66%) and the straggler, rank 7, least busy
    # (24%); but most of the others' kernel time is NCCL spinning for rank 7 with nothing else
    # running. That is waiting, not work: by work, rank 7 is the busiest (10.3% of its profiled
    # step), rank 1 near the least.
    assert max(share, key=lambda r: share[r]) == 1 and min(share, key=lambda r: share[r]) == 7
    work = {r.rank: (r.busy_ns - (r.exposed_wait_ns or 0)) / r.span_ns for r in d.ranks.ranks}
    assert d.ranks.busiest.rank == max(work, key=lambda r: work[r]) == 7
    assert d.ranks.least_busy.rank == min(work, key=lambda r: work[r])
    assert d.ranks.busiest.busy_pct == pytest.approx(10.3, abs=0.1)
    assert all(r.busy_pct < 100 * share[r.rank] for r in d.ranks.ranks)
    # Collective wait from the files: clocks aligned on the median gap of collective ends, then
    # every rank waits (its duration - the last arrival's) in the n-th collective.
    colls = [p["collectives"] for p in plain]
    offsets = [
        int(statistics.median(c[1] - r[1] for c, r in zip(rc, colls[0], strict=True)))
        for rc in colls
    ]
    waits = [0] * 8
    last_at: list[int] = [0] * 8
    for n in range(8):
        starts = [colls[r][n][0] - offsets[r] for r in range(8)]
        durations = [colls[r][n][1] - colls[r][n][0] for r in range(8)]
        last = max(range(8), key=lambda r: starts[r])
        wait = [max(0, durations[r] - durations[last]) for r in range(8)]
        for r in range(8):
            waits[r] += wait[r]
        if max(wait) >= 10_000:
            last_at[last] += 1
    assert [r.clock_offset_ns for r in d.ranks.ranks] == offsets
    assert [r.collective_wait_ns for r in d.ranks.ranks] == waits
    assert d.ranks.collective_wait_ns == sum(waits)
    assert [r.last_arrivals for r in d.ranks.ranks] == last_at
    # The least busy rank is the one the others wait for.
    assert [s.rank for s in d.ranks.stragglers] == [7]
    straggler = d.ranks.stragglers[0]
    assert straggler.last_arrivals == max(last_at) == 5
    assert d.ranks.ranks[7].collective_wait_ns == min(waits)
    assert straggler.idle_causes and straggler.idle_causes[0][0] == "launch_overhead"


def test_dlrm_findings_split_exposed_communication_without_counting_twice() -> None:
    d, plain = _dlrm()
    assert d.ranks is not None
    by_cause = {f.cause: f for f in d.findings}
    straggler = by_cause["straggler"]
    assert straggler.pattern == "latency_mirage"
    assert "rank 7 arrived last at 5 of 8" in straggler.evidence[0]
    exposed_total = sum(p["exposed_ns"] for p in plain)
    parts = [by_cause[c].lost_ns for c in ("straggler", "exposed_communication")]
    parts.append(by_cause["collective_wait"].lost_ns if "collective_wait" in by_cause else 0)
    other_wait = d.ranks.exposed_wait_ns - d.ranks.straggler_exposed_wait_ns
    assert straggler.lost_ns == d.ranks.straggler_exposed_wait_ns
    assert (
        by_cause["exposed_communication"].lost_ns + straggler.lost_ns + other_wait == exposed_total
    )
    assert sum(parts) <= exposed_total
    assert d.ranks.bandwidth == [] and "not recorded" in (d.ranks.bandwidth_note or "")


def test_dlrm_json_and_terminal_show_the_rank_section() -> None:
    d, _ = _dlrm()
    doc = json.loads(json.dumps(to_document(d)))
    ranks = doc["ranks"]
    assert ranks["busiest_rank"] == 7 and ranks["least_busy_rank"] == 5
    assert [r["rank"] for r in ranks["per_rank"]] == list(range(8))
    assert ranks["stragglers"][0]["rank"] == 7 and ranks["stragglers"][0]["last_arrivals"] == 5
    assert sum(r["collective_wait_ns"] for r in ranks["per_rank"]) == ranks["collective_wait_ns"]
    assert ranks["groups"][0]["matched"] == 8
    console = Console(record=True, width=120)
    render(d, console)
    text = console.export_text()
    assert "Ranks" in text and "straggler: rank 7" in text
    # Rank 1 runs kernels 61.9% of its profiled step, 55.9% of it spinning inside collectives
    # waiting for rank 7, the straggler, which works most (busy less waiting with nothing else
    # running).
    line = " ".join(text.split())
    assert (
        "rank 1 has the most kernel time (61.9%) but waits inside collectives for 55.9% of its"
        " time" in line
    )
    assert "busiest rank 7 (10.3% busy, not counting waits for a late peer)" in line
    assert "least busy rank 5 (7.1%)" in line


def test_one_rank_of_eight_is_analysed_and_says_so(tmp_path: Path) -> None:
    source = next(corpus(DLRM).glob("worker3_*"))
    (tmp_path / source.name).symlink_to(source)
    d = diagnose(load(tmp_path))
    assert d.ranks is not None
    assert d.ranks.present == [3] and d.ranks.missing == [0, 1, 2, 4, 5, 6, 7]
    assert d.ranks.partial and "only 1 of 8 ranks present" in d.ranks.notes[0]
    assert d.ranks.collective_wait_ns is None and d.ranks.stragglers == []
    assert d.ranks.ranks[0].communication_ns > 0
    assert not {"straggler", "collective_wait"} & {f.cause for f in d.findings}


# --- the generator: stragglers, clocks, exposed collectives -------------------------------------


def _job(tmp_path: Path, config: GeneratorConfig, world_size: int) -> Diagnosis:
    folder = tmp_path / f"job{config.seed}-{world_size}-{len(config.inject)}"
    folder.mkdir()
    for rank, trace in enumerate(generate_job(config, world_size=world_size)):
        trace.write(folder / f"rank{rank}.json")
    return diagnose(load(folder))


def test_straggler_rank_named_in_at_least_95_percent_of_seeds(tmp_path: Path) -> None:
    seeds = range(20)
    right = 0
    for seed in seeds:
        rng = random.Random(seed)
        world = rng.choice([2, 4, 8])
        rank = rng.randrange(world)
        config = GeneratorConfig(
            seed=seed,
            steps=2,
            layers=1,
            inject=(Straggler(rank=rank, extra_ms=rng.uniform(0.5, 4.0)),),
        )
        d = _job(tmp_path, config, world)
        assert d.ranks is not None
        named = [s.rank for s in d.ranks.stragglers]
        finding = next((f for f in d.findings if f.cause == "straggler"), None)
        if named[:1] == [rank] and finding is not None and f"rank {rank} " in finding.evidence[0]:
            right += 1
    assert right >= 0.95 * len(seeds)


def test_no_straggler_is_named_in_a_balanced_job(tmp_path: Path) -> None:
    for seed in range(6):
        d = _job(tmp_path, GeneratorConfig(seed=seed, steps=2, layers=1), 4)
        assert d.ranks is not None and d.ranks.stragglers == []
        assert "straggler" not in {f.cause for f in d.findings}


def test_clock_offsets_recovered_from_collective_ends(tmp_path: Path) -> None:
    config = GeneratorConfig(seed=5, steps=2, layers=1, inject=(Straggler(rank=2, extra_ms=2.0),))
    d = _job(tmp_path, config, 4)
    assert d.ranks is not None and d.ranks.aligned
    # The generator offsets rank r's clock by r * 2750 + (r % 3) * 410 ns.
    expected = [r * 2_750 + (r % 3) * 410 for r in range(4)]
    assert [r.clock_offset_ns for r in d.ranks.ranks] == expected
    straggler = d.ranks.stragglers[0]
    assert straggler.rank == 2 and straggler.last_arrivals == straggler.shared == 2
    assert straggler.busy_in_window_ns >= 0.95 * straggler.window_ns  # busy with its slow GEMMs
    assert "gemm" in straggler.top_kernels[0][0]
    assert d.ranks.ranks[2].collective_wait_ns == 0


def test_exposed_collective_costs_exactly_its_time_with_per_step_evidence(tmp_path: Path) -> None:
    config = GeneratorConfig(seed=4, steps=3, layers=2, inject=(ExposedCollective(ms=5.0),))
    d = _job(tmp_path, config, 4)
    exposed = next(f for f in d.findings if f.cause == "exposed_communication")
    # 5 ms after backward on each of 4 ranks in each of 3 steps; the overlapped ones cost nothing.
    assert exposed.lost_ns == pytest.approx(4 * 3 * 5_000_000, rel=0.01)
    assert exposed.locations[0].location == "train.py:39 (train_step)"
    assert any(e.startswith("per GPU and step: 5.0") for e in exposed.evidence)
    assert any("12 of 36 collectives ran with no compute" in e for e in exposed.evidence)
    assert "during backward, not after it" in exposed.fix
    assert d.ranks is not None and d.ranks.bandwidth[0].kind == "all_reduce"
    steps = d.ranks.exposure.steps
    assert [s.number for s in steps] == [0, 1, 2]
    assert all(s.exposed_ns == pytest.approx(5_000_000, rel=0.02) for s in steps)


def test_overlapped_collectives_are_not_a_finding_and_bus_bandwidth_is_nccls(
    tmp_path: Path,
) -> None:
    d = _job(tmp_path, GeneratorConfig(seed=9, steps=2, layers=2), 8)
    assert "exposed_communication" not in {f.cause for f in d.findings}
    assert d.ranks is not None
    (bandwidth,) = d.ranks.bandwidth
    assert bandwidth.kind == "all_reduce" and bandwidth.ranks == 8 and not bandwidth.includes_wait
    # The generator moves all-reduces at 360 GB/s of bus bandwidth plus 8 µs of latency.
    assert bandwidth.bus_bytes_per_s == pytest.approx(360e9, rel=0.05)
    assert bandwidth.bus_bytes_per_s == pytest.approx(
        bandwidth.algorithm_bytes_per_s * 2 * 7 / 8, rel=1e-9
    )
    assert bandwidth.peak_bytes_per_s == 450e9  # H100 NVLink: 900 GB/s both ways


# --- reading a folder on all cores --------------------------------------------------------------


def test_parallel_folder_read_gives_the_same_job(monkeypatch: pytest.MonkeyPatch) -> None:
    folder = corpus(DLRM)
    monkeypatch.setenv("GPUSCOPE_WORKERS", "1")
    one = load(folder)
    monkeypatch.setenv("GPUSCOPE_WORKERS", "3")
    many = load(folder)
    assert [t.source for t in many.traces] == [t.source for t in one.traces]
    for a, b in zip(one.traces, many.traces, strict=True):
        assert a.rank == b.rank and a.names == b.names and a.steps == b.steps
        assert (a.events.start_ns == b.events.start_ns).all()
        assert (a.events.link == b.events.link).all() and a.events.extra == b.events.extra


def test_parallel_read_raises_and_skips_as_the_sequential_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for source in sorted(corpus(DLRM).iterdir())[:3]:
        (tmp_path / source.name).symlink_to(source)
    (tmp_path / "notes.txt").write_text("not a trace")
    monkeypatch.setenv("GPUSCOPE_WORKERS", "2")
    job = load(tmp_path)
    assert len(job.traces) == 3 and "notes.txt" in job.warnings[0]
    (tmp_path / "zz_broken.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")
    with pytest.raises(CorruptInputError, match="zz_broken"):
        load(tmp_path)


def test_workers_follow_the_setting_the_cores_and_the_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    small = [tmp_path / f"r{i}" for i in range(4)]
    for f in small:
        f.write_bytes(b"{}")
    monkeypatch.delenv("GPUSCOPE_WORKERS", raising=False)
    assert folder_workers(small) == 1  # too small to pay for starting a worker
    big = tmp_path / "big"
    big.write_bytes(b"\0" * PARALLEL_MIN_BYTES)
    assert folder_workers([*small, big]) >= 1
    monkeypatch.setenv("GPUSCOPE_WORKERS", "3")
    assert folder_workers(small) == 3
    assert folder_workers(small[:2]) == 2  # never more than the files
    monkeypatch.setenv("GPUSCOPE_WORKERS", "1")
    assert folder_workers([*small, big]) == 1


def test_a_participant_refers_to_its_device_report_instead_of_copying_it() -> None:
    """#17: the rank analysis reads each device's report through a reference; a participant holds
    only what the report does not (the device work, the host index, a rank for unnamed ranks)."""
    from gpuscope.analyses.ranks import Participant
    from gpuscope.diagnosis import DeviceReport

    own = set(Participant.__struct_fields__)
    assert own == {"report", "work", "rank", "host"}
    assert own & set(DeviceReport.__struct_fields__) == {"rank"}
