"""Watch local GPUs live through NVML: utilisation, SM activity, memory, the processes on each,
and GPUs held by a process while they idle.

Contract:

* :func:`load_nvml` imports ``pynvml`` (the ``nvml`` extra) lazily and initialises it; it raises
  :class:`NvmlUnavailableError` (one line of why) without the package, the driver or a GPU.
* :class:`Sampler` reads every GPU through an injected NVML object (``pynvml`` or anything with
  the same functions, such as the tests' fake) and returns one :class:`GpuSample` per GPU. A
  figure NVML cannot give is None ("n/a"), never 0. SM activity comes from GPM (Hopper and
  newer: ``NVML_GPM_METRIC_SM_UTIL`` between two consecutive samples), so the first sample of a
  GPU has none.
* :class:`IdleTracker` flags a GPU whose utilisation stays at or below a threshold for at least
  ``idle_after_s`` while some process holds it (:class:`IdleAlert`).
* :func:`metrics_registry` holds samples and alerts as gauges of the official client,
  ``prometheus_client`` (the ``nvml`` extra): it writes the exposition formats, label escaping
  included; :func:`prometheus_text` is their Prometheus text. :class:`MetricsServer` serves the
  latest at ``/metrics`` (Prometheus text, or OpenMetrics to a scraper that asks for it) with the
  standard library's HTTP server, on 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import importlib
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import msgspec

from gpuscope._install import install_line


class NvmlUnavailableError(Exception):
    """NVML cannot be used here: no pynvml, no driver or no GPU."""


class ProcessInfo(msgspec.Struct, frozen=True):
    pid: int
    name: str | None  # None: neither NVML nor /proc names it
    used_memory_bytes: int | None


class GpuSample(msgspec.Struct, frozen=True):
    index: int
    name: str
    time_s: float  # the sampler's clock (monotonic by default)
    utilization_pct: float | None
    sm_active_pct: float | None  # None: no GPM on this GPU, or its first sample
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    processes: list[ProcessInfo] = msgspec.field(default_factory=list)


class IdleAlert(msgspec.Struct, frozen=True):
    index: int
    idle_s: float  # how long utilisation has been at or below the threshold
    pids: list[int]


def load_nvml() -> Any:
    """``pynvml``, initialised, with at least one GPU."""
    try:
        pynvml = importlib.import_module("pynvml")  # the nvml extra, only when watching
    except ImportError:
        raise NvmlUnavailableError(f"NVML needs pynvml: {install_line('nvml')}") from None
    try:
        pynvml.nvmlInit()
        count = int(pynvml.nvmlDeviceGetCount())
    except pynvml.NVMLError as error:
        raise NvmlUnavailableError(f"NVML is not available: {error}") from None
    if count == 0:
        pynvml.nvmlShutdown()
        raise NvmlUnavailableError("NVML sees no GPU")
    return pynvml


class Sampler:
    """Samples every GPU NVML sees; keeps one GPM sample per GPU for SM activity."""

    def __init__(self, nvml: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self.nvml = nvml
        self.clock = clock
        count = int(nvml.nvmlDeviceGetCount())
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.gpm = [self._gpm_supported(h) for h in self.handles]
        self.previous: list[Any] = [None] * count

    def sample(self) -> list[GpuSample]:
        return [self._one(i, h) for i, h in enumerate(self.handles)]

    def close(self) -> None:
        for i, previous in enumerate(self.previous):
            if previous is not None:
                self._call("nvmlGpmSampleFree", previous)
                self.previous[i] = None

    def _one(self, index: int, handle: Any) -> GpuSample:
        util = self._call("nvmlDeviceGetUtilizationRates", handle)
        memory = self._call("nvmlDeviceGetMemoryInfo", handle)
        name = self._call("nvmlDeviceGetName", handle)
        return GpuSample(
            index=index,
            name=name.decode() if isinstance(name, bytes) else str(name or f"GPU {index}"),
            time_s=self.clock(),
            utilization_pct=None if util is None else float(util.gpu),
            sm_active_pct=self._sm_active(index, handle) if self.gpm[index] else None,
            memory_used_bytes=None if memory is None else int(memory.used),
            memory_total_bytes=None if memory is None else int(memory.total),
            processes=self._processes(handle),
        )

    def _call(self, name: str, *args: Any) -> Any:
        """``nvml.name(*args)``, or None where the GPU or the library does not support it."""
        function = getattr(self.nvml, name, None)
        if function is None:
            return None
        try:
            return function(*args)
        except self.nvml.NVMLError:
            return None

    def _gpm_supported(self, handle: Any) -> bool:
        support = self._call("nvmlGpmQueryDeviceSupport", handle)
        return bool(support is not None and support.isSupportedDevice)

    def _sm_active(self, index: int, handle: Any) -> float | None:
        current = self._call("nvmlGpmSampleAlloc")
        if current is None or self._call("nvmlGpmSampleGet", handle, current) is None:
            return None
        previous, self.previous[index] = self.previous[index], current
        if previous is None:
            return None
        try:
            return self._gpm_metric(previous, current, self.nvml.NVML_GPM_METRIC_SM_UTIL)
        finally:
            self._call("nvmlGpmSampleFree", previous)

    def _gpm_metric(self, first: Any, second: Any, metric_id: int) -> float | None:
        request = self.nvml.c_nvmlGpmMetricsGet_t()
        request.version = self.nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 1
        request.sample1 = first
        request.sample2 = second
        request.metrics[0].metricId = metric_id
        result = self._call("nvmlGpmMetricsGet", request)
        if result is None or result.metrics[0].nvmlReturn != 0:
            return None
        return float(result.metrics[0].value)

    def _processes(self, handle: Any) -> list[ProcessInfo]:
        seen: dict[int, ProcessInfo] = {}
        for getter in (
            "nvmlDeviceGetComputeRunningProcesses",
            "nvmlDeviceGetGraphicsRunningProcesses",
        ):
            for p in self._call(getter, handle) or []:
                used = getattr(p, "usedGpuMemory", None)
                seen.setdefault(
                    int(p.pid), ProcessInfo(int(p.pid), self._process_name(int(p.pid)), used)
                )
        return sorted(seen.values(), key=lambda p: p.pid)

    def _process_name(self, pid: int) -> str | None:
        name = self._call("nvmlSystemGetProcessName", pid)
        if name:
            return name.decode() if isinstance(name, bytes) else str(name)
        try:
            return Path(f"/proc/{pid}/comm").read_text().strip() or None
        except OSError:
            return None


class IdleTracker:
    """Remembers since when each GPU has been idle and flags those idle too long while held."""

    def __init__(self, threshold_pct: float, idle_after_s: float) -> None:
        self.threshold_pct = threshold_pct
        self.idle_after_s = idle_after_s
        self.since: dict[int, float] = {}

    def update(self, samples: Sequence[GpuSample]) -> list[IdleAlert]:
        alerts = []
        for s in samples:
            idle = s.utilization_pct is not None and s.utilization_pct <= self.threshold_pct
            if not idle:
                self.since.pop(s.index, None)
                continue
            start = self.since.setdefault(s.index, s.time_s)
            held = [p.pid for p in s.processes]
            if held and s.time_s - start >= self.idle_after_s:
                alerts.append(IdleAlert(s.index, s.time_s - start, held))
        return alerts


# --- Prometheus ---------------------------------------------------------------------------------

_GAUGES = (
    ("gpuscope_gpu_utilization_percent", "NVML GPU utilisation (share of time a kernel ran)"),
    ("gpuscope_gpu_sm_active_percent", "SM activity from GPM"),
    ("gpuscope_gpu_memory_used_bytes", "device memory in use"),
    ("gpuscope_gpu_memory_total_bytes", "device memory"),
    ("gpuscope_gpu_processes", "processes using the GPU"),
    (
        "gpuscope_gpu_idle_held",
        "1 when the GPU idles beyond the threshold while a process holds it",
    ),
    ("gpuscope_gpu_idle_seconds", "how long the GPU has idled (0 when busy)"),
)


class _Latest:
    """The collector of :func:`metrics_registry`: the gauges of the latest samples and alerts."""

    def __init__(self) -> None:
        self.samples: Sequence[GpuSample] = ()
        self.alerts: Sequence[IdleAlert] = ()
        self.lock = threading.Lock()

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily  # noqa: PLC0415 - the nvml extra

        with self.lock:
            samples, alerts = list(self.samples), list(self.alerts)
        flagged = {a.index: a for a in alerts}
        for name, help_ in _GAUGES:
            family = GaugeMetricFamily(name, help_, labels=["gpu", "name"])
            for s in samples:
                value = _gauge(name, s, flagged.get(s.index))
                if value is not None:  # a figure that is n/a has no sample
                    family.add_metric([str(s.index), s.name], value)
            yield family


def metrics_registry() -> tuple[Any, _Latest]:
    """A registry of the official Prometheus client (``prometheus_client``) that reports the
    samples and alerts last set on the returned collector."""
    from prometheus_client import CollectorRegistry  # noqa: PLC0415 - the nvml extra

    latest = _Latest()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(latest)
    return registry, latest


def prometheus_text(samples: Sequence[GpuSample], alerts: Sequence[IdleAlert]) -> str:
    """Samples and alerts as Prometheus text (the official client's); n/a figures have no line."""
    from prometheus_client import generate_latest  # noqa: PLC0415 - the nvml extra

    registry, latest = metrics_registry()
    latest.samples, latest.alerts = samples, alerts
    return generate_latest(registry).decode()


def _gauge(name: str, s: GpuSample, alert: IdleAlert | None) -> float | None:
    values: dict[str, float | None] = {
        "gpuscope_gpu_utilization_percent": s.utilization_pct,
        "gpuscope_gpu_sm_active_percent": s.sm_active_pct,
        "gpuscope_gpu_memory_used_bytes": _float(s.memory_used_bytes),
        "gpuscope_gpu_memory_total_bytes": _float(s.memory_total_bytes),
        "gpuscope_gpu_processes": float(len(s.processes)),
        "gpuscope_gpu_idle_held": 1.0 if alert else 0.0,
        "gpuscope_gpu_idle_seconds": alert.idle_s if alert else 0.0,
    }
    return values[name]


def _float(value: int | None) -> float | None:
    return None if value is None else float(value)


class ServeError(Exception):
    """The metrics server cannot listen where asked: one line saying why."""


#: Seconds a scrape connection may stay silent before it is closed: each holds a thread, and a
#: client that connects and sends nothing would otherwise hold one for ever.
CONNECTION_TIMEOUT_S = 10.0


def listen_address(bind: str, port: int) -> tuple[socket.AddressFamily, tuple[Any, ...]]:
    """The socket family and address for ``--bind`` (empty: localhost, never every interface;
    an IPv6 address such as ``::1`` listens on IPv6). :class:`ServeError` when it is not one."""
    host = bind.strip() or "127.0.0.1"
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError, ValueError) as error:
        raise ServeError(f"--bind {bind!r} is not an address of this machine ({error})") from None
    family, _, _, _, address = found[0]
    return family, address


