"""Follower fetchers: the tasks that keep this broker's follower replicas up with their leaders.

Theory of operation
-------------------
Kafka's ReplicaFetcherManager and ReplicaFetcherThread, one task per source broker (num.replica.fetchers
is 1 per source). The decisions are the sans-I/O `replication.fetcher_state.FollowerFetcher`: which
partitions to ask for, at which offsets and epochs, and what an answer does to each log (append as
follower, the follower's high watermark, truncation on a diverging epoch, the reset on an offset out of
range, back-off on errors). This module only owns the loop and the connection:

    build the Fetch (None: every partition is backing off, or there is none: sleep until one is ready or
    a partition is added) -> send it on this fetcher's own connection to the leader's inter-broker
    listener (the endpoint the metadata image has for it) -> hand the answer (or the failure) back.

The replica manager, applying each committed metadata update (`ReplicaManager.apply_delta`,
replication/hosting.py), tells the manager what the image says through its `FetcherTargets` port:
`follow(tp, ...)` for a partition followed here (a new leader moves it to that leader's fetcher; the same
leader and epoch changes nothing), `unfollow(tp)` when it is led here, leaderless or dropped. A fetcher left with no
partitions stops. The leader holds a fetch up to replica.fetch.wait.max.ms when it has nothing new, so a
fetcher that is up to date costs one parked request per leader, not polling.

A broker whose partitions are all led here starts no fetcher at all (a lone node has no fetcher manager).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from odradek.protocol.errors import ProtocolError
from odradek.protocol.fast_fetch import encode_follower_fetch
from odradek.replication.fetcher_state import FollowerFetcher
from odradek.metadata.image import MetadataImage
from odradek.replication.replica_manager import ReplicaManager
from odradek.storage.names import TopicPartition

from .config import BrokerConfig
from .services import BrokerServices
from .node_client import NodeConnection, NodeUnavailable, api_versions_request, max_version_in

if TYPE_CHECKING:
    from odradek.metadata.publisher import MetadataPublisher
    from odradek.replication.replica_manager import HostedPartition

    from .controller_channel import ControllerChannel
    from .node import Membership

log = structlog.get_logger("odradek.replica_fetcher")

FETCH_KEY = 1
FETCH_VERSION = 18  # flexible, topic ids (13+), replica_state with the broker epoch (15+), the follower's HW (18)
MIN_FETCH_VERSION = 15  # the packed follower request (protocol.fast_fetch.encode_follower_fetch) starts there


class ReplicaFetcher:
    """One source broker's fetcher task; see the module doc."""

    def __init__(self, manager: ReplicaFetcherManager, source_id: int) -> None:
        cfg = manager.config
        self.manager = manager
        self.source_id = source_id
        self.state = FollowerFetcher(
            source_id, node_id=manager.node_id, get_partition=manager.data.get_partition,
            max_bytes=cfg.replica_fetch_max_bytes, min_bytes=cfg.replica_fetch_min_bytes,
            max_wait_ms=cfg.replica_fetch_wait_max_ms, response_max_bytes=cfg.replica_fetch_response_max_bytes,
            backoff_ms=cfg.replica_fetch_backoff_ms,
        )
        self.state.storage_failed = lambda path, error: manager.data.on_storage_error and manager.data.on_storage_error(path, error)
        # The leader parks a fetch up to replica.fetch.wait.max.ms: the request timeout must outlast it.
        self.timeout_s = max(cfg.replica_socket_timeout_ms, cfg.replica_fetch_wait_max_ms + 1000) / 1000
        self.connection: NodeConnection | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopped = False
        self.fetches = 0  # responses handled (for tests and metrics)
        self.version: int | None = None  # the Fetch version the leader accepts (None: ask it; see _negotiate)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.source_id}")

    def add(self, tp: TopicPartition, topic_id: uuid.UUID, leader_epoch: int) -> None:
        if self.state.add_partition(tp, topic_id=topic_id, leader_epoch=leader_epoch):
            self._wake.set()

    def remove(self, tp: TopicPartition) -> None:
        self.state.remove_partition(tp)

    async def stop(self) -> None:
        # The flag, not only the cancel: a cancel that lands as a wait_for's inner wait completes is lost
        # (Python 3.11), and the loop must end anyway.
        self._stopped = True
        self._wake.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self.connection is not None:
            await self.connection.close()

    def _connect(self) -> NodeConnection | None:
        """This fetcher's connection to the leader, at its inter-broker endpoint in the current image."""
        manager = self.manager
        registration = manager.image().brokers.get(self.source_id)
        endpoint = None
        if registration is not None:
            endpoint = next((e for e in registration.endpoints if e.name == manager.listener), None)
        if endpoint is None:
            return None
        if self.connection is None:
            self.connection = NodeConnection(
                self.source_id, endpoint.host, endpoint.port,
                client_id=f"odradek-replica-fetcher-{manager.node_id}-{self.source_id}",
                backoff_s=manager.config.replica_fetch_backoff_ms / 1000, security=manager.security,
            )
        else:
            self.connection.set_address(endpoint.host, endpoint.port)
        return self.connection

    async def _run(self) -> None:
        clock = self.manager.clock
        state = self.state
        while not self._stopped:
            now = clock()
            built = state.build_fetch(now)
            if built is None:
                ready_ms = state.next_ready_ms()
                self._wake.clear()
                try:
                    timeout_s = None if ready_ms is None else max(0.0, (ready_ms - now) / 1000)
                    await asyncio.wait_for(self._wake.wait(), timeout_s)
                except asyncio.TimeoutError:
                    pass
                continue
            topics, sent = built
            connection = self._connect()
            if connection is None:
                log.debug("no endpoint for the leader yet", source=self.source_id, listener=self.manager.listener)
                state.handle_failure(sent, clock())
                continue
            try:
                version = self.version if self.version is not None else await self._negotiate(connection)
                response = await connection.request_packed(FETCH_KEY, version, self._writer(version, topics),
                                                           self.timeout_s)
            except (NodeUnavailable, ProtocolError) as e:
                log.debug("fetch from leader failed", source=self.source_id, error=str(e))
                self.version = None  # the leader may come back as another release
                state.handle_failure(sent, clock())
                continue
            if self._stopped:
                break
            try:
                state.handle_response(sent, response, clock())
                self.manager.data.follower_high_watermarks_moved(sent)  # consumers reading here (KIP-392)
            except Exception:  # a bug must not stop replication of every other partition for good
                log.exception("handling a fetch response failed", source=self.source_id)
                state.handle_failure(sent, clock())
            self.fetches += 1

    def _writer(self, version: int, topics: list) -> Callable[[bytearray], None]:
        """The request body's writer for NodeConnection.request_packed (see encode_follower_fetch)."""
        state, manager = self.state, self.manager
        replica_epoch = manager.broker_epoch()
        packed_topics = [(topic_id.bytes, parts) for topic_id, parts in topics]
        return lambda out: encode_follower_fetch(
            out, version, replica_id=manager.node_id, replica_epoch=replica_epoch, max_wait_ms=state.max_wait_ms,
            min_bytes=state.min_bytes, max_bytes=state.response_max_bytes, topics=packed_topics)

    async def _negotiate(self, connection: NodeConnection) -> int:
        """The Fetch version to send the leader: FETCH_VERSION (v18, with KIP-1166's high watermark), capped
        by what its ApiVersions says, as Kafka's NetworkClient negotiates. A leader of an earlier release
        accepts v17 at most (and closes the connection on v18); it then gets v17, without the high watermark,
        and parks the fetch as before. Asked again after a failed request: the leader may have been upgraded."""
        answer = await connection.request(api_versions_request("replica-fetcher"), 3, self.timeout_s)
        known = max_version_in(answer, FETCH_KEY)
        if known is None or known < MIN_FETCH_VERSION:
            raise NodeUnavailable(f"node {self.source_id} does not accept Fetch v{MIN_FETCH_VERSION}+ "
                                  f"(ApiVersions error {answer.error_code}, Fetch up to {known})")
        self.version = min(FETCH_VERSION, known)
        return self.version


