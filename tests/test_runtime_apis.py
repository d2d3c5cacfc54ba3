"""HIP parity: every CUDA runtime/driver API a rule classifies has a HIP twin with the same role.

The twins live in ``data/runtime_apis.csv``; a rule that learns a CUDA name without its HIP twin
(or a twin the rules classify differently) fails here.
"""

from __future__ import annotations

import csv
from importlib import resources

import pytest

from gpuscope.analyses.host import runtime_role

ROLES = {
    "sync",
    "copy",
    "async_copy",
    "allocator",
    "launch",
    "context",
    "module_load",
    "library_init",
    "teardown",
    "capture",
    "graph_instantiate",
}


def _rows() -> list[dict[str, str]]:
    text = resources.files("gpuscope.data").joinpath("runtime_apis.csv").read_text("utf-8")
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return list(csv.DictReader(lines))


ROWS = _rows()


def test_table_is_well_formed() -> None:
    assert len(ROWS) >= 50
    for row in ROWS:
        assert row["role"] in ROLES, row
        assert row["cuda"].startswith("cu"), row
        assert row["hip"].startswith(("hip", "miopen", "rocblas")), row


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['cuda']}->{r['hip']}")
def test_cuda_and_hip_twins_share_the_role(row: dict[str, str]) -> None:
    assert runtime_role(row["cuda"]) == row["role"]
    assert runtime_role(row["hip"]) == row["role"]
    # Versioned entry points (cudaLaunchKernel_v7000, ..._ptsz) keep the role.
    assert runtime_role(row["cuda"] + "_v7000") == row["role"]


def test_every_classified_cuda_name_of_the_generator_has_a_twin() -> None:
    """The generator writes the CUDA names real traces carry; each classified one is listed."""
    from gpuscope.testing import generator

    listed = {row["cuda"] for row in ROWS}
    names = {n for n in generator.RUNTIME_NAMES if runtime_role(n) != "none"}
    assert names, "the generator names no runtime APIs"
    assert names <= listed, sorted(names - listed)


@pytest.mark.parametrize(
    "name",
    ["hipMemcpyWithStream", "hipMemcpyDtoH", "hipMemcpyHtoDAsync", "hipExtModuleLaunchKernel"],
)
def test_rocm_names_from_real_traces_are_classified(name: str) -> None:
    assert runtime_role(name) != "none"
