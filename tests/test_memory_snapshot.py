"""PyTorch memory snapshots: read with no globals, diagnosed by content, the corpus's answers.

(tests/test_memory.py is about gpuscope's own memory use; this file is about the GPU's.)
"""

from __future__ import annotations

import gzip
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from corpus import corpus
from gpuscope.cli import main
from gpuscope.diagnosis import diagnose
from gpuscope.readers import load
from gpuscope.readers.snapshot import RefusedGlobalError, loads_plain

GIB = 1 << 30
MIB = 1 << 20


def _frames(*where: tuple[str, int, str]) -> list[dict[str, Any]]:
    return [{"filename": f, "line": n, "name": fn} for f, n, fn in where]


LIBRARY = ("/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", 1779, "_call_impl")


def _snapshot() -> dict[str, Any]:
    """A training step: 1 GiB of weights from before recording, a forward keeping 2 x 512 MiB
    activations at ``model.py:20`` (through a library frame), a temporary at ``model.py:30``,
    backward freeing the activations, and one free of a block allocated before recording."""
    forward = _frames(("/home/u/model.py", 20, "forward"), LIBRARY, ("/home/u/train.py", 7, "main"))
    temp = _frames(("/home/u/model.py", 30, "forward"), ("/home/u/train.py", 7, "main"))
    weights = _frames(("/home/u/model.py", 5, "__init__"), ("/home/u/train.py", 3, "main"))
    old = _frames(("/home/u/train.py", 9, "main"))
    entries = []
    t = 1_000

    def add(action: str, addr: int, size: int, frames: list[dict[str, Any]]) -> None:
        nonlocal t
        t += 10
        entries.append(
            {
                "action": action,
                "addr": addr,
                "size": size,
                "stream": 0,
                "time_us": t,
                "frames": frames,
            }
        )

    base = 1 << 40
    add("free_completed", base + 3 * GIB, 64 * MIB, old)  # allocated before recording
    add("alloc", base + GIB, 512 * MIB, forward)
    add("alloc", base + GIB + 512 * MIB, 512 * MIB, forward)
    add("alloc", base + 2 * GIB, 100 * MIB, temp)
    add("free_completed", base + 2 * GIB, 100 * MIB, temp)
    grad = _frames(
        ("/venv/lib/python3.11/site-packages/torch/autograd/graph.py", 825, "_engine_run_backward"),
        ("/home/u/train.py", 8, "main"),
    )
    add("alloc", base + 2 * GIB, 8 * MIB, grad)  # backward: a gradient, into the cached block
    add("free_completed", base + GIB, 512 * MIB, forward)
    add("free_completed", base + GIB + 512 * MIB, 512 * MIB, forward)
    add("free_completed", base + 2 * GIB, 8 * MIB, grad)
    segments = [
        {
            "device": 0,
            "address": base,
            "total_size": GIB,
            "stream": 0,
            "is_expandable": False,
            "segment_pool_id": (0, 0),
            "blocks": [
                {
                    "address": base,
                    "size": GIB,
                    "requested_size": GIB,
                    "state": "active_allocated",
                    "frames": weights,
                }
            ],
        },
        {
            "device": 0,
            "address": base + GIB,
            "total_size": 2 * GIB,
            "stream": 0,
            "is_expandable": False,
            "segment_pool_id": (0, 0),
            "blocks": [
                {
                    "address": base + GIB,
                    "size": 2 * GIB,
                    "requested_size": 2 * GIB,
                    "state": "inactive",
                    "frames": [],
                }
            ],
        },
    ]
    return {
        "segments": segments,
        "device_traces": [entries],
        "allocator_settings": {"expandable_segments": False, "PYTORCH_CUDA_ALLOC_CONF": ""},
        "external_annotations": [],
    }


def _write(
    tmp_path: Path, document: Any, name: str = "snap.pickle", *, zipped: bool = False
) -> Path:
    data = pickle.dumps(document, protocol=4)
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if zipped else data)
    return path


