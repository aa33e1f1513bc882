"""Many partitions: creation, leader election after a kill -9, and memory per partition, at 1k/5k/10k.

    python -m bench.partition_scale [--sizes 1000,5000,10000] [--json]

For each size N, a fresh three-node cluster of real processes (`odradek cluster up --nodes 3`, combined
broker + controller nodes, as bench.replication_bench) gets one topic of N partitions, replication factor
3 (the controller spreads leaders and replicas), and the bench reports:

- creation: CreateTopics sent -> answered (the controller committed the records), and -> every node's
  Metadata shows all N partitions with a leader and a full ISR and its DescribeLogDirs lists a log for
  each of the N (each broker created its N logs: Metadata alone answers from the image, which is current
  before the logs of a large update are all made);
- RSS per partition: each node's resident memory in sync minus its memory before the topic, divided by N
  (every node holds a replica of every partition);
- leader election after kill -9 of the node leading the most partitions among those that are not the
  quorum leader: kill -> the quorum leader's Metadata names a live leader for every partition. (The
  controller moves leaderships once it fences the dead broker; that came well before
  broker.session.timeout.ms in every run, so the figure is detection plus the election of its N/3-odd
  leaderships, and what grows with N is the second part.)
- the longest stall of each node's event loop while the topic is created and comes into sync: a probe
  thread keeps one ApiVersions request in flight per node (its own connection, the next one sent 20 ms
  after an answer) and reports the slowest answer per node. ApiVersions costs the broker microseconds, so
  a slow answer is time the node's loop spent on something else in one go (applying the new partitions,
  above all); it is a lower bound of the longest callback, within the 20 ms gap.

Each node's log is read at the end for how often the controller quorum lost its leader during the run.

Flat per partition is the goal: creation and election time over N, and RSS over N, should not rise with N.
Nothing is pinned and the machine may be shared: read the curve, not single figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from .replication_bench import NODES, SESSION_TIMEOUT_MS, Cluster

TOPIC = "scale"


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _partitions(cluster: Cluster, node_id: int):
    from odradek.protocol.messages import MetadataRequest

    try:
        md = cluster.request(node_id, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]), 12,
                             timeout_s=30)
    except OSError:
        return None
    found = [t for t in md.topics if t.name == TOPIC and t.error_code == 0]
    return found[0].partitions if found else None


def _all_in_sync(cluster: Cluster, node_id: int, n: int) -> bool:
    parts = _partitions(cluster, node_id)
    return parts is not None and len(parts) == n and all(
        p.leader_id >= 0 and sorted(p.isr_nodes) == sorted(p.replica_nodes) for p in parts)


class LoopLagProbe:
    """One ApiVersions request in flight per node, from a thread of its own, until `stop()`: the slowest
    answer per node (ms) is `worst` (see the module doc). A node that does not answer (killed, or a
    connection refused) is skipped until it does."""

    GAP_S = 0.02

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.worst: dict[int, float] = {node: 0.0 for node in NODES}
        self.answers: dict[int, int] = {node: 0 for node in NODES}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def start(self) -> LoopLagProbe:
        self._thread.start()
        return self

    def stop(self) -> dict[int, float]:
        self._stop.set()
        self._thread.join(30)
        return dict(self.worst)

    async def _run(self) -> None:
        await asyncio.gather(*(self._probe(node) for node in NODES))

    async def _probe(self, node: int) -> None:
        from odradek.broker.node_client import NodeConnection
        from odradek.protocol.messages import ApiVersionsRequest

        conn = NodeConnection(node, "127.0.0.1", self.cluster.client_port(node), backoff_s=0.0, client_id="lag-probe")
        request = ApiVersionsRequest(client_software_name="lag-probe", client_software_version="1")
        try:
            while not self._stop.is_set():
                t0 = time.monotonic()
                try:
                    await conn.request(request, 3, timeout_s=120)
                except Exception:  # noqa: BLE001 - the node is down or restarting: try again later
                    await asyncio.sleep(0.2)
                    continue
                took = (time.monotonic() - t0) * 1000
                self.answers[node] += 1
                self.worst[node] = max(self.worst[node], took)
                await asyncio.sleep(self.GAP_S)
        finally:
            await conn.close()


def _hosted(cluster: Cluster, node_id: int) -> int:
    """How many partitions of the topic `node_id` has a log for (DescribeLogDirs): Metadata answers from the
    image, which a node makes current before it has created the logs of a large update (they follow in
    slices, replication/hosting.py), so "in sync" also waits for this."""
    from odradek.protocol.messages import DescribeLogDirsRequest

    try:
        response = cluster.request(node_id, DescribeLogDirsRequest(topics=None), 4, timeout_s=30)
    except OSError:
        return -1
    return sum(len(t.partitions) for r in response.results for t in r.topics if t.name == TOPIC)


def one_size(n: int, workdir: str | None, port: int | None = None, in_sync_timeout_s: float = 1800) -> dict:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    row: dict = {"partitions": n}
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        cluster = Cluster(Path(tmp) / "cluster")
        if port is not None:
            cluster.port = port
        cluster.up()
        print(f"{n} partitions: cluster in {cluster.dir}", file=sys.stderr, flush=True)
        try:
            cluster.wait(lambda: cluster.quorum_leader(NODES) is not None, "a quorum leader")
            time.sleep(1.0)
            before = {node: rss_bytes(cluster.pid(node)) for node in NODES}
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap()})
            # A Metadata (or DescribeLogDirs) answer of N partitions costs a node ~15 us a partition (0.15 s at
            # 10,000): polled every 0.5 s it was a third of a node's CPU and its longest stalls, and polled every
            # 0.2 s during the election it held the controller back. So the polls thin out with N, and each
            # figure is only as fine as its poll (`poll_s`, `election_poll_s` in --json).
            poll_s = row["poll_s"] = max(0.5, n / 5000)
            election_poll_s = row["election_poll_s"] = max(0.2, n / 10000)
            probe = LoopLagProbe(cluster).start()
            t0 = time.monotonic()
            for future in admin.create_topics([NewTopic(TOPIC, n, 3)], request_timeout=600,
                                              operation_timeout=600).values():
                try:
                    future.result(900)
                except KafkaException as e:  # a retry of ours after a lost connection: the topic is there
                    if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise
                    row["create_retried"] = True
            del admin
            row["create_answered_s"] = time.monotonic() - t0
            try:
                for node in NODES:
                    cluster.wait(lambda node=node: _all_in_sync(cluster, node, n) and _hosted(cluster, node) == n,
                                 f"{n} partitions in sync and hosted on node {node}", timeout_s=in_sync_timeout_s,
                                 poll_s=poll_s)
            except RuntimeError as e:  # reported as such: the row has what was measured up to here
                row["error"] = str(e)
                row["loop_stall_ms"] = probe.stop()
                return row
            row["all_in_sync_s"] = time.monotonic() - t0
            row["loop_stall_ms"] = probe.stop()
            time.sleep(2.0)
            after = {node: rss_bytes(cluster.pid(node)) for node in NODES}
            row["rss_before_mib"] = {node: before[node] / 2**20 for node in NODES}
            row["rss_in_sync_mib"] = {node: after[node] / 2**20 for node in NODES}
            row["rss_kib_per_partition"] = {node: (after[node] - before[node]) / 1024 / n for node in NODES}

            controller = cluster.wait(lambda: cluster.quorum_leader(NODES), "a quorum leader")
            parts = _partitions(cluster, controller) or []
            led = {}
            for p in parts:
                led.setdefault(p.leader_id, []).append(p.partition_index)
            victim = max((node for node in NODES if node != controller), key=lambda node: len(led.get(node, [])))
            row["killed_node_led"] = len(led.get(victim, []))
            survivor = controller
            t0 = time.monotonic()
            os.kill(cluster.pid(victim), signal.SIGKILL)

            def moved() -> bool:
                now = _partitions(cluster, survivor)
                return now is not None and all(p.leader_id >= 0 and p.leader_id != victim for p in now)

            cluster.wait(moved, "every partition led by a live node", timeout_s=900, poll_s=election_poll_s)
            row["election_s"] = time.monotonic() - t0
        finally:
            row["quorum_leader_lost"] = _leader_losses(cluster)
            cluster.down()
    return row


def _leader_losses(cluster: Cluster) -> dict[int, int]:
    """How many times each node logged that the controller quorum lost its leader during the size's run (a
    node whose loop stalls past the quorum's fetch timeout costs the quorum its leader)."""
    counts = {}
    for node in NODES:
        try:
            text = (cluster.dir / f"node-{node}" / "node.log").read_text(errors="replace")
        except OSError:
            continue
        counts[node] = text.count("controller quorum leader lost")
    return counts


