"""Record batches straight to Arrow columns and back, with as little per-record Python as possible.

Why this module exists
----------------------
A Spark Python data source spends its time in Python. Through the bundled consumer, every record became
a `Record`, then a `ConsumerRecord`, then five list items that pyarrow converted back into columns: about
5 us a record, which capped a read near 180k rows/s on two cores. Spark itself moves a yielded
`pyarrow.RecordBatch` at ~700k rows/s, so the decoding was the cost. Here a fetched record batch goes to
Arrow columns in three steps:

1. **One Python step per record, the only one.** A record starts with its length (a ZigZag varint), so
   the only sequential part of a batch is the chain of record starts: `_walk` follows it with one lookup
   in a table indexed by the record's first two bytes (how far a record of under 8 KiB reaches) and one
   append to an `array` per record. Everything a record holds is at a position computable from its start.
2. **Every field, every record at once, in pyarrow.compute.** The bytes are a `uint8` Arrow array over
   the same buffer; each varint of every record (its length, then after the attributes byte the
   timestamp delta, offset delta, key length, value length, header count) is decoded for all records in
   one round of vectorised `take`/bit operations per varint byte (`_varints`), and each field's position
   is the previous one plus the previous length. So a fetch of 10,000 records costs a few dozen compute
   calls, whatever its size, and per-batch values (base offset, timestamp) are expanded column-wise.
3. **Keys and values are sliced, not copied one by one.** A BinaryArray is an offsets buffer and a data
   buffer. The value of record i is bytes [vs_i, ve_i) of the records buffer, and vs_0 <= ve_0 <= vs_1
   <= ... , so the interleaved offsets (vs_0, ve_0, vs_1, ...) over the whole buffer make a BinaryArray
   whose even elements are the values (the odd ones are the bytes in between); one `take` of the even
   elements copies them out in C. Nulls (length -1) get an empty slice and a validity bit.

Codecs: a compressed batch is inflated whole (protocol.compression, bounded) and its records section
joins the uncompressed ones in one buffer, so compressed and plain batches take the same path.

What stays per record in Python: records with headers when `includeHeaders` is on (or any header at
all, whose bytes the vectorised check cannot see), which go through `protocol.records.iter_records`
and `arrow.records_to_batch` instead: same columns, same checks, just slower.

Checks: each batch's layout and CRC-32C (`validate_batch`), recordsCount against the batch size, each
record's declared length against the fields found in it (every record must end exactly where its length
says, as `iter_records` requires), varints at most 5/10 bytes. A batch that fails raises
`CorruptRecordError`, so invalid bytes never reach Spark as rows.

The write side (`encode_for_partitions`) is the mirror, with no per-row Python at all:

* partitions as the Java producer picks them: the `partition` column, else murmur2 of every key at once
  (`key_partitions`: keys grouped by length, the hash's fixed steps run on uint64 columns), else, for
  rows without a key, one partition for the whole Arrow batch (what the sticky partitioner does);
* rows stably sorted by partition and cut into pieces of about `batch.size` bytes; each row's offset
  delta counts from the start of its piece;
* every record built by element-wise joins of columns (`_records`): its length varint, attributes and
  timestamp delta (0: the piece's records share one timestamp), offset delta, key length, key, value
  length, value and a header count of 0. Varints of 1-2 bytes come from a table (one `take`), longer
  ones byte by byte. The records are contiguous in the joined array's data buffer, so a piece's records
  section is one slice of it.

The producer then wraps each section in a batch header with its producer id, epoch and sequence
(`Producer.send_encoded`, `protocol.records.wrap_records`), and compresses it once when a codec is set.
"""

from __future__ import annotations

import struct
from array import array
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from odradek.client.producer import EncodedRecords
from odradek.protocol.compression import NONE, decompress
from odradek.protocol.errors import CorruptRecordError
from odradek.protocol.records import (
    ATTR_LOG_APPEND_TIME,
    HEADER_SIZE,
    BatchHeader,
    iter_records,
    validate_batch,
)

