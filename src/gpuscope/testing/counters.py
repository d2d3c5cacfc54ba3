"""Generated traces with hardware counters and planted bounds: the labelled counter cases.

Contract: :func:`counter_trace` simulates a decode-like loop (per step, a host thread launches
each kernel family in turn on one stream) and samples GPU-wide counters while it runs, each
family's samples drawn from the ranges of its planted bound (:data:`PROFILES`); it writes the run
as a Kineto trace with PM-sampling counter tracks (``"GPU 0 Counters"``, CUPTI metric names) or
as an Nsight Systems SQLite export with ``GPU_METRICS`` (nsys's metric names). The answer is each
family's planted bound (:attr:`CounterCase.families`). :data:`CASES` is the labelled suite;
the seed's Llama-2 decode attention ("Compute Warps in Flight 5-15%, Unallocated Warps in Active
SMs 50-80%, DRAM Read Throughput 80-100%") is ``decode_attention``.

Names are chosen so that the roofline estimate would say otherwise where it matters (an
attention kernel the names call compute-bound, measured memory-bound): only the counters can
give the planted answer. Hostile variants: ``gaps`` drops the samples of a stretch, ``nan``
writes NaN for some, ``idle_only`` samples only where no kernel runs (no kernel under them).
"""

from __future__ import annotations

import json
import math
import random
import sqlite3
from pathlib import Path
from typing import Any

import msgspec

__all__ = [
    "CASES",
    "PROFILES",
    "CounterCase",
    "CounterOutcome",
    "Family",
    "counter_trace",
    "run_counter_suite",
    "write_counter_case",
]

#: Per planted bound, the range each counter's samples are drawn from while a family runs (% of
#: peak). Memory: the seed's decode attention. Compute: tensor pipes busy, DRAM well below peak.
#: Latency: too few warps to use either unit.
PROFILES: dict[str, dict[str, tuple[float, float]]] = {
    "memory": {
        "dram_read": (80, 100),
        "dram_write": (1, 6),
        "warps": (5, 15),
        "unallocated": (50, 80),
        "sm_active": (85, 100),
        "sm_issue": (8, 25),
        "tensor": (0, 8),
    },
    "compute": {
        "dram_read": (10, 30),
        "dram_write": (3, 12),
        "warps": (35, 70),
        "unallocated": (0, 20),
        "sm_active": (90, 100),
        "sm_issue": (55, 85),
        "tensor": (70, 95),
    },
    "latency": {
        "dram_read": (5, 25),
        "dram_write": (1, 8),
        "warps": (2, 10),
        "unallocated": (70, 95),
        "sm_active": (15, 45),
        "sm_issue": (5, 25),
        "tensor": (0, 10),
    },
    "idle": {
        "dram_read": (0, 1),
        "dram_write": (0, 1),
        "warps": (0, 1),
        "unallocated": (0, 1),
        "sm_active": (0, 1),
        "sm_issue": (0, 1),
        "tensor": (0, 1),
    },
}

#: The counters as each tool names them (Kineto: CUPTI PM-sampling metric names; nsys:
#: ``GPU_METRICS``). CUPTI has no single metric for unallocated warps; Kineto traces lack it.
NAMES = {
    "kineto": {
        "dram_read": "dram__read_throughput.avg.pct_of_peak_sustained_elapsed",
        "dram_write": "dram__write_throughput.avg.pct_of_peak_sustained_elapsed",
        "warps": "sm__warps_active.avg.pct_of_peak_sustained_active",
        "sm_active": "sm__cycles_active.avg.pct_of_peak_sustained_elapsed",
        "sm_issue": "sm__inst_issued.avg.pct_of_peak_sustained_active",
        "tensor": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    },
    "nsys": {
        "dram_read": "DRAM Read Bandwidth [Throughput %]",
        "dram_write": "DRAM Write Bandwidth [Throughput %]",
        "warps": "Compute Warps in Flight [Throughput %]",
        "unallocated": "Unallocated Warps in Active SMs [Throughput %]",
        "sm_active": "SMs Active [Throughput %]",
        "sm_issue": "SM Issue [Throughput %]",
        "tensor": "Tensor Active [Throughput %]",
    },
}


class Family(msgspec.Struct, frozen=True):
    """A kernel family: its name, planted bound, duration of one launch and launches per step."""

    name: str
    bound: str  # "memory", "compute", "latency"
    dur_ns: int
    per_step: int = 1


class CounterCase(msgspec.Struct, frozen=True):
    name: str
    families: list[Family]
    fmt: str = "kineto"  # "kineto" or "nsys"
    steps: int = 20
    period_ns: int = 2_000  # the sampling period
    seed: int = 0
    hostile: str = ""  # "", "gaps", "nan", "idle_only"
    gap_ns: int = 6_000  # the GPU's idle time after each kernel (the host's work between)