def run(sizes: list[int], workdir: str | None = None, port: int | None = None, in_sync_timeout_s: float = 1800) -> dict:
    results: dict = {"cpus": os.cpu_count(), "broker_session_timeout_ms": SESSION_TIMEOUT_MS, "sizes": []}
    for n in sizes:
        results["sizes"].append(one_size(n, workdir, port, in_sync_timeout_s))
        results["sizes"][-1]["loadavg"] = os.getloadavg()
        print(json.dumps(results["sizes"][-1]), file=sys.stderr, flush=True)  # (a later size may not finish)
    return results


def report(results: dict) -> str:
    out = [f"3 combined nodes on {results['cpus']} cores (unpinned), one topic of N partitions, RF=3; "
           f"broker.session.timeout.ms={results['broker_session_timeout_ms']}"]
    out.append(f"{'N':>7}{'created s':>11}{'in sync s':>11}{'ms/part.':>10}{'RSS KiB/part. (nodes 1,2,3)':>30}"
               f"{'kill->leaders s':>17}{'it led':>8}{'longest stall ms (nodes 1,2,3)':>33}{'quorum lost':>13}")
    for r in results["sizes"]:
        n = r["partitions"]
        if "error" in r:
            stalls = ", ".join(f"{v:.0f}" for v in r.get("loop_stall_ms", {}).values())
            out.append(f"{n:>7,}{r.get('create_answered_s', float('nan')):>11.2f}  not in sync: {r['error']} "
                       f"(longest stalls {stalls} ms; quorum lost {sum(r.get('quorum_leader_lost', {}).values())} times)")
            continue
        per_node = {int(k): v for k, v in r["rss_kib_per_partition"].items()}  # (JSON made the keys strings)
        rss = ", ".join(f"{per_node[node]:.1f}" for node in NODES)
        stalls = {int(k): v for k, v in r.get("loop_stall_ms", {}).items()}
        stall = ", ".join(f"{stalls[node]:.0f}" for node in NODES) if stalls else "-"
        out.append(f"{n:>7,}{r['create_answered_s']:>11.2f}{r['all_in_sync_s']:>11.2f}{r['all_in_sync_s'] / n * 1000:>10.2f}"
                   f"{rss:>30}{r['election_s']:>17.2f}{r['killed_node_led']:>8}{stall:>33}"
                   f"{sum(r.get('quorum_leader_lost', {}).values()):>13}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Creation, election after kill -9 and RSS per partition at N partitions.")
    parser.add_argument("--sizes", default="1000,5000,10000", help="comma-separated partition counts")
    parser.add_argument("--json", action="store_true", help="print the raw results as JSON")
    parser.add_argument("--port", type=int, default=None, help="first of the 6 ports the nodes listen on (default: a free block)")
    parser.add_argument("--in-sync-timeout", type=float, default=1800, help="seconds to wait for a size to come in sync")
    parser.add_argument("--report", metavar="JSON", help="print the report of a saved --json run; run nothing")
    args = parser.parse_args(argv)
    if args.report:
        print(report(json.loads(Path(args.report).read_text())))
        return
    results = run([int(s) for s in args.sizes.split(",")], port=args.port, in_sync_timeout_s=args.in_sync_timeout)
    print(json.dumps(results, indent=2) if args.json else report(results))


if __name__ == "__main__":
    main()
