"""The Nsight Systems SQLite reader: the real exports in the corpus, and small exports built here.

Busy time is checked against plain SQL + Python interval unions over the same tables; the Kineto
and nsys readers must reach the same verdict on one simulated program.
"""

from __future__ import annotations

import gzip
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import gpuscope
from corpus import corpus, corpus_root
from gpuscope.analyses.timeline import device_work, temporal_breakdown
from gpuscope.errors import CorruptInputError, EmptyTraceError, InputError, UnknownFormatError
from gpuscope.model import CopyDirection, Kind, Trace
from gpuscope.readers import load
from gpuscope.readers.nsys import _export as nsys_export
from gpuscope.readers.nsys import looks_like_nsys
from gpuscope.testing.generator import GeneratorConfig, SlowDataLoader, generate

NSYS_FILES = [
    "nsys/nsys-ai/h100_2gpu_1s.sqlite",
    "nsys/nsys-ai/mfu_2gpu_before.sqlite",
    "nsys/nsys-ai/mfu_2gpu_after.sqlite",
    "nsys/pipit/a100_cloverleaf.sqlite",
    "nsys/pipit/a100_saxpy_mpi_rank0_schema2.9.sqlite",
    "nsys/weatherbench2/rtx4060_no_kernel_table.sqlite",
]
DEVICE_TABLES = ("KERNEL", "MEMCPY", "MEMSET")


# --- a tiny nsys export writer, for the cases the corpus does not have --------------------------


class Export:
    """Writes the tables of an nsys export; ``add`` takes dict rows, columns from the first."""

    GLOBAL = 1 << 48  # nsys puts a hardware id above the pid bits

    def __init__(self, path: Path, schema: str = "3.25.0") -> None:
        self.path = path
        self.db = sqlite3.connect(path)
        self.strings: dict[str, int] = {}
        self.add("StringIds", [])
        self.add("META_DATA_EXPORT", [{"name": "EXPORT_SCHEMA_VERSION", "value": schema}])

    def gpid(self, pid: int) -> int:
        return self.GLOBAL | (pid << 24)

    def gtid(self, pid: int, tid: int) -> int:
        return self.gpid(pid) | (tid & 0xFFFFFF)

    def string(self, value: str) -> int:
        if value not in self.strings:
            self.strings[value] = len(self.strings)
            self.db.execute("INSERT INTO StringIds VALUES (?, ?)", (self.strings[value], value))
        return self.strings[value]

    def add(self, table: str, rows: Sequence[dict[str, Any]], columns: Iterable[str] = ()) -> None:
        names = list(rows[0]) if rows else list(columns) or ["id", "value"]
        if table == "StringIds":
            names = ["id", "value"]
        exists = self.db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone()
        if not exists:
            self.db.execute(f"CREATE TABLE {table} ({', '.join(names)})")
        marks = ", ".join("?" * len(names))
        self.db.executemany(
            f"INSERT INTO {table} ({', '.join(names)}) VALUES ({marks})",
            [tuple(r[n] for n in names) for r in rows],
        )

    def enums(self) -> None:
        """The enum tables a 3.x export carries, with nsys's own numbering."""
        opers = ["UNKNOWN", "HTOD", "DTOH", "HTOA", "ATOH", "ATOA", "ATOD", "DTOA", "DTOD"]
        opers += ["HTOH", "PTOP"]
        self.add(
            "ENUM_CUDA_MEMCPY_OPER",
            [{"id": i, "name": f"CUDA_MEMCPY_KIND_{n}", "label": n} for i, n in enumerate(opers)],
        )
        kinds = ["Pageable", "Pinned", "Device", "Array", "Managed"]
        self.add(
            "ENUM_CUDA_MEM_KIND",
            [{"id": i, "name": f"KIND_{k.upper()}", "label": k} for i, k in enumerate(kinds)],
        )

    def kernel(self, pid: int, start: int, end: int, name: str = "gemm", **more: Any) -> None:
        row = {
            "start": start,
            "end": end,
            "deviceId": more.pop("device", 0),
            "streamId": more.pop("stream", 7),
            "correlationId": more.pop("correlation", None),
            "globalPid": self.gpid(pid),
            "demangledName": self.string(name),
            "shortName": self.string(name.split("<", maxsplit=1)[0]),
            "gridX": 1,
            "gridY": 1,
            "gridZ": 1,
            "blockX": 128,
            "blockY": 1,
            "blockZ": 1,
        }
        self.add("CUPTI_ACTIVITY_KIND_KERNEL", [row | more])

    def runtime(self, pid: int, tid: int, start: int, end: int, name: str, corr: int) -> None:
        row = {
            "start": start,
            "end": end,
            "eventClass": 0,
            "globalTid": self.gtid(pid, tid),
            "correlationId": corr,
            "nameId": self.string(name),
            "returnValue": 0,
        }
        self.add("CUPTI_ACTIVITY_KIND_RUNTIME", [row])

    def nvtx(
        self, pid: int, tid: int, start: int, end: int | None, text: str, kind: int = 59
    ) -> None:
        row = {
            "start": start,
            "end": end,
            "eventType": kind,
            "text": text,
            "globalTid": self.gtid(pid, tid),
            "textId": None,
        }
        self.add("NVTX_EVENTS", [row])

    def close(self) -> Path:
        self.db.commit()
        self.db.close()
        return self.path


