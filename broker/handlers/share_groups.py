"""Share group APIs (KIP-932) on the group side, handed to the group coordinator (coordinator/group/share.py).

ShareGroupHeartbeat (76) and ShareGroupDescribe (77), and the share admin APIs DescribeShareGroupOffsets
(90), AlterShareGroupOffsets (91) and DeleteShareGroupOffsets (92), which read and change share-partition
state through the broker's persister (broker/share/persister.py). All are behind the SHARE gate
(`odradek.share.enabled`, handlers/__init__): off, none is served or advertised.

Authorization is Kafka 4.4's (KafkaApis):
- ShareGroupHeartbeat: READ on the group (GROUP_AUTHORIZATION_FAILED), then DESCRIBE on every subscribed
  topic (TOPIC_AUTHORIZATION_FAILED, naming the topics), as for a KIP-848 consumer.
- ShareGroupDescribe: DESCRIBE on each group; a group whose members are assigned a topic the principal may
  not describe is answered TOPIC_AUTHORIZATION_FAILED rather than leak the topic.
- DescribeShareGroupOffsets: DESCRIBE on the group, DESCRIBE on each topic (per partition).
- AlterShareGroupOffsets: READ on the group, READ on each topic (per partition).
- DeleteShareGroupOffsets: DELETE on the group, READ on each topic (per partition).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import structlog

from odradek.metadata.acl import AclOperation, ResourceType
from odradek.metadata.image import SHARE_VERSION_FEATURE
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    AlterShareGroupOffsetsResponse,
    ListOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
    DescribeShareGroupOffsetsResponse,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatResponse,
)
from odradek.protocol.codec import ZERO_UUID
from odradek.storage.names import TopicPartition

from ..authorizer import per_item
from ..share.persister import SharePartitionKey
from . import SHARE, Answer, handles
from .groups import _client_host, _client_id, _own_operations, respond

if TYPE_CHECKING:
    from odradek.protocol.messages import (
        AlterShareGroupOffsetsRequest,
        DeleteShareGroupOffsetsRequest,
        DescribeShareGroupOffsetsRequest,
        ShareGroupDescribeRequest,
        ShareGroupHeartbeatRequest,
    )

    from ..context import RequestContext
    from ..services import BrokerServices

log = structlog.get_logger("odradek.broker.share")

READ, DESCRIBE, GROUP, TOPIC = AclOperation.READ, AclOperation.DESCRIBE, ResourceType.GROUP, ResourceType.TOPIC
_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED


def _share_version_off(services: BrokerServices) -> bool:
    """A cluster formatted before share.version was finalized (it stays at 0: UpdateFeatures is not served)
    does not serve share groups, as Kafka's brokers refuse them below share.version 1."""
    return services.metadata.image.features.get(SHARE_VERSION_FEATURE, 0) < 1


_OFF_MESSAGE = "Share groups are not enabled in this cluster (share.version is 0)."


@handles(76, (1, 1), gate=SHARE)
def handle_share_group_heartbeat(services: BrokerServices, ctx: RequestContext,
                                 request: ShareGroupHeartbeatRequest) -> Answer:
    if _share_version_off(services):
        return ShareGroupHeartbeatResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, error_message=_OFF_MESSAGE)
    if not services.authorized(ctx, READ, GROUP, request.group_id):
        return ShareGroupHeartbeatResponse(error_code=_DENIED)
    if services.authorizer is not None and request.subscribed_topic_names:
        names = list(dict.fromkeys(request.subscribed_topic_names))
        allowed = services.authorized_names(ctx, DESCRIBE, TOPIC, names)
        refused = [n for n in names if n not in allowed]
        if refused:
            return ShareGroupHeartbeatResponse(
                error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                error_message=f"The member is not authorized to describe the topics {', '.join(sorted(refused))}.")
    return respond(services, services.groups.share_group_heartbeat(request, services.now_ms(), _client_id(ctx),
                                                                   _client_host(ctx)))


def _describe_refusal(services: BrokerServices, ctx: RequestContext, group_id: str):
    return None if services.authorized(ctx, DESCRIBE, GROUP, group_id) else _DENIED


