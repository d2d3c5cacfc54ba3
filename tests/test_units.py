"""How quantities are written (``gpuscope.units``), and that they are written there only: a second
copy of a format drifts (``12.3 ms`` here, ``12.35 ms`` there)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import gpuscope
from gpuscope import units

ROOT = Path(gpuscope.__file__).parent


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        (units.ms(12_345_678), "12.35 ms"),
        (units.ms(12_345_678, 1), "12.3 ms"),
        (units.ms(1_234_567_890), "1,234.57 ms"),
        (units.signed_ms(-1_250_000), "-1.25 ms"),
        (units.ms_or_na(None), "n/a"),
        (units.seconds_or_ms(12_345_678), "12.3 ms"),
        (units.seconds_or_ms(1_234_567_890), "1.23 s"),
        (units.long_duration(45e9), "45 s"),
        (units.long_duration(720e9), "12 min"),
        (units.long_duration(3 * 3600e9, "GPU-"), "3.0 GPU-h"),
        (units.gib(13_260_000_000), "12.35 GiB"),
        (units.gib(None), "n/a"),
        (units.gib(None, "none"), "none"),
        (units.gib(13_260_000_000, digits=1), "12.3 GiB"),
        (units.seconds(45_400_000_000), "45 s"),
        (units.seconds(1_250_000_000, 1), "1.2 s"),
        (units.us(3_240), "3.2 µs"),
        (units.signed_gib(-(2**29)), "-0.50 GiB"),
        (units.gib_or_mib(1.5 * 2**30), "1.5 GiB"),
        (units.gib_or_mib(512 * 2**20), "512 MiB"),
        (units.pct(12.34), "12.3%"),
        (units.pct(float("nan")), "n/a"),
        (units.usd(0.0031), "$0.0031"),
        (units.usd_cents(1234.567), "$1,234.57"),
    ],
)
def test_a_quantity_is_written_once_one_way(written: str, expected: str) -> None:
    assert written == expected


#: Seconds, milliseconds, microseconds and GiB written by hand in an f-string: what
#: ``units.seconds``, ``ms``, ``us`` and ``gib`` write.
BY_HAND = re.compile(r"/ 1e(9|6|3):[+]?,\.\df\} (s|ms|µs)\b|:[+]?,\.\df\} GiB")


def test_milliseconds_and_gib_are_written_by_the_units_module_only() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in sorted(ROOT.rglob("*.py"))
        if path.name != "units.py"
        for n, line in enumerate(path.read_text("utf-8").splitlines(), 1)
        if BY_HAND.search(line)
    ]
    assert not found, "use gpuscope.units (seconds, ms, us, gib, ...):\n" + "\n".join(found)
