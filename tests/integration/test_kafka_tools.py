"""Kafka's own command-line tools (org.apache.kafka:kafka-tools 4.4.0, the reference release) against a real
Odradek broker.

The jars come from tests/jvm/tools/pom.xml, resolved by Maven on first use into the ignored tests/jvm/tools-lib/
(tests/harness/jvm.py: the same mechanism, cache and loud failure as the Java client tests). Every command is
the tool's own main class run as `java -cp <jars> <MainClass> args`, exactly what bin/kafka-*.sh runs, in a
small JVM (-Xmx256m, C1 only) because each tool ends in System.exit and so cannot share a JVM. In 4.4 every
one of them lives in kafka-tools (ConfigCommand and AclCommand moved out of core in 4.x), so no Scala jar is
needed.

One broker serves the whole module: a PLAINTEXT listener, the StandardAuthorizer open where no ACL names a
resource (so kafka-acls has something to talk to while every other tool runs as ANONYMOUS). Each test parses
the tool's output, checks its exit code, and cross-checks the result with our own view (the `odradek` CLI's
JSON, run in-process, or librdkafka). ODRADEK_LONG=1 adds kafka-metadata-quorum on a 3-node cluster.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import time
import uuid

import confluent_kafka
import pytest

from odradek.client.cli import main as odradek_cli
from tests.brokerproc import BrokerProcess
from tests.harness.jvm import tools_classpath
from tests.harness.processes import Cluster

TOOLS = "org.apache.kafka.tools"
AUTHORIZER = "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"


class Tools:
    """Runs one Kafka tool per JVM against the module's broker; `ok` also asserts exit code 0."""

    def __init__(self, cp: str, bootstrap: str) -> None:
        self.cp, self.bootstrap = cp, bootstrap

    def run(self, main: str, *args: str, timeout_s: float = 120.0) -> subprocess.CompletedProcess:
        cls = main if main.startswith("org.") else f"{TOOLS}.{main}"
        return subprocess.run(
            ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-cp", self.cp, cls, *args],
            capture_output=True, text=True, timeout=timeout_s)

    def ok(self, main: str, *args: str, timeout_s: float = 120.0) -> str:
        done = self.run(main, *args, timeout_s=timeout_s)
        assert done.returncode == 0, f"{main} {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def server(self, main: str, *args: str) -> str:
        return self.ok(main, "--bootstrap-server", self.bootstrap, *args)


@pytest.fixture(scope="module")
def tools(tmp_path_factory):
    cp = tools_classpath()
    proc = BrokerProcess(
        tmp_path_factory.mktemp("tools-broker"), AUTHORIZER, "allow.everyone.if.no.acl.found=true",
        "num.partitions=1", "offsets.topic.num.partitions=3", "transaction.state.log.num.partitions=3",
    ).start()
    yield Tools(cp, proc.bootstrap)
    proc.stop()


def ours(tools: Tools, *argv: str):
    """Our own admin view: the `odradek` CLI's JSON output, run in-process."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = odradek_cli(["--bootstrap-server", tools.bootstrap, "--output", "json", *argv])
    assert code == 0, out.getvalue()
    return json.loads(out.getvalue())


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _table(text: str) -> list[dict[str, str]]:
    """A tool's whitespace- or tab-aligned table (header line first) as rows keyed by the header."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = lines[0].split()
    return [dict(zip(header, line.split())) for line in lines[1:]]


def _produce(bootstrap: str, topic: str, per_partition: dict[int, int]) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    for partition, n in per_partition.items():
        for i in range(n):
            producer.produce(topic, value=f"v{i}".encode(), partition=partition)
    assert producer.flush(20) == 0


