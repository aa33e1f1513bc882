"""The broker's authorizer: who may do what, from the ACLs in the published metadata image.

`services.authorizer` is None unless `authorizer.class.name` names StandardAuthorizer, so a handler's check
(`services.authorized(ctx, op, resource_type, name)`) costs one attribute test when authorization is off.
When on, decisions come from metadata.acl.AclIndex (StandardAuthorizer's rules), rebuilt when the image's
ACLs change (compared by identity: an image that did not touch ACLs shares the mapping), with each answer
remembered per (principal, host, operation, resource) until then, so the produce and fetch paths pay a
dict lookup per topic.

Requests on a controller listener come from other nodes: the brokers' and voters' own RPCs, and
brokers forwarding a client's admin request in an Envelope (KIP-590, broker/handlers/envelope.py). Kafka's
controller asks CLUSTER_ACTION of such a connection's principal; here a principal with CLUSTER_ACTION on
the cluster is trusted for the whole request, and one without is refused everything. The request inside
an envelope is served on a context of its own, with the client's principal and address, and authorized
as the client's.

The audit log: every decision is told to the logger `kafka.authorizer.logger` (AUDIT_LOGGER, the name
Kafka's authorizer logs under, so an operator routes it as in Kafka), denials at INFO and grants at DEBUG,
as Kafka's defaults (logIfDenied, and logIfAllowed only at DEBUG), in Kafka's words ("Principal =
User:alice is Denied operation = CREATE from host = 10.0.0.7 on resource = Topic:LITERAL:orders for
request = CreateTopics") with the same facts as fields. A grant costs one level check while DEBUG is off.
The bit fields of authorized operations (Metadata, DescribeCluster) probe every operation and are not
logged, as Kafka passes logIfAllowed and logIfDenied false for them; where Kafka passes logIfDenied false
(a probe whose refusal is no error: CREATE on the cluster before CREATE on the topic, the topics an
all-topics Metadata leaves out, ListGroups' filtering), only grants are logged (`log_denied=False`). Nothing secret is in a decision:
principals and resource names only.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import inspect
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import structlog

from odradek.protocol.connection import api_name
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import RESPONSES
from odradek.metadata.acl import CLUSTER_NAME, OPERATIONS_BY_TYPE, AclBinding, AclIndex, AclOperation, ResourceType
from odradek.metadata.publisher import MetadataPublisher

from .config import BrokerConfig
from .context import ConnectionContext, RequestContext

if TYPE_CHECKING:
    from .handlers import Answer, Handler
    from .services import BrokerServices

_MAX_REMEMBERED = 100_000

AUDIT_LOGGER = "kafka.authorizer.logger"
audit_log = structlog.get_logger(AUDIT_LOGGER)
_audit_level = logging.getLogger(AUDIT_LOGGER)

# Kafka's names of resource types in audit lines (SecurityUtils.resourceTypeName).
_RESOURCE_NAMES = {
    ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group", ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId", ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}


class Authorizer:
    __slots__ = ("metadata", "super_users", "allow_if_no_acl", "_acls", "_index", "_decisions")

    def __init__(self, config: BrokerConfig, metadata: MetadataPublisher) -> None:
        self.metadata = metadata
        self.super_users = frozenset(config.super_users)
        self.allow_if_no_acl = config.allow_everyone_if_no_acl_found
        self._acls: Mapping[uuid.UUID, AclBinding] | None = None  # the image's ACLs the index was built from
        self._index: AclIndex | None = None
        self._decisions: dict = {}

    @staticmethod
    def from_config(config: BrokerConfig, metadata: MetadataPublisher) -> Authorizer | None:
        return Authorizer(config, metadata) if config.authorizer_class_name else None

    def index(self) -> AclIndex:
        acls = self.metadata.image.acls
        if acls is not self._acls or self._index is None:
            self._index = AclIndex(acls, super_users=self.super_users, allow_everyone_if_no_acl_found=self.allow_if_no_acl)
            self._acls = acls
            self._decisions = {}
        return self._index

    def authorize(self, ctx: RequestContext | ConnectionContext, op: AclOperation, resource_type: ResourceType,
                  name: str, *, log_allowed: bool = True, log_denied: bool = True) -> bool:
        """Whether the principal may; the decision goes to the audit log unless told not to (Kafka's
        Action.logIfAllowed / logIfDenied: false for probes whose refusal is not an error, such as the
        topics an all-topics Metadata leaves out, or CREATE on the cluster before CREATE on a topic)."""
        connection = ctx if isinstance(ctx, ConnectionContext) else ctx.connection  # (fast produce: no request)
        if connection.scope == "controller" and not (resource_type == ResourceType.CLUSTER and op == AclOperation.CLUSTER_ACTION):
            return self.authorize(ctx, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME,
                                  log_allowed=log_allowed, log_denied=log_denied)
        index = self.index()
        key = (connection.principal, connection.client_host, op, resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            decision = index.authorize(str(connection.principal), connection.client_host, op, resource_type, name)
            if len(self._decisions) >= _MAX_REMEMBERED:
                self._decisions.clear()
            self._decisions[key] = decision
        if not decision:
            if log_denied:
                _audit(ctx, connection, decision, op, resource_type, name)
        elif log_allowed and _audit_level.isEnabledFor(logging.DEBUG):
            _audit(ctx, connection, decision, op, resource_type, name)
        return decision

    def authorize_by_resource_type(self, ctx: RequestContext | ConnectionContext, op: AclOperation,
                                   resource_type: ResourceType) -> bool:
        connection = ctx if isinstance(ctx, ConnectionContext) else ctx.connection
        return self.index().authorize_by_resource_type(str(connection.principal), connection.client_host, op, resource_type)

    def authorized_operations(self, ctx: RequestContext, resource_type: ResourceType, name: str = CLUSTER_NAME) -> int:
        """The bit field of operations the principal may do on the resource (Metadata's authorized operations)."""
        return sum(1 << op for op in OPERATIONS_BY_TYPE[resource_type]
                   if self.authorize(ctx, op, resource_type, name, log_allowed=False, log_denied=False))

    def authorized_names(self, ctx: RequestContext, op: AclOperation, resource_type: ResourceType,
                         names: Iterable[str], *, log_denied: bool = True) -> set[str]:
        return {name for name in set(names) if self.authorize(ctx, op, resource_type, name, log_denied=log_denied)}


def _audit(ctx, connection, allowed: bool, op: AclOperation, resource_type: ResourceType, name: str) -> None:
    """One decision in the audit log, as Kafka's StandardAuthorizer logs it (see the module doc)."""
    request = api_name(ctx.api_key) if type(ctx) is RequestContext else "Produce"  # the fast path serves Produce only
    resource = f"{_RESOURCE_NAMES.get(resource_type, resource_type.name)}:LITERAL:{name}"
    verdict = "Allowed" if allowed else "Denied"
    message = (f"Principal = {connection.principal} is {verdict} operation = {op.name} from host = "
               f"{connection.client_host} on resource = {resource} for request = {request}")
    (audit_log.debug if allowed else audit_log.info)(
        message, principal=str(connection.principal), host=connection.client_host, operation=op.name,
        resource=resource, request=request, allowed=allowed, listener=connection.listener,
    )


# -- requests authorized item by item (CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs ...)


def per_item(items_attr: str | Callable[[int], str], results_attr: str, refusal: Callable,
             denied_result: Callable) -> Callable[[Handler], Handler]:
    """A handler decorator for requests whose items are authorized one by one and answered positionally:
    `refusal(services, ctx, item)` is the error code refusing an item (None: allowed), `denied_result(item,
    code, version)` its entry in the response. The handler sees the request without the refused items
    (the controller decides only what the client may ask), and the refused items' results are put back
    in their places. Without an authorizer the handler is called as it is. A forwardable request reaches
    this check only on the active controller (`@forwarded` sends it there first, in an envelope, from
    any other broker), so its items are authorized once, for the client, where they are decided."""

    def decorate(handler: Handler) -> Handler:
        @functools.wraps(handler)
        def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Answer:
            if services.authorizer is None:
                return handler(services, ctx, request)
            attr = items_attr(ctx.api_version) if callable(items_attr) else items_attr
            items = getattr(request, attr)
            codes = [refusal(services, ctx, item) for item in items]
            if not any(codes):
                return handler(services, ctx, request)
            partial = copy.copy(request)
            setattr(partial, attr, [item for item, code in zip(items, codes) if code is None])

            def merge(response):
                answered = iter(getattr(response, results_attr))
                setattr(response, results_attr, [
                    next(answered) if code is None else denied_result(item, code, ctx.api_version)
                    for item, code in zip(items, codes)
                ])
                return response

            return then(handler(services, ctx, partial), merge)

        return handle

    return decorate


def then(result, fn):
    """`fn(result)` for a handler's answer given now, as a future, or as a coroutine."""
    if inspect.iscoroutine(result):
        async def chained():
            return fn(await result)

        return chained()
    if isinstance(result, asyncio.Future):
        out = asyncio.get_running_loop().create_future()

        def settle(f: asyncio.Future) -> None:
            if f.cancelled():
                out.cancel()
            elif (error := f.exception()) is not None:
                out.set_exception(error)
            else:
                try:
                    out.set_result(fn(f.result()))
                except Exception as e:  # noqa: BLE001 - the connection closes, as for any handler failure
                    out.set_exception(e)

        result.add_done_callback(settle)
        return out
    return fn(result)


def requires(op: AclOperation, resource_type: ResourceType = ResourceType.CLUSTER) -> Callable[[Handler], Handler]:
    """A handler decorator for requests authorized as a whole on the cluster (inter-broker and controller
    RPCs: CLUSTER_ACTION; admin requests: ALTER or DESCRIBE): refused with the response's top-level
    error_code CLUSTER_AUTHORIZATION_FAILED."""

    def decorate(handler: Handler) -> Handler:
        @functools.wraps(handler)
        def handle(services: BrokerServices, ctx: RequestContext, request: Any) -> Answer:
            if services.authorizer is None or services.authorizer.authorize(ctx, op, resource_type, CLUSTER_NAME):
                return handler(services, ctx, request)
            return RESPONSES[ctx.api_key](error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED))

        return handle

    return decorate


