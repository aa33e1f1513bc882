"""Share groups (KIP-932), the group side, against a real broker process with `odradek.share.enabled=true`:
confluent-kafka's ShareConsumer (librdkafka's share API) joins a share group and gets its assignment from the
group coordinator; `odradek group list/describe/reset-offsets/delete-offsets/delete` show and manage it, and so
does Kafka 4.4's own kafka-share-groups.sh (ShareGroupCommand).

ShareFetch is another part of the work (the share-partition leader): until it is served, a share consumer's
poll gets no records (its ShareFetch is refused), so this checks membership, assignment and the admin
APIs, not deliveries. The consumers poll on their own threads (poll drives their heartbeats).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid

import pytest
from confluent_kafka import ShareConsumer
from confluent_kafka.admin import AdminClient

from tests.brokerproc import BrokerProcess
from tests.harness.groups import create_topic, produce, wait_for
from tests.harness.jvm import tools_classpath

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    # A 1 s heartbeat (Kafka's floor is 5 s by default; lowered with its min): members take a new
    # assignment on their next heartbeat, and the assignment comes once the partitions' state is initialized.
    proc = BrokerProcess(tmp_path_factory.mktemp("share-data"), "odradek.share.enabled=true",
                         "group.share.min.heartbeat.interval.ms=1000", "group.share.heartbeat.interval.ms=1000").start()
    yield proc
    proc.stop()


def cli(bootstrap: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1", ODRADEK_BOOTSTRAP_SERVERS=bootstrap)
    result = subprocess.run([sys.executable, "-m", "odradek", *args], capture_output=True, text=True, timeout=60,
                            env=env)
    if check:
        assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def cli_json(bootstrap: str, *args: str):
    return json.loads(cli(bootstrap, "--output", "json", *args).stdout)


class Polling:
    """A ShareConsumer polled on its own thread until closed."""

    def __init__(self, bootstrap: str, group: str, topic: str, client_id: str) -> None:
        self.consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": client_id,
                                       "log_level": 3})
        self.consumer.subscribe([topic])
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopping.is_set():
            self.consumer.poll(0.2)

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(10)
        self.consumer.close()


def test_share_consumers_join_get_assignments_and_the_cli_manages_the_group(broker):
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, 2, prefix="share")
    produce(bootstrap, topic, {0: 5, 1: 3})
    group = f"sg-{uuid.uuid4().hex[:6]}"
    consumers = [Polling(bootstrap, group, topic, f"sc{i}") for i in range(3)]
    try:
        def described():
            d = cli_json(bootstrap, "group", "describe", group)
            assigned = [tuple(tp) for m in d["members"] for tp in m["assignment"]]
            # Settled: a member takes its new target on its own next heartbeat, so the first to join holds
            # both partitions until then.
            return d if len(d["members"]) == 3 and all(len(m["assignment"]) == 1 for m in d["members"]) and \
                {p for _, p in assigned} == {0, 1} else None

        wait_for(described, 60, "three share members with one partition each, both partitions covered")
        d = described()
        assert d["type"] == "share" and d["state"] == "Stable"
        assert sorted(m["client_id"] for m in d["members"]) == ["sc0", "sc1", "sc2"]
        # Members outnumber partitions: each gets one partition, and the partitions are shared (2 + 1).
        counts = sorted(sum(1 for m in d["members"] for t, p in m["assignment"] if p == q) for q in (0, 1))
        assert counts == [1, 2]
        # The group coordinator initialized both share-partitions (start offset -1), and once a member's
        # ShareFetch reaches a leader, the leader applies share.auto.offset.reset (latest: the log end).
        starts = {o["partition"]: o["start_offset"] for o in d["offsets"] if o["topic"] == topic}
        assert starts.keys() == {0, 1} and starts[0] in (-1, 5) and starts[1] in (-1, 3), starts
        listed = {g["group"]: g for g in cli_json(bootstrap, "group", "list")}
        assert (listed[group]["type"], listed[group]["state"]) == ("share", "Stable")
        # confluent-kafka's list_consumer_groups leaves share groups out, as Kafka's Admin.listConsumerGroups
        # does (confluent-kafka 2.16 has no share-group admin calls: the CLI above describes the group).
        consumer_groups = AdminClient({"bootstrap.servers": bootstrap}).list_consumer_groups().result(30)
        assert group not in {g.group_id for g in consumer_groups.valid}
        # Offsets move only in an empty group.
        busy = cli(bootstrap, "group", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute",
                   check=False)
        assert busy.returncode != 0 and "NON_EMPTY_GROUP" in busy.stderr
    finally:
        for c in consumers:
            c.close()
    wait_for(lambda: cli_json(bootstrap, "group", "describe", group)["state"] == "Empty", 30,
             "the group empty once its members left")

    reset = cli_json(bootstrap, "group", "reset-offsets", group, "--topic", topic, "--to-latest", "--execute")
    assert sorted((o["partition"], o["new"]) for o in reset["offsets"]) == [(0, 5), (1, 3)]
    offsets = {o["partition"]: o for o in cli_json(bootstrap, "group", "describe", group)["offsets"]}
    assert (offsets[0]["start_offset"], offsets[1]["start_offset"]) == (5, 3)
    text = cli(bootstrap, "group", "describe", group).stdout
    assert "type share" in text and "START-OFFSET" in text

    # Share-group configs are GROUP configs (IncrementalAlterConfigs), within the broker's group.share.* bounds.
    cli(bootstrap, "config", "set", "group", group, "share.auto.offset.reset=earliest",
        "share.record.lock.duration.ms=20000")
    configs = cli_json(bootstrap, "config", "get", "group", group, "--all")
    assert configs["share.auto.offset.reset"]["value"] == "earliest"
    assert configs["share.record.lock.duration.ms"]["value"] == "20000"
    assert configs["share.isolation.level"]["value"] == "read_uncommitted"  # the default
    refused = cli(bootstrap, "config", "set", "group", group, "share.record.lock.duration.ms=90000", check=False)
    assert refused.returncode != 0 and "group.share.max.record.lock.duration.ms" in refused.stderr

    deleted = cli_json(bootstrap, "group", "delete-offsets", group, "--topic", topic)
    assert deleted == [{"group": group, "topic": topic, "deleted": True, "error": None}]
    assert cli_json(bootstrap, "group", "describe", group)["offsets"] == []
    cli(bootstrap, "group", "delete", group)
    assert group not in {g["group"] for g in cli_json(bootstrap, "group", "list")}
    assert "share group state deleted" in "".join(broker.output) or "share group offsets deleted" in "".join(
        broker.output)


def test_kafkas_own_share_group_tool_lists_describes_resets_and_deletes(broker):
    """kafka-share-groups.sh (org.apache.kafka:kafka-tools 4.4.0's ShareGroupCommand): ListGroups by type,
    ShareGroupDescribe, DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets and
    DeleteGroups as Kafka's Admin sends them."""
    cp = tools_classpath()
    bootstrap = broker.bootstrap
    topic = create_topic(bootstrap, 2, prefix="share-tool")
    produce(bootstrap, topic, {0: 4, 1: 2})
    group = f"sg-tool-{uuid.uuid4().hex[:6]}"

    def tool(*args: str) -> str:
        done = subprocess.run(
            ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", cp,
             "org.apache.kafka.tools.consumer.group.ShareGroupCommand", "--bootstrap-server", bootstrap, *args],
            capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def rows(text: str) -> list[list[str]]:
        return [line.split() for line in text.splitlines() if line.startswith(group)]

    consumer = Polling(bootstrap, group, topic, "tool-sc")
    try:
        def assigned() -> bool:
            return any(len(m["assignment"]) == 2 for m in cli_json(bootstrap, "group", "describe", group)["members"])

        wait_for(assigned, 60, "a member assigned both partitions")
        assert group in tool("--list").split()
        (member,) = rows(tool("--describe", "--group", group, "--members"))
        assert member[2:] == ["/127.0.0.1", "tool-sc", "2", f"{topic}:0,1"], member
    finally:
        consumer.close()
    wait_for(lambda: cli_json(bootstrap, "group", "describe", group)["state"] == "Empty", 30, "an empty group")
    tool("--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute")
    offsets = sorted(r[1:4] for r in rows(tool("--describe", "--group", group, "--offsets")))
    assert offsets == [[topic, "0", "0"], [topic, "1", "0"]], offsets
    assert "Successful" in tool("--delete-offsets", "--group", group, "--topic", topic)
    assert "was successful" in tool("--delete", "--group", group)
    assert group not in {g["group"] for g in cli_json(bootstrap, "group", "list")}
