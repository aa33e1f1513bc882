"""Kafka's own share consumer (KafkaShareConsumer, kafka-clients 4.4, KIP-932) against a real broker process with
`odradek.share.enabled=true`: the reference client's side of share groups.

Each consumer is its own JVM running tests/jvm/src/ShareApp.java (compiled with the Interop sources by
tests/harness/jvm.py), which prints one JSON line per record delivered (partition, offset, delivery count,
the acknowledgement it gave) and per commitSync. The group's `share.auto.offset.reset=earliest` is a GROUP
config set with the CLI before anyone joins, so records produced before the consumers arrive are delivered.

Checked: two consumers of one group together get every record exactly once (implicit acknowledgement, each
poll's batch accepted by the next poll or commitSync) while Kafka's kafka-share-groups tool
(ShareGroupCommand) describes the group's members and start offsets; in explicit mode a RELEASEd record comes
back with delivery count 2, a REJECTed one never comes back, and a RENEWed one (KIP-1222: its lock extended)
is handed back by the next poll with the same delivery count.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import uuid

import pytest
from confluent_kafka import Producer

from tests.brokerproc import BrokerProcess
from tests.harness.groups import create_topic, produce, wait_for
from tests.harness.jvm import classpath, tools_classpath

pytestmark = pytest.mark.timeout(240)
JAVA = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    # 1 s share heartbeats (with the floor lowered to match): a joining member gets its assignment sooner.
    proc = BrokerProcess(tmp_path_factory.mktemp("java-share"), "odradek.share.enabled=true",
                         "group.share.min.heartbeat.interval.ms=1000", "group.share.heartbeat.interval.ms=1000").start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def cp():
    return classpath()


def cli(bootstrap: str, *args: str) -> str:
    env = dict(os.environ, PYTHONUNBUFFERED="1", ODRADEK_BOOTSTRAP_SERVERS=bootstrap)
    done = subprocess.run([sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=60,
                          env=env)
    assert done.returncode == 0, f"{args} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def earliest_group(bootstrap: str) -> str:
    group = f"jsg-{uuid.uuid4().hex[:6]}"
    cli(bootstrap, "config", "set", "group", group, "share.auto.offset.reset=earliest")
    return group


class ShareApp:
    """One KafkaShareConsumer in its own JVM; its JSON lines collected on a thread."""

    def __init__(self, cp: str, bootstrap: str, group: str, topic: str, client: str, mode: str = "implicit"):
        self.client = client
        self.proc = subprocess.Popen(
            [*JAVA, "-cp", cp, "ShareApp", f"bootstrap={bootstrap}", f"group={group}", f"topic={topic}",
             f"client={client}", f"mode={mode}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
        self.events: list[dict] = []
        self.stderr: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=lambda: [self.stderr.put(line) for line in self.proc.stderr], daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def records(self) -> list[dict]:
        return [e for e in list(self.events) if e["event"] == "record"]

    def failures(self) -> list:
        """Errors the consumer reported: a thrown exception, or a partition's commitSync error."""
        events = list(self.events)
        return [e for e in events if e["event"] == "error"] + [
            e["errors"] for e in events if e["event"] == "commit" and e["errors"]]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("stop\n")
            self.proc.stdin.flush()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def explain(self) -> str:
        lines = []
        while not self.stderr.empty():
            lines.append(self.stderr.get())
        return f"{self.client}: {list(self.events)[-10:]}\nstderr: {''.join(lines[-20:])}"