@handles(77, (1, 1), gate=SHARE)
@per_item("group_ids", "groups", _describe_refusal,
          lambda g, code, version: ShareGroupDescribeResponse.DescribedGroup(error_code=int(code), group_id=g))
def handle_share_group_describe(services: BrokerServices, ctx: RequestContext,
                                request: ShareGroupDescribeRequest) -> Answer:
    if _share_version_off(services):
        return ShareGroupDescribeResponse(groups=[ShareGroupDescribeResponse.DescribedGroup(
            error_code=ErrorCode.UNSUPPORTED_VERSION, group_id=g, error_message=_OFF_MESSAGE) for g in request.group_ids])
    response = _own_operations(services, ctx, services.groups.share_group_describe(request, services.now_ms()))
    if services.authorizer is not None:
        for group in response.groups:
            names = {tp.topic_name for m in group.members for tp in m.assignment.topic_partitions}
            if names and len(services.authorized_names(ctx, DESCRIBE, TOPIC, sorted(names))) < len(names):
                response.groups[response.groups.index(group)] = ShareGroupDescribeResponse.DescribedGroup(
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED, group_id=group.group_id,
                    error_message="The described group uses topics that the client is not authorized to describe.")
    return response


# ---------------------------------------------------------------------------------------------------
# DescribeShareGroupOffsets (90), AlterShareGroupOffsets (91), DeleteShareGroupOffsets (92)


def _group_refusal(services: BrokerServices, ctx: RequestContext, op: AclOperation, group_id: str) -> ErrorCode | None:
    return None if services.authorized(ctx, op, GROUP, group_id) else _DENIED


LIST_OFFSETS_VERSION = 7  # isolation level, leader epochs; every Kafka 4.x broker serves it


async def _end_offset(services: BrokerServices, topic: str, partition: int, leader: int) -> int:
    """The high watermark of the share-partition's topic partition: read here when this broker leads it, else
    asked of its leader with ListOffsets (latest, read_uncommitted), as Kafka 4.4's coordinator asks the leaders
    for KIP-1226's lag. -1 (lag unknown) when the leader cannot be reached or answers an error: a describe is
    never failed for a lag."""
    hosted = services.data.get_partition(TopicPartition(topic, partition))
    if hosted is not None and hosted.is_leader:
        return hosted.high_watermark
    if services.node_request is None or leader < 0 or leader == services.node_id:
        return -1
    request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
        name=topic, partitions=[ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
            partition_index=partition, timestamp=-1)])])
    try:
        response = await services.node_request(leader, request, LIST_OFFSETS_VERSION)
    except Exception as e:  # noqa: BLE001 - any failure to ask only leaves the lag unknown
        log.debug("share lag: end offset not read", topic=topic, partition=partition, leader=leader, error=str(e))
        return -1
    for t in response.topics:
        for p in t.partitions:
            if t.name == topic and p.partition_index == partition and p.error_code == 0:
                return p.offset
    return -1


@handles(90, (0, 1), gate=SHARE)
def handle_describe_share_group_offsets(services: BrokerServices, ctx: RequestContext,
                                        request: DescribeShareGroupOffsetsRequest) -> Answer:
    """Start offset, leader epoch and (v1, KIP-1226) lag of each share-partition, from the persister's
    ReadShareGroupStateSummary. Lag = end offset - start offset - records delivered past the start offset;
    -1 when the start offset or the delivery count is not known yet, or the leader cannot tell its end."""
    return _describe_offsets(services, ctx, request)


