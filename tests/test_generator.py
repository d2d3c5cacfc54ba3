"""The trace generator: real Kineto shape, determinism, and truth that the document agrees with."""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpuscope.testing.generator import (
    AllocatorChurn,
    Checkpoint,
    ExposedCollective,
    Fp32Gemm,
    GeneratedTrace,
    GeneratorConfig,
    HostSync,
    MemoryBoundChain,
    PageableH2DCopy,
    SlowDataLoader,
    Straggler,
    TinyKernels,
    generate,
    generate_job,
)

Event = dict[str, Any]
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_APIS = {"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync"}
LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
SMALL = GeneratorConfig(seed=11, steps=3, layers=2)
DEMO = GeneratorConfig(
    seed=7, steps=4, layers=2, inject=(SlowDataLoader(ms=10.0), HostSync(host_work_us=800.0))
)


@pytest.fixture(scope="module")
def demo() -> GeneratedTrace:
    return generate(DEMO)


# --- helpers: plain readings of the document --------------------------------------------------


def ns(us: float) -> int:
    return round(us * 1000)


def events(trace: GeneratedTrace, *cats: str) -> list[Event]:
    return [e for e in trace.document["traceEvents"] if e.get("cat") in cats]


def interval(e: Event) -> tuple[int, int]:
    return ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])


