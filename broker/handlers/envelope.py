"""Envelope (58, KIP-590): a client's admin request forwarded to the active controller with its principal.

Theory of operation
-------------------
A broker that is not the active controller does not decide admin requests (CreateTopics, CreateAcls,
AlterClientQuotas, ...), nor does it authorize them: `@forwarded` hands the request, as the client sent
it, to `ClusterControllerChannel.forward` with the client's request context, which wraps it in an
EnvelopeRequest (the request's header and body, the client's principal serialized as Kafka's
DefaultKafkaPrincipalBuilder does, the client's address; protocol/envelope.py) and sends that to the
active controller's controller listener. The answer is the inner response, unwrapped, for the client.

The controller serves Envelope only on its controller listeners (a client listener does not know API 58:
a client sending it has its connection closed, as for any API a listener does not serve), and only to a
principal with CLUSTER_ACTION on the cluster, the forwarding broker's (Kafka's ControllerApis). It then
serves the inner request as if the client had sent it to the controller: a request context with the
client's principal and address, on a broker-scope connection (`scope` BROKER), so the handler's own
checks (`per_item`, `requires`, `services.authorized`) authorize the client and the audit log
(broker/authorizer.py) names the client. What the envelope itself may fail with, as Kafka answers:
NOT_CONTROLLER (this node no longer leads; the forwarding broker tries the new one), CLUSTER_AUTHORIZATION_FAILED
(the sender is no broker), PRINCIPAL_DESERIALIZATION_FAILURE, INVALID_REQUEST (an API that is not
forwardable, or bytes that do not decode), UNSUPPORTED_VERSION.

Requests a node makes itself on the controller listener (a broker creating an internal topic through a
controller that has just lost the lead) are relayed as they are when their sender has CLUSTER_ACTION, as
before: they speak for a node, not for a client.
"""

from __future__ import annotations

import asyncio
import functools
import inspect

import structlog

from odradek.coordinator.runtime import Deferred
from odradek.protocol.envelope import (
    PrincipalDeserializationError,
    address_host,
    decode_request_data,
    deserialize_principal,
    encode_response_data,
)
from odradek.protocol.errors import ErrorCode, RemoteProtocolError
from odradek.protocol.messages import EnvelopeResponse
from odradek.replication.acl import AclOperation, ResourceType

from ..authorizer import requires
from ..context import ConnectionContext, KafkaPrincipal, RequestContext
from . import _REGISTRY, BROKER, CONTROLLER, handles

log = structlog.get_logger("odradek.envelope")

ENVELOPE_KEY = 58

# Kafka's forwardable APIs (ApiKeys' `forwardable`) that Odradek serves.
FORWARDABLE = frozenset({
    19,  # CreateTopics
    20,  # DeleteTopics
    30,  # CreateAcls
    31,  # DeleteAcls
    33,  # AlterConfigs
    37,  # CreatePartitions
    43,  # ElectLeaders
    44,  # IncrementalAlterConfigs
    45,  # AlterPartitionReassignments
    46,  # ListPartitionReassignments
    49,  # AlterClientQuotas
    51,  # AlterUserScramCredentials
    55,  # DescribeQuorum
})


def forwarded(handler):
    """A handler decorator for forwardable admin requests, outermost after `@handles`: on a node that is not
    the active controller, the request goes to the controller in an envelope, before any check here (the
    controller authorizes the client); on the active controller the handler runs."""

    @functools.wraps(handler)
    def handle(services, ctx, request):
        if services.controller.is_active:
            return handler(services, ctx, request)
        if ctx.connection.scope == CONTROLLER and services.authorized(
                ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
            return services.controller.forward(request, ctx.api_version)  # a node's own request
        return services.controller.forward(request, ctx.api_version, client=ctx)

    return handle


def _failed(code: ErrorCode) -> EnvelopeResponse:
    return EnvelopeResponse(throttle_time_ms=0, response_data=None, error_code=int(code))


@handles(ENVELOPE_KEY, listeners=(CONTROLLER,))
@requires(AclOperation.CLUSTER_ACTION)
def handle_envelope(services, ctx, request):
    if not services.controller.is_active:
        return _failed(ErrorCode.NOT_CONTROLLER)
    try:
        principal_type, name, _token_authenticated = deserialize_principal(request.request_principal)
    except PrincipalDeserializationError as e:
        log.warning("envelope refused: its principal cannot be read", sender=str(ctx.principal), error=str(e))
        return _failed(ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE)
    try:
        client_host = address_host(request.client_host_address)
        header, inner = decode_request_data(request.request_data)
    except RemoteProtocolError as e:
        log.warning("envelope refused: its request cannot be read", sender=str(ctx.principal), error=str(e))
        return _failed(ErrorCode.INVALID_REQUEST)
    registration = _REGISTRY[CONTROLLER].get(header.api_key)
    if header.api_key not in FORWARDABLE or registration is None:
        log.warning("envelope refused: api is not forwardable", sender=str(ctx.principal), api_key=header.api_key)
        return _failed(ErrorCode.INVALID_REQUEST)
    if not registration.min_version <= header.api_version <= registration.max_version:
        return _failed(ErrorCode.UNSUPPORTED_VERSION)
    client = ConnectionContext(
        ctx.connection_id, client_host, ctx.listener, ctx.security_protocol,
        principal=KafkaPrincipal(principal_type, name), scope=BROKER,
    )
    inner_ctx = RequestContext(header, inner, client, ctx.received_ns, len(request.request_data))
    result = registration.handler(services, inner_ctx, inner)

    def wrap(response) -> EnvelopeResponse:
        return EnvelopeResponse(throttle_time_ms=0, response_data=encode_response_data(header, response), error_code=0)

    if isinstance(result, Deferred):
        result = services.future_from(result)
    if inspect.iscoroutine(result) or isinstance(result, asyncio.Future):
        async def answered() -> EnvelopeResponse:
            return wrap(await result)

        return answered()
    return wrap(result)
