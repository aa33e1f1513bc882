"""KRaft quorum and inter-broker APIs: Vote, Begin/EndQuorumEpoch, DescribeQuorum, AlterPartition,
FetchSnapshot, BrokerRegistration, BrokerHeartbeat, UnregisterBroker and AllocateProducerIds.

Only DescribeQuorum is also served on the broker listener (forwarded to the controller); the others are
spoken between our own nodes. Kafka's shared structs (DescribeQuorum's ReplicaState) are written out
inline wherever they are used.
"""

from ..schema import F, api


def _endpoints(name: str, struct: str, versions: str, **kw) -> F:
    """A leader/node endpoint list as used by the KIP-853 quorum messages (name, host and uint16 port)."""
    first = F("node_id", "int32", versions) if struct == "NodeEndpoint" else F("name", "string", versions)
    return F(name, f"[]{struct}", versions, fields=[
        first,
        F("host", "string", versions),
        F("port", "uint16", versions),
    ], **kw)


VOTE = api(
    52,
    "Vote",
    valid="0-2",
    flexible="0+",
    request=[
        F("cluster_id", "string", nullable="0+", default=None),
        F("voter_id", "int32", "1+", default=-1, ignorable=True),
        F("topics", "[]TopicData", fields=[
            F("topic_name", "string"),
            F("partitions", "[]PartitionData", fields=[
                F("partition_index", "int32"),
                F("replica_epoch", "int32"),
                F("replica_id", "int32"),
                F("replica_directory_id", "uuid", "1+", ignorable=True),
                F("voter_directory_id", "uuid", "1+", ignorable=True),
                F("last_offset_epoch", "int32"),
                F("last_offset", "int64"),
                F("pre_vote", "bool", "2+"),
            ]),
        ]),
    ],
    response=[
        F("error_code", "int16"),
        F("topics", "[]TopicData", fields=[
            F("topic_name", "string"),
            F("partitions", "[]PartitionData", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("leader_id", "int32"),
                F("leader_epoch", "int32"),
                F("vote_granted", "bool"),
                F("pre_vote", "bool", "2+"),
            ]),
        ]),
        _endpoints("node_endpoints", "NodeEndpoint", "1+", tag=0),
    ],
)

BEGIN_QUORUM_EPOCH = api(
    53,
    "BeginQuorumEpoch",
    valid="0-1",
    flexible="1+",
    request=[
        F("cluster_id", "string", nullable="0+", default=None),
        F("voter_id", "int32", "1+", default=-1, ignorable=True),
        F("topics", "[]TopicData", fields=[
            F("topic_name", "string"),
            F("partitions", "[]PartitionData", fields=[
                F("partition_index", "int32"),
                F("voter_directory_id", "uuid", "1+", ignorable=True),
                F("leader_id", "int32"),
                F("leader_epoch", "int32"),
            ]),
        ]),
        _endpoints("leader_endpoints", "LeaderEndpoint", "1+", ignorable=True),
    ],
    response=[
        F("error_code", "int16"),
        F("topics", "[]TopicData", fields=[
            F("topic_name", "string"),
            F("partitions", "[]PartitionData", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("leader_id", "int32"),
                F("leader_epoch", "int32"),
            ]),
        ]),
        _endpoints("node_endpoints", "NodeEndpoint", "1+", tag=0),
    ],
)

END_QUORUM_EPOCH = api(
    54,
    "EndQuorumEpoch",
    valid="0-1",
    flexible="1+",
    request=[
        F("cluster_id", "string", nullable="0+", default=None),
        F("topics", "[]TopicData", fields=[
            F("topic_name", "string"),
            F("partitions", "[]PartitionData", fields=[
                F("partition_index", "int32"),
                F("leader_id", "int32"),
                F("leader_epoch", "int32"),
                # v0 names successors by ID only; v1 adds their directory IDs (KIP-853).
                F("preferred_successors", "[]int32", "0", ignorable=True),
                F("preferred_candidates", "[]ReplicaInfo", "1+", ignorable=True, fields=[
                    F("candidate_id", "int32", "1+"),
                    F("candidate_directory_id", "uuid", "1+"),
                ]),
            ]),
        ]),
        _endpoints("leader_endpoints", "LeaderEndpoint", "1+", ignorable=True),
    ],
    response=[
        F("error_code", "int16"),
        F("topics", "[]TopicData", fields=[
            F("topic_name", "string"),
            F("partitions", "[]PartitionData", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("leader_id", "int32"),
                F("leader_epoch", "int32"),
            ]),
        ]),
        _endpoints("node_endpoints", "NodeEndpoint", "1+", tag=0),
    ],
)


