"""Write the example traces shipped in ``src/gpuscope/examples/`` (deterministic: same bytes).

Run from the repository root: ``python scripts/make_examples.py``.
"""

from __future__ import annotations

from pathlib import Path

from gpuscope.testing.generator import GeneratorConfig, HostSync, SlowDataLoader, generate

EXAMPLES = Path(__file__).resolve().parent.parent / "src" / "gpuscope" / "examples"
DEMO_NAME = "demo_train.json.gz"
MAX_DEMO_BYTES = 300 * 1024


def demo_config() -> GeneratorConfig:
    """One rank, six training steps, a slow DataLoader and a ``loss.item()`` sync every step."""
    return GeneratorConfig(
        seed=2025,
        steps=6,
        mode="train",
        layers=4,
        record_shapes=True,
        with_stack=True,
        inject=(SlowDataLoader(ms=15.0), HostSync(line=57, every_n_steps=1, host_work_us=1500.0)),
    )


def main() -> None:
    EXAMPLES.mkdir(parents=True, exist_ok=True)
    trace = generate(demo_config())
    path = trace.write(EXAMPLES / DEMO_NAME)
    size = path.stat().st_size
    if size > MAX_DEMO_BYTES:
        raise SystemExit(f"{path.name} is {size} bytes, over the {MAX_DEMO_BYTES} byte budget")
    truth = trace.truth
    lost = ", ".join(f"{cause} {ns / 1e6:.1f} ms" for cause, ns in truth.lost_ns_by_cause.items())
    print(f"wrote {path} ({size / 1024:.0f} KiB)")
    print(
        f"span {truth.span_ns / 1e6:.1f} ms, busy {truth.busy_ns / 1e6:.1f} ms; idle lost to {lost}"
    )


if __name__ == "__main__":
    main()
