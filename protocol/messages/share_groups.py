"""Share groups (KIP-932, "queues for Kafka"): the twelve share APIs and the `__share_group_state` records.

Versions are Kafka 4.2's, which 4.3 and 4.4 keep (see ../shared/reference/kafka-protocol.md, §1.2 and §2):

    76 ShareGroupHeartbeat 1          83 InitializeShareGroupState 0     90 DescribeShareGroupOffsets 0-1
    77 ShareGroupDescribe 1           84 ReadShareGroupState 0           91 AlterShareGroupOffsets 0
    78 ShareFetch 1-2                 85 WriteShareGroupState 0-1        92 DeleteShareGroupOffsets 0
    79 ShareAcknowledge 1-2           86 DeleteShareGroupState 0
                                      87 ReadShareGroupStateSummary 0-1

Version 0 of 76-79 was Kafka 4.0's early-access protocol and was removed in 4.1 (no client sends it any
more), so those ranges start at 1. Field versions are written as Kafka's JSON writes them ("0+" where the
JSON does), which is why a field may name versions below the valid range: the codec only ever sees valid
versions. The later versions add:

* ShareFetch v2 / ShareAcknowledge v2 (KIP-1206, KIP-1222): `share_acquire_mode` (0 batch-optimized,
  1 record-limit: never hand out more than `max_records`, even mid-batch), the RENEW acknowledge type (4),
  which extends a lock instead of ending it, `is_renew_ack` on ShareFetch and ShareAcknowledge (a ShareFetch
  carrying it only acknowledges: it fetches nothing), and the lock duration in
  the ShareAcknowledge response so a renewing client learns its new deadline.
* WriteShareGroupState v1 / ReadShareGroupStateSummary v1 / DescribeShareGroupOffsets v1 (KIP-1226):
  the count of records at or past the start offset whose delivery is complete, from which the lag of a
  share group is computed.

Nothing here is served yet: ApiVersions is derived from the registered handlers (broker/handlers), so
these definitions advertise nothing until a handler for each API exists.

Acknowledge types on the wire (ShareFetch/ShareAcknowledge `acknowledge_types`): 0 gap (an offset that is
not a record, e.g. a compacted-away or control offset), 1 accept, 2 release, 3 reject, 4 renew. One type
applies to the whole range; several types are one per offset of the range. Delivery states in the share
coordinator's state batches: 0 available, 2 acknowledged, 4 archived (1, acquired, is never persisted: a
lock does not survive its leader).
"""

from ..schema import Api, F, api

# ---- The consumer-facing APIs (76-79) -------------------------------------------------------------

