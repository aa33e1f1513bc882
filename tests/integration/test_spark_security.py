"""The `odradek` data source against a secured broker process: SASL_SSL with SCRAM-SHA-512, ACLs
(StandardAuthorizer), real Spark (local[2], one session for the module).

alice holds exactly the ACLs pipeline/README.md lists for batch jobs (Read on the topic she reads, Write on
the topic she writes): her batch read and batch write succeed. mallory authenticates but holds no ACL: her
read fails with TOPIC_AUTHORIZATION_FAILED naming the topic, her write with CLUSTER_AUTHORIZATION_FAILED
(the idempotent producer's InitProducerId needs Write on some topic, KIP-679). Neither password (given as
`kafka.sasl.password` or inside `kafka.sasl.jaas.config`) appears in Spark's plan strings, in the error
the job raises, in Spark's event log (every query's plans, as the history server shows them), or in
anything written to this process's stdout/stderr (Spark's and the Python workers'
logs, which inherit those file descriptors).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
import time
import uuid

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs Java 17+ (no java on PATH, no JAVA_HOME)", allow_module_level=True)

from odradek.client.blocking import BlockingAdmin, BlockingProducer  # noqa: E402
from odradek.pipeline import _kafka  # noqa: E402
from tests.brokerproc import BrokerProcess  # noqa: E402
from tests.pki import make_pki  # noqa: E402

pytestmark = pytest.mark.timeout(300)

PASSWORDS = {"admin": "admin-pw-3f9c", "alice": "alice-pw-7d21", "mallory": "mallory-pw-b04e"}
_LISTENING = re.compile(r"listening on (\w+)://([^:\s]+):(\d+)")


class Secured:
    def __init__(self, proc: BrokerProcess, ca: str, port: int):
        self.proc, self.ca, self.bootstrap = proc, ca, f"127.0.0.1:{port}"

    def client(self, user: str) -> dict:
        """The bundled client's settings for `user`."""
        return {"bootstrap_servers": self.bootstrap, "security_protocol": "SASL_SSL", "ssl_ca_location": self.ca,
                "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": user, "sasl_password": PASSWORDS[user]}

    def spark_options(self, user: str, *, jaas: bool = False) -> dict:
        """The data source's options for `user`, as a Spark user writes them: librdkafka's names, or Java's
        JAAS line."""
        options = {"kafka.bootstrap.servers": self.bootstrap, "kafka.security.protocol": "SASL_SSL",
                   "kafka.ssl.ca.location": self.ca, "kafka.sasl.mechanism": "SCRAM-SHA-512"}
        if jaas:
            options["kafka.sasl.jaas.config"] = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                                 f'username="{user}" password="{PASSWORDS[user]}";')
        else:
            options.update({"kafka.sasl.username": user, "kafka.sasl.password": PASSWORDS[user]})
        return options


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    base = tmp_path_factory.mktemp("spark-secured")
    pki = make_pki(base / "pki")
    data = base / "data"
    properties = base / "server.properties"
    properties.write_text(f"log.dirs={data}\nnode.id=1\nlisteners=PLAINTEXT://127.0.0.1:0\n")
    cluster_id = subprocess.run([sys.executable, "-m", "odradek", "storage", "random-uuid"], capture_output=True,
                                text=True, check=True).stdout.strip()
    scram = [a for user, pw in PASSWORDS.items() for a in ("--add-scram", f"SCRAM-SHA-512=[name={user},password={pw}]")]
    formatted = subprocess.run([sys.executable, "-m", "odradek", "storage", "format", "--cluster-id", cluster_id,
                                "-c", str(properties), *scram], capture_output=True, text=True)
    assert formatted.returncode == 0, formatted.stderr
    proc = BrokerProcess(
        data,
        "listeners=SASL_SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
        "ssl.keystore.type=PEM", f"ssl.keystore.location={pki.server_store}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={pki.ca}",
        "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users=User:admin", "auto.create.topics.enable=false",
    ).start()
    deadline = time.monotonic() + 30
    while not (ports := [int(m.group(3)) for line in list(proc.output) if (m := _LISTENING.search(line))]):
        assert time.monotonic() < deadline, "".join(proc.output[-30:])
        time.sleep(0.05)
    yield Secured(proc, str(pki.ca), ports[0])
    proc.stop()
    for user, pw in PASSWORDS.items():  # the broker logs logins, never the secrets
        assert pw not in proc.log_text(), user


