"""The exactly-once streaming sink: every micro-batch task writes through one Kafka transaction.

Spark's contract (see the reference notes) is that a micro-batch whose commit Spark did not record is
run again after a restart, with the same batch id, the same offsets and so the same rows per task; that
a failed task is run again; and that with `spark.speculation` two attempts of one task may run at once.
Its own Kafka sink is therefore at-least-once. This sink is exactly-once for read_committed consumers.

The task's transaction
----------------------
Task `t` of query `q` (Spark's `sql.streaming.queryId`, stable across restarts, and the task's partition
id) owns the transactional id `odradek-spark-sink.<q>.<t>`. Every batch's task `t` uses it, in every
attempt and every run of the query:

1. `init_transactions()` (InitProducerId). This fences every earlier holder of the id: a transaction it
   left open is aborted, and its later writes and its EndTxn fail with PRODUCER_FENCED. The call returns
   only once the previous transaction of the id is complete (a coordinator still writing its markers
   answers CONCURRENT_TRANSACTIONS, and the client retries).
2. Read the task's progress: the offset that consumer group `odradek-spark-sink.<q>.<t>` has committed
   for partition 0 of the sink's commit topic is the next batch id this task has to write. The read uses
   `require_stable` (KIP-447), so an offset still in a transaction is never read as committed.
3. If that offset is above this batch's id, an earlier attempt or run already committed this task's
   rows: drain the input and publish nothing. Otherwise begin a transaction, send the rows, add the
   offset `batch id + 1` to the transaction (`send_offsets_to_transaction`, the same way Kafka Streams
   records its progress) and commit.

The output and the progress offset become visible together or not at all. Any two attempts are ordered
by their InitProducerId. If the earlier one committed before the later one's InitProducerId, the later one
reads its offset and skips the rows. Otherwise the later one's InitProducerId fences it, and the earlier
one's transaction can no longer commit. So rows are written once, however attempts of one task overlap:
retries, speculative copies, a zombie left over from a killed run, or the replay of a whole batch.

Why the task commits, and not the driver
----------------------------------------
The other EOS shape, used by Flink's KafkaSink, prepares in the task and commits in the driver. The task
would flush and hand (transactional id, producer id, epoch) to the driver in its commit message, and the
driver's `commit(messages, batchId)` would send EndTxn for each. It fits Spark badly:

* Speculation and retries break it. A second attempt must fence the first to take the id over. If the
  driver then receives the first attempt's message, its commit is refused: a failed query instead of a
  duplicate. Giving each attempt its own id avoids the fencing, but then nothing aborts the losers'
  prepared transactions until they time out. Until then, their open transactions hold the last stable
  offset of every partition they wrote to.
* It still needs progress records. Spark replays a batch whose `commits/N` file is missing even when the
  driver had committed all of its transactions. So the dedup offset above is needed anyway, and the
  driver's commit is not atomic across tasks either: N transactions are ended one by one.
* Every output partition's last stable offset would be held from a task's first write until the driver's
  commit: the whole micro-batch, for every read_committed consumer.
* The driver would send EndTxn for a producer that it does not run. Kafka's clients have no API for that
  (KIP-939 is only starting to add one), so it would be a private protocol.

Committing in the task leaves the driver's `commit(messages, batchId)` nothing to make visible. It is
idempotent because it writes nothing: a repeated call for the same batch, or one for a replayed batch
whose tasks all skipped, is harmless. The price is that a batch's tasks become visible one by one, before
Spark records the batch: a read_committed consumer can see part of batch N while batch N is still running.
If the query then dies and is restarted, the replay publishes only the tasks that are missing. This is
the same visibility Spark's own Kafka sink has, without its duplicates.

What it needs
-------------
* **A replay presents the same rows to the same task.** Spark guarantees this for a deterministic query
  over a replayable source, because a replayed batch has the same offsets and the same plan. A column
  from `rand()` or `current_timestamp()` defeats any sink's dedup.
* **Consumers read with `isolation.level=read_committed`.** A read_uncommitted consumer also sees the
  records of aborted attempts.
* **A task writes within `transaction.timeout.ms`** (set it with `kafka.transaction.timeout.ms`; the
  default is 60 s). When a task takes longer, the coordinator aborts its transaction, and the task fails
  and is retried.
* **ACLs**, where the broker has them: Write on the transactional ids with prefix `odradek-spark-sink.`,
  Read on the groups with that prefix, and Read on the commit topic.

The commit topic (option `sink.commitTopic`, default `_odradek-spark-sink-commits`) never holds records.
It exists because an offset must name an existing partition, and it is created on first use.

What was here before
--------------------
Before the broker had transactions, this sink got exactly-once from intent and commit-marker records in
the commit topic and a tag header on every record. A rerun scanned the output for its own tagged records
and skipped rows by digest. That path is gone; it does not earn its place:

* It was weaker. Speculative execution could publish twice, and it also needed the same rows per task.
* It was slower. An intent had to be written before a task's first record to each topic, a rerun had to
  scan its output, and every record carried a header.
* A broker without transactions is not a case worth keeping it for. Odradek has transactions, and so has
  Kafka since 0.11. For a broker that refuses them (e.g. ACLs that deny the transactional id), the task
  fails with an error that names the cause and points to `sink.exactlyOnce=false`: at-least-once, as
  Spark's own sink.

Everything here talks to Kafka through the small `TaskTransaction` interface, so the protocol is
unit-tested against an in-memory fake with fencing, and `KafkaTaskTransaction` is the real one.
"""

