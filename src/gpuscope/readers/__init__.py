"""Readers: one per input format. Content decides the format, never the file name.

Contract: :func:`load` turns a file or a folder into a :class:`~gpuscope.model.Job` or raises
:class:`~gpuscope.errors.InputError` naming the file and what is wrong with it. Each format is a
:class:`Reader` in ``READERS``: ``sniff`` looks at the first bytes of a file (decompressed when
gzip), ``read`` returns the job fragment the file holds (timelines, kernel counters or samples).
Adding a format is one module and one line in ``READERS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuscope.errors import EmptyTraceError, InputError, UnknownFormatError
from gpuscope.model import BUSY_KINDS, Job, Kind, SampleSet, Trace
from gpuscope.readers import kineto, ncu, nsys, samples
from gpuscope.readers._io import head_bytes


@dataclass(frozen=True)
class Reader:
    name: str
    sniff: Callable[[bytes], bool]
    read: Callable[[Path], Job]


def _read_kineto(path: Path) -> Job:
    trace = kineto.read_file(path)
    require_device_activity(path, trace)
    return Job(source=str(path), traces=[trace])


def _read_ncu(path: Path) -> Job:
    return Job(source=str(path), traces=[], counters=[ncu.read(path)])


def _sampled(read: Callable[[Path], SampleSet]) -> Callable[[Path], Job]:
    def read_job(path: Path) -> Job:
        return Job(source=str(path), traces=[], samples=[read(path)])

    return read_job


READERS: list[Reader] = [
    Reader("kineto", kineto.looks_like_kineto, _read_kineto),
    Reader("nsys", nsys.looks_like_nsys, nsys.read),
    Reader("ncu-csv", ncu.looks_like_ncu, _read_ncu),
    Reader("nvml-jsonl", samples.looks_like_nvml_jsonl, _sampled(samples.read_nvml_jsonl)),
    Reader("nvidia-smi-csv", samples.looks_like_nvidia_smi, _sampled(samples.read_nvidia_smi)),
    Reader("dcgmi-dmon", samples.looks_like_dcgmi_dmon, _sampled(samples.read_dcgmi_dmon)),
    Reader("dcgm-counter-list", samples.looks_like_counter_list, samples.reject_counter_list),
    Reader("prometheus", samples.looks_like_prometheus, _sampled(samples.read_prometheus)),
]


def load(path: str | Path) -> Job:
    """Read one file, or every readable file in a folder (one per rank, or mixed formats)."""
    path = Path(path)
    if path.is_dir():
        return _load_folder(path)
    return load_file(path)


def load_file(path: Path) -> Job:
    """Read one file, whatever its format."""
    if path.suffix == ".nsys-rep":
        raise UnknownFormatError(
            path,
            "an Nsight Systems report; export it first: nsys export --type sqlite "
            f"--output {path.with_suffix('.sqlite').name} {path.name}",
        )
    head = head_bytes(path)
    for reader in READERS:
        if reader.sniff(head):
            return reader.read(path)
    if head.lstrip()[:1] in (b"{", b"["):
        raise UnknownFormatError(path, "JSON, but not a profiler trace (no 'traceEvents')")
    known = ", ".join(r.name for r in READERS)
    raise UnknownFormatError(path, f"not a profiler trace gpuscope can read ({known})")


def require_device_activity(path: Path, trace: Trace) -> None:
    """A timeline without device work cannot be diagnosed: say which of two reasons it is."""
    ev = trace.events
    if ev.of_kind(*BUSY_KINDS).any():
        return
    if ev.of_kind(Kind.RUNTIME).any():
        raise EmptyTraceError(
            path,
            "GPU activity was not recorded: the trace has CPU launches but no kernels"
            " (profile with ProfilerActivity.CUDA)",
        )
    raise EmptyTraceError(path, "no GPU activity: the trace holds CPU events only")


def _load_folder(folder: Path) -> Job:
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    parts: list[Job] = []
    skipped: list[str] = []
    for file in files:
        try:
            parts.append(load_file(file))
        except UnknownFormatError as error:
            skipped.append(f"{file.name} ({error.reason})")
    if not parts:
        if skipped:
            raise UnknownFormatError(
                folder, "no readable trace in the folder: " + "; ".join(skipped)
            )
        raise InputError(folder, "the folder is empty")
    job = Job.merge(str(folder), parts)
    if skipped and job.traces:
        job.traces[0].warnings.append(
            f"{folder}: skipped files that are not traces: " + "; ".join(skipped)
        )
    return job
