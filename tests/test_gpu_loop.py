"""The GPU loop script (benchmarks/gpu_loop.py) in its dry mode: the plumbing CI can check.

On a machine with a CUDA GPU the same script profiles a real training loop; here it must say that
the GPU checks did not run, and still pass every plumbing check: the training script runs with
each switch, ``gpuscope profile`` records its steps and refuses a CPU-only trace, and the diagnose
-> diff -> check -> table path finds each injected pathology at its line and measures each fix's
saving on generated runs with known answers.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_dry_mode_checks_the_plumbing_and_says_the_gpu_checks_did_not_run(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_loop.py"), "--dry", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "the GPU checks did NOT run" in result.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["mode"].startswith("dry")
    assert summary["failed"] == 0
    rows = {r["fix"]: r for r in summary["rows"]}
    assert set(rows) == {"data_loader", "host_sync", "h2d_copy", "fp32_gemm", "all"}
    for fix in ("data_loader", "host_sync", "h2d_copy"):
        assert "planted line" in rows[fix]["found"], rows[fix]
    for row in rows.values():
        assert row["measured_ms"] > 0 and row["significant"] is True, row
    # All fixes together save more than any one of them.
    assert rows["all"]["measured_ms"] > max(r["measured_ms"] for f, r in rows.items() if f != "all")
    assert (tmp_path / "table.md").read_text().startswith("| fix |")
    assert (tmp_path / "base.html").stat().st_size > 0
