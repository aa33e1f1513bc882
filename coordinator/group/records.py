"""Records of `__consumer_offsets`: the group coordinator's replicated state, as Kafka lays them out.

Layout
------
Every record of the topic is a plain (key, value) record in an ordinary record batch:

    key    int16 record type (Kafka calls it the key "version")  + the key struct at that version
    value  int16 value version                                    + the value struct at that version
           or null: a tombstone, which deletes the key (the topic is compacted)

The record types and the field definitions are the facts of Kafka's
`group-coordinator/src/main/resources/common/message/*.json`:

    0, 1  OffsetCommitKey / OffsetCommitValue            a committed offset (0 is the legacy key version)
    2     GroupMetadataKey / GroupMetadataValue          a classic group at its last stable point
    3     ConsumerGroupMetadata                          a KIP-848 group's epoch
    4     ConsumerGroupPartitionMetadata                 (Kafka 4.0; read and ignored: we keep a hash)
    5     ConsumerGroupMemberMetadata                    a KIP-848 member's subscription
    6     ConsumerGroupTargetAssignmentMetadata          the epoch of the target assignment
    7     ConsumerGroupTargetAssignmentMember            one member's target assignment
    8     ConsumerGroupCurrentMemberAssignment           one member's current assignment and epoch
    16    ConsumerGroupRegularExpression                 (read and ignored: regex subscriptions unsupported)

Share groups (KIP-932) have the same shape as KIP-848 groups, minus what sharing makes moot (instance
ids, rebalance timeouts, assignors chosen by the client, partitions pending revocation):

    9     ShareGroupPartitionMetadata                    (Kafka 4.0; read and ignored, as type 4)
    10    ShareGroupMemberMetadata                       a share member's subscription
    11    ShareGroupMetadata                             the group epoch and subscribed-topics hash
    12    ShareGroupTargetAssignmentMetadata             the epoch of the target assignment
    13    ShareGroupTargetAssignmentMember               one member's target assignment
    14    ShareGroupCurrentMemberAssignment              one member's current assignment and epoch
    15    ShareGroupStatePartitionMetadata               which partitions have state in __share_group_state

(ShareGroupMetadataValue's MetadataHash is a plain int64 field, not a tagged one as in
ConsumerGroupMetadataValue: share groups were born after KIP-1101.)

Other types (streams groups) are skipped on load, as Kafka skips record types it does not know.
Values are written at the version Kafka 4 writes (OffsetCommitValue 3, or 1 when an expire timestamp
is set; GroupMetadataValue 3; the KIP-848 values 0) and read at any valid version.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from odradek.protocol.codec import decode_from, encode
from odradek.protocol.codec import data_class as _data_class
from odradek.protocol.errors import ProtocolError
from odradek.protocol.schema import F

__all__ = [
    "CoordinatorRecord",
    "CorruptCoordinatorRecordError",
    "RecordType",
    "deserialize",
    "serialize",
]

_I16 = struct.Struct(">h")


class RecordType(IntEnum):
    OFFSET_COMMIT_LEGACY = 0
    OFFSET_COMMIT = 1
    GROUP_METADATA = 2
    CONSUMER_GROUP_METADATA = 3
    CONSUMER_GROUP_PARTITION_METADATA = 4
    CONSUMER_GROUP_MEMBER_METADATA = 5
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = 6
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = 7
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = 8
    SHARE_GROUP_PARTITION_METADATA = 9
    SHARE_GROUP_MEMBER_METADATA = 10
    SHARE_GROUP_METADATA = 11
    SHARE_GROUP_TARGET_ASSIGNMENT_METADATA = 12
    SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER = 13
    SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT = 14
    SHARE_GROUP_STATE_PARTITION_METADATA = 15
    CONSUMER_GROUP_REGULAR_EXPRESSION = 16


def _key(name: str, record_types: str, fields: list[F]) -> type:
    return _data_class(name, fields, valid=record_types, flexible="none")


# ---------------------------------------------------------------------------------------------------
# Classic groups and offsets

OffsetCommitKey = _key("OffsetCommitKey", "0-1", [
    F("group", "string"),
    F("topic", "string"),
    F("partition", "int32"),
])

OffsetCommitValue = _data_class("OffsetCommitValue", [
    F("offset", "int64"),
    F("leader_epoch", "int32", "3+", default=-1, ignorable=True),
    F("metadata", "string"),
    F("commit_timestamp", "int64"),
    F("expire_timestamp", "int64", "1", default=-1, ignorable=True),
], valid="0-4", flexible="4+")

GroupMetadataKey = _key("GroupMetadataKey", "2", [
    F("group", "string"),
])

GroupMetadataValue = _data_class("GroupMetadataValue", [
    F("protocol_type", "string"),
    F("generation", "int32"),
    F("protocol", "string", nullable="0+"),
    F("leader", "string", nullable="0+"),
    F("current_state_timestamp", "int64", "2+", default=-1, ignorable=True),
    F("members", "[]MemberMetadata", fields=[
        F("member_id", "string"),
        F("group_instance_id", "string", "3+", nullable="3+", default=None, ignorable=True),
        F("client_id", "string"),
        F("client_host", "string"),
        F("rebalance_timeout", "int32", "1+", ignorable=True),
        F("session_timeout", "int32"),
        F("subscription", "bytes"),
        F("assignment", "bytes"),
    ]),
], valid="0-4", flexible="4+")

# ---------------------------------------------------------------------------------------------------
# KIP-848 consumer groups

ConsumerGroupMetadataKey = _key("ConsumerGroupMetadataKey", "3", [F("group_id", "string")])
ConsumerGroupMetadataValue = _data_class("ConsumerGroupMetadataValue", [
    F("epoch", "int32"),
    # Kafka 4.1+: a hash of the subscribed topics' metadata; a change bumps the group epoch.
    F("metadata_hash", "int64", default=0, tag=0),
], valid="0", flexible="0+")

ConsumerGroupPartitionMetadataKey = _key("ConsumerGroupPartitionMetadataKey", "4", [F("group_id", "string")])
ConsumerGroupPartitionMetadataValue = _data_class("ConsumerGroupPartitionMetadataValue", [
    F("topics", "[]TopicMetadata", fields=[
        F("topic_id", "uuid"),
        F("topic_name", "string"),
        F("num_partitions", "int32"),
        F("partition_metadata", "[]PartitionMetadata", fields=[
            F("partition", "int32"),
            F("racks", "[]string"),
        ]),
    ]),
], valid="0", flexible="0+")

ConsumerGroupMemberMetadataKey = _key("ConsumerGroupMemberMetadataKey", "5", [
    F("group_id", "string"),
    F("member_id", "string"),
])
ConsumerGroupMemberMetadataValue = _data_class("ConsumerGroupMemberMetadataValue", [
    F("instance_id", "string", nullable="0+", default=None),
    F("rack_id", "string", nullable="0+", default=None),
    F("client_id", "string"),
    F("client_host", "string"),
    F("subscribed_topic_names", "[]string"),
    F("subscribed_topic_regex", "string", nullable="0+", default=None),
    F("rebalance_timeout_ms", "int32", default=-1),
    F("server_assignor", "string", nullable="0+", default=None),
    F("classic_member_metadata", "ClassicMemberMetadata", nullable="0+", default=None, tag=0, fields=[
        F("session_timeout_ms", "int32"),
        F("supported_protocols", "[]ClassicProtocol", fields=[
            F("name", "string"),
            F("metadata", "bytes"),
        ]),
    ]),
], valid="0", flexible="0+")

ConsumerGroupTargetAssignmentMetadataKey = _key("ConsumerGroupTargetAssignmentMetadataKey", "6", [
    F("group_id", "string"),
])
ConsumerGroupTargetAssignmentMetadataValue = _data_class("ConsumerGroupTargetAssignmentMetadataValue", [
    F("assignment_epoch", "int32"),
], valid="0", flexible="0+")

ConsumerGroupTargetAssignmentMemberKey = _key("ConsumerGroupTargetAssignmentMemberKey", "7", [
    F("group_id", "string"),
    F("member_id", "string"),
])
ConsumerGroupTargetAssignmentMemberValue = _data_class("ConsumerGroupTargetAssignmentMemberValue", [
    F("topic_partitions", "[]TopicPartition", fields=[
        F("topic_id", "uuid"),
        F("partitions", "[]int32"),
    ]),
], valid="0", flexible="0+")

ConsumerGroupCurrentMemberAssignmentKey = _key("ConsumerGroupCurrentMemberAssignmentKey", "8", [
    F("group_id", "string"),
    F("member_id", "string"),
])
ConsumerGroupCurrentMemberAssignmentValue = _data_class("ConsumerGroupCurrentMemberAssignmentValue", [
    F("member_epoch", "int32"),
    F("previous_member_epoch", "int32"),
    F("state", "int8"),
    F("assigned_partitions", "[]TopicPartitions", fields=[
        F("topic_id", "uuid"),
        F("partitions", "[]int32"),
    ]),
    F("partitions_pending_revocation", "[]TopicPartitions", fields=[
        F("topic_id", "uuid"),
        F("partitions", "[]int32"),
    ]),
], valid="0", flexible="0+")

ConsumerGroupRegularExpressionKey = _key("ConsumerGroupRegularExpressionKey", "16", [
    F("group_id", "string"),
    F("regular_expression", "string"),
])
ConsumerGroupRegularExpressionValue = _data_class("ConsumerGroupRegularExpressionValue", [
    F("topics", "[]string"),
    F("version", "int64"),
    F("timestamp", "int64"),
], valid="0", flexible="0+")

# record type -> (key class, value class, value version written)
# ---------------------------------------------------------------------------------------------------
# KIP-932 share groups (group-coordinator/src/main/resources/common/message/ShareGroup*.json)

_SHARE_TOPIC_PARTITIONS = [F("topic_id", "uuid"), F("partitions", "[]int32")]

ShareGroupPartitionMetadataKey = _key("ShareGroupPartitionMetadataKey", "9", [F("group_id", "string")])
ShareGroupPartitionMetadataValue = _data_class("ShareGroupPartitionMetadataValue", [
    F("topics", "[]TopicMetadata", fields=[
        F("topic_id", "uuid"),
        F("topic_name", "string"),
        F("num_partitions", "int32"),
    ]),
], valid="0", flexible="0+")

ShareGroupMemberMetadataKey = _key("ShareGroupMemberMetadataKey", "10", [
    F("group_id", "string"),
    F("member_id", "string"),
])
ShareGroupMemberMetadataValue = _data_class("ShareGroupMemberMetadataValue", [
    F("rack_id", "string", nullable="0+", default=None),
    F("client_id", "string"),
    F("client_host", "string"),
    F("subscribed_topic_names", "[]string"),
], valid="0", flexible="0+")

ShareGroupMetadataKey = _key("ShareGroupMetadataKey", "11", [F("group_id", "string")])
ShareGroupMetadataValue = _data_class("ShareGroupMetadataValue", [
    F("epoch", "int32"),
    F("metadata_hash", "int64"),
], valid="0", flexible="0+")

ShareGroupTargetAssignmentMetadataKey = _key("ShareGroupTargetAssignmentMetadataKey", "12", [F("group_id", "string")])
ShareGroupTargetAssignmentMetadataValue = _data_class("ShareGroupTargetAssignmentMetadataValue", [
    F("assignment_epoch", "int32"),
], valid="0", flexible="0+")

ShareGroupTargetAssignmentMemberKey = _key("ShareGroupTargetAssignmentMemberKey", "13", [
    F("group_id", "string"),
    F("member_id", "string"),
])
ShareGroupTargetAssignmentMemberValue = _data_class("ShareGroupTargetAssignmentMemberValue", [
    F("topic_partitions", "[]TopicPartition", fields=list(_SHARE_TOPIC_PARTITIONS)),
], valid="0", flexible="0+")

ShareGroupCurrentMemberAssignmentKey = _key("ShareGroupCurrentMemberAssignmentKey", "14", [
    F("group_id", "string"),
    F("member_id", "string"),
])
ShareGroupCurrentMemberAssignmentValue = _data_class("ShareGroupCurrentMemberAssignmentValue", [
    F("member_epoch", "int32"),
    F("previous_member_epoch", "int32"),
    F("state", "int8"),
    F("assigned_partitions", "[]TopicPartitions", fields=list(_SHARE_TOPIC_PARTITIONS)),
], valid="0", flexible="0+")

ShareGroupStatePartitionMetadataKey = _key("ShareGroupStatePartitionMetadataKey", "15", [F("group_id", "string")])
ShareGroupStatePartitionMetadataValue = _data_class("ShareGroupStatePartitionMetadataValue", [
    F("initializing_topics", "[]TopicPartitionsInfo", fields=[
        F("topic_id", "uuid"),
        F("topic_name", "string"),
        F("partitions", "[]int32"),
        F("create_timestamp", "int64"),
    ]),
    F("initialized_topics", "[]TopicPartitionsInfo", fields=[
        F("topic_id", "uuid"),
        F("topic_name", "string"),
        F("partitions", "[]int32"),
        F("create_timestamp", "int64"),
    ]),
    F("deleting_topics", "[]TopicInfo", fields=[
        F("topic_id", "uuid"),
        F("topic_name", "string"),
    ]),
], valid="0", flexible="0+")

_SCHEMAS: dict[RecordType, tuple[Any, Any, int]] = {  # generated message classes (VALID_VERSIONS, ...)
    RecordType.OFFSET_COMMIT_LEGACY: (OffsetCommitKey, OffsetCommitValue, 3),
    RecordType.OFFSET_COMMIT: (OffsetCommitKey, OffsetCommitValue, 3),
    RecordType.GROUP_METADATA: (GroupMetadataKey, GroupMetadataValue, 3),
    RecordType.CONSUMER_GROUP_METADATA: (ConsumerGroupMetadataKey, ConsumerGroupMetadataValue, 0),
    RecordType.CONSUMER_GROUP_PARTITION_METADATA: (
        ConsumerGroupPartitionMetadataKey, ConsumerGroupPartitionMetadataValue, 0),
    RecordType.CONSUMER_GROUP_MEMBER_METADATA: (ConsumerGroupMemberMetadataKey, ConsumerGroupMemberMetadataValue, 0),
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: (
        ConsumerGroupTargetAssignmentMetadataKey, ConsumerGroupTargetAssignmentMetadataValue, 0),
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: (
        ConsumerGroupTargetAssignmentMemberKey, ConsumerGroupTargetAssignmentMemberValue, 0),
    RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: (
        ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupCurrentMemberAssignmentValue, 0),
    RecordType.CONSUMER_GROUP_REGULAR_EXPRESSION: (
        ConsumerGroupRegularExpressionKey, ConsumerGroupRegularExpressionValue, 0),
    RecordType.SHARE_GROUP_PARTITION_METADATA: (ShareGroupPartitionMetadataKey, ShareGroupPartitionMetadataValue, 0),
    RecordType.SHARE_GROUP_MEMBER_METADATA: (ShareGroupMemberMetadataKey, ShareGroupMemberMetadataValue, 0),
    RecordType.SHARE_GROUP_METADATA: (ShareGroupMetadataKey, ShareGroupMetadataValue, 0),
    RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA: (
        ShareGroupTargetAssignmentMetadataKey, ShareGroupTargetAssignmentMetadataValue, 0),
    RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER: (
        ShareGroupTargetAssignmentMemberKey, ShareGroupTargetAssignmentMemberValue, 0),
    RecordType.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT: (
        ShareGroupCurrentMemberAssignmentKey, ShareGroupCurrentMemberAssignmentValue, 0),
    RecordType.SHARE_GROUP_STATE_PARTITION_METADATA: (
        ShareGroupStatePartitionMetadataKey, ShareGroupStatePartitionMetadataValue, 0),
}


class CorruptCoordinatorRecordError(ProtocolError):
    """A record of `__consumer_offsets` that cannot be decoded; loading the partition fails on it."""


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """One decoded record: its type, key struct and value struct (None for a tombstone)."""

    type: RecordType
    key: Any
    value: Any = None
    value_version: int = -1  # -1: the version Kafka writes for this type

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


def serialize(record: CoordinatorRecord) -> tuple[bytes, bytes | None]:
    key_cls, _, default_version = _SCHEMAS[record.type]
    key = _I16.pack(record.type) + encode(record.key, int(record.type))
    if record.value is None:
        return key, None
    version = default_version if record.value_version < 0 else record.value_version
    return key, _I16.pack(version) + encode(record.value, version)


def deserialize(key: bytes | None, value: bytes | None) -> CoordinatorRecord | None:
    """Decode one record; None for a record type this coordinator does not know (skipped on load)."""
    if key is None or len(key) < 2:
        raise CorruptCoordinatorRecordError("record of __consumer_offsets without a typed key")
    (type_code,) = _I16.unpack_from(key, 0)
    try:
        record_type = RecordType(type_code)
    except ValueError:
        return None
    key_cls, value_cls, _ = _SCHEMAS[record_type]
    try:
        key_struct, end = decode_from(key_cls, key, int(record_type), 2)
        if end != len(key):
            raise CorruptCoordinatorRecordError(f"{key_cls.__name__}: {len(key) - end} trailing bytes")
        if value is None:
            return CoordinatorRecord(record_type, key_struct, None)
        if len(value) < 2:
            raise CorruptCoordinatorRecordError(f"{value_cls.__name__}: value shorter than its version")
        (version,) = _I16.unpack_from(value, 0)
        low, high = value_cls.VALID_VERSIONS
        if not low <= version <= high:
            raise CorruptCoordinatorRecordError(f"{value_cls.__name__}: unknown version {version}")
        value_struct, _ = decode_from(value_cls, value, version, 2)
    except ProtocolError as e:
        if isinstance(e, CorruptCoordinatorRecordError):
            raise
        raise CorruptCoordinatorRecordError(str(e)) from e
    return CoordinatorRecord(record_type, key_struct, value_struct, version)


# ---------------------------------------------------------------------------------------------------
# Builders


def offset_commit_record(group_id: str, topic: str, partition: int, offset: int, leader_epoch: int,
                         metadata: str, commit_timestamp_ms: int, expire_timestamp_ms: int = -1) -> CoordinatorRecord:
    value = OffsetCommitValue(
        offset=offset,
        leader_epoch=leader_epoch if expire_timestamp_ms < 0 else -1,
        metadata=metadata,
        commit_timestamp=commit_timestamp_ms,
        expire_timestamp=expire_timestamp_ms,
    )
    return CoordinatorRecord(RecordType.OFFSET_COMMIT, OffsetCommitKey(group=group_id, topic=topic, partition=partition),
                             value, 1 if expire_timestamp_ms >= 0 else 3)


def offset_commit_tombstone(group_id: str, topic: str, partition: int) -> CoordinatorRecord:
    return CoordinatorRecord(RecordType.OFFSET_COMMIT, OffsetCommitKey(group=group_id, topic=topic, partition=partition))


def group_metadata_record(group_id: str, value) -> CoordinatorRecord:
    return CoordinatorRecord(RecordType.GROUP_METADATA, GroupMetadataKey(group=group_id), value)


def group_metadata_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(RecordType.GROUP_METADATA, GroupMetadataKey(group=group_id))


def consumer_group_epoch_record(group_id: str, epoch: int, metadata_hash: int) -> CoordinatorRecord:
    return CoordinatorRecord(RecordType.CONSUMER_GROUP_METADATA, ConsumerGroupMetadataKey(group_id=group_id),
                             ConsumerGroupMetadataValue(epoch=epoch, metadata_hash=metadata_hash))


def consumer_group_epoch_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(RecordType.CONSUMER_GROUP_METADATA, ConsumerGroupMetadataKey(group_id=group_id))


def consumer_group_member_record(group_id: str, member_id: str, value) -> CoordinatorRecord:
    return CoordinatorRecord(RecordType.CONSUMER_GROUP_MEMBER_METADATA,
                             ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=member_id), value)


def consumer_group_member_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(RecordType.CONSUMER_GROUP_MEMBER_METADATA,
                             ConsumerGroupMemberMetadataKey(group_id=group_id, member_id=member_id))


def target_assignment_epoch_record(group_id: str, epoch: int) -> CoordinatorRecord:
    return CoordinatorRecord(RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
                             ConsumerGroupTargetAssignmentMetadataKey(group_id=group_id),
                             ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=epoch))


def target_assignment_epoch_tombstone(group_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
                             ConsumerGroupTargetAssignmentMetadataKey(group_id=group_id))


def _topic_partitions(cls, assignment) -> list:
    return [cls(topic_id=topic_id, partitions=sorted(parts)) for topic_id, parts in sorted(assignment.items()) if parts]


def target_assignment_member_record(group_id: str, member_id: str, assignment) -> CoordinatorRecord:
    value_cls = ConsumerGroupTargetAssignmentMemberValue
    return CoordinatorRecord(
        RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
        ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id),
        value_cls(topic_partitions=_topic_partitions(value_cls.TopicPartition, assignment)),
    )


def target_assignment_member_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
                             ConsumerGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id))


def current_assignment_record(group_id: str, member_id: str, member_epoch: int, previous_member_epoch: int,
                              state: int, assigned, pending_revocation) -> CoordinatorRecord:
    value_cls = ConsumerGroupCurrentMemberAssignmentValue
    return CoordinatorRecord(
        RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
        ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id),
        value_cls(
            member_epoch=member_epoch,
            previous_member_epoch=previous_member_epoch,
            state=state,
            assigned_partitions=_topic_partitions(value_cls.TopicPartitions, assigned),
            partitions_pending_revocation=_topic_partitions(value_cls.TopicPartitions, pending_revocation),
        ),
    )


def current_assignment_tombstone(group_id: str, member_id: str) -> CoordinatorRecord:
    return CoordinatorRecord(RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
                             ConsumerGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id))


# -- share groups --


def share_group_epoch_record(group_id: str, epoch: int, metadata_hash: int) -> CoordinatorRecord:
    return CoordinatorRecord(RecordType.SHARE_GROUP_METADATA, ShareGroupMetadataKey(group_id=group_id),
                             ShareGroupMetadataValue(epoch=epoch, metadata_hash=metadata_hash))


def share_group_member_record(group_id: str, member_id: str, rack_id: str | None, client_id: str, client_host: str,
                              subscribed_topic_names) -> CoordinatorRecord:
    return CoordinatorRecord(
        RecordType.SHARE_GROUP_MEMBER_METADATA, ShareGroupMemberMetadataKey(group_id=group_id, member_id=member_id),
        ShareGroupMemberMetadataValue(rack_id=rack_id, client_id=client_id, client_host=client_host,
                                      subscribed_topic_names=list(subscribed_topic_names)))


def share_target_assignment_epoch_record(group_id: str, epoch: int) -> CoordinatorRecord:
    return CoordinatorRecord(RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
                             ShareGroupTargetAssignmentMetadataKey(group_id=group_id),
                             ShareGroupTargetAssignmentMetadataValue(assignment_epoch=epoch))


def share_target_assignment_member_record(group_id: str, member_id: str, assignment) -> CoordinatorRecord:
    value_cls = ShareGroupTargetAssignmentMemberValue
    return CoordinatorRecord(
        RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
        ShareGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id),
        value_cls(topic_partitions=_topic_partitions(value_cls.TopicPartition, assignment)))


def share_current_assignment_record(group_id: str, member_id: str, member_epoch: int, previous_member_epoch: int,
                                    state: int, assigned) -> CoordinatorRecord:
    value_cls = ShareGroupCurrentMemberAssignmentValue
    return CoordinatorRecord(
        RecordType.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
        ShareGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id),
        value_cls(member_epoch=member_epoch, previous_member_epoch=previous_member_epoch, state=state,
                  assigned_partitions=_topic_partitions(value_cls.TopicPartitions, assigned)))


def share_group_tombstones(group_id: str, member_id: str | None = None) -> list[CoordinatorRecord]:
    """The tombstones of one member (current, target, subscription), or of the group's own records."""
    if member_id is not None:
        return [
            CoordinatorRecord(RecordType.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
                              ShareGroupCurrentMemberAssignmentKey(group_id=group_id, member_id=member_id)),
            CoordinatorRecord(RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
                              ShareGroupTargetAssignmentMemberKey(group_id=group_id, member_id=member_id)),
            CoordinatorRecord(RecordType.SHARE_GROUP_MEMBER_METADATA,
                              ShareGroupMemberMetadataKey(group_id=group_id, member_id=member_id)),
        ]
    return [
        CoordinatorRecord(RecordType.SHARE_GROUP_STATE_PARTITION_METADATA,
                          ShareGroupStatePartitionMetadataKey(group_id=group_id)),
        CoordinatorRecord(RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
                          ShareGroupTargetAssignmentMetadataKey(group_id=group_id)),
        CoordinatorRecord(RecordType.SHARE_GROUP_METADATA, ShareGroupMetadataKey(group_id=group_id)),
    ]