from .arrow import read_schema, records_to_batch

__all__ = ["MAX_UNCOMPRESSED", "decode_batches", "encode_for_partitions", "encode_records", "key_partitions"]

MAX_UNCOMPRESSED = 256 * 1024 * 1024  # one inflated batch (as the consumer's bound)
_MIN_RECORD_SIZE = 7


def _i(value: int) -> pa.Scalar:
    """An int64 scalar. Compute functions given a bare Python int convert it on every call, and that
    conversion tries to import numpy (a failed import, with its path search, when numpy is absent)."""
    return pa.scalar(value, pa.int64())


# ---------------------------------------------------------------------------------------- reading


def _span_table() -> list[int]:
    """For every two bytes (b0, b1) a record can start with, how far the record reaches from its start: the
    length varint's own size plus the length, when the length is a non-negative 1- or 2-byte ZigZag varint
    (a record under 8 KiB); 0 otherwise (a longer varint, or a negative length), which stops the fast walk
    so that `_walk_carefully` judges the batch. Indexed by `b0 | b1 << 8`, so the walk needs no branch."""
    table = [0] * 65536
    for b0 in range(0x80):
        if not b0 & 1:
            span = 1 + (b0 >> 1)
            for b1 in range(256):
                table[b0 | b1 << 8] = span
    for b0 in range(0x80, 0x100):
        for b1 in range(0x80):
            n = (b0 & 0x7F) | (b1 << 7)
            if not n & 1:
                table[b0 | b1 << 8] = 2 + (n >> 1)
    return table


_SPAN = _span_table()
_U16 = struct.Struct("<H").unpack_from


def _walk(data: bytes, pos: int, end: int, count: int, starts: array) -> None:
    """Append the start of each of the `count` records in data[pos:end] to `starts`: the only sequential
    step of decoding a batch (a record's start is the previous start plus the previous record's length).

    The loop body is the read path's whole per-record Python: one table lookup on the record's first two
    bytes and one append. A record of 8 KiB or more, a negative length, or a chain that does not end
    exactly at `end` sends the batch to `_walk_carefully`, which also says what is wrong when it is."""
    mark = len(starts)
    add = starts.append
    span = _SPAN
    u16 = _U16
    at = pos
    try:
        for _ in range(count):
            add(at)
            at += span[u16(data, at)[0]]
    except struct.error:  # a record start on the last byte of the buffer: past its batch anyway
        at = -1
    if at != end:
        del starts[mark:]
        _walk_carefully(data, pos, end, count, starts)


def _walk_carefully(data: bytes, pos: int, end: int, count: int, starts: array) -> None:
    for _ in range(count):
        starts.append(pos)
        n, pos = _uvarint(data, pos, end)
        length = (n >> 1) ^ -(n & 1)
        if length < 0:
            raise CorruptRecordError(f"a record has a negative length ({length})")
        pos += length
        if pos > end:
            raise CorruptRecordError(f"a record's length runs past its batch (at {pos}, batch ends {end})")
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left after the {count} records the batch declares")


def _uvarint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    for i in range(5):
        if pos + i >= end:
            raise CorruptRecordError("a record's length runs past its batch")
        b = data[pos + i]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos + i + 1
        shift += 7
    raise CorruptRecordError("a record length varint is longer than 5 bytes")


