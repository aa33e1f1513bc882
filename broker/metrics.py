"""Prometheus metrics for the broker, served on `metrics.port` (0 = disabled).

Each `Metrics` owns its own `CollectorRegistry`, so tests and several brokers in one process never
collide on metric names. Counters and histograms are updated by the broker as things happen
(`observe_request`, `connection_opened`, ...). Values that are cheaper to read than to track — log size
per partition, partition count, purgatory sizes — come from callbacks the broker registers; they are
read once per scrape.

Threading: the HTTP endpoint is prometheus_client's own server, which runs in a daemon thread. The
callbacks read broker state that belongs to the event loop, so when a loop is bound (automatically if
`start_http_server` is called from inside one), a scrape runs the callbacks *on the loop* via
`call_soon_threadsafe` and waits for them (at most `callback_timeout_s`); a scrape from the loop's own
thread, or with no loop, calls them directly. Counter and gauge updates themselves are thread-safe.

Metric names (prefix `odradek_`):
  requests_total{api,version}              requests handled (api is the name: Produce, Fetch, ...)
  request_errors_total{api,error}          responses carrying a non-zero error code, by Kafka error name
  request_latency_seconds{api}             histogram of request handling time
  request_bytes_total{api}                 request frame bytes received
  protocol_errors_total                    connections closed because a request did not parse
  bytes_in_total / bytes_out_total         bytes read from / written to client sockets
  connections_active / connections_accepted_total
  partitions                               partitions hosted on this broker
  log_size_bytes{topic,partition}          size of each partition's log on disk
  purgatory_size{purgatory}                delayed operations waiting (produce, fetch, ...)
  build_info{version,node_id}              always 1
plus process_* and python_gc_* from prometheus_client's standard collectors.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    Info,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client import start_http_server as _prom_start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .. import __version__

__all__ = ["Metrics", "MetricsServer", "LATENCY_BUCKETS", "CONTENT_TYPE", "api_name"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Request latencies span sub-millisecond metadata calls to long-polling fetches (fetch.max.wait.ms).
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

LogSizeSource = Callable[[], Iterable[tuple[str, int, int]]]  # -> (topic, partition, size_bytes)
PartitionCountSource = Callable[[], int]
PurgatorySource = Callable[[], Mapping[str, int]]  # -> {purgatory name: waiting operations}


class MetricsServer:
    """A running /metrics HTTP endpoint. `stop()` shuts it down and closes its socket."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def stop(self, timeout_s: float = 5.0) -> None:
        if self._server is None:
            return
        server, self._server = self._server, None
        server.shutdown()
        server.server_close()
        self._thread.join(timeout_s)

    close = stop

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _StateCollector(Collector):
    """Metrics read from the broker's state at scrape time, through the callbacks it registered."""

    def __init__(self, owner: Metrics) -> None:
        self._owner = owner

    def describe(self) -> list[Any]:
        # Declared up front so the registry can detect name clashes without calling the callbacks.
        return [
            GaugeMetricFamily("odradek_partitions", "Partitions hosted on this broker"),
            GaugeMetricFamily(
                "odradek_log_size_bytes", "Size of a partition's log on disk", labels=["topic", "partition"]
            ),
            GaugeMetricFamily(
                "odradek_purgatory_size", "Delayed operations waiting in a purgatory", labels=["purgatory"]
            ),
        ]

    def collect(self) -> Iterable[Any]:
        snapshot = self._owner._snapshot()
        partitions = GaugeMetricFamily("odradek_partitions", "Partitions hosted on this broker")
        if snapshot["partitions"] is not None:
            partitions.add_metric([], snapshot["partitions"])
        yield partitions
        sizes = GaugeMetricFamily(
            "odradek_log_size_bytes", "Size of a partition's log on disk", labels=["topic", "partition"]
        )
        for topic, partition, size in snapshot["log_sizes"]:
            sizes.add_metric([topic, str(partition)], size)
        yield sizes
        purgatory = GaugeMetricFamily(
            "odradek_purgatory_size", "Delayed operations waiting in a purgatory", labels=["purgatory"]
        )
        for name, size in sorted(snapshot["purgatories"].items()):
            purgatory.add_metric([name], size)
        yield purgatory


