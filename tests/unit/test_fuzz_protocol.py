"""Hostile bytes: the only exception the protocol layer may raise on input is RemoteProtocolError.

h11's invariant: whatever the peer sends, we either parse it or raise RemoteProtocolError; never a
struct.error, IndexError, MemoryError, UnicodeDecodeError or a hang. And a length field cannot make us
allocate what the frame does not hold: every count is checked against the bytes left first.

Inputs: random bytes; random bodies for every message class and version; valid frames (random
messages from the schema, and the golden vectors) with bits flipped, cut short, lengths inflated, bytes
inserted. Whatever is accepted must re-encode and decode to itself.
"""

from __future__ import annotations

import pathlib
import tracemalloc

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from odradek.protocol.codec import decode, encode
from odradek.protocol.connection import ApiVersionsUnsupported, ClientConnection, ServerConnection
from odradek.protocol.errors import RemoteProtocolError
from odradek.protocol.headers import RequestHeader
from odradek.protocol.messages import REQUESTS, RESPONSES

from tests.unit.protocol_strategies import message

FUZZ = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
ALL_CLASSES = [REQUESTS[k] for k in sorted(REQUESTS)] + [RESPONSES[k] for k in sorted(RESPONSES)]
REQUEST_PAIRS = [(c, v) for c in REQUESTS.values() for v in range(c.VALID_VERSIONS[0], c.VALID_VERSIONS[1] + 1)]
VECTORS = sorted((pathlib.Path(__file__).parent.parent / "vectors").glob("*/*.bin"))

# Values that, written over a length or count, claim far more than any frame holds.
INFLATED = [
    b"\x7f\xff\xff\xff",  # int32 max
    b"\x7f\xff\xff\xfe",
    b"\x00\x10\x00\x00",
    b"\x7f\xff",  # int16 max (string lengths)
    b"\xff\xff\xff\xff\x07",  # uvarint 2^31 - 1 (compact lengths)
    b"\xff\xff\xff\xff\x0f",  # uvarint 2^32 - 1
    b"\x80\x80\x80\x80\x80\x01",  # uvarint longer than 5 bytes
    b"\xff\xfe",  # negative lengths
    b"\x80\x00\x00\x00",
]


def _server_accepts(data: bytes) -> list:
    """Feed `data` to a fresh server connection: events, or [] after a RemoteProtocolError."""
    conn = ServerConnection()
    try:
        events = conn.receive_data(data)
    except RemoteProtocolError:
        return []
    # Whatever was accepted is well-formed: it re-encodes, and the re-encoding reads back the same.
    for event in events:
        if isinstance(event, ApiVersionsUnsupported):
            continue
        v = event.header.api_version
        wire = encode(event.request, v)
        assert decode(type(event.request), wire, v) == event.request
    return events


def _decode_or_remote_error(cls, data, version):
    try:
        msg = decode(cls, data, version)
    except RemoteProtocolError:
        return None
    wire = encode(msg, version)
    assert decode(cls, wire, version) == msg
    return msg


# ---------------------------------------------------------------------------------------------------
# Random bytes


@FUZZ
@given(data=st.binary(max_size=200))
def test_random_stream_to_server(data):
    _server_accepts(data)


@FUZZ
@given(
    api_key=st.one_of(st.sampled_from(sorted(REQUESTS)), st.integers(-(2**15), 2**15 - 1)),
    version=st.one_of(st.integers(-1, 20), st.integers(-(2**15), 2**15 - 1)),
    rest=st.binary(max_size=120),
)
def test_random_framed_requests_to_server(api_key, version, rest):
    """A correct size field and plausible key/version, so the fuzz reaches header and body parsing."""
    body = api_key.to_bytes(2, "big", signed=True) + version.to_bytes(2, "big", signed=True) + rest
    _server_accepts(len(body).to_bytes(4, "big") + body)


@pytest.mark.parametrize("cls", ALL_CLASSES, ids=lambda c: c.__name__)
@FUZZ
@given(data=st.data())
def test_random_bodies_decode_or_remote_error(cls, data):
    version = data.draw(st.integers(*cls.VALID_VERSIONS), label="version")
    body = data.draw(st.one_of(st.binary(max_size=64), st.binary(min_size=64, max_size=400)), label="body")
    _decode_or_remote_error(cls, body, version)


