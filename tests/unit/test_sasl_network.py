"""A SASL listener's connection before authentication, driven without sockets: bytes in through the
BufferedProtocol interface, bytes out through a fake transport, the dispatcher replaced by a recorder.

What must hold (Kafka's SaslServerAuthenticator): only ApiVersions reaches a handler before
authentication; SaslHandshake/SaslAuthenticate are answered by the authenticator; any other request, or a
frame over sasl.server.max.receive.size, closes the connection before it is decoded or buffered; v0
handshakes take raw tokens; after authentication the principal is the user's; a failed authentication is
answered and the connection closed. The fuzz test throws random and mutated frames at it.
"""

from __future__ import annotations

import random
import struct

from hypothesis import HealthCheck, given, settings, strategies as st

from odradek.broker.authenticator import Authenticator, SaslState
from odradek.broker.context import SecurityProtocol
from odradek.broker.handlers import accepted_versions, advertised_versions, load_handlers
from odradek.broker.handlers.api_versions import build_response
from odradek.broker.network import KafkaProtocol, NetworkServer
from odradek.broker.security import ListenerSecurity
from odradek.protocol.connection import ClientConnection
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import REQUESTS
from odradek.protocol.sasl import ScramClient, ScramMechanism, plain_token, scram_credential
from tests.harness.sasl import Client, FakeTransport, feed

ApiVersionsRequest, SaslHandshakeRequest, SaslAuthenticateRequest, MetadataRequest = (
    REQUESTS[18], REQUESTS[17], REQUESTS[36], REQUESTS[3])
SHA512 = ScramMechanism.SCRAM_SHA_512
ALICE = scram_credential(SHA512, "alice-secret", b"salt-of-alice", 4096)
MAX_RECEIVE = 4096


def make_connection(mechanisms=("PLAIN", "SCRAM-SHA-512"), reauth_ms=0):
    registry = load_handlers()
    api_versions = build_response(advertised_versions(registry))
    dispatched = []

    def dispatch(ctx):
        dispatched.append(ctx.api_key)
        if ctx.api_key == 18:
            return api_versions
        return None  # no response: the tests look at what was dispatched

    server = NetworkServer(dispatch=dispatch, accepted_versions=accepted_versions(registry),
                           advertised_versions=advertised_versions(registry), max_frame_bytes=100 << 20,
                           max_connections=1000, queued_max_requests=500, connections_max_idle_ms=600_000)
    security = ListenerSecurity(
        "SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT, mechanisms=mechanisms, plain_users={"bob": "bob-secret"},
        scram_lookup=lambda m, u: ALICE if (m, u) == (SHA512, "alice") else None, max_receive_bytes=MAX_RECEIVE,
        failed_authentication_delay_ms=0, reauth_ms=reauth_ms,
    )
    proto = KafkaProtocol(server, "SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT, "broker", security)
    transport = FakeTransport()
    proto.connection_made(transport)
    return proto, transport, dispatched


def test_plain_then_requests_reach_the_handlers_with_the_principal():
    proto, transport, dispatched = make_connection()
    c = Client(proto, transport)
    assert c.call(ApiVersionsRequest(), 3).error_code == 0
    assert c.call(SaslHandshakeRequest(mechanism="PLAIN"), 1).mechanisms == ["PLAIN", "SCRAM-SHA-512"]
    response = c.call(SaslAuthenticateRequest(auth_bytes=plain_token("bob", "bob-secret")), 2)
    assert response.error_code == 0 and response.session_lifetime_ms == 0
    assert str(proto.context.principal) == "User:bob" and proto.conn.max_frame_bytes == 100 << 20
    _, data = c.conn.send_request(MetadataRequest(topics=[]), 12)
    feed(proto, data)
    assert dispatched == [18, 3] and not transport.closed


def test_scram_sha_512_exchange_and_wrong_password():
    proto, transport, _ = make_connection()
    c = Client(proto, transport)
    c.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1)
    scram = ScramClient(SHA512, "alice", "alice-secret", "nonce1")
    first = c.call(SaslAuthenticateRequest(auth_bytes=scram.first()), 1)
    final = c.call(SaslAuthenticateRequest(auth_bytes=scram.final(first.auth_bytes)), 1)
    scram.verify(final.auth_bytes)
    assert str(proto.context.principal) == "User:alice"

    proto, transport, dispatched = make_connection()
    c = Client(proto, transport)
    c.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1)
    scram = ScramClient(SHA512, "alice", "wrong", "nonce2")
    first = c.call(SaslAuthenticateRequest(auth_bytes=scram.first()), 2)
    failed = c.call(SaslAuthenticateRequest(auth_bytes=scram.final(first.auth_bytes)), 2)
    assert failed.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and "SCRAM-SHA-512" in failed.error_message
    assert transport.closed and str(proto.context.principal) == "User:ANONYMOUS" and dispatched == []


