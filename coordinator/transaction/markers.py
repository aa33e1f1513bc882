"""Ending a transaction: the markers, then the Complete state (Kafka's TransactionMarkerChannelManager).

Theory of operation
-------------------
A transaction ends in two writes to `__transaction_state` with the markers between them. The shard writes
PrepareCommit/PrepareAbort (EndTxn, a timeout, an operator's abort, a producer re-initialising over an open
transaction); once that record is durable it hands a `MarkerJob` to this manager (its `MarkerSink`), and
from there the manager drives every step itself:

  1. group the partitions still without a marker by their leader in the current metadata image and send
     each leader one WriteTxnMarkers (through the broker's `MarkerChannel`: the network, or this broker's
     own handler in process). A partition whose topic is gone is done (Kafka skips markers for deleted
     partitions); a leaderless one waits for the next round.
  2. read each partition's answer: NONE is written; a retriable error (leader moved, not enough replicas,
     timeout, a node down) is kept for the next round, after a backoff that doubles from 10 ms up to a
     second; INVALID_PRODUCER_EPOCH, PRODUCER_FENCED or TRANSACTION_COORDINATOR_FENCED mean a newer producer
     epoch or coordinator has taken over: the job stops without completing (the newer owner finishes it);
     any other error is logged and the partition given up.
  3. when every partition has its marker, write CompleteCommit/CompleteAbort (`complete`, the
     coordinator's `on_markers_written`). While `__transaction_state` refuses it (COORDINATOR_NOT_AVAILABLE:
     its ISR below min.insync.replicas, or not replicated within request.timeout.ms) it is written again
     after the same doubling backoff, as Kafka's retry queue of log appends does, so a Prepare state
     completes once the ISR is back. NOT_COORDINATOR ends the job: the partition's new leader completes it.

Losing the coordinator partition cancels its jobs (answers still in flight are ignored); the new leader
resumes them from the Prepare state it loads. Every step after the first runs from the runtime's timer
(backoffs, and the first round, so that nothing is sent or written from inside the Prepare write's own
completion) or from an answer the channel reports.

The walk of a commit, before and after
--------------------------------------
Before, the sequencing lived in the broker (broker/txn_wiring.py's MarkerSender, one asyncio task per
job), so a commit went coordinator -> broker -> coordinator three times:

    handlers/transactions.end_txn -> TransactionCoordinator.end_txn -> runtime.write (Prepare)
    -> TransactionShard._send_markers -> [broker] MarkerSender.send (a task) -> MarkerSender._run (leaders
    from the image, WriteTxnMarkers per leader, error classes, asyncio.sleep backoffs)
    -> [coordinator] TransactionCoordinator.on_markers_written (the Complete write)
    -> [broker] MarkerSender._complete (awaits it, retries COORDINATOR_NOT_AVAILABLE with asyncio.sleep)

After, the broker is reached only through the channel's socket work:

    handlers/transactions.end_txn -> TransactionCoordinator.end_txn -> runtime.write (Prepare)
    -> TransactionShard._send_markers -> TransactionMarkerChannelManager.send -> (timer) _round: leaders
    from the image, one request per leader -> [broker port] MarkerChannel.send (the network)
    -> _answered: error classes; a retry -> (timer) _round, or -> _complete
    -> TransactionCoordinator.on_markers_written (the Complete write); refused -> (timer) _complete again

Time is the caller's: the channel's `now_ms()`, and the runtime's timing wheel for the waits; the
channel's `timers_changed()` lets the broker re-arm its wake-up after a task was added.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from odradek.metadata.image import MetadataImage
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from odradek.purgatory.deferred import Deferred
from odradek.purgatory.timing_wheel import Timer, TimerTask

from .shard import MarkerJob

__all__ = ["MarkerChannel", "TransactionMarkerChannelManager", "marker_request", "marker_results"]

log = structlog.get_logger("odradek.txn_markers")

FIRST_BACKOFF_MS = 10
MAX_BACKOFF_MS = 1000
RETRIABLE = frozenset({
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.KAFKA_STORAGE_ERROR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR,
    ErrorCode.UNKNOWN_SERVER_ERROR, ErrorCode.FENCED_LEADER_EPOCH,
})
STOP = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED, ErrorCode.TRANSACTION_COORDINATOR_FENCED})

Marker = WriteTxnMarkersRequest.WritableTxnMarker
MarkerTopic = Marker.WritableTxnMarkerTopic
TopicPartitionKey = tuple[str, int]


class MarkerChannel(Protocol):
    """The broker's side of the markers: the network, and the broker's clock and timer wake-up."""

    def send(self, leader_id: int, request: WriteTxnMarkersRequest,
             done: Callable[[WriteTxnMarkersResponse | None], None]) -> None:
        """Send `request` to `leader_id` (this broker: its own handler, in process) and, later, call
        `done` with the response, or None when it could not be had (a node down, a connection lost, a
        timeout); then re-arm the timer, as after `timers_changed`."""

    def now_ms(self) -> int:
        """The broker's clock."""

    def timers_changed(self) -> None:
        """A task was added to the timer: the broker re-arms its wake-up for the wheel's next deadline."""


