"""Words a new user reads: tags explained where first shown, counts in the right number,
percentage points said as such, relative changes of percentages named."""

from __future__ import annotations

import ast
from pathlib import Path

from rich.console import Console

from corpus import corpus
from gpuscope import diagnose, load
from gpuscope.causes import cause_table
from gpuscope.compare.diff import Comparison
from gpuscope.diagnosis.patterns import PATTERNS
from gpuscope.names import percentage_change, plural
from gpuscope.render import html, terminal
from gpuscope.render.diff import change_text

SRC = Path(__file__).parent.parent / "src" / "gpuscope"
DEMO = SRC / "examples" / "demo_train.json.gz"


def _text(path: Path, width: int = 200) -> str:
    console = Console(record=True, width=width)
    terminal.render(diagnose(load(path)), console)
    return " ".join(console.export_text().split())


def _results(node: ast.expr) -> set[str]:
    """The strings an expression can evaluate to: a constant, or either side of an if-else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _results(node.body) | _results(node.orelse)
    return set()


def test_every_pattern_a_finding_can_carry_is_explained() -> None:
    """Each finding has one tag, and each tag the code can set has a one-line meaning."""
    used = {"tensor_cores_unused", "fusion", "latency_mirage", "ghost_gpu"}  # set positionally
    for module in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.keyword) and node.arg == "pattern":
                used |= _results(node.value)
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pattern" for t in node.targets
            ):
                used |= _results(node.value)
    used |= {info.pattern for info in cause_table().values()}
    assert used <= set(PATTERNS), used - set(PATTERNS)


def test_the_demo_explains_its_tag_once_and_says_percentage_points() -> None:
    text = _text(DEMO)
    assert text.count("tags: [ghost_gpu] the GPU is held but idle") == 1
    # Points of a percentage are always "percentage points" (the demo is compute-bound now, so
    # its headline names no points; the rest of the report still must not say bare "points").
    assert " points of" not in text.replace("percentage points of", "")
    page = html.render(diagnose(load(DEMO)))
    assert "tags: [ghost_gpu] the GPU is held but idle" in page


def test_counts_take_their_number() -> None:
    assert [plural(n, "GPU") for n in (0, 1, 2, 1024)] == [
        "0 GPUs",
        "1 GPU",
        "2 GPUs",
        "1,024 GPUs",
    ]


def test_two_ranks_of_eight_read_without_1_gpus_or_waiting_aside(tmp_path: Path) -> None:
    for rank in sorted(corpus("kineto/param-dlrm-8rank").glob("worker[01]_*")):
        (tmp_path / rank.name).symlink_to(rank)
    text = _text(tmp_path)
    assert "waiting aside" not in text and " 1 GPUs" not in text
    assert "not counting waits for a late peer" in text


def test_a_change_of_a_percentage_says_points_and_relative() -> None:
    busy = Comparison(40.0, 50.0, 10.0, 25.0, None, None, None, None)
    assert change_text(busy, "pct") == "+10.0 percentage points (+25.0% relative)"
    assert percentage_change(-2.5, None) == "-2.5 percentage points"
    step = Comparison(10e6, 12e6, 2e6, 20.0, None, None, None, None)
    assert change_text(step, "ns") == "+20.0%"  # a time's relative change is plain
