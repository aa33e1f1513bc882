"""A cluster of real processes whose every connection runs through a fault-injecting network (tests/netproxy.py),
the load a test runs on it and the checker of what the load saw, and the fault scenarios: cuts of a leader,
a follower, one direction or the clients; kills, pauses and restarts; a partition moved to a new broker."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from odradek.broker.cluster_tool import node_properties, write_properties
from odradek.broker.node_client import NodeConnection, NodeUnavailable
from odradek.protocol.messages import DescribeQuorumRequest, MetadataRequest
from odradek.metadata.image import new_cluster_id
from odradek.storage.meta_properties import format_log_dir
from tests.checker import Seen, Sent, check
from tests.harness.processes import free_port_block
from tests.netproxy import Fabric

# ODRADEK_LONG=1: the long fault loops (the full rolling restart, random faults)
LONG = os.environ.get("ODRADEK_LONG") == "1"

TOPIC = "faults"
PARTITIONS = 3
VOTERS = (1, 2, 3)
SETTINGS = {
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "4000",
    "replica.socket.timeout.ms": "5000",
    "replica.fetch.backoff.ms": "200",
}


class FaultCluster:
    """Nodes as processes, each listener behind a proxy of `fabric`; the test itself talks to the nodes'
    own ports, so that it sees the truth while links are cut.

    A subclass secures it (test_security_faults.py): `properties` and `format` make each node's settings and
    data directory, `client_conf` / `admin_conf` are the librdkafka settings of the applications and of the
    test's admin, `kafka_python_conf` those of kafka-python's admin client, `node_security` how the test's
    own requests log in."""

    node_security = None  # a NodeSecurity for the test's direct requests to the nodes

    def __init__(self, directory: Path, fabric: Fabric) -> None:
        self.dir = directory
        self.fabric = fabric
        self.cluster_id = new_cluster_id()
        self.real: dict[int, tuple[int, int]] = {}  # node -> (client port, controller port)
        self.proxy: dict[int, tuple[int, int]] = {}
        self.procs: dict[int, subprocess.Popen] = {}
        self.base = free_port_block(16)

    def configure(self, node_id: int, *, controller: bool) -> None:
        client, ctrl = self.base + 2 * (node_id - 1), self.base + 2 * (node_id - 1) + 1
        self.real[node_id] = (client, ctrl)
        if controller:
            self.proxy[node_id] = (self.fabric.add(node_id, client), self.fabric.add(node_id, ctrl))
        else:
            self.proxy[node_id] = (self.fabric.add(node_id, client), 0)

    def client_conf(self) -> dict:
        """librdkafka settings of the application clients (producers, consumers, the checker's reader)."""
        return {}

    def admin_conf(self) -> dict:
        """librdkafka settings of the test's admin client."""
        return {}

    def kafka_python_conf(self) -> dict:
        """kafka-python's KafkaAdminClient settings."""
        return {}

    def write(self, node_id: int, *, controller: bool) -> None:
        directory = self.dir / f"node-{node_id}"
        directory.mkdir(parents=True, exist_ok=True)
        write_properties(directory / "server.properties", self.properties(node_id, directory, controller=controller))
        self.format(node_id, directory / "data")

    def format(self, node_id: int, data: Path) -> None:
        format_log_dir(str(data), node_id=node_id, cluster_id=self.cluster_id, directory_id=new_cluster_id())

    def properties(self, node_id: int, directory: Path, *, controller: bool) -> dict[str, str]:
        props = node_properties(node_id, max(len(VOTERS), node_id), data_dir=str(directory / "data"))
        client, ctrl = self.real[node_id]
        props["controller.quorum.voters"] = ",".join(f"{v}@127.0.0.1:{self.proxy[v][1]}" for v in VOTERS)
        props["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{self.proxy[node_id][0]}"
        if controller:
            props["listeners"] = f"PLAINTEXT://127.0.0.1:{client},CONTROLLER://127.0.0.1:{ctrl}"
        else:
            props["process.roles"] = "broker"
            props["listeners"] = f"PLAINTEXT://127.0.0.1:{client}"
            props["listener.security.protocol.map"] = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
        props.update(SETTINGS)
        return props

    def add_node(self, node_id: int, *, controller: bool = True) -> None:
        self.configure(node_id, controller=controller)
        self.write(node_id, controller=controller)

    def start(self, node_id: int) -> None:
        directory = self.dir / f"node-{node_id}"
        with open(directory / "node.log", "ab") as log_file:
            self.procs[node_id] = subprocess.Popen(
                [sys.executable, "-m", "odradek", "broker", "start", "-c", str(directory / "server.properties")],
                stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(directory))

    def stop(self, node_id: int, sig: int = signal.SIGTERM, timeout_s: float = 60.0) -> None:
        proc = self.procs[node_id]
        try:
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(sig)
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"node {node_id} did not stop on signal {sig} within {timeout_s}s" + self.logs())

    def shutdown(self) -> None:
        for node_id, proc in self.procs.items():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def logs(self, tail: int = 6000) -> str:
        """Every node's view (quorum, brokers, TOPIC) and the end of its log, less the chattiest lines."""
        out = ["\n" + self.views()]
        for node_id in sorted(self.procs):
            path = self.dir / f"node-{node_id}" / "node.log"
            if path.exists():
                lines = [line for line in path.read_text(errors="replace").splitlines()
                         if "proposing an ISR change" not in line and "replica fetcher st" not in line]
                out.append(f"\n--- node {node_id}\n" + "\n".join(lines)[-tail:])
        return "".join(out)

    def views(self) -> str:
        out = []
        for node_id in sorted(self.procs):
            try:
                md = self.request(node_id, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]), 12)
            except (NodeUnavailable, OSError) as e:
                out.append(f"node {node_id}: no answer ({e})")
                continue
            parts = [f"{p.partition_index}: leader {p.leader_id} epoch {p.leader_epoch} isr {list(p.isr_nodes)} "
                     f"replicas {list(p.replica_nodes)}" for t in md.topics for p in t.partitions]
            out.append(f"node {node_id}: controller {md.controller_id}, quorum leader {self.quorum_leader([node_id])}, "
                       f"brokers {sorted(b.node_id for b in md.brokers)}; " + "; ".join(parts))
        return "\n".join(out)

    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.proxy[n][0]}" for n in VOTERS)

    # -- asking the nodes directly

    def request(self, node_id: int, message, version: int, timeout_s: float = 5.0):
        async def call():
            conn = NodeConnection(node_id, "127.0.0.1", self.real[node_id][0], backoff_s=0.0, security=self.node_security)
            try:
                return await conn.request(message, version, timeout_s=timeout_s)
            finally:
                await conn.close()

        return asyncio.run(call())

    def partitions(self, node_id: int) -> dict[int, object] | None:
        """node_id's view of TOPIC: partition index -> Metadata partition (None if it does not answer)."""
        try:
            md = self.request(node_id, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]), 12)
        except (NodeUnavailable, OSError):
            return None
        topic = next((t for t in md.topics if t.name == TOPIC and t.error_code == 0), None)
        return {p.partition_index: p for p in topic.partitions} if topic else None

    def quorum_leader(self, asking) -> int | None:
        request = DescribeQuorumRequest(topics=[DescribeQuorumRequest.TopicData(
            topic_name="__cluster_metadata", partitions=[DescribeQuorumRequest.TopicData.PartitionData(partition_index=0)])])
        for node_id in asking:
            try:
                response = self.request(node_id, request, 2)
            except (NodeUnavailable, OSError):
                continue
            part = response.topics[0].partitions[0] if response.topics else None
            if part is not None and part.error_code == 0 and part.leader_id >= 0:
                return part.leader_id
        return None

    def wait(self, predicate, what: str, timeout_s: float = 90.0):
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}" + self.logs())

    def wait_all_in_sync(self, asking: int, replicas: int = 3, timeout_s: float = 90.0):
        def ok():
            parts = self.partitions(asking)
            if parts is None or len(parts) != PARTITIONS:
                return None
            if all(p.leader_id >= 0 and sorted(p.isr_nodes) == sorted(p.replica_nodes) and len(p.replica_nodes) == replicas
                   for p in parts.values()):
                return parts
            return None

        return self.wait(ok, "every replica of every partition in sync", timeout_s)


