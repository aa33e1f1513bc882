"""Transaction coordination (24-28) and the transaction/producer admin APIs (61, 65, 66)."""

from ..schema import F, api

# Two shapes in one API: v0-3 are sent by clients for a single transaction (the v3_and_below_* fields);
# v4+ are sent by brokers and batch several transactions (`transactions`, `results_by_transaction`).
ADD_PARTITIONS_TO_TXN = api(
    24,
    "AddPartitionsToTxn",
    valid="0-5",
    flexible="3+",
    request=[
        F("transactions", "[]AddPartitionsToTxnTransaction", "4+", fields=[
            F("transactional_id", "string", "4+"),
            F("producer_id", "int64", "4+"),
            F("producer_epoch", "int16", "4+"),
            F("verify_only", "bool", "4+", default=False),
            F("topics", "[]AddPartitionsToTxnTopic", "4+", fields=[
                F("name", "string"),
                F("partitions", "[]int32"),
            ]),
        ]),
        F("v3_and_below_transactional_id", "string", "0-3"),
        F("v3_and_below_producer_id", "int64", "0-3"),
        F("v3_and_below_producer_epoch", "int16", "0-3"),
        F("v3_and_below_topics", "[]AddPartitionsToTxnTopic", "0-3", fields=[
            F("name", "string"),
            F("partitions", "[]int32"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16", "4+", ignorable=True),
        F("results_by_transaction", "[]AddPartitionsToTxnResult", "4+", fields=[
            F("transactional_id", "string", "4+"),
            F("topic_results", "[]AddPartitionsToTxnTopicResult", "4+", fields=[
                F("name", "string"),
                F("results_by_partition", "[]AddPartitionsToTxnPartitionResult", fields=[
                    F("partition_index", "int32"),
                    F("partition_error_code", "int16"),
                ]),
            ]),
        ]),
        F("results_by_topic_v3_and_below", "[]AddPartitionsToTxnTopicResult", "0-3", fields=[
            F("name", "string"),
            F("results_by_partition", "[]AddPartitionsToTxnPartitionResult", fields=[
                F("partition_index", "int32"),
                F("partition_error_code", "int16"),
            ]),
        ]),
    ],
)

ADD_OFFSETS_TO_TXN = api(
    25,
    "AddOffsetsToTxn",
    valid="0-4",
    flexible="3+",
    request=[
        F("transactional_id", "string"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("group_id", "string"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
    ],
)

END_TXN = api(
    26,
    "EndTxn",
    valid="0-5",
    flexible="3+",
    request=[
        F("transactional_id", "string"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("committed", "bool"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("producer_id", "int64", "5+", default=-1, ignorable=True),
        F("producer_epoch", "int16", "5+", default=-1, ignorable=True),
    ],
)

WRITE_TXN_MARKERS = api(
    27,
    "WriteTxnMarkers",
    valid="1-2",
    flexible="1+",
    request=[
        F("markers", "[]WritableTxnMarker", fields=[
            F("producer_id", "int64"),
            F("producer_epoch", "int16"),
            F("transaction_result", "bool"),  # false = abort, true = commit
            F("topics", "[]WritableTxnMarkerTopic", fields=[
                F("name", "string"),
                F("partition_indexes", "[]int32"),
            ]),
            F("coordinator_epoch", "int32"),
            F("transaction_version", "int8", "2+", default=0, ignorable=True),
        ]),
    ],
    response=[
        F("markers", "[]WritableTxnMarkerResult", fields=[
            F("producer_id", "int64"),
            F("topics", "[]WritableTxnMarkerTopicResult", fields=[
                F("name", "string"),
                F("partitions", "[]WritableTxnMarkerPartitionResult", fields=[
                    F("partition_index", "int32"),
                    F("error_code", "int16"),
                ]),
            ]),
        ]),
    ],
)

TXN_OFFSET_COMMIT = api(
    28,
    "TxnOffsetCommit",
    valid="0-5",
    flexible="3+",
    request=[
        F("transactional_id", "string"),
        F("group_id", "string"),
        F("producer_id", "int64"),
        F("producer_epoch", "int16"),
        F("generation_id", "int32", "3+", default=-1),
        F("member_id", "string", "3+", default=""),
        F("group_instance_id", "string", "3+", nullable="3+", default=None),
        F("topics", "[]TxnOffsetCommitRequestTopic", fields=[
            F("name", "string"),
            F("partitions", "[]TxnOffsetCommitRequestPartition", fields=[
                F("partition_index", "int32"),
                F("committed_offset", "int64"),
                F("committed_leader_epoch", "int32", "2+", default=-1, ignorable=True),
                F("committed_metadata", "string", nullable="0+"),
            ]),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("topics", "[]TxnOffsetCommitResponseTopic", fields=[
            F("name", "string"),
            F("partitions", "[]TxnOffsetCommitResponsePartition", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
            ]),
        ]),
    ],
)

DESCRIBE_PRODUCERS = api(
    61,
    "DescribeProducers",
    valid="0",
    flexible="0+",
    request=[
        F("topics", "[]TopicRequest", fields=[
            F("name", "string"),
            F("partition_indexes", "[]int32"),
        ]),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("topics", "[]TopicResponse", fields=[
            F("name", "string"),
            F("partitions", "[]PartitionResponse", fields=[
                F("partition_index", "int32"),
                F("error_code", "int16"),
                F("error_message", "string", nullable="0+", default=None),
                F("active_producers", "[]ProducerState", fields=[
                    F("producer_id", "int64"),
                    F("producer_epoch", "int32"),  # int32 here, unlike the int16 epoch everywhere else
                    F("last_sequence", "int32", default=-1),
                    F("last_timestamp", "int64", default=-1),
                    F("coordinator_epoch", "int32"),
                    F("current_txn_start_offset", "int64", default=-1),
                ]),
            ]),
        ]),
    ],
)

DESCRIBE_TRANSACTIONS = api(
    65,
    "DescribeTransactions",
    valid="0",
    flexible="0+",
    request=[
        F("transactional_ids", "[]string"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("transaction_states", "[]TransactionState", fields=[
            F("error_code", "int16"),
            F("transactional_id", "string"),
            F("transaction_state", "string"),
            F("transaction_timeout_ms", "int32"),
            F("transaction_start_time_ms", "int64"),
            F("producer_id", "int64"),
            F("producer_epoch", "int16"),
            F("topics", "[]TopicData", fields=[
                F("topic", "string"),
                F("partitions", "[]int32"),
            ]),
        ]),
    ],
)

LIST_TRANSACTIONS = api(
    66,
    "ListTransactions",
    valid="0-2",
    flexible="0+",
    request=[
        F("state_filters", "[]string"),
        F("producer_id_filters", "[]int64"),
        F("duration_filter", "int64", "1+", default=-1),
        F("transactional_id_pattern", "string", "2+", nullable="2+", default=None),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("error_code", "int16"),
        F("unknown_state_filters", "[]string"),
        F("transaction_states", "[]TransactionState", fields=[
            F("transactional_id", "string"),
            F("producer_id", "int64"),
            F("transaction_state", "string"),
        ]),
    ],
)

APIS = [
    ADD_PARTITIONS_TO_TXN,
    ADD_OFFSETS_TO_TXN,
    END_TXN,
    WRITE_TXN_MARKERS,
    TXN_OFFSET_COMMIT,
    DESCRIBE_PRODUCERS,
    DESCRIBE_TRANSACTIONS,
    LIST_TRANSACTIONS,
]
