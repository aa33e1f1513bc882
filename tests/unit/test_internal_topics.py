"""The internal-topic writer under the group coordinator: real logs, a replica manager and its high watermark."""

from __future__ import annotations

import uuid

import pytest

from odradek.broker.internal_topics import InternalTopicWriter
from odradek.coordinator.group.config import GroupCoordinatorConfig
from odradek.coordinator.group.group_coordinator import GroupCoordinator
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import OffsetCommitRequest, OffsetFetchRequest
from odradek.replication.replica_manager import ReplicaManager
from odradek.purgatory.timing_wheel import Timer
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.names import TopicPartition
from tests.harness.txn_coordinator import Sink

NOW = 1_700_000_000_000
TOPIC = "__consumer_offsets"


def commit_request(group_id: str, offset: int) -> OffsetCommitRequest:
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(group_id=group_id, topics=[topic(name="t", partitions=[
        topic.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset, committed_metadata="")])])


def fetched(gc: GroupCoordinator, group_id: str) -> dict:
    group = OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group_id, topics=None)
    response = gc.offset_fetch(OffsetFetchRequest(groups=[group]), 9, NOW)
    return {(t.name, p.partition_index): p.committed_offset for t in response.groups[0].topics for p in t.partitions}


@pytest.fixture
def hosted(tmp_path):
    """`__consumer_offsets` with one partition led by broker 1, and (replicas) its followers."""
    logs = []

    def make(replicas: list[int]):
        timer = Timer(start_ms=NOW)
        manager = ReplicaManager(node_id=1, timer=timer)
        log = Log.open(str(tmp_path / f"{TOPIC}-0"), LogConfig(), now_ms=NOW)
        logs.append(log)
        partition = manager.add_leader_partition(
            TopicPartition(TOPIC, 0), topic_id=uuid.uuid4(), log=log, leader_epoch=0, replicas=replicas,
            isr=replicas, min_insync_replicas=1, now_ms=NOW)
        writer = InternalTopicWriter(manager, TOPIC)
        gc = GroupCoordinator(writer, timer, GroupCoordinatorConfig(offsets_topic_num_partitions=1))
        gc.startup(NOW)
        return gc, partition, writer

    yield make
    for log in logs:
        log.close()


def test_one_replica_commits_with_the_append(hosted):
    gc, partition, _ = hosted([1])
    response = gc.offset_commit(commit_request("g", 5), 8, NOW)
    assert response.done and response.result().topics[0].partitions[0].error_code == 0
    assert partition.high_watermark == partition.log_end_offset == 1
    assert fetched(gc, "g") == {("t", 0): 5}


def test_responses_wait_until_a_follower_moves_the_high_watermark(hosted):
    gc, partition, _ = hosted([1, 2])
    first = gc.offset_commit(commit_request("g", 5), 8, NOW)
    second = gc.offset_commit(commit_request("g", 6), 8, NOW)
    assert partition.log_end_offset == 2 and partition.high_watermark == 0
    assert not first.done and not second.done
    # Replayed at once, but OffsetFetch reads at the high watermark (Kafka's read operation): nobody is
    # told an offset a change of leader could take back.
    assert fetched(gc, "g") == {}

    partition.update_follower_fetch_state(2, 1, NOW)  # the follower holds the first record
    assert partition.high_watermark == 1
    assert first.result().topics[0].partitions[0].error_code == 0 and not second.done
    assert fetched(gc, "g") == {("t", 0): 5}
    partition.update_follower_fetch_state(2, 2, NOW)
    assert second.result().topics[0].partitions[0].error_code == 0
    assert fetched(gc, "g") == {("t", 0): 6}


def test_resigning_deregisters_the_listener_and_a_reload_reads_the_log_back(hosted):
    gc, partition, writer = hosted([1, 2])
    pending = gc.offset_commit(commit_request("g", 7), 8, NOW)
    gc.on_resigned(0)
    assert pending.result().topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR
    assert partition._listeners == ()
    partition.update_follower_fetch_state(2, 1, NOW)  # nobody listens any more: nothing happens

    again = GroupCoordinator(writer, Timer(start_ms=NOW), GroupCoordinatorConfig(offsets_topic_num_partitions=1))
    again.startup(NOW)
    assert fetched(again, "g") == {("t", 0): 7}
    assert len(partition._listeners) == 1


