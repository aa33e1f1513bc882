"""Which partition of an internal topic coordinates a key: Kafka's `Utils.abs(key.hashCode()) % n`.

`hashCode` is Java's String.hashCode: `s[0]*31^(n-1) + ... + s[n-1]` over the UTF-16 code units of the
string, in 32-bit two's-complement arithmetic. `Utils.abs` maps Integer.MIN_VALUE to 0 (Math.abs would
leave it negative). Clients and other brokers compute the same partition, so this must be exact.
"""

from __future__ import annotations

import base64
import uuid

__all__ = ["CONSUMER_OFFSETS_TOPIC", "SHARE_GROUP_STATE_TOPIC", "TRANSACTION_STATE_TOPIC", "java_string_hash_code",
           "partition_for", "share_coordinator_key", "share_partition_for"]

CONSUMER_OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
SHARE_GROUP_STATE_TOPIC = "__share_group_state"


def java_string_hash_code(s: str) -> int:
    """Java's `String.hashCode()` as a signed 32-bit int."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, num_partitions: int) -> int:
    h = java_string_hash_code(key)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


def share_coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    """The FindCoordinator key (type 2, SHARE) of one share-partition, as Kafka's
    SharePartitionKey.asCoordinatorKey writes it: `group:topic_id:partition` with the topic id in Kafka's
    text form (Uuid.toString: URL-safe base64 of the 16 bytes, unpadded; not the dashed hex form), so a key
    hashes to the same partition whichever broker, Kafka's or ours, computes it."""
    topic = base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")
    return f"{group_id}:{topic}:{partition}"


def share_partition_for(key: str, num_partitions: int) -> int:
    """The `__share_group_state` partition whose leader is the share coordinator of a share key: Kafka's
    ShareCoordinatorService.partitionFor, `Utils.abs(key.hashCode()) % numPartitions` over the whole
    `group:topic_id:partition` string, the same function as the group and transaction coordinators'."""
    return partition_for(key, num_partitions)
