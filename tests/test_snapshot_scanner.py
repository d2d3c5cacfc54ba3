"""The C snapshot scanner (readers/_snapscan.c) against the reference reader (the no-globals
unpickler): the same record from every input, the same one-line error from every bad one."""

from __future__ import annotations

import gzip
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from corpus import corpus
from gpuscope.errors import InputError
from gpuscope.model import MemoryRecord
from gpuscope.readers import snapshot
from gpuscope.testing.memory import MEMORY_CAUSES, generate_snapshot, write_snapshot

pytestmark = pytest.mark.skipif(snapshot._snapscan is None, reason="the scanner is not built")
BUDGET = 8 << 30


def _scanned(path: Path) -> MemoryRecord:
    return snapshot._read_scanned(path, BUDGET).memory[0]


def _decoded(path: Path) -> MemoryRecord:
    return snapshot._read_decoded(path, BUDGET).memory[0]


def _assert_same(a: MemoryRecord, b: MemoryRecord) -> None:
    for field in MemoryRecord.__struct_fields__:
        x, y = getattr(a, field), getattr(b, field)
        if field in ("segments", "blocks", "events"):
            for column in x.__struct_fields__:
                assert np.array_equal(getattr(x, column), getattr(y, column)), (field, column)
        else:
            assert x == y, field


@pytest.mark.parametrize("cause", MEMORY_CAUSES)
@pytest.mark.parametrize("suffix", [".pickle", ".pickle.gz"])
def test_generated_snapshots_read_the_same_both_ways(
    tmp_path: Path, cause: str, suffix: str
) -> None:
    document, _ = generate_snapshot(cause, seed=3)
    path = write_snapshot(tmp_path / f"s{suffix}", document)
    record = _scanned(path)
    assert len(record.events) > 0
    _assert_same(record, _decoded(path))


@pytest.mark.parametrize(
    "name",
    [
        "cs336_small_train_step_compiled.pickle",
        "cs336_step_cached_free.pickle",
        "oom_flexgen_opt6.7b_weights.pickle",
    ],
)
def test_corpus_snapshots_read_the_same_both_ways(name: str) -> None:
    path = corpus(f"memory/{name}")
    _assert_same(_scanned(path), _decoded(path))


def _entry(action: Any, frames: Any, **more: Any) -> dict[str, Any]:
    return {"action": action, "addr": 4096, "size": 512, "stream": 0, "time_us": 7, **more} | (
        {"frames": frames} if frames is not None else {}
    )


def _odd_documents() -> dict[str, Any]:
    frame = {"filename": "/u/a.py", "line": 3, "name": "f"}
    same = {"filename": "/u/a.py", "line": 3, "name": "f"}  # equal, another object
    shared = [frame, frame]
    return {
        "shared traceback": {
            "segments": [],
            "device_traces": [[_entry("alloc", shared), _entry("free_completed", shared)]],
        },
        "two devices, equal frames": {
            "segments": [],
            "device_traces": [
                [_entry("alloc", [frame])],
                [_entry("alloc", [same]), _entry("oom", [])],
            ],
        },
        "unknown actions": {
            "segments": [],
            "device_traces": [
                [_entry("mystery", [frame]), _entry(None, [frame]), _entry("alloc", [same])]
            ],
        },
        "no frames, odd frames": {
            "segments": [],
            "device_traces": [[_entry("alloc", None), _entry("alloc", 5), _entry("alloc", "x")]],
        },
        "old list of segments": [{"total_size": 1024, "blocks": [{"size": 512, "history": []}]}],
        "an entry that is not a dict": {
            "segments": [],
            "device_traces": [[_entry("alloc", []), 7]],
        },
        "a size that is not an int": {
            "segments": [],
            "device_traces": [[_entry("mystery", []), _entry("alloc", [], size=True)]],
        },
        "a negative size": {"segments": [], "device_traces": [[_entry("alloc", [], size=-1)]]},
        "device_traces not a list": {"segments": [], "device_traces": {"a": 1}},
        "a device's trace not a list": {"segments": [], "device_traces": [(1, 2)]},
        "huge address": {"segments": [], "device_traces": [[_entry("alloc", [], addr=1 << 70)]]},
        "frame not a dict": {"segments": [], "device_traces": [[_entry("alloc", [3])]]},
        "floats and bytes": {
            "segments": [],
            "device_traces": [[_entry("alloc", [frame], time_us=1.5, extra=b"x", more=(1, None))]],
            "allocator_settings": {"expandable_segments": True, "x": 0.25},
        },
    }


@pytest.mark.parametrize("name", list(_odd_documents()))
@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_odd_snapshots_give_the_same_record_or_the_same_error(
    tmp_path: Path, name: str, protocol: int
) -> None:
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps(_odd_documents()[name], protocol=protocol))
    outcomes = []
    for read in (snapshot.read, snapshot._read_decoded):
        try:
            job = read(path) if read is snapshot.read else read(path, BUDGET)  # type: ignore[call-arg]
            outcomes.append(job.memory[0])
        except InputError as error:
            outcomes.append(str(error))
    if isinstance(outcomes[0], str) or isinstance(outcomes[1], str):
        assert outcomes[0] == outcomes[1]
    else:
        _assert_same(outcomes[0], outcomes[1])


def test_a_cut_off_snapshot_says_so_at_every_cut(tmp_path: Path) -> None:
    document, _ = generate_snapshot("activation_peak", seed=1, layers=2)
    data = pickle.dumps(document, protocol=4)
    path = tmp_path / "s.pickle"
    for cut in range(3, len(data) - 1, max(1, len(data) // 97)):
        path.write_bytes(data[:cut])
        with pytest.raises(InputError, match="the pickle is cut off"):
            snapshot.read(path)
    path.write_bytes(gzip.compress(data)[:-40])
    with pytest.raises(InputError, match="cut off"):
        snapshot.read(path)


class _Evil:
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.system, ("true",)


@pytest.mark.parametrize("protocol", [0, 2, 4])
def test_the_scanner_refuses_globals_as_the_unpickler_does(tmp_path: Path, protocol: int) -> None:
    path = tmp_path / "s.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [[_Evil()]]}, protocol))
    if protocol >= 2:  # (protocol 0 is not taken for a snapshot: the sniffer needs 2-5)
        with pytest.raises(
            snapshot._snapscan.RefusedError, match=r"names the global posix\.system"
        ):
            snapshot._snapscan.scan(path.open("rb").read, object())
    with pytest.raises(InputError, match=r"refused: it names the global posix\.system"):
        snapshot.read(path)


def test_a_real_oom_entry_gives_the_device_free_memory_both_ways() -> None:
    """PyTorch 2.11 writes an ``oom`` trace entry's free memory as ``device_free``, not ``addr``
    (the H200 capture, tests/data/h200): both readers keep it where ``addr`` goes."""
    path = Path(__file__).parent / "data" / "h200" / "oom_snapshot.pickle.gz"
    record = _scanned(path)
    _assert_same(record, _decoded(path))
    assert 11801853952 in record.events.address.tolist()
