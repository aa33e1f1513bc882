"""The "consumer" protocol's embedded payloads: JoinGroup member metadata and SyncGroup assignment bytes."""

from ..schema import Api, F, api

# Not APIs: these are the versioned blobs clients put in JoinGroup protocols[].metadata and
# SyncGroup assignments[].assignment, each starting with its own int16 version.
# Trap: a blob whose version is newer than 3 must still be read with the v3 layout (trailing bytes
# ignored), as Kafka does; new versions may only append fields. Never reject it as unknown.
# Keys -1/-2 are placeholders that cannot collide with a real api key; the codec wires these in.
CONSUMER_PROTOCOL_SUBSCRIPTION = api(
    key=-1,
    name="ConsumerProtocolSubscription",
    valid="0-3",
    flexible="none",
    request=[
        F("topics", "[]string"),
        F("user_data", "bytes", nullable="0+", default=None),
        F("owned_partitions", "[]TopicPartition", "1+", ignorable=True, fields=[
            F("topic", "string", "1+"),
            F("partitions", "[]int32", "1+"),
        ]),
        F("generation_id", "int32", "2+", default=-1, ignorable=True),
        F("rack_id", "string", "3+", nullable="3+", default=None, ignorable=True),
    ],
    response=[],
)

# Assignment v1-3 are laid out exactly as v0; its version only tracks the subscription's.
CONSUMER_PROTOCOL_ASSIGNMENT = api(
    key=-2,
    name="ConsumerProtocolAssignment",
    valid="0-3",
    flexible="none",
    request=[
        F("assigned_partitions", "[]TopicPartition", fields=[
            F("topic", "string"),
            F("partitions", "[]int32"),
        ]),
        F("user_data", "bytes", nullable="0+", default=None),
    ],
    response=[],
)

APIS: list[Api] = []
DATA = [CONSUMER_PROTOCOL_SUBSCRIPTION, CONSUMER_PROTOCOL_ASSIGNMENT]
