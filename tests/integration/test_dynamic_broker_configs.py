"""Dynamic broker configs on a three-node cluster of real processes (`odradek cluster up`), as
`kafka-configs.sh --entity-type brokers` uses them, driven by confluent-kafka's AdminClient, kafka-python
and the `odradek config` CLI:

  * the cluster-wide default (`--entity-default`, an empty BROKER name) of message.max.bytes, set once, is
    applied by every broker without a restart: a produce over the new limit is refused by each node's
    partition (one partition led by each node), and each node describes the value as
    DYNAMIC_DEFAULT_BROKER_CONFIG, a topic inheriting it too;
  * one node's own value (DYNAMIC_BROKER_CONFIG) wins over the default on that node only;
  * keys Odradek does not change at run time, bad values, and validate_only are refused / not written;
  * the values are in the metadata log: a node killed with -9 and restarted still applies and shows them.

One cluster for the module; every wait is a bounded poll of the cluster's own answers.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.harness.processes import Cluster

pytestmark = pytest.mark.timeout(240)

TOPIC = "dyn-limits"
BIG = b"x" * 5000  # over the 2000-byte default set below, under Kafka's built-in 1048588


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from confluent_kafka.admin import AdminClient, NewTopic

    c = Cluster(tmp_path_factory.mktemp("dynconf") / "cluster")
    c.up()
    try:
        admin = AdminClient({"bootstrap.servers": c.bootstrap(1)})
        # one partition led by each node (RF 1: partition i on node i + 1)
        (future,) = admin.create_topics([NewTopic(TOPIC, num_partitions=3, replica_assignment=[[1], [2], [3]])],
                                        request_timeout=20).values()
        future.result(timeout=30)
        c.wait(lambda: all(p.leader_id >= 0 for t in c.metadata(1, None).topics if t.name == TOPIC
                           for p in t.partitions) and TOPIC in {t.name for t in c.metadata(1, None).topics},
               "the topic's leaders")
        yield c
    finally:
        c.down()


def admin_for(cluster: Cluster, node_id: int = 1):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": cluster.bootstrap(node_id)})


def incremental(cluster: Cluster, name: str, ops: dict[str, str | None], *, validate_only: bool = False):
    """IncrementalAlterConfigs of BROKER `name` (a node id: librdkafka refuses the empty name of the cluster
    default) through confluent-kafka: None if accepted, else the KafkaError."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET if v is not None else AlterConfigOpType.DELETE)
               for k, v in ops.items()]
    resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=entries)
    admin = admin_for(cluster)  # held until the answer: a collected client cancels its requests
    (future,) = admin.incremental_alter_configs([resource], request_timeout=20, validate_only=validate_only).values()
    try:
        future.result(timeout=30)
    except KafkaException as e:
        return e.args[0]
    return None


def cluster_defaults(cluster: Cluster) -> dict:
    """{key: (value, source)} of the cluster-default BROKER resource, through `odradek config get`."""
    import json

    got = odradek_cli(cluster, "--output", "json", "config", "get", "broker", "default")
    assert got.returncode == 0, got.stderr
    return {k: (v["value"], v["source"]) for k, v in json.loads(got.stdout).items()}


def describe_broker(cluster: Cluster, name: str) -> dict:
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = admin_for(cluster)
    (future,) = admin.describe_configs([ConfigResource(ResourceType.BROKER, name)], request_timeout=20).values()
    return future.result(timeout=30)


def produce_to_each_node(cluster: Cluster, value: bytes) -> dict[int, str | None]:
    """{partition: None or the error's name} for one record to each partition (acks=1)."""
    from confluent_kafka import Producer

    outcome: dict[int, str | None] = {}

    def report(err, msg):
        outcome[msg.partition()] = None if err is None else err.name()

    producer = Producer({"bootstrap.servers": cluster.bootstrap(1), "acks": 1, "retries": 0,
                         "message.timeout.ms": 20000, "linger.ms": 0})
    for partition in range(3):
        producer.produce(TOPIC, value=value, partition=partition, on_delivery=report)
    producer.flush(30)
    return outcome


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def odradek_cli(cluster: Cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "odradek", "-b", cluster.bootstrap(2), *args],
                          capture_output=True, text=True, timeout=60)


