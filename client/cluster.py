"""The shared client core: bootstrap, the metadata cache, one connection per broker, retries.

Theory of operation
-------------------
`KafkaClient.start()` asks each bootstrap server in turn for Metadata until one answers; bootstrap
connections have the negative node ids -1, -2, ... and are dropped once real node ids are known.
`ClusterMetadata` holds the latest answer: brokers, the controller, and per topic its partitions with
leader, leader epoch, replicas and ISR.

The cache tracks the topics a producer or consumer asked about (`add_topics`), or every topic
(`track_all_topics`, for pattern subscriptions and the admin client). It refreshes when it is older than
`metadata_max_age_ms`, and sooner when someone calls `request_update()`: a partition error with the
`invalid_metadata` flag (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE,
FENCED_LEADER_EPOCH, ...) or a broken connection. Concurrent refreshes coalesce into one request.

`send(node_id, build)` sends to one broker over its connection (opened on demand, one per node);
`build` is a request or a function of the negotiated version returning one, so a caller can fill in the
fields of whichever version the broker speaks. `call(fn)` retries `fn` for retriable errors with
exponential backoff (`retry_backoff_ms` doubling up to `retry_backoff_max_ms`, with jitter), refreshing
metadata first when the error says metadata is stale, until `default_api_timeout_ms` has passed; any
other error is raised at once.

Group and transaction coordinators are looked up with FindCoordinator and cached by key until
`invalidate_coordinator` (after NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE).
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, TypeVar

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import REQUESTS

from .common import TopicPartition
from .config import ClientConfig, parse_bootstrap
from .connection import BrokerConnection, ClientSecurity
from .errors import (
    ClientClosedError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NoBrokersAvailable,
    OdradekError,
    UnsupportedVersionError,
)

T = TypeVar("T")

METADATA = 3
FIND_COORDINATOR = 10

COORDINATOR_GROUP = 0
COORDINATOR_TRANSACTION = 1


@dataclass(slots=True)
class BrokerInfo:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int = -1
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    offline_replicas: list[int] = field(default_factory=list)
    error: ErrorCode = ErrorCode.NONE
    # KIP-966, from DescribeTopicPartitions (Metadata does not carry them): replicas out of the ISR that
    # may still be elected, and the last ones known eligible once none is.
    elr: list[int] = field(default_factory=list)
    last_known_elr: list[int] = field(default_factory=list)


@dataclass(slots=True)
class TopicInfo:
    name: str
    partitions: dict[int, PartitionInfo]
    topic_id: Any = None
    is_internal: bool = False
    error: ErrorCode = ErrorCode.NONE


class ClusterMetadata:
    """A snapshot of brokers and topics, replaced piecewise by each Metadata response."""

    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.topic_errors: dict[str, ErrorCode] = {}
        self.cluster_id: str | None = None
        self.controller_id: int = -1
        self.updated_at = 0.0
        self.version = 0

    def update(self, response: Any, requested: list[str] | None) -> None:
        self.brokers = {b.node_id: BrokerInfo(b.node_id, b.host, b.port, b.rack) for b in response.brokers}
        self.cluster_id = response.cluster_id
        self.controller_id = response.controller_id
        if requested is None:
            self.topics = {}
            self.topic_errors = {}
        for t in response.topics:
            if t.name is None:
                continue
            code = ErrorCode.for_code(t.error_code)
            if code == ErrorCode.NONE:
                parts = {
                    p.partition_index: PartitionInfo(
                        t.name, p.partition_index, p.leader_id, p.leader_epoch, list(p.replica_nodes),
                        list(p.isr_nodes), list(p.offline_replicas), ErrorCode.for_code(p.error_code),
                    )
                    for p in t.partitions
                }
                self.topics[t.name] = TopicInfo(t.name, parts, t.topic_id, t.is_internal)
                self.topic_errors.pop(t.name, None)
            else:
                self.topic_errors[t.name] = code
                if code in (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_TOPIC_EXCEPTION,
                            ErrorCode.TOPIC_AUTHORIZATION_FAILED):
                    self.topics.pop(t.name, None)
        self.updated_at = time.monotonic()
        self.version += 1

    def partitions_for(self, topic: str) -> list[int] | None:
        info = self.topics.get(topic)
        return None if info is None else sorted(info.partitions)

    def available_partitions(self, topic: str) -> list[int]:
        info = self.topics.get(topic)
        if info is None:
            return []
        return sorted(p for p, pi in info.partitions.items() if pi.leader >= 0)

    def leader_for(self, tp: TopicPartition) -> int | None:
        info = self.topics.get(tp.topic)
        if info is None:
            return None
        p = info.partitions.get(tp.partition)
        if p is None or p.leader < 0:
            return None
        return p.leader

    def partition(self, tp: TopicPartition) -> PartitionInfo | None:
        info = self.topics.get(tp.topic)
        return None if info is None else info.partitions.get(tp.partition)


# How long a broker that could not be connected to is passed over by least_loaded_node.
UNREACHABLE_BACKOFF_S = 5.0


class KafkaClient:
    def __init__(self, config: ClientConfig | None = None, **overrides: Any):
        config = config if config is not None else ClientConfig()
        if overrides:
            config = config.replace(**overrides)
        self.config = config
        self.cluster = ClusterMetadata()
        self._bootstrap = parse_bootstrap(config.bootstrap_servers)
        self._security = ClientSecurity.from_config(config)
        self._conns: dict[int, BrokerConnection] = {}
        self._connect_locks: dict[int, asyncio.Lock] = {}
        self._connect_failed_at: dict[int, float] = {}  # node id -> time.monotonic() of its last failed connect
        self._topics: set[str] = set()
        self._all_topics = False
        self._refresh: asyncio.Task | None = None
        self._need_update = asyncio.Event()
        self._updated = asyncio.Event()
        self._refresher: asyncio.Task | None = None
        self._coordinators: dict[tuple[int, str], int] = {}
        self._closed = False
        self._started = False
        self.allow_auto_create_topics = config.allow_auto_create_topics

    # ------------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> "KafkaClient":
        if self._started:
            return self
        await self.call(lambda: self._refresh_once(bootstrap=True), what="bootstrap",
                        timeout_ms=self.config.default_api_timeout_ms)
        self._started = True
        self._refresher = asyncio.get_running_loop().create_task(self._refresh_loop())
        return self

    async def close(self) -> None:
        self._closed = True
        for task in (self._refresher, self._refresh):
            if task is not None and not task.done():
                task.cancel()
        for task in (self._refresher, self._refresh):
            if task is not None:
                try:
                    await task
                except BaseException:
                    pass
        conns = list(self._conns.values())
        self._conns.clear()
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

    async def __aenter__(self) -> "KafkaClient":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # ------------------------------------------------------------------------------------------ connections

    @property
    def bootstrap_nodes(self) -> list[int]:
        """The node ids `send` reaches each bootstrap address by (-1, -2, ...), usable before `start`."""
        return [-(i + 1) for i in range(len(self._bootstrap))]

    def _address(self, node_id: int) -> tuple[str, int]:
        if node_id < 0:
            host, port = self._bootstrap[(-node_id - 1) % len(self._bootstrap)]
            return host, port
        broker = self.cluster.brokers.get(node_id)
        if broker is None:
            raise KafkaConnectionError(f"broker {node_id} is not in the cluster metadata")
        return broker.host, broker.port

    async def connection(self, node_id: int) -> BrokerConnection:
        if self._closed:
            raise ClientClosedError("client is closed")
        conn = self._conns.get(node_id)
        if conn is not None and conn.connected:
            return conn
        lock = self._connect_locks.setdefault(node_id, asyncio.Lock())
        async with lock:
            conn = self._conns.get(node_id)
            if conn is not None and conn.connected:
                return conn
            host, port = self._address(node_id)
            conn = BrokerConnection(
                host, port, node_id=node_id, client_id=self.config.client_id,
                request_timeout_ms=self.config.request_timeout_ms,
                connect_timeout_ms=self.config.connect_timeout_ms, security=self._security,
            )
            old = self._conns.get(node_id)
            if old is not None and not old._closed:  # a SASL session near its end (KIP-368): replaced
                stale = old
                asyncio.get_running_loop().call_later(self.config.request_timeout_ms / 1000,
                                                      lambda: asyncio.ensure_future(stale.close()))
            try:
                await conn.connect()
            except KafkaConnectionError:
                self._connect_failed_at[node_id] = time.monotonic()
                raise
            self._connect_failed_at.pop(node_id, None)
            self._conns[node_id] = conn
            return conn

    def least_loaded_node(self) -> int:
        """A connected broker with the fewest requests in flight; else a random known broker, leaving out those
        that failed to connect within UNREACHABLE_BACKOFF_S while another remains (as Kafka's leastLoadedNode
        skips nodes in reconnect backoff): a dead broker stays in the metadata until its session times out,
        and a request that is not for it must not wait on it."""
        best = None
        for node_id, conn in self._conns.items():
            if conn.connected and (node_id >= 0 or not self.cluster.brokers):
                if best is None or conn.in_flight < best[0]:
                    best = (conn.in_flight, node_id)
        if best is not None:
            return best[1]
        if self.cluster.brokers:
            now = time.monotonic()
            candidates = [n for n in self.cluster.brokers
                          if now - self._connect_failed_at.get(n, -UNREACHABLE_BACKOFF_S) >= UNREACHABLE_BACKOFF_S]
            return random.choice(candidates or list(self.cluster.brokers))
        return -1

    async def send(
        self,
        node_id: int,
        build: Any,
        *,
        api_key: int | None = None,
        timeout_ms: int | None = None,
        expect_response: bool = True,
        max_version: int | None = None,
        min_version: int | None = None,
    ) -> Any:
        """Send to broker `node_id`. `build` is a request, or (with `api_key`) a function version -> request."""
        conn = await self.connection(node_id)
        key = build.API_KEY if api_key is None else api_key
        version = conn.version_for(key, max_version, min_version)
        request = build(version) if callable(build) and api_key is not None else build
        try:
            return await conn.send(request, version=version, timeout_ms=timeout_ms, expect_response=expect_response)
        except KafkaConnectionError:
            self._drop(node_id, conn)
            self.request_update()
            raise

    def _drop(self, node_id: int, conn: BrokerConnection) -> None:
        if self._conns.get(node_id) is conn:
            del self._conns[node_id]

    async def send_any(self, build: Any, **kw: Any) -> Any:
        return await self.send(self.least_loaded_node(), build, **kw)

    async def api_versions(self, node_id: int | None = None) -> dict[int, tuple[int, int]]:
        conn = await self.connection(self.least_loaded_node() if node_id is None else node_id)
        return dict(conn.api_versions)

    # ------------------------------------------------------------------------------------------ retries

    def backoff_s(self, attempt: int) -> float:
        base = self.config.retry_backoff_ms * (2 ** min(attempt, 20))
        delay = min(base, self.config.retry_backoff_max_ms)
        return delay * random.uniform(0.8, 1.2) / 1000

    async def call(
        self,
        fn: Callable[[], Awaitable[T]],
        *,
        what: str = "request",
        timeout_ms: int | None = None,
    ) -> T:
        """Run `fn`, retrying retriable errors with backoff until the deadline; raise the last error."""
        timeout_ms = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000
        attempt = 0
        while True:
            try:
                return await fn()
            except OdradekError as e:
                if self._closed:
                    raise ClientClosedError("client is closed") from None
                if not e.retriable:
                    raise
                delay = self.backoff_s(attempt)
                if time.monotonic() + delay >= deadline:
                    raise
                attempt += 1
                if e.invalid_metadata:
                    self.request_update()
                await asyncio.sleep(delay)

    # ------------------------------------------------------------------------------------------ metadata

    def add_topics(self, topics: list[str] | set[str] | tuple[str, ...]) -> bool:
        """Track `topics`; True when some were new (the caller may then want `refresh_metadata`)."""
        new = set(topics) - self._topics
        self._topics |= new
        if new:
            self.request_update()
        return bool(new)

    def set_topics(self, topics: set[str]) -> None:
        if set(topics) != self._topics:
            self._topics = set(topics)
            self.request_update()

    def track_all_topics(self, enabled: bool = True) -> None:
        self._all_topics = enabled

    def request_update(self) -> None:
        self._need_update.set()

    async def refresh_metadata(self, topics: list[str] | None = None) -> ClusterMetadata:
        """Refresh now (joining a refresh under way when `topics` is None); retries until the deadline."""
        if topics is not None:
            self._topics |= set(topics)
        await self.call(self._refresh_shared, what="metadata")
        return self.cluster

    async def _refresh_shared(self) -> None:
        task = self._refresh
        if task is None or task.done():
            task = self._refresh = asyncio.get_running_loop().create_task(self._refresh_once())
        await asyncio.shield(task)

    async def _refresh_once(self, *, bootstrap: bool = False) -> None:
        self._need_update.clear()
        requested = None if self._all_topics else sorted(self._topics)
        cls = REQUESTS[METADATA]

        def build(version: int) -> Any:
            topics: list | None
            if requested is None:
                topics = None if version >= 1 else []
            else:
                topics = [cls.MetadataRequestTopic(name=t) for t in requested]
            return cls(topics=topics, allow_auto_topic_creation=self.allow_auto_create_topics)

        candidates: list[int] = []
        if not bootstrap and self.cluster.brokers:
            first = self.least_loaded_node()
            candidates = [first] + [n for n in self.cluster.brokers if n != first]
        candidates += [-(i + 1) for i in range(len(self._bootstrap))]
        errors = []
        for node_id in candidates:
            try:
                response = await self.send(node_id, build, api_key=METADATA)
            except (KafkaConnectionError, KafkaTimeoutError, UnsupportedVersionError) as e:
                errors.append(e)
                continue
            self.cluster.update(response, requested)
            self._updated.set()
            self._updated = asyncio.Event()
            if bootstrap or node_id < 0:
                for nid, conn in list(self._conns.items()):
                    if nid < 0:
                        self._drop(nid, conn)
                        asyncio.get_running_loop().create_task(conn.close())
            return
        servers = ", ".join(f"{h}:{p}" for h, p in self._bootstrap)
        detail = str(errors[-1]) if errors else "no brokers known"
        failure = NoBrokersAvailable(f"no broker reachable (bootstrap {servers}): {detail}",
                                     refused=bool(errors) and all(getattr(e, "refused", False) for e in errors))
        if bootstrap and failure.refused and not self.config.bootstrap_retry_refused:
            failure.retriable = False  # nothing listens at any bootstrap address: say so now
        raise failure

    async def _refresh_loop(self) -> None:
        min_interval = self.config.retry_backoff_ms / 1000
        while not self._closed:
            age = time.monotonic() - self.cluster.updated_at
            wait = max(self.config.metadata_max_age_ms / 1000 - age, 0)
            try:
                await asyncio.wait_for(self._need_update.wait(), wait)
            except asyncio.TimeoutError:
                pass
            since = time.monotonic() - self.cluster.updated_at
            if since < min_interval:
                await asyncio.sleep(min_interval - since)
            try:
                await self._refresh_shared()
            except asyncio.CancelledError:
                raise
            except Exception:
                await asyncio.sleep(self.backoff_s(3))

    async def wait_for_update(self, timeout_s: float) -> None:
        self.request_update()
        event = self._updated
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except asyncio.TimeoutError:
            pass

    async def partitions_for(self, topic: str, *, timeout_ms: int | None = None, must_exist: bool = False) -> list[int]:
        """The partitions of `topic`, waiting (and auto-creating, if allowed) until metadata knows it.

        With `must_exist`, a topic the broker does not know fails at once instead of being waited for.
        """
        parts = self.cluster.partitions_for(topic)
        if parts:
            return parts
        self._topics.add(topic)
        timeout_ms = self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000
        attempt = 0
        while True:
            await self.refresh_metadata()
            parts = self.cluster.partitions_for(topic)
            if parts:
                return parts
            error = self.cluster.topic_errors.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            if must_exist and error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise KafkaError(error, "no such topic", context=f"topic {topic!r}", retriable=False)
            if not error.retriable or time.monotonic() > deadline:
                raise KafkaError(error, context=f"topic {topic!r}")
            await asyncio.sleep(self.backoff_s(attempt))
            attempt += 1

    async def leader_for(self, tp: TopicPartition, *, timeout_ms: int | None = None) -> int:
        leader = self.cluster.leader_for(tp)
        if leader is not None:
            return leader

        async def attempt() -> int:
            await self.refresh_metadata([tp.topic])
            node = self.cluster.leader_for(tp)
            if node is None:
                if tp.topic in self.cluster.topics and tp.partition not in self.cluster.topics[tp.topic].partitions:
                    count = len(self.cluster.topics[tp.topic].partitions)
                    raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp.topic!r} has {count} partitions",
                                     context=str(tp), retriable=False)
                error = self.cluster.topic_errors.get(tp.topic, ErrorCode.LEADER_NOT_AVAILABLE)
                raise KafkaError(error, context=str(tp))
            return node

        return await self.call(attempt, what=f"leader of {tp}", timeout_ms=timeout_ms)

    # ------------------------------------------------------------------------------------------ coordinators

    async def coordinator(self, key: str, key_type: int = COORDINATOR_GROUP) -> int:
        cached = self._coordinators.get((key_type, key))
        if cached is not None:
            return cached
        return await self.call(lambda: self._find_coordinator(key, key_type), what=f"coordinator for {key!r}")

    async def _find_coordinator(self, key: str, key_type: int) -> int:
        cls = REQUESTS[FIND_COORDINATOR]

        def build(version: int) -> Any:
            if version >= 4:
                return cls(key_type=key_type, coordinator_keys=[key])
            return cls(key=key, key_type=key_type)

        response = await self.send_any(build, api_key=FIND_COORDINATOR)
        if response.coordinators:
            c = response.coordinators[0]
            code, message, node_id, host, port = c.error_code, c.error_message, c.node_id, c.host, c.port
        else:
            code, message = response.error_code, response.error_message
            node_id, host, port = response.node_id, response.host, response.port
        if code:
            raise KafkaError(code, message, context=f"coordinator for {key!r}")
        known = self.cluster.brokers.get(node_id)
        if known is None or (known.host, known.port) != (host, port):
            self.cluster.brokers[node_id] = BrokerInfo(node_id, host, port)
        self._coordinators[(key_type, key)] = node_id
        return node_id

    def invalidate_coordinator(self, key: str, key_type: int = COORDINATOR_GROUP) -> None:
        self._coordinators.pop((key_type, key), None)
