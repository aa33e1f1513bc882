"""The reference pipeline: keep raw events unmodified, transform them as a stream, archive them, replay.

    generator --> raw-events --+--> transform (Structured Streaming) --> transformed-events
                               |        \\--> hourly aggregates (stateful) --> event-aggregates (compacted)
                               +--> archive (Structured Streaming) --> Parquet, partitioned by date
    archive and/or raw-events --> replay (batch, corrected logic) --> transformed-events-v2

* **raw-events** holds what producers sent, byte for byte, malformed events included: nothing is lost
  to a parsing bug, and history can be re-processed with corrected logic.
* **transform** parses and enriches each event (section of the site, parsed amount, event time and
  date, the logic version, the raw partition and offset for lineage) and writes JSON to
  transformed-events through the exactly-once sink. A second query keeps hourly aggregates per event
  type in Spark's state store and upserts them into event-aggregates, a compacted topic keyed by
  window and type; Python sinks cannot take Spark's Update output mode, so each micro-batch's updated
  rows go out through `foreachBatch`. An upsert of the same value is harmless, so that topic needs no
  more than at-least-once.
* **archive** copies raw events to Parquet under `<workdir>/archive/raw-events/date=YYYY-MM-DD/`
  (the record timestamp's UTC date), with `failOnDataLoss=true`: if retention ever deletes records the
  archive has not copied yet, the job fails loudly instead of skipping them. Run it more often than
  the retention period of raw-events.
* **replay** reads the archive, the topic, or both (deduplicated on topic, partition and offset, so
  the overlap of an archive and a topic that still holds the same records counts once), applies a
  given logic version, and writes to a new topic with a batch write.

Every streaming job has its own checkpoint under `<workdir>/checkpoints/`; killed at any point and
started again, it resumes from its last committed micro-batch: Parquet through Spark's file-sink log,
transformed-events through the sink's transaction per task (sink.py), so neither gets a record twice.
Read transformed-events with `isolation.level=read_committed`: a killed attempt's records stay in the
log as an aborted transaction.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .events import GeneratedEvent, generate_events

log = logging.getLogger("odradek.pipeline")

AMOUNT_PATTERN = r"^\s*(-?[0-9]+(?:\.[0-9]+)?)"
EVENT_SCHEMA = "event_id string, ts long, user string, type string, page string, amount string, v int"


@dataclass
class PipelineConfig:
    bootstrap: str
    workdir: str  # a local directory or a URI Spark can write to (hdfs://..., s3a://...)
    raw_topic: str = "raw-events"
    transformed_topic: str = "transformed-events"
    aggregates_topic: str = "event-aggregates"
    replay_topic: str = "transformed-events-v2"
    partitions: int = 3
    raw_retention_ms: int | None = None
    max_offsets_per_trigger: int | None = None
    trigger_interval: str = "5 seconds"
    logic_version: int = 1
    kafka_options: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.workdir = str(self.workdir).rstrip("/") or "/"

    def _path(self, *parts: str) -> str:
        return "/".join([self.workdir, *parts])

    @property
    def is_local(self) -> bool:
        return "://" not in self.workdir or self.workdir.startswith("file:")

    @property
    def archive_path(self) -> str:
        return self._path("archive", self.raw_topic)

    def checkpoint(self, job: str) -> str:
        return self._path("checkpoints", job)

    def options(self, **extra: Any) -> dict[str, str]:
        out = {"kafka.bootstrap.servers": self.bootstrap}
        out.update({k if k.startswith("kafka.") else f"kafka.{k}": str(v) for k, v in self.kafka_options.items()})
        out.update({k: str(v) for k, v in extra.items() if v is not None})
        return out


# ---------------------------------------------------------------------------------------- Spark session


def spark_session(app_name: str = "odradek-pipeline", master: str | None = None, conf: dict[str, str] | None = None):
    """A session with the data source registered. Under spark-submit the master comes from there;
    otherwise `master`, else local[*]. Local runs use this interpreter for the Python workers."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    submitted = bool(os.environ.get("PYSPARK_GATEWAY_PORT"))  # launched by spark-submit: it sets the master
    if master is not None:
        builder = builder.master(master)
    elif not submitted:
        builder = builder.master("local[*]")
    if (master or "local").startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = builder.config("spark.sql.shuffle.partitions", "4").config("spark.ui.showConsoleProgress", "false")
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    from .datasource import register

    register(spark)
    return spark


