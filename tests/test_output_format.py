"""``diff``, ``history`` and ``scale`` pick their renderer from the one registry, as ``diagnose``
does (issue #27 item 4): ``-o``'s suffix (``.json``, ``.html``, ``.txt``) or ``--format`` names
it; a format the command has not is a usage error naming the ones it has."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuscope.render.base import COMPARISON_RENDERERS, HISTORY_RENDERERS, SCALING_RENDERERS
from gpuscope.testing.generator import GeneratorConfig, generate, generate_scaling_series
from test_hostile import cli, one_error_line


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("pair")
    before, after = folder / "before.json", folder / "after.json"
    before.write_bytes(generate(GeneratorConfig(seed=1, steps=4)).to_bytes())
    after.write_bytes(generate(GeneratorConfig(seed=2, steps=4)).to_bytes())
    return before, after


def usage(result: object, *names: str) -> str:
    stderr: str = result.stderr  # type: ignore[attr-defined]
    assert result.exit_code == 2 and "Invalid value for '-o' / '--output'" in stderr, stderr  # type: ignore[attr-defined]
    for name in names:
        assert name in stderr, stderr
    return stderr


def test_diff_writes_the_format_its_output_names(tmp_path: Path, pair: tuple[Path, Path]) -> None:
    before, after = (str(p) for p in pair)
    reference = json.loads(cli("diff", before, after, "--json", "-").stdout)
    assert reference["schema"] == "gpuscope/diff-1"

    as_json = tmp_path / "d.json"
    assert cli("diff", before, after, "-o", str(as_json)).exit_code == 0
    assert json.loads(as_json.read_bytes()) == reference
    assert json.loads(cli("diff", before, after, "--format", "json").stdout) == reference

    as_text = tmp_path / "d.txt"  # the terminal's text, no colours, no escape sequences
    assert cli("diff", before, after, "-o", str(as_text)).exit_code == 0
    text = as_text.read_text()
    assert text.startswith(f"{before} → {after}") and "\x1b" not in text

    as_html = tmp_path / "d.html"  # draws both diagnoses, so the traces' names are in it
    assert cli("diff", before, after, "-o", str(as_html)).exit_code == 0
    page = as_html.read_text()
    assert page.startswith("<!doctype html>") and "before.json" in page and "after.json" in page

    usage(cli("diff", before, after, "-o", str(tmp_path / "d.md")), *COMPARISON_RENDERERS)
    assert not (tmp_path / "d.md").exists()


def test_diff_html_of_a_saved_run_is_one_line(
    tmp_path: Path, pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSCOPE_HISTORY", str(tmp_path / "h.sqlite"))
    assert cli("diagnose", str(pair[0]), "--save").exit_code == 0
    out = tmp_path / "d.html"
    line = one_error_line(cli("diff", "1", str(pair[1]), "-o", str(out)))
    assert "run 1 is saved as a summary" in line, line
    assert not out.exists()
    as_json = tmp_path / "d.json"  # text and JSON need only the summary
    assert cli("diff", "1", str(pair[1]), "-o", str(as_json)).exit_code == 0
    assert json.loads(as_json.read_bytes())["before"]["name"] == "run 1"


def test_history_writes_the_format_its_output_names(
    tmp_path: Path, pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUSCOPE_HISTORY", str(tmp_path / "h.sqlite"))
    for trace in pair:
        assert cli("diagnose", str(trace), "--save", "--label", "nightly").exit_code == 0
    reference = json.loads(cli("history", "--json", "-").stdout)
    assert [run["id"] for run in reference["runs"]] == [2, 1]

    out = tmp_path / "runs.json"
    assert cli("history", "-o", str(out)).exit_code == 0
    assert json.loads(out.read_bytes()) == reference
    assert json.loads(cli("history", "--format", "json").stdout) == reference
    text = tmp_path / "runs.txt"
    assert cli("history", "-o", str(text)).exit_code == 0
    assert "Saved runs, newest first" in text.read_text() and "nightly" in text.read_text()
    usage(cli("history", "-o", str(tmp_path / "runs.html")), *HISTORY_RENDERERS)


def test_scale_writes_the_format_its_output_names(tmp_path: Path) -> None:
    runs = generate_scaling_series(comm_ms_per_peer=1.5).write(tmp_path, compress=False)
    args = ["scale", str(runs[1]), str(runs[8])]
    reference = json.loads(cli(*args, "--json", "-").stdout)
    assert reference["schema"] == "gpuscope/scale-1"
    assert [run["gpus"] for run in reference["runs"]] == [1, 8]

    out = tmp_path / "scale.json"
    assert cli(*args, "-o", str(out)).exit_code == 0
    assert json.loads(out.read_bytes()) == reference
    assert json.loads(cli(*args, "--format", "json").stdout) == reference
    text = tmp_path / "scale.txt"
    assert cli(*args, "-o", str(text)).exit_code == 0
    shown = cli(*args, "--format", "terminal").stdout  # laid out for the terminal's width
    assert text.read_text().split()[:4] == shown.split()[:4] == ["Scaling:", *shown.split()[1:4]]
    assert "8 GPUs" in text.read_text() and "\x1b" not in text.read_text()
    usage(cli(*args, "-o", str(tmp_path / "scale.html")), *SCALING_RENDERERS)
