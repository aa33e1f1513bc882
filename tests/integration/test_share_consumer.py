"""Share groups end to end (KIP-932): confluent-kafka's `ShareConsumer` (librdkafka's share API) receives
records from a real broker process with `odradek.share.enabled=true` and acknowledges them, implicitly and
explicitly. This is the proof that the three parts work as one: the group coordinator's assignment
(ShareGroupHeartbeat), the partition leader's share-partition state (ShareFetch / ShareAcknowledge) and the
share coordinator's persisted state in `__share_group_state` (the restart at the end).

One broker for the module; each test has its own topic and group, and sets what it needs as the group's
share.* GROUP configs through the CLI (`odradek config set group G ...`), as an operator would:
`share.auto.offset.reset=earliest` so records produced before the consumers join are delivered, a short
`share.record.lock.duration.ms` where a lock must expire (above the broker's
`group.share.min.record.lock.duration.ms`, lowered to 1 s here) and a long one where it must not.

A redelivery "at once" is told apart from a lock expiry by the lock's length, not by timing the test: with a
60 s lock, a record seen again within the 30 s the test waits came back because it was released. Every wait
is a poll loop with a generous deadline; nothing asserts a duration.

The checker (a bounded slice by default, a long run with ODRADEK_LONG=1) kills consumers at random while they
work: every record ends accepted exactly once (the broker's accept counter) or archived at the limit.

The restart test is last: it stops and starts the module's broker on the same data directory.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer

from tests.brokerproc import BrokerProcess
from tests.harness.groups import REPO_ROOT, create_topic, name, produce, wait_for
from tests.harness.processes import free_port_block

pytestmark = pytest.mark.timeout(240)
SHORT_LOCK_MS = 2000  # a lock meant to expire
LONG_LOCK_MS = 60000  # a lock that must not expire while the test runs


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    # 1 s heartbeats (members take a new assignment on their next heartbeat); the lock bounds lowered so a
    # group may ask for a 2 s lock; the broker's own default lock stays Kafka's 30 s.
    proc = BrokerProcess(tmp_path_factory.mktemp("share-consumer"), "odradek.share.enabled=true",
                         "group.share.min.heartbeat.interval.ms=1000", "group.share.heartbeat.interval.ms=1000",
                         "group.share.min.record.lock.duration.ms=1000",
                         f"metrics.port={free_port_block(1)}", "metrics.host=127.0.0.1").start()
    yield proc
    proc.stop()


def cli(bootstrap: str, *args: str) -> str:
    env = dict(os.environ, PYTHONUNBUFFERED="1", ODRADEK_BOOTSTRAP_SERVERS=bootstrap)
    result = subprocess.run([sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=60,
                            env=env, cwd=REPO_ROOT)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def new_group(bootstrap: str, **configs: object) -> str:
    """A new share group id with its GROUP configs set (before any member joins: Kafka keeps configs of a
    group that does not exist yet, and the leader reads them when it first loads a share-partition)."""
    group = name("sg")
    pairs = [f"{k.replace('_', '.')}={v}" for k, v in {"share_auto_offset_reset": "earliest", **configs}.items()]
    cli(bootstrap, "config", "set", "group", group, *pairs)
    return group


def consumer(bootstrap: str, group: str, topic: str, client_id: str, explicit: bool = False) -> ShareConsumer:
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id, "log_level": 3,
                       "share.acknowledgement.mode": "explicit" if explicit else "implicit"})
    c.subscribe([topic])
    return c


def records(messages) -> list:
    """The records of a poll (errors are failures: a share consumer reports nothing expected as an error)."""
    out = []
    for m in messages:
        assert m.error() is None, m.error()
        out.append(m)
    return out


def poll_until(c: ShareConsumer, want, timeout_s: float, what: str, on_records=None) -> list:
    """Poll `c` until `want(all records so far)` holds; returns the records. `on_records(batch)` runs on each
    poll's records (explicit mode must acknowledge them before the next poll)."""
    got: list = []
    deadline = time.monotonic() + timeout_s
    while not want(got):
        assert time.monotonic() < deadline, f"timed out waiting for {what}; got {[(m.partition(), m.offset(), m.delivery_count()) for m in got]}"
        batch = records(c.poll(0.5))
        if on_records is not None:
            on_records(batch)
        got += batch
    return got


