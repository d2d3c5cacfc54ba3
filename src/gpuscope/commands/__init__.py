"""CLI commands, one module each. Every module exposes click commands; ``gpuscope.cli`` adds them.

A command parses its arguments, calls the library, renders, and maps errors to exit codes
through :func:`gpuscope.commands._common.input_errors_exit`. No analysis logic lives here.
"""