def _run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=True)


class _Evil:
    def __init__(self, function: Any, argument: str) -> None:
        self.function = function
        self.argument = argument

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return self.function, (self.argument,)


@pytest.mark.parametrize("function", [os.system, eval])
def test_a_pickle_naming_a_global_is_refused_in_one_line_and_nothing_runs(
    tmp_path: Path, function: Any
) -> None:
    marker = tmp_path / "ran"
    command = f"open({str(marker)!r}, 'w')" if function is eval else f"touch {marker}"
    path = _write(tmp_path, {"segments": [], "device_traces": [_Evil(function, command)]})
    result = _run("diagnose", str(path))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "refused" in lines[0] and "names the global" in lines[0] and str(path) in lines[0]
    assert not marker.exists()
    with pytest.raises(RefusedGlobalError):
        loads_plain(path.read_bytes())


def test_plain_data_loads() -> None:
    assert loads_plain(pickle.dumps({"a": [1, (2, 3)], "b": 1.5}, protocol=5)) == {
        "a": [1, (2, 3)],
        "b": 1.5,
    }


def test_a_cut_off_snapshot_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "cut.pickle"
    path.write_bytes(pickle.dumps(_snapshot(), protocol=4)[:-300])
    result = _run("diagnose", str(path))
    assert result.exit_code == 2
    assert (
        result.output.strip().splitlines()
        == [f"gpuscope: {path}: the pickle is cut off: the snapshot cannot be read"]
        or "cut off" in result.output
    )


def test_an_inconsistent_snapshot_is_one_line(tmp_path: Path) -> None:
    document = _snapshot()
    document["segments"][0]["blocks"][0]["size"] = 5 * GIB  # more than its segment
    result = _run("diagnose", str(_write(tmp_path, document)))
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert "inconsistent snapshot" in result.output


def test_over_the_memory_budget_is_one_line(tmp_path: Path) -> None:
    from gpuscope.readers import _io

    path = _write(tmp_path, _snapshot())
    try:
        result = _run("diagnose", "--max-memory", "2k", str(path))
    finally:
        _io.set_memory_budget(None)
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert "memory budget" in result.output


@pytest.mark.parametrize("zipped", [False, True])
def test_a_built_snapshot_gives_its_known_answers(tmp_path: Path, zipped: bool) -> None:
    job = load(_write(tmp_path, _snapshot(), zipped=zipped))
    d = diagnose(job)
    (m,) = d.memory
    # The dump holds the 1 GiB of weights; the events' net change is -64 MiB (the free of a
    # block allocated before recording), so recording began with 1 GiB + 64 MiB.
    assert m.end_allocated_bytes == GIB
    assert m.baseline_bytes == GIB + 64 * MIB
    assert m.frees_before_alloc == 1
    assert m.peak_allocated_bytes == GIB + GIB + 100 * MIB
    assert m.end_reserved_bytes == 3 * GIB
    top = m.sites[0]
    assert top.location == "model.py:20" and top.bytes == GIB and top.category == "activations"
    assert top.chain == ["model.py:20 forward", "train.py:7 main"]  # the library frame skipped
    assert m.categories["parameters"] == GIB
    assert m.peak_phase == "forward"
    # At the end 2 GiB are free: the 1.1 GiB the peak needed beyond the end is cached (harmless),
    # the rest was reserved beyond even the peak's need.
    assert m.at_end.free_bytes == 2 * GIB and m.at_end.cached_bytes == GIB + 100 * MIB
    assert m.at_end.fragmented_bytes == GIB - 100 * MIB
    assert [f.cause for f in d.findings] == ["activation_peak"]


