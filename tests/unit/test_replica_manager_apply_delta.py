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
INTERNAL_ID = uuid.UUID(int=8)


class Fetchers:
    def __init__(self) -> None:
        self.following: dict[TopicPartition, tuple[int, int]] = {}

    def follow(self, tp, *, topic_id, leader_id, leader_epoch) -> None:
        assert topic_id == (TOPIC_ID if tp.topic == "t" else INTERNAL_ID)
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


# -- a large update applied in slices (hosting.py, "Large updates, applied in slices") --


def sliced(tmp_path, budget):
    logs = LogManager(str(tmp_path), now_ms=0)
    replicas = ReplicaManager(node_id=NODE, timer=Timer())
    fetchers = Fetchers()
    woken = []
    hosting = PartitionHosting(replicas, logs, settings, lambda: 1000, fetchers, budget=budget,
                               on_pending=lambda: woken.append(hosting.pending))
    publisher = MetadataPublisher()
    publisher.register(hosting)
    return logs, replicas, fetchers, publisher, hosting, woken


def followed(n, *, leader=2, epoch=1, replicas=(2, 1)):
    return {i: PartitionImage(replicas, replicas, leader=leader, leader_epoch=epoch, partition_epoch=epoch) for i in range(n)}


def test_a_large_update_is_published_whole_and_its_partitions_hosted_in_slices(tmp_path):
    logs, replicas, fetchers, publisher, hosting, woken = sliced(tmp_path, budget=3)
    image = image_with(followed(10))
    publisher.publish(MetadataUpdate(MetadataImage(), image, frozenset({TOPIC_ID})))
    assert publisher.image is image  # the image is current at once, whole
    assert sorted(tp.partition for tp in replicas.partitions) == [0, 1, 2]  # the budget, in partition order
    assert hosting.pending == 7 and woken == [7]
    assert replicas.is_hosting_pending(TopicPartition("t", 3)) and logs.get_log(TopicPartition("t", 3)) is None
    assert hosting.apply_pending(2) == 5 and len(replicas.partitions) == 5
    assert hosting.apply_pending() == 0
    assert sorted(tp.partition for tp in replicas.partitions) == list(range(10))
    assert fetchers.following == {TopicPartition("t", i): (2, 1) for i in range(10)}
    logs.close()


def test_partitions_led_here_and_internal_topics_do_not_wait(tmp_path):
    logs, replicas, fetchers, publisher, hosting, woken = sliced(tmp_path, budget=0)
    led = image_with(followed(4, leader=1, replicas=(1, 2)))
    internal_id = INTERNAL_ID
    offsets = TopicImage("__consumer_offsets", internal_id, followed(2, leader=2))
    led = MetadataImage(brokers=led.brokers, topics_by_id={**led.topics_by_id, internal_id: offsets},
                        topics_by_name={**led.topics_by_name, "__consumer_offsets": offsets}, configs=led.configs)
    publisher.publish(MetadataUpdate(MetadataImage(), led, frozenset({TOPIC_ID, internal_id})))
    # Nothing of "t" was hosted yet, so it all waits; the internal topic's partitions are hosted at once.
    assert hosting.pending == 4 and set(replicas.partitions) == {TopicPartition("__consumer_offsets", i) for i in (0, 1)}
    assert hosting.apply_pending() == 0 and replicas.get_partition(TopicPartition("t", 0)).is_leader

    # Leadership of 0 and 1 moves to node 2: a deposed leader must stop taking writes now, budget or not.
    moved = image_with({**followed(2, leader=2, epoch=2, replicas=(1, 2)),
                        2: PartitionImage((1, 2), (1, 2), leader=1, leader_epoch=1, partition_epoch=1),
                        3: PartitionImage((1, 2), (1, 2), leader=1, leader_epoch=1, partition_epoch=1)})
    publisher.publish(MetadataUpdate(led, moved, frozenset({TOPIC_ID}), changed_partitions={TOPIC_ID: frozenset({0, 1})}))
    assert hosting.pending == 0
    assert [replicas.get_partition(TopicPartition("t", i)).leader_id for i in range(4)] == [2, 2, 1, 1]
    assert fetchers.following[TopicPartition("t", 0)] == (2, 2)

    # A follower becoming leader may wait its turn (nobody else leads it meanwhile).
    back = image_with({**followed(1, leader=1, epoch=3, replicas=(1, 2)), 1: moved.topics_by_id[TOPIC_ID].partitions[1],
                       2: moved.topics_by_id[TOPIC_ID].partitions[2], 3: moved.topics_by_id[TOPIC_ID].partitions[3]})
    publisher.publish(MetadataUpdate(moved, back, frozenset({TOPIC_ID}), changed_partitions={TOPIC_ID: frozenset({0})}))
    assert hosting.pending == 1 and replicas.get_partition(TopicPartition("t", 0)).leader_id == 2
    hosting.apply_pending()
    assert replicas.get_partition(TopicPartition("t", 0)).is_leader and replicas.get_partition(TopicPartition("t", 0)).leader_epoch == 3
    logs.close()


