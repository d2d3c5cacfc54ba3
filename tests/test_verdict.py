"""Verdicts, findings and fixes that fit the evidence and the hardware (issue #15), by class."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from corpus import corpus
from gpuscope import diagnose, load
from gpuscope.analyses.bounds import KernelKind, kernel_kind_of_name
from gpuscope.diagnosis import Options
from gpuscope.diagnosis.copies import CopyStat
from gpuscope.diagnosis.fixes import FixEvidence, Hardware, advice
from gpuscope.facts import device_facts, family_facts
from gpuscope.model import Job
from gpuscope.testing import generator as g


def _job(cfg: g.GeneratorConfig, tmp_path: Path, device: str | None = None) -> Job:
    """A generated trace, its device renamed when ``device`` is given (the generator models a
    few GPUs; the name is what the facts lookup sees)."""
    path = g.generate(cfg).write(tmp_path / f"{cfg.seed}-{cfg.steps}.json")
    if device is not None:
        path.write_text(path.read_text().replace(cfg.device, device))
    return load(path)


# --- kernel classes without shapes or facts ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", KernelKind.GEMM),
        (
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
            KernelKind.GEMM,
        ),
        (
            "cutlass3x_sm100_tensorop_s64x256x32gemm_f8_f8_f32_f16_f16_64x256x128_1x1x1_0_tnn",
            KernelKind.GEMM,
        ),
        ("void deep_gemm::fp8_gemm_kernel<128u, 128u>(float*)", KernelKind.GEMM),
        ("triton_tem_fused_mm_0", KernelKind.GEMM),
        ("Cijk_Alik_Bljk_BBS_BH_MT128x128x32_MI32x32x8x1", KernelKind.GEMM),
        ("flash_fwd_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>>", KernelKind.ATTENTION),
        ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", KernelKind.ATTENTION),
        ("cudnn::detail::implicit_convolve_sgemm", KernelKind.GEMM_FP32),
        ("igemm_wrw_gtcx2_nhwc_bf16_bx0_ex1_bt64x128x32", KernelKind.CONV),
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
            KernelKind.ELEMENTWISE,
        ),
        ("triton_poi_fused_add_cos_sin_0", KernelKind.ELEMENTWISE),
        ("triton_red_fused_native_layer_norm_0", KernelKind.REDUCTION),
        ("triton_per_fused__softmax_1", KernelKind.REDUCTION),
        ("void at::native::(anonymous namespace)::indexSelectLargeIndex<float>", KernelKind.COPY),
        ("SubTensorOpWithScalar1d", KernelKind.ELEMENTWISE),
        ("my_custom_kernel", KernelKind.OTHER),
    ],
)
def test_kernel_kind_from_name_family(name: str, kind: KernelKind) -> None:
    assert kernel_kind_of_name(name) is kind


def test_gemms_on_an_unknown_gpu_without_shapes_are_compute_not_host(tmp_path: Path) -> None:
    # No facts (unknown GPU) and no shapes: the GEMMs' and attention's names still say tensor-core
    # work, and long kernels are never latency-bound (which used to count as host).
    d = diagnose(_job(g.GeneratorConfig(record_shapes=False), tmp_path, "NVIDIA Foo 9000"))
    assert d.devices[0].facts is None
    assert d.verdict.bound == "compute"
    assert d.verdict.shares_pct["latency"] < 5
    assert d.verdict.shares_pct["host"] < d.verdict.shares_pct["compute"]


def test_unnamed_kernels_are_unclassified_never_host() -> None:
    path = corpus("kineto/tracelens/mi210_cnn_train_gpu_only.json.gz")
    d = diagnose(load(path))
    # 89% busy: the busy time is kernels' (memory-bound batch-norm chains, MIOpen convolutions).
    assert 100 - d.verdict.idle_pct > 80
    assert d.verdict.bound in {"memory", "compute"}
    assert d.verdict.shares_pct["host"] == pytest.approx(d.verdict.idle_pct)


# --- copies --------------------------------------------------------------------------------------


def test_peer_to_peer_copies_filling_the_device_are_transfer_bound() -> None:
    path = corpus("wild/a100_nvlink_p2p_copy.json.gz")
    d = diagnose(load(path))
    assert d.verdict.bound == "transfer"
    assert "peer-to-peer copies between GPUs" in d.verdict.summary
    causes = [f.cause for f in d.findings]
    assert causes[0] == "p2p_copy" and "d2h_copy" not in causes
    p2p = d.findings[0]
    assert p2p.events == 30
    assert "they moved 1.20 GB" in p2p.evidence[1]
    assert "7.5 to 93.2 GB/s" in p2p.evidence[1]  # 4 NVLinks, 2 NVLinks, PCIe (see MANIFEST)
    # The device is not named: no link speed, no compute to hide under: no saving claimed.
    assert p2p.cost_usd_per_gpu_hour is None
    # Named with --gpu: achieved against the link, and a saving below the copies' time.
    named = diagnose(load(path), Options(gpu="A100-SXM4-40GB"))
    p2p = named.findings[0]
    assert "of NVLink3's 300 GB/s per direction" in p2p.evidence[1]
    price = named.verdict.gpu_hour_usd
    assert price is not None and p2p.cost_usd_per_gpu_hour is not None
    assert p2p.cost_usd_per_gpu_hour < p2p.share_pct / 100 * price


def test_unified_memory_migrations_are_a_page_migration_finding_with_the_prefetch_fix() -> None:
    d = diagnose(load(corpus("wild/nsys_t4_uvm_softmax.sqlite")))
    um = next(f for f in d.findings if f.cause == "page_migration")
    assert um.events == 834 + 1536
    assert "cudaMemPrefetchAsync" in um.fix
    # Migrations are not host copies: no pinning advice, no d2h/h2d findings from them.
    assert not {"d2h_copy", "h2d_copy"} & {f.cause for f in d.findings}
    # The finding is the migrations nothing hid plus the driver's fault service between them.
    service = sum(c.share_pct for c in d.devices[0].idle.causes if c.cause == "page_migration")
    exposed = d.verdict.figures["exposed_page_migration_pct"]
    assert exposed + service == pytest.approx(um.share_pct)


def test_pageable_copies_get_pinning_advice_and_pinned_ones_do_not() -> None:
    def copies(pinned: int) -> FixEvidence:
        stat = CopyStat(10, 1_000_000, 2_000_000, -1, 10 - pinned, pinned, None, None, None)
        return FixEvidence(copies=stat)

    assert "pin_memory=True" in advice("h2d_copy", copies(pinned=0))
    assert "Pin the few copies" in advice("h2d_copy", copies(pinned=6))
    pinned = advice("h2d_copy", copies(pinned=10))
    assert "already come from pinned memory" in pinned
    assert "DataLoader(pin_memory=True)" not in pinned


# --- fixes fit the hardware and the evidence -----------------------------------------------------


@pytest.mark.parametrize(
    ("device", "wanted", "unwanted"),
    [
        (
            "Tesla V100-SXM2-16GB",
            ("float16", "GradScaler"),
            ("bfloat16", "set_float32_matmul_precision", "FP8"),
        ),
        (
            "Tesla P100-PCIE-16GB",
            ("no tensor cores", "GradScaler"),
            ("bfloat16", "set_float32_matmul_precision"),
        ),
        ("NVIDIA A100-SXM4-40GB", ("bfloat16", "TF32"), ("FP8", "GradScaler")),
        ("NVIDIA H100 80GB HBM3", ("bfloat16", "FP8"), ("GradScaler",)),
    ],
)
def test_precision_advice_follows_the_architecture(
    device: str, wanted: tuple[str, ...], unwanted: tuple[str, ...], tmp_path: Path
) -> None:
    job = _job(g.GeneratorConfig(inject=(g.Fp32Gemm(),)), tmp_path, device)
    fix = next(f.fix for f in diagnose(job).findings if f.cause == "fp32_gemm")
    assert all(w in fix for w in wanted), fix
    assert not any(u in fix for u in unwanted), fix


def test_no_cuda_graph_advice_for_work_already_launched_as_graphs() -> None:
    plain = advice("launch_overhead", FixEvidence(("train.py:52",)))
    assert "capture the step in a CUDA graph" in plain
    for seen in (FixEvidence(graph_launched=True), FixEvidence(("cudaGraphLaunch",))):
        text = advice("launch_overhead", seen)
        assert "already launched as CUDA/HIP graphs" in text
        assert "capture the step in a CUDA graph" not in text
    hip = FixEvidence(("hipGraphLaunch",), hardware=Hardware(None, None))
    assert "already launched" in advice("launch_overhead", hip)


def test_per_day_cost_only_from_several_steps(tmp_path: Path) -> None:
    def day_costs(steps: int) -> list[float | None]:
        cfg = g.GeneratorConfig(steps=steps, inject=(g.HostSync(host_work_us=2000),))
        return [f.cost_usd_per_day for f in diagnose(_job(cfg, tmp_path)).findings]

    assert all(c is not None for c in day_costs(5))
    assert all(c is None for c in day_costs(1))


# --- GPU facts: family fallback and --gpu --------------------------------------------------------


def test_unknown_variants_get_family_figures_marked_estimated() -> None:
    b300 = device_facts("NVIDIA B300")
    assert b300 is not None and b300.estimated
    assert "estimated from family" in b300.display_name
    assert b300.architecture == "blackwell" and b300.bf16_flops_per_s is not None
    # GeForce models differ too much to share peaks: architecture only, no peaks, no price.
    laptop = family_facts("NVIDIA GeForce RTX 4060 Laptop GPU")
    assert laptop is not None and laptop.architecture == "ada"
    assert laptop.bf16_flops_per_s is None and laptop.usd_per_gpu_hour is None
    # A MIG slice never borrows the full chip's peaks.
    mig = device_facts("NVIDIA A100-SXM4-40GB MIG 1g.5gb")
    assert mig is not None and mig.bf16_flops_per_s is None and mig.architecture == "ampere"
    assert device_facts("") is None and device_facts("NVIDIA Foo 9000") is None
    # --gpu names the device only when the trace's own name finds no row.
    assert device_facts("", gpu="H800").key == "h800_sxm"  # type: ignore[union-attr]
    assert device_facts("NVIDIA H100 80GB HBM3", gpu="T4").key == "h100_sxm"  # type: ignore[union-attr]


def test_gpu_option_names_an_unnamed_device(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from gpuscope.cli import main

    out = tmp_path / "d.json"
    path = corpus("nsys/nsys-ai/h100_2gpu_1s.sqlite")  # no TARGET_INFO_GPU table: no names
    result = CliRunner().invoke(
        main, ["diagnose", str(path), "--gpu", "H100 SXM", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    assert doc["verdict"]["gpu_hour_usd"] == pytest.approx(4.92)


# --- broken figures ------------------------------------------------------------------------------


def test_fleet_json_of_counters_only_holds_no_nan(tmp_path: Path) -> None:
    from gpuscope import fleet

    table = fleet.run(
        [str(corpus("ncu/b200_cublaslt_fp8_gemm.ncu.csv.log"))], fleet.Engine(workers=1)
    )
    assert table.jobs[0].status == "ok" and table.jobs[0].idle_pct is None
    fleet.write(table, tmp_path / "f.json")
    json.loads((tmp_path / "f.json").read_text(), parse_constant=pytest.fail)


def test_unified_memory_counter_table_of_older_exports(tmp_path: Path) -> None:
    """Older exports keep migrations in CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER (counter kinds
    1 and 2 are bytes moved host-to-device and device-to-host), not as UVM copies."""
    import shutil
    import sqlite3

    path = tmp_path / "um.sqlite"
    shutil.copy(corpus("wild/nsys_t4_uvm_softmax.sqlite"), path)
    with sqlite3.connect(path) as db:
        moved = db.execute(
            "SELECT start, end, copyKind - 10, bytes, deviceId, globalPid"
            " FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind IN (11, 12)"
        ).fetchall()
        db.execute("DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind IN (11, 12)")
        db.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER (start INTEGER, end INTEGER,"
            " counterKind INTEGER, value INTEGER, deviceId INTEGER, globalPid INTEGER)"
        )
        db.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER VALUES (?, ?, ?, ?, ?, ?)",
            [*moved, (moved[0][0], moved[0][0] + 10, 3, 1, 0, moved[0][5])],  # a fault count
        )
    d = diagnose(load(path))
    um = next(f for f in d.findings if f.cause == "page_migration")
    assert um.events == 834 + 1536  # the fault-count row is no transfer
    assert "cudaMemPrefetchAsync" in um.fix
