"""`python -m bench.failover`: how long producers wait when a partition leader dies, over repeated rounds.

A real 3-node combined-mode cluster (`odradek cluster up`, the settings a user gets) serves one RF=3 topic
(min.insync.replicas=2). An idempotent `acks=all` confluent-kafka producer with default settings writes
one record every 2 ms to one partition. Each round takes that partition's leader and

  kill    kill -9 it: the process dies, its kernel closes its sockets, the host stays up;
  stop    SIGSTOP it: a frozen host (its sockets stay open, nothing answers);

then measures the time from the signal to the first acknowledgement of a record produced after it (a
record the producer handed over after the leader was gone, acknowledged by a new leader), and restores
the node (`cluster up` restarts the killed one; SIGCONT) and waits until it is back in the ISR before the
next round. Records that fail are counted (an idempotent producer with default retries should see none).

`--target broker` (default) picks a partition whose leader is not the active controller: only a broker
dies; `--target controller` one led by the active controller, so that the quorum must elect a new
controller first (controller.quorum.fetch.timeout.ms, then an election), and the new controller has seen
no connection of the dead one (it fences it when it has not heard from it within
broker.heartbeat.interval.ms plus the grace after it took over). When no partition has the leader wanted,
a preferred leader election is asked for, and the round is skipped if that does not help.

A frozen leader keeps its connections open and answers nothing, so a client learns of it only when its
own request times out: librdkafka waits `socket.timeout.ms` (60 s by default) for the produce requests in
flight to the frozen node before it refreshes metadata, whatever the cluster did meanwhile (measured:
61-71 s with the producer's defaults, although the controller fenced the node after 9 s). The `stop`
figures are therefore taken with `--client socket.timeout.ms=...` and say so.

Profiles: `default` (no override), `kafka` (odradek.broker.session.disconnect.grace.ms=-1 and
odradek.controller.quorum.disconnect.grace.ms=-1: only the session and the quorum's fetch timeout, Kafka's
rules and Odradek's before the graces), `no-quorum-grace` (only the second: a dead active controller found
by the fetch timeout, as before the quorum's disconnect rule), and `fast` (the fast profile of the README: shorter
session, heartbeat and quorum timeouts, for the frozen-host case).

    python -m bench.failover --rounds 10 --scenario kill --profile default
    python -m bench.failover --rounds 10 --scenario stop --profile fast --json out.json

It prints p50/p99/max per (profile, scenario, target) next to Kafka's 9 s session default. Figures from a
loaded 2-core machine are in bench/README.md ("Failover").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def percentile(ordered: list[float], q: float) -> float:
    """The nearest-rank percentile of sorted values (p99 of 10 rounds is the largest)."""
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]

TOPIC = "failover"
KAFKA_SESSION_MS = 9000  # broker.session.timeout.ms, Kafka's default

PROFILES: dict[str, list[str]] = {
    "default": [],
    "kafka": ["odradek.broker.session.disconnect.grace.ms=-1", "odradek.controller.quorum.disconnect.grace.ms=-1"],
    # The default before the quorum's disconnect rule (raft handle_disconnect): a dead active controller is
    # found by the followers' fetch timeout only.
    "no-quorum-grace": ["odradek.controller.quorum.disconnect.grace.ms=-1"],
    # The fast profile (README, "Failover"): a frozen node is fenced after 1.5 s without heartbeats, the
    # quorum gives up on a frozen controller after 1 s and elects within 0.5-1 s.
    "fast": [
        "broker.session.timeout.ms=1500",
        "broker.heartbeat.interval.ms=250",
        "controller.quorum.fetch.timeout.ms=1000",
        "controller.quorum.election.timeout.ms=500",
    ],
}


def become_subreaper() -> None:
    """Orphaned descendants (the nodes `cluster up` starts in sessions of their own) become our children, so
    that a node killed here is reaped here: a zombie still answers kill(pid, 0), and `cluster up` would
    take it for a running node and not restart it (PR_SET_CHILD_SUBREAPER = 36, Linux)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def reap(pid: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return  # not our child (no subreaper): whoever is its parent reaps it
        if done:
            return
        time.sleep(0.05)


def odradek(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=timeout)


class Cluster:
    def __init__(self, directory: Path, port: int, overrides: list[str]) -> None:
        self.dir = directory
        self.port = port
        self.overrides = overrides

    def bootstrap(self, skip: int | None = None) -> str:
        return ",".join(f"127.0.0.1:{self.port + 2 * (i - 1)}" for i in (1, 2, 3) if i != skip)

    def up(self, first: bool = False) -> None:
        args = ["cluster", "up", "--nodes", "3", "--dir", str(self.dir)]
        if first:
            args += ["--port", str(self.port)]
            for o in ["auto.leader.rebalance.enable=false", *self.overrides]:
                args += ["--override", o]
        result = odradek(*args)
        if result.returncode != 0:
            raise RuntimeError(f"cluster up failed: {result.stderr}")

    def down(self) -> None:
        odradek("cluster", "down", "--dir", str(self.dir), "--timeout", "20")

    def pid(self, node_id: int) -> int:
        return int((self.dir / f"node-{node_id}" / "node.pid").read_text())

    def _ask(self, node_id: int, request, version: int):
        from odradek.broker.node_client import NodeConnection

        async def ask():
            conn = NodeConnection(node_id, "127.0.0.1", self.port + 2 * (node_id - 1), backoff_s=0.0)
            try:
                return await conn.request(request, version, timeout_s=5.0)
            finally:
                await conn.close()

        return asyncio.run(ask())

    def active_controller(self, asking: list[int]) -> int | None:
        from odradek.broker.node_client import NodeUnavailable
        from odradek.protocol.messages import DescribeQuorumRequest

        request = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
            topic_name="__cluster_metadata",
            partitions=[DescribeQuorumRequest.TopicData.PartitionData(partition_index=0)])])
        for node_id in asking:
            try:
                response = self._ask(node_id, request, 2)
            except NodeUnavailable:
                continue
            part = response.topics[0].partitions[0] if response.topics else None
            if part is not None and part.error_code == 0 and part.leader_id >= 0:
                return part.leader_id
        return None

    def partitions(self, node_id: int) -> dict[int, tuple[int, list[int]]]:
        """partition -> (leader, isr) as node `node_id` (the active controller: its image is the newest)
        answers Metadata. A node just resumed from SIGSTOP answers from what it knew before: never asked."""
        from odradek.protocol.messages import MetadataRequest

        md = self._ask(node_id, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]), 12)
        return {p.partition_index: (p.leader_id, list(p.isr_nodes)) for t in md.topics for p in t.partitions}


