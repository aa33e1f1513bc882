"""Hostile and broken input on raw sockets against a real broker process.

Each case checks what the offending connection gets (the right error code, or a closed connection) and
then that the broker still serves everyone: a fresh raw connection and a real client both work. Frames
are built with odradek.protocol, by hand where a case needs bytes no encoder would write.
"""

from __future__ import annotations

import random
import socket
import struct
import time
import zlib

import pytest
from confluent_kafka import Producer

from odradek.broker.testing import RawClient
from odradek.protocol.errors import ErrorCode
from odradek.protocol.headers import RequestHeader, write_request_header
from odradek.protocol.messages import ApiVersionsRequest, MetadataRequest, ProduceRequest
from odradek.protocol.records import build_batch
from odradek.protocol.varint import write_uvarint

pytestmark = pytest.mark.timeout(60)

MAX_FRAME = 104_857_600  # socket.request.max.bytes, the default the broker fixture runs with
MAX_MESSAGE = 1_048_588  # message.max.bytes
TOPIC = "bad-input"
METADATA, PRODUCE, API_VERSIONS, DESCRIBE_GROUPS = 3, 0, 18, 15
MAX_ARRAY_ELEMENTS, MAX_TAGGED_FIELDS = 1_000_000, 10_000  # Kafka 4.4's caps (protocol/limits.py)
RSS_BOUND_KB = 300 * 1024


# -- frames --

def frame(api_key: int, version: int, body: bytes = b"", *, correlation_id: int = 7) -> bytes:
    """size | request header (v1, or v2 for a flexible version) | body."""
    out = bytearray(4)
    write_request_header(out, RequestHeader(api_key, version, correlation_id, "bad-input"))
    out += body
    struct.pack_into(">i", out, 0, len(out) - 4)
    return bytes(out)


def uvarint(n: int) -> bytes:
    out = bytearray()
    write_uvarint(out, n)
    return bytes(out)


def tag_section(count: int) -> bytes:
    """`count` empty tagged fields, tags 0, 1, 2, ..."""
    return uvarint(count) + b"".join(uvarint(tag) + b"\x00" for tag in range(count))


def flexible_frame_with_header_tags(api_key: int, version: int, tags: bytes, body: bytes) -> bytes:
    """A request header v2 whose tagged-field section is `tags`, then `body`."""
    head = struct.pack(">hhih", api_key, version, 7, 9) + b"bad-input"
    out = head + tags + body
    return struct.pack(">i", len(out)) + out


def produce_request(records, *, topic: str = TOPIC, acks: int = -1) -> ProduceRequest:
    TopicData = ProduceRequest.TopicProduceData
    return ProduceRequest(
        transactional_id=None, acks=acks, timeout_ms=5000,
        topic_data=[TopicData(name=topic, partition_data=[TopicData.PartitionProduceData(index=0, records=records)])],
    )


def good_batch(value: bytes = b"v") -> bytes:
    return build_batch([(b"k", value, [("h", b"1")], int(time.time() * 1000))])


def legacy_message_set(value: bytes, magic: int = 1) -> bytes:
    """One magic-0/1 message (the pre-0.11 format): offset | size | crc32 | magic | attrs | [ts] | key | value."""
    body = struct.pack(">bb", magic, 0)
    if magic == 1:
        body += struct.pack(">q", int(time.time() * 1000))
    body += struct.pack(">i", -1) + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


# -- checks --

def partition_error(response) -> tuple[int, int]:
    (topic,) = response.responses
    (p,) = topic.partition_responses
    return p.error_code, p.base_offset


def still_open(client: RawClient) -> None:
    """The same connection answers a normal request."""
    response = client.request(ApiVersionsRequest(), 0)
    assert response.error_code == 0


def broker_serves(bootstrap: str) -> None:
    """A fresh raw connection and a real client (librdkafka) both work."""
    with RawClient(bootstrap) as client:
        assert client.request(ApiVersionsRequest(client_software_name="check", client_software_version="1"), 3).error_code == 0
        metadata = client.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]), 9)
        assert metadata.topics[0].error_code == 0
    reports = []
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000, "linger.ms": 0})
    producer.produce(TOPIC, b"still-serving", on_delivery=lambda err, msg: reports.append((err, msg.offset())))
    assert producer.flush(15) == 0
    assert len(reports) == 1 and reports[0][0] is None, reports


def vm_rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS line")