from __future__ import annotations

import itertools
import logging
import random
import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Protocol

from odradek.client.cluster import TopicPartition
from odradek.client.errors import ErrorCode, KafkaError
from odradek.client.group import fetch_committed_offsets
from odradek.client.producer import Producer, TransactionState

from . import _kafka
from .arrow import rows_from_batch
from .columnar import encode_for_partitions

log = logging.getLogger("odradek.pipeline")

TXN_ID_PREFIX = "odradek-spark-sink"
CHUNK = 2_000
PROGRESS_PARTITION = 0

Row = tuple  # (topic, partition or None, key, value, headers)

__all__ = ["KafkaTaskTransaction", "SinkTransactionError", "TaskOutcome", "TaskTransaction", "progress_group",
           "transactional_id", "write_task"]


class SinkTransactionError(RuntimeError):
    """The broker refused the sink's transaction (not a retriable condition: the query must change)."""


def transactional_id(query_id: str, task: int) -> str:
    """The transactional id of task `task` of the streaming query, the same for all its attempts and runs."""
    return f"{TXN_ID_PREFIX}.{query_id}.{task}"


def progress_group(query_id: str, task: int) -> str:
    """The consumer group whose committed offset is the next batch id this task has to write."""
    return f"{TXN_ID_PREFIX}.{query_id}.{task}"


class TaskTransaction(Protocol):
    """One task's transactional producer, for one attempt; every call blocks."""

    def init(self) -> None:
        """InitProducerId: fence earlier holders of the id; return once their transaction is complete."""

    def next_batch(self) -> int:
        """The committed progress offset (a stable read): the next batch id to write, 0 when none."""

    def begin(self) -> None: ...

    def send(self, rows: Any) -> None:
        """Queue rows (a list of rows, or an Arrow batch) in the open transaction; delivery errors surface in
        commit()."""

    def commit(self, next_batch: int) -> None:
        """Add the progress offset to the transaction, deliver every row, and commit (EndTxn)."""

    def abort(self) -> None:
        """Best effort: abort the open transaction (a fenced attempt cannot, and need not)."""


@dataclass
class TaskOutcome:
    """What a task reports to the driver (inside its WriterCommitMessage)."""

    query_id: str
    batch_id: int
    task: int
    published: int = 0
    skipped: int = 0  # rows an earlier attempt or run of this task had committed already


def write_task(txn: TaskTransaction, query_id: str, batch_id: int, task: int, rows: Iterable[Row]) -> TaskOutcome:
    """Write one task's rows of micro-batch `batch_id` in one transaction, unless they are committed already."""
    return write_chunks(txn, query_id, batch_id, task, _chunked(rows))


def _chunked(rows: Iterable[Row]) -> Iterator[list[Row]]:
    chunk: list[Row] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _size(chunk: Any) -> int:
    return chunk.num_rows if hasattr(chunk, "num_rows") else len(chunk)


def write_chunks(txn: TaskTransaction, query_id: str, batch_id: int, task: int, chunks: Iterable[Any]) -> TaskOutcome:
    """`write_task` for input in chunks: lists of rows, or the Arrow batches Spark hands the writer (which
    `KafkaTaskTransaction.send` encodes column-wise, pipeline/columnar.py)."""
    outcome = TaskOutcome(query_id, batch_id, task)
    sized = (c for c in chunks if _size(c))
    first = next(sized, None)
    if first is None:
        return outcome  # nothing to write; an earlier attempt had nothing either (same rows)
    txn.init()
    if txn.next_batch() > batch_id:
        outcome.skipped = _size(first) + sum(_size(c) for c in sized)  # drain: Spark expects the input consumed
        return outcome
    txn.begin()
    try:
        for chunk in itertools.chain([first], sized):
            txn.send(chunk)
            outcome.published += _size(chunk)
        txn.commit(batch_id + 1)
    except BaseException:
        try:
            txn.abort()
        except Exception:  # noqa: BLE001 - the original error is the one to report
            log.debug("abort after a failed sink task failed too", exc_info=True)
        raise
    return outcome


# ---------------------------------------------------------------------------------------- over Kafka

# What a broker answers when it will not give the sink a transaction: retrying cannot help.
_REFUSALS = frozenset({ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                       ErrorCode.UNSUPPORTED_VERSION, ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT})


