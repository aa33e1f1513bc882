"""Spark's own JVM Kafka connector (`format("kafka")`, spark-sql-kafka-0-10) against a real Odradek broker:
the wire proof that Spark users on the JVM connector can point it at Odradek unchanged.

Batch reads (every field the connector exposes, headers included, and an explicit offset range), a batch write
of keys, values, headers and chosen partitions read back with the plain client, and a Trigger.AvailableNow
stream from topic to topic resumed from its checkpoint. One broker and one Spark session for the module.

The connector's jars come from bench/jvm/spark-kafka/pom.xml through Maven (bench/spark_connector.py, the
same resolution the `kafka-connector` bench target uses) and reach Spark as `spark.jars`. A Maven that
cannot resolve them (Maven Central unreachable) fails the module with Maven's reason; a machine without
java or mvn skips it, except in CI (CI=true), where that fails too.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import uuid

import pytest

pytest.importorskip("pyspark")

from bench import spark_connector  # noqa: E402
from odradek.client.blocking import BlockingAdmin, BlockingConsumer, BlockingProducer  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def _require(tools: tuple[str, ...]) -> None:
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        reason = f"Spark's Kafka connector test needs {', '.join(missing)} on PATH (a JDK 17+ and Maven)"
        if os.environ.get("CI") == "true":
            pytest.fail(reason + ": CI must have them", pytrace=False)
        pytest.skip(reason)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from tests.brokerproc import BrokerProcess

    proc = BrokerProcess(tmp_path_factory.mktemp("connector-broker")).start()
    yield proc
    proc.stop()


def _fresh_jvm() -> None:
    """`spark.jars` only reaches the driver's classpath when the JVM starts (a session built on a JVM that is
    already up cannot find `format("kafka")`): a JVM left by an earlier Spark module in this pytest worker is
    shut down so the next session starts its own. Files run one at a time per worker (`--dist loadfile`), so
    a context still active here belongs to a module whose tests are over."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    gateway = SparkContext._gateway
    if gateway is None:
        return
    gateway.shutdown()
    proc = getattr(gateway, "proc", None)  # the JVM exits when its stdin closes (PythonGatewayServer)
    if proc is not None:
        proc.stdin.close()
        proc.wait(60)
    SparkContext._gateway = None
    SparkContext._jvm = None


@pytest.fixture(scope="module")
def spark():
    _require(("java", "mvn"))
    try:
        jars = spark_connector.session_conf()
    except spark_connector.ConnectorUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    _fresh_jvm()
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.appName("odradek-spark-kafka-connector").master("local[2]")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.jars", jars["spark.jars"]).getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def admin(broker):
    a = BlockingAdmin(bootstrap_servers=broker.bootstrap)
    yield a
    a.close()


def new_topic(admin, partitions: int = 3) -> str:
    name = f"sparkjvm-{uuid.uuid4().hex[:8]}"
    admin.create_topic(name, partitions, 1)
    return name


def produce(bootstrap: str, topic: str, n: int, *, start: int = 0, partitions: int = 3) -> dict:
    """Record i: partition i % partitions, key b"k<i>", value b"v<i>", header ("i", b"<i>") on odd i.
    Returns {(partition, offset): timestamp_ms} as the broker acknowledged them."""
    producer = BlockingProducer(bootstrap_servers=bootstrap, linger_ms=5)
    try:
        futures = [producer.send(topic, b"v%d" % i, b"k%d" % i, partition=i % partitions,
                                 headers=[("i", str(i).encode())] if i % 2 else None)
                   for i in range(start, start + n)]
        producer.flush()
        acks = [f.result(30) for f in futures]
    finally:
        producer.close()
    return {(a.partition, a.offset): a.timestamp for a in acks}


def read_back(bootstrap: str, topic: str) -> list:
    """Every record of `topic` through the plain client (independent of Spark)."""
    admin = BlockingAdmin(bootstrap_servers=bootstrap)
    consumer = BlockingConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    try:
        tps = admin.topic_partitions(topic)
        ends = admin.end_offsets(tps)
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        out: list = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"reading {topic} back did not reach {ends}"
            for records in consumer.poll(timeout_ms=500).values():
                out.extend(records)
        return out
    finally:
        consumer.close()
        admin.close()


def test_batch_read_every_field_and_an_offset_range(spark, broker, admin):
    topic = new_topic(admin)
    acked = produce(broker.bootstrap, topic, 300)
    rows = (spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic).option("includeHeaders", "true").load().collect())
    assert len(rows) == 300
    seen = {}
    for row in rows:
        i = int(bytes(row.value)[1:])
        assert row.topic == topic and bytes(row.key) == b"k%d" % i and row.partition == i % 3
        assert row.timestampType == 0  # CreateTime
        headers = [(h.key, bytes(h.value)) for h in row.headers or []]
        assert headers == ([("i", str(i).encode())] if i % 2 else [])
        seen[(row.partition, row.offset)] = int(row.timestamp.timestamp() * 1000)
    assert set(seen) == set(acked)  # every acknowledged (partition, offset), once
    assert all(abs(seen[k] - acked[k]) <= 1 for k in acked)  # Spark's timestamp is the record's CreateTime

    ranged = (spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
              .option("assign", json.dumps({topic: [1]}))
              .option("startingOffsets", json.dumps({topic: {"1": 10}}))
              .option("endingOffsets", json.dumps({topic: {"1": 20}})).load()
              .select("partition", "offset", "value").collect())
    assert {r.partition for r in ranged} == {1}
    assert sorted(r.offset for r in ranged) == list(range(10, 20))
    assert sorted(bytes(r.value) for r in ranged) == sorted(b"v%d" % (3 * o + 1) for o in range(10, 20))


def test_batch_write_keys_values_headers_and_partitions(spark, broker, admin):
    topic = new_topic(admin)
    frame = spark.range(200, numPartitions=2).selectExpr(
        "cast(concat('k', id) as binary) as key", "cast(concat('v', id) as binary) as value",
        "cast(id % 3 as int) as partition",
        "array(named_struct('key', 'i', 'value', cast(cast(id as string) as binary))) as headers")
    frame.write.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic).save()
    records = read_back(broker.bootstrap, topic)
    assert len(records) == 200
    for r in records:
        i = int(r.value[1:])
        assert r.key == b"k%d" % i and r.partition == i % 3 and r.headers == [("i", str(i).encode())]
    assert sorted(int(r.value[1:]) for r in records) == list(range(200))


def test_stream_copy_resumes_from_its_checkpoint(spark, broker, admin, tmp_path):
    source, target = new_topic(admin), new_topic(admin)
    produce(broker.bootstrap, source, 150)

    def copy() -> None:
        query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
                 .option("subscribe", source).option("startingOffsets", "earliest").load()
                 .select("key", "value").writeStream.format("kafka")
                 .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", target)
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
        query.awaitTermination()
        assert query.exception() is None

    copy()
    assert sorted(r.value for r in read_back(broker.bootstrap, target)) == sorted(b"v%d" % i for i in range(150))
    produce(broker.bootstrap, source, 60, start=150)
    copy()  # the checkpoint's offsets: only the 60 new records are copied
    copied = read_back(broker.bootstrap, target)
    assert sorted(r.value for r in copied) == sorted(b"v%d" % i for i in range(210))
