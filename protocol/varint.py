"""Variable-length integers of the Kafka protocol, shared by the whole protocol layer.

* UNSIGNED_VARINT (`uvarint`): LEB128, 7 bits a byte, least significant group first, high bit = "more".
  A 32-bit value, so at most 5 bytes. Used by compact strings/bytes/arrays and tagged fields.
* VARINT / VARLONG: the ZigZag-mapped signed value ((n << 1) ^ (n >> 31|63)) written as LEB128; at most
  5 bytes for 32 bits, 10 for 64. Used inside records.

Readers take any indexable bytes-like object (bytes, bytearray, memoryview of bytes) and a position, and
return `(value, next_position)`. A truncated varint, one longer than its type allows, or one whose value
does not fit the type raises RemoteProtocolError: these bytes come from a peer. Writers append to a
bytearray; a value out of range is our own bug and raises LocalProtocolError.
"""

from __future__ import annotations

from .errors import LocalProtocolError, RemoteProtocolError

_U32_MAX = 0xFFFFFFFF
_U64_MAX = 0xFFFFFFFFFFFFFFFF
_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1


def _read_unsigned(buf, pos: int, max_len: int, max_value: int) -> tuple[int, int]:
    """LEB128 of at most `max_len` bytes whose value is at most `max_value`."""
    result = 0
    shift = 0
    limit = pos + max_len
    n = len(buf)
    while True:
        if pos >= limit:
            raise RemoteProtocolError(f"varint longer than {max_len} bytes")
        if pos >= n:
            raise RemoteProtocolError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    if result > max_value:
        raise RemoteProtocolError(f"varint value {result} does not fit in {max_value.bit_length()} bits")
    return result, pos


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    """An UNSIGNED_VARINT (32-bit, at most 5 bytes) at `pos`."""
    if pos < len(buf):
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
    return _read_unsigned(buf, pos, 5, _U32_MAX)


def read_varint(buf, pos: int) -> tuple[int, int]:
    """A ZigZag VARINT (signed 32-bit, at most 5 bytes) at `pos`."""
    if pos < len(buf):
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    u, pos = _read_unsigned(buf, pos, 5, _U32_MAX)
    return (u >> 1) ^ -(u & 1), pos


def read_varlong(buf, pos: int) -> tuple[int, int]:
    """A ZigZag VARLONG (signed 64-bit, at most 10 bytes) at `pos`."""
    if pos < len(buf):
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    u, pos = _read_unsigned(buf, pos, 10, _U64_MAX)
    return (u >> 1) ^ -(u & 1), pos


def _write_unsigned(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def write_uvarint(out: bytearray, value: int) -> None:
    """Append `value` (0 <= value < 2**32) as an UNSIGNED_VARINT."""
    if not 0 <= value <= _U32_MAX:
        raise LocalProtocolError(f"unsigned varint out of range: {value}")
    _write_unsigned(out, value)


def write_array_count(out: bytearray, n: int, flexible: bool) -> None:
    """Append an array's element count: n + 1 as an UNSIGNED_VARINT in a flexible version (compact
    array), else an INT32. For the packed encoders (fast_fetch, fast_metadata)."""
    if flexible:
        write_uvarint(out, n + 1)
    else:
        out += n.to_bytes(4, "big", signed=True)


def write_varint(out: bytearray, value: int) -> None:
    """Append `value` (a signed 32-bit int) as a ZigZag VARINT."""
    if not _I32_MIN <= value <= _I32_MAX:
        raise LocalProtocolError(f"varint out of int32 range: {value}")
    _write_unsigned(out, (value << 1) ^ (value >> 31))


def write_varlong(out: bytearray, value: int) -> None:
    """Append `value` (a signed 64-bit int) as a ZigZag VARLONG."""
    if not _I64_MIN <= value <= _I64_MAX:
        raise LocalProtocolError(f"varlong out of int64 range: {value}")
    _write_unsigned(out, (value << 1) ^ (value >> 63))


def uvarint_size(value: int) -> int:
    """Bytes `write_uvarint(value)` appends."""
    return max(1, (value.bit_length() + 6) // 7)


def varint_size(value: int) -> int:
    """Bytes `write_varint(value)` appends."""
    return uvarint_size((value << 1) ^ (value >> 31))


def varlong_size(value: int) -> int:
    """Bytes `write_varlong(value)` appends."""
    return uvarint_size((value << 1) ^ (value >> 63))
