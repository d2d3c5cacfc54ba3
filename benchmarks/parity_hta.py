"""Compare gpuscope's temporal figures with Holistic Trace Analysis 0.5.0's, trace by trace.

Run from the repository root with gpuscope's environment (HTA itself is not needed)::

    python benchmarks/parity_hta.py [--markdown] [--reference ../shared/reference/hta-0.5.0.json]

Contract: reads HTA's recorded figures (``hta-0.5.0.json``; trace paths in it are relative to the
folder above ``reference/``), loads each trace with gpuscope and prints one row per trace and rank
that HTA has temporal figures for: HTA's idle / compute / overlap %, gpuscope's whole-trace idle /
compute %, gpuscope's figures on HTA's default window (:func:`drop_last_step`), the difference on
that window in percentage points, and, where it exceeds :data:`TOLERANCE_PP`, the smallest set of
HTA behaviours (``hta_emulation``) that, applied to gpuscope's computation, brings both figures
within tolerance, with the figures it then gives. The last column applies all of HTA's behaviours
at once. A second table lists HTA's failures from the reference and what gpuscope reads in those
traces. Exit status 1 if a difference is left unexplained.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuscope.analyses.timeline import DeviceWork, device_work, overlap, temporal_breakdown
from gpuscope.analyses.window import drop_last_step
from gpuscope.errors import InputError
from gpuscope.model import Job, Trace
from gpuscope.readers import load
from hta_emulation import NEEDS_RAW, Behaviour, RawStreams, emulated_work, raw_streams

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REFERENCE = ROOT.parent / "shared" / "reference" / "hta-0.5.0.json"
#: Largest difference (percentage points) counted as agreement.
TOLERANCE_PP = 0.5
#: The order in which behaviours are tried when explaining a difference.
SEARCH_ORDER = (
    Behaviour.ROUNDING,
    Behaviour.STREAM_ARG,
    Behaviour.NAME_TYPING,
    Behaviour.MTIA_DMA,
)


@dataclass(frozen=True)
class HtaRow:
    """HTA's temporal figures for one rank of one reference input."""

    input: str  # as written in the reference, relative to shared/
    rank: int
    idle_pct: float
    compute_pct: float
    overlap_pct: float | None  # None: HTA's NaN (no communication kernels)


@dataclass(frozen=True)
class HtaFailure:
    input: str
    step: str  # "load", "temporal", "idle" or "overlap"
    error: str


@dataclass(frozen=True)
class Figures:
    idle_pct: float
    compute_pct: float
    overlap_pct: float | None

    def within(self, hta: HtaRow, tolerance_pp: float = TOLERANCE_PP) -> bool:
        """Idle and compute both within ``tolerance_pp`` of HTA's."""
        return (
            abs(self.idle_pct - hta.idle_pct) <= tolerance_pp
            and abs(self.compute_pct - hta.compute_pct) <= tolerance_pp
        )


def figures(work: DeviceWork) -> Figures:
    """gpuscope's idle %, compute % and overlap % of one device's work."""
    tb = temporal_breakdown(work)
    return Figures(tb.pct(tb.idle_ns), tb.pct(tb.compute_ns), overlap(work).overlap_pct)


# --- the reference -------------------------------------------------------------------------------


def read_reference(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text("utf-8"))
    return data


def hta_rows(reference: dict[str, Any]) -> list[HtaRow]:
    """Every rank with temporal figures, in the reference's order."""
    rows: list[HtaRow] = []
    for result in reference["results"]:
        temporal = result.get("temporal")
        if not isinstance(temporal, list):
            continue
        overlaps = result.get("overlap")
        overlap_of = (
            {int(o["rank"]): o["comp_comm_overlap_pctg"] for o in overlaps}
            if isinstance(overlaps, list)
            else {}
        )
        for row in temporal:
            rank = int(row["rank"])
            rows.append(
                HtaRow(
                    input=result["input"],
                    rank=rank,
                    idle_pct=float(row["idle_time_pctg"]),
                    compute_pct=float(row["compute_time_pctg"]),
                    overlap_pct=overlap_of.get(rank),
                )
            )
    return rows