class ReplicaFetcherManager:
    """The fetchers of this broker, one per leader it follows partitions of; see the module doc."""

    def __init__(
        self, *, node_id: int, config: BrokerConfig, data: ReplicaManager, image: Callable[[], MetadataImage],
        broker_epoch: Callable[[], int], clock: Callable[[], int],
    ) -> None:
        self.node_id = node_id
        self.config = config
        self.listener = config.inter_broker_listener
        from .security import node_security  # TLS and SASL of the inter-broker listener, checked at start

        self.security = node_security(config, self.listener, "sasl.mechanism.inter.broker.protocol")
        self.data = data
        self.image = image
        self.broker_epoch = broker_epoch
        self.clock = clock
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._source_of: dict[TopicPartition, int] = {}
        self._stopping: set[asyncio.Task] = set()
        self._closed = False

    def follow(self, tp: TopicPartition, *, topic_id: uuid.UUID, leader_id: int, leader_epoch: int) -> None:
        """Fetch `tp` from `leader_id` (moving it off another leader's fetcher), at `leader_epoch`."""
        if self._closed:
            return
        previous = self._source_of.get(tp)
        if previous is not None and previous != leader_id:
            self._remove_from(previous, tp)
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            fetcher = self.fetchers[leader_id] = ReplicaFetcher(self, leader_id)
            fetcher.start()
            log.info("replica fetcher started", source=leader_id)
        self._source_of[tp] = leader_id
        fetcher.add(tp, topic_id, leader_epoch)

    def unfollow(self, tp: TopicPartition) -> None:
        source = self._source_of.pop(tp, None)
        if source is not None:
            self._remove_from(source, tp)

    def source_of(self, tp: TopicPartition) -> int | None:
        return self._source_of.get(tp)

    def _remove_from(self, source: int, tp: TopicPartition) -> None:
        fetcher = self.fetchers.get(source)
        if fetcher is None:
            return
        fetcher.remove(tp)
        if not len(fetcher.state):
            del self.fetchers[source]
            task = asyncio.get_running_loop().create_task(fetcher.stop())
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)
            log.info("replica fetcher stopped: no partitions left", source=source)

    async def shutdown(self) -> None:
        self._closed = True
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        self._source_of.clear()
        await asyncio.gather(*(f.stop() for f in fetchers), *self._stopping, return_exceptions=True)


