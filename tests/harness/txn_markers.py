"""Reading a transactional topic back under read_committed through librdkafka."""

from __future__ import annotations

import time
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition


TOPIC = "txn"
NOW = int(time.time() * 1000)
TIMEOUT_S = 30


def read_committed_values(bootstrap: str, expected: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-reader", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.assign([KafkaTopicPartition(TOPIC, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(values) < expected and time.monotonic() < deadline:
            values += [m.value() for m in consumer.consume(100, timeout=0.5) if m.error() is None]
        values += [m.value() for m in consumer.consume(100, timeout=0.5) if m.error() is None]  # nothing more
    finally:
        consumer.close()
    return values
