"""Kafka Streams 4.4 (tests/jvm/streams/pom.xml, tests/jvm/streams-src/StreamsApp.java) against three Odradek
nodes of real processes, through a kill -9 of a node while the application runs:

- word count (at_least_once): lines -> flatMapValues -> groupBy (a repartition topic) -> count (a changelogged
  RocksDB store) -> the counts topic. No count is lost: every word's last count is at least its number of
  occurrences (at-least-once may count a line twice after a failure, never zero times);
- exactly_once_v2 (Transactions V2 between Streams and the cluster: one producer per thread, epoch bump per
  commit): each input record copied once to an output topic and counted per key. A read_committed reader
  sees every input exactly once in the copy, and every key's last count equals its number of inputs; the
  inputs themselves are checked with the delivery checker (nothing acknowledged lost through the kill).
- streams groups (KIP-1071, `group.protocol=streams`) are not served (StreamsGroupHeartbeat is not
  advertised): the application fails at once with the client's own clear error, as against a Kafka broker
  that does not enable them, and nothing is half-started.

One cluster for the module; each application runs in its own JVM, stopped by closing its stdin (a clean
close) or killed. Waits poll for a condition with a deadline: the machine is shared.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import threading
import time
import uuid
from collections import Counter

import confluent_kafka
import pytest

from tests.checker import Seen, Sent, check
from tests.harness.jvm import streams_classpath
from tests.harness.processes import Cluster, create_with_confluent

pytestmark = pytest.mark.timeout(300)

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
DEADLINE_S = 90


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class StreamsProcess:
    """One StreamsApp JVM; its output lines ("state RUNNING", "error ...") are collected."""

    def __init__(self, cp: str, mode: str, bootstrap: str, app_id: str, source: str, sink: str, state_dir,
                 *extra: str) -> None:
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", cp, "StreamsApp", mode,
             bootstrap, app_id, source, sink, str(state_dir), *extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout_s: float = DEADLINE_S) -> None:
        deadline = time.monotonic() + timeout_s
        while not any(text in line for line in self.lines):
            assert self.proc.poll() is None or any(text in line for line in self.lines), self.output()
            assert time.monotonic() < deadline, f"no {text!r} from the Streams app:\n{self.output()}"
            time.sleep(0.2)

    def output(self) -> str:
        return "\n".join(self.lines[-40:])

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def classpath():
    return streams_classpath()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("streams-cluster"), nodes=3,
                overrides=["num.partitions=3", "group.initial.rebalance.delay.ms=0",
                           "transaction.state.log.num.partitions=3", "offsets.topic.num.partitions=3"])
    c.up()
    try:
        c.wait(lambda: c.leader([1, 2, 3]) is not None, "a quorum leader")
        yield c
    finally:
        c.down()


def _bootstrap(cluster: Cluster) -> str:
    return ",".join(cluster.bootstrap(n) for n in (1, 2, 3))


def _produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> list[Sent]:
    acked: list[Sent] = []
    errors: list = []

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append(Sent(msg.topic(), msg.partition(), msg.offset(), msg.value()))

    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
                                         "message.timeout.ms": 60_000})
    for key, value in records:
        producer.produce(topic, value=value, key=key, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(DEADLINE_S) == 0 and not errors, errors
    return acked


def _read(bootstrap: str, topic: str, *, read_committed: bool, until, timeout_s: float = DEADLINE_S) -> list:
    """Records of `topic` from the start, polled until `until(records)` holds or the deadline passes."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": _name("check"),
                                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                                         "isolation.level": "read_committed" if read_committed else "read_uncommitted"})
    consumer.subscribe([topic])
    out: list = []
    deadline = time.monotonic() + timeout_s
    try:
        while not until(out) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                out.append(msg)
    finally:
        consumer.close()
    return out


def _last_counts(records) -> dict[str, int]:
    last: dict[str, int] = {}
    for m in sorted(records, key=lambda m: (m.partition(), m.offset())):
        last[m.key().decode()] = struct.unpack(">q", m.value())[0]
    return last


def _kill_and_restart(cluster: Cluster, node_id: int, between) -> None:
    """kill -9 `node_id`, run `between()` while it is down, then start it again and wait until it is back."""
    os.kill(cluster.pid(node_id), signal.SIGKILL)
    try:
        between()
    finally:
        cluster.up()  # starts the nodes that are not running
        cluster.wait(lambda: cluster.quorum(node_id) is not None, f"node {node_id} back in the quorum")


