"""A cluster of real processes (`odradek cluster up`) on a block of free ports, which a test kills (-9), stops
(SIGSTOP) and restarts, and a topic created through librdkafka's admin client."""

from __future__ import annotations

import asyncio
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

from odradek.broker.cluster_tool import node_ports
from odradek.broker.node_client import NodeConnection, NodeUnavailable
from odradek.protocol.messages import DescribeQuorumRequest, MetadataRequest

OVERRIDES = ["broker.session.timeout.ms=4000", "broker.heartbeat.interval.ms=500"]


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port_block(count: int) -> int:
    """A block of `count` ports free now, chosen below the kernel's ephemeral range: a node started minutes
    later on one of them (a restart, a fourth node) must not find it taken by some outgoing connection's
    local port, which the kernel picks only from that range."""
    high = _ephemeral_low() - count
    for _ in range(200):
        base = random.randrange(10000, high, 2)
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free block of ports")


def odradek(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=timeout)


def free_metrics_prefix(nodes: int) -> int:
    """A prefix P such that ports P1..Pn (P * 10 + node id) are free now: `metrics.port=P{node}` gives each
    node of a `cluster up` its own metrics port. Ports stay under 32000, below Linux's ephemeral range, so a
    client's outgoing connection cannot take one between this check and the node's bind."""
    for _ in range(200):
        prefix = random.randrange(2000, 3200)
        socks = []
        try:
            for node_id in range(1, nodes + 1):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", prefix * 10 + node_id))
            return prefix
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free metrics ports")


class Cluster:
    def __init__(self, directory: Path, nodes: int = 3, overrides: tuple[str, ...] | list[str] = ()) -> None:
        self.dir = directory
        self.nodes = nodes
        self.port = free_port_block(2 * nodes)
        self.overrides = [*OVERRIDES, *overrides]  # every node's settings (key=value; a later one wins)

    def up(self) -> None:
        args = ["cluster", "up", "--nodes", str(self.nodes), "--dir", str(self.dir), "--port", str(self.port)]
        for o in self.overrides:
            args += ["--override", o]
        result = odradek(*args)
        assert result.returncode == 0, result.stderr + self.logs()

    def down(self) -> None:
        odradek("cluster", "down", "--dir", str(self.dir), "--timeout", "10")

    def logs(self) -> str:
        return "".join(f"\n--- node {i}\n" + (self.dir / f"node-{i}" / "node.log").read_text()[-3000:]
                       for i in range(1, self.nodes + 1) if (self.dir / f"node-{i}" / "node.log").exists())

    def pid(self, node_id: int) -> int:
        return int((self.dir / f"node-{node_id}" / "node.pid").read_text())

    def client_port(self, node_id: int) -> int:
        return node_ports(node_id, self.port)[0]

    def bootstrap(self, node_id: int) -> str:
        return f"127.0.0.1:{self.client_port(node_id)}"

    def request(self, node_id: int, message, version: int, timeout_s: float = 5.0):
        async def call():
            conn = NodeConnection(node_id, "127.0.0.1", self.client_port(node_id), backoff_s=0.0)
            try:
                return await conn.request(message, version, timeout_s=timeout_s)
            finally:
                await conn.close()

        return asyncio.run(call())

    def quorum(self, node_id: int):
        request = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
            topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.TopicData.PartitionData(partition_index=0)])])
        try:
            response = self.request(node_id, request, 2)
        except NodeUnavailable:
            return None
        part = response.topics[0].partitions[0] if response.topics else None
        return part if part is not None and part.error_code == 0 else None

    def wait(self, predicate, what: str, timeout_s: float = 40.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}" + self.logs())

    def leader(self, asking: list[int]) -> int | None:
        for node_id in asking:
            part = self.quorum(node_id)
            if part is not None:
                return part.leader_id
        return None

    def metadata(self, node_id: int, topics=None):
        return self.request(node_id, MetadataRequest(topics=topics), 12)


def create_with_confluent(bootstrap: str, name: str, partitions: int, replication: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, replication)], request_timeout=20).values():
        future.result(timeout=30)
