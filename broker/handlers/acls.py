"""DescribeAcls (29), CreateAcls (30) and DeleteAcls (31).

ACLs live in the cluster metadata log, so CreateAcls and DeleteAcls are controller decisions (forwarded
whole to the active controller by any other node in an Envelope, KIP-590: the controller checks ALTER on
the cluster for the client); DescribeAcls answers from this broker's image (DESCRIBE on the cluster). Without
an authorizer every entry answers SECURITY_DISABLED, as Kafka's brokers do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import CreateAclsResponse, DeleteAclsResponse, DescribeAclsResponse
from odradek.metadata.acl import (
    AclBinding,
    AclError,
    AclFilter,
    AclIndex,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from odradek.metadata.image import MetadataError

from . import BROKER, CONTROLLER, Answer, handles
from .envelope import forwarded

if TYPE_CHECKING:
    from odradek.protocol.messages import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest
    from ..context import RequestContext
    from ..services import BrokerServices

NO_AUTHORIZER = "No Authorizer is configured."
Creation = CreateAclsResponse.AclCreationResult
FilterResult = DeleteAclsResponse.DeleteAclsFilterResult
Matching = FilterResult.DeleteAclsMatchingAcl
DescribedResource: TypeAlias = DescribeAclsResponse.DescribeAclsResource


def _enum(cls, value: int):
    try:
        return cls(value)
    except ValueError:
        return cls(0)  # UNKNOWN: refused by validation


def _filter(f) -> AclFilter:
    return AclFilter(
        _enum(ResourceType, f.resource_type_filter), f.resource_name_filter, _enum(PatternType, f.pattern_type_filter),
        f.principal_filter, f.host_filter, _enum(AclOperation, f.operation), _enum(AclPermissionType, f.permission_type),
    )


@handles(30, (1, 3), listeners=(BROKER, CONTROLLER))
@forwarded
def handle_create_acls(services: BrokerServices, ctx: RequestContext, request: CreateAclsRequest) -> Answer:
    def all_failed(code: ErrorCode, message: str | None) -> CreateAclsResponse:
        return CreateAclsResponse(throttle_time_ms=0, results=[
            Creation(error_code=int(code), error_message=message) for _ in request.creations])

    if not services.authorized(ctx, AclOperation.ALTER, ResourceType.CLUSTER):
        return all_failed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    if services.authorizer is None:
        return all_failed(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    bindings = [
        AclBinding(
            _enum(ResourceType, c.resource_type), c.resource_name, _enum(PatternType, c.resource_pattern_type),
            c.principal, c.host, _enum(AclOperation, c.operation), _enum(AclPermissionType, c.permission_type),
        )
        for c in request.creations
    ]

    def answer(outcomes: list) -> CreateAclsResponse:
        results = []
        for outcome in outcomes:
            if isinstance(outcome, MetadataError):
                results.append(Creation(error_code=int(outcome.error_code), error_message=outcome.message))
            else:
                results.append(Creation(error_code=0, error_message=None))
        return CreateAclsResponse(throttle_time_ms=0, results=results)

    return services.answer(services.controller.create_acls(bindings), answer)


@handles(31, (1, 3), listeners=(BROKER, CONTROLLER))
@forwarded
def handle_delete_acls(services: BrokerServices, ctx: RequestContext, request: DeleteAclsRequest) -> Answer:
    def all_failed(code: ErrorCode, message: str | None) -> DeleteAclsResponse:
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=[
            FilterResult(error_code=int(code), error_message=message, matching_acls=[]) for _ in request.filters])

    if not services.authorized(ctx, AclOperation.ALTER, ResourceType.CLUSTER):
        return all_failed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    if services.authorizer is None:
        return all_failed(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)

    def answer(outcomes: list) -> DeleteAclsResponse:
        results = []
        for outcome in outcomes:
            if isinstance(outcome, MetadataError):
                results.append(FilterResult(error_code=int(outcome.error_code), error_message=outcome.message, matching_acls=[]))
                continue
            results.append(FilterResult(error_code=0, error_message=None, matching_acls=[
                Matching(
                    error_code=0, error_message=None, resource_type=b.resource_type, resource_name=b.resource_name,
                    pattern_type=b.pattern_type, principal=b.principal, host=b.host, operation=b.operation,
                    permission_type=b.permission_type,
                )
                for b in outcome
            ]))
        return DeleteAclsResponse(throttle_time_ms=0, filter_results=results)

    return services.answer(services.controller.delete_acls([_filter(f) for f in request.filters]), answer)


@handles(29, (1, 3))
def handle_describe_acls(services: BrokerServices, ctx: RequestContext, request: DescribeAclsRequest) -> Answer:
    def failed(code: ErrorCode, message: str | None) -> DescribeAclsResponse:
        return DescribeAclsResponse(throttle_time_ms=0, error_code=int(code), error_message=message, resources=[])

    if not services.authorized(ctx, AclOperation.DESCRIBE, ResourceType.CLUSTER):
        return failed(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    if services.authorizer is None:
        return failed(ErrorCode.SECURITY_DISABLED, NO_AUTHORIZER)
    acl_filter = _filter(request)
    try:
        acl_filter.validate()
    except AclError as e:
        return failed(ErrorCode.INVALID_REQUEST, str(e))
    resources: dict[tuple, DescribedResource] = {}
    for _, b in AclIndex(services.image.acls).matching(acl_filter):
        key = (b.resource_type, b.resource_name, b.pattern_type)
        resource = resources.get(key)
        if resource is None:
            resource = resources[key] = DescribedResource(
                resource_type=b.resource_type, resource_name=b.resource_name, pattern_type=b.pattern_type, acls=[])
        resource.acls.append(DescribedResource.AclDescription(
            principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission_type))
    return DescribeAclsResponse(throttle_time_ms=0, error_code=0, error_message=None, resources=list(resources.values()))