class KafkaTaskTransaction:
    """TaskTransaction on the bundled asyncio Producer, from this process's cache (`_kafka.TxnProducers`)."""

    def __init__(self, client: Any, txn_id: str, group: str, commit_topic: str, topic_option: str | None = None):
        self.client = client
        self.topic_option = topic_option
        self.txn_id = txn_id
        self.group = group
        self.commit_topic = commit_topic
        self._producers: Any = None
        self._producer: Any = None
        self._queueing: Any = None  # the future of the previous Arrow batch's queueing, if still running
        self._partition_counts: dict[str, int] = {}

    def _run(self, coro: Any) -> Any:
        self._queued()
        return self._producers.run(coro)

    def _queued(self) -> None:
        """Wait until the previous Arrow batch is queued in the producer (its errors surface here)."""
        pending, self._queueing = self._queueing, None
        if pending is not None:
            pending.result()

    def init(self) -> None:
        _kafka.ensure_commit_topic(self.client, self.commit_topic)
        self._producers = _kafka.txn_producers_for(self.client)
        self._producer = self._producers.get(self.txn_id)
        if self._producer.transaction_state not in (TransactionState.UNINITIALIZED, TransactionState.READY):
            # A cached producer an earlier task left mid-transaction: start from a fresh one (the id's
            # open transaction, if any, is aborted by the InitProducerId below either way).
            self._producers.evict(self.txn_id)
            self._producer = self._producers.get(self.txn_id)
        try:
            self._run(self._producer.init_transactions())
        except KafkaError as e:
            self._producers.evict(self.txn_id)
            if e.code in _REFUSALS:
                raise SinkTransactionError(
                    f"the broker refused the sink's transactional id {self.txn_id!r} ({e}). The exactly-once "
                    "sink needs transactions (and, with ACLs, Write on the transactional ids with prefix "
                    f"'{TXN_ID_PREFIX}.'); set sink.exactlyOnce=false for at-least-once writes") from e
            raise
        except BaseException:
            self._producers.evict(self.txn_id)
            raise

    def next_batch(self) -> int:
        anchor = TopicPartition(self.commit_topic, PROGRESS_PARTITION)
        found = self._run(fetch_committed_offsets(self._producer.client, self.group, [anchor], require_stable=True))
        committed = found.get(anchor)
        return 0 if committed is None else committed.offset

    def begin(self) -> None:
        self._producer.begin_transaction()

    def send(self, rows: Any) -> None:
        """Rows as a list go record by record; an Arrow batch is encoded column-wise here while the loop
        thread still queues the previous one (one batch ahead, so each partition's pieces stay in order,
        as `BulkProducer.send_arrow` does), and a topic's partition count is looked up once per task."""
        if isinstance(rows, list):
            self._run(_send_rows(self._producer, rows))
            return
        producer = self._producer

        def partition_count(topic: str) -> int:
            if topic not in self._partition_counts:
                self._partition_counts[topic] = len(self._run(producer.partitions_for(topic)))
            return self._partition_counts[topic]

        pieces = encode_for_partitions(rows, topic_option=self.topic_option, partition_count=partition_count,
                                       batch_size=producer.config.batch_size, now_ms=int(time.time() * 1000),
                                       rng=random)
        if pieces is None:
            self._run(_send_rows(producer, list(rows_from_batch(rows, topic_option=self.topic_option))))
        else:
            self._queued()
            self._queueing = self._producers.submit(_send_encoded(producer, pieces))

    def commit(self, next_batch: int) -> None:
        anchor = TopicPartition(self.commit_topic, PROGRESS_PARTITION)
        try:
            self._run(self._producer.send_offsets_to_transaction({anchor: next_batch}, self.group))
            self._run(self._producer.commit_transaction())
        except BaseException:
            if self._fatal():
                self._producers.evict(self.txn_id)
            raise

    def abort(self) -> None:
        if self._producer is None:
            return
        try:
            self._queued()
        except BaseException:  # noqa: BLE001 - the batch is being aborted; its first error was reported
            log.debug("queueing the last batch failed too", exc_info=True)
        if self._fatal():
            self._producers.evict(self.txn_id)  # fenced: a newer attempt owns the id; nothing to abort
            return
        if self._producer.transaction_state in (TransactionState.IN_TRANSACTION, TransactionState.COMMITTING):
            try:
                self._run(self._producer.abort_transaction())
            except BaseException:
                self._producers.evict(self.txn_id)
                raise

    def _fatal(self) -> bool:
        return self._producer.transaction_state is TransactionState.FATAL_ERROR


async def _send_encoded(producer: Producer, pieces: list) -> None:
    for topic, partition, records in pieces:
        await producer.send_encoded(topic, partition, records)


async def _send_rows(producer: Producer, rows: list[Row]) -> None:
    send = producer.send
    for topic, partition, key, value, headers, *timestamp in rows:
        await send(topic, value, key, partition=partition, headers=headers,
                   timestamp_ms=timestamp[0] if timestamp else None)
