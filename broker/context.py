"""Who is asking, on which listener, and what a handler may answer with.

A `ConnectionContext` is made once per accepted connection: the listener it arrived on, that listener's
security protocol, the client's address, and the principal. Every request on the connection shares it,
the produce fast path included, so per-request work is one reference. The principal is `User:ANONYMOUS`
on PLAINTEXT listeners (as Kafka's), the client certificate's mapped subject on SSL listeners (or
ANONYMOUS without one), and the authenticated user on SASL listeners, set by the network layer
(broker/network.py) once SASL completes; requests on a SASL listener never reach a handler before that.

A `RequestContext` adds the request itself: its header, decoded body, size and arrival time.

A handler answers with one of three things, and the network pump decides how to write it in one place
(`KafkaProtocol._respond`):
  * a message object, encoded by the codec at the request's version;
  * `Packed`, a whole response frame already packed by its handler (fast produce, fast fetch): bytes and
    file regions written as they are;
  * None: no response at all (acks=0 produce).
Any of them may come later, as an `asyncio.Future` (a long poll, acks=all, a group join, a metadata
change waiting for its commit); `broker.server.Broker.dispatch` adapts coordinators' Deferreds and
handlers' coroutines to futures, so the pump sees only futures. That is the one result type both sides of
the produce fork hand back (`Reply`, broker/network.py's "walk of a request").

The produce fast path may also answer `DECLINED`: it did not serve the request (nothing was appended), and
the general path decodes and dispatches it. DECLINED is never a reply: it exists so that None keeps its one
meaning, "no response".
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from odradek.protocol.headers import RequestHeader


class SecurityProtocol(str, Enum):
    """Kafka's security protocols (`listener.security.protocol.map`), by their config names."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def id(self) -> int:
        """The id Kafka registers endpoints with (SecurityProtocol.id: 0, 1, 2, 3)."""
        return _PROTOCOL_IDS[self]

    @property
    def served(self) -> bool:
        """Every protocol is served (broker/security.py, broker/authenticator.py)."""
        return True


_PROTOCOL_IDS = {
    SecurityProtocol.PLAINTEXT: 0, SecurityProtocol.SSL: 1, SecurityProtocol.SASL_PLAINTEXT: 2, SecurityProtocol.SASL_SSL: 3,
}


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """`User:alice` as Kafka writes principals (type, then name)."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")


@dataclass(slots=True)
class ConnectionContext:
    connection_id: str
    client_host: str
    listener: str
    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    principal: KafkaPrincipal = ANONYMOUS
    scope: str = "broker"  # "controller" on a controller listener (broker.handlers: BROKER, CONTROLLER)
    throttle_ms: int = 0  # set by a quota (broker/quotas.py): the network stops serving this long, then clears it
    # Called once when the connection closes (broker/network.py), e.g. the active controller watching the
    # connection a broker's heartbeats arrive on (broker/quorum.py); None until someone asks.
    on_close: list[Callable[[], None]] | None = None
    closed: bool = False

    def when_closed(self, callback: Callable[[], None]) -> None:
        """Call `callback` when this connection closes (at once if it has: `closed`)."""
        if self.closed:
            callback()
            return
        if self.on_close is None:
            self.on_close = []
        self.on_close.append(callback)

    def mark_closed(self) -> None:
        """The network layer saw the connection close: run the callbacks, once."""
        self.closed = True
        callbacks, self.on_close = self.on_close, None
        for callback in callbacks or ():
            callback()


@dataclass(slots=True)
class RequestContext:
    header: RequestHeader
    request: Any
    connection: ConnectionContext
    received_ns: int
    frame_size: int

    @property
    def api_key(self) -> int:
        return self.header.api_key

    @property
    def api_version(self) -> int:
        return self.header.api_version

    @property
    def client_id(self) -> str | None:
        return self.header.client_id

    @property
    def listener(self) -> str:
        return self.connection.listener

    @property
    def security_protocol(self) -> SecurityProtocol:
        return self.connection.security_protocol

    @property
    def principal(self) -> KafkaPrincipal:
        return self.connection.principal

    @property
    def client_host(self) -> str:
        return self.connection.client_host

    @property
    def connection_id(self) -> str:
        return self.connection.connection_id


class Packed:
    """A response frame packed by its handler: `bytes`-like chunks and `FileRegion`s, written as they are.
    `error_codes` are the non-zero codes the frame carries (per partition), noted by the handler as it packed
    them, for the request error counts (the frame itself is never decoded again)."""

    __slots__ = ("chunks", "error_codes")

    def __init__(self, chunks: list, error_codes: list[int] | None = None) -> None:
        self.chunks = chunks
        self.error_codes = error_codes


class EagerAnswer(asyncio.Future):
    """A future answer the network layer writes the moment it is set, not a loop turn later: an acks=all
    produce completed by a follower's fetch (the high watermark passing it) is written inside that fetch's
    handling, before the rest of it (reading, parking and answering the follower, metrics), which on a cold
    core is most of what stood between the last replica's fetch and the acknowledgement. asyncio runs a
    future's callbacks with call_soon; `on_result`, set by the pump (`KafkaProtocol._answer_now`), runs at
    `set_result` itself and only writes: what follows the write (serving the connection's next request)
    still waits for a loop turn, so no request is ever served inside another's handler."""

    on_result: Callable[[asyncio.Future], None] | None = None
    answered = False  # on_result ran (a cancelled or failed one goes the usual way, by its done callback)

    def set_result(self, result) -> None:
        super().set_result(result)
        callback, self.on_result = self.on_result, None
        if callback is not None:
            self.answered = True
            callback(self)


# What a handler hands back to the network layer, on either side of the produce fork (see the module doc).
Reply = Any  # a response message | Packed | None | asyncio.Future of one of them


class _Declined:
    """The produce fast path's "not served": the general path takes the request (one instance, DECLINED)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DECLINED"


DECLINED = _Declined()