class Load:
    """An idempotent acks=all producer on its own thread at a bounded rate, recording every acknowledged
    send, and optionally a consumer in a group recording what it reads."""

    def __init__(self, bootstrap: str, rate_per_s: float = 200.0, conf: dict | None = None) -> None:
        from confluent_kafka import Producer

        self.sent: list[Sent] = []
        self.failed: list[str] = []
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.rate_per_s = rate_per_s
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
            "message.timeout.ms": 180000, "request.timeout.ms": 10000, "topic.metadata.refresh.interval.ms": 2000,
            "retry.backoff.ms": 200, "log_level": 2,
            # librdkafka's own view every second, kept for a failed wait to print (`describe`)
            "statistics.interval.ms": 1000, "stats_cb": self._stats, **(conf or {}),
        })
        self.sequence = 0
        self.thread = threading.Thread(target=self._run, name="load", daemon=True)
        self.fatal: str | None = None
        self.last_stats: str | None = None

    def _stats(self, stats: str) -> None:
        self.last_stats = stats

    def describe(self, partition: int | None = None) -> str:
        """The producer's last statistics, as far as a stalled partition needs them: where librdkafka sends
        it (the leader it knows), what waits in its queues or in flight, its idempotence state and producer
        id/epoch, and its connections: enough to tell stale metadata, a fenced or bumping producer id, a
        request parked on a broker, or a producer that is merely slow."""
        import json

        if self.last_stats is None:
            return "no producer statistics yet"
        stats = json.loads(self.last_stats)
        parts = stats.get("topics", {}).get(TOPIC, {}).get("partitions", {})
        keys = ("leader", "msgq_cnt", "xmit_msgq_cnt", "msgs_inflight", "next_ack_seq", "next_err_seq", "acked_msgid")
        lines = [f"producer eos: {stats.get('eos')}"]
        for index, part in sorted(parts.items()):
            if index != "-1" and (partition is None or int(index) == partition):
                lines.append(f"partition {index}: " + ", ".join(f"{k}={part.get(k)}" for k in keys))
        for name, broker in sorted(stats.get("brokers", {}).items()):
            lines.append(f"broker {name}: state={broker.get('state')} outbuf={broker.get('outbuf_cnt')} "
                         f"waitresp={broker.get('waitresp_cnt')} req_timeouts={broker.get('req_timeouts')} "
                         f"toppars={sorted(broker.get('toppars', {}))}")
        with self.lock:
            acked = {p: sum(1 for x in self.sent if x.partition == p) for p in range(PARTITIONS)}
        lines.append(f"acknowledged per partition: {acked}; failed sends: {self.failed[-3:]}")
        return "\n".join(lines)

    def _delivered(self, err, msg) -> None:
        if err is not None:
            with self.lock:
                self.failed.append(str(err))
                if err.fatal():
                    self.fatal = str(err)
            return
        with self.lock:
            self.sent.append(Sent(msg.topic(), msg.partition(), msg.offset(), msg.value(), "p", int(msg.key())))

    def _run(self) -> None:
        interval = 1.0 / self.rate_per_s
        next_at = time.monotonic()
        while not self.stop_event.is_set():
            now = time.monotonic()
            if now < next_at:
                self.producer.poll(min(next_at - now, 0.05))
                continue
            next_at += interval
            seq = self.sequence
            try:
                self.producer.produce(TOPIC, key=b"%d" % seq, value=b"v-%d" % seq, partition=seq % PARTITIONS,
                                      on_delivery=self._delivered)
                self.sequence += 1
            except BufferError:
                self.producer.poll(0.1)
            self.producer.poll(0)

    def start(self) -> "Load":
        self.thread.start()
        return self

    def acked(self, partition: int | None = None) -> int:
        with self.lock:
            if partition is None:
                return len(self.sent)
            return sum(1 for s in self.sent if s.partition == partition)

    def finish(self, timeout_s: float = 180.0) -> None:
        self.stop_event.set()
        self.thread.join()
        left = self.producer.flush(timeout_s)
        assert left == 0, f"{left} sends not settled after {timeout_s}s"


