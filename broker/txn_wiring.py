"""Wire the transaction coordinator to this broker: `__transaction_state`, its leadership, and the marker sender.

The coordinator (coordinator/transaction/) is deterministic and knows nothing of sockets: like the group
coordinator it writes through an `InternalTopicWriter`, and a `TransactionCoordinatorLoader` (a metadata
listener) loads the `__transaction_state` partitions this broker leads and unloads those it no longer
leads, with the partition's leader epoch as the coordinator epoch. The topic is created on first use
(FindCoordinator for a transactional id, InitProducerId with one), as Kafka does, compacted, with
`transaction.state.log.replication.factor` replicas (not created while fewer brokers are alive: FindCoordinator
answers COORDINATOR_NOT_AVAILABLE and tries again, internal_topics.py) and min.insync.replicas
`transaction.state.log.min.isr`, which every write of the coordinator honours (acks=all).

Theory of the marker sender
---------------------------
`MarkerSender` is the coordinator's `MarkerSink`. For every ended transaction it runs one task: group the
partitions still without a marker by their leader in the current image, send each leader one
WriteTxnMarkers (v1) through the inter-broker listener (this broker's own partitions go through the same
handler, called in process), and keep what answered a retriable error (leader moved, not enough replicas,
timeout, a node down) for the next round, after a backoff that doubles up to a second. A partition whose
topic is gone from the image is done (Kafka skips markers for deleted partitions). INVALID_PRODUCER_EPOCH
or TRANSACTION_COORDINATOR_FENCED mean a newer coordinator or producer epoch has taken over: the job stops
without completing (the newer owner finishes the transaction). When every partition has its marker the
coordinator writes CompleteCommit/CompleteAbort, again after a backoff while `__transaction_state` refuses it
(COORDINATOR_NOT_AVAILABLE: its ISR below min.isr, or not replicated within request.timeout.ms), as Kafka's
retry queue of log appends does, so a Prepare state completes once the ISR is back. Losing the coordinator
partition cancels its jobs; the new leader resumes them from the Prepare state it loads.
"""

from __future__ import annotations

import asyncio
import itertools

import structlog

from odradek.coordinator.partitioning import TRANSACTION_STATE_TOPIC
from odradek.coordinator.transaction.config import TransactionCoordinatorConfig
from odradek.coordinator.transaction.coordinator import TransactionCoordinator
from odradek.coordinator.transaction.shard import MarkerJob
from odradek.protocol.errors import ErrorCode
from odradek.protocol.headers import RequestHeader
from odradek.protocol.messages import WriteTxnMarkersRequest
from odradek.metadata.publisher import MetadataUpdate

from .context import ANONYMOUS, ConnectionContext, KafkaPrincipal, RequestContext
from .groups_wiring import MetadataTopicsView
from .internal_topics import InternalTopicWriter, ensure_internal_topic, transaction_state_topic_spec

log = structlog.get_logger("odradek.txn_markers")

WRITE_TXN_MARKERS_VERSION = 1
_MAX_BACKOFF_S = 1.0
_RETRIABLE = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
    ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.FENCED_LEADER_EPOCH,
}
_STOP = {ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED, ErrorCode.TRANSACTION_COORDINATOR_FENCED}

Marker = WriteTxnMarkersRequest.WritableTxnMarker
MarkerTopic = Marker.WritableTxnMarkerTopic


class TransactionCoordinatorLoader:
    """Loads and unloads the coordinator's partitions as their leadership moves (a metadata listener)."""

    def __init__(self, coordinator: TransactionCoordinator, node_id: int, clock) -> None:
        self.coordinator = coordinator
        self.node_id = node_id
        self.clock = clock
        self.led: dict[int, int] = {}  # partition -> the leader epoch it was loaded at

    def on_metadata_update(self, update: MetadataUpdate) -> None:
        now = self.clock()
        topic = update.image.topics_by_name.get(TRANSACTION_STATE_TOPIC)
        led = {} if topic is None else {i: p.leader_epoch for i, p in topic.partitions.items() if p.leader == self.node_id}
        for index in sorted(self.led):
            if led.get(index) != self.led[index]:
                self.coordinator.on_resigned(index)
        for index in sorted(led):
            if self.led.get(index) != led[index]:
                self.coordinator.on_elected(index, now, coordinator_epoch=led[index])
        self.led = led


