"""gpuscope watch: sampling through a fake NVML, idle-while-held alerts, Prometheus text and its
HTTP server, the CLI's exits; one real run where a GPU is present."""

# The fake mirrors pynvml's names.
# ruff: noqa: N802, N815

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from gpuscope import watch
from gpuscope.cli import main


class FakeError(Exception):
    pass


@dataclass
class FakeGpu:
    name: bytes
    util: float
    used: int
    total: int
    pids: list[int] = field(default_factory=list)
    sm_active: float | None = None  # None: no GPM


class _Request:
    def __init__(self) -> None:
        self.version = self.numMetrics = 0
        self.sample1: Any = None
        self.sample2: Any = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0)]


class FakeNvml:
    """The pynvml functions gpuscope.watch uses, over a list of fake GPUs."""

    NVMLError = FakeError
    NVML_GPM_METRIC_SM_UTIL = 2
    NVML_GPM_METRICS_GET_VERSION = 1
    c_nvmlGpmMetricsGet_t = _Request

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus
        self.freed = 0

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return self.gpus[h].name

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=self.gpus[h].util, memory=0)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(used=self.gpus[h].used, total=self.gpus[h].total)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=p, usedGpuMemory=2**30) for p in self.gpus[h].pids]

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        raise FakeError("not supported")

    def nvmlSystemGetProcessName(self, pid: int) -> bytes:
        return b"python train.py"

    def nvmlGpmQueryDeviceSupport(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(isSupportedDevice=int(self.gpus[h].sm_active is not None))

    def nvmlGpmSampleAlloc(self) -> SimpleNamespace:
        return SimpleNamespace(handle=None)

    def nvmlGpmSampleGet(self, h: int, sample: SimpleNamespace) -> SimpleNamespace:
        sample.handle = h
        return sample

    def nvmlGpmSampleFree(self, sample: SimpleNamespace) -> None:
        self.freed += 1

    def nvmlGpmMetricsGet(self, request: _Request) -> _Request:
        assert request.metrics[0].metricId == self.NVML_GPM_METRIC_SM_UTIL
        request.metrics[0].value = self.gpus[request.sample2.handle].sm_active
        return request


def _fleet() -> FakeNvml:
    return FakeNvml(
        [
            FakeGpu(b"NVIDIA H100 80GB HBM3", 0.0, 40 * 2**30, 80 * 2**30, [4242], sm_active=0.0),
            FakeGpu(b'odd "name"\n', 97.0, 10 * 2**30, 24 * 2**30),
        ]
    )


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_sampler_reads_every_gpu_and_sm_activity_from_the_second_sample() -> None:
    nvml = _fleet()
    sampler = watch.Sampler(nvml)
    first = sampler.sample()
    assert [s.name for s in first] == ["NVIDIA H100 80GB HBM3", 'odd "name"\n']
    assert first[0].sm_active_pct is None  # GPM needs two samples
    assert first[0].processes == [watch.ProcessInfo(4242, "python train.py", 2**30)]
    assert first[0].memory_used_bytes == 40 * 2**30 and first[0].utilization_pct == 0.0
    nvml.gpus[0].sm_active = 12.5
    second = sampler.sample()
    assert second[0].sm_active_pct == 12.5
    assert second[1].sm_active_pct is None and second[1].processes == []  # no GPM: n/a
    sampler.close()
    assert nvml.freed == 2


def test_idle_tracker_flags_held_gpus_idle_too_long() -> None:
    clock = Clock()
    nvml = _fleet()
    nvml.gpus[1].util = 0.0  # idle too, but no process holds it
    sampler = watch.Sampler(nvml, clock)
    tracker = watch.IdleTracker(threshold_pct=5, idle_after_s=30)
    assert tracker.update(sampler.sample()) == []
    clock.now += 29
    assert tracker.update(sampler.sample()) == []
    clock.now += 2
    assert tracker.update(sampler.sample()) == [watch.IdleAlert(0, 31.0, [4242])]
    nvml.gpus[0].util = 50.0
    clock.now += 1
    assert tracker.update(sampler.sample()) == []
    nvml.gpus[0].util = 0.0
    clock.now += 5
    assert tracker.update(sampler.sample()) == []  # the idle stretch starts again


def test_prometheus_text() -> None:
    samples = watch.Sampler(_fleet()).sample()
    text = watch.prometheus_text(samples, [watch.IdleAlert(0, 61.0, [4242])])
    lines = text.splitlines()
    assert "# TYPE gpuscope_gpu_utilization_percent gauge" in lines
    h100 = 'gpu="0",name="NVIDIA H100 80GB HBM3"'
    value = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in lines if line[0] != "#"
    }
    assert value[f"gpuscope_gpu_utilization_percent{{{h100}}}"] == 0
    assert value[f"gpuscope_gpu_idle_held{{{h100}}}"] == 1
    assert value[f"gpuscope_gpu_idle_seconds{{{h100}}}"] == 61
    assert value[f"gpuscope_gpu_memory_total_bytes{{{h100}}}"] == 80 * 2**30
    # Label values escaped by the official client.
    assert value['gpuscope_gpu_processes{gpu="1",name="odd \\"name\\"\\n"}'] == 0
    assert not [x for x in lines if x.startswith("gpuscope_gpu_sm_active_percent")]  # n/a


