"""Unified memory and the host's own work in Nsight Systems exports (issue #15).

A gap the host thread spent on a CPU without calling CUDA is host computation (``cpu_other``),
known only where the export records the thread (scheduling trace or CPU samples); a short gap
before an on-demand page migration is the driver servicing a fault (``page_migration``), never
launch overhead; the ``CUDA_UM_*`` fault tables feed the page-migration finding.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from corpus import corpus
from gpuscope import diagnose
from gpuscope.diagnosis import Diagnosis
from gpuscope.model import Kind
from gpuscope.readers import load
from test_nsys import Export

PID, TID = 5, 5
MS = 1_000_000


def lost(d: Diagnosis, cause: str) -> int:
    return sum(c.lost_ns for dev in d.devices for c in dev.idle.causes if c.cause == cause)


# --- the corpus: host loops over managed memory ---------------------------------------------------


def test_uvm_softmax_is_host_work_plus_page_migration() -> None:
    """MANIFEST: host computation (the 277 ms gap has no CUDA call; the CPU samples are in the
    program's own ``main`` and libm) plus page-fault migrations; the fix is prefetching."""
    d = diagnose(load(corpus("wild/nsys_t4_uvm_softmax.sqlite")))
    # The first 771 ms (context creation in cudaMallocManaged, then silence before the first
    # CUDA work: the process starting) is left out first, with its duration stated.
    assert any(f.pattern == "startup" for f in d.findings)
    assert "the first 771" in d.verdict.summary
    causes = [f.cause for f in d.findings if f.pattern != "startup"]
    assert causes[:2] == ["cpu_other", "page_migration"]
    span = d.devices[0].temporal.span_ns
    # Nothing unexplained is left, and no migration gap is called launch overhead.
    assert lost(d, "unknown") < 0.01 * span
    assert lost(d, "launch_overhead") < 0.01 * span
    # The largest gap (277 ms before the only kernel) is the host computing.
    gaps = d.devices[0].idle.gaps
    longest = int(np.argmax(gaps.end_ns - gaps.start_ns))
    assert gaps.end_ns[longest] - gaps.start_ns[longest] == pytest.approx(277 * MS, rel=0.01)
    assert d.devices[0].idle.causes[0].cause == "cpu_other"
    um = next(f for f in d.findings if f.cause == "page_migration")
    assert um.events == 2370 and "cudaMemPrefetchAsync" in um.fix


def test_uvm_softmax_without_its_scheduling_trace_is_honestly_unknown(tmp_path: Path) -> None:
    """With the thread's CPU record removed, nothing says what the host did in the long gaps:
    they are the costliest idle cause, stated as unexplained (a finding that is not fixed first:
    its only fix is a better capture)."""
    import shutil
    import sqlite3

    path = tmp_path / "no_cpu.sqlite"
    shutil.copy(corpus("wild/nsys_t4_uvm_softmax.sqlite"), path)
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE SCHED_EVENTS")
        db.execute("DROP TABLE COMPOSITE_EVENTS")
    d = diagnose(load(path))
    assert d.devices[0].idle.causes[0].cause == "unknown"
    assert any(f.cause == "unknown" for f in d.findings)
    assert lost(d, "cpu_other") == 0


# --- the host on a CPU: scheduling trace and CPU samples ---------------------------------------


def two_launches(path: Path) -> Export:
    """A kernel at 0.01 ms, a 5 ms device-idle gap with no CUDA call, a kernel at 5.03 ms."""
    out = Export(path)
    out.runtime(PID, TID, 0, 5_000, "cudaLaunchKernel_v7000", 1)
    out.kernel(PID, 10_000, 20_000, correlation=1)
    out.runtime(PID, TID, 5 * MS + 20_000, 5 * MS + 25_000, "cudaLaunchKernel_v7000", 2)
    out.kernel(PID, 5 * MS + 30_000, 5 * MS + 40_000, correlation=2)
    return out


def switches(out: Export, *times_in_out: tuple[int, int]) -> None:
    rows = []
    for on, off in times_in_out:
        rows.append({"start": on, "cpu": 0, "isSchedIn": 1, "globalTid": out.gtid(PID, TID)})
        rows.append({"start": off, "cpu": 0, "isSchedIn": 0, "globalTid": out.gtid(PID, TID)})
    out.add("SCHED_EVENTS", rows)


def test_a_gap_with_no_record_of_the_host_is_unknown(tmp_path: Path) -> None:
    d = diagnose(load(two_launches(tmp_path / "bare.sqlite").close()))
    assert d.findings[0].cause == "unknown"


def test_a_gap_the_thread_spent_on_a_cpu_is_host_computation(tmp_path: Path) -> None:
    out = two_launches(tmp_path / "sched.sqlite")
    switches(out, (0, 6 * MS))
    path = out.close()
    (trace,) = load(path).traces
    running = np.flatnonzero(trace.events.kind == Kind.HOST_RUNNING)
    assert running.size == 1 and trace.events.tid[running[0]] == TID
    d = diagnose(load(path))
    assert d.findings[0].cause == "cpu_other"
    assert lost(d, "cpu_other") == 5 * MS + 30_000 - 20_000
    assert lost(d, "unknown") == 0


def test_a_gap_the_thread_slept_through_stays_unknown(tmp_path: Path) -> None:
    """Off the CPU (blocked on a file, a lock, a sleep), the thread was not computing; what it
    waited for is not in the trace."""
    out = two_launches(tmp_path / "asleep.sqlite")
    switches(out, (0, 30_000), (5 * MS, 6 * MS))
    d = diagnose(load(out.close()))
    assert d.findings[0].cause == "unknown"
    assert lost(d, "cpu_other") == 0


def test_cpu_samples_a_period_apart_are_one_run_on_a_cpu(tmp_path: Path) -> None:
    """Without a scheduling trace, CPU samples (one per period of CPU time) tell the same."""
    out = two_launches(tmp_path / "samples.sqlite")
    out.add(
        "COMPOSITE_EVENTS",
        [
            {"id": i, "start": t, "cpu": 0, "threadState": 1, "globalTid": out.gtid(PID, TID)}
            for i, t in enumerate(range(MS, 6 * MS, MS))
        ],
    )
    d = diagnose(load(out.close()))
    assert d.findings[0].cause == "cpu_other"


# --- page migrations: fault service is not launch overhead -------------------------------------


def managed_loop(path: Path) -> Export:
    """A kernel, then a host loop reading managed memory: 200 on-demand device-to-host migrations
    (copy kind 12, cause 2 = page fault), 20 µs apart; no enum tables (the documented values)."""
    out = Export(path)
    out.runtime(PID, TID, 0, 5_000, "cudaLaunchKernel_v7000", 1)
    out.kernel(PID, 10_000, 1 * MS, correlation=1)
    rows = []
    for i in range(200):
        start = 1 * MS + 20_000 + i * 30_000
        row = {"start": start, "end": start + 10_000, "deviceId": 0, "streamId": 0}
        row |= {"correlationId": 0, "globalPid": out.gpid(PID), "bytes": 4096}
        row |= {"copyKind": 12, "srcKind": 2, "dstKind": 0, "migrationCause": 2}
        rows.append(row)
    out.add("CUPTI_ACTIVITY_KIND_MEMCPY", rows)
    return out


def test_short_gaps_before_page_fault_migrations_are_fault_service(tmp_path: Path) -> None:
    d = diagnose(load(managed_loop(tmp_path / "um.sqlite").close()))
    # Only the 5 µs from the launch call's end to the kernel (the window opens at the call).
    assert lost(d, "launch_overhead") == 10_000
    assert lost(d, "page_migration") == 200 * 20_000
    um = next(f for f in d.findings if f.cause == "page_migration")
    assert um.events == 200
    assert "4.00 ms of fault service between migrations" in um.evidence


def test_user_prefetches_are_launched_work_not_faults(tmp_path: Path) -> None:
    """``cudaMemPrefetchAsync`` migrations (cause 1) are the program's own: no fault service."""
    out = managed_loop(tmp_path / "prefetch.sqlite")
    out.db.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET migrationCause = 1")
    d = diagnose(load(out.close()))
    assert lost(d, "page_migration") == 0


def test_cuda_um_fault_tables_feed_the_page_migration_finding(tmp_path: Path) -> None:
    """``CUDA_UM_CPU_PAGE_FAULT_EVENTS`` and ``CUDA_UM_GPU_PAGE_FAULT_EVENTS`` (schema as nsys
    writes it): counts per process, and the function that touched the pages."""
    out = managed_loop(tmp_path / "faults.sqlite")
    check, app = out.string("check_softmax"), out.string("/home/user/softmax_app")
    other = out.string("memcpy")
    cpu = [
        {"start": 1 * MS + i * 30_000, "globalPid": out.gpid(PID), "address": 4096 * i}
        | {"originalFaultPc": 1, "CpuInstruction": check if i < 150 else other, "module": app}
        | {"unresolvedFaultPc": 0}
        for i in range(200)
    ]
    out.add("CUDA_UM_CPU_PAGE_FAULT_EVENTS", cpu)
    gpu = [
        {"start": 100_000, "end": 150_000, "globalPid": out.gpid(PID), "deviceId": 0}
        | {"address": 0, "numberOfPageFaults": 3, "faultAccessType": 1}
    ] * 4
    out.add("CUDA_UM_GPU_PAGE_FAULT_EVENTS", gpu)
    path = out.close()
    (trace,) = load(path).traces
    faults = trace.metadata["unified_memory_faults"]
    assert faults["cpu_page_faults"] == 200
    assert faults["cpu_fault_sites"] == {
        "check_softmax (softmax_app)": 150,
        "memcpy (softmax_app)": 50,
    }
    assert (faults["gpu_page_faults"], faults["gpu_fault_groups"]) == (12, 4)
    assert faults["gpu_fault_ns"] == 4 * 50_000
    um = next(f for f in diagnose(load(path)).findings if f.cause == "page_migration")
    assert "200 CPU page faults on managed memory, 150 of them in check_softmax (softmax_app)" in (
        um.evidence
    )
    assert "12 GPU page faults in 4 groups while kernels ran" in um.evidence
