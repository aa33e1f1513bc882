"""The controller's view of dynamic configs (Kafka's ConfigurationControlManager).

Configs are kept in the image per resource (a topic by name, a broker by id, the cluster-wide broker
defaults under broker resource ""), each set by a ConfigRecord (a None value deletes the key). A change
writes a record only for a key whose value actually changes; the legacy AlterConfigs replaces the whole
set (`replace`), deleting every key it does not name.

Topic config values are checked against their definitions by the `TopicConfigValidator` the controller is
given (settings.py says why it is injected); a refusal is INVALID_CONFIG with the validator's message.
GROUP resources (a group id) hold a group's dynamic configs (metadata/group_config.py: the share.* ones),
checked for known names and well-formed values.
Dynamic broker configs (a BROKER resource: a node id, or "" for the cluster-wide defaults every broker
takes) are checked the same way by a `BrokerConfigValidator`, over the set the resource would have after
the change (so keys that must agree are checked together; deletions are never refused, so a key that could
not be set today can always be removed). A refusal is INVALID_REQUEST, as Kafka answers a dynamic broker
config it cannot take (ConfigAdminManager; KAFKA-13609 keeps that code for compatibility). The broker id is
not required to be registered: a node can be configured before it first starts, as in Kafka.

The other managers read configs through this one: whether a topic may elect an unclean leader, whether
leaders are rebalanced and a topic's min.insync.replicas (the ELR rules' min ISR), each the dynamic value
(the topic's, then the cluster-wide one) over the static default in `ControllerSettings`.

With ELR on, the active controller writes the cluster-wide min.insync.replicas (a ConfigRecord on broker
resource "") when there is none, from its static value (`min_insync_replicas_records`), as Kafka 4.1+
does: the ELR rules depend on that value, so it must be one value for the whole cluster, in the log,
rather than each broker's own static setting. Topics then describe min.insync.replicas as
DYNAMIC_DEFAULT_BROKER_CONFIG.
"""

from __future__ import annotations

from collections.abc import Mapping

from odradek.protocol.errors import ErrorCode
from odradek.metadata.image import MetadataError, MetadataImage
from odradek.metadata.group_config import validate_group_configs
from odradek.metadata.records import ConfigRecord, ConfigResourceType

from .requests import ConfigChange
from .settings import (
    AUTO_LEADER_REBALANCE_ENABLE,
    MIN_INSYNC_REPLICAS,
    UNCLEAN_LEADER_ELECTION_ENABLE,
    BrokerConfigValidator,
    ControllerSettings,
    TopicConfigValidator,
)