def union_ns(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def is_nccl(e: Event) -> bool:
    return e["name"].startswith("nccl")


def overlapping(items: list[Event], start: int, end: int) -> list[Event]:
    return [e for e in items if interval(e)[0] < end and interval(e)[1] > start]


# --- determinism and file output --------------------------------------------------------------


def test_same_seed_gives_identical_bytes_and_other_seeds_differ() -> None:
    first, second = generate(DEMO), generate(DEMO)
    assert first.to_bytes() == second.to_bytes()
    assert first.to_bytes(compress=True) == second.to_bytes(compress=True)
    assert first.truth == second.truth
    other = generate(GeneratorConfig(seed=8, steps=4, layers=2, inject=DEMO.inject))
    assert other.to_bytes() != first.to_bytes()


def test_write_gzips_deterministically_and_plain_json_otherwise(tmp_path: Path) -> None:
    trace = generate(SMALL)
    a, b = trace.write(tmp_path / "a.json.gz"), trace.write(tmp_path / "b.json.gz")
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes()[4:8] == b"\x00\x00\x00\x00"  # gzip mtime
    assert json.loads(gzip.decompress(a.read_bytes())) == trace.document
    plain = trace.write(tmp_path / "c.json")
    assert json.loads(plain.read_text()) == trace.document


# --- the Kineto shape -------------------------------------------------------------------------


def test_document_has_the_modern_kineto_header(demo: GeneratedTrace) -> None:
    doc = demo.document
    assert doc["schemaVersion"] == 1
    assert isinstance(doc["baseTimeNanoseconds"], int)
    assert doc["traceName"].endswith(".pt.trace.json")
    props = doc["deviceProperties"][0]
    assert props["name"] == "NVIDIA H100 80GB HBM3"
    assert (props["numSms"], props["computeMajor"], props["computeMinor"]) == (132, 9, 0)
    assert props["totalGlobalMem"] == 85_018_279_936
    dist = doc["distributedInfo"]
    assert (dist["backend"], dist["rank"], dist["world_size"]) == ("nccl", 0, 1)
    assert doc["record_shapes"] == 1 and doc["with_stack"] == 1


def test_metadata_span_and_window_events(demo: GeneratedTrace) -> None:
    all_events = demo.document["traceEvents"]
    meta = {(e["name"], e["pid"], e["tid"]) for e in all_events if e["ph"] == "M"}
    host = events(demo, "cpu_op")[0]["pid"]
    assert ("process_labels", 0, 0) in meta and ("process_name", host, 0) in meta
    assert ("thread_name", 0, 7) in meta and ("thread_name", host, host) in meta
    (span,) = events(demo, "Trace")
    timed = [e for e in all_events if e["ph"] == "X" and e is not span]
    assert ns(span["ts"]) <= min(interval(e)[0] for e in timed)
    assert ns(span["ts"]) + ns(span["dur"]) >= max(interval(e)[1] for e in timed)
    instants = {e["name"] for e in all_events if e["ph"] == "i"}
    assert instants == {"Iteration Start: PyTorch Profiler", "Record Window End"}


def test_times_are_float_microseconds_exact_to_the_nanosecond(demo: GeneratedTrace) -> None:
    for e in demo.document["traceEvents"]:
        for key in ("ts", "dur"):
            if key in e:
                assert isinstance(e[key], float)
                assert abs(e[key] * 1000 - round(e[key] * 1000)) < 1e-3
    text = demo.to_bytes().decode()
    assert re.search(r'"ts": \d+\.\d{1,3}, "dur": \d+\.\d{1,3}', text)
    assert not re.search(r'"ts": \d+\.\d{4,}', text)


def test_every_launch_pairs_with_exactly_one_device_event(demo: GeneratedTrace) -> None:
    launches = {
        e["args"]["correlation"]: e
        for e in events(demo, "cuda_runtime")
        if e["name"] in LAUNCH_APIS
    }
    device = {e["args"]["correlation"]: e for e in events(demo, *DEVICE_CATS)}
    assert len(device) == len(events(demo, *DEVICE_CATS))
    assert set(device) == set(launches)
    for corr, work in device.items():
        assert work["args"]["External id"] == launches[corr]["args"]["External id"]
        assert ns(work["ts"]) >= ns(launches[corr]["ts"]) + 5_000  # launch latency
    flows = events(demo, "ac2g")
    starts = {e["id"]: e for e in flows if e["ph"] == "s"}
    finishes = {e["id"]: e for e in flows if e["ph"] == "f"}
    assert set(starts) == set(finishes) == set(device)
    assert all(finishes[c]["ts"] == device[c]["ts"] for c in device)
    assert all(starts[c]["ts"] == launches[c]["ts"] for c in device)


def test_kernels_carry_launch_configuration(demo: GeneratedTrace) -> None:
    for kernel in events(demo, "kernel"):
        args = kernel["args"]
        assert (kernel["pid"], args["device"], args["stream"]) == (0, 0, kernel["tid"])
        assert len(args["grid"]) == len(args["block"]) == 3
        for key in ("registers per thread", "shared memory", "blocks per SM", "warps per SM"):
            assert key in args
        assert 0 <= args["est. achieved occupancy %"] <= 100
    names = {k["name"] for k in events(demo, "kernel")}
    assert any("xmma_gemm_bf16" in n for n in names)
    assert any("s16816gemm_bf16" in n for n in names)
    assert any(n.startswith("void pytorch_flash::flash_fwd_kernel") for n in names)
    assert any("vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add" in n for n in names)


def test_host_events_nest_on_the_main_thread(demo: GeneratedTrace) -> None:
    host = [e for e in demo.document["traceEvents"] if e["ph"] == "X" and isinstance(e["pid"], int)]
    host = [e for e in host if e["cat"] not in (*DEVICE_CATS, "gpu_user_annotation")]
    assert {(e["pid"], e["tid"]) for e in host} == {(host[0]["pid"], host[0]["pid"])}
    stack: list[tuple[int, int]] = []
    for e in sorted(host, key=lambda e: (interval(e)[0], -interval(e)[1])):
        start, end = interval(e)
        while stack and stack[-1][1] <= start:
            stack.pop()
        assert not stack or end <= stack[-1][1], f"{e['name']} straddles its parent"
        stack.append((start, end))


def test_python_frames_have_correct_parent_ids(demo: GeneratedTrace) -> None:
    frames = events(demo, "python_function")
    by_id = {f["args"]["Python id"]: f for f in frames}
    assert len(by_id) == len(frames)
    roots = [f for f in frames if f["args"]["Python parent id"] is None]
    assert [r["name"] for r in roots] == ["train.py(118): <module>"]
    for frame in frames:
        parent_id = frame["args"]["Python parent id"]
        if parent_id is None:
            continue
        parent = by_id[parent_id]
        assert interval(parent)[0] <= interval(frame)[0]
        assert interval(frame)[1] <= interval(parent)[1]
    names = {f["name"] for f in frames}
    assert "torch/nn/modules/module.py(1773): _call_impl" in names
    assert "train.py(48): train" in names and "train.py(57): train" in names


def test_ops_record_shapes_and_the_real_op_chains(demo: GeneratedTrace) -> None:
    ops = events(demo, "cpu_op")
    linear = next(o for o in ops if o["name"] == "aten::linear")
    assert linear["args"]["Input type"] == ["c10::BFloat16"] * 3
    assert linear["args"]["Input Dims"][0] == [DEMO.batch_size, DEMO.seq_len, DEMO.hidden]
    for key in ("External id", "Record function id", "Concrete Inputs", "Input Strides"):
        assert key in linear["args"]
    names = [o["name"] for o in ops]
    for chain in (["aten::linear", "aten::addmm"], ["aten::item", "aten::_local_scalar_dense"]):
        assert any(names[i : i + 2] == chain for i in range(len(names)))
    assert any(names[i : i + 2] == ["aten::to", "aten::_to_copy"] for i in range(len(names)))
    steps = [e["name"] for e in events(demo, "user_annotation") if e["name"].startswith("Prof")]
    twins = [e["name"] for e in events(demo, "gpu_user_annotation")]
    assert steps == [f"ProfilerStep#{i}" for i in range(DEMO.steps)] == twins


def test_item_sync_is_a_dtoh_copy_then_a_stream_sync(demo: GeneratedTrace) -> None:
    dtoh = [e for e in events(demo, "gpu_memcpy") if e["name"].startswith("Memcpy DtoH")]
    assert {e["name"] for e in dtoh} == {"Memcpy DtoH (Device -> Pageable)"}
    assert all(e["args"]["bytes"] == 4 for e in dtoh)
    syncs = [e for e in events(demo, "cuda_runtime") if e["name"] == "cudaStreamSynchronize"]
    assert len(syncs) == len(dtoh) == DEMO.steps
    for sync, copy in zip(syncs, dtoh, strict=True):
        assert interval(sync)[1] >= interval(copy)[1]  # the host waits for the copy


# --- truth agrees with the document -----------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        DEMO,
        GeneratorConfig(seed=3, steps=2, layers=1, world_size=2, inject=(ExposedCollective(),)),
        GeneratorConfig(seed=4, steps=2, layers=1, mode="inference", inject=(Checkpoint(),)),
    ],
)
def test_truth_unions_match_the_documents_own_events(config: GeneratorConfig) -> None:
    trace = generate(config)
    truth, works = trace.truth, events(trace, *DEVICE_CATS)
    kernels = events(trace, "kernel")
    assert truth.busy_ns == union_ns([interval(e) for e in works])
    assert truth.compute_ns == union_ns([interval(e) for e in kernels if not is_nccl(e)])
    assert truth.communication_ns == union_ns([interval(e) for e in kernels if is_nccl(e)])
    assert truth.memcpy_ns == union_ns([interval(e) for e in events(trace, "gpu_memcpy")])
    assert truth.memset_ns == union_ns([interval(e) for e in events(trace, "gpu_memset")])
    starts, ends = zip(*(interval(e) for e in works), strict=True)
    assert truth.span_ns == max(ends) - min(starts)
    assert truth.kernel_count == len(kernels)
    steps = [e for e in events(trace, "user_annotation") if e["name"].startswith("ProfilerStep#")]
    assert truth.step_durations_ns == tuple(ns(e["dur"]) for e in steps)


