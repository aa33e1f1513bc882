"""The seams of a lone node: the controller channel, the publisher of committed metadata, producer ids.

The deciding controller channel (QuorumControllerChannel) of a lone node, the only voter of its Raft quorum,
decides with the controller, appends through Raft, and answers once the batch is committed (flushed) and
published; the publisher hands every listener each committed change (a late listener the whole image); a
restart replays the committed log to the same image.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

import pytest

from odradek.broker.config import BrokerConfig
from odradek.broker.controller_channel import (
    ConfigChange,
    NewPartitions,
    NewTopic,
    TopicToDelete,
)
from odradek.broker.config import ConfigError
from odradek.broker.quorum import QuorumControllerChannel, QuorumDriver
from odradek.broker.server import refuse_unserved_settings
from odradek.coordinator.producer_ids import ProducerIdManager
from odradek.purgatory.deferred import Deferred
from odradek.protocol.errors import ErrorCode
from odradek.broker.controller_settings import new_controller
from odradek.metadata.image import Endpoint, MetadataError, ProducerIdsBlock
from odradek.metadata.loader import MetadataLoader
from odradek.metadata.publisher import MetadataPublisher, MetadataUpdate
from odradek.metadata.records import ConfigResourceType
from odradek.raft import MemoryQuorumStateStore, MemoryRaftLog, RaftConfig, RaftNode


class Recorder:
    def __init__(self) -> None:
        self.updates: list[MetadataUpdate] = []

    def on_metadata_update(self, update: MetadataUpdate) -> None:
        self.updates.append(update)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class Node:
    channel: QuorumControllerChannel
    recorder: Recorder
    publisher: MetadataPublisher
    loader: MetadataLoader
    raft_log: MemoryRaftLog
    store: MemoryQuorumStateStore


async def node(raft_log: MemoryRaftLog | None = None, store: MemoryQuorumStateStore | None = None, **props) -> Node:
    """A lone node's metadata: node 1 the only voter, elected, its controller active, broker 1 registered."""
    raft_log = raft_log if raft_log is not None else MemoryRaftLog()
    store = store if store is not None else MemoryQuorumStateStore()
    publisher = MetadataPublisher()
    recorder = Recorder()
    publisher.register(recorder)
    config = BrokerConfig.from_properties({"listeners": "PLAINTEXT://127.0.0.1:0", "num.partitions": 2, **props})
    loader = MetadataLoader(publisher, clock=now_ms)
    raft = RaftNode(RaftConfig(node_id=1, voters=(1,), election_timeout_ms=1), raft_log, store, loader,
                    random.Random(1), now_ms())
    loader.raft = raft
    driver = QuorumDriver(raft, None, now_ms)  # a lone voter never connects to anyone
    channel = QuorumControllerChannel(new_controller(config, rng=random.Random(1)), config, now_ms, driver, loader)
    driver.start()
    await asyncio.wait_for(channel.activated.wait(), 5)
    channel.register_broker(1, [Endpoint("PLAINTEXT", "h", 9092)], rack=None, cluster_id=None).result()
    return Node(channel, recorder, publisher, loader, raft_log, store)


async def test_a_change_is_committed_and_published_before_it_is_answered():
    n = await node()
    answered = n.channel.create_topics([NewTopic("a"), NewTopic("b", 3, 1, {"cleanup.policy": "compact"})])
    assert answered.done
    a, b = answered.result()
    assert (a.name, a.num_partitions, b.num_partitions, b.configs) == ("a", 2, 3, {"cleanup.policy": "compact"})
    # Durable (flushed), committed and published before the answer: a lone voter commits on its own append.
    assert n.raft_log.flushed_end_offset == n.raft_log.log_end_offset == n.loader.applied_end_offset
    last = n.recorder.updates[-1]
    assert set(last.image.topics_by_name) == {"a", "b"} and last.changed_topic_ids == {a.topic_id, b.topic_id}
    assert n.publisher.image is last.image and last.offset == n.raft_log.log_end_offset