def test_kafka_topics_create_list_describe_alter_delete(tools):
    topic = _name("kt-topic")
    assert tools.server("TopicCommand", "--create", "--topic", topic, "--partitions", "2",
                        "--replication-factor", "1", "--config", "retention.ms=7200000") == f"Created topic {topic}.\n"
    assert topic in tools.server("TopicCommand", "--list").split()

    tools.server("TopicCommand", "--alter", "--topic", topic, "--partitions", "3")
    described = tools.server("TopicCommand", "--describe", "--topic", topic)
    head, *rows = described.strip().splitlines()
    assert f"Topic: {topic}\t" in head and "PartitionCount: 3\tReplicationFactor: 1\t" in head, described
    # every config not at its default, as a Kafka 4.1+ broker with ELR lists them: the cluster-wide
    # min.insync.replicas (DYNAMIC_DEFAULT_BROKER_CONFIG) and the topic's own
    assert "Configs: min.insync.replicas=1,retention.ms=7200000" in head, described
    for partition, row in enumerate(rows):
        fields = {k.strip(): v.strip() for k, v in (part.split(":", 1) for part in row.split("\t") if part.strip())}
        assert fields["Partition"] == str(partition) and fields["Leader"] == "1", row
        assert fields["Replicas"] == "1" and fields["Isr"] == "1", row
        # Described with DescribeTopicPartitions (API 75): the ELR lists are there, empty ("N/A" would
        # mean the tool fell back to Metadata, which does not carry them).
        assert fields["Elr"] == "" and fields["LastKnownElr"] == "", row
    assert len(rows) == 3

    (view,) = ours(tools, "topic", "describe", topic)
    assert view["topic_id"] and [p["partition"] for p in view["partitions"]] == [0, 1, 2]
    assert view["configs"] == {"min.insync.replicas": "1", "retention.ms": "7200000"}

    # A second create is refused with Kafka's message and a non-zero exit; describing a missing topic too.
    again = tools.run("TopicCommand", "--bootstrap-server", tools.bootstrap, "--create", "--topic", topic)
    assert again.returncode != 0 and "already exists" in again.stdout + again.stderr, again

    tools.server("TopicCommand", "--delete", "--topic", topic)
    deadline = time.monotonic() + 30
    while topic in tools.server("TopicCommand", "--list").split():
        assert time.monotonic() < deadline, f"{topic} still listed after delete"
        time.sleep(0.5)


def test_kafka_configs_topics_alter_describe_and_brokers_describe(tools):
    topic = _name("kt-cfg")
    tools.server("TopicCommand", "--create", "--topic", topic)
    out = tools.server("ConfigCommand", "--entity-type", "topics", "--entity-name", topic, "--alter",
                       "--add-config", "retention.ms=3600000,max.message.bytes=65536")
    assert out.strip() == f"Completed updating config for topic {topic}."
    dynamic = tools.server("ConfigCommand", "--entity-type", "topics", "--entity-name", topic, "--describe")
    lines = dynamic.strip().splitlines()
    assert lines[0] == f"Dynamic configs for topic {topic} are:"
    assert sorted(line.split()[0] for line in lines[1:]) == ["max.message.bytes=65536", "retention.ms=3600000"]
    assert "synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000}" in dynamic
    assert "DEFAULT_CONFIG:message.max.bytes=" in dynamic  # the broker-level synonym Kafka lists

    tools.server("ConfigCommand", "--entity-type", "topics", "--entity-name", topic, "--alter",
                 "--delete-config", "max.message.bytes")
    (view,) = ours(tools, "topic", "describe", topic)
    assert view["configs"] == {"min.insync.replicas": "1", "retention.ms": "3600000"}

    everything = tools.server("ConfigCommand", "--entity-type", "topics", "--entity-name", topic, "--describe", "--all")
    assert "cleanup.policy=delete sensitive=false synonyms={DEFAULT_CONFIG:log.cleanup.policy=delete}" in everything

    broker = tools.server("ConfigCommand", "--entity-type", "brokers", "--entity-name", "1", "--describe", "--all")
    assert broker.splitlines()[0] == "All configs for broker 1 are:"
    assert ("  num.partitions=1 sensitive=false synonyms={STATIC_BROKER_CONFIG:num.partitions=1, "
            "DEFAULT_CONFIG:num.partitions=1}") in broker.splitlines(), broker
    assert tools.server("ConfigCommand", "--entity-type", "brokers", "--entity-name", "1",
                        "--describe").strip() == "Dynamic configs for broker 1 are:"


