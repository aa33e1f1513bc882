"""protocol.connection.FrameBuffers: a large frame's buffer is lent again only when nobody holds it.

What must hold: the requests read with the pool are the requests read without it (same frames, same
fields, whatever the socket's read sizes), and a buffer anything still refers to (the parsed request, a
memoryview of its records, the frame itself) is never handed to a later frame, so what a reader holds
never changes under it.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.connection import ClientConnection, FrameBuffers, ServerConnection
from odradek.protocol.fast_produce import ProduceFrame
from odradek.protocol.messages import REQUESTS

ProduceRequest = REQUESTS[0]


def _produce_frame(records: bytes, correlation: int = 0) -> bytes:
    client = ClientConnection(client_id="pool")
    for _ in range(correlation):  # (a distinct correlation id per frame)
        client.send_request(ProduceRequest(acks=1, timeout_ms=1, topic_data=[]), 9, expect_response=False)
    topic = ProduceRequest.TopicProduceData(
        name="t", partition_data=[ProduceRequest.TopicProduceData.PartitionProduceData(index=0, records=records)])
    return client.send_request(ProduceRequest(acks=1, timeout_ms=30_000, topic_data=[topic]), 9)[1]


def _read(conn: ServerConnection, data: bytes, chunk: int) -> list:
    """As the broker's socket does: into `get_buffer()`, at most `chunk` bytes a read."""
    events = []
    view = memoryview(data)
    while view:
        target = conn.get_buffer()
        n = min(len(target), len(view), chunk)
        target[:n] = view[:n]
        view = view[n:]
        events += conn.buffer_updated(n)
    return events


def _fast(fill: int, size: int, correlation: int = 0) -> bytes:
    return _produce_frame(bytes([fill]) * size, correlation)


def test_a_dropped_frame_is_lent_again_and_reads_the_same():
    pool = FrameBuffers()
    conn = ServerConnection(fast_produce=True, frame_buffers=pool)
    (first,) = _read(conn, _fast(1, 200_000), 65_536)
    assert isinstance(first, ProduceFrame)
    first_buffer = first.frame
    assert bytes(first.topics[0][2][0][1]) == b"\x01" * 200_000
    buffer_id = id(first_buffer)
    del first, first_buffer
    (second,) = _read(conn, _fast(2, 199_000, correlation=1), 65_536)
    assert id(second.frame) == buffer_id and pool.reused == 1
    assert second.correlation_id == 1
    assert bytes(second.topics[0][2][0][1]) == b"\x02" * 199_000


def test_a_held_record_view_keeps_its_buffer():
    pool = FrameBuffers()
    conn = ServerConnection(fast_produce=True, frame_buffers=pool)
    (first,) = _read(conn, _fast(1, 150_000), 8192)
    records = first.topics[0][2][0][1]  # a reader (a parked produce, a verification) keeps the records
    del first
    (second,) = _read(conn, _fast(2, 150_000, correlation=1), 8192)
    assert second.frame is not records.obj and pool.reused == 0
    assert bytes(records) == b"\x01" * 150_000  # untouched by the second frame
    del second
    (third,) = _read(conn, _fast(3, 150_000, correlation=2), 8192)  # the second's buffer was free again
    assert pool.reused == 1 and bytes(records) == b"\x01" * 150_000
    assert bytes(third.topics[0][2][0][1]) == b"\x03" * 150_000


def test_a_held_frame_keeps_its_buffer_and_decoded_requests_too():
    pool = FrameBuffers()
    conn = ServerConnection(frame_buffers=pool)  # no fast path: the codec's request holds views of the frame
    (first,) = _read(conn, _fast(1, 100_000), 65_536)
    (second,) = _read(conn, _fast(2, 100_000, correlation=1), 65_536)
    assert pool.reused == 0
    assert bytes(first.request.topic_data[0].partition_data[0].records) == b"\x01" * 100_000
    assert bytes(second.request.topic_data[0].partition_data[0].records) == b"\x02" * 100_000


def test_sizes_between_half_and_the_allocation_reuse_others_allocate():
    pool = FrameBuffers()
    a = pool.take(1_000_000)
    assert len(a) == 1_000_000 and a.__alloc__() > 1_100_000  # headroom for the next, slightly larger frame
    del a
    b = pool.take(1_100_000)  # larger, within the allocation
    assert len(b) == 1_100_000 and pool.reused == 1
    del b
    c = pool.take(600_000)  # smaller, above half
    assert len(c) == 600_000 and pool.reused == 2
    del c
    d = pool.take(100_000)  # far smaller: a buffer of its own (CPython would shrink the big one)
    assert len(d) == 100_000 and pool.reused == 2
    e = pool.take(3_000_000)  # larger than anything lent
    assert len(e) == 3_000_000 and pool.reused == 2


def test_at_most_keep_buffers_are_remembered():
    pool = FrameBuffers(keep=2)
    held = [pool.take(50_000) for _ in range(5)]  # all in use: each is new
    assert pool.reused == 0 and len(pool._lent) == 2
    del held
    pool.take(50_000)
    assert pool.reused == 1


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(min_value=33_000, max_value=400_000), min_size=2, max_size=6),
       chunk=st.sampled_from([4096, 8192, 65_536, 1 << 20]), hold=st.lists(st.booleans(), min_size=6, max_size=6))
def test_requests_read_with_the_pool_are_those_read_without(sizes, chunk, hold):
    frames = [_fast(i + 1, size, correlation=i) for i, size in enumerate(sizes)]
    plain = ServerConnection(fast_produce=True)
    pooled = ServerConnection(fast_produce=True, frame_buffers=FrameBuffers(keep=2))
    kept = []
    for i, frame in enumerate(frames):
        (want,) = _read(plain, frame, chunk)
        (got,) = _read(pooled, frame, chunk)
        assert bytes(got.frame) == bytes(want.frame)
        assert (got.correlation_id, got.acks, got.timeout_ms) == (want.correlation_id, want.acks, want.timeout_ms)
        if hold[i]:
            kept.append((got, bytes(want.frame)))
        for held, content in kept:  # nothing held ever changes
            assert bytes(held.frame) == content
