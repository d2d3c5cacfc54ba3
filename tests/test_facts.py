"""The GPU facts table and its name matcher."""

from __future__ import annotations

import math

import pytest

from gpuscope.facts import GpuFacts, all_facts, gpu_hour_price, match_device

REQUIRED_KEYS = {
    "v100_sxm2_16gb",
    "v100_sxm2_32gb",
    "t4",
    "a10g",
    "l4",
    "l40s",
    "a100_40gb_sxm",
    "a100_80gb_sxm",
    "a100_80gb_pcie",
    "h100_sxm",
    "h100_pcie",
    "h200",
    "b200",
    "rtx_2080_ti",
    "rtx_3090",
    "rtx_4090",
    "mi210",
    "mi250x_gcd",
    "mi300x",
    "h800_sxm",
    "h20",
    "a800_80gb_sxm",
    "l20",
    "l40",
    "a40",
    "a30",
    "rtx_a6000",
    "rtx_6000_ada",
    "rtx_3060",
    "rtx_4080",
    "rtx_5090",
    "v100s_pcie",
    "p100_sxm2",
    "gh200",
    "gb200",
    "b100",
    "mi250_gcd",
    "mi300a",
    "mi325x",
    "mi350x",
    "mi355x",
}

# Device names as Kineto / nvidia-smi / rocm-smi report them, and the row each must select.
NAMES = [
    ("Tesla V100-SXM2-32GB", "v100_sxm2_32gb"),
    ("Tesla V100-SXM2-16GB", "v100_sxm2_16gb"),
    ("Tesla V100-DGXS-32GB", "v100_sxm2_32gb"),
    ("Tesla V100-PCIE-16GB", "v100_pcie_16gb"),
    ("Tesla V100-PCIE-32GB", "v100_pcie_32gb"),
    ("Tesla T4", "t4"),
    ("NVIDIA A10G", "a10g"),
    ("NVIDIA L4", "l4"),
    ("NVIDIA L40S", "l40s"),
    ("NVIDIA A100-SXM4-80GB", "a100_80gb_sxm"),
    ("NVIDIA A100-SXM4-40GB", "a100_40gb_sxm"),
    ("NVIDIA A100-PG509-200", "a100_40gb_sxm"),
    ("NVIDIA A100 80GB PCIe", "a100_80gb_pcie"),
    ("NVIDIA A100-PCIE-40GB", "a100_40gb_pcie"),
    ("NVIDIA H100 80GB HBM3", "h100_sxm"),
    ("NVIDIA H100 PCIe", "h100_pcie"),
    ("NVIDIA H200", "h200"),
    ("NVIDIA B200", "b200"),
    ("NVIDIA GeForce RTX 2080 Ti", "rtx_2080_ti"),
    ("NVIDIA GeForce RTX 3090", "rtx_3090"),
    ("NVIDIA GeForce RTX 4090", "rtx_4090"),
    ("AMD Instinct MI210", "mi210"),
    ("AMD Instinct MI250X", "mi250x_gcd"),
    ("AMD Instinct MI250", "mi250_gcd"),
    ("AMD Instinct MI300X", "mi300x"),
    ("AMD Instinct MI300X VF", "mi300x"),
    ("  nvidia h100 80gb hbm3  ", "h100_sxm"),  # case and surrounding blanks do not matter
    # The GPUs people rent and own beyond the first table (issue #15).
    ("NVIDIA H800", "h800_sxm"),
    ("NVIDIA H800 PCIe", "h800_pcie"),
    ("NVIDIA H20", "h20"),
    ("NVIDIA A800-SXM4-80GB", "a800_80gb_sxm"),
    ("NVIDIA A800 80GB PCIe", "a800_80gb_pcie"),
    ("NVIDIA L20", "l20"),
    ("NVIDIA L40", "l40"),
    ("NVIDIA A40", "a40"),
    ("NVIDIA A30", "a30"),
    ("NVIDIA A10", "a10"),
    ("NVIDIA RTX A6000", "rtx_a6000"),
    ("NVIDIA RTX 6000 Ada Generation", "rtx_6000_ada"),
    ("NVIDIA GeForce RTX 3060", "rtx_3060"),
    ("NVIDIA GeForce RTX 3080 Ti", "rtx_3080_ti"),
    ("NVIDIA GeForce RTX 3090 Ti", "rtx_3090_ti"),
    ("NVIDIA GeForce RTX 4060 Ti", "rtx_4060_ti"),
    ("NVIDIA GeForce RTX 4070 Ti SUPER", "rtx_4070_ti_super"),
    ("NVIDIA GeForce RTX 4080", "rtx_4080"),
    ("NVIDIA GeForce RTX 5090", "rtx_5090"),
    ("NVIDIA GeForce RTX 5070", "rtx_5070"),
    ("Tesla V100S-PCIE-32GB", "v100s_pcie"),
    ("Tesla P100-SXM2-16GB", "p100_sxm2"),
    ("Tesla P100-PCIE-16GB", "p100_pcie_16gb"),
    ("NVIDIA GH200 480GB", "gh200"),
    ("NVIDIA GH200 144G HBM3e", "gh200_144gb"),
    ("NVIDIA GB200", "gb200"),
    ("NVIDIA B100", "b100"),
    ("NVIDIA H100 NVL", "h100_nvl"),
    ("AMD Instinct MI300A", "mi300a"),
    ("AMD Instinct MI325X", "mi325x"),
    ("AMD Instinct MI350X", "mi350x"),
    ("AMD Instinct MI355X", "mi355x"),
]

