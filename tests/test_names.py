"""Names people can read: kernel names cut to what tells them apart, paths cut from the left."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from corpus import corpus
from gpuscope import load
from gpuscope.model import Kind
from gpuscope.names import short_kernel_name, short_kernel_names, short_path


def test_demangled_kernel_names_keep_the_function_and_its_template_arguments() -> None:
    cases = {
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, c10::BFloat16, float,"
        " float, at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(c10::BFloat16*,"
        " c10::BFloat16 const*, int)": "cunn_SoftMaxForward<4, BFloat16, float, float,"
        " LogSoftMaxForwardEpilogue>",
        "void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16_copy_kernel_cuda("
        "at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >(int, "
        "at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}, "
        "std::array<char*, 2ul>)": "vectorized_elementwise_kernel<4, bfloat16_copy_kernel_cuda,"
        " array<char*, 2ul>>",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
        "at::native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()"
        "(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4> >"
        "(at::native::ReduceOp<float>)": "reduce_kernel<512, 1, ReduceOp<float,"
        " func_wrapper_t<float, sum_functor<float, float, float>>, unsigned int, float, 4>>",
        "ncclDevKernel_Generic_1(ncclDevKernelArgsStorage<4096ul>) [clone .kd]": (
            "ncclDevKernel_Generic_1"
        ),
        "__amd_rocclr_copyBuffer.kd": "__amd_rocclr_copyBuffer",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": (
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
        ),
        "triton_poi_fused_add_0": "triton_poi_fused_add_0",
    }
    for name, short in cases.items():
        assert short_kernel_name(name) == short


def test_short_names_stay_distinct() -> None:
    a = "void f<int>(int)::{lambda(float)#1}"
    lambdas = [
        "void at::native::k<at::native::g(at::T&)::{lambda(float)#1}>(int)",
        "void at::native::k<at::native::g(at::T&)::{lambda(float)#2}>(int)",
    ]
    short = short_kernel_names([*lambdas, a])
    assert short[lambdas[0]] != short[lambdas[1]]
    for trace in load(
        corpus("kineto/tracelens/mi300x_sglang_qwen3-8b_prefilldecode.json.gz")
    ).traces:
        kernels = {trace.name(int(r)) for r in np.flatnonzero(trace.events.of_kind(Kind.KERNEL))}
        shortened = short_kernel_names(kernels)
        assert len(set(shortened.values())) == len(kernels)
        assert not any(
            s.startswith("void ") or "(anonymous namespace)" in s for s in shortened.values()
        )


def test_long_paths_are_cut_from_the_left_keeping_the_file_name() -> None:
    where = (
        "/home/me/.venv/lib/python3.11/site-packages/torch/nn/modules/module.py:1751 (_call_impl)"
    )
    assert short_path(where, 200) == where
    cut = short_path(where, 48)
    assert cut == "…/torch/nn/modules/module.py:1751 (_call_impl)" and len(cut) <= 48
    assert short_path("/a/very_long_file_name_that_does_not_fit.py:12", 20).endswith("fit.py:12")
    assert len(short_path("/a/very_long_file_name_that_does_not_fit.py:12", 20)) == 20


def test_the_demo_report_lists_kernels_by_short_names_in_terminal_and_html() -> None:
    from rich.console import Console

    from gpuscope import diagnose
    from gpuscope.render import html, terminal

    demo = Path(__file__).parent.parent / "src/gpuscope/examples/demo_train.json.gz"
    diagnosis = diagnose(load(demo))
    console = Console(record=True, width=200)
    terminal.render(diagnosis, console)
    text = console.export_text()
    assert "void at::native::(anonymous namesp" not in text
    assert "multi_tensor_apply_kernel<TensorListMetadata<3>," in text
    page = html.render(diagnosis)
    shown = re.sub(r"title='[^']*'", "", page)  # the whole name stays, as the cell's tooltip
    assert "(anonymous namespace)" not in shown and "(anonymous namespace)" in page
    assert (
        ">multi_tensor_apply_kernel&lt;TensorListMetadata&lt;3&gt;, TernaryOpScalarFunctor" in page
    )


def test_the_fleet_report_cuts_long_job_paths_from_the_left() -> None:
    from rich.console import Console

    from gpuscope import fleet
    from gpuscope.render.fleet import render_html, render_terminal

    path = "/mnt/shared/experiments/2025/team-vision/resnet152-sweep/lr-3e-4/run-0042/rank0.json.gz"
    table = fleet.FleetTable([fleet.JobRow(path, 1, 1, "ok", lost_gpu_hours=1.0)])
    console = Console(record=True, width=200)
    render_terminal(fleet.summarize(table), console)
    text = console.export_text()
    assert "│ …/resnet152-sweep/lr-3e-4/run-0042/rank0.json.gz │" in text and path not in text
    page = render_html(fleet.summarize(table))
    assert f"title='{path}'>…/experiments/2025/team-vision/resnet152-sweep/" in page
