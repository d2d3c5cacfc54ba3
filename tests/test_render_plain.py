"""The plain-text twin of rich (``gpuscope.render.plain``) prints what rich prints, byte for byte:
on the corpus's terminal reports at many widths, and on generated texts, tables and panels with
every option the renderers use. Where it cannot (a narrow terminal, a character rich measures
itself) it says so, and the report goes through rich."""

from __future__ import annotations

import io
import random
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from rich.console import Group as RichGroup
from rich.panel import Panel as RichPanel
from rich.table import Table as RichTable
from rich.text import Text as RichText

from corpus import corpus
from gpuscope.diagnosis import Diagnosis, Options, diagnose
from gpuscope.readers import load
from gpuscope.render import base, plain_width, terminal
from gpuscope.render.layout import Group, Panel, Table, Text
from gpuscope.render.plain import PlainConsole, UnsupportedError
from gpuscope.sanitise import sanitised

INPUTS = [
    "kineto/tracelens/h100_qwen1.5-0.5b_inference.json.gz",  # one device, views, steps
    "nsys/nsys-ai/h100_2gpu_1s.sqlite",  # two devices: the device table
    "metrics/superbench_nvml_8gpu.jsonl",  # sampled utilisation
    "ncu/b200_cublaslt_fp8_gemm.ncu.csv.log",  # hardware counters
]
WIDTHS = [57, 60, 66, 72, 79, 80, 81, 90, 100, 113, 120, 140, 160, 200]


def rich_text(renderables: list[object], width: int) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, emoji=False, markup=False, color_system=None)
    for renderable in renderables:
        console.print(renderable)
    return out.getvalue()


def plain_text(renderables: list[object], width: int) -> str:
    console = PlainConsole(width)
    for renderable in renderables:
        console.print(renderable)
    return console.text()


@pytest.fixture(scope="module", params=INPUTS)
def diagnosis(request: pytest.FixtureRequest) -> Diagnosis:
    return sanitised(diagnose(load(corpus(request.param)), Options()))


@pytest.mark.parametrize("all_devices", [False, True])
def test_the_report_is_rich_s_text_at_every_width(diagnosis: Diagnosis, all_devices: bool) -> None:
    for width in WIDTHS:
        out = io.StringIO()
        console = Console(file=out, width=width, emoji=False, markup=False, color_system=None)
        terminal.render(diagnosis, console, all_devices=all_devices)
        plain = PlainConsole(width)
        terminal.render(diagnosis, plain, all_devices=all_devices)
        assert plain.text() == out.getvalue(), width


def test_the_terminal_renderer_takes_the_plain_path_without_colours(
    diagnosis: Diagnosis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base, "_console", lambda options: pytest.fail("rich laid it out"))
    assert (
        base.Terminal()
        .render(diagnosis, base.RenderOptions(width=80))
        .startswith(diagnosis.verdict.summary[:20])
    )


def test_a_narrow_terminal_or_a_wide_character_goes_through_rich() -> None:
    table = Table(title="t", title_justify="left")
    for header in ("name", "figure", "more", "and more"):
        table.add_column(header)
    table.add_row("a" * 30, "1,234.56 ms", "x", "y")
    with pytest.raises(UnsupportedError):
        plain_text([table], 12)
    with pytest.raises(UnsupportedError):
        plain_text([Text("カーネル")], 80)
    with pytest.raises(UnsupportedError):
        plain_text([Text("a\tb")], 80)


_WORDS = ["a", "ab", "kernel", "aten::addmm", "ncclKernel_AllReduce_RING_LL_Sum_float", "·", "…"]


def _phrase(rng: random.Random, words: int) -> str:
    parts = [rng.choice(_WORDS) * rng.choice([1, 1, 1, 3]) for _ in range(words)]
    spaces = [rng.choice([" ", " ", "  ", "\n"]) for _ in parts]
    return "".join(p + s for p, s in zip(parts, spaces, strict=True)).rstrip(" ")


def _table(rng: random.Random) -> Table:
    table = Table(title=_phrase(rng, rng.randint(1, 6)), title_justify="left")
    for _ in range(rng.randint(1, 6)):
        table.add_column(
            _phrase(rng, rng.randint(1, 2)),
            justify=rng.choice(["left", "right"]),
            no_wrap=rng.random() < 0.3,
            overflow=rng.choice(["ellipsis", "fold", "crop"]),
            min_width=rng.choice([None, None, 4, 16]),
            max_width=rng.choice([None, None, 12, 60]),
        )
    for _ in range(rng.randint(0, 4)):
        cells: list[str | Text] = []
        for _column in table.columns:
            text = _phrase(rng, rng.randint(0, 5))
            choice = rng.random()
            if choice < 0.2:
                cells.append(Text(text, overflow="fold"))
            elif choice < 0.4:
                cells.append(Text(text, overflow="ellipsis", no_wrap=True))
            else:
                cells.append(text)
        table.add_row(*cells)
    return table


