"""Requests between nodes (broker/node_client.py) against a real broker and against nodes that misbehave.

A NodeConnection opens on first use, pipelines requests and matches answers in order, fails everything in
flight with NodeUnavailable when the connection breaks (a peer that closes, a peer that answers garbage, a
timeout), backs off before reconnecting, and reconnects by itself once the node is back.
"""

from __future__ import annotations

import asyncio

import pytest

from odradek.broker.node_client import NodeConnection, NodeConnections, NodeUnavailable
from odradek.broker.testing import running_broker
from odradek.protocol.messages import ApiVersionsRequest, MetadataRequest

pytestmark = pytest.mark.timeout(60)


def api_versions() -> ApiVersionsRequest:
    return ApiVersionsRequest(client_software_name="odradek", client_software_version="test")


async def test_requests_pipeline_and_answer_in_order(tmp_path):
    async with running_broker(tmp_path) as node:
        conn = NodeConnection(1, node.host, node.port)
        answers = await asyncio.gather(*(conn.request(api_versions(), 3) for _ in range(5)),
                                       conn.request(MetadataRequest(topics=[]), 12))
        assert all(a.error_code == 0 for a in answers[:5])
        assert [b.node_id for b in answers[5].brokers] == [1]
        await conn.close()


async def test_a_node_that_goes_away_fails_what_is_in_flight_and_is_reached_again(tmp_path):
    async with running_broker(tmp_path) as node:
        host, port = node.host, node.port
        conn = NodeConnection(1, host, port, backoff_s=0.0)
        await conn.request(api_versions(), 3)
    with pytest.raises(NodeUnavailable):
        await conn.request(api_versions(), 3)  # the node stopped: refused or reset, never a hang
    async with running_broker(tmp_path, listeners=f"PLAINTEXT://{host}:{port}") as node:
        assert (await conn.request(api_versions(), 3)).error_code == 0
    await conn.close()


async def test_a_node_that_lies_or_stalls_is_dropped(tmp_path):
    async def garbage(reader, writer):
        await reader.read(100)
        writer.write(b"\x00\x00\x00\x08\x7f\xff\xff\xff\x00\x00\x00\x00")  # a frame with a wrong correlation id
        await writer.drain()

    async def silent(reader, writer):
        await reader.read(100)
        await asyncio.sleep(30)

    liar = await asyncio.start_server(garbage, "127.0.0.1", 0)
    staller = await asyncio.start_server(silent, "127.0.0.1", 0)
    try:
        conn = NodeConnection(2, "127.0.0.1", liar.sockets[0].getsockname()[1], backoff_s=0.0)
        with pytest.raises(NodeUnavailable, match="protocol"):
            await conn.request(api_versions(), 3)
        assert not conn.connected
        slow = NodeConnection(3, "127.0.0.1", staller.sockets[0].getsockname()[1])
        with pytest.raises(NodeUnavailable, match="did not answer"):
            await slow.request(api_versions(), 3, timeout_s=0.2)
        with pytest.raises(NodeUnavailable, match="backing off"):
            await slow.request(api_versions(), 3)  # within the backoff after the failure
        await conn.close()
        await slow.close()
    finally:
        liar.close()
        staller.close()


async def test_connections_by_node_and_purpose(tmp_path):
    async with running_broker(tmp_path) as node:
        addresses = {1: (node.host, node.port)}
        nodes = NodeConnections(addresses.get)
        assert nodes.get(1, "raft") is nodes.get(1, "raft") and nodes.get(1, "raft") is not nodes.get(1, "fetch")
        assert (await nodes.request(1, api_versions(), 3, purpose="raft")).error_code == 0
        with pytest.raises(NodeUnavailable, match="no address"):
            nodes.get(9)
        await nodes.close()
