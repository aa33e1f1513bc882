"""Cluster metadata: an append-only log of metadata records, and the image they replay into.

Theory of operation
-------------------
Cluster metadata (cluster id, brokers, topics with ids and partitions, configs, producer-id blocks,
feature levels) lives in the single-partition log `__cluster_metadata-0`, as in Kafka's KRaft. Every
change is a metadata record (`metadata_records`), and the records of one operation go into one record
batch, so an operation is in the log whole or not at all. Today the log has one voter, this node; the
controller quorum will replicate the same records, and brokers will replay them the same way.

State changes only by replay. A `MetadataDelta` replays records on top of a `MetadataImage`, and
`apply()` yields the next image. A published image is never mutated, so whoever holds one holds a
consistent snapshot. Loading replays the whole log into one delta.

`MetadataLog` owns the current image. An operation (`create_topic`, `delete_topic`, `create_partitions`,
`alter_configs`, `allocate_producer_ids`, `register_broker`, `bootstrap`, ...) validates against the
current image and returns the records that carry it out, or raises `MetadataError` with a Kafka error
code; it changes nothing. `append(records, now_ms)` replays the records into a delta first (a record
the image cannot take must never reach the log, where it would break every later load), writes them as
one batch, flushes the log to disk, and only then publishes the new image: whoever answers a request
after append() answers about durable state. Producer-id blocks are handed out the same way, so a block
is on disk before any id in it is used, and blocks never repeat across restarts.

The log is reached through `MetadataStorage` (five members), so that the storage layer's API is used in
one place, `StorageLogAdapter`, and tests can run on an in-memory log. A metadata log is flushed on
every append, so its recovery point is its end; opening it after a crash cuts only a torn last batch,
which no caller was ever told about.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import random
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch, iter_batches, iter_records
from odradek.replication.errors import ReplicationError
from odradek.replication.metadata_records import (
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
    decode_metadata_record,
    encode_metadata_record,
)
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.producer_state import AppendOrigin

__all__ = [
    "METADATA_TOPIC",
    "METADATA_VERSION",
    "NO_LEADER",
    "NO_LEADER_CHANGE",
    "BrokerRegistration",
    "Endpoint",
    "MetadataDelta",
    "MetadataError",
    "MetadataImage",
    "MetadataLog",
    "MetadataReplayError",
    "MetadataStorage",
    "PartitionImage",
    "ProducerIdsBlock",
    "StorageLogAdapter",
    "TopicImage",
    "metadata_log_config",
    "new_cluster_id",
    "replay_all",
    "validate_topic_name",
]

METADATA_TOPIC = "__cluster_metadata"
METADATA_VERSION_FEATURE = "metadata.version"
METADATA_VERSION = 7
"""Kafka's metadata.version feature level 3.3-IV3, the first to know every record version written here."""

NO_LEADER = -1
NO_LEADER_CHANGE = -2
"""PartitionChangeRecord.leader when the leader did not change."""

MAX_TOPIC_NAME_LENGTH = 249
MAX_PARTITIONS_PER_REQUEST = 10_000
"""Kafka's controller bound (MAX_PARTITIONS_PER_BATCH): it keeps one operation's batch small."""

METADATA_MAX_BATCH_BYTES = 8 << 20
"""The largest batch one operation may write; the metadata log's max.message.bytes is at least this."""

DEFAULT_PRODUCER_ID_BLOCK_SIZE = 1000
_INT64_MAX = (1 << 63) - 1
_READ_BYTES = 1 << 20
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


class MetadataError(ReplicationError):
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

    def topic_configs(self, name: str) -> Mapping[str, str]:
        return self.configs.get((ConfigResourceType.TOPIC, name), {})

    def broker_configs(self, broker_id: int | None = None) -> Mapping[str, str]:
        """The dynamic configs of one broker, or the cluster-wide defaults when `broker_id` is None."""
        name = "" if broker_id is None else str(broker_id)
        return self.configs.get((ConfigResourceType.BROKER, name), {})


