"""A transactional id's state, the states a transaction goes through, and the transitions between them.

A transaction (Kafka's TransactionMetadata) moves

    Empty ──AddPartitions/AddOffsets──> Ongoing ──EndTxn(commit)──> PrepareCommit ──markers──> CompleteCommit
                                          │    ──EndTxn(abort), timeout, re-init──> PrepareAbort ──> CompleteAbort
    CompleteCommit / CompleteAbort ──AddPartitions──> Ongoing;  ──InitProducerId──> Empty;  ──expiry──> Dead

`VALID_PREVIOUS_STATES` is Kafka's table; `transit` refuses anything else (a bug, never a client's doing:
the coordinator checks requests against the state before it asks for a transition). PrepareEpochFence
is Kafka's in-memory step while the coordinator bumps the epoch of an Ongoing transaction to fence its
producer; here that step and the PrepareAbort it leads to are one write, so it never appears in the log.
Dead is the state of an id whose tombstone is written.

`TransactionMetadata` is immutable: a transition returns the new value, which becomes the shard's state
only when its record is replayed. Times are arguments (`now_ms`), never read from a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum

__all__ = ["TransactionMetadata", "TransactionState", "VALID_PREVIOUS_STATES", "InvalidTransitionError",
           "NO_PRODUCER_ID", "NO_PRODUCER_EPOCH", "is_epoch_exhausted"]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
INT16_MAX = 32767


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch (32767) for fencing: an id at 32766 gets a new producer id instead."""
    return epoch >= INT16_MAX - 1


class TransactionState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use (Kafka's TransactionState.name)."""
        return _NAMES[self]

    @classmethod
    def from_name(cls, name: str) -> TransactionState | None:
        return _BY_NAME.get(name)

    @property
    def is_prepare(self) -> bool:
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)

    @property
    def is_expiration_allowed(self) -> bool:
        return self in (TransactionState.EMPTY, TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)


S = TransactionState
_NAMES = {S.EMPTY: "Empty", S.ONGOING: "Ongoing", S.PREPARE_COMMIT: "PrepareCommit", S.PREPARE_ABORT: "PrepareAbort",
          S.COMPLETE_COMMIT: "CompleteCommit", S.COMPLETE_ABORT: "CompleteAbort", S.DEAD: "Dead",
          S.PREPARE_EPOCH_FENCE: "PrepareEpochFence"}
_BY_NAME = {name: state for state, name in _NAMES.items()}

VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


class InvalidTransitionError(Exception):
    """A transition Kafka's table does not allow (a coordinator bug)."""


@dataclass(frozen=True, slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState = TransactionState.EMPTY
    partitions: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    txn_start_timestamp_ms: int = -1
    txn_last_update_timestamp_ms: int = -1
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    # The epoch before the last bump, to recognise a producer retrying InitProducerId (KIP-360); not in
    # the log (Kafka does not write it either): after a failover a retry is answered PRODUCER_FENCED.
    last_producer_epoch: int = NO_PRODUCER_EPOCH

    def transit(self, state: TransactionState, now_ms: int, **changes) -> TransactionMetadata:
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise InvalidTransitionError(f"{self.transactional_id}: {self.state.display_name} -> {state.display_name}")
        return replace(self, state=state, txn_last_update_timestamp_ms=now_ms, **changes)

    # -- Kafka's prepare* transitions

    def add_partitions(self, partitions, now_ms: int) -> TransactionMetadata:
        """Ongoing with `partitions` added; a transaction starting now gets its start time."""
        starting = self.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
        return self.transit(S.ONGOING, now_ms, partitions=(frozenset() if starting else self.partitions) | frozenset(partitions),
                            txn_start_timestamp_ms=now_ms if starting else self.txn_start_timestamp_ms)

    def prepare_end(self, commit: bool, now_ms: int, *, fence: bool = False) -> TransactionMetadata:
        """PrepareCommit / PrepareAbort; `fence` bumps the epoch first (PrepareEpochFence then PrepareAbort:
        the producer's epoch is fenced and the markers are written with the new one)."""
        if fence:
            if self.producer_epoch >= INT16_MAX:
                raise InvalidTransitionError(f"{self.transactional_id}: epoch {self.producer_epoch} cannot be bumped")
            fenced = replace(self.transit(S.PREPARE_EPOCH_FENCE, now_ms), producer_epoch=self.producer_epoch + 1,
                             last_producer_epoch=NO_PRODUCER_EPOCH)
            return fenced.transit(S.PREPARE_ABORT, now_ms)
        return self.transit(S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, now_ms)

    def complete(self, now_ms: int) -> TransactionMetadata:
        state = S.COMPLETE_COMMIT if self.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return self.transit(state, now_ms, partitions=frozenset())

    def bump_epoch(self, txn_timeout_ms: int, expected_epoch: int | None, now_ms: int) -> TransactionMetadata | None:
        """Empty at the next epoch (Kafka's prepareIncrementProducerEpoch); None: the producer is fenced.
        A producer presenting the epoch before the last bump is retrying: it gets the current one again."""
        if expected_epoch is None:
            epoch, last = self.producer_epoch + 1, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = self.producer_epoch + 1, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            return None
        return self.transit(S.EMPTY, now_ms, producer_epoch=epoch, last_producer_epoch=last, txn_timeout_ms=txn_timeout_ms,
                            partitions=frozenset(), txn_start_timestamp_ms=-1)

    def rotate_producer_id(self, producer_id: int, txn_timeout_ms: int, now_ms: int, record_last_epoch: bool) -> TransactionMetadata:
        """Empty with a new producer id at epoch 0 (the old one's epochs are exhausted)."""
        return self.transit(S.EMPTY, now_ms, producer_id=producer_id, producer_epoch=0,
                            previous_producer_id=self.producer_id,
                            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                            txn_timeout_ms=txn_timeout_ms, partitions=frozenset(), txn_start_timestamp_ms=-1)
