"""Consumer groups: subscribe with each assignor, rebalance listeners, commits, patterns, leaving."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from odradek.client import Admin, Consumer, ConsumerRebalanceListener, Producer, TopicPartition


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _topic(bootstrap: str, partitions: int, records: int = 0, name: str | None = None) -> str:
    name = name or _name("gt")
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topic(name, partitions)
    if records:
        async with Producer(bootstrap_servers=bootstrap) as producer:
            for i in range(records):
                await producer.send(name, str(i), partition=i % partitions)
            await producer.flush()
    return name


class Recorder(ConsumerRebalanceListener):
    def __init__(self):
        self.events: list[tuple[str, set]] = []

    async def on_partitions_revoked(self, revoked):
        self.events.append(("revoked", set(revoked)))

    def on_partitions_assigned(self, assigned):
        self.events.append(("assigned", set(assigned)))


def _consumer(bootstrap: str, group: str, strategy: str = "range", **kw) -> Consumer:
    return Consumer(bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                    partition_assignment_strategy=strategy, heartbeat_interval_ms=100,
                    session_timeout_ms=6_000, **kw)


async def _poll_until(consumers, predicate, timeout_s: float = 15.0) -> list:
    records = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for c in consumers:
            for rs in (await c.getmany(timeout_ms=50)).values():
                records.extend(rs)
        if predicate(records):
            return records
    raise AssertionError(f"condition not met; assignments {[c.assignment() for c in consumers]}")


def _balanced(consumers, total: int) -> bool:
    owned = [c.assignment() for c in consumers]
    union = set().union(*owned)
    return len(union) == total and sum(map(len, owned)) == total and all(owned)


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
async def test_two_members_share_partitions(broker, strategy):
    topic = await _topic(broker.bootstrap, 4, 40)
    group = _name("g")
    l1, l2 = Recorder(), Recorder()
    c1 = await _consumer(broker.bootstrap, group, strategy).start()
    c2 = await _consumer(broker.bootstrap, group, strategy).start()
    try:
        c1.subscribe([topic], listener=l1)
        await _poll_until([c1], lambda rs: len(c1.assignment()) == 4)
        c2.subscribe([topic], listener=l2)
        records = await _poll_until([c1, c2], lambda rs: _balanced([c1, c2], 4))
        records += await _poll_until([c1, c2], lambda rs: True, 1)
        assert len(c1.assignment()) == 2 and len(c2.assignment()) == 2
        assert ("assigned", c2.assignment()) in l2.events or any(e == "assigned" for e, _ in l2.events)
        if strategy == "cooperative-sticky":
            # Cooperative: c1 gave up only what moved to c2 and never revoked what it kept.
            revoked = set().union(*(p for e, p in l1.events if e == "revoked"))
            assert revoked == c2.assignment()
        else:
            assert ("revoked", {TopicPartition(topic, p) for p in range(4)}) in l1.events
    finally:
        await c2.close()
    # c2 left the group on close: c1 takes every partition back.
    await _poll_until([c1], lambda rs: len(c1.assignment()) == 4)
    await c1.close()


async def test_auto_commit_and_resume_where_the_group_left_off(broker):
    topic = await _topic(broker.bootstrap, 2, 30)
    group = _name("g")
    async with _consumer(broker.bootstrap, group, auto_commit_interval_ms=100) as c:
        c.subscribe([topic])
        records = await _poll_until([c], lambda rs: len(rs) >= 30)
        assert len(records) == 30
        await asyncio.sleep(0.3)
    async with Admin(bootstrap_servers=broker.bootstrap) as admin:
        lag = await admin.group_lag(group)
    assert sorted((r.partition, r.committed, r.lag) for r in lag) == [(0, 15, 0), (1, 15, 0)]
    async with Producer(bootstrap_servers=broker.bootstrap) as producer:
        for i in range(4):
            await producer.send(topic, f"new-{i}", partition=i % 2)
        await producer.flush()
    async with _consumer(broker.bootstrap, group, enable_auto_commit=False) as c:
        c.subscribe([topic])
        records = await _poll_until([c], lambda rs: len(rs) >= 4)
        assert sorted(r.value for r in records) == [b"new-0", b"new-1", b"new-2", b"new-3"]
        await c.commit()
    async with Admin(bootstrap_servers=broker.bootstrap) as admin:
        offsets = await admin.list_group_offsets(group)
    assert sorted(om.offset for om in offsets.values()) == [17, 17]


async def test_pattern_subscription_follows_new_topics(broker):
    prefix = _name("pat")
    first = await _topic(broker.bootstrap, 1, 3, name=f"{prefix}-a")
    group = _name("g")
    async with _consumer(broker.bootstrap, group, metadata_max_age_ms=300) as c:
        c.subscribe(pattern=rf"{prefix}-.*")
        await _poll_until([c], lambda rs: len(rs) >= 3)
        assert c.subscription() == {first}
        second = await _topic(broker.bootstrap, 1, 2, name=f"{prefix}-b")
        records = await _poll_until([c], lambda rs: len(rs) >= 2)
        assert {r.topic for r in records} == {second}
        assert c.subscription() == {first, second}


async def test_member_survives_a_broker_restart(fresh_broker):
    topic = await _topic(fresh_broker.bootstrap, 2, 10)
    group = _name("g")
    async with _consumer(fresh_broker.bootstrap, group, request_timeout_ms=5_000,
                         auto_commit_interval_ms=200) as c:
        c.subscribe([topic])
        first = await _poll_until([c], lambda rs: len(rs) >= 10)
        assert len(first) == 10
        await c.commit()
        await asyncio.to_thread(fresh_broker.restart)
        async with Producer(bootstrap_servers=fresh_broker.bootstrap) as producer:
            for i in range(6):
                await producer.send(topic, f"after-{i}", partition=i % 2)
            await producer.flush()
        later = await _poll_until([c], lambda rs: len(rs) >= 6, timeout_s=30)
        assert sorted(r.value for r in later) == sorted(f"after-{i}".encode() for i in range(6))
