"""Envelope (58, KIP-590): a broker forwards a client's admin request to the active controller inside it,
with the client's principal and address, so that the controller authorizes the client, not the broker.

`request_data` is the client's request as it came (header and body, no size prefix), `response_data` the
controller's response to it (header and body); `request_principal` is the principal serialized as
Kafka's DefaultKafkaPrincipalBuilder does (a version-prefixed `DefaultPrincipalData`), and
`client_host_address` the client's IP address as raw bytes (4 for IPv4, 16 for IPv6), as Java's
InetAddress.getAddress gives it. Codec helpers: protocol/envelope.py.
"""

from ..schema import F, api

ENVELOPE = api(
    58,
    "Envelope",
    valid="0",
    flexible="0+",
    request=[
        F("request_data", "bytes"),
        F("request_principal", "bytes", nullable="0+"),
        F("client_host_address", "bytes"),
    ],
    response=[
        F("throttle_time_ms", "int32"),
        F("response_data", "bytes", nullable="0+", default=None),
        F("error_code", "int16"),
    ],
)

# Not an API: the principal inside an envelope, after its own int16 version (key -3 is a placeholder
# that cannot collide with a real api key, as the consumer protocol's -1 and -2).
DEFAULT_PRINCIPAL_DATA = api(
    key=-3,
    name="DefaultPrincipalData",
    valid="0",
    flexible="0+",
    request=[
        F("type", "string"),
        F("name", "string"),
        F("token_authenticated", "bool"),
    ],
    response=[],
)

APIS = [ENVELOPE]
DATA = [DEFAULT_PRINCIPAL_DATA]
