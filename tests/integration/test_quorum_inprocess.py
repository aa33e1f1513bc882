"""Three nodes (brokers and controllers both) in one process: the Raft quorum on real sockets.

The nodes are formatted with one cluster id, elect a leader, which becomes the active controller and
writes the cluster's bootstrap records; every node registers with it and follows the metadata log. A
topic created through any node (forwarded to the active controller, KIP-590) reaches every node's image,
and each partition is hosted where the image places it. When the active controller stops, another node
takes over and metadata changes keep working. (Real processes and kill -9: test_cluster_processes.py.)
"""

from __future__ import annotations

import asyncio

import pytest

from odradek.broker.components import replication_counts
from odradek.broker.node_client import NodeConnection
from odradek.broker.server import Broker
from odradek.broker.testing import broker_config
from odradek.protocol.messages import CreateTopicsRequest, DescribeQuorumRequest, MetadataRequest
from odradek.metadata.image import new_cluster_id
from odradek.storage.meta_properties import format_log_dir
from tests.harness.inprocess import QUICK, active, cluster_configs, free_ports, until

pytestmark = pytest.mark.timeout(120)


async def test_three_nodes_elect_register_and_follow_the_metadata_log(tmp_path):
    cluster_id, configs = cluster_configs(tmp_path)
    nodes = [Broker(c) for c in configs]
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        await until(lambda: len(active(nodes)) == 1, what="an active controller")
        await until(lambda: all(b.services.live_brokers() == [1, 2, 3] for b in nodes), what="three unfenced brokers")
        assert {b.metadata.image.cluster_id for b in nodes} == {cluster_id}

        leader = active(nodes)[0]
        follower = next(b for b in nodes if b is not leader)
        conn = NodeConnection(follower.node_id, "127.0.0.1", follower.bound_port)
        created = await conn.request(CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name="events", num_partitions=6, replication_factor=1, assignments=[], configs=[]),
        ]), 7)
        assert created.topics[0].error_code == 0, created
        await until(lambda: all("events" in b.metadata.image.topics_by_name for b in nodes), what="the topic everywhere")
        image = follower.metadata.image
        placement = {i: p.leader for i, p in image.topics_by_name["events"].partitions.items()}
        assert set(placement.values()) == {1, 2, 3}  # spread over the three brokers
        for b in nodes:  # each partition hosted, and led, where the image says
            hosted = {tp.partition for tp, p in b.data.partitions.items() if tp.topic == "events" and p.is_leader}
            assert hosted == {i for i, leader_id in placement.items() if leader_id == b.node_id}
        md = await conn.request(MetadataRequest(topics=None), 12)
        assert sorted(x.node_id for x in md.brokers) == [1, 2, 3]
        # Automatic creation through a follower: created by the active controller; until this broker's
        # image has it, LEADER_NOT_AVAILABLE (Kafka's answer, which clients retry), then the topic.
        auto = await conn.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="auto")],
                                                  allow_auto_topic_creation=True), 12)
        assert auto.topics[0].error_code in (0, 5), auto.topics[0]
        await until(lambda: all("auto" in b.metadata.image.topics_by_name for b in nodes), what="the auto-created topic")
        quorum = await conn.request(DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
            topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.TopicData.PartitionData(partition_index=0)])]), 2)
        part = quorum.topics[0].partitions[0]
        assert part.leader_id == leader.node_id and sorted(v.replica_id for v in part.current_voters) == [1, 2, 3]
        await conn.close()

        conn = NodeConnection(follower.node_id, "127.0.0.1", follower.bound_port)
        created = await conn.request(CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name="replicated", num_partitions=6, replication_factor=3, assignments=[], configs=[]),
        ]), 7)
        assert created.topics[0].error_code == 0, created
        await until(lambda: all("replicated" in b.metadata.image.topics_by_name for b in nodes), what="the RF=3 topic")
        await conn.close()

        # The active controller goes away in order (controlled shutdown: its leaderships move before it
        # exits), another takes over, fences it once its session expires (its partitions with no other
        # replica go offline: no unclean election), and changes keep working.
        await leader.stop()
        replicated = nodes[0].metadata.image.topics_by_name["replicated"] if nodes[0] is not leader else nodes[1].metadata.image.topics_by_name["replicated"]
        assert all(p.leader != leader.node_id for p in replicated.partitions.values())  # moved before it exited
        nodes.remove(leader)
        await until(lambda: len(active(nodes)) == 1, what="a new active controller")
        gone = leader.node_id
        await until(lambda: all(b.metadata.image.brokers[gone].fenced for b in nodes), what="the stopped broker fenced")
        offline = {i for i, p in nodes[0].metadata.image.topics_by_name["events"].partitions.items() if p.leader == -1}
        assert offline == {i for i, leader_id in placement.items() if leader_id == gone}
        gauges = replication_counts(nodes[0])  # what /metrics reports (odradek_partitions_offline, ...)
        # (every topic's: "auto" has one replica, which may have been on the stopped node)
        everywhere = sum(p.leader == -1 for t in nodes[0].metadata.image.topics_by_id.values() for p in t.partitions.values())
        assert gauges["offline"] == everywhere >= len(offline) and gauges["fenced_brokers"] == 1
        survivor = nodes[0]
        conn = NodeConnection(survivor.node_id, "127.0.0.1", survivor.bound_port)
        created = await conn.request(CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name="after", num_partitions=2, replication_factor=1, assignments=[], configs=[]),
        ]), 7)
        assert created.topics[0].error_code == 0, created
        await until(lambda: all("after" in b.metadata.image.topics_by_name for b in nodes), what="the second topic")
        await conn.close()
    finally:
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)


