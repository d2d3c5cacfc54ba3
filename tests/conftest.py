from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say loudly, last, when the browser tests of the HTML report did not run: a skip among
    hundreds of passes is easy to miss, and without them nothing checks that the report draws."""
    skipped = terminalreporter.stats.get("skipped", [])
    reasons = {
        str(report.longrepr[2]).removeprefix("Skipped: ")
        for report in skipped
        if report.nodeid.startswith("tests/test_browser.py") or "test_browser.py" in report.nodeid
    }
    if reasons:
        terminalreporter.write_sep("!", "THE BROWSER TESTS DID NOT RUN", red=True, bold=True)
        for reason in sorted(reasons):
            terminalreporter.write_line(f"the HTML report was not drawn in a browser: {reason}")


@pytest.fixture(autouse=True)
def _fresh_inputs() -> Iterator[None]:
    """Each test starts with no file noted as an input: the CLI runs in-process under
    ``CliRunner``, and a path read by one test (``/dev/null``) must not refuse another's output."""
    from gpuscope import _files

    _files._inputs.clear()
    yield
    _files._inputs.clear()