def _varints(data: pa.Array, pos: pa.Array, max_len: int) -> tuple[pa.Array, pa.Array]:
    """The ZigZag varint at each position of `pos` in the uint8 array `data`: (values, lengths), int64.

    One round per varint byte: round k reads byte k of the varints still going on. int64 holds every
    value a record field can have here (a length or delta of 32 bits, a timestamp delta far below 2^56);
    a varlong of 9 or 10 bytes is left to the record-by-record decoder. A position outside `data` (a
    malformed record) makes `take` raise IndexError, which sends the batch to that decoder too."""
    byte = pc.take(data, pos).cast(pa.int64())
    more = pc.greater(byte, _I127)
    if not pc.any(more).as_py():  # the usual case: every value fits one byte
        return _unzigzag(byte), _ones(len(pos))
    value = pc.bit_wise_and(byte, _I127)
    length = _ones(len(pos))
    k = 1
    while pc.any(more).as_py():
        if k == max_len or k == 8:
            raise _NotVectorised(f"a record varint of more than {k} bytes")
        byte = pc.take(data, pc.add(pos, _i(k))).cast(pa.int64())
        part = pc.shift_left(pc.bit_wise_and(byte, _I127), _i(7 * k))
        value = pc.if_else(more, pc.bit_wise_or(value, part), value)
        length = pc.add(length, more.cast(pa.int64()))
        more = pc.and_(more, pc.greater(byte, _I127))
        k += 1
    return _unzigzag(value), length


def _unzigzag(value: pa.Array) -> pa.Array:
    """(v >> 1) ^ -(v & 1), for non-negative int64 v."""
    return pc.bit_wise_xor(pc.shift_right(value, _i(1)), pc.negate(pc.bit_wise_and(value, _i(1))))


class _NotVectorised(Exception):
    """Something the column-wise decoder leaves to the record-by-record one (which also judges it)."""


_I127 = pa.scalar(0x7F, pa.int64())
_ONES: pa.Array = pa.array([], pa.int64())
_EVENS: pa.Array = pa.array([], pa.int64())


def _ones(n: int) -> pa.Array:
    global _ONES
    if len(_ONES) < n:
        _ONES = pa.repeat(_i(1), max(n, 2 * len(_ONES)))
    return _ONES.slice(0, n)


def _evens(n: int) -> pa.Array:
    """0, 2, 4, ... 2(n - 1)."""
    global _EVENS
    if len(_EVENS) < n:
        _EVENS = pc.multiply(_arange(max(n, 2 * len(_EVENS))), _i(2))
    return _EVENS.slice(0, n)


_ARANGE: pa.Array = pa.array([], pa.int64())


def _arange(n: int) -> pa.Array:
    global _ARANGE
    if len(_ARANGE) < n:
        _ARANGE = pa.array(range(max(n, 2 * len(_ARANGE))), pa.int64())
    return _ARANGE.slice(0, n)


def _int64s(values: array) -> pa.Array:
    """An int64 Arrow array over an `array("q")`'s own memory (no per-element conversion)."""
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def _slices(data_buffer: pa.Buffer, starts: pa.Array, lengths: pa.Array) -> pa.Array:
    """BinaryArray of data[starts[i] : starts[i] + lengths[i]], null where lengths[i] < 0 (no per-row Python).

    The slices lie in order in the buffer (starts[i] + lengths[i] <= starts[i + 1]). An int64 whose low half
    is start i and whose high half is end i is, in memory (little-endian), the int32 pair (start i, end i);
    so the int64 column `start | end << 32` is, read as int32, the offsets s0, e0, s1, e1, ... of a
    BinaryArray of 2n - 1 elements whose even elements are the slices and whose odd ones are the bytes in
    between. One `take` of the even elements copies the slices out, in C. Positions must be below 2^31."""
    n = len(starts)
    if n == 0:
        return pa.array([], pa.binary())
    valid = pc.greater_equal(lengths, _i(0))
    ends = pc.add(starts, pc.max_element_wise(lengths, _i(0)))
    pairs = pc.bit_wise_or(starts, pc.shift_left(ends, _i(32)))
    spans = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, pairs.buffers()[1], data_buffer])
    out = pc.take(spans, _evens(n))
    if not pc.all(valid).as_py():
        out = pc.if_else(valid, out, pa.scalar(None, pa.binary()))
    return out


