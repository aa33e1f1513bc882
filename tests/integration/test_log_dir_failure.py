"""A log directory that fills up or fails under load, on real processes: the broker stays up and nothing
acknowledged is lost.

One cluster for the module (three `odradek cluster up` nodes, log.dirs=data,small on each), node 3's
`small` an 8 MB tmpfs the test mounts (root). An idempotent acks=all confluent-kafka producer writes a
topic of 4 partitions (3 replicas, min.insync.replicas 2, all led by node 3) until node 3's small disk is full:

  * node 3's process stays up, DescribeLogDirs shows `small` with KAFKA_STORAGE_ERROR and `data` online;
  * every partition whose replica was in `small` leaves node 3 (the controller took it out of the ISR and
    the leadership, without waiting for replica.lag.time.max.ms), node 3 keeps its `data` replicas;
  * every send is acknowledged, the producer never meets a fatal error (librdkafka's _INCONSISTENT was one
    before: a follower's full disk), and the delivery checker finds nothing acknowledged lost;
  * restarted with the disk still full, node 3 starts on its other directory; once space is back
    (the tmpfs grown) a restart brings `small` back and its replicas catch up into the ISR;
  * the I/O-error variant: node 3 restarted with an injected EIO after 1 MB in `small`
    (ODRADEK_TEST_FAIL_WRITES, storage/faults.py) goes the same way;
  * the disk gone at a start (unmounted, its path no directory): node 3 starts on `data` alone and does not
    make empty logs there for the replicas that were on `small`.
Waits are bounded polls of the cluster's answers, never timed assertions.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import CreateTopicsRequest, DescribeLogDirsRequest, MetadataRequest

from tests.harness.processes import OVERRIDES, Cluster, odradek

from ..checker import Seen, Sent, check

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (needs root)"),
]

TOPIC = "filling"
PARTITIONS = 4
VALUE_BYTES = 4000


class JbodCluster(Cluster):
    def up(self, *, env: dict[str, str] | None = None) -> None:
        args = ["cluster", "up", "--nodes", str(self.nodes), "--dir", str(self.dir), "--port", str(self.port)]
        for o in [*OVERRIDES, f"log.dirs={self.dir}/node-{{node}}/data,{self.dir}/node-{{node}}/small",
                  "offsets.topic.num.partitions=1"]:  # (the checker's consumer names a group)
            args += ["--override", o]
        result = subprocess.run([*odradek_cmd(), *args], capture_output=True, text=True, timeout=120,
                                env={**os.environ, **(env or {})})
        assert result.returncode == 0, result.stderr + self.logs()

    def restart(self, node_id: int, *, env: dict[str, str] | None = None, while_down=None) -> None:
        pid = self.pid(node_id)
        os.kill(pid, signal.SIGTERM)
        self.wait(lambda: not _alive(pid), f"node {node_id} stopped", timeout_s=40)
        # (An exited node nobody reaped still answers kill(pid, 0): `cluster up` would take it for running.)
        (self.dir / f"node-{node_id}" / "node.pid").unlink()
        if while_down is not None:
            while_down()
        self.up(env=env)


def odradek_cmd() -> list[str]:
    import sys

    return [sys.executable, "-m", "odradek"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not reaped: `cluster up` started it) is not alive
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("logdirs") / "cluster"
    for node_id in (1, 2, 3):  # (all three: `cluster up` counts the nodes of a directory by them)
        (base / f"node-{node_id}").mkdir(parents=True)
    small = base / "node-3" / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(small)], check=True)
    c = JbodCluster(base)
    c.small = small
    try:
        c.up()
        yield c
    finally:
        odradek("cluster", "down", "--dir", str(base), "--timeout", "10")
        if small.is_dir():
            subprocess.run(["umount", "-l", str(small)], check=False)


def dirs_of(cluster: Cluster, node_id: int) -> dict[str, int]:
    response = cluster.request(node_id, DescribeLogDirsRequest(topics=None), 4)
    return {Path(r.log_dir).name: r.error_code for r in response.results}


def partitions(cluster: Cluster, node_id: int = 1) -> dict[int, tuple[int, list[int]]]:
    response = cluster.request(node_id, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=TOPIC)]), 12)
    return {p.partition_index: (p.leader_id, list(p.isr_nodes)) for t in response.topics for p in t.partitions}


class Load:
    """An idempotent acks=all producer recording what was acknowledged, and every error it was told."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self.sent: list[Sent] = []
        self.failed: list[str] = []
        self.errors: list[str] = []
        self.fatal: list[str] = []
        self.count = 0

        def on_error(err) -> None:
            (self.fatal if err.fatal() else self.errors).append(str(err))

        self.producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                                  "linger.ms": 5, "error_cb": on_error})

    def send(self, n: int) -> None:
        def delivered(err, msg) -> None:
            if err is not None:
                self.failed.append(str(err))
            else:
                self.sent.append(Sent(msg.topic(), msg.partition(), msg.offset(), msg.value()))

        for _ in range(n):
            value = b"%09d-" % self.count + b"x" * VALUE_BYTES
            self.count += 1
            while True:
                try:
                    self.producer.produce(TOPIC, value, partition=self.count % PARTITIONS, on_delivery=delivered)
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.producer.poll(0)

    def flush(self) -> int:
        return self.producer.flush(120)


