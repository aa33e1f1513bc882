"""An RF=3 topic on an in-process cluster, written with acks=all and read back through librdkafka, and the
checks that its replicas agree: the same log end, every high watermark at it, byte-identical logs."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from odradek.storage.names import TopicPartition

TOPIC = "replicated"
PARTITIONS = 3
FAST = {"replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 100}


def produce(bootstrap: str, values: list[bytes]) -> list[str]:
    """acks=all (idempotent) through librdkafka; the delivery errors, empty when all were acknowledged."""
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 30000, "linger.ms": 5})

    def delivered(err, _msg) -> None:
        if err is not None:
            errors.append(str(err))

    for i, value in enumerate(values):
        producer.produce(TOPIC, value=value, partition=i % PARTITIONS, on_delivery=delivered)
        producer.poll(0)
    remaining = producer.flush(45)
    if remaining:
        errors.append(f"{remaining} messages not delivered")
    return errors


def consume(bootstrap: str, expected: int, timeout_s: float = 45.0) -> list[bytes]:
    import time

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "replication-test", "enable.auto.commit": False})
    consumer.assign([KafkaTopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(values) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            values.append(msg.value())
    finally:
        consumer.close()
    return values


def replicas_of(nodes, tp: TopicPartition):
    return [b.data.get_partition(tp) for b in nodes if b.data.get_partition(tp) is not None]


def whole_log(partition) -> bytes:
    plog = partition.log
    data = plog.read_bytes(plog.log_start_offset, 1 << 30) if plog.log_end_offset > plog.log_start_offset else b""
    assert len(data) == plog.size_bytes  # one segment holds it all, read whole
    return data


def in_sync(nodes, expect_replicas: int) -> bool:
    """Every partition's replicas agree on the log end, and every high watermark has reached it."""
    for index in range(PARTITIONS):
        replicas = replicas_of(nodes, TopicPartition(TOPIC, index))
        if len(replicas) != expect_replicas:
            return False
        ends = {p.log_end_offset for p in replicas}
        if len(ends) != 1 or any(p.high_watermark != p.log_end_offset for p in replicas):
            return False
    return True


def assert_identical(nodes, expect_replicas: int) -> int:
    total = 0
    for index in range(PARTITIONS):
        replicas = replicas_of(nodes, TopicPartition(TOPIC, index))
        assert len(replicas) == expect_replicas
        assert sum(p.is_leader for p in replicas) == 1
        logs = {whole_log(p) for p in replicas}
        assert len(logs) == 1, f"partition {index}: the replicas' logs differ"
        total += replicas[0].log_end_offset
    return total
