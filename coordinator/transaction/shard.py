"""One partition of `__transaction_state`: the transactional ids that hash to it, as a replicated state machine.

Theory of operation
-------------------
The replicated state is one table, `transactions: transactional id -> TransactionMetadata`, changed only
by `replay(record)`. Every operation reads the table, decides (Kafka's TransactionCoordinator rules, with
its error codes) and returns the record of the id's next state; the runtime writes it, replays it and
releases the response once it is durable. An operation that only answers writes nothing.

A transaction is ended in two writes: EndTxn (or a timeout, or a producer re-initialising over an open
transaction) writes PrepareCommit/PrepareAbort; once that is durable the markers are handed to the
`MarkerSink` (markers.py: WriteTxnMarkers to every partition's leader); when all are written,
`complete` writes CompleteCommit/CompleteAbort. A shard loaded in a Prepare state (a new coordinator after
a failover) hands its markers to the sink again: writing a marker twice is harmless (the partition
ignores a marker for a transaction it has already closed).

Timers (on the runtime's wheel, time as argument): each Ongoing transaction has one at its start plus its
timeout, which aborts it with an epoch bump (the producer is fenced: its later writes fail and it must
re-initialise, Kafka's behaviour); every `remove_expired_transaction_cleanup_interval_ms` idle ids older
than `transactional.id.expiration.ms` are tombstoned.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import structlog

from odradek.protocol.errors import ErrorCode

from ..runtime import Batch, Result
from .config import TransactionCoordinatorConfig
from .metadata import (
    INT16_MAX,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TV_0,
    TV_2,
    TransactionMetadata,
    TransactionState,
    is_epoch_exhausted,
)
from .records import TransactionRecord

if TYPE_CHECKING:
    from ..runtime import CoordinatorRuntime

__all__ = ["MarkerJob", "MarkerSink", "TransactionShard", "InitResult", "EndResult", "TransactionCounts"]

log = structlog.get_logger("odradek.coordinator.transaction")

S = TransactionState
_EXPIRE_KEY = "expire-transactional-ids"


@dataclass(frozen=True, slots=True)
class MarkerJob:
    """Markers to write for one ended transaction: what WriteTxnMarkers carries, and where it came from."""

    txn_partition: int
    coordinator_epoch: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    committed: bool
    partitions: frozenset[tuple[str, int]]


class MarkerSink(Protocol):
    def send(self, job: MarkerJob) -> None:
        """Write the job's markers (retrying until every partition has it), then the Complete state (the
        coordinator's `on_markers_written`); markers.TransactionMarkerChannelManager."""

    def cancel(self, txn_partition: int) -> None:
        """Stop the jobs of a partition this broker no longer coordinates."""


@dataclass(slots=True)
class TransactionCounts:
    """Transactions this coordinator ended since it started, counted once the ending record is durable (a
    write the log refused ended nothing): `committed` and `aborted` reached CompleteCommit / CompleteAbort here
    (whoever asked: EndTxn, a timeout, an operator, a producer re-initialising); `timed_out` had their
    PrepareAbort written because transaction.timeout.ms passed (they are counted in `aborted` too once their
    markers are written); `epoch_bumps` and `producer_ids_rotated` count Transactions V2 ends. The coordinator's,
    not a shard's: a partition moving away takes its shard, not the
    counts, so they only grow, as Prometheus counters must."""

    committed: int = 0
    aborted: int = 0
    timed_out: int = 0
    # Transactions V2 (EndTxn v5): ends whose Prepare (with the epoch bump) is durable, and of those the ones
    # that moved to a new producer id (the epoch ran out)
    epoch_bumps: int = 0
    producer_ids_rotated: int = 0


@dataclass(frozen=True, slots=True)
class InitResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class EndResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


def _timeout_key(transactional_id: str) -> tuple[str, str]:
    return ("timeout", transactional_id)