class Metrics:
    """The broker's metrics on a private registry."""

    def __init__(
        self,
        *,
        node_id: int | None = None,
        registry: CollectorRegistry | None = None,
        process_metrics: bool = True,
        callback_timeout_s: float = 5.0,
    ) -> None:
        # The `*_created` timestamp series double the output and no dashboard uses them. The switch is
        # process-wide in prometheus_client; the broker process is ours.
        disable_created_metrics()
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self._request_children: dict[tuple[int | str, int], tuple[Any, ...]] = {}
        self.callback_timeout_s = callback_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._log_size_source: LogSizeSource | None = None
        self._partition_count_source: PartitionCountSource | None = None
        self._purgatory_sources: dict[str, Callable[[], int]] = {}
        self._purgatory_source: PurgatorySource | None = None
        ns = "odradek"
        reg = self.registry

        self.requests = Counter(
            "requests", "Requests handled, by API and version", ["api", "version"], namespace=ns, registry=reg
        )
        self.request_errors = Counter(
            "request_errors",
            "Responses with a non-zero error code, by API and error",
            ["api", "error"],
            namespace=ns,
            registry=reg,
        )
        self.request_latency = Histogram(
            "request_latency_seconds",
            "Time from request received to response queued",
            ["api"],
            namespace=ns,
            registry=reg,
            buckets=LATENCY_BUCKETS,
        )
        self.request_bytes = Counter(
            "request_bytes", "Request frame bytes received, by API", ["api"], namespace=ns, registry=reg
        )
        self.protocol_errors = Counter(
            "protocol_errors",
            "Connections closed because a request did not parse",
            namespace=ns,
            registry=reg,
        )
        self.bytes_in = Counter("bytes_in", "Bytes read from client connections", namespace=ns, registry=reg)
        self.bytes_out = Counter(
            "bytes_out", "Bytes written to client connections", namespace=ns, registry=reg
        )
        self.connections_active = Gauge(
            "connections_active", "Client connections open now", namespace=ns, registry=reg
        )
        self.connections_accepted = Counter(
            "connections_accepted", "Client connections accepted", namespace=ns, registry=reg
        )
        self.build_info = Info("build", "Odradek build and node", namespace=ns, registry=reg)
        self.build_info.info({"version": __version__, "node_id": "" if node_id is None else str(node_id)})
        reg.register(_StateCollector(self))
        if process_metrics:
            ProcessCollector(registry=reg)
            GCCollector(registry=reg)

    # ---- recording

    def observe_request(
        self,
        api: int | str,
        version: int,
        latency_s: float,
        request_bytes: int | None = None,
        error: bool | int | str | None = None,
    ) -> None:
        """Count one handled request.

        `api` is the API key or its name ("Produce"); labels always carry the name. `error` is what the
        response carried: a Kafka error name ("NOT_LEADER_OR_FOLLOWER") or code, True for a handler that
        raised (the client sees UNKNOWN_SERVER_ERROR), or None / False / 0 / "NONE" for success."""
        children = self._request_children.get((api, version))
        if children is None:  # labels() takes a lock and builds a key; do it once per (api, version)
            name = api_name(api)
            children = (
                name,
                self.requests.labels(name, str(version)),
                self.request_latency.labels(name),
                self.request_bytes.labels(name),
            )
            self._request_children[(api, version)] = children
        name, count, latency, size = children
        count.inc()
        latency.observe(latency_s)
        if request_bytes:
            size.inc(request_bytes)
        error_name = _error_name(error)
        if error_name is not None:
            self.request_errors.labels(name, error_name).inc()

    def protocol_error(self) -> None:
        """A connection was closed because its bytes did not parse as a Kafka request."""
        self.protocol_errors.inc()

    def record_error(self, api: int | str, error: int | str) -> None:
        name = _error_name(error)
        if name is not None:
            self.request_errors.labels(api_name(api), name).inc()

    def add_bytes_in(self, n: int) -> None:
        self.bytes_in.inc(n)

    def add_bytes_out(self, n: int) -> None:
        self.bytes_out.inc(n)

    def connection_opened(self) -> None:
        self.connections_accepted.inc()
        self.connections_active.inc()

    def connection_closed(self) -> None:
        self.connections_active.dec()

    # ---- state callbacks (called once per scrape, on the bound loop)

    def set_log_size_source(self, source: LogSizeSource | None) -> None:
        """`source()` returns `(topic, partition, size_bytes)` for every hosted partition."""
        self._log_size_source = source

    def set_partition_count_source(self, source: PartitionCountSource | None) -> None:
        self._partition_count_source = source

    def set_purgatory_source(self, source: PurgatorySource | None) -> None:
        """`source()` returns `{purgatory name: size}` (e.g. {"produce": 3, "fetch": 10})."""
        self._purgatory_source = source

    def track_purgatory(self, name: str, size: Callable[[], int]) -> None:
        """Register one purgatory's size callback (alternative to set_purgatory_source)."""
        self._purgatory_sources[name] = size

    def bind_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Run state callbacks on `loop` when a scrape comes from another thread."""
        self._loop = loop

    def _read_state(self) -> dict[str, Any]:
        count = self._partition_count_source() if self._partition_count_source else None
        sizes = list(self._log_size_source()) if self._log_size_source else []
        purgatories = dict(self._purgatory_source()) if self._purgatory_source else {}
        for name, size in self._purgatory_sources.items():
            purgatories[name] = size()
        if count is None and self._log_size_source is not None:
            count = len(sizes)
        return {"partitions": count, "log_sizes": sizes, "purgatories": purgatories}

    def _snapshot(self) -> dict[str, Any]:
        loop = self._loop
        if loop is None or loop.is_closed() or not loop.is_running() or _running_loop() is loop:
            return self._read_state()
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(self._read_state())
            except BaseException as exc:  # noqa: BLE001 - handed to the scraping thread
                future.set_exception(exc)

        loop.call_soon_threadsafe(run)
        try:
            return future.result(timeout=self.callback_timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return {"partitions": None, "log_sizes": [], "purgatories": {}}

    # ---- exposition

    def render(self) -> bytes:
        """The registry in Prometheus text format (what GET /metrics returns)."""
        return generate_latest(self.registry)

    def start_http_server(self, port: int, host: str = "0.0.0.0") -> MetricsServer | None:
        """Serve /metrics on `host:port` in a daemon thread; port 0 means disabled (returns None).
        Called from a coroutine, it binds the running loop for the state callbacks."""
        if not port:
            return None
        if self._loop is None:
            self._loop = _running_loop()
        server, thread = _prom_start_http_server(port, addr=host, registry=self.registry)
        return MetricsServer(server, thread)


def api_name(api: int | str) -> str:
    """ "Produce" for 0 (or "Produce"); an unknown key stays its number as text."""
    if isinstance(api, str):
        return api
    try:
        from odradek.protocol.messages import BY_KEY
    except ImportError:  # pragma: no cover - the protocol layer is always there in a broker
        return str(api)
    definition = BY_KEY.get(api)
    return definition.name if definition is not None else str(api)


def _error_name(error: bool | int | str | None) -> str | None:
    if error is None or error is False:
        return None
    if error is True:
        return "UNKNOWN_SERVER_ERROR"
    if isinstance(error, int):
        if error == 0:
            return None
        try:
            from odradek.protocol.errors import ErrorCode

            return ErrorCode(error).name
        except (ImportError, ValueError):
            return str(error)
    return None if error == "NONE" else error


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
