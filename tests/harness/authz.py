"""Requests sent as a given principal to a broker with the StandardAuthorizer, and the ACL creations they need."""

from __future__ import annotations

import asyncio
import itertools
from odradek.broker.context import ConnectionContext, KafkaPrincipal, Packed, RequestContext
from odradek.protocol.codec import FileRegion, decode
from odradek.protocol.headers import RequestHeader, is_flexible_version
from odradek.protocol.messages import REQUESTS, RESPONSES
from odradek.storage.segment import read_region


AUTHZ = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "super.users": "User:admin"}


_correlation = itertools.count(1)


async def call(broker, principal: str, api_key: int, version: int, request, scope: str = "broker"):
    connection = ConnectionContext("test", "10.0.0.5", "PLAINTEXT", principal=KafkaPrincipal(*principal.split(":")),
                                   scope=scope)
    ctx = RequestContext(RequestHeader(api_key, version, next(_correlation), "test"), request, connection, 0, 100)
    result = broker.dispatch(ctx)
    if isinstance(result, asyncio.Future):
        result = await result
    if isinstance(result, Packed):  # a frame packed by its handler (Fetch): size, correlation id, body
        frame = b"".join(read_region(c) if isinstance(c, FileRegion) else bytes(c) for c in result.chunks)
        assert not is_flexible_version(api_key, version)
        result = decode(RESPONSES[api_key], frame, version, 8)
    return result


def creation(rtype: int, name: str, pattern: int, op: int):
    return REQUESTS[30].AclCreation(resource_type=rtype, resource_name=name, resource_pattern_type=pattern,
                                    principal="User:alice", host="*", operation=op, permission_type=3)
