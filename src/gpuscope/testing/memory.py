"""Generated PyTorch memory snapshots with a planted cause and its known answer.

Contract: :func:`generate_snapshot` returns a snapshot document shaped as
``torch.cuda.memory._snapshot()`` writes it (``segments`` with blocks, ``device_traces`` with
``time_us`` and ``frames``, ``allocator_settings``, ``external_annotations``) for one planted
cause of ``MEMORY_CAUSES``, and the :class:`MemoryTruth` a diagnosis must find (the cause and the
user's ``file:line`` of the top site). :func:`write_snapshot` pickles it (plain data only, gzip
for a ``.gz`` name). ``layers`` scales the snapshot (the benchmark writes ~1 GB of them).
"""

from __future__ import annotations

import gzip
import pickle
import random
from pathlib import Path
from typing import Any

import msgspec

MEMORY_CAUSES = (
    "activation_peak",
    "lazy_optimizer_state",
    "allocator_fragmentation",
    "weights_exceed_memory",
    "inference_keeps_activations",
)
MIB = 1 << 20
_LIBRARY = (
    ("/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", 1779, "_call_impl"),
    ("/usr/lib/python3.11/site-packages/torch/nn/modules/module.py", 1790, "_wrapped_call_impl"),
)


class MemoryTruth(msgspec.Struct, frozen=True):
    cause: str
    location: str  # the top site's user file:line the diagnosis must name


def _frames(*where: tuple[str, int, str]) -> list[dict[str, Any]]:
    return [{"filename": f, "line": n, "name": fn} for f, n, fn in where]