class MetadataDelta:
    """Records replayed on top of `image`. `apply()` returns the next image and leaves `image` as it was;
    a delta is used once. `changed_topic_ids` and `removed_topics` say what moved, for whoever reacts
    to it (creating or deleting partition logs, becoming leader)."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.changed_topic_ids: set[uuid.UUID] = set()
        self.removed_topics: dict[uuid.UUID, TopicImage] = {}
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
            topics_by_name = {topic.name: topic for topic in topics_by_id.values()}
        return MetadataImage(
            cluster_id=self._cluster_id,
            brokers=image.brokers if self._brokers is None else self._brokers,
            topics_by_id=topics_by_id,
            topics_by_name=topics_by_name,
            configs=image.configs if self._configs is None else self._configs,
            next_producer_id=self._next_producer_id,
            features=image.features if self._features is None else self._features,
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
        )

    def _replay_partition_change(self, r) -> None:
        partitions = self._partitions_w(r.topic_id, "PartitionChangeRecord")
        p = partitions.get(r.partition_id)
        if p is None:
            raise MetadataReplayError(f"PartitionChangeRecord for unknown partition {r.topic_id}:{r.partition_id}")
        # As Kafka's PartitionRegistration.merge: naming a leader, even the same one, starts a new leader
        # epoch; any change starts a new partition epoch.
        leader, leader_epoch = p.leader, p.leader_epoch
        if r.leader != NO_LEADER_CHANGE:
            leader, leader_epoch = r.leader, p.leader_epoch + 1
        partitions[r.partition_id] = PartitionImage(
            replicas=p.replicas if r.replicas is None else tuple(r.replicas),
            isr=p.isr if r.isr is None else tuple(r.isr),
            leader=leader,
            leader_epoch=leader_epoch,
            partition_epoch=p.partition_epoch + 1,
            removing_replicas=p.removing_replicas if r.removing_replicas is None else tuple(r.removing_replicas),
            adding_replicas=p.adding_replicas if r.adding_replicas is None else tuple(r.adding_replicas),
            leader_recovery_state=p.leader_recovery_state if r.leader_recovery_state == -1 else r.leader_recovery_state,
        )

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


def _uuid_string(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, unpadded (22 characters)."""
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode("ascii")


def _random_uuid(rng: random.Random) -> uuid.UUID:
    # As Kafka's Uuid.randomUuid: never the zero id, never the metadata topic's id (1), never one whose
    # string form starts with "-" (it would read as a command-line option).
    while True:
        u = uuid.UUID(int=rng.getrandbits(128), version=4)
        if u.int > 1 and not _uuid_string(u).startswith("-"):
            return u


def new_cluster_id(rng: random.Random | None = None) -> str:
    """A fresh cluster id in Kafka's form: a random UUID as 22 characters of URL-safe base64."""
    return _uuid_string(_random_uuid(rng or random.SystemRandom()))


# ----------------------------------------------------------------------------------------------- storage


class MetadataStorage(Protocol):
    """What MetadataLog needs of the partition log holding `__cluster_metadata-0`. Offsets are Kafka's:
    `log_end_offset` is exclusive, the offset the next record gets."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    def append(self, batch: bytearray, *, leader_epoch: int, now_ms: int) -> None:
        """Append one batch; the log assigns its offsets."""

    def read(self, offset: int, max_bytes: int):
        """Whole batches from the one holding `offset`, about `max_bytes` of them but at least one; empty
        at the log end."""

    def flush(self) -> None:
        """Make everything appended durable (fsync)."""


def metadata_log_config() -> LogConfig:
    """Settings for the log holding `__cluster_metadata-0`: nothing is deleted by retention (until
    snapshots exist, the log is the only copy of the metadata), and one operation's batch always fits."""
    return LogConfig(retention_ms=-1, retention_bytes=-1, max_message_bytes=METADATA_MAX_BATCH_BYTES)


class StorageLogAdapter:
    """MetadataStorage over the storage layer's `Log` (opened with `metadata_log_config()`)."""

    def __init__(self, log: Log) -> None:
        self.log = log

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    def append(self, batch: bytearray, *, leader_epoch: int, now_ms: int) -> None:
        self.log.append(batch, leader_epoch=leader_epoch, now_ms=now_ms, origin=AppendOrigin.COORDINATOR)

    def read(self, offset: int, max_bytes: int) -> bytes:
        out = bytearray()
        for region in self.log.read(offset, max_bytes).regions:
            position, end = region.position, region.position + region.length
            while position < end:
                chunk = os.pread(region.fd, end - position, position)
                if not chunk:
                    raise EOFError(f"metadata log segment ends before byte {end}")
                out += chunk
                position += len(chunk)
        return bytes(out)

    def flush(self) -> None:
        self.log.flush()


# ------------------------------------------------------------------------------------------------- log