class TransactionShard:
    def __init__(self, partition: int, config: TransactionCoordinatorConfig, *,
                 next_producer_id: Callable[[], int | None], markers: MarkerSink,
                 runtime: CoordinatorRuntime | None = None, coordinator_epoch: int = 0,
                 counts: TransactionCounts | None = None) -> None:
        self.partition = partition
        self.counts = counts if counts is not None else TransactionCounts()
        self.config = config
        self.coordinator_epoch = coordinator_epoch
        self._next_producer_id = next_producer_id
        self._markers = markers
        self._runtime = runtime
        self.transactions: dict[str, TransactionMetadata] = {}  # replicated: changed by replay() only

    # ------------------------------------------------------------------------------------------------
    # Replication

    def replay(self, record: TransactionRecord) -> None:
        if record.metadata is None:
            self.transactions.pop(record.transactional_id, None)
        else:
            self.transactions[record.transactional_id] = record.metadata

    def on_loaded(self, now_ms: int) -> None:
        for metadata in self.transactions.values():
            if metadata.state.is_prepare:
                self._send_markers(metadata)
            elif metadata.state is S.ONGOING:
                self._schedule_timeout(metadata)
        self._schedule_expiration(now_ms)

    def on_unloaded(self) -> None:
        self._markers.cancel(self.partition)

    # ------------------------------------------------------------------------------------------------
    # InitProducerId (22)

    def init_producer_id(self, transactional_id: str, txn_timeout_ms: int, expected: tuple[int, int] | None,
                         now_ms: int) -> Result:
        out = Batch()
        metadata = self.transactions.get(transactional_id)
        if metadata is None:
            producer_id = self._next_producer_id()
            if producer_id is None:  # a block of ids is on its way from the controller: the client retries
                return out.result(InitResult(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))
            metadata = TransactionMetadata(transactional_id, producer_id, NO_PRODUCER_EPOCH, txn_timeout_ms,
                                           txn_last_update_timestamp_ms=now_ms)
        if expected is not None and not _is_valid_producer_id(metadata, *expected):
            return out.result(InitResult(ErrorCode.PRODUCER_FENCED))
        state = metadata.state
        if state.is_prepare:
            return out.result(InitResult(ErrorCode.CONCURRENT_TRANSACTIONS))
        if state is S.ONGOING:
            # Abort the open transaction under a bumped epoch (fencing its producer) and let the client retry:
            # the retry bumps the epoch again, so the epoch returned is never one the markers used.
            fenced = metadata.prepare_end(False, now_ms, fence=True)
            self._write(out, fenced, send_markers=True)
            return out.result(InitResult(ErrorCode.CONCURRENT_TRANSACTIONS))
        after: TransactionMetadata | None
        if is_epoch_exhausted(metadata.producer_epoch) and (expected is None or expected[1] == metadata.producer_epoch):
            producer_id = self._next_producer_id()
            if producer_id is None:
                return out.result(InitResult(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))
            after = metadata.rotate_producer_id(producer_id, txn_timeout_ms, now_ms, expected is not None)
        else:
            after = metadata.bump_epoch(txn_timeout_ms, None if expected is None else expected[1], now_ms)
            if after is None:
                return out.result(InitResult(ErrorCode.PRODUCER_FENCED))
        self._write(out, after)
        return out.result(InitResult(ErrorCode.NONE, after.producer_id, after.producer_epoch))

    # ------------------------------------------------------------------------------------------------
    # AddPartitionsToTxn (24), AddOffsetsToTxn (25)

    def _check_producer(self, metadata: TransactionMetadata | None, producer_id: int, producer_epoch: int) -> ErrorCode | None:
        if metadata is not None and metadata.state.is_prepare and producer_id == metadata.next_producer_id != NO_PRODUCER_ID:
            # A Transactions V2 client already on the producer id its last end moves to, before Complete
            # switched to it (Kafka checks the pending transition first for this): wait, not a wrong mapping.
            return ErrorCode.CONCURRENT_TRANSACTIONS
        if metadata is None or metadata.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if metadata.producer_epoch != producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if metadata.state.is_prepare:
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return None

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[tuple[str, int]], now_ms: int,
                       client_transaction_version: int | None = None) -> Result:
        """Response: the error code for every partition of the request. `client_transaction_version`: TV_2
        when a partition leader adds the partition for Produce v12+ (AddPartitionsToTxn v5), TV_0 for a
        client's own AddPartitionsToTxn (v3 at most), None to keep the transaction's (AddOffsetsToTxn)."""
        out = Batch()
        metadata = self.transactions.get(transactional_id)
        error = self._check_producer(metadata, producer_id, producer_epoch)
        if error is not None:
            return out.result(error)
        assert metadata is not None  # _check_producer refuses a missing one
        partitions = frozenset(partitions)
        if metadata.state is S.ONGOING and partitions <= metadata.partitions:
            return out.result(ErrorCode.NONE)
        after = metadata.add_partitions(partitions, now_ms, client_transaction_version)
        self._write(out, after)
        if metadata.state is not S.ONGOING:
            self._schedule_timeout(after)
        return out.result(ErrorCode.NONE)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], ErrorCode]:
        """AddPartitionsToTxn v4+ with verify_only (KIP-890): is each partition in the open transaction?"""
        metadata = self.transactions.get(transactional_id)
        error = self._check_producer(metadata, producer_id, producer_epoch)
        if error is not None:
            return {tp: error for tp in partitions}
        assert metadata is not None  # _check_producer refuses a missing one
        return {tp: ErrorCode.NONE if tp in metadata.partitions and metadata.state is S.ONGOING
                else ErrorCode.TRANSACTION_ABORTABLE for tp in partitions}

    # ------------------------------------------------------------------------------------------------
    # EndTxn (26), and the coordinator's own aborts

    def end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                        now_ms: int, client_transaction_version: int = TV_0) -> Result:
        """EndTxn, Kafka's TransactionCoordinator.endTransaction. With `client_transaction_version` TV_2
        (EndTxn v5) the end bumps the epoch (metadata.py) and the answer carries the producer id and epoch the
        client goes on with; a retry is recognised by the epoch it presents being the one before the bump
        (or the last one of the previous producer id, after a rotation), and is answered the current ones.
        A TV_2 client may abort a transaction that never opened here (it cannot know whether a partition
        leader added a partition): that still bumps the epoch."""
        out = Batch()
        metadata = self.transactions.get(transactional_id)
        if metadata is None:
            return out.result(EndResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING))
        tv2 = client_transaction_version >= TV_2
        retry_on_overflow = (tv2 and metadata.previous_producer_id == producer_id
                             and producer_epoch == INT16_MAX - 1 and metadata.producer_epoch == 0)
        retry_on_bump = tv2 and metadata.producer_id == producer_id and metadata.producer_epoch == producer_epoch + 1
        is_retry = retry_on_overflow or retry_on_bump
        current = EndResult(ErrorCode.NONE, metadata.producer_id, metadata.producer_epoch)
        state = metadata.state
        if state.is_prepare and metadata.next_producer_id == producer_id:
            # (a client on the id a rotation is moving it to, before Complete switched: Kafka's pending check)
            return out.result(EndResult(ErrorCode.CONCURRENT_TRANSACTIONS))
        if metadata.producer_id != producer_id and not retry_on_overflow:
            return out.result(EndResult(ErrorCode.INVALID_PRODUCER_ID_MAPPING))
        if metadata.producer_epoch != producer_epoch and not is_retry:
            return out.result(EndResult(ErrorCode.PRODUCER_FENCED))
        if state is S.ONGOING and not is_retry:
            if not commit:
                log.info("transaction aborted", transactional_id=transactional_id, producer_id=producer_id,
                         producer_epoch=producer_epoch, partitions=len(metadata.partitions), cause="EndTxn")
            return self._prepare_end(out, metadata, commit, now_ms, client_transaction_version)
        done = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        preparing = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
        if state is preparing:
            return out.result(EndResult(ErrorCode.CONCURRENT_TRANSACTIONS))
        if not tv2:
            if state is done:  # a retry of an EndTxn that was answered already
                return out.result(current)
            return out.result(EndResult(ErrorCode.INVALID_TXN_STATE))
        if is_retry:  # Transactions V2: the previous end, asked again
            if state is done:
                return out.result(current)
            # Ended (or ending) the other way: INVALID_TXN_STATE, as Kafka; Empty or Ongoing: the epoch after the
            # presented one is another producer's (an InitProducerId bumped it), not this end's.
            return out.result(EndResult(ErrorCode.PRODUCER_FENCED if state in (S.EMPTY, S.ONGOING)
                                        else ErrorCode.INVALID_TXN_STATE))
        if not commit and state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            return self._prepare_end(out, metadata, False, now_ms, client_transaction_version)
        return out.result(EndResult(ErrorCode.INVALID_TXN_STATE))

    def _prepare_end(self, out: Batch, metadata: TransactionMetadata, commit: bool, now_ms: int,
                     client_transaction_version: int) -> Result:
        next_producer_id = NO_PRODUCER_ID
        if client_transaction_version >= TV_2 and is_epoch_exhausted(metadata.producer_epoch):
            allocated = self._next_producer_id()
            if allocated is None:  # a block of ids is on its way from the controller: the client retries
                return out.result(EndResult(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS))
            next_producer_id = allocated
            log.info("producer epoch exhausted: the transaction ends on a new producer id",
                     transactional_id=metadata.transactional_id, producer_id=metadata.producer_id,
                     producer_epoch=metadata.producer_epoch, next_producer_id=allocated)
        after = metadata.prepare_end(commit, now_ms, client_transaction_version=client_transaction_version,
                                     next_producer_id=next_producer_id)
        self._write(out, after, send_markers=True)
        if client_transaction_version >= TV_2:
            counts, rotated = self.counts, next_producer_id != NO_PRODUCER_ID

            def count(error: BaseException | None) -> None:
                if error is None:
                    counts.epoch_bumps += 1
                    counts.producer_ids_rotated += rotated

            out.callbacks.append(count)
        return out.result(EndResult(ErrorCode.NONE, *after.answered_producer))

    def abort_timed_out(self, transactional_id: str, producer_id: int, now_ms: int) -> Result:
        """The timer of an Ongoing transaction fired: abort it, fencing its producer with an epoch bump."""
        out = Batch()
        metadata = self.transactions.get(transactional_id)
        if (metadata is None or metadata.state is not S.ONGOING or metadata.producer_id != producer_id
                or metadata.txn_start_timestamp_ms + metadata.txn_timeout_ms > now_ms):
            return out.result(None)
        log.warning("transaction timed out; aborting it", transactional_id=transactional_id, producer_id=producer_id,
                    producer_epoch=metadata.producer_epoch, txn_timeout_ms=metadata.txn_timeout_ms,
                    partitions=len(metadata.partitions))
        self._write(out, metadata.prepare_end(False, now_ms, fence=True), send_markers=True)
        retry_at_ms = now_ms + self.config.abort_timed_out_transaction_cleanup_interval_ms

        def retry_if_refused(error: BaseException | None) -> None:
            # The log refused the abort (ISR below min.insync.replicas): the transaction is still Ongoing and
            # its timer has fired; Kafka's next scan tries again, so does this timer.
            if error is not None:
                self._schedule_timeout(metadata, at_ms=retry_at_ms)
            else:
                self.counts.timed_out += 1

        out.callbacks.append(retry_if_refused)
        return out.result(None)

    def abort(self, transactional_id: str, now_ms: int) -> Result:
        """An operator's abort of an Ongoing transaction (the producer is fenced, as by a timeout)."""
        out = Batch()
        metadata = self.transactions.get(transactional_id)
        if metadata is None:
            return out.result(ErrorCode.TRANSACTIONAL_ID_NOT_FOUND)
        if metadata.state is not S.ONGOING:
            return out.result(ErrorCode.INVALID_TXN_STATE if not metadata.state.is_prepare else ErrorCode.CONCURRENT_TRANSACTIONS)
        log.warning("transaction aborted", transactional_id=transactional_id, producer_id=metadata.producer_id,
                    producer_epoch=metadata.producer_epoch, partitions=len(metadata.partitions), cause="operator")
        self._write(out, metadata.prepare_end(False, now_ms, fence=True), send_markers=True)
        return out.result(ErrorCode.NONE)

    def complete(self, transactional_id: str, producer_id: int, producer_epoch: int, now_ms: int) -> Result:
        """Every marker of the transaction is written: CompleteCommit / CompleteAbort."""
        out = Batch()
        metadata = self.transactions.get(transactional_id)
        if (metadata is None or not metadata.state.is_prepare or metadata.producer_id != producer_id
                or metadata.producer_epoch != producer_epoch):
            return out.result(False)
        after = metadata.complete(now_ms)
        self._write(out, after)
        counts = self.counts

        def count(error: BaseException | None) -> None:
            if error is None:
                if after.state is S.COMPLETE_COMMIT:
                    counts.committed += 1
                else:
                    counts.aborted += 1

        out.callbacks.append(count)
        return out.result(True)

    # ------------------------------------------------------------------------------------------------
    # Expiration of idle transactional ids

    def expire(self, now_ms: int) -> Result:
        out = Batch()
        horizon_ms = now_ms - self.config.transactional_id_expiration_ms
        for txn_id, metadata in self.transactions.items():
            if metadata.state.is_expiration_allowed and metadata.txn_last_update_timestamp_ms <= horizon_ms:
                out.records.append(TransactionRecord(txn_id, None))
        self._schedule_expiration(now_ms)
        return out.result(len(out.records))

    # ------------------------------------------------------------------------------------------------
    # Reads

    def describe(self, transactional_id: str) -> TransactionMetadata | None:
        return self.transactions.get(transactional_id)

    # ------------------------------------------------------------------------------------------------

    def _write(self, out: Batch, after: TransactionMetadata, *, send_markers: bool = False) -> None:
        out.records.append(TransactionRecord(after.transactional_id, after))
        if send_markers:
            def once_durable(error: BaseException | None) -> None:
                if error is None:
                    self._send_markers(after)

            out.callbacks.append(once_durable)

    def _send_markers(self, metadata: TransactionMetadata) -> None:
        self._markers.send(MarkerJob(self.partition, self.coordinator_epoch, metadata.transactional_id,
                                     metadata.producer_id, metadata.producer_epoch,
                                     metadata.state is S.PREPARE_COMMIT, metadata.partitions))

    def _schedule_timeout(self, metadata: TransactionMetadata, at_ms: int | None = None) -> None:
        if self._runtime is None:
            return
        txn_id, producer_id = metadata.transactional_id, metadata.producer_id
        self._runtime.schedule(self.partition, _timeout_key(txn_id),
                               metadata.txn_start_timestamp_ms + metadata.txn_timeout_ms if at_ms is None else at_ms,
                               lambda shard, now_ms: shard.abort_timed_out(txn_id, producer_id, now_ms))

    def _schedule_expiration(self, now_ms: int) -> None:
        if self._runtime is None:
            return
        self._runtime.schedule(self.partition, _EXPIRE_KEY, now_ms + self.config.remove_expired_transaction_cleanup_interval_ms,
                               lambda shard, at_ms: shard.expire(at_ms))


def _is_valid_producer_id(metadata: TransactionMetadata, producer_id: int, producer_epoch: int) -> bool:
    """KIP-360: a producer presenting its id and epoch is let through when the id is new here (recovering
    from UNKNOWN_PRODUCER_ID), is the current one (its epoch is checked by the bump), or is the previous one
    with an exhausted epoch (a retry after a rotation it never heard the answer of)."""
    return (metadata.producer_epoch == NO_PRODUCER_EPOCH or producer_id == metadata.producer_id
            or (producer_id == metadata.previous_producer_id and is_epoch_exhausted(producer_epoch)))
