"""Replicated partitions: three nodes in one process, an RF=3 topic, real clients.

Followers fetch from their leaders (broker/replica_fetcher.py): an acks=all produce is acknowledged once
every in-sync replica has it, the three replicas' logs end up byte for byte the same, the high watermark
reaches the log end on the leader and the followers, and consumers read everything. A follower refuses
consumers' fetches (NOT_LEADER_OR_FOLLOWER). When a leader stops (controlled shutdown: its leaderships
move to in-sync replicas first), the new leaders serve what was acknowledged and take new writes; when
it comes back it catches up and rejoins the ISRs. A follower that stops fetching leaves the ISRs (acks=all
goes on without it) and rejoins them once it fetches again.
"""

from __future__ import annotations

import asyncio

import pytest

from odradek.broker.node_client import NodeConnection
from odradek.broker.server import Broker
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import CreateTopicsRequest, FetchRequest
from odradek.storage.names import TopicPartition
from tests.harness.inprocess import active, cluster_configs, until
from tests.harness.replicated import FAST, PARTITIONS, TOPIC, assert_identical, consume, in_sync, produce, replicas_of

pytestmark = pytest.mark.timeout(150)


async def test_an_rf3_topic_replicates_and_survives_its_leader(tmp_path):
    _, configs = cluster_configs(tmp_path, **FAST)
    nodes = [Broker(c) for c in configs]
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        await until(lambda: len(active(nodes)) == 1, what="an active controller")
        await until(lambda: all(b.services.live_brokers() == [1, 2, 3] for b in nodes), what="three unfenced brokers")
        conn = NodeConnection(1, "127.0.0.1", nodes[0].bound_port)
        created = await conn.request(CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name=TOPIC, num_partitions=PARTITIONS, replication_factor=3,
                                               assignments=[], configs=[]),
        ]), 7)
        await conn.close()
        assert created.topics[0].error_code == 0, created
        await until(lambda: all(len(replicas_of(nodes, TopicPartition(TOPIC, i))) == 3 for i in range(PARTITIONS)),
                    what="every replica hosted")
        bootstrap = ",".join(f"127.0.0.1:{b.bound_port}" for b in nodes)

        first = [b"before-%d" % i for i in range(300)]
        assert await asyncio.to_thread(produce, bootstrap, first) == []
        await until(lambda: in_sync(nodes, 3), what="followers caught up, high watermarks at the log end")
        assert assert_identical(nodes, 3) == len(first)
        for b in nodes:  # every broker with a follower replica fetches it from the leader the image names
            for index in range(PARTITIONS):
                tp = TopicPartition(TOPIC, index)
                partition = b.data.get_partition(tp)
                expected = None if partition.is_leader else partition.leader_id
                assert b.replica_fetchers.source_of(tp) == expected

        # A follower serves a consumer's fetch from v11 (KIP-392) below its high watermark; before v11 it
        # refuses it, as Kafka does (the leader hint, current_leader, exists from v12 only).
        follower = next(b for b in nodes if not b.data.get_partition(TopicPartition(TOPIC, 0)).is_leader)
        topic_id = follower.metadata.image.topics_by_name[TOPIC].topic_id
        conn = NodeConnection(follower.node_id, "127.0.0.1", follower.bound_port)
        fetched = await conn.request(FetchRequest(max_wait_ms=0, min_bytes=1, topics=[FetchRequest.FetchTopic(
            topic_id=topic_id, partitions=[FetchRequest.FetchTopic.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])], forgotten_topics_data=[]), 13)
        answer = fetched.responses[0].partitions[0]
        assert answer.error_code == 0 and 0 < answer.high_watermark <= len(first) and len(answer.records) > 0
        old_fetch = await conn.request(FetchRequest(max_wait_ms=0, min_bytes=1, topics=[FetchRequest.FetchTopic(
            topic=TOPIC, partitions=[FetchRequest.FetchTopic.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])], forgotten_topics_data=[]), 10)
        await conn.close()
        assert old_fetch.responses[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER

        assert sorted(await asyncio.to_thread(consume, bootstrap, len(first))) == sorted(first)

        # The leader of partition 0 leaves (controlled shutdown): its leaderships move to in-sync replicas.
        victim = next(b for b in nodes if b.data.get_partition(TopicPartition(TOPIC, 0)).is_leader)
        await victim.stop()
        nodes.remove(victim)
        await until(lambda: len(active(nodes)) == 1, what="an active controller after the leader left")
        for b in nodes:
            leaders = {i: p.leader for i, p in b.metadata.image.topics_by_name[TOPIC].partitions.items()}
            assert victim.node_id not in leaders.values()
        bootstrap = ",".join(f"127.0.0.1:{b.bound_port}" for b in nodes)
        second = [b"after-%d" % i for i in range(150)]
        assert await asyncio.to_thread(produce, bootstrap, second) == []
        await until(lambda: in_sync(nodes, 2), what="the two survivors in sync")
        assert assert_identical(nodes, 2) == len(first) + len(second)
        got = await asyncio.to_thread(consume, bootstrap, len(first) + len(second))
        assert sorted(got) == sorted(first + second)  # nothing acknowledged was lost

        # The stopped broker comes back: it follows from its own log, catches up and rejoins every ISR.
        restarted = Broker(configs[victim.node_id - 1])
        nodes.append(restarted)
        await restarted.start()
        await until(lambda: all(len(b.metadata.image.topics_by_name[TOPIC].partitions[i].isr) == 3
                                for b in nodes for i in range(PARTITIONS)), what="the restarted broker back in the ISRs")
        await until(lambda: in_sync(nodes, 3), what="all three in sync again")
        assert assert_identical(nodes, 3) == len(first) + len(second)
    finally:
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)


