"""broker/handlers/metadata.py's packed answer: byte for byte what the message built as before (per partition
objects, encoded by the codec) says, at every version, for small and large topics, errors included; a large
topic's section is packed once and packed again when the topic or the brokers change."""

from __future__ import annotations

import dataclasses
import types
import uuid

import pytest

from odradek.broker.context import Packed
from odradek.broker.handlers.metadata import (
    ALL_CLUSTER_OPERATIONS,
    INT32_MIN,
    PackedSections,
    _SECTIONS,
    broker_entries,
    handle_metadata,
    refusal_below_v12,
    topic_response,
)
from odradek.broker.services import BrokerServices
from odradek.metadata.image import BrokerRegistration, Endpoint, MetadataImage, PartitionImage, TopicImage
from odradek.protocol.codec import ZERO_UUID
from odradek.protocol.connection import ServerConnection
from odradek.protocol.errors import ErrorCode
from odradek.protocol.headers import RequestHeader
from odradek.protocol.messages import MetadataRequest, MetadataResponse

Topic_ = MetadataResponse.MetadataResponseTopic
LARGE = 2_500


def _brokers(fenced: frozenset[int] = frozenset()) -> dict:
    return {b: BrokerRegistration(b, uuid.UUID(int=b), 10 + b, (Endpoint("PLAINTEXT", f"b{b}", 9090 + b),
                                                                 *((Endpoint("INTERNAL", f"i{b}", 9190 + b),) if b != 3 else ())),
                                  "rack-a" if b == 1 else None, fenced=b in fenced, in_controlled_shutdown=False)
            for b in (1, 2, 3)}


def _topic(name: str, n: int, seed: int) -> TopicImage:
    parts = {}
    for i in range(n):
        replicas = tuple(1 + (i + k) % 3 for k in range(3))
        leader = -1 if i % 13 == 5 else replicas[0]
        parts[i] = PartitionImage(replicas=replicas, isr=replicas[: 1 + i % 3], leader=leader, leader_epoch=i % 9,
                                  partition_epoch=i % 5)
    return TopicImage(name, uuid.UUID(int=seed), parts)


def _image(fenced: frozenset[int] = frozenset(), large: TopicImage | None = None) -> MetadataImage:
    topics = [_topic("small", 3, 1), large or _topic("large", LARGE, 2), _topic("__consumer_offsets", 2, 3)]
    return MetadataImage(cluster_id="cid", brokers=_brokers(fenced), topics_by_id={t.topic_id: t for t in topics},
                         topics_by_name={t.name: t for t in topics})


def _services(image: MetadataImage):
    stub = types.SimpleNamespace(node_id=1, metadata=types.SimpleNamespace(image=image), authorizer=None,
                                 config=types.SimpleNamespace(auto_create_topics_enable=False),
                                 is_internal_topic=lambda name: name.startswith("__"), controller_id=lambda: 1)
    stub.live_brokers = lambda: BrokerServices.live_brokers(stub)  # type: ignore[arg-type]
    stub.endpoint = lambda broker_id, listener: BrokerServices.endpoint(stub, broker_id, listener)  # type: ignore[arg-type]
    return stub


def _ctx(version: int, listener: str = "PLAINTEXT"):
    return types.SimpleNamespace(api_version=version, listener=listener, header=RequestHeader(3, version, 99),
                                 client_id="test", principal="User:ANONYMOUS")


def _before(services, version: int, listener: str, request: MetadataRequest, expected_topics: list) -> bytes:
    """The answer as the handler built it before packing: a message per topic and partition, then the codec."""
    include_ops = version >= 8 and request.include_topic_authorized_operations
    topics = [topic_response(services, t, version, include_ops, listener) if isinstance(t, TopicImage) else t
              for t in expected_topics]
    response = MetadataResponse(
        throttle_time_ms=0, brokers=broker_entries(services, listener), cluster_id="cid", controller_id=1, topics=topics,
        cluster_authorized_operations=ALL_CLUSTER_OPERATIONS if 8 <= version <= 10
        and request.include_cluster_authorized_operations else INT32_MIN, error_code=0)
    return _bytes(response, version)


def _bytes(answer, version: int) -> bytes:
    if isinstance(answer, Packed):
        return b"".join(bytes(c) for c in answer.chunks)
    return b"".join(bytes(c) for c in ServerConnection().send_response(RequestHeader(3, version, 99), answer))