def _cxx(binding: str, *autograd: str) -> list[dict[str, Any]]:
    """The C++ frames of a snapshot recorded with ``stacks="all"``, innermost first: the caching
    allocator, the operator (with autograd's ``VariableType`` kernel when given), the binding
    Python called."""
    return _frames(
        ("CUDACachingAllocator.cpp", 0, "c10::cuda::CUDACachingAllocator::Native::malloc()"),
        ("??", 0, "at::detail::empty_cuda(c10::ArrayRef<long>)"),
        *(("??", 0, a) for a in autograd),
        ("??", 0, f"torch::autograd::THPVariable_{binding}(_object*, _object*, _object*)"),
        ("??", 0, "_PyObject_MakeTpCall"),
    )


def test_a_factory_called_from_the_users_loop_makes_user_tensors_not_activations(
    tmp_path: Path,
) -> None:
    """Inference (no backward) that fills the device: tensors made by ``torch.empty`` and
    ``.to(device)`` straight from the loop are the user's, not activations, and get no
    ``inference_mode`` advice; ``torch.zeros`` inside a ``forward`` and a matmul autograd records
    stay activations (the principle: activations are computed inside a forward pass)."""
    loop = ("/home/u/infer.py", 12, "main")
    forward = ("/home/u/model.py", 30, "forward")
    stacks = {
        "empty": _cxx("empty") + _frames(loop),
        "to": _cxx("to") + _frames(("/home/u/infer.py", 4, "main")),
        "zeros in forward": _cxx("zeros") + _frames(forward, LIBRARY, loop),
        "matmul": _cxx("matmul", "torch::autograd::VariableType::(anonymous namespace)::mm()")
        + _frames(("/home/u/model.py", 40, "layer"), loop),
    }
    sizes = {"empty": 8 * GIB, "to": GIB, "zeros in forward": 512 * MIB, "matmul": 256 * MIB}
    base = 1 << 40
    entries, blocks, address = [], [], base
    for t, (name, frames) in enumerate(stacks.items()):
        size = sizes[name]
        entries.append(
            {"action": "alloc", "addr": address, "size": size, "stream": 0, "time_us": t + 1}
            | {"frames": frames}
        )
        blocks.append(
            {"address": address, "size": size, "requested_size": size}
            | {"state": "active_allocated", "frames": frames}
        )
        address += size
    entries.append({"action": "oom", "addr": 64 * MIB, "size": 8 * GIB, "stream": 0})
    total = address - base
    document = {
        "segments": [
            {"device": 0, "address": base, "total_size": total, "stream": 0}
            | {"is_expandable": False, "segment_pool_id": (0, 0), "blocks": blocks}
        ],
        "device_traces": [entries],
        "allocator_settings": {"expandable_segments": False, "PYTORCH_CUDA_ALLOC_CONF": ""},
        "external_annotations": [],
    }
    d = diagnose(load(_write(tmp_path, document)))
    (m,) = d.memory
    by_site = {s.location: s for s in m.sites}
    assert by_site["infer.py:12"].category == "user tensors"
    assert by_site["infer.py:12"].confidence == "high"
    assert by_site["infer.py:4"].category == "user tensors"
    assert by_site["model.py:30"].category == "activations"
    assert by_site["model.py:40"].category == "activations"  # computed, kept, no backward
    assert m.categories["user tensors"] == 9 * GIB
    assert m.categories["activations"] == 768 * MIB
    assert m.peak_phase == "unknown"  # a factory call is no phase of a step
    assert m.oom is not None and m.oom.verdict == "user_tensors"
    assert "infer.py:12" in m.oom.summary and "9.00 GiB" in m.oom.summary
    assert "inference_keeps_activations" not in {f.cause for f in d.findings}


def test_the_snapshot_diagnosis_round_trips_through_json(tmp_path: Path) -> None:
    from gpuscope.diagnosis import saved

    d = diagnose(load(_write(tmp_path, _snapshot())))
    again = saved.from_builtins(saved.to_builtins(d))
    assert again.memory == d.memory and again.findings == d.findings  # (the verdict's idle is NaN)
    assert saved.to_builtins(again) == saved.to_builtins(d)


# --- the corpus (MANIFEST answers) -------------------------------------------------------------


