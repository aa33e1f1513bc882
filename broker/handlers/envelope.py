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

When no controller answers within the request timeout, or the controller refuses the envelope itself,
the client still gets an answer, each item failed with REQUEST_TIMED_OUT or UNKNOWN_SERVER_ERROR
(`forward_for_client`), as Kafka's ForwardingManager answers.

A request that reaches a controller that is not the active one on its controller listener (a node's own
request, such as a broker creating an internal topic, sent just as the lead moved) is answered
NOT_CONTROLLER at once, every item, as Kafka's ControllerApis answers it; the sender's forwarding
(broker/quorum.py) then tries the active controller. It used to be relayed to the controller this node
believed active, which held it, and every request queued behind it on that connection (one in flight
per connection), for up to the 30 s forwarding timeout whenever this node knew no leader, and then closed
the connection without an answer.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import TYPE_CHECKING, Any

import structlog

from odradek.purgatory.deferred import Deferred
from odradek.protocol.envelope import (
    PrincipalDeserializationError,
    address_host,
    decode_request_data,
    deserialize_principal,
    encode_response_data,
)
from odradek.protocol.errors import ErrorCode, RemoteProtocolError
from odradek.protocol.messages import RESPONSES, EnvelopeResponse
from odradek.metadata.acl import AclOperation

from ..authorizer import requires
from ..context import ConnectionContext, KafkaPrincipal, RequestContext
from ..node_client import NodeUnavailable
from ..quorum import ForwardingRefused
from . import _REGISTRY, BROKER, CONTROLLER, Answer, Handler, handles

if TYPE_CHECKING:
    from odradek.protocol.codec import Message
    from odradek.protocol.messages import EnvelopeRequest
    from ..services import BrokerServices

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


def forwarded(handler: Handler) -> Handler:
    """A handler decorator for forwardable admin requests, outermost after `@handles`: on a node that is not
    the active controller, the request goes to the controller in an envelope, before any check here (the
    controller authorizes the client); on the active controller the handler runs."""

    @functools.wraps(handler)
    def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Answer:
        if services.controller.is_active:
            return _lost_lead_answered(handler(services, ctx, request), ctx, request)
        if ctx.connection.scope == CONTROLLER:  # sent to this node as a controller: not the active one
            return error_response(ctx.api_key, ctx.api_version, request, ErrorCode.NOT_CONTROLLER,
                                  "This node is not the active controller.")
        return forward_for_client(services, ctx, request)

    return handle


def _lost_lead_answered(answer: Answer, ctx: RequestContext, request: Any) -> Answer:
    """A decision of this node's controller fails as a whole when the controller stops being the active one
    before its records commit (its quorum lost the majority, or another leader was elected): the client gets
    that error, NOT_CONTROLLER (retriable), on each item, as Kafka's controller answers, rather than a closed
    connection."""
    if not isinstance(answer, asyncio.Future):
        return answer
    pending = answer

    async def settled():
        from odradek.metadata.image import MetadataError

        try:
            return await pending
        except MetadataError as e:
            code = ErrorCode.for_code(e.error_code)
            log.info("a controller decision failed as a whole", api_key=ctx.api_key, error=code.name)
            return error_response(ctx.api_key, ctx.api_version, request, code, e.message)

    return settled()


async def forward_for_client(services: BrokerServices, ctx: RequestContext, request: Any) -> Message:
    """The active controller's answer to a client's request sent in an envelope; when there is none, an
    answer to the client all the same, as Kafka's ForwardingManager gives: REQUEST_TIMED_OUT when no
    controller answered in time, UNKNOWN_SERVER_ERROR when the controller refused the envelope itself
    (a misconfigured cluster: the client can do nothing about it, and must not take it for its own error)."""
    try:
        return await services.controller.forward(request, ctx.api_version, client=ctx)
    except ForwardingRefused as e:
        return error_response(ctx.api_key, ctx.api_version, request, ErrorCode.UNKNOWN_SERVER_ERROR, str(e))
    except NodeUnavailable as e:
        log.warning("no answer from the active controller to a forwarded request", api_key=ctx.api_key, error=str(e))
        return error_response(ctx.api_key, ctx.api_version, request, ErrorCode.REQUEST_TIMED_OUT, str(e))


def error_response(api_key: int, version: int, request, code: ErrorCode, message: str | None = None):
    """A forwardable request's response with every entry failed with `code` (Kafka's getErrorResponse): one
    result per item the client asked about, as clients expect (librdkafka asserts on a missing one)."""
    response = RESPONSES[api_key]()
    error = int(code)
    if api_key == 19:  # CreateTopics
        Result = type(response).CreatableTopicResult
        response.topics = [Result(name=t.name, error_code=error, error_message=message) for t in request.topics]
    elif api_key == 20:  # DeleteTopics: by name before v6, by name or id from v6
        Result = type(response).DeletableTopicResult
        response.responses = ([Result(name=t.name, topic_id=t.topic_id, error_code=error) for t in request.topics]
                              if version >= 6 else [Result(name=n, error_code=error) for n in request.topic_names])
    elif api_key == 30:  # CreateAcls
        Result = type(response).AclCreationResult
        response.results = [Result(error_code=error, error_message=message) for _ in request.creations]
    elif api_key == 31:  # DeleteAcls
        Result = type(response).DeleteAclsFilterResult
        response.filter_results = [Result(error_code=error, error_message=message, matching_acls=[]) for _ in request.filters]
    elif api_key in (33, 44):  # AlterConfigs, IncrementalAlterConfigs
        Result = type(response).AlterConfigsResourceResponse
        response.responses = [Result(error_code=error, error_message=message, resource_type=r.resource_type,
                                     resource_name=r.resource_name) for r in request.resources]
    elif api_key == 37:  # CreatePartitions
        Result = type(response).CreatePartitionsTopicResult
        response.results = [Result(name=t.name, error_code=error, error_message=message) for t in request.topics]
    elif api_key == 49:  # AlterClientQuotas
        Entry = type(response).EntryData
        response.entries = [Entry(error_code=error, error_message=message, entity=[
            Entry.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity])
            for entry in request.entries]
    elif api_key == 51:  # AlterUserScramCredentials: one result per user named
        Result = type(response).AlterUserScramCredentialsResult
        users = dict.fromkeys([d.name for d in request.deletions] + [u.name for u in request.upsertions])
        response.results = [Result(user=user, error_code=error, error_message=message) for user in users]
    elif api_key == 43:  # ElectLeaders: each partition named (none when all were asked), and from v1 the whole
        Result = type(response).ReplicaElectionResult
        response.replica_election_results = [Result(topic=t.topic, partition_result=[
            Result.PartitionResult(partition_id=p, error_code=error, error_message=message) for p in t.partitions])
            for t in request.topic_partitions or ()]
        if version >= 1:
            response.error_code = error
    else:  # Alter/ListPartitionReassignments, DescribeQuorum: a top-level error code
        response.error_code = error
        if hasattr(response, "error_message"):
            response.error_message = message
    return response


def _failed(code: ErrorCode) -> EnvelopeResponse:
    return EnvelopeResponse(throttle_time_ms=0, response_data=None, error_code=int(code))


@handles(ENVELOPE_KEY, listeners=(CONTROLLER,))
@requires(AclOperation.CLUSTER_ACTION)
def handle_envelope(services: BrokerServices, ctx: RequestContext, request: EnvelopeRequest) -> Answer:
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
