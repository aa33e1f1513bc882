"""The controller's decisions: which metadata records carry out an operation, or why it is refused.

Each operation (create a topic, delete one, add partitions, alter configs, hand out a producer-id block,
register, heartbeat, fence or unregister a broker, change an ISR, elect leaders, reassign replicas)
validates against the controller's current image and returns the records that carry it out, or raises
`MetadataError` with Kafka's error code and message. The operations that are Kafka controller RPCs take
the request message and return `(records, response)`; per-partition errors are in the response, errors of
the whole request are raised. The records take effect when they are committed to the metadata log and
replayed, by the controller (which then sees its own change in `image`) and by every broker following the
log.

The controller is sans-I/O. What drives it is the controller channel in broker/ (today the local
channel of a cluster of one: run the operation, append, publish; with the quorum, the active
controller's request handlers). `image` and `log_end_offset` are the state of the log the owner keeps
current: decisions must see every record already decided (Kafka's controller decides against its
uncommitted state), so with a quorum that is the image including records appended but not yet committed,
or operations wait for the previous one's commit. `rng` draws topic ids, incarnation ids, cluster ids and
replica placement (a seeded Random makes them reproducible in tests).

The only state outside the image is the brokers' sessions (`heartbeats`, broker_heartbeats.py: last
contact, reported metadata offset), soft state as in Kafka, and the time of the next leader-balance
check. Time is an argument: `heartbeat(request, now_ms)`, and the periodic decisions `tick(now_ms)`
(= `maybe_fence_stale_brokers`, `maybe_elect_unclean_leaders`, `maybe_balance_partition_leaders`),
due at `next_deadline_ms()`.

How one partition changes is partition_change.py (Kafka's PartitionChangeBuilder); where replicas go,
replica_placement.py (Kafka's StripedReplicaPlacer).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from enum import IntEnum

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    AlterPartitionReassignmentsResponse,
    AlterPartitionResponse,
    BrokerHeartbeatResponse,
    BrokerRegistrationResponse,
    ElectLeadersResponse,
    ListPartitionReassignmentsResponse,
    UnregisterBrokerResponse,
)
from odradek.metadata.broker_heartbeats import DEFAULT_SESSION_TIMEOUT_MS, BrokerHeartbeatManager
from odradek.metadata.image import (
    METADATA_TOPIC,
    METADATA_VERSION,
    METADATA_VERSION_FEATURE,
    MAX_PARTITIONS_PER_REQUEST,
    BrokerRegistration,
    Endpoint,
    NO_LEADER,
    NO_LEADER_CHANGE,
    MetadataError,
    MetadataImage,
    PartitionImage,
    ProducerIdsBlock,
    TopicImage,
    merge_partition_change,
    new_cluster_id,
    random_uuid,
    replay_all,
    validate_topic_name,
)
from odradek.metadata.records import (
    BrokerRegistrationChangeRecord,
    ClusterIdRecord,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)
from odradek.metadata.acl import AclError, AclIndex, validate_binding
from odradek.metadata.records import AccessControlEntryRecord, ClientQuotaRecord, RemoveAccessControlEntryRecord
from odradek.metadata.quota import QuotaError, entity_key, validate_quota_op
from odradek.metadata.partition_change import (
    Election,
    LeaderRecoveryState,
    ReassignmentReplicas,
    build_partition_change,
    is_reassigning,
    revert_reassignment,
)
from odradek.metadata.replica_placement import place_replicas

DEFAULT_PRODUCER_ID_BLOCK_SIZE = 1000
_INT64_MAX = (1 << 63) - 1


class BrokerState(IntEnum):
    """Where a heartbeat leaves a broker (Kafka's BrokerControlState)."""

    FENCED = 0
    UNFENCED = 1
    CONTROLLED_SHUTDOWN = 2
    SHUTDOWN_NOW = 3

    @property
    def fenced(self) -> bool:
        return self in (BrokerState.FENCED, BrokerState.SHUTDOWN_NOW)


class ElectionType(IntEnum):
    """ElectLeadersRequest.election_type."""

    PREFERRED = 0
    UNCLEAN = 1


UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"
AUTO_LEADER_REBALANCE_ENABLE = "auto.leader.rebalance.enable"
DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_MS = 300_000  # leader.imbalance.check.interval.seconds = 300
DEFAULT_MAX_ELECTIONS_PER_IMBALANCE = 1000

# Kafka's default messages of these errors (an ApiError without its own message answers with them).
_ELECTION_MESSAGES = {
    ErrorCode.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader was not available.",
    ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE: "Eligible topic partition leaders are not available.",
}


class Controller:
    """See the module doc. `advance(image, log_end_offset)` after every commit the controller should see.

    `session_timeout_ms` is broker.session.timeout.ms; `unclean_leader_election_enable` and
    `auto_leader_rebalance_enable` are the static defaults under the cluster-wide dynamic configs (broker
    resource "") and, for unclean election, each topic's config."""

    def __init__(
        self,
        *,
        rng: random.Random | None = None,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        unclean_leader_election_enable: bool = False,
        auto_leader_rebalance_enable: bool = True,
        leader_imbalance_check_interval_ms: int = DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_MS,
        max_elections_per_imbalance: int = DEFAULT_MAX_ELECTIONS_PER_IMBALANCE,
    ) -> None:
        self.image = MetadataImage()
        self.log_end_offset = 0
        self._rng = rng or random.SystemRandom()
        self.heartbeats = BrokerHeartbeatManager(session_timeout_ms)
        self.unclean_leader_election_enable = unclean_leader_election_enable
        self.auto_leader_rebalance_enable = auto_leader_rebalance_enable
        self.leader_imbalance_check_interval_ms = leader_imbalance_check_interval_ms
        self.max_elections_per_imbalance = max_elections_per_imbalance
        self._next_balance_ms: int | None = None

    def advance(self, image: MetadataImage, log_end_offset: int) -> None:
        self.image = image
        self.log_end_offset = log_end_offset

    def activate(self, now_ms: int) -> None:
        """This controller became the active one: every registered broker gets a session starting now (the
        sessions of a previous controller are not known here), as Kafka's activation does."""
        self.heartbeats.start_sessions({b.broker_id: b.fenced for b in self.image.brokers.values()}, now_ms)

    # -- operations: each validates against the current image and returns records; nothing changes

    # Records given at format time (`odradek storage format --add-scram`), written with the bootstrap records.
    bootstrap_extra: tuple = ()

    def bootstrap_records(self, cluster_id: str) -> list:
        """What a new cluster's log starts with (Kafka's bootstrap records): the metadata.version feature
        level, the cluster id, and the records formatting added (`bootstrap_extra`)."""
        return [FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=METADATA_VERSION),
                ClusterIdRecord(cluster_id=cluster_id), *self.bootstrap_extra]

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
        """A RegisterBrokerRecord with a new incarnation id. The broker epoch is the log end offset, as in
        Kafka (there it is the registration's own offset): it grows with every registration appended."""
        if broker_id < 0:
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"Invalid broker id {broker_id}")
        names = [e.name for e in endpoints]
        if len(set(names)) != len(names):
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"Duplicate listener names in {names}")
        previous = self.image.brokers.get(broker_id)
        broker_epoch = self.log_end_offset
        if previous is not None:
            broker_epoch = max(broker_epoch, previous.broker_epoch + 1)
        return [
            RegisterBrokerRecord(
                broker_id=broker_id,
                incarnation_id=random_uuid(self._rng),
                broker_epoch=broker_epoch,
                end_points=[
                    RegisterBrokerRecord.BrokerEndpoint(
                        name=e.name, host=e.host, port=e.port, security_protocol=e.security_protocol
                    )
                    for e in endpoints
                ],
                rack=rack,
                fenced=fenced,
            )
        ]

    def unregister_broker(self, broker_id: int) -> list:
        """UnregisterBroker: the broker leaves every ISR and leadership, then its registration goes."""
        broker = self._broker(broker_id)
        changes = _Changes(self)
        changes.remove_broker(broker_id)
        changes.add_records([UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=broker.broker_epoch)])
        return changes.records

    def fence_broker(self, broker_id: int) -> list:
        """Fence the broker (Kafka's handleBrokerFenced): it leaves every ISR (but for a last member), the
        partitions it led elect new leaders, then the registration change. No-op records if fenced."""
        broker = self._broker(broker_id)
        changes = _Changes(self)
        changes.fence(broker)
        self.heartbeats.fence(broker_id)  # its session ends: a new incarnation may register
        return changes.records

    def unfence_broker(self, broker_id: int) -> list:
        """Unfence the broker (Kafka's handleBrokerUnfenced): the registration change, then leaderless
        partitions whose ISR holds it elect it."""
        broker = self._broker(broker_id)
        changes = _Changes(self)
        changes.unfence(broker)
        return changes.records

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str | None] | None = None,
        *,
        assignments: Mapping[int, Sequence[int]] | None = None,
    ) -> list:
        """TopicRecord (a new random id, never zero), ConfigRecords, then one PartitionRecord per partition.

        Replicas are spread round robin over the unfenced brokers from a random start; the first replica
        leads. With `assignments` (partition index -> broker ids, Kafka's manual assignment),
        `num_partitions` and `replication_factor` must be -1. The broker resolves -1 to its defaults
        before calling when there are no assignments, and checks config values against its definitions.
        """
        image = self.image
        validate_topic_name(name)
        if name == METADATA_TOPIC:
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"Creation of internal topic {name} is prohibited.")
        if name in image.topics_by_name:
            raise MetadataError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        # '.' and '_' collide in metric names, so Kafka refuses names that differ only by them.
        normalized = name.replace(".", "_")
        for existing in image.topics_by_name:
            if existing.replace(".", "_") == normalized:
                raise MetadataError(
                    ErrorCode.INVALID_TOPIC_EXCEPTION,
                    f"Topic '{name}' collides with existing topic: {existing}",
                )
        config_records = self._topic_config_records(name, configs or {})
        if assignments is not None:
            if num_partitions != -1 or replication_factor != -1:
                raise MetadataError(
                    ErrorCode.INVALID_REQUEST,
                    "Both numPartitions or replicationFactor and replicasAssignments were set. "
                    "Both cannot be used at the same time.",
                )
            if not assignments or sorted(assignments) != list(range(len(assignments))):
                raise MetadataError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    "Partitions should be a consecutive 0-based integer sequence",
                )
            _check_partition_count(len(assignments))
            placement = self._checked_assignments([assignments[i] for i in range(len(assignments))], None)
        else:
            if num_partitions < 1:
                raise MetadataError(
                    ErrorCode.INVALID_PARTITIONS,
                    "Number of partitions was set to an invalid non-positive value.",
                )
            if replication_factor < 1:
                raise MetadataError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    "Replication factor must be larger than 0, or -1 to use the default value.",
                )
            _check_partition_count(num_partitions)
            placement = self._place(0, num_partitions, replication_factor)
        topic_id = random_uuid(self._rng)
        while topic_id in image.topics_by_id:
            topic_id = random_uuid(self._rng)
        records: list = [TopicRecord(name=name, topic_id=topic_id)]
        records.extend(config_records)
        records.extend(self._partition_records(topic_id, 0, placement))
        return records

    def delete_topic(self, name: str | None = None, *, topic_id: uuid.UUID | None = None) -> list:
        """A RemoveTopicRecord for the topic named by `name` or by `topic_id` (DeleteTopics v6 names either)."""
        image = self.image
        if topic_id is not None and topic_id.int != 0:
            topic = image.topics_by_id.get(topic_id)
            if topic is None or (name is not None and topic.name != name):
                raise MetadataError(ErrorCode.UNKNOWN_TOPIC_ID, f"Unknown topic id {topic_id}")
        else:
            topic = image.topics_by_name.get(name) if name is not None else None
            if topic is None:
                raise MetadataError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
                )
        return [RemoveTopicRecord(topic_id=topic.topic_id)]

    def create_partitions(self, name: str, count: int, assignments: Sequence[Sequence[int]] | None = None) -> list:
        """PartitionRecords raising the topic's partition count to `count` (a new total, as in
        CreatePartitions). New partitions get the replication factor of partition 0, or `assignments`
        (one broker list per new partition)."""
        topic = self.image.topics_by_name.get(name)
        if topic is None:
            raise MetadataError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."
            )
        current = len(topic.partitions)
        if count < current:
            raise MetadataError(
                ErrorCode.INVALID_PARTITIONS,
                f"The topic {name} currently has {current} partition(s); {count} would not be an increase.",
            )
        if count == current:
            raise MetadataError(ErrorCode.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
        _check_partition_count(count - current)
        if assignments is not None:
            if len(assignments) != count - current:
                raise MetadataError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Attempted to add {count - current} additional partition(s), but only "
                    f"{len(assignments)} assignment(s) were specified.",
                )
            placement = self._checked_assignments(assignments, current)
        else:
            replication_factor = len(topic.partitions[0].replicas) if 0 in topic.partitions else 1
            placement = self._place(current, count - current, replication_factor)
        return self._partition_records(topic.topic_id, current, placement)

    def alter_configs(
        self,
        resource_type: int,
        resource_name: str,
        changes: Mapping[str, str | None],
        *,
        replace: bool = False,
    ) -> list:
        """ConfigRecords setting each of `changes` (a None value deletes the key), for a topic or a broker
        (resource name "" for the cluster-wide defaults). With `replace` (legacy AlterConfigs) every key
        not in `changes` is deleted too. Only actual changes produce records."""
        image = self.image
        if resource_type == ConfigResourceType.TOPIC:
            if resource_name not in image.topics_by_name:
                raise MetadataError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {resource_name} does not exist."
                )
        elif resource_type == ConfigResourceType.BROKER:
            if resource_name and not (resource_name.isascii() and resource_name.isdigit()):
                raise MetadataError(
                    ErrorCode.INVALID_REQUEST,
                    f"Illegal non-integral BROKER resource type name: {resource_name}",
                )
        else:
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"Unsupported config resource type {resource_type}")
        current = image.configs.get((resource_type, resource_name), {})
        wanted = dict(changes)
        if replace:
            for key in current:
                wanted.setdefault(key, None)
        records = []
        for key, value in wanted.items():
            if not key:
                raise MetadataError(ErrorCode.INVALID_CONFIG, "Config names must not be empty")
            if current.get(key) != value:
                records.append(
                    ConfigRecord(resource_type=resource_type, resource_name=resource_name, name=key, value=value)
                )
        return records

    def allocate_producer_ids(
        self, broker_id: int, block_size: int = DEFAULT_PRODUCER_ID_BLOCK_SIZE
    ) -> tuple[list, ProducerIdsBlock]:
        """A ProducerIdsRecord handing the next block of `block_size` ids to `broker_id`, and the block.
        Use the block only after the record is appended: then no restart can hand it out again."""
        broker = self._broker(broker_id)
        if block_size < 1:
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"Invalid producer id block size {block_size}")
        first = self.image.next_producer_id
        if first > _INT64_MAX - block_size:
            raise MetadataError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                "Exhausted all producerIds as the next block's end producerId has exceeded the int64 type limit",
            )
        block = ProducerIdsBlock(broker_id, first, block_size)
        record = ProducerIdsRecord(
            broker_id=broker_id, broker_epoch=broker.broker_epoch, next_producer_id=block.next_block_first_id
        )
        return [record], block

    # -- ACLs and client quotas (AclControlManager, ClientQuotaControlManager)

    def create_acl(self, binding) -> tuple[list, None]:
        """An AccessControlEntryRecord for `binding` (an AclBinding), none if an equal one exists."""
        try:
            validate_binding(binding)
        except AclError as e:
            raise MetadataError(ErrorCode.INVALID_REQUEST, str(e)) from None
        if binding in self.image.acls.values():
            return [], None
        return [AccessControlEntryRecord(
            id=random_uuid(self._rng), resource_type=binding.resource_type, resource_name=binding.resource_name,
            pattern_type=binding.pattern_type, principal=binding.principal, host=binding.host,
            operation=binding.operation, permission_type=binding.permission_type,
        )], None

    def delete_acls(self, acl_filter) -> tuple[list, list]:
        """RemoveAccessControlEntryRecords for every binding `acl_filter` (an AclFilter) matches; the bindings."""
        try:
            acl_filter.validate()
        except AclError as e:
            raise MetadataError(ErrorCode.INVALID_REQUEST, str(e)) from None
        matched = AclIndex(self.image.acls).matching(acl_filter)
        return [RemoveAccessControlEntryRecord(id=i) for i, _ in matched], [b for _, b in matched]

    def alter_client_quota(self, entity, ops) -> tuple[list, None]:
        """ClientQuotaRecords for one entity (pairs of entity type and name or None) and its ops
        ((key, value, remove) triples); MetadataError(INVALID_REQUEST) for a bad entity, key or value."""
        try:
            key = entity_key(entity)
            for name, value, remove in ops:
                validate_quota_op(key, name, value, remove)
        except QuotaError as e:
            raise MetadataError(ErrorCode.INVALID_REQUEST, str(e)) from None
        data = [ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in key]
        return [ClientQuotaRecord(entity=data, key=name, value=0.0 if remove else float(value), remove=remove)
                for name, value, remove in ops], None

    # -- broker lifecycle: BrokerRegistration, BrokerHeartbeat, UnregisterBroker, session expiry

    def register(self, request, now_ms: int) -> tuple[list, object]:
        """BrokerRegistration (Kafka's ClusterControlManager.registerBroker): (records,
        BrokerRegistrationResponse). Raises MetadataError: INCONSISTENT_CLUSTER_ID, DUPLICATE_BROKER_REGISTRATION
        (another incarnation holds a live session), UNSUPPORTED_VERSION (a feature level the broker cannot
        run), INVALID_REQUEST, BROKER_ID_NOT_REGISTERED (a ZooKeeper broker).

        The same incarnation again is idempotent: same broker epoch and state, a record only if its
        endpoints or rack changed (the image keeps no features). A new incarnation registers FENCED with a new broker epoch, the
        offset its RegisterBrokerRecord gets when the records are appended next (`log_end_offset` plus
        what precedes it); if the previous incarnation was still unfenced, it first leaves every ISR and
        leadership, as a fenced broker does. The heartbeat unfences it once it has replayed that offset."""
        image = self.image
        if request.cluster_id != image.cluster_id:
            raise MetadataError(
                ErrorCode.INCONSISTENT_CLUSTER_ID,
                f"Expected cluster ID {image.cluster_id}, but got cluster ID {request.cluster_id}",
            )
        broker_id = request.broker_id
        if broker_id < 0:
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"Invalid broker id {broker_id}")
        existing = image.brokers.get(broker_id)
        if (
            existing is not None
            and existing.incarnation_id != request.incarnation_id
            and self.heartbeats.has_valid_session(broker_id, now_ms)
        ):
            raise MetadataError(
                ErrorCode.DUPLICATE_BROKER_REGISTRATION, "Another broker is registered with that broker id."
            )
        if request.is_migrating_zk_broker:
            raise MetadataError(
                ErrorCode.BROKER_ID_NOT_REGISTERED, "Controller does not support registering ZK brokers."
            )
        for feature in request.features:
            level = image.features.get(feature.name, 0)
            if level and not feature.min_supported_version <= level <= feature.max_supported_version:
                raise MetadataError(
                    ErrorCode.UNSUPPORTED_VERSION,
                    f"Unable to register because the broker does not support finalized version {level} of "
                    f"{feature.name}. The broker wants a version between {feature.min_supported_version} and "
                    f"{feature.max_supported_version}, inclusive.",
                )
        endpoints = [Endpoint(e.name, e.host, e.port, e.security_protocol) for e in request.listeners]
        features = [
            RegisterBrokerRecord.BrokerFeature(
                name=f.name,
                min_supported_version=f.min_supported_version,
                max_supported_version=f.max_supported_version,
            )
            for f in request.features
        ]
        changes = _Changes(self)
        if existing is not None and existing.incarnation_id == request.incarnation_id:
            (record,) = self.register_broker(broker_id, endpoints, rack=request.rack, fenced=existing.fenced)
            record.incarnation_id = existing.incarnation_id
            record.broker_epoch = existing.broker_epoch
            record.in_controlled_shutdown = existing.in_controlled_shutdown
            record.features = features
            if existing.endpoints != tuple(endpoints) or existing.rack != request.rack:
                changes.add_records([record])
        else:
            if existing is not None and not existing.fenced:
                changes.remove_broker(broker_id)
            (record,) = self.register_broker(broker_id, endpoints, rack=request.rack, fenced=True)
            record.incarnation_id = request.incarnation_id
            record.broker_epoch = self.log_end_offset + len(changes.records)
            if existing is not None:
                record.broker_epoch = max(record.broker_epoch, existing.broker_epoch + 1)
            record.features = features
            changes.add_records([record])
            self.heartbeats.remove(broker_id)
        self.heartbeats.register(broker_id, record.fenced, now_ms)
        return changes.records, BrokerRegistrationResponse(error_code=0, broker_epoch=record.broker_epoch)

    def heartbeat(self, request, now_ms: int) -> tuple[list, object]:
        """BrokerHeartbeat (Kafka's processBrokerHeartbeat): (records, BrokerHeartbeatResponse). Raises
        MetadataError(STALE_BROKER_EPOCH) for an unknown broker or another broker epoch.

        The broker's next state (Kafka's BrokerHeartbeatManager.calculateNextBrokerState):
        FENCED: want_shut_down -> SHUTDOWN_NOW; caught up (current_metadata_offset >= the registration's
        offset, its broker epoch) and not want_fence -> UNFENCED (a broker that went through controlled
        shutdown stays fenced until it registers again). UNFENCED: want_fence -> FENCED (or SHUTDOWN_NOW
        with want_shut_down); want_shut_down -> CONTROLLED_SHUTDOWN if it leads anything, else
        SHUTDOWN_NOW. CONTROLLED_SHUTDOWN: SHUTDOWN_NOW once it leads nothing and every active broker has
        replayed the records that moved its leaderships. A change of state writes its records: fencing
        (and SHUTDOWN_NOW) as `fence_broker`, unfencing as `unfence_broker`, controlled shutdown marks the
        registration and moves every leadership away, removing the broker from each ISR."""
        broker_id = request.broker_id
        broker = self._check_broker_epoch(broker_id, request.broker_epoch)
        heartbeats = self.heartbeats
        if broker_id not in heartbeats.sessions:
            heartbeats.register(broker_id, broker.fenced, now_ms)
        session = heartbeats.sessions[broker_id]
        offset = request.current_metadata_offset
        if broker.fenced:
            current = BrokerState.FENCED
        elif broker.in_controlled_shutdown:
            current = BrokerState.CONTROLLED_SHUTDOWN
            if not session.shutting_down:  # a new controller: what is committed is what it moved
                heartbeats.enter_controlled_shutdown(broker_id, self.log_end_offset - 1)
        else:
            current = BrokerState.UNFENCED
        registration_offset = broker.broker_epoch
        if current == BrokerState.FENCED:
            if request.want_shut_down:
                next_state = BrokerState.SHUTDOWN_NOW
            elif not request.want_fence and offset >= registration_offset and not broker.in_controlled_shutdown:
                next_state = BrokerState.UNFENCED
            else:
                next_state = BrokerState.FENCED
        elif current == BrokerState.UNFENCED:
            if request.want_fence:
                next_state = BrokerState.SHUTDOWN_NOW if request.want_shut_down else BrokerState.FENCED
            elif request.want_shut_down:
                next_state = (
                    BrokerState.CONTROLLED_SHUTDOWN if self._has_leaderships(broker_id) else BrokerState.SHUTDOWN_NOW
                )
            else:
                next_state = BrokerState.UNFENCED
        elif self._has_leaderships(broker_id):
            next_state = BrokerState.CONTROLLED_SHUTDOWN
        elif session.controlled_shutdown_offset <= heartbeats.lowest_active_offset():
            next_state = BrokerState.SHUTDOWN_NOW
        else:
            next_state = BrokerState.CONTROLLED_SHUTDOWN

        changes = _Changes(self)
        if next_state != current:
            if next_state.fenced and not broker.fenced:
                changes.fence(broker)
            elif next_state == BrokerState.UNFENCED:
                changes.unfence(broker)
            elif next_state == BrokerState.CONTROLLED_SHUTDOWN:
                changes.add_records([
                    BrokerRegistrationChangeRecord(
                        broker_id=broker_id, broker_epoch=broker.broker_epoch, in_controlled_shutdown=1
                    )
                ])
                changes.remove_broker(broker_id)
        heartbeats.touch(broker_id, next_state.fenced, offset, now_ms)
        if next_state == BrokerState.CONTROLLED_SHUTDOWN:
            # Shut down once every active broker has replayed the last of these records.
            heartbeats.enter_controlled_shutdown(broker_id, self.log_end_offset + len(changes.records) - 1)
        response = BrokerHeartbeatResponse(
            error_code=0,
            is_caught_up=offset >= registration_offset,
            is_fenced=next_state.fenced,
            should_shut_down=next_state == BrokerState.SHUTDOWN_NOW,
        )
        return changes.records, response

    def unregister(self, request) -> tuple[list, object]:
        """UnregisterBroker: (records, UnregisterBrokerResponse). Raises MetadataError(BROKER_ID_NOT_REGISTERED)."""
        records = self.unregister_broker(request.broker_id)
        self.heartbeats.remove(request.broker_id)
        return records, UnregisterBrokerResponse(error_code=0, error_message=None)

    def maybe_fence_stale_brokers(self, now_ms: int) -> list:
        """Records fencing every broker whose session expired (no heartbeat for session_timeout_ms), each
        as `fence_broker`, one after the other. Only brokers with a session are considered: those that
        registered or heartbeated here, or all registered ones after `activate`."""
        changes = _Changes(self)
        for broker_id in self.heartbeats.stale_brokers(now_ms):
            broker = self.image.brokers.get(broker_id)
            if broker is None:
                self.heartbeats.remove(broker_id)
                continue
            if not broker.fenced:
                changes.fence(broker)
            self.heartbeats.fence(broker_id)
        return changes.records

    # -- partitions: AlterPartition, ElectLeaders, reassignments, leader balance

    def alter_partition(self, request, version: int = 3) -> tuple[list, object]:
        """AlterPartition v2+ (topic ids) from a partition leader: (records, AlterPartitionResponse) with an
        error per partition (UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION, NOT_CONTROLLER for epochs newer
        than ours, FENCED_LEADER_EPOCH, INVALID_REQUEST (not the leader, an ISR outside the replicas or
        without the leader, a bad recovery state), INVALID_UPDATE_VERSION (an older partition epoch),
        INELIGIBLE_REPLICA (a member fenced, shutting down, unregistered or of another broker epoch)) or the
        partition as it will be. Raises MetadataError(STALE_BROKER_EPOCH) for the sender's broker epoch.

        A new ISR that completes a reassignment completes it; if that moves the leader, the answer is
        NEW_LEADER_ELECTED (and the records are written all the same), as in Kafka."""
        self._check_broker_epoch(request.broker_id, request.broker_epoch)
        changes = _Changes(self)
        response = AlterPartitionResponse(error_code=0, topics=[])
        for topic_data in request.topics:
            topic = self.image.topics_by_id.get(topic_data.topic_id)
            out = AlterPartitionResponse.TopicData(topic_id=topic_data.topic_id, partitions=[])
            response.topics.append(out)
            for p in topic_data.partitions:
                if topic is None:
                    error = ErrorCode.UNKNOWN_TOPIC_ID
                else:
                    if version >= 3:
                        new_isr = [(b.broker_id, b.broker_epoch) for b in p.new_isr_with_epochs]
                    else:
                        new_isr = [(b, -1) for b in p.new_isr]
                    partition = changes.partition(topic.topic_id, p.partition_index)
                    error = self._validate_alter_partition(request.broker_id, partition, p, new_isr, version)
                if error != ErrorCode.NONE:
                    out.partitions.append(
                        AlterPartitionResponse.TopicData.PartitionData(
                            partition_index=p.partition_index, error_code=error
                        )
                    )
                    continue
                record = build_partition_change(
                    partition,
                    topic.topic_id,
                    p.partition_index,
                    changes.active,
                    election=self._election_for(topic.name),
                    target_isr=[b for b, _ in new_isr],
                    target_leader_recovery_state=p.leader_recovery_state,
                )
                if record is not None:
                    changes.add_records([record])
                    partition = changes.partition(topic.topic_id, p.partition_index)
                    if record.leader not in (request.broker_id, NO_LEADER_CHANGE):
                        error = ErrorCode.NEW_LEADER_ELECTED if version > 1 else ErrorCode.FENCED_LEADER_EPOCH
                        out.partitions.append(
                            AlterPartitionResponse.TopicData.PartitionData(
                                partition_index=p.partition_index, error_code=error
                            )
                        )
                        continue
                out.partitions.append(
                    AlterPartitionResponse.TopicData.PartitionData(
                        partition_index=p.partition_index,
                        error_code=0,
                        leader_id=partition.leader,
                        leader_epoch=partition.leader_epoch,
                        isr=list(partition.isr),
                        leader_recovery_state=partition.leader_recovery_state,
                        partition_epoch=partition.partition_epoch,
                    )
                )
        return changes.records, response

    def assign_replicas_to_dirs(self, request) -> tuple[list, object]:
        """AssignReplicasToDirs from a broker: (records, AssignReplicasToDirsResponse). Directories are not
        tracked in the image (PartitionRecord v0); what is acted on is a replica assigned to a directory
        that is not online (DirectoryId.LOST): its log directory failed, so the broker leaves that
        partition's ISR and leadership, as Kafka's handleAssignReplicasToDirs does for an offline
        directory. Raises MetadataError(STALE_BROKER_EPOCH) for the sender's broker epoch."""
        from odradek.protocol.messages import AssignReplicasToDirsResponse as R

        broker_id = request.broker_id
        self._check_broker_epoch(broker_id, request.broker_epoch)
        changes = _Changes(self)
        response = R(throttle_time_ms=0, error_code=0, directories=[])

        def acceptable(candidate: int) -> bool:
            return candidate != broker_id and changes.active(candidate)

        for directory in request.directories:
            out_dir = R.DirectoryData(id=directory.id, topics=[])
            response.directories.append(out_dir)
            for topic_data in directory.topics:
                topic = self.image.topics_by_id.get(topic_data.topic_id)
                out_topic = R.DirectoryData.TopicData(topic_id=topic_data.topic_id, partitions=[])
                out_dir.topics.append(out_topic)
                for p in topic_data.partitions:
                    partition = changes.partition(topic.topic_id, p.partition_index) if topic is not None else None
                    if topic is None:
                        error = ErrorCode.UNKNOWN_TOPIC_ID
                    elif partition is None:
                        error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                    elif broker_id not in partition.replicas:
                        error = ErrorCode.NOT_LEADER_OR_FOLLOWER
                    else:
                        error = ErrorCode.NONE
                        if directory.id == LOST_DIRECTORY_ID and (broker_id in partition.isr or partition.leader == broker_id):
                            record = build_partition_change(
                                partition, topic.topic_id, p.partition_index, acceptable,
                                election=self._election_for(topic.name),
                                target_isr=[b for b in partition.isr if b != broker_id],
                            )
                            if record is not None:
                                changes.add_records([record])
                    out_topic.partitions.append(
                        R.DirectoryData.TopicData.PartitionData(partition_index=p.partition_index, error_code=int(error))
                    )
        return changes.records, response

    def elect_leaders(self, request) -> tuple[list, object]:
        """ElectLeaders: (records, ElectLeadersResponse), a result per partition: NONE (elected),
        ELECTION_NOT_NEEDED (PREFERRED: the preferred replica leads; UNCLEAN: there is a leader),
        PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION. Null
        topic_partitions means every partition, and then ELECTION_NOT_NEEDED ones are left out. Raises
        MetadataError(INVALID_REQUEST) for an unknown election type."""
        try:
            election_type = ElectionType(request.election_type)
        except ValueError:
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"Unknown election type {request.election_type}") from None
        changes = _Changes(self)
        response = ElectLeadersResponse(error_code=0, replica_election_results=[])
        Result = ElectLeadersResponse.ReplicaElectionResult
        if request.topic_partitions is None:
            for name in sorted(self.image.topics_by_name):
                topic = self.image.topics_by_name[name]
                out = Result(topic=name, partition_result=[])
                response.replica_election_results.append(out)
                for partition_id in sorted(topic.partitions):
                    error, message = self._elect_leader(changes, name, partition_id, election_type)
                    if error != ErrorCode.ELECTION_NOT_NEEDED:
                        out.partition_result.append(
                            Result.PartitionResult(partition_id=partition_id, error_code=error, error_message=message)
                        )
        else:
            for t in request.topic_partitions:
                out = Result(topic=t.topic, partition_result=[])
                response.replica_election_results.append(out)
                for partition_id in t.partitions:
                    error, message = self._elect_leader(changes, t.topic, partition_id, election_type)
                    out.partition_result.append(
                        Result.PartitionResult(partition_id=partition_id, error_code=error, error_message=message)
                    )
        return changes.records, response

    def alter_partition_reassignments(self, request) -> tuple[list, object]:
        """AlterPartitionReassignments: (records, AlterPartitionReassignmentsResponse), an error per
        partition (UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT, INVALID_REPLICATION_FACTOR when
        v1's allow_replication_factor_change is false, NO_REASSIGNMENT_IN_PROGRESS for a cancel).

        Replicas start a reassignment (or replace the one in progress): the partition's replicas become the
        target followed by the replicas to remove, adding/removing say which; it completes (replicas =
        target, the removed ones out of ISR and replicas, the leader moved if it was removed) in the same
        record when the ISR already holds the target, else when an ISR change (AlterPartition) brings the
        last target replica in. Null replicas cancel: the added replicas go, the removed ones stay."""
        changes = _Changes(self)
        response = AlterPartitionReassignmentsResponse(
            error_code=0, error_message=None, responses=[],
            allow_replication_factor_change=request.allow_replication_factor_change,
        )
        Topic = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
        for t in request.topics:
            out = Topic(name=t.name, partitions=[])
            response.responses.append(out)
            for p in t.partitions:
                try:
                    self._alter_reassignment(changes, t.name, p, request.allow_replication_factor_change)
                    error, message = ErrorCode.NONE, None
                except MetadataError as e:
                    error, message = e.error_code, e.message
                out.partitions.append(
                    Topic.ReassignablePartitionResponse(
                        partition_index=p.partition_index, error_code=error, error_message=message
                    )
                )
        return changes.records, response

    def list_partition_reassignments(self, request) -> object:
        """ListPartitionReassignments: the response (no records). Null topics lists every reassignment in
        progress; unknown topics and partitions not being reassigned are left out, as in Kafka."""
        response = ListPartitionReassignmentsResponse(error_code=0, error_message=None, topics=[])
        Ongoing = ListPartitionReassignmentsResponse.OngoingTopicReassignment
        image = self.image
        if request.topics is None:
            wanted = [(name, sorted(image.topics_by_name[name].partitions)) for name in sorted(image.topics_by_name)]
        else:
            wanted = [(t.name, list(t.partition_indexes)) for t in request.topics]
        for name, partition_ids in wanted:
            topic = image.topics_by_name.get(name)
            if topic is None:
                continue
            ongoing = []
            for partition_id in partition_ids:
                partition = topic.partitions.get(partition_id)
                if partition is not None and is_reassigning(partition):
                    ongoing.append(
                        Ongoing.OngoingPartitionReassignment(
                            partition_index=partition_id,
                            replicas=list(partition.replicas),
                            adding_replicas=list(partition.adding_replicas),
                            removing_replicas=list(partition.removing_replicas),
                        )
                    )
            if ongoing:
                response.topics.append(Ongoing(name=name, partitions=ongoing))
        return response

    def maybe_balance_partition_leaders(self, now_ms: int) -> list:
        """auto.leader.rebalance.enable: every leader.imbalance.check.interval (the first call checks at once),
        a preferred-leader election for each partition led by another replica than its first, where the
        first can lead (in the ISR, active); at most max_elections_per_imbalance records."""
        if not self._auto_leader_rebalance_enabled():
            self._next_balance_ms = None
            return []
        if self._next_balance_ms is not None and now_ms < self._next_balance_ms:
            return []
        self._next_balance_ms = now_ms + self.leader_imbalance_check_interval_ms
        changes = _Changes(self)
        for topic, partition_id, partition in _partitions(self.image):
            if len(changes.records) >= self.max_elections_per_imbalance:
                break
            if partition.leader == NO_LEADER or not partition.replicas or partition.leader == partition.replicas[0]:
                continue
            record = build_partition_change(
                partition, topic.topic_id, partition_id, changes.active, election=Election.PREFERRED
            )
            if record is not None:
                changes.add_records([record])
        return changes.records

    def maybe_elect_unclean_leaders(self) -> list:
        """For each leaderless partition of a topic with unclean.leader.election.enable, an unclean
        election (as Kafka's periodic task: unclean election may have been enabled since it went offline)."""
        changes = _Changes(self)
        for topic, partition_id, partition in _partitions(self.image):
            if len(changes.records) >= self.max_elections_per_imbalance:
                break
            if partition.leader != NO_LEADER or not self._unclean_enabled(topic.name):
                continue
            record = build_partition_change(
                partition, topic.topic_id, partition_id, changes.active, election=Election.UNCLEAN
            )
            if record is not None:
                changes.add_records([record])
        return changes.records

    def tick(self, now_ms: int) -> list:
        """The periodic decisions at `now_ms`, in Kafka's order: fence stale brokers, elect unclean leaders
        where enabled, balance leaders. Each sees the records of the one before it."""
        records = self.maybe_fence_stale_brokers(now_ms)
        committed = self.image
        try:
            if records:
                self.image = replay_all(records, committed)
            more = self.maybe_elect_unclean_leaders()
            if more:
                records += more
                self.image = replay_all(more, self.image)
            records += self.maybe_balance_partition_leaders(now_ms)
        finally:
            self.image = committed
        return records

    def next_deadline_ms(self) -> int | None:
        """When `tick` may next have something to do (a session expiring or the next balance check)."""
        deadlines = [d for d in (self.heartbeats.next_expiry_ms(), self._next_balance_ms) if d is not None]
        return min(deadlines) if deadlines else None

    # -- helpers

    def _check_broker_epoch(self, broker_id: int, broker_epoch: int) -> BrokerRegistration:
        broker = self.image.brokers.get(broker_id)
        if broker is None:
            raise MetadataError(ErrorCode.STALE_BROKER_EPOCH, f"No broker registration found for broker id {broker_id}")
        if broker.broker_epoch != broker_epoch:
            raise MetadataError(
                ErrorCode.STALE_BROKER_EPOCH,
                f"Expected broker epoch {broker.broker_epoch}, but got broker epoch {broker_epoch}",
            )
        return broker

    def _has_leaderships(self, broker_id: int) -> bool:
        return any(p.leader == broker_id for _, _, p in _partitions(self.image))

    def _config_flag(self, name: str, default: bool, topic: str | None = None) -> bool:
        value = None
        if topic is not None:
            value = self.image.topic_configs(topic).get(name)
        if value is None:
            value = self.image.broker_configs().get(name)
        return default if value is None else value.strip().lower() == "true"

    def _unclean_enabled(self, topic: str) -> bool:
        return self._config_flag(UNCLEAN_LEADER_ELECTION_ENABLE, self.unclean_leader_election_enable, topic)

    def _auto_leader_rebalance_enabled(self) -> bool:
        return self._config_flag(AUTO_LEADER_REBALANCE_ENABLE, self.auto_leader_rebalance_enable)

    def _election_for(self, topic: str) -> Election:
        return Election.UNCLEAN if self._unclean_enabled(topic) else Election.ONLINE

    def _validate_alter_partition(
        self, broker_id: int, partition: PartitionImage | None, p, new_isr: list[tuple[int, int]], version: int
    ) -> ErrorCode:
        """Kafka's validateAlterPartitionData, in its order."""
        if partition is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        # Newer epochs than ours: this controller is behind, the leader should find the active one.
        if p.leader_epoch > partition.leader_epoch or p.partition_epoch > partition.partition_epoch:
            return ErrorCode.NOT_CONTROLLER
        if p.leader_epoch < partition.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if broker_id != partition.leader:
            return ErrorCode.INVALID_REQUEST
        if p.partition_epoch < partition.partition_epoch:
            return ErrorCode.INVALID_UPDATE_VERSION
        members = [b for b, _ in new_isr]
        if len(set(members)) != len(members) or not set(members) <= set(partition.replicas):
            return ErrorCode.INVALID_REQUEST
        if partition.leader not in members:
            return ErrorCode.INVALID_REQUEST
        if p.leader_recovery_state not in (LeaderRecoveryState.RECOVERED, LeaderRecoveryState.RECOVERING):
            return ErrorCode.INVALID_REQUEST
        if p.leader_recovery_state == LeaderRecoveryState.RECOVERING and len(members) > 1:
            return ErrorCode.INVALID_REQUEST
        if (
            partition.leader_recovery_state == LeaderRecoveryState.RECOVERED
            and p.leader_recovery_state == LeaderRecoveryState.RECOVERING
        ):
            return ErrorCode.INVALID_REQUEST
        for member, member_epoch in new_isr:
            broker = self.image.brokers.get(member)
            if (
                broker is None
                or broker.in_controlled_shutdown
                or broker.fenced
                or (member_epoch != -1 and member_epoch != broker.broker_epoch)
            ):
                return ErrorCode.INELIGIBLE_REPLICA if version > 1 else ErrorCode.OPERATION_NOT_ATTEMPTED
        return ErrorCode.NONE

    def _elect_leader(
        self, changes: _Changes, topic_name: str, partition_id: int, election_type: ElectionType
    ) -> tuple[ErrorCode, str | None]:
        topic = self.image.topics_by_name.get(topic_name)
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic_name}"
        partition = changes.partition(topic.topic_id, partition_id)
        if partition is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic_name}-{partition_id}"
        has_preferred = bool(partition.replicas) and partition.leader == partition.replicas[0]
        if (election_type == ElectionType.PREFERRED and has_preferred) or (
            election_type == ElectionType.UNCLEAN and partition.leader != NO_LEADER
        ):
            return ErrorCode.ELECTION_NOT_NEEDED, _ELECTION_MESSAGES[ErrorCode.ELECTION_NOT_NEEDED]
        election = Election.PREFERRED if election_type == ElectionType.PREFERRED else Election.UNCLEAN
        record = build_partition_change(partition, topic.topic_id, partition_id, changes.active, election=election)
        if record is None:
            if election_type == ElectionType.PREFERRED:
                error = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
            else:
                error = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
            return error, _ELECTION_MESSAGES[error]
        changes.add_records([record])
        return ErrorCode.NONE, None

    def _alter_reassignment(self, changes: _Changes, topic_name: str, p, allow_replication_factor_change: bool) -> None:
        topic = self.image.topics_by_name.get(topic_name)
        if topic is None:
            raise MetadataError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic_name}.")
        partition = changes.partition(topic.topic_id, p.partition_index)
        if partition is None:
            raise MetadataError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic_name}:{p.partition_index}."
            )
        if p.replicas is None:
            if not is_reassigning(partition):
                raise MetadataError(
                    ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
                    "No partition reassignment is in progress for this topic-partition.",
                )
            replicas, isr, unclean = revert_reassignment(partition)
            if unclean and not self._unclean_enabled(topic_name):
                raise MetadataError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Unable to revert partition assignment for {topic_name}:{p.partition_index} because it would "
                    "require an unclean leader election.",
                )
            record = build_partition_change(
                partition, topic.topic_id, p.partition_index, changes.active,
                election=self._election_for(topic_name),
                target_isr=isr, target_replicas=replicas, target_removing=(), target_adding=(),
            )
        else:
            self._checked_assignments([p.replicas], p.partition_index)
            original = ReassignmentReplicas(
                partition.replicas, partition.adding_replicas, partition.removing_replicas
            ).original()
            if not allow_replication_factor_change and len(p.replicas) != len(original):
                raise MetadataError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"The replication factor is changed from {len(original)} to {len(p.replicas)} but "
                    "allowReplicationFactorChange is false",
                )
            target = ReassignmentReplicas.of(partition.replicas, p.replicas)
            record = build_partition_change(
                partition, topic.topic_id, p.partition_index, changes.active,
                target_replicas=target.replicas, target_removing=target.removing, target_adding=target.adding,
            )
        if record is not None:
            changes.add_records([record])

    def _broker(self, broker_id: int) -> BrokerRegistration:
        broker = self.image.brokers.get(broker_id)
        if broker is None:
            raise MetadataError(ErrorCode.BROKER_ID_NOT_REGISTERED, f"Broker {broker_id} is not registered.")
        return broker

    def _registration_change(self, broker_id: int, fenced: int) -> list:
        broker = self._broker(broker_id)
        return [BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=broker.broker_epoch, fenced=fenced)]

    def _usable_brokers(self) -> list[int]:
        return sorted(b.broker_id for b in self.image.brokers.values() if not b.fenced and not b.in_controlled_shutdown)

    def _place(self, first_partition: int, count: int, replication_factor: int) -> list[list[int]]:
        usable = [(b.broker_id, b.rack) for b in self.image.brokers.values() if _is_active(b)]
        return place_replicas(usable, count, replication_factor, self._rng)

    def _checked_assignments(
        self, assignments: Sequence[Sequence[int]], first_partition: int | None
    ) -> list[list[int]]:
        """Manual assignments validated as Kafka does; `first_partition` None means a new topic, whose
        partitions must all have the same replica count."""
        usable = set(self._usable_brokers())
        placement = []
        size = None
        for index, replicas in enumerate(assignments):
            partition = index + (first_partition or 0)
            replicas = list(replicas)
            if not replicas:
                raise MetadataError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    "The manual partition assignment includes an empty replica list.",
                )
            if len(set(replicas)) != len(replicas):
                raise MetadataError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes the broker {_first_duplicate(replicas)} more than once.",
                )
            for broker_id in replicas:
                if broker_id not in self.image.brokers:
                    raise MetadataError(
                        ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                        f"The manual partition assignment includes broker {broker_id}, "
                        "but no such broker is registered.",
                    )
            if not usable.intersection(replicas):
                raise MetadataError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"All brokers specified in the manual partition assignment for partition {partition} are fenced "
                    "or in controlled shutdown.",
                )
            if first_partition is None and size is not None and len(replicas) != size:
                raise MetadataError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes a partition with {len(replicas)} replica(s), but this "
                    f"is not consistent with previous partitions, which have {size} replica(s).",
                )
            size = len(replicas)
            placement.append(replicas)
        return placement

    def _partition_records(self, topic_id: uuid.UUID, first_partition: int, placement: list[list[int]]) -> list:
        usable = set(self._usable_brokers())
        records = []
        for index, replicas in enumerate(placement):
            isr = [b for b in replicas if b in usable]
            records.append(
                PartitionRecord(
                    partition_id=first_partition + index,
                    topic_id=topic_id,
                    replicas=replicas,
                    isr=isr,
                    leader=isr[0],
                    leader_epoch=0,
                    partition_epoch=0,
                )
            )
        return records

    def _topic_config_records(self, name: str, configs: Mapping[str, str | None]) -> list:
        records = []
        for key, value in configs.items():
            if not key:
                raise MetadataError(ErrorCode.INVALID_CONFIG, "Config names must not be empty")
            if value is None:
                raise MetadataError(
                    ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {key}"
                )
            records.append(
                ConfigRecord(resource_type=ConfigResourceType.TOPIC, resource_name=name, name=key, value=value)
            )
        return records