class BundledLoad:
    """The same bounded load from the bundled asyncio producer (odradek.client, idempotent, acks=all) on an
    event loop in its own thread; values b-<n>, its own producer in the ordering check."""

    def __init__(self, bootstrap: str, rate_per_s: float = 50.0, conf: dict | None = None) -> None:
        self.bootstrap = bootstrap
        # librdkafka's names as the bundled client's keyword arguments (security.protocol -> security_protocol)
        self.conf = {k.replace(".", "_"): v for k, v in (conf or {}).items()}
        self.rate_per_s = rate_per_s
        self.sent: list[Sent] = []
        self.failed: list[str] = []
        self.fatal: str | None = None
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), name="bundled-load", daemon=True)

    async def _run(self) -> None:
        from odradek.client.producer import Producer

        producer = Producer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=5, request_timeout_ms=10000,
                            delivery_timeout_ms=180000, metadata_max_age_ms=2000, retry_backoff_ms=200, **self.conf)
        await producer.start()
        pending = []
        seq = 0
        try:
            while not self.stop_event.is_set():
                value = b"b-%d" % seq
                future = await producer.send(TOPIC, value, partition=seq % PARTITIONS)
                future.add_done_callback(lambda f, v=value, n=seq: self._delivered(f, v, n))
                pending.append(future)
                seq += 1
                await asyncio.sleep(1.0 / self.rate_per_s)
            await producer.flush(180)
            await asyncio.gather(*pending, return_exceptions=True)
        except Exception as e:  # noqa: BLE001 - reported by finish()
            self.fatal = repr(e)
        finally:
            await producer.close()

    def _delivered(self, future: asyncio.Future, value: bytes, seq: int) -> None:
        if future.cancelled() or future.exception() is not None:
            self.failed.append("cancelled" if future.cancelled() else repr(future.exception()))
            return
        md = future.result()
        self.sent.append(Sent(md.topic, md.partition, md.offset, value, "b", seq))

    def start(self) -> "BundledLoad":
        self.thread.start()
        return self

    def finish(self, timeout_s: float = 240.0) -> None:
        self.stop_event.set()
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "the bundled producer did not finish"


