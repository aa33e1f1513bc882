"""Records of `__share_group_state`: a share-partition's whole state, or what changed since.

    key    int16 record type (0 ShareSnapshot, 1 ShareUpdate)  + Share{Snapshot,Update}Key v0
                                                                 {group_id: string, topic_id: uuid, partition: int32}
    value  int16 value version (0) + Share{Snapshot,Update}Value v0 (flexible), or null: a tombstone

Kafka's CoordinatorRecordSerde writes the record type where older coordinators wrote a key version, so
the first two bytes of a key say which schema follows. The two keys carry the same fields: a snapshot and
an update of one share-partition differ only in that prefix.

    ShareSnapshotValue  snapshot_epoch, state_epoch, leader_epoch, start_offset, create_timestamp,
                        write_timestamp, state_batches, tagged 0: delivery_complete_count (KIP-1226)
    ShareUpdateValue    snapshot_epoch, leader_epoch, start_offset (-1: unchanged), state_batches,
                        tagged 0: delivery_complete_count

A state batch is (first_offset, last_offset, delivery_state, delivery_count) with delivery states 0
available, 2 acknowledged, 4 archived. Field facts: share-coordinator's ShareSnapshot{Key,Value}.json and
ShareUpdate{Key,Value}.json of Kafka 4.4 (protocol/messages/share_groups.py holds the schemas).
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from odradek.protocol.codec import decode_from, encode
from odradek.protocol.errors import ProtocolError
from odradek.protocol.messages import DATA_CLASSES
from odradek.replication.share import RecordState, StateBatch

__all__ = [
    "CorruptShareRecordError",
    "ShareRecord",
    "ShareRecordType",
    "ShareStateKey",
    "deserialize",
    "serialize",
]

_I16 = struct.Struct(">h")
VALUE_VERSION = 0

# Built from the schemas at import: to a type checker they are Any, as the message classes are.
ShareSnapshotKey: Any = DATA_CLASSES["ShareSnapshotKey"]
ShareSnapshotValue: Any = DATA_CLASSES["ShareSnapshotValue"]
ShareUpdateKey: Any = DATA_CLASSES["ShareUpdateKey"]
ShareUpdateValue: Any = DATA_CLASSES["ShareUpdateValue"]


class ShareRecordType(IntEnum):
    """The record type in a key's first two bytes (Kafka's generated CoordinatorRecordType)."""

    SHARE_SNAPSHOT = 0
    SHARE_UPDATE = 1


class CorruptShareRecordError(ProtocolError):
    """A record of `__share_group_state` that cannot be decoded; loading the partition fails on it."""


@dataclass(frozen=True, slots=True)
class ShareStateKey:
    """The share-partition a record is about (the shard's map key)."""

    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class ShareRecord:
    """One record as written. `batches` is None for a tombstone (the share-partition's state was deleted).

    For a snapshot every field is the state; for an update `start_offset` -1 means unchanged and `batches`
    are the ranges that changed (they override what they overlap). `state_epoch`, `create_timestamp` and
    `write_timestamp` are a snapshot's only (an update writes none).
    """

    type: ShareRecordType
    key: ShareStateKey
    snapshot_epoch: int = 0
    state_epoch: int = 0
    leader_epoch: int = 0
    start_offset: int = -1
    delivery_complete_count: int = -1
    batches: tuple[StateBatch, ...] | None = ()
    create_timestamp: int = 0
    write_timestamp: int = 0

    @property
    def is_tombstone(self) -> bool:
        return self.batches is None


def serialize(record: ShareRecord) -> tuple[bytes, bytes | None]:
    k = record.key
    if record.type is ShareRecordType.SHARE_SNAPSHOT:
        key_struct = ShareSnapshotKey(group_id=k.group_id, topic_id=k.topic_id, partition=k.partition)
    else:
        key_struct = ShareUpdateKey(group_id=k.group_id, topic_id=k.topic_id, partition=k.partition)
    key = _I16.pack(int(record.type)) + encode(key_struct, 0)
    if record.batches is None:
        return key, None
    if record.type is ShareRecordType.SHARE_SNAPSHOT:
        value = ShareSnapshotValue(
            snapshot_epoch=record.snapshot_epoch, state_epoch=record.state_epoch, leader_epoch=record.leader_epoch,
            start_offset=record.start_offset, delivery_complete_count=record.delivery_complete_count,
            create_timestamp=record.create_timestamp, write_timestamp=record.write_timestamp,
            state_batches=[ShareSnapshotValue.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                                         delivery_state=int(b.delivery_state),
                                                         delivery_count=b.delivery_count) for b in record.batches])
    else:
        value = ShareUpdateValue(
            snapshot_epoch=record.snapshot_epoch, leader_epoch=record.leader_epoch, start_offset=record.start_offset,
            delivery_complete_count=record.delivery_complete_count,
            state_batches=[ShareUpdateValue.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                                       delivery_state=int(b.delivery_state),
                                                       delivery_count=b.delivery_count) for b in record.batches])
    return key, _I16.pack(VALUE_VERSION) + encode(value, VALUE_VERSION)


def _batches(structs) -> tuple[StateBatch, ...]:
    out = []
    for b in structs:
        try:
            state = RecordState(b.delivery_state)
        except ValueError:
            raise CorruptShareRecordError(f"state batch with unknown delivery state {b.delivery_state}") from None
        if state is RecordState.ACQUIRED or b.last_offset < b.first_offset or b.delivery_count < 0:
            raise CorruptShareRecordError(f"invalid state batch {b.first_offset}-{b.last_offset} state {state.name}")
        out.append(StateBatch(b.first_offset, b.last_offset, state, b.delivery_count))
    return tuple(out)


def deserialize(key: bytes | None, value: bytes | None) -> ShareRecord | None:
    """Decode one record; None for a record type this coordinator does not know (skipped, as Kafka does)."""
    if key is None or len(key) < 2:
        raise CorruptShareRecordError("record of __share_group_state without a typed key")
    (type_id,) = _I16.unpack_from(key, 0)
    try:
        record_type = ShareRecordType(type_id)
    except ValueError:
        return None
    try:
        key_class = ShareSnapshotKey if record_type is ShareRecordType.SHARE_SNAPSHOT else ShareUpdateKey
        key_struct, end = decode_from(key_class, key, 0, 2)
        if end != len(key):
            raise CorruptShareRecordError(f"{key_class.__name__}: {len(key) - end} trailing bytes")
        state_key = ShareStateKey(key_struct.group_id, key_struct.topic_id, key_struct.partition)
        if value is None:
            return ShareRecord(record_type, state_key, batches=None)
        if len(value) < 2:
            raise CorruptShareRecordError("share state value shorter than its version")
        (version,) = _I16.unpack_from(value, 0)
        if version != VALUE_VERSION:
            raise CorruptShareRecordError(f"share state value: unknown version {version}")
        if record_type is ShareRecordType.SHARE_SNAPSHOT:
            v, _ = decode_from(ShareSnapshotValue, value, version, 2)
            return ShareRecord(record_type, state_key, v.snapshot_epoch, v.state_epoch, v.leader_epoch, v.start_offset,
                               v.delivery_complete_count, _batches(v.state_batches), v.create_timestamp,
                               v.write_timestamp)
        u, _ = decode_from(ShareUpdateValue, value, version, 2)
        return ShareRecord(record_type, state_key, u.snapshot_epoch, 0, u.leader_epoch, u.start_offset,
                           u.delivery_complete_count, _batches(u.state_batches))
    except CorruptShareRecordError:
        raise
    except ProtocolError as e:
        raise CorruptShareRecordError(str(e)) from e
