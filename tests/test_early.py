"""The console script's early read of an Nsight Systems export, in a forked child process.

The child reads as the command would (``load_file``) and sends the Job, or the ``InputError``, back
through a pipe; the command takes it for the same file only, and reads the file itself when the
child failed. A fork needs a process with one thread, so the reads here run in fresh interpreters.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from corpus import corpus
from gpuscope.errors import CorruptInputError, InputError
from gpuscope.readers import _early

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the early fork is Linux-only")

# Runs in a fresh interpreter: starts the early read of argv[1], optionally kills the child, then
# loads argv[1] and prints what came of it as JSON. ``blas`` lets numpy start its BLAS threads.
_SCRIPT = """
import json, os, signal, sys
from pathlib import Path
from gpuscope.console import _one_blas_thread

if sys.argv[2] == "blas":
    os.environ["OPENBLAS_NUM_THREADS"] = "2"
_one_blas_thread()  # as the console script does, before numpy imports

from gpuscope.errors import InputError
from gpuscope.readers import _early, load

path = Path(sys.argv[1])
prefetch = _early.start(["--top", "3", str(path)])
forked = [prefetch.child] if prefetch is not None and prefetch.child is not None else []
if sys.argv[2] == "kill":
    os.kill(forked[0][0], signal.SIGKILL)
try:
    job = load(path, prefetch=prefetch)
except InputError as error:
    print(json.dumps({"forked": len(forked), "error": str(error)}))
else:
    traces = [
        {"events": len(t.events), "busy": int(t.events.dur_ns.sum()), "names": len(t.names)}
        for t in job.traces
    ]
    left = int(prefetch is not None and prefetch.child is not None)
    print(json.dumps({"forked": len(forked), "left": left, "traces": traces}))
"""


def run_early(path: Path, mode: str = "keep") -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(path), mode], capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def in_process(path: Path) -> list[dict[str, int]]:
    from gpuscope.readers import load

    return [
        {"events": len(t.events), "busy": int(t.events.dur_ns.sum()), "names": len(t.names)}
        for t in load(path).traces
    ]


def test_the_child_reads_the_export_the_command_names() -> None:
    path = corpus("nsys/nsys-ai/h100_2gpu_1s.sqlite")
    early = run_early(path)
    assert early["forked"] == 1 and early["left"] == 0
    assert early["traces"] == in_process(path)


def test_a_child_that_died_leaves_the_read_to_the_command() -> None:
    path = corpus("nsys/pipit/a100_cloverleaf.sqlite")
    early = run_early(path, "kill")
    assert early["forked"] == 1 and early["traces"] == in_process(path)


def test_the_childs_input_error_is_the_commands(tmp_path: Path) -> None:
    path = tmp_path / "cut.sqlite"
    path.write_bytes(corpus("nsys/pipit/a100_cloverleaf.sqlite").read_bytes()[:100_000])
    with pytest.raises(InputError) as in_process_error:
        in_process(path)
    early = run_early(path)
    assert early == {"forked": 1, "error": str(in_process_error.value)}


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="OpenBLAS starts no thread on one CPU")
def test_no_fork_beside_native_threads() -> None:
    """numpy's BLAS threads (where OPENBLAS_NUM_THREADS allows them) forbid the fork too."""
    path = corpus("nsys/pipit/a100_cloverleaf.sqlite")
    early = run_early(path, "blas")
    assert early["forked"] == 0 and early["traces"] == in_process(path)


def test_input_errors_survive_pickling() -> None:
    error = CorruptInputError("/tmp/x.sqlite", "the file ends early")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is CorruptInputError and (again.path, again.reason) == (
        error.path,
        error.reason,
    )
    assert str(again) == "/tmp/x.sqlite: the file ends early"


def test_no_fork_beside_other_threads_nor_for_big_exports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = corpus("nsys/pipit/a100_cloverleaf.sqlite")
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        # a fork would copy this thread's locks, not the thread
        assert _early.start([str(path)]) is None
    finally:
        stop.set()
        other.join()
    monkeypatch.setattr(_early, "FORK_MAX_BYTES", path.stat().st_size - 1)
    monkeypatch.setattr(_early, "_one_thread", lambda: True)
    assert _early.start([str(path)]) is None
