"""What a finished simulation writes: its ground truth and its Kineto document.

Contract: :func:`ground_truth` derives the answers from the simulation's own schedule with plain
interval code; :func:`kineto_document` lays the events out as PyTorch 2.x's profiler does.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import TypeAlias

from gpuscope.testing._sim import BASE_TIME_NS, T0_NS, Blame, GpuRange, Sim, Work
from gpuscope.testing.config import INJECTED_NAME, JSON, DeviceSpec, GeneratorConfig
from gpuscope.testing.truth import DeviceTruth, Gap, Truth

# --- truth ------------------------------------------------------------------------------------


Interval: TypeAlias = tuple[int, int]


def _union(intervals: Iterable[Interval]) -> list[Interval]:
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _length(merged: Sequence[Interval]) -> int:
    return sum(end - start for start, end in merged)


def _holes(merged: Sequence[Interval]) -> list[Interval]:
    return [(a[1], b[0]) for a, b in itertools.pairwise(merged) if b[0] > a[1]]


def _attribute(holes: Sequence[Interval], blames: Sequence[Blame]) -> list[Gap]:
    """Split each idle hole among the blamed host blocks overlapping it; slivers go to the
    block before them (the first block also takes the hole's start)."""
    gaps: list[Gap] = []
    for low, high in holes:
        pieces = sorted(
            (max(low, b.start), b.cause, b.location)
            for b in blames
            if b.start < high and b.end > low
        )
        if not pieces:
            continue
        starts = [low] + [p[0] for p in pieces[1:]]
        ends = [*starts[1:], high]
        for start, end, (_, cause, where) in zip(starts, ends, pieces, strict=True):
            if end > start:
                gaps.append(Gap(start, end, cause, where))
    return _merge_gaps(gaps)


def _merge_gaps(gaps: Iterable[Gap]) -> list[Gap]:
    merged: list[Gap] = []
    for gap in sorted(gaps):
        last = merged[-1] if merged else None
        if last and (last.end_ns, last.cause, last.location) == (
            gap.start_ns,
            gap.cause,
            gap.location,
        ):
            merged[-1] = last._replace(end_ns=gap.end_ns)
        else:
            merged.append(gap)
    return merged


def _device_truth(works: Sequence[Work]) -> DeviceTruth:
    def union_of(keep: Iterable[Work]) -> list[Interval]:
        return _union((w.start, w.end) for w in keep)

    kernels = [w for w in works if w.kind == "kernel"]
    return DeviceTruth(
        span_ns=max(w.end for w in works) - min(w.start for w in works),
        busy_ns=_length(union_of(works)),
        compute_ns=_length(union_of(w for w in kernels if not w.comm)),
        communication_ns=_length(union_of(w for w in kernels if w.comm)),
        memcpy_ns=_length(union_of(w for w in works if w.kind == "gpu_memcpy")),
        memset_ns=_length(union_of(w for w in works if w.kind == "gpu_memset")),
    )


def ground_truth(sim: Sim, offset: int) -> Truth:
    holes = _holes(_union((w.start, w.end) for w in sim.works))
    gaps = _attribute(holes, sim.blames) + [g for g in sim.comm_gaps if g.end_ns > g.start_ns]
    gaps = [g._replace(start_ns=g.start_ns + offset, end_ns=g.end_ns + offset) for g in gaps]
    lost: dict[str, int] = {}
    for gap in gaps:
        lost[gap.cause] = lost.get(gap.cause, 0) + gap.dur_ns
    injected = dict.fromkeys(INJECTED_NAME[type(i)] for i in sim.cfg.inject)
    return Truth(
        device=sim.cfg.rank,
        devices={sim.cfg.rank: _device_truth(sim.works)},
        step_durations_ns=tuple(s.end - s.start for s in sim.steps),
        kernel_count=sum(1 for w in sim.works if w.kind == "kernel"),
        gaps=tuple(sorted(gaps)),
        injected=tuple(injected),
        lost_ns_by_cause=lost,
    )


# --- the document -----------------------------------------------------------------------------


def _us(ns: int) -> float:
    """ns as float µs; exact to the ns when read back as round(ts * 1000)."""
    return ns / 1000


def _host_events(sim: Sim, offset: int) -> list[JSON]:
    out = []
    for event in sim.host:
        copy = dict(event)
        copy.update(ts=_us(event["ts"] + offset), dur=_us(event["dur"]), args=dict(event["args"]))
        out.append(copy)
    return out


def _device_events(sim: Sim, offset: int) -> list[JSON]:
    out: list[JSON] = []
    device = sim.cfg.rank
    for w in sim.works:
        event = {"ph": "X", "cat": w.kind, "name": w.name, "pid": device, "tid": w.stream}
        event.update(ts=_us(w.start + offset), dur=_us(w.end - w.start), args=dict(w.args))
        out.append(event)
        flow = {"ph": "s", "id": w.correlation, "pid": sim.pid, "tid": sim.pid}
        out.append({**flow, "ts": _us(w.launch + offset), "cat": "ac2g", "name": "ac2g"})
        end = {"ph": "f", "id": w.correlation, "pid": device, "tid": w.stream}
        out.append({**end, "ts": _us(w.start + offset), "cat": "ac2g", "name": "ac2g", "bp": "e"})
    return out


def _gpu_annotations(sim: Sim, offset: int) -> list[JSON]:
    ranges = list(sim.ranges)
    for step in sim.steps:
        inside = [w for w in sim.works if step.start <= w.launch < step.end]
        if inside:
            start, end = min(w.start for w in inside), max(w.end for w in inside)
            ranges.append(GpuRange(step.name, sim.compute, start, end, step.ext))
    out: list[JSON] = []
    for r in ranges:
        event = {"ph": "X", "cat": "gpu_user_annotation", "name": r.name, "pid": sim.cfg.rank}
        event.update(tid=r.stream, ts=_us(r.start + offset), dur=_us(r.end - r.start))
        event["args"] = {"External id": r.ext}
        out.append(event)
    return out


def _number_events(events: Sequence[JSON]) -> None:
    """``Ev Idx``: operators and annotations first, then Python frames, each in time order."""
    ops = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation")]
    frames = [e for e in events if e.get("cat") == "python_function"]
    for index, event in enumerate(ops + frames):
        event["args"]["Ev Idx"] = index


def _metadata(sim: Sim, window: int) -> list[JSON]:
    ts = _us(window)
    out: list[JSON] = []

    def meta(name: str, pid: int | str, tid: int | str, args: JSON) -> None:
        out.append({"name": name, "ph": "M", "ts": ts, "pid": pid, "tid": tid, "args": args})

    meta("process_name", sim.pid, 0, {"name": "python3"})
    meta("process_labels", sim.pid, 0, {"labels": "CPU"})
    meta("process_sort_index", sim.pid, 0, {"sort_index": sim.pid})
    for device in range(sim.cfg.world_size):
        meta("process_name", device, 0, {"name": "python3"})
        meta("process_labels", device, 0, {"labels": f"GPU {device}"})
        meta("process_sort_index", device, 0, {"sort_index": 5_000_000 + device})
    for stream in sorted({w.stream for w in sim.works}):
        meta("thread_name", sim.cfg.rank, stream, {"name": f"stream {stream} "})
        meta("thread_sort_index", sim.cfg.rank, stream, {"sort_index": stream})
    meta("thread_name", sim.pid, sim.pid, {"name": f"thread {sim.pid} (pt_main_thread)"})
    meta("thread_sort_index", sim.pid, sim.pid, {"sort_index": sim.pid})
    return out


def _window_events(window: int, end: int) -> list[JSON]:
    span: JSON = {"ph": "X", "cat": "Trace", "ts": _us(window), "dur": _us(end - window)}
    span.update(pid="Spans", tid="PyTorch Profiler", name="PyTorch Profiler (0)")
    span["args"] = {"Op count": 0}
    sort: JSON = {
        "name": "process_sort_index",
        "ph": "M",
        "ts": _us(window),
        "pid": "Spans",
        "tid": 0,
    }
    sort["args"] = {"sort_index": 536_870_912}
    start: JSON = {"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g"}
    start.update(pid="Traces", tid="Trace PyTorch Profiler", ts=_us(window))
    stop: JSON = {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": ""}
    stop["ts"] = _us(end + 180_000)
    return [span, sort, start, stop]


def _device_properties(spec: DeviceSpec, count: int) -> list[JSON]:
    return [
        {
            "id": device,
            "name": spec.name,
            "totalGlobalMem": spec.total_mem,
            "computeMajor": spec.major,
            "computeMinor": spec.minor,
            "maxThreadsPerBlock": 1024,
            "maxThreadsPerMultiprocessor": 2048,
            "regsPerBlock": 65536,
            "warpSize": 32,
            "sharedMemPerBlock": 49152,
            "numSms": spec.num_sms,
            "regsPerMultiprocessor": 65536,
            "sharedMemPerBlockOptin": spec.smem_optin,
            "sharedMemPerMultiprocessor": spec.smem_per_sm,
        }
        for device in range(count)
    ]


def _distributed_info(cfg: GeneratorConfig) -> JSON:
    ranks = list(range(cfg.world_size))
    group: JSON = {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl"}
    group.update(pg_size=cfg.world_size, ranks=ranks)
    info: JSON = {"backend": "nccl", "rank": cfg.rank, "world_size": cfg.world_size}
    info.update(pg_count=1, pg_config=[group], nccl_version="2.21.5")
    return info


def kineto_document(sim: Sim, offset: int) -> JSON:
    cfg = sim.cfg
    events = _host_events(sim, offset) + _device_events(sim, offset) + _gpu_annotations(sim, offset)
    events.sort(key=lambda e: e["ts"])
    _number_events(events)
    window = T0_NS + offset
    end = max([w.end for w in sim.works] + [sim.now]) + offset + 50_000
    events += _metadata(sim, window) + _window_events(window, end)
    doc: JSON = {
        "schemaVersion": 1,
        "deviceProperties": _device_properties(sim.spec, cfg.world_size),
    }
    doc.update(cupti_version=24, cuda_runtime_version=12060, cuda_driver_version=12080)
    doc["distributedInfo"] = _distributed_info(cfg)
    doc.update({"record_shapes": 1} if cfg.record_shapes else {})
    doc.update({"with_stack": 1} if cfg.with_stack else {})
    doc["trace_id"] = f"{sim.rng.getrandbits(128):032X}"
    doc.update(displayTimeUnit="ms", baseTimeNanoseconds=BASE_TIME_NS + cfg.seed % 1000 * 10**9)
    doc["traceEvents"] = events
    doc["traceName"] = f"./log/node0_{sim.pid}.{(BASE_TIME_NS + end) // 10**6}.pt.trace.json"
    return doc
