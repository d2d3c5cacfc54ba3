"""The cause table (data/causes.csv): every cause described once, validated when loaded, and
complete: a cause added with a missing piece (no rule, no assumption for its edit, a refinement
or an edit under a name the table does not have) fails here."""

from __future__ import annotations

import pytest

from gpuscope import causes
from gpuscope.analyses import attribution
from gpuscope.analyses.attribution import CAUSES
from gpuscope.analyses.whatif.edits import EDITS
from gpuscope.diagnosis.fixes import REFINEMENTS


def test_every_idle_cause_is_described_with_its_colour_and_letter() -> None:
    table = causes.cause_table()
    for cause in CAUSES:
        info = table[cause]
        assert info.source == "idle"
        assert info.colour is not None and info.letter is not None
        assert info.waits_for in causes.WAITS_FOR
    letters = [c.letter for c in table.values() if c.letter]
    assert len(letters) == len(set(letters))
    # ... and every idle cause of the table is one the attribution can give.
    assert {c.cause for c in table.values() if c.source == "idle"} == set(CAUSES)


def unproduced(table: dict[str, causes.CauseInfo]) -> set[str]:
    """The idle causes of ``table`` that no claim, rule or other producer gives."""
    claimed = {c for _, c in attribution.CLAIMS}
    ruled = {c for c, _ in attribution.RULES}
    elsewhere = set(attribution.PRODUCED_ELSEWHERE)
    idle = {c.cause for c in table.values() if c.source == "idle"}
    return idle - (claimed | ruled | elsewhere)


def test_every_idle_cause_has_a_rule_or_says_where_it_comes_from() -> None:
    """Adding an idle cause is a row plus a rule: a row that nothing produces fails here."""
    assert unproduced(causes.cause_table()) == set()
    assert not set(attribution.PRODUCED_ELSEWHERE) & (
        {c for _, c in attribution.CLAIMS} | {c for c, _ in attribution.RULES} - {"unknown"}
    )
    for _, rule in attribution.RULES:
        assert rule.__doc__ and len(rule.__doc__.split()) >= 10, rule.__name__


def test_a_row_without_its_rule_is_caught(
    tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check above, on a table with one idle row more and no rule for it."""
    row = "vram_thrash,idle,t,ghost_gpu,host,model,x,#010203,Z,fix,,\n"
    table = _table_with(row, tmp_path, monkeypatch)
    assert unproduced(table) == {"vram_thrash"}


def test_registries_are_keyed_by_causes_of_the_table() -> None:
    """What code registers per cause (a rule, an edit, a fix refinement) names a row; an edit's
    assumption is its row's ``whatif``, and only causes with an edit have one."""
    table = causes.cause_table()
    assert {c for c, _ in attribution.RULES} <= set(table)
    assert set(EDITS) <= set(table) and set(REFINEMENTS) <= set(table)
    assert set(causes.assumptions()) == set(EDITS)
    for name in REFINEMENTS:
        assert REFINEMENTS[name].__doc__ or name in ("fp32_gemm", "memory_bound"), name


def test_the_table_says_what_an_idle_gpu_waits_for() -> None:
    assert causes.waiting_for("peer") == {"communication_wait"}
    assert causes.waiting_for("input") == {"data_loader"}
    assert causes.waiting_for("startup") == {"warmup"}
    assert not causes.is_waste("warmup") and causes.is_waste("host_sync")
    from gpuscope.diagnosis.findings import HOST_CAUSES

    assert "unknown" not in HOST_CAUSES and "page_migration" in HOST_CAUSES


def test_every_reported_cause_is_produced_by_the_code() -> None:
    """Timeline and measured causes come from the diagnosis, not from rules over gaps: each must
    be named in the code that makes findings (a row left behind by a removed rule fails)."""
    from pathlib import Path

    import gpuscope

    root = Path(gpuscope.__file__).parent
    code = "\n".join(
        f.read_text("utf-8")
        for f in root.rglob("*.py")
        if "testing" not in f.parts and f.name not in {"causes.py", "generator.py"}
    )
    for info in causes.cause_table().values():
        if info.source in ("timeline", "measured"):
            assert f'"{info.cause}"' in code, info.cause


def test_the_patterns_of_the_table_are_known_tags() -> None:
    from gpuscope.diagnosis.patterns import PATTERNS

    assert {c.pattern for c in causes.cause_table().values() if c.pattern} <= set(PATTERNS)


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
    from gpuscope.analyses.whatif import ASSUMPTIONS
    from gpuscope.diagnosis.fixes import advice

    assert advice("d2h_copy") == table["d2h_copy"].fix
    assert ASSUMPTIONS["host_sync"] == table["host_sync"].whatif


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("host_sync,idle,t,ghost_gpu,host,model,x,#d62728,S,fix,", "listed twice"),
        ("new_one,idle,t,ghost_gpu,host,model,x,#010203,S,fix,", "letter 'S' is taken"),
        ("new_one,idle,t,ghost_gpu,host,model,x,,,fix,", "needs a colour and a letter"),
        ("new_one,timeline,t,ghost_gpu,,people,x,,,fix,", "icse_category"),
        ("new_one,timeline,t,ghost_gpu,,model,x,red,,fix,", "colour must be"),
        ("new_one,elsewhere,t,ghost_gpu,,model,x,,,fix,", "source must be"),
        ("new_one,idle,t,ghost_gpu,host,model,x,#d62728,Z,fix,", "colour #d62728 is taken"),
        ("new_one,idle,t,ghost_gpu,host,model,x,#2ca02c,Z,fix,", "colour #2ca02c is taken"),
        ("new_one,idle,t,ghost_gpu,host,model,x,#010203,█,fix,", "letter '█' is taken"),
        ("new_one,idle,t,ghost_gpu,host,model,x,#010203,ZZ,fix,", "one printable character"),
        ("new_one,idle,t,ghost_gpu,host,model,x,#010203,Z,,", "needs a fix"),
        ("new_one,timeline,t,Ghost GPU,,model,x,,,fix,", "snake_case tag"),
        ("new_one,timeline,,ghost_gpu,,model,x,,,fix,", "needs a title"),
        ("new_one,timeline,t,ghost_gpu,,model,x,,,Use {n} workers,", "placeholders"),
        ("new_one,idle,t,ghost_gpu,,model,x,#010203,Z,fix,", "needs waits_for"),
        ("new_one,idle,t,ghost_gpu,host_side,model,x,#010203,Z,fix,", "needs waits_for"),
        ("new_one,timeline,t,ghost_gpu,host,model,x,,,fix,", "only an idle cause"),
        ("new_one,timeline,t,ghost_gpu,,model,x,,,fix,,Use {n} streams", "placeholders"),
    ],
)
def test_a_bad_row_is_refused_naming_it(
    row: str, message: str, tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match=message):
        # Rows without the last column (fix_runtime) leave it empty.
        _table_with(row + ("," if row.count(",") < 11 else "") + "\n", tmp_path, monkeypatch)


def _table_with(
    rows: str, tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> dict[str, causes.CauseInfo]:
    """The table with ``rows`` added (the cached table is left as it was)."""
    from pathlib import Path

    original = (causes.DATA / "causes.csv").read_text("utf-8")
    folder = Path(str(tmp_path))
    (folder / "causes.csv").write_text(original + rows, "utf-8")
    monkeypatch.setattr(causes, "DATA", folder)
    causes.cause_table.cache_clear()
    try:
        return causes.cause_table()
    finally:
        monkeypatch.undo()
        causes.cause_table.cache_clear()