@FUZZ
@given(data=st.binary(max_size=200))
def test_random_bytes_to_client(data):
    client = ClientConnection()
    client.send_request(REQUESTS[3](), 12)
    client.send_request(REQUESTS[18](), 3)
    try:
        client.receive_data(data)
    except RemoteProtocolError:
        pass


# ---------------------------------------------------------------------------------------------------
# Mutated valid frames


def _random_frame() -> st.SearchStrategy:
    def framed(pair):
        cls, version = pair
        return message(cls, version).map(
            lambda m: ClientConnection(client_id="fuzz").send_request(m, version, expect_response=False)[1]
        )

    sources = [st.sampled_from(REQUEST_PAIRS).flatmap(framed)]
    if VECTORS:
        sources.append(st.sampled_from(VECTORS).map(lambda p: p.read_bytes()))
    return st.one_of(*sources)


def _reframe(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


@st.composite
def mutated_frames(draw):
    frame = draw(_random_frame(), label="frame")
    body = bytearray(frame[4:])
    kind = draw(st.sampled_from(["flip", "truncate", "inflate", "insert", "flip-size"]), label="mutation")
    if kind == "flip":
        for _ in range(draw(st.integers(1, 8))):
            pos = draw(st.integers(0, len(body) - 1))
            body[pos] ^= 1 << draw(st.integers(0, 7))
        return _reframe(bytes(body))
    if kind == "truncate":
        return _reframe(bytes(body[: draw(st.integers(0, len(body) - 1))]))
    if kind == "inflate":
        value = draw(st.sampled_from(INFLATED))
        pos = draw(st.integers(0, len(body)))
        body[pos : pos + len(value)] = value
        return _reframe(bytes(body))
    if kind == "insert":
        pos = draw(st.integers(0, len(body)))
        body[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        return _reframe(bytes(body))
    # The size field itself is flipped: the frame now waits for bytes, ends early, or is refused.
    size = bytearray(frame[:4])
    size[draw(st.integers(0, 3))] ^= 1 << draw(st.integers(0, 7))
    return bytes(size) + bytes(body)


@settings(FUZZ, max_examples=300)
@given(frame=mutated_frames())
def test_mutated_frames_to_server(frame):
    _server_accepts(frame)


@settings(FUZZ, max_examples=150)
@given(frame=mutated_frames(), cuts=st.lists(st.integers(1, 50), max_size=4))
def test_mutated_frames_split_behave_as_whole(frame, cuts):
    """Feeding in pieces never changes the outcome (events, waiting, or the error)."""
    def run(pieces):
        conn = ServerConnection()
        events = []
        try:
            for p in pieces:
                events += conn.receive_data(p)
        except RemoteProtocolError:
            return "error"
        return events

    bounds = [0, *sorted(c for c in set(cuts) if c < len(frame)), len(frame)]
    pieces = [frame[a:b] for a, b in zip(bounds, bounds[1:])]
    assert run(pieces) == run([frame])


@settings(FUZZ, max_examples=100)
@given(data=st.data())
def test_mutated_responses_to_client(data):
    cls = data.draw(st.sampled_from(ALL_CLASSES[len(REQUESTS) :]), label="response class")
    version = data.draw(st.integers(*cls.VALID_VERSIONS), label="version")
    msg = data.draw(message(cls, version), label="response")
    chunks = ServerConnection().send_response(RequestHeader(cls.API_KEY, version, 0, "x"), msg)
    body = bytearray(b"".join(chunks)[4:])
    assume(body)
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(body) - 1))
        value = data.draw(st.one_of(st.sampled_from(INFLATED), st.binary(min_size=1, max_size=2)))
        body[pos : pos + len(value)] = value
    client = ClientConnection()
    client.send_request(REQUESTS[cls.API_KEY](), version)
    try:
        client.receive_data(_reframe(bytes(body)))
    except RemoteProtocolError:
        pass