def assert_device_idle(trace: GeneratedTrace, start: int, end: int) -> None:
    busy = overlapping(events(trace, *DEVICE_CATS), start, end)
    assert not busy, f"device busy inside a gap: {busy[0]['name']}"


def test_demo_gaps_are_idle_and_the_host_is_where_truth_says(demo: GeneratedTrace) -> None:
    gaps = demo.truth.gaps
    assert {g.cause for g in gaps} == {"data_loader", "host_sync"}
    assert demo.truth.injected == ("data_loader", "host_sync")
    loader = [e for e in events(demo, "user_annotation") if e["name"] == LOADER]
    syncs = [e for e in events(demo, "cuda_runtime") if e["name"] == "cudaStreamSynchronize"]
    for gap in gaps:
        assert_device_idle(demo, gap.start_ns, gap.end_ns)
        if gap.cause == "data_loader":
            assert gap.location == "train.py:48"
            assert overlapping(loader, gap.start_ns, gap.end_ns)
            assert gap.dur_ns > 9_000_000  # most of the 10 ms spent loading
        else:
            assert gap.location == "train.py:57"
            assert any(interval(s)[0] <= gap.start_ns < interval(s)[1] for s in syncs)
    lost = demo.truth.lost_ns_by_cause
    assert lost["data_loader"] == sum(g.dur_ns for g in gaps if g.cause == "data_loader")
    assert len([g for g in gaps if g.cause == "data_loader"]) == DEMO.steps - 1


