"""The share coordinator on a three-node cluster of real processes (`odradek cluster up`: `__share_group_state`
with three replicas, min ISR 2), driven by the bundled client's raw connection as a partition leader would:

  * FindCoordinator key type 2 (SHARE) names the leader of the key's `__share_group_state` partition;
  * InitializeShareGroupState, WriteShareGroupState (more writes than updates per snapshot, so the log holds
    snapshots and updates) and ReadShareGroupState at that coordinator;
  * kill -9 of the coordinator's process: another replica leads the partition, FindCoordinator names it,
    and ReadShareGroupState there answers the same state: nothing written (acknowledged) is lost;
  * the new coordinator fences the old leader epoch (FENCED_LEADER_EPOCH) once a newer one has read.

Waits are bounded polls of the cluster's own answers, never timed assertions.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from odradek.client.connection import BrokerConnection
from odradek.coordinator.partitioning import share_coordinator_key
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    FindCoordinatorRequest,
    InitializeShareGroupStateRequest,
    MetadataRequest,
    ReadShareGroupStateRequest,
    WriteShareGroupStateRequest,
)

from tests.harness.processes import Cluster, create_with_confluent

pytestmark = pytest.mark.timeout(240)

TOPIC = "queue"
GROUP = "workers"
SETTINGS = ["share.coordinator.state.topic.num.partitions=3", "share.coordinator.snapshot.update.records.per.snapshot=2"]
RETRIABLE = {int(ErrorCode.NOT_COORDINATOR), int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
             int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)}

W = WriteShareGroupStateRequest
WB = W.WriteStateData.PartitionData.StateBatch
# What a leader reports, write after write: (start offset, [(first, last, state, count)]).
WRITES = [
    (0, [(0, 9, 0, 1)]),
    (0, [(0, 4, 2, 1)]),
    (5, [(5, 6, 4, 1), (7, 9, 0, 2)]),
    (5, [(7, 7, 2, 2)]),
    (8, [(10, 12, 0, 1)]),
]
EXPECTED_START = 8
EXPECTED = [(8, 9, 0, 2), (10, 12, 0, 1)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("sharecoord") / "cluster", overrides=SETTINGS)
    c.up()
    yield c
    c.down()


async def ask(cluster: Cluster, node_id: int, request, version: int):
    conn = BrokerConnection("127.0.0.1", cluster.client_port(node_id), node_id=node_id, client_id="share-leader")
    try:
        await conn.connect()
        return await conn.send(request, version=version, timeout_ms=10_000)
    finally:
        await conn.close()


async def until_answered(cluster: Cluster, node_of, request_of, accept, what: str, timeout_s: float = 60.0):
    """Ask `node_of()` (it may change) until `accept(response)`; connection failures are retried."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    last = None
    while loop.time() < deadline:
        node = node_of()
        if node is not None:
            try:
                last = await ask(cluster, node, *request_of())
                if accept(last):
                    return last
            except Exception as e:  # noqa: BLE001 - a node going down, a connection refused: asked again
                last = e
        await asyncio.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}; last: {last}" + cluster.logs())


def partition_error(response) -> int:
    return response.results[0].partitions[0].error_code


def test_state_survives_the_coordinators_kill(cluster):
    create_with_confluent(cluster.bootstrap(1), TOPIC, 2, 3)
    md = cluster.metadata(1, [MetadataRequest.MetadataRequestTopic(name=TOPIC)])
    asyncio.run(_scenario(cluster, md.topics[0].topic_id))


async def _scenario(cluster: Cluster, topic_id) -> None:
    key = share_coordinator_key(GROUP, topic_id, 0)
    find = FindCoordinatorRequest(key_type=2, coordinator_keys=[key])
    found = await until_answered(cluster, lambda: 1, lambda: (find, 6),
                                 lambda r: r.coordinators[0].error_code == 0, "a share coordinator")
    coordinator = found.coordinators[0].node_id
    others = [n for n in (1, 2, 3) if n != coordinator]

    I = InitializeShareGroupStateRequest
    init = I(group_id=GROUP, topics=[I.InitializeStateData(topic_id=topic_id, partitions=[
        I.InitializeStateData.PartitionData(partition=0, state_epoch=0, start_offset=0)])])
    # The ISR of a new __share_group_state partition fills within moments; until then the write is refused.
    await until_answered(cluster, lambda: coordinator, lambda: (init, 0),
                         lambda r: partition_error(r) not in RETRIABLE and partition_error(r) != int(
                             ErrorCode.NOT_ENOUGH_REPLICAS), "the initialization")
    for start, batches in WRITES:
        write = W(group_id=GROUP, topics=[W.WriteStateData(topic_id=topic_id, partitions=[W.WriteStateData.PartitionData(
            partition=0, state_epoch=0, leader_epoch=1, start_offset=start, delivery_complete_count=-1,
            state_batches=[WB(first_offset=f, last_offset=la, delivery_state=s, delivery_count=c)
                           for f, la, s, c in batches])])])
        response = await until_answered(cluster, lambda: coordinator, lambda: (write, 1),
                                        lambda r: partition_error(r) not in RETRIABLE, "a write")
        assert partition_error(response) == 0, response

    R = ReadShareGroupStateRequest

    def read(leader_epoch: int):
        return R(group_id=GROUP, topics=[R.ReadStateData(topic_id=topic_id, partitions=[
            R.ReadStateData.PartitionData(partition=0, leader_epoch=leader_epoch)])]), 0

    def state(response):
        p = response.results[0].partitions[0]
        return p.error_code, p.state_epoch, p.start_offset, [
            (b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches]

    before = await ask(cluster, coordinator, *read(1))
    assert state(before) == (0, 0, EXPECTED_START, EXPECTED)

    os.kill(cluster.pid(coordinator), signal.SIGKILL)

    moved = {}

    async def find_moved():
        async def probe():
            for asked in others:
                try:
                    r = await ask(cluster, asked, find, 6)
                except Exception:  # noqa: BLE001 - asked the other node
                    continue
                c = r.coordinators[0]
                if c.error_code == 0 and c.node_id != coordinator:
                    moved["node"] = c.node_id
                    return True
            return False

        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while loop.time() < deadline:
            if await probe():
                return moved["node"]
            await asyncio.sleep(0.3)
        raise AssertionError("no new share coordinator after the kill" + cluster.logs())

    successor = await find_moved()
    assert successor in others
    after = await until_answered(cluster, lambda: successor, lambda: read(2),
                                 lambda r: partition_error(r) not in RETRIABLE, "the new coordinator's read")
    assert state(after) == (0, 0, EXPECTED_START, EXPECTED)

    # The new leader epoch was recorded by that read: a write from the old leader is fenced.
    stale = W(group_id=GROUP, topics=[W.WriteStateData(topic_id=topic_id, partitions=[W.WriteStateData.PartitionData(
        partition=0, state_epoch=0, leader_epoch=1, start_offset=-1, delivery_complete_count=-1, state_batches=[
            WB(first_offset=8, last_offset=12, delivery_state=2, delivery_count=1)])])])
    fenced = await until_answered(cluster, lambda: successor, lambda: (stale, 1),
                                  lambda r: partition_error(r) not in RETRIABLE, "the stale write's answer")
    assert partition_error(fenced) == int(ErrorCode.FENCED_LEADER_EPOCH)
    log = (cluster.dir / f"node-{successor}" / "node.log").read_text()
    assert "share coordinator loaded partition" in log
