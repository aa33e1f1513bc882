"""DescribeConfigs (32), AlterConfigs (33) and IncrementalAlterConfigs (44).

Topic configs are described with their effective value and its source (topic override, broker
property, default), synonyms and documentation on request. AlterConfigs replaces a topic's overrides
wholesale; IncrementalAlterConfigs sets, deletes, appends to or subtracts from single keys (append and
subtract only for list-typed configs). Broker resources (a node id, or "" for the cluster-wide defaults)
hold the dynamic broker configs (broker/dynamic_config.py): described by the node named (its effective
config, each value's source and synonyms) or by any broker for "" (the cluster-wide defaults alone, as
Kafka answers), and altered like a topic's configs, through the controller, which refuses a key Odradek
cannot change at run time or a value the start-up would refuse. A node accepts an alter for any node's id:
the controller decides, as Kafka's controller does (Kafka's broker also refuses a name that is not its own,
a check that matters only to a client that misroutes; admin clients send a node's resource to that node).
BROKER_LOGGER resources (kafka-configs.sh --entity-type broker-loggers) name this node's id: described as
every logger and its level, and changed by IncrementalAlterConfigs SET / DELETE on the node itself, not
forwarded to the controller (Kafka's RuntimeLoggerManager), which is how an operator turns the audit log
(`kafka.authorizer.logger`) to DEBUG at run time; `log.levels` sets the same at start.
GROUP resources (kafka-configs.sh --entity-type groups) hold a group's share.* configs: described with
their defaults, and changed by IncrementalAlterConfigs SET / DELETE (broker/group_configs.py).
Every requested resource gets exactly one result, in request order.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any, TypeAlias

from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.protocol.messages import AlterConfigsResponse, DescribeConfigsResponse, IncrementalAlterConfigsResponse
from odradek.metadata.image import MetadataError, validate_topic_name

from odradek.metadata.acl import AclOperation, ResourceType

from ..authorizer import per_item
from ..config import ConfigError, ConfigType, broker_default, render_value
from ..logging import LOG4J_LEVELS, ROOT_LOGGER, get_logger, logger_exists, logger_levels, set_logger_level
from ..controller_channel import ConfigChange
from ..topic_config import (
    TOPIC_CONFIGS,
    ConfigEntry,
    ConfigResourceType,
    ConfigSource,
    describe_broker,
    describe_broker_defaults,
    describe_topic,
)
from ..dynamic_config import config_type
from ..group_configs import GroupConfigError, describe_group, group_config_changes
from . import BROKER as BROKER_LISTENERS
from . import CONTROLLER as CONTROLLER_LISTENERS
from . import Answer, handles
from .envelope import forwarded

if TYPE_CHECKING:
    from odradek.protocol.messages import AlterConfigsRequest, DescribeConfigsRequest, IncrementalAlterConfigsRequest
    from ..context import RequestContext
    from ..services import BrokerServices

log = get_logger(__name__)

DResult = DescribeConfigsResponse.DescribeConfigsResult
DEntry: TypeAlias = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult
DSynonym = DEntry.DescribeConfigsSynonym
AResult = AlterConfigsResponse.AlterConfigsResourceResponse
IResult = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse

TOPIC, BROKER = int(ConfigResourceType.TOPIC), int(ConfigResourceType.BROKER)
BROKER_LOGGER = int(ConfigResourceType.BROKER_LOGGER)
GROUP = int(ConfigResourceType.GROUP)
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


class ResourceError(KafkaApiError):
    """One config resource refused (its result carries the code and message; the others go on)."""

    def __init__(self, error_code: int, message: str):
        super().__init__(message)
        self.error_code = int(error_code)
        self.message = message


def check_broker_name(services: BrokerServices, name: str) -> None:
    """A BROKER resource names this node ("1") or the cluster-wide defaults ("")."""
    if name == "":
        return
    if not (name.isascii() and name.isdigit()):
        raise ResourceError(ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}")
    if int(name) != services.node_id:
        raise ResourceError(
            ErrorCode.INVALID_REQUEST,
            f"Unexpected broker id, expected {services.node_id} or empty string, but received {name}",
        )


def _unsupported_type(resource_type: int) -> ResourceError:
    try:
        shown = ConfigResourceType(resource_type).name
    except ValueError:
        shown = str(resource_type)
    return ResourceError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {shown}")


def _duplicates(items) -> set:
    return {item for item, n in Counter(items).items() if n > 1}


# ---- DescribeConfigs


def _describe_entries(services: BrokerServices, resource_type: int, name: str, keys):
    if resource_type == TOPIC:
        try:
            validate_topic_name(name)
        except MetadataError as e:
            raise ResourceError(e.error_code, e.message) from None
        if services.topic_by_name(name) is None:
            raise ResourceError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")
        try:
            image = services.metadata.image
            return describe_topic(image.topic_configs(name), services.dynamic_config.layers(image), keys)
        except ConfigError as e:
            raise ResourceError(ErrorCode.INVALID_CONFIG, str(e)) from None
    if resource_type == BROKER:
        check_broker_name(services, name)
        layers = services.dynamic_config.layers(services.metadata.image)
        if name == "":
            return describe_broker_defaults(layers, keys)  # the dynamic cluster-wide defaults, as Kafka answers
        return describe_broker(layers, keys)
    if resource_type == GROUP:
        return describe_group(services.metadata.image, services.config, name, keys)
    if resource_type == BROKER_LOGGER:
        _check_logger_resource(services, name)
        wanted = None if not keys else set(keys)
        return [ConfigEntry(logger, level, False, ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG, False, ConfigType.STRING, "")
                for logger, level in logger_levels().items() if wanted is None or logger in wanted]
    raise _unsupported_type(resource_type)


def _check_logger_resource(services: BrokerServices, name: str) -> None:
    """A BROKER_LOGGER resource names this node, and only it (ConfigHelper, RuntimeLoggerManager)."""
    if not name:
        raise ResourceError(ErrorCode.INVALID_REQUEST, "Broker id must not be empty")
    if not (name.isascii() and name.isdigit()):
        raise ResourceError(ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}")
    if int(name) != services.node_id:
        raise ResourceError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {services.node_id} but received {name}")


def describe_entry(entry, *, include_synonyms: bool, include_documentation: bool, version: int) -> DEntry:
    sensitive = entry.is_sensitive or entry.type == ConfigType.PASSWORD
    result = DEntry(
        name=entry.name,
        value=None if sensitive else entry.value,
        read_only=entry.read_only,
        config_source=int(entry.source),
        is_sensitive=sensitive,
        synonyms=[
            DSynonym(name=s.name, value=None if sensitive else s.value, source=int(s.source)) for s in entry.synonyms
        ] if include_synonyms else [],
    )
    if version >= 3:
        result.config_type = int(entry.type)
        result.documentation = entry.documentation if include_documentation else None
    return result


# -- authorization (Kafka's KafkaApis: DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, the cluster for a
# broker or logger, the group)

_AUTHZ = {
    TOPIC: (ResourceType.TOPIC, ErrorCode.TOPIC_AUTHORIZATION_FAILED),
    BROKER: (ResourceType.CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    int(ConfigResourceType.BROKER_LOGGER): (ResourceType.CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
    int(ConfigResourceType.GROUP): (ResourceType.GROUP, ErrorCode.GROUP_AUTHORIZATION_FAILED),
}


def _refusal(op: AclOperation):
    def refusal(services, ctx, r) -> ErrorCode | None:
        found = _AUTHZ.get(r.resource_type)
        if found is None:  # an unknown type: the handler refuses it
            return None
        resource_type, code = found
        name = r.resource_name if resource_type != ResourceType.CLUSTER else "kafka-cluster"
        return None if services.authorized(ctx, op, resource_type, name) else code
    return refusal


def _denied(result_cls):
    def denied(r, code: ErrorCode, version: int):
        return result_cls(error_code=int(code), error_message=None, resource_type=r.resource_type,
                          resource_name=r.resource_name, **({"configs": []} if result_cls is DResult else {}))
    return denied


@handles(32, (1, 4))
@per_item("resources", "results", _refusal(AclOperation.DESCRIBE_CONFIGS), _denied(DResult))
def handle_describe_configs(services: BrokerServices, ctx: RequestContext, request: DescribeConfigsRequest) -> Answer:
    version = ctx.api_version
    include_documentation = version >= 3 and request.include_documentation
    results = []
    for r in request.resources:
        result = DResult(
            error_code=0, error_message=None, resource_type=r.resource_type, resource_name=r.resource_name, configs=[]
        )
        try:
            entries = _describe_entries(services, r.resource_type, r.resource_name, r.configuration_keys)
        except ResourceError as e:
            result.error_code, result.error_message = e.error_code, e.message
        else:
            result.configs = [
                describe_entry(
                    e, include_synonyms=request.include_synonyms, include_documentation=include_documentation,
                    version=version,
                )
                for e in entries
            ]
        results.append(result)
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


# ---- shared by both alters


def _check_topic(services: BrokerServices, name: str) -> None:
    if services.topic_by_name(name) is None:
        raise ResourceError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{name}' does not exist.")


def _check_unique_keys(names) -> None:
    repeated = _duplicates(names)
    if repeated:
        shown = ", ".join(sorted(repeated))
        raise ResourceError(ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {shown}")


def _check_broker_id(name: str) -> None:
    """An alter's BROKER resource names a node ("1") or the cluster-wide defaults ("")."""
    if name and not (name.isascii() and name.isdigit()):
        raise ResourceError(ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}")