class _Recorder:
    """A bump allocator writing trace entries and, at the end, segments with their blocks."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.entries: list[dict[str, Any]] = []
        self.live: dict[int, tuple[int, list[dict[str, Any]]]] = {}
        self.cached: list[tuple[int, int]] = []  # freed blocks the allocator keeps
        self.next_address = 1 << 40
        self.time_us = 1_700_000_000_000_000
        self.annotations: list[dict[str, Any]] = []

    def _entry(self, action: str, address: int, size: int, frames: Any) -> None:
        self.time_us += self.rng.randint(5, 50)
        self.entries.append(
            {
                "action": action,
                "addr": address,
                "size": size,
                "stream": 0,
                "time_us": self.time_us,
                "compile_context": "N/A",
                "user_metadata": "",
                "frames": frames,
            }
        )

    def prior(self, size: int, frames: list[dict[str, Any]]) -> int:
        """A block allocated before recording began: in the segments only."""
        address = self.next_address
        self.next_address += size
        self.live[address] = (size, frames)
        return address

    def alloc(self, size: int, frames: list[dict[str, Any]]) -> int:
        address = self.next_address
        self.next_address += size
        self.live[address] = (size, frames)
        self._entry("alloc", address, size, frames)
        return address

    def free(self, address: int) -> None:
        size, frames = self.live.pop(address)
        self._entry("free_requested", address, size, frames)
        self._entry("free_completed", address, size, frames)
        self.cached.append((address, size))

    def annotate(self, stage: str, name: str) -> None:
        self.time_us += 1
        self.annotations.append(
            {"stage": stage, "name": name, "device": 0, "time_us": self.time_us}
        )

    def oom(self, size: int, device_free: int) -> None:
        self._entry("oom", device_free, size, [])

    def document(self, *, expandable: bool = False) -> dict[str, Any]:
        blocks = [
            (address, size, "active_allocated", frames)
            for address, (size, frames) in self.live.items()
        ]
        blocks += [(address, size, "inactive", []) for address, size in self.cached]
        segments = [
            {
                "device": 0,
                "address": address,
                "total_size": size,
                "allocated_size": size if state != "inactive" else 0,
                "active_size": size if state != "inactive" else 0,
                "requested_size": size,
                "stream": 0,
                "segment_type": "large",
                "segment_pool_id": (0, 0),
                "is_expandable": expandable,
                "frames": [],
                "blocks": [
                    {
                        "address": address,
                        "size": size,
                        "requested_size": size,
                        "state": state,
                        "frames": frames,
                    }
                ],
            }
            for address, size, state, frames in sorted(blocks, key=lambda b: b[0])
        ]
        return {
            "segments": segments,
            "device_traces": [self.entries],
            "allocator_settings": {
                "PYTORCH_CUDA_ALLOC_CONF": "",
                "max_split_size": -1,
                "expandable_segments": expandable,
            },
            "external_annotations": self.annotations,
        }


def _weights(r: _Recorder, layers: int, size: int) -> list[int]:
    init = _frames(("/work/proj/model.py", 12, "__init__"), ("/work/proj/train.py", 30, "main"))
    return [r.prior(size, init) for _ in range(layers)]


def _forward(r: _Recorder, layers: int, size: int, line: int) -> list[int]:
    """Each layer keeps one large activation at model.py:``line`` and a small one elsewhere."""
    kept: list[int] = []
    for _ in range(layers):
        big = _frames(
            ("/work/proj/model.py", line, "forward"),
            *_LIBRARY,
            ("/work/proj/model.py", 88, "forward"),
            ("/work/proj/train.py", 41, "train_step"),
        )
        small = _frames(("/work/proj/model.py", line + 40, "forward"), *_LIBRARY)
        kept.append(r.alloc(size, big))
        kept.append(r.alloc(size // 8, small))
    return kept


def _backward(r: _Recorder, acts: list[int], grad_size: int, layers: int) -> None:
    grad = _frames(
        (
            "/work/proj/.venv/lib/python3.11/site-packages/torch/autograd/graph.py",
            825,
            "_engine_run_backward",
        ),
        ("/work/proj/train.py", 43, "train_step"),
    )
    for _ in range(layers):
        r.alloc(grad_size, grad)
    for address in reversed(acts):
        r.free(address)


def generate_snapshot(
    cause: str, *, seed: int = 0, layers: int = 12
) -> tuple[dict[str, Any], MemoryTruth]:
    """A snapshot with ``cause`` planted, and what the diagnosis must say."""
    if cause not in MEMORY_CAUSES:
        raise ValueError(f"unknown memory cause {cause!r}; one of {', '.join(MEMORY_CAUSES)}")
    r = _Recorder(seed)
    line = r.rng.randint(20, 70)
    weight = r.rng.choice((16, 32, 64)) * MIB
    if cause == "weights_exceed_memory":
        alloc = _frames(
            ("/work/proj/weights.py", line, "allocate"),
            ("/work/proj/model.py", 90, "init_weight"),
            ("/work/proj/run.py", 5, "<module>"),
        )
        for _ in range(layers * 4):
            r.prior(weight, alloc)
        r.entries.append(
            {"action": "snapshot", "addr": 0, "size": weight * layers * 4, "stream": 0}
        )
        document = r.document()
        document["device_traces"] = [r.entries]
        return document, MemoryTruth(cause, f"weights.py:{line}")
    _weights(r, layers, weight)
    if cause == "allocator_fragmentation":
        piece = r.rng.choice((20, 40)) * MIB
        frames = _frames(
            ("/work/proj/data.py", line, "collate"), ("/work/proj/train.py", 41, "train_step")
        )
        blocks = [r.alloc(piece, frames) for _ in range(layers * 8)]
        for address in blocks[::2]:
            r.free(address)
        r.oom(piece * 3, 64 * MIB)  # more than any free piece, less than all of them
        return r.document(), MemoryTruth(cause, f"data.py:{line}")
    act = r.rng.choice((128, 192, 256)) * MIB
    if cause == "inference_keeps_activations":
        _forward(r, layers, act, line)
        return r.document(), MemoryTruth(cause, f"model.py:{line}")
    acts = _forward(r, layers, act if cause == "activation_peak" else act // 16, line)
    _backward(r, acts, weight, layers)
    if cause == "lazy_optimizer_state":
        r.annotate("START", "Optimizer.step#AdamW.step")
        step = (
            "/work/proj/.venv/lib/python3.11/site-packages/torch/optim/optimizer.py",
            526,
            "wrapper",
        )
        for _ in range(layers):
            for state_line in (74, 75):
                r.alloc(weight, _frames(("/work/proj/optimizer.py", state_line, "step"), step))
            temp = r.alloc(weight, _frames(("/work/proj/optimizer.py", 78, "step"), step))
            r.free(temp)
        r.annotate("END", "Optimizer.step#AdamW.step")
        return r.document(), MemoryTruth(cause, "optimizer.py:74-78")
    return r.document(), MemoryTruth(cause, f"model.py:{line}")


def write_snapshot(path: Path, document: dict[str, Any]) -> Path:
    data = pickle.dumps(document, protocol=4)
    path.write_bytes(gzip.compress(data, 1) if path.suffix == ".gz" else data)
    return path