def marker_request(job: MarkerJob, partitions: Iterable[TopicPartitionKey]) -> WriteTxnMarkersRequest:
    """The WriteTxnMarkers (one marker) for `job`'s `partitions` led by one broker."""
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    return WriteTxnMarkersRequest(markers=[Marker(
        producer_id=job.producer_id, producer_epoch=job.producer_epoch, transaction_result=job.committed,
        topics=[MarkerTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()],
        coordinator_epoch=job.coordinator_epoch)])


def marker_results(partitions: Iterable[TopicPartitionKey],
                   response: WriteTxnMarkersResponse | None) -> dict[TopicPartitionKey, ErrorCode]:
    """Each partition's code in `response`: REQUEST_TIMED_OUT for one it does not answer (or no response)."""
    errors = {tp: ErrorCode.REQUEST_TIMED_OUT for tp in partitions}
    if response is None:
        return errors
    for marker in response.markers:
        for topic in marker.topics:
            for p in topic.partitions:
                if (topic.name, p.partition_index) in errors:
                    try:
                        errors[(topic.name, p.partition_index)] = ErrorCode(p.error_code)
                    except ValueError:
                        errors[(topic.name, p.partition_index)] = ErrorCode.UNKNOWN_SERVER_ERROR
    return errors


@dataclass(eq=False, slots=True)
class _Job:
    job: MarkerJob
    pending: set[TopicPartitionKey]
    backoff_ms: int = FIRST_BACKOFF_MS
    cancelled: bool = False
    task: TimerTask | None = None  # the step waiting on the timer
    answers: list[dict[TopicPartitionKey, ErrorCode] | None] = field(default_factory=list)  # this round's
    waiting: int = 0  # requests of this round not answered yet


