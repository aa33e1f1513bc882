"""The `odradek` PySpark data source with real Spark (local[2], one session for the module) against a real
broker process: batch reads with offsets, timestamps and headers; data loss; a stream to Parquet stopped
and restarted; read limits and AvailableNow; batch writes; and the exactly-once streaming sink across
injected task failures (mid-transaction and after its commit) and a failure of the driver's commit.

No sleeps: streams are driven with processAllAvailable() or Trigger.AvailableNow.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import uuid
from collections import Counter

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs Java 17+ (no java on PATH, no JAVA_HOME)", allow_module_level=True)

from odradek.client.blocking import BlockingAdmin, BlockingConsumer, BlockingProducer  # noqa: E402
from odradek.client.cluster import TopicPartition  # noqa: E402
from odradek.pipeline import _kafka  # noqa: E402
from odradek.pipeline.datasource import OdradekDataSource, StreamWriter  # noqa: E402
from odradek.pipeline.sink import KafkaTaskTransaction, progress_group, transactional_id  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def _spark_session():
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from odradek.pipeline.jobs import spark_session

    spark = spark_session("odradek-tests", "local[2]", {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.streaming.stopTimeout": "30s",
        "spark.sql.python.filterPushdown.enabled": "true",  # used by readers with option filterPushdown=true
    })
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _free_port() -> int:
    from tests.harness.inprocess import free_ports

    (port,) = free_ports(1)
    return port


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """The module's broker, with its Prometheus endpoint: the pushdown test reads odradek_bytes_out_total."""
    from tests.brokerproc import BrokerProcess

    port = _free_port()
    proc = BrokerProcess(tmp_path_factory.mktemp("broker-data"), f"metrics.port={port}",
                         "metrics.host=127.0.0.1").start()
    proc.metrics_url = f"http://127.0.0.1:{port}/metrics"
    yield proc
    proc.stop()


def bytes_out(broker) -> float:
    import urllib.request

    text = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("odradek_bytes_out_total"))


@pytest.fixture(scope="module")
def spark():
    session = _spark_session()
    yield session
    session.stop()
    _kafka.close_all()


@pytest.fixture(scope="module")
def admin(broker):
    a = BlockingAdmin(bootstrap_servers=broker.bootstrap)
    yield a
    a.close()


@pytest.fixture(scope="module")
def producer(broker):
    p = BlockingProducer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    yield p
    p.close()


def new_topic(admin, partitions: int = 3, prefix: str = "ds") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    admin.create_topic(name, partitions, 1)
    return name


def produce(producer, topic: str, n: int, *, start: int = 0, partitions: int = 3, timestamp_ms=None) -> list:
    """Record i goes to partition i % partitions, value b"v<i>", key b"k<i>", header ("i", b"<i>") on odd i."""
    futures = []
    for i in range(start, start + n):
        headers = [("i", str(i).encode())] if i % 2 else None
        ts = timestamp_ms(i) if timestamp_ms else None
        futures.append(producer.send(topic, b"v%d" % i, b"k%d" % i, partition=i % partitions, headers=headers,
                                     timestamp_ms=ts))
    producer.flush()
    return [f.result(10) for f in futures]


def read_topic(bootstrap: str, topic: str, *, isolation_level: str = "read_committed") -> list:
    """Every record of `topic`, read with the plain client (independent of the data source)."""
    admin = BlockingAdmin(bootstrap_servers=bootstrap)
    consumer = BlockingConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                isolation_level=isolation_level)
    try:
        tps = admin.topic_partitions(topic)
        ends = admin.end_offsets(tps)
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        out = []
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, "reading back timed out"
            for records in consumer.poll(timeout_ms=500).values():
                out.extend(records)
        return out
    finally:
        consumer.close()
        admin.close()


