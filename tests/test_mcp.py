"""``gpuscope mcp``: the server started as a subprocess and driven by the MCP SDK's own client,
and the tools' answers (``gpuscope.commands._agent``) on the corpus."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from corpus import corpus
from gpuscope import __version__
from gpuscope.commands import _agent
from gpuscope.errors import InputError

QWEN = "kineto/tracelens/h100_qwen1.5-0.5b_inference.json.gz"
SRC = Path(__file__).resolve().parents[1] / "src"
TOOLS = {
    "diagnose_trace",
    "explain_finding",
    "diff_runs",
    "render_report",
    "explain_memory",
    "list_traces",
}


def _text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


def _is_error(result: Any) -> bool:
    # mcp 2 spells it is_error; mcp 1 isError.
    return bool(getattr(result, "is_error", getattr(result, "isError", False)))


def test_mcp_server_lists_its_tools_diagnoses_a_trace_and_reports_bad_input(
    tmp_path: Path,
) -> None:
    pytest.importorskip("mcp")
    anyio = pytest.importorskip("anyio")
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    trace = corpus(QWEN)
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }
    server = StdioServerParameters(command=sys.executable, args=["-m", "gpuscope", "mcp"], env=env)

    async def drive() -> tuple[set[str], Any, Any, Any]:
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            started = await session.initialize()
            # The server names itself with gpuscope's version (it reported "" before).
            assert (started.server_info.name, started.server_info.version) == (
                "gpuscope",
                __version__,
            )
            tools = {t.name for t in (await session.list_tools()).tools}
            diagnosed = await session.call_tool("diagnose_trace", {"path": str(trace)})
            explained = await session.call_tool(
                "explain_finding", {"path": str(trace), "finding": 1}
            )
            failed = await session.call_tool("diagnose_trace", {"path": str(bad)})
            return tools, diagnosed, explained, failed

    tools, diagnosed, explained, failed = anyio.run(drive)
    assert tools == TOOLS
    assert not _is_error(diagnosed)
    answer = json.loads(_text(diagnosed))
    assert answer["verdict"]["bound"] == "memory"
    assert answer["findings"][0]["cause"] == "memory_bound"
    assert [m["module"] for m in answer["modules"][:3]] == [
        "ProfilerStep",
        "ProfilerStep/Qwen2Model",
        "ProfilerStep/Qwen2Model/Qwen2DecoderLayer",
    ]
    assert json.loads(_text(explained))["fix"].startswith("Memory-bound kernels dominate")
    # The same one line the command line prints for this file, as a tool error.
    cli = subprocess.run(
        [sys.executable, "-m", "gpuscope", "diagnose", str(bad)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert cli.returncode == 2
    line = cli.stderr.strip()
    assert line.startswith(f"gpuscope: error: {bad}:")
    assert _is_error(failed) and _text(failed).endswith(line)


def test_agent_session_explains_a_finding_with_the_module_its_locations_ran_in() -> None:
    session = _agent.Session()
    path = str(corpus(QWEN))
    compact = session.diagnose(path)
    launch = next(f for f in compact["findings"] if f["cause"] == "launch_overhead")
    assert len(launch["locations"]) <= _agent.COMPACT_LOCATIONS
    full = session.explain(path, launch["finding"])
    assert full["cause"] == "launch_overhead" and full["evidence"] and full["fix"]
    modules = {loc["module"] for loc in full["locations"]}
    assert any(m and m.startswith("ProfilerStep/Qwen2Model_0/") for m in modules)
    with pytest.raises(InputError, match="there is no finding 99"):
        session.explain(path, 99)


def test_agent_lists_traces_by_content_and_writes_reports(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a trace")
    (tmp_path / "run.nsys-rep").write_bytes(b"\0")
    listed = _agent.list_traces(str(tmp_path))
    assert listed["traces"] == [
        {
            "path": str(tmp_path / "run.nsys-rep"),
            "format": "nsys-rep (export it to SQLite first: nsys export --type sqlite)",
            "bytes": 1,
        }
    ]
    assert listed["other_files"] == 1
    with pytest.raises(InputError, match="no such folder"):
        _agent.list_traces(str(tmp_path / "missing"))
    out = tmp_path / "report.html"
    written = _agent.Session().report(str(corpus(QWEN)), str(out))
    assert written == {"output": str(out), "bytes": out.stat().st_size}
    assert 'id="chart-modules"' in out.read_text()


def test_mcp_without_the_sdk_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from gpuscope.cli import main

    # As if the extra were not installed (an earlier test may have imported the SDK).
    for name in [n for n in sys.modules if n == "mcp" or n.startswith("mcp.")] or ["mcp"]:
        monkeypatch.setitem(sys.modules, name, None)
    result = CliRunner().invoke(main, ["mcp"])
    assert result.exit_code == 2
    root = Path(__file__).resolve().parents[1]  # installed from its checkout: the line names it
    assert result.output.strip().splitlines() == [
        "gpuscope: error: gpuscope mcp needs the MCP Python SDK (mcp):"
        f" pip install -e '{root}[mcp]'"
    ]
