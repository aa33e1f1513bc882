"""Inter-broker and controller links renew their SASL sessions in band (KIP-368) instead of being cut.

With `connections.max.reauth.ms` on the inter-broker and controller listeners, the node closes a connection
that sends anything but SASL after its session ended. Kafka's brokers re-authenticate their own links before
then; so do Odradek's (broker/node_client.py): the replica fetchers and the quorum's connections of a
secured 3-node cluster (in one process) renew their sessions several times while they stay on the
connections they opened, and the topic written meanwhile is on every replica.
"""

from __future__ import annotations

import asyncio
import ssl

import pytest

from odradek.broker.node_client import NodeConnection, NodeSecurity
from odradek.broker.server import Broker
from odradek.protocol.messages import CreateTopicsRequest
from tests.pki import make_pki

from tests.harness.inprocess import active, secured_configs, until

pytestmark = pytest.mark.timeout(150)

SESSION_MS = 1500


def links(nodes):
    """Every node's replica fetcher and quorum connections that have been opened."""
    out = []
    for b in nodes:
        out += [f.connection for f in b.replica_fetchers.fetchers.values() if f.connection is not None]
        out += [c for c in b.quorum.connections._connections.values() if c.connects]
    return out


async def test_inter_broker_and_controller_links_reauthenticate(tmp_path):
    pki = make_pki(tmp_path / "pki")
    configs = secured_configs(tmp_path, pki, **{"listener.name.internal.connections.max.reauth.ms": SESSION_MS,
                                                "listener.name.controller.connections.max.reauth.ms": SESSION_MS})
    nodes = [Broker(c) for c in configs]
    admin = None
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        await until(lambda: len(active(nodes)) == 1 and all(b.services.live_brokers() == [1, 2, 3] for b in nodes),
                    timeout_s=60, what="the cluster")
        port = next(port for name, _host, port in nodes[0].bound if name == "CLIENT")
        admin = NodeConnection(1, "127.0.0.1", port, security=NodeSecurity(
            ssl_context=ssl.create_default_context(cafile=str(pki.ca)), mechanism="SCRAM-SHA-512",
            username="admin", password="admin-secret"))
        created = await admin.request(CreateTopicsRequest(timeout_ms=10000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name="renewed", num_partitions=3, replication_factor=3, assignments=[], configs=[]),
        ]), 7)
        assert created.topics[0].error_code == 0
        # Every node follows two leaders: six fetchers, each on one connection.
        await until(lambda: sum(1 for b in nodes for f in b.replica_fetchers.fetchers.values() if f.connection and f.connection.connects) == 6,
                    timeout_s=60, what="six replica fetchers connected")
        fetcher_links = [f.connection for b in nodes for f in b.replica_fetchers.fetchers.values()]
        await until(lambda: all(c.reauthentications >= 2 for c in fetcher_links), timeout_s=60,
                    what="every fetcher's session renewed twice")
        assert [c.connects for c in fetcher_links] == [1] * 6, "a fetcher's connection was cut and opened again"
        # The quorum's and brokers' links to the controllers renewed theirs too (those used all along).
        renewed = [c for c in links(nodes) if c.reauthentications]
        assert len(renewed) > len(fetcher_links)
    finally:
        if admin is not None:
            await admin.close()
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)
