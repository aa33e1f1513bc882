"""Sans-I/O connections: bytes in, events out; messages in, bytes (or file regions) out.

    frame := size int32 (bytes after itself) | header | body

`ServerConnection` is the broker's side. `receive_data(data)` returns complete `RequestReceived` events;
the 4-byte size is checked against the frame limit *before* any of the frame is buffered, so a hostile
size field costs nothing. Anything malformed raises `RemoteProtocolError`: the caller closes the
connection (Kafka does the same for bad frames, unknown keys and versions). Bytes left after a request body are ignored, as Kafka ignores them (librdkafka sends some). One exception, from KIP-511:
an ApiVersions request at a version we do not know yields `ApiVersionsUnsupported`, to be answered with a
v0 body carrying UNSUPPORTED_VERSION and our table.

`send_response(header, response)` returns chunks: bytes, and `FileRegion`s where record data should go out
by sendfile.

`ClientConnection` is the client's side: it numbers requests, remembers the api key and version of each
so that responses can be decoded, and insists that responses come back in request order (as the Java
client does).
"""

from __future__ import annotations

import struct
import sys
from collections import deque
from dataclasses import dataclass
from typing import Any, Mapping, cast

from .codec import FileRegion, Message, decode, decode_from, encode_into
from .errors import LocalProtocolError, RemoteProtocolError, UnsupportedApiError
from .fast_produce import FAST_VERSIONS, PRODUCE_KEY, ProduceFrame, parse_produce
from .headers import (
    API_VERSIONS_KEY,
    RequestHeader,
    read_request_header,
    read_response_header,
    write_request_header,
    write_response_header,
)
from .messages import REQUESTS, RESPONSES

DEFAULT_MAX_FRAME_BYTES = 104_857_600  # Kafka's socket.request.max.bytes
UNSUPPORTED_VERSION = 35

_SIZE = struct.Struct(">i")

__all__ = [
    "ApiVersionsUnsupported", "ClientConnection", "FileRegion", "RequestReceived", "ResponseReceived",
    "ServerConnection", "frame_chunks_size",
]


@dataclass(slots=True)
class RequestReceived:
    header: RequestHeader
    request: Message
    frame_size: int


_UNSEEN: Any = object()  # (Any: compared by identity, never used as a range)

# Kafka's names for the API keys the message definitions here do not cover (ApiKeys.java), so that a
# request for one can be named in the broker's log.
_OTHER_API_NAMES = {
    4: "LeaderAndIsr", 5: "StopReplica", 6: "UpdateMetadata", 7: "ControlledShutdown",
    38: "CreateDelegationToken", 39: "RenewDelegationToken", 40: "ExpireDelegationToken",
    41: "DescribeDelegationToken", 58: "Envelope", 70: "ControllerRegistration",
    71: "GetTelemetrySubscriptions", 72: "PushTelemetry", 73: "AssignReplicasToDirs", 76: "ShareGroupHeartbeat",
    77: "ShareGroupDescribe", 78: "ShareFetch", 79: "ShareAcknowledge", 80: "AddRaftVoter", 81: "RemoveRaftVoter",
    82: "UpdateRaftVoter", 83: "InitializeShareGroupState", 84: "ReadShareGroupState",
    85: "WriteShareGroupState", 86: "DeleteShareGroupState", 87: "ReadShareGroupStateSummary",
    88: "StreamsGroupHeartbeat", 89: "StreamsGroupDescribe", 90: "DescribeShareGroupOffsets",
    91: "AlterShareGroupOffsets", 92: "DeleteShareGroupOffsets",
}


def api_name(api_key: int) -> str:
    """Kafka's name of an API key ("DescribeAcls"), or "unknown api key N"."""
    cls = REQUESTS.get(api_key)
    if cls is not None:
        return cls.__name__.removesuffix("Request")
    return _OTHER_API_NAMES.get(api_key, f"unknown api key {api_key}")


