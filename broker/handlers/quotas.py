"""DescribeClientQuotas (48) and AlterClientQuotas (49).

Quotas live in the cluster metadata log (ClientQuotaRecord), so AlterClientQuotas is a controller decision
(forwarded whole to the active controller by any other node, in an Envelope: the controller checks
ALTER_CONFIGS on the cluster for the client); DescribeClientQuotas answers from this broker's image (DESCRIBE_CONFIGS on the cluster),
filtered as Kafka's ClientQuotasImage.describe filters: each component names an entity type and matches
an exact name, the default (null name) or any specified name; `strict` also refuses entities of other types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import AlterClientQuotasResponse, DescribeClientQuotasResponse
from odradek.metadata.acl import AclOperation, ResourceType
from odradek.metadata.image import MetadataError
from odradek.metadata.quota import CLIENT_ID, IP, USER

from . import BROKER, CONTROLLER, Answer, handles
from .envelope import forwarded

if TYPE_CHECKING:
    from odradek.protocol.messages import AlterClientQuotasRequest, DescribeClientQuotasRequest
    from ..context import RequestContext
    from ..services import BrokerServices

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
AlterEntry = AlterClientQuotasResponse.EntryData
DescribeEntry = DescribeClientQuotasResponse.EntryData


@handles(49, (0, 1), listeners=(BROKER, CONTROLLER))
@forwarded
def handle_alter_client_quotas(services: BrokerServices, ctx: RequestContext,
                               request: AlterClientQuotasRequest) -> Answer:
    def entity_of(entry) -> list:
        return [AlterEntry.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity]

    if not services.authorized(ctx, AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER):
        return AlterClientQuotasResponse(throttle_time_ms=0, entries=[
            AlterEntry(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), error_message=None, entity=entity_of(e))
            for e in request.entries])
    items = [([(e.entity_type, e.entity_name) for e in entry.entity], [(op.key, op.value, op.remove) for op in entry.ops])
             for entry in request.entries]

    def answer(outcomes: list) -> AlterClientQuotasResponse:
        entries = []
        for entry, outcome in zip(request.entries, outcomes):
            failed = isinstance(outcome, MetadataError)
            entries.append(AlterEntry(
                error_code=int(outcome.error_code) if failed else 0, error_message=outcome.message if failed else None,
                entity=entity_of(entry)))
        return AlterClientQuotasResponse(throttle_time_ms=0, entries=entries)

    return services.answer(services.controller.alter_client_quotas(items, validate_only=request.validate_only), answer)


def _component_error(components) -> str | None:
    types = [c.entity_type for c in components]
    if len(set(types)) != len(types):
        return "Entity type specified more than once in the request"
    for c in components:
        if c.entity_type not in (USER, CLIENT_ID, IP):
            return f"Custom entity type {c.entity_type!r} not supported"
        if c.match_type == MATCH_EXACT and c.match is None:
            return f"Request specified MATCH_TYPE_EXACT, but set match string to null for {c.entity_type}"
        if c.match_type in (MATCH_DEFAULT, MATCH_SPECIFIED) and c.match is not None:
            return f"Request specified match type {c.match_type}, but set match string to non-null for {c.entity_type}"
        if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED):
            return f"Unknown match type {c.match_type}"
    if IP in types and len(types) > 1:
        return "Invalid entity filter component combination, IP filter component should not be used with user or clientId filter component."
    return None


def _matches(entity: dict, components, strict: bool) -> bool:
    for c in components:
        if c.entity_type not in entity:
            return False
        name = entity[c.entity_type]
        if c.match_type == MATCH_EXACT and name != c.match:
            return False
        if c.match_type == MATCH_DEFAULT and name is not None:
            return False
        if c.match_type == MATCH_SPECIFIED and name is None:
            return False
    return not strict or len(entity) == len(components)


@handles(48, (0, 1))
def handle_describe_client_quotas(services: BrokerServices, ctx: RequestContext,
                                  request: DescribeClientQuotasRequest) -> Answer:
    def failed(code: ErrorCode, message: str | None) -> DescribeClientQuotasResponse:
        return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=int(code), error_message=message, entries=None)

    if not services.authorized(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER):
        return failed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    error = _component_error(request.components)
    if error is not None:
        return failed(ErrorCode.INVALID_REQUEST, error)
    entries = []
    for entity, values in services.image.client_quotas.items():
        if _matches(dict(entity), request.components, request.strict):
            entries.append(DescribeEntry(
                entity=[DescribeEntry.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                values=[DescribeEntry.ValueData(key=k, value=v) for k, v in sorted(values.items())],
            ))
    return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=0, error_message=None, entries=entries)
