"""Request and response headers.

    Request header v1:  api_key int16 | api_version int16 | correlation_id int32 | client_id nullable string
    Request header v2:  v1 + tagged fields. client_id keeps its int16 length even here, so that a broker
                        can read any ApiVersions header before knowing which versions the client speaks.
    Response header v0: correlation_id int32
    Response header v1: correlation_id int32 | tagged fields

A request uses header v2 when its body version is flexible, else v1 (v0 belonged to ControlledShutdown v0,
gone in Kafka 4). A response uses header v1 when flexible, except ApiVersions, whose response header is
always v0 (KIP-511): a client must be able to read it before it knows our versions.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from .errors import RemoteProtocolError
from .limits import check_tagged_field_count
from .messages import BY_KEY
from .varint import read_uvarint as _uvarint
from .varint import write_uvarint as _put_uvarint

API_VERSIONS_KEY = 18

_FIXED = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None
    unknown_tagged_fields: list = field(default_factory=list)


def is_flexible_version(api_key: int, api_version: int) -> bool:
    api = BY_KEY.get(api_key)
    return api is not None and api_version in api.frange


def request_header_version(api_key: int, api_version: int) -> int:
    return 2 if is_flexible_version(api_key, api_version) else 1


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == API_VERSIONS_KEY:
        return 0
    return 1 if is_flexible_version(api_key, api_version) else 0


def read_request_header(buf, *, flexible: bool | None = None) -> tuple[RequestHeader, int]:
    """Parse a request header from the start of a frame body. Returns (header, body position).

    `flexible` overrides the lookup (used for an ApiVersions request at a version we do not know, whose
    header we read only as far as the client id).
    """
    if len(buf) < 8:
        raise RemoteProtocolError(f"request header needs 8 bytes, frame has {len(buf)}")
    api_key, api_version, correlation_id = _FIXED.unpack_from(buf, 0)
    pos = 8
    if len(buf) < 10:
        raise RemoteProtocolError("request header is missing its client id")
    (n,) = _I16.unpack_from(buf, pos)
    pos += 2
    if n == -1:
        client_id = None
    elif n < 0 or n > len(buf) - pos:
        raise RemoteProtocolError(f"request header client id length {n} is invalid")
    else:
        try:
            client_id = str(buf[pos : pos + n], "utf-8")
        except UnicodeDecodeError as e:
            raise RemoteProtocolError("request header client id is not UTF-8") from e
        pos += n
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    if flexible is None:
        flexible = is_flexible_version(api_key, api_version)
    if flexible:
        pos = _read_tags(buf, pos, header.unknown_tagged_fields)
    return header, pos


def _read_tags(buf, pos: int, into: list) -> int:
    try:
        count, pos = _uvarint(buf, pos)
        if count:  # nearly always 0: no call on the common path
            check_tagged_field_count("header", count, len(buf) - pos)  # before any of them is kept
        for _ in range(count):
            tag, pos = _uvarint(buf, pos)
            size, pos = _uvarint(buf, pos)
            if size > len(buf) - pos:
                raise RemoteProtocolError("header tagged field overruns the frame")
            into.append((tag, bytes(buf[pos : pos + size])))
            pos += size
    except IndexError as e:
        raise RemoteProtocolError("truncated header tagged fields") from e
    return pos


def write_request_header(out: bytearray, header: RequestHeader) -> None:
    out += _FIXED.pack(header.api_key, header.api_version, header.correlation_id)
    if header.client_id is None:
        out += b"\xff\xff"
    else:
        data = header.client_id.encode("utf-8")
        out += _I16.pack(len(data))
        out += data
    if is_flexible_version(header.api_key, header.api_version):
        _write_tags(out, header.unknown_tagged_fields)


def _write_tags(out: bytearray, tags: list) -> None:
    _put_uvarint(out, len(tags))
    for tag, data in sorted(tags, key=lambda t: t[0]):
        _put_uvarint(out, tag)
        _put_uvarint(out, len(data))
        out += data


def write_response_header(out: bytearray, api_key: int, api_version: int, correlation_id: int) -> None:
    out += _I32.pack(correlation_id)
    if response_header_version(api_key, api_version) == 1:
        out.append(0)


def read_response_header(buf, api_key: int, api_version: int) -> tuple[int, int]:
    """Returns (correlation id, body position)."""
    if len(buf) < 4:
        raise RemoteProtocolError("response header needs 4 bytes")
    (correlation_id,) = _I32.unpack_from(buf, 0)
    pos = 4
    if response_header_version(api_key, api_version) == 1:
        pos = _read_tags(buf, pos, [])
    return correlation_id, pos
