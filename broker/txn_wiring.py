"""Wire the transaction coordinator to this broker: `__transaction_state`, its leadership, and the marker sender.

The coordinator (coordinator/transaction/) is deterministic and knows nothing of sockets: like the group
coordinator it writes through an `InternalTopicWriter`, and a `TransactionCoordinatorLoader` (a metadata
listener) loads the `__transaction_state` partitions this broker leads and unloads those it no longer
leads, with the partition's leader epoch as the coordinator epoch. The topic is created on first use
(FindCoordinator for a transactional id, InitProducerId with one), as Kafka does, compacted, with
`transaction.state.log.replication.factor` replicas (not created while fewer brokers are alive: FindCoordinator
answers COORDINATOR_NOT_AVAILABLE and tries again, internal_topics.py) and min.insync.replicas
`transaction.state.log.min.isr`, which every write of the coordinator honours (acks=all).

The marker sender
-----------------
The coordinator drives the end of a transaction itself (coordinator/transaction/markers.py, Kafka's
TransactionMarkerChannelManager: the Prepare write, WriteTxnMarkers to every partition's leader with their
retries, the Complete write and its retries); see that module for the walk before and after.
`MarkerSender` is its `MarkerChannel`, the part with sockets and tasks: each WriteTxnMarkers it is given
goes out as one task, through the inter-broker listener (this broker's own partitions through the same
handler, called in process), and its response (None on a failure: a node down, a connection lost, a
timeout) goes back to the coordinator, after which the broker re-arms its timer. It also lends its
connections to produce's transaction verification (`ask_transaction_coordinator`).
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
from odradek.protocol.errors import ErrorCode
from odradek.protocol.headers import RequestHeader
from odradek.protocol.messages import WriteTxnMarkersRequest
from odradek.metadata.publisher import MetadataUpdate

from .context import ANONYMOUS, ConnectionContext, KafkaPrincipal, RequestContext
from .groups_wiring import MetadataTopicsView
from .internal_topics import InternalTopicWriter, ensure_internal_topic, transaction_state_topic_spec

log = structlog.get_logger("odradek.txn_markers")

WRITE_TXN_MARKERS_VERSION = 1


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
    """The coordinator's MarkerChannel: WriteTxnMarkers sent over the network, their responses reported back."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self._tasks: set[asyncio.Task] = set()
        self._connections = None
        self._security = None  # TLS / SASL of the inter-broker listener, as the replica fetchers use
        self._correlation = itertools.count()

    # -- MarkerChannel --

    def send(self, leader_id: int, request: WriteTxnMarkersRequest, done) -> None:
        task = asyncio.get_running_loop().create_task(self._send(leader_id, request, done))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def now_ms(self) -> int:
        return self.broker.now_ms()

    def timers_changed(self) -> None:
        self.broker.after_state_change()

    async def _send(self, leader_id: int, request: WriteTxnMarkersRequest, done) -> None:
        try:
            if leader_id == self.broker.node_id:
                response = await self._local(request)
            else:
                response = await self._remote(leader_id, request)
        except Exception as e:  # noqa: BLE001 - a node down or a connection lost: retried
            log.debug("WriteTxnMarkers failed", leader=leader_id, error=repr(e))
            response = None
        try:
            done(response)
        except Exception:  # a bug: logged, the other transactions go on
            log.exception("handling a WriteTxnMarkers response failed", leader=leader_id)
        self.broker.after_state_change()

    async def close(self) -> None:
        tasks, self._tasks = list(self._tasks), set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._connections is not None:
            await self._connections.close()

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
    publisher = broker.metadata
    coordinator = TransactionCoordinator(
        InternalTopicWriter(broker.data, TRANSACTION_STATE_TOPIC, enforce_min_isr=True), broker.timer, config,
        next_producer_id=services.producer_ids.next_producer_id, marker_channel=sender,
        image=lambda: publisher.image, topics=MetadataTopicsView(broker),
        # The group's partition as the group coordinator places it (the topic's own partition count).
        offsets_partition_for=lambda group_id: services.groups.partition_for(group_id))
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


def needs_verification(data, tp, producer: tuple[int, int]) -> bool:
    """Whether the partition has no open transaction of this producer (epoch) yet: its first transactional
    write must be verified with the coordinator (Kafka skips the round trip once one is open)."""
    partition = data.get_partition(tp)
    if partition is None:
        return False  # the append answers the error
    entry = partition.log.producer_state.producers.get(producer[0])
    return entry is None or entry.current_txn_first_offset < 0 or entry.producer_epoch != producer[1]


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
            # The coordinator's marker channel holds this broker's connections to other nodes for transactions.
            response = await services.transactions.markers.channel.request(leader[0], request, 4,
                                                                           purpose="txn-verify")
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
