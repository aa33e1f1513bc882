"""Kafka Streams 4.4 against a 3-node Odradek cluster: Kafka's quickstart word count, at least once and
exactly_once_v2, the second through a kill -9 of a node.

The application (tests/jvm/streams/src/WordCount.java, run by tests/harness/streams.py) reads lines from
`lines`, re-keys every word (a repartition topic), counts them in a RocksDB store (a compacted changelog
topic) and writes each new count to `counts`: everything a Streams application asks of a broker (its
internal topics created through the admin client with their configs, a classic consumer group with
Streams' own assignor, the repartition topic purged with DeleteRecords, and with exactly_once_v2 one
transactional producer per thread committing offsets in its transactions). Internal topics are RF=3.

What is checked is what a user of the counts would see, read with read_committed from the start:
- every word's last count is the number of times it was sent (no update lost, none applied twice);
- every word's counts rise one update at a time, never above that number (exactly once: an update replayed
  after the kill would show as a count past the total or out of order).
The lines are sent by an idempotent producer with acks=all whose every send is acknowledged, so the
totals are known. Default run: one clean at-least-once round, and one exactly-once round through a kill of a
node that is not the one the test talks to; ODRADEK_LONG=1 adds rounds that kill every node in turn.
"""

from __future__ import annotations

import collections
import os
import signal
import time
import uuid

import pytest

from tests.harness.processes import Cluster
from tests.harness.streams import StreamsApp, streams_classpath

pytestmark = pytest.mark.timeout(600)

