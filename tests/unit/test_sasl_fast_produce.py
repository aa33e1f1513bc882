"""A SASL listener's produce fast path obeys the session as every other request does (KIP-368): a Produce
that arrives after the session ended, or while it is being renewed, closes the connection and is not
served. (The general path checked it; the fast path, which serves Produce v3-v13 before the codec, did not.)
Driven without sockets, as test_sasl_network.py."""

from __future__ import annotations

from odradek.broker.context import Packed, SecurityProtocol
from odradek.broker.handlers import accepted_versions, advertised_versions, load_handlers
from odradek.broker.handlers.api_versions import build_response
from odradek.broker.network import KafkaProtocol, NetworkServer
from odradek.broker.security import ListenerSecurity
from odradek.protocol.messages import REQUESTS
from odradek.protocol.records import build_batch
from odradek.protocol.sasl import plain_token

from tests.harness.sasl import Client, FakeTransport, feed, produce

SaslHandshakeRequest, SaslAuthenticateRequest, ProduceRequest = REQUESTS[17], REQUESTS[36], REQUESTS[0]


def make_connection():
    registry = load_handlers()
    api_versions = build_response(advertised_versions(registry))
    fast: list[object] = []

    def serve_produce_frame(frame, connection):
        fast.append(frame)
        return Packed([b""])  # served (what it answers does not matter here)

    server = NetworkServer(dispatch=lambda ctx: api_versions if ctx.api_key == 18 else None,
                           serve_produce_frame=serve_produce_frame,
                           accepted_versions=accepted_versions(registry), advertised_versions=advertised_versions(registry),
                           max_frame_bytes=100 << 20, max_connections=1000, queued_max_requests=500,
                           connections_max_idle_ms=600_000)
    security = ListenerSecurity("SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT, mechanisms=("PLAIN",),
                                plain_users={"bob": "bob-secret"}, failed_authentication_delay_ms=0, reauth_ms=60_000)
    proto = KafkaProtocol(server, "SASL_PLAINTEXT", SecurityProtocol.SASL_PLAINTEXT, "broker", security)
    transport = FakeTransport()
    proto.connection_made(transport)
    return proto, transport, fast


def logged_in():
    proto, transport, fast = make_connection()
    client = Client(proto, transport)
    client.call(SaslHandshakeRequest(mechanism="PLAIN"), 1)
    assert client.call(SaslAuthenticateRequest(auth_bytes=plain_token("bob", "bob-secret")), 2).error_code == 0
    return proto, transport, fast, client


def test_a_produce_in_the_session_takes_the_fast_path():
    _, transport, fast, client = logged_in()
    produce(client)
    assert len(fast) == 1 and not transport.closed


def test_a_produce_after_the_session_ended_closes_the_connection():
    proto, transport, fast, client = logged_in()
    proto.auth.session_expiry_ms = 0  # the session ended without re-authentication
    produce(client)
    assert transport.closed and fast == []


def test_a_produce_during_re_authentication_closes_the_connection():
    _, transport, fast, client = logged_in()
    assert client.call(SaslHandshakeRequest(mechanism="PLAIN"), 1).error_code == 0  # renewal begun, not finished
    produce(client)
    assert transport.closed and fast == []