class MetadataLog:
    """The metadata log and its current image; see the module doc. `leader_epoch` (the quorum's epoch) is
    stamped on appended batches; `rng` draws topic ids, incarnation ids, cluster ids and replica
    placement (a seeded Random makes them reproducible in tests)."""

    def __init__(self, storage: MetadataStorage, *, leader_epoch: int = 0, rng: random.Random | None = None) -> None:
        self.storage = storage
        self.leader_epoch = leader_epoch
        self.image = MetadataImage()
        self._rng = rng or random.SystemRandom()
        self._failed: Exception | None = None

    @property
    def log_end_offset(self) -> int:
        return self.storage.log_end_offset

    def load(self) -> MetadataImage:
        """Replay the whole log into a fresh image, which becomes the current one. A record that does not
        decode (RemoteProtocolError) or replay (MetadataReplayError) stops the load: a node must not start
        on metadata it cannot read whole."""
        storage = self.storage
        delta = MetadataDelta(MetadataImage())
        offset = storage.log_start_offset
        while offset < storage.log_end_offset:
            data = storage.read(offset, _READ_BYTES)
            start = offset
            for pos, header in iter_batches(data):
                if header.next_offset <= offset:
                    continue
                if not header.is_control:  # control batches carry the quorum's own records
                    batch = memoryview(data)[pos : pos + header.size]
                    for record in iter_records(batch, max_uncompressed_bytes=METADATA_MAX_BATCH_BYTES):
                        if record.value is None:
                            raise MetadataReplayError(f"metadata record at offset {record.offset} has no value")
                        delta.replay(decode_metadata_record(record.value))
                offset = header.next_offset
            if offset == start:
                raise MetadataReplayError(f"the metadata log returned no whole batch at offset {offset}")
        self.image = delta.apply()
        return self.image

    def append(self, records: Sequence, now_ms: int) -> MetadataDelta:
        """Write `records` as one batch, make it durable, then publish the image they lead to. Returns
        the applied delta. A record the current image cannot take raises MetadataReplayError and writes
        nothing; a storage failure leaves the log refusing further appends (the broker must stop)."""
        if self._failed is not None:
            raise MetadataError(ErrorCode.KAFKA_STORAGE_ERROR, f"the metadata log failed: {self._failed}")
        delta = MetadataDelta(self.image)
        for record in records:
            delta.replay(record)
        image = delta.apply()
        if not records:
            return delta
        batch = build_batch(
            [(None, encode_metadata_record(r), None, now_ms) for r in records],
            partition_leader_epoch=self.leader_epoch,
        )
        if len(batch) > METADATA_MAX_BATCH_BYTES:
            raise MetadataError(
                ErrorCode.INVALID_REQUEST,
                f"The operation needs {len(batch)} bytes of metadata records; a metadata batch holds at most "
                f"{METADATA_MAX_BATCH_BYTES}.",
            )
        try:
            self.storage.append(bytearray(batch), leader_epoch=self.leader_epoch, now_ms=now_ms)
            self.storage.flush()
        except Exception as e:
            self._failed = e
            raise
        self.image = image
        return delta

    # -- operations: each validates against the current image and returns records; nothing changes

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
            records.append(FeatureLevelRecord(name=METADATA_VERSION_FEATURE, feature_level=METADATA_VERSION))
            records.append(ClusterIdRecord(cluster_id=cluster_id or new_cluster_id(self._rng)))
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
                incarnation_id=_random_uuid(self._rng),
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
        broker = self._broker(broker_id)
        return [UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=broker.broker_epoch)]

    def fence_broker(self, broker_id: int) -> list:
        return self._registration_change(broker_id, 1)

    def unfence_broker(self, broker_id: int) -> list:
        return self._registration_change(broker_id, -1)

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
        topic_id = _random_uuid(self._rng)
        while topic_id in image.topics_by_id:
            topic_id = _random_uuid(self._rng)
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

    # -- helpers

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
        brokers = self._usable_brokers()
        if replication_factor > len(brokers):
            raise MetadataError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"Unable to replicate the partition {replication_factor} time(s): The target replication factor "
                f"of {replication_factor} cannot be reached because only {len(brokers)} broker(s) are registered.",
            )
        n = len(brokers)
        start = self._rng.randrange(n)
        partitions = range(first_partition, first_partition + count)
        return [[brokers[(start + p + i) % n] for i in range(replication_factor)] for p in partitions]

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
