"""Wire the group coordinator to this broker: `__consumer_offsets` logs, the metadata image, the timer.

The coordinator (coordinator/group/) knows nothing of storage or sockets; it asks for a `PartitionWriter`
(internal_topics.py: append records to partition p of `__consumer_offsets`, read them all back for
loading, report its high watermark) and a view of the topics. Which `__consumer_offsets` partitions it
serves follows the metadata image (`CoordinatorLoader`, a metadata listener): a partition is loaded
("elected") when this broker becomes its leader and unloaded ("resigned") when it stops being it; on one
broker every partition is led here, so each is loaded at start.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from odradek.coordinator.group.config import GroupCoordinatorConfig
from odradek.coordinator.group.group_coordinator import GroupCoordinator
from odradek.coordinator.partitioning import CONSUMER_OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from odradek.coordinator.topics import TopicMetadata
from odradek.metadata.publisher import MetadataPublisher, MetadataUpdate
from odradek.metadata.records import ConfigResourceType
from odradek.purgatory.timing_wheel import Timer
from odradek.replication.replica_manager import ReplicaManager

from .config import BrokerConfig
from .controller_channel import ControllerChannel

from .internal_topics import InternalTopicWriter, ensure_internal_topic, offsets_topic_spec
from .share.group_state import ShareStateInitializer
from .share.persister import SharePersister

OFFSETS_TOPIC = CONSUMER_OFFSETS_TOPIC  # the name components.py checks for at start


class MetadataTopicsView:
    """The coordinators' view of the topics (coordinator/topics.py), read from the current image."""

    def __init__(self, publisher: MetadataPublisher) -> None:
        self.publisher = publisher

    @staticmethod
    def _view(topic) -> TopicMetadata | None:
        return None if topic is None else TopicMetadata(topic.topic_id, topic.name, len(topic.partitions))

    def topic_by_name(self, name: str) -> TopicMetadata | None:
        return self._view(self.publisher.image.topics_by_name.get(name))

    def topic_by_id(self, topic_id) -> TopicMetadata | None:
        return self._view(self.publisher.image.topics_by_id.get(topic_id))

    def topic_names(self) -> Iterable[str]:
        return self.publisher.image.topics_by_name.keys()


class CoordinatorLoader:
    """Loads and unloads the group coordinator's partitions as their leadership moves (a metadata listener)."""

    def __init__(self, groups: GroupCoordinator, node_id: int, clock: Callable[[], int]) -> None:
        self.groups = groups
        self.node_id = node_id
        self.clock = clock
        self.led: set[int] = set()

    def on_metadata_update(self, update: MetadataUpdate) -> None:
        now = self.clock()
        topic = update.image.topics_by_name.get(OFFSETS_TOPIC)
        led = set() if topic is None else {i for i, p in topic.partitions.items() if p.leader == self.node_id}
        for index in sorted(self.led - led):
            self.groups.on_resigned(index)
        for index in sorted(led - self.led):
            self.groups.on_elected(index, now)
        self.led = led


class EpochCoordinatorLoader:
    """Loads and unloads a coordinator's partitions of `topic` as their leadership moves (a metadata
    listener), by leader epoch: a partition whose epoch changed while it stayed here is unloaded and loaded
    again, since the log may have been truncated under it. The transaction and share coordinators use it;
    subclasses say what electing and resigning a partition does."""

    topic: str

    def __init__(self, node_id: int, clock: Callable[[], int]) -> None:
        self.node_id = node_id
        self.clock = clock
        self.led: dict[int, int] = {}  # partition -> the leader epoch it was loaded at

    def on_metadata_update(self, update: MetadataUpdate) -> None:
        now = self.clock()
        topic = update.image.topics_by_name.get(self.topic)
        led = {} if topic is None else {i: p.leader_epoch for i, p in topic.partitions.items() if p.leader == self.node_id}
        for index in sorted(self.led):
            if led.get(index) != self.led[index]:
                self.resigned(index)
        for index in sorted(led):
            if self.led.get(index) != led[index]:
                self.elected(index, now, led[index])
        self.led = led

    def elected(self, index: int, now: int, leader_epoch: int) -> None:
        raise NotImplementedError

    def resigned(self, index: int) -> None:
        raise NotImplementedError


def start_group_coordinator(cfg: BrokerConfig, data: ReplicaManager, timer: Timer, publisher: MetadataPublisher,
                            controller: ControllerChannel, clock: Callable[[], int],
                            share_persister: SharePersister | None = None) -> GroupCoordinator:
    # None: not created yet (too few live brokers); FindCoordinator asks again (ensure_coordinator_topic).
    num_partitions = (ensure_internal_topic(publisher, controller, offsets_topic_spec(cfg))
                      or cfg.offsets_topic_num_partitions)
    # FindCoordinator places transactional ids too: over __transaction_state's own count once it exists, as
    # the transaction coordinator does (txn_wiring), not a configured count that may differ.
    txn_topic = publisher.image.topics_by_name.get(TRANSACTION_STATE_TOPIC)
    txn_partitions = len(txn_topic.partitions) if txn_topic is not None else cfg.transaction_state_log_num_partitions
    config = GroupCoordinatorConfig.from_broker_config(cfg, offsets_topic_num_partitions=num_partitions,
                                                       transaction_state_log_num_partitions=txn_partitions)
    # acks=all writes, as Kafka's coordinators make them: refused while the partition's ISR is below its
    # (effective) min.insync.replicas, NOT_ENOUGH_REPLICAS_AFTER_APPEND when it shrank after the append.
    writer = InternalTopicWriter(data, CONSUMER_OFFSETS_TOPIC, enforce_min_isr=True)
    groups = GroupCoordinator(writer, timer, config, MetadataTopicsView(publisher),
                              under_min_isr=writer.is_under_min_isr)
    # A group's dynamic GROUP configs (share.session.timeout.ms, ...), from the current image.
    groups.group_configs = lambda group_id: publisher.image.configs.get((ConfigResourceType.GROUP, group_id), {})
    if share_persister is not None:  # share groups' state initialization (broker/share/group_state.py)
        groups.share_state_initializer = ShareStateInitializer(groups, share_persister, clock)
    publisher.register(CoordinatorLoader(groups, cfg.node_id, clock))
    return groups