@pytest.mark.parametrize("seed", range(40))
def test_generated_texts_tables_and_panels_print_as_rich_prints_them(seed: int) -> None:
    rng = random.Random(seed)
    texts = [Text(_phrase(rng, rng.randint(0, 40))) for _ in range(3)]
    tables = [_table(rng) for _ in range(3)]
    panel = Panel(
        Group(texts[0], tables[0], Text("\n")), title=Text("rank 0 · device 1"), title_align="left"
    )
    renderables: list[object] = [*texts, *tables, panel]
    for width in range(30, 141, 11):
        try:
            plain = plain_text(renderables, width)
        except UnsupportedError:
            continue
        assert plain == rich_text(renderables, width), (seed, width)


def test_the_console_prints_the_report_s_text(tmp_path: Path) -> None:
    console = PlainConsole(40)
    console.print(Text("a long sentence that wraps at forty columns, as rich wraps it here"))
    assert console.text() == rich_text(
        [Text("a long sentence that wraps at forty columns, as rich wraps it here")], 40
    )


@pytest.mark.parametrize("columns", [None, "57", "0"])
@pytest.mark.parametrize("force_color", [None, "", "1"])
@pytest.mark.parametrize("tty_compatible", [None, "0", "1"])
def test_the_plain_width_is_rich_s_where_it_is_sure(
    monkeypatch: pytest.MonkeyPatch,
    columns: str | None,
    force_color: str | None,
    tty_compatible: str | None,
) -> None:
    """Without rich, :func:`plain_width` answers only when rich's console would print no
    colours, and then with its width."""
    for name, value in (
        ("COLUMNS", columns),
        ("FORCE_COLOR", force_color),
        ("TTY_COMPATIBLE", tty_compatible),
    ):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.setattr("sys.stdout", io.StringIO())  # a pipe
    width = plain_width()
    console = Console()
    if width is not None:
        assert (width, console.color_system, console.is_terminal) == (console.width, None, False)
    terminal = tty_compatible == "1" or (tty_compatible != "0" and bool(force_color))
    assert (width is None) == (terminal or columns == "0")


def test_a_report_to_a_pipe_imports_no_rich() -> None:
    code = (
        "import sys; from importlib import resources; from gpuscope.cli import main\n"
        "demo = resources.files('gpuscope.examples').joinpath('demo_train.json.gz')\n"
        "try:\n    main(['diagnose', str(demo)])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'rich'), file=sys.stderr)"
    )
    made = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Idle timeline" in made.stdout
    assert made.stderr.strip().splitlines()[-1] == "[]"


_STYLES = ["", "bold", "dim", "green", "bold red", "#2ca02c", "yellow"]


def _both_texts(rng: random.Random) -> tuple[Text, RichText]:
    """The same text built by the same calls on a layout Text and a rich one."""
    style = rng.choice(_STYLES)
    ours, theirs = Text(style=style), RichText(style=style)
    for _ in range(rng.randint(0, 6)):
        words, span = _phrase(rng, rng.randint(0, 4)), rng.choice(_STYLES)
        ours.append(words, span)
        theirs.append(words, span)
    return ours, theirs


@pytest.mark.parametrize("seed", range(20))
def test_layout_objects_print_in_colour_as_rich_s_own(seed: int) -> None:
    """A terminal with colours prints the layout objects through rich (``__rich__``): the same
    bytes as the rich objects built by the same calls."""
    rng = random.Random(seed)
    pairs = [_both_texts(rng) for _ in range(4)]
    ours: list[object] = [a for a, _ in pairs]
    theirs: list[object] = [b for _, b in pairs]
    ours.append(Text("\n").join([a for a, _ in pairs]))
    theirs.append(RichText("\n").join([b for _, b in pairs]))
    ours.append(Text.assemble("\n", pairs[0][0], "\n", pairs[1][0], "\n"))
    theirs.append(RichText.assemble("\n", pairs[0][1], "\n", pairs[1][1], "\n"))
    table, rich_table = (
        Table(title="t", title_justify="left"),
        RichTable(title="t", title_justify="left"),
    )
    for header in ("name", "figure"):
        table.add_column(header, justify="right", no_wrap=True)
        rich_table.add_column(header, justify="right", no_wrap=True)
    table.add_row(pairs[2][0], "1.0", style="bold")
    rich_table.add_row(pairs[2][1], "1.0", style="bold")
    ours += [table, Panel(Group(pairs[3][0], table), title=Text("p"), title_align="left")]
    theirs += [
        rich_table,
        RichPanel(RichGroup(pairs[3][1], rich_table), title=RichText("p"), title_align="left"),
    ]
    for system in ("standard", "256", "truecolor"):
        printed = []
        for renderables in (ours, theirs):
            out = io.StringIO()
            console = Console(
                file=out, width=70, color_system=system, force_terminal=True, markup=False
            )
            for renderable in renderables:
                console.print(renderable)
            printed.append(out.getvalue())
        assert printed[0] == printed[1], system
