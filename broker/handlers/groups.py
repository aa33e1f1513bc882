"""Group coordination APIs, handed to the group coordinator (`broker.groups`, coordinator/group/group_coordinator.py).

FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13), SyncGroup (14), DescribeGroups (15),
ListGroups (16), DeleteGroups (42), ConsumerGroupHeartbeat (68), ConsumerGroupDescribe (69).
JoinGroup and SyncGroup are long polls: their response is a future completed by the rebalance.
"""

from __future__ import annotations

from odradek.coordinator.runtime import Deferred

from . import handles


def respond(broker, result):
    """A coordinator result as a handler result: the message, or a future while it is still pending."""
    if not isinstance(result, Deferred):
        return result
    if result.done:
        return result.result()
    return broker.future_from(result)


def _locate(broker):
    """Who leads an internal topic's partition: this broker, the only one (a cluster asks its metadata)."""
    host, port = broker.advertised_endpoint
    return lambda topic, partition: (broker.node_id, host, port)


def _client_id(ctx) -> str:
    return ctx.header.client_id or ""


@handles(10, (0, 6))
def handle_find_coordinator(broker, ctx, request):
    return broker.groups.find_coordinator(request, ctx.api_version, _locate(broker))


@handles(11, (0, 9))
def handle_join_group(broker, ctx, request):
    return respond(broker, broker.groups.join_group(request, ctx.api_version, broker.now_ms(), _client_id(ctx),
                                                    ctx.client_host))


@handles(12, (0, 4))
def handle_heartbeat(broker, ctx, request):
    return respond(broker, broker.groups.heartbeat(request, ctx.api_version, broker.now_ms()))


@handles(13, (0, 5))
def handle_leave_group(broker, ctx, request):
    return respond(broker, broker.groups.leave_group(request, ctx.api_version, broker.now_ms()))


@handles(14, (0, 5))
def handle_sync_group(broker, ctx, request):
    return respond(broker, broker.groups.sync_group(request, ctx.api_version, broker.now_ms()))


@handles(15, (0, 6))
def handle_describe_groups(broker, ctx, request):
    return broker.groups.describe_groups(request, ctx.api_version, broker.now_ms())


@handles(16, (0, 5))
def handle_list_groups(broker, ctx, request):
    return broker.groups.list_groups(request, ctx.api_version, broker.now_ms())


@handles(42, (0, 2))
def handle_delete_groups(broker, ctx, request):
    return respond(broker, broker.groups.delete_groups(request, ctx.api_version, broker.now_ms()))


@handles(68, (0, 1))
def handle_consumer_group_heartbeat(broker, ctx, request):
    return respond(broker, broker.groups.consumer_group_heartbeat(request, ctx.api_version, broker.now_ms(),
                                                                  _client_id(ctx), ctx.client_host))


@handles(69, (0, 1))
def handle_consumer_group_describe(broker, ctx, request):
    return broker.groups.consumer_group_describe(request, ctx.api_version, broker.now_ms())