def hta_failures(reference: dict[str, Any]) -> list[HtaFailure]:
    """HTA's error entries: a failed load, or a failed analysis step."""
    failures: list[HtaFailure] = []
    for result in reference["results"]:
        if "error" in result:
            failures.append(HtaFailure(result["input"], "load", result["error"]))
            continue
        for step in ("temporal", "idle", "overlap"):
            entry = result.get(step)
            if isinstance(entry, dict) and "error" in entry:
                failures.append(HtaFailure(result["input"], step, entry["error"]))
    return failures


def trace_of_rank(job: Job, rank: int) -> Trace:
    """The trace HTA calls ``rank``: by ``distributedInfo.rank``, or the only one there is.

    (HTA falls back to rank 0 when it finds no rank, so a lone trace is always that rank.)
    """
    if len(job.traces) == 1:
        return job.traces[0]
    for trace in job.traces:
        if trace.rank == rank:
            return trace
    raise LookupError(f"{job.source}: no trace of rank {rank}")


def single_device(trace: Trace) -> int:
    """The device of a one-device trace; HTA merges every device of a rank into one figure."""
    devices = trace.device_ids
    if len(devices) != 1:
        raise ValueError(f"{trace.source}: {len(devices)} devices; HTA's figures mix them")
    return devices[0]


# --- comparing -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    hta: HtaRow
    whole: Figures  # gpuscope's default: the whole trace
    window: Figures  # gpuscope on HTA's default window
    explained_by: tuple[Behaviour, ...] | None  # None: agrees without any; () : unexplained
    explained: Figures | None  # gpuscope with ``explained_by`` applied
    all_behaviours: Figures  # gpuscope with every HTA behaviour applied

    @property
    def idle_diff_pp(self) -> float:
        return self.window.idle_pct - self.hta.idle_pct

    @property
    def compute_diff_pp(self) -> float:
        return self.window.compute_pct - self.hta.compute_pct


def explain(
    trace: Trace, device: int, hta: HtaRow, raw: Callable[[], RawStreams]
) -> tuple[tuple[Behaviour, ...], Figures] | None:
    """The smallest set of HTA behaviours that brings gpuscope within tolerance, or None."""
    for size in range(1, len(SEARCH_ORDER) + 1):
        for chosen in itertools.combinations(SEARCH_ORDER, size):
            streams = raw() if set(chosen) & NEEDS_RAW else None
            result = figures(emulated_work(trace, device, chosen, streams))
            if result.within(hta):
                return chosen, result
    return None


def compare(trace: Trace, hta: HtaRow, raw: Callable[[], RawStreams]) -> Comparison:
    """gpuscope's figures for ``trace`` next to HTA's, with the behaviours that explain a gap."""
    device = single_device(trace)
    whole = figures(device_work(trace, device))
    window = figures(device_work(drop_last_step(trace), device))
    explained_by: tuple[Behaviour, ...] | None = None
    explained: Figures | None = None
    if not window.within(hta):
        found = explain(trace, device, hta, raw)
        explained_by, explained = found if found is not None else ((), None)
    every = figures(emulated_work(trace, device, SEARCH_ORDER, raw()))
    return Comparison(hta, whole, window, explained_by, explained, every)


def _cached(path: Path) -> Callable[[], RawStreams]:
    """Read the raw JSON once, and only if a behaviour needs it."""
    cache: list[RawStreams] = []

    def get() -> RawStreams:
        if not cache:
            cache.append(raw_streams(path))
        return cache[0]

    return get


def comparisons(reference: dict[str, Any], shared: Path) -> Iterator[Comparison]:
    """One comparison per rank with HTA figures; each trace is loaded once."""
    jobs: dict[str, Job] = {}
    for hta in hta_rows(reference):
        path = shared / hta.input
        if hta.input not in jobs:
            jobs[hta.input] = load(path)
        trace = trace_of_rank(jobs[hta.input], hta.rank)
        yield compare(trace, hta, _cached(Path(trace.source)))


@dataclass(frozen=True)
class FailureReport:
    failure: HtaFailure
    devices: int | None  # None: gpuscope could not read it either
    busy_pct: float | None  # busiest device
    gpuscope_error: str | None