def _per_record(run_ends: array, values: array) -> pa.Array:
    """values[j] repeated for each record of batch j (run_ends: cumulative record counts), int64. A fetch of
    a few big batches (what the sink and Java's producer write) is a few `repeat`s; many small ones are
    one run-end decode."""
    if len(values) <= 16:
        if len(values) == 1:
            return pa.repeat(_i(values[0]), run_ends[0])
        return pa.concat_arrays([pa.repeat(_i(v), e - s) for v, s, e in zip(values, [0, *run_ends], run_ends)])
    return pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(_int64s(run_ends), _int64s(values)))


def decode_batches(topic: str, partition: int, buf: Any, batches: Sequence[tuple[int, BatchHeader]], *,
                   start: int, end: int, include_headers: bool) -> pa.RecordBatch:
    """The records with start <= offset < end of `batches` (positions and headers in `buf`, as
    `protocol.records.iter_batches` yields them; control and aborted batches already left out) as one
    RecordBatch in the read schema.

    The records are copied once into a `bytes` (the walk indexes bytes fastest, and the Arrow columns
    slice keys and values out of it): the fetched span as it is when no batch is compressed, else each
    batch's records section, inflated where compressed, one after the other."""
    if not batches:
        return _empty(include_headers)
    view = memoryview(buf)
    first_pos = batches[0][0]
    last_pos, last = batches[-1]
    compressed = any(h.compression != NONE for _, h in batches)
    # Without a compressed batch (the usual case), one copy of the fetched span holds every record where it
    # lies; otherwise each batch's records section (inflated when compressed) is appended in batch order,
    # and `bases` says where each section starts in the joined buffer.
    region = b"" if compressed else bytes(view[first_pos:last_pos + last.size])
    parts: list[bytes] = []
    bases = array("q")
    size = 0
    starts = array("q")
    run_ends = array("q")
    base_offsets = array("q")
    base_timestamps = array("q")
    log_append = array("q")
    total = 0
    for pos, h in batches:
        validate_batch(view, pos)
        count = h.records_count
        if not compressed:
            data = region
            body, body_end = pos - first_pos + HEADER_SIZE, pos - first_pos + h.size
        else:
            section = view[pos + HEADER_SIZE: pos + h.size]
            data = bytes(section) if h.compression == NONE else decompress(h.compression, section, MAX_UNCOMPRESSED)
            body, body_end = 0, len(data)
        if count > (body_end - body) // _MIN_RECORD_SIZE:
            raise CorruptRecordError(f"recordsCount {count} cannot fit in the batch's {body_end - body} bytes of "
                                     "records")
        if count <= 0:
            if body_end != body:
                raise CorruptRecordError(f"{body_end - body} bytes left after the 0 records the batch declares")
            continue
        _walk(data, body, body_end, count, starts)
        if compressed:
            parts.append(data)
            bases.append(size)
            size += len(data)
        total += count
        run_ends.append(total)
        base_offsets.append(h.base_offset)
        appended = bool(h.attributes & ATTR_LOG_APPEND_TIME)
        base_timestamps.append(h.max_timestamp if appended else h.base_timestamp)
        log_append.append(int(appended))
    n = len(starts)
    if n == 0:
        return _empty(include_headers)
    joined = b"".join(parts) if compressed else region
    if len(joined) >= 1 << 31:  # `_slices` packs positions in 32 bits
        return _decode_slowly(topic, partition, view, batches, start, end, include_headers)

    buffer = pa.py_buffer(joined)
    data_u8 = pa.Array.from_buffers(pa.uint8(), len(joined), [None, buffer])
    record_at = _int64s(starts)
    if compressed:
        record_at = pc.add(record_at, _per_record(run_ends, bases))
    try:
        length, used = _varints(data_u8, record_at, 5)
        at = pc.add(record_at, used)
        record_end = pc.add(at, length)
        ts_delta, used = _varints(data_u8, pc.add(at, _i(1)), 10)  # after the attributes byte
        at = pc.add(pc.add(at, _i(1)), used)
        offset_delta, used = _varints(data_u8, at, 5)
        at = pc.add(at, used)
        key_len, used = _varints(data_u8, at, 5)
        key_at = pc.add(at, used)
        at = pc.add(key_at, pc.max_element_wise(key_len, _i(0)))
        value_len, used = _varints(data_u8, at, 5)
        value_at = pc.add(at, used)
        at = pc.add(value_at, pc.max_element_wise(value_len, _i(0)))
        header_count, used = _varints(data_u8, at, 5)
        # every record's fields must end exactly where its length says (where the walk found the next
        # record), with no header, and lengths of -1 (null) or more
        ok = (pc.all(pc.equal(pc.add(at, used), record_end)).as_py()
              and pc.min(key_len).as_py() >= -1 and pc.min(value_len).as_py() >= -1
              and not pc.any(pc.not_equal(header_count, _i(0))).as_py())
    except (_NotVectorised, IndexError):
        ok = False
    if not ok:
        # headers (or something the vectorised check refuses): the per-record decoder, which also says what
        # exactly is wrong when a record is malformed
        return _decode_slowly(topic, partition, view, batches, start, end, include_headers)

    offsets = pc.add(_per_record(run_ends, base_offsets), offset_delta)
    base_ts = _per_record(run_ends, base_timestamps)
    if any(log_append):
        appended_rows = _per_record(run_ends, log_append)
        ts_ms = pc.add(base_ts, pc.multiply(ts_delta, pc.subtract(_i(1), appended_rows)))
        type_array = appended_rows.cast(pa.int32())
    else:
        ts_ms = pc.add(base_ts, ts_delta)
        type_array = pa.repeat(_CREATE_TIME, n)
    columns = [
        _slices(buffer, key_at, key_len),
        _slices(buffer, value_at, value_len),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        offsets,
        pc.multiply(ts_ms, _i(1000)).cast(_TIMESTAMP_US),
        type_array,
    ]
    if include_headers:
        columns.append(pa.nulls(n, read_schema(True).field("headers").type))
    batch = pa.RecordBatch.from_arrays(columns, schema=read_schema(include_headers))
    first, last_offset = offsets[0].as_py(), offsets[n - 1].as_py()
    if first < start or last_offset >= end:
        batch = batch.filter(pc.and_(pc.greater_equal(offsets, _i(start)), pc.less(offsets, _i(end))))
    return batch


