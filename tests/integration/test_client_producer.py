"""The bundled producer against a real Odradek broker: codecs, keys, headers, acks, idempotence, retries."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from odradek.client import Admin, Consumer, Producer, TopicPartition
from odradek.client.errors import KafkaError, RecordTooLargeError
from odradek.protocol.messages import REQUESTS
from odradek.protocol.records import iter_batches


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _topic(bootstrap: str, partitions: int = 1) -> str:
    name = _name("p")
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topic(name, partitions)
    return name


async def _read_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list:
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        records = []
        for _ in range(100):
            batch = await consumer.getmany(timeout_ms=200)
            for rs in batch.values():
                records.extend(rs)
            if len(records) >= expected:
                break
        return records


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_round_trip_with_each_codec(broker, codec):
    topic = await _topic(broker.bootstrap)
    async with Producer(bootstrap_servers=broker.bootstrap, compression_type=codec, linger_ms=20) as producer:
        futures = [await producer.send(topic, f"value-{i}" * 10, f"key-{i}", headers=[("n", str(i)), ("null", None)],
                                       timestamp_ms=1_700_000_000_000 + i) for i in range(200)]
        await producer.flush()
        offsets = [f.result().offset for f in futures]
    assert offsets == list(range(200))
    records = await _read_all(broker.bootstrap, topic, 1, 200)
    assert [r.offset for r in records] == list(range(200))
    for i, r in enumerate(records):
        assert r.key == f"key-{i}".encode()
        assert r.value == (f"value-{i}" * 10).encode()
        assert r.headers == [("n", str(i).encode()), ("null", None)]
        assert r.timestamp == 1_700_000_000_000 + i and r.timestamp_type == 0


async def test_keys_land_where_kafka_python_puts_them(broker):
    topic = await _topic(broker.bootstrap, 6)
    async with Producer(bootstrap_servers=broker.bootstrap) as producer:
        futures = {f"user-{i}": await producer.send(topic, b"v", f"user-{i}") for i in range(60)}
        await producer.flush()
    for key, future in futures.items():
        expected = (kafka_python_murmur2(key.encode()) & 0x7FFFFFFF) % 6
        assert future.result().partition == expected, key


async def test_keyless_records_are_sticky_then_spread(broker):
    topic = await _topic(broker.bootstrap, 4)
    async with Producer(bootstrap_servers=broker.bootstrap, batch_size=2_000, linger_ms=50) as producer:
        futures = [await producer.send(topic, b"x" * 100) for _ in range(400)]
        await producer.flush()
    partitions = [f.result().partition for f in futures]
    runs = sum(1 for a, b in zip(partitions, partitions[1:]) if a != b)
    assert set(partitions) == {0, 1, 2, 3}
    assert runs < 60  # whole batches go to one partition, not record by record


@pytest.mark.parametrize("acks", [0, 1, "all"])
async def test_acks(broker, acks):
    topic = await _topic(broker.bootstrap)
    async with Producer(bootstrap_servers=broker.bootstrap, acks=acks) as producer:
        metadata = await producer.send_and_wait(topic, b"v")
    assert metadata.offset == (-1 if acks == 0 else 0)
    records = await _read_all(broker.bootstrap, topic, 1, 1)
    assert [r.value for r in records] == [b"v"]


async def test_delivery_callbacks_and_explicit_partition(broker):
    topic = await _topic(broker.bootstrap, 3)
    delivered = []
    async with Producer(bootstrap_servers=broker.bootstrap) as producer:
        for i in range(10):
            await producer.send(topic, str(i), partition=2, on_delivery=lambda md, err: delivered.append((md, err)))
        await producer.flush()
    assert len(delivered) == 10 and all(err is None for _, err in delivered)
    assert sorted(md.offset for md, _ in delivered) == list(range(10))
    assert {md.partition for md, _ in delivered} == {2}


async def test_idempotent_batches_carry_producer_id_and_sequences(broker):
    topic = await _topic(broker.bootstrap)
    async with Producer(bootstrap_servers=broker.bootstrap, linger_ms=0, batch_size=500) as producer:
        assert producer.producer_id[0] >= 0
        for i in range(50):
            await producer.send(topic, b"x" * 50)
        await producer.flush()
        pid = producer.producer_id[0]
        cls = REQUESTS[1]
        node = await producer.client.leader_for(TopicPartition(topic, 0))
        response = await producer.client.send(node, cls(
            replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
            topics=[cls.FetchTopic(topic=topic, partitions=[cls.FetchTopic.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]))
    records = response.responses[0].partitions[0].records
    headers = [h for _, h in iter_batches(memoryview(records))]
    assert len(headers) > 1
    expected_sequence = 0
    for h in headers:
        assert h.producer_id == pid
        assert h.base_sequence == expected_sequence == h.base_offset
        expected_sequence += h.last_offset_delta + 1


async def test_bounded_buffer_applies_back_pressure(broker):
    topic = await _topic(broker.bootstrap)
    peak = 0
    async with Producer(bootstrap_servers=broker.bootstrap, buffer_memory=4_000, batch_size=1_000,
                        linger_ms=5) as producer:
        futures = []
        for _ in range(300):
            futures.append(await producer.send(topic, b"y" * 100))
            peak = max(peak, producer.buffer_used)
        await producer.flush()
        assert producer.buffer_used == 0
    assert peak <= 4_000
    assert [f.result().offset for f in futures] == list(range(300))


async def test_errors_are_clear(broker):
    topic = await _topic(broker.bootstrap, 2)
    async with Producer(bootstrap_servers=broker.bootstrap, max_request_size=10_000) as producer:
        with pytest.raises(RecordTooLargeError, match="max_request_size"):
            await producer.send(topic, b"z" * 20_000)
        with pytest.raises(KafkaError) as info:
            await producer.send(topic, b"v", partition=7)
        assert info.value.code.name == "UNKNOWN_TOPIC_OR_PARTITION"


async def test_retries_across_a_broker_restart_keep_order_without_duplicates(fresh_broker):
    topic = await _topic(fresh_broker.bootstrap)
    total = 3_000
    async with Producer(bootstrap_servers=fresh_broker.bootstrap, linger_ms=2, batch_size=2_000,
                        retry_backoff_ms=50, request_timeout_ms=5_000) as producer:
        futures = []
        for i in range(total):
            futures.append(await producer.send(topic, str(i)))
            if i == total // 3:
                await producer.flush()
                await asyncio.to_thread(fresh_broker.restart)
            if i % 200 == 0:
                await asyncio.sleep(0.01)
        await producer.flush()
    assert all(f.exception() is None for f in futures)
    records = await _read_all(fresh_broker.bootstrap, topic, 1, total)
    assert [int(r.value) for r in records] == list(range(total))