@pytest.mark.parametrize("version", range(0, 14))
@pytest.mark.parametrize("listener", ["PLAINTEXT", "INTERNAL"])
def test_every_version_answers_the_bytes_the_message_did(version, listener):
    image = _image(fenced=frozenset({2}))
    services = _services(image)
    R = MetadataRequest.MetadataRequestTopic
    # Every topic (v0: an empty list means all), then named ones with unknown and impossible names, and by id.
    listing = MetadataRequest(topics=[] if version == 0 else None, allow_auto_topic_creation=False,
                              include_cluster_authorized_operations=version in (8, 10),
                              include_topic_authorized_operations=version >= 8)
    named = [R(name="large"), R(name="nope"), R(name="bad/name"), R(name="small")]
    if version >= 12:  # (Kafka's clients ask by topic id from v12 only: MetadataRequest.Builder refuses it below)
        named += [R(name=None, topic_id=uuid.UUID(int=1)), R(name=None, topic_id=uuid.UUID(int=77))]
    asked = MetadataRequest(topics=named, allow_auto_topic_creation=False)
    cases = [(listing, sorted(image.topics_by_name.values(), key=lambda t: t.name))]
    if version > 0:
        by_name = image.topics_by_name
        expected = [by_name["large"], Topic_(error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), name="nope",
                                             topic_id=ZERO_UUID),
                    Topic_(error_code=int(ErrorCode.INVALID_TOPIC_EXCEPTION), name="bad/name", topic_id=ZERO_UUID),
                    by_name["small"]]
        if version >= 12:
            expected += [image.topics_by_id[uuid.UUID(int=1)],
                         Topic_(error_code=int(ErrorCode.UNKNOWN_TOPIC_ID), name=None, topic_id=uuid.UUID(int=77))]
        cases.append((asked, expected))
    for request, expected in cases:
        answer = handle_metadata(services, _ctx(version, listener), request)  # type: ignore[arg-type]
        assert isinstance(answer, Packed)
        assert _bytes(answer, version) == _before(services, version, listener, request, expected)


def test_a_large_topic_is_packed_once_until_it_or_the_brokers_change():
    sections = PackedSections(max_entries=2)
    large = _topic("large", LARGE, 2)
    services = _services(_image(large=large))
    first, errors = sections.section(services, large, 12, "PLAINTEXT")  # type: ignore[arg-type]
    assert errors.count(int(ErrorCode.LEADER_NOT_AVAILABLE)) == len([i for i in range(LARGE) if i % 13 == 5])
    again, _ = sections.section(services, large, 11, "PLAINTEXT")  # type: ignore[arg-type]
    assert again is first  # the same band (v9+) and listener: the kept bytes
    assert sections.section(services, large, 8, "PLAINTEXT")[0] != first  # another band
    fenced = _services(_image(fenced=frozenset({3}), large=large))  # a broker fenced: offline replicas change
    changed, _ = sections.section(fenced, large, 12, "PLAINTEXT")  # type: ignore[arg-type]
    assert changed != first and len(sections._entries) == 2
    small = _topic("small", 3, 1)
    sections.section(services, small, 12, "PLAINTEXT")  # type: ignore[arg-type]
    assert len(sections._entries) == 2  # small topics are packed on each ask, not kept
    _SECTIONS._entries.clear()


@pytest.mark.parametrize("version", [10, 11])
@pytest.mark.parametrize("quotas", [False, True])
def test_a_topic_id_or_a_null_name_below_v12_is_an_invalid_request_for_every_topic(version, quotas):
    """Kafka's KafkaApis.handleTopicMetadataRequest throws InvalidRequestException and answers
    MetadataRequest.getErrorResponse: every topic asked gets INVALID_REQUEST with its name ("" for null) and
    the id it was asked with, no partitions, no brokers, no cluster id, controller -1. The same bytes packed
    (no quota) and through the message (a client quota may throttle it); nothing is created on demand."""
    image = _image()
    if quotas:
        image = dataclasses.replace(image, client_quotas={(("user", "alice"),): {"producer_byte_rate": 1.0}})
    services = _services(image)
    services.config.auto_create_topics_enable = True  # (no controller in the stub: a creation would raise)
    R = MetadataRequest.MetadataRequestTopic
    known = image.topics_by_name["small"].topic_id
    for asked in ([R(name="small", topic_id=known), R(name="brand-new")],  # a name with an id
                  [R(name="brand-new"), R(name=None, topic_id=uuid.UUID(int=77))],  # asked by id only
                  [R(name=None, topic_id=ZERO_UUID)]):  # a null name
        request = MetadataRequest(topics=asked, allow_auto_topic_creation=True)
        answer = handle_metadata(services, _ctx(version), request)  # type: ignore[arg-type]
        assert isinstance(answer, MetadataResponse if quotas else Packed)
        expected = MetadataResponse(
            throttle_time_ms=0, brokers=[], cluster_id=None, controller_id=-1, cluster_authorized_operations=INT32_MIN,
            error_code=0, topics=[Topic_(error_code=int(ErrorCode.INVALID_REQUEST), name=t.name or "",
                                         topic_id=t.topic_id, is_internal=False, partitions=[],
                                         topic_authorized_operations=INT32_MIN) for t in asked])
        assert _bytes(answer, version) == _bytes(expected, version)
        if not quotas:
            assert answer.error_codes == [int(ErrorCode.INVALID_REQUEST)] * len(asked)  # counted per topic


def test_topic_ids_are_served_from_v12_and_names_alone_below():
    assert refusal_below_v12(MetadataRequest(topics=None), 10) is None  # all topics
    R = MetadataRequest.MetadataRequestTopic
    by_id = MetadataRequest(topics=[R(name=None, topic_id=uuid.UUID(int=1))])
    assert refusal_below_v12(by_id, 12) is None
    assert refusal_below_v12(by_id, 11) == "Topic name can not be null for version 11"
    both = MetadataRequest(topics=[R(name="a"), R(name="b", topic_id=uuid.UUID(int=1))])
    assert refusal_below_v12(both, 10) == "Topic IDs are not supported in requests for version 10"
    assert refusal_below_v12(MetadataRequest(topics=[R(name="a")]), 11) is None