def _broker_configs(services: BrokerServices, name: str):
    """The dynamic configs of the BROKER resource `name` as the image holds them."""
    return services.metadata.image.configs.get((BROKER, name), {})


def _alter_all(services: BrokerServices, resources, validate_only: bool, change_of, result_cls):
    """One result per resource: `change_of(r)` gives the resource's ConfigChange (or raises ResourceError);
    every change goes to the controller in one call, answered once committed."""
    repeated = _duplicates((r.resource_type, r.resource_name) for r in resources)
    results = []
    changes: list[ConfigChange] = []
    pending: list[tuple[Any, int]] = []  # (a result entry of the response, its change's index)
    for r in resources:
        result = result_cls(
            error_code=0, error_message=None, resource_type=r.resource_type, resource_name=r.resource_name
        )
        try:
            if (r.resource_type, r.resource_name) in repeated:
                raise ResourceError(ErrorCode.INVALID_REQUEST, "Duplicate resource.")
            change = change_of(r)
        except ResourceError as e:
            result.error_code, result.error_message = e.error_code, e.message
        else:
            if change is not None:
                pending.append((result, len(changes)))
                changes.append(change)
        results.append(result)

    def answer(outcomes: list) -> list:
        for result, index in pending:
            outcome = outcomes[index]
            if isinstance(outcome, MetadataError):
                result.error_code, result.error_message = int(outcome.error_code), outcome.message
        return results

    return services.controller.alter_configs(changes, validate_only=validate_only), answer


