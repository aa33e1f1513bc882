"""The coordinator runtime: shards of a compacted internal topic run as replicated state machines.

Theory of operation
-------------------
A coordinator owns some partitions of an internal topic (`__consumer_offsets` for groups, group/). Each
owned partition has a *shard*: the state of the keys that hash to it. The runtime knows nothing of groups
or of the topic's record schemas (the coordinator passes `serialize` / `deserialize` for its records); it
knows three verbs, as Kafka's CoordinatorRuntime does:

- `write(partition, op, now_ms) -> Deferred`: `op(shard) -> Result(records, response)` decides what
  happens and returns the records that say so. The runtime appends the records through the
  `PartitionWriter`, then replays them into the shard (`shard.replay(record)` is the only mutation of the
  replicated state), and completes the Deferred with the response once the records are durable. An op
  writes nothing if it raises, and a failed append replays nothing: the replicated state never runs ahead
  of the log.
  `write(..., timeout_ms)` bounds the wait for durability: the Deferred then fails with REQUEST_TIMED_OUT
  (Kafka's write timeout: `offsets.commit.timeout.ms` for groups, `request.timeout.ms` for transactions),
  while the records stay written and take effect if they are replicated later.
- `load(partition, now_ms)`: a new shard replays the partition's log (`read_all`) and is told
  `on_loaded(now_ms)` to re-arm its timers. `unload(partition)` drops it (leadership moved).
- `schedule(partition, key, deadline_ms, op)`: a timer on the shared timing wheel that runs `op` as a
  write when it fires. A key names one timer per shard; scheduling a key again replaces its timer.

Durability. `PartitionWriter.append` returns None when the records are durable on return (one broker:
appended). With replication it returns the log end offset after the append instead, and the runtime
holds the response until `on_committed(partition, offset)` reports the high watermark has reached it:
`load` registers `on_committed` as the partition's high-watermark listener with the writer, `unload`
deregisters it. A write with no records also waits for the writes before it, so a response never gets
ahead of the state it reports on. `unload` fails what is still held with NOT_COORDINATOR.

min.insync.replicas. The writer refuses an append up front (NOT_ENOUGH_REPLICAS, nothing written, nothing
replayed) while the partition's ISR is below its min.insync.replicas, as Kafka's acks=all append is refused.
With `under_min_isr(partition)` the runtime also answers as Kafka's acks=all DelayedProduce does when the ISR
shrank below min.insync.replicas after a write was appended: the high watermark then moves over the
shrunken ISR, and a held write it releases while `under_min_isr` holds fails with
NOT_ENOUGH_REPLICAS_AFTER_APPEND (its callbacks hear the error, so a classic group undoes what it does for
a store that failed) instead of succeeding. Its records are not reverted, and must not be: they sit below
the high watermark, committed, so the log keeps them whatever the answer was, and a shard that dropped
them would no longer be the replay of its own log (a reload, or the next leader, would bring them back
under a state machine that had moved on without them). The shard is always the replay of its log, and
the part of that log not yet committed is either committed later (the high watermark reaches it) or
truncated by a change of leader, which unloads the shard; the new leader loads what survived. This is
Kafka's own outcome for an acks=all append answered NOT_ENOUGH_REPLICAS_AFTER_APPEND (the records stay
readable), and the reason the runtime needs no snapshot registry to revert to: nothing it answered as
failed is ever missing from, or extra to, the log. Writes with no records that waited for others report
on state that is now committed, and succeed. A client retries (the group coordinator maps the error to
COORDINATOR_NOT_AVAILABLE), and a retried commit finds its own effect.

Reads at the committed offset. Kafka answers its reads (an OffsetFetch without require_stable) at the
partition's last committed offset from its snapshot registry. Here the runtime keeps, per loaded
partition, the high watermark as last heard (`committed_offset`) and, while it replays records into the
shard, the offset they are committed at (`replaying_offset`: the end offset `append` returned, or at load
the `LogPosition` of each batch above the high watermark `high_watermark` reported; None once committed),
and tells the coordinator each advance (`on_shard_committed`). A shard that answers reads at the committed
offset keeps what it needs for them from those, no more (group/committed.py, `CommittedView`); nothing else
needs a snapshot of the state.

The high watermark may move inside `append` itself (with one replica it always does). What that
releases waits until the write's records are replayed: a released callback may write again, and must
not find the shard behind its log.

Transactional writes (TxnOffsetCommit). A Result with `producer` (producer id, epoch) is appended as a
transactional batch of that producer and replayed with `shard.replay_transactional(producer_id, epoch,
record)`: it is pending until the transaction's marker reaches the partition, which the broker reports
with `complete_transaction(partition, producer_id, committed)` (the shard's `replay_end_transaction`).
Loading replays the same from the log: `read_all` yields a `TransactionalRecord` for a record of a
transactional batch and a `TransactionMarker` for a marker, in log order, plain (key, value) otherwise.

`Deferred` is the runtime's future: a callback holder completed exactly once, with no event loop (the
broker adapts it to an asyncio.Future). Callbacks run synchronously inside `complete`/`fail`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import structlog

from odradek.protocol.errors import ErrorCode, KafkaApiError
from odradek.purgatory.deferred import Deferred, gather  # noqa: F401 - re-exported for the coordinators
from odradek.purgatory.timing_wheel import Timer, TimerTask

__all__ = [
    "Batch",
    "gather",
    "CoordinatorError",
    "CoordinatorLoadInProgressError",
    "CoordinatorRuntime",
    "CoordinatorShard",
    "Deferred",
    "InMemoryPartitionWriter",
    "LogPosition",
    "NotCoordinatorError",
    "PartitionWriter",
    "Result",
    "TransactionMarker",
    "TransactionalRecord",
]

T = TypeVar("T")
S = TypeVar("S", bound="CoordinatorShard")

# A coordinator's record as its shard replays it (group/records.py: CoordinatorRecord), and the (key, value)
# bytes it is stored as.
Record = Any
KeyValue = tuple[bytes | None, bytes | None]

log = structlog.get_logger("odradek.coordinator")



class CoordinatorError(KafkaApiError):
    """An error answered to the client with `error_code`."""

    error_code: ErrorCode = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str = "", error_code: ErrorCode | None = None) -> None:
        super().__init__(message)
        if error_code is not None:
            self.error_code = error_code


class NotCoordinatorError(CoordinatorError):
    error_code = ErrorCode.NOT_COORDINATOR


class CoordinatorLoadInProgressError(CoordinatorError):
    error_code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS


class TransactionalRecord(NamedTuple):
    """A record of a transactional batch, as `read_all` yields it."""

    key: bytes | None
    value: bytes | None
    producer_id: int
    producer_epoch: int


class LogPosition(NamedTuple):
    """Yielded by `read_all` before the records of each batch: the offset after the batch. The records
    that follow (up to the next LogPosition) are committed once the high watermark reaches `next_offset`."""

    next_offset: int


class TransactionMarker(NamedTuple):
    """A COMMIT or ABORT marker of `producer_id`, as `read_all` yields it."""

    producer_id: int
    producer_epoch: int
    committed: bool


@dataclass(slots=True)
class Result:
    """What an operation decided: records to write, the response once they are durable, and callbacks.

    `callbacks` run after the records are durable (with None) or after the append failed (with the
    error), before the response is released: Kafka's append future of a CoordinatorResult.
    """

    records: list[Record] = field(default_factory=list)
    response: Any = None
    callbacks: list[Callable[[BaseException | None], None]] = field(default_factory=list)
    producer: tuple[int, int] | None = None  # (producer id, epoch): a transactional write


class Batch:
    """An operation's decisions as it builds them: records to write and callbacks for when durable."""

    __slots__ = ("records", "callbacks")

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.callbacks: list[Callable[[BaseException | None], None]] = []

    def result(self, response: Any = None) -> Result:
        return Result(self.records, response, self.callbacks)