def source(spark, broker, **options):
    reader = spark.read.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def stream_source(spark, broker, **options):
    reader = spark.readStream.format("odradek").option("kafka.bootstrap.servers", broker.bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


# ---------------------------------------------------------------------------------------- batch reads


def test_batch_read_offsets_timestamps_and_headers(spark, broker, admin, producer):
    topic = new_topic(admin)
    produce(producer, topic, 30, timestamp_ms=lambda i: 1_700_000_000_000 + i * 1000)

    rows = source(spark, broker, subscribe=topic, includeHeaders="true").collect()
    assert len(rows) == 30
    by_value = {r.value: r for r in rows}
    r7 = by_value[b"v7"]
    assert (r7.key, r7.topic, r7.partition, r7.offset, r7.timestampType) == (b"k7", topic, 1, 2, 0)
    assert r7.headers[0].key == "i" and r7.headers[0].value == b"7"
    assert by_value[b"v8"].headers is None
    assert int(r7.timestamp.timestamp() * 1000) == 1_700_000_007_000  # naive, in the session time zone
    assert source(spark, broker, subscribe=topic).columns == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]

    part = source(spark, broker, subscribe=topic,
                  startingOffsets=f'{{"{topic}":{{"0":5,"1":-2,"2":-2}}}}',
                  endingOffsets=f'{{"{topic}":{{"0":8,"1":2,"2":-1}}}}').collect()
    assert sorted((r.partition, r.offset) for r in part) == [(0, 5), (0, 6), (0, 7), (1, 0), (1, 1)] + [
        (2, o) for o in range(10)]

    assigned = source(spark, broker, assign=f'{{"{topic}":[1]}}', startingTimestamp=str(1_700_000_000_000 + 20_000))
    assert sorted(r.value for r in assigned.collect()) == [b"v22", b"v25", b"v28"]

    by_ts = source(spark, broker, subscribePattern=topic.replace("-", "[-]"),
                   startingOffsetsByTimestamp=f'{{"{topic}":{{"0":1700000003000,"1":0,"2":1700000002000}}}}',
                   endingTimestamp=str(1_700_000_000_000 + 5_000))
    assert sorted(r.value for r in by_ts.collect()) == [b"v1", b"v2", b"v3", b"v4"]
    beyond = f'{{"{topic}":{{"0":1700000027000,"1":0,"2":1700000099000}}}}'
    late = source(spark, broker, subscribe=topic, startingOffsetsByTimestamp=beyond,
                  startingOffsetsByTimestampStrategy="latest")
    assert sorted(r.value for r in late.collect()) == sorted([b"v27"] + [b"v%d" % i for i in range(1, 30, 3)])
    with pytest.raises(Exception, match="no record at or after the timestamp"):
        source(spark, broker, subscribe=topic, startingOffsetsByTimestamp=beyond).collect()
    with pytest.raises(Exception, match="is after the ending offset"):
        source(spark, broker, subscribe=topic, startingOffsets=f'{{"{topic}":{{"0":9,"1":0,"2":0}}}}',
               endingTimestamp=str(1_700_000_000_000 + 5_000)).collect()


def test_batch_read_of_deleted_records_honours_fail_on_data_loss(spark, broker, admin, producer):
    topic = new_topic(admin, partitions=1)
    produce(producer, topic, 10, partitions=1)
    admin.delete_records({TopicPartition(topic, 0): 4})
    offsets = f'{{"{topic}":{{"0":0}}}}'
    with pytest.raises(Exception, match="failOnDataLoss"):
        source(spark, broker, subscribe=topic, startingOffsets=offsets).collect()
    rows = source(spark, broker, subscribe=topic, startingOffsets=offsets, failOnDataLoss="false").collect()
    assert sorted(r.offset for r in rows) == list(range(4, 10))


def test_custom_schema_and_overwrite_are_refused(spark, broker, admin):
    topic = new_topic(admin, partitions=1)
    with pytest.raises(Exception, match="fixed schema"):
        spark.read.format("odradek").schema("value binary").option("kafka.bootstrap.servers", broker.bootstrap) \
            .option("subscribe", topic).load().collect()
    with pytest.raises(Exception, match="only appends"):
        spark.createDataFrame([("v",)], "value string").write.format("odradek").mode("overwrite") \
            .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", topic).save()