class GroupConsumer:
    """A consumer in a group on its own thread, recording what it reads (it may read an offset twice after a
    rebalance: the checker accepts the same value at the same offset)."""

    def __init__(self, bootstrap: str, group: str, conf: dict | None = None) -> None:
        from confluent_kafka import Consumer

        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                                  "enable.auto.commit": True, "auto.commit.interval.ms": 500,
                                  "topic.metadata.refresh.interval.ms": 2000, "log_level": 2, **(conf or {})})
        self.seen: list[Seen] = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="group-consumer", daemon=True)

    def _run(self) -> None:
        self.consumer.subscribe([TOPIC])
        while not self.stop_event.is_set():
            m = self.consumer.poll(0.2)
            if m is not None and m.error() is None:
                self.seen.append(Seen(m.topic(), m.partition(), m.offset(), m.value()))
        self.consumer.close()

    def start(self) -> "GroupConsumer":
        self.thread.start()
        return self

    def finish(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=60)


def read_all(bootstrap: str, sent: list[Sent], timeout_s: float = 120.0, conf: dict | None = None) -> list[Seen]:
    """Every record of TOPIC from offset 0 up to the end offsets of the acknowledged sends."""
    from confluent_kafka import Consumer, TopicPartition

    ends: dict[int, int] = {}
    for s in sent:
        ends[s.partition] = max(ends.get(s.partition, -1), s.offset)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker", "enable.auto.commit": False,
                         "log_level": 2, **(conf or {})})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    seen: list[Seen] = []
    reached: dict[int, int] = {}
    deadline = time.monotonic() + timeout_s
    while any(reached.get(p, -1) < end for p, end in ends.items()) and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            seen.append(Seen(m.topic(), m.partition(), m.offset(), m.value()))
            reached[m.partition()] = max(reached.get(m.partition(), -1), m.offset())
    consumer.close()
    return seen