@pytest.fixture(scope="module", autouse=True)
def topic(broker):
    with RawClient(broker.bootstrap) as client:
        response = client.request(
            MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)], allow_auto_topic_creation=True), 9
        )
        assert response.topics[0].error_code == 0
    yield TOPIC
    assert "Traceback" not in broker.log_text(), broker.log_text()[-5000:]


# -- cases where the broker must hang up --

CLOSING_CASES = {
    "http-request": b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",  # size field 0x47455420: far over the limit
    "tls-client-hello": bytes.fromhex("16030100a5010000a103035f") + bytes(160),
    "random-frame": struct.pack(">i", 4092) + bytes(random.Random(7).getrandbits(8) for _ in range(4092)),
    "negative-size": struct.pack(">i", -1) + b"\x00" * 16,
    "int32-min-size": struct.pack(">i", -(2**31)),
    "size-over-socket.request.max.bytes": struct.pack(">i", MAX_FRAME + 1),
    "size-int32-max": struct.pack(">i", 2**31 - 1),
    "frame-shorter-than-a-header": struct.pack(">i", 3) + b"\x00\x03\x00",
    "unknown-api-key": frame(9999, 0),
    "negative-api-key": frame(-2, 0),
    "unsupported-metadata-version": frame(METADATA, 99, b"\x00\x00\x00\x00"),
    # Produce v0-2 are advertised (KAFKA-18659) but never decoded: refused like any unsupported version.
    "produce-v2-advertised-but-refused": frame(PRODUCE, 2, b"\x00\x01\x00\x00\x13\x88\x00\x00\x00\x00"),
    # Metadata v1: topics array says 1, then a string of length 200 with 3 bytes left.
    "malformed-body-string-past-end": frame(METADATA, 1, struct.pack(">ih", 1, 200) + b"abc"),
    # Metadata v9 (flexible): one topic, whose name's compact length says 101 bytes; none follow.
    "malformed-body-compact-string": frame(METADATA, 9, b"\x02\x66"),
    "malformed-body-invalid-utf8": frame(METADATA, 1, struct.pack(">ih", 1, 2) + b"\xff\xfe"),
    "malformed-body-truncated-int": frame(METADATA, 1, b"\x00\x00"),
    "array-length-int32-max": frame(METADATA, 1, struct.pack(">i", 2**31 - 1)),
    "array-length-negative": frame(METADATA, 1, struct.pack(">i", -5)),
    "compact-array-length-2^31": frame(METADATA, 9, b"\x80\x80\x80\x80\x08"),
    "varint-never-ends": frame(METADATA, 9, b"\xff" * 12),
    "produce-records-length-int32-max": frame(
        PRODUCE, 3, struct.pack(">hhi", -1, -1, 5000) + struct.pack(">ih", 1, len(TOPIC)) + TOPIC.encode()
        + struct.pack(">iii", 1, 0, 2**31 - 1) + b"\x00" * 32,
    ),
    # Kafka 4.4's caps (protocol/limits.py): counts refused before anything is allocated for them, even
    # when the frame holds the bytes. DescribeGroups v5: 1,000,001 empty group ids, one byte each (1 MB).
    "array-over-1000000-elements-flexible": frame(
        DESCRIBE_GROUPS, 5, uvarint(MAX_ARRAY_ELEMENTS + 2) + b"\x01" * (MAX_ARRAY_ELEMENTS + 1) + b"\x00\x00",
    ),
    # Metadata v1: 1,000,001 topics with empty names, two bytes each (2 MB).
    "array-over-1000000-elements": frame(
        METADATA, 1, struct.pack(">i", MAX_ARRAY_ELEMENTS + 1) + b"\x00\x00" * (MAX_ARRAY_ELEMENTS + 1),
    ),
    # Metadata v12 topics: 100 claimed, 18 bytes each at the least, 200 bytes follow.
    "array-count-over-the-bytes-at-its-element-size": frame(METADATA, 12, uvarint(101) + bytes(200)),
    # Metadata v12: topics null, two booleans, then 10,001 tagged fields in the body.
    "tagged-fields-over-10000-in-body": frame(METADATA, 12, b"\x00\x01\x00" + tag_section(MAX_TAGGED_FIELDS + 1)),
    "tagged-fields-over-10000-in-header": flexible_frame_with_header_tags(
        METADATA, 12, tag_section(MAX_TAGGED_FIELDS + 1), b"\x00\x01\x00\x00",
    ),
    "tagged-field-count-uvarint-max": frame(METADATA, 12, b"\x00\x01\x00" + uvarint(2**32 - 1) + b"\x00" * 8),
    "compact-string-length-2^31": frame(METADATA, 12, uvarint(2) + bytes(16) + uvarint(2**31) + b"abc"),
}