class Producer:
    """One idempotent acks=all producer, default settings, a record every `interval_s` to `partition`."""

    def __init__(self, bootstrap: str, client: dict[str, str], interval_s: float = 0.002) -> None:
        from confluent_kafka import Producer as KafkaProducer

        self.producer = KafkaProducer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                       "linger.ms": 0, "log_level": 0, **client,
                                       **({"debug": os.environ["FAILOVER_RDKAFKA_DEBUG"], "log_level": 7}
                                          if os.environ.get("FAILOVER_RDKAFKA_DEBUG") else {})})
        self.interval_s = interval_s
        self.partition = 0
        self.acked: list[tuple[float, float]] = []  # (produced at, acknowledged at), monotonic seconds
        self.failed: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            produced = time.monotonic()

            def delivered(err, msg, produced=produced) -> None:
                at = time.monotonic()
                with self._lock:
                    if err is None:
                        self.acked.append((produced, at))
                    else:
                        self.failed.append(str(err))

            try:
                self.producer.produce(TOPIC, b"x" * 100, partition=self.partition, on_delivery=delivered)
            except BufferError:
                pass
            self.producer.poll(self.interval_s)

    def start(self) -> "Producer":
        self._thread.start()
        return self

    def first_ack_after(self, t0: float) -> float | None:
        with self._lock:
            times = [acked for produced, acked in self.acked if produced > t0]
        return min(times) if times else None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.producer.flush(30)


def stamp(wall: float) -> str:
    """A wall-clock time as the nodes' logs write it (UTC), to find a round in them."""
    return time.strftime("%H:%M:%S", time.gmtime(wall)) + f"{wall % 1:.3f}"[1:] + "Z"


def admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


def wait(predicate, what: str, timeout_s: float = 90.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception:  # noqa: BLE001 - a node restarting: ask again
            value = None
        if value:
            return value
        time.sleep(0.2)
    raise RuntimeError(f"timed out waiting for {what}")


def pick(cluster: Cluster, target: str) -> tuple[int, int, int] | None:
    """(partition, its leader, the active controller) for a round, the leader chosen as `target` asks,
    once every replica is in sync (as the active controller's Metadata says)."""
    controller = wait(lambda: cluster.active_controller([1, 2, 3]), "an active controller")
    parts = wait(lambda: (p := cluster.partitions(controller)) and all(
        len(isr) == 3 and leader >= 0 for leader, isr in p.values()) and p, "every replica in sync")
    for partition, (leader, _) in sorted(parts.items()):
        if (leader == controller) == (target == "controller"):
            return partition, leader, controller
    return None


def preferred_election(client) -> None:
    from confluent_kafka import ElectionType, TopicPartition

    try:
        client.elect_leaders(ElectionType.PREFERRED, [TopicPartition(TOPIC, p) for p in range(3)]).result(timeout=20)
    except Exception:  # noqa: BLE001 - partitions already led by their preferred replica
        pass


def run(profile: str, scenario: str, target: str, rounds: int, port: int, workdir: Path, log,
        keep: bool = False, client_conf: dict[str, str] | None = None) -> dict:
    directory = Path(tempfile.mkdtemp(prefix=f"failover-{profile}-", dir=workdir))
    cluster = Cluster(directory, port, PROFILES[profile])
    cluster.up(first=True)
    results: list[float] = []
    leaders: list[int] = []
    skipped = 0
    failed = 0
    try:
        client = admin(cluster.bootstrap())
        from confluent_kafka.admin import NewTopic

        for f in client.create_topics([NewTopic(TOPIC, 3, 3)], request_timeout=30).values():
            f.result(timeout=60)
        producer = Producer(cluster.bootstrap(), client_conf or {}).start()
        try:
            wait(lambda: producer.first_ack_after(0.0), "the first acknowledgement")
            for n in range(rounds):
                chosen = pick(cluster, target)
                if chosen is None:
                    preferred_election(client)
                    time.sleep(1.0)
                    chosen = pick(cluster, target)
                if chosen is None:
                    skipped += 1
                    log(f"  round {n + 1}: no partition led by a {target}; skipped")
                    continue
                partition, leader, controller = chosen
                producer.partition = partition
                wait(lambda: producer.first_ack_after(time.monotonic() - 0.5), "acknowledgements before the round")
                pid = cluster.pid(leader)
                t0 = time.monotonic()
                wall = time.time()
                os.kill(pid, signal.SIGKILL if scenario == "kill" else signal.SIGSTOP)
                try:
                    acked = wait(lambda: producer.first_ack_after(t0), "an acknowledgement after the failure", 120)
                finally:
                    if scenario == "stop":
                        os.kill(pid, signal.SIGCONT)
                elapsed_ms = (acked - t0) * 1000
                results.append(elapsed_ms)
                leaders.append(leader)
                log(f"  round {n + 1}: node {leader} (controller {controller}) {scenario}: "
                    f"acknowledged again after {elapsed_ms:.0f} ms (signal at {stamp(wall)})")
                if scenario == "kill":
                    reap(pid)
                    cluster.up()
        finally:
            producer.stop()
            failed = len(producer.failed)
    except Exception:
        keep = True
        raise
    finally:
        cluster.down()
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)
        else:
            log(f"  kept {directory} (node logs)")
    ordered = sorted(results)
    return {
        "profile": profile, "scenario": scenario, "target": target, "rounds": len(results), "skipped": skipped,
        "p50_ms": round(percentile(ordered, 50)) if ordered else None,
        "p99_ms": round(percentile(ordered, 99)) if ordered else None,
        "max_ms": round(ordered[-1]) if ordered else None,
        "failed_records": failed, "overrides": PROFILES[profile], "client": client_conf or {},
        "raw_ms": [round(r) for r in results],
    }


