"""The controller: the decisions that become metadata records, in Kafka's QuorumController shape.

`Controller` (quorum_controller.py, whose doc is the theory of the whole package) is a thin facade over
the control managers, one module per part of the metadata it decides: cluster_control (brokers),
replication_control (topics and partitions), configuration_control, acl_control, client_quota_control,
scram_control, producer_id_control, feature_control. settings.py is its static configuration, requests.py the items of
the channel's topic and config calls.
"""

from .cluster_control import BrokerState, ClusterControlManager
from .partition_changes import PartitionChanges
from .producer_id_control import DEFAULT_PRODUCER_ID_BLOCK_SIZE
from .quorum_controller import Controller, Decision
from .replication_control import LOST_DIRECTORY_ID, ElectionType, ReplicationControlManager
from .requests import INTERNAL_TOPICS, ConfigChange, CreatedTopic, NewPartitions, NewTopic, TopicToDelete
from .settings import (
    AUTO_LEADER_REBALANCE_ENABLE,
    DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_MS,
    DEFAULT_MAX_ELECTIONS_PER_IMBALANCE,
    UNCLEAN_LEADER_ELECTION_ENABLE,
    BrokerConfigValidator,
    ControllerSettings,
    TopicConfigValidator,
)

__all__ = [
    "AUTO_LEADER_REBALANCE_ENABLE",
    "DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_MS",
    "DEFAULT_MAX_ELECTIONS_PER_IMBALANCE",
    "DEFAULT_PRODUCER_ID_BLOCK_SIZE",
    "INTERNAL_TOPICS",
    "LOST_DIRECTORY_ID",
    "UNCLEAN_LEADER_ELECTION_ENABLE",
    "BrokerConfigValidator",
    "BrokerState",
    "ClusterControlManager",
    "ConfigChange",
    "Controller",
    "ControllerSettings",
    "CreatedTopic",
    "Decision",
    "ElectionType",
    "NewPartitions",
    "NewTopic",
    "PartitionChanges",
    "ReplicationControlManager",
    "TopicConfigValidator",
    "TopicToDelete",
]