def test_a_reload_reads_what_is_above_the_high_watermark_as_not_committed(hosted):
    """Loading replays the whole log, but a batch above the partition's high watermark is not committed
    yet: OffsetFetch shows the offset once the high watermark passes it, as after a write."""
    gc, partition, writer = hosted([1, 2])
    gc.offset_commit(commit_request("g", 5), 8, NOW)
    partition.update_follower_fetch_state(2, 1, NOW)
    gc.offset_commit(commit_request("g", 6), 8, NOW)
    gc.on_resigned(0)
    assert (partition.high_watermark, partition.log_end_offset) == (1, 2)

    again = GroupCoordinator(writer, Timer(start_ms=NOW), GroupCoordinatorConfig(offsets_topic_num_partitions=1))
    again.startup(NOW)
    assert fetched(again, "g") == {("t", 0): 5}
    partition.update_follower_fetch_state(2, 2, NOW)
    assert fetched(again, "g") == {("t", 0): 6}
    assert len(again.shard_for("g").offset_manager.committed_view) == 0


# ---------------------------------------------------------------------------------------------------
# __transaction_state: every write is acks=all (transaction.state.log.min.isr), and the coordinator's topics
# are created with their full replication factor or not at all.


def test_a_min_isr_writer_refuses_below_min_insync_replicas_and_writes_nothing(tmp_path):
    from odradek.coordinator.transaction.config import TransactionCoordinatorConfig
    from odradek.coordinator.transaction.coordinator import TransactionCoordinator
    from odradek.protocol.messages import InitProducerIdRequest
    from odradek.replication.errors import NotEnoughReplicasError

    txn_topic = "__transaction_state"
    timer = Timer(start_ms=NOW)
    manager = ReplicaManager(node_id=1, timer=timer)
    log = Log.open(str(tmp_path / f"{txn_topic}-0"), LogConfig(), now_ms=NOW)
    try:
        tp, topic_id = TopicPartition(txn_topic, 0), uuid.uuid4()

        def isr(members) -> None:
            manager.apply_partition_state(tp, topic_id=topic_id, log=log, leader_id=1, leader_epoch=0,
                                          replicas=(1, 2), isr=members, min_insync_replicas=2, now_ms=NOW)

        isr((1,))
        writer = InternalTopicWriter(manager, txn_topic, enforce_min_isr=True)
        with pytest.raises(NotEnoughReplicasError):
            writer.append(0, [(b"k", b"v")], NOW)
        assert log.log_end_offset == 0

        tc = TransactionCoordinator(writer, timer, TransactionCoordinatorConfig(transaction_state_log_num_partitions=1),
                                    next_producer_id=lambda: 7, markers=Sink())
        tc.startup(NOW)
        request = InitProducerIdRequest(transactional_id="t", transaction_timeout_ms=60_000, producer_id=-1,
                                        producer_epoch=-1)
        refused = tc.init_producer_id(request, 4, NOW).result()
        assert refused.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE and log.log_end_offset == 0
        assert tc.shard_for("t").describe("t") is None  # nothing replayed either

        isr((1, 2))  # the follower is back in the ISR: the write goes through and waits for it
        pending = tc.init_producer_id(request, 4, NOW)
        assert log.log_end_offset == 1 and not pending.done
        manager.get_partition(tp).update_follower_fetch_state(2, 1, NOW)
        assert pending.result().error_code == 0 and pending.result().producer_id == 7
    finally:
        log.close()


class _Controller:
    def __init__(self, image) -> None:
        self.image = image
        self.created = []

    def create_topics(self, topics, *, internal: bool = False):
        from types import SimpleNamespace

        from odradek.purgatory.deferred import Deferred

        assert internal
        for t in topics:
            self.created.append(t)
            self.image.topics_by_name[t.name] = SimpleNamespace(partitions=dict.fromkeys(range(t.num_partitions)))
        return Deferred.completed([None for _ in topics])