def test_metrics_server_serves_the_latest_samples_on_loopback() -> None:
    server = watch.MetricsServer(0)
    samples = watch.Sampler(_fleet()).sample()
    try:
        assert server.httpd.server_address[0] == "127.0.0.1"
        server.publish(samples, [])
        url = f"http://127.0.0.1:{server.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert r.read().decode() == watch.prometheus_text(samples, [])
        # OpenMetrics to a scraper that asks for it (Prometheus does), ending in "# EOF".
        asks = urllib.request.Request(url, headers={"Accept": "application/openmetrics-text"})
        with urllib.request.urlopen(asks, timeout=5) as r:
            assert r.headers["Content-Type"].startswith("application/openmetrics-text")
            assert r.read().rstrip().endswith(b"# EOF")
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/other", timeout=5)
    finally:
        server.close()


def test_cli_without_nvml_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch) -> None:
    def unavailable() -> Any:
        raise watch.NvmlUnavailableError("NVML needs pynvml: pip install 'gpuscope[nvml]'")

    monkeypatch.setattr(watch, "load_nvml", unavailable)
    run = CliRunner().invoke(main, ["watch", "--once"])
    assert run.exit_code == 2
    assert run.stderr == "gpuscope: error: NVML needs pynvml: pip install 'gpuscope[nvml]'\n"


def test_cli_once_with_fake_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(watch, "load_nvml", _fleet)
    run = CliRunner().invoke(
        main, ["watch", "--once", "--idle-after-s", "0"], env={"COLUMNS": "200"}
    )
    assert run.exit_code == 0, run.output
    assert "NVIDIA H100 80GB HBM3" in run.stdout and "4242 python train.py" in run.stdout
    assert "IDLE 0 s while held" in run.stdout and "40.0 / 80.0" in run.stdout
    assert "n/a" in run.stdout  # SM activity on the first sample


def _real_nvml() -> bool:
    try:
        watch.load_nvml().nvmlShutdown()
    except watch.NvmlUnavailableError:
        return False
    return True


@pytest.mark.skipif(not _real_nvml(), reason="no NVML GPU here (pynvml, driver or GPU missing)")
def test_real_gpu_once() -> None:
    nvml = watch.load_nvml()
    try:
        sampler = watch.Sampler(nvml)
        first, second = sampler.sample(), sampler.sample()
        sampler.close()
    finally:
        nvml.nvmlShutdown()
    assert first and all(s.memory_total_bytes for s in first)
    assert all(s.utilization_pct is not None for s in second)
    print("real GPUs:", [(s.name, s.utilization_pct, s.sm_active_pct) for s in second])
    run = CliRunner().invoke(main, ["watch", "--once"], env={"COLUMNS": "200"})
    assert run.exit_code == 0 and first[0].name in run.stdout
