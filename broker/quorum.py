"""The controller quorum on the event loop: the Raft node's timers and messages, the metadata it commits.

Three parts, each small, around the sans-I/O `replication.raft.RaftNode`:

* `QuorumDriver` runs the node: it arms one timer for the node's next deadline, sends the node's requests
  to other nodes (`NodeConnections`: long-polling Fetch and FetchSnapshot on a connection of their own,
  so that they never hold up a vote), hands it their responses (None when a request failed), and answers
  the quorum requests other nodes send here (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch of
  `__cluster_metadata`, FetchSnapshot, DescribeQuorum) with futures the node completes.
* `MetadataLoader` is the node's listener: committed batches are decoded into metadata records and
  published (the same `MetadataPublisher` a cluster of one uses, so the partitions, the logs and the
  coordinators follow a quorum's metadata the way they follow a local log's), a snapshot fetched or found
  at start is published as a whole image, and snapshots of the image are taken every
  `snapshot_max_bytes` of committed records (metadata.log.max.record.bytes.between.snapshots), or after
  `snapshot_max_interval_ms` with anything new (metadata.log.max.snapshot.interval.ms).
* `QuorumControllerChannel` is the controller channel of a node that may be the active controller: while
  this node leads the quorum and has applied everything before its epoch (its LeaderChange batch is
  committed), it decides and appends through Raft and answers each call once its batch is committed;
  otherwise it is not active, and callers forward to the active controller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from odradek.purgatory.deferred import Deferred
from odradek.protocol.envelope import (
    address_bytes,
    decode_response_data,
    encode_request_data,
    serialize_principal,
)
from odradek.protocol.errors import ErrorCode
from odradek.protocol.headers import RequestHeader
from odradek.protocol.messages import EnvelopeRequest, FetchRequest, FetchSnapshotRequest
from odradek.metadata.controller import Controller
from odradek.metadata.image import MetadataDelta, MetadataError, MetadataImage
from odradek.metadata.publisher import EMPTY_IMAGE, MetadataPublisher, MetadataUpdate
from odradek.metadata.records import decode_metadata_record, encode_metadata_record
from odradek.metadata.snapshot import decode_snapshot, encode_snapshot
from odradek.raft import CommittedBatch, NotLeaderError, OutboundRequest, OutboundResponse, RaftNode
from odradek.raft.log import SnapshotId

from .config import BrokerConfig
from .controller_channel import ControllerDecisions
from .node_client import NodeConnections, NodeUnavailable

log = structlog.get_logger("odradek.quorum")

_LONG_POLLS = (FetchRequest, FetchSnapshotRequest)


class QuorumDriver:
    def __init__(self, raft: RaftNode, connections: NodeConnections, clock: Callable[[], int], *,
                 request_timeout_ms: int = 2000) -> None:
        self.raft = raft
        self.connections = connections
        self.clock = clock
        self.request_timeout_ms = request_timeout_ms
        self._pending: dict[int, asyncio.Future] = {}
        self._next_request_id = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._tasks: set[asyncio.Task] = set()
        self._stopped = False
        self.after_each_call: Callable[[], None] | None = None  # e.g. the loader's snapshots

    def start(self) -> None:
        self.process(self.raft.poll(self.clock()))

    async def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for future in self._pending.values():
            if not future.done():
                future.cancel()

    # -- inbound

    def handle_request(self, request) -> asyncio.Future:
        """A quorum request from another node: a future of the node's response."""
        self._next_request_id += 1
        request_id = self._next_request_id
        future = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            self.process(self.raft.handle_request(-1, request_id, request, self.clock()))
        except Exception:
            self._pending.pop(request_id, None)
            raise
        return future

    def append(self, records: list[bytes]) -> int:
        """Append as leader (NotLeaderError otherwise); the offset of the last record."""
        offset = self.raft.append(records, self.clock())
        self.process(self.raft.poll(self.clock()))
        return offset

    # -- the node's output

    def process(self, outbound: list) -> None:
        if self._stopped:
            return
        for message in outbound:
            if type(message) is OutboundResponse:
                future = self._pending.pop(message.request_id, None)
                if future is not None and not future.done():
                    future.set_result(message.message)
            elif type(message) is OutboundRequest:
                task = asyncio.get_running_loop().create_task(self._send(message))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        if self.after_each_call is not None:
            self.after_each_call()
        self._rearm()

    async def _send(self, request: OutboundRequest) -> None:
        purpose = "raft-fetch" if isinstance(request.message, _LONG_POLLS) else "raft"
        timeout_s = self.request_timeout_ms / 1000 + (1.0 if purpose == "raft-fetch" else 0.0)
        try:
            response = await self.connections.request(
                request.destination, request.message, request.api_version, purpose=purpose, timeout_s=timeout_s,
            )
        except NodeUnavailable:
            response = None
        if not self._stopped:
            self.process(self.raft.handle_response(request.destination, request.correlation_id, response, self.clock()))

    def _rearm(self) -> None:
        deadline = self.raft.next_deadline_ms
        if self._timer is not None and self._timer_at == deadline:
            return
        if self._timer is not None:
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer_at = deadline
        self._timer = loop.call_later(max(0.0, (deadline - self.clock()) / 1000), self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._timer_at = None
        self.process(self.raft.poll(self.clock()))


class MetadataLoader:
    """The Raft node's listener: committed metadata published as images (see the module doc)."""

    def __init__(self, publisher: MetadataPublisher, *, clock: Callable[[], int], snapshot_max_bytes: int = 20 << 20,
                 snapshot_max_interval_ms: int = 3_600_000) -> None:
        self.publisher = publisher
        self.clock = clock
        self.snapshot_max_bytes = snapshot_max_bytes
        self.snapshot_max_interval_ms = snapshot_max_interval_ms
        self._last_snapshot_ms = clock()
        self.image: MetadataImage = EMPTY_IMAGE
        self.applied_end_offset = 0
        self.leader_id = -1
        self.epoch = 0
        self.raft: RaftNode | None = None  # set once the node exists (it needs this listener first)
        self._bytes_since_snapshot = 0
        self._commit_listeners: list[Callable[[CommittedBatch], None]] = []
        self._leader_listeners: list[Callable[[int, int], None]] = []

    def on_commit(self, listener: Callable[[CommittedBatch], None]) -> None:
        self._commit_listeners.append(listener)

    def on_leader_change(self, listener: Callable[[int, int], None]) -> None:
        self._leader_listeners.append(listener)

    def handle_commit(self, batch: CommittedBatch) -> None:
        if batch.records:
            delta = MetadataDelta(self.image)
            for value in batch.records:
                delta.replay(decode_metadata_record(value))
            image = delta.apply()
            previous, self.image = self.image, image
            self.applied_end_offset = batch.last_offset + 1
            self.publisher.publish(MetadataUpdate(previous, image, frozenset(delta.changed_topic_ids),
                                                  dict(delta.removed_topics), self.applied_end_offset))
            self._bytes_since_snapshot += sum(len(r) for r in batch.records)
        else:
            self.applied_end_offset = batch.last_offset + 1
        for listener in list(self._commit_listeners):
            listener(batch)

    def handle_load_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        image = decode_snapshot(data)
        previous, self.image = self.image, image
        removed = {t: topic for t, topic in previous.topics_by_id.items() if t not in image.topics_by_id}
        self.applied_end_offset = snapshot_id.end_offset
        self._bytes_since_snapshot = 0
        self.publisher.publish(MetadataUpdate(previous, image, frozenset(image.topics_by_id), removed, snapshot_id.end_offset))

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self.leader_id, self.epoch = leader_id, epoch
        for listener in list(self._leader_listeners):
            listener(leader_id, epoch)

    def maybe_snapshot(self) -> None:
        """Called by the driver after each call into the node (not from inside handle_commit, where the
        node has not yet counted the batch as applied: a snapshot must hold exactly the offsets below it)."""
        raft = self.raft
        if raft is None or self._bytes_since_snapshot == 0:
            return
        due_by_time = 0 < self.snapshot_max_interval_ms <= self.clock() - self._last_snapshot_ms
        if self._bytes_since_snapshot < self.snapshot_max_bytes and not due_by_time:
            return
        end = self.applied_end_offset
        if end != raft.applied_end_offset or end > raft.high_watermark:
            return
        try:
            raft.create_snapshot(end, encode_snapshot(self.image, self.clock()))
        except ValueError as e:  # nothing new to snapshot (already at or below the log start)
            log.debug("no metadata snapshot", reason=str(e))
            return
        self._bytes_since_snapshot = 0
        self._last_snapshot_ms = self.clock()
        log.info("metadata snapshot", end_offset=end)


class QuorumControllerChannel(ControllerDecisions):
    """The controller channel of a node in the quorum (see the module doc)."""

    def __init__(self, controller: Controller, config: BrokerConfig, clock: Callable[[], int],
                 driver: QuorumDriver, loader: MetadataLoader) -> None:
        super().__init__(controller, config, clock)
        self.driver = driver
        self.loader = loader
        self.is_active = False
        self.cluster_id: str | None = None  # from meta.properties: written by the first active controller
        self._tick_handle: asyncio.TimerHandle | None = None
        self._waiting: list[tuple[int, Deferred]] = []  # (last offset, commit) in offset order
        loader.on_commit(self._committed)
        loader.on_leader_change(self._leader_changed)

    def _leader_changed(self, leader_id: int, epoch: int) -> None:
        if self.is_active:
            log.info("no longer the active controller", leader=leader_id, epoch=epoch)
        self.is_active = False
        self._fail_waiting(MetadataError(ErrorCode.NOT_CONTROLLER, f"The active controller moved to node {leader_id}."))

    def _committed(self, batch: CommittedBatch) -> None:
        raft = self.driver.raft
        if not self.is_active and raft.is_leader and batch.is_control and batch.epoch == raft.epoch:
            # Everything before this epoch is applied: the controller may decide from the image now.
            self.controller.advance(self.loader.image, batch.last_offset + 1)
            self.controller.activate(self.clock())
            self.is_active = True
            log.info("active controller", epoch=raft.epoch)
            self._schedule_tick()
            if self.loader.image.cluster_id is None and self.cluster_id is not None:
                self._bootstrap()
        while self._waiting and self._waiting[0][0] <= batch.last_offset:
            _, commit = self._waiting.pop(0)
            commit.complete(None)

    def _schedule_tick(self) -> None:
        """The controller's periodic decisions (expired broker sessions, leader elections) at its deadline."""
        if self._tick_handle is not None:
            self._tick_handle.cancel()
        if not self.is_active:
            return
        deadline = self.controller.next_deadline_ms()
        delay_s = 1.0 if deadline is None else max(0.0, min(1.0, (deadline - self.clock()) / 1000))
        self._tick_handle = asyncio.get_running_loop().call_later(delay_s, self._tick)

    def _tick(self) -> None:
        self._tick_handle = None
        if self.is_active:
            try:
                self.tick()
            except Exception:  # noqa: BLE001 - the next tick tries again
                log.exception("controller tick failed")
            self._schedule_tick()

    def _bootstrap(self) -> None:
        """The first active controller of a new cluster writes what `odradek storage format` decided: the
        metadata.version feature level and the cluster id (Kafka's bootstrap records)."""
        records = self.controller.bootstrap_records(self.cluster_id)
        self._single(lambda: (records, None))

    def _commit(self, records: list, working) -> Deferred:
        try:
            last = self.driver.append([encode_metadata_record(r) for r in records])
        except NotLeaderError:
            self.is_active = False
            raise MetadataError(ErrorCode.NOT_CONTROLLER, "This node is not the active controller.") from None
        self.controller.advance(working, last + 1)  # later decisions see these records before they commit
        commit: Deferred = Deferred()
        self._waiting.append((last, commit))
        return commit

    def _fail_waiting(self, error: Exception) -> None:
        waiting, self._waiting = self._waiting, []
        for _, commit in waiting:
            commit.fail(error)
        self.controller.advance(self.loader.image, self.loader.applied_end_offset)


class ForwardingRefused(Exception):
    """The active controller refused a forwarded request's envelope (not the request inside it)."""


class ClusterControllerChannel:
    """`services.controller` on a node of a cluster: the calls are decided here while this node is the
    active controller, else sent to it as Kafka's controller RPCs over its controller listener
    (CreateTopics for internal topics, AllocateProducerIds, BrokerRegistration). Client admin requests
    (CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs, IncrementalAlterConfigs) are forwarded
    whole by their handlers (`forward`), as KIP-590 brokers do, so they never reach the other calls here
    on a node that is not the active controller."""

    def __init__(self, local: QuorumControllerChannel | None, loader: MetadataLoader, connections: NodeConnections,
                 *, node_id: int, request_timeout_s: float = 30.0) -> None:
        self.local = local
        self.loader = loader
        self.connections = connections
        self.node_id = node_id
        self.request_timeout_s = request_timeout_s
        self._tasks: set[asyncio.Task] = set()

    @property
    def is_active(self) -> bool:
        return self.local is not None and self.local.is_active

    # -- forwarding

    async def forward(self, request, version: int, *, timeout_s: float | None = None, client=None):
        """Send a request to the active controller; its response. With `client` (the request context of a
        client's admin request, broker/handlers/envelope.py) the request goes inside an Envelope with the
        client's principal and address, and the inner response is answered; without, it goes as it is (a
        node's own RPC). While the quorum has no leader, or the one it names cannot be reached (it just
        died), stops being the leader while the request waits (it froze, and the quorum moved on) or
        answers the envelope with NOT_CONTROLLER, wait and send it to the new one, as Kafka's forwarding
        manager does, until `timeout_s` (default `request_timeout_s`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.request_timeout_s if timeout_s is None else timeout_s)
        if client is not None:
            header = RequestHeader(client.header.api_key, version, client.header.correlation_id, client.header.client_id)
            envelope = EnvelopeRequest(
                request_data=encode_request_data(header, request),
                request_principal=serialize_principal(client.principal.principal_type, client.principal.name),
                client_host_address=address_bytes(client.client_host),
            )
            message, message_version = envelope, 0
        else:
            message, message_version = request, version
        while True:
            leader = await self._leader(deadline)
            sent = loop.create_task(self.connections.request(
                leader, message, message_version, purpose="forward", timeout_s=max(0.1, deadline - loop.time()),
            ))
            try:
                while not sent.done():
                    await asyncio.wait({sent}, timeout=0.1)
                    if not sent.done() and (self.loader.leader_id != leader or loop.time() > deadline):
                        sent.cancel()
                        break
                if sent.done() and not sent.cancelled():
                    response = sent.result()
                    if client is None:
                        return response
                    if response.error_code == ErrorCode.NOT_CONTROLLER:
                        pass  # the lead moved after the request left: send it again to the new leader
                    elif response.error_code:
                        # The controller refused the envelope itself (this node lacks CLUSTER_ACTION there,
                        # or they disagree on the format): a misconfigured cluster, not the client's error.
                        code = ErrorCode.for_code(response.error_code)
                        log.error("the active controller refused a forwarded request's envelope", controller=leader,
                                  api_key=header.api_key, error=code.name)
                        raise ForwardingRefused(f"the active controller refused the envelope: {code.name}")
                    else:
                        return decode_response_data(response.response_data, header)
            except NodeUnavailable:
                pass
            finally:
                if not sent.done():
                    sent.cancel()
            if loop.time() > deadline:
                raise NodeUnavailable(f"no answer from the active controller within the request timeout")
            await asyncio.sleep(0.05)

    async def _leader(self, deadline: float) -> int:
        loop = asyncio.get_running_loop()
        while self.loader.leader_id < 0 or self.loader.leader_id == self.node_id and not self.is_active:
            if loop.time() > deadline:
                raise NodeUnavailable("no active controller")
            await asyncio.sleep(0.05)
        return self.loader.leader_id

    def _remote(self, coro_fn) -> Deferred:
        out: Deferred = Deferred()

        async def run() -> None:
            try:
                out.complete(await coro_fn())
            except Exception as e:  # noqa: BLE001 - the caller sees the failure on its Deferred
                out.fail(e)

        task = asyncio.get_running_loop().create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return out

    # -- the calls

    def create_topics(self, topics, *, validate_only: bool = False, internal: bool = False) -> Deferred:
        if self.is_active:
            return self.local.create_topics(topics, validate_only=validate_only, internal=internal)
        from odradek.protocol.messages import CreateTopicsRequest

        request = CreateTopicsRequest(validate_only=validate_only, timeout_ms=int(self.request_timeout_s * 1000), topics=[
            CreateTopicsRequest.CreatableTopic(
                name=t.name, num_partitions=t.num_partitions, replication_factor=t.replication_factor,
                assignments=[CreateTopicsRequest.CreatableTopic.CreatableReplicaAssignment(partition_index=i, broker_ids=list(b))
                             for i, b in sorted((t.assignments or {}).items())],
                configs=[CreateTopicsRequest.CreatableTopic.CreatableTopicConfig(name=k, value=v) for k, v in t.configs.items()],
            )
            for t in topics
        ])

        async def call():
            from .controller_channel import CreatedTopic

            response = await self.forward(request, 7)
            results = []
            for r in response.topics:
                if r.error_code:
                    results.append(MetadataError(ErrorCode(r.error_code), r.error_message or ""))
                else:
                    results.append(CreatedTopic(r.name, r.topic_id, r.num_partitions, r.replication_factor, {}))
            return results

        return self._remote(call)

    def delete_topics(self, topics) -> Deferred:
        return self._local_only("delete_topics", topics)

    def create_partitions(self, topics, *, validate_only: bool = False) -> Deferred:
        return self._local_only("create_partitions", topics, validate_only=validate_only)

    def alter_configs(self, changes, *, validate_only: bool = False) -> Deferred:
        return self._local_only("alter_configs", changes, validate_only=validate_only)

    def alter_user_scram_credentials(self, deletions, upsertions) -> Deferred:
        return self._local_only("alter_user_scram_credentials", deletions, upsertions)

    def create_acls(self, bindings) -> Deferred:
        return self._local_only("create_acls", bindings)

    def delete_acls(self, filters) -> Deferred:
        return self._local_only("delete_acls", filters)

    def alter_client_quotas(self, entries, *, validate_only: bool = False) -> Deferred:
        return self._local_only("alter_client_quotas", entries, validate_only=validate_only)

    def _local_only(self, name: str, *args, **kwargs) -> Deferred:
        if self.is_active:
            return getattr(self.local, name)(*args, **kwargs)
        return Deferred.failed(MetadataError(ErrorCode.NOT_CONTROLLER, "This node is not the active controller."))

    def allocate_producer_ids(self, broker_id: int) -> Deferred:
        if self.is_active:
            return self.local.allocate_producer_ids(broker_id)
        from odradek.protocol.messages import AllocateProducerIdsRequest
        from odradek.metadata.image import ProducerIdsBlock

        async def call():
            epoch = self.loader.image.brokers.get(broker_id)
            request = AllocateProducerIdsRequest(broker_id=broker_id, broker_epoch=epoch.broker_epoch if epoch else -1)
            response = await self.forward(request, 0)
            if response.error_code:
                raise MetadataError(ErrorCode(response.error_code), "AllocateProducerIds failed")
            return ProducerIdsBlock(broker_id, response.producer_id_start, response.producer_id_len)

        return self._remote(call)

    # -- the brokers' RPCs: decided here when active, else sent to the active controller as they are

    def _decide_or_forward(self, name: str, request, version: int) -> Deferred:
        if self.is_active:
            return getattr(self.local, name)(request)
        return self._remote(lambda: self.forward(request, version))

    def broker_registration(self, request) -> Deferred:
        return self._decide_or_forward("broker_registration", request, 0)

    def heartbeat(self, request, *, timeout_s: float | None = None) -> Deferred:
        if self.is_active:
            return self.local.heartbeat(request)
        return self._remote(lambda: self.forward(request, 0, timeout_s=timeout_s))

    def unregister(self, request) -> Deferred:
        return self._decide_or_forward("unregister", request, 0)

    def alter_partition(self, request, version: int) -> Deferred:
        if self.is_active:
            return self.local.alter_partition(request, version)
        return self._remote(lambda: self.forward(request, version))

    def assign_replicas_to_dirs(self, request) -> Deferred:
        return self._decide_or_forward("assign_replicas_to_dirs", request, 0)

    def elect_leaders(self, request) -> Deferred:
        return self._local_only("elect_leaders", request)

    def alter_partition_reassignments(self, request) -> Deferred:
        return self._local_only("alter_partition_reassignments", request)

    def list_partition_reassignments(self, request):
        return self.local.list_partition_reassignments(request)

    async def close(self) -> None:
        if self.local is not None:  # no more periodic decisions: the log is about to close
            self.local.is_active = False
            if self.local._tick_handle is not None:
                self.local._tick_handle.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
