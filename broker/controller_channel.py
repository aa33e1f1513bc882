"""The controller as the broker's handlers reach it: metadata changes go here and are answered once committed.

Every request that changes cluster metadata (CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs
and IncrementalAlterConfigs, the producer-id blocks behind InitProducerId, a broker's own registration)
becomes a call on a `ControllerChannel`, which answers with a `Deferred`: completed with one result per
item once the records that carry the change are committed to the metadata log, or failed. The handler
answers its client from that result, now if it is already complete, else when it completes. Nothing in a
handler writes metadata or opens a log itself: committed metadata reaches the rest of the broker only
through the `MetadataPublisher`, so a change made here and a change found in the log take one road.

The calls mirror Kafka's controller RPCs (one call per API, items in, results out in the same order,
each result a value or the `MetadataError` that refused it), so that a channel to a remote, active
controller can carry them as those RPCs (broker/quorum.py's ClusterControllerChannel).

`ControllerDecisions` is the deciding side, in the process of the active controller (every node's own,
on a lone node): each call's items are decided by the controller (`metadata.controller.Controller.decide_each`:
the topic defaults, config validation and internal-topic rules are the controller's own, as in Kafka), and
their records are committed as one batch through the Raft quorum (broker/quorum.py's
QuorumControllerChannel) and published before the Deferred completes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Protocol

import structlog

from odradek.purgatory.deferred import Deferred
from odradek.protocol.errors import ErrorCode
from odradek.metadata.controller import Controller
from odradek.metadata.controller.event_log import log_committed
from odradek.metadata.controller.requests import (  # re-exported: the handlers' items and results
    INTERNAL_TOPICS,
    ConfigChange,
    CreatedTopic,
    NewPartitions,
    NewTopic,
    TopicToDelete,
)
from odradek.metadata.image import (
    Endpoint,
    MetadataError,
    MetadataReplayError,
    ProducerIdsBlock,
)

from .config import BrokerConfig
from .context import ConnectionContext
from .controller_settings import is_built_from

log = structlog.get_logger("odradek.controller")

__all__ = [
    "INTERNAL_TOPICS",
    "ConfigChange",
    "ControllerChannel",
    "ControllerDecisions",
    "CreatedTopic",
    "NewPartitions",
    "NewTopic",
    "Results",
    "TopicToDelete",
]

Results = list  # one value or MetadataError per item, in the items' order


class ControllerChannel(Protocol):
    def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False, internal: bool = False
    ) -> Deferred[Results]: ...

    def delete_topics(self, topics: Sequence[TopicToDelete]) -> Deferred[Results]: ...

    def create_partitions(self, topics: Sequence[NewPartitions], *, validate_only: bool = False) -> Deferred[Results]: ...

    def alter_configs(self, changes: Sequence[ConfigChange], *, validate_only: bool = False) -> Deferred[Results]: ...

    def allocate_producer_ids(self, broker_id: int) -> Deferred[ProducerIdsBlock]: ...

    def register_broker(
        self, broker_id: int, endpoints: Sequence[Endpoint], *, rack: str | None, cluster_id: str | None
    ) -> Deferred[int]: ...

    # What the request handlers ask besides (broker/handlers/): the admin changes decided item by item, the
    # brokers' and leaders' controller RPCs, and forwarding to the active controller from any other node.

    @property
    def is_active(self) -> bool: ...

    def forward(self, request: Any, version: int, *, timeout_s: float | None = None, client: Any = None) -> Any: ...

    def alter_user_scram_credentials(self, deletions: Sequence, upsertions: Sequence) -> Deferred[Results]: ...

    def create_acls(self, bindings: Sequence) -> Deferred[Results]: ...

    def delete_acls(self, filters: Sequence) -> Deferred[Results]: ...

    def alter_client_quotas(self, entries: Sequence, *, validate_only: bool = False) -> Deferred[Results]: ...

    def broker_registration(self, request: Any) -> Deferred: ...

    def heartbeat(self, request: Any, *, connection: ConnectionContext | None = None) -> Deferred: ...

    def unregister(self, request: Any) -> Deferred: ...

    def alter_partition(self, request: Any, version: int) -> Deferred: ...

    def assign_replicas_to_dirs(self, request: Any) -> Deferred: ...

    def elect_leaders(self, request: Any) -> Deferred: ...

    def alter_partition_reassignments(self, request: Any) -> Deferred: ...

    def list_partition_reassignments(self, request: Any) -> Any: ...


class ControllerDecisions:
    """The channel side of every call when the controller runs in this process: the controller decides the
    items (`Controller.decide_each`), one batch of records per call is committed, and the call is answered
    once it is. How the records are committed is the subclass's (`_commit`): appended to the Raft quorum's log by
    the active controller (broker/quorum.py; on a lone node, the node itself).

    `controller` must decide under `config` (broker/controller_settings.py's `new_controller(config)`):
    a controller built from other settings would apply other topic defaults and rules than this node's
    configuration says, so it is refused here."""

    is_active = True  # this node decides (the controller runs here)

    def __init__(self, controller: Controller, config: BrokerConfig, clock: Callable[[], int]) -> None:
        if not is_built_from(controller, config):
            raise ValueError("the controller was not built from this node's configuration: use new_controller(config)")
        self.controller = controller
        self.clock = clock

    # -- the calls

    def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False, internal: bool = False
    ) -> Deferred[Results]:
        decide = self.controller.decide_create_topic
        ops = [partial(decide, t, validate_only=validate_only, internal=internal) for t in topics]
        return self._run(ops, validate_only)

    def delete_topics(self, topics: Sequence[TopicToDelete]) -> Deferred[Results]:
        return self._run([partial(self.controller.decide_delete_topic, t) for t in topics], False)

    def create_partitions(self, topics: Sequence[NewPartitions], *, validate_only: bool = False) -> Deferred[Results]:
        return self._run([partial(self.controller.decide_create_partitions, t) for t in topics], validate_only)

    def alter_configs(self, changes: Sequence[ConfigChange], *, validate_only: bool = False) -> Deferred[Results]:
        return self._run([partial(self.controller.decide_alter_config, c) for c in changes], validate_only)

    def alter_user_scram_credentials(self, deletions: Sequence, upsertions: Sequence) -> Deferred[Results]:
        """One item: each named user's outcome (metadata/controller/scram_control.py)."""
        return self._run([lambda: self.controller.alter_user_scram_credentials(deletions, upsertions)], False)

    def allocate_producer_ids(self, broker_id: int) -> Deferred[ProducerIdsBlock]:
        return self._single(lambda: self.controller.allocate_producer_ids(broker_id))

    # ACLs and client quotas: one item per binding, filter or quota entity

    def create_acls(self, bindings: Sequence) -> Deferred[Results]:
        return self._run([partial(self.controller.create_acl, b) for b in bindings], False)

    def delete_acls(self, filters: Sequence) -> Deferred[Results]:
        return self._run([partial(self.controller.delete_acls, f) for f in filters], False)

    def alter_client_quotas(self, entries: Sequence, *, validate_only: bool = False) -> Deferred[Results]:
        """`entries`: (entity pairs, [(key, value, remove)]) per quota entity."""
        return self._run([partial(self.controller.alter_client_quota, *e) for e in entries], validate_only)

    def register_broker(
        self, broker_id: int, endpoints: Sequence[Endpoint], *, rack: str | None, cluster_id: str | None
    ) -> Deferred[int]:
        """Register this node (a new incarnation and broker epoch); on an empty log, bootstrap the cluster
        first (metadata.version and the cluster id). Answers the broker epoch."""

        def op():
            records = self.controller.bootstrap(cluster_id, broker_id, endpoints, rack=rack)
            return records, records[-1].broker_epoch

        return self._single(op)

    # -- the brokers' and the leaders' RPCs to the controller: (records, response) decisions

    def broker_registration(self, request) -> Deferred:
        """BrokerRegistration: a new incarnation registers fenced (the heartbeat unfences it once it has
        caught up); the same incarnation again is idempotent. Answers the response."""
        return self._single(lambda: self.controller.register(request, self.clock()), cause="registration")

    def heartbeat(self, request, *, connection: ConnectionContext | None = None) -> Deferred:
        """BrokerHeartbeat: the broker's session, unfencing, fencing, controlled shutdown. `connection`, the
        one it arrived on (None: from this process), is watched by a controller that fences on its close
        (broker/quorum.py)."""
        return self._single(lambda: self.controller.heartbeat(request, self.clock()), cause="heartbeat")

    def unregister(self, request) -> Deferred:
        return self._single(lambda: self.controller.unregister(request), cause="unregistration")

    def alter_partition(self, request, version: int) -> Deferred:
        return self._single(lambda: self.controller.alter_partition(request, version), cause="AlterPartition")

    def assign_replicas_to_dirs(self, request) -> Deferred:
        return self._single(lambda: self.controller.assign_replicas_to_dirs(request))

    def elect_leaders(self, request) -> Deferred:
        return self._single(lambda: self.controller.elect_leaders(request))

    def alter_partition_reassignments(self, request) -> Deferred:
        return self._single(lambda: self.controller.alter_partition_reassignments(request))

    def list_partition_reassignments(self, request):
        return self.controller.list_partition_reassignments(request)

    def tick(self) -> Deferred:
        """The controller's periodic decisions (fencing brokers whose session expired, unclean and preferred
        leader elections), committed like any other change."""
        # (what a tick fences is a broker whose session expired; what it elects, leaderless partitions)
        return self._single(lambda: (self.controller.tick(self.clock()), None), cause="session expired")

    # -- one road for every change

    def _single(self, op: Callable[[], tuple[list, object]], *, cause: str | None = None) -> Deferred:
        def unpack(d: Deferred[Results]) -> None:
            error = d.failed_with
            if error is not None:
                out.fail(error)
                return
            (value,) = d.result()
            if isinstance(value, MetadataError):
                out.fail(value)
            else:
                out.complete(value)

        out: Deferred = Deferred()
        self._run([op], False, cause=cause).add_callback(unpack)
        return out

    def _run(self, ops: Sequence[Callable[[], tuple[list, object]]], validate_only: bool, *,
             cause: str | None = None) -> Deferred[Results]:
        """Have the controller decide the items, then commit all of their records as one batch. Each item's
        result is its value or its MetadataError; the Deferred completes once the batch is committed, and
        the changes it made are logged then, once, here on the active controller (event_log.py; `cause`
        says what asked for them, where a log line should tell)."""
        before = self.controller.image
        if not self.is_active:
            return Deferred.failed(MetadataError(ErrorCode.NOT_CONTROLLER, "This node is not the active controller."))
        before = self.controller.image
        try:
            records, results, working = self.controller.decide_each(ops)
        except MetadataReplayError as e:  # a decision the image cannot take: a bug, refuse the request
            return Deferred.failed(e)
        if validate_only or not records:
            return Deferred.completed(results)
        try:
            committed = self._commit(records, working)
        except MetadataError as e:
            return Deferred.completed([e if not isinstance(r, MetadataError) else r for r in results])
        except Exception as e:  # noqa: BLE001 - a storage failure: the log refuses further appends
            return Deferred.failed(e)
        log_partition_events(records, before, working)
        out: Deferred[Results] = Deferred()

        def done(d: Deferred) -> None:
            if d.failed_with is not None:
                out.fail(d.failed_with)
            else:
                log_committed(records, before, cause)
                out.complete(results)

        committed.add_callback(done)
        return out

    def _commit(self, records: list, working) -> Deferred:
        """Commit `records` (decided against the image `working` they lead to); a Deferred of their commit."""
        raise NotImplementedError


def log_partition_events(records: Sequence[Any], before: Any, after: Any) -> None:
    """Log, once each, the partition changes an operator must hear of: an unclean election (the new leader
    may lack acknowledged records: it is RECOVERING), a partition losing its leader (with the ISR and the
    eligible replicas it waits for), and a partition left with no in-sync and no eligible replica (KIP-966:
    it waits for one, or for an unclean election). `before` and `after` are the images around `records`."""
    changed = dict.fromkeys((r.topic_id, r.partition_id) for r in records if type(r).__name__ == "PartitionChangeRecord")
    for topic_id, partition_id in changed:
        topic = after.topics_by_id.get(topic_id)
        old_topic = before.topics_by_id.get(topic_id)
        partition = topic.partitions.get(partition_id) if topic is not None else None
        old = old_topic.partitions.get(partition_id) if old_topic is not None else None
        if partition is None or old is None:
            continue
        name = f"{topic.name}-{partition_id}"
        if partition.leader_recovery_state == 1 and old.leader_recovery_state != 1:
            log.warning("unclean leader election: records acknowledged but not on the new leader are lost",
                        partition=name, leader=partition.leader, previous_isr=list(old.isr),
                        previous_elr=list(old.elr), last_known_leader=list(old.last_known_elr))
            continue
        if partition.leader == -1 and old.leader != -1:
            log.warning("partition has no leader: it waits for an in-sync or eligible replica to return",
                        partition=name, isr=list(partition.isr), elr=list(partition.elr),
                        replicas=list(partition.replicas))
        if partition.leader == -1 and not partition.isr and not partition.elr and (old.isr or old.elr):
            log.warning("partition has no in-sync or eligible replica: it waits for one to return (or an unclean "
                        "election)", partition=name, replicas=list(partition.replicas),
                        last_known_leader=list(partition.last_known_elr))
