"""Devices and their sampled metrics: ``TARGET_INFO_GPU`` facts, and ``GPU_METRICS`` as means and
as time series (:class:`~gpuscope.model.CounterSeries`, one per GPU and metric)."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from gpuscope.model import CounterSeries, DeviceInfo
from gpuscope.readers.nsys._export import Export, column_batches


def device_infos(export: Export) -> dict[tuple[int, int], DeviceInfo]:
    """Device facts by (pid, CUDA device id); pid -1 when the mapping is the same everywhere."""
    if not export.has("TARGET_INFO_GPU"):
        return {}
    cols = export.columns["TARGET_INFO_GPU"]
    select = [
        "id",
        export.column_or("TARGET_INFO_GPU", "cuDevice", "id"),
        export.column_or("TARGET_INFO_GPU", "name", "NULL"),
        export.column_or("TARGET_INFO_GPU", "smCount", "NULL"),
        export.column_or("TARGET_INFO_GPU", "totalMemory", "NULL"),
        "computeMajor" if {"computeMajor", "computeMinor"} <= cols else "NULL",
        "computeMinor" if {"computeMajor", "computeMinor"} <= cols else "NULL",
    ]
    rows = export.db.execute(f"SELECT {', '.join(select)} FROM TARGET_INFO_GPU").fetchall()
    by_gpu = {int(r[0]): r for r in rows}
    infos: dict[tuple[int, int], DeviceInfo] = {}
    for row in rows:
        infos[(-1, int(row[1]))] = _device_info(int(row[1]), *row[2:])
    for pid, cuda_id, gpu_id in _cuda_device_map(export):
        row = by_gpu.get(gpu_id)
        if row is not None:
            infos[(pid, cuda_id)] = _device_info(cuda_id, *row[2:])
    return infos


def _cuda_device_map(export: Export) -> list[tuple[int, int, int]]:
    table = "TARGET_INFO_CUDA_DEVICE"
    if not export.has(table) or not {"gpuId", "cudaId", "pid"} <= export.columns[table]:
        return []
    rows = export.db.execute(f"SELECT pid, cudaId, gpuId FROM {table}").fetchall()
    # A row with an id that is not an integer (text, a float: a hand-edited export) maps nothing.
    return [(p, c, g) for p, c, g in rows if all(type(v) is int for v in (p, c, g))]


def _device_info(
    index: int, name: Any, sms: Any, memory: Any, major: Any, minor: Any
) -> DeviceInfo:
    return DeviceInfo(
        index=index,
        name=str(name) if name else None,
        vendor="nvidia",
        num_sms=_positive(sms),
        total_memory_bytes=_positive(memory),
        compute_capability=None if major is None or minor is None else f"{major}.{minor}",
    )


def _positive(value: Any) -> int | None:
    """A count or size from the export: a positive integer, else unknown (a corrupt -1 or a
    string is no GPU's memory)."""
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if 0 < number < 2**63 else None


def gpu_metric_summary(export: Export) -> dict[int, dict[str, Any]]:
    """Mean of every sampled GPU metric, per CUDA device (GPU id = ``typeId & 0xFF``)."""
    if not (export.has("GPU_METRICS") and export.has("TARGET_INFO_GPU_METRICS")):
        return {}
    export.require("GPU_METRICS", ("timestamp", "typeId", "metricId", "value"))
    export.require("TARGET_INFO_GPU_METRICS", ("typeId", "metricId", "metricName"))
    db = export.db
    metric_names = {
        (int(t), int(m)): str(n)
        for t, m, n in db.execute(
            "SELECT DISTINCT typeId, metricId, metricName FROM TARGET_INFO_GPU_METRICS"
        )
    }
    cuda_of_gpu = _cuda_of_gpu(export)
    summary: dict[int, dict[str, Any]] = {}
    timing_sql = (
        "SELECT typeId, COUNT(DISTINCT timestamp), MIN(timestamp), MAX(timestamp)"
        " FROM GPU_METRICS GROUP BY typeId"
    )
    for type_id, samples, first_ns, last_ns in db.execute(timing_sql):
        gpu = int(type_id) & 0xFF
        entry = summary.setdefault(cuda_of_gpu.get(gpu, gpu), {"gpu_id": gpu, "samples": 0})
        entry["samples"] += int(samples)
        period = (int(last_ns) - int(first_ns)) // (int(samples) - 1) if samples > 1 else None
        entry["sampling_period_ns"] = period
    means_sql = "SELECT typeId, metricId, AVG(value) FROM GPU_METRICS GROUP BY typeId, metricId"
    for type_id, metric_id, mean in db.execute(means_sql):
        gpu = int(type_id) & 0xFF
        name = metric_names.get((int(type_id), int(metric_id)), f"metric {metric_id}")
        if mean is not None:
            summary[cuda_of_gpu.get(gpu, gpu)][name] = float(mean)
    return summary


def _cuda_of_gpu(export: Export) -> dict[int, int]:
    if not export.has("TARGET_INFO_GPU") or "cuDevice" not in export.columns["TARGET_INFO_GPU"]:
        return {}
    rows = export.db.execute("SELECT id, cuDevice FROM TARGET_INFO_GPU").fetchall()
    return {int(g): int(c) for g, c in rows if g is not None and c is not None}


_NO_VALUE = -1.0e300


def gpu_metric_series(export: Export) -> dict[int, list[CounterSeries]]:
    """Every sampled GPU metric as a time series, per CUDA device (GPU id = ``typeId & 0xFF``).

    ``GPU_METRICS`` holds one row per sample and metric, the value holding until the next sample
    (``nsys profile --gpu-metrics-devices``, 10 kHz by default); NULL values are gaps (NaN)."""
    if not (export.has("GPU_METRICS") and export.has("TARGET_INFO_GPU_METRICS")):
        return {}
    export.require("GPU_METRICS", ("timestamp", "typeId", "metricId", "value"))
    export.require("TARGET_INFO_GPU_METRICS", ("typeId", "metricId", "metricName"))
    names = {
        (int(t), int(m)): str(n)
        for t, m, n in export.db.execute(
            "SELECT DISTINCT typeId, metricId, metricName FROM TARGET_INFO_GPU_METRICS"
        )
        if t is not None and m is not None
    }
    columns: list[list[np.ndarray]] = [[], [], [], []]
    # NULL (no value) as a sentinel no percentage or rate takes, NaN once in numpy.
    select = ("typeId", "metricId", "timestamp", f"coalesce(value, {_NO_VALUE!r})")
    for batch in column_batches(export, "GPU_METRICS", select):
        for i, text in enumerate(batch):
            columns[i].append(
                np.asarray(msgspec.json.decode(text), dtype=np.float64 if i == 3 else np.int64)
            )
    if not columns[0]:
        return {}
    type_id, metric_id, time_ns, value = (np.concatenate(c) for c in columns)
    value[value == _NO_VALUE] = np.nan
    cuda_of_gpu = _cuda_of_gpu(export)
    series: dict[int, list[CounterSeries]] = {}
    keys = np.unique(np.stack([type_id, metric_id]), axis=1).T.tolist()
    for t, m in keys:
        rows = np.flatnonzero((type_id == t) & (metric_id == m))
        order = rows[np.argsort(time_ns[rows], kind="stable")]
        gpu = int(t) & 0xFF
        series.setdefault(cuda_of_gpu.get(gpu, gpu), []).append(
            CounterSeries(
                device=cuda_of_gpu.get(gpu, gpu),
                name=names.get((int(t), int(m)), f"metric {m}"),
                time_ns=time_ns[order],
                value=value[order],
                source="nsys",
            )
        )
    return series
