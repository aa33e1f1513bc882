"""DescribeTopicPartitions (75) on a metadata image built by hand: pagination, cursors, errors, ELR.

The handler reads only the image, the listener's endpoints and the authorizer, so a small stand-in for the
broker's services is enough; every response is encoded at v0 (the codec refuses fields outside their
versions). The rules are Kafka's (DescribeTopicPartitionsRequestHandler and KRaftMetadataCache).
"""

from __future__ import annotations

import types
import uuid

from odradek.broker.handlers.metadata import ALL_TOPIC_OPERATIONS, handle_describe_topic_partitions
from odradek.metadata.image import PartitionImage
from odradek.protocol.codec import ZERO_UUID
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import DescribeTopicPartitionsRequest as Req
from odradek.protocol.messages import DescribeTopicPartitionsResponse as Resp


def _partition(leader=1, isr=(1, 2, 3), elr=(), last_known_elr=()):
    return PartitionImage(replicas=(1, 2, 3), isr=isr, leader=leader, leader_epoch=4, partition_epoch=7,
                          elr=elr, last_known_elr=last_known_elr)


def services(topics: dict[str, int], *, limit: int = 2000, denied: frozenset[str] = frozenset(),
             fenced: frozenset[int] = frozenset(), no_endpoint: frozenset[int] = frozenset(), special=None):
    """A stand-in for BrokerServices over an image with `topics` (name -> partition count)."""
    by_name = {}
    for name, count in topics.items():
        parts = {i: _partition() for i in range(count)}
        parts.update((special or {}).get(name, {}))
        by_name[name] = types.SimpleNamespace(name=name, topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, name), partitions=parts)
    brokers = {b: types.SimpleNamespace(fenced=b in fenced) for b in (1, 2, 3)}
    image = types.SimpleNamespace(topics_by_name=by_name, brokers=brokers)
    return types.SimpleNamespace(
        metadata=types.SimpleNamespace(image=image),
        config=types.SimpleNamespace(max_request_partition_size_limit=limit),
        authorizer=None,
        authorized_names=lambda ctx, op, rt, names, log_denied=True: {n for n in names if n not in denied},
        endpoint=lambda broker_id, listener: None if broker_id in no_endpoint else object(),
        is_internal_topic=lambda name: name.startswith("__"),
    )


CTX = types.SimpleNamespace(api_version=0, listener="PLAINTEXT")


def describe(svc, names=(), limit=2000, cursor=None) -> Resp:
    request = Req(topics=[Req.TopicRequest(name=n) for n in names], response_partition_limit=limit,
                  cursor=None if cursor is None else Req.Cursor(topic_name=cursor[0], partition_index=cursor[1]))
    response = handle_describe_topic_partitions(svc, CTX, request)
    response.encode(0)
    return response


def pages(svc, names=(), limit=2000) -> list[list[tuple[str, list[int]]]]:
    """Every page until next_cursor is null, as [(topic, [partition indexes])] per page."""
    out, cursor = [], None
    while True:
        r = describe(svc, names, limit, cursor)
        out.append([(t.name, [p.partition_index for p in t.partitions]) for t in r.topics])
        if r.next_cursor is None:
            return out
        cursor = (r.next_cursor.topic_name, r.next_cursor.partition_index)


def test_all_topics_in_name_order_on_one_page():
    r = describe(services({"b": 2, "a": 1, "__consumer_offsets": 1}))
    assert [(t.name, t.error_code, t.is_internal) for t in r.topics] == [
        ("__consumer_offsets", 0, True), ("a", 0, False), ("b", 0, False)]
    assert r.next_cursor is None
    t = r.topics[1]
    assert t.topic_id == uuid.uuid5(uuid.NAMESPACE_DNS, "a") and t.topic_authorized_operations == ALL_TOPIC_OPERATIONS
    (p,) = t.partitions
    assert (p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes, p.offline_replicas) == (1, 4, [1, 2, 3], [1, 2, 3], [])
    assert (p.eligible_leader_replicas, p.last_known_elr) == ([], [])


