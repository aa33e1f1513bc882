"""A replicated `__consumer_offsets` in an in-process cluster: an OffsetCommit/OffsetFetch pair on the wire,
the offsets partition's replicas, starting the cluster with the partition whole and in sync, and giving a
follower whose fetchers were shut down new ones (the way a test holds a follower's replication)."""

from __future__ import annotations

import asyncio

from odradek.broker.node_client import NodeConnection
from odradek.broker.replica_fetcher import ReplicaFetcherManager
from odradek.broker.server import Broker
from odradek.protocol.messages import (
    CreateTopicsRequest,
    FindCoordinatorRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from odradek.replication.hosting import PartitionHosting
from odradek.storage.names import TopicPartition

from .inprocess import active, until

OFFSETS = TopicPartition("__consumer_offsets", 0)
CTopic = OffsetCommitRequest.OffsetCommitRequestTopic


def commit_request(group: str, offset: int, topic: str = "in") -> OffsetCommitRequest:
    return OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                               retention_time_ms=-1, topics=[CTopic(name=topic, partitions=[
                                   CTopic.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                                                       committed_leader_epoch=-1,
                                                                       committed_metadata="")])])


async def committed(conn: NodeConnection, group: str, topic: str = "in") -> int:
    r = await conn.request(OffsetFetchRequest(group_id=group, topics=[
        OffsetFetchRequest.OffsetFetchRequestTopic(name=topic, partition_indexes=[0])]), 7)
    return r.topics[0].partitions[0].committed_offset


def offsets_replicas(nodes: list[Broker]):
    return [b.data.get_partition(OFFSETS) for b in nodes if b.data.get_partition(OFFSETS) is not None]


async def start_with_offsets_in_sync(nodes: list[Broker], group: str = "g", topic: str = "in") -> Broker:
    """Start `nodes`, create `topic` (one partition, one replica) and `__consumer_offsets` (through
    FindCoordinator), and wait until the offsets partition is on every node with the whole ISR; returns
    the node that leads it (the group's coordinator)."""
    await asyncio.gather(*(b.start() for b in nodes))
    ids = sorted(b.node_id for b in nodes)
    await until(lambda: len(active(nodes)) == 1 and all(b.services.live_brokers() == ids for b in nodes),
                what="the cluster")
    conn = NodeConnection(nodes[0].node_id, "127.0.0.1", nodes[0].bound_port)
    try:
        created = await conn.request(CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name=topic, num_partitions=1, replication_factor=1, assignments=[],
                                               configs=[])]), 7)
        assert created.topics[0].error_code == 0, created
        for _ in range(600):  # bounded: COORDINATOR_NOT_AVAILABLE until __consumer_offsets has a leader
            found = await conn.request(FindCoordinatorRequest(key=group, key_type=0), 3)
            if found.error_code == 0:
                break
            await asyncio.sleep(0.05)
        assert found.error_code == 0, found
    finally:
        await conn.close()
    await until(lambda: len(offsets_replicas(nodes)) == len(nodes)
                and all(p.high_watermark == p.log_end_offset for p in offsets_replicas(nodes))
                and any(p.is_leader and len(p.isr) == len(nodes) for p in offsets_replicas(nodes)),
                what="__consumer_offsets on every node, all in sync")
    return next(b for b in nodes if b.data.get_partition(OFFSETS).is_leader)


def fetch_again(broker: Broker) -> None:
    """Give a broker whose fetchers were shut down new ones, following the offsets partition's leader."""
    fetchers = ReplicaFetcherManager(node_id=broker.node_id, config=broker.config, data=broker.data,
                                     image=lambda: broker.metadata.image, broker_epoch=lambda: broker.broker_epoch,
                                     clock=broker.now_ms)
    broker.replica_fetchers = fetchers
    hosting = next(listener for listener in broker.metadata._listeners if isinstance(listener, PartitionHosting))
    hosting.fetchers = fetchers
    image_topic = broker.metadata.image.topics_by_name[OFFSETS.topic]
    partition = image_topic.partitions[0]
    fetchers.follow(OFFSETS, topic_id=image_topic.topic_id, leader_id=partition.leader,
                    leader_epoch=partition.leader_epoch)
