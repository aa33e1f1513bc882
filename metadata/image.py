"""Cluster metadata as data: the image, the deltas that move it, and the rules of replay.

Theory of operation
-------------------
Cluster metadata (cluster id, brokers, topics with ids and partitions, configs, producer-id blocks,
feature levels) lives in the single-partition log `__cluster_metadata-0`, as in Kafka's KRaft. Every
change is a metadata record (`metadata_records`). State changes only by replay: a `MetadataDelta`
replays records on top of a `MetadataImage`, and `apply()` yields the next image. A published image is
never mutated, so whoever holds one holds a consistent snapshot.

This module is pure: no storage, no decisions. Who decides which records to write is the controller
(`metadata.controller`); who stores them and replays the log is `metadata.log`; who hands
committed images to the rest of the broker is `metadata.publisher`.
"""

from __future__ import annotations

import base64
import dataclasses
import random
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.protocol.sasl import ScramCredential
from odradek.metadata.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from odradek.metadata.records import (
    BrokerRegistrationChangeRecord,
    ClusterIdRecord,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    MetadataRecordType,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)

METADATA_TOPIC = "__cluster_metadata"
METADATA_VERSION_FEATURE = "metadata.version"
METADATA_VERSION = 7
"""Kafka's metadata.version feature level 3.3-IV3, the first to know every record version written here."""

ELR_VERSION_FEATURE = "eligible.leader.replicas.version"
ELR_VERSION = 1
"""KIP-966's feature: at level 1 the controller keeps eligible leader replicas (partition_change.py). A
new cluster finalizes it at bootstrap, as Kafka 4.1+ does; a cluster formatted before keeps it off (the
level is never moved: UpdateFeatures is not served)."""

TRANSACTION_VERSION_FEATURE = "transaction.version"
TRANSACTION_VERSION = 2
"""KIP-890's feature, the highest level this release serves and the one a new cluster finalizes (Kafka 4.x's
default for a new cluster): 2 is Transactions V2, an epoch bump per transaction (coordinator/transaction/);
clients pick their protocol by it (the Java client speaks V2 only when it is finalized at 2). A cluster
formatted with `odradek storage format --feature transaction.version=1` keeps every client on version 1."""

SHARE_VERSION_FEATURE = "share.version"
SHARE_VERSION = 2
"""KIP-932's feature: at level 1 the cluster serves share groups (Kafka 4.2+), at level 2 share groups have
dead-letter queues too (KIP-1191, Kafka 4.4's ShareVersion.SV_2, its LATEST_PRODUCTION: what Kafka 4.4's
`kafka-storage format` finalizes by default). Odradek's controller finalizes 2 at bootstrap; `odradek storage
format --feature share.version=1` gives share groups without a DLQ (the errors.deadletterqueue.* group configs
are refused), and a cluster formatted before share groups keeps 0 (UpdateFeatures is not served): its
brokers refuse the share APIs."""

NO_LEADER = -1
NO_LEADER_CHANGE = -2
"""PartitionChangeRecord.leader when the leader did not change."""

MAX_TOPIC_NAME_LENGTH = 249
MAX_PARTITIONS_PER_REQUEST = 10_000
"""Kafka's controller bound (MAX_PARTITIONS_PER_BATCH): it keeps one operation's batch small."""

METADATA_MAX_BATCH_BYTES = 8 << 20
"""The largest batch one operation may write; the metadata log's max.message.bytes is at least this."""

_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


