"""Transactions on a replicated partition: three nodes in one process, an RF=3 topic. Markers written on
the leader (WriteTxnMarkers, acks=all) reach the followers through the ordinary replication path, and
the followers rebuild the same aborted-transaction index and producer state from the same batches; when
the leader leaves, the new leader serves read_committed readers at once: the same last stable offset and
aborted transactions, and a real read_committed consumer never sees an aborted record.
"""

from __future__ import annotations

import asyncio

import pytest

from odradek.broker.node_client import NodeConnection
from odradek.broker.server import Broker
from odradek.protocol.messages import (
    CreateTopicsRequest,
    FetchRequest,
    InitProducerIdRequest,
    ProduceRequest,
    WriteTxnMarkersRequest,
)
from odradek.protocol.records import build_batch
from odradek.storage.names import TopicPartition

from tests.harness.inprocess import active, cluster_configs, until
from tests.harness.txn_markers import NOW, read_committed_values

pytestmark = pytest.mark.timeout(150)

TOPIC = "txn"
TP = TopicPartition(TOPIC, 0)
FAST = {"replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 100,
        # Transactional batches and markers sent raw, without a coordinator transaction (the partitions' side).
        "transaction.partition.verification.enable": False}
PTopic = ProduceRequest.TopicProduceData
Marker = WriteTxnMarkersRequest.WritableTxnMarker


def replicas(nodes):
    return [b.data.get_partition(TP) for b in nodes if b.data.get_partition(TP) is not None]


def leader_of(nodes):
    return next(b for b in nodes if b.data.get_partition(TP) is not None and b.data.get_partition(TP).is_leader)


def in_sync(nodes, n: int) -> bool:
    parts = replicas(nodes)
    return (len(parts) == n and len({p.log_end_offset for p in parts}) == 1
            and all(p.high_watermark == p.log_end_offset for p in parts))


def txn_state(partition):
    log = partition.log
    entries = [tuple(t) for s in log.segments for t in s.txn_index.entries]
    producers = {pid: (e.producer_epoch, e.coordinator_epoch, e.current_txn_first_offset, e.last_seq)
                 for pid, e in log.producer_state.producers.items()}
    return entries, producers, dict(log.producer_state.ongoing)


async def fetch_committed(node):
    conn = NodeConnection(node.node_id, "127.0.0.1", node.bound_port)
    try:
        FTopic = FetchRequest.FetchTopic
        response = await conn.request(FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=1, forgotten_topics_data=[],
            topics=[FTopic(topic=TOPIC, partitions=[FTopic.FetchPartition(partition=0, fetch_offset=0,
                                                                          partition_max_bytes=1 << 20)])]), 11)
    finally:
        await conn.close()
    part = response.responses[0].partitions[0]
    return part.error_code, part.last_stable_offset, [(t.producer_id, t.first_offset) for t in part.aborted_transactions or ()]


async def test_followers_rebuild_transaction_state_and_a_new_leader_serves_read_committed(tmp_path):
    _, configs = cluster_configs(tmp_path, **FAST)
    nodes = [Broker(c) for c in configs]
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        await until(lambda: len(active(nodes)) == 1 and all(b.services.live_brokers() == [1, 2, 3] for b in nodes),
                    what="the cluster")
        conn = NodeConnection(1, "127.0.0.1", nodes[0].bound_port)
        created = await conn.request(CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=3, assignments=[],
                                               configs=[])]), 7)
        await conn.close()
        assert created.topics[0].error_code == 0, created
        await until(lambda: in_sync(nodes, 3) and len(replicas(nodes)) == 3 and any(p.is_leader for p in replicas(nodes)),
                    what="three replicas and a leader")
        leader = leader_of(nodes)
        conn = NodeConnection(leader.node_id, "127.0.0.1", leader.bound_port)
        pids = []
        for _ in range(2):
            for _ in range(200):
                r = await conn.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000), 4)
                if r.error_code == 0:
                    pids.append(r.producer_id)
                    break
                await asyncio.sleep(0.05)  # an id block on its way from the controller: retried as clients do
        aborter, committer = pids

        async def produce(pid: int, seq: int, values: list[bytes]) -> None:
            batch = build_batch([(None, v, None, NOW) for v in values], producer_id=pid, producer_epoch=0,
                                base_sequence=seq, transactional=True)
            r = await conn.request(ProduceRequest(transactional_id="raw", acks=-1, timeout_ms=20_000, topic_data=[
                PTopic(name=TOPIC, partition_data=[PTopic.PartitionProduceData(index=0, records=batch)])]), 9)
            assert r.responses[0].partition_responses[0].error_code == 0

        async def end(pid: int, commit: bool) -> int:
            r = await conn.request(WriteTxnMarkersRequest(markers=[Marker(
                producer_id=pid, producer_epoch=0, transaction_result=commit, coordinator_epoch=1,
                topics=[Marker.WritableTxnMarkerTopic(name=TOPIC, partition_indexes=[0])])]), 1)
            return r.markers[0].topics[0].partitions[0].error_code

        await produce(aborter, 0, [b"aborted-0", b"aborted-1"])
        await produce(committer, 0, [b"committed-0"])
        await produce(aborter, 2, [b"aborted-2"])
        assert await end(aborter, commit=False) == 0
        await produce(committer, 1, [b"committed-1"])
        await produce(aborter, 3, [b"aborted-3"])  # a second transaction of the aborter, left open for now
        assert await end(committer, commit=True) == 0
        assert await end(aborter, commit=False) == 0
        await conn.close()

        await until(lambda: in_sync(nodes, 3), what="followers caught up")
        states = [txn_state(p) for p in replicas(nodes)]
        assert states[0] == states[1] == states[2]
        assert [entry[:3] for entry in states[0][0]] == [(aborter, 0, 4), (aborter, 6, 8)]
        assert await fetch_committed(leader) == (0, 9, [(aborter, 0), (aborter, 6)])

        # The leader leaves; the new one answers read_committed readers the same, at once.
        await leader.stop()
        nodes.remove(leader)
        await until(lambda: len(active(nodes)) == 1 and any(p.is_leader for p in replicas(nodes)), what="a new leader")
        successor = leader_of(nodes)
        await until(lambda: successor.data.get_partition(TP).high_watermark == 9, what="the new leader's HW")
        assert await fetch_committed(successor) == (0, 9, [(aborter, 0), (aborter, 6)])
        bootstrap = ",".join(f"127.0.0.1:{b.bound_port}" for b in nodes)
        values = await asyncio.to_thread(read_committed_values, bootstrap, 2)
        assert values == [b"committed-0", b"committed-1"]
    finally:
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)