# As ConsumerGroupHeartbeat, null means "unchanged since my last heartbeat". Member epoch 0 joins, -1
# leaves. There is no rebalance timeout and no server assignor: share-group members never revoke (a
# partition may have many members) and the assignor is the broker's `group.share.assignors`.
SHARE_GROUP_HEARTBEAT = api(
    76,
    "ShareGroupHeartbeat",
    valid="1",
    flexible="0+",
    request=[
        F("group_id", "string"),
        F("member_id", "string"),
        F("member_epoch", "int32"),
        F("rack_id", "string", nullable="0+", default=None),
        F("subscribed_topic_names", "[]string", nullable="0+", default=None),
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

_DESCRIBED_TOPIC_PARTITIONS = [
    F("topic_id", "uuid", "1+"),
    F("topic_name", "string", "1+"),
    F("partitions", "[]int32", "1+"),
]

SHARE_GROUP_DESCRIBE = api(
    77,
    "ShareGroupDescribe",
    valid="1",
    flexible="1+",
    request=[
        F("group_ids", "[]string", "1+"),
        F("include_authorized_operations", "bool", "1+"),
    ],
    response=[
        F("throttle_time_ms", "int32", "1+"),
        F("groups", "[]DescribedGroup", "1+", fields=[
            F("error_code", "int16", "1+"),
            F("error_message", "string", "1+", nullable="1+", default=None),
            F("group_id", "string", "1+"),
            F("group_state", "string", "1+"),
            F("group_epoch", "int32", "1+"),
            F("assignment_epoch", "int32", "1+"),
            F("assignor_name", "string", "1+"),
            F("members", "[]Member", "1+", fields=[
                F("member_id", "string", "1+"),
                F("rack_id", "string", "1+", nullable="1+", default=None),
                F("member_epoch", "int32", "1+"),
                F("client_id", "string", "1+"),
                F("client_host", "string", "1+"),
                F("subscribed_topic_names", "[]string", "1+"),
                F("assignment", "Assignment", "1+", fields=[
                    F("topic_partitions", "[]TopicPartitions", "1+", fields=list(_DESCRIBED_TOPIC_PARTITIONS)),
                ]),
            ]),
            F("authorized_operations", "int32", "1+", default=-2147483648),
        ]),
    ],
)


def _ack_batches() -> F:
    """AcknowledgementBatch, shared by ShareFetch and ShareAcknowledge: an inclusive offset range and either
    one type for all of it or one type per offset."""
    return F("acknowledgement_batches", "[]AcknowledgementBatch", fields=[
        F("first_offset", "int64"),
        F("last_offset", "int64"),
        F("acknowledge_types", "[]int8"),
    ])


def _current_leader() -> F:
    return F("current_leader", "LeaderIdAndEpoch", fields=[
        F("leader_id", "int32"),
        F("leader_epoch", "int32"),
    ])


def _node_endpoints() -> F:
    # Unlike Fetch v16+, not a tagged field: a plain array in every version.
    return F("node_endpoints", "[]NodeEndpoint", fields=[
        F("node_id", "int32"),
        F("host", "string"),
        F("port", "int32"),
        F("rack", "string", nullable="0+", default=None),
    ])


# A share session (epoch 0 opens, -1 closes, otherwise the next epoch) names the partitions once; later
# requests carry only changes and piggy-back acknowledgements. `max_records` caps the records acquired per
# partition (batch-aligned unless share_acquire_mode is 1, record-limit), `batch_size` is the size the
# leader should cut acquired ranges to.
SHARE_FETCH = api(
    78,
    "ShareFetch",
    valid="1-2",
    flexible="0+",
    request=[
        F("group_id", "string", nullable="0+", default=None),
        F("member_id", "string", nullable="0+"),
        F("share_session_epoch", "int32"),
        F("max_wait_ms", "int32"),
        F("min_bytes", "int32"),
        F("max_bytes", "int32", default=0x7FFFFFFF),
        F("max_records", "int32", "1+"),
        F("batch_size", "int32", "1+"),
        F("share_acquire_mode", "int8", "2+", default=0, ignorable=True),
        F("is_renew_ack", "bool", "2+", default=False),
        F("topics", "[]FetchTopic", fields=[
            F("topic_id", "uuid"),
            F("partitions", "[]FetchPartition", fields=[
                F("partition_index", "int32"),
                F("partition_max_bytes", "int32", "0"),
                _ack_batches(),
            ]),
        ]),
        F("forgotten_topics_data", "[]ForgottenTopic", fields=[
            F("topic_id", "uuid"),
            F("partitions", "[]int32"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("acquisition_lock_timeout_ms", "int32"),
        F("responses", "[]ShareFetchableTopicResponse", fields=[
            F("topic_id", "uuid"),
            F("partitions", "[]PartitionData", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+", default=None),
                F("acknowledge_error_code", "int16"),
                F("acknowledge_error_message", "string", nullable="0+", default=None),
                _current_leader(),
                F("records", "records", nullable="0+"),
                F("acquired_records", "[]AcquiredRecords", fields=[
                    F("first_offset", "int64"),
                    F("last_offset", "int64"),
                    F("delivery_count", "int16"),
                ]),
            ]),
        ]),
        _node_endpoints(),
    ],
)

SHARE_ACKNOWLEDGE = api(
    79,
    "ShareAcknowledge",
    valid="1-2",
    flexible="0+",
    request=[
        F("group_id", "string", nullable="0+", default=None),
        F("member_id", "string", nullable="0+"),
        F("share_session_epoch", "int32"),
        F("is_renew_ack", "bool", "2+", default=False),
        F("topics", "[]AcknowledgeTopic", fields=[
            F("topic_id", "uuid"),
            F("partitions", "[]AcknowledgePartition", fields=[
                F("partition_index", "int32"),
                _ack_batches(),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        F("acquisition_lock_timeout_ms", "int32", "2+", ignorable=True),
        F("responses", "[]ShareAcknowledgeTopicResponse", fields=[
            F("topic_id", "uuid"),
            F("partitions", "[]PartitionData", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+", default=None),
                _current_leader(),
            ]),
        ]),
        _node_endpoints(),
    ],
)

# ---- Share-partition leader <-> share coordinator (83-87) ----------------------------------------
# The state epoch fences a share partition's state across offset resets (AlterShareGroupOffsets bumps it);
# the leader epoch fences a deposed partition leader's writes (FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH).


def _state_batches() -> F:
    return F("state_batches", "[]StateBatch", fields=[
        F("first_offset", "int64"),
        F("last_offset", "int64"),
        F("delivery_state", "int8"),
        F("delivery_count", "int16"),
    ])


def _partition_results(name: str, extra: list[F] | None = None) -> list[F]:
    """The `results` array every state response carries: per topic, per partition, a code and message."""
    return [
        F("results", f"[]{name}", fields=[
            F("topic_id", "uuid"),
            F("partitions", "[]PartitionResult", fields=[
                F("partition", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+", default=None),
                *(extra or []),
            ]),
        ]),
    ]


INITIALIZE_SHARE_GROUP_STATE = api(
    83,
    "InitializeShareGroupState",
    valid="0",
    flexible="0+",
    request=[
        F("group_id", "string"),
        F("topics", "[]InitializeStateData", fields=[
            F("topic_id", "uuid"),
            F("partitions", "[]PartitionData", fields=[
                F("partition", "int32"),
                F("state_epoch", "int32"),
                F("start_offset", "int64"),
            ]),
        ]),
    ],
    response=_partition_results("InitializeStateResult"),
)

READ_SHARE_GROUP_STATE = api(
    84,
    "ReadShareGroupState",
    valid="0",
    flexible="0+",
    request=[
        F("group_id", "string"),
        F("topics", "[]ReadStateData", fields=[
            F("topic_id", "uuid"),
            F("partitions", "[]PartitionData", fields=[
                F("partition", "int32"),
                F("leader_epoch", "int32"),
            ]),
        ]),
    ],
    response=_partition_results("ReadStateResult", [
        F("state_epoch", "int32"),
        F("start_offset", "int64"),
        _state_batches(),
    ]),
)

WRITE_SHARE_GROUP_STATE = api(
    85,
    "WriteShareGroupState",
    valid="0-1",
    flexible="0+",
    request=[
        F("group_id", "string"),
        F("topics", "[]WriteStateData", fields=[
            F("topic_id", "uuid"),
            F("partitions", "[]PartitionData", fields=[
                F("partition", "int32"),
                F("state_epoch", "int32"),
                F("leader_epoch", "int32"),
                # -1: the start offset is not being written.
                F("start_offset", "int64"),
                F("delivery_complete_count", "int32", "1+", default=-1, ignorable=True),
                _state_batches(),
            ]),
        ]),
    ],
    response=_partition_results("WriteStateResult"),
)

DELETE_SHARE_GROUP_STATE = api(
    86,
    "DeleteShareGroupState",
    valid="0",
    flexible="0+",
    request=[
        F("group_id", "string"),
        F("topics", "[]DeleteStateData", fields=[
            F("topic_id", "uuid"),
            F("partitions", "[]PartitionData", fields=[
                F("partition", "int32"),
            ]),
        ]),
    ],
    response=_partition_results("DeleteStateResult"),
)

READ_SHARE_GROUP_STATE_SUMMARY = api(
    87,
    "ReadShareGroupStateSummary",
    valid="0-1",
    flexible="0+",
    request=[
        F("group_id", "string"),
        F("topics", "[]ReadStateSummaryData", fields=[
            F("topic_id", "uuid"),
            F("partitions", "[]PartitionData", fields=[
                F("partition", "int32"),
                F("leader_epoch", "int32"),
            ]),
        ]),
    ],
    response=_partition_results("ReadStateSummaryResult", [
        F("state_epoch", "int32"),
        F("leader_epoch", "int32"),
        F("start_offset", "int64"),
        F("delivery_complete_count", "int32", "1+", default=-1, ignorable=True),
    ]),
)

# ---- Admin (90-92), answered by the group coordinator ----------------------------------------------

DESCRIBE_SHARE_GROUP_OFFSETS = api(
    90,
    "DescribeShareGroupOffsets",
    valid="0-1",
    flexible="0+",
    request=[
        F("groups", "[]DescribeShareGroupOffsetsRequestGroup", fields=[
            F("group_id", "string"),
            # null: every topic partition the group has state for.
            F("topics", "[]DescribeShareGroupOffsetsRequestTopic", nullable="0+", fields=[
                F("topic_name", "string"),
                F("partitions", "[]int32"),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("groups", "[]DescribeShareGroupOffsetsResponseGroup", fields=[
            F("group_id", "string"),
            F("topics", "[]DescribeShareGroupOffsetsResponseTopic", fields=[
                F("topic_name", "string"),
                F("topic_id", "uuid"),
                F("partitions", "[]DescribeShareGroupOffsetsResponsePartition", fields=[
                    F("partition_index", "int32"),
                    F("start_offset", "int64"),
                    F("leader_epoch", "int32"),
                    # -1 when unknown (v0 brokers, or state written without a delivery-complete count).
                    F("lag", "int64", "1+", default=-1, ignorable=True),
                    F("error_code", "int16"),
                    F("error_message", "string", nullable="0+", default=None),
                ]),
            ]),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
        ]),
    ],
)


def _topic_partition_errors(prefix: str) -> F:
    return F("responses", f"[]{prefix}ResponseTopic", fields=[
        F("topic_name", "string"),
        F("topic_id", "uuid"),
        F("partitions", f"[]{prefix}ResponsePartition", fields=[
            F("partition_index", "int32"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
        ]),
    ])


ALTER_SHARE_GROUP_OFFSETS = api(
    91,
    "AlterShareGroupOffsets",
    valid="0",
    flexible="0+",
    request=[
        F("group_id", "string"),
        F("topics", "[]AlterShareGroupOffsetsRequestTopic", fields=[
            F("topic_name", "string"),
            F("partitions", "[]AlterShareGroupOffsetsRequestPartition", fields=[
                F("partition_index", "int32"),
                F("start_offset", "int64"),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        _topic_partition_errors("AlterShareGroupOffsets"),
    ],
)

DELETE_SHARE_GROUP_OFFSETS = api(
    92,
    "DeleteShareGroupOffsets",
    valid="0",
    flexible="0+",
    request=[
        F("group_id", "string"),
        F("topics", "[]DeleteShareGroupOffsetsRequestTopic", fields=[
            F("topic_name", "string"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+", default=None),
        # Errors per topic, not per partition: the whole topic's state goes (Kafka's
        # DeleteShareGroupOffsetsResponse.json).
        F("responses", "[]DeleteShareGroupOffsetsResponseTopic", fields=[
            F("topic_name", "string"),
            F("topic_id", "uuid"),
            F("error_code", "int16"),
            F("error_message", "string", nullable="0+", default=None),
        ]),
    ],
)

# ---- __share_group_state records (share-coordinator/src/main/resources/common/message) -------------
# Keys are coordinator-record keys 0 (snapshot) and 1 (update); a snapshot holds the whole state of one
# share partition, an update the batches changed since, applied on top of the latest snapshot when the
# coordinator loads. Keys are not flexible; values are. DATA ids -10..-13 are placeholders that cannot
# collide with a real api key.

_SHARE_RECORD_KEY = [F("group_id", "string"), F("topic_id", "uuid"), F("partition", "int32")]

SHARE_SNAPSHOT_KEY = api(
    key=-10, name="ShareSnapshotKey", valid="0", flexible="none", request=list(_SHARE_RECORD_KEY), response=[],
)
SHARE_SNAPSHOT_VALUE = api(
    key=-11,
    name="ShareSnapshotValue",
    valid="0",
    flexible="0+",
    request=[
        F("snapshot_epoch", "int32"),
        F("state_epoch", "int32"),
        F("leader_epoch", "int32"),
        F("start_offset", "int64"),
        # KIP-1226 (Kafka 4.2): a tagged field, so records written before it still decode (-1: unknown).
        F("delivery_complete_count", "int32", default=-1, tag=0, tagged="0+"),
        F("create_timestamp", "int64"),
        F("write_timestamp", "int64"),
        _state_batches(),
    ],
    response=[],
)
SHARE_UPDATE_KEY = api(
    key=-12, name="ShareUpdateKey", valid="0", flexible="none", request=list(_SHARE_RECORD_KEY), response=[],
)
SHARE_UPDATE_VALUE = api(
    key=-13,
    name="ShareUpdateValue",
    valid="0",
    flexible="0+",
    request=[
        F("snapshot_epoch", "int32"),
        F("leader_epoch", "int32"),
        # -1: the start offset is not being updated.
        F("start_offset", "int64"),
        F("delivery_complete_count", "int32", default=-1, tag=0, tagged="0+"),
        _state_batches(),
    ],
    response=[],
)

APIS: list[Api] = [
    SHARE_GROUP_HEARTBEAT,
    SHARE_GROUP_DESCRIBE,
    SHARE_FETCH,
    SHARE_ACKNOWLEDGE,
    INITIALIZE_SHARE_GROUP_STATE,
    READ_SHARE_GROUP_STATE,
    WRITE_SHARE_GROUP_STATE,
    DELETE_SHARE_GROUP_STATE,
    READ_SHARE_GROUP_STATE_SUMMARY,
    DESCRIBE_SHARE_GROUP_OFFSETS,
    ALTER_SHARE_GROUP_OFFSETS,
    DELETE_SHARE_GROUP_OFFSETS,
]
DATA = [SHARE_SNAPSHOT_KEY, SHARE_SNAPSHOT_VALUE, SHARE_UPDATE_KEY, SHARE_UPDATE_VALUE]