def verify(cluster: FaultCluster, load: Load, group: GroupConsumer | None = None, bundled: BundledLoad | None = None) -> None:
    load.finish()
    assert load.fatal is None, load.fatal
    sent = list(load.sent)
    failed = list(load.failed)
    if bundled is not None:
        bundled.finish()
        assert bundled.fatal is None, bundled.fatal
        assert bundled.sent, "the bundled producer had nothing acknowledged"
        sent += bundled.sent
        failed += bundled.failed
    # librdkafka acknowledges some records without an offset (None): those of a request whose answer was
    # lost, once a later batch of the same producer and partition succeeds (an "implicit ack": the sequence
    # numbers prove they were written). Each must then be in its partition exactly once; it is checked, for
    # loss, duplicates and order, at the offset where it was read.
    unplaced = [s for s in sent if s.offset is None or s.offset < 0]
    sent = [s for s in sent if s.offset is not None and s.offset >= 0]
    seen = read_all(cluster.bootstrap(), sent, conf=cluster.client_conf())
    read_at: dict[tuple[int, bytes], int] = {}
    for r in seen:
        read_at.setdefault((r.partition, r.value), r.offset)
    missing = [s for s in unplaced if (s.partition, s.value) not in read_at]
    sent += [dataclasses.replace(s, offset=read_at[(s.partition, s.value)]) for s in unplaced
             if (s.partition, s.value) in read_at]
    report = check(sent, seen)
    print(f"\nchecker: {report.summary()}; {len(failed)} sends failed ({sorted(set(failed))[:3]}); "
          f"{len(unplaced)} acknowledged without an offset ({len(missing)} of them not read)")
    assert report.acknowledged > 0
    assert report.problems() == {}, report.summary() + f" {report.problems()}" + cluster.logs()
    assert not missing, f"{len(missing)} acknowledged without an offset and never read: {missing[:10]}" + cluster.logs()
    if group is not None:
        group.finish()
        # What the group read is a part of the log: values at their acknowledged offsets, no offset reused.
        group_report = check([s for s in sent if s.value in {r.value for r in group.seen}], group.seen)
        assert group_report.problems() == {}, "group consumer: " + group_report.summary()
        assert group.seen, "the group consumer read nothing"


@contextlib.contextmanager
def running_cluster(directory: Path, make=FaultCluster, fabric: Fabric | None = None):
    """Three voters behind a fabric of proxies, TOPIC created and in sync everywhere."""
    fabric = fabric or Fabric()
    cluster = make(directory, fabric)
    for node_id in VOTERS:  # every voter's proxy first: each node's settings name them all
        cluster.configure(node_id, controller=True)
    for node_id in VOTERS:
        cluster.write(node_id, controller=True)
    for node_id in VOTERS:
        cluster.start(node_id)
    try:
        cluster.wait(lambda: (lambda md: md if md is not None and len(md) else None)(
            _brokers(cluster, 1)), "the cluster up", timeout_s=90)
        cluster.wait(lambda: all(len(_brokers(cluster, n) or ()) == 3 for n in VOTERS), "three brokers registered")
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap(), **cluster.admin_conf()})
        for f in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)], request_timeout=30).values():
            f.result(timeout=60)
        for node_id in VOTERS:
            cluster.wait_all_in_sync(node_id)
        yield cluster
    finally:
        fabric.heal()
        cluster.shutdown()
        fabric.close()


# -- the faults, each a step of a scenario


def _brokers(cluster: FaultCluster, node_id: int):
    try:
        return [b.node_id for b in cluster.request(node_id, MetadataRequest(topics=[]), 12).brokers]
    except (NodeUnavailable, OSError):
        return None


def wait_progress(cluster: FaultCluster, load: Load, count: int, what: str, timeout_s: float = 90.0,
                  partition: int | None = None) -> None:
    """`count` more acknowledged records (of `partition` only, if given): the producer carries on."""
    target = load.acked(partition) + count
    try:
        cluster.wait(lambda: load.acked(partition) >= target, f"{count} more acknowledged records {what}", timeout_s)
    except AssertionError as e:
        raise AssertionError(f"{e}\n--- the producer (librdkafka statistics)\n{load.describe(partition)}") from None


