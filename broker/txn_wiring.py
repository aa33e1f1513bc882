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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from odradek.coordinator.partitioning import TRANSACTION_STATE_TOPIC
from odradek.coordinator.transaction.config import TransactionCoordinatorConfig
from odradek.coordinator.transaction.coordinator import TransactionCoordinator
from odradek.protocol.errors import ErrorCode
from odradek.protocol.headers import RequestHeader
from odradek.protocol.messages import WriteTxnMarkersRequest
from odradek.metadata.image import Endpoint
from odradek.metadata.publisher import MetadataPublisher, MetadataUpdate
from odradek.purgatory.timing_wheel import Timer
from odradek.replication.replica_manager import ReplicaManager

from .config import BrokerConfig
from .context import ANONYMOUS, ConnectionContext, KafkaPrincipal, RequestContext
from .groups_wiring import EpochCoordinatorLoader, MetadataTopicsView
from .internal_topics import InternalTopicWriter, ensure_internal_topic, transaction_state_topic_spec
from .services import BrokerServices

if TYPE_CHECKING:
    from .controller_channel import ControllerChannel
    from .node_client import NodeConnections, NodeSecurity

log = structlog.get_logger("odradek.txn_markers")

WRITE_TXN_MARKERS_VERSION = 1


class TransactionCoordinatorLoader(EpochCoordinatorLoader):
    """Loads and unloads the coordinator's `__transaction_state` partitions as their leadership moves; the
    leader epoch is the coordinator epoch its markers carry."""

    topic = TRANSACTION_STATE_TOPIC

    def __init__(self, coordinator: TransactionCoordinator, node_id: int, clock: Callable[[], int]) -> None:
        super().__init__(node_id, clock)
        self.coordinator = coordinator

    def elected(self, index: int, now: int, leader_epoch: int) -> None:
        self.coordinator.on_elected(index, now, coordinator_epoch=leader_epoch)

    def resigned(self, index: int) -> None:
        self.coordinator.on_resigned(index)


class MarkerSender:
    """The coordinator's MarkerChannel: WriteTxnMarkers sent over the network, their responses reported back."""

    def __init__(self, config: BrokerConfig, *, clock: Callable[[], int], timers_changed: Callable[[], None],
                 dispatch: Callable[[RequestContext], Any], endpoint: Callable[[int, str], Endpoint | None]) -> None:
        self.config = config
        self.node_id = config.node_id
        self.clock = clock
        self._timers_changed = timers_changed  # re-arms the broker's timing wheel
        self._dispatch = dispatch  # a request answered in process, as the network would hand it over
        self._endpoint = endpoint  # a node's endpoint for a listener, from the image
        self._tasks: set[asyncio.Task] = set()
        self._connections: NodeConnections | None = None
        # TLS / SASL of the inter-broker listener, as the replica fetchers use (in a 1-tuple once looked up)
        self._security: tuple[NodeSecurity | None] | None = None
        self._correlation = itertools.count()

    # -- MarkerChannel --

    def send(self, leader_id: int, request: WriteTxnMarkersRequest, done) -> None:
        task = asyncio.get_running_loop().create_task(self._send(leader_id, request, done))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def now_ms(self) -> int:
        return self.clock()

    def timers_changed(self) -> None:
        self._timers_changed()

    async def _send(self, leader_id: int, request: WriteTxnMarkersRequest, done) -> None:
        try:
            if leader_id == self.node_id:
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
        self._timers_changed()

    async def close(self) -> None:
        tasks, self._tasks = list(self._tasks), set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._connections is not None:
            await self._connections.close()

    async def _local(self, request):
        """This broker's own partitions: the WriteTxnMarkers handler, called as a request would reach it."""
        header = RequestHeader(api_key=27, api_version=WRITE_TXN_MARKERS_VERSION, correlation_id=next(self._correlation),
                               client_id=f"txn-markers-{self.node_id}")
        # As the request would arrive from this broker over the inter-broker listener: its SASL user there
        # (ANONYMOUS on PLAINTEXT), which ACLs grant CLUSTER_ACTION to (or super.users names).
        security = self._node_security()
        principal = KafkaPrincipal("User", security.username) if security is not None and security.username else ANONYMOUS
        connection = ConnectionContext(connection_id="txn-markers-local", client_host="127.0.0.1",
                                       listener=self.config.inter_broker_listener, principal=principal)
        ctx = RequestContext(header=header, request=request, connection=connection, received_ns=0, frame_size=0)
        result = self._dispatch(ctx)
        if isinstance(result, asyncio.Future):
            result = await result
        return result

    async def _remote(self, leader: int, request):
        return await self.request(leader, request, WRITE_TXN_MARKERS_VERSION, purpose="txn-markers", timeout_s=30.0)

    async def request(self, node_id: int, message, version: int, *, purpose: str, timeout_s: float = 10.0):
        """A request to another node at its inter-broker endpoint (markers, and produce verification)."""
        if self._connections is None:
            from .node_client import NodeConnections

            self._connections = NodeConnections(self._resolve, client_id=f"odradek-txn-{self.node_id}",
                                                security=self._node_security())
        return await self._connections.request(node_id, message, version, purpose=purpose, timeout_s=timeout_s)

    def _node_security(self) -> NodeSecurity | None:
        if self._security is None:
            from .security import node_security

            cfg = self.config
            self._security = (node_security(cfg, cfg.inter_broker_listener, "sasl.mechanism.inter.broker.protocol"),)
        return self._security[0]

    def _resolve(self, node_id: int):
        endpoint = self._endpoint(node_id, self.config.inter_broker_listener)
        return None if endpoint is None else (endpoint.host, endpoint.port)