async def test_a_broker_only_node_follows_as_an_observer(tmp_path):
    cluster_id, configs = cluster_configs(tmp_path)
    voters = configs[0].controller_quorum_voters
    data = tmp_path / "node4"
    format_log_dir(str(data), node_id=4, cluster_id=cluster_id, directory_id=new_cluster_id())
    observer_config = broker_config(data, **{
        "node.id": 4, "process.roles": "broker", "controller.quorum.voters": ",".join(voters), **QUICK,
    })
    nodes = [Broker(c) for c in (*configs, observer_config)]
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        observer = nodes[3]
        assert not observer.quorum.raft.is_voter and observer.controller_bound == []
        await until(lambda: all(b.services.live_brokers() == [1, 2, 3, 4] for b in nodes), what="four unfenced brokers")
        conn = NodeConnection(4, "127.0.0.1", observer.bound_port)
        created = await conn.request(CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name="seen", num_partitions=8, replication_factor=1, assignments=[], configs=[]),
        ]), 7)
        assert created.topics[0].error_code == 0, created  # forwarded by the observer to the active controller
        await until(lambda: "seen" in observer.metadata.image.topics_by_name, what="the observer following")
        quorum = await conn.request(DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
            topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.TopicData.PartitionData(partition_index=0)])]), 2)
        part = quorum.topics[0].partitions[0]
        assert sorted(v.replica_id for v in part.current_voters) == [1, 2, 3] and [o.replica_id for o in part.observers] == [4]
        # The observer and the followers fetch at v18, with the high watermark they know (KIP-1166): what
        # lets the leader answer them at once when theirs is behind (bench/metadata_propagation.py).
        for b in nodes:
            if b.node_id != part.leader_id:
                assert b.quorum.fetch_version_to(part.leader_id) == 18, b.node_id
        await conn.close()
    finally:
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)


async def test_snapshots_bound_the_log_and_a_restart_starts_from_one(tmp_path):
    cluster_id, small = cluster_configs(tmp_path, **{"metadata.log.max.record.bytes.between.snapshots": 2000})
    nodes = [Broker(c) for c in small]
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        await until(lambda: len(active(nodes)) == 1 and all(b.services.live_brokers() == [1, 2, 3] for b in nodes),
                    what="the cluster")
        conn = NodeConnection(1, "127.0.0.1", nodes[0].bound_port)
        for i in range(12):
            created = await conn.request(CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
                CreateTopicsRequest.CreatableTopic(name=f"t{i}", num_partitions=4, replication_factor=1, assignments=[], configs=[]),
            ]), 7)
            assert created.topics[0].error_code == 0
        await conn.close()
        await until(lambda: all(len(b.metadata.image.topics_by_name) >= 12 for b in nodes), what="the topics")
        await until(lambda: all(b.quorum.raft.log.latest_snapshot_id() is not None for b in nodes), what="snapshots")
        victim = next(b for b in nodes if not b.controller.is_active)
        image = victim.metadata.image
        await victim.stop()
        index = nodes.index(victim)
        restarted = nodes[index] = Broker(small[index])
        await restarted.start()
        snapshot = restarted.quorum.raft.log.latest_snapshot_id()
        assert snapshot is not None and restarted.quorum.raft.log.log_start_offset == snapshot.end_offset > 0
        await until(lambda: restarted.metadata.image.topics_by_name.keys() == image.topics_by_name.keys(), what="the restarted node's image")
    finally:
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)


async def test_controller_only_voters_and_broker_only_nodes(tmp_path):
    """KRaft's separate roles: three controller-only voters (process.roles=controller, a CONTROLLER listener
    only) and two broker-only observers; topics go to the brokers, the quorum is the controllers."""
    cluster_id = new_cluster_id()
    ports = free_ports(5)
    voters = ",".join(f"{i + 1}@127.0.0.1:{ports[i]}" for i in range(3))
    configs = []
    for node_id in range(1, 6):
        data = tmp_path / f"node{node_id}"
        format_log_dir(str(data), node_id=node_id, cluster_id=cluster_id, directory_id=new_cluster_id())
        if node_id <= 3:
            props = {"process.roles": "controller", "listeners": f"CONTROLLER://127.0.0.1:{ports[node_id - 1]}"}
        else:
            props = {"process.roles": "broker", "listeners": f"PLAINTEXT://127.0.0.1:{ports[node_id - 1]}"}
        configs.append(broker_config(data, **{"node.id": node_id, "controller.quorum.voters": voters, **props, **QUICK}))
    nodes = [Broker(c) for c in configs]
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        controllers, brokers = nodes[:3], nodes[3:]
        await until(lambda: len(active(controllers)) == 1, what="an active controller")
        await until(lambda: all(b.services.live_brokers() == [4, 5] for b in brokers), what="two unfenced brokers")
        assert all(not c.bound and c.controller_bound for c in controllers)
        conn = NodeConnection(4, "127.0.0.1", brokers[0].bound_port)
        created = await conn.request(CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name="split", num_partitions=4, replication_factor=2, assignments=[], configs=[]),
        ]), 7)
        assert created.topics[0].error_code == 0, created
        await until(lambda: "split" in brokers[1].metadata.image.topics_by_name, what="the topic on the brokers")
        topic = brokers[1].metadata.image.topics_by_name["split"]
        assert all(sorted(p.replicas) == [4, 5] for p in topic.partitions.values())
        quorum = await conn.request(DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
            topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.TopicData.PartitionData(partition_index=0)])]), 2)
        part = quorum.topics[0].partitions[0]
        assert sorted(v.replica_id for v in part.current_voters) == [1, 2, 3]
        assert sorted(o.replica_id for o in part.observers) == [4, 5]
        await conn.close()
    finally:
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)
