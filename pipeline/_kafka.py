"""Blocking Kafka I/O for the data source, on the bundled client's blocking facade (client/blocking.py).

Theory of operation
-------------------
Nothing here is created at planning time or pickled: the data source, its readers and writers carry
only `options.ClientOptions` (plain data), and each process builds its clients on first use.

* `Metadata` serves the driver: topics and partitions of a subscription, and ListOffsets (earliest,
  latest, by timestamp) through a `BlockingAdmin`. The streaming reader keeps one for the whole query
  run (it lives in one long-lived Python process); `__getstate__` drops it.
* Executors read with `read_arrow()`, on a `RawFetcher` cached per process and per settings: Fetch
  requests whose record batches go straight to Arrow columns (columnar.py), with no record objects.
  Spark reuses its Python workers across tasks, so the connections and the loop thread are paid once
  per worker, not per task. A cache entry remembers the pid that built it, so a forked child never uses
  its parent's loop thread (which does not exist in the child).
* Sinks write with `BulkProducer`: the asyncio `Producer` on the facade's `LoopThread`. Spark's Arrow
  batches are encoded column-wise into record batches (`send_arrow`, one `Producer.send_encoded` per
  partition and batch-size piece); rows that need the record-by-record path (headers, several topics)
  are handed over a chunk at a time, since `BlockingProducer.send()` costs one thread hop per record
  (about 150 us), which would cap a sink near 7k rows/s.
* The exactly-once sink's tasks each need a producer with their own transactional id (sink.py).
  `TxnProducers` keeps the most recently used few per process on one shared loop thread. Spark hands a
  worker tasks of different partition ids, so a small cache saves most connection and coordinator
  lookups without holding connections for every task id ever seen.

`read_arrow()` yields the records of [start, end) of one partition. Records may be missing from a range
for three reasons: compaction, control batches (transaction markers, and aborted transactions with
read_committed), and deletion by retention before the task ran. Only the last is data loss: when the
offsets jump, the reader compares them with the log start offset the broker reports and reports a loss
when it has moved past the offsets expected (raising `DataLossError` when failOnDataLoss is on, as
Spark's Kafka source does, and logging otherwise).
"""

from __future__ import annotations

import collections
import logging
import os
import random
import threading
import time
from typing import Any, Callable, Iterable, Iterator

import pyarrow as pa

from odradek.client.blocking import BlockingAdmin, LoopThread
from odradek.client.cluster import KafkaClient, TopicPartition
from odradek.client.errors import ErrorCode, KafkaError
from odradek.client.producer import Producer
from odradek.protocol.errors import ProtocolError
from odradek.protocol.messages import REQUESTS
from odradek.protocol.records import ABORT, BatchHeader, iter_batches, iter_records, parse_control_record

from .columnar import MAX_UNCOMPRESSED, decode_batches, encode_for_partitions

from .offsets import OffsetRange
from .options import ClientOptions, Subscription

log = logging.getLogger("odradek.pipeline")

__all__ = ["BulkProducer", "DataLossError", "Metadata", "TxnProducers", "admin_for", "close_all",
           "ensure_commit_topic", "evict", "producer_for", "read_arrow", "report_data_loss", "txn_producers_for"]


class DataLossError(RuntimeError):
    """Records the query should read are gone (retention, deleted topic or truncation)."""


# ---------------------------------------------------------------------------------------- per-process cache

_cache_lock = threading.Lock()
_cache: dict[tuple, Any] = {}
_cache_pid = os.getpid()


def _cached(kind: str, client: ClientOptions, factory: Callable[[], Any]) -> Any:
    global _cache_pid
    with _cache_lock:
        if _cache_pid != os.getpid():  # forked: the parent's loop threads do not exist here
            _cache.clear()
            _cache_pid = os.getpid()
        key = (kind, client.key)
        found = _cache.get(key)
        if found is None:
            found = _cache[key] = factory()
        return found


def evict(kind: str, client: ClientOptions) -> None:
    """Close and forget a cached client (after a failure that may have left it in a bad state)."""
    with _cache_lock:
        found = _cache.pop((kind, client.key), None)
    if found is not None:
        try:
            found.close()
        except Exception:  # noqa: BLE001 - a broken client is being thrown away
            pass