class MetricsServer:
    """``/metrics`` over HTTP: the samples and alerts :meth:`publish` last set, in the exposition
    format the scraper asks for (its ``Accept`` header: OpenMetrics, else Prometheus text)."""

    def __init__(self, port: int, bind: str = "127.0.0.1") -> None:
        from prometheus_client.exposition import choose_encoder  # noqa: PLC0415 - nvml extra

        family, address = listen_address(bind, port)
        self.registry, self._latest = metrics_registry()
        registry = self.registry

        class Handler(BaseHTTPRequestHandler):
            timeout = CONNECTION_TIMEOUT_S

            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] not in ("/metrics", "/"):
                    self.send_error(404)
                    return
                encode, content_type = choose_encoder(self.headers.get("Accept") or "")
                body = encode(registry)
                self.send_response(200)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: scrapes would flood the terminal."""

        class Server(ThreadingHTTPServer):
            address_family = family
            daemon_threads = True

        try:
            self.httpd = Server(address, Handler)
        except OSError as error:  # in use, privileged, not an address of this machine
            raise ServeError(
                f"cannot serve on {bind or 'localhost'} port {port}: {error.strerror or error}"
            ) from None
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def publish(self, samples: Sequence[GpuSample], alerts: Sequence[IdleAlert]) -> None:
        with self._latest.lock:
            self._latest.samples, self._latest.alerts = list(samples), list(alerts)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
