"""Apache Kafka itself, the reference release, started from its Maven jars: one node or three.

Used by the differential test (tests/integration/test_kafka_differential.py, through tests/harness/kafka_ref.py)
and by the benchmark's `kafka` peer (bench/harness.py, bench/procs.py), so it lives here, where both can import
it (the tests already import bench; bench imports nothing from tests but the Maven resolver, lazily).

The jars: tests/jvm/kafka/pom.xml names org.apache.kafka:kafka_2.13 (the broker, the controller, the storage
tool and every coordinator) and an SLF4J binding; `mvn dependency:copy-dependencies` copies them into the
ignored tests/jvm/kafka-lib/ on first use, with the same cache, lock and loud failure as the Java client's jars
(tests/harness/jvm.py `resolve`). Nothing of Kafka is committed.

A node is what `bin/kafka-storage.sh format` then `bin/kafka-server-start.sh` make of a KRaft combined-mode
server.properties (process.roles=broker,controller), run as the same main classes (kafka.tools.StorageTool,
kafka.Kafka) on loopback with free ports:

- the quorum is static (controller.quorum.voters), so `format` needs no --standalone and every node of a
  three-node cluster is formatted alike with one cluster id;
- internal topics get the cluster's size as replication factor (1 or 3) and min ISR (1 or 2), as an operator
  sets them for a cluster of that size;
- the log goes to <workdir>/kafka.log through slf4j-simple; a node is up once it logs "Kafka Server started"
  (KafkaRaftServer's line, written after the broker turned STARTED: registered, unfenced, listening);
- the heap is small (-Xmx512m by default), so three nodes fit beside the tests on a 2-core machine;
  `quick_jit` (C1 only, serial GC) trades peak speed for a faster, cheaper start: the tests use it, the
  bench does not (it runs Kafka's own JVM flags: G1, MaxGCPauseMillis=20, as kafka-run-class.sh).

Stop is SIGTERM to the node's own PID (the java process itself, no wrapper script), then SIGKILL after a
grace period; `kill` is kill -9.
"""

from __future__ import annotations

import base64
import os
import random
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .procs import terminate

REPO_ROOT = Path(__file__).resolve().parent.parent
KAFKA_POM = REPO_ROOT / "tests" / "jvm" / "kafka" / "pom.xml"
KAFKA_LIB = REPO_ROOT / "tests" / "jvm" / "kafka-lib"
KAFKA_VERSION = "4.4.0"
STARTED = "Kafka Server started"
# Kafka's own defaults from kafka-run-class.sh (KAFKA_JVM_PERFORMANCE_OPTS), with a smaller heap.
PERFORMANCE_OPTS = ["-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
                    "-XX:+ExplicitGCInvokesConcurrent", "-Djava.awt.headless=true"]
QUICK_OPTS = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true"]


class KafkaUnavailable(RuntimeError):
    """The reference could not be resolved or started (no JDK, no Maven, no Maven Central, a failed start)."""


def classpath() -> str:
    """The reference's jars as a java -cp value, resolved by Maven into tests/jvm/kafka-lib/ on first use."""
    from tests.harness.jvm import JvmUnavailable, resolve

    try:
        jars = resolve(KAFKA_POM, KAFKA_LIB, f"kafka_2.13-{KAFKA_VERSION}")
    except JvmUnavailable as exc:
        raise KafkaUnavailable(str(exc)) from None
    return os.pathsep.join(map(str, jars))


