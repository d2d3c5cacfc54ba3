"""What ``gpuscope mcp``'s tools answer, as plain JSON values: the library called the way the
commands call it, shaped for a coding agent (compact first, in full on request).

Contract: every function takes paths as strings and returns a ``dict`` of JSON types, or raises
:class:`~gpuscope.errors.InputError` with the message the command line would print. Nothing here
imports the MCP SDK, so the answers are tested without it. A :class:`Session` keeps the last few
diagnoses (a file is read again only when it changed), as an agent asks about one trace several
times: the verdict, then a finding, then a report.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuscope.errors import InputError
from gpuscope.render import agent

if TYPE_CHECKING:
    from gpuscope.diagnosis import Diagnosis

#: Diagnoses kept by a session (a trace of a few hundred MB holds ~100 MB of columns).
KEPT = 4
#: Locations and view rows in the compact answer (:mod:`gpuscope.render.agent`).
COMPACT_LOCATIONS = agent.COMPACT_LOCATIONS
COMPACT_ROWS = agent.COMPACT_ROWS
#: Files listed at most by ``list_traces``.
LISTED = 500
#: Entries ``list_traces`` examines at most, and the seconds it walks at most.
EXAMINED = 20_000
WALK_SECONDS = 5.0


class Session:
    """The tools of one MCP connection, sharing a small cache of diagnoses."""

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple[str, int, int, float | None], Diagnosis] = OrderedDict()

    def diagnosis(self, path: str, gpu_hour_usd: float | None = None) -> Diagnosis:
        from gpuscope.diagnosis import Options, diagnose
        from gpuscope.readers import load

        if not path.strip():  # Path("") is the server's working folder: never meant
            raise InputError(repr(path), "an empty path: give a trace file or folder")
        where = Path(path).expanduser()
        if not where.exists():
            raise InputError(where, "no such file or folder")
        stat = where.stat()
        key = (str(where.resolve()), stat.st_mtime_ns, stat.st_size, gpu_hour_usd)
        found = self._kept.get(key)
        if found is None:
            found = diagnose(load(where), Options(gpu_hour_usd=gpu_hour_usd))
            self._kept[key] = found
            while len(self._kept) > KEPT:
                self._kept.popitem(last=False)
        self._kept.move_to_end(key)
        return found

    def diagnose(self, path: str, gpu_hour_usd: float | None = None) -> dict[str, Any]:
        """The verdict, the findings with their top locations, and where the GPU time goes."""
        from gpuscope.render.agent import answer

        return answer(self.diagnosis(path, gpu_hour_usd))

    def explain(self, path: str, finding: int, gpu_hour_usd: float | None = None) -> dict[str, Any]:
        """One finding in full: evidence, every location (with its module row), the fix."""
        from gpuscope.render.agent import explanation

        d = self.diagnosis(path, gpu_hour_usd)
        if not 1 <= finding <= len(d.findings):
            have = f"findings 1 to {len(d.findings)}" if d.findings else "no findings"
            raise InputError(path, f"has {have}; there is no finding {finding}")
        return explanation(d, finding)

    def diff(self, before: str, after: str, gpu_hour_usd: float | None = None) -> dict[str, Any]:
        """What changed between two runs (files, folders or saved run ids)."""
        from gpuscope.compare.diff import diff as diff_runs
        from gpuscope.compare.diff import summarize
        from gpuscope.render.diff import to_document

        def summary(ref: str) -> Any:
            from gpuscope.history import run_id

            if Path(ref).exists() or run_id(ref) is None:
                return summarize(self.diagnosis(ref, gpu_hour_usd))
            from gpuscope.commands.diff import summary_of

            return summary_of(ref, gpu_hour_usd)[0]

        return to_document(diff_runs(summary(before), summary(after)), before, after)

    def report(
        self,
        path: str,
        output: str,
        compare_with: str | None = None,
        gpu_hour_usd: float | None = None,
    ) -> dict[str, Any]:
        """Write the HTML report of ``path`` (before/after when ``compare_with`` is given)."""
        from gpuscope.commands._common import rendered, write_output
        from gpuscope.render.base import Comparison, DiffHtml, Html

        d = self.diagnosis(path, gpu_hour_usd)
        if compare_with is None:
            data = rendered(Html(), d)
        else:
            from gpuscope.compare import diff

            other = self.diagnosis(compare_with, gpu_hour_usd)
            change = diff.diff(diff.summarize(d), diff.summarize(other))
            data = rendered(DiffHtml(), Comparison(d, other, change))
        if not output.strip():
            raise InputError(repr(output), "an empty path: give the HTML file to write")
        target = Path(output).expanduser()
        # The traces may come from the session's cache, not read by this call: named as inputs.
        sources = (Path(path).expanduser(), *([Path(compare_with)] if compare_with else []))
        write_output(target, data, inputs=sources)
        return {"output": str(target), "bytes": len(data)}


def list_traces(folder: str) -> dict[str, Any]:
    """The files under ``folder`` that gpuscope reads, with their format (by content).

    The walk is bounded, so that ``list_traces("/")`` answers in seconds: at most
    :data:`EXAMINED` entries and :data:`WALK_SECONDS` seconds, then ``"more": true``. Only
    regular files are opened (a FIFO or a device is never waited on), links are not followed,
    and hidden folders and the kernel's (``/proc``, ``/sys``, ``/dev``) are skipped."""
    import stat
    import time

    from gpuscope.readers import READERS
    from gpuscope.readers._io import head_bytes

    if not folder.strip():  # Path("") is the server's working folder: never meant
        raise InputError(repr(folder), "an empty path: give a folder")
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise InputError(root, "no such folder" if not root.exists() else "not a folder")
    found: list[dict[str, Any]] = []
    others = examined = 0
    deadline = time.monotonic() + WALK_SECONDS

    def answer(more: bool) -> dict[str, Any]:
        return {"folder": str(root), "traces": found, "other_files": others, "more": more}

    for base, dirs, files in os.walk(root):
        dirs[:] = sorted(
            d for d in dirs if not d.startswith(".") and os.path.join(base, d) not in _SYSTEM
        )
        for name in sorted(files):
            if name.startswith("."):
                continue
            examined += 1
            if len(found) == LISTED or examined > EXAMINED or time.monotonic() > deadline:
                return answer(more=True)
            path = Path(base) / name
            try:
                status = path.lstat()
            except OSError:
                continue
            kind = _format_of(path, READERS, head_bytes) if stat.S_ISREG(status.st_mode) else None
            if kind is None:
                others += 1
            else:
                found.append({"path": str(path), "format": kind, "bytes": status.st_size})
    return answer(more=False)


#: The kernel's folders: their files are not profiles, and some block when read.
_SYSTEM = frozenset({"/proc", "/sys", "/dev", "/run"})


def _format_of(path: Path, readers: Any, head_bytes: Any) -> str | None:
    if path.suffix == ".nsys-rep":
        return "nsys-rep (export it to SQLite first: nsys export --type sqlite)"
    try:
        head = head_bytes(path)
    except (InputError, OSError):
        return None
    return next((r.name for r in readers if r.sniff(head)), None)
