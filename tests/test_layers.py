"""The layer order, checked over every module of the package (not only the renderers, which
ruff's ``banned-api`` guards): readers and analyses build on the model; the diagnosis on the
analyses; comparisons of diagnoses (diff, scaling, the history, fleets) on the diagnosis;
renderers on all of those; the CLI on everything. A module imports only its own layer and those
below it, wherever the import is written (a function-level import too). And underscore means
private: no module takes an underscore name from another, nor a private module from outside its
package (one listed exception).
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
            "gpuscope._aside",  # a helper thread for pieces of one computation
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
            "gpuscope._recache",  # the console script's kept regexes: process state
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


def imported_from(node: ast.ImportFrom, package: str) -> str:
    """The module a ``from ... import`` names, a relative one resolved within ``package``."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imports(path: Path) -> set[str]:
    """Every gpuscope module ``path`` imports, anywhere in it, resolved to a module name."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            source = imported_from(node, package)
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


#: Private modules imported from outside their own package, each with why. A module whose name
#: starts with ``_`` is its package's own; everything else in it is reached through a public name.
PRIVATE_MODULES_SHARED: dict[str, str] = {
    # The console script's read-ahead: it must be imported before the command line library, so
    # the entry point and the commands that take its read reach it directly (see its docstring).
    "gpuscope.readers._early": "the entry point's read-ahead, imported before everything else",
}


def _is_module(dotted: str) -> bool:
    """A package, a Python module, or a C extension (known by its stub: built or not)."""
    path = ROOT.parent / dotted.replace(".", "/")
    return path.is_dir() or path.with_suffix(".py").exists() or path.with_suffix(".pyi").exists()


def private_uses(path: Path) -> list[str]:
    """Underscore names ``path`` takes from another gpuscope module: ``from m import _x``, or
    ``m._x`` where ``m`` is a gpuscope module it imported; and private modules it imports from
    outside their package."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    return private_uses_in(path.read_text("utf-8"), module, package)


def private_uses_in(text: str, module: str, package: str) -> list[str]:
    tree = ast.parse(text)
    found: list[str] = []
    modules: dict[str, str] = {}  # local name -> the gpuscope module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("gpuscope.") and a.asname:
                    modules[a.asname] = a.name
        elif isinstance(node, ast.ImportFrom):
            source = imported_from(node, package)
            if not (source == "gpuscope" or source.startswith("gpuscope.")):
                continue
            for a in node.names:
                dotted = f"{source}.{a.name}"
                if _is_module(dotted):
                    modules[a.asname or a.name] = dotted
                    outside = not (module + ".").startswith(source + ".")
                    if _private(dotted) and outside and dotted not in PRIVATE_MODULES_SHARED:
                        found.append(f"{module}:{node.lineno} imports the private module {dotted}")
                elif a.name.startswith("_") and not a.name.startswith("__"):
                    found.append(f"{module}:{node.lineno} imports {a.name} from {source}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not _is_module(f"{modules[node.value.id]}.{node.attr}")
        ):
            found.append(f"{module}:{node.lineno} uses {node.value.id}.{node.attr}")
    return found


def test_names_used_across_modules_are_public() -> None:
    """Underscore means private to its module (STYLE.md 20): a name another module uses is public,
    so a reader can tell a module's interface from its insides, and a split module gets public
    names instead of reaching into its siblings."""
    found = [use for path in sorted(ROOT.rglob("*.py")) for use in private_uses(path)]
    assert not found, "\n".join(found)
    assert set(PRIVATE_MODULES_SHARED) <= {
        imported for path in ROOT.rglob("*.py") for imported in imports(path)
    }, "remove the shared private modules nobody imports any more"


def test_the_privacy_check_sees_a_violation() -> None:
    """The check itself, on the text of a module of the analyses (and one of the readers, which
    may use its own package's private modules)."""
    text = (
        "from gpuscope.analyses.timeline import _hidden, steady\n"
        "from gpuscope.readers import _scan, _io\n"
        "from . import _replay\n"
        "from gpuscope import units\n"
        "units._secret, units.duration, _replay._private\n"
    )
    assert private_uses_in(text, "gpuscope.analyses.probe", "gpuscope.analyses") == [
        "gpuscope.analyses.probe:1 imports _hidden from gpuscope.analyses.timeline",
        "gpuscope.analyses.probe:2 imports the private module gpuscope.readers._scan",
        "gpuscope.analyses.probe:2 imports the private module gpuscope.readers._io",
        "gpuscope.analyses.probe:5 uses units._secret",
        "gpuscope.analyses.probe:5 uses _replay._private",
    ]
    inside = "from gpuscope.readers import _scan\n_scan.scan_limit()\n"
    assert private_uses_in(inside, "gpuscope.readers.kineto", "gpuscope.readers.kineto") == []
