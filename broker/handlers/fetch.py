"""Fetch (1): sessionless long poll, answered from file regions sent by sendfile.

Every partition carries its high watermark, last stable offset and log start offset, error paths
included, and records are never null (librdkafka fails on a null record set). Sessions (KIP-227) are not
kept: the response always carries session id 0, which clients treat as "full fetch every time".

A consumer's fetch from v11 may be served by a follower, up to its high watermark, and the leader may
answer `preferred_read_replica` instead of records (KIP-392: `client.rack` and `replica.selector.class`;
see replication/replica_selector.py).

A fetch from a replica (`replica_id`, or `replica_state.replica_id` from v15) reads up to the log end,
moves that follower's position (which may advance the high watermark), and learns where its log diverges
from this leader's (`diverging_epoch`, from its `last_fetched_epoch`). A partition this broker does not
lead answers NOT_LEADER_OR_FOLLOWER (or FENCED_LEADER_EPOCH) with the leader the image names
(`current_leader`, v12+) and that leader's endpoint (`node_endpoints`, v16+), so a client can go there
without a metadata round trip.

A consumer over its `consumer_byte_rate` (or `request_percentage`) quota is answered as Kafka's
handleFetchRequest answers it: an empty response (no topics) with throttle_time_ms, the bytes it would have
read taken back from its measurement, and its connection muted for that long (KIP-219; broker/quotas.py).
Its fetch's max_bytes is capped at what the quota lets through over the shortest measured span, so one
response alone never guarantees a throttle (which would starve it).

The answer is packed straight into its frame (protocol.fast_fetch) when it says only what a consumer's
fetch usually says; a response that needs more (a diverging epoch, a leader hint, aborted transactions,
a preferred read replica) is built as a message and encoded by the codec, which can say everything.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, TypeAlias

from odradek.protocol.errors import ErrorCode
from odradek.protocol.fast_fetch import encode_fetch_response
from odradek.protocol.messages import FetchResponse
from odradek.metadata.acl import AclOperation, ResourceType
from odradek.replication.partition import FetchIsolation
from odradek.replication.replica_manager import FetchRequestPartition, FetchResult
from odradek.replication.replica_selector import ClientMetadata
from odradek.storage.names import TopicPartition

from ..context import EagerAnswer, Packed
from . import Answer, handles

if TYPE_CHECKING:
    from odradek.protocol.messages import FetchRequest
    from ..context import RequestContext
    from ..services import BrokerServices

TopicData = FetchResponse.FetchableTopicResponse
PartitionData = TopicData.PartitionData
NodeEndpoint: TypeAlias = FetchResponse.NodeEndpoint
_LEADER_HINT_ERRORS = (int(ErrorCode.NOT_LEADER_OR_FOLLOWER), int(ErrorCode.FENCED_LEADER_EPOCH))
_UNKNOWN, _NOT_LEADER = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
_DENIED = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)


def _unauthorized(services: BrokerServices, ctx: RequestContext, request: FetchRequest, replica_id: int,
                  version: int) -> set:
    """Topic names this fetch may not read: all of them for a replica without CLUSTER_ACTION, else those
    without READ (Kafka's handleFetchRequest)."""
    names = set()
    for topic in request.topics:
        image = services.topic_by_id(topic.topic_id) if version >= 13 else services.topic_by_name(topic.topic)
        names.add(image.name if image is not None else topic.topic)
    if replica_id >= 0:
        return set() if services.authorized(ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER) else names
    return names - services.authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, names)


