"""The first acks=all produce to a new RF=3 partition: how long until it is acknowledged.

    python -m bench.first_ack [--topics 30] [--port 31100]

One three-node cluster (`odradek cluster up --nodes 3`, the replication bench's helper). For each of
`--topics` topics, one at a time: CreateTopics (1 partition, RF=3) to node 1; Metadata asked of every node
every 2 ms until all three name a leader; then one acks=all Produce of one record to that leader, sent
again every 2 ms while the leader refuses it (it may still be applying the metadata). Three figures, each
p50 / p90 / p99 / max over the topics:

  * create -> all nodes know: the CreateTopics answer until every node's Metadata names the leader
    (metadata propagation);
  * accepted produce -> ack: the Produce the leader accepted, from its send to its acknowledgement. This
    is the followers' part: they must ask for the new partition (a fetch parked at the leader without
    it, or a partition backing off after the leader refused it, delays that) and fetch the record;
  * create -> ack: both, as a producer sees it;
  * next produce -> ack: a second acks=all produce right after the first is acknowledged (the followers
    fetch the partition by then): the floor the first one is compared with.

It times requests on one loopback machine; compare trees in the same session, one after the other.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from odradek.broker.node_client import NodeConnection
from odradek.protocol.messages import CreateTopicsRequest, MetadataRequest, ProduceRequest
from odradek.protocol.records import build_batch

from .replication_bench import NODES, Cluster

POLL_S = 0.002


async def _leader(conn: NodeConnection, topic: str) -> int:
    md = await conn.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12, 5)
    found = [t for t in md.topics if t.name == topic and t.error_code == 0 and t.partitions]
    return found[0].partitions[0].leader_id if found else -1


def _produce(topic: str) -> ProduceRequest:
    Topic = ProduceRequest.TopicProduceData
    batch = bytes(build_batch([(None, b"first", None, int(time.time() * 1000))]))
    return ProduceRequest(transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
        Topic(name=topic, partition_data=[Topic.PartitionProduceData(index=0, records=batch)])])


async def _one(conns: dict[int, NodeConnection], topic: str) -> tuple[float, float, float, float]:
    """(create -> all know, accepted produce -> ack, create -> ack, the next produce -> ack), in ms."""
    created = await conns[1].request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name=topic, num_partitions=1, replication_factor=3, assignments=[], configs=[])], timeout_ms=30_000), 7, 30)
    if created.topics[0].error_code:
        raise RuntimeError(f"CreateTopics {topic}: error {created.topics[0].error_code}")
    t_create = time.perf_counter()
    leaders: dict[int, int] = {}
    while len(leaders) < len(conns):
        for node, conn in conns.items():
            if node not in leaders and (leader := await _leader(conn, topic)) >= 0:
                leaders[node] = leader
        if len(leaders) < len(conns):
            await asyncio.sleep(POLL_S)
    t_known = time.perf_counter()
    leader = leaders[1]
    while True:
        t_send = time.perf_counter()
        response = await conns[leader].request(_produce(topic), 9, 40)
        if response.responses[0].partition_responses[0].error_code == 0:
            t_ack = time.perf_counter()
            break
        await asyncio.sleep(POLL_S)
    t_next = time.perf_counter()  # the next produce: the steady acks=all round trip, for comparison
    response = await conns[leader].request(_produce(topic), 9, 40)
    if response.responses[0].partition_responses[0].error_code:
        raise RuntimeError(f"second produce to {topic}: error {response.responses[0].partition_responses[0].error_code}")
    t_next_ack = time.perf_counter()
    return ((t_known - t_create) * 1000, (t_ack - t_send) * 1000, (t_ack - t_create) * 1000,
            (t_next_ack - t_next) * 1000)


async def _run(cluster: Cluster, topics: int) -> list[tuple[float, float, float, float]]:
    conns = {n: NodeConnection(n, "127.0.0.1", cluster.client_port(n), backoff_s=0.0) for n in NODES}
    try:
        return [await _one(conns, f"first-ack-{i}") for i in range(topics)]
    finally:
        for conn in conns.values():
            await conn.close()


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.first_ack", description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=30)
    parser.add_argument("--port", type=int, default=0, help="first of six ports (default: a free block)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        cluster = Cluster(Path(d))
        if args.port:
            cluster.port = args.port
        cluster.up()
        try:
            rows = asyncio.run(_run(cluster, args.topics))
        finally:
            cluster.down()
    for index, name in enumerate(("create -> all nodes know", "accepted produce -> ack", "create -> ack",
                                  "next produce -> ack")):
        xs = [row[index] for row in rows]
        print(f"{name:26s} n={len(xs)} p50={_pct(xs, .5):7.1f} ms  p90={_pct(xs, .9):7.1f} ms  "
              f"p99={_pct(xs, .99):7.1f} ms  max={max(xs):7.1f} ms")


if __name__ == "__main__":
    main()
