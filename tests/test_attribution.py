"""Pieces of idle attribution checked against brute force."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscope import diagnose, load
from gpuscope.analyses.attribution import CAUSES
from gpuscope.analyses.host import HostIndex, _frame_location, _is_user_frame
from gpuscope.analyses.intervals import innermost_at
from gpuscope.model import Events, Kind, Trace


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 100), st.integers(0, 50)), min_size=0, max_size=40),
    st.lists(st.integers(-5, 160), min_size=1, max_size=20),
)
def test_innermost_at_is_the_latest_started_row_still_running(
    raw: list[tuple[int, int]], times: list[int]
) -> None:
    raw.sort()
    starts = np.array([s for s, _ in raw], dtype=np.int64)
    ends = np.array([s + d for s, d in raw], dtype=np.int64)
    rows = np.arange(len(raw), dtype=np.int64)
    t = np.array(times, dtype=np.int64)
    got = innermost_at(starts, ends, rows, t)
    for k, when in enumerate(times):
        running = [i for i in range(len(raw)) if starts[i] <= when <= ends[i]]
        assert got[k] == (max(running) if running else -1)


NAMES = [
    "aten::mm",
    "cudaLaunchKernel",
    "train.py(12): step",
    "torch/nn/modules/module.py(3): _call_impl",
    "my/model.py(7): forward",
    "site-packages/lib.py(1): h",
    "json/__init__.py(2): dumps",
]


def _reference_location(trace: Trace, row: int) -> str:
    """HostIndex.location one row at a time, as first written: the user's frame running at the
    row's start on its thread (walking out at most 256 frames), else the innermost of the 64
    CPU ops that started last, else the row's own name; a user frame's row is its own place."""
    ev = trace.events
    if ev.kind[row] == Kind.PYTHON and _is_user_frame(trace.name(row)):
        return _frame_location(trace.name(row))  # a frame of the user's code is its own location
    pid, tid, t = int(ev.pid[row]), int(ev.tid[row]), int(ev.start_ns[row])
    python = ev.kind == Kind.PYTHON
    frames = np.flatnonzero(python & (ev.pid == pid) & (ev.tid == tid))
    if frames.size == 0:
        frames = np.flatnonzero(python)
    by_id = dict(zip(ev.python_id[python].tolist(), np.flatnonzero(python).tolist(), strict=True))
    i = int(np.searchsorted(ev.start_ns[frames], t, side="right")) - 1
    if frames.size and i >= 0:
        frame: int | None = int(frames[i])
        for _ in range(256):
            assert frame is not None
            name = trace.name(frame)
            if int(ev.end_ns[frame]) >= t and _is_user_frame(name):
                return _frame_location(name)
            frame = by_id.get(int(ev.python_parent_id[frame]))
            if frame is None:
                break
    ops = np.flatnonzero((ev.kind == Kind.CPU_OP) & (ev.pid == pid) & (ev.tid == tid))
    i = int(np.searchsorted(ev.start_ns[ops], t, side="right")) - 1
    for j in range(i, max(i - 64, -1), -1):
        if ev.end_ns[ops[j]] >= t:
            return trace.name(int(ops[j]))
    return trace.name(row)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([Kind.CPU_OP, Kind.RUNTIME, Kind.PYTHON]),
            st.integers(0, 300),  # start
            st.integers(0, 120),  # duration
            st.integers(1, 2),  # thread
            st.integers(0, len(NAMES) - 1),
            st.integers(-1, 8),  # Python id
            st.integers(-1, 8),  # parent's Python id
        ),
        min_size=1,
        max_size=120,
    )
)
def test_locations_resolve_rows_as_one_at_a_time(
    raw: list[tuple[Kind, int, int, int, int, int, int]],
) -> None:
    raw.sort(key=lambda r: r[1])
    n = len(raw)

    def column(i: int) -> np.ndarray:
        return np.array([r[i] for r in raw], dtype=np.int64)

    columns = {
        "kind": np.array([int(r[0]) for r in raw], dtype=np.uint8),
        "start_ns": column(1),
        "dur_ns": column(2),
        "pid": np.ones(n, dtype=np.int64),
        "tid": column(3),
        "name_id": column(4).astype(np.int32),
        "python_id": column(5),
        "python_parent_id": column(6),
    }
    events = Events.from_columns(n, columns, {})
    trace = Trace("t", "kineto", "test", None, None, {}, NAMES, events, [])
    host = HostIndex(trace, np.zeros(n, dtype=np.uint8), (1, 1))
    rows = np.arange(n, dtype=np.int64)[::-1]
    assert host.locations(rows) == [_reference_location(trace, int(r)) for r in rows]
    assert host.location(0) == _reference_location(trace, 0)


def test_op_names_look_back_at_most_64_ops() -> None:
    # One long op, then 70 short ones, and two launches: one after 31 ops have started (the long
    # op is among the last 64), one after all 71 (it is not: the launch keeps its own name).
    starts = [0] + [10 * i for i in range(1, 71)] + [305, 2_000]
    starts.sort()
    kinds = [Kind.RUNTIME if s in (305, 2_000) else Kind.CPU_OP for s in starts]
    names = ["outer", "inner", "launch"]
    name_id = [
        0 if s == 0 else 2 if k is Kind.RUNTIME else 1 for s, k in zip(starts, kinds, strict=True)
    ]
    n = len(starts)
    columns = {
        "kind": np.array([int(k) for k in kinds], dtype=np.uint8),
        "start_ns": np.array(starts, dtype=np.int64),
        "dur_ns": np.array([10_000 if s == 0 else 2 for s in starts], dtype=np.int64),
        "pid": np.ones(n, dtype=np.int64),
        "tid": np.ones(n, dtype=np.int64),
        "name_id": np.array(name_id, dtype=np.int32),
    }
    events = Events.from_columns(n, columns, {})
    trace = Trace("t", "kineto", "test", None, None, {}, names, events, [])
    host = HostIndex(trace, np.zeros(n, dtype=np.uint8), (1, 1))
    launches = np.flatnonzero(events.kind == Kind.RUNTIME).astype(np.int64)
    assert host.locations(launches) == ["outer", "launch"]
    assert [_reference_location(trace, int(r)) for r in launches] == ["outer", "launch"]


def _drain_trace(path: Path, with_launches: bool) -> Path:
    """One step: 20 kernels queued up front (their launches recorded or not, as when the
    profiler starts after they were launched), the host blocked in ``cudaDeviceSynchronize``
    while the device drains them with a 30 µs bubble between each, then 3 ms of host work and
    one more launch."""
    host = {"pid": 100, "tid": 100}
    events: list[dict[str, object]] = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 20000}
        | host
    ]
    for i in range(20):
        if with_launches:
            events.append(
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 10 + 10 * i}
                | {"dur": 5, "args": {"correlation": i + 1}}
                | host
            )
        args = {"device": 0, "stream": 7, "correlation": i + 1 if with_launches else 0}
        events.append(
            {"ph": "X", "cat": "kernel", "name": f"gemm_{i}", "pid": 0, "tid": 7}
            | {"ts": 300 + 430 * i, "dur": 400, "args": args}
        )
    drained = 300 + 430 * 19 + 400
    events += [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize", "ts": 250}
        | {"dur": drained + 5 - 250}
        | host,
        {"ph": "X", "cat": "cpu_op", "name": "aten::cpu_work", "ts": drained + 10, "dur": 3000}
        | host,
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": drained + 3020}
        | {"dur": 5, "args": {"correlation": 99}}
        | host,
        {"ph": "X", "cat": "kernel", "name": "gemm_last", "pid": 0, "tid": 7}
        | {"ts": drained + 3030, "dur": 400, "args": {"device": 0, "stream": 7, "correlation": 99}},
    ]
    path.write_text(json.dumps({"traceEvents": events}))
    return path


@pytest.mark.parametrize("with_launches", [True, False])
def test_bubbles_while_the_host_waits_in_a_sync_are_not_the_syncs(
    tmp_path: Path, with_launches: bool
) -> None:
    """The device drains work queued before the sync: its bubbles are launch latency, whether
    the launches are in the trace or not; the sync owns only the idle time after the queue
    drained (the host's 3 ms of work before its next launch)."""
    d = diagnose(load(_drain_trace(tmp_path / "drain.json", with_launches)))
    gaps = d.devices[0].idle.gaps
    cause = [CAUSES[c] for c in gaps.cause.tolist()]
    bubbles = [
        c
        for s, e, c in zip(gaps.start_ns.tolist(), gaps.end_ns.tolist(), cause, strict=True)
        if e - s == 30_000
    ]
    assert bubbles == ["launch_overhead"] * 19
    sync = next(f for f in d.findings if f.cause == "host_sync")
    assert 3_000_000 <= sync.lost_ns <= 3_100_000
