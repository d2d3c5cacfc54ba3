"""The 2021 Kineto schema read whole: steps recorded as operators, and the ``Call stack`` argument.

2021 traces (PyTorch 1.8-1.10) write ``ProfilerStep#N`` with category ``Operator`` (a CPU op, not
a user annotation) and, profiled with ``with_stack=True``, the Python stack of each operator as an
argument, innermost frame first: ``train.py(42): train_step;.../module.py(889): _call_impl``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from corpus import corpus
from gpuscope.analyses.host import _stack_user_frame
from gpuscope.compare.diff import summarize
from gpuscope.diagnosis import diagnose
from gpuscope.model import Kind
from gpuscope.readers import _scan, kineto, load

V100_2021 = "kineto/kineto-2021/v100_tiny_oldest_schema.json"


def test_the_2021_corpus_trace_has_its_step_from_an_operator_event() -> None:
    trace = load(corpus(V100_2021)).traces[0]
    # {"cat": "Operator", "name": "ProfilerStep#2", "ts": 1621401187223358, "dur": 13410}
    assert [(s.name, s.number) for s in trace.steps] == [("ProfilerStep#2", 2)]
    assert trace.steps[0].start_ns == 1_621_401_187_223_358_000
    assert trace.steps[0].dur_ns == 13_410_000


def test_the_2021_corpus_trace_has_per_step_figures_and_a_diff() -> None:
    job = load(corpus(V100_2021))
    device = diagnose(job).devices[0]
    assert [s.number for s in device.steps] == [2]
    # 30 kernels and 2 copies: 0.4% of the step (HTA's "tiny model, GPU ~0.4% busy").
    assert device.steps[0].busy_pct == pytest.approx(0.4, abs=0.1)
    # What `gpuscope diff` compares: one step's figures (no steps, nothing per step).
    summary = summarize(diagnose(job))
    assert summary.steps == 1
    # Timed on the device (issue #16): from the host's start of the step to the end of its last
    # device work, 13.14 ms of the 13.41 ms host range (the host's Python tail comes after).
    assert summary.per_step["step_time_ns"] == [pytest.approx(13_144_000, rel=0.01)]


CALL_STACK_SYNC = (
    "/usr/lib/python3.8/site-packages/torch/autograd/grad_mode.py(27): decorate_context;"
    "/home/u/proj/train.py(47): train_step;/home/u/proj/train.py(60): <module>"
)
CALL_STACK_MM = (
    "/home/u/proj/model.py(12): forward;"
    "/usr/lib/python3.8/site-packages/torch/nn/modules/module.py(889): _call_impl;"
    "/home/u/proj/train.py(44): train_step;/home/u/proj/train.py(60): <module>"
)


def _document_2021(steps: int) -> dict[str, Any]:
    """A 2021-schema trace: per step, a matmul launched from model.py:12, then a 5 ms
    synchronisation issued at train.py:47 while the GPU has nothing to do."""
    events: list[dict[str, Any]] = []
    for n in range(steps):
        s = 1_000_000 + 10_000 * n  # µs
        host = {"pid": 24572, "tid": "24572"}
        events += [
            {"ph": "X", "cat": "Operator", "name": f"ProfilerStep#{n + 1}", **host,
             "ts": s, "dur": 10_000, "args": {"Device": 24572, "External id": 100 * n}},
            {"ph": "X", "cat": "Operator", "name": "aten::mm", **host, "ts": s + 10, "dur": 50,
             "args": {"External id": 100 * n + 1, "Call stack": CALL_STACK_MM}},
            {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", **host, "ts": s + 20,
             "dur": 5, "args": {"correlation": 100 * n + 1, "external id": 100 * n + 1}},
            {"ph": "X", "cat": "Kernel", "name": "volta_sgemm_128x32_nt", "pid": 0,
             "tid": "stream 7", "ts": s + 30, "dur": 100,
             "args": {"device": 0, "stream": 7, "correlation": 100 * n + 1,
                      "external id": 100 * n + 1}},
            {"ph": "X", "cat": "Operator", "name": "aten::_local_scalar_dense", **host,
             "ts": s + 200, "dur": 5_100,
             "args": {"External id": 100 * n + 2, "Call stack": CALL_STACK_SYNC}},
            {"ph": "X", "cat": "Runtime", "name": "cudaStreamSynchronize", **host,
             "ts": s + 210, "dur": 5_000, "args": {"correlation": 100 * n + 2}},
        ]  # fmt: skip
    return {
        "schemaVersion": 1,
        "computeProperties": [{"id": 0, "name": "Tesla V100-SXM2-32GB", "computeMajor": 7,
                               "computeMinor": 0, "numSms": 80}],
        "traceEvents": events,
    }  # fmt: skip


@pytest.fixture
def trace_2021(tmp_path: Path) -> Path:
    path = tmp_path / "old.json"
    path.write_text(json.dumps(_document_2021(4)))
    return path


def test_call_stacks_are_kept_by_both_readers_alike(trace_2021: Path) -> None:
    whole = kineto.read(trace_2021, trace_2021.read_bytes())
    stacks = {
        whole.name(r): a["call_stack"] for r, a in whole.events.extra.items() if "call_stack" in a
    }
    assert stacks == {"aten::mm": CALL_STACK_MM, "aten::_local_scalar_dense": CALL_STACK_SYNC}
    assert [s.number for s in whole.steps] == [1, 2, 3, 4]
    if _scan.scanner_built():
        scanned = kineto._read_scanned(trace_2021, _scan.Scan(trace_2021))
        assert scanned.events.extra == whole.events.extra
        assert scanned.steps == whole.steps
        assert np.array_equal(scanned.events.kind, whole.events.kind)


def test_the_call_stack_gives_the_users_line_of_an_idle_gap(trace_2021: Path) -> None:
    job = load(trace_2021)
    assert not np.any(job.traces[0].events.kind == Kind.PYTHON)  # no python_function events
    device = diagnose(job).devices[0]
    sync = next(c for c in device.idle.causes if c.cause == "host_sync")
    # The frame of the user's code nearest the op, past torch's decorator.
    assert sync.locations[0].location == "/home/u/proj/train.py:47 (train_step)"
    # One gap per step: the last one, after the last kernel, is inside the last profiled step.
    assert (sync.locations[0].gaps, sync.locations[0].lost_ns) == (4, 4 * 5_100_000)
    assert [s.number for s in device.steps] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("stack", "frame"),
    [
        (CALL_STACK_MM, "/home/u/proj/model.py:12 (forward)"),
        (CALL_STACK_SYNC, "/home/u/proj/train.py:47 (train_step)"),
        # Writers that break the line after each separator.
        ("torch/nn/functional.py(1): relu;\r\nnet.py(8): forward", "net.py:8 (forward)"),
        ("/usr/lib/python3.8/threading.py(870): run", None),
        ("", None),
    ],
)
def test_the_user_frame_of_a_call_stack(stack: str, frame: str | None) -> None:
    assert _stack_user_frame(stack) == frame
