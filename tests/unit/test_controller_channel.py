"""The seams of a cluster of one: the controller channel, the publisher of committed metadata, producer ids.

The local controller channel decides with the controller, commits to the metadata log, publishes, and only
then answers; the publisher hands every listener each committed change (a late listener the whole image);
start-up publishes the loaded image as one update, so that listeners see the same image whether a change
was made live or found in the log.
"""

from __future__ import annotations

import random

import pytest

from odradek.broker.config import BrokerConfig
from odradek.broker.controller_channel import (
    ConfigChange,
    LocalControllerChannel,
    NewPartitions,
    NewTopic,
    TopicToDelete,
)
from odradek.broker.config import ConfigError
from odradek.broker.server import refuse_unserved_settings
from odradek.coordinator.producer_ids import ProducerIdManager
from odradek.purgatory.deferred import Deferred
from odradek.protocol.errors import ErrorCode
from odradek.broker.controller_settings import new_controller
from odradek.metadata.image import Endpoint, MetadataError, ProducerIdsBlock
from odradek.metadata.log import MetadataLog
from odradek.metadata.publisher import MetadataPublisher, MetadataUpdate
from odradek.metadata.records import ConfigResourceType

from .test_metadata_log import MemoryStorage

NOW_MS = 1_700_000_000_000


class Recorder:
    def __init__(self) -> None:
        self.updates: list[MetadataUpdate] = []

    def on_metadata_update(self, update: MetadataUpdate) -> None:
        self.updates.append(update)


def node(storage: MemoryStorage | None = None, **props):
    storage = storage if storage is not None else MemoryStorage()
    log = MetadataLog(storage)
    log.load()
    publisher = MetadataPublisher()
    recorder = Recorder()
    publisher.register(recorder)
    publisher.publish(MetadataUpdate.snapshot(log.image, log.log_end_offset))
    config = BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0", "num.partitions": 2, **props})
    channel = LocalControllerChannel(new_controller(config, rng=random.Random(1)), log, publisher, config, lambda: NOW_MS)
    channel.register_broker(1, [Endpoint("PLAINTEXT", "h", 9092)], rack=None, cluster_id=None).result()
    return channel, recorder, storage


def test_a_change_is_committed_and_published_before_it_is_answered():
    channel, recorder, storage = node()
    answered = channel.create_topics([NewTopic("a"), NewTopic("b", 3, 1, {"cleanup.policy": "compact"})])
    assert answered.done
    a, b = answered.result()
    assert (a.name, a.num_partitions, b.num_partitions, b.configs) == ("a", 2, 3, {"cleanup.policy": "compact"})
    # Durable (flushed) and published before the answer.
    assert storage.durable == len(storage.batches)
    last = recorder.updates[-1]
    assert set(last.image.topics_by_name) == {"a", "b"} and last.changed_topic_ids == {a.topic_id, b.topic_id}
    assert channel.publisher.image is last.image and last.offset == channel.metadata_log.log_end_offset


def test_items_of_one_call_see_each_other_and_fail_alone():
    channel, recorder, _ = node()
    outcomes = channel.create_topics([NewTopic("a"), NewTopic("a"), NewTopic("bad name!"), NewTopic("c", 0)]).result()
    assert not isinstance(outcomes[0], MetadataError)
    assert [o.error_code for o in outcomes[1:]] == [
        ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.INVALID_PARTITIONS,
    ]
    assert set(channel.publisher.image.topics_by_name) == {"a"}


def test_validate_only_decides_but_writes_and_publishes_nothing():
    channel, recorder, storage = node()
    batches, updates = len(storage.batches), len(recorder.updates)
    (created,) = channel.create_topics([NewTopic("a", 4, 1)], validate_only=True).result()
    assert created.topic_id is None and created.num_partitions == 4
    assert (len(storage.batches), len(recorder.updates)) == (batches, updates)


def test_the_brokers_rules_apply_internal_topics_configs_deletion():
    channel, _, _ = node(**{"delete.topic.enable": "false"})
    (internal,) = channel.create_topics([NewTopic("__consumer_offsets")]).result()
    assert internal.error_code == ErrorCode.INVALID_REQUEST
    (bad,) = channel.create_topics([NewTopic("t", configs={"cleanup.policy": "sometimes"})]).result()
    assert bad.error_code == ErrorCode.INVALID_CONFIG
    channel.create_topics([NewTopic("t")]).result()
    (refused,) = channel.delete_topics([TopicToDelete("t")]).result()
    assert refused.error_code == ErrorCode.TOPIC_DELETION_DISABLED


