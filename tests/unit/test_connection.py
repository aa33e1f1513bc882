"""ServerConnection and ClientConnection: framing, blame, the ApiVersions quirks and zero-copy chunks.

Byte strings marked "§4.4" are the worked examples of docs' reference `kafka-protocol.md` §4.4, produced
there with kafka-python's codecs: they are outside evidence, not our own output played back.
"""

from __future__ import annotations

import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.codec import FileRegion, encode
from odradek.protocol.connection import (
    ApiVersionsUnsupported,
    ClientConnection,
    RequestReceived,
    ResponseReceived,
    ServerConnection,
    frame_chunks_size,
)
from odradek.protocol.errors import RemoteProtocolError
from odradek.protocol.headers import RequestHeader
from odradek.protocol.messages import REQUESTS, RESPONSES

ApiVersionsRequest, ApiVersionsResponse = REQUESTS[18], RESPONSES[18]
MetadataRequest, MetadataResponse = REQUESTS[3], RESPONSES[3]
ProduceRequest, FetchRequest, FetchResponse = REQUESTS[0], REQUESTS[1], RESPONSES[1]
FindCoordinatorRequest = REQUESTS[10]

# §4.4: ApiVersions v3 request, client_id "cli", correlation id 1.
API_VERSIONS_V3_REQUEST = (
    bytes.fromhex("00000023 0012 0003 00000001 0003") + b"cli" + b"\x00"
    + b"\x0d" + b"kafka-python" + b"\x07" + b"3.0.12" + b"\x00"
)
# §4.4: ApiVersions v3 response with one entry {18, 0, 4}: response header v0, no tag byte.
API_VERSIONS_V3_RESPONSE = bytes.fromhex("00000013 00000001 0000 02 0012 0000 0004 00 00000000 00")
# §4.4: the KIP-511 reply to an ApiVersions version we do not know: v0 header, v0 body, error 35.
API_VERSIONS_UNSUPPORTED = bytes.fromhex("00000010 00000001 0023 00000001 0012 0000 0003")
# §4.4: Metadata v12 request for all topics (topics = compact null), client_id "cli", correlation id 2.
METADATA_V12_REQUEST = bytes.fromhex("00000012 0003 000c 00000002 0003") + b"cli" + bytes.fromhex("00 00 00 00 00")


def _sample_frames() -> bytes:
    """A stream of varied requests: flexible and not, with records, with a null client id."""
    client = ClientConnection(client_id="sample")
    frames = [API_VERSIONS_V3_REQUEST, METADATA_V12_REQUEST]
    frames.append(client.send_request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="t")]), 5)[1])
    topic = ProduceRequest.TopicProduceData(
        name="t", partition_data=[ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=b"R" * 70)]
    )
    frames.append(client.send_request(ProduceRequest(acks=-1, timeout_ms=30_000, topic_data=[topic]), 9)[1])
    frames.append(client.send_request(ProduceRequest(acks=1, timeout_ms=1, topic_data=[topic]), 7)[1])
    part = FetchRequest.FetchTopic.FetchPartition(partition=0, fetch_offset=5, partition_max_bytes=1 << 20)
    fetch = FetchRequest(max_wait_ms=500, min_bytes=1, topics=[FetchRequest.FetchTopic(topic="t", partitions=[part])])
    frames.append(client.send_request(fetch, 12)[1])
    frames.append(client.send_request(FindCoordinatorRequest(key_type=0, coordinator_keys=["g"]), 6)[1])
    anonymous = ClientConnection(client_id=None)
    frames.append(anonymous.send_request(ApiVersionsRequest(), 0)[1])
    return b"".join(frames)


STREAM = _sample_frames()
N_FRAMES = 8


def _events_whole(data: bytes) -> list:
    return ServerConnection().receive_data(data)


def _events_split(data: bytes, cuts) -> list:
    conn = ServerConnection()
    events = []
    bounds = [0, *sorted(set(cuts)), len(data)]
    for a, b in zip(bounds, bounds[1:]):
        events += conn.receive_data(data[a:b])
    assert conn.buffered_bytes == 0
    return events


# ---------------------------------------------------------------------------------------------------
# Framing


