"""The cause table (data/causes.csv): every cause described once, and validated when loaded."""

from __future__ import annotations

import pytest

from gpuscope import causes
from gpuscope.analyses.attribution import Cause


def test_every_idle_cause_is_described_with_its_colour_and_letter() -> None:
    table = causes.cause_table()
    for cause in Cause:
        info = table[cause.value]
        assert info.source == "idle"
        assert info.colour is not None and info.letter is not None
    letters = [c.letter for c in table.values() if c.letter]
    assert len(letters) == len(set(letters))


def test_the_renderers_and_rules_read_the_table() -> None:
    import importlib

    from gpuscope import fleet
    from gpuscope.render import html, terminal

    findings_module = importlib.import_module("gpuscope.diagnosis.findings")
    table = causes.cause_table()
    assert findings_module._TITLES["warmup"] == table["warmup"].title
    assert terminal._STATES["host_sync"] == ("S", table["host_sync"].colour)
    assert html.CAUSE_COLOURS["warmup"] == table["warmup"].colour
    assert fleet.category("warmup") == ("job", "start-up (one-time)")
    from gpuscope.diagnosis.fixes import advice

    assert advice("d2h_copy") == table["d2h_copy"].fix


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("host_sync,idle,t,ghost_gpu,model,x,#d62728,S,fix", "listed twice"),
        ("new_one,idle,t,ghost_gpu,model,x,#123456,S,fix", "letter 'S' is taken"),
        ("new_one,idle,t,ghost_gpu,model,x,,,fix", "needs a colour and a letter"),
        ("new_one,timeline,t,ghost_gpu,people,x,,,fix", "icse_category"),
        ("new_one,timeline,t,ghost_gpu,model,x,red,,fix", "colour must be"),
        ("new_one,elsewhere,t,ghost_gpu,model,x,,,fix", "source must be"),
    ],
)
def test_a_bad_row_is_refused_naming_it(
    row: str, message: str, tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pathlib import Path

    original = (causes.DATA / "causes.csv").read_text("utf-8")
    folder = Path(str(tmp_path))
    (folder / "causes.csv").write_text(original + row + "\n", "utf-8")
    monkeypatch.setattr(causes, "DATA", folder)
    causes.cause_table.cache_clear()
    try:
        with pytest.raises(ValueError, match=message):
            causes.cause_table()
    finally:
        causes.cause_table.cache_clear()