# --- the corpus, checked against SQL ------------------------------------------------------------


def sql_busy_ns(path: Path) -> dict[tuple[int, int], int]:
    """Union of kernel, memcpy and memset intervals per (process, device), in plain Python."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    intervals: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for suffix in DEVICE_TABLES:
        table = f"CUPTI_ACTIVITY_KIND_{suffix}"
        if table not in tables:
            continue
        sql = f"SELECT (globalPid >> 24) & 16777215, deviceId, start, end FROM {table}"
        for pid, device, start, end in db.execute(sql):
            if end > start:
                intervals.setdefault((pid, device), []).append((start, end))
    db.close()
    busy: dict[tuple[int, int], int] = {}
    for key, spans in intervals.items():
        total, reach_start, reach_end = 0, None, None
        for start, end in sorted(spans):
            if reach_end is None or start > reach_end:
                if reach_end is not None and reach_start is not None:
                    total += reach_end - reach_start
                reach_start, reach_end = start, end
            else:
                reach_end = max(reach_end, end)
        if reach_end is not None and reach_start is not None:
            total += reach_end - reach_start
        busy[key] = total
    return busy


@pytest.mark.parametrize("relative", NSYS_FILES)
def test_busy_time_equals_sql_union_to_the_nanosecond(relative: str) -> None:
    path = corpus(relative)
    job = load(path)
    got = {
        (t.metadata["pid"], d): temporal_breakdown(device_work(t, d)).busy_ns
        for t in job.traces
        for d in t.device_ids
    }
    assert got == sql_busy_ns(path)
    for trace in job.traces:
        assert trace.format == "nsys"
        assert np.all(np.diff(trace.events.start_ns) >= 0)


def test_every_corpus_export_is_listed() -> None:
    found = {str(p.relative_to(corpus_root())) for p in corpus("nsys").rglob("*.sqlite")}
    assert found == set(NSYS_FILES)


def test_h100_is_two_processes_linked_by_correlation_id() -> None:
    path = corpus("nsys/nsys-ai/h100_2gpu_1s.sqlite")
    job = load(path)
    assert [(t.metadata["pid"], t.device_ids) for t in job.traces] == [(111, [0]), (112, [1])]
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    for trace in job.traces:
        ev = trace.events
        assert trace.schema == "nsys-3.25"
        assert trace.rank is None and trace.world_size is None
        # No TARGET_INFO_GPU: the device is not named, never guessed.
        assert all(info.name is None for info in trace.devices.values())
        kernels = np.flatnonzero(ev.kind == Kind.KERNEL)
        expected = db.execute(
            "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"
            " WHERE (globalPid >> 24) & 16777215 = ?",
            (trace.metadata["pid"],),
        ).fetchone()[0]
        assert kernels.size == expected == 1721
        # Kernels are linked to the runtime call of the same process with the same correlation
        # id, and back. The fixture was cut from a longer capture: the launches of its first
        # kernels (the GPU queue ran ~370 ms behind the host) fell outside the window.
        launchable = db.execute(
            "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k WHERE (k.globalPid >> 24) & 16777215"
            " = ? AND EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.correlationId ="
            " k.correlationId AND (r.globalTid >> 24) & 16777215 = (k.globalPid >> 24) & 16777215)",
            (trace.metadata["pid"],),
        ).fetchone()[0]
        launchers = ev.link[kernels]
        assert int((launchers >= 0).sum()) == launchable > 800
        launchers = launchers[launchers >= 0]
        kernels = kernels[ev.link[kernels] >= 0]
        assert np.all(ev.kind[launchers] == Kind.RUNTIME)
        assert np.all(ev.correlation[launchers] == ev.correlation[kernels])
        assert np.all(ev.pid[launchers] == trace.metadata["pid"])
        first = launchers[0]
        assert ev.kind[ev.link[first]] in (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC)
        # Runtime names keep their version suffix; kernels their full demangled name.
        names = {trace.name(int(r)) for r in np.flatnonzero(ev.kind == Kind.RUNTIME)}
        assert "cudaStreamSynchronize_v3020" in names
        kernel_names = {trace.name(int(r)) for r in kernels}
        assert any(n.startswith("void at::native::") and "<" in n for n in kernel_names)
    db.close()


def test_h100_copies_are_pinned_h2d_and_syncs_are_not_busy() -> None:
    job = load(corpus("nsys/nsys-ai/h100_2gpu_1s.sqlite"))
    for trace in job.traces:
        ev = trace.events
        h2d = (ev.kind == Kind.MEMCPY) & (ev.copy_direction == CopyDirection.H2D)
        big = h2d & (ev.bytes >= 100 << 20)
        # The export's ENUM_CUDA_MEM_KIND says 1 = Pinned (CUPTI's own numbering says pageable).
        assert big.sum() > 100 and not ev.pageable[big].any()
        assert {trace.name(int(r)) for r in np.flatnonzero(big)} == {
            "Memcpy HtoD (Pinned -> Device)"
        }
        assert int(ev.bytes[h2d].sum()) > 25e9
        syncs = np.flatnonzero(ev.kind == Kind.SYNC)
        assert syncs.size == 122 and np.all(ev.stream[syncs] >= 0)
        assert {trace.name(int(r)) for r in syncs} == {"Stream sync", "Stream wait sync"}
        work = device_work(trace, trace.device_ids[0])
        assert not np.isin(work.rows, syncs).any()


def test_h100_diagnosis_end_to_end_shows_h2d_copies_and_syncs() -> None:
    job = load(corpus("nsys/nsys-ai/h100_2gpu_1s.sqlite"))
    diagnosis = gpuscope.diagnose(job)
    assert len(diagnosis.devices) == 2
    trace_of = {device: t for t in job.traces for device in t.device_ids}
    for report in diagnosis.devices:
        trace = trace_of[report.device]
        t = report.temporal
        # ~51 GB of pinned H2D copies fill 97% of each GPU's window; kernels run ~2%.
        assert t.exclusive_memcpy_ns > 0.9 * t.span_ns
        assert t.compute_ns < 0.05 * t.span_ns
        causes = [c.cause for c in report.idle.causes]
        assert "host_sync" in causes and "h2d_copy" in causes
        # The host sits in cudaStreamSynchronize while the copies run.
        ev = trace.events
        sync_calls = np.flatnonzero(
            (ev.kind == Kind.RUNTIME)
            & np.isin(ev.name_id, [trace.names.index("cudaStreamSynchronize_v3020")])
        )
        assert int(ev.dur_ns[sync_calls].sum()) > 400_000_000
    assert diagnosis.verdict.summary


def test_h100_busy_with_host_to_device_copies_is_transfer_bound_not_host_bound() -> None:
    # 51 GB of host-to-device copies keep both GPUs 99% busy: the host waits for them (857 ms in
    # cudaStreamSynchronize), not they for the host.
    diagnosis = gpuscope.diagnose(load(corpus("nsys/nsys-ai/h100_2gpu_1s.sqlite")))
    assert diagnosis.verdict.bound == "transfer"
    assert diagnosis.verdict.summary.startswith("transfer-bound: copies with nothing else running")
    assert "host-to-device copies" in diagnosis.verdict.summary
    top = diagnosis.findings[0]
    assert top.cause == "h2d_copy"
    # 446 of the 450 copies are pinned: the fix is overlap, not pinning.
    assert "446 of 450 copies already use pinned host memory" in top.evidence
    assert "already come from pinned memory" in top.fix


def test_mfu_before_and_after_diagnose_end_to_end() -> None:
    results = {}
    traces = {}
    for name in ("before", "after"):
        path = corpus(f"nsys/nsys-ai/mfu_2gpu_{name}.sqlite")
        job = load(path)
        diagnosis = gpuscope.diagnose(job)
        traces[name] = job.traces[0]
        assert [(r.device, r.rank) for r in diagnosis.devices] == [(0, None), (1, None)]
        # NCCL SendRecv kernels are communication; flash attention and nvjet GEMMs compute.
        assert all(r.temporal.communication_ns > 0 for r in diagnosis.devices)
        assert all(r.temporal.compute_ns > r.temporal.communication_ns for r in diagnosis.devices)
        assert diagnosis.verdict.bound in {"host", "memory", "compute", "communication"}
        assert diagnosis.findings and diagnosis.findings[0].lost_ns > 0
        results[name] = diagnosis
    before = traces["before"]
    ops = {before.name(int(r)) for r in np.flatnonzero(before.events.kind == Kind.CPU_OP)}
    # emit_nvtx ranges ("aten::mm, seq = 3, op_id = 17") are operators named as Kineto names them.
    assert "aten::copy_" in ops and not any("op_id" in n for n in ops)


def test_schema_2_9_export_with_mpi_rank_and_no_enum_tables() -> None:
    job = load(corpus("nsys/pipit/a100_saxpy_mpi_rank0_schema2.9.sqlite"))
    (trace,) = job.traces
    assert trace.schema == "nsys-2.9"
    assert trace.rank == 0  # the export names the thread "MPI Rank 0"
    info = trace.devices[0]
    assert (info.name, info.num_sms, info.total_memory_bytes, info.compute_capability) == (
        "NVIDIA A100-SXM4-40GB",
        108,
        42_297_524_224,
        "8.0",
    )
    ev = trace.events
    copies = np.flatnonzero(ev.kind == Kind.MEMCPY)
    names = {trace.name(int(r)) for r in copies}
    # No enum tables in 2.x: nsys's documented values decode srcKind 0 as pageable.
    assert "Memcpy HtoD (Pageable -> Device)" in names
    h2d = copies[ev.copy_direction[copies] == CopyDirection.H2D]
    assert h2d.size and ev.pageable[h2d].all()
    annotations = {trace.name(int(r)) for r in np.flatnonzero(ev.kind == Kind.ANNOTATION)}
    assert {"MPI_Send", "MPI_Recv", "saxpy"} <= annotations
    assert gpuscope.diagnose(job).verdict.bound == "host"


def test_export_without_kernel_table_is_read() -> None:
    job = load(corpus("nsys/weatherbench2/rtx4060_no_kernel_table.sqlite"))
    (trace,) = job.traces
    ev = trace.events
    assert int((ev.kind == Kind.MEMSET).sum()) == 1
    assert int((ev.kind == Kind.KERNEL).sum()) == 0
    assert trace.devices[0].name == "NVIDIA GeForce RTX 4060"
    assert trace.devices[0].num_sms == 24
    assert gpuscope.diagnose(job).devices[0].temporal.busy_ns > 0


def test_cloverleaf_sync_events_and_os_runtime() -> None:
    (trace,) = load(corpus("nsys/pipit/a100_cloverleaf.sqlite")).traces
    ev = trace.events
    syncs = np.flatnonzero(ev.kind == Kind.SYNC)
    assert syncs.size == 1312
    assert {trace.name(int(r)) for r in syncs} == {"Event sync"}
    assert trace.devices[0].name == "NVIDIA A100-SXM4-80GB"
    os_runtime = trace.metadata["os_runtime_ns"]
    assert 0 < len(os_runtime) <= 10
    assert list(os_runtime.values()) == sorted(os_runtime.values(), reverse=True)


# --- decoding through the export's own tables ---------------------------------------------------


def test_memory_kinds_follow_the_exports_enum_table(tmp_path: Path) -> None:
    """An export whose enum numbers pinned memory 2 and pageable 1: the table wins."""
    out = Export(tmp_path / "enums.sqlite")
    out.add(
        "ENUM_CUDA_MEM_KIND",
        [
            {"id": 0, "name": "UNKNOWN", "label": "Unknown"},
            {"id": 1, "name": "PAGEABLE", "label": "Pageable"},
            {"id": 2, "name": "PINNED", "label": "Pinned"},
            {"id": 3, "name": "DEVICE", "label": "Device"},
        ],
    )
    out.add(
        "ENUM_CUDA_MEMCPY_OPER",
        [{"id": 7, "name": "CUDA_MEMCPY_KIND_HTOD", "label": "Host-to-Device"}],
    )
    copies = [(2, 100, 200), (1, 300, 400)]
    out.add(
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        [
            {
                "start": s,
                "end": e,
                "deviceId": 0,
                "streamId": 7,
                "correlationId": i,
                "globalPid": out.gpid(5),
                "bytes": 1 << 20,
                "copyKind": 7,
                "srcKind": src,
                "dstKind": 3,
            }
            for i, (src, s, e) in enumerate(copies)
        ],
    )
    (trace,) = load(out.close()).traces
    ev = trace.events
    assert [trace.name(r) for r in range(2)] == [
        "Memcpy HtoD (Pinned -> Device)",
        "Memcpy HtoD (Pageable -> Device)",
    ]
    assert ev.pageable.tolist() == [False, True]
    assert ev.copy_direction.tolist() == [CopyDirection.H2D, CopyDirection.H2D]


def test_enum_tables_without_labels(tmp_path: Path) -> None:
    out = Export(tmp_path / "names_only.sqlite")
    out.add(
        "ENUM_CUDA_MEM_KIND",
        [
            {"id": 0, "name": "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE"},
            {"id": 1, "name": "CUDA_MEMOPR_MEMORY_KIND_PINNED"},
            {"id": 2, "name": "CUDA_MEMOPR_MEMORY_KIND_DEVICE"},
        ],
    )
    out.add(
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        [
            {
                "start": 0,
                "end": 10,
                "deviceId": 0,
                "streamId": 7,
                "correlationId": 1,
                "globalPid": out.gpid(5),
                "bytes": 64,
                "copyKind": 2,
                "srcKind": 2,
                "dstKind": 0,
            }
        ],
    )
    (trace,) = load(out.close()).traces
    assert trace.name(0) == "Memcpy DtoH (Device -> Pageable)"
    assert trace.events.pageable.tolist() == [True]
    assert trace.events.copy_direction.tolist() == [CopyDirection.D2H]


def test_gpu_metrics_summary_per_device(tmp_path: Path) -> None:
    out = Export(tmp_path / "metrics.sqlite")
    out.kernel(pid=9, start=1_000, end=2_000, device=1)
    out.add(
        "TARGET_INFO_GPU",
        [
            {"id": 3, "cuDevice": 1, "name": "NVIDIA H100 80GB HBM3", "smCount": 132},
            {"id": 0, "cuDevice": 0, "name": "NVIDIA H100 80GB HBM3", "smCount": 132},
        ],
    )
    type_id = 0x1000_0000 | 3  # GPU id in the low byte
    metrics = {1: "SMs Active [Throughput %]", 2: "Compute Warps in Flight [Throughput %]"}
    metrics |= {3: "DRAM Read Bandwidth [Throughput %]", 4: "DRAM Write Bandwidth [Throughput %]"}
    out.add(
        "TARGET_INFO_GPU_METRICS",
        [
            {"typeId": type_id, "sourceId": 0, "typeName": "GH100", "metricId": m, "metricName": n}
            for m, n in metrics.items()
        ],
    )
    samples = []
    for i, t_ns in enumerate(range(0, 40_000, 10_000)):
        for metric_id in metrics:
            samples.append(
                {
                    "timestamp": t_ns,
                    "typeId": type_id,
                    "metricId": metric_id,
                    "value": metric_id * 10 + i,
                }
            )
    out.add("GPU_METRICS", samples)
    (trace,) = load(out.close()).traces
    assert trace.devices[1].name == "NVIDIA H100 80GB HBM3"
    assert trace.metadata["gpu_metrics"] == {
        1: {
            "gpu_id": 3,
            "samples": 4,
            "sampling_period_ns": 10_000,
            "SMs Active [Throughput %]": 11.5,
            "Compute Warps in Flight [Throughput %]": 21.5,
            "DRAM Read Bandwidth [Throughput %]": 31.5,
            "DRAM Write Bandwidth [Throughput %]": 41.5,
        }
    }


def test_steps_from_step_like_nvtx_ranges(tmp_path: Path) -> None:
    out = Export(tmp_path / "steps.sqlite")
    for i in range(3):
        t0 = i * 10_000
        out.nvtx(7, 7, t0, t0 + 9_000, f"step {i + 12}")
        out.nvtx(7, 7, t0 + 100, t0 + 200, "optimizer.step")
        out.kernel(7, t0 + 500, t0 + 900)
    out.nvtx(7, 7, 50_000, None, "a mark", kind=34)
    (trace,) = load(out.close()).traces
    assert [(s.name, s.number, s.start_ns, s.end_ns) for s in trace.steps] == [
        ("step 12", 12, 0, 9_000),
        ("step 13", 13, 10_000, 19_000),
        ("step 14", 14, 20_000, 29_000),
    ]
    annotations = [trace.name(int(r)) for r in np.flatnonzero(trace.events.kind == Kind.ANNOTATION)]
    assert "a mark" not in annotations and "optimizer.step" in annotations


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["ProfilerStep#3", "ProfilerStep#4"], [3, 4]),
        (["iteration_4", "iteration_5"], [4, 5]),
        (["train_step", "train_step"], [0, 1]),
        (["Step 7"], [7]),
        (["optimizer.step", "aten::step"], []),
    ],
)
def test_step_name_families(tmp_path: Path, names: list[str], expected: list[int]) -> None:
    out = Export(tmp_path / "names.sqlite")
    for i, name in enumerate(names):
        out.nvtx(3, 3, i * 100, i * 100 + 50, name)
    out.kernel(3, 10, 20)
    (trace,) = load(out.close()).traces
    assert [s.number for s in trace.steps] == expected


def test_processes_split_and_threads_decoded(tmp_path: Path) -> None:
    out = Export(tmp_path / "procs.sqlite")
    for pid, device in ((100, 0), (200, 1)):
        out.runtime(pid, pid + 1, 1_000, 1_500, "cudaLaunchKernel_v7000", corr=42)
        out.kernel(pid, 2_000, 3_000, device=device, correlation=42)
    out.runtime(300, 301, 1_000, 1_100, "cudaGetDevice", corr=1)  # no GPU work: no trace
    job = load(out.close())
    assert [(t.metadata["pid"], t.device_ids) for t in job.traces] == [(100, [0]), (200, [1])]
    for trace in job.traces:
        ev = trace.events
        runtime = int(np.flatnonzero(ev.kind == Kind.RUNTIME)[0])
        kernel = int(np.flatnonzero(ev.kind == Kind.KERNEL)[0])
        assert ev.tid[runtime] == trace.metadata["pid"] + 1
        # The same correlation id in two processes links each launch to its own kernel.
        assert (ev.link[kernel], ev.link[runtime]) == (runtime, kernel)
        assert trace.devices[trace.device_ids[0]].name is None


def test_rows_read_in_rowid_batches_across_gaps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches are rowid ranges: rows deleted from an export, and runs of rowids far apart, are
    read once each and in order, whatever the batch size."""
    out = Export(tmp_path / "gaps.sqlite")
    for i in range(40):
        out.kernel(5, i * 1_000, i * 1_000 + 500, name=f"k{i}")
    out.db.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 3 = 0")
    out.db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET rowid = rowid + 1000000 WHERE rowid > 30")
    path = out.close()
    expected = [f"k{i}" for i in range(40) if (i + 1) % 3]
    for batch_rows in (1, 4, 7, 65536):
        monkeypatch.setattr(nsys_export, "_BATCH_ROWS", batch_rows)
        (trace,) = load(path).traces
        kernels = np.flatnonzero(trace.events.kind == Kind.KERNEL)
        assert [trace.name(int(k)) for k in kernels] == expected