@handles(1)
def handle_fetch(services: BrokerServices, ctx: RequestContext, request: FetchRequest) -> Answer:
    version = ctx.api_version
    now_ms = services.now_ms()
    replica_id = request.replica_state.replica_id if version >= 15 else request.replica_id
    if replica_id >= 0:
        isolation = FetchIsolation.LOG_END
    elif request.isolation_level == 1:
        isolation = FetchIsolation.TXN_COMMITTED
    else:
        isolation = FetchIsolation.HIGH_WATERMARK
    wanted: list[FetchRequestPartition] = []
    # (topic name or None, topic id, [(partition index, tp or error code)])
    layout: list[tuple[str | None, uuid.UUID, list[tuple[int, TopicPartition | int]]]] = []
    denied = _unauthorized(services, ctx, request, replica_id, version) if services.authorizer is not None else ()
    for topic in request.topics:
        image = services.topic_by_id(topic.topic_id) if version >= 13 else services.topic_by_name(topic.topic)
        if denied and (image.name if image is not None else topic.topic) in denied:  # (READ, or CLUSTER_ACTION for a replica)
            layout.append((topic.topic, topic.topic_id, [(p.partition, _DENIED) for p in topic.partitions]))
            continue
        parts: list[tuple[int, TopicPartition | int]] = []
        for p in topic.partitions:
            if image is None:
                code = ErrorCode.UNKNOWN_TOPIC_ID if version >= 13 else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                parts.append((p.partition, int(code)))
                continue
            tp = TopicPartition(image.name, p.partition)
            wanted.append(FetchRequestPartition(tp, p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch,
                                                p.last_fetched_epoch,  # (-1 before v12: the field's default)
                                                p.log_start_offset,  # (a follower's, for DeleteRecords)
                                                p.high_watermark))  # (a follower's from v18, KIP-1166)
            parts.append((p.partition, tp))
        layout.append((topic.topic, topic.topic_id, parts))

    # A parked fetch's answer is written the moment it is made (EagerAnswer): when an append completes both
    # followers' fetches, the first is on the wire while the second is read and packed.
    future = EagerAnswer()
    read_committed = isolation is FetchIsolation.TXN_COMMITTED

    def respond(results: dict[TopicPartition, FetchResult]) -> None:
        if future.done():
            return
        packable = True
        for tp, r in results.items():
            if r.error_code:
                if r.error_code == _UNKNOWN and services.partition_leader(tp.topic, tp.partition) is not None:
                    r.error_code = _NOT_LEADER  # in the image but not hosted here: as Kafka, not "unknown"
                if version >= 12 and r.error_code in _LEADER_HINT_ERRORS:
                    packable = False
            if r.diverging_epoch is not None or r.aborted_transactions or r.preferred_read_replica >= 0:
                packable = False
        if replica_id < 0 and services.metadata.image.client_quotas:
            nbytes = _response_bytes(results)
            services.quotas.record_fetch(ctx.connection, ctx.client_id, nbytes)
            if ctx.connection.throttle_ms:
                # Over its fetch quota (or its request quota, already recorded for a fetch that waited): the
                # consumer gets no records now, as Kafka answers (KIP-219): the bytes it would have read are
                # taken back from its measurement, the response is empty and says for how long it is
                # throttled, and the connection serves nothing more until then. It fetches the same
                # offsets again afterwards, so nothing is skipped.
                services.quotas.unrecord_fetch(ctx.connection, ctx.client_id, nbytes)
                future.set_result(FetchResponse(throttle_time_ms=ctx.connection.throttle_ms, error_code=0, session_id=0,
                                                responses=[]))
                return
        _count_bytes_out(services, replica_id, results)
        if packable:
            errors: list[int] = []
            chunks = _packed(ctx.header.correlation_id, layout, results, version, read_committed, errors)
            future.set_result(Packed(chunks, errors or None))
        else:
            future.set_result(_message(services, ctx.listener, layout, results, version, read_committed))

    max_bytes, min_bytes = request.max_bytes, request.min_bytes
    if replica_id < 0 and services.metadata.image.client_quotas:
        # A consumer's fetch never asks for more than its quota lets through at once: a larger one would be
        # throttled (answered empty) whatever it did before, again and again (KafkaApis' maxQuotaWindowBytes).
        cap = services.quotas.max_fetch_bytes(ctx.connection, ctx.client_id)
        if cap is not None and cap < max_bytes:
            max_bytes, min_bytes = cap, min(min_bytes, cap)
    services.data.fetch_records(
        wanted, max_bytes=max_bytes, min_bytes=min_bytes, max_wait_ms=request.max_wait_ms,
        isolation=isolation, now_ms=now_ms, respond=respond, replica_id=replica_id,
        client_metadata=_client_metadata(ctx, request, replica_id),
    )
    return future.result() if future.done() else future


