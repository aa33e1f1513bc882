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

from tests.harness.inprocess import active, cluster_configs, until

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
            assert all(partition_flags(p, live) == {"under_replicated": False, "unavailable": False,
                                                    "leader_unreachable": False}
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


async def test_elect_leaders_and_reassignments_through_any_broker(tmp_path):
    """ElectLeaders and the reassignment APIs through a broker that is not the active controller (forwarded),
    with the bundled admin client and the CLI: a preferred leader that leads already needs no election; a
    move within the ISR (a new order of the same replicas) completes at once and makes the new first replica
    the leader once elected; a move to an unknown broker is refused; cancelling with nothing pending is
    NO_REASSIGNMENT_IN_PROGRESS."""
    import subprocess
    import sys

    from odradek.client.cluster import TopicPartition

    _, configs = cluster_configs(tmp_path)
    nodes = [Broker(c) for c in configs]
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        await until(lambda: len(active(nodes)) == 1, what="an active controller")
        await until(lambda: all(b.services.live_brokers() == [1, 2, 3] for b in nodes), what="three brokers")
        follower = next(b for b in nodes if not b.controller.is_active)
        bootstrap = follower.config.listeners[0].split("//")[1]
        async with Admin(bootstrap_servers=bootstrap) as admin:
            await admin.create_topic("moves", 2, 3)
            results = await admin.elect_leaders([TopicPartition("moves", 0)])
            assert results[TopicPartition("moves", 0)].code.name == "ELECTION_NOT_NEEDED"
            (desc,) = await admin.describe_topics(["moves"])
            replicas = list(desc.partitions[0].replicas)
            reordered = replicas[1:] + replicas[:1]
            moved = await admin.alter_partition_reassignments({TopicPartition("moves", 0): reordered})
            assert moved == {TopicPartition("moves", 0): None}
            assert await admin.list_partition_reassignments() == {}  # within the ISR: done at once
            refused = await admin.alter_partition_reassignments({TopicPartition("moves", 1): [1, 2, 9]})
            assert refused[TopicPartition("moves", 1)] is not None
            cancel = await admin.alter_partition_reassignments({TopicPartition("moves", 1): None})
            assert cancel[TopicPartition("moves", 1)].code.name == "NO_REASSIGNMENT_IN_PROGRESS"

        def cli(*args):
            return subprocess.run([sys.executable, "-m", "odradek", *args, "-b", bootstrap, "-o", "json"],
                                  capture_output=True, text=True, timeout=60)

        elected = await asyncio.to_thread(cli, "topic", "elect-leaders", "--topic", "moves")
        assert elected.returncode == 0, elected.stderr
        assert {r["partition"] for r in json.loads(elected.stdout)} == {0, 1}
        pending = await asyncio.to_thread(cli, "topic", "reassignments")
        assert pending.returncode == 0 and json.loads(pending.stdout) == []
        cancel = await asyncio.to_thread(cli, "topic", "reassign", "moves", "--partition", "1", "--cancel")
        assert cancel.returncode == 1 and json.loads(cancel.stdout)[0]["result"] == "NO_REASSIGNMENT_IN_PROGRESS"
    finally:
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)
