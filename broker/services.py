"""What request handlers may use: one typed object, built once when the broker's components have started.

A handler is `handle(services: BrokerServices, ctx: RequestContext, request)`. Everything it reaches
is named here with its type, and nothing is added to this object from outside its class: a new service
(the fetchers, the authorizer, the transaction coordinator) is a new field, constructed in
broker/components.py, where the start and stop order is written down.

  * `metadata`: the publisher of committed metadata; `metadata.image` is the current image, which
    every answer about brokers, topics, partitions and the controller comes from.
  * `controller`: the channel every metadata change goes through (broker/controller_channel.py).
  * `data`: the replica manager (partitions, their logs, the produce and fetch purgatories).
  * `groups`: the group coordinator, created with `__consumer_offsets` on first use, as Kafka does.
  * `producer_ids`: producer ids for InitProducerId, from blocks the controller allocates.
  * `transactions`: the transaction coordinator, created with `__transaction_state` on first use.
  * `share_coordinator`: the share coordinator (APIs 83-87), created with `__share_group_state` on first use.
  * `share_persister`: how partition leaders and the group coordinator reach the share coordinator, wherever
    it is (broker/share/network_persister.py; broker/share/persister.py is the contract).
  * `log_dirs`: the log directories' moves (AlterReplicaLogDirs) and failures (broker/log_dirs.py).
  * `quorum`: the Raft driver of the metadata quorum (broker/quorum.py); a lone node is its only voter.
  * `authorizer`: the ACL decisions (broker/authorizer.py), None unless `authorizer.class.name` is set;
    handlers ask through `authorized` / `authorized_names`, one attribute test when it is off.
  * `quotas`: client quota measurements and throttle times (broker/quotas.py).
  * `share`: the share-partition manager (ShareFetch/ShareAcknowledge, share sessions), None unless
    `odradek.share.enabled`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from odradek.coordinator.producer_ids import ProducerIdManager
from odradek.purgatory.deferred import Deferred
from odradek.metadata.image import Endpoint, MetadataImage, TopicImage
from odradek.metadata.publisher import MetadataPublisher
from odradek.replication.replica_manager import ReplicaManager
from odradek.storage.log_manager import LogManager
from odradek.storage.names import TopicPartition

from odradek.metadata.acl import CLUSTER_NAME, AclOperation, ResourceType

from .authorizer import Authorizer
from .config import BrokerConfig
from .dynamic_config import DynamicBrokerConfig
from .controller_channel import ControllerChannel
from .quotas import ClientQuotas
from .share.persister import InMemoryPersister, SharePersister
from .topics import is_internal

if TYPE_CHECKING:
    from odradek.coordinator.group.group_coordinator import GroupCoordinator
    from odradek.coordinator.share.coordinator import ShareCoordinator
    from odradek.coordinator.transaction.coordinator import TransactionCoordinator

    from .context import ConnectionContext, RequestContext
    from .log_dirs import LogDirs
    from .quorum import QuorumDriver
    from .share.manager import SharePartitionManager
    from .share.persister import SharePersister


class BrokerServices:
    __slots__ = (
        "config", "node_id", "now_ms", "metadata", "controller", "data", "log_manager", "producer_ids",
        "api_versions_response", "controller_api_versions_response", "quorum", "_groups", "_groups_factory",
        "_transactions", "_transactions_factory", "_share_coordinator", "_share_coordinator_factory", "share_persister",
        "authorizer", "quotas",
        "log_dirs", "dynamic_config", "share", "node_request",
    )

    def __init__(
        self, *, config: BrokerConfig, now_ms: Callable[[], int], metadata: MetadataPublisher,
        controller: ControllerChannel, data: ReplicaManager, log_manager: LogManager,
        producer_ids: ProducerIdManager, api_versions_response: Any,
        groups_factory: Callable[[], GroupCoordinator], log_dirs: LogDirs, controller_api_versions_response: Any = None,
        quorum: QuorumDriver | None = None, transactions_factory: Callable[[], TransactionCoordinator] | None = None,
        dynamic_config: DynamicBrokerConfig | None = None,
        share_coordinator_factory: Callable[[], ShareCoordinator] | None = None,
        share_persister: SharePersister | None = None, share: SharePartitionManager | None = None,
        node_request: Callable[[int, Any, int], Awaitable[Any]] | None = None,
    ) -> None:
        self.config = config
        # a request to another node at its inter-broker endpoint (the transaction markers' connections), for the
        # few answers that need another broker's figures (a share-partition's end offset for its lag)
        self.node_request = node_request
        self.node_id = config.node_id
        self.now_ms = now_ms
        self.metadata = metadata
        self.controller = controller
        self.data = data
        self.log_manager = log_manager
        self.producer_ids = producer_ids
        self.api_versions_response = api_versions_response
        self.controller_api_versions_response = controller_api_versions_response
        self.quorum = quorum  # the Raft driver (broker/quorum.py); a lone node is its quorum's only voter
        self.log_dirs = log_dirs  # moves between and failures of log directories (broker/log_dirs.py)
        self._groups: GroupCoordinator | None = None
        self._groups_factory = groups_factory
        self._transactions: TransactionCoordinator | None = None
        self._transactions_factory = transactions_factory
        self._share_coordinator: ShareCoordinator | None = None
        self._share_coordinator_factory = share_coordinator_factory
        self.share_persister: SharePersister = share_persister if share_persister is not None else InMemoryPersister()
        self.authorizer = Authorizer.from_config(config, metadata)
        self.quotas = ClientQuotas(config, metadata)
        # this node's config with the image's dynamic broker configs over it (broker/dynamic_config.py)
        self.dynamic_config = dynamic_config if dynamic_config is not None else DynamicBrokerConfig(config)
        self.share = share  # share groups' data path on leaders (broker/share/manager.py); None when disabled

    # -- authorization: every check one line in its handler

    def authorized(self, ctx: RequestContext | ConnectionContext, op: AclOperation, resource_type: ResourceType, name: str = CLUSTER_NAME, *,
                   log_denied: bool = True) -> bool:
        """Whether the request's principal may do `op` on the resource; True when no authorizer is configured.
        `log_denied=False` for a probe whose refusal is not an error (the audit log, broker/authorizer.py)."""
        return self.authorizer is None or self.authorizer.authorize(ctx, op, resource_type, name, log_denied=log_denied)

    def authorized_names(self, ctx: RequestContext, op: AclOperation, resource_type: ResourceType, names: Iterable[str],
                         *, log_denied: bool = True) -> set[str]:
        """The names among `names` the principal may do `op` on (all of them with no authorizer)."""
        if self.authorizer is None:
            return set(names)
        return self.authorizer.authorized_names(ctx, op, resource_type, names, log_denied=log_denied)

    # -- the group coordinator, on first use

    @property
    def groups(self) -> GroupCoordinator:
        if self._groups is None:
            self._groups = self._groups_factory()
        return self._groups

    @property
    def groups_if_started(self) -> GroupCoordinator | None:
        return self._groups

    # -- the transaction coordinator, on first use (with `__transaction_state`)

    @property
    def transactions(self) -> TransactionCoordinator:
        if self._transactions is None:
            if self._transactions_factory is None:
                raise RuntimeError("this broker has no transaction coordinator")
            self._transactions = self._transactions_factory()
        return self._transactions

    @property
    def transactions_if_started(self) -> TransactionCoordinator | None:
        return self._transactions

    # -- the share coordinator, on first use (with `__share_group_state`)

    @property
    def share_coordinator(self) -> ShareCoordinator:
        if self._share_coordinator is None:
            if self._share_coordinator_factory is None:
                raise RuntimeError("this broker has no share coordinator")
            self._share_coordinator = self._share_coordinator_factory()
        return self._share_coordinator

    @property
    def share_coordinator_if_started(self) -> ShareCoordinator | None:
        return self._share_coordinator

    # -- the image

    @property
    def image(self) -> MetadataImage:
        return self.metadata.image

    def topic_by_name(self, name: str) -> TopicImage | None:
        return self.metadata.image.topics_by_name.get(name)

    def topic_by_id(self, topic_id) -> TopicImage | None:
        return self.metadata.image.topics_by_id.get(topic_id)

    @staticmethod
    def is_internal_topic(name: str) -> bool:
        return is_internal(name)

    @staticmethod
    def allows_internal_writes(name: str) -> bool:
        """Clients never write internal topics directly (coordinators append to them in process)."""
        return False

    def live_brokers(self) -> list[int]:
        """Registered, unfenced brokers, by id: the ones Metadata lists."""
        return sorted(b.broker_id for b in self.metadata.image.brokers.values() if not b.fenced)

    def endpoint(self, broker_id: int, listener: str) -> Endpoint | None:
        """Where clients of `listener` reach `broker_id`: its registered endpoint of that listener name."""
        registration = self.metadata.image.brokers.get(broker_id)
        if registration is None:
            return None
        for endpoint in registration.endpoints:
            if endpoint.name == listener:
                return endpoint
        return None

    def coordinates_here_in_vain(self, topic: str, partition: int) -> bool:
        """Whether this broker leads the internal topic's partition but cannot write it: no controller has
        answered it for a session and the partition's ISR needs a change (stranded, replica_manager.py).
        FindCoordinator then names the replica the controller elects in its place, or no coordinator
        (broker/handlers/groups.py's `_locate`), rather than this broker, whose every write would time out."""
        return TopicPartition(topic, partition) in self.data.stranded

    def partition_leader(self, topic: str, partition: int) -> tuple[int, int] | None:
        """(leader id, leader epoch) of a partition in the image; None when it has no leader or is unknown."""
        image = self.metadata.image.topics_by_name.get(topic)
        p = image.partitions.get(partition) if image is not None else None
        if p is None or p.leader < 0:
            return None
        return p.leader, p.leader_epoch

    def node_endpoint(self, node_endpoint_class, broker_id: int, listener: str):
        """A response's NodeEndpoint entry (KIP-951 hints) for `broker_id` on `listener`, or None."""
        endpoint = self.endpoint(broker_id, listener)
        if endpoint is None:
            return None
        rack = self.metadata.image.brokers[broker_id].rack
        return node_endpoint_class(node_id=broker_id, host=endpoint.host, port=endpoint.port, rack=rack)

    def controller_id(self) -> int:
        """The controller id clients are told: this node. As in KRaft, clients never reach the controllers;
        they send what is meant for the controller to a broker, which forwards it (KIP-590), and the node
        that answered is the one surely up (a fenced node forwards as well as any)."""
        return self.node_id

    # -- answers that come later

    @staticmethod
    def future_from(deferred: Deferred) -> asyncio.Future:
        """Adapt a Deferred (coordinators and the controller channel: no asyncio below broker/) to a future."""
        future = asyncio.get_running_loop().create_future()

        def settle(d: Deferred) -> None:
            if future.done():
                return
            error = d.failed_with
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(d.result())

        deferred.add_callback(settle)
        return future

    def answer(self, deferred: Deferred, build: Callable[[Any], Any]):
        """`build(result)` now if the Deferred is complete (a local controller), else a future of it; a
        failure becomes the handler's failure (the connection closes)."""

        def built(d: Deferred):
            return build(d.result())  # (result() raises what the Deferred failed with)

        return self.settle(deferred, built)

    def settle(self, deferred: Deferred, build: Callable[[Deferred], Any]):
        """`build(deferred)` once it is complete (now if it is), failed or not: for answers that report
        a failure as an error code rather than by closing the connection."""
        if deferred.done:
            return build(deferred)
        future = asyncio.get_running_loop().create_future()

        def settle(d: Deferred) -> None:
            if not future.done():
                try:
                    future.set_result(build(d))
                except Exception as e:  # noqa: BLE001 - the connection closes, as for any handler failure
                    future.set_exception(e)

        deferred.add_callback(settle)
        return future
