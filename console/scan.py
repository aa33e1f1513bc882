"""The record scan behind a filtered browse: raw Fetch answers walked batch by batch, records built only
for the matches.

Why not the bundled consumer
----------------------------
A filter over a large partition reads every record and shows almost none. Through the consumer each one
was decoded into a `Record`, copied into a `ConsumerRecord`, buffered, handed out by `getmany` and wrapped
again in a `RecordView`: three objects and two lists per record, about two thirds of the time of a scan
(py-spy, bench/console_filter.py). Here the console sends its own Fetch requests (read_uncommitted, no
group, one partition set per leader, the next request in flight while the previous answer is walked) and:

- walks the batches by their headers; a control batch is stepped over whole, as consumers do;
- checks each batch (layout, magic, CRC-32C) and inflates a compressed one whole, as the consumer does;
- walks the records of a batch with the varints read inline (one byte covers most of them), keeping the
  key and value as byte strings and the headers as a position: they are decoded only when the filter
  asks for a header or when the record is shown;
- evaluates the filter on a `RecordView` of those bytes (filter.py compiles cheap predicates first, and
  compares strings on the bytes); only a record that passes becomes a `ConsumerRecord`.

The checks of protocol/records.py hold for every record walked (lengths inside the record and the batch,
the batch's record count, no bytes left over); a header section is checked when it is read. A corrupt batch
is a `CorruptRecordError`, shown on the page with its partition and offset.
"""

from __future__ import annotations

from typing import Iterator

from odradek.protocol.compression import NONE, decompress
from odradek.protocol.errors import CorruptRecordError, RemoteProtocolError
from odradek.protocol.records import ATTR_LOG_APPEND_TIME, HEADER_SIZE, BatchHeader, validate_batch
from odradek.protocol.varint import read_varint, read_varlong

from .filter import RecordView

MAX_UNCOMPRESSED = 256 * 1024 * 1024  # a compressed batch inflates to at most this (the consumer's bound)
_MIN_RECORD_SIZE = 7


class LazyRecord(RecordView):
    """A RecordView whose headers are read from the batch's bytes the first time they are asked for."""

    __slots__ = ("_data", "_headers_at", "_record_end")

    def __init__(self, key: bytes | None, value: bytes | None, offset: int, partition: int, timestamp: int,
                 data: bytes, headers_at: int, record_end: int):
        super().__init__(key, value, _UNREAD, offset, partition, timestamp)
        self._data, self._headers_at, self._record_end = data, headers_at, record_end

    def read_headers(self) -> list[tuple[str, bytes | None]]:
        if self.headers is _UNREAD:
            self.headers = _headers(self._data, self._headers_at, self._record_end)
        return self.headers

    def header(self, name: str) -> str | None:
        self.read_headers()
        return super().header(name)

    def header_bytes(self, name: str) -> bytes | None:
        self.read_headers()
        return super().header_bytes(name)


_UNREAD: list[tuple[str, bytes | None]] = []


def batch_records(view: memoryview, pos: int, header: BatchHeader, partition: int) -> Iterator[LazyRecord]:
    """The records of the batch at `view[pos:]` (its header already read), checked as they are walked."""
    validate_batch(view, pos)
    body = view[pos + HEADER_SIZE:pos + header.size]
    data = decompress(header.compression, body, MAX_UNCOMPRESSED) if header.compression != NONE else bytes(body)
    return _walk(data, header, partition)


def _walk(data: bytes, header: BatchHeader, partition: int) -> Iterator[LazyRecord]:
    count = header.records_count
    end = len(data)
    if count > end // _MIN_RECORD_SIZE:
        raise CorruptRecordError(f"recordsCount {count} cannot fit in the batch's {end} bytes of records")
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    log_append_time = header.max_timestamp if header.attributes & ATTR_LOG_APPEND_TIME else None
    pos = 0
    try:
        for _ in range(count):
            # length (varint), attributes (int8), timestampDelta (varlong), offsetDelta (varint),
            # key (varint length + bytes), value (varint length + bytes), headers: a one-byte varint is
            # read here, a longer one by protocol.varint.
            b = data[pos] if pos < end else 0x80
            if b < 0x80:
                length, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                length, pos = read_varint(data, pos)
            record_end = pos + length
            if length < _MIN_RECORD_SIZE - 1 or record_end > end:
                raise CorruptRecordError(f"record length {length} at {pos} does not fit the batch")
            b = data[pos + 1]
            if b < 0x80:
                timestamp_delta, pos = (b >> 1) ^ -(b & 1), pos + 2
            else:
                timestamp_delta, pos = read_varlong(data, pos + 1)
            b = data[pos]
            if b < 0x80:
                offset_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif data[pos + 1] < 0x80:  # offset deltas past 63 take two bytes
                u = (b & 0x7F) | (data[pos + 1] << 7)
                offset_delta, pos = (u >> 1) ^ -(u & 1), pos + 2
            else:
                offset_delta, pos = read_varint(data, pos)
            b = data[pos]
            if b < 0x80:
                size, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                size, pos = read_varint(data, pos)
            if size < 0:
                if size != -1:
                    raise CorruptRecordError(f"negative key length {size}")
                key = None
            elif size > record_end - pos:
                raise CorruptRecordError(f"key length {size} runs past the record")
            else:
                key = data[pos:pos + size]
                pos += size
            b = data[pos] if pos < record_end else 0x80
            if b < 0x80:
                size, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                size, pos = read_varint(data, pos)
            if size < 0:
                if size != -1:
                    raise CorruptRecordError(f"negative value length {size}")
                value = None
            elif size > record_end - pos:
                raise CorruptRecordError(f"value length {size} runs past the record")
            else:
                value = data[pos:pos + size]
                pos += size
            if pos >= record_end:
                raise CorruptRecordError("a record ends before its header count")
            timestamp = base_timestamp + timestamp_delta if log_append_time is None else log_append_time
            yield LazyRecord(key, value, base_offset + offset_delta, partition, timestamp, data, pos, record_end)
            pos = record_end
    except CorruptRecordError:
        raise
    except (RemoteProtocolError, IndexError) as e:  # a truncated or over-long varint
        raise CorruptRecordError(f"malformed record: {e}") from e
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left after the {count} records the batch declares")


def _headers(data: bytes, pos: int, record_end: int) -> list[tuple[str, bytes | None]]:
    """The header section of a record, `pos` at its count; it must end exactly at `record_end`."""
    try:
        header_count, pos = read_varint(data, pos)
        if header_count < 0 or 2 * header_count > record_end - pos:
            raise CorruptRecordError(f"headerCount {header_count} does not fit the record")
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(header_count):
            size, pos = read_varint(data, pos)
            if size < 0 or size > record_end - pos:
                raise CorruptRecordError(f"header key length {size} does not fit the record")
            name = str(data[pos:pos + size], "utf-8", "surrogateescape")
            pos += size
            size, pos = read_varint(data, pos)
            if size < 0:
                if size != -1:
                    raise CorruptRecordError(f"negative header value length {size}")
                headers.append((name, None))
            elif size > record_end - pos:
                raise CorruptRecordError(f"header value length {size} runs past the record")
            else:
                headers.append((name, data[pos:pos + size]))
                pos += size
    except RemoteProtocolError as e:
        raise CorruptRecordError(f"malformed record headers: {e}") from e
    if pos != record_end:
        raise CorruptRecordError("a record's fields end before or after its declared length")
    return headers
