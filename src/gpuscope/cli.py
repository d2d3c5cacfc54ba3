"""The ``gpuscope`` command: a thin shell over the library.

Exit codes: 0 success, 1 a check failed (``gpuscope check``), 2 bad input (one line on stderr,
never a traceback). Each command lives in its own module under ``gpuscope.commands``, imported
when that command runs (or when ``--help`` lists them all).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

import click

#: Command name -> (module under gpuscope.commands, click command in it), in help order.
COMMANDS = {
    "diagnose": ("diagnose", "diagnose"),
    "demo": ("diagnose", "demo"),
    "report": ("report", "report"),
    "annotate": ("annotate", "annotate"),
    "profile": ("profile", "profile"),
    "diff": ("diff", "diff"),
    "history": ("history", "history"),
    "check": ("check", "check"),
    "scale": ("scale", "scale"),
    "sweep": ("sweep", "sweep"),
    "fleet": ("fleet", "fleet"),
    "fleet-report": ("fleet", "fleet_report"),
    "watch": ("watch", "watch"),
    "mcp": ("mcp", "mcp"),
}


class _Commands(click.Group):
    """A group whose commands import on first use (click's lazy-loading pattern)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        module, name = COMMANDS[cmd_name]
        command: click.Command = getattr(import_module(f"gpuscope.commands.{module}"), name)
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in COMMANDS:
            from difflib import get_close_matches

            from gpuscope.sanitise import printable

            near = get_close_matches(name, COMMANDS, n=1, cutoff=0.6)
            if near:  # a typo: say the command meant ("gpuscope diagnoze" -> diagnose)
                ctx.fail(f"no such command {printable(name, 80)!r}; did you mean {near[0]!r}?")
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        from gpuscope.commands._output import one_command

        try:
            with one_command():
                return super().invoke(ctx)
        except click.ClickException as error:
            # A usage error quotes what was typed (a path, a value): through the one sanitiser.
            from gpuscope.sanitise import printable

            error.message = printable(error.message, limit=4000)  # type: ignore[misc]
            raise


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gpuscope")
def main() -> None:
    """Why your GPUs are idle, what it costs, and what to change."""