def test_kafka_consumer_groups_list_describe_lag_reset_delete(tools):
    topic, group = _name("kt-grp"), _name("kt-g")
    tools.server("TopicCommand", "--create", "--topic", topic, "--partitions", "2")
    _produce(tools.bootstrap, topic, {0: 10, 1: 6})
    consumer = confluent_kafka.Consumer({"bootstrap.servers": tools.bootstrap, "group.id": group})
    try:
        consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, 0, 7),
                                 confluent_kafka.TopicPartition(topic, 1, 6)], asynchronous=False)
    finally:
        consumer.close()

    listed = {row["GROUP"]: row for row in _table(tools.server("consumer.group.ConsumerGroupCommand", "--list",
                                                                 "--state", "--type"))}
    assert listed[group] == {"GROUP": group, "TYPE": "Classic", "STATE": "Empty"}

    described = _table(tools.server("consumer.group.ConsumerGroupCommand", "--describe", "--group", group))
    lag = {int(r["PARTITION"]): (int(r["CURRENT-OFFSET"]), int(r["LOG-END-OFFSET"]), int(r["LAG"])) for r in described}
    assert lag == {0: (7, 10, 3), 1: (6, 6, 0)}
    view = ours(tools, "group", "describe", group)
    assert view["total_lag"] == 3 and view["state"] == "Empty"

    reset = _table(tools.server("consumer.group.ConsumerGroupCommand", "--reset-offsets", "--group", group,
                                "--topic", topic, "--to-earliest", "--execute"))
    assert sorted((int(r["PARTITION"]), int(r["NEW-OFFSET"])) for r in reset) == [(0, 0), (1, 0)]
    assert ours(tools, "group", "describe", group)["total_lag"] == 16

    # A live member, as --describe --members prints it: HOST is Java's InetAddress.toString(), "/127.0.0.1".
    member = confluent_kafka.Consumer({"bootstrap.servers": tools.bootstrap, "group.id": group,
                                       "client.id": "kt-member"})
    member.subscribe([topic])
    try:
        deadline = time.monotonic() + 40
        while not member.assignment():
            assert time.monotonic() < deadline, "the member got no assignment"
            member.poll(0.2)
        (row,) = _table(tools.server("consumer.group.ConsumerGroupCommand", "--describe", "--group", group, "--members"))
        assert (row["HOST"], row["CLIENT-ID"], row["#PARTITIONS"]) == ("/127.0.0.1", "kt-member", "2"), row
    finally:
        member.close()

    out = tools.server("consumer.group.ConsumerGroupCommand", "--delete", "--group", group)
    assert f"Deletion of requested consumer groups ('{group}') was successful." in out
    assert group not in tools.server("consumer.group.ConsumerGroupCommand", "--list").split()


def test_kafka_acls_add_list_remove(tools):
    topic = _name("kt-acl")
    added = tools.server("AclCommand", "--add", "--allow-principal", "User:alice", "--operation", "Read",
                         "--operation", "Describe", "--topic", topic)
    assert f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)" in added
    tools.server("AclCommand", "--add", "--deny-principal", "User:bob", "--operation", "Write", "--topic",
                 f"{topic}-", "--resource-pattern-type", "prefixed")

    listed = tools.server("AclCommand", "--list", "--topic", topic)
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in listed
    assert "(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)" in listed
    everything = tools.server("AclCommand", "--list")
    assert (f"Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name={topic}-, patternType=PREFIXED)`:\n"
            "\t(principal=User:bob, host=*, operation=WRITE, permissionType=DENY)") in everything
    mine = {(a["name"], a["principal"], a["operation"], a["permission"]) for a in ours(tools, "acl", "list")
            if a["name"].startswith(topic)}
    assert mine == {(topic, "User:alice", "read", "allow"), (topic, "User:alice", "describe", "allow"),
                    (f"{topic}-", "User:bob", "write", "deny")}

    tools.server("AclCommand", "--remove", "--force", "--topic", topic)
    tools.server("AclCommand", "--remove", "--force", "--topic", f"{topic}-", "--resource-pattern-type", "prefixed")
    assert topic not in tools.server("AclCommand", "--list")
    assert not [a for a in ours(tools, "acl", "list") if a["name"].startswith(topic)]


