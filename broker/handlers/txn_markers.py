"""WriteTxnMarkers (27): the transaction coordinator asks a partition's leader to close a transaction.

For every marker (producer id and epoch, COMMIT or ABORT, coordinator epoch) and every partition it names,
the leader appends one control batch (attributes control + transactional, the producer's id and epoch, one
control record: key version 0 + type, value version 0 + coordinator epoch) through the replica manager as
the coordinator's own write (AppendOrigin.COORDINATOR) with acks=all, and answers once every append is
replicated or has failed, as Kafka's KafkaApis.handleWriteTxnMarkersRequest does (requiredAcks -1,
request.timeout.ms). The log checks the marker: a producer epoch older than the producer's current one is
INVALID_PRODUCER_EPOCH, a coordinator epoch older than the one recorded TRANSACTION_COORDINATOR_FENCED.
A partition unknown to the image answers UNKNOWN_TOPIC_OR_PARTITION, one not led here
NOT_LEADER_OR_FOLLOWER; the coordinator retries those elsewhere.

Versions 1+ (v0, removed in Kafka 4, is not served, as the Java broker). The coordinator sends it to
every partition leader; a principal without CLUSTER_ACTION on the cluster gets CLUSTER_AUTHORIZATION_FAILED
for every partition, as Kafka's.
A group coordinator with an `on_transaction_completed(producer_id, partitions, committed)` hook hears of
markers written to `__consumer_offsets` (pending transactional offset commits become visible or go).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, TypeAlias

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import WriteTxnMarkersResponse
from odradek.protocol.records import ABORT, COMMIT, build_control_batch
from odradek.metadata.acl import AclOperation, ResourceType
from odradek.storage.names import TopicPartition
from odradek.storage.producer_state import AppendOrigin

from . import Answer, handles

if TYPE_CHECKING:
    from odradek.protocol.messages import WriteTxnMarkersRequest
    from ..context import RequestContext
    from ..services import BrokerServices

MarkerResult = WriteTxnMarkersResponse.WritableTxnMarkerResult
TopicResult = MarkerResult.WritableTxnMarkerTopicResult
PartitionResult: TypeAlias = (
    WriteTxnMarkersResponse.WritableTxnMarkerResult.WritableTxnMarkerTopicResult.WritableTxnMarkerPartitionResult
)
GROUP_METADATA_TOPIC = "__consumer_offsets"
_UNKNOWN = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)


@handles(27, (1, 2))
def handle_write_txn_markers(services: BrokerServices, ctx: RequestContext, request: WriteTxnMarkersRequest) -> Answer:
    now_ms = services.now_ms()
    results: list[dict[TopicPartition, int]] = []
    pending = [len(request.markers)]
    future = asyncio.get_running_loop().create_future()

    def finish() -> None:
        pending[0] -= 1
        if pending[0] == 0 and not future.done():
            future.set_result(_response(request, results))

    if not request.markers:
        return _response(request, results)
    if not services.authorized(ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
        denied = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        results = [{TopicPartition(t.name, i): denied for t in m.topics for i in t.partition_indexes}
                   for m in request.markers]
        return _response(request, results)
    for marker in request.markers:
        errors: dict[TopicPartition, int] = {}
        results.append(errors)
        entries: dict[TopicPartition, bytearray] = {}
        kind = COMMIT if marker.transaction_result else ABORT
        for topic in marker.topics:
            for index in topic.partition_indexes:
                tp = TopicPartition(topic.name, index)
                if _unknown(services, tp):
                    errors[tp] = _UNKNOWN
                    continue
                entries[tp] = bytearray(build_control_batch(kind, marker.producer_id, marker.producer_epoch,
                                                            marker.coordinator_epoch, now_ms))
        if not entries:
            finish()
            continue

        def respond(appended, errors=errors, marker=marker) -> None:
            for tp, r in appended.items():
                code = r.error_code
                if code == _UNKNOWN and not _unknown(services, tp):
                    code = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)  # in the image but not hosted here
                errors[tp] = code
            _tell_groups(services, marker, [tp for tp, code in errors.items() if code == 0])
            finish()

        services.data.append_records(entries, required_acks=-1, timeout_ms=services.config.request_timeout_ms,
                                     now_ms=now_ms, respond=respond, origin=AppendOrigin.COORDINATOR)
    return future.result() if future.done() else future


def _unknown(services: BrokerServices, tp: TopicPartition) -> bool:
    image = services.topic_by_name(tp.topic)
    return image is None or tp.partition not in image.partitions


def _tell_groups(services: BrokerServices, marker, written: list[TopicPartition]) -> None:
    offsets_partitions = [tp for tp in written if tp.topic == GROUP_METADATA_TOPIC]
    if not offsets_partitions:
        return
    groups = services.groups_if_started
    if groups is not None:  # not started: no group has pending transactional offsets to settle
        groups.on_transaction_completed(marker.producer_id, offsets_partitions, bool(marker.transaction_result))


def _response(request, results: list[dict[TopicPartition, int]]) -> WriteTxnMarkersResponse:
    markers = []
    for marker, errors in zip(request.markers, results):
        topics: dict[str, list[PartitionResult]] = {}
        for tp, code in errors.items():
            topics.setdefault(tp.topic, []).append(PartitionResult(partition_index=tp.partition, error_code=code))
        markers.append(MarkerResult(producer_id=marker.producer_id,
                                    topics=[TopicResult(name=name, partitions=parts) for name, parts in topics.items()]))
    return WriteTxnMarkersResponse(markers=markers)