def test_flexgen_oom_the_weights_alone_do_not_fit() -> None:
    d = diagnose(load(corpus("memory/oom_flexgen_opt6.7b_weights.pickle")))
    (m,) = d.memory
    assert round(m.end_allocated_bytes / MIB) == 11_292
    assert round(m.end_reserved_bytes / MIB) == 11_296
    assert m.oom is not None and m.oom.verdict == "weights"
    assert m.categories["parameters"] == m.end_allocated_bytes
    assert sum(s.blocks for s in m.sites) == 460
    assert d.findings[0].cause == "weights_exceed_memory"
    assert all(f.cause != "allocator_fragmentation" for f in d.findings)
    # Offloading is priced too: streamed a layer at a time, the GPU holds the largest weight
    # block (the 393 MiB embedding) and the next: 2 x 393 MiB.
    (streamed,) = [e for e in d.findings[0].evidence if e.startswith("offloaded")]
    assert "0.38 GiB" in streamed and streamed.endswith("peak ~0.77 GiB")


def test_offloading_says_how_much_must_leave_the_gpu_to_fit(tmp_path: Path) -> None:
    """At an out-of-memory that records the device's free memory, the process could have had
    what it reserved plus that: what must be offloaded is the peak plus the request beyond it."""
    from gpuscope.testing.memory import generate_snapshot, write_snapshot

    document, _ = generate_snapshot("weights_exceed_memory", seed=0)
    document["device_traces"][0].append(
        {"action": "oom", "addr": 256 * MIB, "size": GIB, "stream": 0}
    )
    d = diagnose(load(write_snapshot(tmp_path / "s.pickle", document)))
    (m,) = d.memory
    weights = m.categories["parameters"]
    assert weights == m.end_reserved_bytes == m.peak_allocated_bytes
    (fit,) = [e for e in d.findings[0].evidence if e.startswith("to fit")]
    # capacity = weights + 256 MiB free; must = weights + 1 GiB asked - capacity = 768 MiB
    gib = weights / GIB
    assert f"to fit the {gib + 0.25:,.2f} GiB" in fit and "at least 0.75 GiB" in fit
    assert fit.endswith(f"peak ~{gib - 0.75:,.2f} GiB")


def test_cs336_cached_free_is_an_activation_peak_and_harmless_cache() -> None:
    d = diagnose(load(corpus("memory/cs336_step_cached_free.pickle")))
    (m,) = d.memory
    rise = m.peak_allocated_bytes - m.baseline_bytes
    assert 11.6 * GIB < rise < 11.8 * GIB
    locations = [s.location for s in m.sites[:5]]
    assert "model.py:39" in locations and "model.py:532" in locations
    assert any(loc.startswith("nn_utils.py:") and loc[-1] >= "6" for loc in locations)
    assert all(s.category == "activations" for s in m.sites[:5])
    assert m.peak_phase == "forward"
    # After the step 11.9 of 13.2 GiB reserved is free, nearly all of it cached, not harmful.
    assert 11.8 * GIB < m.at_end.free_bytes < 12.0 * GIB
    assert m.at_end.cached_bytes > 0.95 * m.at_end.free_bytes
    assert d.findings[0].cause == "activation_peak"


def test_cs336_compiled_peaks_in_the_optimizer_step_with_recording_begun_mid_run() -> None:
    d = diagnose(load(corpus("memory/cs336_small_train_step_compiled.pickle")))
    (m,) = d.memory
    assert m.frees_before_alloc == 222
    assert "estimated" in m.baseline_note
    assert m.peak_phase == "optimizer step"
    assert "Optimizer.step#AdamW.step" in m.peak_phase_source
    assert round((m.peak_allocated_bytes - m.baseline_bytes) / GIB, 2) == 0.73
    assert m.rise_sites[0].location == "optimizer.py:74-78"
    assert m.rise_sites[0].category == "optimizer state"
    assert round(m.end_reserved_bytes / GIB, 2) == 3.95
    assert round(m.end_allocated_bytes / GIB, 2) == 2.86
    assert m.at_end.free_blocks == 103
    assert round((m.at_end.largest_free_bytes or 0) / GIB, 2) == 0.14
    assert d.findings[0].cause == "lazy_optimizer_state"


