"""A transactional id's state, the states a transaction goes through, and the transitions between them.

A transaction (Kafka's TransactionMetadata) moves

    Empty ──AddPartitions/AddOffsets──> Ongoing ──EndTxn(commit)──> PrepareCommit ──markers──> CompleteCommit
                                          │    ──EndTxn(abort), timeout, re-init──> PrepareAbort ──> CompleteAbort
    CompleteCommit / CompleteAbort ──AddPartitions──> Ongoing;  ──InitProducerId──> Empty;  ──expiry──> Dead
    Empty / CompleteCommit / CompleteAbort ──EndTxn v5 (abort)──> PrepareAbort   (Transactions V2 only)

`VALID_PREVIOUS_STATES` is Kafka's table; `transit` refuses anything else (a bug, never a client's doing:
the coordinator checks requests against the state before it asks for a transition). PrepareEpochFence
is Kafka's in-memory step while the coordinator bumps the epoch of an Ongoing transaction to fence its
producer; here that step and the PrepareAbort it leads to are one write, so it never appears in the log.
Dead is the state of an id whose tombstone is written.

`TransactionMetadata` is immutable: a transition returns the new value, which becomes the shard's state
only when its record is replayed. Times are arguments (`now_ms`), never read from a clock.

Transactions V2 (KIP-890 part 2, `client_transaction_version` 2: the client sent EndTxn v5, or a partition
leader added a partition for Produce v12+ with AddPartitionsToTxn v5) bump the producer epoch on every end,
in the Prepare step, so that the markers carry the new epoch and any write of the ended transaction arriving
late (a lower epoch) is fenced by the partition. An epoch that would reach the last one (32767) moves to a
new producer id instead: Prepare keeps the old id with the last epoch for the markers and holds the new id
in `next_producer_id`; Complete switches to it at epoch 0 and keeps the old one as `previous_producer_id`
(a client retrying the EndTxn whose answer it lost is recognised by it). Kafka's prepareAbortOrCommit and
prepareComplete.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import IntEnum

__all__ = ["TransactionMetadata", "TransactionState", "VALID_PREVIOUS_STATES", "InvalidTransitionError",
           "NO_PRODUCER_ID", "NO_PRODUCER_EPOCH", "is_epoch_exhausted", "TV_0", "TV_2"]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
INT16_MAX = 32767
TV_0, TV_2 = 0, 2  # client transaction versions: TV_0 (and 1) end without a bump, TV_2 bumps per transaction


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
    # Kafka 4.x: a TV_2 client may abort from Empty or Complete (it cannot know whether a partition was added)
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
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
    # The transaction version of the client's last AddPartitions/EndTxn (TransactionLogValue's tagged
    # ClientTransactionVersion): TV_2 ends bump the epoch (see the module doc).
    client_transaction_version: int = TV_0

    @property
    def bumps_per_transaction(self) -> bool:
        return self.client_transaction_version >= TV_2

    def transit(self, state: TransactionState, now_ms: int, **changes) -> TransactionMetadata:
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise InvalidTransitionError(f"{self.transactional_id}: {self.state.display_name} -> {state.display_name}")
        return replace(self, state=state, txn_last_update_timestamp_ms=now_ms, **changes)

    # -- Kafka's prepare* transitions

    def add_partitions(self, partitions, now_ms: int, client_transaction_version: int | None = None) -> TransactionMetadata:
        """Ongoing with `partitions` added; a transaction starting now gets its start time. The client's
        transaction version, when given, is the one the transaction ends by."""
        starting = self.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
        version = self.client_transaction_version if client_transaction_version is None else client_transaction_version
        return self.transit(S.ONGOING, now_ms, partitions=(frozenset() if starting else self.partitions) | frozenset(partitions),
                            txn_start_timestamp_ms=now_ms if starting else self.txn_start_timestamp_ms,
                            client_transaction_version=version)

    def prepare_end(self, commit: bool, now_ms: int, *, fence: bool = False,
                    client_transaction_version: int | None = None,
                    next_producer_id: int = NO_PRODUCER_ID) -> TransactionMetadata:
        """PrepareCommit / PrepareAbort. `fence` bumps the epoch first (PrepareEpochFence then PrepareAbort:
        the producer's epoch is fenced and the markers are written with the new one). A TV_2 end bumps it
        too, once (a fence under TV_2 is that same bump, as in Kafka 4.x), and moves to `next_producer_id` at
        Complete when the epoch is exhausted (see the module doc). A Prepare from Empty or Complete (a TV_2
        client aborting a transaction none of whose partitions it knows were added) starts now, with no
        partitions: its markers go nowhere."""
        version = self.client_transaction_version if client_transaction_version is None else client_transaction_version
        if fence or version >= TV_2:
            if self.producer_epoch >= INT16_MAX:
                raise InvalidTransitionError(f"{self.transactional_id}: epoch {self.producer_epoch} cannot be bumped")
            bumped = self.producer_epoch + 1
            last = NO_PRODUCER_EPOCH if fence else self.producer_epoch
        else:
            bumped, last = self.producer_epoch, self.last_producer_epoch
        state = S.PREPARE_COMMIT if commit and not fence else S.PREPARE_ABORT
        if self.state is not S.ONGOING:  # TV_2's abort with no partition added (Kafka's noPartitionAdded)
            return self.transit(state, now_ms, producer_epoch=bumped, last_producer_epoch=last, partitions=frozenset(),
                                txn_start_timestamp_ms=now_ms, next_producer_id=next_producer_id,
                                client_transaction_version=version)
        if fence:
            fenced = self.transit(S.PREPARE_EPOCH_FENCE, now_ms)
            return replace(fenced.transit(S.PREPARE_ABORT, now_ms), producer_epoch=bumped, last_producer_epoch=last,
                           client_transaction_version=version)
        return replace(self.transit(state, now_ms), producer_epoch=bumped, last_producer_epoch=last,
                       next_producer_id=next_producer_id, client_transaction_version=version)

    def complete(self, now_ms: int) -> TransactionMetadata:
        """CompleteCommit / CompleteAbort; on the producer id held in `next_producer_id` (at epoch 0) if the
        Prepare rotated it."""
        state = S.COMPLETE_COMMIT if self.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        if self.next_producer_id != NO_PRODUCER_ID:
            return self.transit(state, now_ms, partitions=frozenset(), producer_id=self.next_producer_id, producer_epoch=0,
                                previous_producer_id=self.producer_id, next_producer_id=NO_PRODUCER_ID)
        return self.transit(state, now_ms, partitions=frozenset())

    @property
    def answered_producer(self) -> tuple[int, int]:
        """The producer id and epoch an EndTxn v5 answer gives the client: the ones Complete will hold."""
        if self.next_producer_id != NO_PRODUCER_ID:
            return self.next_producer_id, 0
        return self.producer_id, self.producer_epoch

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