def cut_leader_off(cluster: FaultCluster, load: Load, rng: random.Random, alive=VOTERS) -> None:
    """Cut a partition's leader off from the other nodes (both ways; clients still reach it): another
    replica becomes leader and acknowledged writes continue there; heal; all back in sync."""
    parts = cluster.wait_all_in_sync(alive[0])
    partition = rng.randrange(PARTITIONS)
    victim = parts[partition].leader_id
    others = [n for n in cluster.proxy if n != victim]
    print(f"cut leader {victim} of partition {partition} off from {others}")
    cluster.fabric.isolate(victim, others)
    observer = next(n for n in alive if n != victim)
    cluster.wait(lambda: (lambda ps: ps is not None and ps[partition].leader_id not in (-1, victim))(cluster.partitions(observer)),
                 f"a new leader of partition {partition} without {victim}")
    # The client finds the new leader by itself, even when the cut-off leader is the only broker it is
    # connected to (the leader hides its leaderships once its lease with the controller has expired).
    wait_progress(cluster, load, 30, f"to partition {partition} while its old leader {victim} is cut off", partition=partition)
    cluster.fabric.heal()
    cluster.wait_all_in_sync(observer)
    cluster.wait_all_in_sync(victim)


def cut_follower_off(cluster: FaultCluster, load: Load, rng: random.Random, alive=VOTERS) -> None:
    """Cut a node that leads nothing of TOPIC (or any node) off both ways: it leaves the ISRs; heal; back."""
    parts = cluster.wait_all_in_sync(alive[0])
    leaders = {p.leader_id for p in parts.values()}
    candidates = [n for n in alive if n not in leaders] or list(alive)
    victim = rng.choice(candidates)
    others = [n for n in cluster.proxy if n != victim]
    print(f"cut follower {victim} off from {others} and clients")
    cluster.fabric.isolate(victim, others, clients=True)
    observer = next(n for n in alive if n != victim)
    cluster.wait(lambda: (lambda ps: ps is not None and all(victim not in p.isr_nodes for p in ps.values()))(
        cluster.partitions(observer)), f"{victim} out of every ISR")
    wait_progress(cluster, load, 100, f"while {victim} is out of the ISRs")
    cluster.fabric.heal()
    cluster.wait_all_in_sync(observer)


def cut_one_way(cluster: FaultCluster, load: Load, rng: random.Random, alive=VOTERS) -> None:
    """Cut one direction between a leader and one follower (the follower's fetches reach the leader, its
    responses do not come back, or the reverse); heal; all back in sync."""
    parts = cluster.wait_all_in_sync(alive[0])
    p = parts[rng.randrange(PARTITIONS)]
    follower = rng.choice([n for n in p.replica_nodes if n != p.leader_id])
    source, target = (p.leader_id, follower) if rng.random() < 0.5 else (follower, p.leader_id)
    print(f"cut {source} -> {target} one way")
    cluster.fabric.cut(source, target)
    wait_progress(cluster, load, 100, f"with {source} -> {target} cut")
    cluster.fabric.heal()
    cluster.wait_all_in_sync(alive[0])


def cut_clients_from_leader(cluster: FaultCluster, load: Load, rng: random.Random, alive=VOTERS) -> None:
    """Cut the clients off from a partition's leader (the nodes still reach it: nothing fails over, as in
    Kafka): its partition waits while the others go on; heal: it goes on where it stopped."""
    parts = cluster.wait_all_in_sync(alive[0])
    partition = rng.randrange(PARTITIONS)
    victim = parts[partition].leader_id
    print(f"cut clients off from node {victim} (leader of partition {partition})")
    cluster.fabric.isolate(victim, [], clients=True, reset=rng.random() < 0.5)
    others = [p for p, part in parts.items() if part.leader_id != victim]
    if others:
        wait_progress(cluster, load, 50, f"to partition {others[0]} while clients cannot reach {victim}", partition=others[0])
    cluster.fabric.heal()
    wait_progress(cluster, load, 30, f"to partition {partition} after the heal", partition=partition)


