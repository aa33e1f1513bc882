"""Cluster administration: log dirs, leader elections, reassignments, client quotas, features and DescribeCluster."""

from ..schema import F, api

ALTER_REPLICA_LOG_DIRS = api(
    34,
    "AlterReplicaLogDirs",
    valid="1-2",
    flexible="2+",
    request=[
        F("dirs", "[]AlterReplicaLogDir", fields=[
            F("path", "string"),
            F("topics", "[]AlterReplicaLogDirTopic", fields=[
                F("name", "string"),
                F("partitions", "[]int32"),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]AlterReplicaLogDirTopicResult", fields=[
            F("topic_name", "string"),
            F("partitions", "[]AlterReplicaLogDirPartitionResult", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
            ]),
        ]),
    ],
)

DESCRIBE_LOG_DIRS = api(
    35,
    "DescribeLogDirs",
    valid="1-5",
    flexible="2+",
    request=[
        # Null topics means every partition in every log dir.
        F("topics", "[]DescribableLogDirTopic", nullable="0+", fields=[
            F("topic", "string"),
            F("partitions", "[]int32"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16", "3+", ignorable=True),
        F("results", "[]DescribeLogDirsResult", fields=[
            F("error_code", "int16"),
            F("log_dir", "string"),
            F("topics", "[]DescribeLogDirsTopic", fields=[
                F("name", "string"),
                F("partitions", "[]DescribeLogDirsPartition", fields=[
                    F("partition_index", "int32"),
                    F("partition_size", "int64"),
                    F("offset_lag", "int64"),
                    F("is_future_key", "bool"),
                ]),
            ]),
            F("total_bytes", "int64", "4+", default=-1, ignorable=True),
            F("usable_bytes", "int64", "4+", default=-1, ignorable=True),
            F("is_cordoned", "bool", "5+", default=False, ignorable=True),
        ]),
    ],
)

ELECT_LEADERS = api(
    43,
    "ElectLeaders",
    valid="0-2",
    flexible="2+",
    request=[
        F("election_type", "int8", "1+"),
        # Null means every partition in the cluster.
        F("topic_partitions", "[]TopicPartitions", nullable="0+", fields=[
            F("topic", "string"),
            F("partitions", "[]int32"),
        ]),
        F("timeout_ms", "int32", default=60000),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16", "1+"),
        F("replica_election_results", "[]ReplicaElectionResult", fields=[
            F("topic", "string"),
            F("partition_result", "[]PartitionResult", fields=[
                F("partition_id", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+"),
            ]),
        ]),
    ],
)

ALTER_PARTITION_REASSIGNMENTS = api(
    45,
    "AlterPartitionReassignments",
    valid="0-1",
    flexible="0+",
    request=[
        F("timeout_ms", "int32", default=60000),
        F("allow_replication_factor_change", "bool", "1+", default=True),
        F("topics", "[]ReassignableTopic", fields=[
            F("name", "string"),
            F("partitions", "[]ReassignablePartition", fields=[
                F("partition_index", "int32"),
                # Null replicas cancels a pending reassignment.
                F("replicas", "[]int32", nullable="0+", default=None),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("allow_replication_factor_change", "bool", "1+", default=True, ignorable=True),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("responses", "[]ReassignableTopicResponse", fields=[
            F("name", "string"),
            F("partitions", "[]ReassignablePartitionResponse", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+"),
            ]),
        ]),
    ],
)

LIST_PARTITION_REASSIGNMENTS = api(
    46,
    "ListPartitionReassignments",
    valid="0",
    flexible="0+",
    request=[
        F("timeout_ms", "int32", default=60000),
        # Null means every ongoing reassignment.
        F("topics", "[]ListPartitionReassignmentsTopics", nullable="0+", default=None, fields=[
            F("name", "string"),
            F("partition_indexes", "[]int32"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("topics", "[]OngoingTopicReassignment", fields=[
            F("name", "string"),
            F("partitions", "[]OngoingPartitionReassignment", fields=[
                F("partition_index", "int32"),
                F("replicas", "[]int32"),
                F("adding_replicas", "[]int32"),
                F("removing_replicas", "[]int32"),
            ]),
        ]),
    ],
)

DESCRIBE_CLIENT_QUOTAS = api(
    48,
    "DescribeClientQuotas",
    valid="0-1",
    flexible="1+",
    request=[
        F("components", "[]ComponentData", fields=[
            F("entity_type", "string"),
            F("match_type", "int8"),
            F("match", "string", nullable="0+"),
        ]),
        F("strict", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        F("entries", "[]EntryData", nullable="0+", fields=[
            F("entity", "[]EntityData", fields=[
                F("entity_type", "string"),
                F("entity_name", "string", nullable="0+"),
            ]),
            F("values", "[]ValueData", fields=[
                F("key", "string"),
                F("value", "float64"),
            ]),
        ]),
    ],
)

ALTER_CLIENT_QUOTAS = api(
    49,
    "AlterClientQuotas",
    valid="0-1",
    flexible="1+",
    request=[
        F("entries", "[]EntryData", fields=[
            F("entity", "[]EntityData", fields=[
                F("entity_type", "string"),
                F("entity_name", "string", nullable="0+"),
            ]),
            F("ops", "[]OpData", fields=[
                F("key", "string"),
                F("value", "float64"),
                F("remove", "bool"),
            ]),
        ]),
        F("validate_only", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("entries", "[]EntryData", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
            F("entity", "[]EntityData", fields=[
                F("entity_type", "string"),
                F("entity_name", "string", nullable="0+"),
            ]),
        ]),
    ],
)

UPDATE_FEATURES = api(
    57,
    "UpdateFeatures",
    valid="0-2",
    flexible="0+",
    request=[
        F("timeout_ms", "int32", default=60000),
        F("feature_updates", "[]FeatureUpdateKey", fields=[
            F("feature", "string"),
            F("max_version_level", "int16"),
            F("allow_downgrade", "bool", "0"),
            F("upgrade_type", "int8", "1+", default=1),
        ]),
        F("validate_only", "bool", "1+", default=False),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
        # Dropped in v2: the top-level error covers the whole update.
        F("results", "[]UpdatableFeatureResult", "0-1", ignorable=True, fields=[
            F("feature", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+"),
        ]),
    ],
)

DESCRIBE_CLUSTER = api(
    60,
    "DescribeCluster",
    valid="0-2",
    flexible="0+",
    request=[
        F("include_cluster_authorized_operations", "bool"),
        F("endpoint_type", "int8", "1+", default=1),
        F("include_fenced_brokers", "bool", "2+"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("endpoint_type", "int8", "1+", default=1),
        F("cluster_id", "string"),
        F("controller_id", "int32", default=-1),
        F("brokers", "[]DescribeClusterBroker", fields=[
            F("broker_id", "int32"),
            F("host", "string"),
            F("port", "int32"),
            F("rack", "string", nullable="0+", default=None),
            F("is_fenced", "bool", "2+"),
        ]),
        # INT32_MIN: authorized operations were not requested.
        F("cluster_authorized_operations", "int32", default=-2147483648),
    ],
)

APIS = [
    ALTER_REPLICA_LOG_DIRS,
    DESCRIBE_LOG_DIRS,
    ELECT_LEADERS,
    ALTER_PARTITION_REASSIGNMENTS,
    LIST_PARTITION_REASSIGNMENTS,
    DESCRIBE_CLIENT_QUOTAS,
    ALTER_CLIENT_QUOTAS,
    UPDATE_FEATURES,
    DESCRIBE_CLUSTER,
]