def _peek_client_id(frame: bytearray) -> str | None:
    """The client id of a request header (v1 and v2 alike: an int16-length string after the correlation
    id), or None when absent or unreadable."""
    if len(frame) < 10:
        return None
    (n,) = struct.unpack_from(">h", frame, 8)
    if n < 0 or 10 + n > len(frame):
        return None
    return bytes(frame[10 : 10 + n]).decode("utf-8", "replace")


@dataclass(slots=True)
class ApiVersionsUnsupported:
    header: RequestHeader
    frame_size: int


class FrameBuffers:
    """Large frame buffers taken back once nobody holds them: a broker's answer to the zeroed allocation
    each large request otherwise costs.

    Every frame over `_Framer.LARGE_FRAME` (and up to `WHOLE_FRAME`) gets a buffer of its whole size before
    the socket reads into it. `bytearray(size)` zeroes the memory first, and the socket then overwrites
    every byte of it: with a producer's 1 MiB requests that is 1 MiB of memset per request, about 3 % of
    the broker's CPU in the large-batch benchmark (perf, bench/PROFILE.md, issue 30 round three). Here a
    buffer handed out is remembered, and lent again to a later frame once it is free.

    Free means that nothing but this pool refers to it. Everything that reads a frame refers to it: the
    parsed request, the `memoryview`s of its record batches (a memoryview keeps its object alive), a
    parked produce or a pending transaction verification holding them. So a buffer is lent again only
    when no reader is left that could see it rewritten; a slice or `bytes()` of a frame is a copy and does
    not count. The count is CPython's reference count (`sys.getrefcount`); a buffer still exported to a
    memoryview could not be resized anyway (BufferError), which is checked too.

    A buffer is lent again for any frame between half its allocation and its allocation (CPython then
    resizes a bytearray in place); new ones are allocated with 1/8 headroom, as librdkafka's requests of
    one batch.size differ by a few kilobytes. At most `keep` buffers are remembered (the oldest is
    forgotten and freed by its last holder), so the pool holds at most `keep` x 2.25 MiB.
    """

    def __init__(self, keep: int = 4) -> None:
        self.keep = keep
        self._lent: list[bytearray] = []
        self.reused = 0  # frames that got a buffer back (tests, and what a profile wants to know)

    def take(self, size: int) -> bytearray:
        """A buffer of exactly `size` bytes, its contents unspecified (the socket overwrites them)."""
        lent = self._lent
        for i in range(len(lent)):
            # 2: the list's reference and getrefcount's argument; anything more is a reader of the frame.
            if sys.getrefcount(lent[i]) == 2:
                buf = lent[i]
                alloc = buf.__alloc__()
                if alloc // 2 <= size < alloc:
                    try:
                        n = len(buf)
                        if size < n:
                            del buf[size:]
                        elif size > n:
                            buf += bytes(size - n)
                    except BufferError:  # (still exported: not free after all)
                        continue
                    self.reused += 1
                    return buf
        buf = bytearray(size + (size >> 3))
        del buf[size:]  # (in place: the allocation keeps the headroom)
        lent.append(buf)
        if len(lent) > self.keep:
            del lent[0]
        return buf