def test_a_snapshot_is_recognised_by_content_whatever_its_name(tmp_path: Path) -> None:
    path = _write(tmp_path, _snapshot(), name="trace.json")
    result = _run("diagnose", str(path))
    assert result.exit_code == 0, result.output
    assert "Who holds the peak" in result.output and "model.py:20" in result.output


def test_generated_snapshots_give_their_planted_causes() -> None:
    """The labelled memory suite (benchmarks/ground_truth.py prints it on its own): every
    planted cause is the top memory finding, at its site."""
    from gpuscope.testing.memory import MEMORY_CAUSES, memory_suite

    outcomes = memory_suite(range(3))
    assert len(outcomes) == 3 * len(MEMORY_CAUSES)
    right = [o for o in outcomes if o.cause_right and o.location_right]
    assert len(right) >= 0.95 * len(outcomes), [o for o in outcomes if o not in right]


def test_the_generator_refuses_an_unknown_cause() -> None:
    from gpuscope.testing.memory import generate_snapshot

    with pytest.raises(ValueError, match="unknown memory cause"):
        generate_snapshot("no_such_cause")


def test_diff_of_two_snapshots_says_what_grew_by_site(tmp_path: Path) -> None:
    before = _write(tmp_path, _snapshot(), name="before.pickle")
    grown = _snapshot()
    for entry in grown["device_traces"][0]:
        if entry["size"] == 100 * MIB:  # the temporary at model.py:30 grows to 300 MiB
            entry["size"] = 300 * MIB
    after = _write(tmp_path, grown, name="after.pickle")
    result = _run("diff", str(before), str(after), "--json", "-")
    assert result.exit_code == 0, result.output
    import json

    memory = json.loads(result.output)["memory"]
    assert memory["peak_after_bytes"] - memory["peak_before_bytes"] == 200 * MIB
    (site,) = memory["sites"]
    assert site["location"] == "model.py:30" and site["change_bytes"] == 200 * MIB
    shown = _run("diff", str(before), str(after))
    assert "grew" in shown.output and "model.py:30" in shown.output


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"\x80\x04}\x94(\x8c\x08segments\x94]\x94(}\x94ee.", "not a readable pickle"),
        (b"\x80\x04}\x94(\x8c\x08segments\x94h\x09u.", "not a readable pickle"),
    ],
)
def test_hostile_opcodes_are_one_line(tmp_path: Path, data: bytes, expected: str) -> None:
    """A dict appended to (AttributeError inside the unpickler), a memo index never stored
    (KeyError): one line, never a traceback."""
    path = tmp_path / "hostile.pickle"
    path.write_bytes(data)
    result = _run("diagnose", str(path))
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and expected in result.output


def test_a_number_beyond_64_bits_is_one_line(tmp_path: Path) -> None:
    document = _snapshot()
    document["device_traces"][0][1]["addr"] = 1 << 70
    result = _run("diagnose", str(_write(tmp_path, document)))
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1 and "out of range" in result.output


def test_the_headroom_says_how_much_larger_a_batch_fits(tmp_path: Path) -> None:
    """Activations scale with the batch, the rest does not: on a 24 GiB GPU (--gpu) the built
    step's 1 GiB of activations beside 1.1 GiB of the rest fits about 21x the batch."""
    from gpuscope.diagnosis import Options

    d = diagnose(load(_write(tmp_path, _snapshot())), Options(gpu="RTX 4090"))
    (finding,) = d.findings
    (headroom,) = [e for e in finding.evidence if e.startswith("headroom")]
    m = d.memory[0]
    acts = m.categories["activations"]
    expected = (0.95 * 24 * GIB - (m.peak_allocated_bytes - acts)) / acts
    assert f"about {expected:.1f}x the batch fits" in headroom
