"""Module and operator views: device time per module path and per operator, checked against the
generator's ground truth and against owners found by hand (a plain loop over the events) on the
corpus."""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from corpus import corpus
from gpuscope import diagnose, load
from gpuscope.analyses.operators import BACKWARD, NO_LAUNCH, DeviceViews, ViewRow
from gpuscope.diagnosis import DeviceReport
from gpuscope.model import Kind, Trace
from gpuscope.render import html, views_html
from gpuscope.render.json import views_document
from gpuscope.testing.generator import GeneratorConfig, HostSync, generate
from gpuscope.units import duration

QWEN = "kineto/tracelens/h100_qwen1.5-0.5b_inference.json.gz"
DF = "kineto/hta/df_index_resolver"


def _views(d: DeviceReport) -> DeviceViews:
    assert d.views is not None
    return d.views


def _roots(rows: list[ViewRow]) -> list[ViewRow]:
    return [r for r in rows if r.parent < 0]


def _assert_partitions(v: DeviceViews) -> None:
    """Every busy and idle nanosecond is in exactly one root, and a parent's total is its own
    time plus its children's."""
    for rows in (v.modules, v.module_types):
        assert sum(r.total_ns for r in _roots(rows)) == v.busy_ns
        assert sum(r.idle_ns for r in _roots(rows)) == v.idle_ns
        for i, r in enumerate(rows):
            children = [c for c in rows if c.parent == i]
            assert r.total_ns == r.self_ns + sum(c.total_ns for c in children)
            assert r.launches == r.self_launches + sum(c.launches for c in children)
    assert sum(r.self_ns for r in v.operators) == v.busy_ns


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GeneratorConfig]:
    config = GeneratorConfig(world_size=2, inject=(HostSync(),))
    path = tmp_path_factory.mktemp("views") / "trace.json.gz"
    generate(config).write(path)
    return path, config


def test_generated_views_partition_the_device_time_the_simulation_scheduled(
    generated: tuple[Path, GeneratorConfig],
) -> None:
    path, config = generated
    truth = generate(config).truth.devices[0]
    d = diagnose(load(path)).devices[0]
    v = _views(d)
    assert v.busy_ns == truth.busy_ns
    _assert_partitions(v)
    trace = load(path).traces[0]
    ev = trace.events
    busy_rows = np.flatnonzero(ev.of_kind(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET) & (ev.device == 0))
    assert sum(r.kernel_ns for r in _roots(v.modules)) == int(ev.dur_ns[busy_rows].sum())


def test_generated_module_tree_follows_the_forward_frames(
    generated: tuple[Path, GeneratorConfig],
) -> None:
    path, config = generated
    v = _views(diagnose(load(path)).devices[0])
    assert v.module_source == "forward frames"  # no nn.Module events: Python forward() frames
    types = {r.name: r for r in v.module_types}
    block = types["model.py:31 (forward)"]
    assert block.calls == config.layers * config.steps
    assert v.module_types[block.parent].name == "model.py:64 (forward)"
    # Each block runs four Linear modules, each one GEMM.
    linear = next(r for r in v.module_types if r.parent == v.module_types.index(block))
    assert linear.name.startswith("torch/nn/modules/linear.py:")
    assert linear.calls == linear.launches == 4 * block.calls
    ops = {r.name: r for r in v.operators}
    # aten::linear launches nothing itself: its time is its aten::addmm's.
    assert ops["aten::linear"].self_ns == 0
    assert ops["aten::linear"].total_ns == ops["aten::addmm"].total_ns > 0


def test_generated_sync_location_links_to_the_row_that_holds_its_idle_time(
    generated: tuple[Path, GeneratorConfig],
) -> None:
    path, _ = generated
    diagnosis = diagnose(load(path))
    v = _views(diagnosis.devices[0])
    sync = next(f for f in diagnosis.findings if f.cause == "host_sync")
    where = sync.locations[0].location
    assert where == "train.py:57 (train)"
    row = v.modules[v.location_rows[where]]
    assert row.self_idle_ns >= sync.locations[0].lost_ns


