"""Per-record errors (KIP-467) as Kafka's clients see them, against a real broker process.

Kafka since 2.4 refuses a batch because of some of its records with the partition's error code and
`record_errors`, one (batch index, message) per bad record, and `error_message` (ProduceResponse v8+).
Kafka's facts these tests hold Odradek to:

- storage/.../log/LogValidator.java: validateKey refuses a keyless record on a compacted topic with
  INVALID_RECORD and "Compacted topic cannot accept message without key in topic partition <topic>-<p>";
  validateTimestamp refuses a CreateTime timestamp outside [now - message.timestamp.before.max.ms,
  now + message.timestamp.after.max.ms] with INVALID_TIMESTAMP and "Timestamp <ts> of message with offset
  <o> is out of range. The timestamp should be within [<low>, <high>]"; processRecordErrors throws
  InvalidTimestampException("One or more records have been rejected due to invalid timestamp") when any
  error is a timestamp's, else InvalidRecordException("One or more records have been rejected due to <n>
  record errors in total, and only showing the first three errors at most: [RecordError(batchIndex=<i>,
  message='<m>'), ...]").
- ReplicaManager.appendToLocalLog (RecordValidationException case): that exception's message is the
  partition's error_message (hasCustomErrorMessage = true), its record errors the record_errors.

The clients then fail only the named records with the broker's error and the others with a local one:
librdkafka (rdkafka_request.c, rd_kafka_msgbatch_handle_Produce_result_record_errors) with
_INVALID_DIFFERENT_RECORD; kafka-python (producer/sender.py, _record_exceptions_fn) with a KafkaError
"Failed to append record because it was part of a batch which had one more more invalid records".
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
import uuid

import pytest

ck = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")

from confluent_kafka import KafkaError, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kafka import KafkaProducer  # noqa: E402
from kafka import errors as kerrors  # noqa: E402

T = 15  # seconds for any one client call
KEYLESS = "Compacted topic cannot accept message without key in topic partition {topic}-0"


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def bootstrap(broker):
    return broker.bootstrap


def create(bootstrap: str, topic: str, **config: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(T)


def ck_send(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes, int | None]]) -> list:
    """One batch (linger long enough to gather it) to partition 0; each record's (key, error or None)."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 500, "retries": 0})
    reports: list = []
    for key, value, timestamp in records:
        producer.produce(topic, value=value, key=key, partition=0, timestamp=timestamp or 0,
                         on_delivery=lambda err, msg: reports.append((msg.key(), err)))
    assert producer.flush(T) == 0
    return reports


def test_confluent_kafka_fails_only_the_keyless_records_of_a_batch(bootstrap):
    """librdkafka (2.10+) applies record_errors: the named records fail with INVALID_RECORD, the rest
    of the batch with _INVALID_DIFFERENT_RECORD (-138), and nothing is written."""
    topic = name("compacted")
    create(bootstrap, topic, **{"cleanup.policy": "compact"})
    records = [(None if i in (3, 7) else b"k%d" % i, b"v%d" % i, None) for i in range(10)]
    reports = ck_send(bootstrap, topic, records)
    codes = [err.code() for _, err in reports]
    assert codes == [KafkaError._INVALID_DIFFERENT_RECORD] * 3 + [KafkaError.INVALID_RECORD] + \
        [KafkaError._INVALID_DIFFERENT_RECORD] * 3 + [KafkaError.INVALID_RECORD] + [KafkaError._INVALID_DIFFERENT_RECORD] * 2
    # The keyed records go through in a batch of their own.
    reports = ck_send(bootstrap, topic, [r for r in records if r[0] is not None])
    assert [err for _, err in reports] == [None] * 8


def test_confluent_kafka_with_a_single_keyless_record(bootstrap):
    """10 records, 1 keyless: the response names only batch index 3 (checked byte for byte through
    kafka-python and aiokafka below), but librdkafka reports INVALID_RECORD on all ten. That is librdkafka's
    doing, the same against Kafka: rd_kafka_dr_msgq0 passes the batch's error as force_err to
    rd_kafka_interceptors_on_acknowledgement_queue unless record_errors_cnt > 1, overwriting the
    _INVALID_DIFFERENT_RECORD it had just set on the other nine (rdkafka_broker.c, rdkafka_interceptor.c)."""
    topic = name("compacted")
    create(bootstrap, topic, **{"cleanup.policy": "compact"})
    reports = ck_send(bootstrap, topic, [(None if i == 3 else b"k%d" % i, b"v", None) for i in range(10)])
    assert [err.code() for _, err in reports] == [KafkaError.INVALID_RECORD] * 10


