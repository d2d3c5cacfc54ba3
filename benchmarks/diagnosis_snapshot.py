"""Dump `gpuscope diagnose FILE --json` for every corpus input into a folder, or compare two
such folders: the check that a refactor leaves every diagnosis unchanged.

    python benchmarks/diagnosis_snapshot.py dump OUT_DIR [CORPUS]
    python benchmarks/diagnosis_snapshot.py compare BEFORE_DIR AFTER_DIR

Runs the command in-process (click's runner). `compare` ignores timing fields (keys naming
seconds of gpuscope's own run) and prints each path whose value differs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import msgspec
from click.testing import CliRunner

from gpuscope.cli import main

ROOT = Path(__file__).resolve().parents[1]
IGNORED = {
    "idle_causes",
    "elapsed_s",
    "analysis_s",
    "read_s",
    "wall_s",
    "generated_at",
    "gpuscope_version",
}


def inputs(corpus: Path) -> list[Path]:
    files = [
        p
        for p in sorted(corpus.rglob("*"))
        if p.is_file() and "LICENSES" not in p.parts and p.suffix != ".md"
    ]
    folders = sorted({p.parent for p in files if "rank" in p.parent.name.lower()})
    return files + folders


def dump(out: Path, corpus: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    runner = CliRunner()
    for source in inputs(corpus):
        name = str(source.relative_to(corpus)).replace("/", "__")
        target = out / f"{name}.json"
        for args in (["diagnose", str(source), "--json", str(target)],):
            made = runner.invoke(main, args)
            if made.exit_code != 0:
                target.write_text(f'{{"exit_code": {made.exit_code}}}')
        whole = out / f"{name}.whole.json"
        made = runner.invoke(main, ["diagnose", str(source), "--whole", "--json", str(whole)])
        if made.exit_code != 0:
            whole.write_text(f'{{"exit_code": {made.exit_code}}}')
        print(name, flush=True)
    return 0


def differences(a: Any, b: Any, path: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        found: list[str] = []
        for key in sorted(set(a) | set(b)):
            if key in IGNORED:
                continue
            found += differences(a.get(key), b.get(key), f"{path}.{key}")
        return found
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        found = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found += differences(x, y, f"{path}[{i}]")
        return found
    return [] if a == b else [f"{path}: {str(a)[:160]!s} -> {str(b)[:160]!s}"]


def compare(before: Path, after: Path) -> int:
    changed = 0
    for old in sorted(before.glob("*.json")):
        new = after / old.name
        if not new.exists():
            print(f"{old.name}: missing after")
            changed += 1
            continue
        found = differences(
            msgspec.json.decode(old.read_bytes()), msgspec.json.decode(new.read_bytes()), ""
        )
        if found:
            changed += 1
            print(f"== {old.name}")
            for line in found:
                print("  ", line)
    print(f"{changed} of {len(list(before.glob('*.json')))} outputs differ")
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "dump":
        corpus = Path(sys.argv[3]) if len(sys.argv) > 3 else ROOT.parent / "shared" / "corpus"
        sys.exit(dump(Path(sys.argv[2]), corpus))
    sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))
