"""Every renderer behind the one interface (``render(subject, options)``), over the same
diagnoses; and the layering rule that makes them renderers: they import types and constants from
the analyses, never a function or a module that computes."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
from functools import cache
from pathlib import Path

import msgspec

from gpuscope import Diagnosis, diagnose, load
from gpuscope.compare import diff
from gpuscope.fleet import FleetTable, diagnose_input, summarize
from gpuscope.render.base import (
    COMPARISON_RENDERERS,
    DIAGNOSIS_RENDERERS,
    FLEET_RENDERERS,
    AnnotatedTrace,
    Comparison,
    RenderOptions,
)
from gpuscope.testing.generator import (
    GeneratorConfig,
    HostSync,
    SlowDataLoader,
    TinyKernels,
    generate,
)

RENDER = Path(__file__).resolve().parents[1] / "src" / "gpuscope" / "render"


@cache
def _traces(folder: Path) -> list[tuple[Path, Diagnosis]]:
    """Two runs of a loop: one waiting on its data loader, one syncing and launching tiny ops."""
    runs = []
    for name, inject in (
        ("slow_loader", (SlowDataLoader(), HostSync())),
        ("tiny_kernels", (HostSync(), TinyKernels())),
    ):
        path = folder / f"{name}.json"
        generate(GeneratorConfig(steps=4, inject=inject)).write(path)
        runs.append((path, diagnose(load(path))))
    return runs


def test_every_renderer_presents_the_same_diagnoses(tmp_path: Path) -> None:
    options = RenderOptions(width=100)
    runs = _traces(tmp_path)
    for path, d in runs:
        top = d.findings[0]
        outputs = {name: r().render(d, options) for name, r in DIAGNOSIS_RENDERERS.items()}
        assert top.cause in str(outputs["terminal"])
        document = json.loads(outputs["json"])
        assert document["verdict"]["bound"] == d.verdict.bound
        assert document["findings"][0]["cause"] == top.cause
        assert f"data-cause='{top.cause}'" in str(outputs["html"])
        assert f"`{top.cause}`" in str(outputs["markdown"])
        assert json.loads(outputs["agent"])["findings"][0]["cause"] == top.cause
        annotated = AnnotatedTrace(path.read_bytes(), str(path)).render(d, options)
        events = json.loads(annotated)["traceEvents"]
        assert any(e.get("cat") == "gpuscope" and top.cause in e.get("name", "") for e in events)
        (tmp_path / f"{path.stem}.saved.json").write_bytes(outputs["json"])
    (before_path, before), (after_path, after) = runs
    change = diff.diff(diff.summarize(before), diff.summarize(after))
    pair = Comparison(before, after, change, before_path.name, after_path.name)
    shown = {name: r().render(pair, options) for name, r in COMPARISON_RENDERERS.items()}
    assert before_path.name in str(shown["terminal"])
    assert json.loads(shown["json"])["before"]["name"] == before_path.name
    assert "gpuscope: before and after" in str(shown["html"])
    # The fleet reads the JSON the JSON renderer wrote: one job per saved diagnosis.
    table = FleetTable([], [])
    for path, _ in runs:
        table.extend(diagnose_input(str(tmp_path / f"{path.stem}.saved.json")))
    fleet = summarize(table)
    assert fleet.jobs == 2 and fleet.failed == 0
    for name, r in FLEET_RENDERERS.items():
        assert "2 jobs" in str(r().render(fleet, options)), name


def _analyses_imports(path: Path) -> list[tuple[str, str | None]]:
    """(module, name) of every ``from gpuscope.analyses... import name`` in a module (name None
    for ``import gpuscope.analyses...``)."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpuscope.analyses"):
            found += [(node.module or "", alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names if a.name.startswith("gpuscope.analyses")]
    return found


def test_renderers_import_no_computation_from_the_analyses() -> None:
    """A renderer may name the analyses' result types and constants; a function (or a module,
    which would reach every function) would let it compute what the diagnosis should hold."""
    offences = []
    for path in sorted(RENDER.rglob("*.py")):
        for module, name in _analyses_imports(path):
            where = f"{path.relative_to(RENDER)}: {module}.{name}"
            if name is None:
                offences.append(where)
                continue
            value = getattr(importlib.import_module(module), name, None)
            if value is None and importlib.util.find_spec(f"{module}.{name}") is not None:
                offences.append(where + " (a module)")
            elif inspect.ismodule(value) or (callable(value) and not isinstance(value, type)):
                offences.append(where)
    assert offences == []


def test_a_comparison_is_plain_data() -> None:
    # The subjects are values: a comparison is a msgspec struct like the diagnosis it holds.
    assert issubclass(Comparison, msgspec.Struct) and issubclass(RenderOptions, msgspec.Struct)


def test_the_commands_print_what_the_renderers_make(tmp_path: Path) -> None:
    """The CLI picks and runs renderers through the one interface: what ``diagnose`` and ``diff``
    print is the renderer's text at the terminal's width (COLUMNS here), and a JSON output is
    the JSON renderer's bytes."""
    from click.testing import CliRunner

    from gpuscope.cli import main
    from gpuscope.render.base import DiffHtml, DiffTerminal, Json, Terminal

    (before_path, before), (after_path, after) = _traces(tmp_path)
    runner = CliRunner(env={"COLUMNS": "97"})
    options = RenderOptions(width=97)
    shown = runner.invoke(main, ["diagnose", str(before_path)])
    assert shown.exit_code == 0, shown.output
    assert shown.stdout == Terminal().render(before, options)
    saved = runner.invoke(main, ["diagnose", str(before_path), "--json", "-"])
    assert saved.stdout.encode() == Json().render(before, options) + b"\n"
    compared = runner.invoke(main, ["diff", str(before_path), str(after_path)])
    assert compared.exit_code == 0, compared.output
    change = diff.diff(diff.summarize(before), diff.summarize(after))
    pair = Comparison(None, None, change, str(before_path), str(after_path))
    assert compared.stdout == DiffTerminal().render(pair, options)
    assert "step time" in compared.stdout
    try:  # the HTML comparison draws both diagnoses: a pair of saved summaries cannot make one
        DiffHtml().render(pair, options)
        raise AssertionError("DiffHtml rendered a comparison without diagnoses")
    except ValueError as error:
        assert "both diagnoses" in str(error)


def test_colour_options_reach_the_text() -> None:
    """A command passes its terminal's colours: the same text, styled, on a colour terminal."""
    from gpuscope.render.base import Terminal

    d = _demo()
    plain = Terminal().render(d, RenderOptions(width=100))
    styled = Terminal().render(d, RenderOptions(width=100, color_system="standard", terminal=True))
    assert "\x1b[" not in plain and "\x1b[" in styled
    assert _strip_ansi(styled) == plain


@cache
def _demo() -> Diagnosis:
    from importlib import resources

    example = resources.files("gpuscope.examples").joinpath("demo_train.json.gz")
    with resources.as_file(example) as path:
        return diagnose(load(path))


def _strip_ansi(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def test_the_output_suffix_or_format_picks_the_renderer(tmp_path: Path) -> None:
    """As pyinstrument does: ``-o x.html | x.json | x.md | x.txt`` writes that format, through
    the one registry; ``--format`` names one for stdout; a suffix that names none is exit 2."""
    from click.testing import CliRunner

    from gpuscope.cli import main

    path, d = _traces(tmp_path)[0]
    runner = CliRunner()
    for suffix, check in (
        (".json", lambda b: json.loads(b)["findings"][0]["cause"] == d.findings[0].cause),
        (".html", lambda b: b.lstrip().lower().startswith(b"<!doctype html")),
        (".md", lambda b: b.startswith(b"# gpuscope: ") and b"**Fix:**" in b),
        (".txt", lambda b: d.findings[0].cause.encode() in b and b"\x1b[" not in b),
    ):
        out = tmp_path / f"out{suffix}"
        result = runner.invoke(main, ["diagnose", str(path), "-o", str(out)])
        assert result.exit_code == 0, result.output
        assert check(out.read_bytes()), suffix
    same = runner.invoke(main, ["diagnose", str(path), "--json", "-"])
    assert (tmp_path / "out.json").read_bytes() == same.stdout_bytes
    shown = runner.invoke(main, ["diagnose", str(path), "--format", "markdown"])
    assert shown.exit_code == 0 and shown.stdout.startswith("# gpuscope: ")
    bad = runner.invoke(main, ["diagnose", str(path), "-o", str(tmp_path / "out.xyz")])
    assert bad.exit_code == 2 and "--format" in bad.output and "Traceback" not in bad.output
    assert not (tmp_path / "out.xyz").exists()


def test_markdown_keeps_trace_text_literal() -> None:
    from gpuscope.render.markdown import text

    assert text("a|b <script>x</script> *bold* `code`") == (
        "a\\|b &lt;script&gt;x&lt;/script&gt; \\*bold\\* \\`code\\`"
    )
