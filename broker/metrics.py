"""Prometheus metrics for the broker, served on `metrics.port` (0 = disabled).

Each `Metrics` owns its own `CollectorRegistry`, so tests and several brokers in one process never
collide on metric names. Counters and histograms are updated by the broker as things happen
(`observe_request`, `connection_opened`, ...). Values that are cheaper to read than to track — log size
per partition, partition count, purgatory sizes — come from callbacks the broker registers; they are
read once per scrape. Request counts and the latency histogram are plain numbers updated on the loop and
turned into metric families at scrape time (see `_CountsCollector`).

Threading: the HTTP endpoint is prometheus_client's own server, which runs in a daemon thread. The
callbacks read broker state that belongs to the event loop, so when a loop is bound (automatically if
`start_http_server` is called from inside one), a scrape runs the callbacks *on the loop* via
`call_soon_threadsafe` and waits for them (at most `callback_timeout_s`); a scrape from the loop's own
thread, or with no loop, calls them directly. The recording methods belong to the loop's thread.

Metric names (prefix `odradek_`):
  requests_total{api,version}              requests handled (api is the name: Produce, Fetch, ...)
  request_errors_total{api,error}          error codes answered, by Kafka error name: every non-zero code in a
                                           response, top-level, per topic or per partition, counted once per
                                           occurrence (Kafka's RequestMetrics ErrorsPerSec; NONE is not counted)
  request_exceptions_total{api}            requests whose handler raised (the connection was closed)
  request_latency_seconds{api}             histogram of request handling time (LATENCY_BUCKETS: 100 us .. 30 s)
  request_bytes_total{api}                 request frame bytes received
  protocol_errors_total                    connections closed because a request did not parse
  bytes_in_total / bytes_out_total         bytes read from / written to client sockets
  connections_active / connections_accepted_total
  partitions                               partitions hosted on this broker
  log_size_bytes{topic,partition}          size of each partition's log on disk
  purgatory_size{purgatory}                delayed operations waiting (produce, fetch, ...)
  build_info{version,node_id}              always 1
  partitions_leader / _under_replicated / _under_min_isr / _offline, brokers_fenced   (_REPLICATION_GAUGES)
  share_partitions / share_records_in_flight / share_records_acquired / share_sessions /
  share_session_partitions                 share groups on this broker's leaders (broker/share/manager.py;
                                           only with odradek.share.enabled): share-partitions served, their
                                           records in flight (SPEO - SPSO) and those acquired now, open share
                                           sessions and the partitions they name
  share_lock_expiries_total / share_redeliveries_total / share_archived_at_limit_total /
  share_acknowledgements_total{type} / share_session_evictions_total / share_state_write_failures_total
                                           records whose lock ran out, acquisitions of a record delivered
                                           before, records archived at the delivery-count limit, records
                                           acknowledged by type (accept, release, reject, renew, gap),
                                           sessions ended by their connection closing, failed state writes
  share_partition_records_in_flight / _records_acquired / _lock_expiries / _redeliveries /
  _archived_at_limit {group,topic,partition}
                                           the same per share-partition, for at most 200 of them per broker
                                           (MAX_LABELLED_SHARE_PARTITIONS; the last three since this leader
                                           loaded the share-partition); the console's share-group page reads them
  share_partition_member_records_acquired{group,topic,partition,member}
                                           records each member holds now, on those share-partitions, for the
                                           members holding any (at most 1000 series: MAX_LABELLED_SHARE_MEMBERS;
                                           share_partition_member_series_dropped counts the rest)
  share_partition_records_by_delivery_count{group,topic,partition,delivery_count}
                                           records not yet done (available or acquired) by delivery count 1, 2,
                                           3, 4+, on those share-partitions
  topic_bytes_in / topic_messages_in / topic_bytes_out {topic}
                                           Kafka's BrokerTopicMetrics BytesInPerSec, MessagesInPerSec and
                                           BytesOutPerSec per topic, as counters (a rate is the difference of two
                                           scrapes): batches appended as leader, the records in them, and record
                                           bytes answered to consumers and share consumers
                                           (replication/topic_stats.py says where each is counted)
  replication_bytes_out                    record bytes answered to followers' fetches (ReplicationBytesOutPerSec;
                                           not in any topic's bytes_out)
Besides /metrics, the same HTTP server answers the read-only JSON routes the node adds (`add_json_route`):
`/odradek/isr-events` (metadata/isr_history.py), the exact ISR/leader change timeline a console shows. They
are read on the loop like the state callbacks, bounded by their handler, and GET only.

plus the cluster health gauges of broker/health_metrics.py (quorum, active controller, log directories,
consumer group lag, transactions), registered by the node once it is built, and process_* and python_gc_*
from prometheus_client's standard collectors.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import socket
import threading
import urllib.parse
from wsgiref.simple_server import WSGIRequestHandler, make_server
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    Info,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from .. import __version__
from odradek.replication.topic_stats import BrokerTopicStats

__all__ = ["Metrics", "MetricsServer", "LATENCY_BUCKETS", "CONTENT_TYPE", "api_name", "TopicStatsCollector",
           "ShareMembersCollector"]

_T = TypeVar("_T")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# Request latencies span sub-millisecond metadata calls and acks=1 produces on a loopback (100-500 us) to
# long-polling fetches (fetch.max.wait.ms, 500 ms by default) and 30 s admin waits: roughly 1-2.5-5 per decade
# from 100 us, so that a p99 read from the buckets is within a factor of 2.5 wherever it falls.
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0)

LogSizeSource = Callable[[], Iterable[tuple[str, int, int]]]  # -> (topic, partition, size_bytes)
PartitionCountSource = Callable[[], int]
PurgatorySource = Callable[[], Mapping[str, int]]  # -> {purgatory name: waiting operations}
# A JSON route: the query's parameters -> the body (run on the loop); ValueError -> 400 with its message.
JsonRoute = Callable[[Mapping[str, str]], Any]


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
            *(GaugeMetricFamily(name, text) for name, text in _REPLICATION_GAUGES.values()),
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
        replication = snapshot["replication"]
        for key, (name, text) in _REPLICATION_GAUGES.items():
            gauge = GaugeMetricFamily(name, text)
            if key in replication:
                gauge.add_metric([], replication[key])
            yield gauge


# What set_replication_source's callback reports (Kafka's ReplicaManager and controller gauges).
_REPLICATION_GAUGES = {
    "leaders": ("odradek_partitions_leader", "Partitions led by this broker"),
    "under_replicated": ("odradek_partitions_under_replicated",
                         "Partitions led by this broker whose ISR is smaller than their replicas"),
    "under_min_isr": ("odradek_partitions_under_min_isr",
                      "Partitions led by this broker whose ISR is smaller than min.insync.replicas"),
    "offline": ("odradek_partitions_offline", "Partitions of the cluster without a leader (from the metadata image)"),
    "fenced_brokers": ("odradek_brokers_fenced", "Registered brokers the controller has fenced"),
    # KIP-966: leaderless partitions waiting for an eligible replica to return, and those with none left
    # (every replica restarted after an unclean shutdown): only an unclean election brings them back.
    "waiting_for_eligible": ("odradek_partitions_waiting_for_eligible_replica",
                             "Partitions without a leader or ISR whose eligible leader replicas (ELR) are all away"),
    "no_eligible_leader": ("odradek_partitions_without_eligible_replica",
                           "Partitions without a leader, ISR or eligible replica: they wait for an unclean election"),
    # Kafka's OfflineLogDirectoryCount and OfflineReplicaCount (broker/log_dirs.py).
    "offline_log_dirs": ("odradek_log_directories_offline", "Log directories of this broker that are offline"),
    "offline_replicas": ("odradek_replicas_offline",
                         "Replicas this broker cannot host because their log directory is offline"),
    # KIP-392 (counts since start): consumer reads this broker served as a follower, and consumer fetches it
    # answered as leader with a preferred read replica.
    "follower_consumer_reads": ("odradek_fetch_follower_reads", "Consumer fetch reads with records served as follower"),
    "preferred_replica_answers": ("odradek_fetch_preferred_replica_answers",
                                  "Consumer fetches answered with a preferred read replica"),
    # Parked follower fetches this leader answered early because it became leader of a partition they
    # did not carry (replication/replica_manager.py, `_expect_followers`): the follower asks again at once.
    "follower_fetches_woken": ("odradek_fetch_follower_fetches_woken",
                               "Parked follower fetches answered early for a new leadership"),
    # Partitions of the current metadata image this broker has still to apply (a large update, in slices:
    # replication/hosting.py, broker/hosting_driver.py).
    "partitions_pending": ("odradek_metadata_partitions_pending",
                           "Partitions of the current metadata image not yet applied on this broker"),
    # Objects kept out of the cyclic collector's full walks (broker/heap.py: frozen after large updates).
    "gc_frozen_objects": ("odradek_gc_frozen_objects",
                          "Objects frozen out of the garbage collector's full collections (0: thawed)"),
    # The controller quorum as this node sees it (broker/quorum.py QuorumLeaderWatch, node.Membership).
    "quorum_leader_known": ("odradek_quorum_leader_known", "1 while this node knows a controller quorum leader"),
    "quorum_leader_id": ("odradek_quorum_leader_id", "The controller quorum leader this node knows, -1 when none"),
    "quorum_epoch": ("odradek_quorum_epoch", "The controller quorum epoch this node is in"),
    "quorum_seconds_without_leader": ("odradek_quorum_seconds_without_leader",
                                      "Seconds since this node last knew a controller quorum leader (0 while it knows one)"),
    "quorum_controller_contact_age_seconds": ("odradek_quorum_controller_contact_age_seconds",
                                              "Seconds since the active controller last answered this broker's heartbeat"),
}


class TopicStatsCollector(Collector):
    """The per-topic traffic counters of replication/topic_stats.py (Kafka's BrokerTopicMetrics). The counts
    are plain integers the loop adds to; a scrape copies them without running on the loop (each read is
    atomic under the GIL; a topic added during the copy appears at the next scrape)."""

    def __init__(self, stats: BrokerTopicStats) -> None:
        self.stats = stats

    def describe(self) -> list[Any]:
        return list(self._families())

    def collect(self) -> Iterable[Any]:
        return self._families(self.stats.snapshot(), self.stats.replication_bytes_out)

    @staticmethod
    def _families(rows: list[tuple[str, int, int, int]] | None = None, replication_out: int = 0) -> list[Any]:
        bytes_in = CounterMetricFamily("odradek_topic_bytes_in", "Record batch bytes appended by producers, by topic",
                                       labels=["topic"])
        messages_in = CounterMetricFamily("odradek_topic_messages_in", "Records appended by producers, by topic",
                                          labels=["topic"])
        bytes_out = CounterMetricFamily("odradek_topic_bytes_out",
                                        "Record bytes answered to consumers and share consumers, by topic",
                                        labels=["topic"])
        for topic, n_in, messages, n_out in sorted(rows or ()):
            bytes_in.add_metric([topic], n_in)
            messages_in.add_metric([topic], messages)
            bytes_out.add_metric([topic], n_out)
        replication = CounterMetricFamily("odradek_replication_bytes_out",
                                          "Record bytes answered to followers' fetches (in no topic's bytes_out)",
                                          value=replication_out)
        return [bytes_in, messages_in, bytes_out, replication]


class _RequestStats:
    """Counts for one (api, version): requests, request bytes, and the latency histogram's buckets
    (not cumulative here; the last one is +Inf)."""

    __slots__ = ("name", "version", "count", "bytes", "latency_sum", "buckets")

    def __init__(self, name: str, version: str) -> None:
        self.name = name
        self.version = version
        self.count = 0
        self.bytes = 0
        self.latency_sum = 0.0
        self.buckets = [0] * (len(LATENCY_BUCKETS) + 1)


class _CountsCollector(Collector):
    """The counters and the latency histogram, built from `Metrics`' plain numbers at scrape time.

    A scrape from the HTTP thread reads numbers the event loop updates: each read is atomic under the GIL,
    but a scrape may see a request counted in `requests_total` and not yet in the histogram (one request's
    worth of skew, gone by the next scrape)."""

    def __init__(self, owner: Metrics) -> None:
        self._owner = owner

    def collect(self) -> Iterable[Any]:
        m = self._owner
        stats = list(m._requests.values())
        requests = CounterMetricFamily("odradek_requests", "Requests handled, by API and version", labels=["api", "version"])
        sizes: dict[str, int] = {}
        latency: dict[str, tuple[list[int], float]] = {}
        for s in stats:
            requests.add_metric([s.name, s.version], s.count)
            sizes[s.name] = sizes.get(s.name, 0) + s.bytes
            buckets, total = latency.get(s.name, ([0] * len(s.buckets), 0.0))
            latency[s.name] = ([a + b for a, b in zip(buckets, s.buckets)], total + s.latency_sum)
        yield requests
        errors = CounterMetricFamily(
            "odradek_request_errors", "Error codes answered (each occurrence, per partition too), by API and error",
            labels=["api", "error"],
        )
        counts: dict[tuple[str, str], int] = {}
        for (api, error), n in list(m._request_errors.items()):
            key = (api_name(api), _error_name(error) or "NONE")
            counts[key] = counts.get(key, 0) + n
        for (api, error), n in counts.items():
            errors.add_metric([api, error], n)
        yield errors
        exceptions = CounterMetricFamily(
            "odradek_request_exceptions", "Requests whose handler raised (the connection was closed), by API",
            labels=["api"],
        )
        for api, n in list(m._request_exceptions.items()):
            exceptions.add_metric([api_name(api)], n)
        yield exceptions
        histogram = HistogramMetricFamily(
            "odradek_request_latency_seconds", "Time from request received to response queued", labels=["api"]
        )
        for name, (buckets, total) in latency.items():
            cumulative, running = [], 0
            for bound, n in zip((*(floatToGoString(b) for b in LATENCY_BUCKETS), "+Inf"), buckets):
                running += n
                cumulative.append((bound, running))
            histogram.add_metric([name], cumulative, total)
        yield histogram
        request_bytes = CounterMetricFamily("odradek_request_bytes", "Request frame bytes received, by API", labels=["api"])
        for name, n in sizes.items():
            request_bytes.add_metric([name], n)
        yield request_bytes
        yield CounterMetricFamily(
            "odradek_protocol_errors", "Connections closed because a request did not parse", value=m.protocol_errors_total
        )
        yield CounterMetricFamily("odradek_bytes_in", "Bytes read from client connections", value=m.bytes_in_total)
        yield CounterMetricFamily("odradek_bytes_out", "Bytes written to client connections", value=m.bytes_out_total)
        yield GaugeMetricFamily("odradek_connections_active", "Client connections open now", value=m.connections_active_now)
        yield CounterMetricFamily(
            "odradek_connections_accepted", "Client connections accepted", value=m.connections_accepted_total
        )


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
        self._replication_source: Callable[[], dict[str, float]] | None = None
        self._purgatory_sources: dict[str, Callable[[], int]] = {}
        self._purgatory_source: PurgatorySource | None = None
        self._json_routes: dict[str, JsonRoute] = {}
        ns = "odradek"
        reg = self.registry

        # Request, byte and connection counts are plain numbers updated on the event loop (one attribute
        # add each, no lock: prometheus_client's Counter.inc takes a threading.Lock per call, which was
        # 3-6 % of the broker's CPU under small produce requests). `_CountsCollector` turns them into
        # metric families at scrape time.
        self._requests: dict[tuple[int | str, int], _RequestStats] = {}
        # By (API key or name, error code or name) as recorded; names are resolved at scrape time.
        self._request_errors: dict[tuple[int | str, int | str], int] = {}
        self._request_exceptions: dict[int | str, int] = {}
        self.protocol_errors_total = 0
        self.bytes_in_total = 0
        self.bytes_out_total = 0
        self.connections_active_now = 0
        self.connections_accepted_total = 0
        reg.register(_CountsCollector(self))
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

        `api` is the API key or its name ("Produce"); labels always carry the name. `error` is True for a
        handler that raised (counted in request_exceptions_total: the connection is closed, no code is
        answered), or one error code the response carried, a Kafka error name ("NOT_LEADER_OR_FOLLOWER") or
        code; None / False / 0 / "NONE" for neither. The codes of a whole response go to `count_errors`."""
        stats = self._requests.get((api, version))
        if stats is None:
            stats = self._requests[(api, version)] = _RequestStats(api_name(api), str(version))
        stats.count += 1
        stats.latency_sum += latency_s
        stats.buckets[bisect_left(LATENCY_BUCKETS, latency_s)] += 1
        if request_bytes:
            stats.bytes += request_bytes
        if error:
            if error is True:
                self._request_exceptions[api] = self._request_exceptions.get(api, 0) + 1
            else:
                self.record_error(api, error)

    def protocol_error(self) -> None:
        """A connection was closed because its bytes did not parse as a Kafka request."""
        self.protocol_errors_total += 1

    def record_error(self, api: int | str, error: int | str) -> None:
        """Count one error code (or name) answered by `api`; 0 and "NONE" are not errors."""
        if error and error != "NONE":
            key = (api, error)
            self._request_errors[key] = self._request_errors.get(key, 0) + 1

    def count_errors(self, api: int | str, codes: Iterable[int]) -> None:
        """Count each non-zero code of one response (`codes` may repeat one: each occurrence counts)."""
        errors = self._request_errors
        for code in codes:
            if code:
                key = (api, code)
                errors[key] = errors.get(key, 0) + 1

    def add_bytes_in(self, n: int) -> None:
        self.bytes_in_total += n

    def add_bytes_out(self, n: int) -> None:
        self.bytes_out_total += n

    def connection_opened(self) -> None:
        self.connections_accepted_total += 1
        self.connections_active_now += 1

    def connection_closed(self) -> None:
        self.connections_active_now -= 1

    # ---- state callbacks (called once per scrape, on the bound loop)

    def set_log_size_source(self, source: LogSizeSource | None) -> None:
        """`source()` returns `(topic, partition, size_bytes)` for every hosted partition."""
        self._log_size_source = source

    def set_partition_count_source(self, source: PartitionCountSource | None) -> None:
        self._partition_count_source = source

    def set_replication_source(self, source: Callable[[], dict[str, float]] | None) -> None:
        """`source()` returns counts by the keys of _REPLICATION_GAUGES (leaders, under_replicated, ...)."""
        self._replication_source = source

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
        replication = dict(self._replication_source()) if self._replication_source else {}
        return {"partitions": count, "log_sizes": sizes, "purgatories": purgatories, "replication": replication}

    def _snapshot(self) -> dict[str, Any]:
        return self.read_on_loop(self._read_state, {
            "partitions": None, "log_sizes": [], "purgatories": {}, "replication": {}})

    def read_on_loop(self, read: Callable[[], _T], default: _T) -> _T:
        """`read()` run on the bound loop (the broker's state belongs to it) and its result handed back to
        the scraping thread; `default` if the loop does not run it within `callback_timeout_s` (a loop that
        busy is itself the news: the scrape still answers). Called on the loop's thread, or with no loop
        bound, `read()` runs at once."""
        loop = self._loop
        if loop is None or loop.is_closed() or not loop.is_running() or _running_loop() is loop:
            return read()
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()

        def run() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(read())
            except BaseException as exc:  # noqa: BLE001 - handed to the scraping thread
                future.set_exception(exc)

        loop.call_soon_threadsafe(run)
        try:
            return future.result(timeout=self.callback_timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return default

    # ---- exposition

    def render(self) -> bytes:
        """The registry in Prometheus text format (what GET /metrics returns)."""
        return generate_latest(self.registry)

    def add_json_route(self, path: str, route: JsonRoute) -> None:
        """Answer GET `path` with `route(query parameters)` as JSON, run on the bound loop (see the module
        docstring); a ValueError it raises is a 400 with its message."""
        self._json_routes[path] = route

    def wsgi_app(self) -> Callable[..., Iterable[bytes]]:
        """/metrics (prometheus_client's own app: content negotiation, gzip) plus the JSON routes."""
        metrics_app = make_wsgi_app(self.registry)
        routes = self._json_routes

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            route = routes.get(environ.get("PATH_INFO", ""))
            if route is None:
                return metrics_app(environ, start_response)
            if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
                return _json(start_response, "405 Method Not Allowed", {"error": "GET only"})
            busy = object()
            try:
                query = dict(urllib.parse.parse_qsl(environ.get("QUERY_STRING", ""), max_num_fields=20))
                body = self.read_on_loop(lambda: route(query), busy)
            except ValueError as e:
                return _json(start_response, "400 Bad Request", {"error": str(e)})
            if body is busy:
                return _json(start_response, "503 Service Unavailable",
                             {"error": f"the broker's event loop did not answer within {self.callback_timeout_s} s"})
            return _json(start_response, "200 OK", body)

        return app

    def start_http_server(self, port: int, host: str = "0.0.0.0") -> MetricsServer | None:
        """Serve /metrics and the JSON routes on `host:port` in a daemon thread (wsgiref's threading server,
        as prometheus_client's start_http_server runs it); port 0 means disabled (returns None). Called from a
        coroutine, it binds the running loop for the state callbacks."""
        if not port:
            return None
        if self._loop is None:
            self._loop = _running_loop()

        class Server(ThreadingWSGIServer):
            pass

        family, _, _, _, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        Server.address_family = family
        server = make_server(str(sockaddr[0]), port, self.wsgi_app(), Server, handler_class=_QuietHandler)
        thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
        thread.start()
        return MetricsServer(server, thread)


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


def _json(start_response: Callable[..., Any], status: str, body: Any) -> list[bytes]:
    data = json.dumps(body, separators=(",", ":")).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data))),
                            ("Cache-Control", "no-store")])
    return [data]


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