def _decode(fmt: str, seed: int, steps: int = 20) -> CounterCase:
    """The seed's Llama-2 decode step: attention memory-bound, the projections compute-bound."""
    return CounterCase(
        name=f"decode_attention_{fmt}_{seed}",
        families=[
            Family("fmha_decode_paged_attention_kernel", "memory", 180_000, 2),
            Family("sm90_xmma_gemm_bf16bf16_tn_qkv_proj", "compute", 120_000, 2),
            Family("rms_norm_kernel", "memory", 30_000, 2),
            Family("rotary_embedding_kernel", "latency", 40_000, 1),
        ],
        fmt=fmt,
        steps=steps,
        seed=seed,
    )


def _mixed(fmt: str, seed: int) -> CounterCase:
    """Names the estimate reads one way, planted the other."""
    return CounterCase(
        name=f"mixed_{fmt}_{seed}",
        families=[
            Family("cutlass_gemm_small_m_splitk", "memory", 90_000, 2),
            Family("vectorized_elementwise_kernel_fused_gelu", "compute", 60_000, 1),
            Family("flash_fwd_kernel_prefill", "compute", 250_000, 1),
            Family("reduce_kernel_tiny", "latency", 25_000, 3),
        ],
        fmt=fmt,
        seed=seed,
    )


#: The labelled counter suite: both formats, several seeds, the hostile variants.
CASES: list[CounterCase] = [
    *(_decode(fmt, seed) for fmt in ("kineto", "nsys") for seed in range(3)),
    *(_mixed(fmt, seed) for fmt in ("kineto", "nsys") for seed in range(2)),
    msgspec.structs.replace(_decode("nsys", 7), name="decode_gaps_nsys", hostile="gaps"),
    msgspec.structs.replace(_decode("kineto", 8), name="decode_nan_kineto", hostile="nan"),
]

_BASE_NS = 1_700_000_000_000_000_000
_LAUNCH_NS = 4_000


def _schedule(case: CounterCase) -> list[tuple[Family, int, int, int, int]]:
    """(family, launch start, kernel start, kernel end, step) in time order."""
    rows: list[tuple[Family, int, int, int, int]] = []
    t = 50_000
    for step in range(case.steps):
        for family in case.families:
            for _ in range(family.per_step):
                launch = t
                start = max(t + _LAUNCH_NS, rows[-1][3] + 1_000 if rows else 0)
                end = start + family.dur_ns
                rows.append((family, launch, start, end, step))
                t = end + case.gap_ns
    return rows


def _samples(case: CounterCase, schedule: list[Any]) -> list[tuple[int, dict[str, float]]]:
    """Counter samples every period: each value drawn from the profile of the kernel running
    over the sample's period (idle when none), with the hostile variant's damage."""
    rng = random.Random(case.seed)
    end = schedule[-1][3] + 50_000
    samples = []
    k = 0
    for t in range(0, end, case.period_ns):
        while k < len(schedule) and schedule[k][3] <= t:
            k += 1
        running = k < len(schedule) and schedule[k][2] <= t
        profile = PROFILES[schedule[k][0].bound if running else "idle"]
        if case.hostile == "idle_only" and running:
            continue
        if case.hostile == "gaps" and end // 3 <= t < end // 2:
            continue  # the profiler dropped a stretch of samples
        values = {key: rng.uniform(*bounds) for key, bounds in profile.items()}
        if case.hostile == "nan" and rng.random() < 0.1:
            values = dict.fromkeys(values, float("nan"))
        samples.append((t, values))
    return samples


def counter_trace(case: CounterCase) -> dict[str, Any]:
    """The case as a Kineto document with PM-sampling counter tracks."""
    schedule = _schedule(case)
    events: list[dict[str, Any]] = []
    for i, (family, launch, start, end, _) in enumerate(schedule):
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": launch / 1e3,
                "dur": 3.0,
                "args": {"correlation": i + 1},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": family.name,
                "pid": 0,
                "tid": 7,
                "ts": start / 1e3,
                "dur": (end - start) / 1e3,
                "args": {
                    "device": 0,
                    "stream": 7,
                    "correlation": i + 1,
                    "grid": [132, 1, 1],
                    "block": [256, 1, 1],
                },
            }
        )
    for step in range(case.steps):
        rows = [r for r in schedule if r[4] == step]
        start, end = rows[0][1] - 1_000, rows[-1][3]
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "pid": 1,
                "tid": 1,
                "ts": start / 1e3,
                "dur": (end - start) / 1e3,
            }
        )
    names = NAMES["kineto"]
    for t, values in _samples(case, schedule):
        for key, value in values.items():
            if key in names:
                events.append(
                    {
                        "ph": "C",
                        "name": names[key],
                        "pid": "GPU 0 Counters",
                        "ts": t / 1e3,
                        "args": {"": None if math.isnan(value) else round(value, 3)},
                    }
                )
    device = {
        "id": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "totalGlobalMem": 85520809984,
        "computeMajor": 9,
        "computeMinor": 0,
        "numSms": 132,
    }
    return {"traceEvents": events, "deviceProperties": [device], "baseTimeNanoseconds": _BASE_NS}