def isr_of(node, index: int = 0) -> tuple[int, ...]:
    return node.metadata.image.topics_by_name[TOPIC].partitions[index].isr


async def test_the_leader_shrinks_the_isr_of_a_follower_that_stops_fetching_and_expands_it_again(tmp_path):
    from odradek.broker.replica_fetcher import ReplicaFetcherManager
    from odradek.replication.hosting import PartitionHosting

    _, configs = cluster_configs(tmp_path, **FAST, **{"replica.lag.time.max.ms": 1000})
    nodes = [Broker(c) for c in configs]
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        await until(lambda: len(active(nodes)) == 1 and all(b.services.live_brokers() == [1, 2, 3] for b in nodes),
                    what="the cluster")
        conn = NodeConnection(1, "127.0.0.1", nodes[0].bound_port)
        created = await conn.request(CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name=TOPIC, num_partitions=PARTITIONS, replication_factor=3,
                                               assignments=[], configs=[]),
        ]), 7)
        await conn.close()
        assert created.topics[0].error_code == 0, created
        await until(lambda: all(len(replicas_of(nodes, TopicPartition(TOPIC, i))) == 3 for i in range(PARTITIONS)),
                    what="every replica hosted")
        bootstrap = ",".join(f"127.0.0.1:{b.bound_port}" for b in nodes)
        assert await asyncio.to_thread(produce, bootstrap, [b"a-%d" % i for i in range(30)]) == []
        await until(lambda: in_sync(nodes, 3), what="replicas in sync")
        assert all(len(isr_of(b, i)) == 3 for b in nodes for i in range(PARTITIONS))

        # One follower stops fetching (its broker stays registered and heartbeating): acks=all still
        # completes, once the leaders have dropped it from their ISRs.
        tp0 = TopicPartition(TOPIC, 0)
        lagging = next(b for b in nodes if not b.data.get_partition(tp0).is_leader)
        await lagging.replica_fetchers.shutdown()
        assert await asyncio.to_thread(produce, bootstrap, [b"b-%d" % i for i in range(30)]) == []
        await until(lambda: all(lagging.node_id not in isr_of(b, i) for b in nodes for i in range(PARTITIONS)
                                if b.metadata.image.topics_by_name[TOPIC].partitions[i].leader != lagging.node_id),
                    what="the lagging follower out of the ISRs")

        # It fetches again: it catches up and the leaders take it back into their ISRs.
        fetchers = ReplicaFetcherManager(node_id=lagging.node_id, config=lagging.config, data=lagging.data,
                                         image=lambda: lagging.metadata.image, broker_epoch=lambda: lagging.broker_epoch,
                                         clock=lagging.now_ms)
        lagging.replica_fetchers = fetchers
        hosting = next(listener for listener in lagging.metadata._listeners if isinstance(listener, PartitionHosting))
        hosting.fetchers = fetchers
        topic = lagging.metadata.image.topics_by_name[TOPIC]
        for i, p in topic.partitions.items():
            if p.leader != lagging.node_id:
                fetchers.follow(TopicPartition(TOPIC, i), topic_id=topic.topic_id, leader_id=p.leader,
                                leader_epoch=p.leader_epoch)
        await until(lambda: all(len(isr_of(b, i)) == 3 for b in nodes for i in range(PARTITIONS)),
                    what="the follower back in every ISR")
        await until(lambda: in_sync(nodes, 3), what="replicas in sync again")
        assert assert_identical(nodes, 3) == 60
    finally:
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)
