"""No Python module in ``src/`` is over 800 lines (issue #17): a module that long has seams; split
it along them into a package (keeping its public import path) before it grows further."""

from __future__ import annotations

from pathlib import Path

MAX_LINES = 800
SRC = Path(__file__).resolve().parents[1] / "src"

#: Modules allowed over the limit for now, each with the issue that splits it. Empty: every split
#: of #17 has landed. A module listed here that has shrunk below the limit fails the test too.
KNOWN_EXCEPTIONS: dict[str, str] = {}


def test_no_module_is_over_800_lines() -> None:
    lengths = {
        str(path.relative_to(SRC)): len(path.read_text("utf-8").splitlines())
        for path in SRC.rglob("*.py")
    }
    assert len(lengths) > 50  # the tree was found
    over = {name: n for name, n in lengths.items() if n > MAX_LINES}
    assert set(over) - set(KNOWN_EXCEPTIONS) == set(), f"split these along their seams: {over}"
    assert set(KNOWN_EXCEPTIONS) <= set(over), "remove the exceptions that are now short enough"


def test_records_are_msgspec_structs() -> None:
    """One record style (issue #17): a record is a ``msgspec.Struct``, which encodes, decodes and
    compares the same way everywhere; a ``dataclasses`` import (even just ``field``, whose
    default a Struct would keep as a ``Field`` object) is the other style creeping back."""
    uses = sorted(
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if any(
            line.startswith(("from dataclasses import", "import dataclasses"))
            for line in path.read_text("utf-8").splitlines()
        )
    )
    assert uses == []


def test_a_struct_default_is_its_value() -> None:
    from gpuscope.render.views_html import ViewsPart

    assert ViewsPart("", None).links == {}


#: The most lines a function may take: it is read whole, on one screen.
MAX_FUNCTION_LINES = 80
#: Functions allowed over it for now, each with what splits it. Empty: the last two (the memory
#: report, the verdict) are split. A function listed here that has shrunk below the limit fails
#: the test too.
LONG_FUNCTIONS: dict[str, str] = {}


def test_no_function_is_over_80_lines() -> None:
    """Functions short enough to see whole (STYLE.md 13): a long one has seams too."""
    import ast

    lengths: dict[str, int] = {}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                where = f"{path.relative_to(SRC / 'gpuscope')}:{node.name}"
                lengths[where] = (node.end_lineno or node.lineno) - node.lineno + 1
    long = {name for name, n in lengths.items() if n > MAX_FUNCTION_LINES}
    assert long - set(LONG_FUNCTIONS) == set(), f"split these: {sorted(long - set(LONG_FUNCTIONS))}"
    assert set(LONG_FUNCTIONS) <= long, "remove the exceptions that are now short enough"