def test_whole_stream_gives_every_request():
    events = _events_whole(STREAM)
    assert len(events) == N_FRAMES
    assert all(isinstance(e, RequestReceived) for e in events)
    assert [(e.header.api_key, e.header.api_version) for e in events] == [
        (18, 3), (3, 12), (3, 5), (0, 9), (0, 7), (1, 12), (10, 6), (18, 0)
    ]
    assert events[0].request == ApiVersionsRequest(client_software_name="kafka-python", client_software_version="3.0.12")
    assert events[0].header == RequestHeader(18, 3, 1, "cli")
    assert events[1].request == MetadataRequest(topics=None, allow_auto_topic_creation=False)
    assert bytes(events[3].request.topic_data[0].partition_data[0].records) == b"R" * 70
    assert events[-1].header.client_id is None
    assert sum(e.frame_size + 4 for e in events) == len(STREAM)


def test_byte_at_a_time_gives_the_same_events():
    assert _events_split(STREAM, range(1, len(STREAM))) == _events_whole(STREAM)


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(1, len(STREAM) - 1), max_size=12))
def test_random_splits_give_the_same_events(cuts):
    assert _events_split(STREAM, cuts) == _events_whole(STREAM)


def test_each_event_arrives_with_its_last_byte():
    conn = ServerConnection()
    ends = []
    for i in range(len(STREAM)):
        if conn.receive_data(STREAM[i : i + 1]):
            ends.append(i + 1)
    expected, pos = [], 0
    for e in _events_whole(STREAM):
        pos += 4 + e.frame_size
        expected.append(pos)
    assert ends == expected


def test_trailing_partial_frame_waits():
    first_len = 4 + int.from_bytes(STREAM[:4], "big")
    for partial in (1, 3, 4, 5, 20):
        conn = ServerConnection()
        events = conn.receive_data(STREAM[: first_len + partial])
        assert len(events) == 1
        assert conn.buffered_bytes == partial
        rest = conn.receive_data(STREAM[first_len + partial :])
        assert len(rest) == N_FRAMES - 1
        assert conn.buffered_bytes == 0


def test_empty_data_is_harmless():
    conn = ServerConnection()
    assert conn.receive_data(b"") == []
    assert conn.receive_data(STREAM[:2]) == []
    assert conn.receive_data(b"") == []
    assert conn.buffered_bytes == 2


@pytest.mark.parametrize("size_field", [b"\x7f\xff\xff\xff", b"\x06\x40\x00\x01", b"\x80\x00\x00\x00", b"\xff\xff\xff\xff"])
def test_oversize_or_negative_size_is_refused_before_buffering(size_field):
    """2 GB, the default limit + 1, INT32_MIN and -1: refused on the 4-byte header alone."""
    conn = ServerConnection()
    tracemalloc.start()
    try:
        with pytest.raises(RemoteProtocolError, match="frame size"):
            conn.receive_data(size_field)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


def test_oversize_is_refused_on_its_fourth_byte():
    conn = ServerConnection(max_frame_bytes=1000)
    for b in b"\x00\x00\x03":
        assert conn.receive_data(bytes([b])) == []
    with pytest.raises(RemoteProtocolError):
        conn.receive_data(b"\xe9")  # 1001


def test_frame_at_the_limit_is_accepted():
    frame = METADATA_V12_REQUEST
    conn = ServerConnection(max_frame_bytes=len(frame) - 4)
    assert len(conn.receive_data(frame)) == 1
    conn = ServerConnection(max_frame_bytes=len(frame) - 5)
    with pytest.raises(RemoteProtocolError):
        conn.receive_data(frame)


def test_oversize_after_a_good_frame_in_the_same_chunk():
    conn = ServerConnection()
    with pytest.raises(RemoteProtocolError):
        conn.receive_data(METADATA_V12_REQUEST + b"\x7f\xff\xff\xff")


def _frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


@pytest.mark.parametrize(
    "frame",
    [
        _frame(b""),  # no header at all
        _frame(b"\x00\x03\x00"),  # shorter than key + version
        _frame(b"\x00\x03\x00\x0c\x00\x00"),  # cut inside the correlation id
        _frame(b"\x00\x03\x00\x0c\x00\x00\x00\x02"),  # no client id
        _frame(b"\x00\x03\x00\x0c\x00\x00\x00\x02\x00\x09cli"),  # client id overruns the frame
        _frame(b"\x00\x03\x00\x0c\x00\x00\x00\x02\xff\xfe"),  # client id length -2
        _frame(b"\x00\x03\x00\x0c\x00\x00\x00\x02\x00\x02\xff\xfe\x00\x00\x00\x00\x00"),  # client id not UTF-8
        _frame(b"\x00\x03\x00\x0c\x00\x00\x00\x02\x00\x00"),  # flexible header without its tag buffer
        _frame(b"\x00\x03\x00\x0c\x00\x00\x00\x02\x00\x00\x01\x00\x05ab"),  # header tag overruns
        _frame(METADATA_V12_REQUEST[4:-1]),  # body cut short
    ],
    ids=["empty", "short", "no-corr", "no-client-id", "client-id-overrun", "client-id-negative", "client-id-utf8",
         "no-header-tags", "header-tag-overrun", "truncated-body"],
)
def test_malformed_frames_are_remote_errors(frame):
    with pytest.raises(RemoteProtocolError):
        ServerConnection().receive_data(frame)


