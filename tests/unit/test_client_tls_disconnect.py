"""The bundled client's connection: a TLS connection that ends before its handshake did, with no TLS alert
(the broker went away, or a proxy in front of it could not reach it), is a connection error the client
retries, not an authentication failure that fails its sends. Found by the secured fault loop
(test_security_faults.py), where the bundled producer gave up on hundreds of records while a node was down."""

from __future__ import annotations

import asyncio
import socket
import ssl

import pytest

from odradek.client.connection import BrokerConnection, ClientSecurity
from odradek.client.errors import AuthenticationError, KafkaConnectionError


async def _serve(handler) -> tuple[asyncio.base_events.Server, int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_a_connection_ended_during_the_tls_handshake_is_retriable():
    async def close_at_once(reader, writer):
        writer.close()  # the client's hello unread: the peer sees a reset

    async def reset(reader, writer):
        await reader.read(1)  # the client hello has begun: abort with a reset (SO_LINGER 0)
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        writer.transport.abort()

    for handler in (close_at_once, reset):
        server, port = await _serve(handler)
        try:
            conn = BrokerConnection("127.0.0.1", port, node_id=1, security=ClientSecurity(ssl_context=ssl.create_default_context()))
            with pytest.raises(KafkaConnectionError) as raised:
                await conn.connect()
            assert not isinstance(raised.value, AuthenticationError)
            assert raised.value.retriable
        finally:
            server.close()
            await server.wait_closed()


async def test_a_tls_alert_during_the_handshake_is_an_authentication_error(tmp_path):
    """A server whose certificate the client does not trust: the handshake fails with an alert, not retried."""
    from tests.pki import make_pki

    pki = make_pki(tmp_path)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(str(pki.server_cert), str(pki.server_key))

    async def answer(reader, writer):
        await reader.read(1)
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    try:
        # The client trusts only the system's CAs, not the test CA that signed the server's certificate.
        conn = BrokerConnection("127.0.0.1", port, node_id=1, security=ClientSecurity(ssl_context=ssl.create_default_context()))
        with pytest.raises(AuthenticationError, match="TLS handshake"):
            await conn.connect()
    finally:
        server.close()
        await server.wait_closed()