def test_filter_pushdown_fetches_only_the_ranges_the_filter_keeps(spark, broker, admin, producer):
    """The same filtered query with and without `filterPushdown`: the same rows, and the broker writes a
    fraction of the bytes when the filters are pushed (partition 1, offsets [150, 160) of 3 x 200 records
    of 1 KB); then a timestamp lower bound, pushed through ListOffsets by timestamp."""
    from datetime import datetime, timezone

    from pyspark.sql import functions as F

    topic = new_topic(admin)
    base = 1_700_000_000_000
    futures = [producer.send(topic, bytes(1000), b"k%d" % i, partition=i % 3, timestamp_ms=base + i * 1000)
               for i in range(600)]
    producer.flush()
    for f in futures:
        f.result(10)

    def run(condition, pushdown: bool) -> tuple[list, float]:
        df = source(spark, broker, subscribe=topic, filterPushdown=str(pushdown).lower()).where(condition)
        before = bytes_out(broker)
        rows = sorted((r.partition, r.offset) for r in df.collect())
        return rows, bytes_out(broker) - before

    by_offset = "partition = 1 and offset >= 150 and offset < 160 and key is not null"
    rows, pushed = run(by_offset, True)
    assert rows == [(1, o) for o in range(150, 160)]
    rows_without, unpushed = run(by_offset, False)
    assert rows_without == rows
    print(f"offset filter, bytes written by the broker: {pushed:.0f} pushed, {unpushed:.0f} not pushed")
    assert unpushed > 600_000 and pushed < unpushed / 5

    # timestamp >= t: records 570.. (ListOffsets by timestamp), partition 1: offsets 190..199
    since = datetime.fromtimestamp((base + 570_000) / 1000, tz=timezone.utc)
    by_time = (F.col("partition") == 1) & (F.col("timestamp") >= F.lit(since))
    rows, pushed = run(by_time, True)
    assert rows == [(1, o) for o in range(190, 200)]
    print(f"timestamp filter, bytes written by the broker: {pushed:.0f} pushed")
    assert pushed < unpushed / 5


def _transactions(bootstrap: str, topic: str, outcomes: list[bool], per_txn: int, value_size: int) -> None:
    """One transactional producer writing `per_txn` records to partition 0 per transaction, committing or
    aborting each as `outcomes` says; values are b"commit..." or b"abort..." padded to value_size."""
    import asyncio

    from odradek.client.config import ProducerConfig
    from odradek.client.producer import Producer

    async def run() -> None:
        producer = Producer(ProducerConfig(bootstrap_servers=bootstrap, transactional_id=f"rc-{topic}"))
        await producer.start()
        try:
            await producer.init_transactions()
            for n, commit in enumerate(outcomes):
                producer.begin_transaction()
                tag = b"commit" if commit else b"abort"
                for i in range(per_txn):
                    await producer.send(topic, (b"%s-%d-%d-" % (tag, n, i)).ljust(value_size, b"."), partition=0)
                await (producer.commit_transaction() if commit else producer.abort_transaction())
        finally:
            await producer.close()

    asyncio.run(run())


def test_read_committed_pushdown_over_aborted_transactions(spark, broker, admin, producer):
    """Partition 0 holds five transactions of 20 records (committed, aborted, committed, aborted, committed:
    offsets 0-19, 21-40, 42-61, 63-82, 84-103, a marker after each); partition 1 holds 1.5 MB of plain
    records. An offset-filtered read_committed batch read over [30, 90) of partition 0 returns exactly the
    committed records in range, nothing aborted, and fetches a fraction of the bytes of the same query
    without pushdown; read_uncommitted shows the aborted records were in range."""
    topic = new_topic(admin, partitions=2, prefix="rc")
    _transactions(broker.bootstrap, topic, [True, False, True, False, True], 20, 1000)
    filler = [producer.send(topic, bytes(1000), partition=1) for _ in range(1500)]
    producer.flush()
    for f in filler:
        f.result(10)

    condition = "partition = 0 and offset >= 30 and offset < 90"

    def run(pushdown: bool, isolation: str) -> tuple[list, float]:
        df = source(spark, broker, subscribe=topic, filterPushdown=str(pushdown).lower(),
                    **{"kafka.isolation.level": isolation}).where(condition)
        before = bytes_out(broker)
        rows = sorted((r.offset, r.value.split(b"-")[0]) for r in df.collect())
        return rows, bytes_out(broker) - before

    rows, pushed = run(True, "read_committed")
    assert rows == [(o, b"commit") for o in range(42, 62)] + [(o, b"commit") for o in range(84, 90)]
    rows_without, unpushed = run(False, "read_committed")
    assert rows_without == rows
    print(f"read_committed offset filter, bytes written by the broker: {pushed:.0f} pushed, "
          f"{unpushed:.0f} not pushed")
    assert unpushed > 1_400_000 and pushed < unpushed / 5
    uncommitted, _ = run(True, "read_uncommitted")
    assert [o for o, tag in uncommitted if tag == b"abort"] == list(range(30, 41)) + list(range(63, 83))


# ---------------------------------------------------------------------------------------- discovery

# The driver of this script imports pyspark only: no odradek import, no register call. Spark must find the
# source through the installed top-level module pyspark_odradek (the JVM's lookup worker imports it).
_UNREGISTERED_READ = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").appName("odradek-discovery")
         .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
