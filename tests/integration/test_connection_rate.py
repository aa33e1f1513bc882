"""Connection creation rates (KIP-612) on a live broker: connections over `max.connection.creation.rate` are held
back and then served (never refused), and connections from an address over its `connection_creation_rate`
client quota (AlterClientQuotas, entity type ip) are closed unanswered and not counted.

Quotas are measured over 2 windows of 1 s (quota.window.num=2), so a rate of N allows N connections per second.
"""

from __future__ import annotations

import asyncio

import pytest

from odradek.broker.testing import running_broker
from odradek.protocol.connection import ClientConnection
from odradek.protocol.messages import AlterClientQuotasRequest, ApiVersionsRequest, DescribeClientQuotasRequest

pytestmark = pytest.mark.timeout(120)


async def connect(port: int):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    return reader, writer, ClientConnection(client_id="rate-test")


async def call(conn, message, version: int, timeout_s: float = 30.0):
    """The response, or None when the broker closes the connection first."""
    reader, writer, client = conn
    writer.write(client.send_request(message, version)[1])
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            data = await asyncio.wait_for(reader.read(1 << 16), max(0.1, deadline - loop.time()))
        except ConnectionResetError:  # closed with our request unread: the kernel resets rather than ends it
            return None
        if not data:
            return None
        events = client.receive_data(data)
        if events:
            return events[0].response


def api_versions() -> ApiVersionsRequest:
    return ApiVersionsRequest(client_software_name="rate-test", client_software_version="1")


async def test_connections_over_the_creation_rate_are_held_back_then_served(tmp_path):
    async with running_broker(tmp_path, **{"max.connection.creation.rate": 1, "quota.window.num": 2}) as kafka:
        network = kafka.broker.network
        conns = [await connect(kafka.port) for _ in range(4)]
        try:
            # The broker has accepted all four; the second, third and fourth wait out the rate (about a second
            # each, one after another) before they are read.
            await asyncio.wait_for(_until(lambda: len(network.connections) == 4), 30)
            assert sum(c.admitting for c in network.connections) >= 1
            answers = await asyncio.gather(*(call(c, api_versions(), 3) for c in conns))
            assert all(a is not None and a.error_code == 0 for a in answers)
            assert not any(c.admitting for c in network.connections)
        finally:
            for _, writer, _ in conns:
                writer.close()


async def test_an_address_over_its_connection_creation_rate_quota_is_closed(tmp_path):
    async with running_broker(tmp_path, **{"quota.window.num": 2}) as kafka:
        admin = await connect(kafka.port)
        conns = [admin]
        try:
            entity = [AlterClientQuotasRequest.EntryData.EntityData(entity_type="ip", entity_name="127.0.0.1")]
            altered = await call(admin, AlterClientQuotasRequest(validate_only=False, entries=[AlterClientQuotasRequest.EntryData(
                entity=entity, ops=[AlterClientQuotasRequest.EntryData.OpData(
                    key="connection_creation_rate", value=1.0, remove=False)])]), 1)
            assert altered.entries[0].error_code == 0
            described = await call(admin, DescribeClientQuotasRequest(strict=True, components=[
                DescribeClientQuotasRequest.ComponentData(entity_type="ip", match_type=0, match="127.0.0.1")]), 1)
            assert [(v.key, v.value) for v in described.entries[0].values] == [("connection_creation_rate", 1.0)]

            # One connection a second from 127.0.0.1: of five made at once, about one is served and the others
            # are closed unanswered (after the throttle time), never counted as connections.
            network = kafka.broker.network
            before = len(network.connections)
            conns += [await connect(kafka.port) for _ in range(5)]
            answers = await asyncio.gather(*(call(c, api_versions(), 3) for c in conns[1:]))
            assert sum(a is None for a in answers) >= 3
            assert all(a.error_code == 0 for a in answers if a is not None)
            assert len(network.connections) <= before + sum(a is not None for a in answers)
            assert network.connections_per_ip.get("127.0.0.1", 0) == len(network.connections)
            # The connection that was already open is unaffected.
            assert (await call(admin, api_versions(), 3)).error_code == 0
        finally:
            for _, writer, _ in conns:
                writer.close()


async def _until(predicate) -> None:
    while not predicate():
        await asyncio.sleep(0.01)
