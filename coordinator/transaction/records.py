"""Records of `__transaction_state`: one per transactional id, as Kafka lays them out.

    key    int16 key version (0)   + TransactionLogKey   {transactional_id: string}
    value  int16 value version     + TransactionLogValue, or null: a tombstone (the id expired)

The value holds the id's whole state (the topic is compacted: the latest record per id is the state).
Kafka writes value version 0 until the `transaction.version` feature is 1 or more; version 1 is flexible
and adds the tagged previous/next producer ids and the client's transaction version. Here a record is
written at version 1 when it carries one of those (a rotated producer id, a Transactions V2 client), else
at 0, which every Kafka coordinator reads: both versions decode the same, so the choice is only about what
the bytes can hold. An Empty transaction is written with null partitions, as Kafka writes it. Field facts:
transaction-coordinator/src/main/resources/common/message/TransactionLog{Key,Value}.json.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from odradek.protocol.codec import data_class, decode_from, encode
from odradek.protocol.errors import ProtocolError
from odradek.protocol.schema import F

from .metadata import TransactionMetadata, TransactionState

__all__ = ["CorruptTransactionRecordError", "TransactionRecord", "deserialize", "serialize", "VALUE_VERSION"]

_I16 = struct.Struct(">h")
KEY_VERSION = 0
VALUE_VERSION = 0  # what Kafka writes with transaction.version 0; 1 for what 0 cannot hold (see the module doc)

TransactionLogKey = data_class("TransactionLogKey", [F("transactional_id", "string")], valid="0", flexible="none")

TransactionLogValue = data_class("TransactionLogValue", [
    F("producer_id", "int64"),
    F("previous_producer_id", "int64", "1+", default=-1, tag=0, tagged="1+"),
    F("next_producer_id", "int64", "1+", default=-1, tag=1, tagged="1+"),
    F("producer_epoch", "int16"),
    F("transaction_timeout_ms", "int32"),
    F("transaction_status", "int8"),
    F("transaction_partitions", "[]PartitionsSchema", nullable="0+", fields=[
        F("topic", "string"),
        F("partition_ids", "[]int32"),
    ]),
    F("transaction_last_update_timestamp_ms", "int64"),
    F("transaction_start_timestamp_ms", "int64"),
    F("client_transaction_version", "int16", "1+", default=0, tag=2, tagged="1+"),
], valid="0-1", flexible="1+")


class CorruptTransactionRecordError(ProtocolError):
    """A record of `__transaction_state` that cannot be decoded; loading the partition fails on it."""


@dataclass(frozen=True, slots=True)
class TransactionRecord:
    """One transactional id's state as written (`metadata` None: a tombstone)."""

    transactional_id: str
    metadata: TransactionMetadata | None


def serialize(record: TransactionRecord) -> tuple[bytes, bytes | None]:
    key = _I16.pack(KEY_VERSION) + encode(TransactionLogKey(transactional_id=record.transactional_id), KEY_VERSION)
    m = record.metadata
    if m is None:
        return key, None
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(m.partitions):
        by_topic.setdefault(topic, []).append(partition)
    value = TransactionLogValue(
        producer_id=m.producer_id,
        previous_producer_id=m.previous_producer_id,
        next_producer_id=m.next_producer_id,
        producer_epoch=m.producer_epoch,
        transaction_timeout_ms=m.txn_timeout_ms,
        transaction_status=int(m.state),
        transaction_partitions=None if m.state is TransactionState.EMPTY else [
            TransactionLogValue.PartitionsSchema(topic=t, partition_ids=ps) for t, ps in by_topic.items()],
        transaction_last_update_timestamp_ms=m.txn_last_update_timestamp_ms,
        transaction_start_timestamp_ms=m.txn_start_timestamp_ms,
        client_transaction_version=m.client_transaction_version,
    )
    # Version 1 only when the id carries what version 0 cannot hold (a previous or next producer id after a
    # rotation, a Transactions V2 client).
    version = (VALUE_VERSION if m.previous_producer_id < 0 and m.next_producer_id < 0
               and m.client_transaction_version == 0 else 1)
    return key, _I16.pack(version) + encode(value, version)


def deserialize(key: bytes | None, value: bytes | None) -> TransactionRecord | None:
    """Decode one record; None for a key version this coordinator does not know (skipped, as Kafka does)."""
    if key is None or len(key) < 2:
        raise CorruptTransactionRecordError("record of __transaction_state without a versioned key")
    (key_version,) = _I16.unpack_from(key, 0)
    if key_version != KEY_VERSION:
        return None
    try:
        key_struct, end = decode_from(TransactionLogKey, key, KEY_VERSION, 2)
        if end != len(key):
            raise CorruptTransactionRecordError(f"TransactionLogKey: {len(key) - end} trailing bytes")
        txn_id = key_struct.transactional_id
        if value is None:
            return TransactionRecord(txn_id, None)
        if len(value) < 2:
            raise CorruptTransactionRecordError("TransactionLogValue: value shorter than its version")
        (version,) = _I16.unpack_from(value, 0)
        if not 0 <= version <= 1:
            raise CorruptTransactionRecordError(f"TransactionLogValue: unknown version {version}")
        v, _ = decode_from(TransactionLogValue, value, version, 2)
        state = TransactionState(v.transaction_status)
    except ProtocolError as e:
        if isinstance(e, CorruptTransactionRecordError):
            raise
        raise CorruptTransactionRecordError(str(e)) from e
    except ValueError as e:
        raise CorruptTransactionRecordError(f"TransactionLogValue: {e}") from e
    partitions = frozenset((p.topic, i) for p in (v.transaction_partitions or ()) for i in p.partition_ids)
    return TransactionRecord(txn_id, TransactionMetadata(
        transactional_id=txn_id, producer_id=v.producer_id, previous_producer_id=v.previous_producer_id,
        next_producer_id=v.next_producer_id, producer_epoch=v.producer_epoch, last_producer_epoch=-1,
        txn_timeout_ms=v.transaction_timeout_ms, state=state, partitions=partitions,
        txn_start_timestamp_ms=v.transaction_start_timestamp_ms,
        txn_last_update_timestamp_ms=v.transaction_last_update_timestamp_ms,
        client_transaction_version=v.client_transaction_version,
    ))
