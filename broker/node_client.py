"""Requests from this node to another: the inter-node half of the network layer (Kafka's NetworkClient).

The controller quorum (Vote, BeginQuorumEpoch, Fetch of `__cluster_metadata`), the brokers' lifecycle
(BrokerRegistration, BrokerHeartbeat, AlterPartition, AllocateProducerIds, forwarded admin requests) and
the replica fetchers all speak Kafka's own RPCs to other nodes. They do it through a `NodeConnection`: one
TCP connection to one node, opened on first use, with the sans-I/O `protocol.ClientConnection` doing the
framing; `request(message, version, timeout_s)` sends and returns the decoded response.

Theory of operation
-------------------
Requests are pipelined on the connection and answered in order (Kafka's rule), so the connection's reading
protocol (`_Responses`, the socket reading straight into the response frames) matches each response frame
to the oldest request in flight. Whatever goes wrong with the connection (refused,
reset, closed by the peer, a malformed response, a timeout) fails every request in flight with
`NodeUnavailable` and closes it; the next request opens a new connection, no sooner than `backoff_s` after
the last failure, so that a dead node costs one connect attempt per backoff, not one per request. A node
that lies (a response the codec cannot read, a correlation id out of order) is a protocol error: the
connection closes and callers see `NodeUnavailable`, never a half-read answer.

A caller that wants its own ordering (a long-polling fetch must not hold up heartbeats) uses its own
`NodeConnection`; they are cheap. `NodeConnections` keeps one per (node id, purpose).

Secured listeners: a `NodeSecurity` (broker/security.py's `node_security`, from the inter-broker or the
controller listener's settings) wraps the connection in TLS and, for SASL, authenticates it with
SaslHandshake v1 and SaslAuthenticate before the first request goes out, as Kafka's brokers do with
`sasl.mechanism.inter.broker.protocol` / `sasl.mechanism.controller.protocol`. A refused authentication is
NodeUnavailable like any other failure: the node retries after its backoff, and logs why. When the listener
gives sessions a lifetime (`connections.max.reauth.ms`, KIP-368), the connection re-authenticates in band
at 85% of it, as Kafka's NetworkClient does: the SASL requests queue behind those in flight, and requests
made meanwhile wait for the new session (the peer closes a connection that sends anything else while its
session is being renewed or after it ended), so a long-lived replica fetcher or quorum link is not cut.
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from odradek.protocol.connection import ClientConnection
from odradek.protocol.errors import ErrorCode, ProtocolError
from odradek.protocol.messages import (ApiVersionsRequest, ApiVersionsResponse, SaslAuthenticateRequest,
                                       SaslHandshakeRequest)
from odradek.protocol.sasl import (
    OAUTHBEARER, PLAIN, SaslAuthenticationFailed, ScramClient, ScramMechanism, UnsecuredLoginOptions,
    oauthbearer_client_first, plain_token,
)

log = structlog.get_logger("odradek.node_client")

_READ_BYTES = 1 << 16  # one read of the SASL exchange, before the connection's responses go to _Responses
_REAUTH_AT = 0.85  # of the session lifetime
_LOWAT_FROM = 64 * 1024  # bytes still to come of a response from which its reader sleeps until they are all there


class NodeUnavailable(ConnectionError):
    """The node could not be reached, or the connection failed before the response arrived."""


class NodeDisconnected(NodeUnavailable):
    """The node's end closed the connection (EOF, reset) or refused a new one: its host answers but the
    process is gone (killed, restarting). Unlike a timeout this is news the moment it happens, which the
    quorum driver uses (raft `handle_disconnect`); a frozen host or a cut network never raises it."""


@dataclass(frozen=True)
class NodeSecurity:
    """TLS (a client context) and SASL credentials for connections to one kind of listener."""

    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = field(default="", repr=False)
    oauth_login: UnsecuredLoginOptions | None = field(default=None, compare=False)  # OAUTHBEARER: mints the token


class NodeConnection:
    def __init__(
        self, node_id: int, host: str, port: int, *, client_id: str = "odradek-node",
        backoff_s: float = 0.05, connect_timeout_s: float = 5.0, clock: Callable[[], float] = time.monotonic,
        security: NodeSecurity | None = None,
    ) -> None:
        self.security = security
        self.node_id = node_id
        self.host = host
        self.port = port
        self.client_id = client_id
        self.backoff_s = backoff_s
        self.connect_timeout_s = connect_timeout_s
        self._clock = clock
        self._writer: asyncio.StreamWriter | None = None
        self._conn: ClientConnection | None = None
        self._in_flight: deque[asyncio.Future] = deque()
        self._connecting: asyncio.Future | None = None
        self._failed_at = float("-inf")
        self._closed = False
        self._reauth_at: float | None = None  # clock time to renew the SASL session (None: it does not end)
        self._reauthenticating: asyncio.Future | None = None
        self.connects = 0  # connections opened (for tests and logs)
        self.reauthentications = 0  # SASL sessions renewed in band

    def __repr__(self) -> str:
        return f"<NodeConnection {self.node_id} {self.host}:{self.port}>"

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    def set_address(self, host: str, port: int) -> None:
        """The node moved (a new registration): the next connection goes to the new address."""
        if (host, port) != (self.host, self.port):
            self.host, self.port = host, port
            self._drop(NodeUnavailable(f"node {self.node_id} moved to {host}:{port}"))

    async def request(self, message, version: int, timeout_s: float = 30.0):
        """Send `message` at `version`; the decoded response. Raises NodeUnavailable (and closes the
        connection) on any connection failure or on timeout."""
        if self._closed:
            raise NodeUnavailable(f"connection to node {self.node_id} is closed")
        await self._ensure_connected()
        await self._maybe_reauthenticate()
        return await self._send(message, version, timeout_s)

    async def request_packed(self, api_key: int, version: int, write_body, timeout_s: float = 30.0):
        """As `request`, for a request body a packed encoder writes (`write_body(out)`, see
        ClientConnection.send_packed_request); the response is decoded as any other."""
        if self._closed:
            raise NodeUnavailable(f"connection to node {self.node_id} is closed")
        await self._ensure_connected()
        await self._maybe_reauthenticate()
        return await self._send(None, version, timeout_s, (api_key, write_body))

    async def _send(self, message, version: int, timeout_s: float, packed: tuple | None = None):
        conn, writer = self._conn, self._writer
        if conn is None or writer is None:
            raise NodeUnavailable(f"node {self.node_id} is not connected")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        future.add_done_callback(_retrieved)  # a caller that was cancelled no longer awaits it
        # (ProtocolError from encoding: a request this client cannot encode is the caller's bug, not the node's)
        if packed is None:
            _, data = conn.send_request(message, version)
        else:
            _, data = conn.send_packed_request(packed[0], version, packed[1])
        self._in_flight.append(future)
        writer.write(data)
        # The answer's future is awaited directly, its deadline a timer that drops the connection (which
        # fails every request in flight on it, this one with it). Python 3.11's wait_for(shield(...)) cost
        # three loop turns and two more futures per request between the response and the caller: on a
        # follower's fetch loop that was a tenth of its CPU at low rates (py-spy). A cancelled caller
        # cancels only this future; its answer, when it comes, is read and dropped (`_answered`).
        timer = loop.call_later(timeout_s, self._expire, future, timeout_s)
        try:
            return await future
        finally:
            timer.cancel()

    def _expire(self, future: asyncio.Future, timeout_s: float) -> None:
        if not future.done():
            self._drop(NodeUnavailable(f"node {self.node_id} did not answer within {timeout_s}s"))

    async def close(self) -> None:
        self._closed = True
        self._drop(NodeUnavailable(f"connection to node {self.node_id} closed"))

    def reset(self, reason: str) -> None:
        """Close the current connection (requests in flight on it fail with NodeUnavailable); the next
        request opens a new one without waiting out the backoff. For a caller that gave up on a request the
        node may still hold: the node serves one request at a time per connection, so later ones would
        queue behind it."""
        if self._writer is not None:
            self._drop(NodeUnavailable(f"connection to node {self.node_id} reset: {reason}"))
            self._failed_at = float("-inf")

    # -- the connection

    async def _ensure_connected(self) -> None:
        if self.connected:
            return
        if self._connecting is not None:
            await asyncio.shield(self._connecting)
            if not self.connected:
                raise NodeUnavailable(f"node {self.node_id} at {self.host}:{self.port} is unreachable")
            return
        wait_s = self._failed_at + self.backoff_s - self._clock()
        if wait_s > 0:
            raise NodeUnavailable(f"node {self.node_id} failed {self.backoff_s - wait_s:.3f}s ago; backing off")
        loop = asyncio.get_running_loop()
        self._connecting = loop.create_future()
        security = self.security
        ssl_context = security.ssl_context if security is not None else None
        writer = None
        try:
            reader, writer = await asyncio.wait_for(self._open(ssl_context), self.connect_timeout_s)
            conn = ClientConnection(client_id=self.client_id, recycle_frames=True)  # (see _Responses)
            lifetime_ms = 0
            if security is not None and security.mechanism is not None:
                lifetime_ms = await asyncio.wait_for(self._authenticate(reader, writer, conn, security), self.connect_timeout_s)
        except (OSError, asyncio.TimeoutError, ProtocolError, NodeUnavailable) as e:
            self._failed_at = self._clock()
            if writer is not None:
                writer.close()
            if isinstance(e, NodeUnavailable):
                log.warning("cannot authenticate to a node", node=self.node_id, error=str(e))
                raise
            cls = NodeDisconnected if isinstance(e, ConnectionRefusedError) else NodeUnavailable
            raise cls(f"node {self.node_id} at {self.host}:{self.port} is unreachable: {e}") from None
        finally:
            connecting, self._connecting = self._connecting, None
            connecting.set_result(None)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._writer = writer
        self._conn = conn
        self.connects += 1
        self._session_started(lifetime_ms)
        # From here the socket reads straight into the response frames (see _Responses), not via the stream.
        writer.transport.set_protocol(_Responses(self, writer, conn, sock if ssl_context is None else None))
        if reader.at_eof() or writer.is_closing():  # lost before the switch: the stream saw it, not _Responses
            self._drop(NodeUnavailable(f"node {self.node_id} closed the connection"))

    async def _open(self, ssl_context: ssl.SSLContext | None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Resolve the node's host name, then connect to its addresses in turn.

        The name is resolved here rather than by `open_connection`: uvloop's create_connection, cancelled
        (our connect timeout, a stopping fetcher) while it resolves a name, leaves its resolver future
        unretrieved, and the event loop then logs "Future exception was never retrieved ... gaierror" with
        no frame naming the caller (MagicStack/uvloop#437). That is what a Docker peer whose container went
        away produced. `loop.getaddrinfo` cancels cleanly, and connecting to a numeric address resolves
        nothing. A name that does not resolve is logged once per host and cause (`_note_unresolved`), not
        on every retry."""
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except socket.gaierror as e:
            _note_unresolved(self.host, self.port, self.node_id, e)
            raise
        _note_resolved(self.host, self.node_id)
        server_hostname = self.host if ssl_context is not None else None
        error: OSError = OSError(f"no address for {self.host}")
        for _family, _type, _proto, _name, address in infos:
            try:
                return await asyncio.open_connection(str(address[0]), int(address[1]), ssl=ssl_context,
                                                     server_hostname=server_hostname)
            except OSError as e:
                error = e
        raise error

    def _session_started(self, lifetime_ms: int) -> None:
        self._reauth_at = self._clock() + _REAUTH_AT * lifetime_ms / 1000 if lifetime_ms > 0 else None

    async def _authenticate(self, reader, writer, conn: ClientConnection, security: NodeSecurity) -> int:
        """SaslHandshake v1, then SaslAuthenticate v2 rounds, before any other request on the connection;
        the session's lifetime in ms (0: it does not end)."""

        async def call(message, version: int):
            _, data = conn.send_request(message, version)
            writer.write(data)
            while True:
                chunk = await reader.read(_READ_BYTES)
                if not chunk:
                    raise NodeUnavailable(f"node {self.node_id} closed the connection during SASL authentication")
                events = conn.receive_data(chunk)
                if events:
                    return events[0].response

        return await self._sasl_exchange(call, security)

    async def _maybe_reauthenticate(self) -> None:
        """Renew the SASL session in band when it is due (KIP-368); other requests wait until it is done."""
        while self._reauthenticating is not None:
            await asyncio.shield(self._reauthenticating)
        security = self.security  # set whenever _reauth_at is: a SASL session was started
        if security is None or self._reauth_at is None or self._clock() < self._reauth_at or not self.connected:
            return
        done = self._reauthenticating = asyncio.get_running_loop().create_future()
        try:
            lifetime_ms = await self._sasl_exchange(lambda message, version: self._send(message, version, self.connect_timeout_s),
                                                    security)
        except (NodeUnavailable, ProtocolError) as e:
            self._drop(NodeUnavailable(f"re-authentication with node {self.node_id} failed: {e}"))
            log.warning("cannot re-authenticate to a node", node=self.node_id, error=str(e))
            raise NodeUnavailable(f"re-authentication with node {self.node_id} failed: {e}") from None
        except asyncio.CancelledError:  # half a renewal leaves the peer waiting for its end: start afresh
            self._drop(NodeUnavailable(f"re-authentication with node {self.node_id} interrupted"))
            raise
        finally:
            self._reauthenticating = None
            done.set_result(None)
        self.reauthentications += 1
        self._session_started(lifetime_ms)

    async def _sasl_exchange(self, call, security: NodeSecurity) -> int:
        """The SASL requests of one (re-)authentication, each sent and answered by `call`; the session's
        lifetime in ms from the last SaslAuthenticate answer."""
        mechanism = security.mechanism
        assert mechanism is not None  # only a SASL listener's NodeSecurity is exchanged for
        handshake = await call(SaslHandshakeRequest(mechanism=security.mechanism), 1)
        if handshake.error_code:
            raise NodeUnavailable(f"node {self.node_id} does not enable SASL mechanism {security.mechanism} "
                                  f"(enabled: {', '.join(handshake.mechanisms)})")

        lifetime_ms = 0

        async def token(data: bytes) -> bytes:
            nonlocal lifetime_ms
            response = await call(SaslAuthenticateRequest(auth_bytes=data), 2)
            if response.error_code:
                raise NodeUnavailable(f"node {self.node_id} refused SASL authentication as {security.username!r}: "
                                      f"{ErrorCode.for_code(response.error_code).name} ({response.error_message})")
            lifetime_ms = response.session_lifetime_ms
            return bytes(response.auth_bytes)

        try:
            if security.mechanism == PLAIN:
                await token(plain_token(security.username, security.password))
            elif security.mechanism == OAUTHBEARER:
                assert security.oauth_login is not None  # node_security gives OAUTHBEARER its login options
                status = await token(oauthbearer_client_first(security.oauth_login.token(time.time_ns() // 1_000_000)))
                if status:  # a JSON error status: the client answers ^A, which the node refuses (RFC 7628)
                    await token(b"\x01")
                    raise NodeUnavailable(f"node {self.node_id} refused this node's OAUTHBEARER token: {status.decode(errors='replace')}")
            else:
                client = ScramClient(ScramMechanism.from_name(mechanism), security.username, security.password,
                                     secrets.token_urlsafe(18))
                client.verify(await token(client.final(await token(client.first()))))
        except SaslAuthenticationFailed as e:
            raise NodeUnavailable(f"SASL authentication with node {self.node_id} failed: {e}") from None
        return lifetime_ms

    def _answered(self, writer: asyncio.StreamWriter, responses: list) -> None:
        """Responses read on the connection of `writer`, in the order of the requests (Kafka's rule)."""
        if self._writer is not writer:
            return
        for response in responses:
            if not self._in_flight:
                self._drop(NodeUnavailable(f"node {self.node_id} answered a request never sent"))
                return
            future = self._in_flight.popleft()
            if not future.done():
                future.set_result(response)

    def _lost(self, writer: asyncio.StreamWriter, error: Exception) -> None:
        if self._writer is writer:
            self._drop(error)

    def _drop(self, error: Exception) -> None:
        writer, self._writer, self._conn = self._writer, None, None
        if writer is not None:
            self._failed_at = self._clock()
            writer.close()
        in_flight, self._in_flight = self._in_flight, deque()
        for future in in_flight:
            if not future.done():
                future.set_exception(error)


class _Responses(asyncio.BufferedProtocol):
    """The reading side of a NodeConnection once it is connected (and authenticated): the transport reads
    into `ClientConnection.get_buffer()`, so a large response (a follower's fetch, up to
    replica.fetch.max.bytes) lands in its own buffer with no copy, and completes its request's future in
    the same callback. Through asyncio's StreamReader each response was copied into the stream's buffer,
    sliced out in 64 KiB reads (one task wake-up each) and copied into the frame: under
    bench.replication_bench that was more of a follower's CPU than appending the batches (py-spy). The
    frames' buffers are recycled (`ClientConnection(recycle_frames=True)`): a follower's next response is
    read into the memory of one it has finished with, instead of fresh zeroed pages each time.
    The SASL exchange before it still goes through the stream (a handful of small frames)."""

    def __init__(self, owner: NodeConnection, writer: asyncio.StreamWriter, conn: ClientConnection, sock) -> None:
        self._owner = owner
        self._writer = writer
        self._conn = conn
        self._sock = sock  # (None on TLS: see _wake_when)
        self._lowat = 1

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._conn.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        owner = self._owner
        try:
            events = self._conn.buffer_updated(nbytes)
        except ProtocolError as e:
            log.warning("closing a connection to a node that broke the protocol", node=owner.node_id, error=str(e))
            owner._lost(self._writer, NodeUnavailable(f"node {owner.node_id} broke the protocol: {e}"))
            return
        if self._sock is not None:
            self._wake_when(self._conn.awaited_bytes)
        if events:
            owner._answered(self._writer, [event.response for event in events])

    def _wake_when(self, awaited: int) -> None:
        """While a large response is coming in, the socket wakes this reader only once the rest of it is
        there (SO_RCVLOWAT), not at each of the ~64 KiB segments the leader's sendfile pushes: strace of
        a follower under bench.replication_bench counted ~5.6 loop wake-ups and ~3.7 reads per fetch
        response, each a loop turn on a cold core. The kernel still wakes it on EOF, an error or a full
        receive buffer (it caps the mark at half the buffer), so nothing waits on bytes that cannot come;
        a peer that stops mid-response is the request timeout's, as before. Back to 1 when the frame is
        complete. Not on TLS: what is still to come there is ciphertext, which the mark cannot count."""
        lowat = awaited if awaited > _LOWAT_FROM else 1
        if lowat != self._lowat:
            try:
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, lowat)
            except OSError:  # (a socket going away): wake at each read, as before
                self._sock = None
                return
            self._lowat = lowat

    def eof_received(self) -> bool:
        # The end of the stream: the peer closed it (a process that died; the Raft disconnect rule and the
        # controller's disconnect grace act on NodeDisconnected, a timeout is not one).
        self._owner._lost(self._writer, NodeDisconnected(f"node {self._owner.node_id} closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        owner = self._owner
        if exc is None or isinstance(exc, (ConnectionResetError, BrokenPipeError)):
            error: NodeUnavailable = NodeDisconnected(f"node {owner.node_id}: {exc}" if exc is not None
                                                      else f"node {owner.node_id} closed the connection")
        else:
            error = NodeUnavailable(f"node {owner.node_id}: {exc}")
        owner._lost(self._writer, error)


# Host names that did not resolve, with the cause last logged: one WARN per host and cause, not one per
# connect attempt (every NodeConnection to the host retries each backoff), and an INFO when it resolves again.
_unresolved: dict[str, str] = {}


def _note_unresolved(host: str, port: int, node_id: int, error: socket.gaierror) -> None:
    cause = str(error)
    if _unresolved.get(host) != cause:
        _unresolved[host] = cause
        log.warning("peer host name does not resolve", node=node_id, host=host, port=port, error=cause)


def _note_resolved(host: str, node_id: int) -> None:
    if _unresolved.pop(host, None) is not None:
        log.info("peer host name resolves again", node=node_id, host=host)


def _retrieved(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


def api_versions_request(purpose: str) -> ApiVersionsRequest:
    """What a node asks another before sending it an API whose version must be negotiated (Fetch v18 goes
    only to a node that accepts it, as Kafka's NetworkClient decides from ApiVersions)."""
    return ApiVersionsRequest(client_software_name="odradek", client_software_version=purpose)


def max_version_in(answer: ApiVersionsResponse, api_key: int) -> int | None:
    """The highest version of `api_key` an ApiVersions answer accepts; None when it failed or lacks the API."""
    if answer.error_code != 0:
        return None
    return next((k.max_version for k in answer.api_keys if k.api_key == api_key), None)


class NodeConnections:
    """One `NodeConnection` per (node id, purpose), addressed by a resolver (node id -> host, port or None)."""

    def __init__(self, resolve: Callable[[int], tuple[str, int] | None], *, client_id: str = "odradek-node",
                 backoff_s: float = 0.05, security: NodeSecurity | None = None) -> None:
        self.security = security
        self._resolve = resolve
        self.client_id = client_id
        self.backoff_s = backoff_s
        self._connections: dict[tuple[int, str], NodeConnection] = {}

    def get(self, node_id: int, purpose: str = "default") -> NodeConnection:
        address = self._resolve(node_id)
        if address is None:
            raise NodeUnavailable(f"no address known for node {node_id}")
        key = (node_id, purpose)
        connection = self._connections.get(key)
        if connection is None:
            connection = NodeConnection(node_id, *address, client_id=f"{self.client_id}-{purpose}", backoff_s=self.backoff_s,
                                        security=self.security)
            self._connections[key] = connection
        else:
            connection.set_address(*address)
        return connection

    async def request(self, node_id: int, message, version: int, *, purpose: str = "default", timeout_s: float = 30.0):
        return await self.get(node_id, purpose).request(message, version, timeout_s)

    async def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        await asyncio.gather(*(c.close() for c in connections), return_exceptions=True)