def restart_node(cluster: FaultCluster, load: Load, node_id: int) -> None:
    """SIGTERM (controlled shutdown), start again, wait until it is back in every ISR."""
    print(f"restart node {node_id}")
    cluster.stop(node_id)
    observer = next(n for n in VOTERS if n != node_id)
    cluster.wait(lambda: (lambda ps: ps is not None and all(p.leader_id != node_id for p in ps.values()))(
        cluster.partitions(observer)), f"no partition led by the stopped node {node_id}")
    wait_progress(cluster, load, 50, f"while node {node_id} is down")
    cluster.start(node_id)
    cluster.wait_all_in_sync(observer)
    cluster.wait_all_in_sync(node_id)


def kill_leader(cluster: FaultCluster, load: Load, rng: random.Random, alive=VOTERS) -> None:
    """kill -9 a partition's leader; another leads; restart it; back in sync."""
    parts = cluster.wait_all_in_sync(alive[0])
    victim = parts[rng.randrange(PARTITIONS)].leader_id
    print(f"kill -9 node {victim}")
    cluster.stop(victim, signal.SIGKILL)
    observer = next(n for n in alive if n != victim)
    cluster.wait(lambda: (lambda ps: ps is not None and all(p.leader_id not in (-1, victim) for p in ps.values()))(
        cluster.partitions(observer)), f"no partition led by the killed node {victim}")
    wait_progress(cluster, load, 50, f"while node {victim} is dead")
    cluster.start(victim)
    cluster.wait_all_in_sync(observer)


def restart_any(cluster: FaultCluster, load: Load, rng: random.Random) -> None:
    restart_node(cluster, load, rng.choice(VOTERS))


def pause_leader(cluster: FaultCluster, load: Load, rng: random.Random, alive=VOTERS) -> None:
    """SIGSTOP a partition's leader past its session (another leads), then SIGCONT: it finds out it was
    deposed, truncates what it alone held and follows; back in sync."""
    parts = cluster.wait_all_in_sync(alive[0])
    partition = rng.randrange(PARTITIONS)
    victim = parts[partition].leader_id
    print(f"SIGSTOP node {victim} (leader of partition {partition})")
    cluster.procs[victim].send_signal(signal.SIGSTOP)
    try:
        observer = next(n for n in alive if n != victim)
        cluster.wait(lambda: (lambda ps: ps is not None and ps[partition].leader_id not in (-1, victim))(cluster.partitions(observer)),
                     f"a new leader of partition {partition} while {victim} is stopped")
        wait_progress(cluster, load, 30, f"to partition {partition} while {victim} is stopped", partition=partition)
    finally:
        cluster.procs[victim].send_signal(signal.SIGCONT)
    cluster.wait_all_in_sync(observer)
    cluster.wait_all_in_sync(victim)


def kill_controller(cluster: FaultCluster, load: Load, rng: random.Random, alive=VOTERS) -> None:
    """kill -9 the active controller; the others elect one and carry on; restart it; back in sync."""
    cluster.wait_all_in_sync(alive[0])
    victim = cluster.wait(lambda: cluster.quorum_leader(alive), "a quorum leader")
    print(f"kill -9 the active controller {victim}")
    cluster.stop(victim, signal.SIGKILL)
    others = [n for n in alive if n != victim]
    cluster.wait(lambda: (lambda x: x is not None and x != victim)(cluster.quorum_leader(others)), "a new active controller")
    wait_progress(cluster, load, 50, f"while the old controller {victim} is dead")
    cluster.start(victim)
    cluster.wait_all_in_sync(others[0])