# --- corpus: owners found by hand ----------------------------------------------------------------


def _hand_owners(trace: Trace, device: int, prefix: str) -> dict[int, str | None]:
    """For each device event: the innermost range named ``prefix...`` on its launch's thread that
    was open when the launch began (a plain loop: the shortest range around the launch)."""
    ev = trace.events
    ranges: dict[tuple[int, int], list[tuple[int, int, str]]] = defaultdict(list)
    for r in np.flatnonzero(ev.of_kind(Kind.PYTHON, Kind.ANNOTATION)).tolist():
        name = trace.name(r)
        if name.startswith(prefix) and ev.dur_ns[r] > 0:
            key = (int(ev.pid[r]), int(ev.tid[r]))
            ranges[key].append((int(ev.start_ns[r]), int(ev.end_ns[r]), name))
    owners: dict[int, str | None] = {}
    work = np.flatnonzero(ev.of_kind(Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET) & (ev.device == device))
    for row in work.tolist():
        launch = int(ev.link[row])
        if launch < 0:
            owners[row] = NO_LAUNCH
            continue
        t = int(ev.start_ns[launch])
        around = [
            (end - start, name)
            for start, end, name in ranges[(int(ev.pid[launch]), int(ev.tid[launch]))]
            if start <= t <= end
        ]
        owners[row] = min(around)[1] if around else None
    return owners


def test_qwen_module_view_sums_to_busy_time_and_matches_the_owners_found_by_hand() -> None:
    trace = load(corpus(QWEN)).traces[0]
    report = diagnose(load(corpus(QWEN))).devices[0]
    v = _views(report)
    assert v.module_source == "nn.Module"
    assert v.busy_ns == report.temporal.busy_ns == 45_647_300
    _assert_partitions(v)
    # By hand: each kernel's innermost nn.Module at its launch, summed per module class. On this
    # single stream nothing overlaps, so busy time is the kernels' durations.
    owners = _hand_owners(trace, report.device, "nn.Module: ")
    by_class: Counter[str] = Counter()
    for row, owner in owners.items():
        name = (
            "(none)" if owner is None else re.sub(r"_\d+$", "", owner.removeprefix("nn.Module: "))
        )
        by_class[name] += int(trace.events.dur_ns[row])
    self_by_class: Counter[str] = Counter()
    for r in v.module_types:
        self_by_class[r.name] += r.self_ns
    for name, ns in by_class.items():
        if name != "(none)":
            assert self_by_class[name] == ns, name
    # The 509 kernels launched before the profiler's host window opened have no owner.
    assert Counter(owners.values())[NO_LAUNCH] == 509
    top = [(r.name, round(100 * r.total_ns / v.busy_ns, 1)) for r in v.module_types[:7]]
    assert top == [
        ("ProfilerStep", 69.9),
        ("Qwen2Model", 69.9),
        ("Qwen2DecoderLayer", 69.4),
        ("Qwen2Attention", 34.1),
        ("Linear", 6.8),
        ("Qwen2MLP", 17.6),
        ("Linear", 12.9),
    ]
    layers = next(r for r in v.module_types if r.name == "Qwen2DecoderLayer")
    assert layers.calls == 24  # Qwen1.5-0.5B has 24 decoder layers
    flash = {r.name: r for r in v.operators}["aten::_flash_attention_forward"]
    assert flash.self_launches == 24