class MarkerSender:
    """The coordinator's MarkerSink: WriteTxnMarkers to the partitions' leaders until all are written."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.coordinator: TransactionCoordinator | None = None
        self._jobs: dict[int, set[asyncio.Task]] = {}
        self._connections = None
        self._security = None  # TLS / SASL of the inter-broker listener, as the replica fetchers use
        self._correlation = itertools.count()
        self.markers_written = 0

    def send(self, job: MarkerJob) -> None:
        task = asyncio.get_running_loop().create_task(self._run(job))
        tasks = self._jobs.setdefault(job.txn_partition, set())
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def cancel(self, txn_partition: int) -> None:
        for task in self._jobs.pop(txn_partition, set()):
            task.cancel()

    async def close(self) -> None:
        tasks = [t for ts in self._jobs.values() for t in ts]
        self._jobs.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._connections is not None:
            await self._connections.close()

    async def _run(self, job: MarkerJob) -> None:
        pending = set(job.partitions)
        backoff_s = 0.01
        while pending:
            image = self.broker.metadata.image
            by_leader: dict[int, list[tuple[str, int]]] = {}
            for topic, index in sorted(pending):
                t = image.topics_by_name.get(topic)
                p = t.partitions.get(index) if t is not None else None
                if p is None:
                    pending.discard((topic, index))  # deleted: nothing left to mark
                elif p.leader >= 0:
                    by_leader.setdefault(p.leader, []).append((topic, index))
            results = await asyncio.gather(*(self._send_to(leader, job, parts) for leader, parts in by_leader.items()))
            for errors in results:
                for tp, code in errors.items():
                    if code == ErrorCode.NONE:
                        pending.discard(tp)
                        self.markers_written += 1
                    elif code in _STOP:
                        log.info("transaction markers superseded", transactional_id=job.transactional_id,
                                 partition=tp, error=code.name)
                        return
                    elif code not in _RETRIABLE:
                        log.warning("transaction marker refused; not retried", transactional_id=job.transactional_id,
                                    partition=tp, error=code.name)
                        pending.discard(tp)
            if pending:
                await asyncio.sleep(backoff_s)  # a retry backoff: leaders move, nodes come back
                backoff_s = min(backoff_s * 2, _MAX_BACKOFF_S)
        await self._complete(job)

    async def _complete(self, job: MarkerJob) -> None:
        """Write the Complete state, again and again while `__transaction_state` cannot take it (Kafka's
        tryAppendToLog puts a COORDINATOR_NOT_AVAILABLE back on its retry queue): with the ISR below
        min.insync.replicas the write is refused, and the transaction completes once the ISR is back."""
        backoff_s = 0.01
        while (coordinator := self.coordinator) is not None:
            written = coordinator.on_markers_written(job, self.broker.now_ms())
            self.broker.after_state_change()
            code = written.result() if written.done else await self.broker.services.future_from(written)
            if code is not ErrorCode.COORDINATOR_NOT_AVAILABLE:
                if code is not ErrorCode.NONE:  # NOT_COORDINATOR: the partition's new leader completes it
                    log.info("transaction not completed here", transactional_id=job.transactional_id,
                             error=code.name)
                return
            log.debug("completing the transaction must wait", transactional_id=job.transactional_id)
            await asyncio.sleep(backoff_s)  # a retry backoff: the ISR grows back
            backoff_s = min(backoff_s * 2, _MAX_BACKOFF_S)

    async def _send_to(self, leader: int, job: MarkerJob, partitions: list[tuple[str, int]]) -> dict:
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        request = WriteTxnMarkersRequest(markers=[Marker(
            producer_id=job.producer_id, producer_epoch=job.producer_epoch, transaction_result=job.committed,
            topics=[MarkerTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
            coordinator_epoch=job.coordinator_epoch)])
        try:
            if leader == self.broker.node_id:
                response = await self._local(request)
            else:
                response = await self._remote(leader, request)
        except Exception as e:  # noqa: BLE001 - a node down or a connection lost: retried
            log.debug("WriteTxnMarkers failed", leader=leader, error=repr(e))
            return {tp: ErrorCode.REQUEST_TIMED_OUT for tp in partitions}
        errors = {tp: ErrorCode.REQUEST_TIMED_OUT for tp in partitions}
        for marker in response.markers:
            for topic in marker.topics:
                for p in topic.partitions:
                    if (topic.name, p.partition_index) in errors:
                        try:
                            errors[(topic.name, p.partition_index)] = ErrorCode(p.error_code)
                        except ValueError:
                            errors[(topic.name, p.partition_index)] = ErrorCode.UNKNOWN_SERVER_ERROR
        return errors

    async def _local(self, request):
        """This broker's own partitions: the WriteTxnMarkers handler, called as a request would reach it."""
        broker = self.broker
        header = RequestHeader(api_key=27, api_version=WRITE_TXN_MARKERS_VERSION, correlation_id=next(self._correlation),
                               client_id=f"txn-markers-{broker.node_id}")
        # As the request would arrive from this broker over the inter-broker listener: its SASL user there
        # (ANONYMOUS on PLAINTEXT), which ACLs grant CLUSTER_ACTION to (or super.users names).
        security = self._node_security()
        principal = KafkaPrincipal("User", security.username) if security is not None and security.username else ANONYMOUS
        connection = ConnectionContext(connection_id="txn-markers-local", client_host="127.0.0.1",
                                       listener=broker.config.inter_broker_listener, principal=principal)
        ctx = RequestContext(header=header, request=request, connection=connection, received_ns=0, frame_size=0)
        result = broker.dispatch(ctx)
        if isinstance(result, asyncio.Future):
            result = await result
        return result

    async def _remote(self, leader: int, request):
        return await self.request(leader, request, WRITE_TXN_MARKERS_VERSION, purpose="txn-markers", timeout_s=30.0)

    async def request(self, node_id: int, message, version: int, *, purpose: str, timeout_s: float = 10.0):
        """A request to another node at its inter-broker endpoint (markers, and produce verification)."""
        if self._connections is None:
            from .node_client import NodeConnections

            self._connections = NodeConnections(self._resolve, client_id=f"odradek-txn-{self.broker.node_id}",
                                                security=self._node_security())
        return await self._connections.request(node_id, message, version, purpose=purpose, timeout_s=timeout_s)

    def _node_security(self):
        if self._security is None:
            from .security import node_security

            cfg = self.broker.config
            self._security = (node_security(cfg, cfg.inter_broker_listener, "sasl.mechanism.inter.broker.protocol"),)
        return self._security[0]

    def _resolve(self, node_id: int):
        endpoint = self.broker.services.endpoint(node_id, self.broker.config.inter_broker_listener)
        return None if endpoint is None else (endpoint.host, endpoint.port)