class ShareGroupsCollector(Collector):
    """The share_* families of the module docstring, from `figures()` of the share-partition manager read on
    the event loop at each scrape (`source` is broker/share/manager.SharePartitionManager.figures)."""

    _GAUGES = (
        ("odradek_share_partitions", "share_partitions", "Share-partitions (group, partition) served by this leader"),
        ("odradek_share_records_in_flight", "in_flight", "Records in flight for share groups (SPEO - SPSO)"),
        ("odradek_share_records_acquired", "acquired", "Records acquired by share-group members now"),
        ("odradek_share_sessions", "sessions", "Open share sessions on this broker"),
        ("odradek_share_session_partitions", "session_partitions", "Partitions named by the open share sessions"),
    )
    _COUNTERS = (
        ("odradek_share_lock_expiries", "lock_expiries", "Acquired records whose lock expired"),
        ("odradek_share_redeliveries", "redeliveries", "Acquisitions of records delivered before"),
        ("odradek_share_archived_at_limit", "archived_at_limit", "Records archived at the delivery-count limit"),
        ("odradek_share_session_evictions", "session_evictions", "Share sessions ended by their connection closing"),
        ("odradek_share_state_write_failures", "write_failures", "Share-partition state writes that failed"),
        ("odradek_share_dlq_records", "dlq_records", "Records copied to share groups' dead-letter topics"),
        ("odradek_share_dlq_failures", "dlq_failures",
         "Dead-letter writes that failed (their records archived without a DLQ copy)"),
    )

    # Per share-partition (group, topic, partition), for the first MAX_LABELLED_SHARE_PARTITIONS of this leader
    # (broker/share/manager.py): gauges, since the last three start from 0 when a new leader loads the state.
    _PER_PARTITION = (
        ("odradek_share_partition_records_in_flight", "in_flight", "Records in flight of one share-partition"),
        ("odradek_share_partition_records_acquired", "acquired", "Records of one share-partition acquired now"),
        ("odradek_share_partition_lock_expiries", "lock_expiries",
         "Lock expiries on one share-partition since this leader loaded it"),
        ("odradek_share_partition_redeliveries", "redeliveries",
         "Redeliveries on one share-partition since this leader loaded it"),
        ("odradek_share_partition_archived_at_limit", "archived_at_limit",
         "Records of one share-partition archived at the delivery-count limit since this leader loaded it"),
        ("odradek_share_partition_dlq_records", "dlq_records",
         "Records of one share-partition copied to its group's dead-letter topic since this leader loaded it"),
    )

    def __init__(self, source: Callable[[], dict[str, Any]], metrics: Metrics) -> None:
        self.source = source
        self.metrics = metrics

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        figures = self.metrics.read_on_loop(self.source, None)
        if figures is None:
            return []
        out: list[Any] = []
        for name, key, doc in self._GAUGES:
            out.append(GaugeMetricFamily(name, doc, value=figures[key]))
        for name, key, doc in self._COUNTERS:
            out.append(CounterMetricFamily(name, doc, value=figures[key]))
        acks = CounterMetricFamily("odradek_share_acknowledgements", "Records acknowledged, by type", labels=["type"])
        for kind, n in sorted(figures["acknowledgements"].items()):
            acks.add_metric([kind], n)
        out.append(acks)
        labels = ["group", "topic", "partition"]
        families = {key: GaugeMetricFamily(name, doc, labels=labels) for name, key, doc in self._PER_PARTITION}
        for group_id, topic, partition, values in figures.get("per_partition", ()):
            for key, family in families.items():
                family.add_metric([group_id, topic, str(partition)], values[key])
        out.extend(families.values())
        return out