def consume_all(bootstrap: str, expected: int) -> list[Seen]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "checker", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    seen: list[Seen] = []
    deadline = time.monotonic() + 120
    try:
        while len(seen) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(500, 1.0):
                if msg.error() is None:
                    seen.append(Seen(msg.topic(), msg.partition(), msg.offset(), msg.value()))
    finally:
        consumer.close()
    return seen


def test_a_full_log_directory_goes_offline_and_nothing_acknowledged_is_lost(cluster):
    # Node 3 leads every partition: the full disk is a leader's (the harder case: the producer is answered
    # KAFKA_STORAGE_ERROR and must find the new leader) as well as a follower's, later.
    topic = CreateTopicsRequest.CreatableTopic
    created = cluster.request(1, CreateTopicsRequest(timeout_ms=20000, validate_only=False, topics=[topic(
        name=TOPIC, num_partitions=-1, replication_factor=-1, configs=[], assignments=[
            topic.CreatableReplicaAssignment(partition_index=i, broker_ids=[3, 1, 2] if i % 2 else [3, 2, 1])
            for i in range(PARTITIONS)])]), 7, timeout_s=30)
    assert created.topics[0].error_code == 0, created
    cluster.wait(lambda: all(len(isr) == 3 for _, isr in partitions(cluster).values()) and len(partitions(cluster)) == 4,
                 "the topic with every replica in sync")
    hosted = lambda: [n for d in (cluster.small, cluster.dir / "node-3" / "data") for n in os.listdir(d)  # noqa: E731
                      if n.startswith(TOPIC + "-")]
    cluster.wait(lambda: len(hosted()) == PARTITIONS, "node 3 hosting its replicas")
    in_small = sorted(int(n.rsplit("-", 1)[1]) for n in os.listdir(cluster.small) if n.startswith(TOPIC + "-"))
    in_data = [p for p in range(PARTITIONS) if p not in in_small]
    assert in_small and in_data  # node 3 placed replicas in both directories
    assert all(leader == 3 for leader, _ in partitions(cluster).values())
    pid = cluster.pid(3)

    load = Load(cluster.bootstrap(1))
    # Until node 3's small disk is full: it holds about half the traffic (its replicas there).
    deadline = time.monotonic() + 180
    while dirs_of(cluster, 3).get("small") != ErrorCode.KAFKA_STORAGE_ERROR:
        assert time.monotonic() < deadline, "small never went offline" + cluster.logs()
        load.send(500)
        load.producer.poll(0.1)
    load.send(1000)  # and produce goes on after it
    assert load.flush() == 0
    assert _alive(pid) and cluster.pid(3) == pid  # the same process, still up
    assert dirs_of(cluster, 3) == {"data": 0, "small": ErrorCode.KAFKA_STORAGE_ERROR}
    cluster.wait(lambda: all(3 not in isr and leader != 3 for p, (leader, isr) in partitions(cluster).items()
                             if p in in_small), "node 3 out of the failed replicas' ISR and leadership")
    assert all(3 in partitions(cluster)[p][1] for p in in_data)  # its other directory still serves
    assert load.fatal == [] and load.failed == [], (load.fatal, load.failed[:5])
    log_text = (cluster.dir / "node-3" / "node.log").read_text()
    assert "log directory offline" in log_text and "No space left on device" in log_text
    shown = odradek("cluster", "log-dirs", "-b", cluster.bootstrap(1)).stdout  # what the operator sees
    print(shown)
    assert any(line.split()[:3] == ["3", str(cluster.small), "offline"] and "KAFKA_STORAGE_ERROR" in line
               for line in shown.splitlines()), shown

    # Restarted with the disk still full, node 3 starts on what it has; nothing acknowledged is lost.
    cluster.restart(3)
    cluster.wait(lambda: all(3 in partitions(cluster)[p][1] for p in in_data), "node 3 back in its data replicas' ISR")
    load.send(500)
    assert load.flush() == 0 and load.fatal == [] and load.failed == []
    seen = consume_all(cluster.bootstrap(2), len(load.sent))
    report = check(load.sent, seen)
    assert report.problems() == {}, report.summary()

    # Space comes back: after a restart `small` is online again and its replicas catch up into the ISR.
    subprocess.run(["mount", "-o", "remount,size=256m", str(cluster.small)], check=True)
    cluster.restart(3)
    cluster.wait(lambda: dirs_of(cluster, 3) == {"data": 0, "small": 0}, "small online again")
    cluster.wait(lambda: all(3 in isr for _, isr in partitions(cluster).values()), "node 3 in every ISR again",
                 timeout_s=120)

    # The I/O-error variant: a disk that fails (EIO) after 1 MB more.
    cluster.restart(3, env={"ODRADEK_TEST_FAIL_WRITES": f"{cluster.small}:1000000"})
    pid = cluster.pid(3)
    load.send(1500)
    cluster.wait(lambda: dirs_of(cluster, 3).get("small") == ErrorCode.KAFKA_STORAGE_ERROR, "small offline (EIO)")
    load.send(500)
    assert load.flush() == 0 and load.fatal == [] and load.failed == []
    assert _alive(pid)
    cluster.wait(lambda: all(3 not in isr and leader != 3 for p, (leader, isr) in partitions(cluster).items()
                             if p in in_small), "node 3 out of the failed replicas' ISR again")
    seen = consume_all(cluster.bootstrap(2), len(load.sent))
    report = check(load.sent, seen)
    assert report.problems() == {}, report.summary()
    assert "Input/output error (injected)" in (cluster.dir / "node-3" / "node.log").read_text()

    # The disk is gone at the next start (its mount point is no directory now): node 3 starts on `data`, and
    # does not make new, empty logs there for the replicas that were on `small` (they may be elected).
    def disk_gone() -> None:
        subprocess.run(["umount", str(cluster.small)], check=True)
        cluster.small.rmdir()
        cluster.small.write_text("not a directory")

    cluster.restart(3, while_down=disk_gone)
    assert dirs_of(cluster, 3) == {"data": 0, "small": ErrorCode.KAFKA_STORAGE_ERROR}
    assert "log directory offline at start" in (cluster.dir / "node-3" / "node.log").read_text()
    cluster.wait(lambda: all(3 in partitions(cluster)[p][1] for p in in_data), "node 3 serving its data replicas")
    assert not {f"{TOPIC}-{p}" for p in in_small} & set(os.listdir(cluster.dir / "node-3" / "data"))
    assert all(3 not in partitions(cluster)[p][1] for p in in_small)
