"""Round trips through a secured listener: the bundled clients', and the first error librdkafka reports."""

from __future__ import annotations

import time

import pytest

confluent_kafka = pytest.importorskip("confluent_kafka")


async def bundled_round_trip(options: dict, topic: str, timeout_s: float = 30.0) -> list:
    """Write b"bundled" with the bundled producer and read partition 0 back with the bundled consumer, both
    built from `options`: the values read (bounded poll), [] if none arrived."""
    from odradek.client import Consumer, Producer, TopicPartition

    async with Producer(**options) as producer:
        await producer.send_and_wait(topic, b"bundled")
    async with Consumer(**options, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=1000)
            values = [r.value for records in batch.values() for r in records]
            if values:
                return values
    return []


def librdkafka_error(conf: dict, timeout_s: float = 15.0) -> str:
    """The first error librdkafka reports for `conf` (through error_cb), or "" if none."""
    errors: list = []
    producer = confluent_kafka.Producer({**conf, "error_cb": errors.append, "message.timeout.ms": 5000})
    producer.produce("refused", b"x")
    deadline = time.monotonic() + timeout_s
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    producer.purge()
    producer.flush(5)
    return str(errors[0]) if errors else ""