def test_word_count_through_a_kill(classpath, cluster, tmp_path):
    bootstrap = _bootstrap(cluster)
    source, sink = _name("lines"), _name("word-counts")
    create_with_confluent(bootstrap, source, 3, 3)
    create_with_confluent(bootstrap, sink, 3, 3)
    lines = [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(i % 5 + 1)) for i in range(300)]
    want = Counter(w for line in lines for w in line.split())
    half = len(lines) // 2
    _produce(bootstrap, source, [(str(i).encode(), line.encode()) for i, line in enumerate(lines[:half])])
    app = StreamsProcess(classpath, "wordcount", bootstrap, _name("wordcount"), source, sink, tmp_path / "state")
    try:
        app.wait_for("state RUNNING")
        first = Counter(w for line in lines[:half] for w in line.split())
        counted = _read(bootstrap, sink, read_committed=False,
                        until=lambda rs: all(_last_counts(rs).get(w, 0) >= n for w, n in first.items()))
        assert all(_last_counts(counted).get(w, 0) >= n for w, n in first.items()), _last_counts(counted)

        def second_half() -> None:
            _produce(bootstrap, source, [(str(i).encode(), line.encode()) for i, line in enumerate(lines[half:], half)])

        _kill_and_restart(cluster, 2, second_half)
        counted = _read(bootstrap, sink, read_committed=False,
                        until=lambda rs: all(_last_counts(rs).get(w, 0) >= n for w, n in want.items()))
        last = _last_counts(counted)
        assert set(last) == set(want), last
        assert all(last[w] >= n for w, n in want.items()), (last, want)  # none lost (at least once)
        assert not [line for line in app.lines if line.startswith("error")], app.output()
    finally:
        app.close()


def test_exactly_once_v2_through_a_kill(classpath, cluster, tmp_path):
    bootstrap = _bootstrap(cluster)
    source, sink = _name("eos-in"), _name("eos-out")
    for topic in (source, sink, sink + "-counts"):
        create_with_confluent(bootstrap, topic, 3, 3)
    records = [(f"k{i % 12}".encode(), f"v{i}".encode()) for i in range(600)]
    half = len(records) // 2
    acked = _produce(bootstrap, source, records[:half])
    app_id = _name("eos")
    app = StreamsProcess(classpath, "eos", bootstrap, app_id, source, sink, tmp_path / "state")
    try:
        app.wait_for("state RUNNING")
        _read(bootstrap, sink, read_committed=True, until=lambda rs: len(rs) >= half // 2)

        def second_half() -> None:
            acked.extend(_produce(bootstrap, source, records[half:]))

        _kill_and_restart(cluster, 3, second_half)
        copied = _read(bootstrap, sink, read_committed=True, until=lambda rs: len(rs) >= len(records))
        time.sleep(2)  # anything past the inputs (a duplicate) would be committed by now; read it all again
        copied = _read(bootstrap, sink, read_committed=True, until=lambda rs: len(rs) >= len(records), timeout_s=20)
        values = Counter(m.value() for m in copied)
        assert {v for v, n in values.items() if n > 1} == set(), "duplicated in the copy"
        assert set(values) == {v for _, v in records}, "missing from the copy"
        per_key = Counter(k.decode() for k, _ in records)
        counts = _read(bootstrap, sink + "-counts", read_committed=True,
                       until=lambda rs: _last_counts(rs) == dict(per_key))
        assert _last_counts(counts) == dict(per_key)
        # The inputs: every acknowledged send is in the input topic (the kill lost nothing acknowledged).
        inputs = _read(bootstrap, source, read_committed=False, until=lambda rs: len(rs) >= len(acked))
        report = check(acked, [Seen(m.topic(), m.partition(), m.offset(), m.value()) for m in inputs])
        assert not report.problems(), report.summary()
        assert not [line for line in app.lines if line.startswith("error")], app.output()
        # Transactions V2: the application's producer (transactional id "<app id>-<process>-<thread>") bumped its
        # epoch on every commit (at least one per half of the input), where version 1 would have kept the one
        # InitProducerId gave it (0).
        epochs = _transaction_epochs(cluster, app_id)
        assert epochs and max(epochs.values()) >= 2, epochs
    finally:
        app.close()


def _transaction_epochs(cluster: Cluster, prefix: str) -> dict[str, int]:
    """{transactional id: producer epoch} of the ids starting with `prefix`, asked of each node (the coordinator
    of an id lists and describes it)."""
    from odradek.protocol.messages import DescribeTransactionsRequest, ListTransactionsRequest

    out: dict[str, int] = {}
    for node in (1, 2, 3):
        listed = cluster.request(node, ListTransactionsRequest(state_filters=[], producer_id_filters=[]), 0)
        ids = [t.transactional_id for t in listed.transaction_states if t.transactional_id.startswith(prefix)]
        if ids:
            described = cluster.request(node, DescribeTransactionsRequest(transactional_ids=ids), 0)
            out.update({t.transactional_id: t.producer_epoch for t in described.transaction_states if t.error_code == 0})
    return out


def test_streams_groups_are_refused_clearly(classpath, cluster, tmp_path):
    """KIP-1071's streams groups need StreamsGroupHeartbeat (API 88), which this broker does not advertise;
    the Streams client says so itself (UnsupportedVersionException: "The cluster does not support the STREAMS
    group protocol ...", what it says against a Kafka broker without them) and never runs."""
    bootstrap = _bootstrap(cluster)
    source = _name("kip1071-in")
    create_with_confluent(bootstrap, source, 1, 3)
    app = StreamsProcess(classpath, "eos", bootstrap, _name("kip1071"), source, _name("kip1071-out"),
                         tmp_path / "state", "group.protocol=streams")
    try:
        app.wait_for("The cluster does not support the STREAMS group protocol")
        # (UnsupportedVersionException, raised by the client before any heartbeat: API 88 is not advertised)
        assert "state RUNNING" not in app.lines, app.output()
    finally:
        app.close()
