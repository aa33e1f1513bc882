"""`__transaction_state` on three nodes in one process, as Kafka creates and writes it.

- Created only once as many brokers are alive as `transaction.state.log.replication.factor` asks for: with
  two of three up FindCoordinator answers COORDINATOR_NOT_AVAILABLE and creates nothing; once the third
  registers, the next FindCoordinator creates it with all three replicas (never the two there were).
- Written with acks=all: with `transaction.state.log.min.isr` 3 and one node gone from the ISR the
  coordinator answers COORDINATOR_NOT_AVAILABLE (the write is refused, not acknowledged by fewer
  replicas), and answers again once the node is back in the ISR.
"""

from __future__ import annotations

import asyncio

import pytest

from odradek.broker.node_client import NodeConnection
from odradek.broker.server import Broker
from odradek.coordinator.partitioning import TRANSACTION_STATE_TOPIC
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import FindCoordinatorRequest, InitProducerIdRequest

from tests.harness.inprocess import active, cluster_configs, until

pytestmark = pytest.mark.timeout(180)

TXN_ID = "txn-state-log"
SETTINGS = {"replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 100, "replica.lag.time.max.ms": 3000,
            "transaction.state.log.num.partitions": 1, "transaction.state.log.replication.factor": 3,
            "transaction.state.log.min.isr": 3}


async def answered(request_once, accept, timeout_s: float = 60.0, what: str = "an answer"):
    """Ask again (a bounded poll of the broker's own answers) until `accept(response)`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        response = await request_once()
        if accept(response):
            return response
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last: {response}")
        await asyncio.sleep(0.1)


def txn_partition(node):
    return node.metadata.image.topics_by_name[TRANSACTION_STATE_TOPIC].partitions[0]


async def test_created_with_its_full_replication_factor_and_written_with_min_isr(tmp_path):
    _, configs = cluster_configs(tmp_path, **SETTINGS)
    nodes = [Broker(c) for c in configs[:2]]
    conns: list[NodeConnection] = []
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        await until(lambda: len(active(nodes)) == 1, what="an active controller")
        await until(lambda: all(b.services.live_brokers() == [1, 2] for b in nodes), what="two unfenced brokers")
        first = NodeConnection(1, "127.0.0.1", nodes[0].bound_port)
        conns.append(first)
        find = FindCoordinatorRequest(key=TXN_ID, key_type=1)
        for _ in range(2):  # two brokers of the three the factor asks for: not created, whoever is asked
            found = await first.request(find, 3)
            assert found.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert all(TRANSACTION_STATE_TOPIC not in b.metadata.image.topics_by_name for b in nodes)

        nodes.append(Broker(configs[2]))
        await nodes[2].start()
        await until(lambda: all(b.services.live_brokers() == [1, 2, 3] for b in nodes), what="three unfenced brokers")
        found = await answered(lambda: first.request(find, 3), lambda r: r.error_code == 0, what="a coordinator")
        await until(lambda: all(TRANSACTION_STATE_TOPIC in b.metadata.image.topics_by_name for b in nodes),
                    what="the topic everywhere")
        assert sorted(txn_partition(nodes[0]).replicas) == [1, 2, 3]
        await until(lambda: all(len(txn_partition(b).isr) == 3 for b in nodes), what="the ISR complete")

        coordinator = next(b for b in nodes if b.node_id == found.node_id)
        to_coordinator = NodeConnection(coordinator.node_id, "127.0.0.1", coordinator.bound_port)
        conns.append(to_coordinator)
        init = InitProducerIdRequest(transactional_id=TXN_ID, transaction_timeout_ms=60_000, producer_id=-1,
                                     producer_epoch=-1)
        ok = await answered(lambda: to_coordinator.request(init, 4), lambda r: r.error_code == 0, what="a producer id")

        victim_index = next(i for i, b in enumerate(nodes) if b is not coordinator and not b.controller.is_active)
        victim = nodes[victim_index]
        await victim.stop()
        rest = [b for b in nodes if b is not victim]
        await until(lambda: len(txn_partition(coordinator).isr) == 2, what="the ISR shrunk below min.isr")
        refused = await to_coordinator.request(init, 4)
        assert refused.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE  # not acknowledged by two replicas

        nodes = rest + [Broker(configs[victim_index])]
        await nodes[-1].start()
        again = await answered(lambda: to_coordinator.request(init, 4), lambda r: r.error_code == 0,
                               what="the ISR back and the write taken")
        assert again.producer_id == ok.producer_id and again.producer_epoch == ok.producer_epoch + 1
        assert len(txn_partition(coordinator).isr) == 3
    finally:
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)
