"""Copies between GPUs in Kineto traces are interconnect transfers; copies within one GPU are not.

CUPTI records a copy between two devices with both of them, and Kineto writes them as
``fromDevice`` / ``toDevice`` whether it names the copy ``Memcpy PtoP`` or ``Memcpy DtoD (Device ->
Device)`` (issue #15). Both readers (the C scanner and the msgspec reader) must agree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from corpus import corpus
from gpuscope import diagnose
from gpuscope.model import CopyDirection, Kind
from gpuscope.readers import load
from test_kineto_scanner import assert_same_trace, read_both

COPIES = 20
COPY_US = 400
BYTES = 40_000_000


def copy_trace(path: Path, name: str, devices: tuple[int, int] | None) -> Path:
    """A process that launches ``COPIES`` device-to-device copies back to back on GPU 0."""
    events: list[dict[str, Any]] = []
    for i in range(COPIES):
        start = 1_000 + i * (COPY_US + 10)
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaMemcpyAsync",
                "pid": 100,
                "tid": 100,
                "ts": start - 5,
                "dur": 4,
                "args": {"correlation": i + 1, "External id": i + 1},
            }
        )
        args: dict[str, Any] = {"stream": 7, "correlation": i + 1, "bytes": BYTES}
        if devices is None:
            args["device"] = 0
        else:
            args |= {"fromDevice": devices[0], "inDevice": 0, "toDevice": devices[1]}
        events.append(
            {
                "ph": "X",
                "cat": "gpu_memcpy",
                "name": name,
                "pid": 0,
                "tid": 7,
                "ts": start,
                "dur": COPY_US,
                "args": args,
            }
        )
    doc = {"schemaVersion": 1, "deviceProperties": [], "traceEvents": events}
    path.write_text(json.dumps(doc))
    return path


def directions(path: Path) -> set[int]:
    scanned, reference = read_both(path)
    assert_same_trace(scanned, reference)
    ev = scanned.events
    return {int(d) for d in ev.copy_direction[ev.kind == Kind.MEMCPY]}


@pytest.mark.parametrize(
    "name", ["Memcpy DtoD (Device -> Device)", "Memcpy PtoP (Device -> Device)"]
)
def test_a_copy_to_another_gpu_is_peer_to_peer(tmp_path: Path, name: str) -> None:
    path = copy_trace(tmp_path / "peer.json", name, (0, 1))
    assert directions(path) == {CopyDirection.P2P}
    d = diagnose(load(path))
    assert d.verdict.bound == "transfer"
    assert d.findings[0].cause == "p2p_copy"
    assert d.findings[0].events == COPIES


@pytest.mark.parametrize("devices", [None, (0, 0)])
def test_a_copy_within_one_gpu_is_not_interconnect(
    tmp_path: Path, devices: tuple[int, int] | None
) -> None:
    path = copy_trace(tmp_path / "local.json", "Memcpy DtoD (Device -> Device)", devices)
    assert directions(path) == {CopyDirection.D2D}
    d = diagnose(load(path))
    assert "p2p_copy" not in {f.cause for f in d.findings}
    assert d.verdict.figures["exposed_p2p_pct"] == 0


def test_the_nvlink_corpus_trace_records_both_gpus_of_each_copy() -> None:
    (trace,) = load(corpus("wild/a100_nvlink_p2p_copy.json.gz")).traces
    copies = np.flatnonzero(trace.events.kind == Kind.MEMCPY)
    assert copies.size == 30
    pairs = {tuple(trace.events.extra[int(r)].values()) for r in copies}
    assert pairs and all(source == 0 and destination != 0 for source, destination in pairs)
