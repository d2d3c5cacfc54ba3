"""The compiled extensions are used only when built from the source the Python side follows: a
stale build is left unused, with one line saying so and how to rebuild."""

from __future__ import annotations

import logging
import types

import pytest

from gpuscope._native import current


def test_a_stale_extension_is_not_used_and_says_so_in_one_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stale = types.ModuleType("stale")
    stale.VERSION = 1  # type: ignore[attr-defined]
    with caplog.at_level(logging.WARNING, logger="gpuscope"):
        assert not current(stale, 2, "replay solver (analyses/_replay.c)")
    (record,) = caplog.records
    line = record.getMessage()
    assert "\n" not in line and "stale" in line and "pip install -e ." in line
    fresh = types.ModuleType("fresh")
    fresh.VERSION = 2  # type: ignore[attr-defined]
    assert current(fresh, 2, "x")


def test_the_built_extensions_follow_this_source() -> None:
    """In a checkout built with ``pip install -e .`` the extensions are current and in use (CI
    builds them; elsewhere a checkout without a compiler skips this)."""
    import os

    from gpuscope.analyses.whatif import schedule
    from gpuscope.readers import _scan

    if not _scan.scanner_built() and os.environ.get("CI", "").lower() != "true":
        pytest.skip("the C extensions are not built here")

    assert schedule._replay is not None and schedule._replay.VERSION == schedule.REPLAY_VERSION
    assert _scan._kscan is not None and _scan._kscan.VERSION == _scan.SCANNER_VERSION
    from gpuscope.readers.pftrace import _columns

    assert _columns._pfscan is not None and _columns._pfscan.VERSION == _columns.PFSCAN_VERSION
