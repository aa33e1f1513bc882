"""Fetch (1), ListOffsets (2) and OffsetForLeaderEpoch (23): reading the log and locating offsets in it."""

from ..schema import F, api

FETCH = api(
    1,
    "Fetch",
    valid="4-18",
    flexible="12+",
    request=[
        F("cluster_id", "string", "12+", nullable="12+", default=None, ignorable=True, tag=0),
        F("replica_id", "int32", "0-14", default=-1),
        F("replica_state", "ReplicaState", "15+", tag=1, fields=[
            F("replica_id", "int32", "15+", default=-1),
            F("replica_epoch", "int64", "15+", default=-1),
        ]),
        F("max_wait_ms", "int32"),
        F("min_bytes", "int32"),
        F("max_bytes", "int32", "3+", default=0x7FFFFFFF, ignorable=True),
        F("isolation_level", "int8", "4+", default=0, ignorable=True),
        F("session_id", "int32", "7+", default=0, ignorable=True),
        F("session_epoch", "int32", "7+", default=-1, ignorable=True),
        F("topics", "[]FetchTopic", fields=[
            F("topic", "string", "0-12", ignorable=True),
            F("topic_id", "uuid", "13+", ignorable=True),
            F("partitions", "[]FetchPartition", fields=[
                F("partition", "int32"),
                F("current_leader_epoch", "int32", "9+", default=-1, ignorable=True),
                F("fetch_offset", "int64"),
                F("last_fetched_epoch", "int32", "12+", default=-1),
                F("log_start_offset", "int64", "5+", default=-1, ignorable=True),
                F("partition_max_bytes", "int32"),
                F("replica_directory_id", "uuid", "17+", ignorable=True, tag=0),
                F("high_watermark", "int64", "18+", default=0x7FFFFFFFFFFFFFFF, ignorable=True, tag=1),
            ]),
        ]),
        F("forgotten_topics_data", "[]ForgottenTopic", "7+", fields=[
            F("topic", "string", "7-12", ignorable=True),
            F("topic_id", "uuid", "13+", ignorable=True),
            F("partitions", "[]int32", "7+"),
        ]),
        F("rack_id", "string", "11+", default="", ignorable=True),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+", ignorable=True),
        F("error_code", "int16", "7+", ignorable=True),
        F("session_id", "int32", "7+", default=0),
        F("responses", "[]FetchableTopicResponse", fields=[
            F("topic", "string", "0-12", ignorable=True),
            F("topic_id", "uuid", "13+", ignorable=True),
            F("partitions", "[]PartitionData", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("high_watermark", "int64"),
                F("last_stable_offset", "int64", "4+", default=-1, ignorable=True),
                F("log_start_offset", "int64", "5+", default=-1, ignorable=True),
                F("diverging_epoch", "EpochEndOffset", "12+", tag=0, fields=[
                    F("epoch", "int32", "12+", default=-1),
                    F("end_offset", "int64", "12+", default=-1),
                ]),
                F("current_leader", "LeaderIdAndEpoch", "12+", tag=1, fields=[
                    F("leader_id", "int32", "12+", default=-1),
                    F("leader_epoch", "int32", "12+", default=-1),
                ]),
                F("snapshot_id", "SnapshotId", "12+", tag=2, fields=[
                    F("end_offset", "int64", default=-1),
                    F("epoch", "int32", default=-1),
                ]),
                F("aborted_transactions", "[]AbortedTransaction", "4+", nullable="4+", ignorable=True, fields=[
                    F("producer_id", "int64", "4+"),
                    F("first_offset", "int64", "4+"),
                ]),
                F("preferred_read_replica", "int32", "11+", default=-1),
                # Nullable in the schema, but always send records (empty b"" at worst), never null: Kafka
                # never sends null here and clients are not written for it. The type default is None.
                F("records", "records", nullable="0+"),
            ]),
        ]),
        F("node_endpoints", "[]NodeEndpoint", "16+", tag=0, fields=[
            F("node_id", "int32", "16+"),
            F("host", "string", "16+"),
            F("port", "int32", "16+"),
            F("rack", "string", "16+", nullable="16+", default=None),
        ]),
    ],
)

LIST_OFFSETS = api(
    2,
    "ListOffsets",
    valid="1-11",
    flexible="6+",
    request=[
        F("replica_id", "int32"),
        F("isolation_level", "int8", "2+"),
        F("topics", "[]ListOffsetsTopic", fields=[
            F("name", "string"),
            F("partitions", "[]ListOffsetsPartition", fields=[
                F("partition_index", "int32"),
                F("current_leader_epoch", "int32", "4+", default=-1, ignorable=True),
                F("timestamp", "int64"),
                F("max_num_offsets", "int32", "0", default=1),
            ]),
        ]),
        F("timeout_ms", "int32", "10+", ignorable=True),
    ],
    response=[
        F("throttle_time_ms", "int32", "2+", ignorable=True),
        F("topics", "[]ListOffsetsTopicResponse", fields=[
            F("name", "string"),
            F("partitions", "[]ListOffsetsPartitionResponse", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("old_style_offsets", "[]int64", "0"),
                F("timestamp", "int64", "1+", default=-1),
                F("offset", "int64", "1+", default=-1),
                F("leader_epoch", "int32", "4+", default=-1),
            ]),
        ]),
    ],
)

OFFSET_FOR_LEADER_EPOCH = api(
    23,
    "OffsetForLeaderEpoch",
    valid="2-4",
    flexible="4+",
    request=[
        # -2 is the "debug consumer", allowed to see offsets beyond the high watermark.
        F("replica_id", "int32", "3+", default=-2, ignorable=True),
        F("topics", "[]OffsetForLeaderTopic", fields=[
            F("topic", "string"),
            F("partitions", "[]OffsetForLeaderPartition", fields=[
                F("partition", "int32"),
                F("current_leader_epoch", "int32", "2+", default=-1, ignorable=True),
                F("leader_epoch", "int32"),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32", "2+", ignorable=True),
        F("topics", "[]OffsetForLeaderTopicResult", fields=[
            F("topic", "string"),
            F("partitions", "[]EpochEndOffset", fields=[
                F("error_code", "int16"),
                F("partition", "int32"),
                F("leader_epoch", "int32", "1+", default=-1, ignorable=True),
                F("end_offset", "int64", default=-1),
            ]),
        ]),
    ],
)

APIS = [FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH]