def test_bytes_after_a_request_body_are_ignored():
    """As Kafka does: librdkafka's all-topics Metadata v13 ends with three stray bytes (see vectors)."""
    for extra in (b"\x00", b"\x01\x00\x00", b"\xff" * 10):
        (event,) = ServerConnection().receive_data(_frame(METADATA_V12_REQUEST[4:] + extra))
        assert event.request == MetadataRequest(topics=None, allow_auto_topic_creation=False)
        assert event.frame_size == len(METADATA_V12_REQUEST) - 4 + len(extra)


def test_bytes_after_a_response_body_are_refused_by_the_client():
    client = ClientConnection()
    client.send_request(MetadataRequest(), 12)
    frame = b"".join(ServerConnection().send_response(RequestHeader(3, 12, 0, "x"), MetadataResponse()))
    with pytest.raises(RemoteProtocolError, match="trailing"):
        client.receive_data(_frame(frame[4:] + b"\x00"))


# ---------------------------------------------------------------------------------------------------
# Unknown keys and versions


def _header_only(api_key: int, version: int) -> bytes:
    return _frame(api_key.to_bytes(2, "big", signed=True) + version.to_bytes(2, "big", signed=True) + b"\x00\x00\x00\x07\x00\x00\x00")


@pytest.mark.parametrize("api_key", [4, 5, 6, 7, 999, 32767, -1])
def test_unknown_api_key_is_remote_error(api_key):
    with pytest.raises(RemoteProtocolError, match="api key"):
        ServerConnection().receive_data(_header_only(api_key, 0))


@pytest.mark.parametrize(("api_key", "version"), [(0, 0), (0, 2), (0, 14), (1, 3), (1, 19), (3, 14), (3, -1)])
def test_unsupported_version_is_remote_error(api_key, version):
    with pytest.raises(RemoteProtocolError, match="version"):
        ServerConnection().receive_data(_header_only(api_key, version))


def test_supported_table_narrows_what_is_accepted():
    conn = ServerConnection(supported={18: (0, 4), 3: (0, 12)})
    assert len(conn.receive_data(METADATA_V12_REQUEST)) == 1
    with pytest.raises(RemoteProtocolError):
        ServerConnection(supported={18: (0, 4), 3: (0, 11)}).receive_data(METADATA_V12_REQUEST)
    with pytest.raises(RemoteProtocolError, match="api key"):
        ServerConnection(supported={18: (0, 4)}).receive_data(METADATA_V12_REQUEST)


# ---------------------------------------------------------------------------------------------------
# ApiVersions (KIP-511)


@pytest.mark.parametrize("version", [5, 127, 32767, -1])
def test_api_versions_at_unknown_version_yields_unsupported_event(version):
    # The body is whatever a future client sends; it must not be parsed.
    body = b"\x00\x12" + version.to_bytes(2, "big", signed=True) + b"\x00\x00\x00\x01\x00\x03cli" + b"\xde\xad\xbe\xef"
    conn = ServerConnection()
    (event,) = conn.receive_data(_frame(body))
    assert isinstance(event, ApiVersionsUnsupported)
    assert event.header == RequestHeader(18, version, 1, "cli")
    assert b"".join(conn.send_api_versions_unsupported(event.header, {18: (0, 3)})) == API_VERSIONS_UNSUPPORTED


def test_api_versions_above_the_supported_table_yields_unsupported_event():
    conn = ServerConnection(supported={18: (0, 2)})
    (event,) = conn.receive_data(API_VERSIONS_V3_REQUEST)
    assert isinstance(event, ApiVersionsUnsupported)
    assert event.header.correlation_id == 1 and event.header.client_id == "cli"
    assert event.frame_size == len(API_VERSIONS_V3_REQUEST) - 4


def test_api_versions_v3_response_matches_worked_example():
    conn = ServerConnection()
    (event,) = conn.receive_data(API_VERSIONS_V3_REQUEST)
    response = ApiVersionsResponse(api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4)])
    assert b"".join(conn.send_response(event.header, response)) == API_VERSIONS_V3_RESPONSE


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_api_versions_response_header_never_has_a_tag_byte(version):
    conn = ServerConnection()
    response = ApiVersionsResponse(api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4)])
    frame = b"".join(conn.send_response(RequestHeader(18, version, 77, "c"), response))
    assert frame[4:8] == (77).to_bytes(4, "big")
    assert frame[8:] == encode(response, version)  # the body starts right after the correlation id