def _replica_state() -> list[F]:
    """Kafka's ReplicaState common struct (DescribeQuorum's voters and observers)."""
    return [
        F("replica_id", "int32"),
        F("replica_directory_id", "uuid", "2+"),
        F("log_end_offset", "int64"),
        F("last_fetch_timestamp", "int64", "1+", default=-1, ignorable=True),
        F("last_caught_up_timestamp", "int64", "1+", default=-1, ignorable=True),
    ]


DESCRIBE_QUORUM = api(
    55,
    "DescribeQuorum",
    valid="0-2",
    flexible="0+",
    request=[
        F("topics", "[]TopicData", fields=[
            F("topic_name", "string"),
            F("partitions", "[]PartitionData", fields=[
                F("partition_index", "int32"),
            ]),
        ]),
    ],
    response=[
        F("error_code", "int16"),
        F("error_message", "string", "2+", nullable="2+", ignorable=True),
        F("topics", "[]TopicData", fields=[
            F("topic_name", "string"),
            F("partitions", "[]PartitionData", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", "2+", nullable="2+", ignorable=True),
                F("leader_id", "int32"),
                F("leader_epoch", "int32"),
                F("high_watermark", "int64"),
                F("current_voters", "[]ReplicaState", fields=_replica_state()),
                F("observers", "[]ReplicaState", fields=_replica_state()),
            ]),
        ]),
        F("nodes", "[]Node", "2+", fields=[
            F("node_id", "int32", "2+"),
            F("listeners", "[]Listener", "2+", fields=[
                F("name", "string", "2+"),
                F("host", "string", "2+"),
                F("port", "uint16", "2+"),
            ]),
        ]),
    ],
)

