"""ShareFetch (78) and ShareAcknowledge (79): share groups' data path (KIP-932), served by partition leaders.

Both go to the leader of each partition (not the group coordinator) and run in a share session
(replication/share/session.py: epoch 0 opens, -1 closes, otherwise the next epoch). The member is validated
only as loosely as Kafka 4.x validates it here: the member id must be given, and the session ties it to
the group; that the member belongs to the group is the group coordinator's business (ShareGroupHeartbeat),
which assigns the partitions it should fetch. The records it acquires are the leader's to track
(broker/share/manager.py).

ShareFetch: acknowledgements piggy-backed on the request are applied and persisted first (their result is
`acknowledge_error_code` per partition), then every partition of the session is fetched: records as
the log's whole batches with the `acquired_records` ranges the member may process (empty where nothing
was acquired: never null, which librdkafka cannot parse), at most `max_records` over the whole request as
Kafka counts them (batch-aligned, or exact with `share_acquire_mode` 1, record-limit, KIP-1206; any other
mode is INVALID_REQUEST; 0 fetches nothing and does not wait: acknowledgements only), the acquired ranges cut into entries of at most `batch_size` records, waiting up to
`max_wait_ms` when nothing can be acquired. Errors answered at the top level carry an acquisition lock
timeout of 0, as Kafka's do. An opening request may not carry acknowledgements
(INVALID_REQUEST); a closing one (epoch -1) fetches nothing, and releases the member's acquired records
once its acknowledgements are applied. After the opening request, a response lists only the partitions
that have something to say (records, an error, an acknowledgement result), as Kafka's incremental
sessions answer; `acquisition_lock_timeout_ms` tells the client how long its locks last.

ShareAcknowledge: the same acknowledgements without a fetch; from v2 (KIP-1222) a RENEW extends the lock
of records the member keeps processing, and the response carries the lock duration so the client knows
its new deadline. RENEW (type 4) in a v1 request is INVALID_REQUEST, as v1 does not define it.

Errors: the session's (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED)
and READ on the group (GROUP_AUTHORIZATION_FAILED) are top-level; READ on the topic
(TOPIC_AUTHORIZATION_FAILED), an unknown topic id (UNKNOWN_TOPIC_ID), a partition not led here
(NOT_LEADER_OR_FOLLOWER, with the current leader and its endpoint) are per partition.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from odradek.metadata.acl import AclOperation, ResourceType
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import ShareAcknowledgeResponse, ShareFetchResponse
from odradek.replication.share import FINAL_EPOCH, INITIAL_EPOCH, AcknowledgeType, ShareSessionError
from odradek.storage.names import TopicPartition

from . import SHARE, Answer, handles

if TYPE_CHECKING:
    from odradek.protocol.messages import ShareAcknowledgeRequest, ShareFetchRequest
    from ..context import RequestContext
    from ..services import BrokerServices
    from ..share.manager import PartitionFetch, SharePartitionManager

FetchTopic = ShareFetchResponse.ShareFetchableTopicResponse
FetchPart = FetchTopic.PartitionData
AckTopic = ShareAcknowledgeResponse.ShareAcknowledgeTopicResponse
AckPart = AckTopic.PartitionData

_RENEW = int(AcknowledgeType.RENEW)
_RECORD_LIMIT = 1  # ShareFetch share_acquire_mode (KIP-1206): 0 batch-optimized, 1 record-limit


def _problem(request, version: int) -> str | None:
    """Why the request is malformed (INVALID_REQUEST), or None."""
    if not request.member_id:
        return "a share request needs a member id"
    if not request.group_id:
        return "a share request needs a group id"
    if version < 2:
        for topic in request.topics:
            for p in topic.partitions:
                for batch in p.acknowledgement_batches:
                    if _RENEW in batch.acknowledge_types:
                        return f"acknowledge type RENEW needs version 2, not {version}"
    return None


def _cut(acquired, batch_size: int):
    """The acquired ranges as AcquiredRecords entries of at most `batch_size` records (ShareFetch v1+'s
    "optimal number of records for batches of acquired records and acknowledgements"), as Kafka hands them
    out; a batch size of 0 or less leaves them whole."""
    for r in acquired:
        first = r.first_offset
        step = batch_size if batch_size > 0 else r.last_offset - first + 1
        while first <= r.last_offset:
            last = min(r.last_offset, first + step - 1)
            yield first, last, r.delivery_count
            first = last + 1


def _resolve(services: BrokerServices, ctx: RequestContext, topic_ids) -> tuple[dict[uuid.UUID, str], dict[uuid.UUID, int]]:
    """Topic names by id, and the per-partition error of those that cannot be served: unknown ids
    (UNKNOWN_TOPIC_ID) and topics the principal may not READ (TOPIC_AUTHORIZATION_FAILED)."""
    names: dict[uuid.UUID, str] = {}
    refused: dict[uuid.UUID, int] = {}
    for topic_id in topic_ids:
        image = services.topic_by_id(topic_id)
        if image is None:
            refused[topic_id] = int(ErrorCode.UNKNOWN_TOPIC_ID)
        else:
            names[topic_id] = image.name
    if services.authorizer is not None and names:
        allowed = services.authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC, set(names.values()))
        for topic_id, name in list(names.items()):
            if name not in allowed:
                refused[topic_id] = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                del names[topic_id]
    return names, refused


def _watch_connection(manager: SharePartitionManager, ctx: RequestContext) -> None:
    """A session ends when the connection that opened it closes: its member's records go back at once."""
    connection = ctx.connection
    if manager.watch_connection(connection.connection_id):
        connection.when_closed(lambda: manager.connection_closed(connection.connection_id))