class _Framer:
    """Splits a byte stream into frames, refusing a size field over the limit before buffering it.

    Bytes arrive into a staging buffer (`get_buffer` / `buffer_updated`, the shape of asyncio's
    BufferedProtocol, so the socket reads straight into it). A small frame is copied out of the stage once,
    into its own bytearray. A large frame gets its own bytearray as soon as its size is known, and the
    socket then reads directly into it. A frame up to 2 MiB (a default-sized produce request) gets its whole
    buffer at once; a larger one's buffer grows with the bytes that actually arrive (doubling, so each byte
    is copied about once more in all), never to a size a peer merely claims. The
    stage starts small (8 KiB) and grows to 64 KiB only for a connection that sends medium frames. Frames
    are writable, so record batches can be stamped in place. With `buffers` (a `FrameBuffers` shared by
    the broker's connections), a large frame's whole buffer is one that an earlier frame used and nobody
    holds any more, instead of a new, zeroed allocation.

    With `recycle`, large frames are received into buffers of WHOLE_FRAME bytes that are used again once
    nothing refers to them any more, and come out as a memoryview of exactly the frame (see `_reuse`). A
    follower's connection to its leader receives one response of up to ~1 MiB per fetch: a fresh
    `bytearray` for each was zero-filled by memset, on fresh anonymous pages faulted in one by one (dear
    on this VM: bench/PROFILE.md round two); perf on a follower under bench.replication_bench put 97% of
    its page faults and ~7% of its CPU there. A recycled buffer is written by the socket only, over pages
    already mapped. The buffers have a fixed size because the responses do not (a few hundred KB to
    replica.fetch.max.bytes): a bytearray resized to each frame would be reallocated whenever a frame is
    under half the last one. "Nothing refers to it" is exact, not a guess: a frame handed out is a view
    of the buffer, every view of that view (a decoded `records` field, a slice of one) keeps the buffer
    referenced, so a buffer is taken again only when its reference count is the framer's own. Whoever
    keeps a frame or a view of it keeps its bytes; the framer then receives into another buffer.
    """

    SPARES = 3  # recycled buffers kept: a caller may still hold the last response while the next arrives

    SMALL_STAGE = 8 * 1024
    LARGE_STAGE = 64 * 1024
    LARGE_FRAME = 32 * 1024  # frames above this get their own buffer
    WHOLE_FRAME = 2 * 1024 * 1024  # frames up to this get their full buffer at once

    def __init__(self, max_frame_bytes: int, buffers: FrameBuffers | None = None, *, recycle: bool = False):
        self.max_frame_bytes = max_frame_bytes
        self._buffers = buffers
        self._spares: list[bytearray] | None = [] if recycle else None
        self._recycled = False  # the frame being received is in a recycled buffer (longer than the frame)
        self.reused = 0  # large frames received into a spare buffer used before (tests, diagnostics)
        self._stage = bytearray(self.SMALL_STAGE)
        self._view = memoryview(self._stage)
        self._start = 0  # first unconsumed byte in the stage
        self._end = 0  # end of received bytes in the stage
        self._frame: bytearray | None = None  # a large frame being received in place
        self._frame_size = 0
        self._filled = 0

    def get_buffer(self) -> memoryview:
        frame = self._frame
        if frame is not None:
            if self._filled == len(frame):
                # Grow with what arrived, by doubling up to the frame size. A fresh buffer rather than a
                # resize: the transport may still hold a view of the old one.
                grown = bytearray(min(2 * len(frame), self._frame_size))
                grown[: self._filled] = frame
                self._frame = frame = grown
            return memoryview(frame)[self._filled : self._frame_size]
        if self._end == len(self._stage):
            self._compact(len(self._stage))
        return self._view[self._end :]

    def _compact(self, capacity: int) -> None:
        pending = self._end - self._start
        if capacity != len(self._stage):
            stage = bytearray(capacity)
            stage[:pending] = self._view[self._start : self._end]
            self._view.release()
            self._stage, self._view = stage, memoryview(stage)
        elif self._start:
            self._stage[:pending] = self._view[self._start : self._end]
        self._start, self._end = 0, pending

    def buffer_updated(self, nbytes: int) -> list[bytearray | memoryview]:
        if self._frame is not None:
            self._filled += nbytes
            if self._filled < self._frame_size:
                return []
            frame, self._frame = self._frame, None
            if self._recycled:
                return [memoryview(frame)[: self._frame_size]]
            return [frame]
        self._end += nbytes
        frames: list[bytearray | memoryview] = []
        stage, start, end = self._stage, self._start, self._end
        while end - start >= 4:
            (size,) = _SIZE.unpack_from(stage, start)
            if size < 0 or size > self.max_frame_bytes:
                raise RemoteProtocolError(f"frame size {size} is outside 0..{self.max_frame_bytes}")
            have = end - start - 4
            if have >= size:
                frames.append(stage[start + 4 : start + 4 + size])
                start += 4 + size
                continue
            if size > self.LARGE_FRAME:
                spare = self._reuse(size) if self._spares is not None and size <= self.WHOLE_FRAME else None
                self._recycled = spare is not None
                if spare is not None:
                    frame = spare
                elif size <= self.WHOLE_FRAME:
                    frame = bytearray(size) if self._buffers is None else self._buffers.take(size)
                else:
                    frame = bytearray(max(self.WHOLE_FRAME, have))
                frame[:have] = self._view[start + 4 : end]
                self._frame, self._frame_size, self._filled = frame, size, have
                start = end
            elif start + 4 + size > len(stage):  # make room for the rest of this small frame
                self._start, self._end = start, end
                self._compact(max(len(stage), self.LARGE_STAGE if size + 4 > len(stage) else 0))
                return frames
            break
        if start == end:
            start = end = 0
        self._start, self._end = start, end
        return frames

    def _reuse(self, size: int) -> bytearray | None:
        """A WHOLE_FRAME buffer nobody else refers to, to receive a frame of `size` bytes (at most that):
        a spare if one is free, else a new one kept as a spare while there are fewer than SPARES, else
        None (the frame gets a buffer of its own, as without recycling)."""
        spares = self._spares
        assert spares is not None
        for i in range(len(spares)):
            # 2: the list's reference and getrefcount's argument. A frame still held, or any view of it
            # (a decoded records field), adds one.
            if sys.getrefcount(spares[i]) == 2:
                self.reused += 1
                return spares[i]
        if len(spares) >= self.SPARES:
            return None
        spare = bytearray(self.WHOLE_FRAME)
        spares.append(spare)
        return spare

    def feed(self, data) -> list[bytearray | memoryview]:
        """Push bytes from a buffer (tests, and transports without BufferedProtocol)."""
        frames: list[bytearray | memoryview] = []
        view = memoryview(data)
        while view:
            target = self.get_buffer()
            n = min(len(target), len(view))
            target[:n] = view[:n]
            view = view[n:]
            frames.extend(self.buffer_updated(n))
        return frames

    @property
    def buffered(self) -> int:
        return (self._end - self._start) + (4 + self._filled if self._frame is not None else 0)

    @property
    def awaited(self) -> int:
        """Bytes still to come of the large frame being received in place (0: none is)."""
        return self._frame_size - self._filled if self._frame is not None else 0