def test_unknown_user_unsupported_mechanism_and_authenticate_without_handshake():
    proto, transport, _ = make_connection()
    c = Client(proto, transport)
    c.call(SaslHandshakeRequest(mechanism="SCRAM-SHA-512"), 1)
    assert c.call(SaslAuthenticateRequest(auth_bytes=b"n,,n=nobody,r=x"), 1).error_code == ErrorCode.SASL_AUTHENTICATION_FAILED
    assert transport.closed

    proto, transport, _ = make_connection()
    response = Client(proto, transport).call(SaslHandshakeRequest(mechanism="GSSAPI"), 1)
    assert response.error_code == ErrorCode.UNSUPPORTED_SASL_MECHANISM and transport.closed

    proto, transport, _ = make_connection()
    response = Client(proto, transport).call(SaslAuthenticateRequest(auth_bytes=b"x"), 1)
    assert response.error_code == ErrorCode.ILLEGAL_SASL_STATE and transport.closed


def test_a_client_skipping_sasl_is_closed_before_its_request_is_decoded():
    proto, transport, dispatched = make_connection()
    c = Client(proto, transport)
    c.call(ApiVersionsRequest(), 3)
    _, data = c.conn.send_request(MetadataRequest(topics=None), 12)
    feed(proto, data)
    assert transport.closed and dispatched == [18]


def test_a_frame_over_the_pre_authentication_limit_closes_before_it_is_buffered():
    proto, transport, _ = make_connection()
    feed(proto, struct.pack(">i", MAX_RECEIVE + 1) + b"\x00\x12\x00\x03")
    assert transport.closed and proto.conn.buffered_bytes <= 8


def test_handshake_v0_then_raw_tokens():
    proto, transport, dispatched = make_connection()
    c = Client(proto, transport)
    assert c.call(SaslHandshakeRequest(mechanism="PLAIN"), 0).error_code == 0
    token = plain_token("bob", "bob-secret")
    feed(proto, struct.pack(">i", len(token)) + token)
    assert bytes(transport.out) == b"\x00\x00\x00\x00"  # an empty raw token: done
    assert str(proto.context.principal) == "User:bob" and proto.auth.state is SaslState.AUTHENTICATED


