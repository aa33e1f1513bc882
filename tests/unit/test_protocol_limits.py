"""Counts and lengths off the wire are refused before anything is allocated for them (protocol/limits.py).

Each case builds a frame whose array count, tagged-field count, string/bytes length, record count or
header count claims more than Kafka 4.4 allows (1,000,000 array elements, 10,000 tagged fields) or more
than the bytes left can hold, feeds it to the decoder a broker (or client) uses, and checks two things:
a RemoteProtocolError that names the field, and the memory peak during the refusal (tracemalloc) staying
under 1 MB, the witness that nothing was allocated for the claim. A control case shows the witness can
tell: a frame just under the cap is accepted, and its peak is what the cap bounds.
"""

from __future__ import annotations

import struct
import tracemalloc

import pytest

from odradek.metadata.records import PartitionRecord, decode_metadata_record, encode_metadata_record
from odradek.protocol import codec
from odradek.protocol.connection import ClientConnection, ServerConnection
from odradek.protocol.errors import CorruptRecordError, RemoteProtocolError
from odradek.protocol.headers import RequestHeader, write_request_header
from odradek.protocol.limits import MAX_ARRAY_ELEMENTS, MAX_TAGGED_FIELDS
from odradek.protocol.messages import (
    REQUESTS,
    RESPONSES,
    DescribeGroupsRequest,
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    ProduceRequest,
)
from odradek.protocol.records import build_batch, iter_records
from odradek.protocol.varint import write_uvarint, write_varint

PEAK_LIMIT = 1 << 20  # 1 MB
METADATA, PRODUCE, FETCH, DESCRIBE_GROUPS, SASL_AUTHENTICATE = 3, 0, 1, 15, 36


# -- building frames by hand --


def uvarint(n: int) -> bytes:
    out = bytearray()
    write_uvarint(out, n)
    return bytes(out)


def request_frame(api_key: int, version: int, body: bytes, *, header_tags: bytes | None = None) -> bytearray:
    """A whole frame, size included; `header_tags` replaces a flexible header's empty tag section."""
    out = bytearray(4)
    write_request_header(out, RequestHeader(api_key, version, 7, "limits"))
    if header_tags is not None:
        assert out[-1] == 0
        out[-1:] = header_tags
    out += body
    struct.pack_into(">i", out, 0, len(out) - 4)
    return out


def tag_section(count: int, *, declared: int | None = None) -> bytes:
    """A tagged-field section of `count` empty fields with increasing tags; `declared` overrides the count."""
    out = bytearray(uvarint(count if declared is None else declared))
    for tag in range(count):
        out += uvarint(tag) + b"\x00"
    return bytes(out)


def refused(decode, *args) -> RemoteProtocolError:
    """Run `decode(*args)` under tracemalloc: it must raise RemoteProtocolError within PEAK_LIMIT bytes."""
    tracemalloc.start()
    try:
        try:
            decode(*args)
        except RemoteProtocolError as e:
            error = e
        else:
            pytest.fail("the frame was accepted")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < PEAK_LIMIT, f"peak {peak} bytes while refusing: {error}"
    return error


def server_refuses(frame: bytearray) -> str:
    """The server connection's own path: `parse` of one frame, as `buffer_updated` hands it over (the
    framer's copy of the bytes is the frame itself, built before measuring)."""
    conn = ServerConnection()
    return str(refused(conn.parse, frame[4:]))


# -- arrays --


def test_limits_are_kafkas():
    assert MAX_ARRAY_ELEMENTS == 1_000_000
    assert MAX_TAGGED_FIELDS == 10_000


HUGE_ARRAYS = {
    # non-flexible int32 counts
    "metadata-v1-int32-max": (METADATA, 1, struct.pack(">i", 2**31 - 1), "MetadataRequest.topics"),
    "metadata-v4-just-over-the-bytes": (METADATA, 4, struct.pack(">i", 3) + b"\x00\x00" * 2 + b"\x01",
                                        "MetadataRequest.topics"),
    "fetch-v4-topics": (FETCH, 4, struct.pack(">iiiibi", -1, 500, 1, 1 << 20, 0, 2**30), "FetchRequest.topics"),
    "describe-groups-v0": (DESCRIBE_GROUPS, 0, struct.pack(">i", 1_500_000) + b"\x00\x00" * 10, "DescribeGroupsRequest.groups"),
    "produce-v3-topics": (PRODUCE, 3, struct.pack(">hhii", -1, 1, 5000, 2**31 - 1), "ProduceRequest.topic_data"),
    # flexible compact counts (n + 1 as an unsigned varint)
    "metadata-v12-uvarint-max": (METADATA, 12, uvarint(2**32 - 1), "MetadataRequest.topics"),
    "metadata-v12-18-bytes-a-topic": (METADATA, 12, uvarint(100 + 1) + bytes(200), "MetadataRequest.topics"),
    "metadata-v12-inline-count": (METADATA, 12, uvarint(20 + 1) + bytes(300), "MetadataRequest.topics"),
    "describe-groups-v5": (DESCRIBE_GROUPS, 5, uvarint(2**31) + b"\x01" * 100, "DescribeGroupsRequest.groups"),
    "fetch-v15-topics": (FETCH, 15, struct.pack(">iiibii", 500, 1, 1 << 20, 0, 0, -1) + uvarint(2**20) + bytes(64),
                         "FetchRequest.topics"),
    "produce-v9-topics": (PRODUCE, 9, b"\x00" + struct.pack(">hi", 1, 5000) + uvarint(5000 + 1) + bytes(100),
                          "ProduceRequest.topic_data"),
}