@pytest.mark.parametrize(("api_key", "version", "tag_byte"), [(3, 8, False), (3, 9, True), (3, 12, True), (1, 11, False), (1, 12, True)])
def test_other_response_headers_carry_tags_when_flexible(api_key, version, tag_byte):
    response = RESPONSES[api_key]()
    frame = b"".join(ServerConnection().send_response(RequestHeader(api_key, version, 5, "c"), response))
    body_at = 9 if tag_byte else 8
    if tag_byte:
        assert frame[8] == 0
    assert frame[body_at:] == encode(response, version)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4


# ---------------------------------------------------------------------------------------------------
# Zero-copy records


def _fetch_response(records_per_partition: list) -> object:
    partitions = [
        FetchResponse.FetchableTopicResponse.PartitionData(partition_index=i, high_watermark=10, records=r)
        for i, r in enumerate(records_per_partition)
    ]
    return FetchResponse(responses=[FetchResponse.FetchableTopicResponse(topic="t", partitions=partitions)])


def _materialize(chunks: list, files: dict[int, bytes]) -> bytes:
    out = bytearray()
    for c in chunks:
        if isinstance(c, FileRegion):
            out += files[c.fd][c.position : c.position + c.length]
        else:
            out += c
    return bytes(out)


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_file_region_records_become_their_own_chunk(version):
    data = bytes(range(256)) * 4
    region = FileRegion(fd=7, position=100, length=300)
    header = RequestHeader(1, version, 9, "c")
    chunks = ServerConnection().send_response(header, _fetch_response([[region]]))
    assert isinstance(chunks[0], (bytes, bytearray))
    assert chunks[1] == region
    if version >= 12:
        # Flexible: the partition's, topic's and body's tag buffers follow the records.
        assert len(chunks) == 3 and chunks[2] == b"\x00\x00\x00"
    else:
        # Records are the last field of the last partition: the region ends the frame.
        assert len(chunks) == 2
    assert int.from_bytes(chunks[0][:4], "big") == frame_chunks_size(chunks) - 4
    # Sent by sendfile, the region's bytes make exactly the frame a bytes-valued response makes.
    plain = ServerConnection().send_response(header, _fetch_response([data[100:400]]))
    assert _materialize(chunks, {7: data}) == b"".join(plain)


def test_several_regions_and_mixed_records():
    data = b"x" * 50 + b"y" * 50
    a, b = FileRegion(3, 0, 50), FileRegion(3, 50, 50)
    header = RequestHeader(1, 12, 0, "c")
    chunks = ServerConnection().send_response(header, _fetch_response([[a], [b"head", b, b"tail"], b"", [a, b]]))
    kinds = ["R" if isinstance(c, FileRegion) else "b" for c in chunks]
    assert kinds == ["b", "R", "b", "R", "b", "R", "R", "b"]
    assert int.from_bytes(chunks[0][:4], "big") == frame_chunks_size(chunks) - 4
    client = ClientConnection()
    client.send_request(FetchRequest(), 12)
    (event,) = client.receive_data(_materialize(chunks, {3: data}))
    got = [bytes(p.records) for p in event.response.responses[0].partitions]
    assert got == [data[:50], b"head" + data[50:] + b"tail", b"", data]


# ---------------------------------------------------------------------------------------------------
# ClientConnection


def test_client_request_bytes_match_worked_examples():
    client = ClientConnection(client_id="cli")
    client.send_request(MetadataRequest(), 1, expect_response=False)  # correlation id 0
    corr, frame = client.send_request(
        ApiVersionsRequest(client_software_name="kafka-python", client_software_version="3.0.12"), 3
    )
    assert (corr, frame) == (1, API_VERSIONS_V3_REQUEST)
    corr, frame = client.send_request(MetadataRequest(topics=None, allow_auto_topic_creation=False), 12)
    assert (corr, frame) == (2, METADATA_V12_REQUEST)
    assert client.in_flight == 2