def test_df_index_resolver_module_view_sums_to_busy_time_and_finds_backward_and_nccl() -> None:
    trace = load(corpus(DF)).traces[0]
    report = diagnose(load(corpus(DF))).devices[0]
    v = _views(report)
    assert v.module_source == "ranges"  # torch.compile'd DDP: record_function ranges only
    assert v.busy_ns == report.temporal.busy_ns
    _assert_partitions(v)
    roots = [r.name for r in _roots(v.modules)]
    assert roots == [BACKWARD, "nccl:all_reduce", "ProfilerStep"]
    # By hand: every NCCL kernel (stream 14) was launched inside a nccl:all_reduce range, on
    # the autograd thread (DDP's gradient hooks); the other kernels of that thread are the
    # backward pass, which opens no range.
    ev = trace.events
    owners = _hand_owners(trace, report.device, "nccl:all_reduce")
    nccl = [r for r in owners if ev.stream[r] == 14]
    assert len(nccl) == 2020 and all(owners[r] == "nccl:all_reduce" for r in nccl)
    rows = {r.name: r for r in _roots(v.modules)}
    assert rows["nccl:all_reduce"].launches == 2020
    autograd_thread = Counter(int(ev.tid[ev.link[r]]) for r in owners if owners[r] is None)
    main_thread = int(ev.tid[np.flatnonzero(ev.kind == Kind.ANNOTATION)[0]])
    backward = sum(n for tid, n in autograd_thread.items() if tid != main_thread)
    assert rows[BACKWARD].launches == backward == 11_555
    assert rows["ProfilerStep"].launches == 22_290 - 2020 - 11_555


def test_views_document_holds_the_whole_tree_with_paths() -> None:
    v = _views(diagnose(load(corpus(QWEN))).devices[0])
    doc = views_document(v)
    assert len(doc["modules"]) == len(v.modules)
    paths = {m["path"] for m in doc["modules"]}
    assert "ProfilerStep/Qwen2Model_0/Qwen2DecoderLayer_0/Qwen2Attention_0/Linear_0" in paths
    assert doc["operators"][0].keys() >= {"name", "calls", "total_ns", "self_ns", "idle_ns"}


def test_report_links_a_findings_location_to_its_module_row_and_draws_the_icicle(
    generated: tuple[Path, GeneratorConfig],
) -> None:
    path, _ = generated
    diagnosis = diagnose(load(path))
    page = html.render(diagnosis)
    v = _views(diagnosis.devices[0])
    row = v.location_rows["train.py:57 (train)"]
    assert f"<a href='#views-m-{row}'>" in page
    assert f"<tr id='views-m-{row}'>" in page
    # Durations read in their unit (5.4 h, 12 µs), not all in ms; the sort key stays the ns.
    cells = re.search(rf"<tr id='views-m-{row}'>(.*?)</tr>", page)
    assert cells is not None
    module = v.modules[row]
    for ns in (module.total_ns, module.self_ns, module.kernel_ns, module.idle_ns):
        assert f"<td class='num' data-v='{ns}'>{duration(ns)}</td>" in cells[1]
    assert "<table class='sortable'>" in page
    part = views_html.views_part(diagnosis)
    assert part.figure is not None
    bars = part.figure.data[0]
    shown = [r for r in v.module_types if r.total_ns > 0]
    assert list(bars.text) == [r.name for r in shown]
    assert bars.x[0] == pytest.approx(shown[0].total_ns / 1e6)
    # Each bar lies under its parent's: the icicle nests as the tree does.
    at = {id(r): k for k, r in enumerate(shown)}
    for k, r in enumerate(shown):
        if r.parent >= 0:
            p = at[id(v.module_types[r.parent])]
            assert bars.base[p] - 1e-9 <= bars.base[k]
            assert bars.base[k] + bars.x[k] <= bars.base[p] + bars.x[p] + 1e-9


def test_nsys_views_come_from_nvtx_ranges_and_emit_nvtx_operators() -> None:
    report = diagnose(load(corpus("nsys/nsys-ai/mfu_2gpu_before.sqlite"))).devices[0]
    v = _views(report)
    assert v.module_source == "ranges"  # NVTX ranges
    _assert_partitions(v)
    rows = {r.name: r for r in _roots(v.modules)}
    # FlashAttention's autograd Function opens an NVTX range around its kernel.
    flash = rows["FlashAttnFunc"]
    assert flash.calls == flash.launches == 33
    assert {r.name: r for r in v.operators}["flash_attn::_flash_attn_forward"].self_ns > 0
