"""Spark's own JVM Kafka connector (`format("kafka")`, spark-sql-kafka-0-10) beside the `odradek` data source.

    python -m bench.spark_bench --rows 200000 --kafka-connector [--stream]

The "kafka-connector" target of bench/spark_bench.py: in the same run, on the same Spark session and against
the same broker, the connector most Spark users already run does what the `odradek` data source was timed
doing, so the two rows/s figures sit side by side:

- kafka_connector_read_rows_s: `spark.read.format("kafka")` of the same source topic into Spark's `noop`
  sink (the counterpart of spark_read_rows_s);
- kafka_connector_write_rows_s: the same (key, value) frame written with `write.format("kafka")` (the
  counterpart of spark_write_rows_s);
- with --stream, kafka_connector_stream_copy_rows_s: the source topic copied by a Trigger.AvailableNow query
  from `readStream.format("kafka")` to `writeStream.format("kafka")`. The connector's sink is at-least-once
  only, so its counterpart is stream_copy_at_least_once_rows_s.

Each side runs at its defaults: the connector's consumers and producers are kafka-clients' defaults
(idempotent, acks=all), the data source's are its own. Nothing here asserts a speed.

**Where the jars come from.** bench/jvm/spark-kafka/pom.xml names the connector; Maven copies it and what it
needs beyond pyspark's own jars (spark-token-provider-kafka-0-10, kafka-clients, commons-pool2) into
bench/jvm/spark-kafka/lib/ (ignored; resolved on first use and again only when the pom changes), and the
session gets them as `spark.jars`, a comma-separated list of local paths, when it is built: nothing is
downloaded while Spark runs. `spark.jars` rather than `spark.jars.packages` because the latter resolves
through Ivy at session start, every start, and wants the network then.

**Which version.** The connector is built against one Spark release and reaches into Spark's internals, so
its version should be pyspark's. Maven Central does not serve spark-sql-kafka-0-10_2.13 at 4.3.0 (the
installed pyspark); the pom takes the nearest served release, 4.2.0, which pulls kafka-clients 3.9.2.
`versions()` reports both so every result says what was measured; the integration test
(tests/integration/test_spark_kafka_connector.py) is what proves this pairing reads and writes.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

CONNECTOR_DIR = Path(__file__).resolve().parent / "jvm" / "spark-kafka"
POM = CONNECTOR_DIR / "pom.xml"
LIB = CONNECTOR_DIR / "lib"
CONNECTOR_MARKER = "spark-sql-kafka-0-10_"
RESOLVE_TIMEOUT_S = 240


class ConnectorUnavailable(RuntimeError):
    """Maven (or Maven Central) could not provide the connector's jars; the message names what failed."""


def add_argument(parser) -> None:
    parser.add_argument("--kafka-connector", action="store_true",
                        help="also time Spark's JVM Kafka connector (format('kafka')) on the same broker; "
                             "resolves it with Maven on first use (bench/jvm/spark-kafka/pom.xml)")


@contextmanager
def _locked():
    CONNECTOR_DIR.mkdir(parents=True, exist_ok=True)
    with open(CONNECTOR_DIR / ".resolve.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # parallel pytest workers and a bench run resolve once between them
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _pyspark_jar_names() -> set[str]:
    """Artifact names (version stripped) of the jars pyspark ships: those must not be on the classpath twice."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    return {_artifact(j.name) for j in jars.glob("*.jar")}


def _artifact(jar_name: str) -> str:
    """`kafka-clients-3.9.2.jar` -> `kafka-clients`: the name up to the first '-' followed by a digit."""
    return re.split(r"-\d", jar_name.removesuffix(".jar"), maxsplit=1)[0]


def resolve_jars() -> list[Path]:
    """The connector's jars (those pyspark does not already ship), resolved through Maven on first use.

    Raises ConnectorUnavailable when mvn is missing or fails (Maven Central unreachable, artifact not
    served), with Maven's own reason."""
    if shutil.which("mvn") is None:
        raise ConnectorUnavailable("Spark's Kafka connector is resolved with Maven, and there is no mvn on PATH")
    stamp = LIB / ".pom-hash"
    want = hashlib.sha256(POM.read_bytes()).hexdigest()[:16]
    with _locked():
        if not (stamp.exists() and stamp.read_text() == want and any(LIB.glob("*.jar"))):
            shutil.rmtree(LIB, ignore_errors=True)
            try:
                done = subprocess.run(
                    ["mvn", "-B", "-q", "-Dstyle.color=never", "-f", str(POM), "dependency:copy-dependencies",
                     f"-DoutputDirectory={LIB}"], capture_output=True, text=True, timeout=RESOLVE_TIMEOUT_S)
            except subprocess.TimeoutExpired as exc:
                raise ConnectorUnavailable(
                    f"mvn did not resolve {POM.name} in {RESOLVE_TIMEOUT_S} s (is Maven Central reachable?)") from exc
            if done.returncode != 0:
                lines = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr).splitlines()  # Maven's colours
                reasons = [line for line in lines if "Could not" in line] or [x for x in lines if "ERROR" in x][:8]
                raise ConnectorUnavailable(
                    f"Maven could not resolve Spark's Kafka connector (exit {done.returncode}):\n"
                    + "\n".join(reasons or lines[-20:]))
            stamp.write_text(want)
    shipped = _pyspark_jar_names()
    jars = sorted(j for j in LIB.glob("*.jar") if _artifact(j.name) not in shipped)
    if not any(j.name.startswith(CONNECTOR_MARKER) for j in jars):
        raise ConnectorUnavailable(f"no {CONNECTOR_MARKER}*.jar after resolution: {[j.name for j in jars]}")
    return jars