# ---------------------------------------------------------------------------------------- topics, generator


def ensure_topics(cfg: PipelineConfig) -> None:
    from ._kafka import Metadata
    from .options import ClientOptions

    md = Metadata(ClientOptions.parse(cfg.options()))
    try:
        raw_configs = {"retention.ms": str(cfg.raw_retention_ms)} if cfg.raw_retention_ms else {}
        md.ensure_topic(cfg.raw_topic, partitions=cfg.partitions, configs=raw_configs)
        md.ensure_topic(cfg.transformed_topic, partitions=cfg.partitions)
        md.ensure_topic(cfg.aggregates_topic, partitions=1, configs={"cleanup.policy": "compact"})
    finally:
        md.close()


def produce_events(cfg: PipelineConfig, events: Iterable[GeneratedEvent], *, rate_per_s: float | None = None) -> int:
    """Send events to the raw topic (record timestamp = event time); returns how many."""
    from ._kafka import BulkProducer
    from .options import ClientOptions

    producer = BulkProducer(ClientOptions.parse(cfg.options()))
    sent = 0
    started = time.monotonic()
    try:
        chunk: list[tuple] = []
        for e in events:
            chunk.append((cfg.raw_topic, None, e.key, e.value, [], e.timestamp_ms))
            if len(chunk) >= (100 if rate_per_s else 5_000):
                sent += producer.send(chunk)
                chunk = []
                if rate_per_s:
                    ahead = sent / rate_per_s - (time.monotonic() - started)
                    if ahead > 0:
                        time.sleep(ahead)  # pacing a live feed, not a test wait
        if chunk:
            sent += producer.send(chunk)
        producer.flush()
    finally:
        producer.close()
    return sent


def generate(cfg: PipelineConfig, count: int, *, seed: int = 0, days: float = 3.0, end_ms: int | None = None,
             rate_per_s: float | None = None) -> list[GeneratedEvent]:
    """Create the topics and produce `count` events spread over the `days` before `end_ms` (now)."""
    ensure_topics(cfg)
    end_ms = int(time.time() * 1000) if end_ms is None else end_ms
    span = int(days * 86_400_000)
    events = list(generate_events(count, seed=seed, start_ms=end_ms - span, span_ms=span))
    produce_events(cfg, events, rate_per_s=rate_per_s)
    return events


# ---------------------------------------------------------------------------------------- transformations


def enrich(raw: Any, logic_version: int) -> Any:
    """Raw records (the source's schema) -> one row per valid event. Version 1 reads the amount as a
    number and so loses amounts like "19.99 EUR"; version 2 takes the leading number."""
    from pyspark.sql import functions as F

    e = F.from_json(F.col("value").cast("string"), EVENT_SCHEMA)
    df = raw.select(e.alias("e"), F.col("partition").alias("raw_partition"), F.col("offset").alias("raw_offset"))
    df = df.where(F.col("e.event_id").isNotNull() & F.col("e.ts").isNotNull())
    if logic_version < 2:
        amount = F.col("e.amount").try_cast("double")
    else:
        amount = F.regexp_extract(F.col("e.amount"), AMOUNT_PATTERN, 1).try_cast("double")
    page = F.col("e.page")
    section = (F.when(page == "/", "home").when(page == "/search", "search").when(page == "/cart", "cart")
               .when(page == "/checkout", "checkout").when(page.startswith("/p/"), "product").otherwise("other"))
    event_time = F.timestamp_millis(F.col("e.ts"))
    utc_date = F.date_format(F.to_utc_timestamp(event_time, F.current_timezone()), "yyyy-MM-dd")
    return df.select(
        F.col("e.event_id").alias("event_id"),
        F.col("e.user").alias("user"),
        F.col("e.type").alias("type"),
        page.alias("page"),
        section.alias("section"),
        amount.alias("amount"),
        event_time.alias("event_time"),
        utc_date.alias("event_date"),
        F.lit(logic_version).alias("logic_version"),
        "raw_partition",
        "raw_offset",
    )


