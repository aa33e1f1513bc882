"""offsets.commit.timeout.ms on a replicated __consumer_offsets: three nodes in one process, the offsets
topic at RF=3, and a follower of the group's partition that stops fetching while staying in the ISR
(replica.lag.time.max.ms far away), so the commit's acks=all write cannot complete. The commit is answered
COORDINATOR_NOT_AVAILABLE after the timeout instead of hanging (Kafka's group coordinator write timeout,
mapped by handleOperationException); until the follower fetches again OffsetFetch still answers the
offset committed before (it reads at the high watermark); then the record it could not wait for takes
effect."""

from __future__ import annotations

import asyncio

import pytest

from odradek.broker.node_client import NodeConnection
from odradek.broker.replica_fetcher import ReplicaFetcherManager
from odradek.broker.server import Broker
from odradek.replication.hosting import PartitionHosting
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    CreateTopicsRequest,
    FindCoordinatorRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from odradek.storage.names import TopicPartition

from tests.harness.inprocess import active, cluster_configs, until

pytestmark = pytest.mark.timeout(150)

OFFSETS = TopicPartition("__consumer_offsets", 0)
TIMEOUT_MS = 2000
SETTINGS = {"replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 100,
            "offsets.topic.num.partitions": 1, "offsets.topic.replication.factor": 3, "min.insync.replicas": 2,
            "replica.lag.time.max.ms": 600_000, "offsets.commit.timeout.ms": TIMEOUT_MS}
CTopic = OffsetCommitRequest.OffsetCommitRequestTopic


def commit_request(group: str, offset: int) -> OffsetCommitRequest:
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                               retention_time_ms=-1, topics=[CTopic(name="in", partitions=[
                                   CTopic.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                                       committed_leader_epoch=-1,
                                                                       committed_metadata="")])])


def offsets_replicas(nodes):
    return [b.data.get_partition(OFFSETS) for b in nodes if b.data.get_partition(OFFSETS) is not None]


async def committed(conn: NodeConnection, group: str) -> int:
    r = await conn.request(OffsetFetchRequest(group_id=group, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name="in", partition_indexes=[0])]), 7)
    return r.topics[0].partitions[0].committed_offset


async def test_a_commit_that_cannot_be_replicated_is_answered_after_the_timeout(tmp_path):
    _, configs = cluster_configs(tmp_path, **SETTINGS)
    nodes = [Broker(c) for c in configs]
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        await until(lambda: len(active(nodes)) == 1 and all(b.services.live_brokers() == [1, 2, 3] for b in nodes),
                    what="the cluster")
        conn = NodeConnection(1, "127.0.0.1", nodes[0].bound_port)
        created = await conn.request(CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name="in", num_partitions=1, replication_factor=1, assignments=[],
                                               configs=[])]), 7)
        assert created.topics[0].error_code == 0, created
        for _ in range(600):  # bounded: COORDINATOR_NOT_AVAILABLE until __consumer_offsets has a leader
            found = await conn.request(FindCoordinatorRequest(key="g", key_type=0), 3)
            if found.error_code == 0:
                break
            await asyncio.sleep(0.05)
        assert found.error_code == 0, found
        await conn.close()
        await until(lambda: len(offsets_replicas(nodes)) == 3
                    and all(p.high_watermark == p.log_end_offset for p in offsets_replicas(nodes))
                    and any(p.is_leader and len(p.isr) == 3 for p in offsets_replicas(nodes)),
                    what="__consumer_offsets on three replicas, all in sync")
        coordinator = next(b for b in nodes if b.data.get_partition(OFFSETS).is_leader)
        conn = NodeConnection(coordinator.node_id, "127.0.0.1", coordinator.bound_port)
        assert (await conn.request(commit_request("g", 5), 8)).topics[0].partitions[0].error_code == 0

        # A follower stops fetching; it stays in the ISR, so the high watermark cannot pass it.
        lagging = next(b for b in nodes if not b.data.get_partition(OFFSETS).is_leader)
        await lagging.replica_fetchers.shutdown()
        answer = await asyncio.wait_for(conn.request(commit_request("g", 7), 8), timeout=60)
        assert answer.topics[0].partitions[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        # Its record is in the leader's log, above the high watermark: OffsetFetch reads at the high
        # watermark (Kafka's read operation), so nobody is told an offset a new leader could take back.
        assert await committed(conn, "g") == 5

        # It fetches again: the record the commit could not wait for is replicated and takes effect.
        fetchers = ReplicaFetcherManager(node_id=lagging.node_id, config=lagging.config, data=lagging.data,
                                         image=lambda: lagging.metadata.image, broker_epoch=lambda: lagging.broker_epoch,
                                         clock=lagging.now_ms)
        lagging.replica_fetchers = fetchers
        hosting = next(listener for listener in lagging.metadata._listeners if isinstance(listener, PartitionHosting))
        hosting.fetchers = fetchers
        topic = lagging.metadata.image.topics_by_name[OFFSETS.topic]
        partition = topic.partitions[0]
        fetchers.follow(OFFSETS, topic_id=topic.topic_id, leader_id=partition.leader, leader_epoch=partition.leader_epoch)
        leader_partition = coordinator.data.get_partition(OFFSETS)
        await until(lambda: leader_partition.high_watermark == leader_partition.log_end_offset, what="the HW caught up")
        assert await committed(conn, "g") == 7
        assert (await conn.request(commit_request("g", 8), 8)).topics[0].partitions[0].error_code == 0
        assert await committed(conn, "g") == 8
        await conn.close()
    finally:
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)
