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
import struct

import structlog

from odradek.coordinator.group.group_coordinator import error_code_of
from odradek.coordinator.partitioning import TRANSACTION_STATE_TOPIC
from odradek.coordinator.runtime import CoordinatorError
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


# ---------------------------------------------------------------------------------------------------
# KIP-890 part 1: a partition leader asks the coordinator before a transaction's first write to a partition


_TRANSACTIONAL_BIT = 0x10  # attributes bit 4 (the low byte of the int16 at offset 21 of a batch)
_PID = struct.Struct(">qh")  # producerId int64, producerEpoch int16 at offset 43 of a batch


def transactional_producer(records) -> tuple[int, int] | None:
    """(producer id, epoch) of a transactional batch, or None: read off the first batch's header only."""
    if records is None or len(records) < 61 or not records[22] & _TRANSACTIONAL_BIT:
        return None
    return _PID.unpack_from(records, 43)


def _verify_error(code: ErrorCode, produce_version: int) -> ErrorCode:
    """What the producer is told for a partition the coordinator did not verify (Kafka's
    AddPartitionsToTxnManager and ReplicaManager: retriable coordinator trouble is NOT_ENOUGH_REPLICAS)."""
    if code is ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code is ErrorCode.TRANSACTION_ABORTABLE:
        return ErrorCode.TRANSACTION_ABORTABLE if produce_version >= 12 else ErrorCode.INVALID_TXN_STATE
    if code in (ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NETWORK_EXCEPTION):
        return ErrorCode.NOT_ENOUGH_REPLICAS
    return code


def offsets_verify_error(code: ErrorCode, txn_offset_commit_version: int) -> ErrorCode:
    """What a TxnOffsetCommit is told when the coordinator did not verify the group's `__consumer_offsets`
    partition (Kafka 4.x: AddPartitionsToTxnManager's conversions for the version's
    TransactionSupportedOperation, then the group coordinator's handleOperationException).

    TRANSACTION_ABORTABLE (the partition is not in an Ongoing transaction: no AddOffsetsToTxn, or the
    transaction ended) is INVALID_TXN_STATE below v4, which does not know the code
    (txnOffsetCommitRequestVersionToTransactionSupportedOperation: DEFAULT_ERROR up to v3); a fenced producer
    is INVALID_PRODUCER_EPOCH; an unreachable coordinator (NETWORK_EXCEPTION) is COORDINATOR_LOAD_IN_PROGRESS,
    which every client retries without a coordinator lookup; the rest as any group write's error."""
    if code is ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if code is ErrorCode.TRANSACTION_ABORTABLE and txn_offset_commit_version < 4:
        return ErrorCode.INVALID_TXN_STATE
    if code is ErrorCode.NETWORK_EXCEPTION:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    return error_code_of(CoordinatorError("", code))


async def verify_transaction(services, transactional_id: str, producer: tuple[int, int], partitions: list,
                             produce_version: int) -> dict:
    """Produce's verification (KIP-890 part 1): {tp: the produce error} for the partitions (TopicPartitions)
    the coordinator did not confirm in the producer's open transaction."""
    errors = await ask_transaction_coordinator(services, transactional_id, producer, partitions)
    return {tp: _verify_error(code, produce_version) for tp, code in errors.items() if code is not ErrorCode.NONE}


async def ask_transaction_coordinator(services, transactional_id: str, producer: tuple[int, int],
                                      partitions: list) -> dict:
    """Ask the transactional id's coordinator (AddPartitionsToTxn v4, verify_only) whether `partitions`
    (TopicPartitions) are in the producer's open transaction: {tp: its code as the coordinator answered it},
    NONE for a verified one; NETWORK_EXCEPTION when the coordinator could not be asked (Kafka's
    AddPartitionsToTxnManager on a disconnect), COORDINATOR_NOT_AVAILABLE when it is not known. Produce and
    TxnOffsetCommit each map the codes for their own clients."""
    from odradek.coordinator.partitioning import partition_for
    from odradek.protocol.messages import AddPartitionsToTxnRequest

    def every(code: ErrorCode) -> dict:
        return {tp: code for tp in partitions}

    topic = services.topic_by_name(TRANSACTION_STATE_TOPIC)
    if topic is None:
        return every(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    leader = services.partition_leader(TRANSACTION_STATE_TOPIC, partition_for(transactional_id, len(topic.partitions)))
    if leader is None:
        return every(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    T = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
    request = AddPartitionsToTxnRequest(transactions=[T(
        transactional_id=transactional_id, producer_id=producer[0], producer_epoch=producer[1], verify_only=True,
        topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()])])
    try:
        if leader[0] == services.node_id:
            deferred = services.transactions.add_partitions_to_txn(request, 4, services.now_ms())
            response = deferred.result() if deferred.done else await services.future_from(deferred)
        else:
            # The coordinator's sender holds this broker's connections to other nodes for transactions.
            response = await services.transactions.markers.request(leader[0], request, 4, purpose="txn-verify")
    except Exception as e:  # noqa: BLE001 - the coordinator is unreachable: the client retries
        log.debug("transaction verification failed", transactional_id=transactional_id, error=repr(e))
        return every(ErrorCode.NETWORK_EXCEPTION)
    if response.error_code:
        # Kafka's AddPartitionsToTxnManager: the client is not told CLUSTER_AUTHORIZATION_FAILED (the broker's
        # own permission), only that the verification did not complete.
        code = ErrorCode(response.error_code)
        return every(ErrorCode.INVALID_TXN_STATE if code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED else code)
    errors = {tp: ErrorCode.INVALID_TXN_STATE for tp in partitions}  # a partition left out of the answer
    for result in response.results_by_transaction:
        for t in result.topic_results:
            for p in t.results_by_partition:
                key = next((tp for tp in partitions if tp.topic == t.name and tp.partition == p.partition_index), None)
                if key is not None:
                    errors[key] = ErrorCode(p.partition_error_code)
    return errors
