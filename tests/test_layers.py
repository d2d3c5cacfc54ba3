"""The layer order, checked over every module of the package (not only the renderers, which
ruff's ``banned-api`` guards): readers and analyses build on the model; the diagnosis on the
analyses; comparisons of diagnoses (diff, scaling, the history, fleets) on the diagnosis;
renderers on all of those; the CLI on everything. A module imports only its own layer and those
below it, wherever the import is written (a function-level import too).
"""

from __future__ import annotations

import ast
from pathlib import Path

import gpuscope

ROOT = Path(gpuscope.__file__).parent

#: Layers, lowest first. A module belongs to the layer of the longest prefix naming it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "base",
        (
            "gpuscope._arrays",
            "gpuscope._files",
            "gpuscope._install",
            "gpuscope._native",
            "gpuscope._sniff",
            "gpuscope.causes",
            "gpuscope.engines",  # where pieces of work run (a process pool, Ray): no analysis
            "gpuscope.classify",
            "gpuscope.errors",
            "gpuscope.facts",
            "gpuscope.model",
            "gpuscope.names",
            "gpuscope.runtime_apis",
            "gpuscope.sanitise",
            "gpuscope.units",
            "gpuscope.readers._io",  # opening files within the memory budget: every reader of one
            "gpuscope.data",  # the tables, as package data
            "gpuscope.examples",
        ),
    ),
    ("readers", ("gpuscope.readers",)),
    ("analyses", ("gpuscope.analyses",)),
    ("diagnosis", ("gpuscope.diagnosis",)),
    (
        "comparisons",
        ("gpuscope.compare", "gpuscope.history", "gpuscope.fleet", "gpuscope.distributed"),
    ),
    ("renderers", ("gpuscope.render",)),
    (
        "cli",
        (
            "gpuscope.cli",
            "gpuscope.commands",
            "gpuscope.console",
            "gpuscope.__main__",
            "gpuscope.capture",
            "gpuscope.watch",
        ),
    ),
    ("testing", ("gpuscope.testing",)),
]
RANK = {name: rank for rank, (name, _) in enumerate(LAYERS)}
#: Layers that know no input format: they never import a reader (the model is their input).
FORMAT_FREE = {"analyses", "diagnosis", "comparisons"}
#: Layers of the library proper: what they use of another layer is its public interface (the
#: annotated trace streams a Kineto file through ``readers.kineto.EventStream``).
LIBRARY = {"readers", "analyses", "diagnosis", "comparisons", "renderers"}


def _private(module: str) -> bool:
    return any(p.startswith("_") and not p.startswith("__") for p in module.split(".")[1:])


def layer_of(module: str) -> str | None:
    best: tuple[int, str] | None = None
    for name, prefixes in LAYERS:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[0]
            ):
                best = (len(prefix), name)
    return best[1] if best else None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """Every gpuscope module ``path`` imports, anywhere in it, resolved to a module name."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            found.add(source)
            for alias in node.names:  # `from gpuscope import causes`: the module
                candidate = ROOT.parent / (source.replace(".", "/") + "/" + alias.name)
                if candidate.with_suffix(".py").exists() or candidate.is_dir():
                    found.add(f"{source}.{alias.name}")
    return {m for m in found if m.startswith("gpuscope.")}


def test_every_module_has_a_layer() -> None:
    missing = [
        module_name(p)
        for p in ROOT.rglob("*.py")
        if module_name(p) != "gpuscope" and layer_of(module_name(p)) is None
    ]
    assert not missing, f"modules of no layer (add them to LAYERS): {missing}"


def test_no_module_imports_a_layer_above_its_own() -> None:
    wrong: list[str] = []
    for path in sorted(ROOT.rglob("*.py")):
        module = module_name(path)
        if module == "gpuscope":  # the package's facade: lazy attributes over every layer
            continue
        mine = layer_of(module)
        assert mine is not None
        for imported in sorted(imports(path)):
            theirs = layer_of(imported)
            if theirs is None:
                continue
            if RANK[theirs] > RANK[mine]:
                wrong.append(f"{module} ({mine}) imports {imported} ({theirs})")
            elif mine in FORMAT_FREE and theirs == "readers":
                wrong.append(f"{module} ({mine}) imports the reader {imported}")
            elif mine in LIBRARY and theirs not in (mine, "base") and _private(imported):
                wrong.append(f"{module} ({mine}) imports {imported}, private to {theirs}")
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_a_violation() -> None:
    """The check itself: an analysis importing the diagnosis, through a function-level import."""
    assert layer_of("gpuscope.compare.diff.summary") == "comparisons"
    assert layer_of("gpuscope.readers._io") == "base"
    assert RANK["diagnosis"] > RANK["analyses"]
    source = ROOT / "analyses" / "timeline.py"
    assert "gpuscope.model" in imports(source)


def test_the_loader_does_not_import_the_read_ahead() -> None:
    """The read-ahead (``readers/_early``) runs the loader; the loader takes what it began through
    ``readers/_prefetch`` alone, so the two never import each other."""
    assert "gpuscope.readers._early" not in imports(ROOT / "readers" / "_load.py")
    assert "gpuscope.readers._prefetch" in imports(ROOT / "readers" / "_load.py")