def move_partition_to_new_broker(cluster: FaultCluster, load: Load, new_node: int = 4) -> None:
    """Start a broker-only fourth node; move partition 0 to it with AlterPartitionReassignments (kafka-python's
    admin client: confluent-kafka's has none) dropping one of its replicas; wait until the target is the replica set and the ISR."""
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    cluster.add_node(new_node, controller=False)
    cluster.start(new_node)
    cluster.wait(lambda: new_node in (_brokers(cluster, 1) or ()), f"node {new_node} registered")
    parts = cluster.wait_all_in_sync(1)
    old = list(parts[0].replica_nodes)
    dropped = next(n for n in old if n != parts[0].leader_id)  # keep the leader: the move is while it writes
    target = [n for n in old if n != dropped] + [new_node]
    print(f"reassign partition 0 from {old} to {target}")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(), request_timeout_ms=30000, **cluster.kafka_python_conf())
    try:
        results = admin.alter_partition_reassignments({TopicPartition(TOPIC, 0): target})
        assert results == {TopicPartition(TOPIC, 0): None}, results

        def moved():
            ps = cluster.partitions(1)
            if ps is None:
                return None
            p = ps[0]
            return p if sorted(p.replica_nodes) == sorted(target) and sorted(p.isr_nodes) == sorted(target) else None

        cluster.wait(moved, f"partition 0 on {target}, all in sync")
        listing = admin.list_partition_reassignments([TopicPartition(TOPIC, 0)])
        assert not listing, listing  # nothing left in flight
    finally:
        admin.close()
    # The dropped replica's log is gone from its broker (it stopped following and deleted it).
    cluster.wait(lambda: not (cluster.dir / f"node-{dropped}" / "data" / f"{TOPIC}-0").exists(),
                 f"the log of {TOPIC}-0 deleted on node {dropped}")
    wait_progress(cluster, load, 100, "after the move")
    on_new = cluster.partitions(new_node)
    assert on_new is not None and sorted(on_new[0].isr_nodes) == sorted(target)


# -- the scenarios (test_security_faults.py runs them on a secured cluster)


def cuts_restart_and_a_move(cluster: FaultCluster) -> None:
    """The default run's bounded slice: one of each fault, then the check."""
    rng = random.Random(17)
    load = Load(cluster.bootstrap(), conf=cluster.client_conf()).start()
    group = GroupConsumer(cluster.bootstrap(), "faults-group", conf=cluster.client_conf()).start()
    wait_progress(cluster, load, 100, "at start")
    cut_leader_off(cluster, load, rng)
    cut_follower_off(cluster, load, rng)
    restart_node(cluster, load, rng.choice(VOTERS))
    move_partition_to_new_broker(cluster, load)
    verify(cluster, load, group)


def rolling_restart(cluster: FaultCluster) -> None:
    load = Load(cluster.bootstrap(), conf=cluster.client_conf()).start()
    group = GroupConsumer(cluster.bootstrap(), "rolling-group", conf=cluster.client_conf()).start()
    wait_progress(cluster, load, 100, "at start")
    for node_id in VOTERS:
        restart_node(cluster, load, node_id)
    verify(cluster, load, group)


def random_faults(cluster: FaultCluster) -> None:
    seed = int(os.environ.get("ODRADEK_FAULT_SEED", random.randrange(1 << 30)))
    rounds = int(os.environ.get("ODRADEK_FAULT_ROUNDS", "8"))
    print(f"\nfault loop seed {seed} ({rounds} rounds): ODRADEK_FAULT_SEED={seed} replays it")
    rng = random.Random(seed)
    load = Load(cluster.bootstrap(), conf=cluster.client_conf()).start()
    bundled = BundledLoad(cluster.bootstrap(), conf=cluster.client_conf()).start()
    group = GroupConsumer(cluster.bootstrap(), "loop-group", conf=cluster.client_conf()).start()
    wait_progress(cluster, load, 100, "at start")
    steps = [cut_leader_off, cut_follower_off, cut_one_way, cut_clients_from_leader, kill_leader, pause_leader, kill_controller,
             restart_any]
    for round_ in range(rounds):
        step = rng.choice(steps)
        print(f"round {round_}: {step.__name__}", flush=True)
        began, acked = time.monotonic(), load.acked()
        step(cluster, load, rng)
        print(f"round {round_} done in {time.monotonic() - began:.1f} s, {load.acked() - acked} acknowledged meanwhile "
              f"(load average {os.getloadavg()[0]:.1f})", flush=True)
    verify(cluster, load, group, bundled)