def versions(jars: list[Path]) -> dict:
    """What was measured: the connector's and kafka-clients' versions from the jar names, and pyspark's."""
    import pyspark

    def version_of(prefix: str) -> str:
        for jar in jars:
            if jar.name.startswith(prefix):
                return jar.name.removesuffix(".jar").rsplit("-", 1)[-1]
        return "?"

    return {"connector": f"spark-sql-kafka-0-10 {version_of(CONNECTOR_MARKER)}",
            "kafka_clients": version_of("kafka-clients-"), "pyspark": pyspark.__version__}


def session_conf(enabled: bool = True) -> dict[str, str]:
    """The Spark configuration that puts the connector on the classpath (nothing when not enabled)."""
    if not enabled:
        return {}
    return {"spark.jars": ",".join(str(j) for j in resolve_jars())}


def _rate(rows: int, seconds: float) -> int:
    return int(rows / seconds) if seconds > 0 else 0


def measure(spark, admin, bootstrap: str, source: str, *, rows: int, value_size: int, partitions: int,
            repeat: int, stream: bool) -> dict:
    """The connector's figures on `source` (already holding `rows` records), on a session built with
    `session_conf()`; `admin` is a BlockingAdmin on the same broker, for the sink topics and their checks."""
    from odradek.client.cluster import TopicPartition

    result: dict = {"kafka_connector": versions(resolve_jars())}
    tag = uuid.uuid4().hex[:6]
    sink, stream_sink = f"bench-connector-write-{tag}", f"bench-connector-stream-{tag}"
    for topic in (sink, stream_sink):
        admin.create_topic(topic, partitions, 1)

    def read_df():
        return (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                .option("subscribe", source).load())

    t0 = time.perf_counter()
    read_df().limit(1).collect()  # loads the connector's classes and opens its first consumer
    result["kafka_connector_first_job_s"] = round(time.perf_counter() - t0, 1)

    def read() -> float:
        t0 = time.perf_counter()
        read_df().write.format("noop").mode("overwrite").save()
        return time.perf_counter() - t0

    result["kafka_connector_read_rows_s"] = _rate(rows, min(read() for _ in range(repeat)))

    frame = (spark.range(rows, numPartitions=partitions)
             .selectExpr("cast(id as string) as key", f"repeat('x', {value_size}) as value").cache())
    frame.count()

    def write() -> float:
        t0 = time.perf_counter()
        (frame.write.format("kafka").mode("append").option("kafka.bootstrap.servers", bootstrap)
         .option("topic", sink).save())
        return time.perf_counter() - t0

    result["kafka_connector_write_rows_s"] = _rate(rows, min(write() for _ in range(repeat)))
    frame.unpersist()
    written = sum(admin.end_offsets([TopicPartition(sink, p) for p in range(partitions)]).values())
    if written != rows * repeat:  # a fast figure for a write that lost rows would be worse than none
        raise AssertionError(f"the connector wrote {written} records to {sink}, expected {rows * repeat}")

    if stream:
        with tempfile.TemporaryDirectory() as checkpoint:
            query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                     .option("subscribe", source).option("startingOffsets", "earliest").load()
                     .select("key", "value").writeStream.format("kafka")
                     .option("kafka.bootstrap.servers", bootstrap).option("topic", stream_sink)
                     .option("checkpointLocation", checkpoint).trigger(availableNow=True))
            t0 = time.perf_counter()
            q = query.start()
            q.awaitTermination()
            result["kafka_connector_stream_copy_rows_s"] = _rate(rows, time.perf_counter() - t0)
    return result