class StartWhenLeading:
    """Starts the transaction coordinator on a broker that becomes leader of a `__transaction_state`
    partition before any transactional request reached it (a failover: the new leader must resume the
    markers and the timeouts of what it loads at once, not on the next request). A metadata listener."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.done = False

    def on_metadata_update(self, update: MetadataUpdate) -> None:
        if self.done or self.broker.services is None or self.broker.services.transactions_if_started is not None:
            return
        topic = update.image.topics_by_name.get(TRANSACTION_STATE_TOPIC)
        if topic is not None and any(p.leader == self.broker.node_id for p in topic.partitions.values()):
            self.done = True
            # Not from inside the publisher's loop over its listeners: starting registers one more.
            asyncio.get_running_loop().call_soon(self._start)

    def _start(self) -> None:
        services = self.broker.services
        if services is not None and services.transactions_if_started is None:
            services.transactions
            self.broker.after_state_change()


def start_transaction_coordinator(broker) -> TransactionCoordinator:
    cfg = broker.config
    # None: not created yet (fewer live brokers than its replication factor); FindCoordinator asks again.
    num_partitions = (ensure_internal_topic(broker, transaction_state_topic_spec(cfg))
                      or cfg.transaction_state_log_num_partitions)
    config = TransactionCoordinatorConfig.from_broker_config(cfg, transaction_state_log_num_partitions=num_partitions)
    sender = MarkerSender(broker)
    services = broker.services
    coordinator = TransactionCoordinator(
        InternalTopicWriter(broker.data, TRANSACTION_STATE_TOPIC, enforce_min_isr=True), broker.timer, config,
        next_producer_id=services.producer_ids.next_producer_id, markers=sender,
        topics=MetadataTopicsView(broker),
        # The group's partition as the group coordinator places it (the topic's own partition count).
        offsets_partition_for=lambda group_id: services.groups.partition_for(group_id))
    sender.coordinator = coordinator
    broker.txn_marker_sender = sender
    broker.metadata.register(TransactionCoordinatorLoader(coordinator, broker.node_id, broker.now_ms))
    return coordinator
