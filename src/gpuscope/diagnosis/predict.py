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
* findings come back :func:`~gpuscope.diagnosis.findings.ranked`: what fixing saves most first,
  what saves nothing last;
* a fix that saves more than the time its finding names shortens the step by hiding other
  findings' time (a sync removed lets the host run its data loader while the GPU works): its
  note names them, from replaying it with each of theirs (:func:`_hides`).

Start-up is left out of every edit: host calls inside a start-up phase (CUDA context creation,
module loading, compilation; :mod:`gpuscope.analyses.phases`) are start-up whatever their name. A
``cudaFree`` that creates the context is no allocator churn, and no allocator fix removes it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from msgspec.structs import replace
from numpy.typing import NDArray

from gpuscope._arrays import distinct, member
from gpuscope.analyses.attribution import CAUSES
from gpuscope.analyses.bounds import KernelKind
from gpuscope.analyses.host import HostActivity
from gpuscope.analyses.intervals import covered_ns, union
from gpuscope.analyses.ranks import Participant, WaitCuts, collective_waits
from gpuscope.analyses.timeline import WorkClass
from gpuscope.analyses.whatif import (
    ASSUMPTIONS,
    EditInputs,
    Graph,
    Prediction,
    Replayer,
    build_graph,
)
from gpuscope.diagnosis import money
from gpuscope.diagnosis.evidence import JobContext
from gpuscope.diagnosis.findings import (
    NO_SAVING_PCT,
    Finding,
    graph_launched,
    launch_gap_work,
    ranked,
    worth_pct,
)
from gpuscope.model import CopyDirection, Kind, Trace

if TYPE_CHECKING:
    from gpuscope.analyses.host import HostIndex
    from gpuscope.analyses.phases import Phase
    from gpuscope.diagnosis.evidence import DeviceEvidence

#: A collective with less than this share of its time alongside compute ran exposed.
EXPOSED_SHARE = 0.1


def predict(found: list[Finding], job: JobContext) -> tuple[list[Finding], Prediction | None]:
    """Each finding's fix replayed alone, and all of them together (None: no fix has an edit)."""
    participants, ranks, gpu_hour_usd, gpus = (
        job.participants,
        job.ranks,
        job.gpu_hour_usd,
        job.gpus,
    )
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
    for context in job.traces:
        trace, reports = context.trace, context.devices
        if not reports:
            continue
        if any((d.rank if d.rank is not None else -1) in straggler_ranks for d in reports):
            late.add(len(graphs))
        graphs.append(context.graph.result() if context.graph is not None else build_graph(trace))
        outside = _outside(trace, context.host, context.phases)
        inputs.append(_inputs(trace, reports, outside, participants, cuts))
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
    return ranked(_hides(replayer, result)), together


#: A fix "saves more than its finding names" when its predicted saving exceeds the finding's own
#: share of device time by this many percentage points of the step (replays are checked to 10%
#: of a step, and a finding's share is of the window, not of one step).
HIDES_MARGIN_PCT = 2.0
#: Another finding's time is hidden by a fix when, with that fix applied, its own fix saves less
#: than this share of what it saves alone.
HIDDEN_SHARE = 0.5