_CREATE_TIME = pa.scalar(0, pa.int32())
_TIMESTAMP_US = pa.timestamp("us", tz="UTC")


def _empty(include_headers: bool) -> pa.RecordBatch:
    schema = read_schema(include_headers)
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


def _decode_slowly(topic: str, partition: int, view: memoryview, batches: Sequence[tuple[int, BatchHeader]],
                   start: int, end: int, include_headers: bool) -> pa.RecordBatch:
    out = []
    for pos, h in batches:
        log_append = bool(h.attributes & ATTR_LOG_APPEND_TIME)
        records = [r for r in iter_records(view[pos:pos + h.size], max_uncompressed_bytes=MAX_UNCOMPRESSED)
                   if start <= r.offset < end]
        if records:
            out.append(records_to_batch(topic, partition, records, include_headers=include_headers,
                                        timestamp_type=1 if log_append else 0))
    if not out:
        return _empty(include_headers)
    if len(out) == 1:
        return out[0]
    return pa.Table.from_batches(out).combine_chunks().to_batches()[0]


# ---------------------------------------------------------------------------------------- writing

_U64 = pa.uint64()


def _u(value: int) -> pa.Scalar:
    return pa.scalar(value, _U64)


# scalars made once: a bare Python bytes argument is converted on every call, and that conversion tries to
# import dateutil (a failed import, with its path search, when it is absent)
_EMPTY = pa.scalar(b"", pa.binary())
_ZERO = pa.scalar(b"\x00", pa.binary())
_ZERO_ZERO = pa.scalar(b"\x00\x00", pa.binary())
_REPLACE_NULLS = pc.JoinOptions(null_handling="replace")

