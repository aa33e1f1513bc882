"""The bundled consumer with assign(): positions, seeks, offsets by time, pause/resume, commits, keep-up."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from odradek.client import Admin, Consumer, OffsetAndMetadata, Producer, TopicPartition
from odradek.client.errors import ConfigError, KafkaError


async def _topic_with(bootstrap: str, partitions: int = 1, records: int = 0, **send_kw) -> str:
    name = f"c-{uuid.uuid4().hex[:8]}"
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topic(name, partitions)
    if records:
        async with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
            for i in range(records):
                await producer.send(name, f"v{i}", f"k{i}", partition=i % partitions,
                                    timestamp_ms=1_000_000 + i * 10, **send_kw)
            await producer.flush()
    return name


async def _drain(consumer: Consumer, expected: int, timeout_s: float = 10.0) -> list:
    records = []
    deadline = time.monotonic() + timeout_s
    while len(records) < expected and time.monotonic() < deadline:
        for rs in (await consumer.getmany(timeout_ms=200)).values():
            records.extend(rs)
    return records


async def test_assign_getmany_position_highwater(broker):
    topic = await _topic_with(broker.bootstrap, 2, 40)
    async with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", max_poll_records=7) as c:
        c.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        batch = await c.getmany(timeout_ms=5_000)
        assert 0 < sum(map(len, batch.values())) <= 7
        records = [r for rs in batch.values() for r in rs] + await _drain(c, 40 - sum(map(len, batch.values())))
        assert len(records) == 40
        by_partition = {}
        for r in records:
            by_partition.setdefault(r.partition, []).append(r.offset)
        assert by_partition == {0: list(range(20)), 1: list(range(20))}
        assert await c.position(TopicPartition(topic, 0)) == 20
        assert c.highwater(TopicPartition(topic, 1)) == 20
        assert c.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}


async def test_async_iteration(broker):
    topic = await _topic_with(broker.bootstrap, 1, 10)
    async with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, 0)])
        seen = []
        async for record in c:
            seen.append(record.value)
            if len(seen) == 10:
                break
    assert seen == [f"v{i}".encode() for i in range(10)]


async def test_seek_and_offsets(broker):
    topic = await _topic_with(broker.bootstrap, 1, 30)
    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap_servers=broker.bootstrap) as c:
        c.assign([tp])
        assert await c.position(tp) == 30  # auto_offset_reset latest
        assert await c.beginning_offsets([tp]) == {tp: 0}
        assert await c.end_offsets([tp]) == {tp: 30}
        found = await c.offsets_for_times({tp: 1_000_000 + 125})
        assert found[tp].offset == 13 and found[tp].timestamp == 1_000_000 + 130
        assert (await c.offsets_for_times({tp: 9_999_999_999_999}))[tp] is None
        c.seek(tp, 25)
        assert [r.offset for r in await _drain(c, 5)] == [25, 26, 27, 28, 29]
        c.seek_to_beginning(tp)
        assert await c.position(tp) == 0
        first = await c.getone()
        assert first.offset == 0 and first.key == b"k0"
        c.seek_to_end()
        assert await c.position(tp) == 30
        assert await c.getmany(timeout_ms=100) == {}


async def test_out_of_range_resets(broker):
    topic = await _topic_with(broker.bootstrap, 1, 5)
    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        c.seek(tp, 1_000)
        assert [r.offset for r in await _drain(c, 5)] == [0, 1, 2, 3, 4]
    async with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="none") as c:
        c.assign([tp])
        with pytest.raises(KafkaError):
            await c.getmany(timeout_ms=3_000)


async def test_pause_and_resume(broker):
    topic = await _topic_with(broker.bootstrap, 2, 20)
    p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    async with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest") as c:
        c.assign([p0, p1])
        c.pause(p1)
        assert c.paused() == {p1}
        records = await _drain(c, 10, timeout_s=3)
        await asyncio.sleep(0.3)
        records += [r for rs in (await c.getmany(timeout_ms=300)).values() for r in rs]
        assert {r.partition for r in records} == {0} and len(records) == 10
        c.resume(p1)
        records = await _drain(c, 10)
        assert {r.partition for r in records} == {1}


async def test_commit_and_committed_without_membership(broker):
    topic = await _topic_with(broker.bootstrap, 1, 10)
    tp = TopicPartition(topic, 0)
    group = f"g-{uuid.uuid4().hex[:6]}"
    async with Consumer(bootstrap_servers=broker.bootstrap, group_id=group, auto_offset_reset="earliest",
                        enable_auto_commit=False) as c:
        c.assign([tp])
        assert await c.committed(tp) is None
        records = await _drain(c, 10)
        assert len(records) == 10
        await c.commit({tp: OffsetAndMetadata(6, "meta")})
        assert await c.committed(tp) == 6
        await c.commit()
        assert await c.committed(tp) == 10
    async with Consumer(bootstrap_servers=broker.bootstrap, group_id=group, auto_offset_reset="earliest") as c:
        c.assign([tp])
        assert await c.position(tp) == 10  # resumes from the committed offset


async def test_misuse_is_refused(broker):
    async with Consumer(bootstrap_servers=broker.bootstrap) as c:
        with pytest.raises(ConfigError):
            c.subscribe(["x"])  # no group_id
        with pytest.raises(ConfigError):
            c.seek(TopicPartition("not-assigned", 0), 1)
        with pytest.raises(ConfigError):
            await c.commit()


async def test_consumer_keeps_up_with_a_fast_producer(broker):
    topic = await _topic_with(broker.bootstrap, 3)
    total = 30_000
    received = 0
    produced_at = None

    async def produce():
        nonlocal produced_at
        async with Producer(bootstrap_servers=broker.bootstrap, linger_ms=5, batch_size=64_000) as producer:
            for i in range(total):
                await producer.send(topic, b"p" * 100)
            await producer.flush()
        produced_at = time.monotonic()

    async with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                        fetch_max_wait_ms=100) as c:
        c.assign([TopicPartition(topic, p) for p in range(3)])
        await c.position(TopicPartition(topic, 0))
        task = asyncio.create_task(produce())
        started = time.monotonic()
        while received < total and time.monotonic() - started < 30:
            for rs in (await c.getmany(timeout_ms=200)).values():
                received += len(rs)
        done_at = time.monotonic()
        await task
    assert received == total
    assert done_at - produced_at < 2.0, f"consumer finished {done_at - produced_at:.2f}s after the producer"


async def test_read_committed_reads_plain_records_up_to_the_last_stable_offset(broker):
    topic = await _topic_with(broker.bootstrap, 1, 12)
    tp = TopicPartition(topic, 0)
    async with Consumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                        isolation_level="read_committed") as c:
        c.assign([tp])
        records = await _drain(c, 12)
        assert [r.offset for r in records] == list(range(12))
        assert c.last_stable_offset(tp) == 12
        assert await c.end_offsets([tp]) == {tp: 12}


async def test_bootstrap_list_with_a_dead_server_first(broker):
    topic = await _topic_with(broker.bootstrap, 1, 3)
    async with Consumer(bootstrap_servers=f"127.0.0.1:1,{broker.bootstrap}", auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, 0)])
        assert [r.value for r in await _drain(c, 3)] == [b"v0", b"v1", b"v2"]