@pytest.mark.parametrize("data", list(CLOSING_CASES.values()), ids=list(CLOSING_CASES))
def test_broker_closes_the_offending_connection(broker, data):
    with RawClient(broker.bootstrap) as client:
        client.send_bytes(data)
        assert client.closed_by_peer(5.0), "the broker kept the connection open"
    broker_serves(broker.bootstrap)


@pytest.mark.parametrize("case, says", [
    ("array-over-1000000-elements-flexible", "DescribeGroupsRequest.groups: array of 1000001 elements exceeds the maximum of 1000000"),
    ("tagged-fields-over-10000-in-header", "header: 10001 tagged fields exceed the maximum of 10000"),
])
def test_a_count_over_kafkas_cap_is_logged_with_its_field(broker, case, says):
    with RawClient(broker.bootstrap) as client:
        client.send_bytes(CLOSING_CASES[case])
        assert client.closed_by_peer(5.0)
    deadline = time.monotonic() + 5
    while says not in broker.log_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert says in broker.log_text()
    broker_serves(broker.bootstrap)


def test_bytes_after_a_bad_frame_are_not_read(broker):
    """A good request pipelined behind a bad one is never answered: the connection is gone."""
    good = RawClient(broker.bootstrap)
    try:
        _, api_versions = good.conn.send_request(ApiVersionsRequest(), 0)
        good.send_bytes(frame(9999, 0) + api_versions)
        with pytest.raises(ConnectionError):
            good.receive(5.0)
    finally:
        good.close()
    broker_serves(broker.bootstrap)


# -- truncation: the client goes away in the middle of a frame --

@pytest.mark.parametrize("sent", [1, 3, 4, 10, 40])
def test_truncated_frame_then_close(broker, sent):
    data = frame(METADATA, 9, b"\x01" + b"\x00" * 40)
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
    sock.sendall(data[:sent])
    sock.close()
    broker_serves(broker.bootstrap)


def test_truncated_frame_gets_no_answer_and_blocks_no_one(broker):
    """Half a frame: the broker waits for the rest (no reply, no crash) while it serves others."""
    with RawClient(broker.bootstrap) as stalled:
        _, data = stalled.conn.send_request(ApiVersionsRequest(), 0)
        stalled.send_bytes(data[:-2])
        broker_serves(broker.bootstrap)
        with pytest.raises(TimeoutError):
            stalled.receive(0.3)
        stalled.send_bytes(data[-2:])  # the rest arrives: a normal answer
        assert stalled.receive().error_code == 0


# -- an ApiVersions request at a version we do not know: answered (KIP-511), not closed --

def test_unknown_api_versions_version_gets_unsupported_version_and_our_table(broker):
    with RawClient(broker.bootstrap) as client:
        client.send_bytes(frame(API_VERSIONS, 99, b"\x00\x01\x02"))
        raw = client.sock.recv(1 << 16)
        size, correlation_id, error_code = struct.unpack_from(">iih", raw)
        assert correlation_id == 7
        assert error_code == int(ErrorCode.UNSUPPORTED_VERSION)
        (count,) = struct.unpack_from(">i", raw, 10)
        keys = {struct.unpack_from(">hhh", raw, 14 + 6 * i)[0] for i in range(count)}
        assert {PRODUCE, 1, 2, METADATA, API_VERSIONS} <= keys
        still_open(client)


# -- produce with bad batches: an error code for the partition, and the connection stays open --

def test_produce_with_a_bad_crc_gets_corrupt_message(broker):
    batch = bytearray(good_batch())
    batch[-1] ^= 0xFF
    with RawClient(broker.bootstrap) as client:
        assert partition_error(client.request(produce_request(bytes(batch)), 9)) == (int(ErrorCode.CORRUPT_MESSAGE), -1)
        still_open(client)
        # The same connection can still produce, and nothing of the corrupt batch was written.
        code, offset = partition_error(client.request(produce_request(good_batch(b"after-crc")), 9))
        assert code == 0 and offset >= 0
    broker_serves(broker.bootstrap)


@pytest.mark.parametrize("cut", [20, 60, 70])
def test_produce_with_a_truncated_batch_gets_corrupt_message(broker, cut):
    with RawClient(broker.bootstrap) as client:
        assert partition_error(client.request(produce_request(good_batch()[:cut]), 9))[0] == int(ErrorCode.CORRUPT_MESSAGE)
        still_open(client)
    broker_serves(broker.bootstrap)