def test_reauthentication_keeps_the_principal_and_expiry_closes():
    proto, transport, dispatched = make_connection(reauth_ms=60_000)
    c = Client(proto, transport)
    c.call(SaslHandshakeRequest(mechanism="PLAIN"), 1)
    assert c.call(SaslAuthenticateRequest(auth_bytes=plain_token("bob", "bob-secret")), 2).session_lifetime_ms == 60_000
    # Re-authenticate on the live connection (KIP-368), as librdkafka and Java do before the lifetime ends.
    assert c.call(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0
    assert c.call(SaslAuthenticateRequest(auth_bytes=plain_token("bob", "bob-secret")), 2).error_code == 0
    assert not transport.closed and str(proto.context.principal) == "User:bob"
    proto.auth.session_expiry_ms = 0  # the session ended without re-authentication
    _, data = c.conn.send_request(MetadataRequest(topics=[]), 12)
    feed(proto, data)
    assert transport.closed and 3 not in dispatched


def test_authenticator_refuses_another_principal_on_reauthentication():
    security = ListenerSecurity("L", SecurityProtocol.SASL_PLAINTEXT, mechanisms=("PLAIN",),
                                plain_users={"bob": "b", "eve": "e"})
    auth = Authenticator(security)
    auth.handshake("PLAIN", 1)
    assert auth.authenticate(plain_token("bob", "b"), 0).done
    auth.handshake("PLAIN", 1)
    step = auth.authenticate(plain_token("eve", "e"), 0)
    assert step.error_code == ErrorCode.SASL_AUTHENTICATION_FAILED and auth.state is SaslState.FAILED


# -- fuzzing before authentication


def _valid_frames() -> list[bytes]:
    conn = ClientConnection(client_id="fuzz")
    frames = [conn.send_request(ApiVersionsRequest(), 3)[1], conn.send_request(SaslHandshakeRequest(mechanism="PLAIN"), 1)[1],
              conn.send_request(SaslAuthenticateRequest(auth_bytes=plain_token("bob", "nope")), 2)[1],
              conn.send_request(MetadataRequest(topics=None), 12)[1], conn.send_request(SaslHandshakeRequest(mechanism="PLAIN"), 0)[1]]
    return frames


SEEDS = _valid_frames()


@st.composite
def stream(draw):
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["random", "mutated", "resized", "key"]))
        if kind == "random":
            body = draw(st.binary(max_size=200))
            parts.append(struct.pack(">i", len(body)) + body)
        elif kind == "key":  # a well-framed header with any api key and version
            key, version = draw(st.integers(-5, 100)), draw(st.integers(-2, 20))
            body = struct.pack(">hhi", key, version, 7) + draw(st.binary(max_size=40))
            parts.append(struct.pack(">i", len(body)) + body)
        else:
            frame = bytearray(draw(st.sampled_from(SEEDS)))
            rng = random.Random(draw(st.integers(0, 2**32)))
            for _ in range(rng.randint(1, 6)):
                frame[rng.randrange(4, len(frame))] = rng.randrange(256)
            if kind == "resized":
                struct.pack_into(">i", frame, 0, draw(st.integers(-(2**31), 2**31 - 1)))
            parts.append(bytes(frame))
    return b"".join(parts)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream())
def test_fuzz_before_authentication_reaches_no_handler_but_api_versions(data):
    proto, transport, dispatched = make_connection()
    feed(proto, data)
    assert set(dispatched) <= {18}
    assert proto.auth.state is not SaslState.AUTHENTICATED or str(proto.context.principal) == "User:bob"
    assert proto.conn.buffered_bytes <= MAX_RECEIVE + 8  # never more than one allowed frame is held
    assert not proto.inbox or proto.auth.authenticated


def test_max_connections_per_ip():
    registry = load_handlers()
    server = NetworkServer(dispatch=lambda ctx: None, accepted_versions=accepted_versions(registry),
                           advertised_versions=advertised_versions(registry), max_frame_bytes=1 << 20,
                           max_connections=1000, queued_max_requests=500, connections_max_idle_ms=600_000,
                           max_connections_per_ip=2)
    conns = []
    for _ in range(3):
        proto = KafkaProtocol(server, "PLAINTEXT", SecurityProtocol.PLAINTEXT)
        proto.connection_made(FakeTransport())
        conns.append(proto)
    assert [c.closed for c in conns] == [False, False, True]
    assert server.connections_per_ip == {"10.0.0.9": 2}
    conns[0].connection_lost(None)
    again = KafkaProtocol(server, "PLAINTEXT", SecurityProtocol.PLAINTEXT)
    again.connection_made(FakeTransport())
    assert not again.closed and server.connections_per_ip == {"10.0.0.9": 2}