def failure_reports(reference: dict[str, Any], shared: Path) -> list[FailureReport]:
    reports: list[FailureReport] = []
    for failure in hta_failures(reference):
        try:
            job = load(shared / failure.input)
        except InputError as error:
            reports.append(FailureReport(failure, None, None, str(error)))
            continue
        busy: list[float] = []
        devices = 0
        for trace in job.traces:
            for device in trace.device_ids:
                tb = temporal_breakdown(device_work(trace, device))
                busy.append(tb.pct(tb.busy_ns))
                devices += 1
        reports.append(FailureReport(failure, devices, max(busy, default=None), None))
    return reports


# --- presenting ----------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.2f}"


def _signed(pp: float) -> str:
    return f"{round(pp, 2) + 0.0:+.2f}"  # + 0.0 turns -0.0 into 0.0: no "-0.00"


def _pair(f: Figures) -> str:
    return f"{_pct(f.idle_pct)} / {_pct(f.compute_pct)}"


def short_name(source: str) -> str:
    parts = Path(source).parts
    if "kineto" in parts:
        parts = parts[parts.index("kineto") + 1 :]
    return "/".join(parts).removesuffix(".gz").removesuffix(".json")


def _explanation(c: Comparison) -> str:
    if c.explained_by is None:
        return "agrees"
    if not c.explained_by or c.explained is None:
        return "UNEXPLAINED"
    names = " + ".join(b.value for b in c.explained_by)
    return f"{names} → {_pair(c.explained)}"


COMPARISON_HEADER = (
    "trace",
    "rank",
    "HTA idle / compute",
    "HTA overlap",
    "gpuscope whole trace",
    "gpuscope HTA window",
    "window overlap",
    "Δ idle / compute (pp)",
    "explained by → idle / compute",
    "all HTA behaviours",
)


def comparison_cells(c: Comparison) -> tuple[str, ...]:
    return (
        short_name(c.hta.input),
        str(c.hta.rank),
        f"{c.hta.idle_pct:.2f} / {c.hta.compute_pct:.2f}",
        _pct(c.hta.overlap_pct),
        _pair(c.whole),
        _pair(c.window),
        _pct(c.window.overlap_pct),
        f"{_signed(c.idle_diff_pp)} / {_signed(c.compute_diff_pp)}",
        _explanation(c),
        _pair(c.all_behaviours),
    )


FAILURE_HEADER = ("trace", "HTA step", "HTA error", "gpuscope devices", "gpuscope busy %")


def failure_cells(r: FailureReport) -> tuple[str, ...]:
    error = r.failure.error.splitlines()[0]
    if len(error) > 60:
        error = error[:57] + "..."
    return (
        short_name(r.failure.input),
        r.failure.step,
        error,
        r.gpuscope_error or str(r.devices),
        _pct(r.busy_pct),
    )


def render(header: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE)
    args = parser.parse_args(argv)
    if not args.reference.exists():
        parser.error(f"no HTA reference at {args.reference}")
    reference = read_reference(args.reference)
    shared = args.reference.resolve().parent.parent
    rows = list(comparisons(reference, shared))
    print(render(COMPARISON_HEADER, [comparison_cells(c) for c in rows], args.markdown))
    print()
    reports = failure_reports(reference, shared)
    print(render(FAILURE_HEADER, [failure_cells(r) for r in reports], args.markdown))
    unexplained = [c for c in rows if c.explained_by == ()]
    overlap_off = [
        c
        for c in rows
        if c.hta.overlap_pct is not None
        and (
            c.window.overlap_pct is None
            or abs(c.window.overlap_pct - c.hta.overlap_pct) > TOLERANCE_PP
        )
    ]
    print(
        f"\n{len(rows)} ranks; {sum(c.explained_by is None for c in rows)} agree within "
        f"{TOLERANCE_PP} pp on HTA's window, {sum(bool(c.explained_by) for c in rows)} are "
        f"explained by HTA behaviours, {len(unexplained)} unexplained; overlap off on "
        f"{len(overlap_off)}."
    )
    return 1 if unexplained or overlap_off else 0


if __name__ == "__main__":
    raise SystemExit(main())