# ---- AlterConfigs: the given set replaces the resource's dynamic configs


@handles(33, (0, 2), listeners=(BROKER_LISTENERS, CONTROLLER_LISTENERS))
@forwarded
@per_item("resources", "responses", _refusal(AclOperation.ALTER_CONFIGS), _denied(AResult))
def handle_alter_configs(services: BrokerServices, ctx: RequestContext, request: AlterConfigsRequest) -> Answer:
    def change_of(r) -> ConfigChange | None:
        keys = [c.name for c in r.configs]
        if r.resource_type == TOPIC:
            _check_unique_keys(keys)
            _check_topic(services, r.resource_name)
            wanted = {c.name: c.value for c in r.configs if c.value is not None}
            current = services.metadata.image.topic_configs(r.resource_name)
            changes = {key: None for key in current if key not in wanted}
            changes.update(wanted)
            return ConfigChange(TOPIC, r.resource_name, changes)
        if r.resource_type == BROKER:
            _check_unique_keys(keys)
            _check_broker_id(r.resource_name)
            for c in r.configs:
                if c.value is None:
                    raise ResourceError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {c.name}")
            wanted = {c.name: c.value for c in r.configs}
            changes = {key: None for key in _broker_configs(services, r.resource_name) if key not in wanted}
            changes.update(wanted)
            return ConfigChange(BROKER, r.resource_name, changes)
        raise _unsupported_type(r.resource_type)

    altered, answer = _alter_all(services, request.resources, request.validate_only, change_of, AResult)
    return services.answer(altered, lambda outcomes: AlterConfigsResponse(throttle_time_ms=0, responses=answer(outcomes)))


