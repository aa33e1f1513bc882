"""tests/netproxy.py: who a connection comes from (the first request's client id), bytes passing through,
and a cut with reset closing the link's connections. No waits on time: every step is a socket answer."""

from __future__ import annotations

import socket
import threading

from odradek.protocol.connection import ClientConnection
from odradek.protocol.messages import ApiVersionsRequest

from ..netproxy import CLIENT, Fabric, source_of


def frame(client_id: str | None) -> bytes:
    _, data = ClientConnection(client_id=client_id).send_request(ApiVersionsRequest(), 0)
    return bytes(data)


def test_the_source_is_the_node_named_by_the_client_id():
    assert source_of(frame("odradek-node-2-forward")) == 2
    assert source_of(frame("odradek-replica-fetcher-13-1")) == 13
    assert source_of(frame("rdkafka")) == CLIENT
    assert source_of(frame(None)) == CLIENT
    assert source_of(b"\x00\x00") == CLIENT


def echo_server() -> tuple[socket.socket, threading.Thread]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                while data := conn.recv(65536):
                    conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server, thread


def test_bytes_pass_and_a_reset_cut_closes_the_link():
    server, _ = echo_server()
    fabric = Fabric()
    try:
        port = fabric.add(1, server.getsockname()[1])
        first = frame("odradek-node-2-heartbeat")
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall(first)
            got = b""
            while len(got) < len(first):
                got += conn.recv(65536)
            assert got == first
            fabric.cut(2, 1, reset=True)
            assert fabric.cuts() == [(2, 1)]
            assert conn.recv(65536) == b""  # the proxy closed the connection of the cut link
        fabric.heal()
        assert fabric.cuts() == []
    finally:
        fabric.close()
        server.close()