def test_six_consumers_on_two_partitions_each_record_delivered_once(broker):
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, 2, prefix="share")
    group = new_group(bootstrap, share_record_lock_duration_ms=LONG_LOCK_MS)
    consumers = [consumer(bootstrap, group, topic, f"sc{i}") for i in range(6)]
    per_consumer: dict[int, list] = {i: [] for i in range(6)}

    def poll_all() -> None:
        for i, c in enumerate(consumers):
            per_consumer[i] += [(m.partition(), m.offset(), m.value(), m.delivery_count()) for m in records(c.poll(0.05))]

    # Records come in many small batches while the six poll, so each member's ShareFetch finds some: a
    # leader acquires whole batches, and one member would otherwise take a partition's only batch.
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    produced = []
    for n in range(30):
        for partition in (0, 1):
            for k in range(2):
                value = f"p{partition}-{n}-{k}".encode()
                producer.produce(topic, value, partition=partition)
                produced.append(value)
        assert producer.flush(15) == 0
        poll_all()
    wait_for(lambda: poll_all() or sum(len(v) for v in per_consumer.values()) >= len(produced), 60,
             lambda: f"{sum(len(v) for v in per_consumer.values())} of {len(produced)} records")
    everything = [r for v in per_consumer.values() for r in v]
    assert sorted(r[2] for r in everything) == sorted(produced)  # each record once, none lost
    assert {r[3] for r in everything} == {1}  # first deliveries only
    assert all(per_consumer.values()), {i: len(v) for i, v in per_consumer.items()}  # all six received
    for p in (0, 1):  # each partition's offsets, once each, across the members
        offsets = sorted(r[1] for r in everything if r[0] == p)
        assert offsets == list(range(len(produced) // 2))
    # Implicit mode accepted them (on the next poll): nothing comes back. close() sends the last acks.
    for c in consumers:
        c.close()
    offsets = {o["partition"]: o["start_offset"] for o in json.loads(cli(bootstrap, "--output", "json", "group",
                                                                         "describe", group))["offsets"]}
    assert offsets == {0: len(produced) // 2, 1: len(produced) // 2}, offsets


VICTIM = """
import json, sys, time
from confluent_kafka import ShareConsumer
spec = json.loads(sys.argv[1])
c = ShareConsumer({"bootstrap.servers": spec["bootstrap"], "group.id": spec["group"], "client.id": "victim",
                   "share.acknowledgement.mode": "explicit", "log_level": 3})
c.subscribe([spec["topic"]])
got = []
while len(got) < spec["want"]:
    got += [m.offset() for m in c.poll(0.5) if m.error() is None]
print(json.dumps(got), flush=True)
time.sleep(600)  # holds its acquired records until killed
"""


def _victim(bootstrap: str, group: str, topic: str, want: int) -> subprocess.Popen:
    """A share consumer in a child process that acquired `want` records (all of them) and holds them."""
    victim = subprocess.Popen([sys.executable, "-c", VICTIM, json.dumps({"bootstrap": bootstrap, "group": group,
                                                                          "topic": topic, "want": want})],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)
    line = victim.stdout.readline()
    if not line:
        victim.kill()
        pytest.fail(f"the victim got nothing: {victim.stderr.read()}")
    assert sorted(json.loads(line)) == list(range(want))
    return victim


def _take_over(bootstrap: str, group: str, topic: str, want: int, timeout_s: float) -> list:
    """A survivor's (offset, delivery count) of the `want` records it gets, accepted."""
    survivor = consumer(bootstrap, group, topic, "survivor", explicit=True)
    try:
        got = poll_until(survivor, lambda g: len(g) >= want, timeout_s, "the victim's records",
                         on_records=lambda batch: [survivor.acknowledge(m) for m in batch])
        survivor.commit_sync(30)
        return sorted((m.offset(), m.delivery_count()) for m in got)
    finally:
        survivor.close()


def test_records_of_a_frozen_consumer_come_back_when_their_lock_expires(broker):
    """SIGSTOP: the victim's connection stays open, so only the acquisition lock can free its records; then
    kill -9. The wait (20 s) is below the broker's default lock (30 s): the group's own 2 s lock is the one
    the leader applied (share.record.lock.duration.ms as a GROUP config)."""
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, 1, prefix="share")
    group = new_group(bootstrap, share_record_lock_duration_ms=SHORT_LOCK_MS)
    produce(bootstrap, topic, {0: 10})
    victim = _victim(bootstrap, group, topic, 10)
    try:
        os.kill(victim.pid, signal.SIGSTOP)
        assert _take_over(bootstrap, group, topic, 10, 20) == [(o, 2) for o in range(10)]
    finally:
        victim.kill()
        victim.wait()


def test_records_of_a_killed_consumer_come_back_when_its_connection_closes(broker):
    """kill -9 with a 60 s lock: the records are back well before it expires, because the victim's
    connection closed and, as in Kafka 4.1+ (the share session cache's disconnect listener), the leader ends
    its share session and releases what the member held."""
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, 1, prefix="share")
    group = new_group(bootstrap, share_record_lock_duration_ms=LONG_LOCK_MS)
    produce(bootstrap, topic, {0: 10})
    victim = _victim(bootstrap, group, topic, 10)
    victim.kill()
    victim.wait()
    assert _take_over(bootstrap, group, topic, 10, 30) == [(o, 2) for o in range(10)]
    assert "share session ended with its connection" in broker.log_text()


def test_explicit_release_reject_and_the_delivery_limit(broker):
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, 1, prefix="share")
    group = new_group(bootstrap, share_record_lock_duration_ms=LONG_LOCK_MS, share_delivery_count_limit=2)
    produce(bootstrap, topic, {0: 3})
    c = consumer(bootstrap, group, topic, "explicit", explicit=True)
    try:
        kinds = {0: AcknowledgeType.RELEASE, 1: AcknowledgeType.REJECT, 2: AcknowledgeType.ACCEPT}
        first = poll_until(c, lambda g: len(g) >= 3, 60, "three records",
                           on_records=lambda batch: [c.acknowledge(m, kinds[m.offset()]) for m in batch])
        assert [(m.offset(), m.delivery_count()) for m in first] == [(0, 1), (1, 1), (2, 1)]
        c.commit_sync(30)
        # Released: back at once (the 60 s lock has not expired), delivery count 2; released again at the
        # limit of 2 it is archived.
        again = poll_until(c, lambda g: len(g) >= 1, 30, "the released record",
                           on_records=lambda batch: [c.acknowledge(m, AcknowledgeType.RELEASE) for m in batch])
        assert [(m.offset(), m.delivery_count()) for m in again] == [(0, 2)]
        c.commit_sync(30)
        # Archived (0), rejected (1), accepted (2): the share-partition's start moved past all three, and
        # nothing is delivered again.
        wait_for(lambda: {o["partition"]: o["start_offset"] for o in json.loads(
            cli(bootstrap, "--output", "json", "group", "describe", group))["offsets"]} == {0: 3}, 30,
            "the share-partition start offset at 3")
        assert records(c.poll(1.0)) == []
    finally:
        c.close()