# ---------------------------------------------------------------------------------------------------
# Lying lengths fail fast and allocate nothing


def _assert_fails_fast(fn, max_peak=256 * 1024):
    """Refused without allocating for the claim. Memory is the deterministic witness: a decoder that trusted
    the count would allocate (and spend time) in proportion to it."""
    tracemalloc.start()
    try:
        with pytest.raises(RemoteProtocolError):
            fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < max_peak, f"peak {peak} bytes"


@pytest.mark.parametrize(
    ("api_key", "version", "body"),
    [
        (3, 1, b"\x7f\xff\xff\xff"),  # Metadata topics: 2^31 - 1 elements
        (3, 12, b"\xff\xff\xff\xff\x07"),  # compact array of 2^31 - 2
        (3, 12, b"\xff\xff\xff\xff\x0f\x00\x00\x00"),  # compact array of 2^32 - 2
        (0, 3, b"\xff\xff\x00\x01\x00\x00\x00\x01\x00\x00\x00\x01\x00\x01t\x7f\xff\xff\xff"),  # partitions
        (0, 3, b"\xff\xff\x00\x01\x00\x00\x00\x01\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x01\x00\x00\x00\x00\x7f\xff\xff\xff"),  # records bytes
        (0, 9, b"\x00\x00\x01\x00\x00\x00\x01\x02\x02t\x02\x00\x00\x00\x00\xff\xff\xff\xff\x07"),  # compact records
        (1, 7, b"\xff\xff\xff\xff" * 4 + b"\x00" + b"\x00\x00\x00\x00\xff\xff\xff\xff" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x01\x00\x01t\x7f\xff\xff\xff"),  # forgotten partitions []int32
        (18, 3, b"\xff\xff\xff\xff\x07"),  # compact string of 2^31 - 2 bytes
        (18, 3, b"\x01\x01\xff\xff\xff\xff\x0f"),  # 2^32 - 1 tagged fields
        (18, 3, b"\x01\x01\x01\x05\xff\xff\xff\xff\x07"),  # one tagged field of 2^31 - 1 bytes
        (9, 8, b"\x02\x02g\xff\xff\xff\xff\x07"),  # OffsetFetch groups[].topics of 2^31 - 2
        # JoinGroup v0: group "g", session timeout, member "", protocol type "c", one protocol whose
        # name claims 32767 bytes, then one whose metadata claims 2^31 - 1.
        (11, 0, b"\x00\x01g\x00\x00\x00\x01\x00\x00\x00\x01c\x00\x00\x00\x01\x7f\xff"),
        (11, 0, b"\x00\x01g\x00\x00\x00\x01\x00\x00\x00\x01c\x00\x00\x00\x01\x00\x00\x7f\xff\xff\xff"),
    ],
    ids=lambda x: None,
)
def test_lying_counts_fail_fast(api_key, version, body):
    cls = REQUESTS[api_key]
    _assert_fails_fast(lambda: decode(cls, body, version))
    header = api_key.to_bytes(2, "big") + version.to_bytes(2, "big") + b"\x00\x00\x00\x01\x00\x00"
    from odradek.protocol.headers import is_flexible_version

    if is_flexible_version(api_key, version):
        header += b"\x00"
    _assert_fails_fast(lambda: ServerConnection().receive_data(_reframe(header + body)))


def test_a_2gb_frame_header_allocates_nothing():
    conn = ServerConnection()
    _assert_fails_fast(lambda: conn.receive_data(b"\x7f\xff\xff\xff" + b"\x00\x03\x00\x0c"), max_peak=16 * 1024)
    assert conn.buffered_bytes <= 8


def test_a_frame_within_the_limit_buffers_only_what_arrived():
    """A peer may announce a large (legal) frame: we buffer at most 2 MiB for the claim (the whole frame when
    it is that small, as a default produce request is), then only as much as it actually sends."""
    conn = ServerConnection()
    tracemalloc.start()
    try:
        assert conn.receive_data((50 * 1024 * 1024).to_bytes(4, "big") + b"\x00" * 100) == []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert conn.buffered_bytes == 104
    assert peak < 2 * 1024 * 1024 + 64 * 1024
