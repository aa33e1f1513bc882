"""Metadata (3) and DescribeTopicPartitions (75): brokers, topics, partitions and their leaders."""

from ..schema import F, api

METADATA = api(
    3,
    "Metadata",
    valid="0-13",
    flexible="9+",
    request=[
        # v0: an empty list means all topics. v1+: empty means none, and null means all.
        F("topics", "[]MetadataRequestTopic", nullable="1+", fields=[
            # v10-11 carry topic_id and a nullable name, but lookup by id only works from v12.
            F("topic_id", "uuid", "10+", ignorable=True),
            F("name", "string", nullable="10+"),
        ]),
        F("allow_auto_topic_creation", "bool", "4+", default=True),
        F("include_cluster_authorized_operations", "bool", "8-10"),
        F("include_topic_authorized_operations", "bool", "8+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "3+", ignorable=True),
        F("brokers", "[]MetadataResponseBroker", fields=[
            F("node_id", "int32"),
            F("host", "string"),
            F("port", "int32"),
            F("rack", "string", "1+", nullable="1+", default=None, ignorable=True),
        ]),
        F("cluster_id", "string", "2+", nullable="2+", default=None, ignorable=True),
        F("controller_id", "int32", "1+", default=-1, ignorable=True),
        F("topics", "[]MetadataResponseTopic", fields=[
            F("error_code", "int16"),
            F("name", "string", nullable="12+"),
            F("topic_id", "uuid", "10+", ignorable=True),
            F("is_internal", "bool", "1+", default=False, ignorable=True),
            F("partitions", "[]MetadataResponsePartition", fields=[
                F("error_code", "int16"),
                F("partition_index", "int32"),
                F("leader_id", "int32"),
                F("leader_epoch", "int32", "7+", default=-1, ignorable=True),
                F("replica_nodes", "[]int32"),
                F("isr_nodes", "[]int32"),
                F("offline_replicas", "[]int32", "5+", ignorable=True),
            ]),
            F("topic_authorized_operations", "int32", "8+", default=-2147483648),
        ]),
        F("cluster_authorized_operations", "int32", "8-10", default=-2147483648),
        F("error_code", "int16", "13+", ignorable=True),
    ],
)

DESCRIBE_TOPIC_PARTITIONS = api(
    75,
    "DescribeTopicPartitions",
    valid="0",
    flexible="0+",
    request=[
        F("topics", "[]TopicRequest", fields=[
            F("name", "string"),
        ]),
        F("response_partition_limit", "int32", default=2000),
        F("cursor", "Cursor", nullable="0+", default=None, fields=[
            F("topic_name", "string"),
            F("partition_index", "int32"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32", ignorable=True),
        F("topics", "[]DescribeTopicPartitionsResponseTopic", fields=[
            F("error_code", "int16"),
            F("name", "string", nullable="0+"),
            F("topic_id", "uuid", ignorable=True),
            F("is_internal", "bool", default=False, ignorable=True),
            F("partitions", "[]DescribeTopicPartitionsResponsePartition", fields=[
                F("error_code", "int16"),
                F("partition_index", "int32"),
                F("leader_id", "int32"),
                F("leader_epoch", "int32", default=-1, ignorable=True),
                F("replica_nodes", "[]int32"),
                F("isr_nodes", "[]int32"),
                F("eligible_leader_replicas", "[]int32", nullable="0+", default=None),
                F("last_known_elr", "[]int32", nullable="0+", default=None),
                F("offline_replicas", "[]int32", ignorable=True),
            ]),
            F("topic_authorized_operations", "int32", default=-2147483648),
        ]),
        F("next_cursor", "Cursor", nullable="0+", default=None, fields=[
            F("topic_name", "string"),
            F("partition_index", "int32"),
        ]),
    ],
)

APIS = [METADATA, DESCRIBE_TOPIC_PARTITIONS]