class MetadataError(KafkaApiError):
    """A metadata operation cannot be carried out: `error_code` and `message` go into the response."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(f"{error_code.name}: {message}")
        self.error_code = error_code
        self.message = message


class MetadataReplayError(Exception):
    """A record the image cannot take: the metadata log is corrupt, or an operation has a bug."""


# ------------------------------------------------------------------------------------------------ image


@dataclass(frozen=True, slots=True)
class Endpoint:
    name: str  # the listener name
    host: str
    port: int
    security_protocol: int = 0  # PLAINTEXT


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    broker_id: int
    incarnation_id: uuid.UUID
    broker_epoch: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool


@dataclass(frozen=True, slots=True)
class PartitionImage:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    leader_recovery_state: int = 0
    # KIP-966: replicas out of the ISR that may still lead (they left it while it was below min ISR, so
    # they hold every record under the high watermark), and the last leader once ISR and ELR are empty.
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: Mapping[int, PartitionImage]


@dataclass(frozen=True, slots=True)
class ProducerIdsBlock:
    """Producer ids [first_producer_id, first_producer_id + size) handed to `broker_id`."""

    broker_id: int
    first_producer_id: int
    size: int

    @property
    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """The cluster metadata after some prefix of the log. Treat every mapping in it as read-only.

    `configs` is keyed by (resource type, resource name); the broker resource "" holds cluster-wide
    defaults. `next_producer_id` is the first id of the next producer-id block to hand out."""

    cluster_id: str | None = None
    brokers: Mapping[int, BrokerRegistration] = field(default_factory=dict)
    topics_by_id: Mapping[uuid.UUID, TopicImage] = field(default_factory=dict)
    topics_by_name: Mapping[str, TopicImage] = field(default_factory=dict)
    configs: Mapping[tuple[int, str], Mapping[str, str]] = field(default_factory=dict)
    next_producer_id: int = 0
    features: Mapping[str, int] = field(default_factory=dict)
    # SCRAM credentials by (user name, ScramMechanism id)
    scram_credentials: Mapping[tuple[str, int], ScramCredential] = field(default_factory=dict)
    acls: Mapping[uuid.UUID, AclBinding] = field(default_factory=dict)
    # Client quotas: entity (sorted (entity type, name or None for the default) pairs) -> {key: value}.
    client_quotas: Mapping[tuple[tuple[str, str | None], ...], Mapping[str, float]] = field(default_factory=dict)

    def topic_configs(self, name: str) -> Mapping[str, str]:
        return self.configs.get((ConfigResourceType.TOPIC, name), {})

    def broker_configs(self, broker_id: int | None = None) -> Mapping[str, str]:
        """The dynamic configs of one broker, or the cluster-wide defaults when `broker_id` is None."""
        name = "" if broker_id is None else str(broker_id)
        return self.configs.get((ConfigResourceType.BROKER, name), {})


def merge_partition_change(p: PartitionImage, r) -> PartitionImage:
    """The partition after PartitionChangeRecord `r`, as Kafka's PartitionRegistration.merge: naming a
    leader, even the same one, starts a new leader epoch; every record starts a new partition epoch; a
    null list, leader -2 (NO_LEADER_CHANGE) and leader_recovery_state -1 leave that field as it was."""
    leader, leader_epoch = p.leader, p.leader_epoch
    if r.leader != NO_LEADER_CHANGE:
        leader, leader_epoch = r.leader, p.leader_epoch + 1
    return PartitionImage(
        replicas=p.replicas if r.replicas is None else tuple(r.replicas),
        isr=p.isr if r.isr is None else tuple(r.isr),
        leader=leader,
        leader_epoch=leader_epoch,
        partition_epoch=p.partition_epoch + 1,
        removing_replicas=p.removing_replicas if r.removing_replicas is None else tuple(r.removing_replicas),
        adding_replicas=p.adding_replicas if r.adding_replicas is None else tuple(r.adding_replicas),
        leader_recovery_state=p.leader_recovery_state if r.leader_recovery_state == -1 else r.leader_recovery_state,
        elr=p.elr if r.eligible_leader_replicas is None else tuple(r.eligible_leader_replicas),
        last_known_elr=p.last_known_elr if r.last_known_elr is None else tuple(r.last_known_elr),
    )


class MetadataDelta:
    """Records replayed on top of `image`. `apply()` returns the next image and leaves `image` as it was;
    a delta is used once. `changed_topic_ids` and `removed_topics` say what moved, for whoever reacts
    to it (creating or deleting partition logs, becoming leader); `changed_partitions()` narrows a changed
    topic to the partitions its records named, as Kafka's TopicDelta does, so that one leader or ISR change
    in a topic of 10,000 partitions is one partition's work for the replica manager, not 10,000."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.changed_topic_ids: set[uuid.UUID] = set()
        self.removed_topics: dict[uuid.UUID, TopicImage] = {}
        # The partitions PartitionRecord / PartitionChangeRecord named, per topic; and the topics of which
        # every partition counts as changed (a config that may set their min.insync.replicas changed).
        self._changed_partitions: dict[uuid.UUID, set[int]] = {}
        self._whole_topics: set[uuid.UUID] = set()
        self._cluster_id = image.cluster_id
        self._next_producer_id = image.next_producer_id
        # Copied from the image on first write.
        self._brokers: dict[int, BrokerRegistration] | None = None
        self._topics: dict[uuid.UUID, TopicImage] | None = None
        self._topic_ids: dict[str, uuid.UUID] | None = None
        self._partitions: dict[uuid.UUID, dict[int, PartitionImage]] = {}
        self._configs: dict[tuple[int, str], Mapping[str, str]] | None = None
        self._copied_configs: set[tuple[int, str]] = set()
        self._features: dict[str, int] | None = None
        self._scram: dict[tuple[str, int], ScramCredential] | None = None
        self._acls: dict[uuid.UUID, AclBinding] | None = None
        self._client_quotas: dict | None = None
        self._applied = False

    def replay(self, record) -> None:
        """Apply one metadata record. Raises MetadataReplayError if the record does not fit."""
        if self._applied:
            raise RuntimeError("a MetadataDelta cannot replay after apply()")
        try:
            handler = _REPLAY[record.RECORD_TYPE]
        except (AttributeError, KeyError):
            raise MetadataReplayError(f"not a metadata record this image replays: {record!r}") from None
        handler(self, record)

    def changed_partitions(self) -> dict[uuid.UUID, frozenset[int]]:
        """The changed topics whose change is confined to some partitions: topic id -> those partition ids.
        A changed topic not listed here changed as a whole (every partition of it is to be looked at)."""
        return {topic_id: frozenset(ids) for topic_id, ids in self._changed_partitions.items()
                if topic_id not in self._whole_topics and topic_id in self.changed_topic_ids}

    def apply(self) -> MetadataImage:
        if self._applied:
            raise RuntimeError("MetadataDelta.apply() may be called once")
        self._applied = True
        image = self.image
        topics_by_id = image.topics_by_id
        topics_by_name = image.topics_by_name
        if self._topics is not None:
            topics_by_id = self._topics
            for topic_id, partitions in self._partitions.items():
                topic = topics_by_id[topic_id]
                topics_by_id[topic_id] = TopicImage(topic.name, topic_id, partitions)
            # Copy-on-write: names change only for topics this delta touched or removed.
            topics_by_name = dict(image.topics_by_name)
            for removed in self.removed_topics.values():
                named = topics_by_name.get(removed.name)
                if named is not None and named.topic_id == removed.topic_id:
                    del topics_by_name[removed.name]
            for topic_id in self._partitions:
                topic = topics_by_id[topic_id]
                topics_by_name[topic.name] = topic
        return MetadataImage(
            cluster_id=self._cluster_id,
            brokers=image.brokers if self._brokers is None else self._brokers,
            topics_by_id=topics_by_id,
            topics_by_name=topics_by_name,
            configs=image.configs if self._configs is None else self._configs,
            next_producer_id=self._next_producer_id,
            features=image.features if self._features is None else self._features,
            scram_credentials=image.scram_credentials if self._scram is None else self._scram,
            acls=image.acls if self._acls is None else self._acls,
            client_quotas=image.client_quotas if self._client_quotas is None else self._client_quotas,
        )

    # -- copy on first write

    def _brokers_w(self) -> dict[int, BrokerRegistration]:
        if self._brokers is None:
            self._brokers = dict(self.image.brokers)
        return self._brokers

    def _topics_w(self) -> tuple[dict[uuid.UUID, TopicImage], dict[str, uuid.UUID]]:
        if self._topics is None:
            self._topics = dict(self.image.topics_by_id)
            self._topic_ids = {name: topic.topic_id for name, topic in self.image.topics_by_name.items()}
        return self._topics, self._topic_ids  # type: ignore[return-value]

    def _partitions_w(self, topic_id: uuid.UUID, what: str) -> dict[int, PartitionImage]:
        topics, _ = self._topics_w()
        topic = topics.get(topic_id)
        if topic is None:
            raise MetadataReplayError(f"{what} for unknown topic id {topic_id}")
        partitions = self._partitions.get(topic_id)
        if partitions is None:
            partitions = self._partitions[topic_id] = dict(topic.partitions)
        self.changed_topic_ids.add(topic_id)
        return partitions

    def _partition_changed(self, topic_id: uuid.UUID, partition_id: int) -> None:
        ids = self._changed_partitions.get(topic_id)
        if ids is None:
            ids = self._changed_partitions[topic_id] = set()
        ids.add(partition_id)

    def _configs_w(self, resource: tuple[int, str]) -> dict[str, str]:
        if self._configs is None:
            self._configs = dict(self.image.configs)
        if resource not in self._copied_configs:
            self._configs[resource] = dict(self._configs.get(resource, {}))
            self._copied_configs.add(resource)
        return self._configs[resource]  # type: ignore[return-value]

    def _drop_configs(self, resource: tuple[int, str]) -> None:
        if resource in (self.image.configs if self._configs is None else self._configs):
            if self._configs is None:
                self._configs = dict(self.image.configs)
            del self._configs[resource]
            self._copied_configs.discard(resource)

    # -- one handler per record type

    def _replay_register_broker(self, r) -> None:
        self._brokers_w()[r.broker_id] = BrokerRegistration(
            broker_id=r.broker_id,
            incarnation_id=r.incarnation_id,
            broker_epoch=r.broker_epoch,
            endpoints=tuple(Endpoint(e.name, e.host, e.port, e.security_protocol) for e in r.end_points),
            rack=r.rack,
            fenced=r.fenced,
            in_controlled_shutdown=r.in_controlled_shutdown,
        )

    def _registered(self, broker_id: int, broker_epoch: int, what: str) -> BrokerRegistration:
        brokers = self._brokers_w()
        broker = brokers.get(broker_id)
        if broker is None:
            raise MetadataReplayError(f"{what} for unregistered broker {broker_id}")
        if broker.broker_epoch != broker_epoch:
            raise MetadataReplayError(
                f"{what} for broker {broker_id} with epoch {broker_epoch}, registered with {broker.broker_epoch}"
            )
        return broker

    def _replay_unregister_broker(self, r) -> None:
        self._registered(r.broker_id, r.broker_epoch, "UnregisterBrokerRecord")
        del self._brokers_w()[r.broker_id]

    def _replay_broker_registration_change(self, r) -> None:
        broker = self._registered(r.broker_id, r.broker_epoch, "BrokerRegistrationChangeRecord")
        fenced = {-1: False, 0: broker.fenced, 1: True}.get(r.fenced)
        shutdown = {0: broker.in_controlled_shutdown, 1: True}.get(r.in_controlled_shutdown)
        if fenced is None or shutdown is None:
            raise MetadataReplayError(f"invalid BrokerRegistrationChangeRecord {r!r}")
        self._brokers_w()[r.broker_id] = dataclasses.replace(broker, fenced=fenced, in_controlled_shutdown=shutdown)

    def _replay_topic(self, r) -> None:
        topics, topic_ids = self._topics_w()
        if r.topic_id.int == 0:
            raise MetadataReplayError(f"topic {r.name!r} has the zero topic id")
        if r.topic_id in topics or r.name in topic_ids:
            raise MetadataReplayError(f"topic {r.name!r} ({r.topic_id}) already exists")
        topics[r.topic_id] = TopicImage(r.name, r.topic_id, {})
        topic_ids[r.name] = r.topic_id
        self._partitions[r.topic_id] = {}
        self.changed_topic_ids.add(r.topic_id)

    def _replay_remove_topic(self, r) -> None:
        topics, topic_ids = self._topics_w()
        topic = topics.pop(r.topic_id, None)
        if topic is None:
            raise MetadataReplayError(f"RemoveTopicRecord for unknown topic id {r.topic_id}")
        del topic_ids[topic.name]
        self._partitions.pop(r.topic_id, None)
        self.changed_topic_ids.discard(r.topic_id)
        self._changed_partitions.pop(r.topic_id, None)
        self._whole_topics.discard(r.topic_id)
        old = self.image.topics_by_id.get(r.topic_id)
        if old is not None:
            self.removed_topics[r.topic_id] = old
        # A topic's configs go with it (Kafka drops them when it replays RemoveTopicRecord).
        self._drop_configs((ConfigResourceType.TOPIC, topic.name))

    def _replay_partition(self, r) -> None:
        if r.partition_id < 0:
            raise MetadataReplayError(f"PartitionRecord with partition id {r.partition_id}")
        self._partitions_w(r.topic_id, "PartitionRecord")[r.partition_id] = PartitionImage(
            replicas=tuple(r.replicas),
            isr=tuple(r.isr),
            leader=r.leader,
            leader_epoch=r.leader_epoch,
            partition_epoch=r.partition_epoch,
            removing_replicas=tuple(r.removing_replicas or ()),
            adding_replicas=tuple(r.adding_replicas or ()),
            leader_recovery_state=r.leader_recovery_state,
            elr=tuple(r.eligible_leader_replicas or ()),
            last_known_elr=tuple(r.last_known_elr or ()),
        )
        self._partition_changed(r.topic_id, r.partition_id)

    def _replay_partition_change(self, r) -> None:
        partitions = self._partitions_w(r.topic_id, "PartitionChangeRecord")
        p = partitions.get(r.partition_id)
        if p is None:
            raise MetadataReplayError(f"PartitionChangeRecord for unknown partition {r.topic_id}:{r.partition_id}")
        partitions[r.partition_id] = merge_partition_change(p, r)
        self._partition_changed(r.topic_id, r.partition_id)

    def _replay_config(self, r) -> None:
        resource = (r.resource_type, r.resource_name)
        configs = self._configs_w(resource)
        if r.value is None:
            configs.pop(r.name, None)
            if not configs:
                self._drop_configs(resource)
        else:
            configs[r.name] = r.value
        if r.resource_type == ConfigResourceType.TOPIC:
            # A topic's configs changed: its open logs must take the new values.
            if self._topic_ids is not None:
                topic_id = self._topic_ids.get(r.resource_name)
            else:
                topic = self.image.topics_by_name.get(r.resource_name)
                topic_id = topic.topic_id if topic is not None else None
            if topic_id is not None:
                self.changed_topic_ids.add(topic_id)
                self._whole_topics.add(topic_id)
        elif r.resource_type == ConfigResourceType.BROKER:
            # A dynamic broker config (one node's, or the cluster-wide default's) can be the default of a
            # topic config (log.retention.ms, message.max.bytes, min.insync.replicas, ...): every topic
            # without its own override may have a new effective config, so every topic is changed.
            topics = self._topics if self._topics is not None else self.image.topics_by_id
            self.changed_topic_ids.update(topics)
            self._whole_topics.update(topics)

    def _replay_producer_ids(self, r) -> None:
        if r.next_producer_id <= self._next_producer_id:
            raise MetadataReplayError(
                f"ProducerIdsRecord moves the next producer id back from {self._next_producer_id} "
                f"to {r.next_producer_id}"
            )
        self._next_producer_id = r.next_producer_id

    def _replay_feature_level(self, r) -> None:
        if self._features is None:
            self._features = dict(self.image.features)
        if r.feature_level == 0:
            self._features.pop(r.name, None)
        else:
            self._features[r.name] = r.feature_level

    def _replay_cluster_id(self, r) -> None:
        if self._cluster_id is not None and self._cluster_id != r.cluster_id:
            raise MetadataReplayError(f"cluster id {r.cluster_id!r} replaces {self._cluster_id!r}")
        self._cluster_id = r.cluster_id

    def _replay_no_op(self, r) -> None:
        pass

    def _replay_user_scram_credential(self, r) -> None:
        if self._scram is None:
            self._scram = dict(self.image.scram_credentials)
        self._scram[(r.name, r.mechanism)] = ScramCredential(bytes(r.salt), bytes(r.stored_key), bytes(r.server_key), r.iterations)

    def _replay_remove_user_scram_credential(self, r) -> None:
        if self._scram is None:
            self._scram = dict(self.image.scram_credentials)
        if self._scram.pop((r.name, r.mechanism), None) is None:
            raise MetadataReplayError(f"RemoveUserScramCredentialRecord for {r.name!r} mechanism {r.mechanism}, which has none")
    def _replay_access_control_entry(self, r) -> None:
        if self._acls is None:
            self._acls = dict(self.image.acls)
        if r.id in self._acls:
            raise MetadataReplayError(f"ACL {r.id} already exists")
        try:
            self._acls[r.id] = AclBinding(
                ResourceType(r.resource_type), r.resource_name, PatternType(r.pattern_type), r.principal, r.host,
                AclOperation(r.operation), AclPermissionType(r.permission_type),
            )
        except ValueError as e:
            raise MetadataReplayError(f"AccessControlEntryRecord {r!r}: {e}") from None

    def _replay_remove_access_control_entry(self, r) -> None:
        if self._acls is None:
            self._acls = dict(self.image.acls)
        if self._acls.pop(r.id, None) is None:
            raise MetadataReplayError(f"RemoveAccessControlEntryRecord for unknown ACL {r.id}")

    def _replay_client_quota(self, r) -> None:
        if self._client_quotas is None:
            self._client_quotas = dict(self.image.client_quotas)
        entity = tuple(sorted((e.entity_type, e.entity_name) for e in r.entity))
        values = dict(self._client_quotas.get(entity, {}))
        if r.remove:
            values.pop(r.key, None)
        else:
            values[r.key] = r.value
        if values:
            self._client_quotas[entity] = values
        else:
            self._client_quotas.pop(entity, None)