async def _describe_offsets(services: BrokerServices, ctx: RequestContext, request) -> DescribeShareGroupOffsetsResponse:
    group_cls = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup
    topic_cls = group_cls.DescribeShareGroupOffsetsResponseTopic
    partition_cls = topic_cls.DescribeShareGroupOffsetsResponsePartition
    groups = []
    for g in request.groups:
        refusal = _group_refusal(services, ctx, DESCRIBE, g.group_id)
        code, group = services.groups.share_state_partitions(g.group_id)
        if refusal is None and code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                        ErrorCode.COORDINATOR_NOT_AVAILABLE):
            refusal = code
        if refusal is None and g.topics is None and group is None:
            refusal = code
        if refusal is not None:
            groups.append(group_cls(group_id=g.group_id, topics=[], error_code=int(refusal),
                                    error_message=None if refusal is _DENIED else f"Group {g.group_id}: {refusal.name}"))
            continue
        wanted: list[tuple[str, list[int]]]
        if g.topics is None:  # every partition with state
            assert group is not None
            wanted = []
            for topic_id, with_state in sorted(group.state_partitions.all_partitions().items()):
                topic = services.metadata.image.topics_by_id.get(topic_id)
                if topic is not None:
                    wanted.append((topic.name, sorted(with_state)))
        else:
            wanted = [(t.topic_name, list(t.partitions)) for t in g.topics]
        allowed = services.authorized_names(ctx, DESCRIBE, TOPIC, [name for name, _ in wanted])
        topics = []
        for name, partitions in wanted:
            image = services.metadata.image.topics_by_name.get(name)
            rows = []
            for p in partitions:
                if name not in allowed:
                    rows.append(partition_cls(partition_index=p, start_offset=-1, leader_epoch=-1,
                                              error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)))
                    continue
                if image is None:  # as Kafka: no such topic reads as no offset, not an error
                    rows.append(partition_cls(partition_index=p, start_offset=-1, leader_epoch=0))
                    continue
                summary = await services.share_persister.read_summary(SharePartitionKey(g.group_id, image.topic_id, p))
                if summary.error_code != ErrorCode.NONE:
                    rows.append(partition_cls(partition_index=p, start_offset=-1, leader_epoch=0))
                    continue
                lag = -1
                partition_image = image.partitions.get(p)
                end = await _end_offset(services, name, p,
                                        partition_image.leader if partition_image is not None else -1)
                if summary.start_offset >= 0 and summary.delivery_complete_count >= 0 and end >= 0:
                    lag = max(end - summary.start_offset - summary.delivery_complete_count, 0)
                rows.append(partition_cls(partition_index=p, start_offset=summary.start_offset,
                                          leader_epoch=summary.leader_epoch, lag=lag))
            topics.append(topic_cls(topic_name=name, topic_id=image.topic_id if image is not None else ZERO_UUID,
                                    partitions=rows))
        groups.append(group_cls(group_id=g.group_id, topics=topics))
    return DescribeShareGroupOffsetsResponse(groups=groups)


@handles(91, (0, 0), gate=SHARE)
def handle_alter_share_group_offsets(services: BrokerServices, ctx: RequestContext,
                                     request: AlterShareGroupOffsetsRequest) -> Answer:
    """Restart share-partitions of an empty share group at the given offsets (READ on the group and on each
    topic): the coordinator records them at a new state epoch, the persister initializes them."""
    refusal = _group_refusal(services, ctx, READ, request.group_id)
    if refusal is not None:
        return AlterShareGroupOffsetsResponse(error_code=int(refusal), responses=[])
    if not request.group_id:
        return AlterShareGroupOffsetsResponse(error_code=int(ErrorCode.INVALID_GROUP_ID), responses=[])
    return _alter_offsets(services, ctx, request)


