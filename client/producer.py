"""The asyncio producer.

Theory of operation
-------------------
`send()` serializes the key and value, picks a partition (`partitioner.Partitioner`: murmur2 for keys,
sticky for keyless records), reserves the record's size from `buffer_memory` (waiting up to
`max_block_ms` when the buffer is full: that wait is the back-pressure a fast caller feels), and appends
the record to the partition's accumulator: a deque of open batches, a new one started whenever the last
would grow past `batch_size`. It returns a delivery future that resolves to a `RecordMetadata` (or an
exception); `send_and_wait()` awaits it.

The sender task drains the accumulators. A partition's head batch is ready when it is full, when it has
waited `linger_ms`, or when someone is flushing, closing or blocked on buffer memory. Ready batches are
grouped by leader into one Produce request per broker, at most `max_request_size` bytes, with at most
`max_in_flight_requests_per_connection` requests outstanding per broker. A batch is encoded (and, with
idempotence, given its sequence number) the first time it is drained, then kept as bytes, so a retry
resends exactly the same batch.

Idempotence (on by default, as in Java) asks InitProducerId for a producer id and epoch; every batch
carries them and the partition's next sequence, so the broker drops a batch it has already written and
refuses one that would leave a gap. Up to 5 requests may be in flight per broker; when a batch fails with
a retriable error it is put back at the head of its partition in sequence order, and no retry is sent for
a partition until its earlier requests have come back, so retries reach the log in their original order.
UNKNOWN_PRODUCER_ID (the broker forgot us, e.g. after retention) and a sequence gap (a batch that expired
after its sequence was used) are healed by taking a new producer id and numbering from 0 again.

Transactions (`transactional_id`): `init_transactions()` finds the transaction coordinator and takes the
id's producer id and epoch (fencing any older producer of the same id, and aborting its open
transaction). Between `begin_transaction()` and `commit_transaction()` / `abort_transaction()` every
batch is transactional; a partition's batches wait until the coordinator has the partition in the
transaction (AddPartitionsToTxn, sent by a task that collects the partitions new since its last round,
as Java's TransactionManager does). `send_offsets_to_transaction()` adds the group's offsets
(AddOffsetsToTxn, then TxnOffsetCommit to the group coordinator). Commit flushes, then EndTxn. A failed
batch makes the transaction abortable: commit raises, and after `abort_transaction()` the producer takes
a bumped epoch (KIP-360) and goes on; PRODUCER_FENCED / INVALID_PRODUCER_EPOCH mean another producer took
the id over, which is fatal for this one.

Errors: retriable ones (NOT_LEADER_OR_FOLLOWER, a dropped connection, timeouts, ...) are retried after
`retry_backoff_ms` (doubling) until `delivery_timeout_ms` after the send, refreshing metadata first when
the error says it is stale; anything else fails the batch's futures with a `KafkaError`. acks=0 resolves
futures with offset -1 as soon as the request is written.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from odradek.protocol.compression import GZIP, LZ4, NONE, SNAPPY, ZSTD
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import REQUESTS
from odradek.protocol.records import build_batch, wrap_records

from .cluster import COORDINATOR_GROUP, COORDINATOR_TRANSACTION, KafkaClient, TopicPartition
from .config import ProducerConfig
from .errors import (
    ClientClosedError,
    KafkaError,
    KafkaTimeoutError,
    OdradekError,
    RecordTooLargeError,
)
from .partitioner import Partitioner

PRODUCE = 0
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28

_FENCED = (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH)
_COORDINATOR_MOVED = (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE)


class TransactionState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    FATAL_ERROR = "fatal_error"


class TransactionError(OdradekError):
    """A transactional call made in the wrong state (begin twice, send outside a transaction, ...)."""

CODECS = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
_BATCH_OVERHEAD = 61
_RECORD_OVERHEAD = 21
_SEQ_WRAP = 0x80000000

Headers = Iterable[tuple[str, bytes | str | None]] | dict[str, bytes | str | None] | None


@dataclass(slots=True, frozen=True)
class RecordMetadata:
    topic: str
    partition: int
    offset: int
    timestamp: int
    serialized_key_size: int
    serialized_value_size: int
    log_append_time: bool = False

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def default_serializer(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"cannot serialize {type(value).__name__}: pass bytes or str, or set a serializer")


def normalize_headers(headers: Headers) -> list[tuple[str, bytes | None]]:
    if not headers:
        return []
    items = headers.items() if isinstance(headers, dict) else headers
    out = []
    for k, v in items:
        if isinstance(v, str):
            v = v.encode("utf-8")
        elif v is not None and not isinstance(v, bytes):
            v = bytes(v)
        out.append((str(k), v))
    return out


class _Batch:
    __slots__ = (
        "tp", "records", "futures", "size", "created", "deadline", "base_sequence", "payload", "attempts",
        "retry_at", "producer_id", "producer_epoch", "key_sizes", "value_sizes", "in_flight", "last_error",
        "encoded",
    )

    def __init__(self, tp: TopicPartition, now: float, delivery_timeout_s: float):
        self.tp = tp
        self.records: list[tuple] = []
        self.futures: list[asyncio.Future] = []
        self.key_sizes: list[int] = []
        self.value_sizes: list[int] = []
        self.size = _BATCH_OVERHEAD
        self.created = now
        self.deadline = now + delivery_timeout_s
        self.base_sequence = -1
        self.payload: bytes | None = None
        self.attempts = 0
        self.retry_at = 0.0
        self.producer_id = -1
        self.producer_epoch = -1
        self.in_flight = False
        self.last_error: BaseException | None = None
        self.encoded: EncodedRecords | None = None

    @property
    def count(self) -> int:
        return self.encoded.count if self.encoded is not None else len(self.records)


@dataclass(frozen=True)
class EncodedRecords:
    """The records section of one batch, already encoded by the caller (uncompressed, offset deltas
    0..count-1, timestamp deltas from `base_timestamp`, no header): `Producer.send_encoded` wraps it in a
    batch header with the producer's id, epoch, sequence and codec. For callers that hold records in
    columns (the Spark sink, pipeline/columnar.py) and would otherwise pay `send()` once per record."""

    body: bytes
    count: int
    base_timestamp: int
    max_timestamp: int


class Producer:
    """An asyncio Kafka producer. Use `async with Producer(...) as p:` or `start()` / `close()`."""

    def __init__(self, config: ProducerConfig | None = None, *,
                 key_serializer: Callable[[Any], bytes | None] | None = None,
                 value_serializer: Callable[[Any], bytes | None] | None = None,
                 **overrides: Any):
        if config is None:
            config = ProducerConfig(**overrides)
        elif overrides:
            config = config.replace(**overrides)
        self.config: ProducerConfig = config
        self.client = KafkaClient(config)
        self._key_serializer = key_serializer or default_serializer
        self._value_serializer = value_serializer or default_serializer
        self._partitioner = Partitioner(config.partitioner, config.batch_size)
        self._codec = CODECS[config.compression_type]
        self._acks = config.required_acks
        self._idempotent = config.idempotent
        self._batches: dict[TopicPartition, collections.deque[_Batch]] = {}
        self._in_flight_tp: dict[TopicPartition, int] = collections.defaultdict(int)
        self._in_flight_node: dict[int, int] = collections.defaultdict(int)
        self._next_sequence: dict[TopicPartition, int] = collections.defaultdict(int)
        self._buffer_used = 0
        self._buffer_waiters: collections.deque[tuple[int, asyncio.Future]] = collections.deque()
        self._unfinished: set[_Batch] = set()
        self._producer_id = -1
        self._producer_epoch = -1
        self._pid_reset_needed = False
        self._flushing = 0
        self._closing = False
        self._closed = False
        self._wakeup: asyncio.Event | None = None
        self._sender: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self._fatal: BaseException | None = None
        self._started = False
        # Transactions
        self._txn_id = config.transactional_id
        self._transactional = self._txn_id is not None
        self._txn_state = TransactionState.UNINITIALIZED
        self._txn_partitions: set[TopicPartition] = set()  # in the coordinator's transaction
        self._txn_pending: set[TopicPartition] = set()  # to add
        self._txn_adding: asyncio.Task | None = None
        self._txn_started = False  # the coordinator has something of this transaction
        self._txn_error: BaseException | None = None  # the transaction must be aborted

    # ------------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> "Producer":
        if self._started:
            return self
        self._wakeup = asyncio.Event()
        await self.client.start()
        if self._idempotent and not self._transactional:  # a transactional one waits for init_transactions()
            await self._init_producer_id()
        self._sender = asyncio.get_running_loop().create_task(self._run())
        self._started = True
        return self

    async def __aenter__(self) -> "Producer":
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self, timeout: float | None = None) -> None:
        """Flush (for at most `timeout` seconds, forever if None), then stop; unsent records fail."""
        if self._closed:
            return
        self._closing = True
        if self._started:
            try:
                await asyncio.wait_for(self.flush(), timeout)
            except (asyncio.TimeoutError, OdradekError):
                pass
        self._closed = True
        if self._sender is not None:
            self._sender.cancel()
            try:
                await self._sender
            except BaseException:
                pass
        for task in list(self._tasks):
            task.cancel()
        for batch in list(self._unfinished):
            self._fail_batch(batch, ClientClosedError("producer closed before the record was delivered"))
        await self.client.close()

    # ------------------------------------------------------------------------------------------ sending

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Headers = None,
        on_delivery: Callable[[RecordMetadata | None, BaseException | None], Any] | None = None,
    ) -> asyncio.Future:
        """Queue one record; return its delivery future (RecordMetadata, or the error)."""
        await self._ready_to_send("send()")
        key_bytes = self._key_serializer(key)
        value_bytes = self._value_serializer(value)
        header_list = normalize_headers(headers)
        size = _RECORD_OVERHEAD + (len(key_bytes) if key_bytes else 0) + (len(value_bytes) if value_bytes else 0)
        for hk, hv in header_list:
            size += len(hk) + (len(hv) if hv else 0) + 2
        if size + _BATCH_OVERHEAD > self.config.max_request_size:
            raise RecordTooLargeError(f"record of {size} bytes is larger than max_request_size "
                                      f"({self.config.max_request_size})")
        if size > self.config.buffer_memory:
            raise RecordTooLargeError(f"record of {size} bytes is larger than buffer_memory")
        cluster = self.client.cluster
        all_partitions = cluster.partitions_for(topic)
        if not all_partitions:
            self.client.add_topics([topic])
            all_partitions = await self.client.partitions_for(topic, timeout_ms=self.config.max_block_ms)
        if partition is None:
            available = cluster.available_partitions(topic)
            partition = self._partitioner.partition(topic, key_bytes, all_partitions, available)
        elif partition not in all_partitions:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"{topic!r} has {len(all_partitions)} partitions", context=f"{topic}-{partition}")
        if self._buffer_used + size > self.config.buffer_memory or self._buffer_waiters:
            await self._reserve(size)
        else:
            self._buffer_used += size
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        tp = TopicPartition(topic, partition)
        if self._transactional and tp not in self._txn_partitions:
            self._add_to_transaction(tp)
        future = asyncio.get_running_loop().create_future()
        batch = self._append(tp, (key_bytes, value_bytes, header_list, timestamp_ms), size, future,
                             len(key_bytes) if key_bytes is not None else -1,
                             len(value_bytes) if value_bytes is not None else -1)
        self._partitioner.on_append(topic, key_bytes, partition, size, cluster.available_partitions(topic))
        if on_delivery is not None:
            future.add_done_callback(lambda f: on_delivery(*_outcome(f)))
        if len(batch.records) == 1:
            self._wake()  # a new batch: the sender must schedule its linger deadline
            if len(self._batches[tp]) > 1 or self.config.linger_ms == 0:
                await asyncio.sleep(0)  # a batch is ready: let the sender run while the caller goes on
        elif batch.size >= self.config.batch_size:
            self._wake()
        return future

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, **kw: Any) -> RecordMetadata:
        future = await self.send(topic, value, key, **kw)
        return await future

    async def _ready_to_send(self, what: str) -> None:
        """What `send()` and `send_encoded()` check before queueing: started, not closing, not fenced, and
        inside an open transaction on a transactional producer."""
        if not self._started:
            await self.start()
        if self._closing:
            raise ClientClosedError("producer is closed")
        if self._fatal is not None:
            raise self._fatal
        if self._transactional:
            if self._txn_state is not TransactionState.IN_TRANSACTION:
                raise TransactionError(f"{what} needs an open transaction (the producer is {self._txn_state.value}): "
                                       "call begin_transaction() first")
            if self._txn_error is not None:
                raise self._txn_error

    async def send_encoded(self, topic: str, partition: int, records: EncodedRecords) -> asyncio.Future:
        """Queue a pre-encoded records section as a batch of its own to `topic`-`partition`; the future gets
        the RecordMetadata of its first record (the others follow at consecutive offsets). Buffer memory,
        idempotence, transactions, retries and delivery timeout apply as to `send()`."""
        await self._ready_to_send("send_encoded()")
        if records.count <= 0:
            raise ValueError("an encoded batch needs at least one record")
        size = len(records.body)
        if size + _BATCH_OVERHEAD > self.config.max_request_size:
            raise RecordTooLargeError(f"encoded batch of {size} bytes is larger than max_request_size "
                                      f"({self.config.max_request_size})")
        all_partitions = self.client.cluster.partitions_for(topic)
        if not all_partitions:
            self.client.add_topics([topic])
            all_partitions = await self.client.partitions_for(topic, timeout_ms=self.config.max_block_ms)
        if partition not in all_partitions:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"{topic!r} has {len(all_partitions)} partitions", context=f"{topic}-{partition}")
        if self._buffer_used + size > self.config.buffer_memory or self._buffer_waiters:
            await self._reserve(min(size, self.config.buffer_memory))
        else:
            self._buffer_used += size
        tp = TopicPartition(topic, partition)
        if self._transactional and tp not in self._txn_partitions:
            self._add_to_transaction(tp)
        future = asyncio.get_running_loop().create_future()
        batch = _Batch(tp, time.monotonic(), self.config.delivery_timeout_ms / 1000)
        batch.encoded = records
        batch.futures.append(future)
        batch.size += min(size, self.config.buffer_memory)
        queue = self._batches.get(tp)
        if queue is None:
            queue = self._batches[tp] = collections.deque()
        queue.append(batch)
        self._unfinished.add(batch)
        self._wake()
        await asyncio.sleep(0)
        return future

    async def send_batch(self, topic: str, records: Iterable[Any], *, partition: int | None = None) -> list:
        """Queue many values (or (key, value) tuples); returns their futures."""
        futures = []
        for r in records:
            if isinstance(r, tuple):
                futures.append(await self.send(topic, r[1], r[0], partition=partition))
            else:
                futures.append(await self.send(topic, r, partition=partition))
        return futures

    async def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait until each of those records is delivered or has failed."""
        pending = [f for b in self._unfinished for f in b.futures]
        if not pending:
            return
        self._flushing += 1
        self._wake()
        try:
            await asyncio.wait_for(asyncio.wait(pending), timeout)
        finally:
            self._flushing -= 1

    async def partitions_for(self, topic: str) -> list[int]:
        if not self._started:
            await self.start()
        return await self.client.partitions_for(topic)

    @property
    def buffer_used(self) -> int:
        return self._buffer_used

    # ------------------------------------------------------------------------------------------ accumulator

    def _append(self, tp: TopicPartition, record: tuple, size: int, future: asyncio.Future,
                key_size: int, value_size: int) -> _Batch:
        queue = self._batches.get(tp)
        if queue is None:
            queue = self._batches[tp] = collections.deque()
        batch = queue[-1] if queue else None
        if (batch is None or batch.payload is not None or batch.in_flight or batch.encoded is not None
                or (batch.records and batch.size + size > self.config.batch_size)):
            batch = _Batch(tp, time.monotonic(), self.config.delivery_timeout_ms / 1000)
            queue.append(batch)
            self._unfinished.add(batch)
        batch.records.append(record)
        batch.futures.append(future)
        batch.key_sizes.append(key_size)
        batch.value_sizes.append(value_size)
        batch.size += size
        return batch

    async def _reserve(self, size: int) -> None:
        future = asyncio.get_running_loop().create_future()
        self._buffer_waiters.append((size, future))
        self._release(0)
        self._wake()
        try:
            await asyncio.wait_for(asyncio.shield(future), self.config.max_block_ms / 1000)
        except asyncio.TimeoutError:
            if future.done():
                return
            future.cancel()
            raise KafkaTimeoutError(f"buffer memory ({self.config.buffer_memory} bytes) stayed full for "
                                    f"max_block_ms ({self.config.max_block_ms} ms)") from None

    def _release(self, size: int) -> None:
        self._buffer_used -= size
        while self._buffer_waiters:
            need, future = self._buffer_waiters[0]
            if future.done():
                self._buffer_waiters.popleft()
                continue
            if self._buffer_used + need > self.config.buffer_memory and self._buffer_used > 0:
                break
            self._buffer_waiters.popleft()
            self._buffer_used += need
            future.set_result(None)

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    # ------------------------------------------------------------------------------------------ sender

    async def _run(self) -> None:
        assert self._wakeup is not None
        while not self._closed:
            try:
                if self._pid_reset_needed and not any(self._in_flight_tp.values()):
                    await self._reset_producer_id()
                timeout = self._drain(time.monotonic())
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a bug or a fatal producer-id failure: fail what is queued
                self._fatal = e if isinstance(e, OdradekError) else KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(e))
                for batch in list(self._unfinished):
                    if not batch.in_flight:
                        self._fail_batch(batch, self._fatal)
                timeout = 0.1
            self._wakeup.clear()
            if timeout is None:
                await self._wakeup.wait()
            elif timeout > 0:
                try:
                    await asyncio.wait_for(self._wakeup.wait(), timeout)
                except asyncio.TimeoutError:
                    pass
            else:
                await asyncio.sleep(0)

    def _drain(self, now: float) -> float | None:
        """Send every ready batch the in-flight limits allow; return seconds until the next deadline."""
        cluster = self.client.cluster
        linger = self.config.linger_ms / 1000
        urgent = self._flushing > 0 or self._closing or bool(self._buffer_waiters)
        next_wake: float | None = None
        by_node: dict[int, list[_Batch]] = {}
        sizes: dict[int, int] = {}
        max_in_flight = self.config.max_in_flight_requests_per_connection
        if self._pid_reset_needed:
            return 0.05
        for tp, queue in list(self._batches.items()):
            while queue and queue[0].deadline <= now and not queue[0].in_flight:
                batch = queue.popleft()
                if batch.base_sequence >= 0 and not self._transactional:  # (a transaction is aborted instead)
                    self._pid_reset_needed = True
                last = f"; last error: {batch.last_error}" if batch.last_error is not None else ""
                self._fail_batch(batch, KafkaTimeoutError(
                    f"{batch.count} record(s) for {tp} expired after delivery_timeout_ms "
                    f"({self.config.delivery_timeout_ms} ms){last}"))
            if not queue:
                del self._batches[tp]
                continue
            batch = queue[0]
            if self._transactional and tp not in self._txn_partitions:
                continue  # until AddPartitionsToTxn has it (the adding task wakes the sender)
            if batch.retry_at > now:
                next_wake = _earliest(next_wake, batch.retry_at - now)
                continue
            if batch.base_sequence >= 0 and self._in_flight_tp[tp]:
                continue  # a retry waits until the partition's earlier requests are back
            if self._in_flight_tp[tp] and not self._idempotent and max_in_flight == 1:
                continue
            full = len(queue) > 1 or batch.size >= self.config.batch_size
            if not (full or urgent or batch.payload is not None or now - batch.created >= linger):
                next_wake = _earliest(next_wake, batch.created + linger - now)
                continue
            leader = cluster.leader_for(tp)
            if leader is None:
                self.client.request_update()
                next_wake = _earliest(next_wake, self.config.retry_backoff_ms / 1000)
                continue
            if self._in_flight_node[leader] >= max_in_flight:
                continue
            if self._idempotent and self._in_flight_tp[tp] >= 5:
                continue
            size = sizes.get(leader, 0)
            if size and size + batch.size > self.config.max_request_size:
                continue
            queue.popleft()
            if not queue:
                del self._batches[tp]
            self._prepare(batch)
            sizes[leader] = size + len(batch.payload or b"")
            by_node.setdefault(leader, []).append(batch)
        for node_id, batches in by_node.items():
            self._in_flight_node[node_id] += 1
            for b in batches:
                self._in_flight_tp[b.tp] += 1
                b.in_flight = True
            task = asyncio.get_running_loop().create_task(self._produce(node_id, batches))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return next_wake

    def _prepare(self, batch: _Batch) -> None:
        if batch.payload is not None:
            return
        if self._idempotent:
            seq = self._next_sequence[batch.tp]
            batch.base_sequence = seq
            batch.producer_id = self._producer_id
            batch.producer_epoch = self._producer_epoch
            self._next_sequence[batch.tp] = (seq + batch.count) % _SEQ_WRAP
        if batch.encoded is not None:
            e = batch.encoded
            batch.payload = wrap_records(
                e.body, e.count, e.base_timestamp, e.max_timestamp,
                compression=self._codec,
                compression_level=self.config.compression_level,
                producer_id=batch.producer_id,
                producer_epoch=batch.producer_epoch,
                base_sequence=batch.base_sequence,
                transactional=self._transactional,
            )
            return
        batch.payload = build_batch(
            batch.records,
            compression=self._codec,
            compression_level=self.config.compression_level,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
            transactional=self._transactional,
        )

    async def _produce(self, node_id: int, batches: list[_Batch]) -> None:
        cls = REQUESTS[PRODUCE]
        topics: dict[str, list] = {}
        for b in batches:
            b.attempts += 1
            topics.setdefault(b.tp.topic, []).append(cls.TopicProduceData.PartitionProduceData(
                index=b.tp.partition, records=b.payload))
        request = cls(
            transactional_id=self._txn_id,
            acks=self._acks,
            timeout_ms=self.config.request_timeout_ms,
            topic_data=[cls.TopicProduceData(name=t, partition_data=p) for t, p in topics.items()],
        )
        by_tp = {(b.tp.topic, b.tp.partition): b for b in batches}
        try:
            try:
                response = await self.client.send(node_id, request, expect_response=self._acks != 0,
                                                  timeout_ms=self.config.request_timeout_ms + 5_000)
            except OdradekError as e:
                for b in batches:
                    self._batch_failed(b, e)
                return
            if response is None:
                for b in batches:
                    self._complete(b, -1, -1)
                return
            for topic in response.responses:
                for p in topic.partition_responses:
                    answered = by_tp.pop((topic.name, p.index), None)
                    if answered is None:
                        continue
                    code = ErrorCode.for_code(p.error_code)
                    if code == ErrorCode.NONE:
                        self._complete(answered, p.base_offset, p.log_append_time_ms)
                    elif code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                        self._complete(answered, p.base_offset, p.log_append_time_ms)
                    else:
                        self._batch_failed(answered, KafkaError(code, p.error_message, context=str(answered.tp)))
            for b in by_tp.values():
                self._batch_failed(b, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "no answer for this partition",
                                                 context=str(b.tp)))
        finally:
            self._in_flight_node[node_id] -= 1
            for b in batches:
                self._in_flight_tp[b.tp] -= 1
                b.in_flight = False
            self._wake()

    def _complete(self, batch: _Batch, base_offset: int, log_append_time: int) -> None:
        self._unfinished.discard(batch)
        self._release(batch.size - _BATCH_OVERHEAD)
        tp = batch.tp
        lat = log_append_time >= 0
        if batch.encoded is not None:
            e = batch.encoded
            for future in batch.futures:
                if not future.done():
                    future.set_result(RecordMetadata(tp.topic, tp.partition, base_offset,
                                                     log_append_time if lat else e.base_timestamp, -1, -1, lat))
            return
        for i, future in enumerate(batch.futures):
            if future.done():
                continue
            record = batch.records[i]
            future.set_result(RecordMetadata(
                tp.topic, tp.partition, base_offset + i if base_offset >= 0 else -1,
                log_append_time if lat else record[3], batch.key_sizes[i], batch.value_sizes[i], lat,
            ))

    def _fail_batch(self, batch: _Batch, error: BaseException) -> None:
        if batch not in self._unfinished:
            return
        if self._transactional and self._txn_error is None:
            self._txn_error = error  # a record of the transaction is lost: it can only be aborted
        self._unfinished.discard(batch)
        self._release(batch.size - _BATCH_OVERHEAD)
        for future in batch.futures:
            if not future.done():
                future.set_exception(error)
        queue = self._batches.get(batch.tp)
        if queue is not None and batch in queue:
            queue.remove(batch)

    def _batch_failed(self, batch: _Batch, error: OdradekError) -> None:
        batch.last_error = error
        code = error.code if isinstance(error, KafkaError) else None
        now = time.monotonic()
        retriable = error.retriable
        if self._transactional and code in _FENCED + (
                ErrorCode.INVALID_TXN_STATE, ErrorCode.TRANSACTION_ABORTABLE, ErrorCode.UNKNOWN_PRODUCER_ID,
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER):
            if code in _FENCED:
                self._fence(error)
            self._fail_batch(batch, error)  # the transaction is abortable (or the producer fenced)
            return
        if code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
            earlier = self._in_flight_tp[batch.tp] > 1 or any(
                0 <= b.base_sequence < batch.base_sequence for b in self._batches.get(batch.tp, ()))
            retriable = earlier
            if not earlier:
                self._pid_reset_needed = True
                retriable = True
        elif code in (ErrorCode.UNKNOWN_PRODUCER_ID, ErrorCode.INVALID_PRODUCER_EPOCH):
            self._pid_reset_needed = True
            retriable = True
        if code is not None and getattr(error, "invalid_metadata", False):
            self.client.request_update()
        elif code is None:
            self.client.request_update()
        if not retriable or now >= batch.deadline or batch.attempts > self.config.retries or self._closed:
            self._fail_batch(batch, error)
            return
        # Never back off past the delivery deadline: the batch expires then, not at the next retry after it.
        batch.retry_at = min(now + self.client.backoff_s(batch.attempts - 1), batch.deadline)
        queue = self._batches.get(batch.tp)
        if queue is None:
            queue = self._batches[batch.tp] = collections.deque()
        index = 0
        for index, other in enumerate(queue):  # noqa: B007
            if other.base_sequence < 0 or (0 <= batch.base_sequence < other.base_sequence):
                break
        else:
            index = len(queue)
        queue.insert(index, batch)

    # ------------------------------------------------------------------------------------------ producer id

    async def _init_producer_id(self) -> None:
        cls = REQUESTS[INIT_PRODUCER_ID]

        async def attempt() -> Any:
            response = await self.client.send_any(
                lambda v: cls(transactional_id=None, transaction_timeout_ms=60_000), api_key=INIT_PRODUCER_ID)
            if response.error_code:
                raise KafkaError(response.error_code, context="InitProducerId")
            return response

        response = await self.client.call(attempt, what="InitProducerId")
        self._producer_id = response.producer_id
        self._producer_epoch = response.producer_epoch

    async def _reset_producer_id(self) -> None:
        await self._init_producer_id()
        self._next_sequence.clear()
        self._pid_reset_needed = False
        for queue in self._batches.values():
            for b in queue:
                if b.base_sequence >= 0 and not b.in_flight:
                    b.base_sequence = -1
                    b.payload = None
        for queue in self._batches.values():
            ordered = sorted(queue, key=lambda b: b.created)
            queue.clear()
            queue.extend(ordered)

    @property
    def producer_id(self) -> tuple[int, int]:
        return self._producer_id, self._producer_epoch

    # ------------------------------------------------------------------------------------------ transactions

    @property
    def transaction_state(self) -> TransactionState:
        return self._txn_state

    def _check_state(self, *allowed: TransactionState) -> None:
        if not self._transactional:
            raise TransactionError("this producer has no transactional_id")
        if self._txn_state is TransactionState.FATAL_ERROR:
            raise self._fatal or TransactionError("the producer is in a fatal error state")
        if self._txn_state not in allowed:
            raise TransactionError(f"not allowed while the producer is {self._txn_state.value}")

    def _fence(self, error: BaseException) -> KafkaError:
        """Enter the fatal state; the error it keeps (raised by every later call) is returned."""
        self._txn_state = TransactionState.FATAL_ERROR
        fatal = self._fatal = KafkaError(ErrorCode.PRODUCER_FENCED,
                                         f"another producer took the transactional id over ({error})",
                                         context=self._txn_id, retriable=False)
        return fatal

    async def _txn_call(self, build: Callable[[int], Any], api_key: int, error_of: Callable[[Any], int], *,
                        key: str | None = None, key_type: int = COORDINATOR_TRANSACTION, what: str,
                        max_version: int | None = None) -> Any:
        """Send to the coordinator of `key` (the transactional id by default), retrying what is retriable
        (CONCURRENT_TRANSACTIONS while markers are written, a coordinator loading or moving)."""
        key = self._txn_id if key is None else key
        if key is None:
            raise TransactionError("transactions need a transactional_id")

        async def attempt() -> Any:
            node = await self.client.coordinator(key, key_type)
            response = await self.client.send(node, build, api_key=api_key, max_version=max_version)
            code = ErrorCode.for_code(error_of(response))
            if code in _COORDINATOR_MOVED:
                self.client.invalidate_coordinator(key, key_type)
            if code in _FENCED:
                raise self._fence(KafkaError(code, context=what))
            if code is not ErrorCode.NONE:
                raise KafkaError(code, context=what)
            return response

        return await self.client.call(attempt, what=what, timeout_ms=self.config.max_block_ms)

    async def init_transactions(self) -> None:
        """Take the transactional id's producer id and epoch (fencing older producers of the id)."""
        if not self._started:
            await self.start()
        self._check_state(TransactionState.UNINITIALIZED, TransactionState.READY)
        await self._init_transactional_id(None)
        self._txn_state = TransactionState.READY

    async def _init_transactional_id(self, current: tuple[int, int] | None) -> None:
        cls = REQUESTS[INIT_PRODUCER_ID]

        def build(version: int) -> Any:
            pid, epoch = current if current is not None and version >= 3 else (-1, -1)
            return cls(transactional_id=self._txn_id, transaction_timeout_ms=self.config.transaction_timeout_ms,
                       producer_id=pid, producer_epoch=epoch)

        response = await self._txn_call(build, INIT_PRODUCER_ID, lambda r: r.error_code, what="InitProducerId")
        self._producer_id, self._producer_epoch = response.producer_id, response.producer_epoch
        self._next_sequence.clear()

    def begin_transaction(self) -> None:
        self._check_state(TransactionState.READY)
        self._txn_state = TransactionState.IN_TRANSACTION
        self._txn_partitions.clear()
        self._txn_pending.clear()
        self._txn_started = False
        self._txn_error = None

    def _add_to_transaction(self, tp: TopicPartition) -> None:
        self._txn_pending.add(tp)
        if self._txn_adding is None or self._txn_adding.done():
            self._txn_adding = asyncio.get_running_loop().create_task(self._add_pending_partitions())

    async def _add_pending_partitions(self) -> None:
        cls = REQUESTS[ADD_PARTITIONS_TO_TXN]
        while self._txn_pending and self._txn_state is TransactionState.IN_TRANSACTION:
            adding, self._txn_pending = self._txn_pending, set()
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(adding):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            topics = [cls.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()]

            def first_error(response: Any) -> int:
                for t in response.results_by_topic_v3_and_below:
                    for p in t.results_by_partition:
                        if p.partition_error_code:
                            return p.partition_error_code
                return 0

            try:
                await self._txn_call(
                    lambda v: cls(v3_and_below_transactional_id=self._txn_id, v3_and_below_producer_id=self._producer_id,
                                  v3_and_below_producer_epoch=self._producer_epoch, v3_and_below_topics=topics),
                    ADD_PARTITIONS_TO_TXN, first_error, what="AddPartitionsToTxn", max_version=3)  # v4+: brokers
            except Exception as e:  # noqa: BLE001 - whatever it was, these partitions are not in the transaction
                for tp in adding:  # their records can never be part of this transaction
                    for batch in list(self._batches.get(tp, ())):
                        self._fail_batch(batch, e)
                if self._txn_error is None:
                    self._txn_error = e
                continue
            self._txn_started = True
            self._txn_partitions |= adding
            self._wake()

    async def send_offsets_to_transaction(self, offsets: dict[TopicPartition, int], group_id: str, *,
                                          member_id: str = "", generation_id: int = -1,
                                          group_instance_id: str | None = None) -> None:
        """Commit a consumer group's offsets (the next offset to read, per partition) with this transaction."""
        self._check_state(TransactionState.IN_TRANSACTION)
        if self._txn_error is not None:
            raise self._txn_error
        add = REQUESTS[ADD_OFFSETS_TO_TXN]
        await self._txn_call(lambda v: add(transactional_id=self._txn_id, producer_id=self._producer_id,
                                           producer_epoch=self._producer_epoch, group_id=group_id),
                             ADD_OFFSETS_TO_TXN, lambda r: r.error_code, what="AddOffsetsToTxn")
        self._txn_started = True
        commit = REQUESTS[TXN_OFFSET_COMMIT]
        Topic = commit.TxnOffsetCommitRequestTopic
        by_topic: dict[str, list] = {}
        for tp, offset in sorted(offsets.items()):
            by_topic.setdefault(tp.topic, []).append(Topic.TxnOffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=offset, committed_leader_epoch=-1,
                committed_metadata=""))

        def first_error(response: Any) -> int:
            return next((p.error_code for t in response.topics for p in t.partitions if p.error_code), 0)

        await self._txn_call(
            lambda v: commit(transactional_id=self._txn_id, group_id=group_id, producer_id=self._producer_id,
                             producer_epoch=self._producer_epoch, generation_id=generation_id, member_id=member_id,
                             group_instance_id=group_instance_id,
                             topics=[Topic(name=t, partitions=ps) for t, ps in by_topic.items()]),
            TXN_OFFSET_COMMIT, first_error, key=group_id, key_type=COORDINATOR_GROUP, what="TxnOffsetCommit")

    async def commit_transaction(self) -> None:
        """Deliver every record of the transaction, then commit it (EndTxn). Raises if a record failed:
        the transaction must then be aborted."""
        self._check_state(TransactionState.IN_TRANSACTION)
        await self._settle_transaction()
        if self._txn_error is not None:
            raise self._txn_error
        self._txn_state = TransactionState.COMMITTING
        try:
            await self._end_transaction(True)
        except OdradekError:
            if self._txn_state is not TransactionState.FATAL_ERROR:
                self._txn_state = TransactionState.IN_TRANSACTION  # the caller may retry or abort
            raise
        self._txn_state = TransactionState.READY

    async def abort_transaction(self) -> None:
        """Abort the transaction: nothing of it becomes visible to read_committed consumers."""
        self._check_state(TransactionState.IN_TRANSACTION, TransactionState.COMMITTING)
        self._txn_state = TransactionState.ABORTING
        failed = self._txn_error is not None
        while self._txn_adding is not None and not self._txn_adding.done():
            await asyncio.shield(self._txn_adding)
        for tp in list(self._batches):  # records that never reached a partition of the transaction are dropped
            if tp not in self._txn_partitions:
                for batch in list(self._batches.get(tp, ())):
                    self._fail_batch(batch, TransactionError("the transaction was aborted"))
        await self._settle_transaction()
        failed = failed or isinstance(self._txn_error, KafkaError)
        try:
            await self._end_transaction(False)
            if failed:  # sequences are in doubt: a bumped epoch starts them again (KIP-360)
                await self._init_transactional_id((self._producer_id, self._producer_epoch))
        except OdradekError:
            if self._txn_state is not TransactionState.FATAL_ERROR:
                self._txn_state = TransactionState.IN_TRANSACTION
            raise
        self._txn_state = TransactionState.READY

    async def _settle_transaction(self) -> None:
        while self._txn_adding is not None and not self._txn_adding.done():
            await asyncio.shield(self._txn_adding)
        await self.flush()

    async def _end_transaction(self, commit: bool) -> None:
        if not self._txn_started:
            return  # nothing reached the coordinator: there is nothing to end
        cls = REQUESTS[END_TXN]
        await self._txn_call(lambda v: cls(transactional_id=self._txn_id, producer_id=self._producer_id,
                                           producer_epoch=self._producer_epoch, committed=commit),
                             END_TXN, lambda r: r.error_code, what="EndTxn")
        self._txn_partitions.clear()
        self._txn_started = False


def _earliest(current: float | None, candidate: float) -> float:
    candidate = max(candidate, 0.0)
    return candidate if current is None else min(current, candidate)


def _outcome(future: asyncio.Future) -> tuple[RecordMetadata | None, BaseException | None]:
    if future.cancelled():
        return None, asyncio.CancelledError()
    error = future.exception()
    return (None, error) if error is not None else (future.result(), None)