def test_kafka_transactions_list_and_describe(tools):
    topic, open_id, done_id = _name("kt-txn"), _name("kt-open"), _name("kt-done")
    tools.server("TopicCommand", "--create", "--topic", topic)
    still_open = confluent_kafka.Producer({"bootstrap.servers": tools.bootstrap, "transactional.id": open_id})
    still_open.init_transactions(30)
    still_open.begin_transaction()
    still_open.produce(topic, value=b"open")
    assert still_open.flush(20) == 0
    done = confluent_kafka.Producer({"bootstrap.servers": tools.bootstrap, "transactional.id": done_id})
    done.init_transactions(30)
    done.begin_transaction()
    done.produce(topic, value=b"done")
    done.commit_transaction(30)
    try:
        listed = {row["TransactionalId"]: row for row in _table(tools.server("TransactionsCommand", "list"))}
        assert listed[open_id]["TransactionState"] == "Ongoing" and listed[done_id]["TransactionState"] == "CompleteCommit"
        assert listed[open_id]["Coordinator"] == "1"

        (row,) = _table(tools.server("TransactionsCommand", "describe", "--transactional-id", open_id))
        assert row["TransactionalId"] == open_id and row["TransactionState"] == "Ongoing"
        assert row["TopicPartitions"] == f"{topic}-0" and row["ProducerId"] == listed[open_id]["ProducerId"]
        theirs = {t["transactional_id"]: t for t in ours(tools, "txn", "list")}
        assert str(theirs[open_id]["producer_id"]) == row["ProducerId"]

        producers = _table(tools.server("TransactionsCommand", "describe-producers", "--topic", topic, "--partition", "0"))
        assert {r["ProducerId"] for r in producers} == {listed[open_id]["ProducerId"], listed[done_id]["ProducerId"]}
    finally:
        still_open.abort_transaction(30)


def test_kafka_metadata_quorum_describe_status_and_replication(tools):
    status = dict(line.split(":", 1) for line in tools.server("MetadataQuorumCommand", "describe", "--status").splitlines())
    status = {k.strip(): v.strip() for k, v in status.items()}
    assert status["LeaderId"] == "1" and int(status["LeaderEpoch"]) >= 1 and int(status["HighWatermark"]) > 0
    assert [v["id"] for v in json.loads(status["CurrentVoters"])] == [1]
    assert json.loads(status["CurrentObservers"]) == []
    view = ours(tools, "cluster", "describe")
    assert status["ClusterId"] == view["cluster_id"], view

    (row,) = _table(tools.server("MetadataQuorumCommand", "describe", "--replication"))
    assert row["NodeId"] == "1" and row["Status"] == "Leader" and row["Lag"] == "0"