_TABLE_SIZE = 1 << 14  # every 1- and 2-byte varint
_TABLE: pa.Array | None = None


def _table() -> pa.Array:
    """The encodings of 0 .. 2^14 - 1, built once: one `take` encodes a column whose values are small."""
    global _TABLE
    if _TABLE is None:
        _TABLE = pa.array([bytes([v]) if v < 0x80 else bytes([(v & 0x7F) | 0x80, v >> 7]) for v in range(_TABLE_SIZE)],
                          pa.binary())
    return _TABLE


def _varint_column(zigzagged: pa.Array) -> pa.Array:
    """BinaryArray of the LEB128 encoding of each (already ZigZag-mapped, non-negative) value.

    Lengths and offset deltas under 8 KiB (ZigZag under 2^14) are looked up in a table. Otherwise byte k
    of every encoding is computed at once; the values that have a byte k make a BinaryArray of one-byte
    and empty elements (offsets = running count), and the columns are joined element-wise."""
    n = len(zigzagged)
    if n and pc.max(zigzagged).as_py() < _TABLE_SIZE:
        return pc.take(_table(), zigzagged)
    rest = zigzagged.cast(_U64)
    columns = []
    for k in range(5):
        more = pc.greater_equal(rest, _u(0x80))
        byte = pc.bit_wise_or(pc.bit_wise_and(rest, _u(0x7F)), pc.if_else(more, _u(0x80), _u(0)))
        if k == 0:
            offsets = _arange(n + 1).cast(pa.int32())
            data = byte.cast(pa.uint8())
        else:
            present = pc.greater_equal(zigzagged, _u(1 << (7 * k)))
            if not pc.any(present).as_py():
                break
            data = pc.filter(byte, present).cast(pa.uint8())
            offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(present.cast(pa.int32()))])
        columns.append(pa.Array.from_buffers(pa.binary(), n, [None, offsets.buffers()[1], data.buffers()[1]]))
        rest = pc.shift_right(rest, _u(7))
    if len(columns) == 1:
        return columns[0]
    return pc.binary_join_element_wise(*columns, _EMPTY)


def _zigzag(values: pa.Array) -> pa.Array:
    """ZigZag of int64 values >= -1 (lengths and deltas): 2v, and 1 for -1."""
    v = values.cast(pa.int64())
    return pc.if_else(pc.less(v, _i(0)), _i(1), pc.multiply(v, _i(2))).cast(_U64)


def _binary(column: pa.Array | None, n: int) -> pa.Array:
    if column is None:
        return pa.nulls(n, pa.binary())
    if pa.types.is_large_string(column.type) or pa.types.is_large_binary(column.type):
        column = column.cast(pa.large_binary()).cast(pa.binary())
    return column.cast(pa.binary())


def _records(keys: pa.Array, values: pa.Array, deltas: pa.Array) -> pa.Array:
    """BinaryArray whose element i is record i encoded (offset delta `deltas[i]`, timestamp delta 0, no
    headers); keys and values are binary, null allowed. The elements are contiguous in its data buffer,
    so a run of records is a slice of it.

    Record i is `length | 0 (attributes) | 0 (timestampDelta) | offsetDelta | keyLength | key |
    valueLength | value | 0 (headerCount)`; every piece is a column and an element-wise join builds all
    records in C."""
    key_len = pc.fill_null(pc.binary_length(keys).cast(pa.int64()), _i(-1))
    value_len = pc.fill_null(pc.binary_length(values).cast(pa.int64()), _i(-1))
    delta = _varint_column(pc.multiply(deltas.cast(pa.int64()), _i(2)).cast(_U64))
    key_varint = _varint_column(_zigzag(key_len))
    value_varint = _varint_column(_zigzag(value_len))
    inner = pc.binary_join_element_wise(_ZERO_ZERO, delta, key_varint, keys, value_varint, values, _ZERO, _EMPTY,
                                        options=_REPLACE_NULLS)
    inner_len = pc.binary_length(inner).cast(pa.int64())
    return pc.binary_join_element_wise(_varint_column(_zigzag(inner_len)), inner, _EMPTY)