def _cluster(live: int, fenced: int = 0, **config):
    from types import SimpleNamespace

    from odradek.broker.config import BrokerConfig

    brokers = {i: SimpleNamespace(fenced=i >= live, in_controlled_shutdown=False) for i in range(live + fenced)}
    image = SimpleNamespace(topics_by_name={}, brokers=brokers)
    cfg = BrokerConfig.from_properties({k.replace("_", "."): str(v) for k, v in config.items()})
    return SimpleNamespace(metadata=SimpleNamespace(image=image), controller=_Controller(image), config=cfg)


@pytest.mark.parametrize("key_type, name, rf_key", [
    (0, "__consumer_offsets", "offsets_topic_replication_factor"),
    (1, "__transaction_state", "transaction_state_log_replication_factor"),
])
def test_coordinator_topics_wait_for_as_many_live_brokers_as_their_replication_factor(key_type, name, rf_key):
    """Kafka's getOrCreateInternalTopic: with fewer live (unfenced) brokers than the replication factor
    nothing is created (FindCoordinator answers COORDINATOR_NOT_AVAILABLE); the next FindCoordinator after
    the third broker arrives creates it with all three replicas, never with the two there were."""
    from odradek.broker.internal_topics import ensure_coordinator_topic

    broker = _cluster(live=2, fenced=1, **{rf_key: 3, "transaction_state_log_min_isr": 2})
    assert ensure_coordinator_topic(broker, key_type) is None
    assert broker.controller.created == []
    broker.metadata.image.brokers[2].fenced = False
    assert ensure_coordinator_topic(broker, key_type) == 50
    (created,) = broker.controller.created
    assert (created.name, created.replication_factor) == (name, 3)
    assert created.configs["cleanup.policy"] == "compact"
    if key_type == 1:
        assert created.configs["min.insync.replicas"] == "2"
    assert ensure_coordinator_topic(broker, key_type) == 50 and len(broker.controller.created) == 1


def test_a_single_broker_creates_its_coordinator_topics_with_the_defaults():
    """The single-node defaults (RF 1, min.isr 1, as configs/server.properties and Kafka's sample config):
    `odradek broker start` runs transactions out of the box."""
    from odradek.broker.internal_topics import ensure_coordinator_topic

    broker = _cluster(live=1)
    assert ensure_coordinator_topic(broker, 1) == 50 and ensure_coordinator_topic(broker, 0) == 50
    assert [(t.name, t.replication_factor) for t in broker.controller.created] == [
        ("__transaction_state", 1), ("__consumer_offsets", 1)]


# ---------------------------------------------------------------------------------------------------
# __consumer_offsets under min.insync.replicas: refused up front (nothing written, nothing replayed) while
# the ISR is below it, NOT_ENOUGH_REPLICAS_AFTER_APPEND when it shrank after the append, and Kafka's
# effective min.insync.replicas (never more than the replicas there are).


@pytest.fixture
def offsets_at_min_isr(tmp_path):
    """`__consumer_offsets` partition 0 led by broker 1 over `replicas`, an acks=all writer, and `isr(...)`
    to change its ISR as a new metadata image would."""
    timer = Timer(start_ms=NOW)
    manager = ReplicaManager(node_id=1, timer=timer)
    log = Log.open(str(tmp_path / f"{TOPIC}-0"), LogConfig(), now_ms=NOW)
    tp, topic_id = TopicPartition(TOPIC, 0), uuid.uuid4()

    def make(replicas: tuple[int, ...], min_isr: int):
        def isr(members) -> None:
            manager.apply_partition_state(tp, topic_id=topic_id, log=log, leader_id=1, leader_epoch=0,
                                          replicas=replicas, isr=members, min_insync_replicas=min_isr, now_ms=NOW)

        isr(replicas)
        writer = InternalTopicWriter(manager, TOPIC, enforce_min_isr=True)
        gc = GroupCoordinator(writer, timer, GroupCoordinatorConfig(offsets_topic_num_partitions=1),
                              under_min_isr=writer.is_under_min_isr)
        gc.startup(NOW)
        return gc, manager.get_partition(tp), writer, isr, log

    yield make
    log.close()


