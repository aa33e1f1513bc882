"""The network pipeline: acceptor -> connection processor -> request channel -> handler tasks.

Theory of operation
-------------------
Each listener has one asyncio server (the acceptor). Every accepted socket gets a `KafkaProtocol`, a thin
BufferedProtocol adapter: the socket reads straight into the sans-I/O `protocol.ServerConnection`'s
buffers (a large produce request lands in its own buffer without further copies), and the parsed
requests queue in an inbox. A per-connection processor task takes one request at a time (Kafka's mute/unmute: one request in
flight per connection, so responses leave in request order), puts it on the bounded `RequestChannel` and
waits for its response, which it then writes: bytes through the transport, `FileRegion`s with
`os.sendfile` straight from the segment file to the socket when the transport's buffer is empty, else by
copying (the fallback TLS will need too).

Back-pressure: a connection stops reading when its inbox holds `max_inbox` requests or when the request
channel is full, and resumes when its processor catches up. The socket's own flow control pauses the
processor while the peer is slow to read (`pause_writing` / `resume_writing`).

Handler tasks take requests from the channel and run the registered handler synchronously. A handler
that must wait (a long-poll fetch, acks=all) returns a future completed later by the purgatory; the
handler task does not wait for it, the connection's processor does.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

import structlog

from odradek.protocol.codec import FileRegion
from odradek.protocol.connection import ApiVersionsUnsupported, RequestReceived, ServerConnection
from odradek.protocol.errors import ProtocolError
from odradek.protocol.headers import RequestHeader

log = structlog.get_logger("odradek.network")

_PRODUCE = 0


@dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    request: Any
    connection_id: str
    client_host: str
    listener: str
    received_ns: int
    frame_size: int

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def api_version(self) -> int:
        return self.header.api_version


class _Pending:
    """A request on its way through the channel; `response` resolves to a message, None or a future."""

    __slots__ = ("ctx", "response")

    def __init__(self, ctx: RequestContext):
        self.ctx = ctx
        self.response: asyncio.Future = asyncio.get_running_loop().create_future()


class RequestChannel:
    """A bounded queue between connection processors and handler tasks."""

    def __init__(self, max_size: int):
        self.queue: asyncio.Queue[_Pending] = asyncio.Queue(max_size)

    def full(self) -> bool:
        return self.queue.full()

    async def put(self, item: _Pending) -> None:
        await self.queue.put(item)

    async def get(self) -> _Pending:
        return await self.queue.get()


class KafkaProtocol(asyncio.BufferedProtocol):
    def __init__(self, server: "NetworkServer", listener: str):
        self.server = server
        self.listener = listener
        self.conn = ServerConnection(max_frame_bytes=server.max_frame_bytes, supported=server.accepted_versions)
        self.transport: asyncio.Transport | None = None
        self.inbox: deque[RequestReceived | ApiVersionsUnsupported] = deque()
        self.inbox_event = asyncio.Event()
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.reading_paused = False
        self.closed = False
        self.processor: asyncio.Task | None = None
        self.connection_id = ""
        self.client_host = ""
        self.last_active = time.monotonic()
        self.in_flight = False

    # -- asyncio.Protocol --

    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername") or ("?", 0)
        sock = transport.get_extra_info("sockname") or ("?", 0)
        self.client_host = str(peer[0])
        self.connection_id = f"{sock[0]}:{sock[1]}-{peer[0]}:{peer[1]}"
        if not self.server.register(self):
            log.warning("connection refused: max.connections reached", client=self.connection_id)
            transport.abort()
            self.closed = True
            return
        self.processor = asyncio.get_running_loop().create_task(self._process())

    def get_buffer(self, sizehint: int) -> memoryview:
        # The socket reads straight into the framer's buffer (see protocol.connection._Framer).
        return self.conn.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        if self.server.metrics is not None:
            self.server.metrics.add_bytes_in(nbytes)
        try:
            events = self.conn.buffer_updated(nbytes)
        except ProtocolError as e:
            self._protocol_error(e)
            return
        if events:
            self.inbox.extend(events)
            self.inbox_event.set()
            if len(self.inbox) >= self.server.max_inbox or self.server.channel.full():
                self._pause_reading()

    def eof_received(self):
        return False

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.inbox_event.set()
        self.can_write.set()
        self.server.unregister(self)
        if self.processor is not None and not self.processor.done():
            self.processor.cancel()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    # -- processing --

    def _protocol_error(self, e: Exception) -> None:
        log.info("closing connection after a protocol error", client=self.connection_id, error=str(e))
        self.server.metrics_protocol_error()
        self.close()

    def close(self) -> None:
        if not self.closed and self.transport is not None:
            self.closed = True
            self.transport.close()

    def _pause_reading(self) -> None:
        if not self.reading_paused and self.transport is not None:
            self.reading_paused = True
            self.transport.pause_reading()

    def _maybe_resume_reading(self) -> None:
        if self.reading_paused and not self.closed and len(self.inbox) < self.server.max_inbox:
            self.reading_paused = False
            self.transport.resume_reading()

    async def _process(self) -> None:
        try:
            while not self.closed:
                if self.server.draining:  # shutting down: no new requests; the last response has gone out
                    self.close()
                    break
                if not self.inbox:
                    self.inbox_event.clear()
                    self._maybe_resume_reading()
                    await self.inbox_event.wait()
                    continue
                event = self.inbox.popleft()
                self.in_flight = True
                ctx = RequestContext(
                    event.header, getattr(event, "request", None), self.connection_id, self.client_host,
                    self.listener, time.monotonic_ns(), event.frame_size,
                )
                if isinstance(event, ApiVersionsUnsupported):
                    await self._write(self.conn.send_api_versions_unsupported(event.header, self.server.advertised_versions))
                    self.in_flight = False
                    continue
                pending = _Pending(ctx)
                if self.server.channel.full():
                    self._pause_reading()
                await self.server.channel.put(pending)
                self._maybe_resume_reading()
                response = await pending.response
                if isinstance(response, asyncio.Future):
                    response = await response
                if response is not None and not self.closed:
                    await self._write(self.conn.send_response(ctx.header, response))
                self.in_flight = False
                self.last_active = time.monotonic()
        except asyncio.CancelledError:
            pass
        except Exception:  # a bug in a handler or the writer must not take the broker down
            log.exception("connection processor failed", client=self.connection_id)
            self.close()

    async def _write(self, chunks: list) -> None:
        transport = self.transport
        if self.server.metrics is not None:
            self.server.metrics.add_bytes_out(sum(c.length if isinstance(c, FileRegion) else len(c) for c in chunks))
        for chunk in chunks:
            if self.closed:
                return
            if not self.can_write.is_set():
                await self.can_write.wait()
            if isinstance(chunk, FileRegion):
                await self._send_region(chunk)
            else:
                transport.write(chunk)

    async def _send_region(self, region: FileRegion) -> None:
        transport = self.transport
        position, remaining = region.position, region.length
        sock = transport.get_extra_info("socket")
        if sock is not None and transport.get_write_buffer_size() == 0 and self.server.use_sendfile:
            try:
                fileno = sock.fileno()
                while remaining > 0:
                    sent = os.sendfile(fileno, region.fd, position, remaining)
                    if sent == 0:
                        break
                    position += sent
                    remaining -= sent
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as e:
                log.info("sendfile failed; closing", client=self.connection_id, error=str(e))
                self.close()
                return
        if remaining > 0:
            # Socket buffer full (or sendfile unavailable): copy the rest through the transport.
            data = os.pread(region.fd, remaining, position)
            if len(data) < remaining:  # the file shrank under us (truncation): keep the frame length honest
                data += b"\x00" * (remaining - len(data))
            transport.write(data)


class NetworkServer:
    """Owns the listeners, the connections, the request channel and the handler tasks."""

    def __init__(
        self,
        *,
        dispatch: Callable[[_Pending], None],
        accepted_versions: dict[int, tuple[int, int]],
        advertised_versions: dict[int, tuple[int, int]],
        max_frame_bytes: int,
        max_connections: int,
        queued_max_requests: int,
        num_handler_tasks: int,
        connections_max_idle_ms: int,
        use_sendfile: bool = True,
        on_protocol_error: Callable[[], None] | None = None,
        metrics=None,
    ):
        self.metrics = metrics
        self.dispatch = dispatch
        self.accepted_versions = accepted_versions
        self.advertised_versions = advertised_versions
        self.max_frame_bytes = max_frame_bytes
        self.max_connections = max_connections
        self.max_inbox = 16
        self.channel = RequestChannel(queued_max_requests)
        self.num_handler_tasks = num_handler_tasks
        self.connections_max_idle_ms = connections_max_idle_ms
        self.use_sendfile = use_sendfile
        self.connections: set[KafkaProtocol] = set()
        self.servers: list[asyncio.base_events.Server] = []
        self.tasks: list[asyncio.Task] = []
        self._on_protocol_error = on_protocol_error
        self.total_connections = 0
        self.draining = False

    def metrics_protocol_error(self) -> None:
        if self._on_protocol_error:
            self._on_protocol_error()

    def register(self, conn: KafkaProtocol) -> bool:
        if len(self.connections) >= self.max_connections:
            return False
        self.connections.add(conn)
        self.total_connections += 1
        if self.metrics is not None:
            self.metrics.connection_opened()
        return True

    def unregister(self, conn: KafkaProtocol) -> None:
        if conn in self.connections:
            self.connections.discard(conn)
            if self.metrics is not None:
                self.metrics.connection_closed()

    async def listen(self, name: str, host: str, port: int) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: KafkaProtocol(self, name), host, port, reuse_address=True, backlog=512)
        self.servers.append(server)
        sockname = server.sockets[0].getsockname()
        return sockname[0], sockname[1]

    def start_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(self.num_handler_tasks):
            self.tasks.append(loop.create_task(self._handler_loop()))
        self.tasks.append(loop.create_task(self._idle_reaper()))

    async def _handler_loop(self) -> None:
        while True:
            pending = await self.channel.get()
            try:
                self.dispatch(pending)
            except Exception as e:  # dispatch resolves futures itself; this is a last resort
                log.exception("dispatch failed")
                if not pending.response.done():
                    pending.response.set_exception(e)

    async def _idle_reaper(self) -> None:
        idle_s = self.connections_max_idle_ms / 1000
        interval = max(0.5, min(idle_s / 4, 30.0))
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for conn in list(self.connections):
                if not conn.in_flight and now - conn.last_active > idle_s:
                    log.info("closing idle connection", client=conn.connection_id)
                    conn.close()

    async def stop_accepting(self) -> None:
        self.draining = True
        for server in self.servers:
            server.close()
        for conn in list(self.connections):
            if not conn.in_flight:
                conn.inbox_event.set()  # an idle processor wakes up, sees `draining` and closes

    async def drain(self, timeout_s: float) -> None:
        """Let every connection finish the request it is processing, then close them all.

        Once `stop_accepting` has run, no connection takes a new request: each closes after its
        current response (a client pipelining, or re-polling at once, cannot keep shutdown waiting)."""
        deadline = time.monotonic() + timeout_s
        while any(c.in_flight for c in self.connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self.connections):
            conn.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()