def _section(records: pa.Array, first: int, count: int) -> bytes:
    """The bytes of records [first, first + count) of a `_records` array."""
    offsets = pa.Array.from_buffers(pa.int32(), len(records) + 1, [None, records.buffers()[1]], offset=records.offset)
    start, end = offsets[first].as_py(), offsets[first + count].as_py()
    return records.buffers()[2][start:end].to_pybytes()


def encode_records(keys: pa.Array, values: pa.Array) -> tuple[bytes, pa.Array]:
    """The records section of one batch holding these rows, in order (offset deltas 0..n-1), and each
    record's encoded size."""
    n = len(values)
    records = _records(keys, values, _arange(n))
    return _section(records, 0, n), pc.binary_length(records)


# Kafka's murmur2 (client/partitioner.py), for every key of a column at once: keys are grouped by length,
# and each group runs the hash's fixed sequence of steps on uint64 columns (every product fits: a 32-bit
# value times the 31-bit constant), masked back to 32 bits.
_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def _mul(h: pa.Array) -> pa.Array:
    return pc.bit_wise_and(pc.multiply(h, _u(_M)), _u(_MASK))


def _xor_shift(h: pa.Array, bits: int) -> pa.Array:
    return pc.bit_wise_xor(h, pc.shift_right(h, _u(bits)))


def key_partitions(keys: pa.Array, num_partitions: int) -> pa.Array:
    """`to_positive(murmur2(key)) % num_partitions` for every non-null key of a binary column (int64; null
    where the key is null): the Java producer's partition for a keyed record."""
    n = len(keys)
    result = pa.nulls(n, pa.int64())
    if n == 0:
        return result
    lengths = pc.binary_length(keys)
    offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, keys.buffers()[1]], offset=keys.offset)
    starts = offsets.slice(0, n).cast(pa.int64())
    data = keys.buffers()[2]
    data_u8 = pa.Array.from_buffers(pa.uint8(), len(data), [None, data]) if data is not None else pa.array([], pa.uint8())
    indices = _arange(n)
    hashes = []
    positions = []
    for length in pc.unique(pc.drop_null(lengths)).to_pylist():
        rows = pc.filter(indices, pc.equal(lengths, pa.scalar(length, lengths.type)))
        at = pc.take(starts, rows)

        def byte(j: int) -> pa.Array:
            return pc.take(data_u8, pc.add(at, _i(j))).cast(_U64)

        h = pa.repeat(_u((_SEED ^ length) & _MASK), len(rows))
        whole = length & ~3
        for i in range(0, whole, 4):
            k = pc.bit_wise_or(pc.bit_wise_or(byte(i), pc.shift_left(byte(i + 1), _u(8))),
                               pc.bit_wise_or(pc.shift_left(byte(i + 2), _u(16)), pc.shift_left(byte(i + 3), _u(24))))
            k = _mul(_xor_shift(_mul(k), 24))
            h = pc.bit_wise_xor(_mul(h), k)
        extra = length & 3
        if extra == 3:
            h = pc.bit_wise_xor(h, pc.shift_left(byte(whole + 2), _u(16)))
        if extra >= 2:
            h = pc.bit_wise_xor(h, pc.shift_left(byte(whole + 1), _u(8)))
        if extra >= 1:
            h = _mul(pc.bit_wise_xor(h, byte(whole)))
        h = _xor_shift(_mul(_xor_shift(h, 13)), 15)
        positive = pc.bit_wise_and(h, _u(0x7FFFFFFF))
        hashes.append(pc.subtract(positive, pc.multiply(pc.divide(positive, _u(num_partitions)), _u(num_partitions))))
        positions.append(rows)
    if not hashes:
        return result
    # scatter the groups back into row order
    order = pc.sort_indices(pa.concat_arrays(positions))
    found = pc.take(pa.concat_arrays(hashes), order).cast(pa.int64())
    if len(found) == n:
        return found
    present = pc.is_valid(keys)  # found holds the keyed rows in row order: row i is the slot-th of them
    slot = pc.subtract(pc.cumulative_sum(present.cast(pa.int64())), _i(1))
    return pc.take(found, pc.if_else(present, slot, pa.scalar(None, pa.int64())))