def code(response) -> int:
    return response.result().topics[0].partitions[0].error_code


def test_offset_commits_below_min_isr_are_refused_before_anything_changes(offsets_at_min_isr):
    gc, partition, writer, isr, log = offsets_at_min_isr((1, 2, 3), 2)
    isr((1,))
    assert writer.is_under_min_isr(0)
    refused = gc.offset_commit(commit_request("g", 5), 8, NOW)
    assert code(refused) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert log.log_end_offset == 0 and fetched(gc, "g") == {}

    isr((1, 2))  # one follower back: two in sync meet min.insync.replicas=2
    accepted = gc.offset_commit(commit_request("g", 5), 8, NOW)
    assert not accepted.done and log.log_end_offset == 1
    partition.update_follower_fetch_state(2, 1, NOW)
    assert code(accepted) == 0 and fetched(gc, "g") == {("t", 0): 5}


def test_a_broker_wide_min_isr_above_the_offsets_topics_replication_refuses_nothing(offsets_at_min_isr):
    gc, partition, writer, _, _ = offsets_at_min_isr((1,), 2)  # min.insync.replicas=2, one replica
    assert not writer.is_under_min_isr(0)
    assert code(gc.offset_commit(commit_request("g", 3), 8, NOW)) == 0
    assert fetched(gc, "g") == {("t", 0): 3}


def test_an_isr_shrinking_below_min_isr_after_the_append_holds_the_commit(offsets_at_min_isr):
    gc, partition, writer, isr, log = offsets_at_min_isr((1, 2, 3), 2)
    isr((1, 2))
    held = gc.offset_commit(commit_request("g", 6), 8, NOW)
    assert not held.done and partition.high_watermark == 0
    # The follower left the ISR: Kafka 4's strict min ISR (KIP-966) keeps the high watermark where it was,
    # so the replica that left still holds everything under it (it is an eligible leader), and the commit
    # waits (for the ISR, or offsets.commit.timeout.ms) rather than taking effect on the leader alone.
    isr((1,))
    assert partition.high_watermark == 0 and not held.done
    assert code(gc.offset_commit(commit_request("g", 7), 8, NOW)) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    # The follower is back and has the record: the commit takes effect, here and after a reload.
    isr((1, 2))
    partition.update_follower_fetch_state(2, log.log_end_offset, NOW)
    assert code(held) == 0 and fetched(gc, "g") == {("t", 0): 6}
    gc.shutdown()
    again = GroupCoordinator(writer, Timer(start_ms=NOW), GroupCoordinatorConfig(offsets_topic_num_partitions=1))
    again.startup(NOW)
    assert fetched(again, "g") == {("t", 0): 6}
    again.shutdown()


def test_share_group_state_is_created_as_kafka_4_4_creates_it():
    """`__share_group_state` (FindCoordinator key type 2): its full replication factor or nothing, NOT compacted
    (a snapshot and the updates after it have different keys: compaction would drop updates), kept until the
    share coordinator prunes it, min.insync.replicas from share.coordinator.state.topic.min.isr."""
    from odradek.broker.internal_topics import ensure_coordinator_topic

    broker = _cluster(live=2, fenced=1, share_coordinator_state_topic_replication_factor=3,
                      share_coordinator_state_topic_min_isr=2, share_coordinator_state_topic_num_partitions=7)
    assert ensure_coordinator_topic(broker, 2) is None and broker.controller.created == []
    broker.metadata.image.brokers[2].fenced = False
    assert ensure_coordinator_topic(broker, 2) == 7
    (created,) = broker.controller.created
    assert (created.name, created.num_partitions, created.replication_factor) == ("__share_group_state", 7, 3)
    assert {k: created.configs[k] for k in ("cleanup.policy", "retention.ms", "min.insync.replicas", "segment.bytes")} == {
        "cleanup.policy": "delete", "retention.ms": "-1", "min.insync.replicas": "2", "segment.bytes": "104857600"}