def test_partitions_configs_and_deletion_go_the_same_road():
    channel, recorder, _ = node()
    channel.create_topics([NewTopic("t")]).result()
    assert channel.create_partitions([NewPartitions("t", 5)]).result() == [None]
    assert len(channel.publisher.image.topics_by_name["t"].partitions) == 5
    change = ConfigChange(ConfigResourceType.TOPIC, "t", {"retention.ms": "1000"})
    assert channel.alter_configs([change]).result() == [None]
    assert channel.publisher.image.topic_configs("t") == {"retention.ms": "1000"}
    (unknown,) = channel.alter_configs([ConfigChange(ConfigResourceType.TOPIC, "nope", {"retention.ms": "1"})]).result()
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    topic_id = channel.publisher.image.topics_by_name["t"].topic_id
    assert channel.delete_topics([TopicToDelete(None, topic_id)]).result() == ["t"]
    assert set(recorder.updates[-1].removed_topics) == {topic_id}


def test_a_restart_publishes_the_logged_image_as_one_update():
    channel, recorder, storage = node()
    channel.create_topics([NewTopic("a"), NewTopic("b")]).result()
    live = channel.publisher.image
    _, again, _ = node(storage)  # registers anew: a new broker epoch, same topics
    first = again.updates[0]
    assert first.is_snapshot and first.image.topics_by_name == live.topics_by_name
    assert first.changed_topic_ids == set(live.topics_by_id)


def test_a_late_listener_hears_the_whole_image_and_a_failing_one_does_not_silence_others():
    channel, recorder, _ = node()
    channel.create_topics([NewTopic("a")]).result()
    late = Recorder()
    channel.publisher.register(late)
    assert late.updates[0].is_snapshot and "a" in late.updates[0].image.topics_by_name

    class Failing:
        def on_metadata_update(self, update):
            raise RuntimeError("boom")

    publisher = MetadataPublisher()
    first, after = Recorder(), Recorder()
    for listener in (first, Failing(), after):
        publisher.register(listener)
    with pytest.raises(RuntimeError, match="boom"):
        publisher.publish(MetadataUpdate.snapshot(channel.publisher.image))
    assert len(first.updates) == len(after.updates) == 1 and publisher.image is channel.publisher.image


def test_producer_ids_come_from_committed_blocks_and_wait_while_one_is_pending():
    channel, _, _ = node()
    manager = ProducerIdManager(lambda: channel.allocate_producer_ids(1))
    ids = [manager.next_producer_id() for _ in range(1001)]
    assert ids == list(range(1001))  # two blocks of 1000, each recorded before use
    assert channel.publisher.image.next_producer_id == 2000

    pending: list[Deferred] = []

    def later() -> Deferred:
        pending.append(Deferred())
        return pending[-1]

    remote = ProducerIdManager(later)
    assert remote.next_producer_id() is None and remote.next_producer_id() is None
    assert len(pending) == 1  # one request in flight, not one per call
    pending[0].complete(ProducerIdsBlock(1, 5000, 2))
    assert [remote.next_producer_id(), remote.next_producer_id()] == [5000, 5001]
    assert remote.next_producer_id() is None and len(pending) == 2
    pending[1].fail(MetadataError(ErrorCode.UNKNOWN_SERVER_ERROR, "no"))
    assert remote.next_producer_id() is None and len(pending) == 3  # asks again after a failure


@pytest.mark.parametrize(
    "props, key",
    [
        ({"controller.quorum.bootstrap.servers": "other:9093"}, "controller.quorum.bootstrap.servers"),
        ({"controller.quorum.voters": "1@localhost:9093,2@other:9093", "process.roles": "broker,controller",
          "listeners": "PLAINTEXT://127.0.0.1:0"}, "listeners"),
    ],
)
def test_settings_the_broker_cannot_honour_refuse_to_start(props, key):
    config = BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0", **props})
    with pytest.raises(ConfigError) as info:
        refuse_unserved_settings(config)
    assert info.value.key == key


def test_a_quorum_of_one_naming_this_node_is_served():
    config = BrokerConfig.from_properties({
        "listeners": "PLAINTEXT://127.0.0.1:0,CONTROLLER://127.0.0.1:9093", "controller.quorum.voters": "1@localhost:9093",
    })
    refuse_unserved_settings(config)
