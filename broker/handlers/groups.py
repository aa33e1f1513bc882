"""Group coordination APIs, handed to the group coordinator (`services.groups`, coordinator/group/group_coordinator.py).

FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13), SyncGroup (14), DescribeGroups (15),
ListGroups (16), DeleteGroups (42), ConsumerGroupHeartbeat (68), ConsumerGroupDescribe (69).
JoinGroup and SyncGroup are long polls: their response is a future completed by the rebalance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.coordinator.group.classic import join_error
from odradek.purgatory.deferred import Deferred
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
    DeleteGroupsResponse,
    DescribeGroupsResponse,
    HeartbeatResponse,
    LeaveGroupResponse,
    SyncGroupResponse,
)
from odradek.metadata.acl import AclOperation, ResourceType

from ..authorizer import then, per_item
from ..internal_topics import ensure_coordinator_topic
from ..share.group_deletion import delete_groups_with_share_state
from . import Answer, handles
from .share_state import find_share_coordinator

if TYPE_CHECKING:
    from odradek.protocol.messages import (
        ConsumerGroupDescribeRequest,
        ConsumerGroupHeartbeatRequest,
        DeleteGroupsRequest,
        DescribeGroupsRequest,
        FindCoordinatorRequest,
        HeartbeatRequest,
        JoinGroupRequest,
        LeaveGroupRequest,
        ListGroupsRequest,
        SyncGroupRequest,
    )
    from ..context import RequestContext
    from ..services import BrokerServices

READ, DESCRIBE, GROUP = AclOperation.READ, AclOperation.DESCRIBE, ResourceType.GROUP
_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED


def respond(services: BrokerServices, result):
    """A coordinator result as a handler result: the message, or a future while it is still pending."""
    if not isinstance(result, Deferred):
        return result
    if result.done:
        return result.result()
    return services.future_from(result)


def _locate(services: BrokerServices, listener: str):
    """Who leads an internal topic's partition, from the metadata image, at its endpoint for the listener
    the request came in on; None (COORDINATOR_NOT_AVAILABLE) while it has no leader or no such endpoint.

    While this broker leads the partition stranded (services.coordinates_here_in_vain: no controller has
    answered it for a session, and the ISR needs a change), the controller has most likely fenced it and
    moved the partition to the replica it elects when a leader is fenced (Kafka's PartitionChangeBuilder:
    the first replica, in assignment order, that is in the ISR and not fenced): that replica is named, as
    far as this broker's last image tells, rather than itself, whose every write would time out. The
    answer is a hint a client checks: the node named refuses with NOT_COORDINATOR if it is not the
    coordinator, and the client asks again, now also connected to a node with current metadata. Naming no
    coordinator instead (COORDINATOR_NOT_AVAILABLE) left a client whose one connection is to this broker
    (librdkafka connects only to the brokers it needs) asking here again and again for as long as the cut
    lasted: test_transactions_cluster_faults' cut_coordinator_new_instance step."""

    def locate(topic: str, partition: int):
        leader = services.partition_leader(topic, partition)
        node_id = leader[0] if leader is not None else None
        if node_id is not None and services.coordinates_here_in_vain(topic, partition):
            node_id = _successor(services, topic, partition)
        endpoint = services.endpoint(node_id, listener) if node_id is not None else None
        if endpoint is None:
            return None
        return node_id, endpoint.host, endpoint.port

    return locate


def _successor(services: BrokerServices, topic: str, partition: int) -> int | None:
    """The replica the controller elects when this broker, the partition's leader, is fenced, by this
    broker's image; None when there is none."""
    image = services.metadata.image
    topic_image = image.topics_by_name.get(topic)
    p = topic_image.partitions.get(partition) if topic_image is not None else None
    if p is None:
        return None
    for replica in p.replicas:
        registration = image.brokers.get(replica)
        if (replica != services.node_id and replica in p.isr and registration is not None
                and not registration.fenced):
            return replica
    return None


def _client_id(ctx: RequestContext) -> str:
    return ctx.header.client_id or ""


def _client_host(ctx: RequestContext) -> str:
    """A member's host as Kafka records it: Java's InetAddress.toString() of the peer, "/127.0.0.1" (no reverse
    lookup, so nothing before the slash). DescribeGroups and ConsumerGroupDescribe answer it as is, and
    kafka-consumer-groups --describe prints it in its HOST column."""
    return f"/{ctx.client_host}" if ctx.client_host else ""


