"""OffsetFetch and offsets committed inside a transaction, with confluent-kafka on a broker process.

A transactional producer's send_offsets_to_transaction writes the group's offsets as pending: Kafka's
OffsetMetadataManager keeps them apart from the committed ones until the transaction's COMMIT marker
reaches __consumer_offsets, and drops them on ABORT. Meanwhile:
- a read_committed consumer (librdkafka then sets OffsetFetch's `require_stable`, KIP-447) is answered
  UNSTABLE_OFFSET_COMMIT for the partition and retries, so `committed()` returns only once the
  transaction ended, with the offset the transaction committed (or the older one after an abort);
- a read_uncommitted consumer and the admin client (no `require_stable`) get the last committed offset,
  never the pending one.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.timeout(180)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _consumer(bootstrap: str, group: str, isolation: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                     "isolation.level": isolation})


def _committed(bootstrap: str, group: str, tp: TopicPartition, isolation: str, timeout_s: float = 30) -> int:
    consumer = _consumer(bootstrap, group, isolation)
    try:
        (answer,) = consumer.committed([tp], timeout_s)
    finally:
        consumer.close()
    assert answer.error is None, answer.error
    return answer.offset


def _admin_offset(admin: AdminClient, group: str, tp: TopicPartition) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions

    (future,) = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [tp])]).values()
    (answer,) = future.result(30).topic_partitions
    return answer.offset


def test_pending_transactional_offsets_are_invisible_until_the_commit(broker):
    topic, group = _name("src"), _name("group")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(30)
    tp = TopicPartition(topic, 0)
    plain = _consumer(broker.bootstrap, group, "read_uncommitted")
    plain.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
    metadata = plain.consumer_group_metadata()
    plain.close()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": _name("txn")})
    producer.init_transactions(30)

    # 1. An open transaction with offset 10: read_uncommitted and the admin see 5; read_committed waits.
    producer.begin_transaction()
    producer.produce(topic, value=b"x")
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, 10)], metadata, 30)
    assert _committed(broker.bootstrap, group, tp, "read_uncommitted") == 5
    assert _admin_offset(admin, group, tp) == 5
    with pytest.raises(KafkaException):  # retried UNSTABLE_OFFSET_COMMIT until its timeout
        _committed(broker.bootstrap, group, tp, "read_committed", timeout_s=3)

    # A read_committed fetch started while the transaction is open returns once it commits, with 10.
    seen: list[int] = []
    waiter = threading.Thread(target=lambda: seen.append(_committed(broker.bootstrap, group, tp, "read_committed")))
    waiter.start()
    time.sleep(1)
    producer.commit_transaction(30)
    waiter.join(60)
    assert seen == [10]
    assert _committed(broker.bootstrap, group, tp, "read_uncommitted") == 10
    assert _admin_offset(admin, group, tp) == 10

    # 2. An aborted transaction with offset 20: nobody ever sees 20.
    producer.begin_transaction()
    producer.produce(topic, value=b"y")
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, 20)], metadata, 30)
    assert _committed(broker.bootstrap, group, tp, "read_uncommitted") == 10
    assert _admin_offset(admin, group, tp) == 10
    seen.clear()
    waiter = threading.Thread(target=lambda: seen.append(_committed(broker.bootstrap, group, tp, "read_committed")))
    waiter.start()
    time.sleep(1)
    producer.abort_transaction(30)
    waiter.join(60)
    assert seen == [10]
    assert _committed(broker.bootstrap, group, tp, "read_committed") == 10
    assert _admin_offset(admin, group, tp) == 10
