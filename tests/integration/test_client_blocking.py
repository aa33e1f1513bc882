"""The blocking facade: scripts without asyncio, and pickled facades rebuilt in another process."""

from __future__ import annotations

import multiprocessing
import pickle
import uuid

from odradek.client import BlockingAdmin, BlockingConsumer, BlockingProducer, TopicPartition


def _executor_task(producer_bytes: bytes, topic: str, start: int) -> int:
    """What a Spark executor does: unpickle a facade and use it; it connects on first use."""
    producer = pickle.loads(producer_bytes)
    with producer:
        return producer.send_many(topic, ((f"k{i}", f"v{i}") for i in range(start, start + 50)))


def test_blocking_round_trip_and_pickled_producer_in_other_processes(broker):
    topic = f"b-{uuid.uuid4().hex[:8]}"
    with BlockingAdmin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topic(topic, 2)
        assert topic in admin.list_topics()
    producer = BlockingProducer(**{"bootstrap.servers": broker.bootstrap, "linger.ms": 2})
    metadata = producer.send_and_wait(topic, "first", "k", partition=0)
    assert metadata.offset == 0 and metadata.partition == 0
    futures = [producer.send(topic, f"x{i}", partition=1) for i in range(10)]
    producer.flush()
    assert [f.result().offset for f in futures] == list(range(10))
    producer.close()

    blob = pickle.dumps(BlockingProducer(bootstrap_servers=broker.bootstrap))
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        sent = pool.starmap(_executor_task, [(blob, topic, 0), (blob, topic, 50)])
    assert sent == [50, 50]

    consumer = BlockingConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                                consumer_timeout_ms=1_500)
    consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
    values = [r.value for r in consumer]
    assert len(values) == 111
    assert set(values) >= {b"first", b"x9", b"v0", b"v99"}
    assert consumer.position(TopicPartition(topic, 1)) + consumer.position(TopicPartition(topic, 0)) == 111
    consumer.seek_to_beginning()
    polled = consumer.poll(timeout_ms=2_000, max_records=5)
    assert sum(map(len, polled.values())) == 5
    consumer.close()
