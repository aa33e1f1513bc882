"""What travels inside an Envelope (KIP-590): the forwarded request and its response, the client's
principal and address. Pure byte work; who may send an envelope, and what the controller does with one,
is the broker's (broker/handlers/envelope.py).

    request_data        the client's request header and body, as `ClientConnection` frames them but
                        without the size prefix (Kafka forwards the request buffer it received)
    response_data       the controller's response header (the client's correlation id) and body
    request_principal   int16 version 0, then DefaultPrincipalData v0 (type, name, token_authenticated):
                        Kafka's DefaultKafkaPrincipalBuilder serde, so a Java broker's envelope reads here
    client_host_address the raw IP address (4 or 16 bytes), as Java's InetAddress.getAddress()
"""

from __future__ import annotations

import ipaddress
import struct

from .codec import decode, encode_into
from .errors import RemoteProtocolError
from .headers import RequestHeader, read_request_header, read_response_header, write_request_header, write_response_header
from .messages import REQUESTS, RESPONSES, DefaultPrincipalData

_VERSION = struct.Struct(">h")
PRINCIPAL_DATA_VERSION = 0


class PrincipalDeserializationError(RemoteProtocolError):
    """The envelope's principal is not a DefaultPrincipalData this broker can read."""


def serialize_principal(principal_type: str, name: str, token_authenticated: bool = False) -> bytes:
    data = DefaultPrincipalData(type=principal_type, name=name, token_authenticated=token_authenticated)
    return _VERSION.pack(PRINCIPAL_DATA_VERSION) + data.encode(PRINCIPAL_DATA_VERSION)


def deserialize_principal(data) -> tuple[str, str, bool]:
    """(principal type, name, token authenticated) from `serialize_principal`'s bytes."""
    if data is None or len(data) < 2:
        raise PrincipalDeserializationError("the envelope carries no principal")
    (version,) = _VERSION.unpack_from(data, 0)
    low, high = DefaultPrincipalData.VALID_VERSIONS
    if not low <= version <= high:
        raise PrincipalDeserializationError(f"DefaultPrincipalData version {version} is not supported")
    try:
        principal = decode(DefaultPrincipalData, memoryview(data)[2:], version)
    except RemoteProtocolError as e:
        raise PrincipalDeserializationError(f"malformed DefaultPrincipalData: {e}") from None
    return principal.type, principal.name, principal.token_authenticated


def address_bytes(host: str) -> bytes:
    """The client's address as Kafka puts it in an envelope; an unparsable host (a test double) is sent as
    the IPv4 unspecified address rather than refused."""
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return bytes(4)


def address_host(data) -> str:
    if len(data) not in (4, 16):
        raise RemoteProtocolError(f"client host address of {len(data)} bytes is neither IPv4 nor IPv6")
    return str(ipaddress.ip_address(bytes(data)))


def encode_request_data(header: RequestHeader, request) -> bytes:
    out = bytearray()
    write_request_header(out, header)
    encode_into(request, header.api_version, out, [])
    return bytes(out)


def decode_request_data(data) -> tuple[RequestHeader, object]:
    """The forwarded request's header and body. RemoteProtocolError for an API or version not defined here
    (the caller checks what it serves) or a body that does not decode."""
    view = memoryview(data)
    header, pos = read_request_header(view)
    cls = REQUESTS.get(header.api_key)
    if cls is None or not cls.VALID_VERSIONS[0] <= header.api_version <= cls.VALID_VERSIONS[1]:
        raise RemoteProtocolError(f"forwarded api key {header.api_key} v{header.api_version} is not defined")
    return header, decode(cls, view[pos:], header.api_version)


def encode_response_data(header: RequestHeader, response) -> bytes:
    out = bytearray()
    write_response_header(out, header.api_key, header.api_version, header.correlation_id)
    chunks: list = []
    encode_into(response, header.api_version, out, chunks)
    if chunks:  # file regions: never in the responses of the APIs that may be forwarded
        raise RemoteProtocolError(f"{type(response).__name__} cannot travel in an envelope")
    return bytes(out)


def decode_response_data(data, header: RequestHeader):
    """The response in an envelope's `response_data`, checked against the forwarded request's header."""
    view = memoryview(data)
    correlation_id, pos = read_response_header(view, header.api_key, header.api_version)
    if correlation_id != header.correlation_id:
        raise RemoteProtocolError(
            f"enveloped response has correlation id {correlation_id}, the request {header.correlation_id}")
    return decode(RESPONSES[header.api_key], view[pos:], header.api_version)
