"""EagerAnswer (broker.context): an acks=all produce's answer is written the moment its future is set, inside
whatever set it (a follower's fetch advancing the high watermark), not a loop turn later; the connection's
next request is still served only after a loop turn, never inside another handler. A cancelled one goes the
usual way: the connection is closed by its done callback."""

from __future__ import annotations

import asyncio

from odradek.broker.context import EagerAnswer, Packed, SecurityProtocol
from odradek.broker.handlers import accepted_versions, advertised_versions, load_handlers
from odradek.broker.network import KafkaProtocol, NetworkServer

from tests.harness.sasl import Client, FakeTransport, produce


def connection(answers: list):
    """A PLAINTEXT connection whose produce fast path answers the next of `answers` (they are popped)."""
    registry = load_handlers()
    served: list = []

    def serve_produce_frame(frame, connection):
        served.append(frame)
        return answers.pop(0)

    server = NetworkServer(dispatch=lambda ctx: None, serve_produce_frame=serve_produce_frame,
                           accepted_versions=accepted_versions(registry), advertised_versions=advertised_versions(registry),
                           max_frame_bytes=100 << 20, max_connections=1000, queued_max_requests=500,
                           connections_max_idle_ms=600_000)
    proto = KafkaProtocol(server, "PLAINTEXT", SecurityProtocol.PLAINTEXT, "broker", None)
    transport = FakeTransport()
    proto.connection_made(transport)
    return Client(proto, transport), transport, served


async def test_the_answer_is_written_when_set_and_the_next_request_waits_for_a_loop_turn():
    first, second = EagerAnswer(), Packed([b"\x00\x00\x00\x04second"])
    client, transport, served = connection([first, second])
    produce(client)
    produce(client)  # pipelined behind the parked first one
    assert len(served) == 1 and transport.out == b""
    first.set_result(Packed([b"\x00\x00\x00\x05first"]))
    assert bytes(transport.out) == b"\x00\x00\x00\x05first"  # written inside set_result
    assert len(served) == 1  # the next request waits for the loop
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(served) == 2 and bytes(transport.out).endswith(b"second")
    assert bytes(transport.out).count(b"first") == 1  # not written twice


async def test_a_cancelled_answer_closes_the_connection():
    first = EagerAnswer()
    client, transport, served = connection([first])
    produce(client)
    first.cancel()
    await asyncio.sleep(0)
    assert transport.closed and transport.out == b""