async def _alter_offsets(services: BrokerServices, ctx: RequestContext, request) -> AlterShareGroupOffsetsResponse:
    allowed = services.authorized_names(ctx, READ, TOPIC, [t.topic_name for t in request.topics])
    wanted = [(t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions])
              for t in request.topics if t.topic_name in allowed]
    written = services.groups.alter_share_group_offsets(request.group_id, wanted, services.now_ms())
    answer = written.result() if written.done else await services.future_from(written)
    group_error, message, errors, initialization = answer
    if group_error != ErrorCode.NONE:
        return AlterShareGroupOffsetsResponse(error_code=int(group_error), error_message=message, responses=[])
    if initialization is not None:
        keys = initialization.keys()
        codes = await asyncio.gather(*(services.share_persister.initialize(
            SharePartitionKey(request.group_id, t, p), initialization.state_epoch, initialization.start_offset(t, p))
            for t, p in keys))
        failed = {key: ErrorCode(c) for key, c in zip(keys, codes) if c != ErrorCode.NONE}
        recorded = services.groups.share_state_initialized(initialization, failed, services.now_ms())
        if not recorded.done:
            await services.future_from(recorded)
        for (topic_id, p), code in failed.items():
            topic = services.metadata.image.topics_by_id.get(topic_id)
            if topic is not None:
                errors[(topic.name, p)] = code
    topic_cls = AlterShareGroupOffsetsResponse.AlterShareGroupOffsetsResponseTopic
    responses = []
    for t in request.topics:
        image = services.metadata.image.topics_by_name.get(t.topic_name)
        code_of = (lambda p: errors.get((t.topic_name, p), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                   ) if t.topic_name in allowed else (lambda p: ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        responses.append(topic_cls(
            topic_name=t.topic_name, topic_id=image.topic_id if image is not None else ZERO_UUID,
            partitions=[topic_cls.AlterShareGroupOffsetsResponsePartition(
                partition_index=p.partition_index, error_code=int(code_of(p.partition_index)))
                for p in t.partitions]))
    return AlterShareGroupOffsetsResponse(error_code=0, responses=responses)


@handles(92, (0, 0), gate=SHARE)
def handle_delete_share_group_offsets(services: BrokerServices, ctx: RequestContext,
                                      request: DeleteShareGroupOffsetsRequest) -> Answer:
    """Forget the share-partition state of some topics of an empty share group (DELETE on the group, READ on
    each topic): deleted through the persister, then dropped from the group's state record; the next
    member to subscribe starts them again at share.auto.offset.reset."""
    refusal = _group_refusal(services, ctx, AclOperation.DELETE, request.group_id)
    if refusal is not None:
        return DeleteShareGroupOffsetsResponse(error_code=int(refusal), responses=[])
    if not request.group_id:
        return DeleteShareGroupOffsetsResponse(error_code=int(ErrorCode.INVALID_GROUP_ID), responses=[])
    return _delete_offsets(services, ctx, request)


async def _delete_offsets(services: BrokerServices, ctx: RequestContext, request) -> DeleteShareGroupOffsetsResponse:
    names = [t.topic_name for t in request.topics]
    allowed = services.authorized_names(ctx, READ, TOPIC, names)
    group_error, message, found = services.groups.share_offsets_to_delete(
        request.group_id, [n for n in names if n in allowed])
    if group_error != ErrorCode.NONE:
        return DeleteShareGroupOffsetsResponse(error_code=int(group_error), error_message=message, responses=[])
    topic_cls = DeleteShareGroupOffsetsResponse.DeleteShareGroupOffsetsResponseTopic
    to_delete = [(topic_id, p) for _, (topic_id, partitions, code) in found.items() if code == ErrorCode.NONE
                 for p in sorted(partitions)]
    results: dict = await services.share_persister.delete(request.group_id, to_delete) if to_delete else {}
    deleted: dict = {}
    for (topic_id, p), code in results.items():
        if code == ErrorCode.NONE:
            deleted.setdefault(topic_id, set()).add(p)
    if deleted:
        recorded = services.groups.share_state_deleted(
            request.group_id, {t: frozenset(ps) for t, ps in deleted.items()}, services.now_ms())
        if not recorded.done:
            await services.future_from(recorded)
        log.info("share group offsets deleted", group=request.group_id, partitions=sum(map(len, deleted.values())))
    responses = []
    for name in dict.fromkeys(names):
        if name not in allowed:
            responses.append(topic_cls(topic_name=name, topic_id=ZERO_UUID,
                                       error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)))
            continue
        topic_id, partitions, code = found[name]
        if code == ErrorCode.NONE:
            failures = [results.get((topic_id, p)) for p in partitions]
            code = next((ErrorCode(c) for c in failures if c not in (None, ErrorCode.NONE)), ErrorCode.NONE)
        responses.append(topic_cls(topic_name=name, topic_id=topic_id or ZERO_UUID, error_code=int(code)))
    return DeleteShareGroupOffsetsResponse(error_code=0, responses=responses)
