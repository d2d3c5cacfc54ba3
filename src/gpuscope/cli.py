"""The ``gpuscope`` command: a thin shell over the library.

Exit codes: 0 success, 1 a check failed (``gpuscope check``), 2 bad input (one line on stderr,
never a traceback). Each command lives in its own module under ``gpuscope.commands``.
"""

from __future__ import annotations

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