def write_counter_case(case: CounterCase, folder: Path) -> Path:
    """Write the case in its format (``.json`` or ``.sqlite``) and return the path."""
    if case.fmt == "kineto":
        path = folder / f"{case.name}.json"
        path.write_text(json.dumps(counter_trace(case)).replace("NaN", "null"))
        return path
    return _write_nsys(case, folder / f"{case.name}.sqlite")


def _write_nsys(case: CounterCase, path: Path) -> Path:
    """The case as an Nsight Systems export: kernels, their launches, the GPU, and
    ``GPU_METRICS`` (GPU id in ``typeId``'s low byte, as nsys writes it)."""
    schedule = _schedule(case)
    db = sqlite3.connect(path)
    strings: dict[str, int] = {}

    def string(text: str) -> int:
        return strings.setdefault(text, len(strings))

    db.execute("CREATE TABLE META_DATA_EXPORT (name, value)")
    db.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_SCHEMA_VERSION', '3.25.0')")
    gpid = (1 << 48) | (1 << 24)
    db.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, streamId, correlationId,"
        " globalPid, demangledName, shortName, gridX, gridY, gridZ, blockX, blockY, blockZ)"
    )
    db.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid,"
        " correlationId, nameId, returnValue)"
    )
    for i, (family, launch, start, end, _) in enumerate(schedule):
        name = string(family.name)
        db.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (start, end, 0, 7, i + 1, gpid, name, name, 132, 1, 1, 256, 1, 1),
        )
        db.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?)",
            (launch, launch + 3_000, 0, gpid | 1, i + 1, string("cudaLaunchKernel_v7000"), 0),
        )
    db.execute(
        "CREATE TABLE TARGET_INFO_GPU (id, cuDevice, name, smCount, totalMemory,"
        " computeMajor, computeMinor)"
    )
    db.execute(
        "INSERT INTO TARGET_INFO_GPU VALUES (0, 0, 'NVIDIA H100 80GB HBM3', 132, 85520809984, 9, 0)"
    )
    type_id = 0x1000_0000
    names = NAMES["nsys"]
    ids = {key: i + 1 for i, key in enumerate(names)}
    db.execute("CREATE TABLE TARGET_INFO_GPU_METRICS (typeId, sourceId, typeName, metricId,"
               " metricName)")  # fmt: skip
    db.executemany(
        "INSERT INTO TARGET_INFO_GPU_METRICS VALUES (?, 0, 'GH100', ?, ?)",
        [(type_id, ids[key], name) for key, name in names.items()],
    )
    db.execute("CREATE TABLE GPU_METRICS (timestamp, typeId, metricId, value)")
    db.executemany(
        "INSERT INTO GPU_METRICS VALUES (?, ?, ?, ?)",
        [
            (t, type_id, ids[key], None if math.isnan(value) else round(value, 3))
            for t, values in _samples(case, schedule)
            for key, value in values.items()
        ],
    )
    db.execute("CREATE TABLE StringIds (id, value)")
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in strings.items()])
    db.commit()
    db.close()
    return path


class CounterOutcome(msgspec.Struct, frozen=True):
    """One planted family of one case: the planted bound, the one the diagnosis gave (None: the
    counters did not decide it), and the evidence it printed."""

    case: str
    family: str
    planted: str
    found: str | None
    evidence: str

    @property
    def right(self) -> bool:
        return self.found == self.planted


def run_counter_suite(cases: list[CounterCase] | None = None) -> list[CounterOutcome]:
    """Diagnose every case (written to a temporary folder) and compare each family's bound."""
    import tempfile  # noqa: PLC0415 - only the suite writes files

    from gpuscope.diagnosis import diagnose  # noqa: PLC0415 - the suite runs the diagnosis
    from gpuscope.readers import load  # noqa: PLC0415

    outcomes = []
    with tempfile.TemporaryDirectory(prefix="gpuscope-counters-") as scratch:
        for case in cases or CASES:
            result = diagnose(load(write_counter_case(case, Path(scratch))))
            measured = {
                f.name: f
                for d in result.devices
                if d.counters is not None
                for f in d.counters.families
            }
            for family in case.families:
                got = measured.get(family.name)
                outcomes.append(
                    CounterOutcome(
                        case=case.name,
                        family=family.name,
                        planted=family.bound,
                        found=got.bound if got else None,
                        evidence=got.evidence if got else result.verdict.bound_evidence,
                    )
                )
    return outcomes