def test_a_queued_partition_takes_the_latest_image_and_a_removed_topic_leaves_the_queue(tmp_path):
    logs, replicas, fetchers, publisher, hosting, woken = sliced(tmp_path, budget=0)
    first = image_with(followed(3))
    publisher.publish(MetadataUpdate(MetadataImage(), first, frozenset({TOPIC_ID}), offset=10))
    # Before any is hosted, partition 1's leader moves: queued once, applied in its latest state, and still
    # created as new (the update that moved it did not create it, the one that queued it did).
    second = image_with({**first.topics_by_id[TOPIC_ID].partitions,
                         1: PartitionImage((2, 1), (2, 1), leader=1, leader_epoch=2, partition_epoch=2)})
    publisher.publish(MetadataUpdate(first, second, frozenset({TOPIC_ID}), offset=11,
                                     changed_partitions={TOPIC_ID: frozenset({1})}))
    assert hosting.pending == 3
    assert hosting.apply_pending() == 0
    assert replicas.get_partition(TopicPartition("t", 1)).is_leader and replicas.get_partition(TopicPartition("t", 1)).leader_epoch == 2
    assert fetchers.following == {TopicPartition("t", 0): (2, 1), TopicPartition("t", 2): (2, 1)}

    # A topic deleted while its partitions wait: they leave the queue with it, nothing is created.
    other_id = uuid.UUID(int=9)
    other = TopicImage("u", other_id, followed(5))
    third = MetadataImage(brokers=second.brokers, topics_by_id={**second.topics_by_id, other_id: other},
                          topics_by_name={**second.topics_by_name, "u": other}, configs=second.configs)
    publisher.publish(MetadataUpdate(second, third, frozenset({other_id}), offset=12))
    assert hosting.pending == 5
    publisher.publish(MetadataUpdate(third, second, frozenset(), {other_id: other}, offset=13))
    assert hosting.pending == 0 and hosting.apply_pending() == 0
    assert not any(tp.topic == "u" for tp in replicas.partitions) and logs.get_log(TopicPartition("u", 0)) is None
    logs.close()


def test_a_change_to_some_partitions_of_a_topic_looks_at_those_only(tmp_path):
    """Kafka's TopicDelta: one partition's leader change in a large topic is that partition's work."""
    logs, replicas, fetchers, publisher, hosting, woken = sliced(tmp_path, budget=None)
    first = image_with(followed(50))
    publisher.publish(MetadataUpdate(MetadataImage(), first, frozenset({TOPIC_ID})))
    seen = []
    original = replicas.apply_partition_state

    def spy(tp, **kwargs):
        seen.append(tp.partition)
        return original(tp, **kwargs)

    replicas.apply_partition_state = spy
    second = image_with({**first.topics_by_id[TOPIC_ID].partitions,
                         7: PartitionImage((2, 1), (2, 1), leader=2, leader_epoch=2, partition_epoch=2)})
    publisher.publish(MetadataUpdate(first, second, frozenset({TOPIC_ID}), changed_partitions={TOPIC_ID: frozenset({7})}))
    assert seen == [7] and fetchers.following[TopicPartition("t", 7)] == (2, 2)
    logs.close()


def test_a_partition_waiting_its_turn_answers_not_leader_as_kafka_does(tmp_path):
    """The image has it here, the replica manager not yet: NOT_LEADER_OR_FOLLOWER (the client refreshes
    and retries), as Kafka answers for a partition its metadata cache knows and its replica manager does not."""
    from odradek.protocol.errors import ErrorCode
    from odradek.protocol.records import build_batch

    logs, replicas, fetchers, publisher, hosting, woken = sliced(tmp_path, budget=0)
    image = image_with(followed(2, leader=1, replicas=(1, 2)))
    publisher.publish(MetadataUpdate(MetadataImage(), image, frozenset({TOPIC_ID})))
    waiting = replicas._append_one(TopicPartition("t", 0), bytearray(build_batch([(None, b"v", None, 0)])), 1, 1000)
    unknown = replicas._append_one(TopicPartition("nope", 0), bytearray(build_batch([(None, b"v", None, 0)])), 1, 1000)
    assert (waiting.error_code, unknown.error_code) == (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    hosting.apply_pending()
    assert replicas._append_one(TopicPartition("t", 0), bytearray(build_batch([(None, b"v", None, 0)])), 1, 1000).error_code == 0
    logs.close()