def _hides(replayer: Replayer, found: list[Finding]) -> list[Finding]:
    """Say why a fix saves more than the time its finding names: it hides other findings' time.

    Removing a wait changes what the host does meanwhile: a host no longer blocked at a sync
    runs its next data-loader fetch while the GPU still works on the step, so the loader's time
    stops costing the GPU. The replay shows this as a saving larger than the sync's own gaps;
    which other findings it hides is read by replaying the fix together with each of theirs: a
    finding whose own fix then adds less than :data:`HIDDEN_SHARE` of its saving alone is hidden.
    """
    predicted = [f for f in found if f.prediction is not None and worth_pct(f) > 0.0]
    result: list[Finding] = []
    for f in found:
        p = f.prediction
        if p is None or worth_pct(f) <= f.share_pct + HIDES_MARGIN_PCT:
            result.append(f)
            continue
        hidden: list[str] = []
        causes: list[str] = []
        for other in predicted:
            alone = other.prediction
            if other is f or alone is None:
                continue
            both = replayer.predict([f.cause, other.cause])
            if both is None:
                continue
            extra = both.saving_ns_per_step - p.saving_ns_per_step
            if extra < HIDDEN_SHARE * alone.saving_ns_per_step:
                causes.append(other.cause)
                hidden.append(
                    f"{other.cause} ({other.title}): its own fix then saves"
                    f" {100.0 * max(extra, 0.0) / p.step_ns:.0f}% more, not"
                    f" {alone.faster_pct:.0f}%"
                )
        if not hidden:
            result.append(f)
            continue
        why = (
            f"it saves more than the {f.share_pct:.0f}% of device time it names because fixing it"
            " also hides " + "; ".join(hidden)
        )
        note = f"{p.note}; {why}" if p.note else why
        result.append(replace(f, prediction=replace(p, note=note, hides=causes)))
    return result


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
    return money.per_gpu_hour(_share(together), gpu_hour_usd)


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
    hour = money.per_gpu_hour(share, gpu_hour_usd)
    if share == 0.0 and p.note is None:
        p = replace(p, note=NO_SAVING_NOTES.get(f.cause, NO_SAVING_NOTE))
    return replace(
        f,
        prediction=p,
        predicted_saving_ns_per_step=p.saving_ns_per_step,
        cost_usd_per_gpu_hour=hour,
        # A per-day figure only where the finding had one: several steps, not one (findings.py).
        cost_usd_per_day=money.per_day(hour, gpus) if f.cost_usd_per_day is not None else None,
    )


#: Why keeping values on the GPU saves nothing more: its copies are the ones the host waits for.
D2H_WAITED_NOTE = (
    "the host waits for these copies at its syncs: the host_sync finding's fix (the value read"
    " every N steps, or not at all) removes them and their operators, so this one adds nothing"
)
#: Why exposed communication's replay saves nothing: the replay starts each collective at its
#: launch, and a collective launched after the compute it could hide behind (a manual
#: ``all_reduce`` after ``backward()``) then still runs alone. Its time is on the step's critical
#: path; only an earlier launch (DDP's buckets during backward) hides it, and when its data is
#: ready the trace does not say, so no saving is priced.
LAUNCHED_LATE_NOTE = (
    "the collectives are launched after the compute they could overlap, so starting each at its"
    " launch hides nothing; launching them earlier (during backward) would, by an amount the"
    " trace cannot time (the fix's bound is an upper limit, not a prediction)"
)
#: Why a finding's fix saves nothing, when the replay says so and nothing more specific does.
NO_SAVING_NOTE = (
    f"the replay shortens the step by less than {NO_SAVING_PCT}%: with this time removed each"
    " step still waits about as long for other work (the host's own time, the device's work,"
    " another cause's waits), so the time it names is not on the step's critical path"
)
#: The more specific reason, for causes that have one.
NO_SAVING_NOTES = {"d2h_copy": D2H_WAITED_NOTE, "exposed_communication": LAUNCHED_LATE_NOTE}


