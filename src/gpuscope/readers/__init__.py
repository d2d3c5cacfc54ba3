"""Readers: one per input format. Content decides the format, never the file name.

Contract: :func:`load` turns a file or a folder of per-rank files into a
:class:`~gpuscope.model.Job` or raises :class:`~gpuscope.errors.InputError` naming the file
and what is wrong with it.
"""

from __future__ import annotations

from pathlib import Path

from gpuscope.errors import EmptyTraceError, InputError, UnknownFormatError
from gpuscope.model import BUSY_KINDS, Job, Kind, Trace
from gpuscope.readers import kineto
from gpuscope.readers._io import read_bytes

_SQLITE_MAGIC = b"SQLite format 3\x00"


def load(path: str | Path) -> Job:
    """Read one trace file, or every trace in a folder (one per rank)."""
    path = Path(path)
    if path.is_dir():
        return _load_folder(path)
    trace = load_trace(path)
    return Job(source=str(path), traces=[trace])


def load_trace(path: Path) -> Trace:
    """Read one file, whatever its format, and check it has device activity to analyse."""
    if path.suffix == ".nsys-rep":
        raise UnknownFormatError(
            path,
            "an Nsight Systems report; export it first: nsys export --type sqlite "
            f"--output {path.with_suffix('.sqlite').name} {path.name}",
        )
    content = read_bytes(path)
    head = content.data[:4096]
    if head.startswith(_SQLITE_MAGIC):
        raise UnknownFormatError(
            path, "SQLite files are not read yet (Nsight Systems support is planned)"
        )
    if kineto.looks_like_kineto(head) or (
        head.lstrip()[:1] == b"{" and b'"traceEvents"' in content.data
    ):
        trace = kineto.read(path, content.data, truncated_stream=content.truncated)
    elif head.lstrip()[:1] in (b"{", b"["):
        raise UnknownFormatError(path, "JSON, but not a profiler trace (no 'traceEvents')")
    else:
        raise UnknownFormatError(
            path, "not a profiler trace gpuscope can read (Kineto JSON, plain or gzip)"
        )
    _require_device_activity(path, trace)
    return trace


def _require_device_activity(path: Path, trace: Trace) -> None:
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
    traces: list[Trace] = []
    skipped: list[str] = []
    for file in files:
        try:
            traces.append(load_trace(file))
        except UnknownFormatError as error:
            skipped.append(f"{file.name} ({error.reason})")
    if not traces:
        if skipped:
            raise UnknownFormatError(
                folder, "no readable trace in the folder: " + "; ".join(skipped)
            )
        raise InputError(folder, "the folder is empty")
    traces.sort(key=lambda t: (t.rank if t.rank is not None else 1 << 30, t.source))
    job = Job(source=str(folder), traces=traces)
    if skipped:
        traces[0].warnings.append(
            f"{folder}: skipped files that are not traces: " + "; ".join(skipped)
        )
    return job
