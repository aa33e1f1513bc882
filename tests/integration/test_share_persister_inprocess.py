"""The broker's SharePersister (broker/share/network_persister.py) on three nodes in one process (real sockets):

  * a broker that is not the share coordinator reaches it over the inter-broker listener, and the calls it
    makes in one event-loop turn for one coordinator and group go out as one request;
  * the coordinator's own broker calls it in process (no request);
  * two writes of one share-partition made together reach the coordinator in order;
  * the coordinator's broker stops: the others' calls are answered NOT_COORDINATOR / not reached, retried,
    and answered by the new coordinator, which holds everything written before.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from odradek.broker.node_client import NodeConnection
from odradek.broker.server import Broker
from odradek.broker.share.network_persister import NetworkPersister
from odradek.broker.share.persister import SharePartitionKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import CreateTopicsRequest
from odradek.replication.share import RecordState, ShareSnapshot, StateBatch

from tests.harness.inprocess import active, cluster_configs, until

pytestmark = pytest.mark.timeout(180)

A, ACK = RecordState.AVAILABLE, RecordState.ACKNOWLEDGED
SETTINGS = {"replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 100, "replica.lag.time.max.ms": 3000,
            "share.coordinator.state.topic.num.partitions": 1, "share.coordinator.state.topic.replication.factor": 3,
            "share.coordinator.state.topic.min.isr": 2}


def persister(broker: Broker) -> NetworkPersister:
    p = broker.services.share_persister
    assert isinstance(p, NetworkPersister)
    return p


async def test_remote_batched_local_and_failover(tmp_path):
    _, configs = cluster_configs(tmp_path, **SETTINGS)
    nodes = [Broker(c) for c in configs]
    conn: NodeConnection | None = None
    try:
        await asyncio.gather(*(b.start() for b in nodes))
        await until(lambda: len(active(nodes)) == 1, what="an active controller")
        await until(lambda: all(b.services.live_brokers() == [1, 2, 3] for b in nodes), what="three brokers")
        conn = NodeConnection(1, "127.0.0.1", nodes[0].bound_port)
        created = await conn.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name="queue", num_partitions=4, replication_factor=3, assignments=[], configs=[])], timeout_ms=10_000), 5)
        assert created.topics[0].error_code == 0
        await until(lambda: all("queue" in b.metadata.image.topics_by_name for b in nodes), what="the topic")
        topic_id: uuid.UUID = nodes[0].metadata.image.topics_by_name["queue"].topic_id
        keys = [SharePartitionKey("workers", topic_id, p) for p in range(4)]

        # The first call creates __share_group_state; retried until its partition has a leader and full ISR.
        first = nodes[0]
        assert await persister(first).initialize(keys[0], 0, 0) is ErrorCode.NONE
        coordinator_id = persister(first).coordinator_of(keys[0])
        coordinator = next(b for b in nodes if b.node_id == coordinator_id)
        remote = next(b for b in nodes if b.node_id != coordinator_id)

        sent = persister(remote).requests_sent
        codes = await asyncio.gather(*(persister(remote).initialize(k, 0, 0) for k in keys[1:]))
        assert codes == [ErrorCode.NONE] * 3
        assert persister(remote).requests_sent == sent + 1  # three calls, one request

        # Two writes of one share-partition made together: in order, the second wins.
        sent = persister(remote).requests_sent
        w1 = persister(remote).write(keys[1], 1, ShareSnapshot(0, 0, (StateBatch(0, 9, A, 1),)))
        w2 = persister(remote).write(keys[1], 1, ShareSnapshot(0, 5, (StateBatch(5, 9, ACK, 1),)))
        assert await asyncio.gather(w1, w2) == [ErrorCode.NONE, ErrorCode.NONE]
        assert persister(remote).requests_sent == sent + 2
        read = await persister(remote).read(keys[1], 1)
        assert read.error_code is ErrorCode.NONE and read.snapshot == ShareSnapshot(0, 5, (StateBatch(5, 9, ACK, 1),))

        local_before = persister(coordinator).local_calls
        assert (await persister(coordinator).read(keys[1], 1)).snapshot == read.snapshot
        assert persister(coordinator).local_calls == local_before + 1

        summary = await persister(remote).read_summary(keys[1])
        assert (summary.error_code, summary.start_offset, summary.leader_epoch) == (ErrorCode.NONE, 5, 1)
        assert await persister(remote).write(keys[2], 1, ShareSnapshot(0, 0, (StateBatch(0, 0, ACK, 1),))) is ErrorCode.NONE

        # The coordinator's broker goes away; a survivor's calls are retried until the new coordinator answers.
        survivors = [b for b in nodes if b is not coordinator]
        await coordinator.stop()
        nodes.remove(coordinator)
        asker = survivors[0]
        read = await persister(asker).read(keys[1], 2)
        assert read.error_code is ErrorCode.NONE, read
        assert read.snapshot == ShareSnapshot(0, 5, (StateBatch(5, 9, ACK, 1),))
        assert persister(asker).coordinator_of(keys[1]) != coordinator_id
        assert (await persister(asker).read(keys[2], 2)).snapshot == ShareSnapshot(0, 0, (StateBatch(0, 0, ACK, 1),))
        # The old leader epoch is fenced now; delete forgets.
        assert await persister(asker).write(keys[1], 1, ShareSnapshot(0, 5, ())) is ErrorCode.FENCED_LEADER_EPOCH
        assert await persister(asker).delete("workers", [(topic_id, 1)]) == {(topic_id, 1): ErrorCode.NONE}
        assert (await persister(asker).read(keys[1], 2)).snapshot == ShareSnapshot(0, -1, ())
    finally:
        if conn is not None:
            await conn.close()
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)