def close_all() -> None:
    """Close every cached client of this process (tests and benchmarks call it between phases)."""
    with _cache_lock:
        items = list(_cache.values()) if _cache_pid == os.getpid() else []
        _cache.clear()
    for item in items:
        try:
            item.close()
        except Exception:  # noqa: BLE001
            pass


def admin_for(client: ClientOptions) -> BlockingAdmin:
    return _cached("admin", client, lambda: BlockingAdmin(client.client_config()))


def producer_for(client: ClientOptions) -> "BulkProducer":
    return _cached("producer", client, lambda: BulkProducer(client))


# ---------------------------------------------------------------------------------------- driver metadata


class Metadata:
    """Topic, partition and offset lookups for the driver side of a source or sink."""

    def __init__(self, client: ClientOptions):
        self.client = client
        self._admin: BlockingAdmin | None = None

    def __getstate__(self) -> dict:
        return {"client": self.client}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["client"])

    @property
    def admin(self) -> BlockingAdmin:
        if self._admin is None:
            self._admin = BlockingAdmin(self.client.client_config())
        return self._admin

    def close(self) -> None:
        if self._admin is not None:
            admin, self._admin = self._admin, None
            admin.close()

    def topic_partitions(self, topics: Iterable[str]) -> list[TopicPartition]:
        topics = sorted(set(topics))
        if not topics:
            return []
        found = []
        for description in self.admin.describe_topics(topics):
            found.extend(TopicPartition(description.name, p.partition) for p in description.partitions)
        return sorted(found)

    def partitions(self, subscription: Subscription) -> list[TopicPartition]:
        """The partitions a subscription reads now (topics that do not exist yet have none)."""
        if subscription.kind == "assign":
            return list(subscription.partitions)
        existing = self.admin.list_topics()
        if subscription.kind == "subscribe":
            # A listing leaves out what the principal may not describe. A topic named in `subscribe` is
            # asked for by name, so that without its ACL the query fails with TOPIC_AUTHORIZATION_FAILED
            # (as Spark's Kafka source does) instead of reading nothing; a pattern skips such topics, as
            # Kafka's pattern subscriptions do.
            for topic in subscription.topics:
                if topic not in existing:
                    topic_partitions_or_none(self.admin, topic)
        return self.topic_partitions(t for t in existing if subscription.matches(t))

    def list_offsets(self, timestamps: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """ListOffsets: EARLIEST (-2), LATEST (-1) or a timestamp per partition; -1 where no record has a
        timestamp at or after the one asked for."""
        if not timestamps:
            return {}
        by_kind: dict[int, list[TopicPartition]] = {}
        for tp, ts in timestamps.items():
            by_kind.setdefault(ts if ts < 0 else 0, []).append(tp)
        out: dict[TopicPartition, int] = {}
        for kind, tps in by_kind.items():
            if kind == -2:
                out.update(self.admin.beginning_offsets(tps))
            elif kind == -1:
                out.update(self.admin.end_offsets(tps))
            else:
                out.update(self.admin.offsets_for_times({tp: timestamps[tp] for tp in tps}))
        return {TopicPartition(*tp): o for tp, o in out.items()}

    def earliest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self.list_offsets({tp: -2 for tp in tps})

    def latest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self.list_offsets({tp: -1 for tp in tps})

    def ensure_topic(self, name: str, *, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
        ensure_topic(self.admin, name, partitions=partitions, configs=configs)


def ensure_topic(admin: BlockingAdmin, name: str, *, partitions: int = 1,
                 configs: dict[str, str] | None = None) -> None:
    try:
        admin.create_topic(name, partitions, -1, configs or {})
    except KafkaError as e:
        if e.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise


def topic_partitions_or_none(admin: BlockingAdmin, topic: str) -> list[int]:
    """Partition numbers of `topic`, or [] when it does not exist (yet)."""
    try:
        (description,) = admin.describe_topics([topic])
    except KafkaError as e:
        if e.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return []
        raise
    return sorted(p.partition for p in description.partitions)


# ---------------------------------------------------------------------------------------- executor reads, Arrow

_FETCH = 1


class RawFetcher:
    """Fetch requests for one partition at a time, answered as raw record batches (no records decoded).

    The consumer decodes every record into an object, which is the cost a Spark read cannot afford
    (columnar.py). A task reads one partition from one offset to another and needs no group, no
    rebalancing and no per-record position: only Fetch to the partition's leader, with the error handling
    a consumer has for it (metadata refresh on NOT_LEADER and the like, backoff, OFFSET_OUT_OF_RANGE
    answered to the caller). It keeps one request ahead: while the caller turns a response into columns,
    the next fetch, from the offset after the response's last batch, is already on the wire.

    read_committed (`kafka.isolation.level`) is honoured as the consumer honours it: the broker stops at
    the last stable offset, and batches of aborted transactions (the response's aborted list, closed by
    their ABORT markers) are left out whole, at batch level.
    """

    def __init__(self, client: ClientOptions):
        self.config = client.consumer_config()
        self.read_committed = self.config.isolation_level == "read_committed"
        self._thread = LoopThread("odradek-pipeline-fetch")
        try:
            self._client: KafkaClient = self._thread.run(KafkaClient(self.config).start())
        except BaseException:
            self._thread.stop()
            raise

    def submit(self, tp: TopicPartition, offset: int, max_wait_ms: int) -> Any:
        return self._thread.submit(self._fetch(tp, offset, max_wait_ms))

    async def _fetch(self, tp: TopicPartition, offset: int, max_wait_ms: int) -> Any:
        client = self._client

        async def attempt() -> Any:
            cls = REQUESTS[_FETCH]
            leader = await client.leader_for(tp)
            request = cls(
                replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=self.config.fetch_max_bytes,
                isolation_level=1 if self.read_committed else 0, session_id=0, session_epoch=-1,
                topics=[cls.FetchTopic(topic=tp.topic, partitions=[cls.FetchTopic.FetchPartition(
                    partition=tp.partition, fetch_offset=offset,
                    partition_max_bytes=self.config.max_partition_fetch_bytes)])])
            response = await client.send(leader, request,
                                         timeout_ms=self.config.request_timeout_ms + max_wait_ms)
            if response.error_code:
                raise KafkaError(response.error_code, context="Fetch")
            for topic in response.responses:
                for p in topic.partitions:
                    if topic.topic == tp.topic and p.partition_index == tp.partition:
                        code = ErrorCode.for_code(p.error_code)
                        if code != ErrorCode.NONE and code != ErrorCode.OFFSET_OUT_OF_RANGE:
                            raise KafkaError(code, context=f"Fetch {tp}")
                        return p
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "no answer for the partition", context=f"Fetch {tp}")

        return await client.call(attempt, what=f"Fetch {tp}", timeout_ms=self.config.default_api_timeout_ms)

    def log_start_and_end(self, tp: TopicPartition) -> tuple[int, int]:
        from odradek.client.consumer import list_offsets

        async def both() -> tuple[int, int]:
            start = await list_offsets(self._client, {tp: -2})
            end = await list_offsets(self._client, {tp: -1})
            return start[tp][0], end[tp][0]

        return self._thread.run(both())

    def close(self) -> None:
        try:
            self._thread.run(self._client.close(), 30)
        finally:
            self._thread.stop()


def read_arrow(client: ClientOptions, rng: OffsetRange, *, fail_on_data_loss: bool, poll_timeout_ms: int,
               include_headers: bool) -> Iterator[pa.RecordBatch]:
    """Yield Arrow record batches holding exactly the records of [rng.start, rng.end) that exist, one per
    fetch response (at most `max.partition.fetch.bytes` of record batches), decoded by `columnar`.

    Gaps are judged as `read_range` judges them: control batches, aborted transactions and compaction
    leave gaps that are not losses; a log start offset past the offsets wanted is (DataLossError with
    failOnDataLoss); a partition that ends before `rng.end` was truncated or recreated."""
    if rng.size <= 0:
        return
    fetcher: RawFetcher = _cached("fetcher", client, lambda: RawFetcher(client))
    try:
        yield from _read_arrow(fetcher, rng, fail_on_data_loss, poll_timeout_ms, include_headers)
    except GeneratorExit:
        raise
    except BaseException:
        evict("fetcher", client)
        raise


def _read_arrow(fetcher: RawFetcher, rng: OffsetRange, fail_on_data_loss: bool, poll_timeout_ms: int,
                include_headers: bool) -> Iterator[pa.RecordBatch]:
    tp = rng.topic_partition
    expected = rng.start  # the next offset wanted
    fetch_offset = rng.start
    max_wait = min(poll_timeout_ms, 500)
    deadline = time.monotonic() + poll_timeout_ms / 1000
    pending = fetcher.submit(tp, fetch_offset, max_wait)
    while expected < rng.end:
        p = pending.result()
        pending = None
        code = ErrorCode.for_code(p.error_code)
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            log_start, log_end = fetcher.log_start_and_end(tp)
            if fetch_offset < log_start:
                report_data_loss(f"{tp.topic}-{tp.partition}: offsets {expected} to {min(log_start, rng.end) - 1} "
                                 f"were deleted before they were read (log start offset is now {log_start})",
                                 fail_on_data_loss)
                expected = fetch_offset = min(log_start, rng.end)
            else:
                report_data_loss(f"{tp.topic}-{tp.partition}: offsets up to {rng.end - 1} were planned, but the "
                                 f"partition now ends at {log_end} (truncated or recreated)", fail_on_data_loss)
                return
            if expected < rng.end:
                pending = fetcher.submit(tp, fetch_offset, max_wait)
            continue
        records = p.records
        view = memoryview(records) if records else memoryview(b"")
        try:
            found = _usable_batches(view, fetch_offset, p.aborted_transactions, fetcher.read_committed)
        except ProtocolError as e:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(e), context=f"Fetch {tp}") from e
        batches, next_offset = found
        if next_offset > fetch_offset:
            fetch_offset = next_offset
            if fetch_offset < rng.end:  # one request ahead while this response is decoded
                pending = fetcher.submit(tp, fetch_offset, max_wait)
            deadline = time.monotonic() + poll_timeout_ms / 1000
            if batches:
                first = max(batches[0][1].base_offset, expected)
                if first > expected and p.log_start_offset > expected:
                    _report_deleted(tp, expected, min(first, p.log_start_offset), p.log_start_offset,
                                    fail_on_data_loss)
                try:
                    batch = decode_batches(tp.topic, tp.partition, view, batches, start=expected, end=rng.end,
                                           include_headers=include_headers)
                except ProtocolError as e:
                    raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(e), context=f"Fetch {tp}") from e
                if batch.num_rows:
                    yield batch
            expected = min(fetch_offset, rng.end)
            continue
        # nothing new in this answer
        if p.log_start_offset > expected:
            _report_deleted(tp, expected, min(p.log_start_offset, rng.end), p.log_start_offset, fail_on_data_loss)
            expected = fetch_offset = min(p.log_start_offset, rng.end)
            deadline = time.monotonic() + poll_timeout_ms / 1000
        elif time.monotonic() >= deadline:
            if p.high_watermark < rng.end:
                report_data_loss(f"{tp.topic}-{tp.partition}: offsets up to {rng.end - 1} were planned, but the "
                                 f"partition now ends at {p.high_watermark} (truncated or recreated)",
                                 fail_on_data_loss)
                return
            raise TimeoutError(f"{tp.topic}-{tp.partition}: no records at offset {expected} within "
                               f"{poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs)")
        if expected < rng.end:
            pending = fetcher.submit(tp, fetch_offset, max_wait)
    if pending is not None:
        pending.cancel()