rows = (spark.read.format("odradek").option("kafka.bootstrap.servers", sys.argv[1])
        .option("subscribe", sys.argv[2]).load().collect())
assert "odradek.pipeline" not in sys.modules, "the driver imported odradek"
print("VALUES", ",".join(sorted(r.value.decode() for r in rows)))
spark.stop()
"""


def test_format_odradek_needs_no_register_once_installed(broker, admin, producer, tmp_path):
    """A fresh JVM and driver (the lookup of installed sources is cached per JVM, so the module's session,
    which registers, cannot show it). Its PYTHONPATH holds pyspark_odradek.py as a wheel installs it
    (top level, beside the odradek package the venv already provides)."""
    import subprocess
    from pathlib import Path

    topic = new_topic(admin, partitions=1)
    produce(producer, topic, 3, partitions=1)
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(Path(__file__).parents[2] / "pyspark_odradek.py", site)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", _UNREGISTERED_READ, broker.bootstrap, topic], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "VALUES v0,v1,v2" in done.stdout


# ---------------------------------------------------------------------------------------- streaming reads


def test_stream_to_parquet_stop_produce_restart_reads_every_record_once(spark, broker, admin, producer, tmp_path):
    topic = new_topic(admin)
    produce(producer, topic, 45)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def run() -> list[int]:
        query = (stream_source(spark, broker, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="20")
                 .writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint).start())
        try:
            query.processAllAvailable()
            return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        finally:
            query.stop()

    first = run()
    assert sum(first) == 45 and max(first) <= 20, first  # maxOffsetsPerTrigger
    produce(producer, topic, 30, start=45)
    second = run()
    assert sum(second) == 30 and max(second) <= 20, second
    assert run() == []  # restart with nothing new: nothing read

    rows = spark.read.parquet(out).select("partition", "offset", "value").collect()
    assert len(rows) == 75
    assert len({(r.partition, r.offset) for r in rows}) == 75
    assert sorted(r.value for r in rows) == sorted(b"v%d" % i for i in range(75))


def test_available_now_respects_max_offsets_and_stops_by_itself(spark, broker, admin, producer, tmp_path):
    topic = new_topic(admin)
    produce(producer, topic, 45)
    query = (stream_source(spark, broker, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger="10")
             .writeStream.format("memory").queryName("available_now")
             .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    assert query.awaitTermination(120)
    assert query.exception() is None
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sizes == [10, 10, 10, 10, 5]
    assert spark.sql("select count(distinct partition, offset) from available_now").first()[0] == 45


def test_stream_picks_up_new_topics_of_a_pattern(spark, broker, admin, producer, tmp_path):
    prefix = f"pat{uuid.uuid4().hex[:6]}"
    first = new_topic(admin, partitions=2, prefix=prefix)
    produce(producer, first, 6, partitions=2)
    query = (stream_source(spark, broker, subscribePattern=f"{prefix}-.*", startingOffsets="earliest")
             .writeStream.format("memory").queryName("pattern").option("checkpointLocation", str(tmp_path / "cp"))
             .start())
    try:
        query.processAllAvailable()
        second = new_topic(admin, partitions=1, prefix=prefix)
        produce(producer, second, 4, partitions=1)
        query.processAllAvailable()
        query.processAllAvailable()  # the new topic enters the offsets first, then is read
    finally:
        query.stop()
    got = Counter(r.topic for r in spark.sql("select topic from pattern").collect())
    assert got == {first: 6, second: 4}


# ---------------------------------------------------------------------------------------- writing


def test_batch_write_round_trip(spark, broker, admin):
    topic = new_topic(admin)
    rows = [(f"k{i}", f"v{i}".encode(), i % 3 if i % 4 else None, [("n", str(i).encode())] if i % 2 else None)
            for i in range(200)]
    df = spark.createDataFrame(rows, "key string, value binary, partition int, "
                                     "headers array<struct<key: string, value: binary>>")
    df.write.format("odradek").mode("append").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("topic", topic).save()
    got = read_topic(broker.bootstrap, topic)
    assert sorted((r.key, r.value, tuple(r.headers)) for r in got) == sorted(
        (k.encode(), v, tuple(h or ())) for k, v, _, h in rows)
    placed = {r.value: r.partition for r in got}
    assert all(placed[v] == p for _, v, p, _ in rows if p is not None)

    # a topic column instead of the option, and the data source reading its own output
    other = new_topic(admin, partitions=1)
    spark.createDataFrame([(other, "x"), (other, "y")], "topic string, value string").write.format("odradek") \
        .mode("append").option("kafka.bootstrap.servers", broker.bootstrap).save()
    assert sorted(r.value for r in source(spark, broker, subscribe=other).collect()) == [b"x", b"y"]


class InjectedFailure(RuntimeError):
    pass


class _DyingTransaction(KafkaTaskTransaction):
    """A task's transaction whose process dies after its rows are sent and before it commits: the
    transaction is left open (no abort), for the next attempt's InitProducerId to abort."""

    def commit(self, next_batch):
        self._run(self._producer.flush())
        raise InjectedFailure(f"injected failure in the middle of the transaction of {self.txn_id}")

    def abort(self):
        pass


