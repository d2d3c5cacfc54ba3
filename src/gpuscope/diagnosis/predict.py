"""Predicted savings: each finding's fix replayed on the trace (:mod:`gpuscope.analyses.whatif`).

Contract: :func:`predict` is pure. It takes the findings and the per-device analyses they came
from and returns the findings with ``prediction`` and ``predicted_saving_ns_per_step`` set for
every cause that has an edit, and one :class:`~gpuscope.analyses.whatif.Prediction` for all the
fixes together, replayed as one edit set (never the sum of the findings: fixes overlap).
:func:`priced` gives the headline's dollars: that all-fixes saving, priced.

Money follows the prediction, never the time a finding names:

* a finding with a prediction is priced from its predicted saving (a share of the measured step
  time); one whose fix is predicted to save under :data:`NO_SAVING_PCT` of a step costs $0.00,
  and its prediction's note says why (its time is not on the step's critical path);
* idle time with no prediction (no edit for its cause: unexplained idle time, CPU work, waiting
  at collectives; or a replay that did not settle) has no dollars: its share is stated as time.
  Busy time with no edit (copies that fill the device, memory-bound kernels) keeps the saving its
  finding estimated (overlap, the link's peak, fusion), never more than the time it names;
* findings keep their order, by the time they name (the diagnosis says where the time goes;
  the saving beside each says what its fix is worth): a report never calls that order
  "costliest", as the largest share may be predicted to save nothing.

Start-up is left out of every edit: host calls inside a start-up phase (CUDA context creation,
module loading, compilation; :mod:`gpuscope.analyses.phases`) are start-up whatever their name. A
``cudaFree`` that creates the context is no allocator churn, and no allocator fix removes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from msgspec.structs import replace
from numpy.typing import NDArray

from gpuscope.analyses.attribution import CAUSES
from gpuscope.analyses.bounds import KernelKind
from gpuscope.analyses.host import HostActivity, host_activity
from gpuscope.analyses.intervals import covered_ns, union
from gpuscope.analyses.ranks import Participant, RankAnalysis, WaitCuts, collective_waits
from gpuscope.analyses.timeline import WorkClass
from gpuscope.analyses.whatif import (
    ASSUMPTIONS,
    EditInputs,
    Graph,
    Prediction,
    Replayer,
    build_graph,
)
from gpuscope.diagnosis.findings import Finding
from gpuscope.model import Trace

if TYPE_CHECKING:
    from gpuscope.analyses.host import HostIndex
    from gpuscope.analyses.phases import Phase
    from gpuscope.diagnosis.evidence import DeviceEvidence

#: A collective with less than this share of its time alongside compute ran exposed.
EXPOSED_SHARE = 0.1
#: A predicted saving below this share of the step is no saving: steps vary by more than that
#: from one to the next, and the replay is checked to 10% of the step (benchmarks/whatif.py).
NO_SAVING_PCT = 0.5


def predict(
    found: list[Finding],
    traces: list[Trace],
    devices: list[DeviceEvidence],
    hosts: dict[int, HostIndex],
    startups: dict[int, list[Phase]],
    participants: list[Participant],
    ranks: RankAnalysis | None,
    gpu_hour_usd: float | None,
    gpus: int,
) -> tuple[list[Finding], Prediction | None]:
    causes = [f.cause for f in found if f.cause in ASSUMPTIONS]
    if not causes:
        return [_unpriced(f) for f in found], None
    straggler_ranks = {s.rank for s in ranks.stragglers} if ranks is not None else set()
    cuts = None
    if (
        ranks is not None
        and len(participants) > 1
        and {"straggler", "collective_wait"} & set(causes)
    ):
        positions = [i for i, p in enumerate(participants) if p.rank in straggler_ranks]
        cuts = collective_waits(participants, positions)
    graphs: list[Graph] = []
    inputs: list[EditInputs] = []
    late: set[int] = set()
    # The traces the device reports were computed on (a reader may split or window a job's).
    by_trace: dict[int, list[DeviceEvidence]] = {}
    for d in devices:
        by_trace.setdefault(id(d.work.trace), []).append(d)
    for reports in by_trace.values():
        trace = reports[0].work.trace
        host = hosts.get(id(trace)) or host_activity(trace)
        if any((d.rank if d.rank is not None else -1) in straggler_ranks for d in reports):
            late.add(len(graphs))
        graphs.append(build_graph(trace))
        phases = startups.get(id(trace), [])
        inputs.append(_inputs(trace, reports, _outside(trace, host, phases), participants, cuts))
    replayer = Replayer(graphs, inputs, late)
    result: list[Finding] = []
    for f in found:
        p = replayer.predict([f.cause]) if f.cause in ASSUMPTIONS else None
        result.append(_with_prediction(f, p, gpu_hour_usd, gpus) if p is not None else _unpriced(f))
    distinct = list(dict.fromkeys(causes))
    if len(distinct) > 1:
        together = replayer.predict(distinct, name="all")
    else:  # one fix: all of them is that one
        together = next((f.prediction for f in result if f.prediction is not None), None)
    return result, together


def priced(
    found: list[Finding], together: Prediction | None, gpu_hour_usd: float | None
) -> float | None:
    """What fixing every finding is predicted to save per GPU-hour: the all-fixes replay's saving
    as a share of the step, times the price. $0 when nothing was found; None without a price, or
    when findings exist but no fix of theirs could be replayed (the saving is not known)."""
    if gpu_hour_usd is None:
        return None
    if together is None:
        return 0.0 if not found else None
    return _share(together) * gpu_hour_usd


def _share(p: Prediction) -> float:
    """The predicted saving as a share of the step; under :data:`NO_SAVING_PCT`: none."""
    share = max(p.saving_ns_per_step, 0.0) / p.step_ns if p.step_ns else 0.0
    return share if share * 100.0 >= NO_SAVING_PCT else 0.0


def _outside(trace: Trace, host: HostIndex, phases: list[Phase]) -> NDArray[np.uint8]:
    """The host activity per event row, with the calls inside start-up phases made plain (no
    edit touches start-up: it is paid once per process, whatever the fix)."""
    if not phases:
        return host.activity
    ev = trace.events
    iv = union(
        np.array([p.start_ns for p in phases], dtype=np.int64),
        np.array([p.end_ns for p in phases], dtype=np.int64),
    )
    if len(iv) == 0:
        return host.activity
    # An event overlaps a phase when the first phase ending after the event starts begins
    # before the event ends (an instant lasts 1 ns): one search per event, no prefix sums.
    after = np.minimum(np.searchsorted(iv.end_ns, ev.start_ns, side="right"), len(iv) - 1)
    inside = (iv.end_ns[after] > ev.start_ns) & (
        iv.start_ns[after] < np.maximum(ev.end_ns, ev.start_ns + 1)
    )
    activity = host.activity.copy()
    activity[inside] = HostActivity.NONE
    return activity


def _unpriced(f: Finding) -> Finding:
    """No fix of this finding was replayed: idle time is stated as time, no saving is priced;
    busy time keeps its finding's own estimate of what its fix saves."""
    if f.cause not in CAUSES:
        return f
    return replace(f, cost_usd_per_gpu_hour=None, cost_usd_per_day=None)


