"""tests/netproxy.py: who a connection comes from (the first request's client id), bytes passing through,
and a cut with reset closing the link's connections. No waits on time: every step is a socket answer."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

from odradek.protocol.connection import ClientConnection
from odradek.protocol.messages import ApiVersionsRequest

from ..netproxy import CLIENT, Fabric, ProcessSources, source_of


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


def test_over_tls_the_source_is_the_process_that_connected():
    """With `ProcessSources` the proxy reads nothing from the connection (it may be TLS): a connection from
    a node's process is that node's, one from any other process (here the test's own) a client's."""
    server, _ = echo_server()
    nodes: dict[int, int] = {}
    fabric = Fabric(identify=ProcessSources(lambda: dict(nodes)))
    child = None
    try:
        port = fabric.add(1, server.getsockname()[1])
        # A "node 2" process: connects, says hello through the proxy, then holds the connection until told.
        child = subprocess.Popen([sys.executable, "-c", (
            "import socket, sys\n"
            f"s = socket.create_connection(('127.0.0.1', {port}))\n"
            "s.sendall(b'hello'); assert s.recv(5) == b'hello'\n"
            "print('ready', flush=True); sys.stdin.readline()\n"
            "s.sendall(b'again'); print(s.recv(5).decode() or 'closed', flush=True)\n")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        nodes[child.pid] = 2
        assert child.stdout.readline().strip() == "ready"
        fabric.cut(2, 1, reset=True)  # only node 2's link: the child's connection closes
        with socket.create_connection(("127.0.0.1", port)) as conn:  # the test's own connection: a client
            conn.sendall(b"ping")
            assert conn.recv(4) == b"ping"
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "closed"
    finally:
        if child is not None:
            child.kill()
            child.wait()
        fabric.close()
        server.close()