class TransactionMarkerChannelManager:
    """The shards' `MarkerSink`: sends the markers of ended transactions and completes them; see the module doc.

    `image()` is the current metadata image (where each partition's leader is); `complete(job, now_ms)`
    writes the Complete state (TransactionCoordinator.on_markers_written)."""

    def __init__(self, channel: MarkerChannel, timer: Timer, *, image: Callable[[], MetadataImage],
                 complete: Callable[[MarkerJob, int], Deferred[ErrorCode]]) -> None:
        self.channel = channel
        self._timer = timer
        self._image = image
        self._complete_write = complete
        self._jobs: dict[int, set[_Job]] = {}
        self.markers_written = 0

    # -- MarkerSink --

    def send(self, job: MarkerJob) -> None:
        j = _Job(job, set(job.partitions))
        self._jobs.setdefault(job.txn_partition, set()).add(j)
        self._later(j, self._round, 0)  # never from inside the Prepare write's completion

    def cancel(self, txn_partition: int) -> None:
        for j in self._jobs.pop(txn_partition, set()):
            j.cancelled = True
            if j.task is not None:
                j.task.cancel()

    def close(self) -> None:
        for txn_partition in list(self._jobs):
            self.cancel(txn_partition)

    @property
    def jobs(self) -> int:
        """Transactions whose markers or Complete write are still under way."""
        return sum(len(js) for js in self._jobs.values())

    # -- the steps --

    def _round(self, j: _Job) -> None:
        """Send one WriteTxnMarkers to each leader of the partitions still without a marker."""
        image = self._image()
        by_leader: dict[int, list[TopicPartitionKey]] = {}
        for topic, index in sorted(j.pending):
            t = image.topics_by_name.get(topic)
            p = t.partitions.get(index) if t is not None else None
            if p is None:
                j.pending.discard((topic, index))  # deleted: nothing left to mark
            elif p.leader >= 0:
                by_leader.setdefault(p.leader, []).append((topic, index))
        if not by_leader:
            self._round_done(j)
            return
        j.answers = [None] * len(by_leader)
        j.waiting = len(by_leader)
        for slot, (leader, partitions) in enumerate(by_leader.items()):
            self.channel.send(leader, marker_request(j.job, partitions), functools.partial(self._answered, j, slot,
                                                                                               partitions))

    def _answered(self, j: _Job, slot: int, partitions: list[TopicPartitionKey],
                  response: WriteTxnMarkersResponse | None) -> None:
        if j.cancelled:
            return
        j.answers[slot] = marker_results(partitions, response)
        j.waiting -= 1
        if j.waiting:
            return
        job = j.job
        for errors in j.answers:
            for tp, code in (errors or {}).items():
                if code == ErrorCode.NONE:
                    j.pending.discard(tp)
                    self.markers_written += 1
                elif code in STOP:
                    log.info("transaction markers superseded", transactional_id=job.transactional_id,
                             partition=tp, error=code.name)
                    self._finished(j)
                    return
                elif code not in RETRIABLE:
                    log.warning("transaction marker refused; not retried", transactional_id=job.transactional_id,
                                partition=tp, error=code.name)
                    j.pending.discard(tp)
        self._round_done(j)

    def _round_done(self, j: _Job) -> None:
        if j.pending:
            self._later(j, self._round, j.backoff_ms)  # a retry backoff: leaders move, nodes come back
            j.backoff_ms = min(j.backoff_ms * 2, MAX_BACKOFF_MS)
        else:
            j.backoff_ms = FIRST_BACKOFF_MS  # the Complete write's own backoff
            self._complete(j)

    def _complete(self, j: _Job) -> None:
        """Write the Complete state; again, after a backoff, while `__transaction_state` cannot take it."""
        written = self._complete_write(j.job, self.channel.now_ms())
        written.add_callback(lambda d: self._completed(j, d.result()))

    def _completed(self, j: _Job, code: ErrorCode) -> None:
        if j.cancelled:
            return
        if code is not ErrorCode.COORDINATOR_NOT_AVAILABLE:
            if code is not ErrorCode.NONE:  # NOT_COORDINATOR: the partition's new leader completes it
                log.info("transaction not completed here", transactional_id=j.job.transactional_id, error=code.name)
            self._finished(j)
            return
        log.debug("completing the transaction must wait", transactional_id=j.job.transactional_id)
        self._later(j, self._complete, j.backoff_ms)  # a retry backoff: the ISR grows back
        j.backoff_ms = min(j.backoff_ms * 2, MAX_BACKOFF_MS)

    def _later(self, j: _Job, step: Callable[[_Job], None], delay_ms: int) -> None:
        def run() -> None:
            j.task = None
            if not j.cancelled:
                step(j)

        j.task = TimerTask(self.channel.now_ms() + delay_ms, run)
        self._timer.add(j.task)
        self.channel.timers_changed()

    def _finished(self, j: _Job) -> None:
        jobs = self._jobs.get(j.job.txn_partition)
        if jobs is not None:
            jobs.discard(j)
            if not jobs:
                del self._jobs[j.job.txn_partition]
