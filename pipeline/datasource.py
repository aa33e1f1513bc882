"""The `odradek` PySpark data source (Spark 4.x Python Data Source API), mirroring Spark's Kafka connector.

    # nothing to register once installed (pyspark_odradek.py); else odradek.pipeline.register(spark)
    df = (spark.readStream.format("odradek")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "raw-events").load())

Which process runs what (the reference notes, section 2.2, give the evidence):

* `OdradekDataSource.reader()` / `streamReader()` / `writer()` run in planner workers on the driver; the
  objects they return are pickled to the executors. They carry only parsed options (plain dataclasses).
* Batch `partitions()` runs once per query on the driver and resolves the offsets; the streaming
  reader's `initialOffset`, `latestOffset`, `partitions` and `commit` run in one long-lived process per
  query run, which keeps a metadata client (dropped when pickled).
* `read(partition)` runs on executors from a fresh copy of the planning-time reader; everything it needs
  is in its `RangePartition` (topic, partition, [start, end), client options). It yields one Arrow record
  batch per fetch response (`_kafka.read_arrow`), decoded from the record batches' bytes straight into
  columns (`columnar.py`).
* `write()` runs on executors; `commit()` on the driver, in a fresh writer for each streaming batch.

Offsets, limits and new partitions in streaming: see `StreamReader.latestOffset`. Filter pushdown of
batch reads (option `filterPushdown`): see `FilteringBatchReader`.

What a planning worker imports
------------------------------
Spark runs each planning step in a Python worker of its own kind, started once per application and kept
(`pyspark.sql.worker.lookup_data_sources`, `create_data_source`, `plan_data_source_read`,
`write_into_data_source` ...), and every one of them imports this module to unpickle the data source.
The lookup and create workers only need the class and `schema()`, so this module imports nothing of the
client, of pyarrow or of the other pipeline modules at its top: each method imports what it uses. The
planner of a read (`partitions()`) then loads the options and the admin client, and only executors load
the fetcher, the Arrow decoder and the producers. `python -X importtime -c 'import pyspark_odradek'`
measures it (0.70 s before, the pipeline README gives the figures).

Spark's Python workers and the garbage collector
------------------------------------------------
A reused worker (`spark.python.worker.reuse`, the default) is a child forked by `pyspark.daemon`, which
runs `gc.collect()` after every task: a full collection that walks every object the process tracks. With
pyspark, pyarrow and this package loaded that is ~80k objects and 40-50 ms of CPU per task, as much as
decoding 150k records. So an executor, once it has imported what it reads or writes with, collects once
and moves the surviving objects (modules, classes, caches: nothing a task frees) to the permanent
generation with `gc.freeze()`, as CPython's documentation advises for pre-forked servers; the daemon's
collections then walk only what later tasks allocate. `_settle_worker` does it once per process.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta, timezone
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from .errors import OptionError, parse_bool
from .schema import read_schema_ddl

if TYPE_CHECKING:  # imported where used: see "What a planning worker imports" above
    from pyspark.sql.types import StructType

    from odradek.client.cluster import TopicPartition

    from . import _kafka
    from .offsets import Bounds, OffsetRange
    from .options import ClientOptions, OffsetSpec, SinkOptions, SourceOptions
    from .sink import KafkaTaskTransaction, TaskOutcome

log = logging.getLogger("odradek.pipeline")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

FORMAT = "odradek"

__all__ = ["FORMAT", "OdradekDataSource", "register"]


def register(spark: Any) -> None:
    """Make `format("odradek")` available in this Spark session.

    Not needed once odradek is installed (not editable) into the Python that Spark's workers run: Spark 4
    then finds the top-level module `pyspark_odradek` by itself (its docstring says how). When Spark
    already knows the format, this does nothing, so that Spark does not log that a statically registered
    source was replaced; Spark Connect sessions, which cannot be asked, always register.
    """
    try:
        if spark._jsparkSession.sessionState().dataSourceManager().dataSourceExists(FORMAT):
            return
    except Exception:  # Spark Connect (no JVM handle) or another Spark: registering is always right
        pass
    spark.dataSource.register(OdradekDataSource)


class OdradekDataSource(DataSource):
    """Read and write Odradek (Kafka) topics; see the module docstring and pipeline/README.md."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _include_headers(self) -> bool:
        return parse_bool(self.options.get("includeheaders", "false"), "includeHeaders")

    def schema(self) -> str:
        return read_schema_ddl(self._include_headers())

    def _check_read_schema(self, schema: StructType) -> None:
        expected = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
        if self._include_headers():
            expected.append("headers")
        if [f.name for f in schema.fields] != expected:
            raise OptionError(f"the {FORMAT} source has a fixed schema ({read_schema_ddl(self._include_headers())}) "
                              "and cannot be given another one")

    def reader(self, schema: StructType) -> "BatchReader":
        from .options import SourceOptions

        self._check_read_schema(schema)
        options = SourceOptions.parse(self.options, streaming=False)
        if parse_bool(self.options.get("filterpushdown", "false"), "filterPushdown"):
            return FilteringBatchReader(options)
        return BatchReader(options)

    def streamReader(self, schema: StructType) -> "StreamReader":
        from .options import SourceOptions

        self._check_read_schema(schema)
        return StreamReader(SourceOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> "BatchWriter":
        if overwrite:
            raise OptionError(f"the {FORMAT} sink only appends: use mode('append') (Overwrite and Ignore are "
                              "not supported, as with Spark's Kafka sink)")
        from .options import SinkOptions

        options = SinkOptions.parse(self.options, streaming=False)
        _check_write(schema, options)
        return BatchWriter(options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> "StreamWriter":
        from .options import SinkOptions

        options = SinkOptions.parse(self.options, streaming=True)
        _check_write(schema, options)
        return StreamWriter(options)


def _check_write(schema: StructType, options: SinkOptions) -> None:
    from .arrow import check_write_schema

    try:
        check_write_schema({f.name: f.dataType.simpleString() for f in schema.fields}, topic_option=options.topic)
    except ValueError as e:
        raise OptionError(str(e)) from None


_settled = False


def _settle_worker() -> None:
    """Once per worker process (executors, and the reused read planner), after its reading and writing
    modules are imported: collect, then freeze what survives, so that the daemon's `gc.collect()` after
    each task skips it (module docstring)."""
    global _settled
    if _settled:
        return
    import gc

    from . import _kafka, sink  # noqa: F401  everything a task reads or writes with, loaded before the freeze

    gc.collect()
    gc.freeze()
    _settled = True


# ---------------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class ReadSettings:
    client: ClientOptions
    include_headers: bool
    fail_on_data_loss: bool
    poll_timeout_ms: int

    @classmethod
    def of(cls, options: SourceOptions) -> "ReadSettings":
        return cls(options.client, options.include_headers, options.fail_on_data_loss, options.poll_timeout_ms)


class RangePartition(InputPartition):
    """One Spark task: the records [start, end) of one topic-partition."""

    def __init__(self, rng: OffsetRange, settings: ReadSettings):
        super().__init__((rng.topic, rng.partition, rng.start, rng.end))
        self.range = rng
        self.settings = settings

    def __repr__(self) -> str:
        r = self.range
        return f"RangePartition({r.topic}-{r.partition} [{r.start}, {r.end}))"


def read_partition(partition: InputPartition) -> Iterator[Any]:
    if not isinstance(partition, RangePartition):  # Spark's InputPartition(None) when there are no ranges
        return
    from . import _kafka

    _settle_worker()
    rng, s = partition.range, partition.settings
    yield from _kafka.read_arrow(s.client, rng, fail_on_data_loss=s.fail_on_data_loss,
                                 poll_timeout_ms=s.poll_timeout_ms, include_headers=s.include_headers)


def _resolve(spec: OffsetSpec, tps: list[TopicPartition], md: _kafka.Metadata, *, what: str,
             strategy: str = "error") -> dict[TopicPartition, int]:
    """Offsets for `tps` from an OffsetSpec (earliest/latest/JSON/timestamps)."""
    from .offsets import EARLIEST, LATEST

    if not tps:
        return {}
    if spec.kind == "earliest":
        return md.earliest(tps)
    if spec.kind == "latest":
        return md.latest(tps)
    if spec.kind in ("offsets", "timestamps"):
        given = spec.mapping
        missing = [tp for tp in tps if tp not in given]
        if missing:
            raise OptionError(
                f"{what} must give every topic-partition read (use -2 for earliest, -1 for latest); missing: "
                + ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing))
        wanted = {tp: given[tp] for tp in tps}
    else:
        wanted = {tp: spec.timestamp for tp in tps}
    found = md.list_offsets(wanted)
    if spec.kind == "offsets":
        return {tp: found[tp] if wanted[tp] in (EARLIEST, LATEST) else wanted[tp] for tp in tps}
    # timestamps: -1 means no record at or after it
    unmatched = [tp for tp in tps if found[tp] < 0]
    if unmatched:
        if strategy == "error" and what.startswith("starting"):
            raise OptionError(f"{what}: no record at or after the timestamp in "
                              + ", ".join(f"{tp.topic}-{tp.partition}" for tp in unmatched)
                              + " (set startingOffsetsByTimestampStrategy=latest to start at the end instead)")
        found.update(md.latest(unmatched))
    return {tp: found[tp] for tp in tps}


class BatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions):
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        from . import _kafka
        from .offsets import plan_ranges

        _settle_worker()  # the read planner is a reused daemon worker too
        o = self.options
        md = _kafka.Metadata(o.client)
        try:
            tps = md.partitions(o.subscription)
            start = _resolve(o.starting, tps, md, what="startingOffsets", strategy=o.timestamp_strategy)
            assert o.ending is not None
            end = _resolve(o.ending, tps, md, what="endingOffsets")
            for tp in tps:
                if start[tp] > end[tp]:
                    raise OptionError(f"{tp.topic}-{tp.partition}: the starting offset {start[tp]} is after "
                                      f"the ending offset {end[tp]}")
            start, end = self._narrow(start, end, md)
        finally:
            md.close()
        settings = ReadSettings.of(o)
        ranges = plan_ranges(start, end, min_partitions=o.min_partitions, max_records=o.max_records_per_partition)
        return [RangePartition(r, settings) for r in ranges]

    def _narrow(self, start: dict[TopicPartition, int], end: dict[TopicPartition, int], md: _kafka.Metadata
                ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        return start, end

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(partition)


class FilteringBatchReader(BatchReader):
    """A batch reader that takes Spark's filters on `topic`, `partition` and `offset` (option
    `filterPushdown=true`, with `spark.sql.python.filterPushdown.enabled=true` in the session).

    Taken, and so not evaluated again by Spark, because each cuts the planned ranges exactly:
    `topic` / `partition` `=` and `IN`, and `offset` `=`, `>`, `>=`, `<`, `<=`. The others (on key,
    value, `timestamp <`, `NOT`, `offset IN` ...) go back to Spark. A topic or partition left out is never
    fetched, and an offset bound moves where a fetch starts and stops, so the bytes fetched follow the
    filter (a record batch that straddles a bound is still fetched whole, as Kafka serves batches).

    Why an option: Spark refuses a reader with `pushFilters` when the session's
    `spark.sql.python.filterPushdown.enabled` is false (its default), and a data source cannot read the
    session's settings, so the reader that pushes is chosen by the option.

    `timestamp >= t` and `timestamp > t` are pushed in part: ListOffsets by timestamp gives each
    partition the first offset whose timestamp is that recent, and the range starts there; the filter
    still goes back to Spark, since later records may be older (CreateTime is the producer's clock).
    `timestamp < t` is not pushed: with CreateTime no offset bounds it exactly.
    """

    def __init__(self, options: SourceOptions):
        from .offsets import Bounds

        super().__init__(options)
        self.bounds = Bounds()
        self.since_ms: int | None = None  # timestamp >= / > : the lowest record timestamp kept, in ms

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        for f in filters:
            if self._push_since(f):
                yield f  # cuts the start of each range, and Spark checks it again (see the class docstring)
                continue
            pushed = self._push(f)
            if pushed is None:
                yield f
            else:
                self.bounds = pushed

    def _push_since(self, f: Filter) -> bool:
        """`timestamp >= t` / `timestamp > t` with t a zone-aware datetime (Spark's TimestampType literal):
        the record timestamps are whole ms, so `>= t` keeps ms >= ceil(t), `> t` keeps ms >= floor(t) + 1."""
        if getattr(f, "attribute", None) != ("timestamp",) or not isinstance(f, (GreaterThan, GreaterThanOrEqual)):
            return False
        value = f.value
        if not isinstance(value, datetime) or value.tzinfo is None:
            return False
        micros = (value - _EPOCH) // timedelta(microseconds=1)
        ms = -(-micros // 1000) if isinstance(f, GreaterThanOrEqual) else micros // 1000 + 1
        self.since_ms = ms if self.since_ms is None else max(self.since_ms, ms)
        return True

    def _push(self, f: Filter) -> Bounds | None:
        """The bounds with `f` ANDed in, or None when `f` is not pushed."""
        path = getattr(f, "attribute", ())  # Not has a child instead
        column = path[0] if len(path) == 1 else None
        b = self.bounds
        if column in ("topic", "partition"):
            kind = str if column == "topic" else int
            if isinstance(f, EqualTo) and isinstance(f.value, kind):
                return b.with_values(column, [f.value])
            if isinstance(f, In) and all(isinstance(v, kind) for v in f.value):
                return b.with_values(column, f.value)
            return None
        if column != "offset" or not isinstance(getattr(f, "value", None), int) or isinstance(f.value, bool):
            return None
        v = f.value
        if isinstance(f, EqualTo):
            return b.with_offsets(v, v + 1)
        if isinstance(f, GreaterThan):
            return b.with_offsets(low=v + 1)
        if isinstance(f, GreaterThanOrEqual):
            return b.with_offsets(low=v)
        if isinstance(f, LessThan):
            return b.with_offsets(high=v)
        if isinstance(f, LessThanOrEqual):
            return b.with_offsets(high=v + 1)
        return None

    def _narrow(self, start: dict[TopicPartition, int], end: dict[TopicPartition, int], md: _kafka.Metadata
                ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        start, end = self.bounds.narrow(start, end)
        if self.since_ms is not None:
            # ListOffsets by timestamp: the first offset whose timestamp is at or after since_ms, so every
            # record before it is older; -1 where no record is that recent (nothing to read there).
            found = md.list_offsets({tp: self.since_ms for tp, e in end.items() if e > start[tp]})
            for tp, offset in found.items():
                start[tp] = end[tp] if offset < 0 else min(max(start[tp], offset), end[tp])
        return start, end


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader.

    Offsets are `{"topic": {"partition": next offset}}` (offsets.offsets_to_json). A partition that
    appears while the query runs (new topic matching the subscription, or partitions added) first
    enters the offsets at its earliest offset, without data; it is read from the following batch on.
    So every range Spark replays from its checkpoint is fully determined by the two offsets it stored.
    """

    def __init__(self, options: SourceOptions):
        self.options = options
        self._md: _kafka.Metadata | None = None
        self._initial: dict | None = None
        self._target: dict[TopicPartition, int] | None = None  # Trigger.AvailableNow
        self._last_trigger = time.monotonic()
        self._latest: dict[TopicPartition, int] | None = None

    def __getstate__(self) -> dict:
        return {"options": self.options}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["options"])

    @property
    def md(self) -> _kafka.Metadata:
        if self._md is None:
            from . import _kafka

            self._md = _kafka.Metadata(self.options.client)
        return self._md

    def initialOffset(self) -> dict:
        # Spark asks twice at the first start and nothing persists the answer in between, so it is
        # memoised: with startingOffsets=latest two lookups could disagree.
        if self._initial is None:
            from .offsets import offsets_to_json

            o = self.options
            tps = self.md.partitions(o.subscription)
            start = _resolve(o.starting, tps, self.md, what="startingOffsets", strategy=o.timestamp_strategy)
            self._initial = offsets_to_json(start)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.md.partitions(self.options.subscription)
        self._target = self.md.latest(tps)

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        from . import _kafka
        from .offsets import count_between, offsets_from_json, offsets_to_json, rate_limit

        o = self.options
        begin = offsets_from_json(start if start is not None else self.initialOffset())
        tps = self.md.partitions(o.subscription)
        latest = self.md.latest(tps)
        self._latest = dict(latest)

        gone = [tp for tp in begin if tp not in latest]
        if gone:
            _kafka.report_data_loss("partitions no longer exist (deleted topic?): "
                                    + ", ".join(f"{tp.topic}-{tp.partition}" for tp in gone), o.fail_on_data_loss)
        new = [tp for tp in latest if tp not in begin]
        new_start = self.md.earliest(new) if new else {}

        available: dict[TopicPartition, int] = {}
        for tp in begin:
            if tp not in latest:
                continue
            end = latest[tp]
            if self._target is not None:
                end = min(end, self._target.get(tp, begin[tp]))
            if end < begin[tp]:
                _kafka.report_data_loss(f"{tp.topic}-{tp.partition}: the partition now ends at {end}, before the "
                                        f"offset {begin[tp]} the query had reached (truncated or recreated)",
                                        o.fail_on_data_loss)
            available[tp] = end
        current = {tp: begin[tp] for tp in available}

        now = time.monotonic()
        pending = count_between(current, available)
        if (o.min_offsets_per_trigger and self._target is None and not isinstance(limit, ReadAllAvailable)
                and pending < o.min_offsets_per_trigger
                and (now - self._last_trigger) * 1000 < o.max_trigger_delay_ms):
            available = current  # wait for more data, or for maxTriggerDelay
        elif isinstance(limit, ReadMaxRows):
            available = rate_limit(current, available, limit.max_rows)

        end_offsets = dict(available)
        end_offsets.update(new_start)
        result = offsets_to_json(end_offsets)
        if result != offsets_to_json({tp: begin[tp] for tp in begin if tp in latest}) or new:
            self._last_trigger = now
        return result

    def reportLatestOffset(self) -> dict | None:
        from .offsets import offsets_to_json

        return None if self._latest is None else offsets_to_json(self._latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        from .offsets import offsets_from_json, plan_ranges

        o = self.options
        ranges = plan_ranges(offsets_from_json(start), offsets_from_json(end), min_partitions=o.min_partitions,
                             max_records=o.max_records_per_partition)
        settings = ReadSettings.of(o)
        return [RangePartition(r, settings) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(partition)

    def commit(self, end: dict) -> None:
        pass  # Spark's checkpoint holds the progress; no consumer-group offsets are committed

    def stop(self) -> None:
        if self._md is not None:
            self._md.close()
            self._md = None


# ---------------------------------------------------------------------------------------- writing


@dataclass
class SentMessage(WriterCommitMessage):
    """A task of an at-least-once write: how many records it sent."""

    published: int = 0


@dataclass
class TaskMessage(WriterCommitMessage):
    """A task of an exactly-once streaming write."""

    outcome: TaskOutcome = field(default_factory=lambda: _no_outcome())


def _no_outcome() -> TaskOutcome:
    from .sink import TaskOutcome

    return TaskOutcome("", -1, -1)


def _send_all(options: SinkOptions, batches: Iterator[Any]) -> SentMessage:
    from . import _kafka

    _settle_worker()
    producer = _kafka.producer_for(options.client)
    try:
        count = producer.send_arrow(batches, options.topic)
        producer.flush()
    except BaseException:
        _kafka.evict("producer", options.client)
        raise
    return SentMessage(count)


class BatchWriter(DataSourceArrowWriter):
    """At-least-once, as Spark's Kafka sink: each task sends its rows and waits for the acks; a retried
    task sends its rows again."""

    def __init__(self, options: SinkOptions):
        self.options = options

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return _send_all(self.options, iterator)

    def commit(self, messages: list) -> None:
        pass

    def abort(self, messages: list) -> None:
        log.warning("batch write to Odradek aborted; records of finished tasks stay published")


class StreamWriter(DataSourceStreamArrowWriter):
    """Exactly-once per (query id, batch id) unless `sink.exactlyOnce=false`: each task writes through its
    own transaction and commits it (sink.py explains why the task, and not the driver, commits)."""

    def __init__(self, options: SinkOptions):
        self.options = options

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        o = self.options
        if not o.exactly_once:
            return _send_all(o, iterator)
        from pyspark import TaskContext

        from .sink import write_chunks

        _settle_worker()
        ctx = TaskContext.get()
        query_id = ctx.getLocalProperty("sql.streaming.queryId")
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId"))
        task = ctx.partitionId()
        txn = self._transaction(query_id, task)
        return TaskMessage(write_chunks(txn, query_id, batch_id, task, iterator))

    def _transaction(self, query_id: str, task: int) -> KafkaTaskTransaction:
        from .sink import KafkaTaskTransaction, progress_group, transactional_id

        o = self.options
        return KafkaTaskTransaction(o.client, transactional_id(query_id, task), progress_group(query_id, task),
                                    o.commit_topic, o.topic)

    def commit(self, messages: list, batchId: int) -> None:
        # The tasks have committed their transactions: there is nothing left to make visible, so a repeated
        # commit of the same batch (Spark's replay) is harmless by construction.
        outcomes = [m.outcome for m in messages if isinstance(m, TaskMessage)]
        skipped = sum(o.skipped for o in outcomes)
        if skipped:
            log.info("batch %s of query %s: %s rows were committed by an earlier attempt and were skipped",
                     batchId, outcomes[0].query_id, skipped)

    def abort(self, messages: list, batchId: int) -> None:
        # Tasks that committed stay visible; a replay of the batch skips them (sink.py). A task that did not
        # commit left at most an open transaction, which its next attempt fences and aborts.
        log.warning("streaming write of batch %s aborted", batchId)