class PartitionWriter(Protocol):
    """What the runtime needs from the broker: append to and read back a partition of the topic."""

    def append(self, partition: int, records: list[tuple[bytes | None, bytes | None]], now_ms: int,
               producer: tuple[int, int] | None = None) -> int | None:
        """Append `records` as one batch (a transactional one of `producer`, if given). None: durable on
        return; else the log end offset to wait for."""
        ...

    def read_all(self, partition: int) -> Iterable[tuple[bytes | None, bytes | None]]:
        """Every record of the partition, oldest first (after compaction, the latest per key survive),
        each batch's records preceded by the batch's `LogPosition`."""
        ...

    def high_watermark(self, partition: int) -> int:
        """The partition's high watermark now: records below it are committed."""
        ...

    def register_listener(self, partition: int, on_committed: Callable[[int, int], None]) -> None:
        """Call `on_committed(partition, high_watermark)` whenever the partition's high watermark advances."""
        ...

    def deregister_listener(self, partition: int) -> None: ...


class CoordinatorShard(Protocol):
    def replay(self, record: Record) -> None: ...

    def on_loaded(self, now_ms: int) -> None: ...

    def on_unloaded(self) -> None: ...


class InMemoryPartitionWriter:
    """A PartitionWriter over lists, for tests. With `commit_later` appends return offsets to wait for,
    and `commit(partition, offset)` stands for the high watermark reaching `offset`."""

    def __init__(self, *, commit_later: bool = False) -> None:
        self.logs: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
        self.commit_later = commit_later
        self.fail_next: BaseException | None = None
        self.listeners: dict[int, Callable[[int, int], None]] = {}
        self.high_watermarks: dict[int, int] = {}  # with commit_later: as `commit` last moved them

    def append(self, partition: int, records: list[tuple[bytes | None, bytes | None]], now_ms: int,
               producer: tuple[int, int] | None = None) -> int | None:
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        log = self.logs.setdefault(partition, [])
        if producer is None:
            log.extend(records)
        else:
            log.extend(TransactionalRecord(key, value, *producer) for key, value in records)
        return len(log) if self.commit_later else None

    def append_marker(self, partition: int, producer_id: int, producer_epoch: int, committed: bool) -> None:
        """A transaction marker, as the partition's WriteTxnMarkers writes it."""
        self.logs.setdefault(partition, []).append(TransactionMarker(producer_id, producer_epoch, committed))

    def read_all(self, partition: int) -> Iterator[tuple[bytes | None, bytes | None]]:
        """Each entry of the list is its own batch, at the entry's index."""
        for index, item in enumerate(list(self.logs.get(partition, ()))):
            yield LogPosition(index + 1)
            yield item

    def high_watermark(self, partition: int) -> int:
        if not self.commit_later:
            return len(self.logs.get(partition, ()))
        return self.high_watermarks.get(partition, 0)

    def register_listener(self, partition: int, on_committed: Callable[[int, int], None]) -> None:
        self.listeners[partition] = on_committed

    def deregister_listener(self, partition: int) -> None:
        self.listeners.pop(partition, None)

    def commit(self, partition: int, offset: int | None = None) -> None:
        """The high watermark of `partition` advanced to `offset` (default: the end of its log)."""
        offset = len(self.logs.get(partition, ())) if offset is None else offset
        self.high_watermarks[partition] = max(self.high_watermarks.get(partition, 0), offset)
        listener = self.listeners.get(partition)
        if listener is not None:
            listener(partition, offset)

    def compacted(self, partition: int) -> list[tuple[bytes | None, bytes | None]]:
        """The partition as log compaction would leave it: the last record per key, tombstones dropped."""
        last: dict[bytes | None, tuple[int, bytes | None]] = {}
        for i, (key, value) in enumerate(self.logs.get(partition, ())):
            last[key] = (i, value)
        return [(key, value) for key, (_, value) in sorted(last.items(), key=lambda kv: kv[1][0]) if value is not None]


