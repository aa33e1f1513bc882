"""Rows per second through the `odradek` Spark data source, beside Spark's own ceiling in the same run.

    python -m bench.spark_bench [--rows 500000] [--value-size 100] [--partitions 4] [--bootstrap HOST:PORT]
                                [--master local[2]] [--repeat 2] [--stream] [--kafka-connector]

Starts a broker (unless --bootstrap names one), fills a topic, then measures (bounded: every figure is
one pass over `rows` records, the best of `--repeat` passes; a Spark figure and its null twin are
timed in turns, after one warm-up pass each):

- client_produce_rows_s: the sink's write path in this process, one thread: Arrow batches of (key, value)
  encoded column-wise and sent by `BulkProducer.send_arrow` (the write ceiling of one Spark task);
- client_read_rows_s: `_kafka.read_arrow` of every partition in turn, one thread, as `read()` does (the
  read ceiling of one Spark task);
- spark_read_rows_s: `spark.read.format("odradek")...load()` written to Spark's `noop` sink, so that
  every row is read and nothing else is done with it; null_source_rows_s: the same through the null
  source (bench/spark_nulls.py: same schema, partitions and batch size, no I/O); read_vs_null = the ratio;
- spark_write_rows_s: a cached DataFrame of (key, value) written with `write.format("odradek")`;
  null_sink_rows_s: the same DataFrame written to the null sink; write_vs_null = the ratio;
- with --stream, stream_copy_rows_s (exactly-once sink) and stream_copy_at_least_once_rows_s: a topic
  copied by a Trigger.AvailableNow query (one query per pass, started and finished; the two sinks timed in
  turns after a warm-up pass of each).
- with --kafka-connector, the same read, write (and stream) through Spark's own JVM connector,
  `format("kafka")`, on the same session and broker: bench/spark_connector.py.

Spark runs `local[2]` by default, so its figures use up to two Python workers against the single
thread of the client figures, and the broker shares the same cores. The machine may be shared: read each
`odradek` figure against its null twin from the same run. Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # `python bench/spark_bench.py` as well as `python -m bench.spark_bench`
    sys.path.insert(0, str(REPO_ROOT))

from bench import spark_connector  # noqa: E402  the "kafka-connector" target: Spark's own JVM connector


def _rate(rows: int, seconds: float) -> int:
    return int(rows / seconds) if seconds > 0 else 0


def _best(fn, repeat: int) -> float:
    return min(fn() for _ in range(repeat))


def _paired(fn, null_fn, repeat: int) -> tuple[float, float]:
    """Best times of `fn` and of its null twin, run in turns (fn, null, fn, null, ...) after one warm-up
    pass of each, so that both see the machine in the same state; a shared machine's load comes and goes
    within seconds."""
    fn()
    null_fn()
    times, null_times = [], []
    for _ in range(repeat):
        times.append(fn())
        null_times.append(null_fn())
    return min(times), min(null_times)


def run(bootstrap: str, *, rows: int, value_size: int, partitions: int, master: str, repeat: int,
        stream: bool, kafka_connector: bool = False) -> dict:
    from odradek.client.blocking import BlockingAdmin
    from odradek.client.cluster import TopicPartition
    from odradek.pipeline import _kafka, jobs
    from odradek.pipeline.offsets import OffsetRange
    from odradek.pipeline.options import ClientOptions

    result: dict = {"rows": rows, "value_size": value_size, "partitions": partitions, "master": master}
    client = ClientOptions.parse({"kafka.bootstrap.servers": bootstrap})
    admin = BlockingAdmin(bootstrap_servers=bootstrap)
    tag = uuid.uuid4().hex[:6]
    source, sink = f"bench-read-{tag}", f"bench-write-{tag}"
    for topic in (source, sink, sink + "-s1", sink + "-s2"):
        admin.create_topic(topic, partitions, 1)

    # client ceilings
    import pyarrow as pa

    value = b"x" * value_size
    batch_rows = 10_000
    producer = _kafka.BulkProducer(client)
    t0 = time.perf_counter()
    for first in range(0, rows, batch_rows):
        n = min(batch_rows, rows - first)
        frame = pa.RecordBatch.from_arrays(
            [pa.array([b"%d" % i for i in range(first, first + n)], pa.binary()), pa.array([value] * n, pa.binary())],
            names=["key", "value"])
        producer.send_arrow([frame], source)
    producer.flush()
    result["client_produce_rows_s"] = _rate(rows, time.perf_counter() - t0)
    producer.close()
    ends = admin.end_offsets([TopicPartition(source, p) for p in range(partitions)])

    def client_read() -> float:
        t0 = time.perf_counter()
        n = 0
        for (topic, p), end in sorted(ends.items()):
            for batch in _kafka.read_arrow(client, OffsetRange(topic, p, 0, end), fail_on_data_loss=True,
                                           poll_timeout_ms=30_000, include_headers=False):
                n += batch.num_rows
        assert n == rows, n
        return time.perf_counter() - t0

    result["client_read_rows_s"] = _rate(rows, _best(client_read, repeat))
    _kafka.close_all()

    # through Spark
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    t0 = time.perf_counter()
    spark = jobs.spark_session("odradek-spark-bench", master, {
        "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": str(partitions),
        "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
        **spark_connector.session_conf(kafka_connector)})
    spark.sparkContext.setLogLevel("ERROR")
    result["spark_start_s"] = round(time.perf_counter() - t0, 1)
    from bench import spark_nulls

    spark_nulls.register(spark)
    try:
        def read_df():
            return (spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap)
                    .option("subscribe", source).load())

        t0 = time.perf_counter()
        read_df().limit(1).collect()  # starts the Python workers
        result["spark_first_job_s"] = round(time.perf_counter() - t0, 1)

        def spark_read() -> float:
            t0 = time.perf_counter()
            read_df().write.format("noop").mode("overwrite").save()
            return time.perf_counter() - t0

        def null_read() -> float:
            t0 = time.perf_counter()
            (spark.read.format(spark_nulls.NAME).option("rows", str(rows)).option("partitions", str(partitions))
             .option("valueSize", str(value_size)).load().write.format("noop").mode("overwrite").save())
            return time.perf_counter() - t0

        read_s, null_read_s = _paired(spark_read, null_read, repeat)
        result["spark_read_rows_s"] = _rate(rows, read_s)
        result["null_source_rows_s"] = _rate(rows, null_read_s)
        result["read_vs_null"] = round(result["spark_read_rows_s"] / max(result["null_source_rows_s"], 1), 2)

        frame = (spark.range(rows, numPartitions=partitions)
                 .selectExpr("cast(id as string) as key", f"repeat('x', {value_size}) as value").cache())
        frame.count()

        def spark_write() -> float:
            t0 = time.perf_counter()
            (frame.write.format("odradek").mode("append").option("kafka.bootstrap.servers", bootstrap)
             .option("topic", sink).save())
            return time.perf_counter() - t0

        def null_write() -> float:
            t0 = time.perf_counter()
            frame.write.format(spark_nulls.NAME).mode("append").save()
            return time.perf_counter() - t0

        write_s, null_write_s = _paired(spark_write, null_write, repeat)
        result["spark_write_rows_s"] = _rate(rows, write_s)
        result["null_sink_rows_s"] = _rate(rows, null_write_s)
        result["write_vs_null"] = round(result["spark_write_rows_s"] / max(result["null_sink_rows_s"], 1), 2)
        frame.unpersist()

        if stream:
            def stream_copy(target: str, exactly_once: str) -> float:
                with tempfile.TemporaryDirectory() as checkpoint:
                    query = (spark.readStream.format("odradek").option("kafka.bootstrap.servers", bootstrap)
                             .option("subscribe", source).option("startingOffsets", "earliest").load()
                             .select("key", "value").writeStream.format("odradek")
                             .option("kafka.bootstrap.servers", bootstrap).option("topic", target)
                             .option("sink.exactlyOnce", exactly_once)
                             .option("checkpointLocation", checkpoint).trigger(availableNow=True))
                    t0 = time.perf_counter()
                    query.start().awaitTermination()
                    return time.perf_counter() - t0

            # in turns after a warm-up pass of each, as the batch figures: the first streaming query of a
            # session also starts Spark's streaming workers, which belongs to neither sink
            eo_s, alo_s = _paired(lambda: stream_copy(sink + "-s1", "true"),
                                  lambda: stream_copy(sink + "-s2", "false"), repeat)
            result["stream_copy_rows_s"] = _rate(rows, eo_s)
            result["stream_copy_at_least_once_rows_s"] = _rate(rows, alo_s)
        if kafka_connector:
            result.update(spark_connector.measure(spark, admin, bootstrap, source, rows=rows, value_size=value_size,
                                                  partitions=partitions, repeat=repeat, stream=stream))
    finally:
        spark.stop()
        _kafka.close_all()
        admin.close()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--value-size", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--bootstrap", default=None, help="use this broker instead of starting one")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--stream", action="store_true", help="also time a streaming copy, both sink modes")
    spark_connector.add_argument(parser)
    args = parser.parse_args(argv)

    server = None
    workdir = tempfile.TemporaryDirectory(prefix="odradek-spark-bench-")
    try:
        if args.bootstrap is None:
            from bench.procs import Server

            server = Server("odradek", Path(workdir.name), partitions=args.partitions).start()
            bootstrap = server.bootstrap
        else:
            bootstrap = args.bootstrap
        result = run(bootstrap, rows=args.rows, value_size=args.value_size, partitions=args.partitions,
                     master=args.master, repeat=args.repeat, stream=args.stream,
                     kafka_connector=args.kafka_connector)
        print(json.dumps(result, indent=2))
    finally:
        if server is not None:
            server.stop()
        workdir.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
