"""A TCP proxy on loopback that can cut and heal the links between the nodes of a test cluster.

Every listener a test wants to cut (a node's client/inter-broker listener, its controller listener) gets a
proxy port in front of it; the nodes advertise, and list as voters, the proxy ports instead of their own.
All traffic between nodes, and between clients and nodes, then passes through one `Fabric`, which runs
the proxies on an asyncio loop in a thread of the test process.

Who is talking: every connection comes from 127.0.0.1, so the source is read from the first request
instead. A Kafka connection always starts with a request from the side that connected, and every request
header (v1 and later) carries the client id as an int16-length string right after api key, version and
correlation id. Odradek's nodes name themselves there (`odradek-node-<id>-<purpose>` for quorum and
controller traffic, `odradek-replica-fetcher-<id>-<source>` for followers), so the proxy knows the source
node; any other client id is a client (`CLIENT`).

Over TLS the first request is ciphertext, so a fabric made with `Fabric(identify=...)` asks instead who
owns the other end of the TCP connection: `ProcessSources` finds the connecting socket in /proc/net/tcp
(its local address is the peer the proxy sees, its remote address the proxy's port) and the node process
holding that socket's inode among its file descriptors; any other process is a client. The nodes, their
certificates and their settings stay as they are (TLS to 127.0.0.1, verified against its IP SAN): the
proxy forwards the TLS bytes untouched. Linux only, as /proc is.

What a cut does: a link is one direction between two parties (`cut(1, 2)` blocks what 1 sends to 2, not
what 2 sends to 1; `isolate(n)` cuts both ways between n and everyone, clients included unless told).
Blocked bytes are held, not forwarded, as a network that drops packets would make TCP hold them: a
request sent over a cut link is not seen by the other side (the sender's timeout fires and it reconnects,
over the still-cut link), and a response over a cut link never arrives. `heal()` lets held bytes through,
as TCP retransmission would after a short partition; `cut(..., reset=True)` instead closes the links'
connections at once, as a peer that has given up would. New connections over a cut link are accepted
and held too. Nothing here sleeps: the pumps wait on the link's state.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import struct
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future

CLIENT = 0  # the source id of anything that is not a node (node ids start at 1)

_NODE_CLIENT_ID = re.compile(rb"^odradek-(?:node|replica-fetcher)-(\d+)")
_CHUNK_BYTES = 65536


def source_of(first_frame: bytes) -> int:
    """The node id named by the client id of a request frame (size prefix included), else CLIENT."""
    # size (4) api_key (2) api_version (2) correlation_id (4) client_id length (2) client_id
    if len(first_frame) < 14:
        return CLIENT
    (length,) = struct.unpack_from(">h", first_frame, 12)
    if length <= 0:
        return CLIENT
    match = _NODE_CLIENT_ID.match(first_frame[14:14 + length])
    return int(match.group(1)) if match else CLIENT


def _proc_address(host: str, port: int) -> str:
    """An IPv4 address as /proc/net/tcp writes it: the address as a little-endian word, the port big-endian."""
    return "%08X:%04X" % (int.from_bytes(socket.inet_aton(host), "little"), port)


class ProcessSources:
    """Who connected, by process: `nodes()` gives the node processes' pids (pid -> node id); a connection
    from any other process is from a client."""

    def __init__(self, nodes: Callable[[], dict[int, int]]) -> None:
        self._nodes = nodes

    def __call__(self, peer: tuple[str, int], local: tuple[str, int]) -> int:
        inode = self._connecting_inode(peer, local)
        if inode is None:
            return CLIENT
        target = f"socket:[{inode}]"
        for pid, node_id in self._nodes().items():
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:  # the process has exited
                continue
            for fd in fds:
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                        return node_id
                except OSError:  # closed meanwhile
                    continue
        return CLIENT

    @staticmethod
    def _connecting_inode(peer: tuple[str, int], local: tuple[str, int]) -> int | None:
        # The connecting side's socket: its local address is our peer, its remote address our listener.
        want = (_proc_address(*peer[:2]), _proc_address(*local[:2]))
        with open("/proc/net/tcp") as table:
            next(table)
            for line in table:
                fields = line.split()
                if (fields[1], fields[2]) == want:
                    return int(fields[9])
        return None


class _Link:
    """One direction between two parties: open or cut."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.open.set()