def test_kafka_producer_and_consumer_perf_tests(tools):
    topic = _name("kt-perf")
    tools.server("TopicCommand", "--create", "--topic", topic, "--partitions", "2")
    produced = tools.ok("ProducerPerformance", "--topic", topic, "--num-records", "20000", "--record-size", "100",
                        "--throughput", "-1", "--command-property", f"bootstrap.servers={tools.bootstrap}", "acks=all")
    assert produced.splitlines()[-1].startswith("20000 records sent, "), produced
    (view,) = ours(tools, "topic", "describe", topic)
    assert sum(p["end_offset"] for p in view["partitions"]) == 20000

    consumed = tools.server("ConsumerPerformance", "--topic", topic, "--num-records", "20000", "--timeout", "60000")
    header, row = consumed.strip().splitlines()[-2:]
    fields = dict(zip((h.strip() for h in header.split(",")), (v.strip() for v in row.split(","))))
    assert int(fields["data.consumed.in.nMsg"]) == 20000, consumed
    assert float(fields["data.consumed.in.MB"]) == pytest.approx(20000 * 100 / 1024 / 1024, rel=1e-3)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_verifiable_producer_to_verifiable_consumer_every_acked_record_consumed(tools, protocol):
    topic, group, n = _name(f"kt-ver-{protocol}"), _name("kt-vg"), 3000
    tools.server("TopicCommand", "--create", "--topic", topic, "--partitions", "3")
    events = [json.loads(line) for line in tools.server(
        "VerifiableProducer", "--topic", topic, "--max-messages", str(n), "--acks", "-1",
        "--repeating-keys", "30").splitlines()]
    acked = {(e["partition"], e["offset"]): e["value"] for e in events if e["name"] == "producer_send_success"}
    assert not [e for e in events if e["name"] == "producer_send_error"]
    (summary,) = [e for e in events if e["name"] == "tool_data"]
    assert summary["sent"] == summary["acked"] == len(acked) == n
    assert sorted(map(int, acked.values())) == list(range(n))
    assert len({p for p, _ in acked}) == 3  # keys spread the records over every partition

    events = [json.loads(line) for line in tools.server(
        "VerifiableConsumer", "--topic", topic, "--group-id", group, "--group-protocol", protocol,
        "--max-messages", str(n), "--reset-policy", "earliest").splitlines()]
    consumed: dict[int, list[tuple[int, int]]] = {}
    for e in events:
        if e["name"] == "records_consumed":
            for part in e["partitions"]:
                consumed.setdefault(part["partition"], []).append((part["minOffset"], part["maxOffset"]))
    seen = {(p, off) for p, ranges in consumed.items() for lo, hi in ranges for off in range(lo, hi + 1)}
    assert set(acked) <= seen, sorted(set(acked) - seen)[:10]
    commits = [e for e in events if e["name"] == "offsets_committed"]
    assert commits and all(c["success"] for c in commits), commits
    view = ours(tools, "group", "describe", group)
    assert view["total_lag"] == 0 and sum(o["committed"] for o in view["offsets"]) == n, view


@pytest.mark.skipif(os.environ.get("ODRADEK_LONG") != "1", reason="a second, 3-node cluster: ODRADEK_LONG=1")
def test_kafka_metadata_quorum_on_three_nodes(tools, tmp_path):
    """What a single node cannot show: three voters, followers with their lag, the leader among them."""
    cluster = Cluster(tmp_path / "cluster", nodes=3)
    cluster.up()
    try:
        cluster.wait(lambda: cluster.leader([1, 2, 3]) is not None, "a quorum leader")
        on_cluster = Tools(tools.cp, ",".join(cluster.bootstrap(n) for n in (1, 2, 3)))
        status = {k.strip(): v.strip() for k, v in (
            line.split(":", 1) for line in on_cluster.server("MetadataQuorumCommand", "describe", "--status").splitlines())}
        assert sorted(v["id"] for v in json.loads(status["CurrentVoters"])) == [1, 2, 3]
        assert int(status["LeaderId"]) in (1, 2, 3) and int(status["HighWatermark"]) > 0

        deadline = time.monotonic() + 40
        while True:  # followers report their fetch position once they have fetched since the last election
            rows = _table(on_cluster.server("MetadataQuorumCommand", "describe", "--replication"))
            if sorted(r["NodeId"] for r in rows) == ["1", "2", "3"] and all(r["Lag"] != "-1" for r in rows):
                break
            assert time.monotonic() < deadline, rows
            time.sleep(1)
        assert [r["Status"] for r in rows].count("Leader") == 1
        assert sorted(r["Status"] for r in rows if r["Status"] != "Leader") == ["Follower", "Follower"]
        assert next(r for r in rows if r["Status"] == "Leader")["NodeId"] == status["LeaderId"]
    finally:
        cluster.down()