@pytest.mark.parametrize(
    ("injection", "cause", "host_work"),
    [
        (PageableH2DCopy(mb=64.0, line=49), "h2d_copy", {"cudaMemcpyAsync"}),
        (TinyKernels(count=40, line=52), "launch_overhead", {"aten::add", "aten::mul"}),
        (AllocatorChurn(count=3, line=54), "allocator", {"cudaFree", "cudaMalloc"}),
        (
            Checkpoint(ms=20.0, line=61, every_n_steps=1),
            "checkpoint",
            {"torch/serialization.py(944): save"},
        ),
        (
            HostSync(line=63),
            "host_sync",
            {"cudaStreamSynchronize", "logging/__init__.py(1517): info"},
        ),
    ],
)
def test_each_idle_injection_shows_at_its_line(
    injection: Any, cause: str, host_work: set[str]
) -> None:
    # A sync at the end of each step keeps the host from running ahead, as real loops do.
    sync = () if isinstance(injection, HostSync) else (HostSync(line=70),)
    trace = generate(GeneratorConfig(seed=5, steps=3, layers=1, inject=(injection, *sync)))
    gaps = [g for g in trace.truth.gaps if g.cause == cause]
    lost = trace.truth.lost_ns_by_cause[cause]
    assert gaps and lost == sum(g.dur_ns for g in gaps)
    line = injection.line
    frames = [
        e for e in events(trace, "python_function") if e["name"] == f"train.py({line}): train"
    ]
    host = [
        e
        for e in events(trace, "cuda_runtime", "python_function", "cpu_op")
        if e["name"] in host_work
    ]
    covered = 0
    for gap in gaps:
        assert gap.location == f"train.py:{line}"
        assert_device_idle(trace, gap.start_ns, gap.end_ns)
        assert overlapping(frames, gap.start_ns, gap.end_ns)
        covered += union_ns(
            [
                (max(gap.start_ns, interval(e)[0]), min(gap.end_ns, interval(e)[1]))
                for e in overlapping(host, gap.start_ns, gap.end_ns)
            ]
        )
    assert covered > 0.8 * lost  # the rest: the next launch after the host work


def test_pageable_copy_blocks_the_host_and_its_dma_comes_last() -> None:
    trace = generate(GeneratorConfig(seed=6, steps=2, layers=1, inject=(PageableH2DCopy(mb=64.0),)))
    (copy, *_) = [e for e in events(trace, "gpu_memcpy") if "Pageable -> Device" in e["name"]]
    call = next(
        e
        for e in events(trace, "cuda_runtime")
        if e["args"]["correlation"] == copy["args"]["correlation"]
    )
    assert copy["args"]["bytes"] == 64 * 2**20
    assert interval(copy)[1] == interval(call)[1]
    assert ns(call["dur"]) > 1.5 * ns(copy["dur"])  # staging dominates


