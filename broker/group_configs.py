"""GROUP config resources on the broker: DescribeConfigs and IncrementalAlterConfigs of a group's dynamic
configs (metadata/group_config.py says which and what they override).

Described: every group config, with the group's own value (source GROUP_CONFIG) or, if it has none, the
broker's default for it (DEFAULT_CONFIG), as Kafka's ConfigHelper describes a group. Altered: SET and
DELETE only (none is a list), checked against this broker's group.share.* bounds before the change goes to
the controller, which writes it as ConfigRecords on (GROUP, group id). The dead-letter queue configs
(`errors.deadletterqueue.*`, KIP-1191) exist only at share.version 2: below it they are neither described
nor settable (metadata/group_config.py says why).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from odradek.metadata.group_config import (
    DLQ_COPY_RECORD,
    DLQ_GROUP_CONFIGS,
    DLQ_TOPIC_NAME,
    GROUP_CONFIGS,
    parse_bool,
    share_group_settings,
    validate_group_configs,
)
from odradek.metadata.image import SHARE_VERSION_FEATURE, MetadataImage
from odradek.metadata.records import ConfigResourceType
from odradek.protocol.errors import ErrorCode, KafkaApiError

from .config import BrokerConfig, ConfigType
from .share.manager import ShareSettings
from .topic_config import ConfigEntry, ConfigSource

__all__ = ["DLQ_SHARE_VERSION", "describe_group", "dlq_supported", "group_config_changes", "share_defaults",
           "share_settings_of"]

DLQ_SHARE_VERSION = 2
"""Kafka 4.4's ShareVersion.SV_2: the level at which share groups have dead-letter queues."""


def dlq_supported(image: MetadataImage) -> bool:
    return image.features.get(SHARE_VERSION_FEATURE, 0) >= DLQ_SHARE_VERSION


_SHARE_FIELDS = {
    "group.share.session.timeout.ms": "share_group_session_timeout_ms",
    "group.share.min.session.timeout.ms": "share_group_min_session_timeout_ms",
    "group.share.max.session.timeout.ms": "share_group_max_session_timeout_ms",
    "group.share.heartbeat.interval.ms": "share_group_heartbeat_interval_ms",
    "group.share.min.heartbeat.interval.ms": "share_group_min_heartbeat_interval_ms",
    "group.share.max.heartbeat.interval.ms": "share_group_max_heartbeat_interval_ms",
    "group.share.record.lock.duration.ms": "share_group_record_lock_duration_ms",
    "group.share.min.record.lock.duration.ms": "share_group_min_record_lock_duration_ms",
    "group.share.max.record.lock.duration.ms": "share_group_max_record_lock_duration_ms",
    "group.share.delivery.count.limit": "share_group_delivery_count_limit",
    "group.share.min.delivery.count.limit": "share_group_min_delivery_count_limit",
    "group.share.max.delivery.count.limit": "share_group_max_delivery_count_limit",
}


def share_defaults(config: BrokerConfig) -> dict[str, int]:
    """The broker's group.share.* values by Kafka name: the defaults and bounds of the share group configs."""
    dumped = config.model_dump()
    return {name: int(dumped[field]) for name, field in _SHARE_FIELDS.items()}


def share_settings_of(image: MetadataImage, config: BrokerConfig, group_id: str, base: ShareSettings,
                      defaults: Mapping[str, int] | None = None) -> ShareSettings:
    """What a share group's partitions run with on their leaders (broker/share/manager.py `settings_for`):
    `base` (the broker's group.share.* values) with the group's own share.* GROUP configs over it, as Kafka's
    SharePartition reads GroupConfigManager: share.record.lock.duration.ms, share.delivery.count.limit,
    share.auto.offset.reset and share.isolation.level. A group with no configs of its own runs with `base`.
    `defaults` (share_defaults(config)) may be computed once by a caller that asks on every fetch."""
    own = image.configs.get((ConfigResourceType.GROUP, group_id))
    if not own:
        return base
    group = share_group_settings(own, share_defaults(config) if defaults is None else defaults)
    dlq_topic, copy_record = "", False
    if dlq_supported(image):  # (errors.deadletterqueue.* mean nothing below share.version 2)
        dlq_topic = own.get(DLQ_TOPIC_NAME, "")
        copy_record = parse_bool(own.get(DLQ_COPY_RECORD, "false"))
    return replace(base, record_lock_duration_ms=group.record_lock_duration_ms,
                   delivery_count_limit=group.delivery_count_limit, auto_offset_reset=group.auto_offset_reset,
                   read_committed=group.isolation_level == "read_committed", dlq_topic=dlq_topic,
                   dlq_copy_record=copy_record)


def describe_group(image: MetadataImage, config: BrokerConfig, group_id: str,
                   keys: Iterable[str] | None = None) -> list[ConfigEntry]:
    own = image.configs.get((ConfigResourceType.GROUP, group_id), {})
    defaults = share_defaults(config)
    wanted = None if not keys else set(keys)
    dlq = dlq_supported(image)
    entries = []
    for name, definition in sorted(GROUP_CONFIGS.items()):
        if wanted is not None and name not in wanted:
            continue
        if name in DLQ_GROUP_CONFIGS and not dlq:
            continue
        value = own.get(name)
        default = str(defaults[definition.default_key]) if definition.default_key else definition.default
        entries.append(ConfigEntry(
            name=name, value=value if value is not None else default, read_only=False,
            source=ConfigSource.GROUP_CONFIG if value is not None else ConfigSource.DEFAULT_CONFIG,
            is_sensitive=False, type=_TYPES.get(definition.ktype, ConfigType.STRING),
            documentation=definition.doc))
    return entries


_TYPES = {"int": ConfigType.INT, "boolean": ConfigType.BOOLEAN, "string": ConfigType.STRING}


class GroupConfigError(KafkaApiError):
    """A group config change refused, with the code its resource is answered with."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = int(error_code)


def group_config_changes(image: MetadataImage, config: BrokerConfig, group_id: str,
                         ops: Iterable[tuple[str, int, str | None]]) -> Mapping[str, str | None]:
    """The changes of IncrementalAlterConfigs ops ((name, operation, value)) on a group, checked; raises
    GroupConfigError (INVALID_REQUEST for a missing group name or an operation other than SET and DELETE,
    INVALID_CONFIG for an unknown key or a value out of range)."""
    if not group_id:
        raise GroupConfigError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
    changes: dict[str, str | None] = {}
    for name, op, value in ops:
        if op == 0:
            if value is None:
                raise GroupConfigError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {name}")
            changes[name] = value
        elif op == 1:
            changes[name] = None
        else:
            raise GroupConfigError(ErrorCode.INVALID_CONFIG,
                                   f"Can't APPEND or SUBTRACT to key {name} because its type is not LIST.")
    if not dlq_supported(image):
        needs = sorted(name for name, value in changes.items() if name in DLQ_GROUP_CONFIGS and value is not None)
        if needs:
            raise GroupConfigError(ErrorCode.INVALID_CONFIG,
                                   f"{', '.join(needs)} needs {SHARE_VERSION_FEATURE} {DLQ_SHARE_VERSION} (share-group "
                                   f"dead-letter queues, KIP-1191); this cluster finalized "
                                   f"{SHARE_VERSION_FEATURE} {image.features.get(SHARE_VERSION_FEATURE, 0)}")
    current = image.configs.get((ConfigResourceType.GROUP, group_id), {})
    try:
        validate_group_configs(changes, share_defaults(config), current)
    except ValueError as e:
        raise GroupConfigError(ErrorCode.INVALID_CONFIG, str(e)) from None
    return changes
