"""The network pipeline: acceptor -> connection -> handler, with Kafka's one-request-in-flight rule.

Theory of operation
-------------------
Each listener has one asyncio server (the acceptor). Every accepted socket gets a `KafkaProtocol`, a thin
BufferedProtocol adapter: the socket reads straight into the sans-I/O `protocol.ServerConnection`'s
buffers (a large produce request lands in its own buffer without further copies), and the parsed requests
queue in the connection's inbox.

A connection takes one request at a time from its inbox (Kafka's mute/unmute): it hands it to the
dispatcher, writes the response, then takes the next, so responses leave in request order. Handlers are
synchronous and never block: a request that must wait (a long-poll fetch, acks=all, a group join) returns a
future completed later from the purgatory or the coordinator, and the connection resumes when it resolves.

Why there is no queue of requests and no pool of handler tasks between the connections and the handlers,
as in Kafka's request channel and I/O threads: on one event loop they add two loop wake-ups per request
and no parallelism. Measured, they were most of the broker's latency at low rates. Their job, bounding
the work the broker accepts, is done here by back-pressure instead:
  * a connection stops reading while its inbox holds `max_inbox` requests (a client pipelining faster than
    it is served) or while the socket's send buffer is full (`pause_writing`: a client slow to read);
  * at most `max_parked` requests wait on futures at once (`queued.max.requests`); beyond that, connections
    keep their next request in the inbox and stop reading until a parked one completes.

Produce requests at v3-v13 may skip the codec, the per-request context and the dispatcher: the connection
hands them as `ProduceFrame`s, with its `ConnectionContext` (listener, security protocol, principal), to
`serve_produce_frame` (the broker's produce fast path), which answers with the packed response frame, or
a future of it, or declines (DECLINED), and then the frame is decoded and dispatched as any other.
Measured: ~36 -> ~27 us per single-partition request in process. What a handler may answer is described
once, in broker/context.py; `_respond` is the one place that writes each kind.

The walk of a request (`pump`): admission, then the fork, then one kind of result
---------------------------------------------------------------------------------
Every check that is not about one API is paid once, before the produce fork, and every rule the fast path
declines by is the general path's own predicate. Before (until issue 25), a request walked:

    inbox -> ProduceFrame?  yes: SASL session live? (copy 1) -> fast path, which restated as "decline"
                                 conditions the quota rule (image has client quotas), the authorization
                                 (its own WRITE checks, any transactional batch declined with an
                                 authorizer), the transactional-id and one-producer rules and the
                                 verification rule (a copy of the log's "transaction open here") ->
                                 served (bytes or future) or None (declined: decode the frame)
          -> None: ApiVersionsUnsupported? -> SaslHandshake/SaslAuthenticate? -> SASL session live?
                   (copy 2, run again for a declined produce) -> RequestContext -> dispatch
          -> the result: None meant "declined" on one side of the fork and "no response" on the other

After:

    inbox -> ApiVersionsUnsupported? (answered: needs no session)
          -> admission, once: not throttled (`muted`: nothing is taken from the inbox meanwhile) and, on
             a SASL listener, `_session_admits` (SaslHandshake/SaslAuthenticate re-authenticate here;
             anything else needs `Authenticator.session_admits`, else the connection closes); past it,
             the principal on the connection's context (the session's; on SSL the certificate's, set when
             the connection was made) is the one both paths authorize
          -> the fork: ProduceFrame -> fast path; it declines by the shared predicates
             (handlers/produce.py: `_partition_error`, `write_refusal`, `_one_producer`,
             `_in_open_transaction` = the log's `in_open_transaction`, and `ClientQuotas.metered`),
             DECLINED -> decode the frame; everything not served -> RequestContext -> dispatch
          -> one result type from either side (broker.context's Reply: a response, a Packed frame, None for
             no response, or a future of one), parked, written or throttled by the same lines.

Both sides of the fork go through `Broker._handled` (metrics, timers, futures), so what the network layer
gets back does not depend on which side served.

Responses are written when the connection has served what it can for now (the end of `pump`): the bytes
of every response made in that pass go to the transport in one call, so a client pipelining requests gets
one send() for the 3-4 requests that typically arrive together instead of one each. `FileRegion`s over
SMALL_REGION_BYTES go out with `os.sendfile` straight from the segment file to the socket when the
transport's buffer is empty, else by copying; smaller ones (a tailing consumer's fetch) are read and leave
with the response's other bytes, in one send() and one segment. On a TLS connection regions are always
copied: the socket carries TLS records, and sendfile would put plaintext in them.

Security (broker/security.py, broker/authenticator.py): a listener's `ListenerSecurity` gives its TLS
context (asyncio does the handshake before `connection_made`; an SSL listener's principal is then the
client certificate's) and, on SASL listeners, an `Authenticator` per connection. Until it authenticates, a
SASL connection's frames are looked at one by one before anything is decoded (`_before_authentication`):
at most sasl.server.max.receive.size each, only ApiVersions (dispatched), SaslHandshake and
SaslAuthenticate (answered here), or raw tokens after a v0 handshake; anything else closes the connection.
A failed authentication is answered after connection.failed.authentication.delay.ms and the connection
closed. Afterwards SaslHandshake/SaslAuthenticate re-authenticate (KIP-368), and a session past its
lifetime is closed at its next other request.

Connection creation rates (KIP-612, metadata/quota.py's ConnectionCreationRates decides): a connection
over the broker's or its listener's rate is held back before it is served, as Kafka's acceptor waits
before accepting: asyncio has already accepted the socket, so it is not read until the wait is over, and
the next connections on that listener wait behind it (`NetworkServer.admit`); the client sees a
connection that answers late, as it does from Kafka (its handshake completed in the backlog). A
connection from an address over its `connection_creation_rate` quota is not counted and is closed after
the throttle time, unread, as Kafka closes it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import time
from collections import deque
from typing import Any, Callable, Iterable

import structlog

from odradek.protocol.codec import FileRegion
from odradek.protocol.connection import ApiVersionsUnsupported, FrameBuffers, ServerConnection
from odradek.protocol.errors import ProtocolError, UnsupportedApiError
from odradek.protocol.fast_produce import ProduceFrame
from odradek.protocol.messages import SaslAuthenticateResponse, SaslHandshakeResponse
from odradek.metadata.quota import ConnectionCreationRates
from odradek.storage.segment import read_region

from .authenticator import Authenticator, SaslState
from .context import DECLINED, ConnectionContext, EagerAnswer, Packed, Reply, RequestContext, SecurityProtocol
from .security import ListenerSecurity

log = structlog.get_logger("odradek.network")

# File regions up to this size are read and sent with the response's other bytes, in the same write:
# sendfile's gain (no copy through user space) is a few microseconds at this size, and sending the region
# on its own costs a send() and a TCP segment of its own, which a tailing consumer waits for.
SMALL_REGION_BYTES = 16 * 1024

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
# What a SASL listener answers before authentication (Kafka's SaslServerAuthenticator); anything else
# closes the connection.
_BEFORE_AUTHENTICATION = frozenset((API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE))
_SIZE = struct.Struct(">i")
CLOSE_AFTER_FAILED_ANSWER_S = 0.2


class KafkaProtocol(asyncio.BufferedProtocol):
    def __init__(self, server: "NetworkServer", listener: str, security_protocol: SecurityProtocol, scope: str = "broker",
                 security: ListenerSecurity | None = None):
        self.server = server
        self.listener = listener
        self.security_protocol = security_protocol
        self.scope = scope
        self.advertised_versions = server.scopes[scope][1]
        self.conn = ServerConnection(
            max_frame_bytes=server.max_frame_bytes, supported=server.scopes[scope][0],
            fast_produce=server.serve_produce_frame is not None and scope == "broker",
            frame_buffers=server.frame_buffers,
        )
        self.security = security
        # Zero-copy cannot cross TLS: on a TLS connection file regions are always read and written.
        self.tls = security is not None and security.tls
        # A SASL listener: nothing but ApiVersions and SASL before authentication, in frames of at most
        # sasl.server.max.receive.size.
        self.auth: Authenticator | None = None
        if security is not None and security.sasl:
            self.auth = Authenticator(security)
            self.conn.max_frame_bytes = min(security.max_receive_bytes, server.max_frame_bytes)
        self.failing = False  # a failed authentication is being answered (after the delay); then close
        self.transport: asyncio.Transport | None = None
        self.inbox: deque = deque()
        self.reading_paused = False
        self.writing_paused = False
        self.closed = False
        self.connection_id = ""
        self.client_host = ""
        self.context: ConnectionContext | None = None  # set when the connection is made
        self.last_active = time.monotonic()
        self.in_flight = False  # a request is being served (its response not yet written)
        self.muted = False  # throttled by a client quota (KIP-219): no request is served until the timer fires
        self.admitting = False  # held back by a connection creation rate: not read until the wait is over
        self._pending: list = []  # response bytes not yet handed to the transport (see _flush)

    # -- asyncio.BufferedProtocol --

    def connection_made(self, transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername") or ("?", 0)
        sock = transport.get_extra_info("sockname") or ("?", 0)
        self.client_host = str(peer[0])
        self.connection_id = f"{sock[0]}:{sock[1]}-{peer[0]}:{peer[1]}"
        self.context = ConnectionContext(
            self.connection_id, self.client_host, self.listener, self.security_protocol, scope=self.scope
        )
        wait_ms, close_after_ms = self.server.admit(self.listener, self.client_host)
        if close_after_ms:
            log.info("closing a connection over its address's connection creation rate", client=self.connection_id,
                     listener=self.listener, throttle_ms=wait_ms + close_after_ms)
            self.closed = True
            transport.pause_reading()
            asyncio.get_running_loop().call_later((wait_ms + close_after_ms) / 1000, transport.close)
            return
        if self.server.draining or not self.server.register(self):
            log.warning("connection refused", client=self.connection_id, draining=self.server.draining)
            transport.abort()
            self.closed = True
            return
        log.debug("connection accepted", client=self.connection_id, listener=self.listener,
                  remote_address=f"{peer[0]}:{peer[1]}")
        if wait_ms:
            self.admitting = True
            self.reading_paused = True
            transport.pause_reading()
            asyncio.get_running_loop().call_later(wait_ms / 1000, self._admitted)
        if self.tls and self.auth is None:  # SSL: the principal is the client certificate's (or ANONYMOUS)
            ssl_object = transport.get_extra_info("ssl_object")
            try:
                self.context.principal = self.security.principal_mapper.principal(ssl_object.getpeercert() if ssl_object else None)
            except ValueError as e:
                log.warning("client certificate refused", client=self.connection_id, error=str(e))
                self.close()

    def get_buffer(self, sizehint: int) -> memoryview:
        # The socket reads straight into the framer's buffer (see protocol.connection._Framer).
        return self.conn.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        if self.server.metrics is not None:
            self.server.metrics.add_bytes_in(nbytes)
        if self.failing:  # answering a failed authentication: what else arrives is read and dropped
            return
        if self.auth is not None and not self.auth.authenticated:
            self._before_authentication(nbytes)
            return
        try:
            events = self.conn.buffer_updated(nbytes)
        except ProtocolError as e:
            self._protocol_error(e)
            return
        if events:
            self.inbox.extend(events)
            self.pump()

    def eof_received(self):
        return False

    def connection_lost(self, exc) -> None:
        context = self.context
        log.debug("connection closed", client=self.connection_id, listener=self.listener,
                  principal=str(context.principal) if context is not None else None,
                  error=str(exc) if exc is not None else None)
        self.closed = True
        self.inbox.clear()
        self.server.unregister(self)
        if self.context is not None:
            self.context.mark_closed()

    def pause_writing(self) -> None:
        self.writing_paused = True

    def resume_writing(self) -> None:
        self.writing_paused = False
        self.pump()

    # -- serving --

    def pump(self) -> None:
        """Serve queued requests in order until one has to wait, the inbox is empty or writing is paused."""
        server = self.server
        while self.inbox and not self.in_flight and not self.closed and not self.failing and not self.muted:
            if server.draining:  # shutting down: no new requests
                self.close()
                return
            if self.writing_paused or server.parked >= server.max_parked:
                if not self.writing_paused:
                    server.waiting.add(self)
                break
            event = self.inbox.popleft()
            kind = type(event)
            if kind is ApiVersionsUnsupported:  # (ApiVersions needs no session: answered before admission)
                self._write(self.conn.send_api_versions_unsupported(event.header, self.advertised_versions))
                continue
            # Admission, once per request, before the fork: the connection is not throttled (`muted`, in the
            # loop's condition) and on a SASL listener its session admits the request (which also makes the
            # principal on `self.context` the session's).
            if self.auth is not None and not self._session_admits(event, kind):
                if self.closed or self.failing:
                    return
                continue  # a SaslHandshake/SaslAuthenticate, answered
            # The fork: the produce fast path serves the frame or declines it (nothing appended), and then
            # the frame is decoded and goes the general way as any other request.
            ctx: RequestContext | None = None  # stays None for a request the produce fast path serves
            result = DECLINED
            if kind is ProduceFrame:
                try:
                    result = server.serve_produce_frame(event, self.context)
                except Exception:
                    self.close()
                    return
                if result is DECLINED:
                    try:
                        event = self.conn.decode(event.frame)
                    except ProtocolError as e:
                        self._protocol_error(e)
                        return
            if result is DECLINED:
                ctx = RequestContext(event.header, event.request, self.context, time.monotonic_ns(), event.frame_size)
                try:
                    result = server.dispatch(ctx)
                except Exception:  # a bug in a handler must not take the broker down: drop this connection
                    self.close()
                    return
            # After the fork, one kind of result from either path (broker.context's Reply): a response, a
            # packed frame, None (no response) or a future of one of them.
            if isinstance(result, asyncio.Future):
                if not result.done():
                    self.in_flight = True
                    server.parked += 1
                    if type(result) is EagerAnswer:
                        result.on_result = lambda future, ctx=ctx: self._answer_now(ctx, future)
                    result.add_done_callback(lambda future, ctx=ctx: self._resume(ctx, future))
                    break
                result = self._result_of(result)
            if result is not None:
                self._respond(ctx, result)
            elif self.context.throttle_ms:  # acks=0 over a quota: no response, the wait still applies
                self._throttle(None)
        # The responses of every request served above leave in one write: a client with several requests
        # in flight (librdkafka keeps up to 5) often has 3-4 of them arrive in one socket read.
        self._flush()
        self._update_reading()

    # -- SASL

    def _session_admits(self, event, kind) -> bool:
        """Admission on a SASL listener (the one session check, for both sides of the fork): a request other
        than SaslHandshake/SaslAuthenticate is served only in a live session; otherwise the connection
        closes. SaslHandshake and SaslAuthenticate re-authenticate (KIP-368) and are answered here. False:
        the request is not served (answered here, or the connection closed or failing)."""
        if kind is not ProduceFrame:
            api_key = event.header.api_key
            if api_key == SASL_HANDSHAKE or api_key == SASL_AUTHENTICATE:
                self._sasl_request(event)
                return False
        if self.auth.session_admits(_now_ms()):
            return True
        log.info("closing connection: SASL session expired or re-authentication unfinished",
                 client=self.connection_id, principal=str(self.context.principal))
        self.close()
        return False

    def _before_authentication(self, nbytes: int) -> None:
        """Frames on a SASL listener before authentication: each is looked at before it is decoded, and only
        ApiVersions, SaslHandshake and SaslAuthenticate (or, after a v0 handshake, raw tokens) are served."""
        if self.failing or self.closed:
            return
        try:
            frames = self.conn.frames_updated(nbytes)
        except ProtocolError as e:  # a frame over sasl.server.max.receive.size: refused before allocation
            self._protocol_error(e)
            return
        auth = self.auth
        for i, frame in enumerate(frames):
            if self.closed or self.failing:
                return
            if auth.authenticated:  # the client sent requests right behind its last token
                try:
                    self.inbox.extend(self.conn.parse(f) for f in frames[i:])
                except ProtocolError as e:
                    self._protocol_error(e)
                    return
                break
            if auth.state is SaslState.RAW:
                step = auth.authenticate(bytes(frame), _now_ms())
                if step.error_code:
                    self._fail_authentication([], step.error_message)
                    return
                self._write([_SIZE.pack(len(step.token)), step.token])
                if step.done:
                    self._authenticated()
                continue
            api_key = _SIZE.unpack_from(frame, 0)[0] >> 16 if len(frame) >= 4 else -1
            if api_key not in _BEFORE_AUTHENTICATION:
                log.info("closing connection: request before SASL authentication", client=self.connection_id,
                         api_key=api_key, state=auth.state.value)
                self.server.metrics_protocol_error()
                self.close()
                return
            try:
                event = self.conn.parse(frame)
            except ProtocolError as e:
                self._protocol_error(e)
                return
            if isinstance(event, ApiVersionsUnsupported):
                self._write(self.conn.send_api_versions_unsupported(event.header, self.advertised_versions))
            elif api_key == API_VERSIONS:
                if auth.state is not SaslState.HANDSHAKE:
                    self.close()
                    return
                ctx = RequestContext(event.header, event.request, self.context, time.monotonic_ns(), event.frame_size)
                try:
                    result = self.server.dispatch(ctx)
                except Exception:
                    self.close()
                    return
                self._respond(ctx, result)
            else:
                self._sasl_request(event)
        self._flush()
        if self.inbox:
            self.pump()

    def _sasl_request(self, event) -> None:
        """SaslHandshake or SaslAuthenticate, before authentication or to re-authenticate."""
        auth, header, request = self.auth, event.header, event.request
        if header.api_key == SASL_HANDSHAKE:
            error, mechanisms = auth.handshake(request.mechanism, header.api_version)
            chunks = self.conn.send_response(header, SaslHandshakeResponse(error_code=error, mechanisms=mechanisms))
            if error:
                self._fail_authentication(chunks, f"SaslHandshake failed with error {error} (mechanism {request.mechanism!r})")
            else:
                self._write(chunks)
            return
        step = auth.authenticate(bytes(request.auth_bytes), _now_ms())
        response = SaslAuthenticateResponse(
            error_code=step.error_code, error_message=step.error_message, auth_bytes=step.token,
            session_lifetime_ms=step.session_lifetime_ms,
        )
        chunks = self.conn.send_response(header, response)
        if step.error_code:
            self._fail_authentication(chunks, step.error_message)
            return
        self._write(chunks)
        if step.done:
            self._authenticated()

    def _authenticated(self) -> None:
        first = self.context.principal != self.auth.principal
        self.context.principal = self.auth.principal
        self.conn.max_frame_bytes = self.server.max_frame_bytes
        log.info("authenticated" if first else "re-authenticated", client=self.connection_id,
                 principal=str(self.auth.principal), mechanism=self.auth.mechanism, listener=self.listener)

    def _fail_authentication(self, chunks: list, reason: str | None) -> None:
        """Answer a failed authentication after connection.failed.authentication.delay.ms, then close: a
        client guessing passwords gets one guess per delay per connection. Bytes arriving meanwhile are
        read and dropped rather than left unread: closing a socket with unread input sends a reset, which
        can destroy the answer before the client reads it."""
        # Kafka's WARN "Failed authentication with /address": the reason is the SASL server's message, which
        # names no secret (never the token or the password); the mechanism says which road was tried, and a
        # re-authentication names the principal of the session it failed to renew.
        principal = str(self.context.principal)
        log.warning("authentication failed", client=self.connection_id, listener=self.listener,
                    remote_address=self.client_host, mechanism=self.auth.mechanism if self.auth is not None else None,
                    principal=None if principal == "User:ANONYMOUS" else principal, reason=reason)
        self.failing = True
        self.inbox.clear()
        if self.transport is not None and self.reading_paused:
            self.reading_paused = False
            self.transport.resume_reading()
        self._flush()

        def answer() -> None:
            if not self.closed:
                self._write(chunks)
                self._flush()
                if delay_s <= 0:
                    self.close()
                else:  # kafka-python loses an answer that arrives with the end of the stream: end it later
                    asyncio.get_running_loop().call_later(CLOSE_AFTER_FAILED_ANSWER_S, self.close)

        delay_s = self.security.failed_authentication_delay_ms / 1000
        if delay_s <= 0:
            answer()
        else:
            asyncio.get_running_loop().call_later(delay_s, answer)

    def _resume(self, ctx: RequestContext | None, future: asyncio.Future) -> None:
        self.server.parked -= 1
        self.in_flight = False
        result = None if getattr(future, "answered", False) else self._result_of(future)  # (EagerAnswer: written)
        if result is not None and not self.closed:
            self._respond(ctx, result)
        self.last_active = time.monotonic()
        self.server.wake_waiting()
        if self.server.draining:
            self.close()
        else:
            self.pump()

    def _answer_now(self, ctx: RequestContext | None, future: asyncio.Future) -> None:
        """An EagerAnswer was set: write it now, inside whatever completed it. The rest of `_resume` (the
        connection's next request) waits for the future's done callback, a loop turn later (see EagerAnswer)."""
        result = self._result_of(future)
        if result is not None and not self.closed:
            self._respond(ctx, result)
            self._flush()

    def _result_of(self, future: asyncio.Future):
        if future.cancelled():
            self.close()
            return None
        error = future.exception()
        if error is not None:
            log.error("request failed", client=self.connection_id, error=repr(error))
            self.close()
            return None
        return future.result()

    def _respond(self, ctx: RequestContext | None, response) -> None:
        """Write a handler's answer (broker.context): a frame it packed itself, or a message to encode."""
        if self.context.throttle_ms:
            self._throttle(response)
        if type(response) is Packed:  # the fast produce path (ctx is None) and the Fetch handler
            self._write(response.chunks)
            return
        try:
            chunks = self.conn.send_response(ctx.header, response)
        except ProtocolError:
            log.exception("cannot encode response", client=self.connection_id, api_key=ctx.api_key)
            self.close()
            return
        self._write(chunks)

    def _throttle(self, response) -> None:
        """A client quota was exceeded (broker/quotas.py): the response says for how long, and the connection
        serves nothing more until then (KIP-219; a packed response says 0: the wait alone holds the client back)."""
        throttle_ms, self.context.throttle_ms = self.context.throttle_ms, 0
        if type(response) is not Packed and hasattr(response, "throttle_time_ms"):
            response.throttle_time_ms = max(response.throttle_time_ms or 0, throttle_ms)
        self.muted = True
        asyncio.get_running_loop().call_later(throttle_ms / 1000, self._unmute)

    def _admitted(self) -> None:
        """The connection creation rate's wait is over: the connection is read from now on."""
        self.admitting = False
        if not self.closed:
            self._update_reading()

    def _unmute(self) -> None:
        self.muted = False
        if not self.closed:
            self.pump()

    def _update_reading(self) -> None:
        if self.closed or self.transport is None or self.failing or self.admitting:
            return
        full = len(self.inbox) >= self.server.max_inbox
        if full and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()
        elif not full and self.reading_paused:
            self.reading_paused = False
            self.transport.resume_reading()

    def _protocol_error(self, e: Exception) -> None:
        if isinstance(e, UnsupportedApiError) and self.server.first_unserved(e.client_id, e.api_key):
            # A client that checked ApiVersions and still asks: say which API, once per client id.
            log.warning("client asked for an API Odradek does not serve; closing its connection", api=e.api_name,
                        api_key=e.api_key, api_version=e.api_version, client_id=e.client_id, client=self.connection_id)
        log.info("closing connection after a protocol error", client=self.connection_id, error=str(e))
        self.server.metrics_protocol_error()
        self.close()

    def close(self) -> None:
        if not self.closed and self.transport is not None:
            self._flush()  # responses already made go out before the close
            self.closed = True
            self.inbox.clear()
            self.transport.close()

    # -- writing --

    def _write(self, chunks: list) -> None:
        """Queue a response's bytes; `_flush` writes everything queued with one call. File regions go out
        at once (after the bytes queued before them), by sendfile when the socket can take them."""
        if self.closed:
            return
        pending = self._pending
        sent = 0
        for chunk in chunks:
            if isinstance(chunk, FileRegion):
                sent += chunk.length
                if chunk.length <= SMALL_REGION_BYTES:
                    pending.append(read_region(chunk, pad=True))
                    continue
                self._flush()
                self._send_region(chunk)
            else:
                sent += len(chunk)
                pending.append(chunk)
        if self.server.metrics is not None:
            self.server.metrics.add_bytes_out(sent)

    def _flush(self) -> None:
        pending = self._pending
        if not pending or self.closed:
            pending.clear()
            return
        if len(pending) == 1:
            self.transport.write(pending[0])
        else:
            self.transport.writelines(pending)
        pending.clear()

    def _send_region(self, region: FileRegion) -> None:
        transport = self.transport
        position, remaining = region.position, region.length
        sock = transport.get_extra_info("socket")
        if sock is not None and not self.tls and transport.get_write_buffer_size() == 0 and self.server.use_sendfile:
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
            # Socket buffer full, sendfile unavailable, or TLS (the socket carries TLS records, and sendfile
            # would put plaintext in it): copy the rest through the transport.
            transport.write(read_region(FileRegion(region.fd, position, remaining), pad=True))


class NetworkServer:
    """Owns the listeners and the connections, and bounds the requests waiting on futures."""

    def __init__(
        self,
        *,
        dispatch: Callable[[RequestContext], Reply],
        serve_produce_frame: Callable[[ProduceFrame, ConnectionContext], Reply] | None = None,  # or DECLINED
        accepted_versions: dict[int, tuple[int, int]],
        advertised_versions: dict[int, tuple[int, int]],
        max_frame_bytes: int,
        max_connections: int,
        queued_max_requests: int,
        max_connections_per_ip: int = 2**31 - 1,
        max_connections_per_ip_overrides: dict[str, int] | None = None,
        listener_max_connections: dict[str, int] | None = None,
        protected_listeners: frozenset[str] = frozenset(),
        connections_max_idle_ms: int,
        use_sendfile: bool = True,
        on_protocol_error: Callable[[], None] | None = None,
        metrics=None,
        connection_rates: ConnectionCreationRates | None = None,
        client_quotas: Callable[[], Any] | None = None,
    ):
        self.dispatch = dispatch
        # The produce fast path, or None: without it every request is decoded by the codec and dispatched.
        self.serve_produce_frame = serve_produce_frame
        self.accepted_versions = accepted_versions
        self.advertised_versions = advertised_versions
        # What each kind of listener serves: (accepted, advertised) versions by scope (broker.handlers).
        self.scopes: dict[str, tuple[dict, dict]] = {"broker": (accepted_versions, advertised_versions)}
        self.max_frame_bytes = max_frame_bytes
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        # max.connections.per.ip.overrides (addresses resolved) and listener.name.<l>.max.connections (KIP-402).
        self.max_connections_per_ip_overrides = dict(max_connections_per_ip_overrides or {})
        self.listener_max_connections = dict(listener_max_connections or {})
        # The inter-broker and controller listeners: never refused for `max.connections` (KIP-402), or clients
        # filling the broker would stop replication and the quorum; their own listener limit still applies.
        self.protected_listeners = protected_listeners
        self.connections_per_ip: dict[str, int] = {}
        self.connections_per_listener: dict[str, int] = {}
        # KIP-612: the rates of new connections, and the client quotas they read the per-address rates from.
        self.connection_rates = connection_rates
        self.client_quotas = client_quotas
        self._accept_blocked_until_ms: dict[str, int] = {}
        self.max_inbox = 16
        # Large request frames' buffers, lent again once nobody holds them (protocol.connection.FrameBuffers):
        # shared by every connection, so what it keeps is bounded per broker, not per connection.
        self.frame_buffers = FrameBuffers()
        self.max_parked = queued_max_requests
        self.parked = 0
        self.waiting: set[KafkaProtocol] = set()
        self.connections_max_idle_ms = connections_max_idle_ms
        self.use_sendfile = use_sendfile
        self.metrics = metrics
        self.connections: set[KafkaProtocol] = set()
        self.servers: list[asyncio.base_events.Server] = []
        self.server_names: list[str] = []  # the listener name of each of `servers`
        self.tasks: list[asyncio.Task] = []
        self._on_protocol_error = on_protocol_error
        self._unserved_seen: set[tuple[str | None, int]] = set()
        self.draining = False

    def first_unserved(self, client_id: str | None, api_key: int) -> bool:
        """True the first time this client id asks for this unserved API (bounded: forgets at 10,000)."""
        key = (client_id, api_key)
        if key in self._unserved_seen:
            return False
        if len(self._unserved_seen) >= 10_000:
            self._unserved_seen.clear()
        self._unserved_seen.add(key)
        return True

    def metrics_protocol_error(self) -> None:
        if self._on_protocol_error:
            self._on_protocol_error()

    def admit(self, listener: str, client_host: str) -> tuple[int, int]:
        """(how long to hold a new connection back before serving it, and 0; or how long the wait would
        be, and after how much longer to close it instead) by the connection creation rates. A listener
        whose accepting is held back holds back every connection behind the one waiting, as Kafka's
        acceptor does: each is counted at the time it would be accepted."""
        rates = self.connection_rates
        if rates is None:
            return 0, 0
        now_ms = _now_ms()
        at_ms = max(now_ms, self._accept_blocked_until_ms.get(listener, 0))
        at_ms += rates.accept(listener, at_ms)
        if at_ms > now_ms:
            self._accept_blocked_until_ms[listener] = at_ms
        quotas = self.client_quotas() if self.client_quotas is not None else None
        close_after_ms = rates.ip_throttle(quotas, listener, client_host, at_ms) if quotas else 0
        return at_ms - now_ms, close_after_ms

    def register(self, conn: KafkaProtocol) -> bool:
        if len(self.connections) >= self.max_connections and conn.listener not in self.protected_listeners:
            return False
        on_listener = self.connections_per_listener.get(conn.listener, 0)
        if on_listener >= self.listener_max_connections.get(conn.listener, self.max_connections):
            return False
        count = self.connections_per_ip.get(conn.client_host, 0)
        if count >= self.max_connections_per_ip_overrides.get(conn.client_host, self.max_connections_per_ip):
            return False
        self.connections_per_ip[conn.client_host] = count + 1
        self.connections_per_listener[conn.listener] = on_listener + 1
        self.connections.add(conn)
        if self.metrics is not None:
            self.metrics.connection_opened()
        return True

    def unregister(self, conn: KafkaProtocol) -> None:
        self.waiting.discard(conn)
        if conn in self.connections:
            self.connections.discard(conn)
            count = self.connections_per_ip.get(conn.client_host, 1) - 1
            if count > 0:
                self.connections_per_ip[conn.client_host] = count
            else:
                self.connections_per_ip.pop(conn.client_host, None)
            on_listener = self.connections_per_listener.get(conn.listener, 1) - 1
            if on_listener > 0:
                self.connections_per_listener[conn.listener] = on_listener
            else:
                self.connections_per_listener.pop(conn.listener, None)
            if self.metrics is not None:
                self.metrics.connection_closed()

    def wake_waiting(self) -> None:
        """A parked request completed: connections held back by `max_parked` may go on."""
        while self.waiting and self.parked < self.max_parked:
            self.waiting.pop().pump()

    def add_scope(self, scope: str, accepted: dict[int, tuple[int, int]], advertised: dict[int, tuple[int, int]]) -> None:
        self.scopes[scope] = (accepted, advertised)

    async def listen(
        self, name: str, host: str, port: int, security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT,
        scope: str = "broker", security: ListenerSecurity | None = None,
    ) -> tuple[str, int]:
        if security_protocol is not SecurityProtocol.PLAINTEXT and (security is None or security.protocol is not security_protocol):
            # A TLS listener served as plaintext, or a SASL listener without authentication, must never happen.
            raise ValueError(f"listener {name}: security protocol {security_protocol.value} needs its ListenerSecurity")
        loop = asyncio.get_running_loop()
        ssl_context = security.ssl_context if security is not None else None
        server = await loop.create_server(
            lambda: KafkaProtocol(self, name, security_protocol, scope, security), host, port, reuse_address=True,
            backlog=512, start_serving=False, ssl=ssl_context, ssl_handshake_timeout=30.0 if ssl_context else None,
        )
        # Listening, not yet accepting: a connection made before `start_serving` waits in the backlog (as with
        # Kafka's acceptors before request processing is enabled) instead of being refused.
        for transport_socket in server.sockets:  # the loop's wrappers have no listen(): the same fd has
            sock = socket.socket(transport_socket.family, transport_socket.type, fileno=transport_socket.fileno())
            sock.listen(512)
            sock.detach()  # the fd stays the server's
        self.servers.append(server)
        self.server_names.append(name)
        sockname = server.sockets[0].getsockname()
        return sockname[0], sockname[1]

    async def start_serving(self, names: Iterable[str] | None = None) -> None:
        """Accept connections on the bound listeners named (all by default; bound with `listen`, not serving
        until now). Serving one already served changes nothing."""
        for name, server in zip(self.server_names, self.servers):
            if names is None or name in names:
                await server.start_serving()

    def start(self) -> None:
        self.tasks.append(asyncio.get_running_loop().create_task(self._idle_reaper()))

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
        """No new connections, no new requests: idle connections close now, busy ones after their response."""
        self.draining = True
        for server in self.servers:
            server.close()
        for conn in list(self.connections):
            if not conn.in_flight:
                conn.close()

    async def drain(self, timeout_s: float) -> None:
        """Wait (at most `timeout_s`) for every connection to finish the request it is serving, then close."""
        deadline = time.monotonic() + timeout_s
        while any(c.in_flight for c in self.connections) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self.connections):
            conn.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.tasks.clear()


def _now_ms() -> int:
    return time.monotonic_ns() // 1_000_000
