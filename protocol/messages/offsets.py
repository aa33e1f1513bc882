"""Committed consumer offsets: OffsetCommit (8), OffsetFetch (9) and OffsetDelete (47)."""

from ..schema import F, api

# Kafka 4 dropped OffsetCommit v0-1 (KIP-896); the field versions below still describe them as Kafka does.
OFFSET_COMMIT = api(
    8,
    "OffsetCommit",
    valid="2-10",
    flexible="8+",
    request=[
        F("group_id", "string"),
        # The classic generation id, or the member epoch for a KIP-848 consumer group (v9+).
        F("generation_id_or_member_epoch", "int32", "1+", default=-1, ignorable=True),
        F("member_id", "string", "1+", ignorable=True),
        F("group_instance_id", "string", "7+", nullable="7+", default=None),
        F("retention_time_ms", "int64", "2-4", default=-1, ignorable=True),
        F("topics", "[]OffsetCommitRequestTopic", fields=[
            # v10 addresses topics by id only; v0-9 by name only.
            F("name", "string", "0-9", ignorable=True),
            F("topic_id", "uuid", "10+", ignorable=True),
            F("partitions", "[]OffsetCommitRequestPartition", fields=[
                F("partition_index", "int32"),
                F("committed_offset", "int64"),
                F("committed_leader_epoch", "int32", "6+", default=-1, ignorable=True),
                F("commit_timestamp", "int64", "1", default=-1),
                F("committed_metadata", "string", nullable="0+"),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32", "3+", ignorable=True),
        F("topics", "[]OffsetCommitResponseTopic", fields=[
            F("name", "string", "0-9", ignorable=True),
            F("topic_id", "uuid", "10+", ignorable=True),
            F("partitions", "[]OffsetCommitResponsePartition", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
            ]),
        ]),
    ],
)

# Two shapes: v1-7 fetch for one group (top-level group_id/topics), v8+ batch several groups in `groups`.
OFFSET_FETCH = api(
    9,
    "OffsetFetch",
    valid="1-10",
    flexible="6+",
    request=[
        F("group_id", "string", "0-7"),
        # Null (v2+) asks for every topic the group has committed offsets for.
        F("topics", "[]OffsetFetchRequestTopic", "0-7", nullable="2-7", fields=[
            F("name", "string", "0-7"),
            F("partition_indexes", "[]int32", "0-7"),
        ]),
        F("groups", "[]OffsetFetchRequestGroup", "8+", fields=[
            F("group_id", "string", "8+"),
            F("member_id", "string", "9+", nullable="9+", default=None, ignorable=True),
            F("member_epoch", "int32", "9+", default=-1, ignorable=True),
            F("topics", "[]OffsetFetchRequestTopics", "8+", nullable="8+", fields=[
                F("name", "string", "8-9", ignorable=True),
                F("topic_id", "uuid", "10+", ignorable=True),
                F("partition_indexes", "[]int32", "8+"),
            ]),
        ]),
        F("require_stable", "bool", "7+", default=False),
    ],
    response=[
        F("throttle_time_ms", "int32", "3+", ignorable=True),
        F("topics", "[]OffsetFetchResponseTopic", "0-7", fields=[
            F("name", "string", "0-7"),
            F("partitions", "[]OffsetFetchResponsePartition", "0-7", fields=[
                F("partition_index", "int32", "0-7"),
                F("committed_offset", "int64", "0-7"),
                F("committed_leader_epoch", "int32", "5-7", default=-1, ignorable=True),
                F("metadata", "string", "0-7", nullable="0-7"),
                F("error_code", "int16", "0-7"),
            ]),
        ]),
        # v1 has no top-level error: group-level errors must be copied into every partition there.
        F("error_code", "int16", "2-7", default=0, ignorable=True),
        F("groups", "[]OffsetFetchResponseGroup", "8+", fields=[
            F("group_id", "string", "8+"),
            F("topics", "[]OffsetFetchResponseTopics", "8+", fields=[
                F("name", "string", "8-9", ignorable=True),
                F("topic_id", "uuid", "10+", ignorable=True),
                F("partitions", "[]OffsetFetchResponsePartitions", "8+", fields=[
                    F("partition_index", "int32", "8+"),
                    F("committed_offset", "int64", "8+"),
                    F("committed_leader_epoch", "int32", "8+", default=-1, ignorable=True),
                    F("metadata", "string", "8+", nullable="8+"),
                    F("error_code", "int16", "8+"),
                ]),
            ]),
            F("error_code", "int16", "8+", default=0),
        ]),
    ],
)

OFFSET_DELETE = api(
    47,
    "OffsetDelete",
    valid="0",
    flexible="none",
    request=[
        F("group_id", "string"),
        F("topics", "[]OffsetDeleteRequestTopic", fields=[
            F("name", "string"),
            F("partitions", "[]OffsetDeleteRequestPartition", fields=[
                F("partition_index", "int32"),
            ]),
        ]),
    ],
    response=[
        F("error_code", "int16"),
        F("throttle_time_ms", "int32", ignorable=True),
        F("topics", "[]OffsetDeleteResponseTopic", fields=[
            F("name", "string"),
            F("partitions", "[]OffsetDeleteResponsePartition", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
            ]),
        ]),
    ],
)

APIS = [OFFSET_COMMIT, OFFSET_FETCH, OFFSET_DELETE]
