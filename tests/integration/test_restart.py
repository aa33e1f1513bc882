"""Durability across restarts of a real broker process: a clean stop (SIGTERM) and a kill -9 mid-stream.

What is acknowledged with acks=all is there afterwards, at the same offset; offsets go on from the end;
and producer ids from InitProducerId, asked for directly over a raw connection, are never handed out
twice, not even after a kill -9.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaProducer

from odradek.broker.testing import RawClient
from odradek.protocol.messages import FetchRequest, InitProducerIdRequest
from odradek.protocol.records import iter_batches
from odradek.storage.names import CLEAN_SHUTDOWN_FILE

pytestmark = pytest.mark.timeout(120)

TIMEOUT_S = 15
N = 300


def init_producer_id(bootstrap: str, version: int) -> int:
    """InitProducerId for an idempotent (non-transactional) producer, over a raw connection."""
    with RawClient(bootstrap) as client:
        response = client.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), version)
    assert response.error_code == 0 and response.producer_id >= 0 and response.producer_epoch == 0, response
    return response.producer_id


def batch_producer_ids(bootstrap: str, topic: str) -> set[int]:
    """Producer ids stamped on the partition's batches, read with a raw Fetch."""
    Topic = FetchRequest.FetchTopic
    ids, offset = set(), 0
    with RawClient(bootstrap) as client:
        while True:
            request = FetchRequest(
                max_wait_ms=0, min_bytes=0, max_bytes=64 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                forgotten_topics_data=[], rack_id="",
                topics=[Topic(topic=topic, partitions=[Topic.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=64 << 20)])],
            )
            data = client.request(request, 11).responses[0].partitions[0]
            assert data.error_code == 0
            headers = [h for _, h in iter_batches(bytes(data.records))] if data.records else []
            ids |= {h.producer_id for h in headers}
            if not headers or headers[-1].next_offset >= data.high_watermark:
                return ids
            offset = headers[-1].next_offset


def produce_confluent(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
        "message.timeout.ms": TIMEOUT_S * 1000,
    })
    reports = []
    for v in values:
        producer.produce(topic, value=v, on_delivery=lambda err, msg: reports.append((err, msg.offset(), msg.value())))
    assert producer.flush(TIMEOUT_S) == 0
    assert all(err is None for err, _, _ in reports), reports
    assert [v for _, _, v in reports] == values
    return [offset for _, offset, _ in reports]


def produce_kafka_python(bootstrap: str, topic: str, values: list[bytes]) -> list[int]:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=5, request_timeout_ms=TIMEOUT_S * 1000,
        max_block_ms=TIMEOUT_S * 1000,
    )
    try:
        futures = [producer.send(topic, value=v) for v in values]
        return [f.get(timeout=TIMEOUT_S).offset for f in futures]
    finally:
        producer.close(timeout=TIMEOUT_S)


