"""The bundled share consumer (odradek.client.ShareConsumer, client/share.py) against a real broker process:
several members on one partition, explicit RELEASE / REJECT, implicit acceptance on the next poll, close()
giving held records back at once, a bundled member and a confluent-kafka ShareConsumer in one group, and
`odradek consume --share` with `odradek group describe` showing its member.

One broker for the module; each test has its own topic and share group, whose GROUP configs it sets as an
operator would (`share.auto.offset.reset=earliest` so records produced before the members join are
delivered, a 60 s `share.record.lock.duration.ms` so that a record seen again within the test's waits came
back because it was released, not because its lock expired). Every wait is a poll loop with a deadline;
nothing asserts a duration.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka import ShareConsumer as ConfluentShareConsumer

from odradek.client import (
    AcknowledgeType, BlockingShareConsumer, Producer, ShareConsumer, ShareStateError, TopicPartition,
)
from tests.brokerproc import BrokerProcess
from tests.harness.groups import REPO_ROOT, create_topic, name, wait_for

pytestmark = pytest.mark.timeout(240)
LONG_LOCK_MS = 60000


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    # 1 s heartbeats: a member takes a new assignment on its next heartbeat.
    proc = BrokerProcess(tmp_path_factory.mktemp("share-client"), "group.share.min.heartbeat.interval.ms=1000",
                         "group.share.heartbeat.interval.ms=1000").start()
    yield proc
    proc.stop()


def cli(bootstrap: str, *args: str) -> str:
    env = dict(os.environ, PYTHONUNBUFFERED="1", ODRADEK_BOOTSTRAP_SERVERS=bootstrap)
    result = subprocess.run([sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=60,
                            env=env, cwd=REPO_ROOT)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def new_group(bootstrap: str, lock_ms: int = LONG_LOCK_MS) -> str:
    group = name("bsg")
    cli(bootstrap, "config", "set", "group", group, "share.auto.offset.reset=earliest",
        f"share.record.lock.duration.ms={lock_ms}")
    return group


def start_offsets(bootstrap: str, group: str) -> dict[int, int]:
    described = json.loads(cli(bootstrap, "--output", "json", "group", "describe", group))
    return {o["partition"]: o["start_offset"] for o in described["offsets"]}


async def wait_for_start(bootstrap: str, group: str, expected: dict[int, int], what: str, timeout_s: float = 30) -> None:
    """Wait (without blocking the loop the consumers' tasks run on) until the group's start offsets are these."""
    deadline = time.monotonic() + timeout_s
    while (found := await asyncio.to_thread(start_offsets, bootstrap, group)) != expected:
        assert time.monotonic() < deadline, f"timed out waiting for {what}: start offsets {found}"
        await asyncio.sleep(0.2)


async def produce_batches(bootstrap: str, topic: str, batches: int, size: int, prefix: str = "v") -> list[bytes]:
    """`batches` record batches of `size` records each into partition 0 (a leader acquires whole batches, so
    many small ones let several members share one partition)."""
    values = []
    async with Producer(bootstrap_servers=bootstrap, linger_ms=0) as producer:
        for b in range(batches):
            futures = []
            for i in range(size):
                value = f"{prefix}-{b}-{i}".encode()
                futures.append(await producer.send(topic, value, partition=0))
                values.append(value)
            await producer.flush()
            for f in futures:
                await f
    return values


def consumer(bootstrap: str, group: str, topic: str, client_id: str, **kw) -> ShareConsumer:
    return ShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id=client_id, **kw)


async def poll_until(c: ShareConsumer, want, timeout_s: float, what: str, on_records=None) -> list:
    got: list = []
    deadline = time.monotonic() + timeout_s
    while not want(got):
        assert time.monotonic() < deadline, f"timed out waiting for {what}; got {[(r.offset, r.delivery_count) for r in got]}"
        batch = await c.poll(timeout_ms=200)
        if on_records is not None:
            on_records(batch)
        got += batch
    return got


async def test_four_bundled_consumers_on_one_partition_each_record_delivered_once(broker):
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, 1, prefix="bshare")
    group = new_group(bootstrap)
    members = [consumer(bootstrap, group, topic, f"m{i}") for i in range(4)]
    for m in members:
        await m.start()
    got: dict[int, list] = {i: [] for i in range(4)}
    try:
        async def poll_all() -> None:
            batches = await asyncio.gather(*(m.poll(timeout_ms=100) for m in members))
            for i, records in enumerate(batches):
                got[i] += [(r.offset, r.value, r.delivery_count) for r in records]

        # Every member has joined (all four assigned the partition) before the records come.
        await wait_for_async(lambda: all(m.assignment() == {TopicPartition(topic, 0)} for m in members), 60,
                             "the four members assigned the partition", poll_all)
        produced: list[bytes] = []
        for n in range(30):  # while the four poll: each member's fetch finds some batches
            produced += await produce_batches(bootstrap, topic, 1, 3, prefix=f"r{n}")
            await poll_all()
        await wait_for_async(lambda: sum(len(v) for v in got.values()) >= len(produced), 60,
                             lambda: f"{sum(len(v) for v in got.values())} of {len(produced)} records", poll_all)
    finally:
        for m in members:
            await m.close()  # implicit mode: accepts what the last poll returned
    everything = [r for v in got.values() for r in v]
    assert sorted(r[1] for r in everything) == sorted(produced)  # each record once, none lost
    assert sorted(r[0] for r in everything) == list(range(len(produced)))
    assert {r[2] for r in everything} == {1}  # first deliveries only
    assert all(got.values()), {i: len(v) for i, v in got.items()}  # all four received records
    wait_for(lambda: start_offsets(bootstrap, group) == {0: len(produced)}, 30, "every record accepted")


async def wait_for_async(condition, timeout_s: float, what, step) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what() if callable(what) else what}"
        await step()


async def test_explicit_release_comes_back_with_count_2_and_reject_never(broker):
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, 1, prefix="bshare")
    group = new_group(bootstrap)
    await produce_batches(bootstrap, topic, 1, 3)
    tp = TopicPartition(topic, 0)
    async with consumer(bootstrap, group, topic, "explicit", share_acknowledgement_mode="explicit") as c:
        kinds = {0: AcknowledgeType.RELEASE, 1: AcknowledgeType.REJECT, 2: AcknowledgeType.ACCEPT}
        first = await poll_until(c, lambda g: len(g) >= 3, 60, "three records",
                                 on_records=lambda batch: [c.acknowledge(r, kinds[r.offset]) for r in batch])
        assert [(r.offset, r.delivery_count) for r in first] == [(0, 1), (1, 1), (2, 1)]
        assert await c.commit() == {tp: None}
        assert c.acquisition_lock_timeout_ms == LONG_LOCK_MS
        # Released: back at once (the 60 s lock has not expired), delivery count 2.
        again = await poll_until(c, lambda g: len(g) >= 1, 30, "the released record")
        assert [(r.offset, r.delivery_count) for r in again] == [(0, 2)]
        with pytest.raises(ShareStateError):  # explicit mode: a poll with a record unacknowledged
            await c.poll(timeout_ms=0)
        c.acknowledge(again[0], AcknowledgeType.ACCEPT)
        assert await c.commit() == {tp: None}
        # An acknowledgement the leader refuses is returned: offset 2 was accepted already.
        with pytest.raises(ShareStateError):
            c.acknowledge(first[2])
        await wait_for_start(bootstrap, group, {0: 3}, "the start offset past the three")
        assert await c.poll(timeout_ms=1000) == []  # the rejected record never comes back


async def test_implicit_mode_accepts_on_the_next_poll(broker):
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, 1, prefix="bshare")
    group = new_group(bootstrap)
    await produce_batches(bootstrap, topic, 1, 10)
    async with consumer(bootstrap, group, topic, "implicit") as c:
        got = await poll_until(c, lambda g: len(g) >= 10, 60, "ten records")
        assert [r.offset for r in got] == list(range(10))
        assert await asyncio.to_thread(start_offsets, bootstrap, group) == {0: 0}  # returned, not acknowledged yet
        await c.poll(timeout_ms=0)  # accepts the previous poll's records
        await wait_for_start(bootstrap, group, {0: 10}, "the ten accepted by the next poll")
        with pytest.raises(ShareStateError):  # implicit mode: acknowledge() is not for the caller
            c.acknowledge(got[0])


async def test_close_gives_held_records_back_at_once(broker):
    """A member holding ten records (three returned by its poll, seven fetched and buffered) closes: in
    implicit mode the three it returned are accepted, the seven are released at once (well inside the 60 s
    lock) and reach the next member with delivery count 2."""
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, 1, prefix="bshare")
    group = new_group(bootstrap)
    await produce_batches(bootstrap, topic, 1, 10)
    first = consumer(bootstrap, group, topic, "first")
    await first.start()
    try:
        got: list = []
        deadline = time.monotonic() + 60
        while not got:
            assert time.monotonic() < deadline, "the first member got nothing"
            got = await first.poll(timeout_ms=200, max_records=3)
        assert [(r.offset, r.delivery_count) for r in got] == [(0, 1), (1, 1), (2, 1)]
    finally:
        await first.close()
    async with consumer(bootstrap, group, topic, "second") as second:
        rest = await poll_until(second, lambda g: len(g) >= 7, 30, "the released records")
        assert [(r.offset, r.delivery_count) for r in rest] == [(o, 2) for o in range(3, 10)]
    wait_for(lambda: start_offsets(bootstrap, group) == {0: 10}, 30, "all ten accepted")


def test_a_bundled_and_a_confluent_consumer_in_one_group(broker):
    """The bundled member through its blocking facade and librdkafka's ShareConsumer poll in turn on one
    partition: both receive records, and each record reaches exactly one of them, once."""
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, 1, prefix="bshare")
    group = new_group(bootstrap)
    ours = BlockingShareConsumer(topic, bootstrap_servers=bootstrap, group_id=group, client_id="bundled")
    theirs = ConfluentShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "rdkafka",
                                     "log_level": 3})
    theirs.subscribe([topic])
    seen: dict[str, list] = {"bundled": [], "rdkafka": []}

    def poll_both() -> None:
        seen["bundled"] += [(r.offset, r.delivery_count) for r in ours.poll(timeout_ms=100)]
        for m in theirs.poll(0.1):
            assert m.error() is None, m.error()
            seen["rdkafka"].append((m.offset(), m.delivery_count()))

    try:
        wait_for(lambda: poll_both() or len(ours.assignment()) == 1, 60, "the bundled member assigned")
        produced = 0
        for n in range(30):
            produced += len(asyncio.run(produce_batches(bootstrap, topic, 1, 2, prefix=f"r{n}")))
            poll_both()
        wait_for(lambda: poll_both() or sum(map(len, seen.values())) >= produced, 60,
                 lambda: f"{sum(map(len, seen.values()))} of {produced} records: {seen}")
        described = json.loads(cli(bootstrap, "--output", "json", "group", "describe", group))
        assert sorted(m["client_id"] for m in described["members"]) == ["bundled", "rdkafka"]
    finally:
        ours.close()
        theirs.close()
    everything = seen["bundled"] + seen["rdkafka"]
    assert sorted(o for o, _ in everything) == list(range(produced))
    assert {c for _, c in everything} == {1}
    assert seen["bundled"] and seen["rdkafka"], {k: len(v) for k, v in seen.items()}


def test_cli_consume_share_prints_records_and_group_describe_shows_the_member(broker):
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, 1, prefix="bshare")
    group = new_group(bootstrap)
    asyncio.run(produce_batches(bootstrap, topic, 1, 5, prefix="a"))
    env = dict(os.environ, PYTHONUNBUFFERED="1", ODRADEK_BOOTSTRAP_SERVERS=bootstrap)
    proc = subprocess.Popen([sys.executable, "-m", "odradek", "--client-id", "cli-share", "consume", topic,
                             "--share", group, "--max-messages", "8", "-F", "{offset} {value} {delivery_count}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO_ROOT)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        wait_for(lambda: len(lines) >= 5, 60, lambda: f"five printed lines, got {lines}")
        described = json.loads(cli(bootstrap, "--output", "json", "group", "describe", group))
        assert described["type"] == "share"
        assert [(m["client_id"], m["assignment"]) for m in described["members"]] == [("cli-share", [[topic, 0]])]
        text = cli(bootstrap, "group", "describe", group)
        assert "cli-share" in text and f"{topic}-0" in text, text
        asyncio.run(produce_batches(bootstrap, topic, 1, 3, prefix="b"))
        assert proc.wait(60) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(10)
    values = [f"a-0-{i}" for i in range(5)] + [f"b-0-{i}" for i in range(3)]
    assert [line.strip() for line in lines] == [f"{o} {v} 1" for o, v in enumerate(values)]
    assert "accepted 8 record(s)" in proc.stderr.read()
    wait_for(lambda: start_offsets(bootstrap, group) == {0: 8}, 30, "the printed records accepted")
    # --release gives them back: delivered again with count 2 (and the group's start does not move)
    asyncio.run(produce_batches(bootstrap, topic, 1, 2, prefix="c"))
    out = cli(bootstrap, "consume", topic, "--share", group, "--release", "--max-messages", "2",
              "-F", "{offset} {delivery_count}")
    assert out.split("\n")[:2] == ["8 1", "9 1"]
    out = cli(bootstrap, "consume", topic, "--share", group, "--reject", "--max-messages", "2",
              "-F", "{offset} {delivery_count}")
    assert out.split("\n")[:2] == ["8 2", "9 2"]
    wait_for(lambda: start_offsets(bootstrap, group) == {0: 10}, 30, "the rejected records done")
