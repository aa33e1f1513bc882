"""Topics on this broker: naming rules, and each topic's log settings from the image and this broker's config.

Topics change only through the controller (broker/controller_channel.py): CreateTopics, automatic
creation, DeleteTopics, CreatePartitions and config changes are metadata records first. The replica
manager applies each committed update itself (`ReplicaManager.apply_delta`, replication/hosting.py); what
it needs from here is `topic_settings`: a topic's effective LogConfig and min.insync.replicas, its
overrides over this broker's defaults (the topic-config table, broker/topic_config.py, is the broker's).
"""

from __future__ import annotations

import structlog

from odradek.metadata.image import MetadataError, MetadataImage, validate_topic_name
from odradek.replication.hosting import TopicSettings
from odradek.storage.config import LogConfig

from .config import BrokerConfig
from .controller_channel import INTERNAL_TOPICS
from .topic_config import effective_topic_configs, to_log_config_kwargs

log = structlog.get_logger("odradek.topics")


def is_valid_name(name: str) -> bool:
    try:
        validate_topic_name(name)
    except MetadataError:
        return False
    return True


def is_internal(name: str) -> bool:
    return name in INTERNAL_TOPICS


def log_config(image: MetadataImage, name: str, config: BrokerConfig) -> LogConfig:
    return _log_config_of(effective_topic_configs(dict(image.topic_configs(name)), config), config)


def _log_config_of(effective: dict, config: BrokerConfig) -> LogConfig:
    # producer.id.expiration.ms is a broker setting, not a topic one: every log takes the broker's.
    return LogConfig(**to_log_config_kwargs(effective, fields=LogConfig.__dataclass_fields__),
                     producer_id_expiration_ms=config.producer_id_expiration_ms)


def topic_settings(config: BrokerConfig) -> TopicSettings:
    """The replica manager's `TopicSettings` port (replication/hosting.py): a topic's LogConfig and its
    min.insync.replicas, its overrides in the image over this broker's defaults."""

    def settings(image: MetadataImage, name: str) -> tuple[LogConfig, int]:
        overrides = image.topic_configs(name)
        effective = effective_topic_configs(dict(overrides), config)
        min_isr = effective.get("min.insync.replicas", 1)
        if "min.insync.replicas" not in overrides:
            # The cluster-wide value the controller writes with ELR on (configuration_control.py) is the
            # one the ELR rules use: the leader's acks=all check and strict min ISR use it too.
            cluster_value = image.broker_configs().get("min.insync.replicas")
            if cluster_value is not None and cluster_value.isdigit():
                min_isr = max(int(cluster_value), 1)
        return _log_config_of(effective, config), int(min_isr)

    return settings
