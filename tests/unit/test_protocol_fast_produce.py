"""The produce fast path's wire half against the generated codec, at every version it reads (v3-v8
classic, v9-v13 flexible, v13 by topic id): where `parse_produce` accepts a frame it
reads what the codec reads; it declines (None) every frame the codec refuses and every shape it does not
handle; `encode_produce_response` writes the codec's bytes."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.codec import encode
from odradek.protocol.connection import ClientConnection, RequestReceived, ServerConnection
from odradek.protocol.errors import RemoteProtocolError
from odradek.protocol.fast_produce import FAST_VERSIONS, ProduceFrame, encode_produce_response, parse_produce
from odradek.protocol.headers import RequestHeader, write_request_header
from odradek.protocol.messages import ProduceRequest, ProduceResponse

from .protocol_strategies import message

Topic = ProduceRequest.TopicProduceData
Part = Topic.PartitionProduceData
TopicResponse = ProduceResponse.TopicProduceResponse
PartResponse = TopicResponse.PartitionProduceResponse


def frame_of(request, version: int, client_id: str | None = "cli") -> bytearray:
    """The frame as the server's framer hands it over: without the 4-byte size."""
    _, data = ClientConnection(client_id=client_id).send_request(request, version)
    return bytearray(data[4:])


def codec_read(frame: bytearray):
    return ServerConnection().receive_data(len(frame).to_bytes(4, "big") + bytes(frame))[0]


def as_codec_shape(fast: ProduceFrame) -> list:
    return [(name, [(index, bytes(records)) for index, records in parts]) for name, _, parts in fast.topics]


def plain(request, version: int) -> list:
    return [(t.topic_id if version >= 13 else t.name, [(p.index, p.records) for p in t.partition_data])
            for t in request.topic_data]


def simple_request(**kw) -> ProduceRequest:
    values = {"transactional_id": None, "acks": -1, "timeout_ms": 30_000,
              "topic_data": [Topic(name="t", partition_data=[Part(index=0, records=b"\x01" * 300)])]}
    values.update(kw)
    return ProduceRequest(**values)


names = st.text(alphabet=st.characters(codec="utf-8"), max_size=20)
records = st.binary(min_size=0, max_size=400)  # over 127 bytes: a two-byte length
requests = st.builds(
    ProduceRequest,
    transactional_id=st.one_of(st.none(), names),
    acks=st.sampled_from([-1, 0, 1, 2]),
    timeout_ms=st.integers(-(2**31), 2**31 - 1),
    topic_data=st.lists(
        st.builds(Topic, name=names, topic_id=st.uuids(), partition_data=st.lists(
            st.builds(Part, index=st.integers(-(2**31), 2**31 - 1), records=records), max_size=3)),
        max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(request=requests, version=st.sampled_from(list(FAST_VERSIONS)), client_id=st.one_of(st.none(), names))
def test_reads_what_the_codec_reads(request, version, client_id):
    frame = frame_of(request, version, client_id)
    fast = parse_produce(frame, version)
    assert fast is not None
    event = codec_read(frame)
    assert (fast.correlation_id, fast.acks, fast.timeout_ms, fast.api_version, fast.transactional_id) == (
        event.header.correlation_id, event.request.acks, event.request.timeout_ms, version,
        event.request.transactional_id)
    assert fast.has_transactional_id is (event.request.transactional_id is not None)
    assert as_codec_shape(fast) == plain(event.request, version)
    assert all(raw == (key.bytes if version >= 13 else key.encode()) for key, raw, _ in fast.topics)
    assert fast.frame is frame


@settings(max_examples=200, deadline=None)
@given(request=message(ProduceRequest, 11), version=st.sampled_from(list(FAST_VERSIONS)))
def test_any_codec_message_is_read_alike_or_declined(request, version):
    """The generic strategy adds unknown tagged fields, null records and the like: the fast path must
    decline those it does not handle, and agree with the codec on the rest."""
    frame = frame_of(request, version)
    fast = parse_produce(frame, version)
    if fast is not None:
        assert as_codec_shape(fast) == plain(codec_read(frame).request, version)


@settings(max_examples=100, deadline=None)
@given(request=requests, version=st.sampled_from(list(FAST_VERSIONS)), data=st.data())
def test_a_truncated_frame_is_declined(request, version, data):
    frame = frame_of(request, version)
    cut = data.draw(st.integers(0, len(frame) - 1))
    short = frame[:cut]
    assert parse_produce(short, version) is None
    with pytest.raises(RemoteProtocolError):
        codec_read(short)


def test_declines_what_it_does_not_handle():
    assert parse_produce(frame_of(simple_request(), 9), 9) is not None
    # header tagged fields
    out = bytearray()
    write_request_header(out, RequestHeader(0, 9, 7, "cli", [(3, b"x")]))
    out += encode(simple_request(), 9)
    assert parse_produce(out, 9) is None
    # body tagged fields, null records, a long name (a two-byte compact length)
    assert parse_produce(frame_of(simple_request(unknown_tagged_fields=[(5, b"y")]), 9), 9) is None
    nulls = simple_request(topic_data=[Topic(name="t", partition_data=[Part(index=0, records=None)])])
    assert parse_produce(frame_of(nulls, 10), 10) is None
    long_name = simple_request(topic_data=[Topic(name="n" * 200, partition_data=[Part(index=0, records=b"r")])])
    assert parse_produce(frame_of(long_name, 11), 11) is None
    assert parse_produce(frame_of(long_name, 8), 8) is not None  # an int16 length: nothing special
    assert parse_produce(frame_of(nulls, 7), 7) is None
    # a client id that is not UTF-8
    frame = frame_of(simple_request(), 9, client_id="ab")
    frame[10] = 0xFF
    assert parse_produce(frame, 9) is None


def test_server_connection_hands_out_produce_frames_only_when_asked():
    fast, slow = ServerConnection(fast_produce=True), ServerConnection()
    for version in (3, 8, 9, 12, 13):
        req = simple_request()
        if version == 13:
            req = simple_request(topic_data=[])
        _, data = ClientConnection().send_request(req, version)
        got_fast, got_slow = fast.receive_data(data)[0], slow.receive_data(data)[0]
        assert type(got_slow) is RequestReceived
        assert type(got_fast) is (ProduceFrame if version in FAST_VERSIONS else RequestReceived)
        if type(got_fast) is ProduceFrame:
            again = fast.decode(got_fast.frame)  # the way back to the general path
            assert again.request == got_slow.request and again.header == got_slow.header


texts = st.one_of(st.none(), st.text(alphabet=st.characters(codec="utf-8"), max_size=150))
partition_results = st.tuples(
    st.integers(-(2**31), 2**31 - 1), st.integers(-(2**15), 2**15 - 1), st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1), texts,
    # KIP-467's record_errors: (batch index, message), nearly always none
    st.one_of(st.just(()), st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), texts), max_size=130)),
)