def _report_deleted(tp: TopicPartition, expected: int, upto: int, log_start: int, fail: bool) -> None:
    report_data_loss(f"{tp.topic}-{tp.partition}: offsets {expected} to {upto - 1} were deleted before they were "
                     f"read (log start offset is now {log_start})", fail)


def _usable_batches(view: memoryview, fetch_offset: int, aborted_list: Any, read_committed: bool
                    ) -> tuple[list[tuple[int, BatchHeader]], int]:
    """The data batches of a fetch answer that a consumer would deliver, and the offset to fetch next.

    Batch level only, as the consumer's `_decode`: batches wholly before `fetch_offset` are skipped,
    control batches never hold data, and with read_committed a transactional batch of a producer with an
    aborted transaction open at that offset is dropped (the ABORT marker closes it)."""
    aborted = sorted(((a.first_offset, a.producer_id) for a in (aborted_list or ())), reverse=True)
    aborted_pids: set[int] = set()
    out: list[tuple[int, BatchHeader]] = []
    next_offset = fetch_offset
    for pos, h in iter_batches(view):
        if h.next_offset <= fetch_offset:
            continue
        next_offset = h.next_offset
        if read_committed:
            while aborted and aborted[-1][0] <= h.last_offset:
                aborted_pids.add(aborted.pop()[1])
            if h.is_control:
                if h.is_transactional:
                    for rec in iter_records(view[pos:pos + h.size], max_uncompressed_bytes=MAX_UNCOMPRESSED):
                        if parse_control_record(rec)[0] == ABORT:
                            aborted_pids.discard(h.producer_id)
                continue
            if h.is_transactional and h.producer_id in aborted_pids:
                continue
        elif h.is_control:
            continue
        out.append((pos, h))
    return out, next_offset


