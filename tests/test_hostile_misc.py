"""Hangs and silent misreads of issue #30 (classes 6 and 7): each built from the smallest input
that showed it."""

from __future__ import annotations

import gzip
import importlib.util
import json
import time
from pathlib import Path

import pytest

from gpuscope.commands import _agent
from gpuscope.errors import InputError
from gpuscope.readers._io import read_bytes
from gpuscope.testing.generator import GeneratorConfig, generate
from test_hostile import assert_same, both_ways, cli, one_error_line


@pytest.fixture(scope="module")
def trace_bytes() -> bytes:
    return generate(GeneratorConfig(seed=3, steps=2, layers=1)).to_bytes()


def test_a_gzip_of_many_small_members_reads_whole(tmp_path: Path, trace_bytes: bytes) -> None:
    path = tmp_path / "bgzip.json.gz"
    path.write_bytes(b"".join(gzip.compress(trace_bytes[i : i + 20])
                              for i in range(0, len(trace_bytes), 20)))  # fmt: skip
    content = read_bytes(path)
    assert content.data == trace_bytes and not content.truncated
    out = tmp_path / "annotated.json"
    assert cli("annotate", str(path), "-o", str(out)).exit_code == 0
    assert json.loads(out.read_bytes())["gpuscope"]["verdict"]


@pytest.mark.parametrize("compressed", [False, True])
def test_a_kineto_trace_with_a_byte_order_mark_reads_as_without(
    tmp_path: Path, trace_bytes: bytes, compressed: bool
) -> None:
    data = b"\xef\xbb\xbf" + trace_bytes
    path = tmp_path / ("bom.json.gz" if compressed else "bom.json")
    path.write_bytes(gzip.compress(data) if compressed else data)
    plain = tmp_path / "plain.json"
    plain.write_bytes(trace_bytes)
    with_scanner, without = both_ways(path)
    assert_same(with_scanner, without)
    assert not isinstance(with_scanner, str)
    got = json.loads(cli("diagnose", str(path), "--json", "-").stdout)["verdict"]
    want = json.loads(cli("diagnose", str(plain), "--json", "-").stdout)["verdict"]
    assert got == want


def test_escaped_top_level_keys_read_as_the_keys_they_are(
    tmp_path: Path, trace_bytes: bytes
) -> None:
    doc = json.loads(trace_bytes)
    text = json.dumps({"traceEvents": doc.pop("traceEvents")})  # the only key, escaped
    path = tmp_path / "escaped.json"
    path.write_text(text.replace('"traceEvents"', '"trace\\u0045vents"'))
    result = cli("diagnose", str(path), "--json", "-")
    assert result.exit_code == 0, result.stderr


def test_mcp_refuses_an_empty_path() -> None:
    session = _agent.Session()
    for call in (
        lambda: session.diagnose(""),
        lambda: session.report("  ", "r.html"),
        lambda: _agent.list_traces(""),
    ):
        with pytest.raises(InputError, match="an empty path"):
            call()


def test_mcp_list_traces_is_bounded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for i in range(30):
        (tmp_path / f"f{i}.txt").write_text("not a trace")
    monkeypatch.setattr(_agent, "EXAMINED", 10)
    answer = _agent.list_traces(str(tmp_path))
    assert answer["more"] is True and answer["other_files"] == 10
    started = time.monotonic()
    answer = _agent.list_traces("/")
    assert time.monotonic() - started < _agent.WALK_SECONDS + 5


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is an optional extra")
def test_fleet_gives_up_on_a_ray_address_nobody_listens_at(
    tmp_path: Path, trace_bytes: bytes
) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(trace_bytes)
    result = cli("fleet", str(path), "--out", str(tmp_path / "f.json"), "--engine", "ray",
                 "--ray-address", "127.0.0.1:1")  # fmt: skip
    assert "no Ray cluster answers" in one_error_line(result)


@pytest.mark.parametrize(("tail", "reads"), [(b"hello", False), (b"\0" * 600, True), (b"", True)])
def test_data_after_the_last_gzip_member_is_refused_padding_is_not(
    tmp_path: Path, trace_bytes: bytes, tail: bytes, reads: bool
) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(trace_bytes) + gzip.compress(b"") + tail)
    outcomes = [*both_ways(path)]
    try:
        outcomes.append(read_bytes(path).data == trace_bytes)
    except InputError as error:
        outcomes.append(f"{type(error).__name__}: {error.reason}")
    if reads:
        assert not any(isinstance(o, str) for o in outcomes), outcomes
    else:
        assert all(isinstance(o, str) and "after the last gzip member" in o for o in outcomes)
        line = one_error_line(cli("diagnose", str(path)))
        assert "data after the last gzip member that is not gzip" in line
