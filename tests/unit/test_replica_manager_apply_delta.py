"""ReplicaManager.apply_delta (replication/hosting.py): a committed metadata update makes the partitions of
this broker what the image says, with no broker in the loop: logs opened and deleted through the log
manager, led or followed (the follower's leader handed to the fetcher targets), configs applied, and a
partition reassigned away or of a deleted topic dropped."""

from __future__ import annotations

import uuid

from odradek.metadata.image import BrokerRegistration, MetadataImage, PartitionImage, TopicImage
from odradek.metadata.publisher import MetadataPublisher, MetadataUpdate
from odradek.purgatory.timing_wheel import Timer
from odradek.replication.hosting import PartitionHosting
from odradek.replication.replica_manager import ReplicaManager
from odradek.storage.config import LogConfig
from odradek.storage.log_manager import LogManager
from odradek.storage.names import TopicPartition

NODE = 1
TOPIC_ID = uuid.UUID(int=7)


class Fetchers:
    def __init__(self) -> None:
        self.following: dict[TopicPartition, tuple[int, int]] = {}

    def follow(self, tp, *, topic_id, leader_id, leader_epoch) -> None:
        assert topic_id == TOPIC_ID
        self.following[tp] = (leader_id, leader_epoch)

    def unfollow(self, tp) -> None:
        self.following.pop(tp, None)


def settings(image, name):
    min_isr = int(image.topic_configs(name).get("min.insync.replicas", 1))
    return LogConfig(), min_isr


def image_with(partitions: dict[int, PartitionImage], *, fenced=(), configs=None) -> MetadataImage:
    topic = TopicImage("t", TOPIC_ID, partitions)
    brokers = {b: BrokerRegistration(b, uuid.UUID(int=b), 1, (), None, b in fenced, False) for b in (1, 2, 3)}
    return MetadataImage(brokers=brokers, topics_by_id={TOPIC_ID: topic}, topics_by_name={"t": topic},
                         configs={(2, "t"): configs or {}})


def test_a_committed_update_makes_partitions_led_followed_and_dropped(tmp_path):
    logs = LogManager(str(tmp_path), now_ms=0)
    replicas = ReplicaManager(node_id=NODE, timer=Timer())
    fetchers = Fetchers()
    publisher = MetadataPublisher()
    publisher.register(PartitionHosting(replicas, logs, settings, lambda: 1000, fetchers))
    tp0, tp1, tp2 = (TopicPartition("t", i) for i in range(3))

    first = image_with({
        0: PartitionImage((1, 2), (1, 2), leader=1, leader_epoch=3, partition_epoch=1),
        1: PartitionImage((2, 1), (2, 1), leader=2, leader_epoch=4, partition_epoch=1),
        2: PartitionImage((2, 3), (2, 3), leader=2, leader_epoch=1, partition_epoch=1),  # not hosted here
    }, fenced=(3,), configs={"min.insync.replicas": "2"})
    publisher.publish(MetadataUpdate(MetadataImage(), first, frozenset({TOPIC_ID})))
    assert replicas.get_partition(tp0).is_leader and replicas.get_partition(tp0).leader_epoch == 3
    assert replicas.get_partition(tp0).min_insync_replicas == 2
    assert not replicas.get_partition(tp1).is_leader and replicas.get_partition(tp1).leader_id == 2
    assert replicas.get_partition(tp2) is None and logs.get_log(tp2) is None
    assert fetchers.following == {tp1: (2, 4)}
    assert replicas.ineligible_replicas == {3}
    assert logs.get_log(tp0) is not None and logs.get_log(tp1) is not None

    # This node leads partition 1 now, and partition 0 is reassigned away.
    second = image_with({
        0: PartitionImage((2, 3), (2, 3), leader=2, leader_epoch=4, partition_epoch=2),
        1: PartitionImage((2, 1), (1,), leader=1, leader_epoch=5, partition_epoch=2),
        2: PartitionImage((2, 3), (2, 3), leader=2, leader_epoch=1, partition_epoch=1),
    })
    publisher.publish(MetadataUpdate(first, second, frozenset({TOPIC_ID})))
    assert replicas.get_partition(tp0) is None and logs.get_log(tp0) is None
    assert replicas.get_partition(tp1).is_leader and replicas.get_partition(tp1).leader_epoch == 5
    assert fetchers.following == {} and replicas.ineligible_replicas == frozenset()

    # The topic is deleted: everything of it goes.
    gone = MetadataImage(brokers=second.brokers)
    publisher.publish(MetadataUpdate(second, gone, frozenset(), {TOPIC_ID: second.topics_by_id[TOPIC_ID]}))
    assert replicas.partitions == {} and logs.get_log(tp1) is None
    logs.close()
