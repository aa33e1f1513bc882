"""The controller's decisions: which metadata records carry out an operation, or why it is refused.

Each operation (create a topic, delete one, add partitions, alter configs, hand out a producer-id block,
register, heartbeat, fence or unregister a broker, change an ISR, elect leaders, reassign replicas)
validates against the controller's current image and returns the records that carry it out, or raises
`MetadataError` with Kafka's error code and message. The operations that are Kafka controller RPCs take
the request message and return `(records, response)`; per-partition errors are in the response, errors of
the whole request are raised. The records take effect when they are committed to the metadata log and
replayed, by the controller (which then sees its own change in `image`) and by every broker following the
log.

`Controller` is the facade of Kafka's QuorumController: it keeps the image decisions are made against and
hands each operation to the control manager that owns that part of the metadata, one module each:

    cluster_control        brokers: registration, heartbeats and sessions, fencing, controlled shutdown
    replication_control    topics and partitions: creation, deletion, ISR changes, elections,
                           reassignments, leader balance
    configuration_control  dynamic configs of topics and brokers
    acl_control            ACL bindings
    client_quota_control   client quotas
    scram_control          SCRAM users' credentials
    producer_id_control    producer-id blocks
    feature_control        finalized feature levels (metadata.version)

A manager is given the image (and the log end offset where broker epochs depend on it) and returns
records; none reaches into another. Where one needs another it holds a narrow interface: replication
asks `RegisteredBrokers` (brokers.py) which brokers are active and the configuration manager whether a
topic allows unclean elections; the cluster manager asks replication what a broker leaving or joining does
to the partitions. The records of one operation are gathered in one `PartitionChanges`
(partition_changes.py), so a later step sees an earlier one.

The controller is sans-I/O. What drives it is the controller channel in broker/ (the active controller's
request handlers and its commit road). `image` and `log_end_offset` are the state of the log the owner keeps
current (`advance`): decisions must see every record already decided (Kafka's controller decides against
its uncommitted state), so with a quorum that is the image including records appended but not yet
committed, or operations wait for the previous one's commit. `rng` draws topic ids, incarnation ids,
cluster ids, ACL ids and replica placement (a seeded Random makes them reproducible in tests); every
manager draws from the one `rng`, in the order the operations run.

A channel call with several items (the topics of a CreateTopics) runs them through `decide_each`: each
item against the image the items before it leave, so a topic named twice exists the second time.

The only state outside the image is soft: the brokers' sessions (the cluster manager's `heartbeats`,
broker_heartbeats.py: last contact, reported metadata offset), as in Kafka, and the time of the next
leader-balance check (the replication manager's). Time is an argument: `heartbeat(request, now_ms)`, and
a broker's heartbeat connection seen closed `broker_disconnected(broker_id, now_ms)`, and
the periodic decisions `tick(now_ms)` (= `maybe_fence_stale_brokers`, `maybe_elect_unclean_leaders`,
`maybe_balance_partition_leaders`), due at `next_deadline_ms()`.

The static configuration is a `ControllerSettings` (settings.py), topic config values are checked by the
`TopicConfigValidator` the owner gives.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from odradek.protocol.errors import ErrorCode
from odradek.metadata.broker_heartbeats import BrokerHeartbeatManager
from odradek.metadata.image import (
    Endpoint,
    MetadataError,
    MetadataImage,
    ProducerIdsBlock,
    new_cluster_id,
    replay_all,
)
from odradek.metadata.records import ClusterIdRecord, ConfigResourceType

from .acl_control import AclControlManager
from .brokers import RegisteredBrokers
from .client_quota_control import ClientQuotaControlManager
from .cluster_control import ClusterControlManager
from .configuration_control import ConfigurationControlManager
from .feature_control import FeatureControlManager
from .producer_id_control import DEFAULT_PRODUCER_ID_BLOCK_SIZE, ProducerIdControlManager
from .replication_control import ReplicationControlManager
from .requests import ConfigChange, NewPartitions, NewTopic, TopicToDelete
from .scram_control import ScramControlManager, ScramOutcome
from .settings import MIN_INSYNC_REPLICAS, BrokerConfigValidator, ControllerSettings, TopicConfigValidator

Decision = tuple[list, Any]
"""What one item of a channel call decides: its records and its result (or MetadataError, then no records)."""


class Controller:
    """See the module doc. `advance(image, log_end_offset)` after every commit the controller should see.

    `settings` is the static configuration; keyword `overrides` replace single fields of it (tests,
    `Controller(leader_imbalance_check_interval_ms=5000)`). `validate_topic_configs` checks topic config
    values, `validate_broker_configs` dynamic broker configs (none: values are not checked)."""

    # Records given at format time (`odradek storage format --add-scram`), written with the bootstrap records.
    bootstrap_extra: tuple = ()

    def __init__(
        self,
        settings: ControllerSettings | None = None,
        *,
        rng: random.Random | None = None,
        validate_topic_configs: TopicConfigValidator | None = None,
        validate_broker_configs: BrokerConfigValidator | None = None,
        bootstrap_extra: Sequence[Any] = (),
        **overrides: Any,
    ) -> None:
        self.settings = dataclasses.replace(settings or ControllerSettings(), **overrides)
        self.bootstrap_extra = tuple(bootstrap_extra)
        self.validate_topic_configs = validate_topic_configs
        self.validate_broker_configs = validate_broker_configs
        self.image = MetadataImage()
        self.log_end_offset = 0
        self._rng = rng or random.SystemRandom()
        brokers = RegisteredBrokers()
        self.features = FeatureControlManager()
        self.configs = ConfigurationControlManager(self.settings, validate_topic_configs, validate_broker_configs)
        self.replication = ReplicationControlManager(self.settings, self._rng, brokers, self.configs)
        self.cluster = ClusterControlManager(
            self.settings.session_timeout_ms, self._rng, brokers, self.features, self.replication,
            disconnect_grace_ms=self.settings.broker_disconnect_grace_ms,
            heartbeat_interval_ms=self.settings.broker_heartbeat_interval_ms,
        )
        self.acls = AclControlManager(self._rng)
        self.client_quotas = ClientQuotaControlManager()
        self.scram = ScramControlManager()
        self.producer_ids = ProducerIdControlManager(brokers)

    @property
    def heartbeats(self) -> BrokerHeartbeatManager:
        """The brokers' sessions (the cluster control manager's)."""
        return self.cluster.heartbeats

    def advance(self, image: MetadataImage, log_end_offset: int) -> None:
        self.image = image
        self.log_end_offset = log_end_offset

    def activate(self, now_ms: int) -> None:
        """This controller became the active one: every registered broker gets a session starting now."""
        self.cluster.activate(self.image, now_ms)

    def decide_each(self, ops: Sequence[Callable[[], Decision]]) -> tuple[list, list, MetadataImage]:
        """Run each item's decision against the image as the items before it leave it: (the records of the
        items that succeeded, in order; each item's result or its MetadataError; the image those records
        lead to). Nothing changes here: `image` is as before when this returns. A MetadataReplayError (a
        decision the image cannot take: a bug) propagates."""
        before = self.image
        results: list = []
        records: list = []
        try:
            for op in ops:
                try:
                    item_records, result = op()
                except MetadataError as e:
                    item_records, result = [], e
                if item_records and not isinstance(result, MetadataError):
                    # Later items see this one (a topic named twice exists the second time).
                    self.image = replay_all(item_records, self.image)
                    records.extend(item_records)
                results.append(result)
        finally:
            working, self.image = self.image, before
        return records, results, working

    # -- bootstrap and the broker lifecycle (ClusterControlManager, FeatureControlManager)

    def bootstrap_records(self, cluster_id: str) -> list:
        """What a new cluster's log starts with (Kafka's bootstrap records): the feature levels, the cluster
        id, the records formatting added (`bootstrap_extra`), and, ELR being finalized, the cluster-wide
        min.insync.replicas (`activation_records`)."""
        return [
            *self.features.bootstrap_records(self.bootstrap_extra),
            ClusterIdRecord(cluster_id=cluster_id),
            *self.bootstrap_extra,
            *self.configs.min_insync_replicas_records(self.image),
        ]

    def activation_records(self) -> list:
        """What a newly active controller writes before anything else (Kafka 4.1+'s activation records):
        with ELR on, the cluster-wide min.insync.replicas ConfigRecord if the log has none
        (configuration_control.py says why)."""
        if not self.replication.elr_enabled(self.image):
            return []
        return self.configs.min_insync_replicas_records(self.image)

    def bootstrap(
        self, cluster_id: str | None, node_id: int, endpoints: Sequence[Endpoint], *, rack: str | None = None
    ) -> list:
        """The records to write when this node starts. On an empty log: the metadata.version feature level,
        the cluster id (`cluster_id`, or a new one when None) and the broker's registration; afterwards
        only a new registration (a new incarnation and broker epoch), and a given `cluster_id` must match
        the logged one (INCONSISTENT_CLUSTER_ID)."""
        image = self.image
        records: list = []
        if image.cluster_id is None:
            records.extend(self.bootstrap_records(cluster_id or new_cluster_id(self._rng)))
        elif cluster_id is not None and cluster_id != image.cluster_id:
            raise MetadataError(
                ErrorCode.INCONSISTENT_CLUSTER_ID,
                f"The metadata log belongs to cluster {image.cluster_id}, not {cluster_id}",
            )
        records.extend(self.register_broker(node_id, endpoints, rack=rack))
        return records

    def register_broker(
        self, broker_id: int, endpoints: Sequence[Endpoint], *, rack: str | None = None, fenced: bool = False
    ) -> list:
        return self.cluster.register_broker(
            self.image, self.log_end_offset, broker_id, endpoints, rack=rack, fenced=fenced
        )

    def unregister_broker(self, broker_id: int) -> list:
        return self.cluster.unregister_broker(self.image, broker_id)

    def fence_broker(self, broker_id: int) -> list:
        return self.cluster.fence_broker(self.image, broker_id)

    def unfence_broker(self, broker_id: int) -> list:
        return self.cluster.unfence_broker(self.image, broker_id)

    def register(self, request, now_ms: int) -> tuple[list, object]:
        return self.cluster.register(self.image, self.log_end_offset, request, now_ms)

    def heartbeat(self, request, now_ms: int) -> tuple[list, object]:
        return self.cluster.heartbeat(self.image, self.log_end_offset, request, now_ms)

    def unregister(self, request) -> tuple[list, object]:
        return self.cluster.unregister(self.image, request)

    def maybe_fence_stale_brokers(self, now_ms: int) -> list:
        return self.cluster.maybe_fence_stale_brokers(self.image, now_ms)

    def broker_disconnected(self, broker_id: int, now_ms: int) -> bool:
        """The connection broker `broker_id` heartbeats on closed at `now_ms` (the owner saw it): unless it
        heartbeats again within the disconnect grace, `tick` fences it (cluster_control.py). True if that
        started a grace (an unfenced broker with a session here, and the rule is on)."""
        return self.cluster.broker_disconnected(broker_id, now_ms)

    # -- topics and partitions (ReplicationControlManager)

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str | None] | None = None,
        *,
        assignments: Mapping[int, Sequence[int]] | None = None,
    ) -> list:
        return self.replication.create_topic(
            self.image, name, num_partitions, replication_factor, configs, assignments=assignments
        )

    def delete_topic(self, name: str | None = None, *, topic_id: uuid.UUID | None = None) -> list:
        return self.replication.delete_topic(self.image, name, topic_id=topic_id)

    def create_partitions(self, name: str, count: int, assignments: Sequence[Sequence[int]] | None = None) -> list:
        return self.replication.create_partitions(self.image, name, count, assignments)

    def alter_partition(self, request, version: int = 3) -> tuple[list, object]:
        return self.replication.alter_partition(self.image, request, version)

    def assign_replicas_to_dirs(self, request) -> tuple[list, object]:
        return self.replication.assign_replicas_to_dirs(self.image, request)

    def elect_leaders(self, request) -> tuple[list, object]:
        return self.replication.elect_leaders(self.image, request)

    def alter_partition_reassignments(self, request) -> tuple[list, object]:
        return self.replication.alter_partition_reassignments(self.image, request)

    def list_partition_reassignments(self, request) -> object:
        return self.replication.list_partition_reassignments(self.image, request)

    def maybe_balance_partition_leaders(self, now_ms: int) -> list:
        return self.replication.maybe_balance_partition_leaders(self.image, now_ms)

    def maybe_elect_unclean_leaders(self) -> list:
        return self.replication.maybe_elect_unclean_leaders(self.image)

    # -- the items of the channel's calls (run through `decide_each`)

    def decide_create_topic(self, t: NewTopic, *, validate_only: bool = False, internal: bool = False) -> Decision:
        """One topic of a CreateTopics: (records, CreatedTopic)."""
        return self.replication.create_new_topic(self.image, t, validate_only=validate_only, internal=internal)

    def decide_delete_topic(self, t: TopicToDelete) -> Decision:
        """One topic of a DeleteTopics: (records, the topic's name)."""
        return self.replication.delete_topic_request(self.image, t)

    def decide_create_partitions(self, t: NewPartitions) -> Decision:
        """One topic of a CreatePartitions: (records, None)."""
        return self.create_partitions(t.name, t.count, t.assignments), None

    def decide_alter_config(self, c: ConfigChange) -> Decision:
        """One resource of an (Incremental)AlterConfigs: (records, None). A change of min.insync.replicas
        (a topic's, or the cluster-wide one) clears the ELR it applies to (`ReplicationControlManager.clear_elr`)."""
        records, result = self.configs.alter_config_change(self.image, c)
        if any(r.name == MIN_INSYNC_REPLICAS for r in records):  # (ConfigRecords only)
            if c.resource_type == ConfigResourceType.TOPIC:
                records += self.replication.clear_elr(self.image, c.resource_name)
            elif c.resource_type == ConfigResourceType.BROKER and not c.resource_name:
                records += self.replication.clear_elr(self.image, None)
        return records, result

    # -- configs, ACLs, client quotas, SCRAM users, producer ids

    def alter_configs(
        self,
        resource_type: int,
        resource_name: str,
        changes: Mapping[str, str | None],
        *,
        replace: bool = False,
    ) -> list:
        return self.configs.alter_configs(self.image, resource_type, resource_name, changes, replace=replace)

    def create_acl(self, binding) -> tuple[list, None]:
        return self.acls.create_acl(self.image, binding)

    def delete_acls(self, acl_filter) -> tuple[list, list]:
        return self.acls.delete_acls(self.image, acl_filter)

    def alter_client_quota(self, entity, ops) -> tuple[list, None]:
        return self.client_quotas.alter_client_quota(entity, ops)

    def alter_user_scram_credentials(self, deletions: Sequence, upsertions: Sequence) -> tuple[list, ScramOutcome]:
        return self.scram.alter_user_scram_credentials(self.image, deletions, upsertions)

    def allocate_producer_ids(
        self, broker_id: int, block_size: int = DEFAULT_PRODUCER_ID_BLOCK_SIZE
    ) -> tuple[list, ProducerIdsBlock]:
        return self.producer_ids.allocate_producer_ids(self.image, broker_id, block_size)

    # -- the periodic decisions

    def tick(self, now_ms: int) -> list:
        """The periodic decisions at `now_ms`, in Kafka's order: fence stale brokers, elect unclean leaders
        where enabled, balance leaders. Each sees the records of the one before it."""
        records = self.cluster.maybe_fence_stale_brokers(self.image, now_ms)
        image = replay_all(records, self.image) if records else self.image
        more = self.replication.maybe_elect_unclean_leaders(image)
        if more:
            records += more
            image = replay_all(more, image)
        records += self.replication.maybe_balance_partition_leaders(image, now_ms)
        return records

    def next_deadline_ms(self) -> int | None:
        """When `tick` may next have something to do (a session expiring or the next balance check)."""
        deadlines = [d for d in (self.cluster.next_expiry_ms(), self.replication.next_balance_ms) if d is not None]
        return min(deadlines) if deadlines else None
