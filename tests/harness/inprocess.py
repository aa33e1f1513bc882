"""Nodes of a cluster in this process (brokers and controllers both, on real sockets): their configs on free
ports with formatted data directories, plain or with every listener secured, a bounded wait, and the active
controller among them."""

from __future__ import annotations

import asyncio
import socket

from odradek.broker.storage_tool import parse_add_scram, write_bootstrap_records
from odradek.broker.testing import broker_config
from odradek.metadata.image import new_cluster_id
from odradek.storage.meta_properties import format_log_dir

QUICK = {
    "controller.quorum.election.timeout.ms": 300,
    "controller.quorum.fetch.timeout.ms": 600,
    "controller.quorum.request.timeout.ms": 1000,
    "broker.heartbeat.interval.ms": 200,
    "broker.session.timeout.ms": 1500,
}


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def cluster_configs(tmp_path, n: int = 3, **extra):
    cluster_id = new_cluster_id()
    ports = free_ports(2 * n)
    voters = ",".join(f"{i + 1}@127.0.0.1:{ports[n + i]}" for i in range(n))
    configs = []
    for i in range(n):
        data = tmp_path / f"node{i + 1}"
        format_log_dir(str(data), node_id=i + 1, cluster_id=cluster_id, directory_id=new_cluster_id())
        configs.append(broker_config(data, **{
            "node.id": i + 1, "process.roles": "broker,controller", "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{ports[i]},CONTROLLER://127.0.0.1:{ports[n + i]}", **QUICK, **extra,
        }))
    return cluster_id, configs


async def until(predicate, timeout_s: float = 30.0, what: str = "condition"):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def active(nodes):
    return [b for b in nodes if b.controller.is_active]


# Every listener secured: clients and brokers on SASL_SSL with SCRAM-SHA-512 (the `--add-scram` admin),
# controllers on SASL_SSL with PLAIN from JAAS (the SCRAM credentials live in the log they replicate).
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="controller" '
              'password="controller-secret" user_controller="controller-secret";')
SCRAM_JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="admin-secret";'


def secured_configs(tmp_path, pki, n: int = 3, **extra):
    cluster_id = new_cluster_id()
    ports = free_ports(3 * n)
    voters = ",".join(f"{i + 1}@127.0.0.1:{ports[2 * n + i]}" for i in range(n))
    admin = parse_add_scram("SCRAM-SHA-512=[name=admin,password=admin-secret]")
    configs = []
    for i in range(n):
        data = tmp_path / f"node{i + 1}"
        format_log_dir(str(data), node_id=i + 1, cluster_id=cluster_id, directory_id=new_cluster_id())
        write_bootstrap_records(str(data), [admin])
        configs.append(broker_config(data, **{
            "node.id": i + 1, "process.roles": "broker,controller", "controller.quorum.voters": voters,
            "listeners": f"CLIENT://127.0.0.1:{ports[i]},INTERNAL://127.0.0.1:{ports[n + i]},"
                         f"CONTROLLER://127.0.0.1:{ports[2 * n + i]}",
            "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL",
            "inter.broker.listener.name": "INTERNAL",
            "advertised.listeners": f"CLIENT://127.0.0.1:{ports[i]},INTERNAL://127.0.0.1:{ports[n + i]}",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.internal.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
            "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.controller.protocol": "PLAIN",
            "listener.name.controller.plain.sasl.jaas.config": PLAIN_JAAS,
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_store),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
            "default.replication.factor": 3, "offsets.topic.replication.factor": 3, "min.insync.replicas": 2,
            "replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 100,
            **QUICK, **extra,
        }))
    return configs
