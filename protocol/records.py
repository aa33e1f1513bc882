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

One record (after decompression of the records section; VARINT/VARLONG are ZigZag, see varint.py):

    length VARINT (bytes after this field) | attributes INT8 (unused, 0) | timestampDelta VARLONG |
    offsetDelta VARINT | keyLength VARINT (-1 = null) | key | valueLength VARINT (-1 = null) | value |
    headerCount VARINT | [headerKeyLength VARINT, headerKey (UTF-8), headerValueLength VARINT (-1 = null),
    headerValue]...

A record's offset is baseOffset + offsetDelta, its timestamp baseTimestamp + timestampDelta, or the
batch's maxTimestamp when the batch is LogAppendTime. When bit 6 (hasDeleteHorizonMs, set by the
compaction cleaner) is on, baseTimestamp holds the delete horizon and deltas are relative to it.

A control batch (bit 5; transaction markers also set bit 4) holds one control record:
key = INT16 version (0), INT16 type (0 ABORT, 1 COMMIT); value = INT16 version (0), INT32 coordinatorEpoch.

The decoding and building functions below are for clients, tools and the compaction cleaner; the broker's
produce and fetch paths only touch headers (validate_batch, stamping) and pass record bytes through.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from crc32c import crc32c

from .compression import NONE, compress, decompress
from .errors import CorruptRecordError, LocalProtocolError, RemoteProtocolError
from .varint import read_varint, read_varlong, write_varint, write_varlong

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
_FIRST_16 = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch


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

    The batch must lie wholly within `buf`. Raises CorruptRecordError naming the first fault. An empty
    batch is structurally valid (the compaction cleaner keeps one to preserve a producer's state); the
    produce path refuses empty batches itself.
    """
    header = read_batch_header(buf, pos)
    if header.magic != MAGIC:
        raise CorruptRecordError(f"unsupported magic {header.magic}; only record batch v2 is accepted")
    size = header.batch_length + LOG_OVERHEAD  # header.size, without the property call (hot path)
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"batch length {header.batch_length} is shorter than a batch header")
    if max_size is not None and size > max_size:
        raise CorruptRecordError(f"batch of {size} bytes exceeds the limit of {max_size}")
    if size > len(buf) - pos:
        raise CorruptRecordError(f"batch claims {size} bytes but only {len(buf) - pos} remain")
    if header.records_count < 0 or header.last_offset_delta < 0:
        raise CorruptRecordError("negative record count or last offset delta")
    if not header.attributes & ATTR_CODEC_MASK and 0 < header.records_count > header.last_offset_delta + 1:
        raise CorruptRecordError("last offset delta is smaller than the record count implies")
    if crc32c(memoryview(buf)[pos + 21 : pos + size]) != header.crc:  # compute_crc, inline
        raise CorruptRecordError("CRC-32C mismatch")
    return header


def stamp_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Assign the batch's base offset in place (outside the CRC)."""
    _STAMP.pack_into(buf, pos, base_offset)


def stamp_leader_epoch(buf: bytearray | memoryview, pos: int, leader_epoch: int) -> None:
    """Stamp partitionLeaderEpoch in place (outside the CRC)."""
    _EPOCH.pack_into(buf, pos + 12, leader_epoch)


def stamp_offset_and_epoch(buf: bytearray | memoryview, pos: int, header: BatchHeader, base_offset: int,
                           leader_epoch: int) -> None:
    """Both stamps above in one write (the append path's): the batch's first 16 bytes, baseOffset,
    batchLength (rewritten as read) and partitionLeaderEpoch, all outside the CRC."""
    _FIRST_16.pack_into(buf, pos, base_offset, header.batch_length, leader_epoch)


# ------------------------------------------------------------------------------------- records and batches

NO_TIMESTAMP = -1
NO_PARTITION_LEADER_EPOCH = -1

# Control record types (the INT16 in a control record's key).
ABORT = 0
COMMIT = 1

_MIN_RECORD_SIZE = 7  # length, attributes, timestampDelta, offsetDelta, keyLength, valueLength, headerCount
_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")
_ATTRIBUTES = struct.Struct(">h")
_CRC = struct.Struct(">I")


@dataclass(slots=True)
class Record:
    """One decoded record. `offset` and `timestamp` are absolute (batch base + delta)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)
    attributes: int = 0


def iter_batches(buf) -> Iterator[tuple[int, BatchHeader]]:
    """Walk the concatenated batches in `buf`, yielding (position, header) for each whole batch.

    Only the layout is read (no CRC check: use validate_batch for that). Iteration stops without error at a
    partial trailing batch, as a fetch response may end with one. A batch length too short to hold a header
    or a magic other than 2 raises CorruptRecordError, since the walk cannot go on past it.
    """
    pos = 0
    n = len(buf)
    while n - pos >= LOG_OVERHEAD:
        _, length = _OFFSET_LEN.unpack_from(buf, pos)
        if length < HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptRecordError(f"batch at {pos} has length {length}, shorter than a batch header")
        size = length + LOG_OVERHEAD
        if size > n - pos:
            return
        header = read_batch_header(buf, pos)
        if header.magic != MAGIC:
            raise CorruptRecordError(f"batch at {pos} has unsupported magic {header.magic}")
        yield pos, header
        pos += size


def iter_records(batch_bytes, *, max_uncompressed_bytes: int) -> Iterator[Record]:
    """Decode the records of the batch at the start of `batch_bytes` (bytes after the batch are ignored).

    The batch is checked first with validate_batch (layout, magic, CRC); a compressed records section is
    inflated to at most `max_uncompressed_bytes` (RecordTooLargeError beyond). These checks run at call
    time; record-level faults (a length running past its record, a count that does not match
    recordsCount, trailing bytes) raise CorruptRecordError while iterating.
    """
    header = validate_batch(batch_bytes, 0)
    body = memoryview(batch_bytes)[HEADER_SIZE : header.size]
    if header.compression != NONE:
        data = decompress(header.compression, body, max_uncompressed_bytes)
    else:
        data = bytes(body)
    return _decode_records(data, header)


def _decode_records(data: bytes, header: BatchHeader) -> Iterator[Record]:
    count = header.records_count
    end = len(data)
    if count > end // _MIN_RECORD_SIZE:  # checked before any record is decoded (protocol/limits.py)
        raise CorruptRecordError(f"recordsCount {count} cannot fit in the batch's {end} bytes of records")
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    log_append_time = header.max_timestamp if header.attributes & ATTR_LOG_APPEND_TIME else None
    pos = 0
    try:
        for _ in range(count):
            length, pos = read_varint(data, pos)
            record_end = pos + length
            if length < _MIN_RECORD_SIZE - 1 or record_end > end:
                raise CorruptRecordError(f"record length {length} at {pos} does not fit the batch")
            attributes = data[pos]
            timestamp_delta, pos = read_varlong(data, pos + 1)
            offset_delta, pos = read_varint(data, pos)

            size, pos = read_varint(data, pos)
            if size < 0:
                if size != -1:
                    raise CorruptRecordError(f"negative key length {size}")
                key = None
            elif size > record_end - pos:
                raise CorruptRecordError(f"key length {size} runs past the record")
            else:
                key = data[pos : pos + size]
                pos += size

            size, pos = read_varint(data, pos)
            if size < 0:
                if size != -1:
                    raise CorruptRecordError(f"negative value length {size}")
                value = None
            elif size > record_end - pos:
                raise CorruptRecordError(f"value length {size} runs past the record")
            else:
                value = data[pos : pos + size]
                pos += size

            header_count, pos = read_varint(data, pos)
            if header_count < 0 or 2 * header_count > record_end - pos:
                raise CorruptRecordError(f"headerCount {header_count} does not fit the record")
            headers = []
            for _ in range(header_count):
                size, pos = read_varint(data, pos)
                if size < 0 or size > record_end - pos:
                    raise CorruptRecordError(f"header key length {size} does not fit the record")
                header_key = str(data[pos : pos + size], "utf-8", "surrogateescape")
                pos += size
                size, pos = read_varint(data, pos)
                if size < 0:
                    if size != -1:
                        raise CorruptRecordError(f"negative header value length {size}")
                    header_value = None
                elif size > record_end - pos:
                    raise CorruptRecordError(f"header value length {size} runs past the record")
                else:
                    header_value = data[pos : pos + size]
                    pos += size
                headers.append((header_key, header_value))

            if pos != record_end:
                raise CorruptRecordError(f"record declares {length} bytes but its fields end elsewhere")
            timestamp = base_timestamp + timestamp_delta if log_append_time is None else log_append_time
            yield Record(base_offset + offset_delta, timestamp, key, value, headers, attributes)
    except CorruptRecordError:
        raise
    except RemoteProtocolError as e:  # a truncated or over-long varint
        raise CorruptRecordError(f"malformed record: {e}") from e
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left after the {count} records the batch declares")


def _write_nullable(out: bytearray, data) -> None:
    if data is None:
        out.append(1)  # ZigZag(-1)
    else:
        write_varint(out, len(data))
        out += data


def build_batch(
    records: Iterable,
    *,
    base_offset: int = 0,
    compression: int = NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    timestamp_type_log_append: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    base_timestamp: int | None = None,
    delete_horizon_ms: int | None = None,
    compression_level: int | None = None,
) -> bytes:
    """Encode one magic-2 batch holding `records` (at least one), with a valid CRC.

    Each record is either a tuple (key, value, headers, timestamp) or an object with those attributes
    (a Record, for instance); headers are (str or bytes key, bytes or None value) pairs, a timestamp of None
    is written as -1. Tuples take consecutive offset deltas; an object with a non-None `offset` takes
    offset - base_offset, so a compacted batch keeps its gaps (offsets must increase). baseTimestamp is
    `base_timestamp`, else the first record's timestamp; `delete_horizon_ms` (for the cleaner) sets bit 6
    and replaces it. maxTimestamp is the largest record timestamp.
    """
    body = bytearray()
    rec = bytearray()
    count = 0
    delta = -1
    max_timestamp = NO_TIMESTAMP
    if delete_horizon_ms is not None:
        base_timestamp = delete_horizon_ms
    for r in records:
        if hasattr(r, "value"):
            key, value, headers, timestamp = r.key, r.value, r.headers, r.timestamp
            offset = getattr(r, "offset", None)
            attributes = getattr(r, "attributes", 0)
            new_delta = delta + 1 if offset is None else offset - base_offset
        else:
            key, value, headers, timestamp = r
            attributes = 0
            new_delta = delta + 1
        if new_delta <= delta:
            raise LocalProtocolError(f"record offsets must increase: delta {new_delta} after {delta}")
        delta = new_delta
        if timestamp is None:
            timestamp = NO_TIMESTAMP
        if base_timestamp is None:
            base_timestamp = timestamp
        if timestamp > max_timestamp:
            max_timestamp = timestamp

        rec.clear()
        rec.append(attributes & 0xFF)
        write_varlong(rec, timestamp - base_timestamp)
        write_varint(rec, delta)
        _write_nullable(rec, key)
        _write_nullable(rec, value)
        if headers:
            write_varint(rec, len(headers))
            for header_key, header_value in headers:
                if isinstance(header_key, str):
                    header_key = header_key.encode("utf-8", "surrogateescape")
                write_varint(rec, len(header_key))
                rec += header_key
                _write_nullable(rec, header_value)
        else:
            rec.append(0)
        write_varint(body, len(rec))
        body += rec
        count += 1
    if count == 0:
        raise LocalProtocolError("a batch needs at least one record")
    assert base_timestamp is not None
    return _wrap(body, count, delta, base_timestamp, max_timestamp, base_offset=base_offset, compression=compression,
                 producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                 transactional=transactional, control=control, timestamp_type_log_append=timestamp_type_log_append,
                 partition_leader_epoch=partition_leader_epoch, delete_horizon=delete_horizon_ms is not None,
                 compression_level=compression_level)


def wrap_records(
    body,
    count: int,
    base_timestamp: int,
    max_timestamp: int,
    *,
    compression: int = NONE,
    compression_level: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
) -> bytes:
    """A batch around an already encoded, uncompressed records section `body` of `count` records whose
    offset deltas are 0..count-1 (compressed here when `compression` is set), with a valid CRC.

    For producers that encode records in bulk (the Spark sink encodes an Arrow batch's columns at once);
    `build_batch` is the record-by-record way to the same bytes."""
    if count <= 0:
        raise LocalProtocolError("a batch needs at least one record")
    return _wrap(body, count, count - 1, base_timestamp, max_timestamp, base_offset=0, compression=compression,
                 producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                 transactional=transactional, control=False, timestamp_type_log_append=False,
                 partition_leader_epoch=NO_PARTITION_LEADER_EPOCH, delete_horizon=False,
                 compression_level=compression_level)


def _wrap(body, count: int, last_delta: int, base_timestamp: int, max_timestamp: int, *, base_offset: int,
          compression: int, producer_id: int, producer_epoch: int, base_sequence: int, transactional: bool,
          control: bool, timestamp_type_log_append: bool, partition_leader_epoch: int, delete_horizon: bool,
          compression_level: int | None) -> bytes:
    attributes = compression
    if timestamp_type_log_append:
        attributes |= ATTR_LOG_APPEND_TIME
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    if control:
        attributes |= ATTR_CONTROL
    if delete_horizon:
        attributes |= ATTR_DELETE_HORIZON
    payload = compress(compression, body, level=compression_level) if compression != NONE else body

    out = bytearray(HEADER_SIZE)
    out += payload
    try:
        _HEADER.pack_into(
            out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, MAGIC, 0, attributes, last_delta,
            base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, count,
        )
    except struct.error as e:
        raise LocalProtocolError(f"batch header field out of range: {e}") from e
    _CRC.pack_into(out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


def build_control_batch(
    marker: int,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker batch (control and transactional bits set) holding one COMMIT or ABORT record."""
    if marker not in (ABORT, COMMIT):
        raise LocalProtocolError(f"a transaction marker is COMMIT or ABORT, not {marker}")
    key = _CONTROL_KEY.pack(0, marker)
    value = _END_TXN_VALUE.pack(0, coordinator_epoch)
    return build_batch(
        [(key, value, None, timestamp)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def parse_control_record(record) -> tuple[int, int]:
    """(control type, coordinator epoch) of a control record; the epoch is -1 for types other than the
    transaction markers ABORT and COMMIT (KRaft's own control types), whose values are not parsed here."""
    key = record.key
    if key is None or len(key) < 4:
        raise CorruptRecordError("control record key shorter than 4 bytes")
    version, kind = _CONTROL_KEY.unpack_from(key, 0)
    if version < 0:
        raise CorruptRecordError(f"invalid control record key version {version}")
    if kind not in (ABORT, COMMIT):
        return kind, -1
    value = record.value
    if value is None or len(value) < 6:
        raise CorruptRecordError("transaction marker value shorter than 6 bytes")
    version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value, 0)
    if version < 0:
        raise CorruptRecordError(f"invalid transaction marker value version {version}")
    return kind, coordinator_epoch


def set_log_append_time(buf: bytearray | memoryview, pos: int, now_ms: int) -> None:
    """Make the batch at `pos` LogAppendTime in place: set attribute bit 3 and maxTimestamp to `now_ms`,
    then recompute the CRC (the only header rewrite that needs one). The batch must lie wholly in `buf`."""
    header = read_batch_header(buf, pos)
    size = header.size
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or size > len(buf) - pos:
        raise CorruptRecordError(f"batch at {pos} claims {size} bytes, {len(buf) - pos} remain")
    _ATTRIBUTES.pack_into(buf, pos + 21, header.attributes | ATTR_LOG_APPEND_TIME)
    _STAMP.pack_into(buf, pos + 35, now_ms)
    _CRC.pack_into(buf, pos + 17, compute_crc(buf, pos, size))
