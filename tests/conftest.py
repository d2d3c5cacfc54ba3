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
    """Each test starts with no file recorded as an input (``gpuscope._files``): the record is
    per process and keyed by inode, and a temporary file of an earlier test, deleted, leaves its
    inode to a later test's output, which would then be refused as an input."""
    from gpuscope import _files

    yield
    _files._inputs.clear()