def _count_bytes_out(services: BrokerServices, replica_id: int, results: dict[TopicPartition, FetchResult]) -> None:
    """Bytes out per topic for a consumer's answer, broker-wide replication bytes for a follower's (Kafka's
    BrokerTopicStats.updateBytesOut, when the response is made; replication/topic_stats.py)."""
    stats = services.data.topic_stats
    if replica_id < 0:
        for tp, r in results.items():
            if r.size:
                stats.sent(tp.topic, r.size)
    else:
        stats.replicated(sum(r.size for r in results.values()))


def _response_bytes(results) -> int:
    return sum(getattr(chunk, "length", None) or len(chunk) for r in results.values() for chunk in (r.records or ()))


def _client_metadata(ctx: RequestContext, request, replica_id: int) -> ClientMetadata | None:
    """A consumer's Fetch v11+ (KIP-392): it may read from a follower, and be pointed to the replica in its
    rack. Before v11 a consumer knows no preferred replica, and is served by leaders only, as Kafka does."""
    if ctx.api_version < 11 or replica_id >= 0:
        return None
    return ClientMetadata(rack_id=request.rack_id or "", client_id=ctx.header.client_id or "", listener_name=ctx.listener)


def _packed(correlation_id: int, layout, results, version: int, read_committed: bool, errors: list[int]) -> list:
    """The response frame's chunks; the partitions' non-zero error codes are appended to `errors`."""
    aborted: list | None = [] if read_committed else None
    topics = []
    for name, topic_id, parts in layout:
        out: list[tuple] = []
        for index, tp in parts:
            if isinstance(tp, int):  # (aborted transactions: an empty list, as Kafka's error entries)
                out.append((index, tp, -1, -1, -1, [], ()))
                errors.append(tp)
                continue
            r = results[tp]
            if r.error_code:
                errors.append(r.error_code)
            out.append((index, r.error_code, r.high_watermark, r.last_stable_offset, r.log_start_offset, aborted,
                        r.records or ()))  # file regions: small ones go out with the rest, large ones by sendfile
        topics.append((topic_id.bytes if version >= 13 else name, out))
    return encode_fetch_response(correlation_id, topics, version)


def _message(services: BrokerServices, listener: str, layout, results, version: int,
             read_committed: bool) -> FetchResponse:
    """The same answer as a message, with what the packed frame cannot carry."""
    endpoints: dict[int, NodeEndpoint] = {}
    topics = []
    for name, topic_id, parts in layout:
        out = []
        for index, tp in parts:
            if isinstance(tp, int):
                out.append(PartitionData(partition_index=index, error_code=tp, high_watermark=-1,
                                         last_stable_offset=-1, log_start_offset=-1, aborted_transactions=[], records=b""))
                continue
            r = results[tp]
            data = PartitionData(
                partition_index=index, error_code=r.error_code, high_watermark=r.high_watermark,
                last_stable_offset=r.last_stable_offset, log_start_offset=r.log_start_offset,
                aborted_transactions=(
                    [PartitionData.AbortedTransaction(producer_id=pid, first_offset=first)
                     for pid, first in r.aborted_transactions or ()] if read_committed else None
                ),
                preferred_read_replica=r.preferred_read_replica, records=r.records or b"",
            )
            if version >= 12:
                if r.diverging_epoch is not None:
                    data.diverging_epoch = PartitionData.EpochEndOffset(epoch=r.diverging_epoch[0], end_offset=r.diverging_epoch[1])
                if r.error_code in _LEADER_HINT_ERRORS:
                    leader = services.partition_leader(tp.topic, tp.partition)
                    if leader is not None:
                        data.current_leader = PartitionData.LeaderIdAndEpoch(leader_id=leader[0], leader_epoch=leader[1])
                        if version >= 16 and leader[0] not in endpoints:
                            entry = services.node_endpoint(NodeEndpoint, leader[0], listener)
                            if entry is not None:
                                endpoints[leader[0]] = entry
            out.append(data)
        topics.append(TopicData(topic=name, topic_id=topic_id, partitions=out))
    response = FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)
    if version >= 16:
        response.node_endpoints = list(endpoints.values())
    return response

