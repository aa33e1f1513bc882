"""Topic and partition administration: CreateTopics (19), DeleteTopics (20), DeleteRecords (21), CreatePartitions (37)."""

from ..schema import F, api

CREATE_TOPICS = api(
    19,
    "CreateTopics",
    valid="2-7",
    flexible="5+",
    request=[
        F("topics", "[]CreatableTopic", fields=[
            F("name", "string"),
            F("num_partitions", "int32"),
            F("replication_factor", "int16"),
            F("assignments", "[]CreatableReplicaAssignment", fields=[
                F("partition_index", "int32"),
                F("broker_ids", "[]int32"),
            ]),
            F("configs", "[]CreatableTopicConfig", fields=[
                F("name", "string"),
                F("value", "string", nullable="0+"),
            ]),
        ]),
        F("timeout_ms", "int32", default=60000),
        F("validate_only", "bool", "1+", default=False),
    ],
    # Admin clients (librdkafka in particular) expect one result per requested topic, duplicates included.
    response=[
        F("throttle_time_ms", "int32", "2+", ignorable=True),
        F("topics", "[]CreatableTopicResult", fields=[
            F("name", "string"),
            F("topic_id", "uuid", "7+", ignorable=True),
            F("error_code", "int16"),
            F("error_message", "string", "1+", nullable="0+", ignorable=True),
            F("topic_config_error_code", "int16", "5+", ignorable=True, tag=0),
            F("num_partitions", "int32", "5+", default=-1, ignorable=True),
            F("replication_factor", "int16", "5+", default=-1, ignorable=True),
            F("configs", "[]CreatableTopicConfigs", "5+", nullable="5+", ignorable=True, fields=[
                F("name", "string", "5+"),
                F("value", "string", "5+", nullable="5+"),
                F("read_only", "bool", "5+"),
                F("config_source", "int8", "5+", default=-1, ignorable=True),
                F("is_sensitive", "bool", "5+"),
            ]),
        ]),
    ],
)

DELETE_TOPICS = api(
    20,
    "DeleteTopics",
    valid="1-6",
    flexible="4+",
    request=[
        # From v6 topics are named by id or by name (name null when the id is given).
        F("topics", "[]DeleteTopicState", "6+", fields=[
            F("name", "string", "6+", nullable="6+", default=None),
            F("topic_id", "uuid", "6+"),
        ]),
        F("topic_names", "[]string", "0-5", ignorable=True),
        F("timeout_ms", "int32"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+", ignorable=True),
        F("responses", "[]DeletableTopicResult", fields=[
            F("name", "string", nullable="6+"),
            F("topic_id", "uuid", "6+", ignorable=True),
            F("error_code", "int16"),
            F("error_message", "string", "5+", nullable="5+", default=None, ignorable=True),
        ]),
    ],
)

DELETE_RECORDS = api(
    21,
    "DeleteRecords",
    valid="0-2",
    flexible="2+",
    request=[
        F("topics", "[]DeleteRecordsTopic", fields=[
            F("name", "string"),
            F("partitions", "[]DeleteRecordsPartition", fields=[
                F("partition_index", "int32"),
                F("offset", "int64"),
            ]),
        ]),
        F("timeout_ms", "int32"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("topics", "[]DeleteRecordsTopicResult", fields=[
            F("name", "string"),
            F("partitions", "[]DeleteRecordsPartitionResult", fields=[
                F("partition_index", "int32"),
                F("low_watermark", "int64"),
                F("error_code", "int16"),
            ]),
        ]),
    ],
)

CREATE_PARTITIONS = api(
    37,
    "CreatePartitions",
    valid="0-3",
    flexible="2+",
    request=[
        F("topics", "[]CreatePartitionsTopic", fields=[
            F("name", "string"),
            F("count", "int32"),
            F("assignments", "[]CreatePartitionsAssignment", nullable="0+", fields=[
                F("broker_ids", "[]int32"),
            ]),
        ]),
        F("timeout_ms", "int32"),
        F("validate_only", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("results", "[]CreatePartitionsTopicResult", fields=[
            F("name", "string"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
        ]),
    ],
)

APIS = [CREATE_TOPICS, DELETE_TOPICS, DELETE_RECORDS, CREATE_PARTITIONS]