def test_exposed_collective_makes_compute_wait_on_nccl_only() -> None:
    config = GeneratorConfig(
        seed=9, steps=3, layers=1, world_size=2, inject=(ExposedCollective(ms=4.0),)
    )
    trace = generate(config)
    waits = [g for g in trace.truth.gaps if g.cause == "communication_wait"]
    assert len(waits) == config.steps and {g.location for g in waits} == {"train.py:39"}
    kernels = events(trace, "kernel")
    for gap in waits:
        assert not overlapping([k for k in kernels if not is_nccl(k)], gap.start_ns, gap.end_ns)
        covering = [k for k in kernels if is_nccl(k) and interval(k)[0] <= gap.start_ns]
        assert any(interval(k)[1] >= gap.end_ns for k in covering)
        assert gap.dur_ns > 3_500_000
    assert "exposed_communication" in trace.truth.injected
    comms = [e for e in events(trace, "cpu_op") if e["name"] == "record_param_comms"]
    assert comms[0]["args"]["Collective name"] == "allreduce"
    assert comms[0]["args"]["Process Group Ranks"] == "[0, 1]"
    annotations = {e["name"] for e in events(trace, "user_annotation")}
    assert "nccl:all_reduce" in annotations
    assert {k["tid"] for k in kernels if is_nccl(k)} == {config.comm_stream}


def test_default_overlapped_collectives_cost_no_gaps() -> None:
    trace = generate(GeneratorConfig(seed=10, steps=3, layers=2, world_size=4))
    assert trace.truth.gaps == ()
    assert trace.truth.communication_ns > 0


# --- busy-time patterns -----------------------------------------------------------------------


def test_memory_bound_chain_runs_at_85_percent_of_dram_bandwidth() -> None:
    chain = MemoryBoundChain(ops=6, mb_per_op=64.0)
    trace = generate(GeneratorConfig(seed=12, steps=1, layers=1, inject=(chain,)))
    kernels = {k["args"]["External id"]: k for k in events(trace, "kernel")}
    rows = 64 * 2**20 // 2 // 1024
    ops = [
        o for o in events(trace, "cpu_op") if o["args"].get("Input Dims", [[]])[0] == [rows, 1024]
    ]
    assert [o["name"] for o in ops] == ["aten::add", "aten::mul", "aten::gelu"] * 2
    for op in ops:
        tensors = sum(1 for dims in op["args"]["Input Dims"] if dims) + 1  # inputs + output
        nbytes = tensors * rows * 1024 * 2
        expected = nbytes / (0.85 * 3352.0)
        assert ns(kernels[op["args"]["External id"]]["dur"]) == pytest.approx(expected, rel=0.03)
    assert trace.truth.injected == ("memory_bound",)


def test_fp32_gemms_use_non_tensor_core_kernels() -> None:
    base = GeneratorConfig(seed=13, steps=1, layers=1)
    fp32 = generate(GeneratorConfig(seed=13, steps=1, layers=1, inject=(Fp32Gemm(share=1.0),)))
    names = {k["name"] for k in events(fp32, "kernel")}
    assert not any("xmma" in n or "s16816" in n for n in names)
    assert {"ampere_sgemm_128x64_tn", "ampere_sgemm_128x64_nn", "volta_sgemm_128x64_nn"} <= names
    mms = [o for o in events(fp32, "cpu_op") if o["name"] == "aten::mm"]
    assert mms and all(o["args"]["Input type"] == ["float", "float"] for o in mms)
    assert fp32.truth.compute_ns > 4 * generate(base).truth.compute_ns
    assert fp32.truth.injected == ("fp32_gemm",)


def test_batch_size_scales_gemms_sublinearly_and_bytes_linearly() -> None:
    def gemm_ns_and_h2d_bytes(batch: int) -> tuple[int, int]:
        trace = generate(GeneratorConfig(seed=14, steps=1, layers=1, batch_size=batch))
        gemms = [k for k in events(trace, "kernel") if "gemm" in k["name"]]
        h2d = [m for m in events(trace, "gpu_memcpy") if "HtoD" in m["name"]]
        return sum(ns(k["dur"]) for k in gemms), sum(m["args"]["bytes"] for m in h2d)

    small, large = gemm_ns_and_h2d_bytes(8), gemm_ns_and_h2d_bytes(16)
    assert large[1] == 2 * small[1]
    assert large[0] / small[0] == pytest.approx(2**0.9, rel=0.03)


