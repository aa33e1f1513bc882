"""The Java client (kafka-clients 4.x, resolved by Maven from tests/jvm/pom.xml) against a real Odradek broker.

One JVM runs tests/jvm/src/Interop.java for the whole module (tests/harness/jvm.py: resolution and compilation
are cached in ignored folders); each test sends it a command and checks the JSON it answers. Covered: the
idempotent producer with acks=all and every codec, records crossing between Java and librdkafka both ways,
consumer groups under the classic protocol and KIP-848's `group.protocol=consumer`, transactions (commit,
abort, read_committed; Transactions V2 with its epoch bump per transaction, and V1 on a cluster formatted
with transaction.version=1), and the admin client: topics, configs, ACLs, SCRAM users (used to log in over
SASL_PLAINTEXT), offsets and records, consumer groups, describeCluster and describeMetadataQuorum, and a
partition reassignment on three nodes. What the broker does not yet answer as Kafka 4.x does is marked
xfail(strict=True) with the request and field at fault.

A missing Maven Central fails these tests (the error names what Maven could not resolve); a machine without
a JDK or Maven skips them, except in CI.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid

import confluent_kafka
import pytest

from tests.brokerproc import BrokerProcess
from tests.harness.jvm import JavaDriver, classpath
from tests.harness.processes import Cluster

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
AUTHORIZER = "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"
_LISTENING = re.compile(r"listening on (\w+)://([^:\s]+):(\d+)")
TS = 1_700_000_000_000


class Broker:
    """One broker with a PLAINTEXT listener (the tests' own) and a SCRAM-only SASL_PLAINTEXT one, the
    authorizer on and open where no ACL names a resource."""

    def __init__(self, proc: BrokerProcess, ports: dict[str, int]) -> None:
        self.proc, self.ports = proc, ports
        self.bootstrap = f"127.0.0.1:{ports['PLAINTEXT']}"
        self.sasl_bootstrap = f"127.0.0.1:{ports['SASL_PLAINTEXT']}"


@pytest.fixture(scope="module")
def java():
    driver = JavaDriver(classpath())
    yield driver
    driver.close()


@pytest.fixture(scope="module")
def broker(tmp_path_factory, java):
    proc = BrokerProcess(
        tmp_path_factory.mktemp("java-broker"),
        "listeners=PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512",
        AUTHORIZER, "allow.everyone.if.no.acl.found=true",
        "num.partitions=1", "offsets.topic.num.partitions=3", "transaction.state.log.num.partitions=3",
    ).start()
    deadline = time.monotonic() + 30
    while True:
        ports = {m.group(1): int(m.group(3)) for line in list(proc.output) if (m := _LISTENING.search(line))}
        if len(ports) == 2:
            break
        assert time.monotonic() < deadline, "".join(proc.output[-30:])
        time.sleep(0.05)
    yield Broker(proc, ports)
    proc.stop()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create(bootstrap: str, topic: str, partitions: int = 1, replication_factor: int = 1) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, replication_factor)], request_timeout=20).values():
        future.result(timeout=30)


def _confluent_read(bootstrap: str, topic: str, n: int, partitions: int = 1, **extra) -> list:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": _name("cg"),
                                         "enable.auto.commit": False, **extra})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(partitions)])
    out: list = []
    deadline = time.monotonic() + 20
    try:
        while len(out) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None or (msg.error() and msg.error().code() == confluent_kafka.KafkaError._PARTITION_EOF):
                continue
            assert msg.error() is None, msg.error()
            out.append(msg)
        time.sleep(0.3)  # anything past n (an aborted record shown by mistake) would arrive now
        while (msg := consumer.poll(0.2)) is not None:
            if msg.error() is None:
                out.append(msg)
    finally:
        consumer.close()
    return out


def test_the_java_client_is_the_reference_release(java):
    assert java.version.startswith("4."), java.version


@pytest.mark.parametrize("codec", CODECS)
def test_java_idempotent_producer_each_codec_read_by_java_and_librdkafka(java, broker, codec):
    topic = _name(f"jp-{codec}")
    _create(broker.bootstrap, topic)
    produced = java.ok("produce", bootstrap=broker.bootstrap, topic=topic, n=20, tag=codec,
                       cfg={"compression.type": codec, "enable.idempotence": "true", "acks": "all"})
    assert produced["offsets"] == list(range(20))

    records = java.ok("consume", bootstrap=broker.bootstrap, topic=topic, n=20)["records"]
    assert [(r["offset"], r["key"], r["value"]) for r in records] == [
        (i, f"key-{i}", f"value-{i}-{codec}") for i in range(20)]
    assert [r["headers"] for r in records] == [{"src": "java"}] * 20
    assert [r["timestamp"] for r in records] == [TS + i for i in range(20)]

    read = _confluent_read(broker.bootstrap, topic, 20)
    assert [(m.offset(), m.key(), m.value()) for m in read] == [
        (i, f"key-{i}".encode(), f"value-{i}-{codec}".encode()) for i in range(20)]
    assert [m.headers() for m in read] == [[("src", b"java")]] * 20
    assert [m.timestamp()[1] for m in read] == [TS + i for i in range(20)]


@pytest.mark.parametrize("codec", CODECS)
def test_librdkafka_producer_each_codec_read_by_java(java, broker, codec):
    topic = _name(f"cp-{codec}")
    _create(broker.bootstrap, topic)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec,
                                         "enable.idempotence": True, "linger.ms": 5})
    for i in range(20):
        producer.produce(topic, value=f"cv-{i}".encode(), key=f"ck-{i}".encode(), headers=[("src", b"librdkafka")],
                         timestamp=TS + i, partition=0)
    assert producer.flush(15) == 0
    records = java.ok("consume", bootstrap=broker.bootstrap, topic=topic, n=20)["records"]
    assert [(r["offset"], r["key"], r["value"], r["headers"], r["timestamp"]) for r in records] == [
        (i, f"ck-{i}", f"cv-{i}", {"src": "librdkafka"}, TS + i) for i in range(20)]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_java_consumer_group_subscribes_and_commits(java, broker, protocol):
    topic = _name(f"grp-{protocol}")
    group = _name(f"g-{protocol}")
    _create(broker.bootstrap, topic, partitions=3)
    java.ok("produce", bootstrap=broker.bootstrap, topic=topic, n=30, partition=-1)
    answer = java.ok("consume", bootstrap=broker.bootstrap, topic=topic, n=30, group=group,
                     cfg={"group.protocol": protocol})
    records = answer["records"]
    assert sorted(r["value"] for r in records) == sorted(f"value-{i}-java" for i in range(30))
    assert answer["assignment"] == 3
    committed = answer["committed"]
    assert sum(committed.values()) == 30, committed

    # librdkafka reads the same group's committed offsets.
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        offsets = consumer.committed([confluent_kafka.TopicPartition(topic, p) for p in range(3)], timeout=15)
    finally:
        consumer.close()
    assert {f"{topic}-{tp.partition}": tp.offset for tp in offsets} == committed


def test_java_transactions_commit_abort_read_committed(java, broker):
    topic = _name("txn")
    _create(broker.bootstrap, topic)
    answer = java.ok("txn", bootstrap=broker.bootstrap, topic=topic, txn_id=_name("tid"), n=5)
    # Offsets leave room for the markers: each transaction's records then its commit or abort marker.
    assert answer["committed1"] == [0, 1, 2, 3, 4]
    assert answer["aborted"] == [6, 7, 8, 9, 10]
    assert answer["committed2"] == [12, 13, 14, 15, 16]
    want = [f"value-{i}-c1" for i in range(5)] + [f"value-{i}-c2" for i in range(5)]

    committed = java.ok("consume", bootstrap=broker.bootstrap, topic=topic, n=10, timeout_ms=10000,
                        cfg={"isolation.level": "read_committed"})["records"]
    assert [r["value"] for r in committed] == want
    everything = java.ok("consume", bootstrap=broker.bootstrap, topic=topic, n=15, timeout_ms=10000,
                         cfg={"isolation.level": "read_uncommitted"})["records"]
    assert len(everything) == 15

    read = _confluent_read(broker.bootstrap, topic, 10, **{"isolation.level": "read_committed"})
    assert [m.value().decode() for m in read] == want


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_two_java_members_split_the_partitions(java, broker, protocol):
    topic, group = _name(f"split-{protocol}"), _name(f"split-{protocol}")
    _create(broker.bootstrap, topic, partitions=4)
    java.ok("produce", bootstrap=broker.bootstrap, topic=topic, n=40, partition=-1)
    answer = java.ok("members", bootstrap=broker.bootstrap, topic=topic, group=group, members=2, n=40, partitions=4,
                     cfg={"group.protocol": protocol})
    first, second = (m["assignment"] for m in answer["members"])
    assert first and second and sorted(first + second) == [0, 1, 2, 3], answer
    assert answer["total"] >= 40  # a partition moved mid-read may be read twice from its last commit


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_java_consume_transform_produce_commits_offsets_in_the_transaction(java, broker, protocol):
    source, sink, group = _name("ctp-in"), _name("ctp-out"), _name(f"ctp-{protocol}")
    _create(broker.bootstrap, source, partitions=2)
    _create(broker.bootstrap, sink)
    java.ok("produce", bootstrap=broker.bootstrap, topic=source, n=20, partition=-1)
    answer = java.ok("ctp", bootstrap=broker.bootstrap, group=group, txn_id=_name("ctp-tid"), n=20,
                     cfg={"group.protocol": protocol}, **{"in": source, "out": sink})
    assert answer["seen"] == 20 and answer["transactions"] >= 1

    out = java.ok("consume", bootstrap=broker.bootstrap, topic=sink, n=20, timeout_ms=10000,
                  cfg={"isolation.level": "read_committed"})["records"]
    assert sorted(r["value"] for r in out) == sorted(f"VALUE-{i}-JAVA" for i in range(20))
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        offsets = consumer.committed([confluent_kafka.TopicPartition(source, p) for p in range(2)], timeout=15)
    finally:
        consumer.close()
    assert sum(tp.offset for tp in offsets) == 20


def test_java_admin_describes_features(java, broker):
    answer = java.ok("features", bootstrap=broker.bootstrap)
    assert "metadata.version" in answer["supported"], answer
    assert "metadata.version" in answer["finalized"], answer
    assert answer["supported"]["transaction.version"] == [0, 2], answer


def test_the_broker_finalizes_transaction_version_2_for_the_java_client(java, broker):
    answer = java.ok("features", bootstrap=broker.bootstrap)
    assert answer["finalized"].get("transaction.version", [0, 0])[1] >= 2, answer


def test_java_tv2_transactions_bump_the_epoch_each_time_and_read_back_committed(java, broker):
    """Transactions V2 (KIP-890 part 2): the Java client adds no partitions itself (Produce v12 does), every
    commit and abort (EndTxn v5) bumps the epoch, and read_committed readers (Java and librdkafka) see exactly
    the committed transactions, in order."""
    topic, txns = _name("tv2"), 24
    _create(broker.bootstrap, topic, partitions=2)
    answer = java.ok("txns", bootstrap=broker.bootstrap, topic=topic, txn_id=_name("tv2-tid"), txns=txns, n=3,
                     partitions=2)
    # initTransactions gives epoch 0; each of the 24 ends bumped it once.
    assert answer["coordinator_epoch"] == txns and answer["state"] == "CompleteAbort", answer
    producer_id = answer["coordinator_producer_id"]
    # The partitions saw the last markers with the bumped epochs (the last transaction wrote to both).
    assert all(seen == [[producer_id, txns]] for seen in answer["partition_producers"].values()), answer
    want = answer["committed_values"]
    assert len(want) == (txns // 2) * 3
    read = java.ok("consume", bootstrap=broker.bootstrap, topic=topic, n=len(want), partitions=2, timeout_ms=15000,
                   cfg={"isolation.level": "read_committed"})["records"]
    assert sorted(r["value"] for r in read) == sorted(want)
    for p in (0, 1):  # in order within each partition
        values = [r["value"] for r in read if r["partition"] == p]
        assert values == [v for v in want if v in set(values)]
    librdkafka = _confluent_read(broker.bootstrap, topic, len(want), partitions=2, **{"isolation.level": "read_committed"})
    assert sorted(m.value().decode() for m in librdkafka) == sorted(want)
    everything = java.ok("consume", bootstrap=broker.bootstrap, topic=topic, n=txns * 3, partitions=2,
                         timeout_ms=15000, cfg={"isolation.level": "read_uncommitted"})["records"]
    assert len(everything) == txns * 3


def test_a_cluster_formatted_with_transaction_version_1_keeps_the_java_client_on_v1(java, tmp_path):
    """`odradek storage format --feature transaction.version=1`: the feature is finalized at 1, the Java client
    stays on Transactions V1 (AddPartitionsToTxn, EndTxn v4: no epoch bump) and its transactions work as before."""
    data = tmp_path / "tv1"
    config = tmp_path / "server.properties"
    config.write_text(f"node.id=1\nlog.dirs={data}\n")
    odradek = [sys.executable, "-m", "odradek", "storage"]
    cluster_id = subprocess.run([*odradek, "random-uuid"], capture_output=True, text=True, check=True).stdout.strip()
    formatted = subprocess.run([*odradek, "format", "-t", cluster_id, "-c", str(config),
                                "--feature", "transaction.version=1"], capture_output=True, text=True)
    assert formatted.returncode == 0, formatted.stderr
    assert "Finalizing transaction.version at level 1" in formatted.stdout
    proc = BrokerProcess(data, "num.partitions=1", "offsets.topic.num.partitions=1",
                         "transaction.state.log.num.partitions=1").start()
    try:
        assert java.ok("features", bootstrap=proc.bootstrap)["finalized"]["transaction.version"] == [1, 1]
        topic = _name("tv1")
        _create(proc.bootstrap, topic)
        answer = java.ok("txns", bootstrap=proc.bootstrap, topic=topic, txn_id=_name("tv1-tid"), txns=4, n=2)
        assert answer["coordinator_epoch"] == 0, answer  # version 1: the epoch stays
        read = java.ok("consume", bootstrap=proc.bootstrap, topic=topic, n=4, timeout_ms=15000,
                       cfg={"isolation.level": "read_committed"})["records"]
        assert [r["value"] for r in read] == answer["committed_values"]
    finally:
        proc.stop()


def test_java_admin_topics(java, broker):
    topic = _name("adm")
    answer = java.ok("topics", bootstrap=broker.bootstrap, topic=topic, partitions=3)
    assert answer["created_partitions"] == 3 and answer["created_rf"] == 1
    assert answer["listed"] is True
    described = answer["described"]
    assert described["name"] == topic and described["internal"] is False
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]
    assert all(p["leader"] == 1 and p["replicas"] == [1] and p["isr"] == [1] for p in described["partitions"])
    assert answer["recreate"] == "TopicExistsException"
    assert answer["after_create_partitions"] == 4
    assert answer["deleted"] is True


def test_java_admin_offsets_and_delete_records(java, broker):
    topic = _name("offs")
    _create(broker.bootstrap, topic)
    java.ok("produce", bootstrap=broker.bootstrap, topic=topic, n=10)
    answer = java.ok("offsets", bootstrap=broker.bootstrap, topic=topic, ts=TS + 4, delete_before=3)
    assert (answer["earliest"], answer["latest"], answer["for_timestamp"]) == (0, 10, 4)
    assert answer["max_timestamp"] == [9, TS + 9]
    assert answer["low_watermark"] == 3 and answer["earliest_after"] == 3


def test_java_admin_consumer_groups(java, broker):
    topic = _name("groups")
    _create(broker.bootstrap, topic)
    java.ok("produce", bootstrap=broker.bootstrap, topic=topic, n=5)
    classic, modern = _name("gc"), _name("gm")
    for group, protocol in ((classic, "classic"), (modern, "consumer")):
        java.ok("consume", bootstrap=broker.bootstrap, topic=topic, n=5, group=group, cfg={"group.protocol": protocol})
    answer = java.ok("groups", bootstrap=broker.bootstrap, topic=topic, groups=f"{classic},{modern}")
    assert answer["listed"] is True
    assert answer["described"] == {classic: {"state": "Empty", "type": "Classic", "members": 0},
                                   modern: {"state": "Empty", "type": "Consumer", "members": 0}}
    assert answer["committed"] == {classic: 5, modern: 5}
    assert answer["altered"] == 1
    assert answer["after_delete"] == []


def test_java_admin_configs(java, broker):
    answer = java.ok("configs", bootstrap=broker.bootstrap, topic=_name("cfg"), broker=1)
    before = answer["topic_before"]
    assert before["retention.ms"]["source"] == "DEFAULT_CONFIG"
    assert before["cleanup.policy"]["value"] == "delete"
    assert answer["broker"]["num.partitions"]["value"] == "1"
    assert answer["broker"]["num.partitions"]["source"] == "STATIC_BROKER_CONFIG"
    after = answer["topic_set"]
    assert after["retention.ms"]["value"] == "3600000" and after["retention.ms"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert after["max.message.bytes"]["value"] == "65536"
    assert answer["topic_deleted"]["max.message.bytes"]["source"] != "DYNAMIC_TOPIC_CONFIG"
    assert answer["invalid"] == "InvalidConfigurationException"


def test_java_admin_dynamic_broker_configs(java, broker):
    """kafka-configs.sh --entity-type brokers through the Java admin: the cluster default (the empty name the
    tool sends for --entity-default) and a node's own value, each with its source; a static key refused."""
    answer = java.ok("broker_configs", bootstrap=broker.bootstrap, broker=1, key="log.cleaner.delete.retention.ms",
                     default_value="7200000", node_value="3600000")
    assert (answer["after_default"]["value"], answer["after_default"]["source"]) == ("7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    assert not answer["after_default"]["read_only"]
    assert (answer["cluster"]["value"], answer["cluster"]["source"]) == ("7200000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    assert (answer["after_node"]["value"], answer["after_node"]["source"]) == ("3600000", "DYNAMIC_BROKER_CONFIG")
    assert [s[2] for s in answer["synonyms"]] == ["DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG", "DEFAULT_CONFIG"]
    assert answer["refused"].startswith("InvalidRequestException: Cannot update these configs dynamically: [num.io.threads]")
    assert answer["after_delete"]["source"] == "DEFAULT_CONFIG"


def test_java_admin_cluster_and_quorum(java, broker):
    answer = java.ok("cluster", bootstrap=broker.bootstrap)
    assert answer["cluster_id"] and answer["nodes"] == [1]
    assert answer["quorum_leader"] == 1 and answer["quorum_epoch"] >= 0 and answer["quorum_hwm"] > 0
    assert [v["id"] for v in answer["voters"]] == [1]


def test_java_admin_quorum_epoch_of_a_single_node(java, broker):
    assert java.ok("cluster", bootstrap=broker.bootstrap)["quorum_epoch"] >= 1


def test_java_admin_acls(java, broker):
    topic = _name("acl")
    answer = java.ok("acls", bootstrap=broker.bootstrap, topic=topic)
    literal = ["TOPIC", topic, "LITERAL", "User:alice", "*", "READ", "ALLOW"]
    prefixed = ["GROUP", f"{topic}-g", "PREFIXED", "User:alice", "127.0.0.1", "DESCRIBE", "DENY"]
    assert sorted(map(tuple, answer["described"])) == sorted([tuple(literal), tuple(prefixed)])
    assert answer["matching_topic"] == [literal]
    assert sorted(map(tuple, answer["deleted"])) == sorted([tuple(literal), tuple(prefixed)])
    assert answer["after"] == []


def test_java_admin_scram_user_logs_in_over_sasl(java, broker):
    topic = _name("scram")
    _create(broker.bootstrap, topic)
    answer = java.ok("scram", bootstrap=broker.bootstrap, sasl_bootstrap=broker.sasl_bootstrap, topic=topic,
                     user=_name("javauser"), password="java-secret", mechanism="SCRAM-SHA-256")
    assert answer["described"] == [["SCRAM-SHA-256", 8192]]
    assert answer["sasl_produce"]["offsets"] == [0, 1, 2, 3, 4]
    assert answer["sasl_consume"] == 5
    assert answer["wrong_password"] == "SaslAuthenticationException"
    assert answer["after_delete"] is False


def test_java_admin_on_three_nodes_quorum_and_reassignment(java, tmp_path):
    cluster = Cluster(tmp_path / "cluster", nodes=3)
    cluster.up()
    try:
        bootstrap = ",".join(cluster.bootstrap(n) for n in (1, 2, 3))
        cluster.wait(lambda: cluster.leader([1, 2, 3]) is not None, "a quorum leader")
        answer = java.ok("cluster", bootstrap=bootstrap)
        assert sorted(answer["nodes"]) == [1, 2, 3]
        assert sorted(v["id"] for v in answer["voters"]) == [1, 2, 3]
        assert answer["quorum_leader"] in (1, 2, 3) and answer["controller"] in (1, 2, 3)
        assert answer["quorum_epoch"] >= 1 and answer["quorum_hwm"] > 0

        moved = java.ok("reassign", bootstrap=bootstrap, topic=_name("move"), nodes=3)
        assert moved["finished"] is True, moved
        (partition,) = moved["after"]
        assert partition["replicas"] == moved["target"], moved
        assert sorted(partition["isr"]) == sorted(moved["target"]) and partition["leader"] in moved["target"]

        # Transactions V2 across nodes: the partitions' leaders ask the coordinator (another node, mostly) to
        # add them (AddPartitionsToTxn v5 between brokers).
        topic = _name("tv2-3n")
        _create(bootstrap, topic, partitions=3, replication_factor=3)
        answer = java.ok("txns", bootstrap=bootstrap, topic=topic, txn_id=_name("tv2-3n-tid"), txns=8, n=3, partitions=3)
        assert answer["coordinator_epoch"] == 8, answer
        read = java.ok("consume", bootstrap=bootstrap, topic=topic, n=12, partitions=3, timeout_ms=15000,
                       cfg={"isolation.level": "read_committed"})["records"]
        assert sorted(r["value"] for r in read) == sorted(answer["committed_values"])
    finally:
        cluster.down()
