"""Metadata propagation: from a CreateTopics answer to every node serving the new topic.

    python -m bench.metadata_propagation [--topics N] [--partitions P] [--json]

One three-node cluster (`odradek cluster up --nodes 3`, combined broker + controller nodes on loopback,
the replication bench's `Cluster`). Topics are created one at a time (RF=3, P partitions), each by
CreateTopics v7 sent to a node picked in turn, so that two in three are forwarded to the active controller
(KIP-590) as a client's would be. The clock starts when the CreateTopics answer arrives: Kafka's
controller answers once the topic's records are committed in the metadata log, so from then on the topic
exists, and what is measured is how long the brokers take to learn it. Then each node is asked Metadata
for the topic, tightly (one request in flight per node, the next sent as soon as the answer arrives, each
node on its own connection), until every node answers it with no error and a leader for every partition;
the figure per node is when its first such answer arrived, and the topic's figure is the slowest node's.

What that covers: the committed records reaching each node (the Raft followers' Fetch of
`__cluster_metadata`, the node's metadata loader publishing a new image, its Metadata handler answering
from it). A second figure goes one step further, as a producer would: once every node serves the topic,
an acks=all Produce of one record to each partition's leader, sent again on any error until acknowledged;
its figure is from the CreateTopics answer to the last partition's acknowledgement (the leader appended
it and both followers, which learnt of the partition from their own metadata, fetched it).

Nothing is pinned; the three servers and the prober share the machine's cores. The cluster is otherwise
idle (the issue's case: "a producer sent 15 ms after CreateTopics"). Nothing asserts a figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

from .replication_bench import NODES, Cluster


def _percentile(values: list[float], p: float) -> float:
    """Nearest rank: the smallest value with at least p % of the values at or below it."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), math.ceil(p / 100 * len(ordered))))
    return ordered[rank - 1]


async def _probe(cluster: Cluster, topics: int, partitions: int, prefix: str) -> list[dict]:
    from odradek.broker.node_client import NodeConnection
    from odradek.protocol.messages import CreateTopicsRequest, MetadataRequest, ProduceRequest
    from odradek.protocol.records import build_batch

    conns = {n: NodeConnection(n, "127.0.0.1", cluster.client_port(n), backoff_s=0.0, client_id="md-prop")
             for n in NODES}
    admin = {n: NodeConnection(n, "127.0.0.1", cluster.client_port(n), backoff_s=0.0, client_id="md-prop-admin")
             for n in NODES}

    async def serving(node_id: int, name: str, deadline: float) -> tuple[float, int]:
        """When `node_id` first answers `name` with a leader for every partition; and how many answers it took."""
        request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                                  allow_auto_topic_creation=False)
        asked = 0
        while time.monotonic() < deadline:
            md = await conns[node_id].request(request, 12, timeout_s=10)
            asked += 1
            found = [t for t in md.topics if t.name == name]
            if (found and found[0].error_code == 0 and len(found[0].partitions) == partitions
                    and all(p.error_code == 0 and p.leader_id >= 0 for p in found[0].partitions)):
                return time.monotonic(), asked
        raise RuntimeError(f"node {node_id} did not serve {name} within the deadline")

    async def produced(name: str, leaders: dict[int, int], deadline: float) -> tuple[float, int]:
        """When an acks=all Produce of one record to every partition's leader was first acknowledged; and
        how many answers had an error before."""
        errors = 0
        for index, leader in sorted(leaders.items()):
            batch = build_batch([(None, b"mdprop", [], int(time.time() * 1000))])
            request = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
                ProduceRequest.TopicProduceData(name=name, partition_data=[
                    ProduceRequest.TopicProduceData.PartitionProduceData(index=index, records=batch)])])
            while True:
                answer = await conns[leader].request(request, 9, timeout_s=15)
                if answer.responses[0].partition_responses[0].error_code == 0:
                    break
                errors += 1
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name}-{index} not acknowledged within the deadline")
        return time.monotonic(), errors

    async def leaders_of(name: str) -> dict[int, int]:
        md = await conns[NODES[0]].request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)],
                                                           allow_auto_topic_creation=False), 12)
        return {p.partition_index: p.leader_id for p in md.topics[0].partitions}

    rows = []
    try:
        # Warm every connection (and each node's handler path) before the first measured topic.
        for n in NODES:
            await conns[n].request(MetadataRequest(topics=[]), 12)
        for i in range(topics):
            name = f"{prefix}-{i}"
            via = NODES[i % len(NODES)]
            request = CreateTopicsRequest(timeout_ms=30_000, validate_only=False, topics=[
                CreateTopicsRequest.CreatableTopic(name=name, num_partitions=partitions, replication_factor=3,
                                                   assignments=[], configs=[])])
            sent = time.monotonic()
            response = await admin[via].request(request, 7, timeout_s=60)
            answered = time.monotonic()
            if response.topics[0].error_code:
                raise RuntimeError(f"CreateTopics {name}: error {response.topics[0].error_code} "
                                   f"{response.topics[0].error_message}")
            seen = await asyncio.gather(*(serving(n, name, answered + 30) for n in NODES))
            per_node = {n: (t - answered) * 1000 for n, (t, _) in zip(NODES, seen)}
            acked, produce_errors = await produced(name, await leaders_of(name), answered + 30)
            rows.append({"topic": name, "via": via, "create_ms": (answered - sent) * 1000, "node_ms": per_node,
                         "all_ms": max(per_node.values()), "metadata_requests": sum(a for _, a in seen),
                         "produce_ms": (acked - answered) * 1000, "produce_errors": produce_errors})
            await asyncio.sleep(0.2)  # idle between topics: each creation meets a quiet cluster
    finally:
        for c in (*conns.values(), *admin.values()):
            await c.close()
    return rows