def test_cluster_default_applies_on_every_broker_without_a_restart(cluster):
    from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

    assert produce_to_each_node(cluster, BIG) == {0: None, 1: None, 2: None}
    # the cluster default, as `kafka-configs.sh --entity-type brokers --entity-default --alter --add-config`
    result = odradek_cli(cluster, "config", "set", "broker", "default", "message.max.bytes=2000",
                         "log.retention.ms=3600000")
    assert result.returncode == 0, result.stderr
    # every broker applies it once it has the committed record: each node's partition refuses the record
    cluster.wait(lambda: produce_to_each_node(cluster, BIG) == {p: "MSG_SIZE_TOO_LARGE" for p in range(3)},
                 "every broker refusing a record over the new message.max.bytes")
    assert produce_to_each_node(cluster, b"small") == {0: None, 1: None, 2: None}

    for node_id in (1, 2, 3):
        entry = describe_broker(cluster, str(node_id))["message.max.bytes"]
        assert (entry.value, entry.source) == ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        assert not entry.is_read_only
    defaults = cluster_defaults(cluster)
    assert defaults["message.max.bytes"] == ("2000", "dynamic_default_broker")
    assert defaults["log.retention.ms"] == ("3600000", "dynamic_default_broker")
    # a topic without its own override inherits the new default, and says so
    admin = admin_for(cluster, 3)
    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, TOPIC)], request_timeout=20).values()
    topic = future.result(timeout=30)
    assert (topic["max.message.bytes"].value, topic["max.message.bytes"].source) == (
        "2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert topic["retention.ms"].value == "3600000"

    # kafka-python sees the same source (DescribeConfigs v1+, with synonyms)
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(2), request_timeout_ms=20000)
    try:
        described = kp.describe_configs([KConfigResource(ConfigResourceType.BROKER, "2", ["message.max.bytes"])],
                                        include_synonyms=True, config_filter="all")
    finally:
        kp.close()
    entry = described["broker"]["2"]["message.max.bytes"]
    named = {3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 5: "DEFAULT_CONFIG"}  # kafka-python names the sources
    assert (entry["value"], str(entry["config_source"])) == ("2000", named[3])
    assert [str(s["source"]) for s in entry["synonyms"]] == [named[3], named[5]], entry


def test_one_nodes_value_wins_on_that_node_only(cluster):
    from confluent_kafka.admin import ConfigSource

    assert incremental(cluster, "2", {"message.max.bytes": "100000"}) is None
    cluster.wait(lambda: produce_to_each_node(cluster, BIG) == {0: "MSG_SIZE_TOO_LARGE", 1: None, 2: "MSG_SIZE_TOO_LARGE"},
                 "node 2 taking its own message.max.bytes")
    entry = describe_broker(cluster, "2")["message.max.bytes"]
    assert (entry.value, entry.source) == ("100000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    # (confluent-kafka keys synonyms by name, so the three of message.max.bytes collapse: read them with
    # kafka-python)
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(1), request_timeout_ms=20000)
    try:
        described = kp.describe_configs([KConfigResource(ConfigResourceType.BROKER, "2", ["message.max.bytes"])],
                                        include_synonyms=True, config_filter="all")
    finally:
        kp.close()
    synonyms = described["broker"]["2"]["message.max.bytes"]["synonyms"]
    assert [(s["value"], str(s["source"])) for s in synonyms] == [
        ("100000", "DYNAMIC_BROKER_CONFIG"), ("2000", "DYNAMIC_DEFAULT_BROKER_CONFIG"), ("1048588", "DEFAULT_CONFIG")], synonyms
    got = odradek_cli(cluster, "config", "get", "broker", "2", "message.max.bytes")
    assert got.returncode == 0, got.stderr
    assert any(line.split()[:3] == ["message.max.bytes", "100000", "dynamic_broker"] for line in got.stdout.splitlines())


def test_refusals_and_validate_only(cluster):
    from confluent_kafka import KafkaError

    static = incremental(cluster, "1", {"log.dirs": "/elsewhere"})
    assert static.code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically: [log.dirs]" in static.str()
    threads = incremental(cluster, "3", {"num.io.threads": "4"})
    assert threads.code() == KafkaError.INVALID_REQUEST and "restart" in threads.str()
    bad = incremental(cluster, "1", {"log.segment.bytes": "10"})
    assert bad.code() == KafkaError.INVALID_REQUEST and "log.segment.bytes" in bad.str()
    assert incremental(cluster, "1", {"log.segment.bytes": "1048576"}, validate_only=True) is None
    entry = describe_broker(cluster, "1")["log.segment.bytes"]
    assert entry.source != 2 and entry.value != "1048576"
    # the CLI reports the broker's refusal
    result = odradek_cli(cluster, "config", "set", "broker", "default", "num.io.threads=4")
    assert result.returncode != 0 and "Cannot update these configs dynamically" in result.stderr + result.stdout


def test_kept_in_the_metadata_log_across_a_restart(cluster):
    from confluent_kafka.admin import ConfigSource

    pid = cluster.pid(3)
    os.kill(pid, signal.SIGKILL)
    cluster.wait(lambda: not _alive(pid), "the killed process gone")  # `cluster up` skips a live pid
    cluster.up()  # restarts just the dead node, with its data
    cluster.wait(lambda: (lambda m: any(t.name == TOPIC and all(p.leader_id == p.partition_index + 1 for p in t.partitions)
                                        for t in m.topics))(cluster.metadata(1, None)), "node 3 leading again")
    cluster.wait(lambda: produce_to_each_node(cluster, BIG) == {0: "MSG_SIZE_TOO_LARGE", 1: None, 2: "MSG_SIZE_TOO_LARGE"},
                 "the restarted node applying the cluster default again")
    entry = describe_broker(cluster, "3")["message.max.bytes"]
    assert (entry.value, entry.source) == ("2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