# Versions 0-1 (topic names) were removed in Kafka 4.0; v2 addresses topics by ID, v3 adds broker epochs
# to the new ISR (KIP-903).
ALTER_PARTITION = api(
    56,
    "AlterPartition",
    valid="2-3",
    flexible="0+",
    request=[
        F("broker_id", "int32"),
        F("broker_epoch", "int64", default=-1),
        F("topics", "[]TopicData", fields=[
            F("topic_id", "uuid", "2+", ignorable=True),
            F("partitions", "[]PartitionData", fields=[
                F("partition_index", "int32"),
                F("leader_epoch", "int32"),
                F("new_isr", "[]int32", "0-2"),
                F("new_isr_with_epochs", "[]BrokerState", "3+", fields=[
                    F("broker_id", "int32", "3+"),
                    F("broker_epoch", "int64", "3+", default=-1),
                ]),
                F("leader_recovery_state", "int8", "1+", default=0),
                F("partition_epoch", "int32"),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("topics", "[]TopicData", fields=[
            F("topic_id", "uuid", "2+", ignorable=True),
            F("partitions", "[]PartitionData", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("leader_id", "int32"),
                F("leader_epoch", "int32"),
                F("isr", "[]int32"),
                F("leader_recovery_state", "int8", "1+", default=0, ignorable=True),
                F("partition_epoch", "int32"),
            ]),
        ]),
    ],
)

FETCH_SNAPSHOT = api(
    59,
    "FetchSnapshot",
    valid="0-1",
    flexible="0+",
    request=[
        F("cluster_id", "string", nullable="0+", default=None, tag=0),
        F("replica_id", "int32", default=-1),
        F("max_bytes", "int32", default=0x7FFFFFFF),
        F("topics", "[]TopicSnapshot", fields=[
            F("name", "string"),
            F("partitions", "[]PartitionSnapshot", fields=[
                F("partition", "int32"),
                F("current_leader_epoch", "int32"),
                F("snapshot_id", "SnapshotId", fields=[
                    F("end_offset", "int64"),
                    F("epoch", "int32"),
                ]),
                F("position", "int64"),
                F("replica_directory_id", "uuid", "1+", ignorable=True, tag=0),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32", ignorable=True),
        F("error_code", "int16"),
        F("topics", "[]TopicSnapshot", fields=[
            F("name", "string"),
            F("partitions", "[]PartitionSnapshot", fields=[
                F("index", "int32"),
                F("error_code", "int16"),
                F("snapshot_id", "SnapshotId", fields=[
                    F("end_offset", "int64"),
                    F("epoch", "int32"),
                ]),
                F("current_leader", "LeaderIdAndEpoch", tag=0, fields=[
                    F("leader_id", "int32"),
                    F("leader_epoch", "int32"),
                ]),
                F("size", "int64"),
                F("position", "int64"),
                F("unaligned_records", "records"),
            ]),
        ]),
        _endpoints("node_endpoints", "NodeEndpoint", "1+", tag=0),
    ],
)

# v1 IsMigratingZkBroker, v2 LogDirs (KIP-858), v3 PreviousBrokerEpoch (KIP-966), v4 lets features with
# MinSupportedVersion 0 through (KAFKA-17011), v5 CordonedLogDirs (tagged).
BROKER_REGISTRATION = api(
    62,
    "BrokerRegistration",
    valid="0-5",
    flexible="0+",
    request=[
        F("broker_id", "int32"),
        F("cluster_id", "string"),
        F("incarnation_id", "uuid"),
        F("listeners", "[]Listener", fields=[
            F("name", "string"),
            F("host", "string"),
            F("port", "uint16"),
            F("security_protocol", "int16"),
        ]),
        F("features", "[]Feature", fields=[
            F("name", "string"),
            F("min_supported_version", "int16"),
            F("max_supported_version", "int16"),
        ]),
        F("rack", "string", nullable="0+"),
        F("is_migrating_zk_broker", "bool", "1+", default=False),
        F("log_dirs", "[]uuid", "2+", ignorable=True),
        F("previous_broker_epoch", "int64", "3+", default=-1, ignorable=True),
        F("cordoned_log_dirs", "[]uuid", "5+", tag=0),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("broker_epoch", "int64", default=-1),
    ],
)

# v1 OfflineLogDirs, v2 CordonedLogDirs (both tagged); the response is unchanged.
BROKER_HEARTBEAT = api(
    63,
    "BrokerHeartbeat",
    valid="0-2",
    flexible="0+",
    request=[
        F("broker_id", "int32"),
        F("broker_epoch", "int64", default=-1),
        F("current_metadata_offset", "int64"),
        F("want_fence", "bool"),
        F("want_shut_down", "bool"),
        F("offline_log_dirs", "[]uuid", "1+", tag=0),
        F("cordoned_log_dirs", "[]uuid", "2+", tag=1),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("is_caught_up", "bool", default=False),
        F("is_fenced", "bool", default=True),
        F("should_shut_down", "bool"),
    ],
)

UNREGISTER_BROKER = api(
    64,
    "UnregisterBroker",
    valid="0",
    flexible="0+",
    request=[
        F("broker_id", "int32"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("error_message", "string", nullable="0+"),
    ],
)

ALLOCATE_PRODUCER_IDS = api(
    67,
    "AllocateProducerIds",
    valid="0",
    flexible="0+",
    request=[
        F("broker_id", "int32"),
        F("broker_epoch", "int64", default=-1),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("producer_id_start", "int64"),
        F("producer_id_len", "int32"),
    ],
)

# A broker tells the active controller which log directory each of its replicas is in (KIP-858); a
# replica assigned to a directory that is not online (DirectoryId.LOST) is offline on that broker.
ASSIGN_REPLICAS_TO_DIRS = api(
    73,
    "AssignReplicasToDirs",
    valid="0",
    flexible="0+",
    request=[
        F("broker_id", "int32"),
        F("broker_epoch", "int64", default=-1),
        F("directories", "[]DirectoryData", fields=[
            F("id", "uuid"),
            F("topics", "[]TopicData", fields=[
                F("topic_id", "uuid"),
                F("partitions", "[]PartitionData", fields=[
                    F("partition_index", "int32"),
                ]),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("directories", "[]DirectoryData", fields=[
            F("id", "uuid"),
            F("topics", "[]TopicData", fields=[
                F("topic_id", "uuid"),
                F("partitions", "[]PartitionData", fields=[
                    F("partition_index", "int32"),
                    F("error_code", "int16"),
                ]),
            ]),
        ]),
    ],
)

APIS = [
    VOTE,
    BEGIN_QUORUM_EPOCH,
    END_QUORUM_EPOCH,
    DESCRIBE_QUORUM,
    ALTER_PARTITION,
    FETCH_SNAPSHOT,
    BROKER_REGISTRATION,
    BROKER_HEARTBEAT,
    UNREGISTER_BROKER,
    ALLOCATE_PRODUCER_IDS,
    ASSIGN_REPLICAS_TO_DIRS,
]
