"""The exactly-once sink protocol (pipeline/sink.py) against an in-memory Kafka: replays after a commit,
after a publish without commit, and after a crash in the middle of a task publish nothing twice."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

import pytest

from odradek.pipeline.sink import (
    TAG_HEADER,
    MarkerLog,
    TaskOutcome,
    commit_batch,
    committed_batch,
    publish_task,
    row_digest,
)

COMMITS = "_commits"


@dataclass
class Rec:
    key: bytes | None
    value: bytes | None
    headers: list = field(default_factory=list)


class Crash(Exception):
    pass


class FakeKafka:
    """Topics as lists of records per partition. `crash_after` fails a send after that many data records."""

    def __init__(self, partitions: int = 3):
        self.default_partitions = partitions
        self.topics: dict[str, list[list[Rec]]] = {}
        self.queued: list[tuple] = []
        self.crash_after: int | None = None
        self.data_sent = 0
        self._rr = 0

    # SinkIO
    def marker_topic(self) -> str:
        return COMMITS

    def marker_partitions(self) -> int:
        self.topics.setdefault(COMMITS, [[]])
        return len(self.topics[COMMITS])

    def partitions(self, topic: str) -> list[int]:
        return list(range(len(self.topics.get(topic, []))))

    def end_offsets(self, topic: str, partitions: list[int]) -> dict[int, int]:
        return {p: len(self.topics[topic][p]) for p in partitions}

    def scan(self, topic: str, partition: int, start: int, end: int):
        return list(self.topics[topic][partition][start:end])

    def send(self, rows: list[tuple]) -> None:
        for topic, partition, key, value, headers in rows:
            if topic != COMMITS and self.crash_after is not None and self.data_sent >= self.crash_after:
                raise Crash(f"crashed after {self.data_sent} records")
            parts = self.topics.setdefault(topic, [[] for _ in range(self.default_partitions)])
            if partition is None:
                partition = self._rr % len(parts)  # keyless: any partition, as a sticky partitioner may pick
                self._rr += 1
            parts[partition].append(Rec(key, value, list(headers)))
            if topic != COMMITS:
                self.data_sent += 1

    def flush(self) -> None:
        pass

    # helpers
    def data(self, topic: str) -> Counter:
        """Multiset of (key, value, user headers) in `topic`."""
        out: Counter = Counter()
        for part in self.topics.get(topic, []):
            for r in part:
                out[(r.key, r.value, tuple(h for h in r.headers if h[0] != TAG_HEADER))] += 1
        return out


def rows(n: int, topic: str = "out", *, start: int = 0, dup_every: int | None = None) -> list[tuple]:
    out = []
    for i in range(start, start + n):
        value = b"v%d" % (i // dup_every if dup_every else i)
        out.append((topic, None, b"k%d" % (i % 7), value, [("h", b"x")] if i % 3 == 0 else []))
    return out


def expected(all_rows: list[tuple]) -> Counter:
    return Counter((key, value, tuple(headers)) for _, _, key, value, headers in all_rows)


def run_batch(kafka: FakeKafka, query: str, batch: int, tasks: dict[int, list[tuple]]) -> list[TaskOutcome]:
    return [publish_task(kafka, query, batch, task, iter(r)) for task, r in tasks.items()]


def test_normal_batches_publish_everything_once_and_commit():
    kafka = FakeKafka()
    b0 = {0: rows(10), 1: rows(5, start=10)}
    outcomes = run_batch(kafka, "q", 0, b0)
    commit_batch(kafka, "q", 0, outcomes)
    b1 = {0: rows(4, start=100)}
    commit_batch(kafka, "q", 1, run_batch(kafka, "q", 1, b1))
    assert kafka.data("out") == expected(b0[0] + b0[1] + b1[0])
    entries = MarkerLog(kafka).load(0)
    assert committed_batch(entries, "q") == 1
    assert not [k for k in entries if k.startswith("i/")], "intents are tombstoned at commit"
    assert sum(o.published for o in outcomes) == 15


def test_replay_of_a_committed_batch_publishes_nothing():
    kafka = FakeKafka()
    b0 = {0: rows(10), 1: rows(5, start=10)}
    commit_batch(kafka, "q", 0, run_batch(kafka, "q", 0, b0))
    again = run_batch(kafka, "q", 0, b0)  # Spark crashed before writing commits/0
    commit_batch(kafka, "q", 0, again)
    assert all(o.batch_was_committed and o.published == 0 for o in again)
    assert kafka.data("out") == expected(b0[0] + b0[1])


def test_replay_after_publish_without_commit_publishes_nothing():
    kafka = FakeKafka()
    b0 = {0: rows(10), 1: rows(5, start=10)}
    run_batch(kafka, "q", 0, b0)  # tasks published; the driver died before commit()
    shuffled = {t: random.Random(t).sample(r, len(r)) for t, r in b0.items()}  # order may differ on replay
    again = run_batch(kafka, "q", 0, shuffled)
    commit_batch(kafka, "q", 0, again)
    assert [o.published for o in again] == [0, 0]
    assert [o.duplicates for o in again] == [10, 5]
    assert kafka.data("out") == expected(b0[0] + b0[1])


@pytest.mark.parametrize("crash_after", [0, 1, 7, 2_500])
def test_crash_in_the_middle_of_a_task_then_retry_completes_exactly(crash_after):
    kafka = FakeKafka()
    task_rows = rows(3_000, dup_every=3)  # identical rows in the input must all be published
    kafka.crash_after = crash_after
    with pytest.raises(Crash):
        publish_task(kafka, "q", 4, 0, iter(task_rows))
    assert kafka.data_sent == crash_after
    kafka.crash_after = None
    outcome = publish_task(kafka, "q", 4, 0, iter(task_rows))
    assert outcome.duplicates == crash_after
    assert outcome.published == 3_000 - crash_after
    commit_batch(kafka, "q", 4, [outcome])
    assert kafka.data("out") == expected(task_rows)


def test_several_topics_and_explicit_partitions():
    kafka = FakeKafka()
    mixed = [("a", 1, b"k", b"same", []), ("b", None, b"k", b"same", []), ("a", 2, b"k", b"same", []),
             ("b", 0, None, b"x", [("h", None)])]
    kafka.crash_after = 2
    with pytest.raises(Crash):
        publish_task(kafka, "q", 0, 3, iter(mixed))
    kafka.crash_after = None
    outcome = publish_task(kafka, "q", 0, 3, iter(mixed))
    assert (outcome.duplicates, outcome.published) == (2, 2)
    commit_batch(kafka, "q", 0, [outcome])
    # "same" went to a-1 and a-2 once each: the partition asked for is part of the identity
    assert [len(p) for p in kafka.topics["a"]] == [0, 1, 1]
    assert sum(len(p) for p in kafka.topics["b"]) == 2


def test_queries_and_tasks_do_not_see_each_other():
    kafka = FakeKafka()
    same = rows(6)
    run_batch(kafka, "q1", 0, {0: same})
    outcome = publish_task(kafka, "q2", 0, 0, iter(same))  # another query: its own rows, not duplicates
    assert outcome.published == 6
    outcome = publish_task(kafka, "q1", 0, 1, iter(same))  # another task of q1
    assert outcome.published == 6
    assert sum(kafka.data("out").values()) == 18


def test_marker_log_cache_reads_incrementally():
    kafka = FakeKafka()
    log = MarkerLog(kafka, cache_key="test-cache")
    log.write(0, [("q/a", {"batch": 1})])
    assert committed_batch(log.load(0), "a") == 1
    log.write(0, [("q/a", {"batch": 2}), ("q/b", {"batch": 0})])
    scans = []
    original = kafka.scan
    kafka.scan = lambda t, p, s, e: scans.append((s, e)) or original(t, p, s, e)
    entries = log.load(0)
    assert committed_batch(entries, "a") == 2 and committed_batch(entries, "b") == 0
    assert scans == [(1, 3)]


def test_row_digest_distinguishes_fields():
    base = row_digest(b"k", b"v", [("h", b"1")], None)
    assert base == row_digest(b"k", b"v", [("h", b"1")], None)
    assert len({base, row_digest(None, b"v", [("h", b"1")], None), row_digest(b"k", b"v", [], None),
                row_digest(b"k", b"v", [("h", None)], None), row_digest(b"k", b"v", [("h", b"1")], 0),
                row_digest(b"kv", b"", [("h", b"1")], None), row_digest(b"", b"kv", [("h", b"1")], None)}) == 7