_REPLAY = {
    MetadataRecordType.REGISTER_BROKER: MetadataDelta._replay_register_broker,
    MetadataRecordType.UNREGISTER_BROKER: MetadataDelta._replay_unregister_broker,
    MetadataRecordType.BROKER_REGISTRATION_CHANGE: MetadataDelta._replay_broker_registration_change,
    MetadataRecordType.TOPIC: MetadataDelta._replay_topic,
    MetadataRecordType.REMOVE_TOPIC: MetadataDelta._replay_remove_topic,
    MetadataRecordType.PARTITION: MetadataDelta._replay_partition,
    MetadataRecordType.PARTITION_CHANGE: MetadataDelta._replay_partition_change,
    MetadataRecordType.CONFIG: MetadataDelta._replay_config,
    MetadataRecordType.PRODUCER_IDS: MetadataDelta._replay_producer_ids,
    MetadataRecordType.FEATURE_LEVEL: MetadataDelta._replay_feature_level,
    MetadataRecordType.CLUSTER_ID: MetadataDelta._replay_cluster_id,
    MetadataRecordType.NO_OP: MetadataDelta._replay_no_op,
    MetadataRecordType.USER_SCRAM_CREDENTIAL: MetadataDelta._replay_user_scram_credential,
    MetadataRecordType.REMOVE_USER_SCRAM_CREDENTIAL: MetadataDelta._replay_remove_user_scram_credential,
    MetadataRecordType.ACCESS_CONTROL_ENTRY: MetadataDelta._replay_access_control_entry,
    MetadataRecordType.REMOVE_ACCESS_CONTROL_ENTRY: MetadataDelta._replay_remove_access_control_entry,
    MetadataRecordType.CLIENT_QUOTA: MetadataDelta._replay_client_quota,
}