# Real names of GPUs the table does not describe: a near miss must not borrow a neighbour's row.
UNKNOWN_NAMES = [
    "NVIDIA Foo 9000",
    "",
    "   ",
    "NVIDIA H200 NVL",
    "NVIDIA GeForce RTX 4090 D",
    "NVIDIA GeForce RTX 4090 Laptop GPU",
    "AMD Instinct MI308X",
    "AMD Radeon Graphics",
    "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
]


def _by_key() -> dict[str, GpuFacts]:
    return {f.key: f for f in all_facts()}


def test_every_required_gpu_is_present() -> None:
    missing = REQUIRED_KEYS - set(_by_key())
    assert not missing


def test_keys_are_unique() -> None:
    keys = [f.key for f in all_facts()]
    assert len(keys) == len(set(keys))


@pytest.mark.parametrize(("name", "key"), NAMES)
def test_name_matches_its_row(name: str, key: str) -> None:
    facts = match_device(name)
    assert facts is not None, name
    assert facts.key == key


@pytest.mark.parametrize("name", [*UNKNOWN_NAMES, None])
def test_unknown_name_gives_none(name: str | None) -> None:
    assert match_device(name) is None


def test_matching_sm_count_confirms_and_other_count_rejects() -> None:
    h100 = match_device("NVIDIA H100 80GB HBM3", num_sms=132)
    assert h100 is not None
    assert h100.key == "h100_sxm"
    # A MIG slice reports its parent's name with fewer SMs: full-chip peaks would be wrong.
    assert match_device("NVIDIA A100-SXM4-40GB", num_sms=14) is None
    # An MI300X in CPX mode: one XCD of 38 CUs under the full chip's name.
    assert match_device("AMD Instinct MI300X", num_sms=38) is None
    # "Not recorded" (None, 0, -1) does not reject.
    for not_recorded in (None, 0, -1):
        assert match_device("NVIDIA A100-PG509-200", num_sms=not_recorded) is not None


def test_generic_or_empty_amd_name_is_unknown_whatever_the_cu_count() -> None:
    for name in ("AMD Radeon Graphics", "", None, "AMD Instinct"):
        for cus in (110, 304, 104, None):
            assert match_device(name, num_sms=cus) is None
    # A specific unknown name never falls back to the CU count.
    assert match_device("NVIDIA Foo 9000", num_sms=110) is None
    assert match_device("AMD Instinct MI300A", num_sms=304) is None  # its row says 228 CUs


def test_figures_are_positive_where_present() -> None:
    for f in all_facts():
        for value in (
            f.sm_count,
            f.memory_bytes,
            f.fp32_flops_per_s,
            f.tf32_flops_per_s,
            f.bf16_flops_per_s,
            f.fp8_flops_per_s,
            f.memory_bandwidth_bytes_per_s,
            f.interconnect_bytes_per_s,
            f.usd_per_gpu_hour,
        ):
            assert value is None or (math.isfinite(value) and value > 0), f.key
        # Every row has the figures every analysis needs (an SM count only where published).
        assert (
            f.sm_count is not None
            or "not published" in f.source
            or "/ 72" in f.source
            or ("/ 8 GPUs" in f.source)
        ), f.key
        assert f.architecture, f.key
        assert f.memory_bytes is not None, f.key
        assert f.fp32_flops_per_s is not None, f.key
        assert f.memory_bandwidth_bytes_per_s is not None, f.key
        assert f.vendor in {"NVIDIA", "AMD"}, f.key


