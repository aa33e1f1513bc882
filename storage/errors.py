"""Errors raised by the storage layer, each carrying the Kafka error code the broker answers with.

Every exception a caller can meaningfully answer a client with derives from `StorageError` and has an
`error_code` class attribute holding Kafka's number (Errors.java), so the broker maps them without a table.
`KafkaStorageError` (56) covers I/O failures and log directories that cannot be used; its subclasses name
the two refusals at start-up (a directory locked by another process, a directory that is not ours).
"""

from __future__ import annotations

from odradek.protocol.errors import KafkaApiError


class StorageError(KafkaApiError):
    """Base of every storage-layer error. `error_code` is Kafka's UNKNOWN_SERVER_ERROR unless overridden.

    `record_errors`: for a batch refused because of some of its records, (index in the batch, why) for each
    of them, answered as ProduceResponse's record_errors (KIP-467); empty otherwise."""

    error_code: int = -1

    def __init__(self, *args: object, record_errors: list[tuple[int, str]] | tuple = ()) -> None:
        super().__init__(*args)
        self.record_errors = record_errors


class OffsetOutOfRangeError(StorageError):
    """OFFSET_OUT_OF_RANGE: the offset is below the log start offset or above the log end offset."""

    error_code = 1


class CorruptMessageError(StorageError):
    """CORRUPT_MESSAGE: a batch failed validation (layout, magic, length or CRC)."""

    error_code = 2


class MessageTooLargeError(StorageError):
    """MESSAGE_TOO_LARGE: one batch is larger than `max.message.bytes`."""

    error_code = 10


class RecordListTooLargeError(StorageError):
    """RECORD_LIST_TOO_LARGE: the batches of one append do not fit in a segment (`segment.bytes`)."""

    error_code = 18


class InvalidTimestampError(StorageError):
    """INVALID_TIMESTAMP: a CreateTime timestamp is outside the allowed distance from the broker's clock."""

    error_code = 32


class OutOfOrderSequenceError(StorageError):
    """OUT_OF_ORDER_SEQUENCE_NUMBER: an idempotent producer's sequence does not follow its last one."""

    error_code = 45


class InvalidProducerEpochError(StorageError):
    """INVALID_PRODUCER_EPOCH: the producer epoch is older than the one the log has seen (fenced)."""

    error_code = 47


class InvalidTxnStateError(StorageError):
    """INVALID_TXN_STATE: a non-transactional write from a producer whose transaction is open."""

    error_code = 48


class TransactionCoordinatorFencedError(StorageError):
    """TRANSACTION_COORDINATOR_FENCED: a marker from a coordinator epoch older than one already seen."""

    error_code = 52


class KafkaStorageError(StorageError):
    """KAFKA_STORAGE_ERROR: the log directory cannot be read or written."""

    error_code = 56


class UnknownProducerIdError(StorageError):
    """UNKNOWN_PRODUCER_ID: the log has no state for this producer and the batch does not start at sequence 0."""

    error_code = 59


class InvalidRecordError(StorageError):
    """INVALID_RECORD: a batch is well formed but not acceptable here (e.g. a control batch from a client)."""

    error_code = 87


class UnexpectedAppendOffsetError(StorageError):
    """A replicated append does not start at or after the log end offset (a replication bug, not a client's)."""


class LogDirectoryLockedError(KafkaStorageError):
    """Another process (or another LogManager) holds the lock of this log directory."""


class ForeignLogDirectoryError(KafkaStorageError):
    """The directory holds files but is not an Odradek log directory, or belongs to another node or cluster."""