# ---- IncrementalAlterConfigs


def _list_items(value) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [item.strip() for item in str(value).split(",") if item.strip()]


def incremental_changes(current, ops, broker_config, *, broker: bool = False) -> dict[str, str | None]:
    """The topic override changes `ops` ((name, operation, value) triples) make to `current` (the topic's
    overrides as stored). Raises ResourceError.

    APPEND and SUBTRACT work as KRaft's ConfigurationControlManager.incrementalAlterConfigResource: they
    start from the override, else the topic config's own default (getParts: KafkaConfigSchema.getDefault,
    not the broker's log.* value); APPEND adds each item not yet there, SUBTRACT removes each; the result is
    joined with commas, and may be empty ("" for cleanup.policy: neither delete nor compact, which Kafka
    accepts and describes as the empty string from DYNAMIC_TOPIC_CONFIG). With `broker`, `current` is a
    BROKER resource's dynamic configs and the list-typed keys are broker properties (their default the
    broker property's)."""
    changes: dict[str, str | None] = {}
    for key, op, value in ops:
        if op not in OP_NAMES:
            raise ResourceError(ErrorCode.INVALID_REQUEST, f"Unknown alter config operation {op} for config key: {key}")
        if op != DELETE and value is None:
            raise ResourceError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {key}")
        if op == SET:
            changes[key] = value
        elif op == DELETE:
            changes[key] = None
        else:
            if broker:
                ktype = config_type(key)
                if ktype is None:
                    raise ResourceError(ErrorCode.INVALID_CONFIG, f"Unknown config name: {key}")
                default = broker_default(key)
            else:
                definition = TOPIC_CONFIGS.get(key)
                if definition is None:
                    raise ResourceError(ErrorCode.INVALID_CONFIG, f"Unknown topic config name: {key}")
                ktype, default = definition.type, render_value(definition.default)
            if ktype != ConfigType.LIST:
                raise ResourceError(
                    ErrorCode.INVALID_CONFIG, f"Can't {OP_NAMES[op]} to key {key} because its type is not LIST."
                )
            base = current.get(key)
            items = _list_items(base if base is not None else default)
            for item in _list_items(value):
                if op == APPEND and item not in items:
                    items.append(item)
                elif op == SUBTRACT:
                    items = [i for i in items if i != item]
            changes[key] = ",".join(items)
    return changes


@handles(44, (0, 1), listeners=(BROKER_LISTENERS, CONTROLLER_LISTENERS))
def handle_incremental_alter_configs(services: BrokerServices, ctx: RequestContext,
                                     request: IncrementalAlterConfigsRequest) -> Answer:
    """A request of BROKER_LOGGER resources only (what Kafka's admin client sends to the node named) is this
    node's to answer; any other goes to the active controller."""
    if request.resources and all(r.resource_type == BROKER_LOGGER for r in request.resources):
        return _alter_loggers(services, ctx, request)
    return _incremental_alter_configs(services, ctx, request)