def to_records(events: Any) -> Any:
    """Enriched rows -> (key, value) for the transformed topics."""
    from pyspark.sql import functions as F

    return events.select(F.col("user").alias("key"),
                         F.to_json(F.struct(*[F.col(c) for c in events.columns])).alias("value"))


def hourly_aggregates(events: Any) -> Any:
    from pyspark.sql import functions as F

    agg = (events.withWatermark("event_time", "2 hours")
           .groupBy(F.window("event_time", "1 hour"), "type")
           .agg(F.count(F.lit(1)).alias("events"), F.round(F.sum(F.coalesce("amount", F.lit(0.0))), 2).alias("amount")))
    start_ms = F.unix_millis(F.col("window.start"))
    return agg.select(
        F.concat_ws("|", start_ms.cast("string"), F.col("type")).alias("key"),
        F.to_json(F.struct(start_ms.alias("window_start_ms"), F.col("type"), F.col("events"), F.col("amount"))).alias("value"),
    )


def _raw_stream(spark: Any, cfg: PipelineConfig, *, fail_on_data_loss: bool = True) -> Any:
    reader = spark.readStream.format("odradek")
    options = cfg.options(subscribe=cfg.raw_topic, startingOffsets="earliest", includeHeaders="true",
                          failOnDataLoss=str(fail_on_data_loss).lower(), maxOffsetsPerTrigger=cfg.max_offsets_per_trigger)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _trigger(writer: Any, available_now: bool, interval: str) -> Any:
    return writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime=interval)


def start_transform(spark: Any, cfg: PipelineConfig, *, available_now: bool = False) -> list:
    """Start the two transform queries (enriched events, hourly aggregates); returns them."""
    events = enrich(_raw_stream(spark, cfg), cfg.logic_version)
    writer = to_records(events).writeStream.format("odradek").queryName("transform")
    for k, v in cfg.options(topic=cfg.transformed_topic, checkpointLocation=cfg.checkpoint("transform")).items():
        writer = writer.option(k, v)
    transform = _trigger(writer, available_now, cfg.trigger_interval).start()

    sink_options = cfg.options(topic=cfg.aggregates_topic)

    def upsert(batch: Any, batch_id: int) -> None:
        w = batch.write.format("odradek").mode("append")
        for k, v in sink_options.items():
            w = w.option(k, v)
        w.save()

    writer = (hourly_aggregates(events).writeStream.outputMode("update").foreachBatch(upsert)
              .queryName("aggregates").option("checkpointLocation", cfg.checkpoint("aggregates")))
    aggregates = _trigger(writer, available_now, cfg.trigger_interval).start()
    return [transform, aggregates]


def start_archive(spark: Any, cfg: PipelineConfig, *, available_now: bool = False) -> Any:
    from pyspark.sql import functions as F

    raw = _raw_stream(spark, cfg, fail_on_data_loss=True)
    # the UTC date, whatever the session's time zone
    out = raw.withColumn("date", F.date_format(F.to_utc_timestamp(F.col("timestamp"), F.current_timezone()),
                                               "yyyy-MM-dd"))
    writer = (out.writeStream.format("parquet").partitionBy("date").queryName("archive")
              .option("path", cfg.archive_path).option("checkpointLocation", cfg.checkpoint("archive")))
    return _trigger(writer, available_now, cfg.trigger_interval).start()


