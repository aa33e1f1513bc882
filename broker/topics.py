"""Topics on this broker: naming rules, and the partitions and their logs following the metadata image.

Topics change only through the controller (broker/controller_channel.py): CreateTopics, automatic
creation, DeleteTopics, CreatePartitions and config changes are metadata records first. This module's
`PartitionHosting` is the metadata listener that makes the broker's partitions what the committed image
says, for every update the publisher hands it, start-up's whole image included:

  * a partition with this node among its replicas gets its log (opened, or created empty) and becomes
    led here when the image names this node its leader, else follows the named leader: the replica
    fetcher manager (broker/replica_fetcher.py) fetches it from that leader; led here or leaderless, it
    is fetched from nowhere;
  * a partition no longer assigned here, or of a removed topic, is dropped and its log deleted;
  * changed topic configs reach the open logs and the partitions' min.insync.replicas.
"""

from __future__ import annotations

import structlog

from odradek.metadata.image import MetadataError, MetadataImage, validate_topic_name
from odradek.metadata.publisher import MetadataUpdate
from odradek.replication.replica_manager import ReplicaManager
from odradek.storage.config import LogConfig
from odradek.storage.log_manager import LogManager
from odradek.storage.names import TopicPartition

from .config import BrokerConfig
from .controller_channel import INTERNAL_TOPICS
from .topic_config import effective_topic_configs, to_log_config_kwargs

log = structlog.get_logger("odradek.topics")


def is_valid_name(name: str) -> bool:
    try:
        validate_topic_name(name)
    except MetadataError:
        return False
    return True


def is_internal(name: str) -> bool:
    return name in INTERNAL_TOPICS


def log_config(image: MetadataImage, name: str, config: BrokerConfig) -> LogConfig:
    effective = effective_topic_configs(dict(image.topic_configs(name)), config)
    # producer.id.expiration.ms is a broker setting, not a topic one: every log takes the broker's.
    return LogConfig(**to_log_config_kwargs(effective, fields=LogConfig.__dataclass_fields__),
                     producer_id_expiration_ms=config.producer_id_expiration_ms)


class PartitionHosting:
    """The replica manager and the log manager following the image; see the module doc."""

    def __init__(self, node_id: int, config: BrokerConfig, log_manager: LogManager, data: ReplicaManager, clock,
                 fetchers=None) -> None:
        self.node_id = node_id
        self.config = config
        self.log_manager = log_manager
        self.data = data
        self.clock = clock
        self.fetchers = fetchers  # the ReplicaFetcherManager: follow(tp, ...) / unfollow(tp)

    def on_metadata_update(self, update: MetadataUpdate) -> None:
        image = update.image
        now_ms = self.clock()
        data = self.data
        data.set_ineligible_replicas(
            (b.broker_id for b in image.brokers.values() if b.fenced or b.in_controlled_shutdown), now_ms
        )
        for topic in update.removed_topics.values():
            for tp in [tp for tp in [*data.partitions, *data.offline_partitions] if tp.topic == topic.name]:
                self._drop(tp)
        for topic_id in update.changed_topic_ids:
            topic = image.topics_by_id.get(topic_id)
            if topic is None:
                continue
            self.log_manager.update_topic_config(topic.name, log_config(image, topic.name, self.config))
            effective = effective_topic_configs(dict(image.topic_configs(topic.name)), self.config)
            min_isr = int(effective.get("min.insync.replicas", 1))
            for index, p in topic.partitions.items():
                tp = TopicPartition(topic.name, index)
                if self.node_id not in p.replicas:
                    if data.get_partition(tp) is not None or tp in data.offline_partitions:
                        self._drop(tp)  # reassigned away
                    continue
                if tp in data.offline_partitions:
                    continue  # its log directory failed: offline here until the broker restarts, as in Kafka
                partition = data.get_partition(tp)
                plog = partition.log if partition is not None else self.log_manager.get_or_create_log(
                    tp, topic_id=topic.topic_id.bytes, now_ms=now_ms
                )
                data.apply_partition_state(
                    tp, topic_id=topic.topic_id, log=plog, leader_id=p.leader, leader_epoch=p.leader_epoch,
                    replicas=p.replicas, isr=p.isr, min_insync_replicas=min_isr, now_ms=now_ms,
                    partition_epoch=p.partition_epoch,
                )
                fetchers = self.fetchers
                if fetchers is not None:
                    if p.leader >= 0 and p.leader != self.node_id:
                        fetchers.follow(tp, topic_id=topic.topic_id, leader_id=p.leader, leader_epoch=p.leader_epoch)
                    else:
                        fetchers.unfollow(tp)

    def _drop(self, tp: TopicPartition) -> None:
        if self.fetchers is not None:
            self.fetchers.unfollow(tp)
        self.data.remove_partition(tp)
        self.data.offline_partitions.discard(tp)
        self.log_manager.delete_log(tp)
