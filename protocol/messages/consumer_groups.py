"""The KIP-848 consumer group protocol: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69), as of Kafka 4.1."""

from ..schema import F, api

# Most request fields are null when unchanged since the member's previous heartbeat: the coordinator
# keeps the last value, so null means "same as before", not "clear it".
# From v1 the client generates its own member_id (KIP-1082) and may subscribe by regex.
CONSUMER_GROUP_HEARTBEAT = api(
    68,
    "ConsumerGroupHeartbeat",
    valid="0-1",
    flexible="0+",
    request=[
        F("group_id", "string"),
        F("member_id", "string"),
        # 0 joins, -1 leaves, -2 announces that a static member will come back.
        F("member_epoch", "int32"),
        F("instance_id", "string", nullable="0+", default=None),
        F("rack_id", "string", nullable="0+", default=None),
        F("rebalance_timeout_ms", "int32", default=-1),
        F("subscribed_topic_names", "[]string", nullable="0+", default=None),
        F("subscribed_topic_regex", "string", "1+", nullable="1+", default=None),
        F("server_assignor", "string", nullable="0+", default=None),
        F("topic_partitions", "[]TopicPartitions", nullable="0+", default=None, fields=[
            F("topic_id", "uuid"),
            F("partitions", "[]int32"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("member_id", "string", nullable="0+", default=None),
        F("member_epoch", "int32"),
        F("heartbeat_interval_ms", "int32"),
        F("assignment", "Assignment", nullable="0+", default=None, fields=[
            F("topic_partitions", "[]TopicPartitions", fields=[
                F("topic_id", "uuid"),
                F("partitions", "[]int32"),
            ]),
        ]),
    ],
)

CONSUMER_GROUP_DESCRIBE = api(
    69,
    "ConsumerGroupDescribe",
    valid="0-1",
    flexible="0+",
    request=[
        # v1 differs only in the response (member_type).
        F("group_ids", "[]string"),
        F("include_authorized_operations", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("groups", "[]DescribedGroup", fields=[
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
            F("group_id", "string"),
            F("group_state", "string"),
            F("group_epoch", "int32"),
            F("assignment_epoch", "int32"),
            F("assignor_name", "string"),
            F("members", "[]Member", fields=[
                F("member_id", "string"),
                F("instance_id", "string", nullable="0+", default=None),
                F("rack_id", "string", nullable="0+", default=None),
                F("member_epoch", "int32"),
                F("client_id", "string"),
                F("client_host", "string"),
                F("subscribed_topic_names", "[]string"),
                F("subscribed_topic_regex", "string", nullable="0+", default=None),
                F("assignment", "Assignment", fields=[
                    F("topic_partitions", "[]TopicPartitions", fields=[
                        F("topic_id", "uuid"),
                        F("topic_name", "string"),
                        F("partitions", "[]int32"),
                    ]),
                ]),
                F("target_assignment", "Assignment", fields=[
                    F("topic_partitions", "[]TopicPartitions", fields=[
                        F("topic_id", "uuid"),
                        F("topic_name", "string"),
                        F("partitions", "[]int32"),
                    ]),
                ]),
                # -1 unknown, 0 classic member (joined through JoinGroup), 1 consumer-protocol member.
                F("member_type", "int8", "1+", default=-1, ignorable=True),
            ]),
            F("authorized_operations", "int32", default=-2147483648),
        ]),
    ],
)

APIS = [CONSUMER_GROUP_HEARTBEAT, CONSUMER_GROUP_DESCRIBE]