def copy_only_ops(trace: Trace) -> NDArray[np.int64]:
    """Top-level host operators whose only device work is copying to the host.

    ``.cpu()``, ``.item()``, ``.tolist()`` and ``.numpy()`` each run an operator (``aten::to``,
    ``aten::item``...) that launches a device-to-host copy and waits for it; keeping the value on
    the GPU removes the operator, its copy and its wait, so the host's time inside it goes. An
    operator that also launches other device work is more than a copy to the host: it stays."""
    ev = trace.events
    copies = np.flatnonzero(
        (ev.kind == Kind.MEMCPY) & (ev.copy_direction == CopyDirection.D2H) & (ev.link >= 0)
    )
    if copies.size == 0:
        return np.zeros(0, dtype=np.int64)
    d2h_calls = ev.link[copies]
    other = np.flatnonzero(ev.of_kind(Kind.KERNEL, Kind.MEMSET, Kind.MEMCPY) & (ev.link >= 0))
    other = other[ev.copy_direction[other] != CopyDirection.D2H]
    other_calls = ev.link[other]
    ops = np.flatnonzero(ev.kind == Kind.CPU_OP)
    found: list[NDArray[np.int64]] = []
    for pid, tid in set(zip(ev.pid[d2h_calls].tolist(), ev.tid[d2h_calls].tolist(), strict=True)):
        mine = ops[(ev.pid[ops] == pid) & (ev.tid[ops] == tid)]
        if mine.size == 0:
            continue
        mine = mine[np.argsort(ev.start_ns[mine], kind="stable")]
        starts, ends = ev.start_ns[mine], ev.end_ns[mine]
        # Top-level: starts at or after every earlier operator on its thread has ended.
        before = np.maximum.accumulate(np.concatenate([[np.iinfo(np.int64).min], ends[:-1]]))
        top = mine[starts >= before]
        on_thread = (ev.pid[d2h_calls] == pid) & (ev.tid[d2h_calls] == tid)
        with_copy = _enclosing(trace, top, d2h_calls[on_thread])
        on_thread = (ev.pid[other_calls] == pid) & (ev.tid[other_calls] == tid)
        with_other = _enclosing(trace, top, other_calls[on_thread])
        # (both are distinct and sorted: np.setdiff1d would sort again, importing numpy.ma)
        found.append(top[with_copy[~member(with_copy, with_other)]].astype(np.int64))
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def _enclosing(trace: Trace, top: NDArray[np.int64], calls: NDArray[np.int64]) -> NDArray[np.int64]:
    """Positions in ``top`` (disjoint operators in start order) of those holding a call."""
    ev = trace.events
    t_start, t_end = ev.start_ns[top], ev.end_ns[top]
    at = np.searchsorted(t_start, ev.start_ns[calls], side="right") - 1
    ok = (at >= 0) & (t_end[np.maximum(at, 0)] >= ev.end_ns[calls])
    return distinct(at[ok])


def _inputs(
    trace: Trace,
    reports: list[DeviceEvidence],
    activity: NDArray[np.uint8],
    participants: list[Participant],
    cuts: list[WaitCuts] | None,
) -> EditInputs:
    ev = trace.events
    gap_rows, gap_ns, comm_rows, fp32_rows, fp32_bytes = [], [], [], [], []
    ratio, bandwidth, pinned = 2.0, None, None
    for d in reports:
        work = d.work
        # The gaps before work a graph launch issued are not launch overhead a graph removes:
        # that work is captured already, so the edit's assumption is not applied to them.
        rows, lengths = launch_gap_work(d)
        eager = ~graph_launched(trace, rows)
        gap_rows.append(rows[eager])
        gap_ns.append(lengths[eager])
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
        if f and f.pinned_copy_bytes_per_s:
            pinned = f.pinned_copy_bytes_per_s
    empty = np.zeros(0, dtype=np.int64)
    inputs = EditInputs(
        d2h_op_rows=copy_only_ops(trace),
        activity=activity,
        launch_gap_rows=np.concatenate(gap_rows) if gap_rows else empty,
        launch_gap_ns=np.concatenate(gap_ns).astype(np.int64) if gap_ns else empty,
        exposed_comm_rows=np.concatenate(comm_rows) if comm_rows else empty,
        fp32_rows=np.concatenate(fp32_rows).astype(np.int64) if fp32_rows else empty,
        fp32_bytes=np.concatenate(fp32_bytes) if fp32_bytes else np.zeros(0),
        tensor_ratio=ratio,
        memory_bytes_per_s=bandwidth,
        pinned_bytes_per_s=pinned,
    )
    if cuts is not None:
        mine = [c for p, c in zip(participants, cuts, strict=True) if p.work.trace is trace]
        if mine:
            inputs.collective_rows = np.concatenate([c.rows for c in mine])
            inputs.wait_ns = np.concatenate([c.wait_ns for c in mine])
            inputs.straggler_cut_ns = np.concatenate([c.straggler_cut_ns for c in mine])
    return inputs