def read_partition(bootstrap: str, topic: str) -> tuple[dict[int, bytes], tuple[int, int]]:
    """Every record from the log start to the high watermark, as {offset: value}, and the watermarks."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": "odradek-restart-check", "enable.auto.commit": False,
        "fetch.wait.max.ms": 100,
    })
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)
        consumer.assign([TopicPartition(topic, 0, low)])
        records: dict[int, bytes] = {}
        deadline = time.monotonic() + TIMEOUT_S
        while len(records) < high - low and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                assert m.error() is None, m.error()
                records[m.offset()] = m.value()
        assert len(records) == high - low, f"read {len(records)} of {high - low} records"
        return records, (low, high)
    finally:
        consumer.close()


def test_clean_restart_keeps_every_record_and_never_reuses_a_producer_id(fresh_broker):
    broker = fresh_broker
    topic = "restart-clean"
    pids_before = {init_producer_id(broker.bootstrap, 0), init_producer_id(broker.bootstrap, 4)}

    ck_values = [b"confluent-%04d" % i for i in range(N)]
    kp_values = [b"kafka-python-%04d" % i for i in range(N)]
    acked = dict(zip(produce_confluent(broker.bootstrap, topic, ck_values), ck_values))
    acked |= dict(zip(produce_kafka_python(broker.bootstrap, topic, kp_values), kp_values))
    assert sorted(acked) == list(range(2 * N))
    client_pids = batch_producer_ids(broker.bootstrap, topic)
    assert len(client_pids) == 2 and min(client_pids) >= 0  # both clients were idempotent producers
    pids_before |= client_pids | {init_producer_id(broker.bootstrap, 3)}
    assert len(pids_before) == 5, pids_before  # distinct while running, too

    assert broker.stop() == 0
    assert (broker.data_dir / CLEAN_SHUTDOWN_FILE).exists()
    broker.start()
    assert not (broker.data_dir / CLEAN_SHUTDOWN_FILE).exists()  # consumed at start-up

    records, watermarks = read_partition(broker.bootstrap, topic)
    assert watermarks == (0, 2 * N)
    assert records == acked

    # Offsets go on from the end, and new producer ids are new.
    after = [b"after-%d" % i for i in range(5)]
    assert produce_confluent(broker.bootstrap, topic, after) == list(range(2 * N, 2 * N + 5))
    assert produce_kafka_python(broker.bootstrap, topic, after) == list(range(2 * N + 5, 2 * N + 10))
    pids_after = {init_producer_id(broker.bootstrap, v) for v in (0, 4)}
    pids_after |= batch_producer_ids(broker.bootstrap, topic) - client_pids
    assert len(pids_after) == 4, pids_after
    assert not pids_after & pids_before, (pids_before, pids_after)


def test_kill_9_mid_stream_loses_nothing_acknowledged(fresh_broker):
    broker = fresh_broker
    topic = "restart-kill"
    pids_before = {init_producer_id(broker.bootstrap, 4)}

    acked: dict[int, bytes] = {}
    errors: list = []

    def report(err, msg):
        if err is None:
            acked[msg.offset()] = msg.value()
        else:
            errors.append(err)

    producer = Producer({
        "bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 2,
        "message.timeout.ms": 60000, "reconnect.backoff.max.ms": 500,
    })
    sent = 0
    in_flight_at_kill = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for _ in range(50):
            producer.produce(topic, value=b"m-%07d" % sent, on_delivery=report)
            sent += 1
        producer.poll(0.005)
        if len(acked) >= 3000:
            # A last burst, not polled for: the broker can keep up with the loop above, so without it the
            # client may hold nothing undelivered at the kill.
            for _ in range(200):
                producer.produce(topic, value=b"m-%07d" % sent, on_delivery=report)
                sent += 1
            in_flight_at_kill = len(producer)
            broker.kill()
            break
    assert broker.proc is None, "the producer never got 3000 acknowledgements"
    assert in_flight_at_kill > 0, "nothing was in flight at the kill"
    # Responses that reached the client before the kill are still reported; nothing else can be.
    producer.poll(0.5)
    producer.purge(in_queue=True, in_flight=True)
    producer.flush(TIMEOUT_S)
    assert len(producer) == 0
    assert not (broker.data_dir / CLEAN_SHUTDOWN_FILE).exists()
    acked_before_kill = dict(acked)
    assert len(acked_before_kill) >= 3000
    assert {e.code() for e in errors} <= {KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT}, errors

    broker.start()
    records, (low, high) = read_partition(broker.bootstrap, topic)
    assert low == 0 and high >= max(acked_before_kill) + 1
    missing = {o: v for o, v in acked_before_kill.items() if records.get(o) != v}
    assert not missing, f"{len(missing)} acknowledged records lost or changed, e.g. {sorted(missing.items())[:3]}"
    # The idempotent producer's records are in send order with no duplicates, acknowledged or not.
    values = [records[o] for o in range(low, high)]
    assert values == sorted(set(values)), "records reordered or duplicated"

    # The log takes new appends where it ends, and producer ids are still never reused.
    pids_before |= batch_producer_ids(broker.bootstrap, topic)
    assert produce_confluent(broker.bootstrap, topic, [b"after-kill"]) == [high]
    assert produce_kafka_python(broker.bootstrap, topic, [b"after-kill-2"]) == [high + 1]
    pids_after = {init_producer_id(broker.bootstrap, v) for v in (0, 4)}
    pids_after |= batch_producer_ids(broker.bootstrap, topic) - pids_before
    assert len(pids_after) == 4 and not pids_after & pids_before, (pids_before, pids_after)
