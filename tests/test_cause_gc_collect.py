"""The idle cause ``gc_collect``: the host calls ``gc.collect()`` between launches and the GPU
waits for it. A hand-written Kineto trace: two kernels 5 ms apart, each launched just before it
runs, and between them the user's ``step`` frame calling the collector (PyTorch's tracer names
the builtin ``<built-in function collect>``)."""

from __future__ import annotations

import json
from pathlib import Path

from gpuscope import diagnose, load


def _trace(path: Path, collector: str = "<built-in function collect>") -> Path:
    def x(cat: str, name: str, pid: int, tid: int, ts: int, dur: int, **args: object) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts,
                "dur": dur, "args": args}  # fmt: skip

    events = [
        x("python_function", "train.py(8): <module>", 1, 1, 0, 6000,
          **{"Python id": 1, "Python parent id": 0}),
        x("python_function", "train.py(12): step", 1, 1, 140, 5005,
          **{"Python id": 2, "Python parent id": 1}),
        x("python_function", collector, 1, 1, 155, 4980,
          **{"Python id": 3, "Python parent id": 2}),
        x("cuda_runtime", "cudaLaunchKernel", 1, 1, 90, 5, correlation=1),
        x("kernel", "k1", 0, 7, 100, 50, correlation=1, stream=7, device=0),
        x("cuda_runtime", "cudaLaunchKernel", 1, 1, 5140, 5, correlation=2),
        x("kernel", "k2", 0, 7, 5150, 50, correlation=2, stream=7, device=0),
    ]  # fmt: skip
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_a_gap_the_host_spent_in_gc_collect_is_garbage_collection(tmp_path: Path) -> None:
    d = diagnose(load(_trace(tmp_path / "gc.json")))
    (cause,) = [c for c in d.devices[0].idle.causes if c.cause == "gc_collect"]
    assert cause.lost_ns == 5_000_000  # the whole gap between the kernels: 150 to 5,150 µs
    assert cause.locations[0].location.startswith("train.py:12")
    top = d.findings[0]
    assert (top.cause, top.pattern) == ("gc_collect", "ghost_gpu")
    assert "gc.freeze()" in top.fix


def test_other_builtins_are_not_the_collector(tmp_path: Path) -> None:
    d = diagnose(load(_trace(tmp_path / "other.json", "<built-in function sorted>")))
    assert "gc_collect" not in {c.cause for c in d.devices[0].idle.causes}
