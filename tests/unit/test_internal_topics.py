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
from odradek.replication.timing_wheel import Timer
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.names import TopicPartition

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
    assert fetched(gc, "g") == {("t", 0): 6}  # replayed at once; only the answers wait

    partition.update_follower_fetch_state(2, 1, NOW)  # the follower holds the first record
    assert partition.high_watermark == 1
    assert first.result().topics[0].partitions[0].error_code == 0 and not second.done
    partition.update_follower_fetch_state(2, 2, NOW)
    assert second.result().topics[0].partitions[0].error_code == 0


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