@handles(10, (0, 6))
def handle_find_coordinator(services: BrokerServices, ctx: RequestContext, request: FindCoordinatorRequest) -> Answer:
    if request.key_type == 2:  # SHARE: the share coordinator of a share-partition (share_state.py)
        return find_share_coordinator(services, ctx, request)
    if request.key_type == 1:
        services.transactions  # creates __transaction_state on first use, as Kafka does
    response = services.groups.find_coordinator(request, ctx.api_version, _locate(services, ctx.listener))
    entries = response.coordinators if ctx.api_version >= 4 else [response]
    if services.authorizer is not None:  # DESCRIBE on the group or the transactional id
        resource_type, code = ((GROUP, _DENIED) if request.key_type == 0 else
                               (ResourceType.TRANSACTIONAL_ID, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        for key, entry in zip(request.coordinator_keys if ctx.api_version >= 4 else [request.key], entries):
            if not services.authorized(ctx, DESCRIBE, resource_type, key):
                entry.error_code, entry.node_id, entry.host, entry.port = int(code), -1, "", -1
                entry.error_message = None
    if any(e.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE for e in entries):
        # The topic may be missing still (too few brokers were alive to create it): an authorized key tries
        # again, as Kafka's FindCoordinator does.
        ensure_coordinator_topic(services, request.key_type)
    return response


@handles(11, (0, 9))
def handle_join_group(services: BrokerServices, ctx: RequestContext, request: JoinGroupRequest) -> Answer:
    if not services.authorized(ctx, READ, GROUP, request.group_id):
        return join_error(request.member_id, _DENIED)
    return respond(services, services.groups.join_group(request, ctx.api_version, services.now_ms(), _client_id(ctx),
                                                    _client_host(ctx)))


@handles(12, (0, 4))
def handle_heartbeat(services: BrokerServices, ctx: RequestContext, request: HeartbeatRequest) -> Answer:
    if not services.authorized(ctx, READ, GROUP, request.group_id):
        return HeartbeatResponse(error_code=_DENIED)
    return respond(services, services.groups.heartbeat(request, ctx.api_version, services.now_ms()))


@handles(13, (0, 5))
def handle_leave_group(services: BrokerServices, ctx: RequestContext, request: LeaveGroupRequest) -> Answer:
    if not services.authorized(ctx, READ, GROUP, request.group_id):
        return LeaveGroupResponse(error_code=_DENIED)
    return respond(services, services.groups.leave_group(request, ctx.api_version, services.now_ms()))


@handles(14, (0, 5))
def handle_sync_group(services: BrokerServices, ctx: RequestContext, request: SyncGroupRequest) -> Answer:
    if not services.authorized(ctx, READ, GROUP, request.group_id):
        return SyncGroupResponse(error_code=_DENIED)
    return respond(services, services.groups.sync_group(request, ctx.api_version, services.now_ms()))


def _describe_refusal(services: BrokerServices, ctx: RequestContext, group_id: str):
    return None if services.authorized(ctx, DESCRIBE, GROUP, group_id) else _DENIED


@handles(15, (0, 6))
@per_item("groups", "groups", _describe_refusal,
          lambda g, code, version: DescribeGroupsResponse.DescribedGroup(error_code=int(code), group_id=g))
def handle_describe_groups(services: BrokerServices, ctx: RequestContext, request: DescribeGroupsRequest) -> Answer:
    return _own_operations(services, ctx, services.groups.describe_groups(request, ctx.api_version, services.now_ms()))


def _own_operations(services: BrokerServices, ctx: RequestContext, response):
    """With an authorizer, a group's authorized operations (when asked for) are the principal's own."""
    if services.authorizer is not None:
        for g in response.groups:
            if getattr(g, "authorized_operations", None) not in (None, -(1 << 31)) and not g.error_code:
                g.authorized_operations = services.authorizer.authorized_operations(ctx, GROUP, g.group_id)
    return response


@handles(16, (0, 5))
def handle_list_groups(services: BrokerServices, ctx: RequestContext, request: ListGroupsRequest) -> Answer:
    response = services.groups.list_groups(request, ctx.api_version, services.now_ms())
    if services.authorizer is not None and not services.authorized(ctx, DESCRIBE, ResourceType.CLUSTER, log_denied=False):
        allowed = services.authorized_names(ctx, DESCRIBE, GROUP, [g.group_id for g in response.groups], log_denied=False)
        response.groups = [g for g in response.groups if g.group_id in allowed]  # only the groups it may describe
    return response


@handles(42, (0, 2))
def handle_delete_groups(services: BrokerServices, ctx: RequestContext, request: DeleteGroupsRequest) -> Answer:
    """Share groups' state (in __share_group_state) is deleted first (broker/share/group_deletion.py)."""
    if services.authorizer is not None:
        allowed = services.authorized_names(ctx, AclOperation.DELETE, GROUP, request.groups_names)
        if len(allowed) < len(set(request.groups_names)):
            return _delete_allowed_groups(services, ctx, request, allowed)
    return delete_groups_with_share_state(services, request, ctx.api_version)


@handles(68, (0, 1))
def handle_consumer_group_heartbeat(services: BrokerServices, ctx: RequestContext,
                                    request: ConsumerGroupHeartbeatRequest) -> Answer:
    if not services.authorized(ctx, READ, GROUP, request.group_id):
        return ConsumerGroupHeartbeatResponse(error_code=_DENIED)
    return respond(services, services.groups.consumer_group_heartbeat(request, ctx.api_version, services.now_ms(),
                                                                  _client_id(ctx), _client_host(ctx)))


@handles(69, (0, 1))
@per_item("group_ids", "groups", _describe_refusal,
          lambda g, code, version: ConsumerGroupDescribeResponse.DescribedGroup(error_code=int(code), group_id=g))
def handle_consumer_group_describe(services: BrokerServices, ctx: RequestContext,
                                   request: ConsumerGroupDescribeRequest) -> Answer:
    return _own_operations(services, ctx, services.groups.consumer_group_describe(request, ctx.api_version, services.now_ms()))


def _delete_allowed_groups(services: BrokerServices, ctx: RequestContext, request: DeleteGroupsRequest, allowed: set):
    """DeleteGroups for the groups the principal may delete; the others answer GROUP_AUTHORIZATION_FAILED."""
    names = list(request.groups_names)
    request.groups_names = [g for g in names if g in allowed]
    answer = delete_groups_with_share_state(services, request, ctx.api_version)

    def merge(response):
        results = {r.group_id: r for r in response.results}
        response.results = [results.get(g) or DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=int(_DENIED))
                            for g in dict.fromkeys(names)]
        return response

    return then(answer, merge)