def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID in URL-safe base64 without padding, as `kafka-storage random-uuid`,
    drawn again when it starts with '-' as Kafka's Uuid.randomUuid does (kafka-storage's argument parser
    would read such an id as an option; one run in 64 failed so)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def free_ports(n: int) -> list[int]:
    """n distinct loopback ports free now, below the kernel's ephemeral range: a node binds its ports seconds
    later (after `format`, or on a restart after kill -9), and a port from the ephemeral range may by then be
    some outgoing connection's local port (as tests/harness/processes.py's free_port_block explains)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            ephemeral_low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    chosen: list[int] = []
    rng = random.Random()
    while len(chosen) < n:
        port = rng.randrange(10000, ephemeral_low)
        if port in chosen:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        chosen.append(port)
    return chosen


@dataclass
class KafkaNode:
    """One combined-mode Kafka node. `port` is its PLAINTEXT listener, `controller_port` its CONTROLLER one."""

    node_id: int
    workdir: Path
    port: int
    controller_port: int
    voters: str
    cluster_id: str
    cluster_size: int = 1
    heap: str = "512m"
    quick_jit: bool = False
    cpus: set[int] | None = None
    overrides: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    started_s: float = 0.0

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def log_path(self) -> Path:
        return self.workdir / "kafka.log"

    def properties(self) -> dict[str, str]:
        rf = str(self.cluster_size)
        min_isr = "2" if self.cluster_size >= 3 else "1"
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(self.workdir / "data"),
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min_isr,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min_isr,
            "group.initial.rebalance.delay.ms": "0",
        }
        props.update(self.overrides)
        return props

    def _java(self, main: str, *args: str, cp: str) -> list[str]:
        opts = QUICK_OPTS if self.quick_jit else PERFORMANCE_OPTS
        return ["java", f"-Xmx{self.heap}", f"-Xms{self.heap}", *opts,
                f"-Dorg.slf4j.simpleLogger.logFile={self.log_path}", "-Dorg.slf4j.simpleLogger.showDateTime=true",
                "-cp", cp, main, *args]

    def format(self, cp: str) -> None:
        """`kafka-storage format -t <cluster id> -c server.properties`, once per data directory."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        if (self.workdir / "data" / "meta.properties").exists():
            return
        done = subprocess.run(["java", "-Xmx256m", *QUICK_OPTS, "-cp", cp, "kafka.tools.StorageTool", "format",
                               "-t", self.cluster_id, "-c", str(config)], capture_output=True, text=True, timeout=180)
        if done.returncode != 0:
            raise KafkaUnavailable(f"kafka-storage format for node {self.node_id} exited {done.returncode}:\n"
                                   + (done.stdout + done.stderr)[-3000:])

    def spawn(self, cp: str) -> None:
        """Starts the node (already formatted) without waiting for it: see `wait_started`."""
        self._spawned_at = time.monotonic()
        if self.log_path.exists():  # a restart: slf4j-simple truncates its file, so keep the last run's aside
            runs = len(list(self.workdir.glob("kafka.log.*")))
            self.log_path.rename(self.workdir / f"kafka.log.{runs + 1}")
        preexec = (lambda: os.sched_setaffinity(0, self.cpus)) if self.cpus else None
        with open(self.workdir / "stderr.txt", "ab") as stderr:
            self.proc = subprocess.Popen(self._java("kafka.Kafka", str(self.workdir / "server.properties"), cp=cp),
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                                         preexec_fn=preexec)

    def wait_started(self, timeout_s: float = 120.0) -> "KafkaNode":
        """Until the node logs that it started (after it listens, registered and unfenced); raises with the
        log's tail if it exits or does not get there in time."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc is None or self.proc.poll() is not None:
                code = None if self.proc is None else self.proc.returncode
                raise KafkaUnavailable(f"Kafka node {self.node_id} exited ({code}) before it started:\n{self.tail()}")
            if self._started_since_spawn():
                self.started_s = time.monotonic() - self._spawned_at
                return self
            if time.monotonic() > deadline:
                self.kill()
                raise KafkaUnavailable(f"Kafka node {self.node_id} did not start in {timeout_s:.0f} s:\n{self.tail()}")
            time.sleep(0.1)

    def _started_since_spawn(self) -> bool:  # (the log holds this run only: see spawn)
        try:
            with open(self.log_path, "rb") as f:
                return STARTED.encode() in f.read()
        except OSError:
            return False

    def tail(self, lines: int = 30) -> str:
        """The log's ERROR lines (the cause of a failed start is rarely in its last lines, which are the
        shutdown), then its last lines and stderr's."""
        parts = []
        try:
            log = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            log = []
        parts += [line for line in log if " ERROR " in line][:10] + ["..."] + log[-lines:]
        try:
            parts += (self.workdir / "stderr.txt").read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            pass
        return "\n".join(parts)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM (Kafka's controlled shutdown), SIGKILL if it takes longer than timeout_s."""
        if self.proc is None:
            return None
        return terminate(self.proc, timeout_s)

    def kill(self) -> None:
        """kill -9."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def plan(workdir: Path, nodes: int = 1, **node_settings) -> list[KafkaNode]:
    """The nodes of a fresh cluster (not yet formatted or started): ids 1..n, free ports, one cluster id."""
    ports = free_ports(2 * nodes)
    voters = ",".join(f"{i + 1}@127.0.0.1:{ports[2 * i + 1]}" for i in range(nodes))
    cluster_id = new_cluster_id()
    return [KafkaNode(i + 1, Path(workdir) / f"kafka-{i + 1}", ports[2 * i], ports[2 * i + 1], voters, cluster_id,
                      cluster_size=nodes, **node_settings) for i in range(nodes)]


def start(workdir: Path, nodes: int = 1, timeout_s: float = 180.0, cp: str | None = None, **node_settings) -> list[KafkaNode]:
    """Formats and starts a cluster of `nodes` combined-mode nodes, waits until each has started, and returns
    them; on any failure every node started so far is killed and KafkaUnavailable raised."""
    cp = cp or classpath()
    cluster = plan(workdir, nodes, **node_settings)
    try:
        for node in cluster:
            node.format(cp)
        for node in cluster:
            node.spawn(cp)
        for node in cluster:
            node.wait_started(timeout_s)
    except BaseException:
        for node in cluster:
            node.kill()
        raise
    return cluster


def stop(cluster: list[KafkaNode]) -> None:
    for node in cluster:
        try:
            node.stop()
        except Exception:  # noqa: BLE001 - stop the others whatever happened to this one
            node.kill()