async def test_items_of_one_call_see_each_other_and_fail_alone():
    n = await node()
    outcomes = n.channel.create_topics([NewTopic("a"), NewTopic("a"), NewTopic("bad name!"), NewTopic("c", 0)]).result()
    assert not isinstance(outcomes[0], MetadataError)
    assert [o.error_code for o in outcomes[1:]] == [
        ErrorCode.TOPIC_ALREADY_EXISTS, ErrorCode.INVALID_TOPIC_EXCEPTION, ErrorCode.INVALID_PARTITIONS,
    ]
    assert set(n.publisher.image.topics_by_name) == {"a"}


async def test_validate_only_decides_but_writes_and_publishes_nothing():
    n = await node()
    end, updates = n.raft_log.log_end_offset, len(n.recorder.updates)
    (created,) = n.channel.create_topics([NewTopic("a", 4, 1)], validate_only=True).result()
    assert created.topic_id is None and created.num_partitions == 4
    assert (n.raft_log.log_end_offset, len(n.recorder.updates)) == (end, updates)


async def test_the_brokers_rules_apply_internal_topics_configs_deletion():
    channel = (await node(**{"delete.topic.enable": "false"})).channel
    (internal,) = channel.create_topics([NewTopic("__consumer_offsets")]).result()
    assert internal.error_code == ErrorCode.INVALID_REQUEST
    (bad,) = channel.create_topics([NewTopic("t", configs={"cleanup.policy": "sometimes"})]).result()
    assert bad.error_code == ErrorCode.INVALID_CONFIG
    channel.create_topics([NewTopic("t")]).result()
    (refused,) = channel.delete_topics([TopicToDelete("t")]).result()
    assert refused.error_code == ErrorCode.TOPIC_DELETION_DISABLED


async def test_partitions_configs_and_deletion_go_the_same_road():
    n = await node()
    channel, publisher = n.channel, n.publisher
    channel.create_topics([NewTopic("t")]).result()
    assert channel.create_partitions([NewPartitions("t", 5)]).result() == [None]
    assert len(publisher.image.topics_by_name["t"].partitions) == 5
    change = ConfigChange(ConfigResourceType.TOPIC, "t", {"retention.ms": "1000"})
    assert channel.alter_configs([change]).result() == [None]
    assert publisher.image.topic_configs("t") == {"retention.ms": "1000"}
    (unknown,) = channel.alter_configs([ConfigChange(ConfigResourceType.TOPIC, "nope", {"retention.ms": "1"})]).result()
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    topic_id = publisher.image.topics_by_name["t"].topic_id
    assert channel.delete_topics([TopicToDelete(None, topic_id)]).result() == ["t"]
    assert set(n.recorder.updates[-1].removed_topics) == {topic_id}


async def test_a_restart_replays_the_committed_log_to_the_same_image():
    n = await node()
    n.channel.create_topics([NewTopic("a"), NewTopic("b")]).result()
    live = n.publisher.image
    again = await node(n.raft_log, n.store)  # elects itself in a new epoch, registers anew
    assert again.channel.driver.raft.epoch == n.channel.driver.raft.epoch + 1
    assert again.publisher.image.topics_by_name == live.topics_by_name
    assert again.publisher.image.cluster_id == live.cluster_id


async def test_a_late_listener_hears_the_whole_image_and_a_failing_one_does_not_silence_others():
    n = await node()
    n.channel.create_topics([NewTopic("a")]).result()
    late = Recorder()
    n.publisher.register(late)
    assert late.updates[0].is_snapshot and "a" in late.updates[0].image.topics_by_name

    class Failing:
        def on_metadata_update(self, update):
            raise RuntimeError("boom")

    publisher = MetadataPublisher()
    first, after = Recorder(), Recorder()
    for listener in (first, Failing(), after):
        publisher.register(listener)
    with pytest.raises(RuntimeError, match="boom"):
        publisher.publish(MetadataUpdate.snapshot(n.publisher.image))
    assert len(first.updates) == len(after.updates) == 1 and publisher.image is n.publisher.image


async def test_producer_ids_come_from_committed_blocks_and_wait_while_one_is_pending():
    n = await node()
    manager = ProducerIdManager(lambda: n.channel.allocate_producer_ids(1))
    ids = [manager.next_producer_id() for _ in range(1001)]
    assert ids == list(range(1001))  # two blocks of 1000, each recorded before use
    assert n.publisher.image.next_producer_id == 2000

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