def test_kafka_python_fails_the_bad_record_and_names_the_others(bootstrap):
    topic = name("compacted")
    create(bootstrap, topic, **{"cleanup.policy": "compact"})
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=500, retries=0, enable_idempotence=False)
    try:
        futures = [producer.send(topic, key=None if i == 3 else b"k%d" % i, value=b"v", partition=0)
                   for i in range(10)]
        producer.flush(T)
        errors = [f.exception for f in futures]
    finally:
        producer.close(T)
    # kafka-python: a single record error keeps the top-level class (InvalidRecordError) with the record's
    # own message; the others get a plain KafkaError.
    assert type(errors[3]) is kerrors.InvalidRecordError
    assert KEYLESS.format(topic=topic) in str(errors[3])
    for i, e in enumerate(errors):
        if i != 3:
            assert type(e) is kerrors.KafkaError and "part of a batch which had one more more invalid records" in str(e)


def test_kafka_python_names_the_records_out_of_the_timestamp_range(bootstrap):
    """message.timestamp.after.max.ms=60000: the two records an hour ahead fail with INVALID_TIMESTAMP,
    each with Kafka's message; kafka-python turns 2 record errors into InvalidRecordError per record."""
    topic = name("stamped")
    create(bootstrap, topic, **{"message.timestamp.after.max.ms": "60000"})
    now = int(time.time() * 1000)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=500, retries=0, enable_idempotence=False)
    try:
        stamps = [now, now, now + 3_600_000, now, now + 3_600_001]
        futures = [producer.send(topic, value=b"v", partition=0, timestamp_ms=ts) for ts in stamps]
        producer.flush(T)
        errors = [f.exception for f in futures]
    finally:
        producer.close(T)
    assert [type(e).__name__ for e in errors] == ["KafkaError", "KafkaError", "InvalidRecordError", "KafkaError",
                                                  "InvalidRecordError"]
    assert f"Timestamp {now + 3_600_000} of message with offset 2 is out of range." in str(errors[2])
    assert f"Timestamp {now + 3_600_001} of message with offset 4 is out of range." in str(errors[4])


def _raw_produce(bootstrap: str, request_struct, version: int) -> bytes:
    """Send an encoded Produce request (header v1) and return the response body after the correlation id."""
    host, port = bootstrap.rsplit(":", 1)
    body = request_struct.encode()
    client_id = b"record-errors-test"
    header = struct.pack(">hhih", 0, version, 7, len(client_id)) + client_id
    with socket.create_connection((host, int(port)), timeout=T) as sock:
        sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        size = struct.unpack(">i", _read(sock, 4))[0]
        frame = _read(sock, size)
    assert struct.unpack(">i", frame[:4])[0] == 7
    return frame[4:]


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "connection closed"
        out += chunk
    return out


def _batch(records) -> bytes:
    from odradek.protocol.records import build_batch

    return bytes(build_batch(records))


def test_aiokafkas_codec_reads_the_record_errors(bootstrap):
    """ProduceResponse v8 decoded by aiokafka's own codec (its producer stops at v7, which has no
    record_errors): error 87, record_errors [(3, message)] and Kafka's error_message. kafka-python's
    producer, above, reads the same fields from its own requests (v8+)."""
    from aiokafka.protocol.produce import ProduceRequest_v8, ProduceResponse_v8

    topic = name("compacted")
    create(bootstrap, topic, **{"cleanup.policy": "compact"})
    now = int(time.time() * 1000)
    data = _batch([(None if i == 3 else b"k%d" % i, b"v", None, now) for i in range(10)])
    request = ProduceRequest_v8(None, -1, 10_000, [(topic, [(0, data)])])
    response = ProduceResponse_v8.decode(_raw_produce(bootstrap, request, 8))
    ((got_topic, partitions),) = response.topics
    ((partition, error_code, offset, _, log_start_offset, record_errors, error_message),) = partitions
    assert (got_topic, partition, error_code, offset) == (topic, 0, 87, -1)
    keyless = KEYLESS.format(topic=topic)
    assert [tuple(e) for e in record_errors] == [(3, keyless)]
    assert error_message == ("One or more records have been rejected due to 1 record errors in total, and only "
                             f"showing the first three errors at most: [RecordError(batchIndex=3, message='{keyless}')]")


def test_aiokafka_producer_sees_the_partition_error(bootstrap):
    """aiokafka's producer (Produce v7: no record_errors on the wire) fails the whole batch. Its error table
    has no INVALID_RECORD (87), so for_code(87) is UnknownError: the same against Kafka."""
    topic = name("compacted")
    create(bootstrap, topic, **{"cleanup.policy": "compact"})

    async def main():
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=200,
                                             request_timeout_ms=T * 1000)
        await producer.start()
        try:
            futures = [await producer.send(topic, key=None if i == 3 else b"k%d" % i, value=b"v", partition=0)
                       for i in range(10)]
            return await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), T)
        finally:
            await producer.stop()

    results = asyncio.run(main())
    assert aiokafka.errors.for_code(87) is aiokafka.errors.UnknownError
    assert [type(r) for r in results] == [aiokafka.errors.UnknownError] * 10
