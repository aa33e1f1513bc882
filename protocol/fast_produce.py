"""The produce fast path's wire half: a Produce request (v3-v13) read straight from its frame, and its
response packed straight into bytes. v9-v13 are flexible (compact lengths, tagged fields: librdkafka, the
Java client, kafka-python 3), and v13 names topics by id (the Java client from 4.1); v3-v8 are not
flexible (aiokafka sends v8).

Why: the generated codec makes a message object per request, topic and partition, and another per
response, topic and partition, then walks them again to encode. For the request the broker serves most,
that was half of its Python work per request outside the log itself (in process: ~36 -> ~18 us per
single-partition request; bench/PROFILE.md, "Third round"). Python work is also what a request arriving
at an idle core pays for most dearly, so this shows in the acknowledgement latency at low rates.

`parse_produce` reads only the shape clients send: no tagged fields anywhere, counts and names under 127
(flexible versions), a non-null topic and partition list and records. For anything else it returns None and the generated
codec decodes the frame, with its own error if the frame is bad. So the fast path never accepts a frame
the codec would refuse, and where both accept a frame they read the same values
(tests/unit/test_protocol_fast_produce.py compares them on generated requests, and the two encoders byte
for byte).
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple, TypeAlias

from .codec import _uuid_from
from .errors import RemoteProtocolError
from .varint import read_uvarint, write_uvarint

PRODUCE_KEY = 0
FAST_VERSIONS = range(3, 14)  # record batch v2 (v3+)
FLEXIBLE_FROM = 9
TOPIC_IDS_FROM = 13

_ACKS_TIMEOUT = struct.Struct(">hi")
_I32 = struct.Struct(">i")
_PARTITION = struct.Struct(">ihqqqB")  # ...log start offset, then record_errors: an empty compact array
_PARTITION_HEAD = struct.Struct(">ihqqq")  # the same without record_errors, for a partition that has some
_CORRELATION = struct.Struct(">iiB")  # frame size, correlation id, header tagged fields (none)
_TAIL = b"\x00\x00\x00\x00\x00"  # throttle_time_ms 0, no tagged fields
_I16 = struct.Struct(">h")
_CLASSIC_HEAD = struct.Struct(">iii")  # frame size, correlation id, topic count
_CLASSIC_PARTITION = struct.Struct(">ihqq")  # index, error code, base offset, log append time
_I64 = struct.Struct(">q")
_I32_PAIR = struct.Struct(">ii")

# A topic of a produce request: (name, its UTF-8 bytes, [(partition index, records)]) in request order; from
# v13 (topic id, its 16 bytes, [...]).
TopicEntry: TypeAlias = "tuple[uuid.UUID | str, bytes, list[tuple[int, memoryview]]]"


class ProduceFrame(NamedTuple):
    """A produce request read by `parse_produce`: the records are views of `frame`."""

    frame: bytearray
    api_version: int
    correlation_id: int
    acks: int
    timeout_ms: int
    # (name, its UTF-8 bytes, [(partition index, records)]) in request order; from v13 (topic id as a UUID,
    # its 16 bytes, [...])
    topics: list[TopicEntry]
    # The request's transactional id (None: it names none): the broker's authorization asks WRITE on it for
    # transactional batches, and refuses those of a request without one, on either path.
    transactional_id: str | None = None

    @property
    def has_transactional_id(self) -> bool:
        return self.transactional_id is not None


def parse_produce(frame: bytearray, api_version: int) -> ProduceFrame | None:
    """Read a Produce v3-v13 frame (header and body), or return None to leave it to the codec."""
    try:
        if api_version >= FLEXIBLE_FROM:
            return _parse(frame, api_version)
        return _parse_classic(frame, api_version)
    except (IndexError, struct.error, UnicodeDecodeError, RemoteProtocolError):
        return None


def _skip_short_string(frame: bytearray, pos: int) -> int | None:
    """Past a nullable string with an int16 length (the header's client id; v3-v8's transactional id),
    checked as the codec checks it (in the frame, UTF-8), or None."""
    (n,) = _I16.unpack_from(frame, pos)
    pos += 2
    if n > 0:
        if pos + n > len(frame):
            return None
        str(frame[pos : pos + n], "utf-8")  # raises UnicodeDecodeError as the codec refuses it
        return pos + n
    return pos if n == -1 or n == 0 else None


def _parse(frame: bytearray, api_version: int) -> ProduceFrame | None:
    (correlation_id,) = _I32.unpack_from(frame, 4)
    pos = _skip_short_string(frame, 8)  # client id
    if pos is None:
        return None
    if frame[pos]:  # header tagged fields
        return None
    n = frame[pos + 1] - 1  # transactional id: compact nullable string
    transactional_id = None if n < 0 else ""
    pos += 2
    if n > 0:
        if n > 126:
            return None
        transactional_id = str(frame[pos : pos + n], "utf-8")
        pos += n
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, pos)
    pos += 6
    count = frame[pos] - 1
    pos += 1
    if count < 0 or count > 126:
        return None
    view = memoryview(frame)
    end = len(frame)
    topics: list[TopicEntry] = []
    by_id = api_version >= TOPIC_IDS_FROM
    for _ in range(count):
        name: uuid.UUID | str
        if by_id:
            raw = bytes(frame[pos : pos + 16])
            if len(raw) != 16:
                return None
            name = _uuid_from(raw)
            pos += 16
        else:
            n = frame[pos] - 1
            if n < 0 or n > 126:
                return None
            pos += 1
            raw = bytes(frame[pos : pos + n])
            name = str(raw, "utf-8")
            pos += n
        parts: list[tuple[int, memoryview]] = []
        count_parts = frame[pos] - 1
        pos += 1
        if count_parts < 0 or count_parts > 126:
            return None
        for _ in range(count_parts):
            (index,) = _I32.unpack_from(frame, pos)
            pos += 4
            size = frame[pos]  # the compact length of the records, inline for one or two bytes
            if size < 0x80:
                pos += 1
            elif frame[pos + 1] < 0x80:
                size = (size & 0x7F) | frame[pos + 1] << 7
                pos += 2
            else:
                size, pos = read_uvarint(frame, pos)
            size -= 1
            if size < 0 or pos + size > end:  # null records, or a length past the frame
                return None
            parts.append((index, view[pos : pos + size]))
            pos += size
            if frame[pos]:  # partition tagged fields
                return None
            pos += 1
        if frame[pos]:  # topic tagged fields
            return None
        pos += 1
        topics.append((name, raw, parts))
    if frame[pos]:  # body tagged fields
        return None
    return ProduceFrame(frame, api_version, correlation_id, acks, timeout_ms, topics, transactional_id)


def _parse_classic(frame: bytearray, api_version: int) -> ProduceFrame | None:
    """v3-v8: int16 string lengths, int32 counts and records lengths, no tagged fields."""
    (correlation_id,) = _I32.unpack_from(frame, 4)
    pos = _skip_short_string(frame, 8)  # client id
    if pos is None:
        return None
    start = pos
    pos = _skip_short_string(frame, pos)  # transactional id
    if pos is None:
        return None
    transactional_id = str(frame[start + 2 : pos], "utf-8") if _I16.unpack_from(frame, start)[0] >= 0 else None
    end = len(frame)
    acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, pos)
    (count,) = _I32.unpack_from(frame, pos + 6)
    pos += 10
    if count < 0 or count > end:  # a null or impossible topic list: the codec's error
        return None
    view = memoryview(frame)
    topics: list[TopicEntry] = []
    for _ in range(count):
        (n,) = _I16.unpack_from(frame, pos)
        pos += 2
        if n < 0 or pos + n > end:
            return None
        raw = bytes(frame[pos : pos + n])
        name = str(raw, "utf-8")
        pos += n
        (count_parts,) = _I32.unpack_from(frame, pos)
        pos += 4
        if count_parts < 0 or count_parts > end:
            return None
        parts: list[tuple[int, memoryview]] = []
        for _ in range(count_parts):
            index, size = _I32_PAIR.unpack_from(frame, pos)
            pos += 8
            if size < 0 or pos + size > end:  # null records, or a length past the frame
                return None
            parts.append((index, view[pos : pos + size]))
            pos += size
        topics.append((name, raw, parts))
    return ProduceFrame(frame, api_version, correlation_id, acks, timeout_ms, topics, transactional_id)


def encode_produce_response(correlation_id: int, topics, api_version: int) -> bytearray:
    """A whole Produce v3-v13 response frame, size included, with throttle_time_ms 0.

    `topics`: [(name bytes, or from v13 the topic id's 16 bytes, [(index, error_code, base_offset,
    log_append_time_ms, log_start_offset, error_message or None, record_errors)])] in the order to send;
    record_errors (v8+) is [(batch index, message or None)], nearly always empty."""
    if api_version < FLEXIBLE_FROM:
        return _encode_classic(correlation_id, topics, api_version)
    out = bytearray(_CORRELATION.pack(0, correlation_id, 0))
    _put_length(out, len(topics))
    pack = _PARTITION.pack
    by_id = api_version >= TOPIC_IDS_FROM
    for name, partitions in topics:
        if not by_id:
            _put_length(out, len(name))
        out += name
        _put_length(out, len(partitions))
        for index, error_code, base_offset, append_time, log_start_offset, message, record_errors in partitions:
            if record_errors:  # KIP-467: the records that made the batch fail
                out += _PARTITION_HEAD.pack(index, error_code, base_offset, append_time, log_start_offset)
                _put_length(out, len(record_errors))
                for batch_index, text in record_errors:
                    out += _I32.pack(batch_index)
                    _put_compact_string(out, text)
                    out.append(0)  # tagged fields
            else:
                out += pack(index, error_code, base_offset, append_time, log_start_offset, 1)
            if message is None:
                out += b"\x00\x00"  # error_message null, no tagged fields
            else:
                data = message.encode("utf-8")
                _put_length(out, len(data))
                out += data
                out.append(0)
        out.append(0)  # topic tagged fields
    out += _TAIL
    _I32.pack_into(out, 0, len(out) - 4)
    return out


def _put_compact_string(out: bytearray, text: str | None) -> None:
    if text is None:
        out.append(0)
    else:
        data = text.encode("utf-8")
        _put_length(out, len(data))
        out += data


def _put_string(out: bytearray, text: str | None) -> None:
    if text is None:
        out += b"\xff\xff"
    else:
        data = text.encode("utf-8")
        out += _I16.pack(len(data))
        out += data


def _put_length(out: bytearray, n: int) -> None:
    """A compact length (n + 1 as an unsigned varint): one byte inline, as nearly always."""
    if n < 127:
        out.append(n + 1)
    else:
        write_uvarint(out, n + 1)


def _encode_classic(correlation_id: int, topics, api_version: int) -> bytearray:
    """v3-v8: response header v0; log_start_offset from v5, record_errors and error_message from v8."""
    out = bytearray(_CLASSIC_HEAD.pack(0, correlation_id, len(topics)))
    pack = _CLASSIC_PARTITION.pack
    with_start, with_errors = api_version >= 5, api_version >= 8
    for name, partitions in topics:
        out += _I16.pack(len(name))
        out += name
        out += _I32.pack(len(partitions))
        for index, error_code, base_offset, append_time, log_start_offset, message, record_errors in partitions:
            out += pack(index, error_code, base_offset, append_time)
            if with_start:
                out += _I64.pack(log_start_offset)
            if with_errors:
                out += _I32.pack(len(record_errors))
                for batch_index, text in record_errors:
                    out += _I32.pack(batch_index)
                    _put_string(out, text)
                _put_string(out, message)
    out += b"\x00\x00\x00\x00"  # throttle_time_ms
    _I32.pack_into(out, 0, len(out) - 4)
    return out