LOST_DIRECTORY_ID = uuid.UUID(int=2)
"""Kafka's DirectoryId.LOST: a replica in a log directory that is offline."""


def _check_partition_count(count: int) -> None:
    if count > MAX_PARTITIONS_PER_REQUEST:
        raise MetadataError(ErrorCode.INVALID_PARTITIONS, "Excessively large number of partitions per request.")


def _first_duplicate(values: Sequence[int]) -> int:
    seen = set()
    for v in values:
        if v in seen:
            return v
        seen.add(v)
    raise ValueError("no duplicate")


def _is_active(broker: BrokerRegistration) -> bool:
    """Kafka's ClusterControlManager.isActive: may lead, join an ISR, be placed on."""
    return not broker.fenced and not broker.in_controlled_shutdown


def _partitions(image: MetadataImage) -> Iterator[tuple[TopicImage, int, PartitionImage]]:
    """Every partition, in topic name then partition order (decisions walk them deterministically)."""
    for name in sorted(image.topics_by_name):
        topic = image.topics_by_name[name]
        for partition_id in sorted(topic.partitions):
            yield topic, partition_id, topic.partitions[partition_id]


class _Changes:
    """The records one operation decides so far, and the partitions and brokers as they will be once those
    records are replayed, so that a later step of the operation sees an earlier one (a partition named
    twice, a second broker fenced after a first) without replaying whole images."""

    def __init__(self, controller: Controller) -> None:
        self._controller = controller
        self.image = controller.image
        self.records: list = []
        self._partitions: dict[tuple[uuid.UUID, int], PartitionImage] = {}
        self._active: dict[int, bool] = {}  # brokers whose activity these records change

    def partition(self, topic_id: uuid.UUID, partition_id: int) -> PartitionImage | None:
        changed = self._partitions.get((topic_id, partition_id))
        if changed is not None:
            return changed
        topic = self.image.topics_by_id.get(topic_id)
        return None if topic is None else topic.partitions.get(partition_id)

    def active(self, broker_id: int) -> bool:
        if broker_id in self._active:
            return self._active[broker_id]
        broker = self.image.brokers.get(broker_id)
        return broker is not None and _is_active(broker)

    def add_records(self, records: Iterable) -> None:
        for record in records:
            if isinstance(record, PartitionChangeRecord):
                key = (record.topic_id, record.partition_id)
                self._partitions[key] = merge_partition_change(self.partition(*key), record)
            self.records.append(record)

    def partitions(self) -> Iterator[tuple[uuid.UUID, int, PartitionImage]]:
        for topic, partition_id, _ in _partitions(self.image):
            yield topic.topic_id, partition_id, self.partition(topic.topic_id, partition_id)

    def remove_broker(self, broker_id: int) -> None:
        """The broker leaves every ISR it is in (but as the last member) and every leadership: Kafka's
        generateLeaderAndIsrUpdates with brokerToRemove, under each topic's unclean election setting."""
        self._active[broker_id] = False
        for topic_id, partition_id, partition in list(self.partitions()):
            if broker_id not in partition.isr and partition.leader != broker_id:
                continue
            self._update(topic_id, partition_id, partition, [b for b in partition.isr if b != broker_id])

    def fence(self, broker: BrokerRegistration) -> None:
        self.remove_broker(broker.broker_id)
        if not broker.fenced:
            self.add_records([
                BrokerRegistrationChangeRecord(broker_id=broker.broker_id, broker_epoch=broker.broker_epoch, fenced=1)
            ])

    def unfence(self, broker: BrokerRegistration) -> None:
        self.add_records([
            BrokerRegistrationChangeRecord(broker_id=broker.broker_id, broker_epoch=broker.broker_epoch, fenced=-1)
        ])
        self._active[broker.broker_id] = not broker.in_controlled_shutdown
        for topic_id, partition_id, partition in list(self.partitions()):
            if partition.leader == NO_LEADER:
                self._update(topic_id, partition_id, partition, None)

    def _update(self, topic_id: uuid.UUID, partition_id: int, partition: PartitionImage, target_isr) -> None:
        topic = self.image.topics_by_id[topic_id]
        record = build_partition_change(
            partition, topic_id, partition_id, self.active,
            election=self._controller._election_for(topic.name), target_isr=target_isr,
        )
        if record is not None:
            self.add_records([record])