def test_produce_over_max_message_bytes_gets_message_too_large(broker):
    big = build_batch([(None, b"x" * (MAX_MESSAGE + 1000), None, int(time.time() * 1000))])
    assert MAX_MESSAGE < len(big) < MAX_FRAME
    with RawClient(broker.bootstrap) as client:
        assert partition_error(client.request(produce_request(big), 9)) == (int(ErrorCode.MESSAGE_TOO_LARGE), -1)
        still_open(client)
    broker_serves(broker.bootstrap)


@pytest.mark.parametrize("magic", [0, 1])
def test_produce_with_a_legacy_magic_batch_gets_invalid_record(broker, magic):
    """Kafka 4 (ProduceRequest.validateRecords): v3+ carries magic 2 only; older formats get INVALID_RECORD."""
    with RawClient(broker.bootstrap) as client:
        response = client.request(produce_request(legacy_message_set(b"old", magic)), 9)
        assert partition_error(response) == (int(ErrorCode.INVALID_RECORD), -1)
        still_open(client)
    broker_serves(broker.bootstrap)


def test_produce_to_an_unknown_partition_gets_an_error_not_a_hangup(broker):
    TopicData = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        transactional_id=None, acks=1, timeout_ms=5000,
        topic_data=[TopicData(name=TOPIC, partition_data=[TopicData.PartitionProduceData(index=42, records=good_batch())])],
    )
    with RawClient(broker.bootstrap) as client:
        (topic,) = client.request(request, 9).responses
        assert topic.partition_responses[0].error_code == int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        still_open(client)



@pytest.mark.parametrize("version", [10, 11])
def test_metadata_by_topic_id_below_v12_gets_invalid_request_not_a_hangup(broker, version):
    """v10/v11 requests can carry a topic id and a null name, which Kafka serves from v12 only: every topic asked
    is answered INVALID_REQUEST (KafkaApis' InvalidRequestException, MetadataRequest.getErrorResponse), and the
    connection stays open; v12 finds the topic by the same id."""
    R = MetadataRequest.MetadataRequestTopic
    with RawClient(broker.bootstrap) as client:
        (known,) = client.request(MetadataRequest(topics=[R(name=TOPIC)]), 12).topics
        for asked in ([R(name=None, topic_id=known.topic_id)], [R(name=TOPIC, topic_id=known.topic_id)]):
            response = client.request(MetadataRequest(topics=asked, allow_auto_topic_creation=False), version)
            assert [(t.error_code, t.name, t.topic_id, t.partitions) for t in response.topics] == [
                (int(ErrorCode.INVALID_REQUEST), asked[0].name or "", known.topic_id, [])]
            assert (response.brokers, response.controller_id) == ([], -1)
        (by_id,) = client.request(MetadataRequest(topics=[R(name=None, topic_id=known.topic_id)]), 12).topics
        assert (by_id.error_code, by_id.name) == (0, TOPIC)
        still_open(client)


# -- memory: frames that claim to be huge cost nothing up front --

def test_rss_stays_bounded_after_big_frame_attempts(broker):
    pid = broker.proc.pid
    before = vm_rss_kb(pid)
    clients = []
    try:
        # Frames at exactly the limit, each followed by 8 MB of its body, then abandoned.
        chunk = b"\x00" * (1 << 20)
        for _ in range(4):
            client = RawClient(broker.bootstrap)
            client.send_bytes(struct.pack(">i", MAX_FRAME) + frame(METADATA, 1)[4:])
            for _ in range(8):
                client.send_bytes(chunk)
            clients.append(client)
        # Frames over the limit, absurd array lengths, and counts over Kafka 4.4's caps in frames that hold
        # the bytes: refused before anything is buffered or allocated for them.
        for data in (struct.pack(">i", 2**31 - 1) + chunk, frame(METADATA, 1, struct.pack(">i", 2**31 - 1)),
                     CLOSING_CASES["array-over-1000000-elements"], CLOSING_CASES["tagged-fields-over-10000-in-body"]):
            for _ in range(10):
                with RawClient(broker.bootstrap) as client:
                    try:
                        client.send_bytes(data)
                    except (BrokenPipeError, ConnectionResetError):
                        pass
                    assert client.closed_by_peer(5.0)
        during = vm_rss_kb(pid)
        assert during < RSS_BOUND_KB, f"VmRSS {during} kB while big frames were pending (was {before} kB)"
    finally:
        for client in clients:
            client.close()
    broker_serves(broker.bootstrap)
    after = vm_rss_kb(pid)
    assert after < RSS_BOUND_KB, f"VmRSS {after} kB after big-frame attempts (was {before} kB)"
