"""The rocprofv3 (rocprofiler-sdk) JSON reader: kernel dispatches, memory copies and HIP calls
into the same model as Kineto's, on the corpus file and on a small document built here."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from corpus import corpus
from gpuscope import diagnose
from gpuscope.errors import EmptyTraceError
from gpuscope.model import CopyDirection, Kind
from gpuscope.readers import load

MI350X = "rocprof/mi350x_train_rocprofv3.json.gz"


def test_corpus_file_reads_every_kernel_dispatch() -> None:
    job = load(corpus(MI350X))
    (trace,) = job.traces
    ev = trace.events
    assert trace.format == "rocprofv3"
    assert int(ev.of_kind(Kind.KERNEL).sum()) == 43_915  # the MANIFEST's count
    assert len(trace.devices) == 8 and trace.devices[0].name == "AMD Instinct MI350X"
    assert trace.device_ids == [0]  # one process, all of its work on its first GPU
    assert np.all(np.diff(ev.start_ns) >= 0) and np.all(ev.dur_ns >= 0)
    names = [trace.name(int(r)) for r in np.flatnonzero(ev.of_kind(Kind.KERNEL))]
    assert sum(n.startswith("ncclDevKernel_Generic") for n in names) == 1_310
    result = diagnose(job)
    assert "exposed_communication" in {f.cause for f in result.findings}


def _record(kind: int, op: int, start: int, end: int, corr: int, **more: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "operation": op,
        "thread_id": 7,
        "correlation_id": {"internal": corr, "external": 0},
        "start_timestamp": start,
        "end_timestamp": end,
        **more,
    }


def _document(**records: list[dict[str, Any]]) -> dict[str, Any]:
    gpu = {"type": 2, "product_name": "AMD Instinct MI300X", "name": "gfx942", "cu_count": 304}
    kinds = [{"kind": "NONE", "operations": []}] * 5 + [
        {"kind": "HIP_RUNTIME_API", "operations": ["hipMemcpyAsync", "hipLaunchKernel"]},
        *[{"kind": "x", "operations": []}] * 4,
        {
            "kind": "MEMORY_COPY",
            "operations": [
                "MEMORY_COPY_NONE",
                "MEMORY_COPY_HOST_TO_HOST",
                "MEMORY_COPY_HOST_TO_DEVICE",
                "MEMORY_COPY_DEVICE_TO_HOST",
                "MEMORY_COPY_DEVICE_TO_DEVICE",
            ],
        },
        {"kind": "KERNEL_DISPATCH", "operations": ["NONE", "ENQUEUE", "COMPLETE"]},
    ]
    process = {
        "metadata": {"pid": 42, "command": ["python", "train.py"]},
        "agents": [
            {"type": 1, "id": {"handle": 1}, "product_name": "CPU"},
            {**gpu, "id": {"handle": 2}, "logical_node_type_id": 0},
            {**gpu, "id": {"handle": 3}, "logical_node_type_id": 1},
        ],
        "strings": {"buffer_records": kinds},
        "kernel_symbols": [{"kernel_id": 0, "demangled_kernel_name": "void gemm<float>(int)"}],
        "buffer_records": records,
    }
    return {"rocprofiler-sdk-tool": [process]}


def test_copies_calls_and_kernels_are_joined(tmp_path: Path) -> None:
    dispatch = {
        "agent_id": {"handle": 3},
        "queue_id": {"handle": 9},
        "kernel_id": 0,
        "workgroup_size": {"x": 256, "y": 1, "z": 1},
        "grid_size": {"x": 1024, "y": 2, "z": 1},
    }
    doc = _document(
        hip_api=[_record(5, 0, 1_000, 1_500, 1), _record(5, 1, 2_000, 2_100, 2)],
        memory_copy=[
            _record(
                10,
                2,
                1_200,
                1_900,
                1,
                src_agent_id={"handle": 1},
                dst_agent_id={"handle": 3},
                bytes=4096,
                stream_id={"handle": 0},
            ),
            _record(
                10,
                4,
                3_000,
                3_100,
                3,
                src_agent_id={"handle": 2},
                dst_agent_id={"handle": 3},
                bytes=64,
                stream_id={"handle": 0},
            ),
        ],
        kernel_dispatch=[
            _record(11, 2, 2_200, 2_700, 2, dispatch_info=dispatch, stream_id={"handle": 5}),
            _record(11, 2, None, None, 4, dispatch_info=dispatch),  # type: ignore[arg-type]
        ],
    )
    path = tmp_path / "run.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    (trace,) = load(path).traces
    ev = trace.events
    kinds = [Kind(int(k)) for k in ev.kind]
    assert kinds == [Kind.RUNTIME, Kind.MEMCPY, Kind.RUNTIME, Kind.KERNEL, Kind.MEMCPY]
    assert [trace.name(i) for i in range(5)] == [
        "hipMemcpyAsync",
        "Memcpy HtoD",
        "hipLaunchKernel",
        "void gemm<float>(int)",
        "Memcpy PtoP",
    ]
    assert ev.copy_direction[1] == CopyDirection.H2D and ev.bytes[1] == 4096
    assert ev.copy_direction[4] == CopyDirection.P2P
    assert ev.device.tolist() == [-1, 1, -1, 1, 1] and ev.stream[3] == 5
    assert ev.link.tolist()[:4] == [1, 0, 3, 2]  # each call and the work it launched
    assert ev.grid_blocks[3] == 8 and ev.block_threads[3] == 256  # 2048 work-items / 256
    assert trace.warnings == [f"{path}: 1 records without usable start and end timestamps skipped"]


def test_a_rocprofv3_file_without_device_work_says_what_to_record(tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    path.write_text(json.dumps(_document(hip_api=[_record(5, 0, 1, 2, 1)])))
    with pytest.raises(EmptyTraceError, match="--kernel-trace"):
        load(path)
