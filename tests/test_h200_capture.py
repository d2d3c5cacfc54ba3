"""Real files captured on an H200 with a planted cause (tests/data/h200/README.md says how)."""

from __future__ import annotations

from pathlib import Path

from gpuscope import diagnose, load

DATA = Path(__file__).parent / "data" / "h200"


def test_the_item_sync_every_step_is_found_at_its_function() -> None:
    d = diagnose(load(DATA / "sync_train.json.gz"))
    causes = {f.cause: f for f in d.findings}
    sync = causes["host_sync"]
    assert sync.locations and sync.locations[0].location == "gpu_capture.py:28 (_train_step)"
    assert {"launch_overhead", "fp32_gemm"} <= set(causes)
    device = d.devices[0]
    assert device.facts is not None and "H200" in device.facts.display_name
    assert d.memory and d.memory[0].peak_allocated_bytes > 300 * 2**20


def test_the_oom_snapshot_names_the_request_and_the_line_that_filled_the_device() -> None:
    d = diagnose(load(DATA / "oom_snapshot.pickle.gz"))
    memory = d.memory[0]
    assert memory.oom is not None and memory.oom.request_bytes == 16 * 2**30
    top = memory.sites[0]
    assert top.location == "gpu_capture.py:92" and top.bytes == 128 * 2**30 and top.blocks == 8