@handles(78, gate=SHARE)
async def handle_share_fetch(services: BrokerServices, ctx: RequestContext, request: ShareFetchRequest) -> Answer:
    version = ctx.api_version
    manager = services.share

    def failed(code: ErrorCode, message: str | None = None) -> ShareFetchResponse:
        return ShareFetchResponse(throttle_time_ms=0, error_code=int(code), error_message=message, responses=[])

    if manager is None:
        return failed(ErrorCode.UNSUPPORTED_VERSION, "share groups are not enabled on this broker")
    problem = _problem(request, version)
    if version >= 2 and request.share_acquire_mode not in (0, _RECORD_LIMIT):
        problem = f"unknown share acquire mode {request.share_acquire_mode}: 0 (batch-optimized) or 1 (record-limit)"
    if problem is not None:
        return failed(ErrorCode.INVALID_REQUEST, problem)
    group_id, member_id, epoch = request.group_id, request.member_id, request.share_session_epoch
    if not services.authorized(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return failed(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    named = [(t.topic_id, p.partition_index) for t in request.topics for p in t.partitions]
    forgotten = [(t.topic_id, p) for t in request.forgotten_topics_data for p in t.partitions]
    has_acks = any(p.acknowledgement_batches for t in request.topics for p in t.partitions)
    now = services.now_ms()
    sessions = manager.sessions
    try:
        if epoch == INITIAL_EPOCH:
            if has_acks:
                return failed(ErrorCode.INVALID_REQUEST, "a share session's opening fetch cannot acknowledge records")
            session, replaced = sessions.open(group_id, member_id, named, ctx.connection.connection_id, now)
            _watch_connection(manager, ctx)
            if replaced is not None:
                await manager.release_member(group_id, member_id)
        elif epoch == FINAL_EPOCH:
            session = sessions.expect_open(group_id, member_id)
        else:
            session = sessions.update(group_id, member_id, epoch, named, forgotten, now)
    except ShareSessionError as e:
        return failed(e.error_code, str(e))

    all_ids = {topic_id for topic_id, _ in session.partitions} | {t.topic_id for t in request.topics}
    names, refused = _resolve(services, ctx, all_ids)

    # 1. The piggy-backed acknowledgements, applied and persisted before anything is fetched.
    ack_results: dict[tuple[uuid.UUID, int], tuple[int, str | None]] = {}
    acks = []
    for t in request.topics:
        for p in t.partitions:
            if not p.acknowledgement_batches:
                continue
            if t.topic_id in refused:
                ack_results[(t.topic_id, p.partition_index)] = (refused[t.topic_id], None)
                continue
            batches = [(b.first_offset, b.last_offset, b.acknowledge_types) for b in p.acknowledgement_batches]
            acks.append((t.topic_id, TopicPartition(names[t.topic_id], p.partition_index), batches))
    if acks:
        answered = await manager.acknowledge(group_id, member_id, acks)
        for topic_id, tp, _ in acks:
            ack_results[(topic_id, tp.partition)] = answered[tp]

    # 2. The fetch: every partition of the session (none when it closes).
    fetched: dict[tuple[uuid.UUID, int], PartitionFetch | int] = {}
    if epoch == FINAL_EPOCH:
        sessions.close(group_id, member_id)
        await manager.release_member(group_id, member_id)
    else:
        wanted = []
        for topic_id, index in session.partitions:
            if topic_id in refused:
                fetched[(topic_id, index)] = refused[topic_id]
            else:
                wanted.append((topic_id, TopicPartition(names[topic_id], index)))
        # max_records 0 asks for no records (librdkafka sends it with acknowledgements alone): answered at
        # once, without a wait, as v0's partition_max_bytes 0 said. So does a v2 fetch with is_renew_ack
        # (KIP-1222): it carries RENEW acknowledgements and asks for nothing, as Kafka answers it.
        renewing = version >= 2 and request.is_renew_ack
        if wanted and request.max_records > 0 and not renewing:
            results = await manager.fetch(
                group_id, member_id, wanted, max_records=request.max_records,
                max_bytes=request.max_bytes if request.max_bytes > 0 else 0x7FFFFFFF,
                max_wait_ms=request.max_wait_ms,
                record_limit=version >= 2 and request.share_acquire_mode == _RECORD_LIMIT,
            )
            for topic_id, tp in wanted:
                fetched[(topic_id, tp.partition)] = results[tp]

    # 3. The answer: all partitions when the session opens, else those with something to say.
    endpoints: dict[int, ShareFetchResponse.NodeEndpoint] = {}
    by_topic: dict[uuid.UUID, list] = {}
    for key in dict.fromkeys([*fetched, *ack_results]):
        topic_id, index = key
        result = fetched.get(key)
        ack_code, ack_message = ack_results.get(key, (0, None))
        # Empty, never null, where nothing was acquired: Kafka's ShareFetchUtils sets null there, but
        # librdkafka's ShareFetch parser reads the records' size as an array count and refuses one below 0
        # (a null), failing the whole response; the Java client reads empty records as no records.
        part = FetchPart(partition_index=index, acknowledge_error_code=ack_code, acknowledge_error_message=ack_message,
                         records=b"")
        if isinstance(result, int):
            part.error_code = result
        elif result is not None:
            part.error_code, part.error_message = result.error_code, result.error_message
            if result.records:
                part.records = result.records
                # Bytes out of the topic, as Kafka's handleShareFetchRequest counts them (replication/topic_stats.py).
                services.data.topic_stats.sent(names[topic_id], sum(r.length for r in result.records))
            part.acquired_records = [FetchPart.AcquiredRecords(first_offset=a, last_offset=b, delivery_count=count)
                                     for a, b, count in _cut(result.acquired, request.batch_size)]
            if result.leader is not None:
                part.current_leader = FetchPart.LeaderIdAndEpoch(leader_id=result.leader[0], leader_epoch=result.leader[1])
                _add_endpoint(services, ctx, endpoints, result.leader[0], ShareFetchResponse.NodeEndpoint)
        interesting = (epoch == INITIAL_EPOCH or part.error_code or ack_code or part.acquired_records
                       or key in ack_results)
        if interesting:
            by_topic.setdefault(topic_id, []).append(part)
    return ShareFetchResponse(
        throttle_time_ms=0, error_code=0,
        acquisition_lock_timeout_ms=manager.lock_duration_ms(group_id),
        responses=[FetchTopic(topic_id=topic_id, partitions=parts) for topic_id, parts in by_topic.items()],
        node_endpoints=list(endpoints.values()),
    )


@handles(79, gate=SHARE)
async def handle_share_acknowledge(services: BrokerServices, ctx: RequestContext,
                                   request: ShareAcknowledgeRequest) -> Answer:
    version = ctx.api_version
    manager = services.share

    def failed(code: ErrorCode, message: str | None = None) -> ShareAcknowledgeResponse:
        return ShareAcknowledgeResponse(throttle_time_ms=0, error_code=int(code), error_message=message, responses=[])

    if manager is None:
        return failed(ErrorCode.UNSUPPORTED_VERSION, "share groups are not enabled on this broker")
    problem = _problem(request, version)
    if problem is not None:
        return failed(ErrorCode.INVALID_REQUEST, problem)
    group_id, member_id, epoch = request.group_id, request.member_id, request.share_session_epoch
    if not services.authorized(ctx, AclOperation.READ, ResourceType.GROUP, group_id):
        return failed(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    try:
        manager.sessions.acknowledged(group_id, member_id, epoch, services.now_ms())
    except ShareSessionError as e:
        return failed(e.error_code, str(e))
    names, refused = _resolve(services, ctx, {t.topic_id for t in request.topics})
    results: dict[tuple[uuid.UUID, int], tuple[int, str | None]] = {}
    acks = []
    for t in request.topics:
        for p in t.partitions:
            if t.topic_id in refused:
                results[(t.topic_id, p.partition_index)] = (refused[t.topic_id], None)
                continue
            batches = [(b.first_offset, b.last_offset, b.acknowledge_types) for b in p.acknowledgement_batches]
            acks.append((t.topic_id, TopicPartition(names[t.topic_id], p.partition_index), batches))
    if acks:
        answered = await manager.acknowledge(group_id, member_id, acks)
        for topic_id, tp, _ in acks:
            results[(topic_id, tp.partition)] = answered[tp]
    if epoch == FINAL_EPOCH:
        manager.sessions.close(group_id, member_id)
        await manager.release_member(group_id, member_id)
    endpoints: dict[int, ShareAcknowledgeResponse.NodeEndpoint] = {}
    by_topic: dict[uuid.UUID, list] = {}
    for (topic_id, index), (code, message) in results.items():
        part = AckPart(partition_index=index, error_code=code, error_message=message)
        if code == ErrorCode.NOT_LEADER_OR_FOLLOWER and topic_id in names:
            leader = services.partition_leader(names[topic_id], index)
            if leader is not None:
                part.current_leader = AckPart.LeaderIdAndEpoch(leader_id=leader[0], leader_epoch=leader[1])
                _add_endpoint(services, ctx, endpoints, leader[0], ShareAcknowledgeResponse.NodeEndpoint)
        by_topic.setdefault(topic_id, []).append(part)
    response = ShareAcknowledgeResponse(
        throttle_time_ms=0, error_code=0,
        responses=[AckTopic(topic_id=topic_id, partitions=parts) for topic_id, parts in by_topic.items()],
        node_endpoints=list(endpoints.values()),
    )
    if version >= 2:
        response.acquisition_lock_timeout_ms = manager.lock_duration_ms(group_id)
    return response


def _add_endpoint(services: BrokerServices, ctx: RequestContext, endpoints: dict, broker_id: int, cls) -> None:
    if broker_id not in endpoints:
        entry = services.node_endpoint(cls, broker_id, ctx.listener)
        if entry is not None:
            endpoints[broker_id] = entry
