"""The diagnosis's helper thread (gpuscope._aside): the same results as inline, errors raised
where the result is asked for, and no thread left behind."""

from __future__ import annotations

import threading

import msgspec
import numpy as np
import pytest

from corpus import corpus
from gpuscope import _aside, diagnosis
from gpuscope._aside import Helper
from gpuscope.diagnosis import Options, diagnose
from gpuscope.diagnosis.saved import to_builtins
from gpuscope.readers import load


def _helpers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "gpuscope-helper"]


@pytest.fixture(params=[1, 2], ids=["one-cpu", "two-cpus"])
def cpus(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(_aside, "_cpus", lambda: request.param)
    return int(request.param)


def test_pieces_give_what_they_give_inline_in_order(cpus: int) -> None:
    values = np.arange(100_000)
    with Helper() as helper:
        later = [helper.start(np.cumsum, values[i:]) for i in range(5)]
        assert [int(x.result()[-1]) for x in later] == [int(values[i:].sum()) for i in range(5)]
        assert bool(_helpers()) == (cpus > 1)
    assert not _helpers()  # the thread ended with the block


def test_an_error_is_raised_where_the_result_is_asked_for(cpus: int) -> None:
    def fails() -> int:
        raise ValueError("no such step")

    with Helper() as helper:
        later = helper.start(fails)
        with pytest.raises(ValueError, match="no such step"):
            later.result()
        assert helper.start(int, "7").result() == 7  # the helper goes on
    assert not _helpers()


def test_pieces_never_asked_for_are_skipped_once_the_block_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_aside, "_cpus", lambda: 2)
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def first() -> None:
        started.set()
        release.wait()

    with pytest.raises(RuntimeError), Helper() as helper:
        helper.start(first)
        started.wait()
        helper.start(ran.append, "second")
        threading.Timer(0.2, release.set).start()  # the first piece ends after the block does
        raise RuntimeError("the caller failed")
    # The block ended while the first piece waited: the second was skipped, not run.
    assert release.is_set()
    assert not _helpers()
    assert ran == []


def test_without_a_helper_a_piece_runs_where_it_is_asked_for() -> None:
    """As it would run with no helper at all: the memory it holds, held from then on only."""
    ran: list[int] = []
    with Helper(parallel=False) as helper:
        later = helper.start(ran.append, 1)
        never = helper.start(ran.append, 2)
        assert ran == []
        later.result()
        later.result()
        assert ran == [1]
    assert ran == [1] and not _helpers()
    del never


@pytest.mark.parametrize(
    "relative",
    [
        "kineto/hta/df_index_resolver/df_index_resolver.json.gz",  # one GPU, memory events
        "kineto/param-dlrm-8rank",  # eight ranks: a graph and a replay per trace
    ],
)
def test_the_diagnosis_is_the_same_with_a_helper_thread_and_without(
    relative: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = load(corpus(relative))
    monkeypatch.setattr(diagnosis, "HELPER_MIN_EVENTS", 0)  # a helper for any trace
    encoded = []
    for count in (1, 2):
        monkeypatch.setattr(_aside, "_cpus", lambda count=count: count)
        encoded.append(msgspec.json.encode(to_builtins(diagnose(job, Options(charts=True)))))
    assert encoded[0] == encoded[1]


def test_short_traces_are_diagnosed_without_a_helper(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below HELPER_MIN_EVENTS the GIL's hand-overs cost more than the overlap gains."""
    monkeypatch.setattr(_aside, "_cpus", lambda: 2)
    started: list[bool] = []
    real = Helper.__init__

    def spy(self: Helper, *, parallel: bool = True) -> None:
        started.append(parallel)
        real(self, parallel=parallel)

    monkeypatch.setattr(Helper, "__init__", spy)
    short = load(corpus("kineto/tracelens/mi300x_qwen1.5-0.5b_inference.json.gz"))
    long = load(corpus("kineto/hta/df_index_resolver/df_index_resolver.json.gz"))
    assert len(short.traces[0].events) < diagnosis.HELPER_MIN_EVENTS <= len(long.traces[0].events)
    diagnose(short, Options(charts=False))
    diagnose(long, Options(charts=False))
    assert started == [False, True]
