"""min.insync.replicas on __consumer_offsets, three nodes in one process: the offsets topic at RF=3 with
min.insync.replicas=2, and both followers of the group's partition stopping their fetches.

- A commit appended while the ISR was whole and then left waiting: the followers drop out of the ISR
  (replica.lag.time.max.ms), and the high watermark stays where it was, since it does not move over an ISR
  below min.insync.replicas (Kafka 4's strict min ISR, KIP-966: what keeps the replicas that left the ISR
  eligible leaders). The commit is answered COORDINATOR_NOT_AVAILABLE at offsets.commit.timeout.ms.
- Commits while the ISR is below min.insync.replicas are refused at once, and write nothing.
- The followers fetch again, rejoin the ISR, and commits are accepted (the timed-out one takes effect too,
  as in Kafka: it was in the log); no acknowledged commit was lost."""

from __future__ import annotations

import asyncio
import time

import pytest

from odradek.broker.node_client import NodeConnection
from odradek.broker.server import Broker
from odradek.protocol.errors import ErrorCode

from tests.harness.inprocess import cluster_configs, until
from tests.harness.offsets_cluster import (
    OFFSETS,
    commit_request,
    committed,
    fetch_again,
    offsets_replicas,
    start_with_offsets_in_sync,
)

pytestmark = pytest.mark.timeout(150)

COMMIT_TIMEOUT_MS = 5_000
SETTINGS = {"replica.fetch.wait.max.ms": 100, "replica.fetch.backoff.ms": 100,
            "offsets.topic.num.partitions": 1, "offsets.topic.replication.factor": 3, "min.insync.replicas": 2,
            "replica.lag.time.max.ms": 1500, "offsets.commit.timeout.ms": COMMIT_TIMEOUT_MS}


async def test_offset_commits_follow_min_insync_replicas_of_the_offsets_partition(tmp_path):
    _, configs = cluster_configs(tmp_path, **SETTINGS)
    nodes = [Broker(c) for c in configs]
    try:
        coordinator = await start_with_offsets_in_sync(nodes)
        leader = coordinator.data.get_partition(OFFSETS)
        conn = NodeConnection(coordinator.node_id, "127.0.0.1", coordinator.bound_port)
        assert (await conn.request(commit_request("g", 5), 8)).topics[0].partitions[0].error_code == 0
        acknowledged = 5

        # Both followers stop fetching. A commit appended now waits for them; they leave the ISR, and the
        # high watermark stays below the commit (strict min ISR) until the write times out.
        followers = [b for b in nodes if b is not coordinator]
        await asyncio.gather(*(b.replica_fetchers.shutdown() for b in followers))
        hw = leader.high_watermark
        answer = await asyncio.wait_for(conn.request(commit_request("g", 6), 8), timeout=60)
        assert answer.topics[0].partitions[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        await until(lambda: leader.isr == (coordinator.node_id,), what="the followers out of the ISR")
        assert leader.high_watermark == hw < leader.log_end_offset

        # Below min.insync.replicas: refused at once, and nothing is written.
        end = leader.log_end_offset
        for offset in (7, 8):
            started = time.monotonic()
            answer = await conn.request(commit_request("g", offset), 8)
            assert answer.topics[0].partitions[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
            assert time.monotonic() - started < 2
        assert leader.log_end_offset == end

        # The followers fetch again and rejoin the ISR: commits are accepted again.
        for broker in followers:
            fetch_again(broker)
        await until(lambda: len(leader.isr) == 3 and leader.high_watermark == leader.log_end_offset,
                    what="the ISR whole again")
        assert (await conn.request(commit_request("g", 9), 8)).topics[0].partitions[0].error_code == 0
        acknowledged = 9
        assert await committed(conn, "g") == acknowledged
        await conn.close()
        # Every replica's log reaches the leader's end: whichever leads the partition next holds the commits.
        await until(lambda: all(p.log_end_offset == leader.log_end_offset for p in offsets_replicas(nodes)),
                    what="the followers caught up")
    finally:
        await asyncio.gather(*(b.stop() for b in nodes), return_exceptions=True)
