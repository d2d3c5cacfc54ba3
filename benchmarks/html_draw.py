"""Issue #32's figure: every corpus report in Chromium, at a desktop's size and a phone's.

For each corpus input (every file, and each multi-rank folder) the script writes the HTML report
once (``gpuscope.diagnose`` in process, ``html.render``), then opens it in Debian's headless
Chromium (the browser test's driver, :mod:`test_browser`) at 1400x900 and at 390x844 and reads
what the page says:

* ``screen``: milliseconds from navigation start until the first screen is complete: its text
  painted and every chart in the window drawn (``window.gpuscopeReport.screenMs``); bar: under
  3,000 ms. The charts are drawn one at a time after the text, those on or near the window first;
* ``all``: until every chart's ``Plotly.newPlot`` resolved (``drawnMs``), the rest drawn after the
  first screen while the reader reads it; bar: under 3,000 ms. Each the best of ``--tries`` cold
  loads (a new file each time);
* ``overflow``: how many CSS pixels the page is wider than the window at 390 px
  (``scrollWidth - clientWidth``); bar: 0;
* ``verdict``: whether the verdict box lies wholly in the first screen at both sizes;
* ``height``: the phone page's height in pixels (a table that wraps a few letters a line makes
  it very tall).

An input gpuscope refuses (exit 2: not a trace, or one without what a report needs) is listed as
refused. The Markdown table it prints is the one in ``benchmarks/README.md``; it prints the load
average before and after the run (draw times scale with it on a shared machine).

    python benchmarks/html_draw.py [CORPUS] [--tries 3] [--only SUBSTRING] [--keep DIR]

``--keep DIR`` writes the reports there and reuses those already there (rerunning only the
browser part).

``--against TEMPLATE --inputs LIST`` compares drawing scripts instead: for each input named in
LIST (one corpus path a line), the report as written and a copy whose script is TEMPLATE's (an
older ``report_template.html``, e.g. ``git show REV:src/gpuscope/render/report_template.html``)
load in turn, ``--tries`` times each, alternating which goes first; it prints each one's median
every-chart time, the new one's first screen, the load average, and each one's median CPU time on
the page's main thread until every chart is drawn (Chromium's ``ThreadTime`` metric of the
document: what the page costs, whatever else the machine runs meanwhile). ``--against-plotly
FILE.gz`` also gives the older copy that plotly.js (a vendored ``plotly-*.min.js.gz``).

    python benchmarks/html_draw.py --keep DIR --against OLD.html [--against-plotly OLD.js.gz] \
        --inputs LIST [--tries 3]
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from selenium.common.exceptions import WebDriverException  # noqa: E402

from gpuscope import diagnose, load  # noqa: E402
from gpuscope.errors import GpuscopeError  # noqa: E402
from gpuscope.render import html  # noqa: E402
from test_browser import (  # noqa: E402  (the test's helpers: one driver, one way to load)
    DESKTOP,
    FIT,
    PHONE,
    open_report,
    page_fit,
    start_browser,
)

DRAW_BAR_MS = 3000


def inputs(corpus: Path) -> list[Path]:
    """Every corpus file but the licences, the manifest and reference tables, and each folder of
    ranks (read as one job)."""
    files = [
        p
        for p in sorted(corpus.rglob("*"))
        if p.is_file()
        and "LICENSES" not in p.parts
        and "reference" not in p.parts
        and p.suffix != ".md"
    ]
    folders = sorted({p.parent for p in files if "rank" in p.parent.name.lower()})
    return files + folders


def report(source: Path, corpus: Path, keep: Path) -> Path | None:
    """The report of one input, written once; None when gpuscope refuses the input."""
    name = str(source.relative_to(corpus)).replace("/", "__") + ".html"
    path = keep / name
    if path.exists():
        return path
    try:
        page = html.render(diagnose(load(source)))
    except GpuscopeError:
        return None
    path.write_text(page, encoding="utf-8")
    return path


def measure(driver: Any, path: Path, tries: int) -> dict[str, Any]:
    """A report's draw time (None: not drawn within the driver's 20 s, or a chart failed) and
    how it fits both screens."""
    draws: list[float | None] = []
    screens: list[float | None] = []
    for attempt in range(tries):
        copy = path.with_name(f"{path.stem}.{attempt}{time.monotonic_ns()}.html")
        copy.write_bytes(path.read_bytes())
        try:
            drawn = open_report(driver, copy)
            draws.append(drawn["drawnMs"])
            screens.append(drawn["screenMs"])
        except (AssertionError, WebDriverException):  # not drawn in 20 s, or a page still busy
            draws.append(None)
            screens.append(None)
        finally:
            copy.unlink()
    fits = []
    for size in (DESKTOP, PHONE):
        try:
            fits.append(page_fit(driver, path, *size))
        except (AssertionError, WebDriverException):  # not drawn at this size: measured as is
            fits.append({**_fit_as_is(driver, *size), "failed": True})
    desktop, phone = fits
    drawn = [d for d in draws if d is not None]
    shown = [d for d in screens if d is not None]
    return {
        "draw_ms": min(drawn) if len(drawn) == len(draws) else None,
        "screen_ms": min(shown) if len(shown) == len(screens) else None,
        "draws_ms": draws,
        "overflow_px": phone["overflow_px"],
        "verdict": desktop["verdict_shown"] and phone["verdict_shown"],
        "failed": [
            f"{w}x{h}" for (w, h), f in zip((DESKTOP, PHONE), fits, strict=True) if "failed" in f
        ],
        "height_px": phone["height_px"],
        "wide": phone["wide"],
        "size_mb": path.stat().st_size / 1e6,
    }


def _fit_as_is(driver: Any, width: int, height: int) -> dict[str, Any]:
    metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
    try:
        fit: dict[str, Any] = driver.execute_script(FIT)
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
    return fit


def _ms(value: float | None) -> str:
    return "not drawn" if value is None else f"{value:,.0f}"


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def run(corpus: Path, tries: int, only: str | None, keep: Path) -> int:
    keep.mkdir(parents=True, exist_ok=True)
    print(f"load average at the start: {_load()} ({os.cpu_count()} cores)", flush=True)
    driver = start_browser(keep / "chromium-profile")
    rows = []
    try:
        for source in inputs(corpus):
            relative = str(source.relative_to(corpus))
            if only is not None and only not in relative:
                continue
            path = report(source, corpus, keep)
            if path is None:
                print(f"refused  {relative}", flush=True)
                continue
            m = measure(driver, path, tries)
            rows.append((relative, m))
            print(
                f"screen {_ms(m['screen_ms']):>9} ms  all {_ms(m['draw_ms']):>9} ms  "
                f"load {os.getloadavg()[0]:4.1f}  overflow {m['overflow_px']:4d} px  verdict "
                f"{'yes' if m['verdict'] else 'NO '}  phone {m['height_px']:7,d} px  "
                f"{m['size_mb']:.2f} MB  {relative}  {' '.join(m['wide'][:3])}"
                + (f"  charts failed at {', '.join(m['failed'])}" if m["failed"] else ""),
                flush=True,
            )
    finally:
        driver.quit()
    print(
        "\n| report | MB | first screen (ms) | all charts (ms) | overflow at 390 px"
        " | verdict in first screen | phone page (px) |"
    )
    print("|---|---|---|---|---|---|---|")
    for relative, m in rows:
        print(
            f"| `{relative}` | {m['size_mb']:.2f} | {_ms(m['screen_ms'])} | {_ms(m['draw_ms'])} "
            f"| {m['overflow_px']} | "
            f"{'yes' if m['verdict'] else 'no'} | {m['height_px']:,} |"
        )
    draws = [m["draw_ms"] for _, m in rows if m["draw_ms"] is not None]
    screens = [m["screen_ms"] for _, m in rows if m["screen_ms"] is not None]
    slow = [r for r, m in rows if m["draw_ms"] is None or m["draw_ms"] >= DRAW_BAR_MS]
    late = [r for r, m in rows if m["screen_ms"] is None or m["screen_ms"] >= DRAW_BAR_MS]
    wide = [r for r, m in rows if m["overflow_px"] > 0]
    hidden = [r for r, m in rows if not m["verdict"]]
    failed = [r for r, m in rows if m["failed"]]
    if draws and screens:
        print(
            f"\n{len(rows)} reports: first screen median {statistics.median(screens):,.0f} ms, "
            f"max {max(screens):,.0f} ms, at or over {DRAW_BAR_MS} ms: {len(late)}; "
            f"all charts median {statistics.median(draws):,.0f} ms, "
            f"max {max(draws):,.0f} ms, at or over {DRAW_BAR_MS} ms: {len(slow)}; "
            f"wider than 390 px: {len(wide)}; verdict not in the first screen: {len(hidden)};"
            f" charts failed: {len(failed)}"
        )
    print(f"load average at the end: {_load()}")
    return 1 if late or slow or wide or hidden or failed else 0


#: Where a report's drawing script starts (the text before it is the page and its data).
_SCRIPT = "<script>\n(function () {"


def against(
    corpus: Path, tries: int, keep: Path, template: Path, listed: Path, plotly: Path | None
) -> int:
    """Each listed report drawn by its own script and by ``template``'s (and ``plotly``'s
    plotly.js, when given), alternating."""
    keep.mkdir(parents=True, exist_ok=True)
    old_text = template.read_text(encoding="utf-8")
    old_script = old_text[old_text.index(_SCRIPT) :]
    old_plotly = None if plotly is None else base64.b64encode(plotly.read_bytes()).decode()
    driver = start_browser(keep / "chromium-profile")
    driver.execute_cdp_cmd("Performance.enable", {"timeDomain": "threadTicks"})
    rows = []
    print(f"load average at the start: {_load()} ({os.cpu_count()} cores)", flush=True)
    try:
        for relative in listed.read_text().split():
            new = report(corpus / relative, corpus, keep)
            if new is None:
                continue
            text = new.read_text(encoding="utf-8")
            old = new.with_name(f"{new.stem}.against.html")
            page = text[: text.index(_SCRIPT)] + old_script
            if old_plotly is not None:
                page = re.sub(
                    r'(<script [^>]*id="gpuscope-plotly">)[^<]*',
                    lambda m: m[1] + old_plotly,
                    page,
                    count=1,
                )
            old.write_text(page, encoding="utf-8")
            times: dict[str, list[float]] = {
                "old": [],
                "new": [],
                "screen": [],
                "old_cpu": [],
                "new_cpu": [],
            }
            for attempt in range(tries):
                pair = [("old", old), ("new", new)]
                for side, path in pair if attempt % 2 == 0 else pair[::-1]:
                    copy = path.with_name(f"{path.stem}.{attempt}{time.monotonic_ns()}.html")
                    copy.write_bytes(path.read_bytes())
                    try:
                        drawn = open_report(driver, copy)
                    finally:
                        copy.unlink()
                    times[side].append(drawn["drawnMs"])
                    metrics = driver.execute_cdp_cmd("Performance.getMetrics", {})["metrics"]
                    cpu = {m["name"]: m["value"] for m in metrics}["ThreadTime"]
                    times[f"{side}_cpu"].append(1000 * cpu)
                    if side == "new":
                        times["screen"].append(drawn["screenMs"])
            medians = {side: statistics.median(values) for side, values in times.items()}
            rows.append((relative, medians, os.getloadavg()[0]))
            print(
                f"{relative}: every chart {medians['old']:,.0f} -> {medians['new']:,.0f} ms "
                f"(CPU {medians['old_cpu']:,.0f} -> {medians['new_cpu']:,.0f} ms), "
                f"first screen {medians['screen']:,.0f} ms, load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    finally:
        driver.quit()
    print(
        "\n| report | every chart, old script (ms) | new script (ms) | main-thread CPU, old"
        " (ms) | new (ms) | new: first screen (ms) | load |\n|---|---|---|---|---|---|---|"
    )
    for relative, m, load_then in rows:
        print(
            f"| `{relative}` | {m['old']:,.0f} | {m['new']:,.0f} | {m['old_cpu']:,.0f} "
            f"| {m['new_cpu']:,.0f} | {m['screen']:,.0f} | {load_then:.1f} |"
        )
    if rows:
        old_ms = [m["old"] for _, m, _ in rows]
        new_ms = [m["new"] for _, m, _ in rows]
        ratios = [b / a for a, b in zip(old_ms, new_ms, strict=True)]
        cpu = [m["new_cpu"] / m["old_cpu"] for _, m, _ in rows]
        print(
            f"\nevery chart: median {statistics.median(old_ms):,.0f} -> "
            f"{statistics.median(new_ms):,.0f} ms, per report new/old median "
            f"{statistics.median(ratios):.2f}, slowest {max(old_ms):,.0f} -> {max(new_ms):,.0f} ms;"
            f" main-thread CPU per report new/old median {statistics.median(cpu):.2f}"
            f" (range {min(cpu):.2f}-{max(cpu):.2f})"
        )
    print(f"load average at the end: {_load()}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", nargs="?", type=Path, default=ROOT.parent / "shared" / "corpus")
    parser.add_argument("--tries", type=int, default=3)
    parser.add_argument("--only", default=None, help="only inputs whose path holds this")
    parser.add_argument("--keep", type=Path, default=None, help="write (and reuse) reports here")
    parser.add_argument("--against", type=Path, default=None, help="an older report template")
    parser.add_argument("--inputs", type=Path, default=None, help="corpus paths, one a line")
    parser.add_argument("--against-plotly", type=Path, default=None, help="an older plotly .gz")
    args = parser.parse_args()
    if args.against is not None:
        if args.keep is None or args.inputs is None:
            parser.error("--against needs --keep DIR and --inputs LIST")
        return against(
            args.corpus, args.tries, args.keep, args.against, args.inputs, args.against_plotly
        )
    if args.keep is not None:
        return run(args.corpus, args.tries, args.only, args.keep)
    with tempfile.TemporaryDirectory() as tmp:
        return run(args.corpus, args.tries, args.only, Path(tmp))


if __name__ == "__main__":
    sys.exit(main())