@pytest.mark.parametrize("case", list(HUGE_ARRAYS.values()), ids=list(HUGE_ARRAYS))
def test_huge_array_counts_are_refused_before_allocating(case):
    api_key, version, body, field = case
    message = server_refuses(request_frame(api_key, version, body))
    assert field in message


def test_an_array_over_a_million_elements_is_refused_even_when_the_bytes_are_there():
    # DescribeGroups v5: a compact array of compact strings, one byte each when empty. 1,000,001 of them
    # fit in a 1 MB frame; the cap refuses the count before the list is built.
    over = MAX_ARRAY_ELEMENTS + 1
    frame = request_frame(DESCRIBE_GROUPS, 5, uvarint(over + 1) + b"\x01" * over + b"\x00\x00")
    message = server_refuses(frame)
    assert "DescribeGroupsRequest.groups" in message and "exceeds the maximum of 1000000" in message
    # The same, non-flexible (int16 string lengths: two bytes an element).
    frame = request_frame(DESCRIBE_GROUPS, 0, struct.pack(">i", over) + b"\x00\x00" * over)
    assert "exceeds the maximum of 1000000" in server_refuses(frame)
    # An array of structs: Metadata v1 topics, an empty name each.
    frame = request_frame(METADATA, 1, struct.pack(">i", over) + b"\x00\x00" * over)
    assert "MetadataRequest.topics" in server_refuses(frame)


def test_the_witness_tells_a_refusal_from_a_decode():
    """A legal frame of 30,000 two-letter group ids (90 kB) decodes, and its peak is near 2 MB: so a
    refusal under 1 MB means the count was refused before the list was built, not that lists are cheap.
    And a frame holding exactly MAX_ARRAY_ELEMENTS elements is still accepted."""
    n = 30_000
    frame = request_frame(DESCRIBE_GROUPS, 5, uvarint(n + 1) + (uvarint(3) + b"ab") * n + b"\x00\x00")[4:]
    conn = ServerConnection()
    tracemalloc.start()
    try:
        event = conn.parse(frame)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(event.request.groups) == n
    assert peak > 1.5 * PEAK_LIMIT
    at_cap = request_frame(DESCRIBE_GROUPS, 5, uvarint(MAX_ARRAY_ELEMENTS + 1) + b"\x01" * MAX_ARRAY_ELEMENTS + b"\x00\x00")
    assert len(conn.parse(at_cap[4:]).request.groups) == MAX_ARRAY_ELEMENTS


def test_an_int32_array_is_checked_at_four_bytes_an_element():
    # A Metadata v1 response whose partition's replica_nodes (an int32 array) claims 100 elements with
    # 200 bytes left: enough at one byte an element, not at four.
    from odradek.protocol.messages import MetadataResponse

    broker = MetadataResponse.MetadataResponseBroker(node_id=0, host="h", port=1)
    partition = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition(partition_index=0, replica_nodes=[1])
    topic = MetadataResponse.MetadataResponseTopic(name="t", partitions=[partition])
    data = bytearray(codec.encode(MetadataResponse(brokers=[broker], topics=[topic]), 1))
    needle = struct.pack(">iii", 1, 1, 0)  # replica_nodes [1], then isr_nodes []
    at = data.index(needle)
    data[at : at + 4] = struct.pack(">i", 100)
    data += bytes(200)
    error = refused(codec.decode, MetadataResponse, memoryview(data), 1)
    assert "replica_nodes" in str(error) and "at least 4 bytes each" in str(error)


# -- tagged fields --


def test_request_header_tagged_fields_over_10000_are_refused():
    frame = request_frame(METADATA, 12, b"\x01\x00\x00\x00", header_tags=tag_section(MAX_TAGGED_FIELDS + 1))
    assert "header: 10001 tagged fields exceed the maximum of 10000" in server_refuses(frame)