def _named(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    for i, field in enumerate(batch.schema):
        if field.name.lower() == name:
            return batch.column(i)
    return None


def encode_for_partitions(batch: pa.RecordBatch, *, topic_option: str | None, partition_count: Any,
                          batch_size: int, now_ms: int, rng: Any) -> list[tuple[str, int, Any]] | None:
    """The rows of an Arrow batch the sink got, as (topic, partition, EncodedRecords) pieces of at most
    about `batch_size` bytes each, in row order within each partition; None when the batch needs the
    row-by-row path (headers, several topics, some partitions given and others not, a record bigger than
    a batch), which then reports any problem row by row.

    Partitions are the Java producer's: a `partition` column wins; else murmur2 of the key
    (`key_partitions`); rows without a key go to one partition drawn at random for the whole Arrow batch
    (the sticky partitioner's effect, KIP-480, with the Arrow batch as the unit). `partition_count(topic)`
    answers from the producer's metadata. Every record gets `now_ms` as its timestamp (CreateTime)."""
    n = batch.num_rows
    if n == 0:
        return []
    values = _named(batch, "value")
    if values is None:
        return None
    headers = _named(batch, "headers")
    if headers is not None and headers.null_count != n:
        return None
    if topic_option is not None:
        topic = topic_option
    else:
        topics = _named(batch, "topic")
        if topics is None or topics.null_count:
            return None
        distinct = pc.unique(topics)
        if len(distinct) != 1:
            return None
        topic = distinct[0].as_py()
    keys = _binary(_named(batch, "key"), n)
    values = _binary(values, n)
    sizes = pc.add(pc.add(pc.fill_null(pc.binary_length(keys), 0), pc.fill_null(pc.binary_length(values), 0)).cast(
        pa.int64()), _i(24))
    if pc.max(sizes).as_py() > batch_size:
        return None
    given = _named(batch, "partition")
    if given is not None and given.null_count == 0:
        partitions = given.cast(pa.int64())
    elif given is not None and given.null_count != n:
        return None
    else:
        count = partition_count(topic)
        partitions = key_partitions(keys, count)
        if partitions.null_count:
            partitions = pc.fill_null(partitions, _i(rng.randrange(count)))
    # One encoding for the whole Arrow batch: rows sorted by partition (a stable sort keeps each
    # partition's rows in order), cut into pieces of about batch_size bytes; each row's offset delta
    # counts from the start of its piece, and a piece's records section is a slice of the encoded rows.
    order = pc.sort_indices(partitions)
    partitions = pc.take(partitions, order)
    sizes = pc.take(sizes, order)
    counts = pc.value_counts(partitions)
    pieces: list[tuple[int, int, int]] = []  # (partition, first row, rows)
    first = 0
    for partition, m in zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist()):
        total = pc.sum(sizes.slice(first, m)).as_py()
        per_piece = max(1, batch_size * m // max(total, 1))
        for at in range(first, first + m, per_piece):
            pieces.append((partition, at, min(per_piece, first + m - at)))
        first += m
    piece_starts = pa.concat_arrays([pa.repeat(_i(at), rows) for _, at, rows in pieces])
    records = _records(pc.take(keys, order), pc.take(values, order), pc.subtract(_arange(n), piece_starts))
    return [(topic, partition, EncodedRecords(_section(records, at, rows), rows, now_ms, now_ms))
            for partition, at, rows in pieces]