class _FailingStreamWriter(StreamWriter):
    """Fails once where a flag file in `flags` says, and deletes the flag:

    * `mid.<batch>.<task>`: the task dies with its transaction open, its rows sent;
    * `after.<batch>.<task>`: the task dies after committing its transaction, before Spark hears of it;
    * `commit.<batch>`: the driver's commit() fails after every task has committed.
    """

    flags: str = ""

    def _take(self, name: str) -> bool:
        try:
            os.remove(os.path.join(self.flags, name))
        except FileNotFoundError:
            return False
        return True

    @staticmethod
    def _where() -> str:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        return f"{ctx.getLocalProperty('streaming.sql.batchId')}.{ctx.partitionId()}"

    def _transaction(self, query_id, task):
        if self._take(f"mid.{self._where()}"):
            return _DyingTransaction(self.options.client, transactional_id(query_id, task),
                                     progress_group(query_id, task), self.options.commit_topic, self.options.topic)
        return super()._transaction(query_id, task)

    def write(self, iterator):
        message = super().write(iterator)
        where = self._where()
        if self._take(f"after.{where}"):
            raise InjectedFailure(f"injected failure after task {where} committed")
        return message

    def commit(self, messages, batchId):
        super().commit(messages, batchId)
        if self._take(f"commit.{batchId}"):
            raise InjectedFailure(f"injected failure in the driver's commit of batch {batchId}")


class FailingOdradek(OdradekDataSource):
    @classmethod
    def name(cls):
        return "odradek_failing"

    def streamWriter(self, schema, overwrite):
        writer = super().streamWriter(schema, overwrite)
        failing = _FailingStreamWriter(writer.options)
        failing.flags = self.options["test.flags"]
        return failing


def test_stream_sink_writes_each_row_once_across_task_and_driver_failures(spark, broker, admin, producer, tmp_path):
    """Each failure kills the query (local mode does not retry a task); the restart replays the batch with
    the same tasks. read_committed sees every input row once; read_uncommitted also sees the rows of the
    attempt that died mid-transaction, which the next attempt's InitProducerId aborted."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the failing subclass lives here
    spark.dataSource.register(FailingOdradek)
    src, dst = new_topic(admin), new_topic(admin)
    produce(producer, src, 60)
    flags = tmp_path / "flags"
    flags.mkdir()
    for name in ("mid.1.0", "after.2.1", "commit.3"):
        (flags / name).touch()

    def run():
        query = (stream_source(spark, broker, subscribe=src, startingOffsets="earliest", maxOffsetsPerTrigger="15")
                 .selectExpr("key", "value", "array(named_struct('key', 'src', 'value', cast(offset as string)))"
                             " as headers")
                 .writeStream.format("odradek_failing").option("kafka.bootstrap.servers", broker.bootstrap)
                 .option("topic", dst).option("test.flags", str(flags))
                 .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
        try:
            query.processAllAvailable()
        finally:
            query.stop()

    for failure in ("in the middle of the transaction of", "after task 2.1 committed",
                    "in the driver's commit of batch 3"):
        with pytest.raises(Exception, match=failure):
            run()
    run()  # replays batch 3 (all of it committed already: nothing is written)
    assert not list(flags.iterdir())

    got = read_topic(broker.bootstrap, dst)
    values = Counter(r.value for r in got)
    assert len(got) == 60 and values == Counter(b"v%d" % i for i in range(60)), values.most_common(3)
    assert all(list(r.headers) == [("src", str(int(r.value[1:]) // 3).encode())] for r in got)  # no sink header
    assert len(read_topic(broker.bootstrap, dst, isolation_level="read_uncommitted")) > 60
