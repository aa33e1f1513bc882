"""The exactly-once sink's task protocol (pipeline/sink.py) against a real broker process, without Spark:
attempts of one task that overlap are ordered by InitProducerId, so their rows are committed once.

Spark's local mode runs no speculative copies and no second executor, so these interleavings cannot be
made with real Spark here; each attempt below has its own producer (its own client settings, as if in
another executor), and the steps are driven one at a time.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest

from odradek.client.blocking import BlockingAdmin, BlockingConsumer
from odradek.client.errors import KafkaError
from odradek.pipeline import _kafka
from odradek.pipeline.options import SinkOptions
from odradek.pipeline.sink import KafkaTaskTransaction, progress_group, transactional_id, write_task
from odradek.protocol.errors import ErrorCode

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def admin(broker):
    a = BlockingAdmin(bootstrap_servers=broker.bootstrap)
    yield a
    a.close()
    _kafka.close_all()


def attempt(broker, query: str, task: int, name: str) -> KafkaTaskTransaction:
    """One attempt's transaction, on a producer of its own (a distinct client.id is a distinct cache entry)."""
    options = SinkOptions.parse({"kafka.bootstrap.servers": broker.bootstrap, "kafka.client.id": name,
                                 "sink.commitTopic": "_sink-fencing-commits"}, streaming=True)
    return KafkaTaskTransaction(options.client, transactional_id(query, task), progress_group(query, task),
                                options.commit_topic)


def read(broker, admin, topic: str, isolation_level: str) -> Counter:
    tps = admin.topic_partitions(topic)
    ends = admin.end_offsets(tps)
    consumer = BlockingConsumer(bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest",
                                isolation_level=isolation_level)
    try:
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        values: Counter = Counter()
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "reading back timed out"
            for records in consumer.poll(timeout_ms=500).values():
                values.update(r.value for r in records)
        return values
    finally:
        consumer.close()


def rows(topic: str, n: int, start: int = 0) -> list[tuple]:
    return [(topic, i % 2, b"k%d" % i, b"v%d" % i, []) for i in range(start, start + n)]


def test_overlapping_attempts_of_a_task_commit_its_rows_once(broker, admin):
    query, topic = uuid.uuid4().hex, f"sink-fencing-{uuid.uuid4().hex[:8]}"
    admin.create_topic(topic, 2, 1)
    batch0 = rows(topic, 50)

    # The original attempt has sent its rows (they reach the log) and has not committed yet ...
    original = attempt(broker, query, 0, "original")
    original.init()
    assert original.next_batch() == 0
    original.begin()
    original.send(batch0)
    original._run(original._producer.flush())
    # ... when a copy starts: its InitProducerId aborts the original's transaction and fences it.
    copy = write_task(attempt(broker, query, 0, "copy"), query, 0, 0, iter(batch0))
    assert copy.published == 50
    with pytest.raises(KafkaError) as refused:
        original.commit(1)
    assert refused.value.code in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH)

    # A retry after the copy committed, and a zombie of batch 0 after batch 1 ran, both skip.
    assert write_task(attempt(broker, query, 0, "retry"), query, 0, 0, iter(batch0)).skipped == 50
    batch1 = rows(topic, 20, start=50)
    assert write_task(attempt(broker, query, 0, "next"), query, 1, 0, iter(batch1)).published == 20
    assert write_task(attempt(broker, query, 0, "zombie"), query, 0, 0, iter(batch0)).skipped == 50

    expected = Counter(value for *_, value, _ in batch0 + batch1)
    assert read(broker, admin, topic, "read_committed") == expected
    uncommitted = read(broker, admin, topic, "read_uncommitted")
    assert uncommitted == expected + Counter(value for *_, value, _ in batch0)  # the original's, aborted


def test_a_task_of_another_query_or_partition_has_its_own_progress(broker, admin):
    topic = f"sink-fencing-{uuid.uuid4().hex[:8]}"
    admin.create_topic(topic, 2, 1)
    q1, q2 = uuid.uuid4().hex, uuid.uuid4().hex
    assert write_task(attempt(broker, q1, 0, "a"), q1, 3, 0, iter(rows(topic, 5))).published == 5
    assert write_task(attempt(broker, q1, 1, "a"), q1, 3, 1, iter(rows(topic, 5, 5))).published == 5
    assert write_task(attempt(broker, q2, 0, "a"), q2, 0, 0, iter(rows(topic, 5, 10))).published == 5
    assert sum(read(broker, admin, topic, "read_committed").values()) == 15