def test_pages_split_inside_a_topic_and_at_a_topic_boundary():
    svc = services({"a": 3, "b": 2, "c": 1})
    # Limit 2: a's third partition starts page 2; page 2 fills up exactly at b's end, so page 3 starts at c-0.
    assert pages(svc, limit=2) == [[("a", [0, 1])], [("a", [2]), ("b", [0])], [("b", [1]), ("c", [0])]]
    assert pages(svc, limit=3) == [[("a", [0, 1, 2])], [("b", [0, 1]), ("c", [0])]]
    r = describe(svc, limit=3)
    assert (r.next_cursor.topic_name, r.next_cursor.partition_index) == ("b", 0)
    # The same by name, in whatever order they were asked.
    assert pages(svc, ["c", "a", "b"], limit=2) == pages(svc, limit=2)


def test_the_broker_limit_caps_the_clients_and_a_page_holds_at_least_one_partition():
    svc = services({"a": 5}, limit=2)
    assert pages(svc, limit=100) == [[("a", [0, 1])], [("a", [2, 3])], [("a", [4])]]
    assert pages(services({"a": 2}), limit=0) == [[("a", [0])], [("a", [1])]]


def test_bad_cursors_are_invalid_requests_for_every_topic_asked():
    svc = services({"a": 2, "b": 2})
    r = describe(svc, ["a", "b"], cursor=("zz", 0))
    assert [(t.name, t.error_code, t.partitions) for t in r.topics] == [
        ("a", ErrorCode.INVALID_REQUEST, []), ("b", ErrorCode.INVALID_REQUEST, [])]
    r = describe(svc, ["a", "b"], cursor=("b", -1))
    assert {t.error_code for t in r.topics} == {ErrorCode.INVALID_REQUEST}
    # Listing every topic, a cursor naming a topic that does not exist just starts there.
    assert [t.name for t in describe(svc, cursor=("aa", 0)).topics] == ["b"]


def test_unknown_invalid_and_unauthorized_topics():
    svc = services({"a": 1, "secret": 1}, denied=frozenset({"secret"}))
    r = describe(svc, ["secret", "nope", "bad/name", "a"])
    assert [(t.name, t.error_code, t.topic_id) for t in r.topics] == [
        ("a", 0, uuid.uuid5(uuid.NAMESPACE_DNS, "a")),
        ("bad/name", ErrorCode.INVALID_TOPIC_EXCEPTION, ZERO_UUID),
        ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ZERO_UUID),
        ("secret", ErrorCode.TOPIC_AUTHORIZATION_FAILED, ZERO_UUID),  # refused ones come last, without their id
    ]
    # An all-topics listing leaves out what the principal may not describe.
    assert [t.name for t in describe(svc).topics] == ["a"]


def test_elr_last_known_elr_offline_replicas_and_a_leader_without_endpoint():
    special = {"t": {0: _partition(leader=-1, isr=(), elr=(), last_known_elr=(2,)),
                     1: _partition(leader=1, isr=(1,), elr=(3,))}}
    svc = services({"t": 3}, fenced=frozenset({2}), no_endpoint=frozenset({1}), special=special)
    (t,) = describe(svc, ["t"]).topics
    p0, p1, p2 = t.partitions
    assert (p0.leader_id, p0.isr_nodes, p0.eligible_leader_replicas, p0.last_known_elr) == (-1, [], [], [2])
    assert (p1.isr_nodes, p1.eligible_leader_replicas, p1.last_known_elr) == ([1], [3], [])
    # Leader 1 has no endpoint on this listener: Kafka names no leader here (no error code in this API).
    assert (p1.leader_id, p1.error_code, p2.leader_id) == (-1, 0, -1)
    assert p0.offline_replicas == p1.offline_replicas == [2]