# --- bad inputs ---------------------------------------------------------------------------------


def one_line_error(path: Path) -> InputError:
    with pytest.raises(InputError) as info:
        load(path)
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    return info.value


def test_sqlite_that_is_not_an_nsys_export(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE StringIds (id, value)")  # the marker the sniffer sees, nothing else
    db.execute("CREATE TABLE notes (body)")
    db.commit()
    db.close()
    error = one_line_error(path)
    assert isinstance(error, UnknownFormatError)
    assert "not an Nsight Systems export" in error.reason


def test_unrelated_sqlite_is_not_sniffed(tmp_path: Path) -> None:
    path = tmp_path / "app.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (name)")
    db.commit()
    db.close()
    assert isinstance(one_line_error(path), UnknownFormatError)


def test_gzipped_export_asks_for_gunzip(tmp_path: Path) -> None:
    path = tmp_path / "report.sqlite.gz"
    path.write_bytes(gzip.compress(corpus("nsys/pipit/a100_cloverleaf.sqlite").read_bytes()))
    error = one_line_error(path)
    assert isinstance(error, UnknownFormatError) and "gunzip" in error.reason


def test_truncated_export(tmp_path: Path) -> None:
    source = corpus("nsys/pipit/a100_cloverleaf.sqlite")
    path = tmp_path / "cut.sqlite"
    path.write_bytes(source.read_bytes()[: source.stat().st_size // 2])
    error = one_line_error(path)
    assert isinstance(error, CorruptInputError) and "truncated" in error.reason


def test_damaged_pages(tmp_path: Path) -> None:
    source = corpus("nsys/pipit/a100_cloverleaf.sqlite")
    data = bytearray(source.read_bytes())
    half = len(data) // 2
    data[half:] = bytes(len(data) - half)  # the schema survives, the data pages do not
    path = tmp_path / "damaged.sqlite"
    path.write_bytes(bytes(data))
    assert isinstance(one_line_error(path), CorruptInputError)


def test_unknown_schema(tmp_path: Path) -> None:
    out = Export(tmp_path / "future.sqlite", schema="9.1.0")
    out.kernel(1, 0, 10)
    error = one_line_error(out.close())
    assert isinstance(error, UnknownFormatError) and "schema 9.1.0" in error.reason


def test_missing_required_column(tmp_path: Path) -> None:
    out = Export(tmp_path / "odd.sqlite")
    out.add("CUPTI_ACTIVITY_KIND_KERNEL", [{"start": 0, "deviceId": 0, "streamId": 1}])
    error = one_line_error(out.close())
    assert isinstance(error, CorruptInputError)
    assert "CUPTI_ACTIVITY_KIND_KERNEL lacks column(s) end" in error.reason


def test_null_times_are_corrupt_not_a_traceback(tmp_path: Path) -> None:
    out = Export(tmp_path / "nulls.sqlite")
    out.kernel(1, 0, 10)
    out.db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = NULL")
    error = one_line_error(out.close())
    assert isinstance(error, CorruptInputError) and "non-integer" in error.reason


def test_no_gpu_activity(tmp_path: Path) -> None:
    out = Export(tmp_path / "cpu.sqlite")
    out.runtime(1, 1, 0, 10, "cudaLaunchKernel_v7000", corr=1)
    error = one_line_error(out.close())
    assert isinstance(error, EmptyTraceError) and "no kernels" in error.reason


def test_sniffer_wants_sqlite_and_nsys_tables() -> None:
    head = corpus("nsys/nsys-ai/h100_2gpu_1s.sqlite").read_bytes()[:65536]
    assert looks_like_nsys(head)
    assert not looks_like_nsys(b"SQLite format 3\x00" + bytes(100))
    assert not looks_like_nsys(b'{"traceEvents": [], "StringIds": 1}')


def test_cli_bad_export_is_one_line_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "cut.sqlite"
    shutil.copyfile(corpus("nsys/pipit/a100_cloverleaf.sqlite"), path)
    path.write_bytes(path.read_bytes()[:100_000])
    result = subprocess.run(
        [sys.executable, "-m", "gpuscope", "diagnose", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "Traceback" not in result.stderr


# --- the same program through Kineto and through nsys -------------------------------------------


def kineto_to_nsys(trace: Trace, path: Path) -> Path:
    """Write a Kineto trace as an nsys export holds it: CUPTI tables, NVTX ranges, StringIds."""
    out = Export(path)
    out.enums()
    ev = trace.events
    pid = 4321
    for info in trace.devices.values():
        major, minor = (info.compute_capability or "9.0").split(".")
        out.add(
            "TARGET_INFO_GPU",
            [
                {
                    "id": info.index,
                    "cuDevice": info.index,
                    "name": info.name,
                    "smCount": info.num_sms,
                    "totalMemory": info.total_memory_bytes,
                    "computeMajor": int(major),
                    "computeMinor": int(minor),
                }
            ],
        )
    device_rows: dict[str, list[dict[str, Any]]] = {t: [] for t in (*DEVICE_TABLES, "SYNC")}
    runtime_rows: list[dict[str, Any]] = []
    nvtx_rows: list[dict[str, Any]] = []
    direction_code = {CopyDirection.H2D: 1, CopyDirection.D2H: 2, CopyDirection.D2D: 8}
    for row in range(len(ev)):
        kind = Kind(int(ev.kind[row]))
        start, end = int(ev.start_ns[row]), int(ev.end_ns[row])
        name = trace.name(row)
        common = {
            "start": start,
            "end": end,
            "deviceId": int(ev.device[row]),
            "streamId": int(ev.stream[row]),
            "correlationId": int(ev.correlation[row]),
            "globalPid": out.gpid(pid),
        }
        if kind is Kind.KERNEL:
            name_id = out.string(name)
            device_rows["KERNEL"].append(common | {"demangledName": name_id, "shortName": name_id})
        elif kind is Kind.MEMCPY:
            code = direction_code.get(CopyDirection(int(ev.copy_direction[row])), 0)
            host = 0 if ev.pageable[row] else 1
            src, dst = {1: (host, 2), 2: (2, host)}.get(code, (2, 2))
            device_rows["MEMCPY"].append(
                common
                | {"bytes": int(ev.bytes[row]), "copyKind": code, "srcKind": src, "dstKind": dst}
            )
        elif kind is Kind.MEMSET:
            device_rows["MEMSET"].append(common | {"bytes": int(ev.bytes[row]), "memKind": 2})
        elif kind is Kind.SYNC:
            device_rows["SYNC"].append(common | {"syncType": 3})
        elif kind is Kind.RUNTIME:
            runtime_rows.append(
                {
                    "start": start,
                    "end": end,
                    "globalTid": out.gtid(pid, int(ev.tid[row])),
                    "correlationId": int(ev.correlation[row]),
                    "nameId": out.string(name),
                }
            )
        elif kind in (Kind.CPU_OP, Kind.ANNOTATION):
            # emit_nvtx writes operators with an op_id; user ranges keep their text.
            text = f"{name}, op_id = {row}" if kind is Kind.CPU_OP else name
            nvtx_rows.append(
                {
                    "start": start,
                    "end": end,
                    "eventType": 59,
                    "text": text,
                    "globalTid": out.gtid(pid, int(ev.tid[row])),
                }
            )
    for suffix, rows in device_rows.items():
        table = "SYNCHRONIZATION" if suffix == "SYNC" else suffix
        if rows:  # nsys omits empty tables
            out.add(f"CUPTI_ACTIVITY_KIND_{table}", rows)
    out.add("CUPTI_ACTIVITY_KIND_RUNTIME", runtime_rows)
    out.add("NVTX_EVENTS", nvtx_rows)
    return out.close()


def test_kineto_and_nsys_of_one_program_give_the_same_verdict(tmp_path: Path) -> None:
    config = GeneratorConfig(seed=3, steps=4, layers=2, inject=(SlowDataLoader(ms=40),))
    kineto_path = generate(config).write(tmp_path / "slow_loader.json")
    kineto_job = load(kineto_path)
    nsys_job = load(kineto_to_nsys(kineto_job.traces[0], tmp_path / "slow_loader.sqlite"))
    (kineto_trace,) = kineto_job.traces
    (nsys_trace,) = nsys_job.traces
    assert nsys_trace.format == "nsys"
    assert [s.number for s in nsys_trace.steps] == [s.number for s in kineto_trace.steps]
    assert nsys_trace.devices[0].name == kineto_trace.devices[0].name
    from_kineto = gpuscope.diagnose(kineto_job)
    from_nsys = gpuscope.diagnose(nsys_job)
    # 40 ms of loader per step: waiting for input 20% of the window or more is input-bound.
    assert from_nsys.verdict.bound == from_kineto.verdict.bound == "input"
    assert from_nsys.findings[0].cause == from_kineto.findings[0].cause == "data_loader"
    assert from_nsys.devices[0].temporal == from_kineto.devices[0].temporal
    lost = {f.cause: f.lost_ns for f in from_kineto.findings}
    assert from_nsys.findings[0].lost_ns == pytest.approx(lost["data_loader"], rel=0.02)
