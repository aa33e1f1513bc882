"""Replication: RF=3 against RF=1 in one cluster and one run, and failover times.

    python -m bench.replication_bench [--runs N] [--duration S] [--failovers N] [--rates 5000] [--json]

One three-node cluster (`odradek cluster up --nodes 3`, combined broker + controller nodes on loopback,
min.insync.replicas=2) holds two topics of one partition, both led by node 1: `rf1` (replicas [1]) and
`rf3` (replicas [1, 2, 3]). In the same run, alternating which goes first:

- throughput: `bench/loadgen.py` produce mode (confluent-kafka, idempotent, acks=all, 100 B records,
  linger.ms 5, batch.size 1 MiB) for --duration seconds per cell: acknowledged records/s;
- CPU per record: utime + stime of each node process (/proc) over the window, minus what that node burns
  idle (its heartbeats, the quorum's fetches: measured over 2 s before each cell), per million records, for
  the leader (node 1: appends, answers the producer and serves the followers' fetches) and for each follower
  (nodes 2 and 3: fetch, append as follower). With RF=1, nodes 2 and 3 do no work for the topic;
- ack latency: loadgen latency-produce mode, acks=all, linger.ms 0, 50 msg/s for 6 s: p50 / p99 from the
  delivery callbacks; the same at each of --rates (default 5,000 msg/s).

Failover (kill -9, the node then restarted and waited back into every ISR before the next round):

- partition leader: a node leading `rf3` but not the active controller is killed while a producer sends
  100 msg/s to it; reported: kill -> a survivor's Metadata names another leader, and kill -> the first
  acknowledgement of a record sent after the kill (the client found the new leader by itself). The first
  is bounded by broker.session.timeout.ms (the controller fences the silent broker, then moves its
  leaderships), printed with the figures;
- active controller: kill -> DescribeQuorum from a survivor names another voter leader.

Nothing is pinned (three servers and the clients share the machine's cores), so read records/s as a ratio
between RF=3 and RF=1 taken side by side, not as absolute capacity. Nothing asserts a figure.

`--targets odradek,kafka` runs the same cells, one target after the other, against Apache Kafka 4.4 too:
three KRaft combined-mode nodes from the Maven jars (bench/kafka_ref.py: static quorum of the three,
internal topics RF 3 / min ISR 2, G1, -Xmx512m each), with the same kill -9 failovers (KafkaCluster), warmed
up first (WARM_UP_S of acks=all produce to rf3) since a cold JVM spends its first seconds in the JIT compiler.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .driver import Loadgen
from .procs import REPO_ROOT, bench_env, cpu_seconds, free_port

NODES = (1, 2, 3)
SESSION_TIMEOUT_MS = 9000  # Kafka's default broker.session.timeout.ms
IDLE_S = 2.0


class Cluster:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.port = _free_block(2 * len(NODES))

    def odradek(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=timeout,
                              env=bench_env(), cwd=REPO_ROOT)

    def up(self) -> None:
        args = ["cluster", "up", "--nodes", str(len(NODES)), "--dir", str(self.dir), "--port", str(self.port),
                "--override", f"broker.session.timeout.ms={SESSION_TIMEOUT_MS}", "--override", "log.level=WARNING"]
        result = self.odradek(*args)
        if result.returncode != 0:
            raise RuntimeError("cluster did not come up: " + result.stderr[-2000:])

    def down(self) -> None:
        self.odradek("cluster", "down", "--dir", str(self.dir), "--timeout", "20")

    def pid(self, node_id: int) -> int:
        return int((self.dir / f"node-{node_id}" / "node.pid").read_text())

    def client_port(self, node_id: int) -> int:
        return self.port + 2 * (node_id - 1)

    def bootstrap(self, nodes=NODES) -> str:
        return ",".join(f"127.0.0.1:{self.client_port(n)}" for n in nodes)

    def request(self, node_id: int, message, version: int, timeout_s: float = 3.0):
        from odradek.broker.node_client import NodeConnection

        async def call():
            conn = NodeConnection(node_id, "127.0.0.1", self.client_port(node_id), backoff_s=0.0)
            try:
                return await conn.request(message, version, timeout_s=timeout_s)
            finally:
                await conn.close()

        return asyncio.run(call())

    def partition(self, node_id: int, topic: str):
        from odradek.protocol.messages import MetadataRequest

        try:
            md = self.request(node_id, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]), 12)
        except OSError:
            return None
        found = [t for t in md.topics if t.name == topic and t.error_code == 0 and t.partitions]
        return found[0].partitions[0] if found else None

    def quorum_leader(self, asking) -> int | None:
        from odradek.protocol.messages import DescribeQuorumRequest

        request = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
            topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.TopicData.PartitionData(partition_index=0)])])
        for node_id in asking:
            try:
                part = self.request(node_id, request, 2).topics[0].partitions[0]
            except (OSError, IndexError):
                continue
            if part.error_code == 0 and part.leader_id >= 0:
                return part.leader_id
        return None

    def wait(self, predicate, what: str, timeout_s: float = 90.0, poll_s: float = 0.05):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(poll_s)
        raise RuntimeError(f"timed out waiting for {what}")

    def in_sync(self, topic: str, asking: int = 1):
        return self.wait(lambda: (lambda p: p if p is not None and p.leader_id >= 0 and sorted(p.isr_nodes) == sorted(p.replica_nodes)
                                  else None)(self.partition(asking, topic)), f"{topic} in sync")


class KafkaCluster(Cluster):
    """Three Apache Kafka 4.4 nodes (bench/kafka_ref.py) behind the Cluster interface the cells use: `up` starts
    every node that is not running (formatting each on first use), `pid` is a node's JVM."""

    def __init__(self, directory: Path) -> None:
        from . import kafka_ref

        self.dir = directory
        self.cp = kafka_ref.classpath()
        self.nodes = {n.node_id: n for n in kafka_ref.plan(directory, len(NODES))}

    def up(self) -> None:
        started = []
        for node in self.nodes.values():
            if not node.alive():
                node.format(self.cp)
                node.spawn(self.cp)
                started.append(node)
        for node in started:
            node.wait_started(180)

    def down(self) -> None:
        from . import kafka_ref

        kafka_ref.stop(list(self.nodes.values()))

    def pid(self, node_id: int) -> int:
        return self.nodes[node_id].pid

    def client_port(self, node_id: int) -> int:
        return self.nodes[node_id].port


