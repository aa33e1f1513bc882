"""Produce (0) and InitProducerId (22): writing record batches and obtaining a producer id and epoch."""

from ..schema import F, api

# Only v3-13 are parseable. Older librdkafka refuses a broker whose ApiVersions range for Produce starts
# above 0 (KAFKA-18659), so the ApiVersions response must still advertise Produce from v0; a request that
# actually arrives at v0-2 is refused (UNSUPPORTED_VERSION), never decoded.
PRODUCE = api(
    0,
    "Produce",
    valid="3-13",
    flexible="9+",
    request=[
        F("transactional_id", "string", "3+", nullable="3+", default=None),
        F("acks", "int16"),
        F("timeout_ms", "int32"),
        F("topic_data", "[]TopicProduceData", fields=[
            F("name", "string", "0-12", ignorable=True),
            F("topic_id", "uuid", "13+", ignorable=True),
            F("partition_data", "[]PartitionProduceData", fields=[
                F("index", "int32"),
                F("records", "records", nullable="0+"),
            ]),
        ]),
    ],
    response=[
        F("responses", "[]TopicProduceResponse", fields=[
            F("name", "string", "0-12", ignorable=True),
            F("topic_id", "uuid", "13+", ignorable=True),
            F("partition_responses", "[]PartitionProduceResponse", fields=[
                F("index", "int32"),
                F("error_code", "int16"),
                F("base_offset", "int64"),
                F("log_append_time_ms", "int64", "2+", default=-1, ignorable=True),
                F("log_start_offset", "int64", "5+", default=-1, ignorable=True),
                F("record_errors", "[]BatchIndexAndErrorMessage", "8+", ignorable=True, fields=[
                    F("batch_index", "int32", "8+"),
                    F("batch_index_error_message", "string", "8+", nullable="8+", default=None),
                ]),
                F("error_message", "string", "8+", nullable="8+", default=None, ignorable=True),
                F("current_leader", "LeaderIdAndEpoch", "10+", tag=0, fields=[
                    F("leader_id", "int32", "10+", default=-1),
                    F("leader_epoch", "int32", "10+", default=-1),
                ]),
            ]),
        ]),
        F("throttle_time_ms", "int32", "1+", default=0, ignorable=True),
        F("node_endpoints", "[]NodeEndpoint", "10+", tag=0, fields=[
            F("node_id", "int32", "10+"),
            F("host", "string", "10+"),
            F("port", "int32", "10+"),
            F("rack", "string", "10+", nullable="10+", default=None),
        ]),
    ],
)

INIT_PRODUCER_ID = api(
    22,
    "InitProducerId",
    valid="0-6",
    flexible="2+",
    request=[
        F("transactional_id", "string", nullable="0+"),
        F("transaction_timeout_ms", "int32"),
        F("producer_id", "int64", "3+", default=-1),
        F("producer_epoch", "int16", "3+", default=-1),
        F("enable2_pc", "bool", "6+", default=False),
        F("keep_prepared_txn", "bool", "6+", default=False),
    ],
    response=[
        F("throttle_time_ms", "int32", ignorable=True),
        F("error_code", "int16"),
        F("producer_id", "int64", default=-1),
        F("producer_epoch", "int16"),
        F("ongoing_txn_producer_id", "int64", "6+", default=-1),
        F("ongoing_txn_producer_epoch", "int16", "6+", default=-1),
    ],
)

APIS = [PRODUCE, INIT_PRODUCER_ID]