class StartWhenLeading:
    """Starts the transaction coordinator on a broker that becomes leader of a `__transaction_state`
    partition before any transactional request reached it (a failover: the new leader must resume the
    markers and the timeouts of what it loads at once, not on the next request). A metadata listener."""

    def __init__(self, services: BrokerServices, node_id: int, after_state_change: Callable[[], None]) -> None:
        self.services = services
        self.node_id = node_id
        self.after_state_change = after_state_change
        self.done = False

    def on_metadata_update(self, update: MetadataUpdate) -> None:
        if self.done or self.services.transactions_if_started is not None:
            return
        topic = update.image.topics_by_name.get(TRANSACTION_STATE_TOPIC)
        if topic is not None and any(p.leader == self.node_id for p in topic.partitions.values()):
            self.done = True
            # Not from inside the publisher's loop over its listeners: starting registers one more.
            asyncio.get_running_loop().call_soon(self._start)

    def _start(self) -> None:
        if self.services.transactions_if_started is None:
            self.services.transactions
            self.after_state_change()


def start_transaction_coordinator(cfg: BrokerConfig, data: ReplicaManager, timer: Timer, publisher: MetadataPublisher,
                                  controller: ControllerChannel, services: BrokerServices, markers: MarkerSender,
                                  clock: Callable[[], int]) -> TransactionCoordinator:
    # None: not created yet (fewer live brokers than its replication factor); FindCoordinator asks again.
    num_partitions = (ensure_internal_topic(publisher, controller, transaction_state_topic_spec(cfg))
                      or cfg.transaction_state_log_num_partitions)
    config = TransactionCoordinatorConfig.from_broker_config(cfg, transaction_state_log_num_partitions=num_partitions)
    coordinator = TransactionCoordinator(
        InternalTopicWriter(data, TRANSACTION_STATE_TOPIC, enforce_min_isr=True), timer, config,
        next_producer_id=services.producer_ids.next_producer_id, marker_channel=markers,
        image=lambda: publisher.image, topics=MetadataTopicsView(publisher),
        # The group's partition as the group coordinator places it (the topic's own partition count).
        offsets_partition_for=lambda group_id: services.groups.partition_for(group_id))
    publisher.register(TransactionCoordinatorLoader(coordinator, cfg.node_id, clock))
    return coordinator
