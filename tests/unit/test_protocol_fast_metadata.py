"""protocol.fast_metadata: the Metadata response packed directly (partition sections packed on their own,
as the broker caches them) is the generated codec's, byte for byte, at every version."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.connection import ServerConnection
from odradek.protocol.fast_metadata import VERSIONS, band, encode_metadata_response, encode_partitions
from odradek.protocol.headers import RequestHeader
from odradek.protocol.messages import MetadataResponse

Broker_ = MetadataResponse.MetadataResponseBroker
Topic_ = MetadataResponse.MetadataResponseTopic
Partition_ = Topic_.MetadataResponsePartition

int32 = st.integers(-(2**31), 2**31 - 1)
int16 = st.integers(-(2**15), 2**15 - 1)
text = st.text(alphabet=st.characters(codec="utf-8"), max_size=60)
ids = st.lists(st.integers(0, 2**31 - 1), max_size=5)
partition = st.tuples(int16, st.integers(0, 2**31 - 1), int32, int32, ids, ids, ids)
broker = st.tuples(st.integers(0, 2**31 - 1), text, st.integers(0, 65535), st.one_of(st.none(), text))
topic = st.tuples(int16, st.one_of(st.none(), text.filter(bool)), st.uuids(), st.booleans(),
                  st.lists(partition, max_size=6), int32)


def _codec(correlation_id, version, brokers, cluster_id, controller_id, topics, cluster_ops, throttle, error) -> bytes:
    response = MetadataResponse(
        throttle_time_ms=throttle, cluster_id=cluster_id, controller_id=controller_id,
        cluster_authorized_operations=cluster_ops, error_code=error,
        brokers=[Broker_(node_id=n, host=h, port=p, rack=r) for n, h, p, r in brokers],
        topics=[Topic_(error_code=e, name=name, topic_id=topic_id, is_internal=internal, topic_authorized_operations=ops,
                       partitions=[Partition_(error_code=pe, partition_index=i, leader_id=leader, leader_epoch=epoch,
                                              replica_nodes=list(r), isr_nodes=list(isr), offline_replicas=list(off))
                                   for pe, i, leader, epoch, r, isr, off in parts])
                for e, name, topic_id, internal, parts, ops in topics])
    return b"".join(bytes(c) for c in ServerConnection().send_response(RequestHeader(3, version, correlation_id), response))


def _fast(correlation_id, version, brokers, cluster_id, controller_id, topics, cluster_ops, throttle, error) -> bytes:
    rows = [(e, name, topic_id, internal, encode_partitions(parts, len(parts), version), ops)
            for e, name, topic_id, internal, parts, ops in topics]
    return bytes(encode_metadata_response(correlation_id, version, brokers=brokers, cluster_id=cluster_id,
                                          controller_id=controller_id, topics=rows,
                                          cluster_authorized_operations=cluster_ops, throttle_time_ms=throttle,
                                          error_code=error))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(list(VERSIONS)), int32, st.lists(broker, max_size=4), st.one_of(st.none(), text), int32,
       st.lists(topic, max_size=4), int32, st.integers(0, 2**31 - 1), int16)
def test_the_packed_response_is_the_codecs(version, correlation_id, brokers, cluster_id, controller_id, topics,
                                           cluster_ops, throttle, error):
    if version < 12:  # a null topic name is written from v12 only (the fast path falls back below it)
        topics = [(e, name or "t", *rest) for e, name, *rest in topics]
    # The codec refuses a value other than the default in a field the version lacks; so does the handler.
    if not 8 <= version <= 10:
        cluster_ops = -(2**31)
    if version < 8:
        topics = [(*rest, -(2**31)) for *rest, _ in topics]
    args = (correlation_id, version, brokers, cluster_id, controller_id, topics, cluster_ops, throttle, error)
    assert _fast(*args) == _codec(*args)


def test_a_large_topic_is_the_codecs_at_every_version_and_one_band_shares_the_partition_bytes():
    parts = [(0 if i % 7 else 5, i, 1 + i % 3, i // 3, [1 + i % 3, 1 + (i + 1) % 3, 1 + (i + 2) % 3], [1, 2, 3][: 1 + i % 3],
              [] if i % 11 else [2]) for i in range(3_000)]
    topics = [(0, "scale", uuid.UUID(int=42), False, parts, -(2**31))]
    by_band: dict[int, bytes] = {}
    for version in VERSIONS:
        args = (7, version, [(1, "localhost", 9092, None), (2, "b2", 9094, "r2")], "cid", 1, topics, -(2**31), 0, 0)
        assert _fast(*args) == _codec(*args), version
        packed = encode_partitions(parts, len(parts), version)
        assert by_band.setdefault(band(version), packed) == packed
    assert len(by_band) == 4