# --- modes, switches, jobs --------------------------------------------------------------------


def test_inference_mode_runs_forward_only() -> None:
    trace = generate(GeneratorConfig(seed=15, steps=2, layers=1, mode="inference"))
    names = {e["name"] for e in events(trace, "cpu_op", "user_annotation")}
    assert "aten::linear" in names and "aten::argmax" in names
    assert not any("Backward" in n or n.startswith("Optimizer") for n in names)


def test_shapes_and_stacks_can_be_off_without_changing_the_schedule() -> None:
    on = generate(SMALL)
    off = generate(
        GeneratorConfig(seed=11, steps=3, layers=2, record_shapes=False, with_stack=False)
    )
    assert not events(off, "python_function")
    assert all("Input Dims" not in o["args"] for o in events(off, "cpu_op"))
    assert "record_shapes" not in off.document and "with_stack" not in off.document
    assert off.truth == on.truth


def test_job_ranks_devices_clocks_and_a_straggler() -> None:
    config = GeneratorConfig(seed=16, steps=3, layers=1, inject=(Straggler(rank=2, extra_ms=3.0),))
    job = generate_job(config, world_size=4)
    assert [t.document["distributedInfo"]["rank"] for t in job] == [0, 1, 2, 3]
    assert all(t.document["distributedInfo"]["world_size"] == 4 for t in job)
    for rank, trace in enumerate(job):
        assert {k["pid"] for k in events(trace, "kernel")} == {rank}
        assert trace.truth.device == rank
    origins = {ns(t.document["traceEvents"][-4]["ts"]) for t in job}  # the "Trace" span
    assert len(origins) == 4 and max(origins) - min(origins) < 20_000
    nccl = [[ns(k["dur"]) for k in events(t, "kernel") if is_nccl(k)] for t in job]
    assert len({len(n) for n in nccl}) == 1
    assert all(sum(nccl[r]) > sum(nccl[2]) + 2_000_000 for r in (0, 1, 3))
    assert not [g for g in job[2].truth.gaps if g.cause == "communication_wait"]
    for rank in (0, 1, 3):
        waits = [g for g in job[rank].truth.gaps if g.cause == "communication_wait"]
        assert waits and {g.location for g in waits} == {"train.py:38"}
    assert all("straggler" in t.truth.injected for t in job)


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="mode"):
        GeneratorConfig(mode="serving")
    with pytest.raises(ValueError, match="rank"):
        GeneratorConfig(rank=2, world_size=2)
    with pytest.raises(ValueError, match="unknown device"):
        GeneratorConfig(device="NVIDIA T4")
    with pytest.raises(ValueError, match="straggler"):
        generate_job(GeneratorConfig(inject=(Straggler(rank=4),)), world_size=4)


def test_gpuscope_reader_reads_what_the_generator_writes(tmp_path: Path) -> None:
    from gpuscope.model import Kind
    from gpuscope.readers import load

    trace = generate(GeneratorConfig(seed=17, steps=2, layers=1, world_size=2))
    job = load(trace.write(tmp_path / "rank0.json.gz"))
    read = job.traces[0]
    assert (read.rank, read.world_size, read.schema) == (0, 2, "kineto-float-us")
    assert [s.name for s in read.steps] == ["ProfilerStep#0", "ProfilerStep#1"]
    assert read.devices[0].name == "NVIDIA H100 80GB HBM3" and read.devices[0].num_sms == 132
    kernels = read.events.of_kind(Kind.KERNEL)
    assert int(kernels.sum()) == trace.truth.kernel_count
    assert (read.events.link[kernels] >= 0).all()


def test_shipped_demo_is_current_and_small() -> None:
    script = Path(__file__).resolve().parent.parent / "scripts" / "make_examples.py"
    spec = importlib.util.spec_from_file_location("make_examples", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    shipped = module.EXAMPLES / module.DEMO_NAME
    expected = generate(module.demo_config()).to_bytes(compress=True)
    assert shipped.read_bytes() == expected, "run: python scripts/make_examples.py"
    assert len(expected) < 300 * 1024
