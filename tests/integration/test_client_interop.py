"""Interop both ways with confluent-kafka (librdkafka) and kafka-python, on one Odradek broker.

Records written by our producer (every codec, keys, headers, timestamps) read the same through the other
clients, and records they write read the same through our consumer. Keys land on the partition Java's
murmur2 partitioner picks, whichever client wrote them.
"""

from __future__ import annotations

import asyncio
import uuid

import confluent_kafka
import kafka
import pytest

from odradek.client import Admin, Consumer, Producer, TopicPartition

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _topic(bootstrap: str, partitions: int = 1) -> str:
    name = _name("i")
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topic(name, partitions)
    return name


async def _produce_ours(bootstrap: str, topic: str, codec: str, n: int = 30) -> list:
    async with Producer(bootstrap_servers=bootstrap, compression_type=codec) as producer:
        futures = [await producer.send(topic, f"value-{i}-{codec}", f"key-{i}", headers={"h": f"{i}"},
                                       timestamp_ms=1_650_000_000_000 + i) for i in range(n)]
        await producer.flush()
    return [f.result() for f in futures]


def _confluent_read(bootstrap: str, topic: str, n: int, partitions: int = 1) -> list:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": _name("cg"),
                                         "enable.auto.commit": False, "api.version.request": True})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(partitions)])
    out = []
    try:
        for _ in range(200):
            msg = consumer.poll(0.1)
            if msg is None:
                if len(out) >= n:
                    break
                continue
            assert msg.error() is None, msg.error()
            out.append(msg)
            if len(out) >= n:
                break
    finally:
        consumer.close()
    return out


def _kafka_python_read(bootstrap: str, topic: str, n: int) -> list:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                   enable_auto_commit=False, consumer_timeout_ms=5_000)
    consumer.assign([kafka.TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    out = []
    try:
        for msg in consumer:
            out.append(msg)
            if len(out) >= n:
                break
    finally:
        consumer.close()
    return out


@pytest.mark.parametrize("codec", CODECS)
async def test_ours_to_confluent_and_kafka_python(broker, codec):
    topic = await _topic(broker.bootstrap)
    await _produce_ours(broker.bootstrap, topic, codec)
    rd = await asyncio.to_thread(_confluent_read, broker.bootstrap, topic, 30)
    assert [m.value() for m in rd] == [f"value-{i}-{codec}".encode() for i in range(30)]
    assert [m.key() for m in rd] == [f"key-{i}".encode() for i in range(30)]
    assert [m.headers() for m in rd] == [[("h", str(i).encode())] for i in range(30)]
    assert [m.timestamp()[1] for m in rd] == [1_650_000_000_000 + i for i in range(30)]
    kp = await asyncio.to_thread(_kafka_python_read, broker.bootstrap, topic, 30)
    assert [(m.offset, m.key, m.value) for m in kp] == [
        (i, f"key-{i}".encode(), f"value-{i}-{codec}".encode()) for i in range(30)]
    assert [list(m.headers) for m in kp] == [[("h", str(i).encode())] for i in range(30)]


async def _read_ours(bootstrap: str, topic: str, n: int, partitions: int = 1) -> list:
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        out = []
        for _ in range(100):
            for rs in (await consumer.getmany(timeout_ms=100)).values():
                out.extend(rs)
            if len(out) >= n:
                break
    return sorted(out, key=lambda r: (r.partition, r.offset))


@pytest.mark.parametrize("codec", CODECS)
async def test_confluent_to_ours(broker, codec):
    topic = await _topic(broker.bootstrap)

    def produce():
        p = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec,
                                      "linger.ms": 5, "enable.idempotence": True})
        for i in range(30):
            p.produce(topic, value=f"cv-{i}".encode(), key=f"ck-{i}".encode(), headers=[("src", b"librdkafka")],
                      timestamp=1_660_000_000_000 + i, partition=0)
        assert p.flush(10) == 0

    await asyncio.to_thread(produce)
    records = await _read_ours(broker.bootstrap, topic, 30)
    assert [(r.offset, r.key, r.value) for r in records] == [(i, f"ck-{i}".encode(), f"cv-{i}".encode()) for i in range(30)]
    assert all(r.headers == [("src", b"librdkafka")] for r in records)
    assert [r.timestamp for r in records] == [1_660_000_000_000 + i for i in range(30)]


@pytest.mark.parametrize("codec", ["none", "gzip", "lz4", "zstd"])
async def test_kafka_python_to_ours(broker, codec):
    topic = await _topic(broker.bootstrap)

    def produce():
        p = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=None if codec == "none" else codec)
        for i in range(30):
            p.send(topic, value=f"kv-{i}".encode(), key=f"kk-{i}".encode(), headers=[("src", b"kafka-python")],
                   partition=0)
        p.flush(10)
        p.close()

    await asyncio.to_thread(produce)
    records = await _read_ours(broker.bootstrap, topic, 30)
    assert [(r.offset, r.key, r.value) for r in records] == [(i, f"kk-{i}".encode(), f"kv-{i}".encode()) for i in range(30)]
    assert all(r.headers == [("src", b"kafka-python")] for r in records)


async def test_same_key_same_partition_across_clients(broker):
    topic = await _topic(broker.bootstrap, 7)
    keys = [f"customer-{i}".encode() for i in range(40)] + [b"", b"\xff\x00", "ключ".encode()]

    def produce_others():
        cp = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random"})
        placed: dict[bytes, int] = {}

        def record(err, msg):
            assert err is None
            placed[msg.key()] = msg.partition()

        for k in keys:
            cp.produce(topic, value=b"confluent", key=k, on_delivery=record)
        cp.flush(10)
        kp = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap)
        kafka_python = {k: kp.send(topic, value=b"kafka-python", key=k).get(10).partition for k in keys}
        kp.close()
        return placed, kafka_python

    confluent_placed, kafka_python_placed = await asyncio.to_thread(produce_others)
    async with Producer(bootstrap_servers=broker.bootstrap) as producer:
        ours = {k: (await producer.send_and_wait(topic, b"odradek", k)).partition for k in keys}
    assert ours == kafka_python_placed
    assert ours == confluent_placed
    assert len(set(ours.values())) > 3


async def test_group_shared_with_confluent_consumer(broker):
    """An Odradek consumer and a librdkafka consumer in one group split the partitions (range)."""
    topic = await _topic(broker.bootstrap, 4)
    group = _name("mixed")
    ours = Consumer(bootstrap_servers=broker.bootstrap, group_id=group, auto_offset_reset="earliest",
                    heartbeat_interval_ms=200, partition_assignment_strategy="range")
    await ours.start()
    ours.subscribe([topic])
    stop = asyncio.Event()
    theirs_assignment: list = []

    def run_confluent():
        c = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                                      "partition.assignment.strategy": "range", "heartbeat.interval.ms": 200,
                                      "session.timeout.ms": 6000})
        c.subscribe([topic])
        try:
            while not stop.is_set():
                c.poll(0.1)
                theirs_assignment[:] = [(tp.topic, tp.partition) for tp in c.assignment()]
        finally:
            c.close()

    thread = asyncio.create_task(asyncio.to_thread(run_confluent))
    try:
        for _ in range(200):
            await ours.getmany(timeout_ms=100)
            mine = {(tp.topic, tp.partition) for tp in ours.assignment()}
            if len(mine) == 2 and len(theirs_assignment) == 2:
                break
        assert len(mine) == 2 and len(theirs_assignment) == 2
        assert mine | set(theirs_assignment) == {(topic, p) for p in range(4)}
    finally:
        stop.set()
        await thread
        await ours.close()