WARM_UP_S = 6.0  # of acks=all produce to rf3 before Kafka's cells (KafkaCluster)


def _free_block(count: int) -> int:
    import random
    import socket

    for _ in range(200):
        base = random.randrange(20000, 60000, 2)
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    return free_port()


def _create_topics(cluster: Cluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
    topics = [NewTopic("rf1", 1, replica_assignment=[[1]], config={"min.insync.replicas": "1"}), NewTopic("rf3", 1, replica_assignment=[[1, 2, 3]])]
    for future in admin.create_topics(topics, request_timeout=30).values():
        future.result(60)
    for topic in ("rf1", "rf3"):
        cluster.in_sync(topic)


def _cpu_all(cluster: Cluster) -> dict[int, float]:
    return {n: cpu_seconds(cluster.pid(n)) for n in NODES}


def _idle_rates(cluster: Cluster) -> dict[int, float]:
    """Each node's CPU per second when no client works: heartbeats, quorum fetches, idle follower fetches."""
    c0, t0 = _cpu_all(cluster), time.perf_counter()
    time.sleep(IDLE_S)
    c1, wall = _cpu_all(cluster), time.perf_counter() - t0
    return {n: (c1[n] - c0[n]) / wall for n in NODES}


def _measure(cluster: Cluster, spec: dict, timeout_s: float) -> dict:
    idle = _idle_rates(cluster)
    gen = Loadgen(spec, None)
    try:
        gen.wait_ready(60)
        c0, t0 = _cpu_all(cluster), time.perf_counter()
        gen.send("GO")
        result = gen.wait_result(timeout_s)
        c1, wall = _cpu_all(cluster), time.perf_counter() - t0
    finally:
        gen.kill()
    result["node_cpu_s"] = {n: max(0.0, c1[n] - c0[n] - idle[n] * wall) for n in NODES}
    result["node_idle_cores"] = idle
    result["wall_s"] = wall
    return result


def throughput(cluster: Cluster, runs: int, duration_s: float) -> dict:
    cells: dict[str, list[dict]] = {"rf1": [], "rf3": []}
    for r in range(runs):
        for topic in (("rf1", "rf3") if r % 2 == 0 else ("rf3", "rf1")):
            spec = {"mode": "produce", "bootstrap": cluster.bootstrap(), "topic": topic, "partitions": 1, "acks": "all",
                    "idempotence": True, "duration_s": duration_s, "linger_ms": 5}
            res = _measure(cluster, spec, duration_s + 120)
            records = max(1, res["records"])
            cells[topic].append({
                "records_s": res["records"] / res["elapsed_s"],
                "records": res["records"],
                "leader_core_s_per_M": res["node_cpu_s"][1] / records * 1e6,
                "follower_core_s_per_M": [res["node_cpu_s"][n] / records * 1e6 for n in (2, 3)],
                "client_core_s_per_M": res["client_cpu_s"] / records * 1e6,
                "records_per_request": res["records"] / res["requests"] if res.get("requests") else None,
                "errors": res.get("errors"),
                "idle_cores": res["node_idle_cores"],
            })
    return cells


def latency(cluster: Cluster, runs: int, rate: int = 50) -> dict:
    cells: dict[str, list[dict]] = {"rf1": [], "rf3": []}
    for r in range(runs):
        for topic in (("rf1", "rf3") if r % 2 == 0 else ("rf3", "rf1")):
            spec = {"mode": "latency-produce", "bootstrap": cluster.bootstrap(), "topic": topic, "partitions": 1,
                    "acks": "all", "idempotence": True, "linger_ms": 0, "rate": rate, "duration_s": 6}
            gen = Loadgen(spec, None)
            try:
                gen.wait_ready(60)
                gen.send("GO")
                res = gen.wait_result(120)
            finally:
                gen.kill()
            cells[topic].append(res["ack_latency"])
    return cells


class _Probe:
    """A producer at ~100 msg/s to one partition, noting when each record was sent and acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 0, "message.timeout.ms": 120000, "log_level": 2,
                                  "topic.metadata.refresh.interval.ms": 5000})
        self.topic = topic
        self.acks: list[tuple[float, float]] = []  # (sent at, acknowledged at)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            sent_at = time.monotonic()
            self.producer.produce(self.topic, b"probe", partition=0,
                                  on_delivery=lambda err, msg, s=sent_at: err is None and self.acks.append((s, time.monotonic())))
            self.producer.poll(0.01)
        self.producer.flush(60)

    def first_ack_sent_after(self, t: float) -> float | None:
        later = [acked for sent, acked in list(self.acks) if sent > t]
        return min(later) if later else None

    def close(self) -> None:
        self.stop.set()
        self.thread.join(90)


def _restart(cluster: Cluster, node_id: int) -> None:
    cluster.up()  # starts the stopped node again with its data
    cluster.in_sync("rf3")
    cluster.wait(lambda: cluster.quorum_leader(NODES) is not None, "a quorum leader")


def failover(cluster: Cluster, rounds: int) -> dict:
    leader_rows, controller_rows = [], []
    for _ in range(rounds):
        # A partition leader that is not the active controller: move rf3's leadership to such a node.
        controller = cluster.wait(lambda: cluster.quorum_leader(NODES), "a quorum leader")
        target = next(n for n in NODES if n != controller)
        _lead(cluster, "rf3", target)
        probe = _Probe(cluster.bootstrap(), "rf3")
        cluster.wait(lambda: len(probe.acks) > 20, "the probe producing")
        survivor = next(n for n in NODES if n != target)
        before = cluster.wait(lambda: (lambda p: p if p is not None and p.leader_id == target else None)(
            cluster.partition(survivor, "rf3")), "the survivor seeing the leader")
        t0 = time.monotonic()
        os.kill(cluster.pid(target), signal.SIGKILL)
        cluster.wait(lambda: (lambda p: p is not None and p.leader_id not in (-1, target) and p.leader_epoch > before.leader_epoch)(
            cluster.partition(survivor, "rf3")), "a new leader")
        t_meta = time.monotonic()
        t_client = cluster.wait(lambda: probe.first_ack_sent_after(t0), "the producer acknowledged by the new leader", 120)
        probe.close()
        leader_rows.append({"new_leader_s": t_meta - t0, "client_resumed_s": t_client - t0})
        _restart(cluster, target)

        controller = cluster.wait(lambda: cluster.quorum_leader(NODES), "a quorum leader")
        survivors = [n for n in NODES if n != controller]
        t0 = time.monotonic()
        os.kill(cluster.pid(controller), signal.SIGKILL)
        cluster.wait(lambda: (lambda x: x is not None and x != controller)(cluster.quorum_leader(survivors)), "a new controller")
        controller_rows.append({"new_controller_s": time.monotonic() - t0})
        _restart(cluster, controller)
    return {"partition_leader": leader_rows, "active_controller": controller_rows}


def _lead(cluster: Cluster, topic: str, node_id: int) -> None:
    """Make `node_id` the leader of `topic`-0: replicas reordered with it first, then a preferred election."""
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    part = cluster.in_sync(topic)
    if part.leader_id == node_id:
        return
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(), request_timeout_ms=30000)
    try:
        order = [node_id] + [n for n in part.replica_nodes if n != node_id]
        admin.alter_partition_reassignments({TopicPartition(topic, 0): order})
        cluster.wait(lambda: (lambda p: p is not None and list(p.replica_nodes) == order)(cluster.partition(1, topic)),
                     "the new replica order")
        cluster.wait(lambda: admin.elect_leaders(0, {topic: [0]}, raise_errors=False) is not None
                     and (lambda p: p is not None and p.leader_id == node_id)(cluster.partition(1, topic)), "the preferred leader", 60, 0.5)
    finally:
        admin.close()


def run(*, runs: int = 3, duration_s: float = 3.0, failovers: int = 2, workdir: str | None = None,
        target: str = "odradek", rates: tuple[int, ...] = (5000,)) -> dict:
    from confluent_kafka import libversion

    results: dict = {"client": f"librdkafka {libversion()[0]}", "runs": runs, "duration_s": duration_s,
                     "broker_session_timeout_ms": SESSION_TIMEOUT_MS, "cpus": os.cpu_count(), "target": target}
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        cluster = KafkaCluster(Path(tmp) / "cluster") if target == "kafka" else Cluster(Path(tmp) / "cluster")
        try:
            cluster.up()
            _create_topics(cluster)
            if target == "kafka":
                _measure(cluster, {"mode": "produce", "bootstrap": cluster.bootstrap(), "topic": "rf3", "partitions": 1,
                                   "acks": "all", "idempotence": True, "duration_s": WARM_UP_S, "linger_ms": 5},
                         WARM_UP_S + 120)
            results["throughput"] = throughput(cluster, runs, duration_s)
            results["latency"] = latency(cluster, runs)
            results["latency_by_rate"] = {str(rate): latency(cluster, runs, rate) for rate in rates}
            results["failover"] = failover(cluster, failovers) if failovers else {}
        finally:
            cluster.down()
    return results


def _median(values) -> float:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def report(results: dict) -> str:
    name = {"kafka": "Apache Kafka 4.4"}.get(results.get("target", "odradek"), "Odradek")
    out = [f"{name}: {results['client']}, 3 combined nodes on {results['cpus']} cores (unpinned), 1 partition, acks=all, "
           f"idempotent, 100 B records; median of {results['runs']} runs of {results['duration_s']} s"]
    out.append(f"{'':6}{'records/s':>12}{'leader core-s/M':>17}{'follower core-s/M':>19}{'rec/request':>13}"
               f"{'ack p50 ms':>12}{'ack p99 ms':>12}")
    tp, lat = results["throughput"], results["latency"]
    for topic in ("rf1", "rf3"):
        rows = tp[topic]
        followers = _median([max(r["follower_core_s_per_M"]) for r in rows]) if topic == "rf3" else None
        out.append(f"{topic.upper():6}{_median(r['records_s'] for r in rows):>12,.0f}"
                   f"{_median(r['leader_core_s_per_M'] for r in rows):>17.2f}"
                   f"{(f'{followers:.2f}' if followers is not None else '-'):>19}"
                   f"{_median(r['records_per_request'] for r in rows):>13.0f}"
                   f"{_median(c.get('p50_ms') for c in lat[topic]):>12.2f}{_median(c.get('p99_ms') for c in lat[topic]):>12.2f}")
    for rate, cells in (results.get("latency_by_rate") or {}).items():
        out.append(f"ack latency at {int(rate):,} msg/s, acks=all, linger.ms 0: "
                   + "; ".join(f"{topic.upper()} p50 {_median(c.get('p50_ms') for c in cells[topic]):.2f} ms, "
                               f"p99 {_median(c.get('p99_ms') for c in cells[topic]):.2f} ms" for topic in ("rf1", "rf3")))
    ratio = _median(r["records_s"] for r in tp["rf3"]) / _median(r["records_s"] for r in tp["rf1"])
    out.append(f"RF=3 / RF=1 records/s: {ratio:.2f}  (follower core-s/M: the busier of the two followers)")
    fo = results.get("failover") or {}
    if fo:
        out.append(f"failover (kill -9), broker.session.timeout.ms={results['broker_session_timeout_ms']}:")
        rows = fo["partition_leader"]
        out.append("  partition leader -> new leader in metadata: "
                   + ", ".join(f"{r['new_leader_s']:.2f}" for r in rows) + " s; producer acknowledged again: "
                   + ", ".join(f"{r['client_resumed_s']:.2f}" for r in rows) + " s")
        out.append("  active controller -> new controller: "
                   + ", ".join(f"{r['new_controller_s']:.2f}" for r in fo["active_controller"]) + " s")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Replication: RF=3 vs RF=1 side by side, and failover times.")
    parser.add_argument("--runs", type=int, default=3, help="runs per cell (median reported)")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds of producing per throughput cell")
    parser.add_argument("--failovers", type=int, default=2, help="rounds of each failover (0: none)")
    parser.add_argument("--rates", default="5000",
                        help="comma-separated msg/s of further ack-latency cells beside the 50 msg/s one ('' for none)")
    parser.add_argument("--json", action="store_true", help="print the raw results as JSON")
    parser.add_argument("--targets", default="odradek", help="comma-separated: odradek, kafka (Apache Kafka 4.4)")
    args = parser.parse_args(argv)
    for target in [t.strip() for t in args.targets.split(",") if t.strip()]:
        results = run(runs=args.runs, duration_s=args.duration, failovers=args.failovers, target=target,
                      rates=tuple(int(r) for r in args.rates.split(",") if r))
        print(json.dumps(results, indent=2) if args.json else report(results), flush=True)


if __name__ == "__main__":
    main()
