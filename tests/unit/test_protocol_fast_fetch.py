"""protocol.fast_fetch: the Fetch response packed directly is the generated codec's, chunk for chunk (the
same bytes around the same file regions), at every version the broker serves."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.codec import FileRegion
from odradek.protocol.connection import ClientConnection, ServerConnection
from odradek.protocol.fast_fetch import FAST_VERSIONS, encode_fetch_response
from odradek.protocol.headers import RequestHeader
from odradek.protocol.messages import FetchRequest, FetchResponse

TopicResponse = FetchResponse.FetchableTopicResponse
PartitionData = TopicResponse.PartitionData

names = st.text(alphabet=st.characters(codec="utf-8"), min_size=1, max_size=140)
int64 = st.integers(-(2**63), 2**63 - 1)
records = st.one_of(
    st.just([]),
    st.lists(st.one_of(st.builds(FileRegion, st.integers(0, 50), st.integers(0, 2**40), st.integers(0, 70_000)),
                       st.binary(max_size=300)), max_size=3),
)
partitions = st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**15), 2**15 - 1), int64, int64, int64,
                       st.sampled_from([None, []]), records)


def _normalized(chunks) -> list:
    """Adjacent byte chunks merged; regions as they are."""
    out: list = []
    for c in chunks:
        if isinstance(c, FileRegion):
            out.append(tuple(c))
        elif out and isinstance(out[-1], bytes):
            out[-1] += bytes(c)
        elif len(c):
            out.append(bytes(c))
    return out


def _codec(correlation_id: int, topics, version: int) -> list:
    ids = [uuid.uuid5(uuid.NAMESPACE_URL, name) for name, _ in topics]
    response = FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        TopicResponse(topic=name, topic_id=topic_id, partitions=[
            PartitionData(partition_index=i, error_code=e, high_watermark=hw, last_stable_offset=lso,
                          log_start_offset=start, aborted_transactions=aborted, records=recs or b"")
            for i, e, hw, lso, start, aborted, recs in parts])
        for (name, parts), topic_id in zip(topics, ids, strict=True)])
    return ServerConnection().send_response(RequestHeader(1, version, correlation_id), response)


def _fast(correlation_id: int, topics, version: int) -> list:
    keys = [uuid.uuid5(uuid.NAMESPACE_URL, name).bytes if version >= 13 else name for name, _ in topics]
    return encode_fetch_response(correlation_id, [(k, parts) for k, (_, parts) in zip(keys, topics, strict=True)], version)


@settings(max_examples=400, deadline=None)
@given(
    correlation_id=st.integers(-(2**31), 2**31 - 1),
    topics=st.lists(st.tuples(names, st.lists(partitions, max_size=4)), max_size=3),
    version=st.sampled_from(list(FAST_VERSIONS)),
)
def test_encodes_the_codecs_chunks(correlation_id, topics, version):
    assert _normalized(_fast(correlation_id, topics, version)) == _normalized(_codec(correlation_id, topics, version))


def test_many_topics_and_partitions_and_long_records():
    parts = [(i, 0, i, i, 0, None, [FileRegion(3, i, 20_000)]) for i in range(130)]
    topics = [(f"t{n}", parts) for n in range(128)]
    for version in (4, 11, 12, 16, 18):
        assert _normalized(_fast(9, topics, version)) == _normalized(_codec(9, topics, version))


def test_a_client_reads_it():
    """The frame decodes as the response it stands for (records given as bytes here)."""
    client = ClientConnection()
    request = FetchRequest(max_wait_ms=500, min_bytes=1, topics=[])
    for version in FAST_VERSIONS:
        correlation_id, _ = client.send_request(request, version)
        topics = [("orders", [(0, 0, 10, 10, 0, None, [b"x" * 70]), (1, 6, -1, -1, -1, None, [])])]
        chunks = _fast(correlation_id, topics, version)
        (event,) = client.receive_data(b"".join(bytes(c) for c in chunks))
        (topic,) = event.response.responses
        assert [(p.partition_index, p.error_code, p.high_watermark, bytes(p.records or b"")) for p in topic.partitions] == [
            (0, 0, 10, b"x" * 70), (1, 6, -1, b"")]


# -- a follower's Fetch request (encode_follower_fetch) --

int32 = st.integers(-(2**31), 2**31 - 1)
request_partitions = st.tuples(int32, int32, int64, int32, int64, int32,
                               st.one_of(st.just(2**63 - 1), st.just(-1), st.integers(0, 2**62)))


@settings(max_examples=300, deadline=None)
@given(version=st.sampled_from([15, 16, 17, 18]), replica_id=int32, replica_epoch=int64, wait=int32, min_bytes=int32,
       max_bytes=int32, correlation=st.integers(0, 2**31 - 1),
       topics=st.lists(st.tuples(st.uuids(), st.lists(request_partitions, max_size=4)), max_size=3))
def test_follower_request_is_the_codecs(version, replica_id, replica_epoch, wait, min_bytes, max_bytes, correlation, topics):
    from odradek.protocol.fast_fetch import encode_follower_fetch

    fields = dict(replica_id=replica_id, replica_epoch=replica_epoch, max_wait_ms=wait, min_bytes=min_bytes,
                  max_bytes=max_bytes)
    request = FetchRequest(
        max_wait_ms=wait, min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=0, session_id=0, session_epoch=-1,
        rack_id="", forgotten_topics_data=[],
        topics=[FetchRequest.FetchTopic(topic="", topic_id=topic_id, partitions=[
            FetchRequest.FetchTopic.FetchPartition(
                partition=index, current_leader_epoch=epoch, fetch_offset=offset, last_fetched_epoch=last,
                log_start_offset=start, partition_max_bytes=part_max, **({"high_watermark": hw} if version >= 18 else {}))
            for index, epoch, offset, last, start, part_max, hw in parts]) for topic_id, parts in topics],
        replica_state=FetchRequest.ReplicaState(replica_id=replica_id, replica_epoch=replica_epoch),
    )
    by_codec = ClientConnection(client_id="odradek-replica-fetcher-1-2")
    by_codec._next_correlation_id = correlation
    packed = ClientConnection(client_id="odradek-replica-fetcher-1-2")
    packed._next_correlation_id = correlation
    _, expected = by_codec.send_request(request, version)
    _, got = packed.send_packed_request(1, version, lambda out: encode_follower_fetch(
        out, version, topics=[(topic_id.bytes, parts) for topic_id, parts in topics], **fields))
    assert got == expected
    # ... and the broker reads it back as the request it is, the follower's high watermark included from v18
    server = ServerConnection()
    (event,) = server.receive_data(got)
    assert event.request.replica_state.replica_id == replica_id
    if version >= 18 and topics and topics[0][1]:
        assert event.request.topics[0].partitions[0].high_watermark == topics[0][1][0][6]


def test_follower_request_refuses_other_versions():
    import pytest

    from odradek.protocol.fast_fetch import encode_follower_fetch

    with pytest.raises(ValueError):
        encode_follower_fetch(bytearray(), 14, replica_id=1, replica_epoch=1, max_wait_ms=1, min_bytes=1, max_bytes=1,
                              topics=[])