def test_body_tagged_fields_over_10000_are_refused():
    # Metadata v12: topics null, two booleans, then the body's tag section.
    for count in (MAX_TAGGED_FIELDS + 1, 200_000):
        frame = request_frame(METADATA, 12, b"\x00\x01\x00" + tag_section(count))
        message = server_refuses(frame)
        assert "MetadataRequest" in message and "exceed the maximum of 10000" in message


def test_nested_struct_tagged_fields_over_10000_are_refused():
    # Produce v9: one topic named "t" with no partitions, whose own tag section is huge.
    topic = uvarint(2) + b"t" + uvarint(1) + tag_section(MAX_TAGGED_FIELDS + 5)
    frame = request_frame(PRODUCE, 9, b"\x00" + struct.pack(">hi", 1, 5000) + uvarint(2) + topic + b"\x00")
    message = server_refuses(frame)
    assert "ProduceRequest.TopicProduceData" in message


@pytest.mark.parametrize("declared", [2**32 - 1, 2**31, 5000])
def test_a_tagged_field_count_the_bytes_cannot_hold_is_refused(declared):
    frame = request_frame(METADATA, 12, b"\x00\x01\x00" + tag_section(10, declared=declared))
    message = server_refuses(frame)
    assert "MetadataRequest" in message
    header = request_frame(METADATA, 12, b"\x00\x01\x00\x00", header_tags=tag_section(3, declared=declared))
    assert "header" in server_refuses(header)


def test_ten_thousand_tagged_fields_are_still_read():
    frame = request_frame(METADATA, 12, b"\x00\x01\x00" + tag_section(MAX_TAGGED_FIELDS))
    event = ServerConnection().parse(frame[4:])
    assert len(event.request.unknown_tagged_fields) == MAX_TAGGED_FIELDS


def test_a_huge_tagged_field_size_is_refused():
    body = b"\x00\x01\x00" + uvarint(1) + uvarint(0) + uvarint(2**31) + b"x" * 10
    assert "MetadataRequest tagged field" in server_refuses(request_frame(METADATA, 12, body))


# -- strings and bytes --


STRINGS = {
    "client-id-int16-max": (METADATA, 1, b"", "client id"),  # patched below
    "metadata-v1-topic-name": (METADATA, 1, struct.pack(">ih", 1, 32767) + b"abc", "MetadataRequest.MetadataRequestTopic.name"),
    "metadata-v12-compact-name": (METADATA, 12, uvarint(2) + bytes(16) + uvarint(2**31) + b"abc",
                                  "MetadataRequest.MetadataRequestTopic.name"),
    "produce-v3-records": (PRODUCE, 3, struct.pack(">hhi", -1, 1, 5000) + struct.pack(">ih", 1, 1) + b"t"
                           + struct.pack(">iii", 1, 0, 2**31 - 1) + bytes(64), "records"),
    "produce-v9-records": (PRODUCE, 9, b"\x00" + struct.pack(">hi", 1, 5000) + uvarint(2) + uvarint(2) + b"t"
                           + uvarint(2) + struct.pack(">i", 0) + uvarint(2**32 - 1) + bytes(64), "records"),
    "sasl-authenticate-v0-bytes": (SASL_AUTHENTICATE, 0, struct.pack(">i", 2**31 - 1) + b"tok", "auth_bytes"),
    "sasl-authenticate-v2-compact-bytes": (SASL_AUTHENTICATE, 2, uvarint(2**32 - 1) + b"tok", "auth_bytes"),
}


@pytest.mark.parametrize("case", list(STRINGS.values()), ids=list(STRINGS))
def test_huge_string_and_bytes_lengths_are_refused(case):
    api_key, version, body, field = case
    frame = request_frame(api_key, version, body)
    if field == "client id":
        struct.pack_into(">h", frame, 12, 32767)
    for fast in (False, True):
        conn = ServerConnection(fast_produce=fast)
        assert field in str(refused(conn.parse, frame[4:]))


# -- a client decoding a response, and metadata records --


def test_a_client_refuses_a_response_with_a_huge_count():
    client = ClientConnection()
    correlation_id, _ = client.send_request(FetchRequest(), 12)
    body = struct.pack(">ihi", 0, 0, 0) + uvarint(2**31) + b"\x00" * 8
    frame = bytearray(struct.pack(">iiB", 4 + 1 + len(body), correlation_id, 0) + body)
    error = refused(client.receive_data, frame)
    assert "FetchResponse.responses" in str(error)


def test_a_metadata_record_with_a_huge_replica_count_is_refused():
    data = bytearray(encode_metadata_record(PartitionRecord(partition_id=0, replicas=[1], isr=[1])))
    # PartitionRecord v0 is flexible: replicas is a compact int32 array, [1] = 0x02 then int32 1.
    at = data.index(b"\x02\x00\x00\x00\x01")
    data[at : at + 1] = uvarint(2**31)
    error = refused(decode_metadata_record, bytes(data))
    assert "PartitionRecord.replicas" in str(error)


