"""Committed offsets, handed to the group coordinator (`services.groups`): OffsetCommit (8), OffsetFetch (9),
OffsetDelete (47). A commit's response waits until its records are durable.

With an authorizer (Kafka's KafkaApis): a commit needs READ on the group and on each topic, a fetch
DESCRIBE on the group and on each topic (topics it may not describe are left out of an all-topics fetch),
a delete DELETE on the group and READ on each topic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import OffsetCommitResponse, OffsetDeleteResponse, OffsetFetchResponse
from odradek.metadata.acl import AclOperation, ResourceType

from ..authorizer import per_item, then
from . import Answer, handles
from .groups import respond

if TYPE_CHECKING:
    from odradek.protocol.messages import OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest
    from ..context import RequestContext
    from ..services import BrokerServices

GROUP, TOPIC = ResourceType.GROUP, ResourceType.TOPIC
_GROUP_DENIED, _TOPIC_DENIED = int(ErrorCode.GROUP_AUTHORIZATION_FAILED), int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
CommitTopic = OffsetCommitResponse.OffsetCommitResponseTopic


def _read_refusal(services: BrokerServices, ctx: RequestContext, topic):
    return None if services.authorized(ctx, AclOperation.READ, TOPIC, topic.name) else ErrorCode.TOPIC_AUTHORIZATION_FAILED


def _commit_denied(topic, code: int, version: int):
    return CommitTopic(name=topic.name, partitions=[
        CommitTopic.OffsetCommitResponsePartition(partition_index=p.partition_index, error_code=int(code))
        for p in topic.partitions])


@handles(8, (2, 9))
def handle_offset_commit(services: BrokerServices, ctx: RequestContext, request: OffsetCommitRequest) -> Answer:
    if not services.authorized(ctx, AclOperation.READ, GROUP, request.group_id):
        return OffsetCommitResponse(topics=[_commit_denied(t, _GROUP_DENIED, ctx.api_version) for t in request.topics])
    return _offset_commit(services, ctx, request)


@per_item("topics", "topics", _read_refusal, _commit_denied)
def _offset_commit(services: BrokerServices, ctx: RequestContext, request: OffsetCommitRequest) -> Answer:
    return respond(services, services.groups.offset_commit(request, ctx.api_version, services.now_ms()))


@handles(9, (1, 9))
def handle_offset_fetch(services: BrokerServices, ctx: RequestContext, request: OffsetFetchRequest) -> Answer:
    """A `require_stable` fetch is answered once the group's partition has committed what was written
    before it (coordinator/group/group_coordinator.py's offset_fetch), the others at once."""
    answer = respond(services, services.groups.offset_fetch(request, ctx.api_version, services.now_ms()))
    if services.authorizer is None:
        return answer

    def authorized(response):
        _authorize_fetch(services, ctx, request, response)
        return response

    return then(answer, authorized)


def _authorize_fetch(services: BrokerServices, ctx: RequestContext, request: OffsetFetchRequest, response) -> None:
    version = ctx.api_version
    if version <= 7:
        groups = [(request.group_id, request.topics, response)]
    else:
        groups = list(zip([g.group_id for g in request.groups], [g.topics for g in request.groups], response.groups))
    for group_id, requested, answer in groups:
        if not services.authorized(ctx, AclOperation.DESCRIBE, GROUP, group_id):
            answer.topics = []
            if version >= 2:
                answer.error_code = _GROUP_DENIED
            else:  # v1: no top-level error, every requested partition carries it
                answer.topics = [OffsetFetchResponse.OffsetFetchResponseTopic(name=t.name, partitions=[
                    OffsetFetchResponse.OffsetFetchResponseTopic.OffsetFetchResponsePartition(
                        partition_index=p, committed_offset=-1, metadata="", error_code=_GROUP_DENIED)
                    for p in t.partition_indexes]) for t in requested or ()]
            continue
        allowed = services.authorized_names(ctx, AclOperation.DESCRIBE, TOPIC, [t.name for t in answer.topics])
        if requested is None:  # all topics: those it may not describe are left out
            answer.topics = [t for t in answer.topics if t.name in allowed]
            continue
        for t in answer.topics:
            if t.name not in allowed:
                for p in t.partitions:
                    p.committed_offset, p.metadata, p.error_code = -1, "", _TOPIC_DENIED


@handles(47, (0, 0))
def handle_offset_delete(services: BrokerServices, ctx: RequestContext, request: OffsetDeleteRequest) -> Answer:
    if not services.authorized(ctx, AclOperation.DELETE, GROUP, request.group_id):
        return OffsetDeleteResponse(error_code=_GROUP_DENIED, topics=[])
    denied = []
    if services.authorizer is not None:
        denied = [t for t in request.topics if _read_refusal(services, ctx, t) is not None]
        request.topics = [t for t in request.topics if _read_refusal(services, ctx, t) is None]
    answer = respond(services, services.groups.offset_delete(request, ctx.api_version, services.now_ms()))
    if not denied:
        return answer
    topic_cls = OffsetDeleteResponse.OffsetDeleteResponseTopic

    def merge(response):
        response.topics.extend(topic_cls(name=t.name, partitions=[
            topic_cls.OffsetDeleteResponsePartition(partition_index=p.partition_index, error_code=_TOPIC_DENIED)
            for p in t.partitions]) for t in denied)
        return response

    return then(answer, merge)
