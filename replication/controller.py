"""The controller's decisions: which metadata records carry out an operation, or why it is refused.

Each operation (create a topic, delete one, add partitions, alter configs, hand out a producer-id block,
register, fence or unregister a broker) validates against the controller's current image and returns the
records that carry it out, or raises `MetadataError` with Kafka's error code and message. It changes
nothing: the records take effect when they are committed to the metadata log and replayed, by the
controller (which then sees its own change in `image`) and by every broker following the log.

The controller is sans-I/O. What drives it is the controller channel in broker/ (today the local
channel of a cluster of one: run the operation, append, publish; with the quorum, the active
controller's request handlers). `image` and `log_end_offset` are the state of the committed log the
owner keeps current; `rng` draws topic ids, incarnation ids, cluster ids and replica placement (a seeded
Random makes them reproducible in tests).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence

from odradek.protocol.errors import ErrorCode
from odradek.replication.metadata_image import (
    METADATA_TOPIC,
    METADATA_VERSION,
    METADATA_VERSION_FEATURE,
    MAX_PARTITIONS_PER_REQUEST,
    BrokerRegistration,
    Endpoint,
    MetadataError,
    MetadataImage,
    ProducerIdsBlock,
    new_cluster_id,
    random_uuid,
    validate_topic_name,
)
from odradek.replication.metadata_records import (
    BrokerRegistrationChangeRecord,
    ClusterIdRecord,
    ConfigRecord,
    ConfigResourceType,
    FeatureLevelRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)

DEFAULT_PRODUCER_ID_BLOCK_SIZE = 1000
_INT64_MAX = (1 << 63) - 1


class Controller:
    """See the module doc. `advance(image, log_end_offset)` after every commit the controller should see."""

    def __init__(self, *, rng: random.Random | None = None) -> None:
        self.image = MetadataImage()
        self.log_end_offset = 0
        self._rng = rng or random.SystemRandom()

    def advance(self, image: MetadataImage, log_end_offset: int) -> None:
        self.image = image
        self.log_end_offset = log_end_offset

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
