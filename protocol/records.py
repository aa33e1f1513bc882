"""Record batches, magic 2 (the only format Kafka 4 accepts on produce).

Wire layout of one batch (big-endian), offsets from the start of the batch:

     0  baseOffset            int64   stamped by the broker
     8  batchLength           int32   bytes after this field (total size = batchLength + 12)
    12  partitionLeaderEpoch  int32   stamped by the broker
    16  magic                 int8    = 2
    17  crc                   uint32  CRC-32C of bytes [21, end)
    21  attributes            int16   bits 0-2 codec, 3 LogAppendTime, 4 transactional, 5 control,
                                      6 hasDeleteHorizonMs
    23  lastOffsetDelta       int32
    27  baseTimestamp         int64
    35  maxTimestamp          int64
    43  producerId            int64
    51  producerEpoch         int16
    53  baseSequence          int32
    57  recordsCount          int32
    61  records...            (compressed as a whole when the codec is not 0)

baseOffset and partitionLeaderEpoch sit before the CRC'd span on purpose: the broker assigns offsets and
stamps the leader epoch in place without recomputing CRC-32C. Changing attributes or timestamps
(LogAppendTime) does change the CRC.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

from .errors import CorruptRecordError

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes not counted by batchLength
MAGIC = 2

ATTR_CODEC_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_LEN = struct.Struct(">qi")
_STAMP = struct.Struct(">q")
_EPOCH = struct.Struct(">i")


@dataclass(slots=True)
class BatchHeader:
    """The 61-byte header of one magic-2 batch, as read (nothing here is verified but the layout)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_CODEC_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def timestamp_type_log_append(self) -> bool:
        return bool(self.attributes & ATTR_LOG_APPEND_TIME)

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record; sequences wrap at INT32_MAX to 0."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % 0x80000000


def read_batch_header(buf, pos: int = 0) -> BatchHeader:
    """Read the header at `pos`. Raises CorruptRecordError when fewer than 61 bytes remain."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"batch header needs {HEADER_SIZE} bytes, {len(buf) - pos} remain")
    return BatchHeader(*_HEADER.unpack_from(buf, pos))


def peek_offset_and_length(buf, pos: int) -> tuple[int, int]:
    """baseOffset and batchLength, the first 12 bytes: enough to walk a log without parsing batches."""
    return _OFFSET_LEN.unpack_from(buf, pos)


def compute_crc(buf, pos: int, size: int) -> int:
    """CRC-32C of the batch at `pos` spanning `size` bytes (from attributes to the end)."""
    return crc32c(memoryview(buf)[pos + 21 : pos + size])


def validate_batch(buf, pos: int = 0, *, max_size: int | None = None) -> BatchHeader:
    """Check one batch at `pos` without touching its records: layout, magic, length, count and CRC.

    The batch must lie wholly within `buf`. Raises CorruptRecordError naming the first fault.
    """
    header = read_batch_header(buf, pos)
    if header.magic != MAGIC:
        raise CorruptRecordError(f"unsupported magic {header.magic}; only record batch v2 is accepted")
    size = header.size
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"batch length {header.batch_length} is shorter than a batch header")
    if max_size is not None and size > max_size:
        raise CorruptRecordError(f"batch of {size} bytes exceeds the limit of {max_size}")
    if size > len(buf) - pos:
        raise CorruptRecordError(f"batch claims {size} bytes but only {len(buf) - pos} remain")
    if header.records_count < 0 or header.last_offset_delta < 0:
        raise CorruptRecordError("negative record count or last offset delta")
    if header.compression == 0 and header.records_count > 0 and header.last_offset_delta + 1 < header.records_count:
        raise CorruptRecordError("last offset delta is smaller than the record count implies")
    if header.records_count == 0 and not header.is_control:
        raise CorruptRecordError("a batch must hold at least one record")
    if compute_crc(buf, pos, size) != header.crc:
        raise CorruptRecordError("CRC-32C mismatch")
    return header


def stamp_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Assign the batch's base offset in place (outside the CRC)."""
    _STAMP.pack_into(buf, pos, base_offset)


def stamp_leader_epoch(buf: bytearray | memoryview, pos: int, leader_epoch: int) -> None:
    """Stamp partitionLeaderEpoch in place (outside the CRC)."""
    _EPOCH.pack_into(buf, pos + 12, leader_epoch)
