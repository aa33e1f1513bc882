"""A follower's fetch responses: large response frames read into recycled buffers, and the socket's
low-water mark while one comes in (protocol/connection.py `_Framer`, broker/node_client.py `_Responses`).

Recycling is only safe if a buffer is never written while anything still refers to it: a response whose
records are still held (a memoryview into the frame), a frame held as is. The tests hold each kind and
check that later responses leave the held bytes alone, and that a buffer nobody holds is used again.
"""

from __future__ import annotations

import asyncio
import socket
import uuid

import uvloop
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.broker.node_client import NodeConnection
from odradek.protocol.connection import ClientConnection, ServerConnection, _Framer
from odradek.protocol.headers import RequestHeader
from odradek.protocol.messages import FetchRequest, FetchResponse

TOPIC_ID = uuid.UUID(int=7)
PartitionData = FetchResponse.FetchableTopicResponse.PartitionData


def _request() -> FetchRequest:
    request = FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=10 << 20, isolation_level=0, session_id=0,
                           session_epoch=-1, rack_id="", forgotten_topics_data=[], topics=[])
    request.replica_state = FetchRequest.ReplicaState(replica_id=2, replica_epoch=1)
    return request


def _records(n: int, size: int) -> bytes:
    """`size` bytes that differ from one response to the next (and along the response)."""
    return bytes((n * 7 + i) % 251 for i in range(256)) * (size // 256) + bytes([n % 251]) * (size % 256)


def _response_frame(correlation_id: int, records: bytes) -> bytes:
    response = FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        FetchResponse.FetchableTopicResponse(topic_id=TOPIC_ID, partitions=[PartitionData(
            partition_index=0, error_code=0, high_watermark=1, last_stable_offset=1, log_start_offset=0,
            records=records)])])
    chunks = ServerConnection().send_response(RequestHeader(1, 17, correlation_id, "t"), response)
    return b"".join(bytes(c) for c in chunks)


def _receive(conn: ClientConnection, frame: bytes, chunk: int = 65536):
    """`frame` through get_buffer/buffer_updated as a socket would deliver it; the one response."""
    events = []
    view = memoryview(frame)
    while view:
        target = conn.get_buffer()
        n = min(len(target), len(view), chunk)
        target[:n] = view[:n]
        view = view[n:]
        events.extend(conn.buffer_updated(n))
    assert len(events) == 1
    return events[0].response


def _fetch(conn: ClientConnection, n: int, size: int):
    cid, _ = conn.send_request(_request(), 17)
    return _receive(conn, _response_frame(cid, _records(n, size)))


def _records_of(response) -> memoryview:
    return response.responses[0].partitions[0].records


def test_a_buffer_nobody_holds_takes_the_next_response():
    conn = ClientConnection(recycle_frames=True)
    for n in range(6):
        response = _fetch(conn, n, 300_000)
        assert bytes(_records_of(response)) == _records(n, 300_000)
        del response
    # The first two responses need buffers of their own; from then on one is always free again.
    assert conn.recycled_frames >= 4


def test_held_records_are_never_overwritten():
    conn = ClientConnection(recycle_frames=True)
    held = [_records_of(_fetch(conn, n, 200_000)) for n in range(4)]  # views into four frames, all kept
    for n in range(4, 8):
        _fetch(conn, n, 200_000)
    assert [bytes(v) for v in held] == [_records(n, 200_000) for n in range(4)]
    del held
    _fetch(conn, 8, 200_000)
    assert conn.recycled_frames >= 1


def test_a_held_frame_is_never_overwritten():
    framer = _Framer(1 << 30, recycle=True)
    first = framer.feed(len(b"a" * 100_000).to_bytes(4, "big") + b"a" * 100_000)[0]
    second = framer.feed(len(b"b" * 100_000).to_bytes(4, "big") + b"b" * 100_000)[0]
    third = framer.feed(len(b"c" * 100_000).to_bytes(4, "big") + b"c" * 100_000)[0]
    assert (bytes(first), bytes(second), bytes(third)) == (b"a" * 100_000, b"b" * 100_000, b"c" * 100_000)
    assert framer.reused == 0
    del third  # its buffer is free again
    fourth = framer.feed(len(b"d" * 100_000).to_bytes(4, "big") + b"d" * 100_000)[0]
    assert framer.reused == 1 and bytes(fourth) == b"d" * 100_000
    assert (bytes(first), bytes(second)) == (b"a" * 100_000, b"b" * 100_000)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(min_value=40_000, max_value=1_500_000), min_size=2, max_size=8),
       st.sampled_from([4096, 65536, 1 << 20]))
def test_responses_of_any_sizes_come_out_whole(sizes, chunk):
    conn = ClientConnection(recycle_frames=True)
    for n, size in enumerate(sizes):
        cid, _ = conn.send_request(_request(), 17)
        response = _receive(conn, _response_frame(cid, _records(n, size)), chunk)
        assert bytes(_records_of(response)) == _records(n, size)


def test_without_recycling_every_large_frame_is_new():
    conn = ClientConnection()
    for n in range(4):
        _fetch(conn, n, 100_000)
    assert conn.recycled_frames == 0


def test_the_bytes_still_to_come_of_a_large_response():
    conn = ClientConnection()
    cid, _ = conn.send_request(_request(), 17)
    frame = _response_frame(cid, _records(0, 500_000))
    target = conn.get_buffer()
    target[:1000] = frame[:1000]
    assert conn.buffer_updated(1000) == []
    assert conn.awaited_bytes == len(frame) - 1000
    target = conn.get_buffer()
    target[: len(frame) - 1000] = frame[1000:]
    assert len(conn.buffer_updated(len(frame) - 1000)) == 1
    assert conn.awaited_bytes == 0


def test_a_node_connection_reads_large_responses_whole_and_resets_the_low_water_mark():
    """Against a peer that sends each response in two parts with a pause between: the reader sleeps on
    SO_RCVLOWAT while the rest is due, gets every response whole, and the mark is 1 again afterwards (a
    small response behind it must not wait)."""
    sizes = [700_000, 120_000, 900_000, 50, 300_000]

    async def main() -> tuple[list[bool], int, int]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            server = ServerConnection()
            n = 0
            while data := await reader.read(65536):
                for event in server.receive_data(data):
                    frame = _response_frame(event.header.correlation_id, _records(n, sizes[n]))
                    writer.write(frame[:5000])
                    await writer.drain()
                    await asyncio.sleep(0.05)
                    writer.write(frame[5000:])
                    n += 1

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = NodeConnection(1, "127.0.0.1", port, backoff_s=0.0)
        try:
            whole = []
            for n, size in enumerate(sizes):
                response = await conn.request(_request(), 17, timeout_s=30)
                whole.append(bytes(_records_of(response)) == _records(n, size))
            sock = conn._writer.get_extra_info("socket")
            return whole, sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT), conn.connects
        finally:
            await conn.close()
            server.close()

    whole, lowat, connects = uvloop.run(main())
    assert whole == [True] * len(sizes)
    assert lowat == 1
    assert connects == 1
