"""ShareFetch on a three-node cluster (in process): only the partition's leader serves it; a follower
answers NOT_LEADER_OR_FOLLOWER with the current leader and its endpoint (node_endpoints), as Kafka does, so a
share consumer goes to the leader without a metadata round trip. When the leader leaves, the new leader
serves the partition (with this slice's in-memory persister it starts afresh; the share coordinator's
persister carries the state across, in its own slice)."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from odradek.broker.node_client import NodeConnection
from odradek.broker.server import Broker
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import CreateTopicsRequest, ShareFetchRequest
from odradek.storage.names import TopicPartition
from tests.harness.inprocess import active, cluster_configs, until
from tests.harness.replicated import FAST, replicas_of

pytestmark = pytest.mark.timeout(150)
TOPIC = "shared-rf3"


def share_fetch(topic_id: uuid.UUID, member: str) -> ShareFetchRequest:
    return ShareFetchRequest(
        group_id="sg", member_id=member, share_session_epoch=0, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
        max_records=10, batch_size=10, topics=[ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=[
            ShareFetchRequest.FetchTopic.FetchPartition(partition_index=0)])], forgotten_topics_data=[])


async def test_followers_point_to_the_leader(tmp_path):
    # The share-state topic replicated like the data (Odradek's internal-topic default is 1, for a single node):
    # with one replica, stopping its node would leave the successor no share coordinator to read from.
    _, configs = cluster_configs(tmp_path, **FAST, **{"odradek.share.enabled": "true",
                                                      "share.coordinator.state.topic.replication.factor": "3"})
    nodes = [Broker(c) for c in configs]
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        await until(lambda: len(active(nodes)) == 1, what="an active controller")
        await until(lambda: all(b.services.live_brokers() == [1, 2, 3] for b in nodes), what="three unfenced brokers")
        conn = NodeConnection(1, "127.0.0.1", nodes[0].bound_port)
        created = await conn.request(CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=3,
                                               assignments=[], configs=[])]), 7)
        await conn.close()
        assert created.topics[0].error_code == 0, created
        tp = TopicPartition(TOPIC, 0)
        await until(lambda: len(replicas_of(nodes, tp)) == 3, what="every replica hosted")
        await until(lambda: all(b.metadata.image.topics_by_name.get(TOPIC) is not None
                                and b.metadata.image.topics_by_name[TOPIC].partitions[0].leader >= 0 for b in nodes),
                    what="the leader known everywhere")
        leader = next(b for b in nodes if b.data.get_partition(tp).is_leader)
        follower = next(b for b in nodes if b is not leader)
        topic_id = leader.metadata.image.topics_by_name[TOPIC].topic_id

        conn = NodeConnection(follower.node_id, "127.0.0.1", follower.bound_port)
        answer = await conn.request(share_fetch(topic_id, str(uuid.uuid4())), 2)
        await conn.close()
        part = answer.responses[0].partitions[0]
        assert part.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, answer
        epoch = leader.metadata.image.topics_by_name[TOPIC].partitions[0].leader_epoch
        assert (part.current_leader.leader_id, part.current_leader.leader_epoch) == (leader.node_id, epoch)
        assert [(e.node_id, e.port) for e in answer.node_endpoints] == [(leader.node_id, leader.bound_port)]

        conn = NodeConnection(leader.node_id, "127.0.0.1", leader.bound_port)
        answer = await conn.request(share_fetch(topic_id, str(uuid.uuid4())), 2)
        await conn.close()
        assert answer.error_code == 0 and answer.responses[0].partitions[0].error_code == 0, answer
        assert leader.services.share.describe("sg", tp) is not None

        # The leader leaves (controlled shutdown): another replica leads, and serves the share group.
        await leader.stop()
        nodes.remove(leader)
        await until(lambda: any(b.data.get_partition(tp).is_leader for b in nodes), what="a new leader")
        successor = next(b for b in nodes if b.data.get_partition(tp).is_leader)
        conn = NodeConnection(successor.node_id, "127.0.0.1", successor.bound_port)
        answer = await conn.request(share_fetch(topic_id, str(uuid.uuid4())), 2)
        await conn.close()
        assert answer.error_code == 0 and answer.responses[0].partitions[0].error_code == 0, answer
    finally:
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)