def replay_all(records: Iterable, image: MetadataImage | None = None) -> MetadataImage:
    """The image `records` replay into, on top of `image` (default: the empty image)."""
    delta = MetadataDelta(MetadataImage() if image is None else image)
    for record in records:
        delta.replay(record)
    return delta.apply()


# ------------------------------------------------------------------------------------------- validation


def validate_topic_name(name: str) -> None:
    """Kafka's rules (Topic.validate): raises MetadataError(INVALID_TOPIC_EXCEPTION) for an illegal name."""
    if not name:
        raise MetadataError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise MetadataError(ErrorCode.INVALID_TOPIC_EXCEPTION, 'Topic name cannot be "." or ".."')
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise MetadataError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, topic name: {name}",
        )
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        raise MetadataError(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f'Topic name "{name}" is illegal, it contains a character other than ASCII alphanumerics, '
            "'.', '_' and '-'",
        )


def uuid_string(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, unpadded (22 characters)."""
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode("ascii")


def random_uuid(rng: random.Random) -> uuid.UUID:
    # As Kafka's Uuid.randomUuid: never the zero id, never the metadata topic's id (1), never one whose
    # string form starts with "-" (it would read as a command-line option).
    while True:
        u = uuid.UUID(int=rng.getrandbits(128), version=4)
        if u.int > 1 and not uuid_string(u).startswith("-"):
            return u


def new_cluster_id(rng: random.Random | None = None) -> str:
    """A fresh cluster id in Kafka's form: a random UUID as 22 characters of URL-safe base64."""
    return uuid_string(random_uuid(rng or random.SystemRandom()))
