"""A node of a secured cluster serves its broker listeners only once it has caught up with the metadata log.

Found by the secured fault loop (test_security_faults.py): a node restarted after kill -9 served its client
listener at once, before it had the metadata log's SCRAM credentials again, and refused valid logins
(SASL_AUTHENTICATION_FAILED, which clients do not retry). As Kafka's brokers wait for the controller to say
they have caught up (initialCatchUpFuture) before enabling request processing, the controller listener
serves at once (the quorum needs it) and the broker listeners once a heartbeat answer says is_caught_up;
a connection made before then waits in the listen backlog and is served after.
"""

from __future__ import annotations

import asyncio
import ssl

import pytest

from odradek.broker.node_client import NodeConnection, NodeSecurity
from odradek.broker.server import Broker
from odradek.protocol.messages import MetadataRequest
from tests.pki import make_pki

from tests.harness.inprocess import active, secured_configs, until

pytestmark = pytest.mark.timeout(150)


def serving(node: Broker) -> set[str]:
    network = node.network
    return {name for name, server in zip(network.server_names, network.servers) if server.is_serving()}


async def test_broker_listeners_serve_once_caught_up_and_a_restarted_node_takes_logins(tmp_path):
    pki = make_pki(tmp_path / "pki")
    configs = secured_configs(tmp_path, pki)
    nodes = [Broker(c) for c in configs]
    try:
        # One voter alone has no quorum, so nothing tells it it has caught up: only its controller listener
        # serves (the quorum needs it); its client and inter-broker listeners listen without accepting.
        await nodes[0].start()
        assert serving(nodes[0]) == {"CONTROLLER"}
        assert not nodes[0].caught_up.is_set()

        await asyncio.gather(*(b.start() for b in nodes[1:]))
        await until(lambda: all(b.caught_up.is_set() for b in nodes), timeout_s=60, what="every node caught up")
        await until(lambda: all(serving(b) == {"CLIENT", "INTERNAL", "CONTROLLER"} for b in nodes),
                    what="every listener of every node serving")

        # A node that is not the active controller restarts; a SCRAM login to its client listener made as
        # soon as start() returns waits until the node has the credentials again, then succeeds.
        await until(lambda: len(active(nodes)) == 1, what="an active controller")
        leaving = next(i for i, b in enumerate(nodes) if not b.controller.is_active)
        await nodes[leaving].stop()
        nodes[leaving] = Broker(configs[leaving])
        await nodes[leaving].start()
        port = next(port for name, _host, port in nodes[leaving].bound if name == "CLIENT")
        security = NodeSecurity(ssl_context=ssl.create_default_context(cafile=str(pki.ca)), mechanism="SCRAM-SHA-512",
                                username="admin", password="admin-secret")
        conn = NodeConnection(leaving + 1, "127.0.0.1", port, security=security, connect_timeout_s=60.0)
        try:
            response = await conn.request(MetadataRequest(topics=[]), 12, timeout_s=60.0)
        finally:
            await conn.close()
        assert response.cluster_id == nodes[0].cluster_id
        assert nodes[leaving].caught_up.is_set()
    finally:
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)