def report_data_loss(message: str, fail: bool) -> None:
    """Raise DataLossError (failOnDataLoss=true) or log a warning."""
    if fail:
        raise DataLossError(message + ". Some data may have been lost. If this is expected, set the option "
                            "failOnDataLoss to false.")
    log.warning("%s; skipping them (failOnDataLoss=false)", message)


# ---------------------------------------------------------------------------------------- producing

Row = tuple  # (topic, partition or None, key, value, headers[, timestamp_ms])


class BulkProducer:
    """The asyncio Producer on its own loop thread, fed a chunk of records per thread hop."""

    CHUNK = 2_000

    def __init__(self, client: ClientOptions):
        self.client = client
        self._thread = LoopThread("odradek-pipeline-producer")
        self._error: BaseException | None = None
        self.sent = 0

        async def start() -> Producer:
            producer = Producer(client.producer_config())
            await producer.start()
            return producer

        try:
            self._producer: Producer = self._thread.run(start())
        except BaseException:
            self._thread.stop()
            raise

    def _delivered(self, metadata: Any, error: BaseException | None) -> None:
        if error is not None and self._error is None:
            self._error = error

    async def _send_all(self, rows: list[Row]) -> None:
        send = self._producer.send
        delivered = self._delivered
        for topic, partition, key, value, headers, *timestamp in rows:
            await send(topic, value, key, partition=partition, headers=headers, on_delivery=delivered,
                       timestamp_ms=timestamp[0] if timestamp else None)

    def send(self, rows: Iterable[Row]) -> int:
        """Queue the rows (blocking only for buffer space); delivery errors surface in flush()."""
        count = 0
        chunk: list[Row] = []
        for row in rows:
            chunk.append(row)
            if len(chunk) >= self.CHUNK:
                self._thread.run(self._send_all(chunk))
                count += len(chunk)
                chunk = []
        if chunk:
            self._thread.run(self._send_all(chunk))
            count += len(chunk)
        self.sent += count
        return count

    def send_arrow(self, batches: Iterable[pa.RecordBatch], topic_option: str | None) -> int:
        """Queue the rows of Arrow batches, each encoded column-wise into record batches (columnar.py) when
        it can be, else row by row; delivery errors surface in flush().

        The encoding of batch i+1 (this thread) overlaps the queueing of batch i (the loop thread), one
        batch ahead at most, so that the pieces of a partition are queued in order. The partition count of
        a topic is looked up once per call (one Spark task), as a producer's metadata would hold it."""
        from .arrow import rows_from_batch

        batch_size = self._producer.config.batch_size
        counts: dict[str, int] = {}

        def partition_count(topic: str) -> int:
            if topic not in counts:
                counts[topic] = len(self._thread.run(self._producer.partitions_for(topic)))
            return counts[topic]

        count = 0
        pending = None
        try:
            for batch in batches:
                pieces = encode_for_partitions(batch, topic_option=topic_option, partition_count=partition_count,
                                               batch_size=batch_size, now_ms=int(time.time() * 1000), rng=random)
                if pending is not None:
                    pending.result()
                    pending = None
                if pieces is None:
                    count += self.send(rows_from_batch(batch, topic_option=topic_option))
                    continue
                if pieces:
                    pending = self._thread.submit(self._send_encoded(pieces))
                    count += batch.num_rows
                    self.sent += batch.num_rows
        finally:
            if pending is not None:
                pending.result()
        return count

    async def _send_encoded(self, pieces: list) -> None:
        for topic, partition, records in pieces:
            future = await self._producer.send_encoded(topic, partition, records)
            future.add_done_callback(self._encoded_done)

    def _encoded_done(self, future: Any) -> None:
        if not future.cancelled() and future.exception() is not None and self._error is None:
            self._error = future.exception()

    def flush(self) -> None:
        """Wait until every queued record is acknowledged; raise the first delivery error."""
        self._thread.run(self._producer.flush())
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def close(self) -> None:
        try:
            self._thread.run(self._producer.close(), 30)
        finally:
            self._thread.stop()