def run(*, topics: int = 50, partitions: int = 1, workdir: str | None = None) -> dict:
    results: dict = {"topics": topics, "partitions": partitions, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        cluster = Cluster(Path(tmp) / "cluster")
        cluster.up()
        try:
            cluster.wait(lambda: cluster.quorum_leader(NODES) is not None, "a quorum leader")
            results["controller"] = cluster.quorum_leader(NODES)
            results["rows"] = asyncio.run(_probe(cluster, topics, partitions, "mdprop"))
        finally:
            cluster.down()
    return results


def summary(results: dict) -> dict:
    rows = results["rows"]
    every = [r["all_ms"] for r in rows]
    remote = [ms for r in rows for n, ms in r["node_ms"].items() if int(n) != results["controller"]]
    return {
        "all_nodes_p50_ms": _percentile(every, 50), "all_nodes_p99_ms": _percentile(every, 99),
        "all_nodes_max_ms": max(every),
        "follower_node_p50_ms": _percentile(remote, 50), "follower_node_p99_ms": _percentile(remote, 99),
        "produce_p50_ms": _percentile([r["produce_ms"] for r in rows], 50),
        "produce_p99_ms": _percentile([r["produce_ms"] for r in rows], 99),
        "produce_errors": sum(r["produce_errors"] for r in rows),
        "create_p50_ms": statistics.median(r["create_ms"] for r in rows),
    }


def report(results: dict) -> str:
    s = summary(results)
    return "\n".join([
        f"{results['topics']} topics created one at a time (RF=3, {results['partitions']} partition(s)), 3 combined "
        f"nodes on {results['cpus']} cores, active controller: node {results['controller']}",
        f"CreateTopics answer -> every node serves the topic with a leader: p50 {s['all_nodes_p50_ms']:.1f} ms, "
        f"p99 {s['all_nodes_p99_ms']:.1f} ms, max {s['all_nodes_max_ms']:.1f} ms",
        f"  per node that is not the active controller: p50 {s['follower_node_p50_ms']:.1f} ms, "
        f"p99 {s['follower_node_p99_ms']:.1f} ms",
        f"CreateTopics answer -> an acks=all Produce acknowledged on every partition: p50 {s['produce_p50_ms']:.1f} ms, "
        f"p99 {s['produce_p99_ms']:.1f} ms ({s['produce_errors']} error answers before, all topics)",
        f"CreateTopics itself (send -> answer): p50 {s['create_p50_ms']:.1f} ms",
    ])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Metadata propagation: CreateTopics answer -> every node serving it.")
    parser.add_argument("--topics", type=int, default=50, help="topics created, one at a time")
    parser.add_argument("--partitions", type=int, default=1, help="partitions per topic")
    parser.add_argument("--workdir", default=None, help="where the cluster's data directories go")
    parser.add_argument("--json", action="store_true", help="print the raw results as JSON")
    args = parser.parse_args(argv)
    results = run(topics=args.topics, partitions=args.partitions, workdir=args.workdir)
    print(json.dumps({**results, "summary": summary(results)}, indent=2) if args.json else report(results))


if __name__ == "__main__":
    main()