class _Held:
    __slots__ = ("offset", "deferred", "result")

    def __init__(self, offset: int, deferred: Deferred, result: Result) -> None:
        self.offset = offset
        self.deferred = deferred
        self.result = result


class _ShardContext(Generic[S]):
    __slots__ = ("partition", "shard", "timers", "held", "last_written_offset", "appending", "committed_in_append",
                 "committed_offset", "replaying")

    def __init__(self, partition: int, shard: S, committed_offset: int) -> None:
        self.partition = partition
        self.shard = shard
        self.timers: dict[Any, TimerTask] = {}
        self.held: deque[_Held] = deque()
        self.last_written_offset: int | None = None
        self.appending = False  # inside the writer's append: a commit heard now is acted on after replay
        self.committed_in_append: int | None = None
        self.committed_offset = committed_offset  # the high watermark, as last heard
        self.replaying: int | None = None  # while records are replayed: the offset they commit at (None: committed)


class CoordinatorRuntime(Generic[S]):
    """Shards by partition, a writer to make their records durable, and timers on a shared wheel."""

    def __init__(self, writer: PartitionWriter, shard_factory: Callable[[int], S], timer: Timer, *,
                 serialize: Callable[[Record], KeyValue],
                 deserialize: Callable[[bytes | None, bytes | None], Record | None],
                 under_min_isr: Callable[[int], bool] | None = None,
                 on_shard_committed: Callable[[S, int], None] | None = None) -> None:
        self._writer = writer
        # Told (shard, high watermark) each time a loaded partition's high watermark advances, after what it
        # released: a shard that answers reads at the committed offset forgets what is committed now.
        self._on_shard_committed = on_shard_committed
        self._under_min_isr = under_min_isr  # partition -> is its ISR below min.insync.replicas now?
        self._serialize = serialize
        self._deserialize = deserialize  # returns None for a record the coordinator skips (a type it does not know)
        self._shard_factory = shard_factory
        self._timer = timer
        self._contexts: dict[int, _ShardContext[S]] = {}
        self._clock_ms = 0

    @property
    def timer(self) -> Timer:
        return self._timer

    @property
    def clock_ms(self) -> int:
        """The latest time the runtime was told of (by an operation or a timer)."""
        return self._clock_ms

    # -- life cycle --

    def load(self, partition: int, now_ms: int) -> S:
        """Build the partition's shard by replaying its log; replaces a shard already loaded."""
        self.unload(partition)
        shard = self._shard_factory(partition)
        high_watermark = self._writer.high_watermark(partition)
        context = _ShardContext(partition, shard, high_watermark)
        # Registered while it replays, so the shard can ask `replaying_offset` (nothing else runs meanwhile:
        # loading is one synchronous pass).
        self._contexts[partition] = context
        try:
            for item in self._writer.read_all(partition):
                kind = type(item)
                if kind is LogPosition:
                    # A batch above the high watermark at load is not committed yet either.
                    context.replaying = item[0] if item[0] > high_watermark else None
                    continue
                if kind is TransactionMarker:
                    shard.replay_end_transaction(item.producer_id, item.committed)
                    continue
                record = self._deserialize(item[0], item[1])
                if record is None:
                    continue
                if kind is TransactionalRecord:
                    shard.replay_transactional(item.producer_id, item.producer_epoch, record)
                else:
                    shard.replay(record)
        except BaseException:
            del self._contexts[partition]
            raise
        context.replaying = None
        self._writer.register_listener(partition, self.on_committed)
        self._tick(now_ms)
        shard.on_loaded(now_ms)
        return shard

    def unload(self, partition: int) -> None:
        context = self._contexts.pop(partition, None)
        if context is None:
            return
        self._writer.deregister_listener(partition)
        for task in context.timers.values():
            task.cancel()
        context.timers.clear()
        while context.held:
            context.held.popleft().deferred.fail(NotCoordinatorError(f"partition {partition} was unloaded"))
        context.shard.on_unloaded()

    def is_loaded(self, partition: int) -> bool:
        return partition in self._contexts

    @property
    def partitions(self) -> list[int]:
        return sorted(self._contexts)

    def shard(self, partition: int) -> S:
        context = self._contexts.get(partition)
        if context is None:
            raise NotCoordinatorError(f"this broker does not coordinate partition {partition}")
        return context.shard

    # -- operations --

    def committed_offset(self, partition: int) -> int:
        """The partition's high watermark as last heard: the records below it are committed."""
        context = self._contexts.get(partition)
        if context is None:
            raise NotCoordinatorError(f"this broker does not coordinate partition {partition}")
        return context.committed_offset

    def replaying_offset(self, partition: int) -> int | None:
        """While the runtime replays records into the partition's shard (a write, or loading), the offset
        the high watermark must reach for them to be committed; None when they are committed already (and
        when nothing is being replayed)."""
        context = self._contexts.get(partition)
        return context.replaying if context is not None else None

    def read(self, partition: int, fn: Callable[[S], T]) -> T:
        """Run a read-only function on the shard (raises NotCoordinatorError if it is not loaded)."""
        return fn(self.shard(partition))

    def write(self, partition: int, op: Callable[[S], Result], now_ms: int, timeout_ms: int | None = None) -> Deferred:
        """Run `op` on the shard; make its records durable, replay them and release its response. With
        `timeout_ms`, a response still held that long fails with REQUEST_TIMED_OUT (see `_bounded`)."""
        written = self._write(partition, op, now_ms)
        return written if timeout_ms is None or written.done else self._bounded(written, now_ms, timeout_ms)

    def _bounded(self, written: Deferred, now_ms: int, timeout_ms: int) -> Deferred:
        """Kafka's CoordinatorWriteEvent write timeout: the caller is answered REQUEST_TIMED_OUT (each
        coordinator maps it for its API) instead of waiting for as long as the partition's ISR cannot move.
        Only the answer is given up: the records stay in the log and in the shard (replayed on append), and
        take effect if the high watermark reaches them later, as in Kafka, where the timeout completes the
        write's future but neither reverts the state machine nor removes the records. A retry finds that
        effect; a change of leader that truncates them reloads the shard from what survived."""
        out: Deferred = Deferred()
        timeout = TimerTask(now_ms + timeout_ms, lambda: out.fail(CoordinatorError(
            f"coordinator write not replicated within {timeout_ms} ms", ErrorCode.REQUEST_TIMED_OUT)))

        def settle(d: Deferred) -> None:
            timeout.cancel()
            if d.failed_with is not None:
                out.fail(d.failed_with)
            else:
                out.complete(d.result())

        written.add_callback(settle)
        if not out.done:
            self._timer.add(timeout)
        return out

    def _write(self, partition: int, op: Callable[[S], Result], now_ms: int) -> Deferred:
        self._tick(now_ms)
        context = self._contexts.get(partition)
        if context is None:
            return Deferred.failed(NotCoordinatorError(f"this broker does not coordinate partition {partition}"))
        try:
            result = op(context.shard)
        except CoordinatorError as e:
            return Deferred.failed(e)
        except Exception as e:  # a bug: the op writes nothing, and the caller answers UNKNOWN_SERVER_ERROR
            log.exception("coordinator operation failed", partition=partition)
            return Deferred.failed(e)
        deferred: Deferred = Deferred()
        if not result.records:
            self._settle(context, None, result, deferred)
            return deferred
        try:
            serialize = self._serialize
            encoded = [serialize(record) for record in result.records]
            context.appending = True
            try:
                if result.producer is None:
                    offset = self._writer.append(partition, encoded, now_ms)
                else:
                    offset = self._writer.append(partition, encoded, now_ms, producer=result.producer)
            finally:
                context.appending = False
        except Exception as e:
            log.warning("coordinator append failed", partition=partition, error=repr(e))
            self._commit_heard_in_append(context)
            for callback in result.callbacks:
                callback(e)
            deferred.fail(e)
            return deferred
        context.replaying = offset
        try:
            if result.producer is None:
                for record in result.records:
                    context.shard.replay(record)
            else:
                producer_id, producer_epoch = result.producer
                for record in result.records:
                    context.shard.replay_transactional(producer_id, producer_epoch, record)
        finally:
            context.replaying = None
        if offset is not None:
            context.last_written_offset = offset
        self._commit_heard_in_append(context)
        self._settle(context, offset, result, deferred)
        return deferred

    def _commit_heard_in_append(self, context: _ShardContext[S]) -> None:
        committed = context.committed_in_append
        if committed is not None:
            context.committed_in_append = None
            self.on_committed(context.partition, committed)

    def _settle(self, context: _ShardContext[S], offset: int | None, result: Result, deferred: Deferred) -> None:
        if offset is None and result.records:
            self._release(result, deferred)
            return
        wait_for = offset if offset is not None else (context.last_written_offset if context.held else None)
        if wait_for is None:
            self._release(result, deferred)
            return
        context.held.append(_Held(wait_for, deferred, result))

    @staticmethod
    def _release(result: Result, deferred: Deferred) -> None:
        for callback in result.callbacks:
            callback(None)
        deferred.complete(result.response)

    @staticmethod
    def _fail(result: Result, deferred: Deferred, error: BaseException) -> None:
        for callback in result.callbacks:
            callback(error)
        deferred.fail(error)

    def on_committed(self, partition: int, committed_offset: int) -> None:
        """The partition's high watermark reached `committed_offset`: release what waited for it."""
        context = self._contexts.get(partition)
        if context is None:
            return
        if committed_offset > context.committed_offset:
            # At once, even inside an append: the records the write replays next are tagged against it.
            context.committed_offset = committed_offset
        if context.appending:
            previous = context.committed_in_append
            context.committed_in_append = committed_offset if previous is None else max(previous, committed_offset)
            return
        after_append_error: CoordinatorError | None = None
        if (context.held and context.held[0].offset <= committed_offset and self._under_min_isr is not None
                and self._under_min_isr(partition)):
            after_append_error = CoordinatorError(
                f"partition {partition}: the ISR shrank below min.insync.replicas before the write was replicated",
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
        while context.held and context.held[0].offset <= committed_offset:
            held = context.held.popleft()
            if after_append_error is not None and held.result.records:
                self._fail(held.result, held.deferred, after_append_error)
            else:
                self._release(held.result, held.deferred)
        if self._on_shard_committed is not None:
            self._on_shard_committed(context.shard, context.committed_offset)

    def complete_transaction(self, partition: int, producer_id: int, committed: bool) -> None:
        """A marker of `producer_id` was written to `partition` and is committed (the partition's
        WriteTxnMarkers is an acks=all append and tells the coordinator once it is replicated): its
        pending transactional records take effect (commit) or are dropped (abort). Replayed as committed
        (`replaying_offset` None), though records appended after the marker may still be waiting."""
        self.shard(partition).replay_end_transaction(producer_id, committed)

    # -- timers --

    def schedule(self, partition: int, key: Any, deadline_ms: int, op: Callable[[S, int], Result]) -> None:
        """At `deadline_ms`, run `op(shard, now_ms)` as a write; replaces the timer already under `key`."""
        context = self._contexts.get(partition)
        if context is None:
            return
        previous = context.timers.pop(key, None)
        if previous is not None:
            previous.cancel()

        def fire() -> None:
            if context.timers.get(key) is task:
                del context.timers[key]
            if self._contexts.get(partition) is not context:
                return
            # The timer's own deadline is its "now": what follows is the same however coarsely the clock
            # was stepped over it.
            now_ms = task.expiration_ms
            self._write(partition, lambda shard: op(shard, now_ms), now_ms)

        task = TimerTask(deadline_ms, fire)
        context.timers[key] = task
        self._timer.add(task)

    def cancel(self, partition: int, key: Any) -> None:
        context = self._contexts.get(partition)
        if context is not None:
            task = context.timers.pop(key, None)
            if task is not None:
                task.cancel()

    def is_scheduled(self, partition: int, key: Any) -> bool:
        context = self._contexts.get(partition)
        return context is not None and key in context.timers

    def deadline(self, partition: int, key: Any) -> int | None:
        context = self._contexts.get(partition)
        task = context.timers.get(key) if context is not None else None
        return task.expiration_ms if task is not None else None

    def _tick(self, now_ms: int) -> None:
        # The clock only moves forward; a timer firing late reports its deadline, which may be behind.
        if now_ms > self._clock_ms:
            self._clock_ms = now_ms