def share_groups_tool(bootstrap: str, *args: str) -> str:
    done = subprocess.run(
        [*JAVA, "-cp", tools_classpath(), "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
         "--bootstrap-server", bootstrap, *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def offset_rows(bootstrap: str, group: str) -> list[list[str]]:
    """kafka-share-groups --describe --offsets: [topic, partition, start offset, lag] per partition."""
    text = share_groups_tool(bootstrap, "--describe", "--group", group, "--offsets")
    return sorted(line.split()[1:5] for line in text.splitlines() if line.startswith(group))


def test_two_java_share_consumers_get_every_record_once_while_the_tool_describes_them(broker, cp):
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, 2, prefix="jshare")
    group = earliest_group(bootstrap)
    produce(bootstrap, topic, {0: 30, 1: 20})
    apps = [ShareApp(cp, bootstrap, group, topic, f"jsc{i}") for i in range(2)]
    try:
        def everything():
            got = [(r["partition"], r["offset"]) for a in apps for r in a.records()]
            return got if len(set(got)) == 50 else None

        wait_for(everything, 90, lambda: "\n".join(a.explain() for a in apps))
        # Both members in the group, seen by Kafka's own tool while they poll.
        rows = wait_for(lambda: (r := [line.split() for line in share_groups_tool(
            bootstrap, "--describe", "--group", group, "--members").splitlines() if line.startswith(group)])
            and len(r) == 2 and r, 60, "two members described by kafka-share-groups")
        assert sorted(r[3] for r in rows) == ["jsc0", "jsc1"], rows
        assert sorted(p for r in rows for p in r[-1].split(":")[-1].split(",") if p) == ["0", "1"], rows
        # Every batch accepted (by the next poll, or the commitSync after it): each start offset at its log's
        # end and no lag (KIP-1226: end - start - records already done past the start).
        wait_for(lambda: offset_rows(bootstrap, group) == [[topic, "0", "30", "0"], [topic, "1", "20", "0"]], 60,
                 lambda: f"start offsets 30 and 20, lag 0: {offset_rows(bootstrap, group)}")
    finally:
        for a in apps:
            a.stop()
    got = [(r["partition"], r["offset"], r["delivery"]) for a in apps for r in a.records()]
    assert sorted(got) == sorted({(p, o, 1) for p, n in ((0, 30), (1, 20)) for o in range(n)}), got
    assert not [a.failures() for a in apps if a.failures()]


def test_explicit_acknowledgement_release_comes_back_reject_does_not_renew_keeps_it(broker, cp):
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, 1, prefix="jshare-ack")
    group = earliest_group(bootstrap)
    values = [f"release-{i}" if i in (2, 5) else f"reject-{i}" if i in (3, 7) else f"renew-{i}" if i == 8
              else f"keep-{i}" for i in range(10)]
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for v in values:
        producer.produce(topic, v.encode(), partition=0)
    assert producer.flush(30) == 0
    app = ShareApp(cp, bootstrap, group, topic, "jsc-explicit", mode="explicit")
    try:
        def released_twice():
            return sum(1 for r in app.records() if r["value"].startswith("release") and r["delivery"] == 2) == 2

        wait_for(released_twice, 90, app.explain)
        # A record produced after the REJECTs were committed: once it is delivered, a rejected record that
        # were to come back would have come back before it (deliveries are in offset order).
        producer.produce(topic, b"sentinel", partition=0)
        assert producer.flush(30) == 0
        wait_for(lambda: any(r["value"] == "sentinel" for r in app.records()), 60, app.explain)
        wait_for(lambda: offset_rows(bootstrap, group) == [[topic, "0", "11", "0"]], 60,
                 lambda: f"start offset 11, lag 0: {offset_rows(bootstrap, group)}")
    finally:
        app.stop()
    seen = [(r["offset"], r["delivery"], r["ack"]) for r in app.records()]
    # A RENEWed record (KIP-1222) stays this consumer's: the next poll hands it back, same delivery count.
    assert sorted(seen) == sorted([(o, 1, "ACCEPT") for o in (0, 1, 4, 6, 8, 9, 10)] + [(8, 1, "RENEW")]
                                  + [(o, 1, "RELEASE") for o in (2, 5)] + [(o, 2, "ACCEPT") for o in (2, 5)]
                                  + [(o, 1, "REJECT") for o in (3, 7)]), seen
    assert not app.failures(), app.failures()
