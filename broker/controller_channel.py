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
on a lone node): the controller's decisions (`metadata.controller.Controller`) are committed through the
Raft quorum (broker/quorum.py's QuorumControllerChannel) and published before the Deferred completes. The
broker-side rules that need this node's configuration (topic config values against their definitions, the
defaults for -1 partitions and replication factor, internal topics) are applied here, as Kafka's
controller applies its own.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from odradek.purgatory.deferred import Deferred
from odradek.protocol.errors import ErrorCode
from odradek.metadata.controller import Controller
from odradek.metadata.image import (
    Endpoint,
    MetadataError,
    MetadataReplayError,
    ProducerIdsBlock,
    replay_all,
)
from odradek.metadata.records import ConfigResourceType

from .config import BrokerConfig, ConfigError
from .topic_config import validate_topic_configs

INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclass(frozen=True, slots=True)
class NewTopic:
    name: str
    num_partitions: int = -1  # -1: the controller's num.partitions
    replication_factor: int = -1  # -1: the controller's default.replication.factor
    configs: Mapping[str, str | None] = field(default_factory=dict)
    assignments: Mapping[int, Sequence[int]] | None = None  # partition index -> broker ids


@dataclass(frozen=True, slots=True)
class CreatedTopic:
    """What CreateTopics reports of a topic created (or that would be, with validate_only)."""

    name: str
    topic_id: uuid.UUID | None  # None with validate_only: no id is drawn
    num_partitions: int
    replication_factor: int
    configs: Mapping[str, str]  # the topic's overrides