def test_client_decodes_responses_in_order_byte_at_a_time():
    client = ClientConnection()
    client.send_request(ApiVersionsRequest(), 3)
    client.send_request(MetadataRequest(topics=None), 12)
    server = ServerConnection()
    av = ApiVersionsResponse(api_keys=[ApiVersionsResponse.ApiVersion(api_key=3, min_version=0, max_version=13)])
    md = MetadataResponse(cluster_id="c", brokers=[MetadataResponse.MetadataResponseBroker(node_id=1, host="h", port=9)])
    wire = b"".join(server.send_response(RequestHeader(18, 3, 0, "x"), av))
    wire += b"".join(server.send_response(RequestHeader(3, 12, 1, "x"), md))
    events = []
    for i in range(len(wire)):
        events += client.receive_data(wire[i : i + 1])
    assert events == [ResponseReceived(0, 18, 3, av), ResponseReceived(1, 3, 12, md)]
    assert client.in_flight == 0


@pytest.mark.parametrize("record_bytes", [100, 100_000, 3 << 20])  # a small frame, a large one, one above WHOLE_FRAME
def test_client_reads_into_its_own_buffers_as_a_buffered_protocol(record_bytes):
    """get_buffer/buffer_updated (how a NodeConnection's socket reads) give what receive_data gives, the
    transport filling each buffer only partly, a large response straight into its own frame."""
    from odradek.protocol.messages import FetchResponse

    records = bytes(range(256)) * (record_bytes // 256)
    part = FetchResponse.FetchableTopicResponse.PartitionData(partition_index=0, high_watermark=7, records=records)
    fetch = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(topic="t", partitions=[part])])
    client = ClientConnection()
    client.send_request(REQUESTS[1](), 11)
    client.send_request(MetadataRequest(topics=None), 12)
    server = ServerConnection()
    wire = b"".join(server.send_response(RequestHeader(1, 11, 0, "x"), fetch))
    wire += b"".join(server.send_response(RequestHeader(3, 12, 1, "x"), MetadataResponse(cluster_id="c")))
    events, pos = [], 0
    while pos < len(wire):
        target = client.get_buffer()
        n = min(len(target), len(wire) - pos, 50_000)
        target[:n] = wire[pos : pos + n]
        pos += n
        events += client.buffer_updated(n)
    assert [(e.correlation_id, e.api_key) for e in events] == [(0, 1), (1, 3)]
    assert bytes(events[0].response.responses[0].partitions[0].records) == part.records
    assert client.in_flight == 0


def test_client_rejects_out_of_order_correlation_ids():
    client = ClientConnection()
    client.send_request(MetadataRequest(), 12)
    client.send_request(MetadataRequest(), 12)
    second = b"".join(ServerConnection().send_response(RequestHeader(3, 12, 1, "x"), MetadataResponse()))
    with pytest.raises(RemoteProtocolError, match="correlation id"):
        client.receive_data(second)


def test_client_rejects_a_response_with_nothing_in_flight():
    client = ClientConnection()
    client.send_request(ProduceRequest(acks=0, timeout_ms=1), 9, expect_response=False)  # acks=0: no response
    assert client.in_flight == 0
    with pytest.raises(RemoteProtocolError, match="in flight"):
        client.receive_data(b"".join(ServerConnection().send_response(RequestHeader(0, 9, 0, "x"), RESPONSES[0]())))


def test_client_decodes_the_kip_511_fallback():
    client = ClientConnection(client_id="cli")
    client.send_request(MetadataRequest(), 1, expect_response=False)
    client.send_request(ApiVersionsRequest(client_software_name="odradek", client_software_version="0"), 4)
    (event,) = client.receive_data(API_VERSIONS_UNSUPPORTED)
    assert (event.correlation_id, event.api_key, event.api_version) == (1, 18, 4)
    assert event.response.error_code == 35
    assert event.response.api_keys == [ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=3)]


def test_client_and_server_fallback_end_to_end():
    client = ClientConnection()
    _, frame = client.send_request(ApiVersionsRequest(client_software_name="a", client_software_version="1"), 4)
    server = ServerConnection(supported={18: (0, 3), 3: (0, 12)})
    (event,) = server.receive_data(frame)
    assert isinstance(event, ApiVersionsUnsupported)
    (reply,) = client.receive_data(b"".join(server.send_api_versions_unsupported(event.header, server.supported)))
    assert reply.response.error_code == 35
    assert {(k.api_key, k.min_version, k.max_version) for k in reply.response.api_keys} == {(18, 0, 3), (3, 0, 12)}


def test_client_rejects_a_malformed_response():
    client = ClientConnection()
    client.send_request(MetadataRequest(), 12)
    with pytest.raises(RemoteProtocolError):
        client.receive_data(_frame(b"\x00\x00\x00\x00\x00\x05"))  # correlation id, tags, then garbage
