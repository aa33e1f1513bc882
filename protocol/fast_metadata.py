"""A Metadata response (v0-v13) packed straight into its frame, its topics' partition sections given packed.

Why: the generated codec builds a response object, a topic object per topic and a partition object per
partition, then walks them again to encode; a client asking for a topic of 10,000 partitions cost a node
~0.15 s of its event loop for that (bench/partition_scale.py). Here a topic's partitions section (the array
and everything in it) is bytes the caller packs with `encode_partitions` from plain tuples, and may keep:
the broker's handler caches the section of a large topic per version band and listener until the topic or
the brokers change (broker/handlers/metadata.py), so answering again costs a few hundred bytes of work
whatever the partition count. tests/unit/test_protocol_fast_metadata.py compares both functions with the
codec byte for byte at every version.

What the fields are, per version (Kafka's MetadataResponse.json): throttle_time_ms from v3; each broker's
node id, host, port, and its rack from v1; the cluster id from v2 and the controller id from v1; each topic's
error code, name (nullable from v12), topic id from v10, is_internal from v1, its partitions and authorized
operations from v8; each partition's error code, index, leader, leader epoch from v7, replicas, ISR and
offline replicas from v5; the cluster's authorized operations in v8-v10 only; a top-level error code from
v13. From v9 the message is flexible (compact arrays and strings, tagged field sections) and the response
header carries its own (empty) tagged fields.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Sequence

from .varint import write_array_count, write_uvarint

METADATA_KEY = 3
VERSIONS = range(0, 14)
FLEXIBLE_FROM = 9

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD_CLASSIC = struct.Struct(">ii")  # frame size, correlation id; then the body
_HEAD_FLEXIBLE = struct.Struct(">iiB")  # ... and the response header's (empty) tagged fields
_PARTITION_HEAD = struct.Struct(">hii")  # error code, partition index, leader id
_PARTITION_HEAD_EPOCH = struct.Struct(">hiii")  # ... and the leader epoch (v7+)

# (error_code, partition_index, leader_id, leader_epoch, replica_nodes, isr_nodes, offline_replicas)
PartitionRow = tuple[int, int, int, int, Sequence[int], Sequence[int], Sequence[int]]


def band(version: int) -> int:
    """Versions whose partition sections are the same bytes share a band: 0-4, 5-6, 7-8, 9-13."""
    return 3 if version >= FLEXIBLE_FROM else 2 if version >= 7 else 1 if version >= 5 else 0


def encode_partitions(partitions: Iterable[PartitionRow], count: int, version: int) -> bytes:
    """A topic's `partitions` array, count first, as `version` writes it (the same bytes across a `band`)."""
    flexible = version >= FLEXIBLE_FROM
    with_epoch = version >= 7
    with_offline = version >= 5
    out = bytearray()
    write_array_count(out, count, flexible)
    head = _PARTITION_HEAD_EPOCH if with_epoch else _PARTITION_HEAD
    for error_code, index, leader, leader_epoch, replicas, isr, offline in partitions:
        if with_epoch:
            out += head.pack(error_code, index, leader, leader_epoch)
        else:
            out += head.pack(error_code, index, leader)
        _put_ints(out, replicas, flexible)
        _put_ints(out, isr, flexible)
        if with_offline:
            _put_ints(out, offline, flexible)
        if flexible:
            out.append(0)  # partition tagged fields
    return bytes(out)


# (node_id, host, port, rack)
BrokerRow = tuple[int, str, int, "str | None"]
# (error_code, name, topic_id, is_internal, packed partitions section from encode_partitions, authorized ops)
TopicRow = tuple[int, "str | None", uuid.UUID, bool, bytes, int]


def encode_metadata_response(correlation_id: int, version: int, *, brokers: Sequence[BrokerRow],
                             cluster_id: str | None, controller_id: int, topics: Sequence[TopicRow],
                             cluster_authorized_operations: int, throttle_time_ms: int = 0,
                             error_code: int = 0) -> bytearray:
    """The whole response frame, size first. A topic's name may be None only from v12 (ValueError below)."""
    flexible = version >= FLEXIBLE_FROM
    out = bytearray((_HEAD_FLEXIBLE if flexible else _HEAD_CLASSIC).pack(0, correlation_id, *((0,) if flexible else ())))
    if version >= 3:
        out += _I32.pack(throttle_time_ms)
    write_array_count(out, len(brokers), flexible)
    for node_id, host, port, rack in brokers:
        out += _I32.pack(node_id)
        _put_string(out, host, flexible)
        out += _I32.pack(port)
        if version >= 1:
            _put_string(out, rack, flexible)
        if flexible:
            out.append(0)
    if version >= 2:
        _put_string(out, cluster_id, flexible)
    if version >= 1:
        out += _I32.pack(controller_id)
    write_array_count(out, len(topics), flexible)
    for topic_error, name, topic_id, is_internal, partitions, operations in topics:
        out += _I16.pack(topic_error)
        if name is None and version < 12:
            raise ValueError(f"a topic without a name cannot be written at Metadata v{version}")
        _put_string(out, name, flexible)
        if version >= 10:
            out += topic_id.bytes
        if version >= 1:
            out.append(1 if is_internal else 0)
        out += partitions
        if version >= 8:
            out += _I32.pack(operations)
        if flexible:
            out.append(0)
    if 8 <= version <= 10:
        out += _I32.pack(cluster_authorized_operations)
    if version >= 13:
        out += _I16.pack(error_code)
    if flexible:
        out.append(0)
    _I32.pack_into(out, 0, len(out) - 4)
    return out


def _put_ints(out: bytearray, values: Sequence[int], flexible: bool) -> None:
    write_array_count(out, len(values), flexible)
    if values:
        out += struct.pack(f">{len(values)}i", *values)


def _put_string(out: bytearray, value: str | None, flexible: bool) -> None:
    if value is None:
        out += b"\x00" if flexible else b"\xff\xff"
        return
    data = value.encode("utf-8")
    if flexible:
        write_uvarint(out, len(data) + 1)
    else:
        out += _I16.pack(len(data))
    out += data
