"""Advice that fits the program and the evidence (issue 28, class 7): runtime terms for programs
with no framework operators, nothing recommended that the trace shows already done, refusals that
read the capture's own settings.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from corpus import corpus
from gpuscope import diagnose, load
from gpuscope.errors import EmptyTraceError
from gpuscope.testing import generator as gen
from gpuscope.testing.config import GeneratorConfig, HostSync

_PYTORCH_WORDS = ("torch", ".item()", "DataLoader", "with_stack", "autocast")


def _runtime_only(document: dict[str, Any]) -> dict[str, Any]:
    """The same program as a CUDA C program's trace would show it: runtime calls and device
    work, no framework operators or Python frames."""
    kept = [e for e in document["traceEvents"] if e.get("cat") not in ("cpu_op", "python_function")]
    return {**document, "traceEvents": kept}


def test_a_program_with_no_framework_operators_gets_runtime_advice(tmp_path: Path) -> None:
    document = gen.generate(GeneratorConfig(seed=5, steps=4, inject=(HostSync(),))).document
    with_ops = tmp_path / "pytorch.json"
    with_ops.write_text(json.dumps(document))
    runtime = tmp_path / "runtime.json"
    runtime.write_text(json.dumps(_runtime_only(document)))
    framework_fix = next(f for f in diagnose(load(with_ops)).findings if f.cause == "host_sync")
    runtime_fix = next(f for f in diagnose(load(runtime)).findings if f.cause == "host_sync")
    assert "`.item()`" in framework_fix.fix
    assert "cudaStreamSynchronize" in runtime_fix.fix
    assert not any(w in runtime_fix.fix for w in _PYTORCH_WORDS), runtime_fix.fix


@pytest.mark.parametrize(
    "relative",
    [
        "nsys/pipit/a100_saxpy_mpi_rank0_schema2.9.sqlite",  # MPI + CUDA C
        "nsys/pipit/a100_cloverleaf.sqlite",  # CUDA C mini-app
        "wild/nsys_t4_uvm_softmax.sqlite",  # CUDA C++ on managed memory
    ],
)
def test_cuda_c_programs_get_no_pytorch_advice(relative: str) -> None:
    d = diagnose(load(corpus(relative)))
    assert d.findings
    for f in d.findings:
        assert not any(w in f.fix for w in _PYTORCH_WORDS), (f.cause, f.fix)


def test_eager_work_between_graph_replays_is_told_to_join_the_graph() -> None:
    """The replays of a captured graph each start with an eager input copy: the gaps sit before
    that copy, which the graph does not hold. Capturing it removes them; "already a graph" would
    be wrong for it."""
    d = diagnose(load(corpus("wild/a100_cudagraph_capture_replay.json.gz")))
    f = next(f for f in d.findings if f.cause == "launch_overhead")
    assert f.fix.startswith("Part of the step already replays as a CUDA/HIP graph")
    assert "already launched as CUDA/HIP graphs" not in f.fix


_DEVICE: dict[str, Any] = {"device": 0}


def _copies_on_their_own_stream() -> dict[str, Any]:
    """Pinned copies on stream 9, GEMMs on stream 7 that need them: nothing runs beside the
    copies, though they already have a stream of their own."""
    events: list[dict[str, Any]] = []
    t, corr = 0.0, 0
    for _ in range(3):
        corr += 1
        events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1,
             "ts": t, "dur": 8, "args": {"correlation": corr}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0,
             "tid": 9, "ts": t + 10, "dur": 2000,
             "args": {"correlation": corr, "bytes": 50 * 2**20, "stream": 9, **_DEVICE}},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamWaitEvent", "pid": 1, "tid": 1,
             "ts": t + 10, "dur": 3, "args": {}},
        ]  # fmt: skip
        corr += 1
        events += [
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
             "ts": t + 14, "dur": 5, "args": {"correlation": corr}},
            {"ph": "X", "cat": "kernel", "name": "ampere_bf16_s16816gemm_bf16_128x128_tn",
             "pid": 0, "tid": 7, "ts": t + 2012, "dur": 1000,
             "args": {"correlation": corr, "stream": 7, **_DEVICE}},
        ]  # fmt: skip
        t += 3020
    return {
        "traceEvents": events,
        "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "numSms": 108}],
    }


def test_copies_already_on_a_side_stream_are_not_told_to_use_one(tmp_path: Path) -> None:
    path = tmp_path / "side.json"
    path.write_text(json.dumps(_copies_on_their_own_stream()))
    d = diagnose(load(path))
    f = next(f for f in d.findings if f.cause == "h2d_copy")
    assert f.fix.startswith("The copies already run on a stream of their own")
    assert "side stream" not in f.fix


def test_a_capture_with_cuda_tracing_on_and_no_gpu_work_says_so(tmp_path: Path) -> None:
    """The capture traced CUDA (its META_DATA_CAPTURE says so) and recorded no kernel, copy or
    memset: profiling with --trace=cuda would change nothing; the capture missed the GPU part."""
    export = tmp_path / "capture.sqlite"
    shutil.copyfile(corpus("nsys/weatherbench2/rtx4060_no_kernel_table.sqlite"), export)
    with sqlite3.connect(export) as db:
        db.execute("DROP TABLE CUPTI_ACTIVITY_KIND_MEMSET")
    with pytest.raises(EmptyTraceError) as raised:
        load(export)
    message = str(raised.value)
    assert "CUDA tracing was on" in message and "--trace=cuda" not in message
    assert "--capture-range=cudaProfilerApi" in message