@dataclass(frozen=True, slots=True)
class TopicToDelete:
    name: str | None = None
    topic_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class NewPartitions:
    name: str
    count: int
    assignments: Sequence[Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """Set (a value) or delete (None) the named configs of one resource."""

    resource_type: int
    resource_name: str
    changes: Mapping[str, str | None]


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


def _guard(item_op: Callable[[], tuple[list, object]]) -> tuple[list, object]:
    try:
        return item_op()
    except MetadataError as e:
        return [], e


class ControllerDecisions:
    """The controller's side of every call: the broker's rules, the controller's decisions, one batch of
    records per call. How the records are committed is the subclass's (`_commit`): appended to the Raft
    quorum's log by the active controller (broker/quorum.py)."""

    is_active = True  # this node decides (the controller runs here)

    def __init__(self, controller: Controller, config: BrokerConfig, clock: Callable[[], int]) -> None:
        self.controller = controller
        self.config = config
        self.clock = clock

    # -- the calls

    def create_topics(
        self, topics: Sequence[NewTopic], *, validate_only: bool = False, internal: bool = False
    ) -> Deferred[Results]:
        return self._run([lambda t=t: self._create_topic(t, validate_only, internal) for t in topics], validate_only)

    def delete_topics(self, topics: Sequence[TopicToDelete]) -> Deferred[Results]:
        return self._run([lambda t=t: self._delete_topic(t) for t in topics], False)

    def create_partitions(self, topics: Sequence[NewPartitions], *, validate_only: bool = False) -> Deferred[Results]:
        def one(t: NewPartitions):
            return self.controller.create_partitions(t.name, t.count, t.assignments), None

        return self._run([lambda t=t: one(t) for t in topics], validate_only)

    def alter_configs(self, changes: Sequence[ConfigChange], *, validate_only: bool = False) -> Deferred[Results]:
        return self._run([lambda c=c: self._alter_configs(c) for c in changes], validate_only)

    def alter_user_scram_credentials(self, decide: Callable[[Any], tuple[list, object]]) -> Deferred[Results]:
        """SCRAM credential records, as `decide(image)` makes them from the controller's image
        (broker/handlers/sasl.py)."""
        return self._run([lambda: decide(self.controller.image)], False)

    def allocate_producer_ids(self, broker_id: int) -> Deferred[ProducerIdsBlock]:
        return self._single(lambda: self.controller.allocate_producer_ids(broker_id))

    # ACLs and client quotas: one item per binding, filter or quota entity

    def create_acls(self, bindings: Sequence) -> Deferred[Results]:
        return self._run([lambda b=b: self.controller.create_acl(b) for b in bindings], False)

    def delete_acls(self, filters: Sequence) -> Deferred[Results]:
        return self._run([lambda f=f: self.controller.delete_acls(f) for f in filters], False)

    def alter_client_quotas(self, entries: Sequence, *, validate_only: bool = False) -> Deferred[Results]:
        """`entries`: (entity pairs, [(key, value, remove)]) per quota entity."""
        return self._run([lambda e=e: self.controller.alter_client_quota(*e) for e in entries], validate_only)

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
        return self._single(lambda: self.controller.register(request, self.clock()))

    def heartbeat(self, request) -> Deferred:
        """BrokerHeartbeat: the broker's session, unfencing, fencing, controlled shutdown."""
        return self._single(lambda: self.controller.heartbeat(request, self.clock()))

    def unregister(self, request) -> Deferred:
        return self._single(lambda: self.controller.unregister(request))

    def alter_partition(self, request, version: int) -> Deferred:
        return self._single(lambda: self.controller.alter_partition(request, version))

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
        return self._single(lambda: (self.controller.tick(self.clock()), None))

    # -- one road for every change

    def _single(self, op: Callable[[], tuple[list, object]]) -> Deferred:
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
        self._run([op], False).add_callback(unpack)
        return out

    def _run(self, ops: Sequence[Callable[[], tuple[list, object]]], validate_only: bool) -> Deferred[Results]:
        """Run each item's decision against the image as the items before it leave it, then commit all of
        their records as one batch. Each item's result is its value or its MetadataError; the Deferred
        completes once the batch is committed."""
        if not self.is_active:
            return Deferred.failed(MetadataError(ErrorCode.NOT_CONTROLLER, "This node is not the active controller."))
        controller = self.controller
        before = controller.image
        results: Results = []
        records: list = []
        try:
            for op in ops:
                item_records, result = _guard(op)
                if item_records and not isinstance(result, MetadataError):
                    # Later items see this one (a topic named twice exists the second time).
                    controller.image = replay_all(item_records, controller.image)
                    records.extend(item_records)
                results.append(result)
        except MetadataReplayError as e:  # a decision the image cannot take: a bug, refuse the request
            return Deferred.failed(e)
        finally:
            working, controller.image = controller.image, before
        if validate_only or not records:
            return Deferred.completed(results)
        try:
            committed = self._commit(records, working)
        except MetadataError as e:
            return Deferred.completed([e if not isinstance(r, MetadataError) else r for r in results])
        except Exception as e:  # noqa: BLE001 - a storage failure: the log refuses further appends
            return Deferred.failed(e)
        out: Deferred[Results] = Deferred()

        def done(d: Deferred) -> None:
            if d.failed_with is not None:
                out.fail(d.failed_with)
            else:
                out.complete(results)

        committed.add_callback(done)
        return out

    def _commit(self, records: list, working) -> Deferred:
        """Commit `records` (decided against the image `working` they lead to); a Deferred of their commit."""
        raise NotImplementedError

    # -- items

    def _create_topic(self, t: NewTopic, validate_only: bool, internal: bool) -> tuple[list, object]:
        if t.name in INTERNAL_TOPICS and not internal:
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"Topic {t.name} is internal and is created by the broker.")
        num_partitions, replication_factor = t.num_partitions, t.replication_factor
        if t.assignments is None:
            if num_partitions == -1:
                num_partitions = self.config.num_partitions
            if replication_factor == -1:
                replication_factor = self.config.default_replication_factor
        try:
            validate_topic_configs(dict(t.configs))
        except ConfigError as e:
            raise MetadataError(ErrorCode.INVALID_CONFIG, str(e)) from None
        records = self.controller.create_topic(
            t.name, num_partitions, replication_factor, t.configs, assignments=t.assignments
        )
        topic_record, partition_records = records[0], [r for r in records if hasattr(r, "partition_id")]
        created = CreatedTopic(
            name=t.name,
            topic_id=None if validate_only else topic_record.topic_id,
            num_partitions=len(partition_records),
            replication_factor=len(partition_records[0].replicas) if partition_records else -1,
            configs={k: v for k, v in t.configs.items() if v is not None},
        )
        return records, created

    def _delete_topic(self, t: TopicToDelete) -> tuple[list, object]:
        if not self.config.delete_topic_enable:
            raise MetadataError(ErrorCode.TOPIC_DELETION_DISABLED, "Topic deletion is disabled.")
        image = self.controller.image
        topic = image.topics_by_name.get(t.name) if t.name else image.topics_by_id.get(t.topic_id)
        name = topic.name if topic is not None else t.name
        if name in INTERNAL_TOPICS:
            raise MetadataError(ErrorCode.TOPIC_AUTHORIZATION_FAILED, f"Internal topic {name} cannot be deleted.")
        return self.controller.delete_topic(t.name, topic_id=t.topic_id), name

    def _alter_configs(self, c: ConfigChange) -> tuple[list, object]:
        if c.resource_type == ConfigResourceType.TOPIC:
            if c.resource_name not in self.controller.image.topics_by_name:
                raise MetadataError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {c.resource_name} does not exist.")
            try:
                validate_topic_configs({k: v for k, v in c.changes.items() if v is not None})
            except ConfigError as e:
                raise MetadataError(ErrorCode.INVALID_CONFIG, str(e)) from None
        return self.controller.alter_configs(c.resource_type, c.resource_name, c.changes), None

