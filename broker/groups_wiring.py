"""Wire the group coordinator to this broker: `__consumer_offsets` logs, the metadata image, the timer.

The coordinator (coordinator/group/) knows nothing of storage or sockets; it asks for a `PartitionWriter`
(internal_topics.py: append records to partition p of `__consumer_offsets`, read them all back for
loading, report its high watermark) and a view of the topics. On one broker every `__consumer_offsets`
partition is led here, so each is loaded ("elected") at start; with replication, election follows
leadership.
"""

from __future__ import annotations

from collections.abc import Iterable

from odradek.coordinator.group.config import GroupCoordinatorConfig
from odradek.coordinator.group.group_coordinator import GroupCoordinator
from odradek.coordinator.partitioning import CONSUMER_OFFSETS_TOPIC
from odradek.coordinator.topics import TopicMetadata

from .internal_topics import InternalTopicWriter, ensure_internal_topic

OFFSETS_TOPIC = CONSUMER_OFFSETS_TOPIC  # the name components.py checks for at start


class MetadataTopicsView:
    def __init__(self, broker):
        self.broker = broker

    @staticmethod
    def _view(topic) -> TopicMetadata | None:
        return None if topic is None else TopicMetadata(topic.topic_id, topic.name, len(topic.partitions))

    def topic_by_name(self, name: str) -> TopicMetadata | None:
        return self._view(self.broker.metadata.image.topics_by_name.get(name))

    def topic_by_id(self, topic_id) -> TopicMetadata | None:
        return self._view(self.broker.metadata.image.topics_by_id.get(topic_id))

    def topic_names(self) -> Iterable[str]:
        return self.broker.metadata.image.topics_by_name.keys()


def start_group_coordinator(broker) -> GroupCoordinator:
    cfg = broker.config
    num_partitions = ensure_internal_topic(broker, CONSUMER_OFFSETS_TOPIC, cfg.offsets_topic_num_partitions,
                                           cfg.offsets_topic_replication_factor, cfg.offsets_topic_segment_bytes)
    config = GroupCoordinatorConfig.from_broker_config(cfg, offsets_topic_num_partitions=num_partitions)
    writer = InternalTopicWriter(broker.data, CONSUMER_OFFSETS_TOPIC)
    groups = GroupCoordinator(writer, broker.timer, config, MetadataTopicsView(broker))
    now = broker.now_ms()
    for index in range(num_partitions):
        groups.on_elected(index, now)
    return groups