WORKER = """
import json, sys, time
from confluent_kafka import AcknowledgeType, ShareConsumer
spec = json.loads(sys.argv[1])
c = ShareConsumer({"bootstrap.servers": spec["bootstrap"], "group.id": spec["group"], "client.id": spec["id"],
                   "share.acknowledgement.mode": "explicit", "log_level": 3, "max.poll.records": 10})
c.subscribe([spec["topic"]])
while True:
    for m in c.poll(0.5):
        if m.error() is None:
            value = m.value().decode()
            print(json.dumps([value, m.delivery_count()]), flush=True)  # before its acknowledgement is sent
            time.sleep(spec["work_s"])  # the work: kills land while records are held
            c.acknowledge(m, AcknowledgeType.RELEASE if value.startswith("poison") else AcknowledgeType.ACCEPT)
"""
LONG = os.environ.get("ODRADEK_LONG") == "1"


class Worker:
    """A share consumer in a child process (kill -9 at any point): ACCEPTs every record but the poison ones,
    which it RELEASEs every time; prints each delivery before acknowledging it."""

    def __init__(self, bootstrap: str, group: str, topic: str, ident: str, seen: list) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, json.dumps(
            {"bootstrap": bootstrap, "group": group, "topic": topic, "id": ident, "work_s": 0.02})], stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, text=True, cwd=REPO_ROOT)
        self.reader = threading.Thread(target=self._read, args=(seen,), daemon=True)
        self.reader.start()

    def _read(self, seen: list) -> None:
        for line in self.proc.stdout:
            seen.append(tuple(json.loads(line)))

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.reader.join(10)