class _Connection:
    def __init__(self, source: int, target: int, writers: list[asyncio.StreamWriter]) -> None:
        self.source = source
        self.target = target
        self.writers = writers
        self.tasks: list[asyncio.Task] = []

    def close(self) -> None:
        for t in self.tasks:
            t.cancel()
        for w in self.writers:
            w.close()


class Fabric:
    """The proxies of one test cluster. Use from the test's thread: every method is thread-safe and
    returns when the change is in effect."""

    def __init__(self, identify: Callable[[tuple, tuple], int] | None = None) -> None:
        """`identify(peer, local)` names the source of a new connection (e.g. a `ProcessSources`); by
        default the client id of its first request does."""
        self._identify = identify
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="netproxy", daemon=True)
        self._thread.start()
        self._links: dict[tuple[int, int], _Link] = {}
        self._servers: list[asyncio.base_events.Server] = []
        self._connections: set[_Connection] = set()
        self.accepted = 0

    # -- set-up

    def add(self, target_node: int, target_port: int, listen_port: int = 0) -> int:
        """A proxy for `target_node`'s listener on `target_port`; returns the proxy's port."""
        return self._call(self._add(target_node, target_port, listen_port))

    async def _add(self, target_node: int, target_port: int, listen_port: int) -> int:
        server = await asyncio.start_server(
            lambda r, w: self._accept(r, w, target_node, target_port), "127.0.0.1", listen_port)
        self._servers.append(server)
        return server.sockets[0].getsockname()[1]

    def close(self) -> None:
        self._call(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    async def _close(self) -> None:
        for server in self._servers:
            server.close()
        for c in list(self._connections):
            c.close()
        for link in self._links.values():
            link.open.set()

    # -- faults

    def cut(self, source: int, target: int, *, both_ways: bool = False, reset: bool = False) -> None:
        """Block what `source` sends to `target` (and the reverse with both_ways)."""
        pairs = [(source, target)] + ([(target, source)] if both_ways else [])
        self._call(self._cut(pairs, reset))

    def isolate(self, node: int, others: Iterable[int], *, clients: bool = False, reset: bool = False) -> None:
        """Cut `node` off from every one of `others` both ways (and from clients with clients=True)."""
        peers = list(others) + ([CLIENT] if clients else [])
        pairs = [(node, p) for p in peers if p != node] + [(p, node) for p in peers if p != node]
        self._call(self._cut(pairs, reset))

    def heal(self) -> None:
        """Every link open again; held bytes flow."""
        self._call(self._heal())

    def cuts(self) -> list[tuple[int, int]]:
        return sorted(pair for pair, link in self._links.items() if not link.open.is_set())

    async def _cut(self, pairs: list[tuple[int, int]], reset: bool) -> None:
        for pair in pairs:
            self._link(*pair).open.clear()
        if reset:
            blocked = set(pairs)
            for c in list(self._connections):
                if (c.source, c.target) in blocked or (c.target, c.source) in blocked:
                    c.close()

    async def _heal(self) -> None:
        for link in self._links.values():
            link.open.set()

    # -- the proxies

    def _call(self, coro):
        future: Future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout=30)

    def _link(self, source: int, target: int) -> _Link:
        link = self._links.get((source, target))
        if link is None:
            link = self._links[(source, target)] = _Link()
        return link

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: int, port: int) -> None:
        self.accepted += 1
        upstream_writer = None
        try:
            if self._identify is not None:
                first = b""
                source = self._identify(writer.get_extra_info("peername"), writer.get_extra_info("sockname"))
            else:
                head = await reader.readexactly(14)
                (length,) = struct.unpack_from(">h", head, 12)
                first = head + (await reader.readexactly(length) if length > 0 else b"")
                source = source_of(first)
            up_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", port)
        except (OSError, asyncio.IncompleteReadError):
            writer.close()
            if upstream_writer is not None:
                upstream_writer.close()
            return
        conn = _Connection(source, target, [writer, upstream_writer])
        self._connections.add(conn)
        conn.tasks = [
            asyncio.create_task(self._pump(reader, upstream_writer, self._link(source, target), first)),
            asyncio.create_task(self._pump(up_reader, writer, self._link(target, source), b"")),
        ]
        try:
            await asyncio.wait(conn.tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            conn.close()
            self._connections.discard(conn)

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link, pending: bytes) -> None:
        try:
            while True:
                if pending:
                    await link.open.wait()
                    writer.write(pending)
                    await writer.drain()
                pending = await reader.read(_CHUNK_BYTES)
                if not pending:
                    return
        except (OSError, asyncio.IncompleteReadError):
            return
