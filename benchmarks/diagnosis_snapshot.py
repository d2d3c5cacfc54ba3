"""Dump `gpuscope diagnose FILE --json` for every corpus input into a folder, or compare two
such folders: the check that a refactor leaves every diagnosis unchanged.

    python benchmarks/diagnosis_snapshot.py dump OUT_DIR [CORPUS]
    python benchmarks/diagnosis_snapshot.py compare BEFORE_DIR AFTER_DIR

Runs the command in-process (click's runner). `compare` ignores timing fields (keys naming
seconds of gpuscope's own run), prints each path whose value differs, and exits 1 when any does.
"""

from __future__ import annotations

import argparse
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
    return 1 if changed else 0


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    to_dump = commands.add_parser("dump", help="diagnose every corpus input into OUT_DIR")
    to_dump.add_argument("out_dir", type=Path)
    to_dump.add_argument("corpus", type=Path, nargs="?", default=ROOT.parent / "shared" / "corpus")
    to_compare = commands.add_parser("compare", help="print what differs between two dumps")
    to_compare.add_argument("before_dir", type=Path)
    to_compare.add_argument("after_dir", type=Path)
    return parser.parse_args()


if __name__ == "__main__":
    args = arguments()
    if args.command == "dump":
        sys.exit(dump(args.out_dir, args.corpus))
    sys.exit(compare(args.before_dir, args.after_dir))
