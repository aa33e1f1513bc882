"""Transactions on three nodes in one process: `__transaction_state` replicated (RF 3), a topic whose
partitions are led by different nodes, so the coordinator sends WriteTxnMarkers to other nodes and the
leaders verify first writes with a coordinator elsewhere. The coordinator's node leaves (controlled
shutdown) between transactions: another node loads its partition and the same producer goes on; every
transaction ends Complete (none left hanging) and read_committed readers see exactly the committed records.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from odradek.broker.node_client import NodeConnection
from odradek.broker.server import Broker
from odradek.coordinator.partitioning import TRANSACTION_STATE_TOPIC, partition_for
from odradek.protocol.messages import CreateTopicsRequest

from tests.harness.inprocess import active, cluster_configs, until

pytestmark = pytest.mark.timeout(180)

TOPIC = "txn-replicated"
PARTITIONS = 3
TXN_ID = "cluster-txn"
SETTINGS = {"replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 100,
            "transaction.state.log.num.partitions": 3, "transaction.state.log.replication.factor": 3,
            "transaction.state.log.min.isr": 2}


def run_transactions(bootstrap: str, producer: Producer | None, first: int, count: int, abort_every: int) -> tuple:
    if producer is None:
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TXN_ID, "linger.ms": 5})
        producer.init_transactions(60)
    committed = []
    for t in range(first, first + count):
        producer.begin_transaction()
        values = [b"t%d-%d" % (t, i) for i in range(9)]
        for i, v in enumerate(values):
            producer.produce(TOPIC, value=v, partition=i % PARTITIONS)
        if t % abort_every == abort_every - 1:
            producer.flush(30)
            producer.abort_transaction(60)
        else:
            producer.commit_transaction(60)
            committed.extend(values)
    return producer, committed


def read_committed(bootstrap: str, expected: int, timeout_s: float = 60.0) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-cluster-reader", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.assign([KafkaTopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    values: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    settle = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                values.append(msg.value())
            if len(values) >= expected:
                settle = settle or time.monotonic() + 1.0
                if time.monotonic() > settle:
                    break
    finally:
        consumer.close()
    return values


def coordinator_node(nodes) -> Broker:
    index = partition_for(TXN_ID, SETTINGS["transaction.state.log.num.partitions"])
    leader = nodes[0].metadata.image.topics_by_name[TRANSACTION_STATE_TOPIC].partitions[index].leader
    return next(b for b in nodes if b.node_id == leader)


def states(node) -> dict:
    coordinator = node.services.transactions_if_started
    if coordinator is None:
        return {}
    return {txn: m.state.display_name for p in coordinator.runtime.partitions
            for txn, m in coordinator.runtime.shard(p).transactions.items()}


async def test_transactions_across_nodes_and_a_coordinator_failover(tmp_path):
    _, configs = cluster_configs(tmp_path, **SETTINGS)
    nodes = [Broker(c) for c in configs]
    producer = None
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        await until(lambda: len(active(nodes)) == 1, what="an active controller")
        await until(lambda: all(b.services.live_brokers() == [1, 2, 3] for b in nodes), what="three unfenced brokers")
        conn = NodeConnection(1, "127.0.0.1", nodes[0].bound_port)
        created = await conn.request(CreateTopicsRequest(timeout_ms=5000, validate_only=False, topics=[
            CreateTopicsRequest.CreatableTopic(name=TOPIC, num_partitions=PARTITIONS, replication_factor=3,
                                               assignments=[], configs=[])]), 7)
        await conn.close()
        assert created.topics[0].error_code == 0
        await until(lambda: all(TOPIC in b.metadata.image.topics_by_name
                                and len(b.metadata.image.topics_by_name[TOPIC].partitions[i].isr) == 3
                                for b in nodes for i in range(PARTITIONS)), what="the topic in sync")
        leaders = {p.leader for p in nodes[0].metadata.image.topics_by_name[TOPIC].partitions.values()}
        assert len(leaders) > 1  # markers and verifications cross nodes
        bootstrap = ",".join(f"127.0.0.1:{b.bound_port}" for b in nodes)

        producer, committed = await asyncio.to_thread(run_transactions, bootstrap, None, 0, 6, 3)
        await until(lambda: TRANSACTION_STATE_TOPIC in nodes[0].metadata.image.topics_by_name, what="the txn topic")
        victim = coordinator_node(nodes)
        await until(lambda: states(victim).get(TXN_ID) in ("CompleteCommit", "CompleteAbort"), what="markers done")

        await victim.stop()  # controlled shutdown: its leaderships, the coordinator's partition too, move on
        nodes.remove(victim)
        bootstrap = ",".join(f"127.0.0.1:{b.bound_port}" for b in nodes)
        await until(lambda: len(active(nodes)) == 1, what="an active controller after the coordinator left")
        _, more = await asyncio.to_thread(run_transactions, bootstrap, producer, 6, 6, 3)
        committed += more
        successor = coordinator_node(nodes)
        assert successor is not victim
        await until(lambda: states(successor).get(TXN_ID) in ("CompleteCommit", "CompleteAbort"),
                    what="the new coordinator completed the last transaction")
        got = await asyncio.to_thread(read_committed, bootstrap, len(committed))
        assert sorted(got) == sorted(committed)  # no aborted record, no loss, no duplicate
    finally:
        if producer is not None:
            await asyncio.to_thread(producer.flush, 5)
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)
