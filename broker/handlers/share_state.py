"""Share-group state APIs, handed to the share coordinator (`services.share_coordinator`, coordinator/share/).

InitializeShareGroupState (83), ReadShareGroupState (84), WriteShareGroupState (85), DeleteShareGroupState
(86), ReadShareGroupStateSummary (87): sent by partition leaders and the group coordinator to the share
coordinator of a share-partition (FindCoordinator key type 2), never by clients. As in Kafka they are
"broker" APIs (ApiKeys listeners ["broker"]): served, and advertised, on the broker listeners; a principal
without CLUSTER_ACTION on the cluster is answered CLUSTER_AUTHORIZATION_FAILED for every partition, as
Kafka's KafkaApis answers (brokers talk to each other as a principal the ACLs or super.users grant it to).

Versions are Kafka 4.4's: Write and ReadSummary 0-1 (v1 adds DeliveryCompleteCount, KIP-1226), the others 0.
Each partition of a request is one operation of the coordinator, answered in its own entry: NOT_COORDINATOR
for a share-partition whose `__share_group_state` partition is not led here, the coordinator's codes
otherwise (coordinator/share/shard.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from odradek.coordinator.partitioning import (
    SHARE_GROUP_STATE_TOPIC,
    parse_share_coordinator_key,
    share_coordinator_key,
    share_state_partition,
)
from odradek.metadata.acl import AclOperation, ResourceType
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    DeleteShareGroupStateResponse,
    FindCoordinatorResponse,
    InitializeShareGroupStateResponse,
    ReadShareGroupStateResponse,
    ReadShareGroupStateSummaryResponse,
    WriteShareGroupStateResponse,
)

from ..internal_topics import ensure_coordinator_topic
from . import Answer, handles

if TYPE_CHECKING:
    from odradek.protocol.messages import (
        DeleteShareGroupStateRequest,
        FindCoordinatorRequest,
        InitializeShareGroupStateRequest,
        ReadShareGroupStateRequest,
        ReadShareGroupStateSummaryRequest,
        WriteShareGroupStateRequest,
    )

    from ..context import RequestContext
    from ..services import BrokerServices

_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def _refused(services: BrokerServices, ctx: RequestContext) -> bool:
    return not services.authorized(ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER)


def _every_partition(request, result: Callable[..., Any], entry: Callable[..., Any], response: Callable[..., Any],
                     code: ErrorCode) -> Any:
    """The response answering every partition of `request` with `code`."""
    return response(results=[result(topic_id=t.topic_id, partitions=[
        entry(partition=p.partition, error_code=int(code), error_message=None) for p in t.partitions])
        for t in request.topics])


@handles(83, (0, 0))
def handle_initialize_share_group_state(services: BrokerServices, ctx: RequestContext,
                                        request: InitializeShareGroupStateRequest) -> Answer:
    if _refused(services, ctx):
        R = InitializeShareGroupStateResponse
        return _every_partition(request, R.InitializeStateResult, R.InitializeStateResult.PartitionResult, R, _DENIED)
    return services.share_coordinator.initialize_state(request, ctx.api_version, services.now_ms())


@handles(84, (0, 0))
def handle_read_share_group_state(services: BrokerServices, ctx: RequestContext,
                                  request: ReadShareGroupStateRequest) -> Answer:
    if _refused(services, ctx):
        R = ReadShareGroupStateResponse
        return _every_partition(request, R.ReadStateResult, R.ReadStateResult.PartitionResult, R, _DENIED)
    return services.share_coordinator.read_state(request, ctx.api_version, services.now_ms())


@handles(85, (0, 1))
def handle_write_share_group_state(services: BrokerServices, ctx: RequestContext,
                                   request: WriteShareGroupStateRequest) -> Answer:
    if _refused(services, ctx):
        R = WriteShareGroupStateResponse
        return _every_partition(request, R.WriteStateResult, R.WriteStateResult.PartitionResult, R, _DENIED)
    return services.share_coordinator.write_state(request, ctx.api_version, services.now_ms())


@handles(86, (0, 0))
def handle_delete_share_group_state(services: BrokerServices, ctx: RequestContext,
                                    request: DeleteShareGroupStateRequest) -> Answer:
    if _refused(services, ctx):
        R = DeleteShareGroupStateResponse
        return _every_partition(request, R.DeleteStateResult, R.DeleteStateResult.PartitionResult, R, _DENIED)
    return services.share_coordinator.delete_state(request, ctx.api_version, services.now_ms())


@handles(87, (0, 1))
def handle_read_share_group_state_summary(services: BrokerServices, ctx: RequestContext,
                                          request: ReadShareGroupStateSummaryRequest) -> Answer:
    if _refused(services, ctx):
        R = ReadShareGroupStateSummaryResponse
        return _every_partition(request, R.ReadStateSummaryResult, R.ReadStateSummaryResult.PartitionResult, R,
                                _DENIED)
    return services.share_coordinator.read_state_summary(request, ctx.api_version, services.now_ms())


def find_share_coordinator(services: BrokerServices, ctx: RequestContext, request: FindCoordinatorRequest) -> Any:
    """FindCoordinator (10) with key type 2 (SHARE): the leader of the key's `__share_group_state` partition, at
    its endpoint on the listener the request came in on. A key is `group:topic_id:partition` (Kafka's
    SharePartitionKey: INVALID_REQUEST if it is not one); the asker needs CLUSTER_ACTION on the cluster (only
    brokers ask), as in Kafka; the topic is created on first use, COORDINATOR_NOT_AVAILABLE until it has a
    leader."""
    version = ctx.api_version
    keys = list(request.coordinator_keys) if version >= 4 else [request.key]
    if version < 6:  # key type 2 came with v6 (KIP-932); Kafka refuses it before
        return FindCoordinatorResponse(coordinators=[
            FindCoordinatorResponse.Coordinator(key=key, node_id=-1, host="", port=-1,
                                                error_code=int(ErrorCode.INVALID_REQUEST),
                                                error_message="share coordinator keys need FindCoordinator v6+")
            for key in keys]) if version >= 4 else FindCoordinatorResponse(
            error_code=int(ErrorCode.INVALID_REQUEST), node_id=-1, host="", port=-1)
    allowed = not _refused(services, ctx)
    topic = services.topic_by_name(SHARE_GROUP_STATE_TOPIC)
    if allowed and topic is None:
        ensure_coordinator_topic(services, 2)
        topic = services.topic_by_name(SHARE_GROUP_STATE_TOPIC)
    found: list[tuple[ErrorCode, int, str, int]] = []
    for key in keys:
        parsed = parse_share_coordinator_key(key)
        if not allowed:
            found.append((_DENIED, -1, "", -1))
        elif parsed is None:
            found.append((ErrorCode.INVALID_REQUEST, -1, "", -1))
        elif topic is None:
            found.append((ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1))
        else:
            index = share_state_partition(share_coordinator_key(*parsed), len(topic.partitions))
            leader = services.partition_leader(SHARE_GROUP_STATE_TOPIC, index)
            endpoint = services.endpoint(leader[0], ctx.listener) if leader is not None else None
            if leader is None or endpoint is None:
                found.append((ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", -1))
            else:
                found.append((ErrorCode.NONE, leader[0], endpoint.host, endpoint.port))
    messages = {ErrorCode.INVALID_REQUEST: "not a share coordinator key (group:topic_id:partition)",
                ErrorCode.COORDINATOR_NOT_AVAILABLE: "The coordinator is not available."}
    if version >= 4:
        return FindCoordinatorResponse(coordinators=[
            FindCoordinatorResponse.Coordinator(key=key, node_id=node_id, host=host, port=port, error_code=int(code),
                                                error_message=messages.get(code))
            for key, (code, node_id, host, port) in zip(keys, found)])
    code, node_id, host, port = found[0]
    return FindCoordinatorResponse(error_code=int(code), error_message=messages.get(code) if version >= 1 else None,
                                   node_id=node_id, host=host, port=port)
