"""The ``gpuscope`` command: a thin shell over the library.

Exit codes: 0 success, 1 a check failed (``gpuscope check``), 2 bad input (one line on stderr,
never a traceback). Each command lives in its own module under ``gpuscope.commands``.
"""

from __future__ import annotations

import os

import click

from gpuscope.commands import (
    annotate,
    check,
    diagnose,
    diff,
    fleet,
    history,
    profile,
    report,
    scale,
    sweep,
    watch,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpuscope")
def main() -> None:
    """Why your GPUs are idle, what it costs, and what to change."""
    _tune_malloc()


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8


def _tune_malloc() -> None:
    """The process is ours: tune glibc's allocator for reading traces.

    - Two arenas at most. glibc gives every thread that allocates its own arena, and each keeps
      what it freed: a trace read on three threads held ~25 MB more at its peak.
    - Blocks up to 64 MB come from the heap, and up to 128 MB of freed heap is kept. Otherwise
      every 4 MB piece of a trace is mapped fresh and returned at once, and the kernel zeroes and
      faults its pages in again: 23% fewer page faults, and ~10% less time for a 54 MB trace, for
      ~10 MB more at the peak.
    """
    if os.name == "posix" and "glibc" in (os.confstr("CS_GNU_LIBC_VERSION") or ""):
        import ctypes

        libc = ctypes.CDLL(None)
        libc.mallopt(_M_ARENA_MAX, 2)
        libc.mallopt(_M_MMAP_THRESHOLD, 64 << 20)
        libc.mallopt(_M_TRIM_THRESHOLD, 128 << 20)


main.add_command(diagnose.diagnose)
main.add_command(diagnose.demo)
main.add_command(report.report)
main.add_command(annotate.annotate)
main.add_command(profile.profile)
main.add_command(diff.diff)
main.add_command(history.history)
main.add_command(check.check)
main.add_command(scale.scale)
main.add_command(sweep.sweep)
main.add_command(fleet.fleet)
main.add_command(fleet.fleet_report)
main.add_command(watch.watch)
