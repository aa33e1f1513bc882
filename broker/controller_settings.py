"""The controller as this node's configuration builds it.

The controller (metadata/controller/) never sees a BrokerConfig: it is given a `ControllerSettings` of the
few static values its decisions need, and the topic-config and dynamic-broker-config checks as callables (the topic config
definitions are the broker's config system: broker/topic_config.py). This is the one place that maps the
properties onto them, so every controller of this node (and the channel that checks it was built so) agree.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from odradek.metadata.controller import Controller, ControllerSettings

from .config import BrokerConfig
from .dynamic_config import validate_dynamic_configs
from .topic_config import validate_topic_configs


def controller_settings(cfg: BrokerConfig) -> ControllerSettings:
    return ControllerSettings(
        session_timeout_ms=cfg.broker_session_timeout_ms,
        broker_disconnect_grace_ms=cfg.broker_session_disconnect_grace_ms,
        broker_heartbeat_interval_ms=cfg.broker_heartbeat_interval_ms,
        unclean_leader_election_enable=cfg.unclean_leader_election_enable,
        auto_leader_rebalance_enable=cfg.auto_leader_rebalance_enable,
        leader_imbalance_check_interval_ms=cfg.leader_imbalance_check_interval_seconds * 1000,
        num_partitions=cfg.num_partitions,
        default_replication_factor=cfg.default_replication_factor,
        delete_topic_enable=cfg.delete_topic_enable,
        min_insync_replicas=cfg.min_insync_replicas,
    )


def new_controller(cfg: BrokerConfig, *, rng: random.Random | None = None, bootstrap_extra: Sequence[Any] = ()) -> Controller:
    """A controller deciding under `cfg`'s settings, topic config values checked against their definitions;
    `bootstrap_extra`, the records formatting added (written with the bootstrap records)."""
    return Controller(controller_settings(cfg), rng=rng, validate_topic_configs=validate_topic_configs,
                      validate_broker_configs=validate_dynamic_configs, bootstrap_extra=bootstrap_extra)


def is_built_from(controller: Controller, cfg: BrokerConfig) -> bool:
    """Whether `controller` decides under `cfg` (built by `new_controller(cfg)` or equivalently)."""
    return (
        controller.settings == controller_settings(cfg)
        and controller.validate_topic_configs is validate_topic_configs
        and controller.validate_broker_configs is validate_dynamic_configs
    )
