"""AddOffsetsToTxn joins the partition of `__consumer_offsets` the group coordinator really uses: over the
existing topic's partition count, not `offsets.topic.num.partitions` when the two differ (the topic was
created under another setting). One in-process broker, restarted on its data with a different setting;
aiokafka's send_offsets_to_transaction then commits (the TxnOffsetCommit is verified against the partition
the transaction holds) and the offset is visible to the group afterwards."""

from __future__ import annotations

import pytest

from odradek.broker.server import Broker
from odradek.broker.testing import broker_config
from odradek.coordinator.partitioning import CONSUMER_OFFSETS_TOPIC, partition_for

pytestmark = pytest.mark.timeout(120)

CREATED_WITH, CONFIGURED = 3, 50
GROUP = next(g for g in (f"offsets-count-{i}" for i in range(100))
             if partition_for(g, CREATED_WITH) != partition_for(g, CONFIGURED))


async def test_offsets_join_the_transaction_at_the_topics_real_partition_count(tmp_path):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as AioTopicPartition

    first = Broker(broker_config(tmp_path, **{"offsets.topic.num.partitions": CREATED_WITH}))
    await first.start()
    try:
        first.services.groups  # creates __consumer_offsets with 3 partitions
        assert len(first.metadata.image.topics_by_name[CONSUMER_OFFSETS_TOPIC].partitions) == CREATED_WITH
    finally:
        await first.stop()

    broker = Broker(broker_config(tmp_path, **{"offsets.topic.num.partitions": CONFIGURED,
                                               "auto.create.topics.enable": "true"}))
    await broker.start()
    bootstrap = f"127.0.0.1:{broker.bound_port}"
    try:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="offsets-count-txn")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait("offsets-count-out", b"v")
                await producer.send_and_wait("offsets-count-in", b"v")  # the topic the offsets are for exists
                await producer.send_offsets_to_transaction({AioTopicPartition("offsets-count-in", 0): 5}, GROUP)
        finally:
            await producer.stop()
        coordinator = broker.services.transactions
        (metadata,) = [m for p in coordinator.runtime.partitions
                       for t, m in coordinator.runtime.shard(p).transactions.items() if t == "offsets-count-txn"]
        assert metadata.state.display_name == "CompleteCommit"
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=GROUP, enable_auto_commit=False)
        await consumer.start()
        try:
            assert await consumer.committed(AioTopicPartition("offsets-count-in", 0)) == 5
        finally:
            await consumer.stop()
    finally:
        await broker.stop()