def _frames(frames: list[bytearray | memoryview]) -> list[bytearray]:
    """A server's frames: its framer does not recycle, so each is a bytearray of its own (writable and
    resizable: produce batches are stamped in place)."""
    return cast(list[bytearray], frames)


class ServerConnection:
    def __init__(
        self,
        *,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        supported: Mapping[int, tuple[int, int]] | None = None,
        fast_produce: bool = False,
        frame_buffers: FrameBuffers | None = None,
    ):
        """`supported` maps api key -> (min, max) the broker serves; None means every defined version.
        With `fast_produce`, a Produce v3-v13 frame that `fast_produce.parse_produce` can read comes out as
        a `ProduceFrame`; the caller may still hand it back to `decode` (see broker.handlers.produce)."""
        self._framer = _Framer(max_frame_bytes, frame_buffers)
        self.supported = supported
        self.fast_produce = fast_produce
        self._ranges: dict[int, tuple[int, int] | None] = {}  # None: not served

    def receive_data(self, data) -> list[RequestReceived | ApiVersionsUnsupported | ProduceFrame]:
        return [self._parse(frame) for frame in _frames(self._framer.feed(data))]

    def get_buffer(self) -> memoryview:
        """Where the next bytes from the socket should go (see `_Framer`)."""
        return self._framer.get_buffer()

    def buffer_updated(self, nbytes: int) -> list[RequestReceived | ApiVersionsUnsupported | ProduceFrame]:
        """`nbytes` were written into the last `get_buffer()`; returns the requests now complete."""
        return [self._parse(frame) for frame in _frames(self._framer.buffer_updated(nbytes))]

    def frames_updated(self, nbytes: int) -> list[bytearray]:
        """As `buffer_updated`, but the frames come out unparsed: a SASL listener before authentication
        looks at each frame (or takes it as a raw SASL token) before any of it is decoded."""
        return _frames(self._framer.buffer_updated(nbytes))

    def parse(self, frame: bytearray) -> RequestReceived | ApiVersionsUnsupported | ProduceFrame:
        """Parse one frame from `frames_updated` as `buffer_updated` would have."""
        return self._parse(frame)

    @property
    def max_frame_bytes(self) -> int:
        return self._framer.max_frame_bytes

    @max_frame_bytes.setter
    def max_frame_bytes(self, value: int) -> None:
        """The limit applies to frames whose size field has not been read yet (before authentication a SASL
        listener allows only `sasl.server.max.receive.size`)."""
        self._framer.max_frame_bytes = value

    def _parse(self, frame: bytearray) -> RequestReceived | ApiVersionsUnsupported | ProduceFrame:
        if len(frame) < 4:
            raise RemoteProtocolError("frame too short for a request header")
        api_key, api_version = struct.unpack_from(">hh", frame, 0)
        rng = self._ranges.get(api_key, _UNSEEN)
        if rng is _UNSEEN:
            rng = self._ranges[api_key] = self._range(api_key)
        if rng is None:
            raise UnsupportedApiError(api_key, api_version, api_name(api_key), _peek_client_id(frame))
        low, high = rng
        if not low <= api_version <= high:
            if api_key == API_VERSIONS_KEY:
                header, _ = read_request_header(frame, flexible=False)
                return ApiVersionsUnsupported(header, len(frame))
            raise RemoteProtocolError(f"unsupported version {api_version} of api key {api_key}")
        if api_key == PRODUCE_KEY and self.fast_produce and api_version in FAST_VERSIONS:
            fast = parse_produce(frame, api_version)
            if fast is not None:
                return fast
        return self.decode(frame)

    def decode(self, frame: bytearray) -> RequestReceived:
        """Decode a request frame whose version `_parse` has accepted, with the generated codec."""
        header, pos = read_request_header(frame)
        view = memoryview(frame)
        # Trailing bytes after a request body are ignored, as Kafka does (it never checks that a body is
        # consumed): librdkafka's all-topics Metadata v13 request carries three stray bytes left from a
        # reserved array-count placeholder.
        request, _ = decode_from(REQUESTS[header.api_key], view[pos:], header.api_version)
        return RequestReceived(header, request, len(frame))

    def _range(self, api_key: int) -> tuple[int, int] | None:
        """Versions accepted: the broker's table, never wider than what the schema defines; None for an API
        not served."""
        cls = REQUESTS.get(api_key)
        rng = cls.VALID_VERSIONS if cls is not None else None
        if self.supported is not None and rng is not None:
            served = self.supported.get(api_key)
            rng = None if served is None else (max(served[0], rng[0]), min(served[1], rng[1]))
        if rng is None and api_key == API_VERSIONS_KEY:
            return (0, -1)
        return rng

    def send_response(self, header: RequestHeader, response: Message, version: int | None = None) -> list:
        """Frame a response. Returns a list of chunks (bytes-like or FileRegion)."""
        version = header.api_version if version is None else version
        out = bytearray(4)
        write_response_header(out, response.API_KEY, version, header.correlation_id)
        chunks: list = []
        encode_into(response, version, out, chunks)
        if not chunks:  # the common case: no file regions, the frame is `out`
            _SIZE.pack_into(out, 0, len(out) - 4)
            return [out]
        if out:
            chunks.append(out)
        total = frame_chunks_size(chunks) - 4
        first = chunks[0]
        if not isinstance(first, bytearray):
            first = chunks[0] = bytearray(first)
        _SIZE.pack_into(first, 0, total)
        return chunks

    def send_api_versions_unsupported(self, header: RequestHeader, table: Mapping[int, tuple[int, int]]) -> list:
        """KIP-511: a v0 ApiVersions body with UNSUPPORTED_VERSION and our table, under a v0 header."""
        cls = RESPONSES[API_VERSIONS_KEY]
        keys = [cls.ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in sorted(table.items())]
        return self.send_response(header, cls(error_code=UNSUPPORTED_VERSION, api_keys=keys), version=0)

    @property
    def buffered_bytes(self) -> int:
        return self._framer.buffered