@settings(max_examples=300, deadline=None)
@given(
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    topics=st.lists(st.tuples(names, st.lists(partition_results, max_size=4)), max_size=3),
    version=st.sampled_from(list(FAST_VERSIONS)),
)
def test_encodes_the_codecs_bytes(correlation_id, topics, version):
    ids = [uuid.uuid5(uuid.NAMESPACE_URL, name) for name, _ in topics]
    response = ProduceResponse(throttle_time_ms=0, responses=[
        TopicResponse(name=name, topic_id=topic_id, partition_responses=[
            PartResponse(index=i, error_code=e, base_offset=b, log_append_time_ms=a, log_start_offset=s, error_message=m,
                         record_errors=[PartResponse.BatchIndexAndErrorMessage(batch_index=bi, batch_index_error_message=bm)
                                        for bi, bm in r])
            for i, e, b, a, s, m, r in parts])
        for (name, parts), topic_id in zip(topics, ids)])
    (codec,) = ServerConnection().send_response(RequestHeader(0, version, correlation_id), response)
    keys = [topic_id.bytes if version >= 13 else name.encode() for (name, _), topic_id in zip(topics, ids)]
    fast = encode_produce_response(correlation_id, [(key, parts) for key, (_, parts) in zip(keys, topics)], version)
    assert bytes(fast) == bytes(codec)


def test_many_topics_and_partitions_take_multi_byte_lengths():
    parts = [(i, 0, i, -1, 0, None, ()) for i in range(130)]
    topics = [(b"t%d" % n, parts) for n in range(128)]
    response = ProduceResponse(throttle_time_ms=0, responses=[
        TopicResponse(name=name.decode(), partition_responses=[
            PartResponse(index=i, error_code=e, base_offset=b, log_append_time_ms=a, log_start_offset=s)
            for i, e, b, a, s, _, _ in ps])
        for name, ps in topics])
    for version in (8, 12):
        (codec,) = ServerConnection().send_response(RequestHeader(0, version, 5), response)
        assert bytes(encode_produce_response(5, topics, version)) == bytes(codec)
    # A request that large is left to the codec at a flexible version (two-byte compact counts), and read
    # at a classic one (int32 counts).
    many = simple_request(topic_data=[Topic(name="t", partition_data=[Part(index=i, records=b"r") for i in range(130)])])
    frame = frame_of(many, 12)
    assert parse_produce(frame, 12) is None
    assert len(codec_read(frame).request.topic_data[0].partition_data) == 130
    frame = frame_of(many, 8)
    assert as_codec_shape(parse_produce(frame, 8)) == plain(codec_read(frame).request, 8)


@pytest.mark.parametrize("size", [0, 126, 127, 128, 16_382, 16_383, 16_384, 70_000])
def test_records_lengths_of_one_two_and_three_bytes(size):
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    for version in (5, 10):
        frame = frame_of(simple_request(topic_data=[Topic(name="t", partition_data=[Part(index=3, records=data)])]), version)
        fast = parse_produce(frame, version)
        assert as_codec_shape(fast) == plain(codec_read(frame).request, version) == [("t", [(3, data)])]


@settings(max_examples=400, deadline=None)
@given(request=requests, version=st.sampled_from(list(FAST_VERSIONS)), data=st.data())
def test_a_mutated_frame_is_read_as_the_codec_reads_it_or_declined(request, version, data):
    """Flipped bytes anywhere (lengths, counts, tags): whatever the fast reader still accepts, the codec
    must accept too and read alike, since the general path may be handed any frame it accepted."""
    frame = frame_of(request, version)
    for _ in range(data.draw(st.integers(1, 4))):
        frame[data.draw(st.integers(0, len(frame) - 1))] = data.draw(st.integers(0, 255))
    frame[0:4] = version.to_bytes(4, "big")  # api key 0 and the version: the connection checked both
    fast = parse_produce(frame, version)
    if fast is None:
        return
    event = ServerConnection().decode(frame)
    assert as_codec_shape(fast) == plain(event.request, version)
    assert (fast.correlation_id, fast.acks, fast.timeout_ms, fast.transactional_id) == (
        event.header.correlation_id, event.request.acks, event.request.timeout_ms,
        event.request.transactional_id)