WORDS = [f"w{i:02d}" for i in range(12)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cp = streams_classpath()  # before the cluster: a missing Maven Central fails here, loudly
    c = Cluster(tmp_path_factory.mktemp("streams") / "cluster", 3)
    c.up()
    c.cp = cp
    c.workdir = tmp_path_factory.mktemp("streams-apps")
    yield c
    c.down()


def _bootstrap(cluster: Cluster) -> str:
    return ",".join(cluster.bootstrap(n) for n in (1, 2, 3))


def _create(cluster: Cluster, *names: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": _bootstrap(cluster)})
    for future in admin.create_topics([NewTopic(n, 3, 3) for n in names], request_timeout=30).values():
        future.result(60)


def _send_lines(cluster: Cluster, topic: str, first: int, count: int, expected: collections.Counter) -> None:
    """`count` lines of four words each, every send acknowledged (idempotent, acks=all); adds to `expected`."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": _bootstrap(cluster), "enable.idempotence": True, "acks": "all",
                         "linger.ms": 5, "message.timeout.ms": 120000})
    failed = []
    for i in range(first, first + count):
        words = [WORDS[(i * 7 + k * 5) % len(WORDS)] for k in range(4)]
        producer.produce(topic, " ".join(words).encode(), key=str(i).encode(),
                         on_delivery=lambda err, msg: err is not None and failed.append(err))
        expected.update(words)
        producer.poll(0)
    assert producer.flush(120) == 0 and not failed, failed[:3]


def _counts(cluster: Cluster, topic: str) -> dict[str, list[int]]:
    """Every count written to `topic`, per word in offset order, read_committed from the beginning."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": _bootstrap(cluster), "group.id": f"check-{uuid.uuid4().hex[:8]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        parts = [TopicPartition(topic, p) for p in range(3)]
        ends = {}
        for tp in parts:
            _, high = consumer.get_watermark_offsets(tp, timeout=30)
            ends[tp.partition] = high
        consumer.assign([TopicPartition(topic, p, 0) for p in range(3)])
        seen: dict[str, list[int]] = collections.defaultdict(list)
        position = {p: 0 for p in range(3)}
        deadline = time.monotonic() + 60
        while any(position[p] < ends[p] for p in position) and time.monotonic() < deadline:
            for msg in consumer.consume(1000, timeout=0.5):
                if msg.error():
                    continue
                position[msg.partition()] = msg.offset() + 1
                seen[msg.key().decode()].append(int.from_bytes(msg.value(), "big", signed=True))
            # A read_committed consumer stops at the LSO: what is past it is not committed yet.
            for tp in consumer.position([TopicPartition(topic, p) for p in range(3)]):
                if tp.offset >= 0:
                    position[tp.partition] = max(position[tp.partition], tp.offset)
        return seen
    finally:
        consumer.close()


def _wait_for_totals(cluster: Cluster, topic: str, expected: collections.Counter, app: StreamsApp,
                     timeout_s: float = 180.0) -> dict[str, list[int]]:
    deadline = time.monotonic() + timeout_s
    while True:
        seen = _counts(cluster, topic)
        last = {word: counts[-1] for word, counts in seen.items()}
        if last == dict(expected):
            return seen
        over = {w: c for w, c in last.items() if c > expected[w]}
        assert not over, f"counts past the totals (an update applied twice): {over}, expected {dict(expected)}"
        assert app.proc.poll() is None, f"the Streams app exited:\n{app.tail()}"
        assert time.monotonic() < deadline, (f"counts not at the totals after {timeout_s:.0f} s: {last} != "
                                             f"{dict(expected)}\n{app.tail()}")
        time.sleep(1.0)


def _check_exactly_once(seen: dict[str, list[int]], expected: collections.Counter) -> None:
    """Each word's counts, in the order they were written, rise and end at the total: with the cache off,
    every update of a word is one more (a line holding the word twice gives two updates)."""
    for word, counts in seen.items():
        assert counts == sorted(counts) and len(set(counts)) == len(counts), f"{word}: counts not rising: {counts}"
        assert counts[-1] == expected[word], (word, counts[-1], expected[word])
        assert counts == list(range(1, expected[word] + 1)), f"{word}: an update missing or twice: {counts}"


def _app(cluster: Cluster, guarantee: str, tag: str) -> tuple[StreamsApp, str, str]:
    lines, counts = f"lines-{tag}", f"counts-{tag}"
    _create(cluster, lines, counts)
    app = StreamsApp(cluster.cp, "WordCount", [_bootstrap(cluster), f"wordcount-{tag}", lines, counts, guarantee,
                                                 str(cluster.workdir / tag), "3"], cluster.workdir)
    return app, lines, counts


def test_word_count_at_least_once(cluster):
    app, lines, counts = _app(cluster, "at_least_once", "alo")
    try:
        expected: collections.Counter = collections.Counter()
        _send_lines(cluster, lines, 0, 500, expected)
        app.wait_state("RUNNING")
        _send_lines(cluster, lines, 500, 500, expected)
        seen = _wait_for_totals(cluster, counts, expected, app)
        _check_exactly_once(seen, expected)  # no fault: at least once is exactly once here
    finally:
        app.stop()
    assert not app.errors, app.errors


def _kill_rounds() -> list[int]:
    return [2, 3, 1] if os.environ.get("ODRADEK_LONG") == "1" else [2]


def test_word_count_exactly_once_through_a_kill(cluster):
    app, lines, counts = _app(cluster, "exactly_once_v2", "eos")
    expected: collections.Counter = collections.Counter()
    sent = 0
    try:
        _send_lines(cluster, lines, 0, 600, expected)
        sent = 600
        app.wait_state("RUNNING")
        for victim in _kill_rounds():
            # Mid-stream: the app has started counting (a transaction is likely open) when the node goes.
            cluster.wait(lambda: sum(len(c) for c in _counts(cluster, counts).values()) > 0, "the first counts", 120)
            os.kill(cluster.pid(victim), signal.SIGKILL)
            _send_lines(cluster, lines, sent, 600, expected)
            sent += 600
            cluster.up()  # the killed node back, with its data
            _send_lines(cluster, lines, sent, 300, expected)
            sent += 300
            seen = _wait_for_totals(cluster, counts, expected, app)
            _check_exactly_once(seen, expected)
        assert app.states[-1] == "RUNNING", app.states
    finally:
        app.stop()
    print(f"exactly_once_v2: {sent} lines, {sum(expected.values())} words counted exactly once through "
          f"{len(_kill_rounds())} kill(s); app states {app.states}; uncaught {app.errors}")