def producer_id_refusal(services, ctx, transactional_id: str | None) -> ErrorCode | None:
    """InitProducerId (and the transaction APIs' first check): WRITE on the transactional id, else for an
    idempotent producer IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679). None: allowed."""
    if services.authorizer is None:
        return None
    if transactional_id is not None:
        if services.authorizer.authorize(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            return None
        return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    if services.authorizer.authorize(ctx, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=False) or \
            services.authorizer.authorize_by_resource_type(ctx, AclOperation.WRITE, ResourceType.TOPIC):
        return None
    return ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def transaction_refusal(services, ctx, transactional_id: str) -> ErrorCode | None:
    """The transaction APIs' first check (AddPartitionsToTxn v0-3, AddOffsetsToTxn, EndTxn, TxnOffsetCommit):
    WRITE on the transactional id, else TRANSACTIONAL_ID_AUTHORIZATION_FAILED. After it, as Kafka:
    AddPartitionsToTxn needs WRITE on each topic (`services.authorized_names(ctx, WRITE, TOPIC, names)`,
    the others TOPIC_AUTHORIZATION_FAILED), AddOffsetsToTxn and TxnOffsetCommit READ on the group
    (GROUP_AUTHORIZATION_FAILED) and TxnOffsetCommit READ on each topic; AddPartitionsToTxn v4+ from a
    broker (verification) and WriteTxnMarkers need CLUSTER_ACTION (`@requires(AclOperation.CLUSTER_ACTION)`)."""
    if services.authorized(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id):
        return None
    return ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