@pytest.fixture(scope="module")
def spark(tmp_path_factory):
    """The session writes Spark's event log: every query's plans (reads and writes, as the history server
    shows them) and the session's properties, which the teardown searches for the passwords."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from odradek.pipeline.jobs import spark_session

    events = tmp_path_factory.mktemp("spark-events")
    session = spark_session("odradek-security-tests", "local[2]", {
        "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1", "spark.task.maxFailures": "1",
        "spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(), "spark.eventLog.compress": "false",
    })
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()
    _kafka.close_all()
    log = "".join(f.read_text(errors="replace") for f in events.rglob("*") if f.is_file())
    assert "BatchScan odradek" in log and "AppendData" in log, "the event log holds no plans"
    _assert_no_password(log)


@pytest.fixture(scope="module")
def topics(secured):
    """`readable` (alice may Read), `writable` (alice may Write), each with records; ACLs in the image."""
    readable, writable = f"sec-r-{uuid.uuid4().hex[:6]}", f"sec-w-{uuid.uuid4().hex[:6]}"
    admin = BlockingAdmin(**secured.client("admin"))
    try:
        admin.create_topic(readable, 2, 1)
        admin.create_topic(writable, 1, 1)
        odradek = [sys.executable, "-m", "odradek", "acl", "add", "--bootstrap-server", secured.bootstrap,
                   "-X", "security.protocol=SASL_SSL", "-X", f"ssl.ca.location={secured.ca}",
                   "-X", "sasl.mechanism=SCRAM-SHA-512", "-X", "sasl.username=admin",
                   "-X", f"sasl.password={PASSWORDS['admin']}"]
        for topic, operation in ((readable, "Read"), (writable, "Write")):
            done = subprocess.run([*odradek, "--allow-principal", "User:alice", "--operation", operation,
                                   "--topic", topic], capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stdout + done.stderr
    finally:
        admin.close()
    producer = BlockingProducer(**secured.client("admin"), linger_ms=0)
    try:
        futures = [producer.send(readable, b"v%d" % i, partition=i % 2) for i in range(10)]
        producer.flush()
        for f in futures:
            f.result(10)
    finally:
        producer.close()
    return readable, writable


def _plan(df) -> str:
    return df._jdf.queryExecution().toString()


def _assert_no_password(text: str) -> None:
    for user, pw in PASSWORDS.items():
        assert pw not in text, f"{user}'s password leaked:\n{text[max(0, text.find(pw) - 500):text.find(pw) + 200]}"


def test_acl_holder_reads_and_writes_an_outsider_is_refused_and_no_password_leaks(spark, secured, topics, capfd, caplog):
    readable, writable = topics
    caplog.set_level(logging.DEBUG, logger="odradek")
    texts: list[str] = []

    def read(user: str, *, jaas: bool = False):
        reader = spark.read.format("odradek").option("subscribe", readable)
        for k, v in secured.spark_options(user, jaas=jaas).items():
            reader = reader.option(k, v)
        df = reader.load()
        texts.append(_plan(df))
        return df

    # alice: read (librdkafka-style options, then Java's JAAS line), write
    deadline = time.monotonic() + 30
    while True:  # the ACLs reach the broker's image through the metadata log
        try:
            rows = read("alice").collect()
            break
        except Exception:
            assert time.monotonic() < deadline, "alice's Read ACL never took effect"
            time.sleep(0.5)
    assert sorted(r.value for r in rows) == sorted(b"v%d" % i for i in range(10))
    assert len(read("alice", jaas=True).collect()) == 10

    frame = spark.createDataFrame([(f"w{i}",) for i in range(5)], "value string")
    writer = frame.write.format("odradek").mode("append").option("topic", writable)
    for k, v in secured.spark_options("alice", jaas=True).items():
        writer = writer.option(k, v)
    deadline = time.monotonic() + 30
    while True:
        try:
            writer.save()
            break
        except Exception:
            assert time.monotonic() < deadline, "alice's Write ACL never took effect"
            time.sleep(0.5)
    admin = BlockingAdmin(**secured.client("admin"))
    try:
        from odradek.client.cluster import TopicPartition

        assert admin.end_offsets([TopicPartition(writable, 0)])[TopicPartition(writable, 0)] >= 5
    finally:
        admin.close()

    # mallory: authenticated, no ACLs
    with pytest.raises(Exception) as refused_read:
        read("mallory").collect()
    assert f"topic '{readable}': TOPIC_AUTHORIZATION_FAILED" in str(refused_read.value)
    writer = frame.write.format("odradek").mode("append").option("topic", writable)
    for k, v in secured.spark_options("mallory").items():
        writer = writer.option(k, v)
    with pytest.raises(Exception) as refused_write:
        writer.save()
    # with no Write on any topic, the idempotent producer's InitProducerId is refused first (KIP-679)
    assert "CLUSTER_AUTHORIZATION_FAILED" in str(refused_write.value)

    captured = capfd.readouterr()
    texts += [str(refused_read.value), str(refused_write.value), captured.out, captured.err, caplog.text]
    for text in texts:
        _assert_no_password(text)