def frame_chunks_size(chunks: list) -> int:
    return sum(c.length if isinstance(c, FileRegion) else len(c) for c in chunks)


@dataclass(slots=True)
class ResponseReceived:
    correlation_id: int
    api_key: int
    api_version: int
    response: Message


class ClientConnection:
    def __init__(self, *, client_id: str | None = "odradek", max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
                 recycle_frames: bool = False):
        """`recycle_frames`: large response buffers are reused once nothing refers to them (`_Framer`);
        the inter-node connections turn it on (a follower's fetch responses)."""
        self.client_id = client_id
        self._framer = _Framer(max_frame_bytes, recycle=recycle_frames)
        self._next_correlation_id = 0
        self._in_flight: deque[tuple[int, int, int]] = deque()

    def send_request(self, request: Message, version: int, *, expect_response: bool = True) -> tuple[int, bytes]:
        """Frame a request. Returns (correlation id, bytes). acks=0 Produce passes expect_response=False."""
        if not request.IS_REQUEST:
            raise LocalProtocolError(f"{type(request).__name__} is not a request")
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        out = bytearray(4)
        write_request_header(out, RequestHeader(request.API_KEY, version, correlation_id, self.client_id))
        encode_into(request, version, out, [])
        _SIZE.pack_into(out, 0, len(out) - 4)
        if expect_response:
            self._in_flight.append((correlation_id, request.API_KEY, version))
        return correlation_id, bytes(out)

    def send_packed_request(self, api_key: int, version: int, write_body) -> tuple[int, bytes]:
        """Frame a request whose body `write_body(out)` appends itself (a packed encoder, such as
        fast_fetch.encode_follower_fetch); its response is decoded as any other. Returns (correlation id, bytes)."""
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        out = bytearray(4)
        write_request_header(out, RequestHeader(api_key, version, correlation_id, self.client_id))
        write_body(out)
        _SIZE.pack_into(out, 0, len(out) - 4)
        self._in_flight.append((correlation_id, api_key, version))
        return correlation_id, bytes(out)

    def receive_data(self, data) -> list[ResponseReceived]:
        return self._responses(self._framer.feed(data))

    def get_buffer(self) -> memoryview:
        """Where the next bytes from the socket should go (a BufferedProtocol's get_buffer; see `_Framer`):
        a large response, a follower's fetch of a full batch, is read straight into its own buffer."""
        return self._framer.get_buffer()

    def buffer_updated(self, nbytes: int) -> list[ResponseReceived]:
        """`nbytes` were written into the last `get_buffer()`; the responses now complete."""
        return self._responses(self._framer.buffer_updated(nbytes))

    def _responses(self, frames: list[bytearray | memoryview]) -> list[ResponseReceived]:
        events = []
        for frame in frames:
            if not self._in_flight:
                raise RemoteProtocolError("response received with no request in flight")
            correlation_id, api_key, version = self._in_flight.popleft()
            got, pos = read_response_header(frame, api_key, version)
            if got != correlation_id:
                raise RemoteProtocolError(f"correlation id {got} does not match the request's {correlation_id}")
            events.append(ResponseReceived(correlation_id, api_key, version, self._decode(frame, pos, api_key, version)))
        return events

    @staticmethod
    def _decode(frame, pos: int, api_key: int, version: int) -> Message:
        cls = RESPONSES[api_key]
        body = memoryview(frame)[pos:]
        if api_key != API_VERSIONS_KEY or version == 0:
            return decode(cls, body, version)
        # A broker that does not know our ApiVersions version answers with a v0 body (KIP-511).
        try:
            response = decode(cls, body, version)
            if response.error_code != UNSUPPORTED_VERSION:
                return response
        except RemoteProtocolError:
            pass
        response, _ = decode_from(cls, body, 0)
        return response

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def awaited_bytes(self) -> int:
        """Bytes still to come of a large response being received (0: none is): a socket may be told
        not to wake its reader before they are there (SO_RCVLOWAT; broker/node_client.py)."""
        return self._framer.awaited

    @property
    def recycled_frames(self) -> int:
        """Large responses read into a recycled buffer so far (with `recycle_frames`)."""
        return self._framer.reused

