"""Fetch from the closest replica (KIP-392) when the follower falls behind: three racked nodes in one process.

A confluent-kafka consumer in a follower's rack is sent to that follower and reads there; the follower then
stops fetching (its fetcher is held), the leader drops it from the ISR, and the follower, no longer in sync,
answers the consumer NOT_LEADER_OR_FOLLOWER: librdkafka goes back to the leader, which serves it now (no
in-sync replica in its rack), and every record produced before and after is read.

This used to fail in about 1 run in 10: the image dropping the follower from the ISR reached the follower
before the leader, so the follower refused the consumer while the leader, still counting the follower in
sync, sent it straight back; librdkafka (2.16) lost track of the leader in that ping-pong and stayed on the
refusing follower. The leader now stops naming a follower it sees lagging (or has proposed to drop) at
once (Partition.is_read_replica_candidate), which is before the follower can refuse anyone.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from odradek.broker.node_client import NodeConnection
from odradek.broker.server import Broker
from odradek.protocol.messages import CreateTopicsRequest
from odradek.storage.names import TopicPartition

from tests.harness.inprocess import active, cluster_configs, until

pytestmark = pytest.mark.timeout(180)

TOPIC = "racked"
TP = TopicPartition(TOPIC, 0)
RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def produce(bootstrap: str, values: list[bytes]) -> list[str]:
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "message.timeout.ms": 30000})

    def delivered(err, _msg) -> None:
        if err is not None:
            errors.append(str(err))

    for value in values:
        producer.produce(TOPIC, value=value, partition=0, on_delivery=delivered)
        producer.poll(0)
    if producer.flush(45):
        errors.append("not all delivered")
    return errors


def read(consumer: Consumer, count: int, timeout_s: float = 60.0) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    while len(values) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and not msg.error():
            values.append(msg.value())
    return values


async def test_a_consumer_returns_to_the_leader_when_its_follower_leaves_the_isr(tmp_path):
    _, configs = cluster_configs(tmp_path, **{"replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 100,
                                             "replica.lag.time.max.ms": 1500, "replica.selector.class": RACK_AWARE})
    nodes = [Broker(c.model_copy(update={"broker_rack": f"rack-{c.node_id}"})) for c in configs]
    consumer = None
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        await until(lambda: len(active(nodes)) == 1, what="an active controller")
        await until(lambda: all(b.services.live_brokers() == [1, 2, 3] for b in nodes), what="three unfenced brokers")
        conn = NodeConnection(1, "127.0.0.1", nodes[0].bound_port)
        created = await conn.request(CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=3, assignments=[],
                                               configs=[])]), 7)
        await conn.close()
        assert created.topics[0].error_code == 0
        await until(lambda: all(b.data.get_partition(TP) is not None for b in nodes), what="the replicas")
        leader = next(b for b in nodes if b.data.get_partition(TP).is_leader)
        follower = next(b for b in nodes if b is not leader)
        bootstrap = f"127.0.0.1:{leader.bound_port}"

        first = [b"first-%d" % i for i in range(200)]
        assert await asyncio.to_thread(produce, bootstrap, first) == []
        consumer = await asyncio.to_thread(Consumer, {
            "bootstrap.servers": bootstrap, "group.id": "racked", "client.rack": f"rack-{follower.node_id}",
            "enable.auto.commit": False, "topic.metadata.refresh.interval.ms": 1000})
        await asyncio.to_thread(consumer.assign, [KafkaTopicPartition(TOPIC, 0, 0)])
        got = await asyncio.to_thread(read, consumer, len(first))
        assert got == first
        assert follower.data.follower_consumer_reads >= 1 and leader.data.preferred_replica_answers >= 1

        # The follower stops replicating (its fetcher held); the leader drops it from the ISR.
        follower.replica_fetchers.follow = lambda *args, **kwargs: None
        follower.replica_fetchers.unfollow(TP)
        second = [b"second-%d" % i for i in range(200)]
        assert await asyncio.to_thread(produce, bootstrap, second) == []  # acks=all: once the ISR shrinks
        await until(lambda: follower.node_id not in follower.metadata.image.topics_by_name[TOPIC].partitions[0].isr,
                    what="the follower out of the ISR")
        reads_before = leader.data.follower_consumer_reads
        got = await asyncio.to_thread(read, consumer, len(second))
        assert got == second  # served by the leader now: the follower has none of them
        assert leader.data.follower_consumer_reads == reads_before
    finally:
        if consumer is not None:
            await asyncio.to_thread(consumer.close)
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)