async def maintain_isr(cfg: BrokerConfig, membership: Membership, data: ReplicaManager, metadata: MetadataPublisher,
                       controller: ControllerChannel, clock: Callable[[], int]) -> None:
    """The leader's side of the ISR (Kafka's isr-expiration task and AlterPartitionManager): every
    min(replica.lag.time.max.ms / 2, 500 ms), the partitions led here whose ISR should change (a follower
    lagging longer than replica.lag.time.max.ms leaves it, a caught-up eligible one joins it:
    Partition.proposed_isr) are sent in one AlterPartition (v3, members with their broker epochs) to the
    active controller. A partition has at most one change in flight; the committed change reaches this
    broker as any metadata does, and only then is the ISR what it says. A refused change is proposed
    again, from the then current state, at a later check."""
    interval_s = max(0.01, min(cfg.replica_lag_time_max_ms / 2, 500) / 1000)
    while True:
        await asyncio.sleep(interval_s)
        if membership.broker_epoch < 0 or membership.shutting_down:
            continue
        try:
            changes = data.proposed_isr_changes(clock())
            if changes:
                await _alter_partition(cfg.node_id, membership.broker_epoch, metadata.image, controller, changes,
                                       timeout_s=cfg.replica_lag_time_max_ms / 1000 + 5)
        except Exception:  # the next check tries again
            log.exception("proposing ISR changes failed")


async def _alter_partition(node_id: int, broker_epoch: int, image: MetadataImage, controller: ControllerChannel,
                           changes: list[tuple[HostedPartition, tuple[int, ...]]], *, timeout_s: float) -> None:
    from odradek.protocol.messages import AlterPartitionRequest

    Topic = AlterPartitionRequest.TopicData
    by_topic: dict[uuid.UUID, list] = {}
    for partition, new_isr in changes:
        partition.pending_isr = new_isr
        members = [Topic.PartitionData.BrokerState(
            broker_id=b, broker_epoch=image.brokers[b].broker_epoch if b in image.brokers else -1) for b in new_isr]
        by_topic.setdefault(partition.topic_id, []).append(Topic.PartitionData(
            partition_index=partition.partition, leader_epoch=partition.leader_epoch, new_isr_with_epochs=members,
            leader_recovery_state=0, partition_epoch=partition.partition_epoch,
        ))
        log.info("proposing an ISR change", partition=str(partition.topic_partition), isr=list(partition.isr),
                 new_isr=list(new_isr))
    request = AlterPartitionRequest(broker_id=node_id, broker_epoch=broker_epoch, topics=[
        Topic(topic_id=topic_id, partitions=parts) for topic_id, parts in by_topic.items()])
    sent = {(p.topic_id, p.partition): p for p, _ in changes}
    try:
        response = await asyncio.wait_for(
            BrokerServices.future_from(controller.alter_partition(request, 3)), timeout_s)
    except Exception as e:  # noqa: BLE001 - no controller at the moment: propose again later
        log.info("AlterPartition failed; will propose again", error=str(e))
        for partition, _ in changes:
            partition.pending_isr = None
        return
    for topic in response.topics:
        for p in topic.partitions:
            hosted = sent.get((topic.topic_id, p.partition_index))
            if hosted is None:
                continue
            if p.error_code:
                log.info("ISR change refused", partition=str(hosted.topic_partition), error_code=p.error_code)
                hosted.pending_isr = None
            elif hosted.partition_epoch >= p.partition_epoch:
                hosted.pending_isr = None  # the image has it already
