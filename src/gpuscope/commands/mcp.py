"""``gpuscope mcp``: gpuscope as tools for a coding agent, over the Model Context Protocol.

The server speaks MCP over stdio with the official SDK (the ``mcp`` extra: ``pip install -e
'.[mcp]'`` from the checkout). Its tools are :class:`gpuscope.commands._agent.Session`'s answers;
bad input comes back as a tool error (``isError``) carrying the command line's one-line message
(``gpuscope: error: PATH: what is wrong``), never as a crash of the server. stdout is the
protocol's channel: nothing else may write to it. See ``docs/mcp.md``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from importlib import import_module
from typing import Any, TypeVar

import click

from gpuscope.commands._common import missing_extra

T = TypeVar("T")

INSTRUCTIONS = (
    "gpuscope reads GPU profiles (PyTorch profiler / Kineto JSON, Nsight Systems SQLite, Nsight "
    "Compute CSV, nvidia-smi / DCGM samples) and says why the GPUs are idle or slow, what it "
    "costs, where in the code, and what to change. Start with diagnose_trace on a trace file or "
    "a folder of per-rank traces (list_traces finds them); explain_finding gives one finding in "
    "full; diff_runs compares a run before and after a change; render_report writes the HTML "
    "report."
)


@click.command()
def mcp() -> None:
    """Serve gpuscope's tools to a coding agent over MCP (stdio). See docs/mcp.md."""
    try:
        server = build_server()
    except ModuleNotFoundError as missing:
        if (missing.name or "").split(".")[0] != "mcp":
            raise
        missing_extra("gpuscope mcp", "the MCP Python SDK (mcp)", "mcp")
        return
    server.run()


def _sdk() -> tuple[Any, type[Exception]]:
    """The SDK's server class and its tool error: ``MCPServer`` (mcp 2) or ``FastMCP`` (mcp 1)."""
    try:
        module = import_module("mcp.server.mcpserver")
        errors = import_module("mcp.server.mcpserver.exceptions")
        return module.MCPServer, errors.ToolError
    except ModuleNotFoundError as missing:
        if missing.name not in ("mcp.server.mcpserver", "mcp.server.mcpserver.exceptions"):
            raise
    module = import_module("mcp.server.fastmcp")
    errors = import_module("mcp.server.fastmcp.exceptions")
    return module.FastMCP, errors.ToolError


def build_server() -> Any:
    """The MCP server with gpuscope's tools (raises ModuleNotFoundError without the SDK)."""
    from gpuscope.commands import _agent
    from gpuscope.errors import InputError

    server_class, tool_error = _sdk()
    from gpuscope import __version__

    # The client's initialize answer names the server and its version (mcp 2 takes it; mcp 1's
    # FastMCP has no such argument and reports the SDK's own).
    versioned = "version" in inspect.signature(server_class).parameters
    extra = {"version": __version__} if versioned else {}
    server = server_class("gpuscope", instructions=INSTRUCTIONS, **extra)
    session = _agent.Session()

    def answer(call: Callable[[], T]) -> T:
        from gpuscope._files import forget_inputs

        forget_inputs()  # each tool call protects the files it reads (see gpuscope._files)
        try:
            return call()
        except InputError as error:
            raise tool_error(f"gpuscope: error: {error}") from None

    def diagnose_trace(path: str, gpu_hour_usd: float | None = None) -> dict[str, Any]:
        """Diagnose a GPU profile (a file, or a folder of per-rank traces of one job): the
        verdict (what bounds the job), the findings costliest first with their code locations,
        and where the GPU time goes per module and per operator. Compact: use explain_finding
        for one finding in full. gpu_hour_usd overrides the GPU-hour price."""
        return answer(lambda: session.diagnose(path, gpu_hour_usd))

    def explain_finding(
        path: str, finding: int, gpu_hour_usd: float | None = None
    ) -> dict[str, Any]:
        """One finding of a trace's diagnosis in full (finding = its number in diagnose_trace,
        from 1): evidence, every code location with the module it ran in, cost, and the fix."""
        return answer(lambda: session.explain(path, finding, gpu_hour_usd))

    def diff_runs(before: str, after: str, gpu_hour_usd: float | None = None) -> dict[str, Any]:
        """Compare two runs (trace files, folders, or saved run ids of gpuscope history): step
        time, GPU busy, time lost per cause, cost, kernels and findings, before and after."""
        return answer(lambda: session.diff(before, after, gpu_hour_usd))

    def render_report(
        path: str,
        output: str,
        compare_with: str | None = None,
        gpu_hour_usd: float | None = None,
    ) -> dict[str, Any]:
        """Write the self-contained HTML report of a trace to output (with compare_with: the
        before/after report of path and compare_with). Returns the file written and its size."""
        return answer(lambda: session.report(path, output, compare_with, gpu_hour_usd))

    def explain_memory(path: str, sites: int = 8) -> dict[str, Any]:
        """What holds the GPU's memory, from a PyTorch memory snapshot (_dump_snapshot pickle,
        read without running any code it names) or a trace recorded with profile_memory=True:
        the peak and when, the top allocation sites (user file:line, category: parameters,
        gradients, optimizer state, activations...), reserved-but-free memory (cached vs
        fragmented), an out-of-memory's verdict, and memory findings with the peak after
        each fix."""
        return answer(lambda: session.memory(path, sites))

    def list_traces(folder: str) -> dict[str, Any]:
        """The profiles under a folder that gpuscope can read, with their format (found by
        content, not by name) and size."""
        return answer(lambda: _agent.list_traces(folder))

    tools = (diagnose_trace, explain_finding, diff_runs, render_report, explain_memory, list_traces)
    for tool in tools:
        server.add_tool(tool)
    return server
