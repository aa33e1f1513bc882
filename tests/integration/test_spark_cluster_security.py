"""The `odradek` data source against a real three-node cluster with every listener on SASL_SSL and ACLs,
with real Spark (local[2]): a streaming read of an RF=3 topic copied by the exactly-once sink, run as a
principal holding only the ACLs pipeline/README.md lists for that job, and the output checked exactly once
with a read_committed consumer. A principal without the sink's transactional-id ACL gets a clear
authorization error from the query.

Three broker processes (each broker and controller, `tests/brokerproc.py`): clients and brokers on
SASL_SSL with SCRAM-SHA-512, controllers on SASL_SSL with PLAIN (tests/harness/inprocess.py's
`secured_configs` settings, as overrides). One cluster and one Spark session for the module.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs Java 17+ (no java on PATH, no JAVA_HOME)", allow_module_level=True)

from odradek.broker.storage_tool import parse_add_scram, write_bootstrap_records  # noqa: E402
from odradek.client.blocking import BlockingAdmin, BlockingConsumer, BlockingProducer  # noqa: E402
from odradek.client.cluster import TopicPartition  # noqa: E402
from odradek.metadata.image import new_cluster_id  # noqa: E402
from odradek.pipeline import _kafka  # noqa: E402
from odradek.storage.meta_properties import format_log_dir  # noqa: E402
from tests.brokerproc import BrokerProcess  # noqa: E402
from tests.harness.inprocess import PLAIN_JAAS, QUICK, free_ports  # noqa: E402
from tests.pki import make_pki  # noqa: E402

pytestmark = pytest.mark.timeout(400)

PASSWORDS = {"admin": "admin-pw-51ce", "carol": "carol-pw-88a0", "dave": "dave-pw-2b7e"}
SINK_PREFIX = "odradek-spark-sink."
COMMIT_TOPIC = "_odradek-spark-sink-commits"


class SecuredCluster:
    def __init__(self, procs: list[BrokerProcess], ca: str, ports: list[int]):
        self.procs, self.ca = procs, ca
        self.bootstrap = ",".join(f"127.0.0.1:{p}" for p in ports)

    def client(self, user: str) -> dict:
        return {"bootstrap_servers": self.bootstrap, "security_protocol": "SASL_SSL", "ssl_ca_location": self.ca,
                "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": user, "sasl_password": PASSWORDS[user]}

    def spark_options(self, user: str) -> dict:
        return {"kafka.bootstrap.servers": self.bootstrap, "kafka.security.protocol": "SASL_SSL",
                "kafka.ssl.ca.location": self.ca, "kafka.sasl.mechanism": "SCRAM-SHA-512",
                "kafka.sasl.username": user, "kafka.sasl.password": PASSWORDS[user]}

    def acl(self, *args: str) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "odradek", "acl", "add", "--bootstrap-server", self.bootstrap,
             "-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={self.ca}",
             "-X", "sasl.mechanism=SCRAM-SHA-512", "-X", "sasl.username=admin",
             "-X", f"sasl.password={PASSWORDS['admin']}", *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr


def _overrides(i: int, n: int, ports: list[int], voters: str, pki) -> list[str]:
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" '
            f'password="{PASSWORDS["admin"]}";')
    settings = {
        "process.roles": "broker,controller", "controller.quorum.voters": voters,
        "listeners": f"CLIENT://127.0.0.1:{ports[i]},INTERNAL://127.0.0.1:{ports[n + i]},"
                     f"CONTROLLER://127.0.0.1:{ports[2 * n + i]}",
        "advertised.listeners": f"CLIENT://127.0.0.1:{ports[i]},INTERNAL://127.0.0.1:{ports[n + i]}",
        "listener.security.protocol.map": "CLIENT:SASL_SSL,INTERNAL:SASL_SSL,CONTROLLER:SASL_SSL",
        "inter.broker.listener.name": "INTERNAL", "controller.listener.names": "CONTROLLER",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512", "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.internal.scram-sha-512.sasl.jaas.config": jaas,
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": PLAIN_JAAS,
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_store),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:controller", "auto.create.topics.enable": "false",
        "default.replication.factor": 3, "offsets.topic.replication.factor": 3,
        "transaction.state.log.replication.factor": 3, "transaction.state.log.min.isr": 2,
        "min.insync.replicas": 2, **QUICK,
        "broker.session.timeout.ms": 6000, "broker.heartbeat.interval.ms": 500,
    }
    return [f"{k}={v}" for k, v in settings.items()]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("spark-cluster-secured")
    pki = make_pki(base / "pki")
    n = 3
    ports = free_ports(3 * n)
    voters = ",".join(f"{i + 1}@127.0.0.1:{ports[2 * n + i]}" for i in range(n))
    cluster_id = new_cluster_id()
    users = [parse_add_scram(f"SCRAM-SHA-512=[name={u},password={pw}]") for u, pw in PASSWORDS.items()]
    procs = []
    try:
        for i in range(n):
            data = base / f"node{i + 1}"
            format_log_dir(str(data), node_id=i + 1, cluster_id=cluster_id, directory_id=new_cluster_id())
            write_bootstrap_records(str(data), users)
            procs.append(BrokerProcess(data, *_overrides(i, n, ports, voters, pki), node_id=i + 1))
        for p in procs:
            p.start(timeout_s=60)
        secured = SecuredCluster(procs, str(pki.ca), ports[:n])
        admin = BlockingAdmin(**secured.client("admin"))
        try:
            deadline = time.monotonic() + 90
            while True:  # an RF=3 topic needs all three brokers registered and unfenced
                try:
                    admin.create_topic("warm-up", 1, 3)
                    break
                except Exception:
                    assert time.monotonic() < deadline, "".join(p.output[-20] for p in procs if p.output)
                    time.sleep(0.5)
        finally:
            admin.close()
        yield secured
    finally:
        for p in procs:
            p.stop()
        for p in procs:
            for user, pw in PASSWORDS.items():
                assert pw not in "".join(p.output), f"{user}'s password is in node {p.node_id}'s output"


@pytest.fixture(scope="module")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from odradek.pipeline.jobs import spark_session

    session = spark_session("odradek-cluster-security-tests", "local[2]", {
        "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1", "spark.task.maxFailures": "1",
        "spark.sql.streaming.stopTimeout": "30s",
    })
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    _kafka.close_all()


def _read_committed(cluster: SecuredCluster, topic: str, partitions: int) -> list:
    admin = BlockingAdmin(**cluster.client("admin"))
    consumer = BlockingConsumer(**cluster.client("admin"), auto_offset_reset="earliest",
                                isolation_level="read_committed")
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = admin.end_offsets(tps)
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        out: list = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "reading back timed out"
            for records in consumer.poll(timeout_ms=500).values():
                out.extend(r.value for r in records)
        return out
    finally:
        consumer.close()
        admin.close()


def _copy(spark, cluster: SecuredCluster, user: str, source: str, target: str, checkpoint: str):
    reader = spark.readStream.format("odradek").option("subscribe", source).option("startingOffsets", "earliest")
    for k, v in cluster.spark_options(user).items():
        reader = reader.option(k, v)
    writer = (reader.load().selectExpr("key", "value").writeStream.format("odradek").option("topic", target)
              .option("checkpointLocation", checkpoint).trigger(availableNow=True))
    for k, v in cluster.spark_options(user).items():
        writer = writer.option(k, v)
    return writer.start()


def _finish(query) -> Exception | None:
    """Wait for an AvailableNow query to stop; its error, if it failed (awaitTermination raises it)."""
    try:
        query.awaitTermination(240)
    except Exception:  # noqa: BLE001 - the query's own exception is returned below
        pass
    assert not query.isActive, "the query did not stop within 240 s"
    return query.exception()


def test_streaming_exactly_once_copy_with_only_the_readme_acls(spark, cluster, tmp_path):
    tag = uuid.uuid4().hex[:6]
    source, target, other = f"src-{tag}", f"dst-{tag}", f"dst2-{tag}"
    admin = BlockingAdmin(**cluster.client("admin"))
    try:
        admin.create_topic(source, 3, 3)
        admin.create_topic(target, 2, 3)
        admin.create_topic(other, 1, 3)
        admin.create_topic(COMMIT_TOPIC, 1, 3, {"cleanup.policy": "compact"})
    finally:
        admin.close()
    producer = BlockingProducer(**cluster.client("admin"), acks="all", linger_ms=5)
    try:
        futures = [producer.send(source, b"v%d" % i, b"k%d" % i) for i in range(300)]
        producer.flush()
        for f in futures:
            f.result(30)
    finally:
        producer.close()

    # carol: exactly the README's list for a streaming read and the exactly-once sink
    cluster.acl("--allow-principal", "User:carol", "--operation", "Read", "--topic", source)
    cluster.acl("--allow-principal", "User:carol", "--operation", "Write", "--topic", target)
    cluster.acl("--allow-principal", "User:carol", "--operation", "Write", "--transactional-id", SINK_PREFIX,
                "--resource-pattern-type", "prefixed")
    cluster.acl("--allow-principal", "User:carol", "--operation", "Read", "--group", SINK_PREFIX,
                "--resource-pattern-type", "prefixed")
    cluster.acl("--allow-principal", "User:carol", "--operation", "Read", "--topic", COMMIT_TOPIC)
    # dave: the same read and topic Write, but not the sink's transactional ids
    cluster.acl("--allow-principal", "User:dave", "--operation", "Read", "--topic", source)
    cluster.acl("--allow-principal", "User:dave", "--operation", "Write", "--topic", other)
    cluster.acl("--allow-principal", "User:dave", "--operation", "Read", "--topic", COMMIT_TOPIC)
    cluster.acl("--allow-principal", "User:dave", "--operation", "Read", "--group", SINK_PREFIX,
                "--resource-pattern-type", "prefixed")

    deadline = time.monotonic() + 60
    attempt = 0
    while True:  # the ACLs reach every broker's image through the metadata log
        attempt += 1
        failure = _finish(_copy(spark, cluster, "carol", source, target, str(tmp_path / f"carol-{attempt}")))
        if failure is None:
            break
        assert time.monotonic() < deadline, f"carol's copy failed: {failure}"
        time.sleep(1)
    # a second run over the same checkpoint finds nothing new and writes nothing
    assert _finish(_copy(spark, cluster, "carol", source, target, str(tmp_path / f"carol-{attempt}"))) is None
    copied = Counter(_read_committed(cluster, target, 2))
    assert set(copied.values()) == {1}, [v for v, c in copied.items() if c > 1][:5]
    assert sorted(copied) == sorted(b"v%d" % i for i in range(300))

    error = str(_finish(_copy(spark, cluster, "dave", source, other, str(tmp_path / "dave"))))
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in error and "sink.exactlyOnce=false" in error, error[-2000:]
    assert _read_committed(cluster, other, 1) == []
    for pw in PASSWORDS.values():
        assert pw not in error
