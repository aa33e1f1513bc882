"""The admin client and the CLI's cluster views against three in-process nodes (brokers and controllers both):
DescribeQuorum answered through a follower (forwarded to the quorum leader), DescribeCluster listing a stopped
broker as fenced, and `topic describe` flagging the partitions it leaves under-replicated."""

from __future__ import annotations

import asyncio
import io
import json

import pytest

from odradek.broker.server import Broker
from odradek.client.admin import Admin
from odradek.client.cli import Output, partition_flags, render_topics

from .test_quorum_inprocess import active, cluster_configs, until

pytestmark = pytest.mark.timeout(120)


async def poll(admin_call, predicate, what: str, timeout_s: float = 30.0):
    """Ask until the answer satisfies `predicate` (the cluster converges asynchronously)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        answer = await admin_call()
        if predicate(answer):
            return answer
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}: last answer {answer}")
        await asyncio.sleep(0.1)


async def test_quorum_brokers_and_under_replicated_partitions_of_three_nodes(tmp_path):
    _, configs = cluster_configs(tmp_path)
    nodes = [Broker(c) for c in configs]
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        await until(lambda: len(active(nodes)) == 1, what="an active controller")
        await until(lambda: all(b.services.live_brokers() == [1, 2, 3] for b in nodes), what="three brokers")
        (controller,) = active(nodes)
        followers = [b for b in nodes if b is not controller]
        bootstrap = followers[0].config.listeners[0].split("//")[1]
        async with Admin(bootstrap_servers=bootstrap) as admin:
            quorum = await admin.describe_quorum()
            assert quorum.leader_id == controller.config.node_id and quorum.observers == []
            assert sorted(v.replica_id for v in quorum.voters) == [1, 2, 3]
            leader_end = quorum.leader.log_end_offset
            assert all(v.lag == leader_end - v.log_end_offset >= 0 for v in quorum.voters)
            assert quorum.high_watermark <= leader_end

            cluster = await admin.describe_cluster()
            assert [(b.node_id, b.is_fenced) for b in cluster.brokers] == [(1, False), (2, False), (3, False)]

            await admin.create_topic("replicated", 3, 3)
            (desc,) = await admin.describe_topics(["replicated"])
            live = set(admin.client.cluster.brokers)
            assert all(partition_flags(p, live) == {"under_replicated": False, "unavailable": False}
                       for p in desc.partitions)

            stopped = followers[1]
            await stopped.stop()
            gone = stopped.config.node_id
            cluster = await poll(admin.describe_cluster,
                                 lambda c: any(b.node_id == gone and b.is_fenced for b in c.brokers),
                                 f"broker {gone} fenced")
            (desc,) = await poll(lambda: admin.describe_topics(["replicated"]),
                                 lambda d: all(gone not in p.isr for p in d[0].partitions),
                                 f"broker {gone} out of every ISR")
            live = set(admin.client.cluster.brokers)
            stream = io.StringIO()
            render_topics(Output("json", stream), [desc], live, under_replicated=True)
            (shown,) = json.loads(stream.getvalue())
            assert [p["partition"] for p in shown["partitions"]] == [0, 1, 2]
            assert all(p["under_replicated"] and not p["unavailable"] and p["leader"] != gone
                       for p in shown["partitions"])
    finally:
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)