def _metric(broker: BrokerProcess, series: str) -> float:
    port = next(o.split("=")[1] for o in broker.overrides if o.startswith("metrics.port="))
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    m = re.search(rf"^{re.escape(series)} ([0-9.e+]+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def test_checker_with_consumer_kills_every_record_accepted_once_or_archived_at_the_limit(broker):
    """Three workers on two partitions, one killed (-9) and replaced every couple of seconds. At the end
    each share-partition's start offset is its log end (nothing left in flight), every good record was
    delivered and accepted exactly once in the broker's count (a delivery to a killed worker comes back,
    with a higher count), and every poison record was archived at the delivery-count limit (3)."""
    bootstrap = broker.bootstrap
    records_n, kills = (8000, 40) if LONG else (600, 4)
    limit = 3
    topic = create_topic(bootstrap, 2, prefix="share")
    group = new_group(bootstrap, share_record_lock_duration_ms=10000, share_delivery_count_limit=limit)
    values = [f"poison-{i}" if i % 20 == 7 else f"good-{i}" for i in range(records_n)]
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 100})
    for i, v in enumerate(values):  # batches of 10 (a leader acquires whole batches)
        producer.produce(topic, v.encode(), partition=i % 2)
        if i % 20 == 19:
            assert producer.flush(30) == 0
    assert producer.flush(30) == 0
    accepted_before = _metric(broker, 'odradek_share_acknowledgements_total{type="accept"}')
    archived_before = _metric(broker, "odradek_share_archived_at_limit_total")

    rng = random.Random(28)
    seen: list = []
    workers = [Worker(bootstrap, group, topic, f"w{i}", seen) for i in range(3)]
    per_partition = {0: (records_n + 1) // 2, 1: records_n // 2}

    def done() -> bool:
        described = json.loads(cli(bootstrap, "--output", "json", "group", "describe", group))
        return {o["partition"]: o["start_offset"] for o in described["offsets"]} == per_partition
    try:
        for k in range(kills):
            time.sleep(rng.uniform(0.5, 2.5))
            victim = workers.pop(rng.randrange(len(workers)))
            victim.kill()
            workers.append(Worker(bootstrap, group, topic, f"r{k}", seen))
        wait_for(done, 600 if LONG else 90, "every share-partition's start offset at its log end", interval_s=1)
    finally:
        for w in workers:
            w.kill()
    delivered: dict[str, list[int]] = {}
    for value, count in seen:
        delivered.setdefault(value, []).append(count)
    good = [v for v in values if v.startswith("good")]
    poison = [v for v in values if v.startswith("poison")]
    print(f"checker: {records_n} records, {kills} kills, {len(seen)} deliveries, "
          f"{sum(1 for v in good if max(delivered[v]) > 1)} good records redelivered")
    assert not set(values) - set(delivered) - set(poison), "records never delivered"
    assert all(max(c) <= limit for c in delivered.values()), "a record delivered beyond the limit"
    assert _metric(broker, 'odradek_share_acknowledgements_total{type="accept"}') - accepted_before == len(good)
    assert _metric(broker, "odradek_share_archived_at_limit_total") - archived_before == len(poison)


def test_after_a_broker_restart_acknowledged_records_stay_and_the_rest_come_back(broker):
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, 1, prefix="share")
    group = new_group(bootstrap, share_record_lock_duration_ms=LONG_LOCK_MS)
    produce(bootstrap, topic, {0: 20})
    c = consumer(bootstrap, group, topic, "before", explicit=True)
    # Accept 0-9 and 15, leave the rest acquired (unacknowledged) when the broker goes down.
    accepted = set(range(10)) | {15}
    got = poll_until(c, lambda g: len(g) >= 20, 60, "twenty records",
                     on_records=lambda batch: [c.acknowledge(m) for m in batch if m.offset() in accepted])
    assert sorted(m.offset() for m in got) == list(range(20))
    c.commit_sync(30)
    broker.stop()  # SIGTERM, with 16-19 and 10-14 still acquired by `c`
    broker.start()
    c.close()
    after = consumer(bootstrap, group, topic, "after", explicit=True)
    try:
        rest = sorted(set(range(20)) - accepted)
        again = poll_until(after, lambda g: len(g) >= len(rest), 60, "the unacknowledged records",
                           on_records=lambda batch: [after.acknowledge(m) for m in batch])
        assert sorted(m.offset() for m in again) == rest
        after.commit_sync(30)
        assert records(after.poll(1.0)) == []
    finally:
        after.close()
