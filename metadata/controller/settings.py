"""What the controller is configured with: the static values its decisions need, and nothing else.

`ControllerSettings` is a frozen value built once by the owner (broker/ builds it from its BrokerConfig,
`broker/controller_settings.py`); the controller never sees the broker's configuration object. Dynamic
configs (the cluster-wide broker resource "" and each topic's overrides, in the image) take precedence over
the static defaults here where Kafka lets them: `unclean.leader.election.enable` and
`auto.leader.rebalance.enable`.

Topic config values are checked by a `TopicConfigValidator` handed to the controller: the definitions of
the topic configs (types, ranges, broker synonyms, the DescribeConfigs view) belong to the broker's config
system, so the controller takes the check as a callable rather than importing those tables upwards.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from odradek.metadata.broker_heartbeats import DEFAULT_HEARTBEAT_INTERVAL_MS, DEFAULT_SESSION_TIMEOUT_MS

UNCLEAN_LEADER_ELECTION_ENABLE = "unclean.leader.election.enable"
AUTO_LEADER_REBALANCE_ENABLE = "auto.leader.rebalance.enable"
MIN_INSYNC_REPLICAS = "min.insync.replicas"
DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_MS = 300_000  # leader.imbalance.check.interval.seconds = 300
DEFAULT_MAX_ELECTIONS_PER_IMBALANCE = 1000

TopicConfigValidator = Callable[[Mapping[str, str | None]], object]
"""Checks topic config overrides (name -> value; a None value, a deletion, is not checked); raises ValueError
naming the bad one."""

BrokerConfigValidator = Callable[[Mapping[str, str | None]], object]
"""Checks the dynamic configs a BROKER resource (one node, or "" for the cluster-wide defaults) would have
after a change (name -> value): each name one that may change at run time, each value what the broker's
start-up would accept; raises ValueError with the refusal (broker/dynamic_config.py)."""


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """The controller's static configuration, in Kafka's property names' snake_case.

    `session_timeout_ms` is broker.session.timeout.ms; `broker_disconnect_grace_ms` is
    odradek.broker.session.disconnect.grace.ms (-1 here: off, Kafka's rule; the broker's default turns it
    on) and `broker_heartbeat_interval_ms` broker.heartbeat.interval.ms, which bound a session whose
    connection closed or that a new controller presumed (broker_heartbeats.py); `num_partitions` and `default_replication_factor`
    replace -1 in a CreateTopics without assignments; `delete_topic_enable` refuses every DeleteTopics
    when false; the election and balance values and `min_insync_replicas` (the ELR rules' min ISR) are the
    defaults under the dynamic configs."""

    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    broker_disconnect_grace_ms: int = -1
    broker_heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_ms: int = DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_MS
    max_elections_per_imbalance: int = DEFAULT_MAX_ELECTIONS_PER_IMBALANCE
    num_partitions: int = 1
    default_replication_factor: int = 1
    delete_topic_enable: bool = True
    min_insync_replicas: int = 1