def _with_prediction(f: Finding, p: Prediction, gpu_hour_usd: float | None, gpus: int) -> Finding:
    share = _share(p)
    hour = share * gpu_hour_usd if gpu_hour_usd is not None else None
    if share == 0.0 and p.note is None:
        p = replace(p, note=NO_SAVING_NOTE)
    return replace(
        f,
        prediction=p,
        predicted_saving_ns_per_step=p.saving_ns_per_step,
        cost_usd_per_gpu_hour=hour,
        # A per-day figure only where the finding had one: several steps, not one (findings.py).
        cost_usd_per_day=(
            hour * 24 * gpus if hour is not None and f.cost_usd_per_day is not None else None
        ),
    )


#: Why a finding's fix saves nothing, when the replay says so and nothing more specific does.
NO_SAVING_NOTE = (
    f"the replay shortens the step by less than {NO_SAVING_PCT}%: with this time removed each"
    " step still waits about as long for other work (the host's own time, the device's work,"
    " another cause's waits), so the time it names is not on the step's critical path"
)


def _inputs(
    trace: Trace,
    reports: list[DeviceEvidence],
    activity: NDArray[np.uint8],
    participants: list[Participant],
    cuts: list[WaitCuts] | None,
) -> EditInputs:
    ev = trace.events
    launch_code = CAUSES.index("launch_overhead")
    gap_rows, gap_ns, comm_rows, fp32_rows, fp32_bytes = [], [], [], [], []
    ratio, bandwidth = 2.0, None
    for d in reports:
        work = d.work
        gaps = d.idle.gaps
        launch = gaps.cause == launch_code
        ends, lengths = gaps.end_ns[launch], gaps.end_ns[launch] - gaps.start_ns[launch]
        starts = ev.start_ns[work.rows]
        at = np.minimum(np.searchsorted(starts, ends), max(work.rows.size - 1, 0))
        if work.rows.size:
            hit = starts[at] == ends
            gap_rows.append(work.rows[at[hit]])
            gap_ns.append(lengths[hit])
        comm = work.rows[work.work_class == WorkClass.COMMUNICATION]
        if comm.size:
            alongside = covered_ns(
                work.by_class[WorkClass.COMPUTE], ev.start_ns[comm], ev.end_ns[comm]
            )
            comm_rows.append(comm[alongside < EXPOSED_SHARE * np.maximum(ev.dur_ns[comm], 1)])
        fp32 = d.bounds.kind == KernelKind.GEMM_FP32
        fp32_rows.append(d.bounds.rows[fp32])
        fp32_bytes.append(d.bounds.bytes[fp32])
        f = d.facts
        tensor = (f.tf32_flops_per_s or f.bf16_flops_per_s) if f else None
        plain = f.fp32_flops_per_s if f else None
        if tensor and plain:
            ratio = tensor / plain  # the findings' own ratio (unknown device: 2x)
        if f and f.memory_bandwidth_bytes_per_s:
            bandwidth = f.memory_bandwidth_bytes_per_s
    empty = np.zeros(0, dtype=np.int64)
    inputs = EditInputs(
        activity=activity,
        launch_gap_rows=np.concatenate(gap_rows) if gap_rows else empty,
        launch_gap_ns=np.concatenate(gap_ns).astype(np.int64) if gap_ns else empty,
        exposed_comm_rows=np.concatenate(comm_rows) if comm_rows else empty,
        fp32_rows=np.concatenate(fp32_rows).astype(np.int64) if fp32_rows else empty,
        fp32_bytes=np.concatenate(fp32_bytes) if fp32_bytes else np.zeros(0),
        tensor_ratio=ratio,
        memory_bytes_per_s=bandwidth,
    )
    if cuts is not None:
        mine = [c for p, c in zip(participants, cuts, strict=True) if p.work.trace is trace]
        if mine:
            inputs.collective_rows = np.concatenate([c.rows for c in mine])
            inputs.wait_ns = np.concatenate([c.wait_ns for c in mine])
            inputs.straggler_cut_ns = np.concatenate([c.straggler_cut_ns for c in mine])
    return inputs