def test_tensor_peaks_exceed_vector_fp32() -> None:
    # Every GPU in the table has tensor (NVIDIA) or matrix (AMD) cores.
    for f in all_facts():
        assert f.bf16_flops_per_s is not None, f.key
        assert f.fp32_flops_per_s is not None, f.key
        assert f.bf16_flops_per_s > f.fp32_flops_per_s, f.key
        if f.tf32_flops_per_s is not None:
            assert f.tf32_flops_per_s >= f.fp32_flops_per_s, f.key
            assert f.bf16_flops_per_s > f.tf32_flops_per_s, f.key
        if f.fp8_flops_per_s is not None:
            assert f.fp8_flops_per_s > f.bf16_flops_per_s, f.key


def test_every_row_has_source_and_price() -> None:
    for f in all_facts():
        assert f.source.strip(), f.key
        assert f.display_name.strip(), f.key
        # No price rather than a guessed one: the user's --gpu-hour-usd prices the rest.
        assert f.usd_per_gpu_hour is None or 0.05 < f.usd_per_gpu_hour < 50, f.key


def test_missing_figures_are_none_not_zero() -> None:
    by_key = _by_key()
    assert by_key["v100_sxm2_32gb"].fp8_flops_per_s is None
    assert by_key["v100_sxm2_32gb"].tf32_flops_per_s is None
    assert by_key["a100_80gb_sxm"].fp8_flops_per_s is None
    assert by_key["mi250x_gcd"].tf32_flops_per_s is None
    assert by_key["h100_sxm"].fp8_flops_per_s is not None


def test_exact_figures() -> None:
    by_key = _by_key()
    h100 = by_key["h100_sxm"]
    assert h100.bf16_flops_per_s == pytest.approx(989e12, rel=1e-3)
    assert h100.memory_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert h100.sm_count == 132
    assert h100.memory_bytes == 80 * 2**30
    assert h100.interconnect_bytes_per_s == pytest.approx(900e9)

    v100 = by_key["v100_sxm2_32gb"]
    assert v100.memory_bandwidth_bytes_per_s == pytest.approx(900e9)
    assert v100.sm_count == 80

    assert by_key["mi300x"].sm_count == 304
    assert by_key["mi300x"].memory_bandwidth_bytes_per_s == pytest.approx(5.3e12)

    # MI250X rows are one GCD: half the module.
    gcd = by_key["mi250x_gcd"]
    assert gcd.sm_count == 110
    assert gcd.memory_bandwidth_bytes_per_s == pytest.approx(1.6e12)
    assert gcd.bf16_flops_per_s == pytest.approx(383e12 / 2)

    assert by_key["a100_80gb_pcie"].memory_bandwidth_bytes_per_s == pytest.approx(1935e9)
    assert by_key["a100_80gb_sxm"].memory_bandwidth_bytes_per_s == pytest.approx(2039e9)
    assert by_key["a100_40gb_sxm"].memory_bandwidth_bytes_per_s == pytest.approx(1555e9)
    assert by_key["rtx_3090"].bf16_flops_per_s == pytest.approx(71e12)
    assert by_key["mi210"].bf16_flops_per_s == pytest.approx(181e12)


def test_prices_from_the_reference() -> None:
    by_key = _by_key()
    assert by_key["h100_sxm"].usd_per_gpu_hour == pytest.approx(4.92)
    assert by_key["h200"].usd_per_gpu_hour == pytest.approx(5.41)
    assert by_key["a100_40gb_sxm"].usd_per_gpu_hour == pytest.approx(1.84)
    assert by_key["a10g"].usd_per_gpu_hour == pytest.approx(1.006)


def test_a_priced_row_says_where_its_price_comes_from() -> None:
    for f in all_facts():
        assert f.usd_per_gpu_hour is None or "price" in f.source.lower(), f.key
    assert _by_key()["a40"].usd_per_gpu_hour == pytest.approx(1.22)


def test_a_known_gpu_without_a_price_is_named_never_priced_zero() -> None:
    h20 = _by_key()["h20"]
    assert h20.usd_per_gpu_hour is None
    assert gpu_hour_price([h20], None) == (
        None,
        "no price known for NVIDIA H20: pass --gpu-hour-usd to price the waste",
    )
    assert (
        gpu_hour_price([None], None)[1] == "unknown device: pass --gpu-hour-usd to price the waste"
    )
    assert gpu_hour_price([h20], 2.5) == (2.5, "--gpu-hour-usd")


def test_facts_are_frozen_and_loaded_once() -> None:
    first = all_facts()
    assert all(a is b for a, b in zip(first, all_facts(), strict=True))
    with pytest.raises(AttributeError):
        first[0].sm_count = 1  # type: ignore[misc]