# -- records inside a batch --


def batch_with_records_section(section: bytes, count: int) -> bytes:
    """A valid-CRC magic-2 batch whose records section is `section` and whose recordsCount is `count`."""
    from crc32c import crc32c

    template = bytearray(build_batch([(b"k", b"v", None, 1)]))
    out = bytearray(template[:61]) + section
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">i", out, 23, max(count - 1, 0))  # lastOffsetDelta
    struct.pack_into(">i", out, 57, count)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def record(headers_count: int, tail: bytes = b"") -> bytes:
    body = bytearray(b"\x00")  # attributes
    write_varint(body, 0)  # timestampDelta (a varlong: same bytes for 0)
    write_varint(body, 0)  # offsetDelta
    write_varint(body, -1)  # key null
    write_varint(body, -1)  # value null
    write_varint(body, headers_count)
    body += tail
    out = bytearray()
    write_varint(out, len(body))
    return bytes(out + body)


@pytest.mark.parametrize("count", [2**31 - 1, 1_000_000, 3])
def test_a_record_count_the_batch_cannot_hold_is_refused(count):
    batch = batch_with_records_section(record(0), count)
    error = refused(lambda: list(iter_records(batch, max_uncompressed_bytes=1 << 20)))
    assert isinstance(error, CorruptRecordError) and "recordsCount" in str(error)


@pytest.mark.parametrize("count", [2**31 - 1, 1_000_000, 50])
def test_a_header_count_the_record_cannot_hold_is_refused(count):
    batch = batch_with_records_section(record(count, b"\x00\x00" * 10), 1)
    error = refused(lambda: list(iter_records(batch, max_uncompressed_bytes=1 << 20)))
    assert isinstance(error, CorruptRecordError) and "headerCount" in str(error)


# -- the minimum sizes the counts are multiplied by are exact, never more than a real element --


def _minimal(cls: type, version: int, flexible: bool):
    """The smallest instance of a struct at a version: nulls where nullable, else empty or zero."""
    values = {}
    for f in cls.FIELDS:
        if version not in f.vrange or (flexible and version in f.trange):
            continue
        nullable = version in f.nrange
        if f.is_array:
            values[f.name] = None if nullable else []
        elif f.type in ("string", "bytes", "records"):
            values[f.name] = None if nullable else ("" if f.type == "string" else b"")
        elif f.is_struct:
            values[f.name] = None if nullable else _minimal(f._cls, version, flexible)
    return cls(**values)


def _structs(cls: type, version: int, seen: set):
    if cls in seen:
        return
    seen.add(cls)
    yield cls
    for f in cls.FIELDS:
        if version in f.vrange and (f.is_struct or f.is_struct_array):
            yield from _structs(f._cls, version, seen)


def test_min_struct_sizes_match_the_smallest_encoding_of_every_struct():
    checked = 0
    for top in list(REQUESTS.values()) + list(RESPONSES.values()):
        for version in range(top.VALID_VERSIONS[0], top.VALID_VERSIONS[1] + 1):
            flexible = codec.is_flexible(top, version)
            for cls in _structs(top, version, set()):
                out = bytearray()
                codec._codec_for(cls, version, flexible).encode_struct(_minimal(cls, version, flexible), out, [])
                assert codec._min_struct_size(cls, version, flexible, set()) == len(out), (cls.__qualname__, version)
                checked += 1
    assert checked > 1000


def test_legal_frames_at_the_limits_still_decode():
    # A Metadata v12 request naming 2,000 topics, and a Fetch v15 request of 300 topics: ordinary frames
    # near every check's edge (counts over 127 take the varint path) decode as before.
    topics = [MetadataRequest.MetadataRequestTopic(name=f"t{i}") for i in range(2000)]
    request = MetadataRequest(topics=topics)
    for version in (1, 4, 9, 12):
        assert codec.decode(MetadataRequest, codec.encode(request, version), version).topics[-1].name == "t1999"
    FT = FetchRequest.FetchTopic
    fetch = FetchRequest(max_wait_ms=500, topics=[FT(topic_id=codec.ZERO_UUID, partitions=[FT.FetchPartition(partition=0)])] * 300)
    assert len(codec.decode(FetchRequest, codec.encode(fetch, 15), 15).topics) == 300
    groups = DescribeGroupsRequest(groups=[""] * 5000)
    assert len(codec.decode(DescribeGroupsRequest, codec.encode(groups, 5), 5).groups) == 5000
    response = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(topic="t")] * 200)
    assert len(codec.decode(FetchResponse, codec.encode(response, 12), 12).responses) == 200
    produce = ProduceRequest(acks=1, timeout_ms=1, topic_data=[ProduceRequest.TopicProduceData(name="t")] * 200)
    assert len(codec.decode(ProduceRequest, codec.encode(produce, 9), 9).topic_data) == 200
