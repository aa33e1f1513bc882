"""WriteTxnMarkers and DescribeProducers refuse principals without the rights Kafka asks for:
CLUSTER_ACTION on the cluster (every partition CLUSTER_AUTHORIZATION_FAILED, nothing written) and READ on
the topic (TOPIC_AUTHORIZATION_FAILED). The allowed paths run against a live broker in
tests/integration/test_txn_markers.py."""

from __future__ import annotations

from types import SimpleNamespace

from odradek.broker.handlers.producers import handle_describe_producers
from odradek.broker.handlers.txn_markers import handle_write_txn_markers
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import DescribeProducersRequest, WriteTxnMarkersRequest

Marker = WriteTxnMarkersRequest.WritableTxnMarker


class Refusing:
    """Services whose authorizer refuses everything; any data access would fail the test."""

    data = None

    @staticmethod
    def now_ms() -> int:
        return 0

    @staticmethod
    def authorized(ctx, op, resource_type, name=None) -> bool:
        return False

    @staticmethod
    def authorized_names(ctx, op, resource_type, names) -> set:
        return set()


async def test_write_txn_markers_needs_cluster_action():
    request = WriteTxnMarkersRequest(markers=[Marker(
        producer_id=5, producer_epoch=0, transaction_result=True, coordinator_epoch=1,
        topics=[Marker.WritableTxnMarkerTopic(name="t", partition_indexes=[0, 1])])])
    response = handle_write_txn_markers(Refusing(), SimpleNamespace(api_version=1), request)
    (marker,) = response.markers
    assert marker.producer_id == 5
    assert [(p.partition_index, p.error_code) for t in marker.topics for p in t.partitions] == [
        (0, ErrorCode.CLUSTER_AUTHORIZATION_FAILED), (1, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)]


def test_describe_producers_needs_read_on_the_topic():
    request = DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(name="t", partition_indexes=[3])])
    response = handle_describe_producers(Refusing(), SimpleNamespace(api_version=0), request)
    (part,) = response.topics[0].partitions
    assert (part.partition_index, part.error_code, part.active_producers) == (3, ErrorCode.TOPIC_AUTHORIZATION_FAILED, [])


class Allowing:
    """Services that allow everything, host no partition and know topic `t` with partitions 0 and 1."""

    data = SimpleNamespace(get_partition=lambda tp: None)

    @staticmethod
    def authorized_names(ctx, op, resource_type, names) -> set:
        return set(names)

    @staticmethod
    def topic_by_name(name):
        return SimpleNamespace(partitions={0: None, 1: None}) if name == "t" else None


def test_describe_producers_words_only_an_unknown_topic():
    """As Kafka 4.4 answers (tests/integration/test_kafka_differential.py): a topic it does not know gets
    UNKNOWN_TOPIC_OR_PARTITION with the code's text; a missing partition of a known topic the code alone."""
    request = DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(name="t", partition_indexes=[1, 7]),
                                               DescribeProducersRequest.TopicRequest(name="x", partition_indexes=[0])])
    response = handle_describe_producers(Allowing(), SimpleNamespace(api_version=0), request)
    got = [(t.name, p.partition_index, p.error_code, p.error_message) for t in response.topics for p in t.partitions]
    assert got == [("t", 1, ErrorCode.NOT_LEADER_OR_FOLLOWER, None), ("t", 7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None),
                   ("x", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")]