class ConfigurationControlManager:
    """See the module doc. Without a `validate_topic_configs` (`validate_broker_configs`), topic (broker)
    config values are not checked (only that names are not empty and values not null)."""

    def __init__(self, settings: ControllerSettings, validate_topic_configs: TopicConfigValidator | None,
                 validate_broker_configs: BrokerConfigValidator | None = None) -> None:
        self._settings = settings
        self._validate_topic_configs = validate_topic_configs
        self._validate_broker_configs = validate_broker_configs

    # -- decisions

    def alter_configs(
        self,
        image: MetadataImage,
        resource_type: int,
        resource_name: str,
        changes: Mapping[str, str | None],
        *,
        replace: bool = False,
    ) -> list:
        """ConfigRecords setting each of `changes` (a None value deletes the key), for a topic or a broker
        (resource name "" for the cluster-wide defaults). With `replace` (legacy AlterConfigs) every key
        not in `changes` is deleted too. Only actual changes produce records, except that a broker key set
        to its current value is written again, as Kafka does."""
        if resource_type == ConfigResourceType.TOPIC:
            if resource_name not in image.topics_by_name:
                raise MetadataError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {resource_name} does not exist."
                )
        elif resource_type == ConfigResourceType.BROKER:
            if resource_name and not (resource_name.isascii() and resource_name.isdigit()):
                raise MetadataError(
                    ErrorCode.INVALID_REQUEST,
                    f"Illegal non-integral BROKER resource type name: {resource_name}",
                )
        elif resource_type == ConfigResourceType.GROUP:
            if not resource_name:
                raise MetadataError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
        else:
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"Unsupported config resource type {resource_type}")
        current = image.configs.get((resource_type, resource_name), {})
        wanted = dict(changes)
        if replace:
            for key in current:
                wanted.setdefault(key, None)
        records = []
        for key, value in wanted.items():
            if not key:
                raise MetadataError(ErrorCode.INVALID_CONFIG, "Config names must not be empty")
            # A BROKER key that is set is written even when unchanged, as Kafka's controller does: the
            # record is what a reader of the log acts on (KIP-966 clears ELRs on any update of the cluster
            # min.insync.replicas).
            rewrite = resource_type == ConfigResourceType.BROKER and value is not None
            if current.get(key) != value or rewrite:
                records.append(
                    ConfigRecord(resource_type=resource_type, resource_name=resource_name, name=key, value=value)
                )
        return records

    def alter_config_change(self, image: MetadataImage, change: ConfigChange) -> tuple[list, None]:
        """One resource of an (Incremental)AlterConfigs: a topic must exist and its new values pass the
        validator (deletions are not checked); then `alter_configs`."""
        if change.resource_type == ConfigResourceType.TOPIC:
            if change.resource_name not in image.topics_by_name:
                raise MetadataError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic {change.resource_name} does not exist."
                )
            self.validate_topic_configs({k: v for k, v in change.changes.items() if v is not None})
        elif change.resource_type == ConfigResourceType.BROKER:
            self.validate_broker_configs(image, change.resource_name, change.changes)
        elif change.resource_type == ConfigResourceType.GROUP:
            # Names and the form of values; the ranges are the deciding broker's (metadata/group_config.py).
            try:
                validate_group_configs(change.changes)
            except ValueError as e:
                raise MetadataError(ErrorCode.INVALID_CONFIG, str(e)) from None
        return self.alter_configs(image, change.resource_type, change.resource_name, change.changes), None

    def validate_topic_configs(self, configs: Mapping[str, str | None]) -> None:
        """MetadataError(INVALID_CONFIG) for an unknown topic config or an invalid value."""
        if self._validate_topic_configs is None:
            return
        try:
            self._validate_topic_configs(dict(configs))
        except ValueError as e:
            raise MetadataError(ErrorCode.INVALID_CONFIG, str(e)) from None

    def validate_broker_configs(self, image: MetadataImage, name: str, changes: Mapping[str, str | None]) -> None:
        """MetadataError(INVALID_REQUEST) when the BROKER resource `name`'s dynamic configs after `changes`
        (None deletes) are refused by the validator; only a set value makes a name checked."""
        if name and not (name.isascii() and name.isdigit()):
            raise MetadataError(ErrorCode.INVALID_REQUEST, f"Illegal non-integral BROKER resource type name: {name}")
        for key, value in changes.items():
            if not key:
                raise MetadataError(ErrorCode.INVALID_REQUEST, "Config names must not be empty")
        if self._validate_broker_configs is None:
            return
        setting = {k: v for k, v in changes.items() if v is not None}
        if not setting:
            return
        after = {k: v for k, v in image.configs.get((ConfigResourceType.BROKER, name), {}).items()
                 if changes.get(k, v) is not None}
        after.update(setting)
        try:
            self._validate_broker_configs(after)
        except ValueError as e:
            raise MetadataError(ErrorCode.INVALID_REQUEST, str(e)) from None

    def topic_config_records(self, name: str, configs: Mapping[str, str | None]) -> list:
        """The ConfigRecords of a new topic's overrides (names must not be empty, values not null)."""
        records = []
        for key, value in configs.items():
            if not key:
                raise MetadataError(ErrorCode.INVALID_CONFIG, "Config names must not be empty")
            if value is None:
                raise MetadataError(
                    ErrorCode.INVALID_CONFIG, f"Null value not supported for topic configs: {key}"
                )
            records.append(
                ConfigRecord(resource_type=ConfigResourceType.TOPIC, resource_name=name, name=key, value=value)
            )
        return records

    def min_insync_replicas_records(self, image: MetadataImage) -> list:
        """The cluster-wide min.insync.replicas ConfigRecord if the image has none (see the module doc)."""
        if MIN_INSYNC_REPLICAS in image.broker_configs():
            return []
        return [
            ConfigRecord(
                resource_type=ConfigResourceType.BROKER, resource_name="", name=MIN_INSYNC_REPLICAS,
                value=str(self._settings.min_insync_replicas),
            )
        ]

    # -- what the other managers read

    def min_insync_replicas(self, image: MetadataImage, topic: str) -> int:
        """The topic's min.insync.replicas: its override, else the cluster-wide value, else the static one."""
        for value in (image.topic_configs(topic).get(MIN_INSYNC_REPLICAS), image.broker_configs().get(MIN_INSYNC_REPLICAS)):
            if value is not None:
                try:
                    return max(int(value), 1)
                except ValueError:
                    continue
        return self._settings.min_insync_replicas

    def unclean_leader_election_enabled(self, image: MetadataImage, topic: str) -> bool:
        return self._flag(image, UNCLEAN_LEADER_ELECTION_ENABLE, self._settings.unclean_leader_election_enable, topic)

    def auto_leader_rebalance_enabled(self, image: MetadataImage) -> bool:
        return self._flag(image, AUTO_LEADER_REBALANCE_ENABLE, self._settings.auto_leader_rebalance_enable)

    def _flag(self, image: MetadataImage, name: str, default: bool, topic: str | None = None) -> bool:
        value = None
        if topic is not None:
            value = image.topic_configs(topic).get(name)
        if value is None:
            value = image.broker_configs().get(name)
        return default if value is None else value.strip().lower() == "true"