class TxnProducers:
    """Transactional producers of one process and one set of client settings, by transactional id: the
    `MAX_PRODUCERS` most recently used, on one loop thread."""

    MAX_PRODUCERS = 8

    def __init__(self, client: ClientOptions):
        self.client = client
        self._thread = LoopThread("odradek-pipeline-txn")
        self._producers: collections.OrderedDict[str, Producer] = collections.OrderedDict()
        self._lock = threading.Lock()

    def run(self, coro: Any, timeout: float | None = None) -> Any:
        return self._thread.run(coro, timeout)

    def submit(self, coro: Any) -> Any:
        """Start `coro` on the loop thread and return its concurrent future at once."""
        return self._thread.submit(coro)

    def get(self, transactional_id: str) -> Producer:
        """The started producer of `transactional_id` (not yet initialised when new)."""
        with self._lock:
            producer = self._producers.pop(transactional_id, None)
            if producer is not None:
                self._producers[transactional_id] = producer
                return producer
        config = self.client.producer_config().replace(transactional_id=transactional_id)

        async def start() -> Producer:
            return await Producer(config).start()

        producer = self._thread.run(start())
        with self._lock:
            self._producers[transactional_id] = producer
            stale = []
            while len(self._producers) > self.MAX_PRODUCERS:
                stale.append(self._producers.popitem(last=False)[1])
        for old in stale:
            self._close(old)
        return producer

    def evict(self, transactional_id: str) -> None:
        """Forget (and close) the producer of `transactional_id`: it is fenced or in an unknown state."""
        with self._lock:
            producer = self._producers.pop(transactional_id, None)
        if producer is not None:
            self._close(producer)

    def _close(self, producer: Producer) -> None:
        try:
            # Closing never ends a transaction: an open one is aborted by the next holder of the id.
            self._thread.run(producer.close(5), 30)
        except Exception:  # noqa: BLE001 - a producer being thrown away
            log.debug("closing a transactional producer failed", exc_info=True)

    def close(self) -> None:
        with self._lock:
            producers, self._producers = list(self._producers.values()), collections.OrderedDict()
        try:
            for producer in producers:
                self._close(producer)
        finally:
            self._thread.stop()


def txn_producers_for(client: ClientOptions) -> TxnProducers:
    return _cached("txn-producers", client, lambda: TxnProducers(client))


_commit_topics: set[tuple] = set()


def ensure_commit_topic(client: ClientOptions, topic: str) -> None:
    """Create the sink's commit topic (compacted, one partition) unless this process saw it already."""
    key = (os.getpid(), client.key, topic)
    if key in _commit_topics:
        return
    admin = admin_for(client)
    if not topic_partitions_or_none(admin, topic):
        ensure_topic(admin, topic, partitions=1, configs={"cleanup.policy": "compact"})
    _commit_topics.add(key)
