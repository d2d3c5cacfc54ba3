"""One definition of each CUDA / HIP call's role (``data/runtime_apis.csv``), with HIP parity.

Every row's CUDA name and HIP twin get its role; the idle attribution, the start-up phases and the
what-if replay read the role from the table alone (no module keeps its own list of names), so they
agree on every name: a call that blocks the host in the attribution blocks it in the replay.
"""

from __future__ import annotations

import csv
from importlib import resources

import pytest

from gpuscope.runtime_apis import ROLES, runtime_role


def _rows() -> list[dict[str, str]]:
    text = resources.files("gpuscope.data").joinpath("runtime_apis.csv").read_text("utf-8")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return list(csv.DictReader(lines))


ROWS = _rows()


def test_table_is_well_formed() -> None:
    assert len(ROWS) >= 50
    for row in ROWS:
        assert row["role"] in ROLES, row
        assert not row["cuda"] or row["cuda"].startswith(("cu", "nccl")), row
        assert (
            not row["hip"]
            or row["hip"].startswith(("hip", "miopen", "rocblas", "rccl"))
            or (row["hip"] == "runFunction*")
        ), row


def _example(name: str) -> str:
    """A name the row's pattern covers (``cudaMemcpy*Async`` -> ``cudaMemcpyXAsync``)."""
    return name.replace("*", "X")


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['cuda']}->{r['hip']}")
def test_cuda_and_hip_twins_share_the_role(row: dict[str, str]) -> None:
    for name in (row["cuda"], row["hip"]):
        if name:
            assert runtime_role(_example(name)) == row["role"], name
            # Versioned and per-thread-stream entry points (..._v7000, ..._ptsz) keep the role.
            assert runtime_role(_example(name) + "_v7000") == row["role"], name
            assert runtime_role(_example(name) + "_ptsz_v7000") == row["role"], name


def test_every_classified_cuda_name_of_the_generator_has_a_twin() -> None:
    """The generator writes the CUDA names real traces carry; each classified one is listed."""
    from fnmatch import fnmatchcase

    from gpuscope.testing import generator

    names = {n for n in generator.RUNTIME_NAMES if runtime_role(n) != "none"}
    assert names, "the generator names no runtime APIs"
    unlisted = {n for n in names if not any(fnmatchcase(n, row["cuda"]) for row in ROWS)}
    assert not unlisted, sorted(unlisted)


@pytest.mark.parametrize(
    "name",
    ["hipMemcpyWithStream", "hipMemcpyDtoH", "hipMemcpyHtoDAsync", "hipExtModuleLaunchKernel"],
)
def test_rocm_names_from_real_traces_are_classified(name: str) -> None:
    assert runtime_role(name) != "none"


def test_no_module_keeps_its_own_list_of_runtime_names() -> None:
    """The roles are read from the table: no analysis spells a runtime API family as a regular
    expression of its own (the three copies drifted: ``hipMemcpyHtoD`` blocked in the attribution
    and not in the replay)."""
    import re
    from pathlib import Path

    import gpuscope

    root = Path(gpuscope.__file__).parent / "analyses"
    spelled = re.compile(
        r"re\.compile\([^)]*(?:cuda|hip)(?:Memcpy|Free|Malloc|Launch|\w*Synchronize)"
    )
    for path in root.rglob("*.py"):
        text = path.read_text("utf-8")
        assert not spelled.search(text.replace("\n", " ")), path


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ("hipMemcpyHtoD", "copy"),
        ("cudaMemcpyWithStream", "copy"),
        ("cudaMemcpy2DToArray", "copy"),
        ("cudaFree_v3020", "free"),
        ("cuMemFreeAsync", "alloc"),
        ("hipHostFree", "free"),
        ("cudaMemcpyAsync_ptsz_v7000", "async_copy"),
        ("cuMemcpyDtoHAsync_v2", "async_copy"),
        ("cudaStreamWaitEvent", "stream_wait_event"),
        ("cudaEventQuery", "query"),
        ("cudaStreamBeginCapture_v10000", "capture_begin"),
        ("rocblas_create_handle", "library_init"),
        ("cudaMemcpyToArray", "none"),
        ("aten::mm", "none"),
    ],
)
def test_roles_of_names_the_rules_met(name: str, role: str) -> None:
    assert runtime_role(name) == role


def test_the_replay_and_the_attribution_agree_on_blocking_calls() -> None:
    """Every call the attribution counts as blocking (a sync, a copy the host may wait for, a
    synchronising free) is one the replay makes wait for the device, from the same table."""
    from gpuscope.analyses.host import HostActivity, _runtime_activity
    from gpuscope.runtime_apis import COPIES, WAITS_FOR_DEVICE

    for row in ROWS:
        for name in (row["cuda"], row["hip"]):
            role = runtime_role(_example(name)) if name else "none"
            blocks_in_attribution = _runtime_activity(_example(name)) == HostActivity.HOST_SYNC
            blocks_in_replay = role in WAITS_FOR_DEVICE or role == "copy"
            assert blocks_in_attribution == (blocks_in_replay and role != "free"), name
            assert (role in COPIES) == ("Memcpy" in name), name