@per_item("resources", "responses", _refusal(AclOperation.ALTER_CONFIGS), _denied(IResult))
def _alter_loggers(services: BrokerServices, ctx: RequestContext, request: IncrementalAlterConfigsRequest) -> Answer:
    """Kafka's RuntimeLoggerManager: every change of a resource is checked before any is made; SET takes one
    of LogLevelConfig's levels, DELETE unsets (not the root logger's), APPEND and SUBTRACT are refused."""
    repeated = _duplicates(r.resource_name for r in request.resources)
    results = []
    for r in request.resources:
        result = IResult(error_code=0, error_message=None, resource_type=r.resource_type, resource_name=r.resource_name)
        try:
            if r.resource_name in repeated:
                raise ResourceError(ErrorCode.INVALID_REQUEST, "Each resource must appear at most once.")
            _check_unique_keys([c.name for c in r.configs])
            _check_logger_resource(services, r.resource_name)
            for c in r.configs:
                _check_logger_change(c.name, c.config_operation, c.value)
        except ResourceError as e:
            result.error_code, result.error_message = e.error_code, e.message
        else:
            if not request.validate_only:
                for c in r.configs:
                    set_logger_level(c.name, c.value if c.config_operation == SET else None)
                    # (not logger=/level=: structlog's own fields of those names would overwrite them)
                    log.warning("logger level changed", target_logger=c.name,
                                new_level=c.value if c.config_operation == SET else None, principal=str(ctx.principal))
        results.append(result)
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=results)


def _check_logger_change(name: str, op: int, value) -> None:
    if op == SET:
        if value is None:
            raise ResourceError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {name}")
        if not logger_exists(name):
            raise ResourceError(ErrorCode.INVALID_CONFIG, f"Logger {name} does not exist!")
        if value not in LOG4J_LEVELS:
            raise ResourceError(ErrorCode.INVALID_CONFIG, f"Cannot set the log level of {name} to {value} as it is not a "
                                f"supported log level. Valid log levels are {', '.join(sorted(LOG4J_LEVELS))}")
    elif op == DELETE:
        if not logger_exists(name):
            raise ResourceError(ErrorCode.INVALID_CONFIG, f"Logger {name} does not exist!")
        if name == ROOT_LOGGER:
            raise ResourceError(ErrorCode.INVALID_REQUEST, f"Removing the log level of the {ROOT_LOGGER} logger is not allowed")
    else:
        raise ResourceError(ErrorCode.INVALID_REQUEST,
                            f"{OP_NAMES.get(op, op)} operation is not allowed for the BROKER_LOGGER resource")


@forwarded
@per_item("resources", "responses", _refusal(AclOperation.ALTER_CONFIGS), _denied(IResult))
def _incremental_alter_configs(services: BrokerServices, ctx: RequestContext,
                               request: IncrementalAlterConfigsRequest) -> Answer:
    def change_of(r) -> ConfigChange | None:
        keys = [c.name for c in r.configs]
        if r.resource_type == TOPIC:
            _check_unique_keys(keys)
            _check_topic(services, r.resource_name)
            current = services.metadata.image.topic_configs(r.resource_name)
            ops = [(c.name, c.config_operation, c.value) for c in r.configs]
            return ConfigChange(TOPIC, r.resource_name, incremental_changes(current, ops, services.config))
        if r.resource_type == BROKER:
            _check_unique_keys(keys)
            _check_broker_id(r.resource_name)
            ops = [(c.name, c.config_operation, c.value) for c in r.configs]
            current = _broker_configs(services, r.resource_name)
            return ConfigChange(BROKER, r.resource_name, incremental_changes(current, ops, services.config, broker=True))
        if r.resource_type == GROUP:  # a group's share.* configs (broker/group_configs.py)
            _check_unique_keys(keys)
            try:
                return ConfigChange(GROUP, r.resource_name, group_config_changes(
                    services.metadata.image, services.config, r.resource_name,
                    [(c.name, c.config_operation, c.value) for c in r.configs]))
            except GroupConfigError as e:
                raise ResourceError(e.error_code, str(e)) from None
        raise _unsupported_type(r.resource_type)

    altered, answer = _alter_all(services, request.resources, request.validate_only, change_of, IResult)
    return services.answer(
        altered, lambda outcomes: IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=answer(outcomes))
    )
