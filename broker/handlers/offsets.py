"""Committed offsets, handed to the group coordinator (`broker.groups`): OffsetCommit (8), OffsetFetch (9),
OffsetDelete (47). A commit's response waits until its records are durable.
"""

from __future__ import annotations

from . import handles
from .groups import respond


@handles(8, (2, 9))
def handle_offset_commit(broker, ctx, request):
    return respond(broker, broker.groups.offset_commit(request, ctx.api_version, broker.now_ms()))


@handles(9, (1, 9))
def handle_offset_fetch(broker, ctx, request):
    return broker.groups.offset_fetch(request, ctx.api_version, broker.now_ms())


@handles(47, (0, 0))
def handle_offset_delete(broker, ctx, request):
    return respond(broker, broker.groups.offset_delete(request, ctx.api_version, broker.now_ms()))
