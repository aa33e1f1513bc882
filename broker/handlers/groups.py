"""Group coordination APIs, handed to the group coordinator (`services.groups`, coordinator/group/group_coordinator.py).

FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13), SyncGroup (14), DescribeGroups (15),
ListGroups (16), DeleteGroups (42), ConsumerGroupHeartbeat (68), ConsumerGroupDescribe (69).
JoinGroup and SyncGroup are long polls: their response is a future completed by the rebalance.
"""

from __future__ import annotations

from odradek.coordinator.runtime import Deferred

from . import handles


def respond(services, result):
    """A coordinator result as a handler result: the message, or a future while it is still pending."""
    if not isinstance(result, Deferred):
        return result
    if result.done:
        return result.result()
    return services.future_from(result)


def _locate(services, listener: str):
    """Who leads an internal topic's partition, from the metadata image, at its endpoint for the listener
    the request came in on; None (COORDINATOR_NOT_AVAILABLE) while it has no leader or no such endpoint."""

    def locate(topic: str, partition: int):
        leader = services.partition_leader(topic, partition)
        endpoint = services.endpoint(leader[0], listener) if leader is not None else None
        if endpoint is None:
            return None
        return leader[0], endpoint.host, endpoint.port

    return locate


def _client_id(ctx) -> str:
    return ctx.header.client_id or ""


@handles(10, (0, 6))
def handle_find_coordinator(services, ctx, request):
    if request.key_type == 1:
        services.transactions  # creates __transaction_state on first use, as Kafka does
    return services.groups.find_coordinator(request, ctx.api_version, _locate(services, ctx.listener))


@handles(11, (0, 9))
def handle_join_group(services, ctx, request):
    return respond(services, services.groups.join_group(request, ctx.api_version, services.now_ms(), _client_id(ctx),
                                                    ctx.client_host))


@handles(12, (0, 4))
def handle_heartbeat(services, ctx, request):
    return respond(services, services.groups.heartbeat(request, ctx.api_version, services.now_ms()))


@handles(13, (0, 5))
def handle_leave_group(services, ctx, request):
    return respond(services, services.groups.leave_group(request, ctx.api_version, services.now_ms()))


@handles(14, (0, 5))
def handle_sync_group(services, ctx, request):
    return respond(services, services.groups.sync_group(request, ctx.api_version, services.now_ms()))


@handles(15, (0, 6))
def handle_describe_groups(services, ctx, request):
    return services.groups.describe_groups(request, ctx.api_version, services.now_ms())


@handles(16, (0, 5))
def handle_list_groups(services, ctx, request):
    return services.groups.list_groups(request, ctx.api_version, services.now_ms())


@handles(42, (0, 2))
def handle_delete_groups(services, ctx, request):
    return respond(services, services.groups.delete_groups(request, ctx.api_version, services.now_ms()))


@handles(68, (0, 1))
def handle_consumer_group_heartbeat(services, ctx, request):
    return respond(services, services.groups.consumer_group_heartbeat(request, ctx.api_version, services.now_ms(),
                                                                  _client_id(ctx), ctx.client_host))


@handles(69, (0, 1))
def handle_consumer_group_describe(services, ctx, request):
    return services.groups.consumer_group_describe(request, ctx.api_version, services.now_ms())
