"""What the real traces show, pinned: verdicts, causes and locations on the corpus."""

from __future__ import annotations

import pytest

from corpus import corpus
from gpuscope import diagnose, load
from gpuscope.analyses.attribution import CAUSES

HOST_CAUSES = {"host_sync", "data_loader", "h2d_copy", "launch_overhead", "allocator", "cpu_other"}


def test_bert_small_is_host_bound_with_the_python_frames_that_cost_most() -> None:
    d = diagnose(load(corpus("kineto/tracelens/mi300x_bert-small_inference.json.gz")))
    assert d.verdict.bound == "host"
    assert d.verdict.idle_pct > 80
    top = d.findings[0]
    assert top.pattern == "ghost_gpu" and top.cause in HOST_CAUSES
    assert top.cause == "launch_overhead"
    assert top.locations[0].location.startswith("transformers/models/bert/modeling_bert.py:")
    # Over its one 4.01 ms ProfilerStep (the host work before the first kernel included).
    assert d.verdict.summary.startswith("host-bound: the GPU is idle 90%")
    assert d.verdict.gpu_hour_usd is not None  # MI300X is in the facts table


def test_vllm_decode_in_one_hip_graph_is_not_host_bound() -> None:
    d = diagnose(load(corpus("kineto/tracelens/mi300x_vllm_decode_hipgraph.json.gz")))
    assert d.verdict.bound != "host"
    assert d.verdict.idle_pct < 1
    assert d.devices[0].facts is None  # empty device name: unknown, never guessed
    assert d.verdict.gpu_hour_usd is None and "--gpu-hour-usd" in d.verdict.price_source


def test_v100_sgemm_kernels_are_fp32_gemms_not_on_tensor_cores() -> None:
    d = diagnose(load(corpus("kineto/hta/df_index_resolver/df_index_resolver.json.gz")))
    fp32 = next(f for f in d.findings if f.cause == "fp32_gemm")
    bounds = d.devices[0].bounds
    assert bounds.fp32_gemm_ns == bounds.gemm_ns > 0  # every GEMM is volta_sgemm_*
    # V100: FP16 tensor cores at 125 TFLOP/s vs 15.7 FP32: the saving is 87% of the GEMM time.
    assert fp32.lost_ns == pytest.approx(bounds.fp32_gemm_ns * (1 - 15.7 / 125), rel=0.01)
    assert "autocast" in fp32.fix


def test_dlrm_ranks_lose_time_to_communication_mostly_waiting_for_a_straggler() -> None:
    d = diagnose(load(corpus("kineto/param-dlrm-8rank")))
    comm = {f.cause: f for f in d.findings if f.pattern == "latency_mirage"}
    assert {"exposed_communication", "straggler", "collective_wait"} <= comm.keys()
    # Waiting for the late rank is taken out of exposed communication, not counted twice.
    assert sum(f.share_pct for f in comm.values()) > 20
    assert comm["straggler"].share_pct > comm["exposed_communication"].share_pct
    assert "rank 7" in comm["straggler"].evidence[0]
    assert d.verdict.world_size == 8
    for f in comm.values():
        # One profiled step per rank: a per-day figure would extrapolate a single step. Dollars
        # price a predicted saving: waiting for a peer with no edit of its own has none.
        assert f.cost_usd_per_day is None
        assert (f.cost_usd_per_gpu_hour is not None) == (f.prediction is not None), f.cause


@pytest.mark.parametrize(
    "relative",
    [
        "kineto/hta/df_index_resolver/df_index_resolver.json.gz",
        "kineto/param-dlrm-8rank",
        "kineto/tracelens/b200_vllm_moe_fp8_rank0of8.json.gz",
        "kineto/tracelens/h100_qwen1.5-0.5b_inference.json.gz",
        "kineto/tracelens/mi300x_resnet_ddp_rank0of8.json.gz",
        "kineto/kineto-2021/v100_tiny_oldest_schema.json",
        "kineto/hta/mtia_inference_trace/mtia_inference_rank_0.json.gz",
    ],
)
def test_findings_never_count_a_nanosecond_twice(relative: str) -> None:
    d = diagnose(load(corpus(relative)))
    span = sum(dev.temporal.span_ns for dev in d.devices)
    assert sum(f.lost_ns for f in d.findings) <= span
    for dev in d.devices:
        assert sum(c.lost_ns for c in dev.idle.causes) == dev.temporal.idle_ns
        assert {c.cause for c in dev.idle.causes} <= set(CAUSES)
