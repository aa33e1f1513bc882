"""Committed offsets, handed to the group coordinator (`services.groups`): OffsetCommit (8), OffsetFetch (9),
OffsetDelete (47). A commit's response waits until its records are durable.
"""

from __future__ import annotations

from . import handles
from .groups import respond


@handles(8, (2, 9))
def handle_offset_commit(services, ctx, request):
    return respond(services, services.groups.offset_commit(request, ctx.api_version, services.now_ms()))


@handles(9, (1, 9))
def handle_offset_fetch(services, ctx, request):
    return services.groups.offset_fetch(request, ctx.api_version, services.now_ms())


@handles(47, (0, 0))
def handle_offset_delete(services, ctx, request):
    return respond(services, services.groups.offset_delete(request, ctx.api_version, services.now_ms()))