def read_archive(spark: Any, cfg: PipelineConfig, *, since_date: str | None = None, until_date: str | None = None) -> Any:
    from pyspark.sql import functions as F

    df = spark.read.parquet(cfg.archive_path)
    if since_date:
        df = df.where(F.col("date") >= since_date)
    if until_date:
        df = df.where(F.col("date") <= until_date)
    return df.drop("date")


def read_topic(spark: Any, cfg: PipelineConfig, *, starting_timestamp_ms: int | None = None) -> Any:
    reader = spark.read.format("odradek")
    extra: dict[str, Any] = {"subscribe": cfg.raw_topic, "includeHeaders": "true", "failOnDataLoss": "false"}
    if starting_timestamp_ms is not None:
        extra.update(startingTimestamp=starting_timestamp_ms, startingOffsetsByTimestampStrategy="latest")
    for k, v in cfg.options(**extra).items():
        reader = reader.option(k, v)
    return reader.load()


def replay(spark: Any, cfg: PipelineConfig, *, source: str = "both", logic_version: int = 2,
           target_topic: str | None = None, since_date: str | None = None, until_date: str | None = None,
           starting_timestamp_ms: int | None = None) -> int:
    """Re-run history through `logic_version` into `target_topic`; returns the number of events written."""
    if source not in ("archive", "topic", "both"):
        raise ValueError("source must be archive, topic or both")
    frames = []
    if source in ("archive", "both"):
        if not cfg.is_local or Path(cfg.archive_path.removeprefix("file:")).exists():
            frames.append(read_archive(spark, cfg, since_date=since_date, until_date=until_date))
        elif source == "archive":
            raise FileNotFoundError(f"no archive at {cfg.archive_path}: run the archive job first")
    if source in ("topic", "both"):
        frames.append(read_topic(spark, cfg, starting_timestamp_ms=starting_timestamp_ms))
    raw = frames[0]
    for other in frames[1:]:
        raw = raw.unionByName(other)
    if len(frames) > 1:
        raw = raw.dropDuplicates(["topic", "partition", "offset"])
    events = enrich(raw, logic_version).cache()
    try:
        count = events.count()
        writer = to_records(events).write.format("odradek").mode("append")
        for k, v in cfg.options(topic=target_topic or cfg.replay_topic).items():
            writer = writer.option(k, v)
        writer.save()
    finally:
        events.unpersist()
    return count


def wait(queries: Iterable[Any], timeout_s: float | None = None) -> None:
    """Wait for AvailableNow queries to finish; raise the first failure."""
    for q in queries:
        q.awaitTermination(timeout_s) if timeout_s else q.awaitTermination()
        if q.exception() is not None:
            raise RuntimeError(f"query {q.name} failed: {q.exception()}")


def run_all(spark: Any, cfg: PipelineConfig, *, count: int, seed: int = 0, days: float = 3.0,
            end_ms: int | None = None) -> dict[str, Any]:
    """generate -> transform and archive (AvailableNow) -> replay from archive and topic."""
    summary: dict[str, Any] = {}
    t0 = time.monotonic()
    events = generate(cfg, count, seed=seed, days=days, end_ms=end_ms)
    summary["generated"] = len(events)
    summary["generate_s"] = round(time.monotonic() - t0, 1)
    t0 = time.monotonic()
    wait(start_transform(spark, cfg, available_now=True))
    summary["transform_s"] = round(time.monotonic() - t0, 1)
    t0 = time.monotonic()
    wait([start_archive(spark, cfg, available_now=True)])
    summary["archive_s"] = round(time.monotonic() - t0, 1)
    t0 = time.monotonic()
    summary["replayed"] = replay(spark, cfg, source="both", logic_version=2)
    summary["replay_s"] = round(time.monotonic() - t0, 1)
    return summary