def run_restart(profile: str, port: int, workdir: Path, log) -> dict:
    """docker-compose down, then up, as `cluster down` / `cluster up`: the seconds from the start of `up` to
    `up` returning (every node registered and unfenced) and to an acks=all record acknowledged on every
    partition (issue 27 measured ~13 s before: the node stopped last was held out for a session)."""
    from confluent_kafka import Producer as KafkaProducer
    from confluent_kafka.admin import NewTopic

    directory = Path(tempfile.mkdtemp(prefix=f"failover-restart-{profile}-", dir=workdir))
    cluster = Cluster(directory, port, PROFILES[profile])
    cluster.up(first=True)
    try:
        client = admin(cluster.bootstrap())
        for f in client.create_topics([NewTopic(TOPIC, 3, 3)], request_timeout=30).values():
            f.result(timeout=60)
        cluster.down()
        t0 = time.monotonic()
        cluster.up()
        up_s = time.monotonic() - t0
        producer = KafkaProducer({"bootstrap.servers": cluster.bootstrap(), "enable.idempotence": True,
                                  "acks": "all", "log_level": 0})
        acked: dict[int, float] = {}
        for partition in range(3):
            producer.produce(TOPIC, b"after restart", partition=partition,
                             on_delivery=lambda err, msg: err is None and acked.setdefault(msg.partition(), time.monotonic()))
        producer.flush(120)
        writes_s = max(acked.values()) - t0 if len(acked) == 3 else None
        log(f"  down, then up: up returned after {up_s:.1f} s, acks=all on every partition after "
            f"{writes_s if writes_s is None else round(writes_s, 1)} s")
        return {"profile": profile, "scenario": "down-up", "up_s": round(up_s, 2),
                "acks_all_s": None if writes_s is None else round(writes_s, 2)}
    finally:
        cluster.down()
        shutil.rmtree(directory, ignore_errors=True)


def table(rows: list[dict]) -> str:
    lines = ["| profile | failure | leader | client | rounds | p50 | p99 | max | failed records | Kafka's session |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        def s(v):
            return "-" if v is None else f"{v / 1000:.2f} s"
        settings = ", ".join(f"{k}={v}" for k, v in r["client"].items()) or "defaults"
        lines.append(f"| {r['profile']} | {r['scenario']} | {r['target']} | {settings} | {r['rounds']} | {s(r['p50_ms'])} | "
                     f"{s(r['p99_ms'])} | {s(r['max_ms'])} | {r['failed_records']} | {KAFKA_SESSION_MS / 1000:.0f} s |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--scenario", action="append", choices=["kill", "stop", "down-up"],
                        help="repeatable (default: kill); down-up: the whole cluster stopped and started once")
    parser.add_argument("--profile", action="append", choices=sorted(PROFILES), help="repeatable (default: default)")
    parser.add_argument("--target", action="append", choices=["broker", "controller"],
                        help="repeatable (default: broker)")
    parser.add_argument("--port", type=int, default=21500, help="node 1's client port (nodes use 6 ports from it)")
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()))
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--keep", action="store_true", help="keep each cluster's directory (node logs)")
    parser.add_argument("--client", metavar="KEY=VALUE", action="append", default=[],
                        help="a producer setting (repeatable), e.g. socket.timeout.ms=2000 for the frozen-host case")
    args = parser.parse_args(argv)

    def log(msg: str) -> None:
        print(msg, flush=True)

    become_subreaper()
    client = dict(item.split("=", 1) for item in args.client)
    rows = []
    restarts: list[dict] = []
    for profile in args.profile or ["default"]:
        for scenario in args.scenario or ["kill"]:
            if scenario == "down-up":
                log(f"{profile} / down, then up:")
                restarts.append(run_restart(profile, args.port, args.workdir, log))
                continue
            for target in args.target or ["broker"]:
                log(f"{profile} / {scenario} / leader is a {target}:")
                rows.append(run(profile, scenario, target, args.rounds, args.port, args.workdir, log, args.keep,
                                client))
    if rows:
        print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows + restarts, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