class ShareMembersCollector(Collector):
    """Per-member and per-delivery-count share figures (the module docstring), from `figures()` of the
    share-partition manager read on the event loop at each scrape (broker/share/manager.py member_figures).
    Only this collector labels by member."""

    def __init__(self, source: Callable[[], dict[str, Any]], metrics: Metrics) -> None:
        self.source = source
        self.metrics = metrics

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        figures = self.metrics.read_on_loop(self.source, None)
        if figures is None:
            return []
        members = GaugeMetricFamily("odradek_share_partition_member_records_acquired",
                                    "Records of one share-partition acquired by one member now",
                                    labels=["group", "topic", "partition", "member"])
        for group_id, topic, partition, member, n in figures["per_member"]:
            members.add_metric([group_id, topic, str(partition), member], n)
        delivery = GaugeMetricFamily("odradek_share_partition_records_by_delivery_count",
                                     "Records of one share-partition not yet done (available or acquired), by delivery count",
                                     labels=["group", "topic", "partition", "delivery_count"])
        for group_id, topic, partition, buckets in figures["delivery_counts"]:
            for bucket, n in buckets.items():
                delivery.add_metric([group_id, topic, str(partition), bucket], n)
        dropped = GaugeMetricFamily("odradek_share_partition_member_series_dropped",
                                    "Member series of acquired records left out by the bound",
                                    value=figures["members_dropped"])
        return [members, delivery, dropped]
