"""Which partition of an internal topic coordinates a key: Kafka's `Utils.abs(key.hashCode()) % n`.

`hashCode` is Java's String.hashCode: `s[0]*31^(n-1) + ... + s[n-1]` over the UTF-16 code units of the
string, in 32-bit two's-complement arithmetic. `Utils.abs` maps Integer.MIN_VALUE to 0 (Math.abs would
leave it negative). Clients and other brokers compute the same partition, so this must be exact.

Share-group state (`__share_group_state`) is routed by the share-partition's coordinator key
`group_id:topic_id:partition` (Kafka's SharePartitionKey.asCoordinatorKey), where the topic id is written
as Kafka's Uuid.toString writes it (22 characters of URL-safe base64, no padding), never Python's dashed
form: FindCoordinator key type 2 carries that string, and every broker must hash the same characters.
"""

from __future__ import annotations

import base64
import binascii
import uuid

__all__ = ["CONSUMER_OFFSETS_TOPIC", "SHARE_GROUP_STATE_TOPIC", "TRANSACTION_STATE_TOPIC", "java_string_hash_code",
           "parse_share_coordinator_key", "partition_for", "share_coordinator_key", "share_state_partition"]

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


def share_state_partition(key: str, num_partitions: int) -> int:
    """The `__share_group_state` partition of a share coordinator key (ShareCoordinatorService.partitionFor)."""
    return partition_for(key, num_partitions)


def share_coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    """The FindCoordinator key (type 2, SHARE) of one share-partition, as Kafka's
    SharePartitionKey.asCoordinatorKey writes it: `group:topic_id:partition` with the topic id in Kafka's
    text form (Uuid.toString: URL-safe base64 of the 16 bytes, unpadded; not the dashed hex form), so a key
    hashes to the same partition whichever broker, Kafka's or ours, computes it."""
    topic = base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")
    return f"{group_id}:{topic}:{partition}"


def parse_share_coordinator_key(key: str) -> tuple[str, uuid.UUID, int] | None:
    """(group id, topic id, partition) of a coordinator key, or None if it is not one (Kafka's
    SharePartitionKey.getInstance(String) refuses it: INVALID_REQUEST). The group id may itself contain ':',
    so the last two fields are split off the right. A dashed UUID is accepted too (it names the same topic;
    the key is re-written in Kafka's form before it is hashed)."""
    parts = key.rsplit(":", 2)
    if len(parts) != 3 or not parts[0]:
        return None
    group_id, topic, index = parts
    try:
        partition = int(index)
        if len(topic) == 22:
            raw = base64.urlsafe_b64decode(topic + "==")
            topic_id = uuid.UUID(bytes=raw)
        else:
            topic_id = uuid.UUID(topic)
    except (ValueError, binascii.Error):
        return None
    if partition < 0:
        return None
    return group_id, topic_id, partition
