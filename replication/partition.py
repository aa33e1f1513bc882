"""Partition state on a broker: role, leader epoch, replicas and ISR, follower positions, high watermark.

Theory of operation
-------------------
Offsets named `*_end_offset` are exclusive: the log end offset (LEO) is the offset the next record gets,
and the high watermark (HW) is the first offset not yet known to be on every in-sync replica. Consumers
read below the HW (below the last stable offset under read_committed); followers read up to the LEO.

On the leader, HW = the smallest LEO among the leader itself, the ISR, and followers that are caught up
within `replica_lag_time_max_ms` but not yet in the ISR (as Kafka does, so that a replica about to join
the ISR already holds everything below the HW), unless they may not join it (fenced or shutting down:
`is_replica_eligible`), so that a broker leaving in a controlled shutdown does not hold the HW. The HW never moves backwards while leading; a follower
whose position is unknown (-1, right after an election) holds it where it is.

The broker drives it at the points where state moves, and completes delayed operations when the HW
moves:

- after appending to the leader's log: `maybe_advance_high_watermark(now_ms)`;
- after a follower's fetch: `update_follower_fetch_state(replica_id, log_end_offset, now_ms)`;
- both return True when the HW advanced: then `check_and_complete(topic_partition)` on the produce and
  fetch purgatories.

Listeners (`add_listener`) hear every advance of the HW, synchronously, as `listener(topic_partition,
high_watermark)`: a coordinator holds the responses of its internal topic's writes until the HW passes
them (Kafka's PartitionListener.onHighWatermarkUpdated).

acks=all is refused up front with NOT_ENOUGH_REPLICAS when the ISR is smaller than
`min_insync_replicas` (`check_append_as_leader`); once appended, the DelayedProduce waits until
`check_enough_replicas_reach_offset` says the HW has passed the batch. With a single replica the ISR is
the leader alone, so the HW equals the LEO after every append and acks=all completes at once through the
same path.

Leadership changes arrive as PartitionChange records of the metadata log and are applied with
`make_leader` / `make_follower`; ISR changes are proposed elsewhere (AlterPartition) and only become
true when applied here. The log is duck-typed: this module reads only its `log_start_offset` and
`log_end_offset` (the `PartitionLog` protocol). `Partition` is generic in its log's type, so that its
owner keeps the type it hosts: the replica manager hosts storage's `Log` (`Partition[Log]`, which it reads,
appends to and truncates through `partition.log`), the unit tests a two-offset fake.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Generic, Protocol, TypeAlias, TypeVar

from odradek.protocol.errors import ErrorCode
from odradek.replication.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from odradek.storage.errors import OffsetOutOfRangeError
from odradek.storage.names import TopicPartition

if TYPE_CHECKING:
    from odradek.storage.log import Log
    from odradek.storage.producer_state import ProducerStateManager

__all__ = [
    "NO_LEADER_EPOCH",
    "FetchIsolation",
    "FollowerState",
    "LogOffsetSnapshot",
    "HostedPartition",
    "Partition",
    "PartitionLog",
    "TopicPartition",
]

NO_LEADER_EPOCH = -1
"""`current_leader_epoch` of a request that does not name one (Kafka's NO_PARTITION_LEADER_EPOCH)."""

UNKNOWN_OFFSET = -1


class PartitionLog(Protocol):
    """What `Partition` itself reads of its log."""

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...


L = TypeVar("L", bound=PartitionLog)
"""The type of a partition's log: what its owner gets back from `partition.log`."""


class FetchIsolation(IntEnum):
    """How far a fetch may read: followers to the LEO, consumers to the HW or the last stable offset."""

    LOG_END = 0
    HIGH_WATERMARK = 1
    TXN_COMMITTED = 2


@dataclass(frozen=True, slots=True)
class LogOffsetSnapshot:
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    last_stable_offset: int

    def end_offset(self, isolation: FetchIsolation) -> int:
        if isolation is FetchIsolation.LOG_END:
            return self.log_end_offset
        if isolation is FetchIsolation.HIGH_WATERMARK:
            return self.high_watermark
        return self.last_stable_offset


@dataclass(slots=True)
class FollowerState:
    """What the leader knows of one follower, from its fetches (Kafka's ReplicaState)."""

    log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int | None = None
    last_caught_up_time_ms: int | None = None
    log_start_offset: int = UNKNOWN_OFFSET  # as its fetches say (DeleteRecords' low watermark)

    def is_caught_up(self, leader_end_offset: int, now_ms: int, replica_lag_time_max_ms: int) -> bool:
        if self.log_end_offset == leader_end_offset:
            return True
        return (
            self.last_caught_up_time_ms is not None
            and now_ms - self.last_caught_up_time_ms <= replica_lag_time_max_ms
        )


def _latest(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


class Partition(Generic[L]):
    """One partition hosted by this broker. Starts with no role; `make_leader` or `make_follower`."""

    def __init__(
        self,
        topic_partition: TopicPartition,
        *,
        topic_id: uuid.UUID,
        log: L,
        local_broker_id: int,
        min_insync_replicas: int = 1,
        replica_lag_time_max_ms: int = 30_000,
        high_watermark: int | None = None,
        first_unstable_offset: Callable[[], int | None] | None = None,
        producer_state: ProducerStateManager | None = None,
        is_replica_eligible: Callable[[int], bool] | None = None,
    ) -> None:
        self.topic_partition = topic_partition
        self.topic_id = topic_id
        self.log = log
        self.local_broker_id = local_broker_id
        self.min_insync_replicas = min_insync_replicas
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.leader_id: int | None = None
        self.leader_epoch = NO_LEADER_EPOCH
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.partition_epoch = -1  # the image's, which an AlterPartition from the leader must name
        # An ISR this leader has proposed (AlterPartition in flight) and the image does not say yet: no
        # other change is proposed meanwhile (Kafka's PendingExpandIsr / PendingShrinkIsr).
        self.pending_isr: tuple[int, ...] | None = None
        start = log.log_start_offset if high_watermark is None else high_watermark
        self._high_watermark = min(max(start, log.log_start_offset), log.log_end_offset)
        self._follower_states: dict[int, FollowerState] = {}
        # The log end offset when this broker's current leadership epoch began (Kafka's
        # leaderEpochStartOffsetOpt): a follower joins the ISR only once it holds it (`proposed_isr`).
        self._leader_epoch_start_offset = 0
        self._first_unstable_offset = first_unstable_offset
        # The log's producer state, when given: its `transactions_seen` says at no cost (asked on every
        # fetch) whether any transaction may be open, before `first_unstable_offset` looks.
        self._producer_state = producer_state
        self._listeners: tuple[Callable[[TopicPartition, int], None], ...] = ()
        # Whether a replica may join the ISR (Kafka's isReplicaIsrEligible: not fenced, not shutting
        # down): only such a replica, caught up but outside the ISR, holds the HW for itself.
        self._is_replica_eligible = is_replica_eligible

    @property
    def topic(self) -> str:
        return self.topic_partition.topic

    @property
    def partition(self) -> int:
        return self.topic_partition.partition

    @property
    def producer_state(self) -> ProducerStateManager | None:
        """The log's producer state; None for a log that keeps none (the simulations' in-memory logs)."""
        return self._producer_state

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """The HW, lowered to the first offset of a transaction still open or whose marker is not yet
        below the HW (never below the log start offset, as Kafka's maybeIncrementFirstUnstableOffset)."""
        if self._first_unstable_offset is not None:
            state = self._producer_state
            if state is not None:
                if not state.transactions_seen:
                    return self._high_watermark
                state.on_high_watermark_updated(self._high_watermark)
            first_unstable = self._first_unstable_offset()
            if first_unstable is not None:
                return min(max(first_unstable, self.log.log_start_offset), self._high_watermark)
        return self._high_watermark

    def replace_log(self, log) -> None:
        """The same records in a new log object (moved to another log directory, AlterReplicaLogDirs)."""
        self.log = log
        if self._first_unstable_offset is not None:
            self._first_unstable_offset = lambda: log.first_unstable_offset
        if self._producer_state is not None:
            self._producer_state = getattr(log, "producer_state", None)

    def add_listener(self, listener: Callable[[TopicPartition, int], None]) -> None:
        """Call `listener(topic_partition, high_watermark)` after every advance of the HW."""
        self._listeners += (listener,)

    def remove_listener(self, listener: Callable[[TopicPartition, int], None]) -> None:
        self._listeners = tuple(registered for registered in self._listeners if registered is not listener)

    def follower_state(self, replica_id: int) -> FollowerState | None:
        return self._follower_states.get(replica_id)

    def make_leader(
        self, *, leader_epoch: int, replicas: Sequence[int], isr: Sequence[int], now_ms: int
    ) -> bool:
        """Lead this partition; True when the HW advanced as a result.

        Followers in the ISR count as caught up now; on a new leadership their positions are unknown
        until they fetch, which holds the HW until they do.
        """
        self._check_assignment(self.local_broker_id, replicas, isr)
        is_new_leader = not self.is_leader
        leader_end_offset = self.log.log_end_offset
        states: dict[int, FollowerState] = {}
        for replica_id in replicas:
            if replica_id == self.local_broker_id:
                continue
            caught_up_ms = now_ms if replica_id in isr else None
            previous = self._follower_states.get(replica_id)
            if is_new_leader or previous is None:
                states[replica_id] = FollowerState(last_caught_up_time_ms=caught_up_ms)
            else:
                states[replica_id] = FollowerState(
                    log_end_offset=previous.log_end_offset,
                    last_fetch_leader_log_end_offset=leader_end_offset,
                    last_fetch_time_ms=now_ms,
                    last_caught_up_time_ms=caught_up_ms,
                )
        if is_new_leader or leader_epoch != self.leader_epoch:
            self._leader_epoch_start_offset = leader_end_offset
        self.leader_id = self.local_broker_id
        self.leader_epoch = leader_epoch
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self._follower_states = states
        return self.maybe_advance_high_watermark(now_ms)

    def make_follower(
        self, *, leader_id: int, leader_epoch: int, replicas: Sequence[int], isr: Sequence[int]
    ) -> None:
        """Follow `leader_id`; the HW is then the leader's, as reported in fetch responses."""
        self._check_assignment(leader_id, replicas, isr)
        if leader_id == self.local_broker_id:
            raise ValueError("make_follower names this broker as leader; use make_leader")
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self._follower_states = {}

    def make_leaderless(self, *, leader_epoch: int, replicas: Sequence[int], isr: Sequence[int]) -> None:
        """No leader at the moment (all of the ISR is offline): neither lead nor fetch until one is elected."""
        if not set(isr) <= set(replicas):
            raise ValueError(f"ISR {list(isr)} is not a subset of replicas {list(replicas)}")
        self.leader_id = None
        self.leader_epoch = leader_epoch
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self._follower_states = {}

    @staticmethod
    def _check_assignment(leader_id: int, replicas: Sequence[int], isr: Sequence[int]) -> None:
        if leader_id not in replicas:
            raise ValueError(f"leader {leader_id} is not a replica of {list(replicas)}")
        if not set(isr) <= set(replicas):
            raise ValueError(f"ISR {list(isr)} is not a subset of replicas {list(replicas)}")

    def update_follower_fetch_state(self, replica_id: int, log_end_offset: int, now_ms: int,
                                    log_start_offset: int = UNKNOWN_OFFSET) -> bool:
        """Record a follower's fetch position (and its log start offset, when its fetch says it); True when
        the HW advanced as a result."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"{self.topic_partition} is not led here")
        state = self._follower_states.get(replica_id)
        if state is None:
            raise NotLeaderOrFollowerError(f"broker {replica_id} is not a follower of {self.topic_partition}")
        leader_end_offset = self.log.log_end_offset
        if log_end_offset > leader_end_offset:
            raise OffsetOutOfRangeError(
                f"follower {replica_id} at {log_end_offset} is past the leader's end {leader_end_offset}"
            )
        # Caught up now if it reached the leader's end; otherwise it was caught up at its previous fetch
        # if it has now reached what the leader's end was then.
        if log_end_offset >= leader_end_offset:
            state.last_caught_up_time_ms = _latest(state.last_caught_up_time_ms, now_ms)
        elif log_end_offset >= state.last_fetch_leader_log_end_offset:
            state.last_caught_up_time_ms = _latest(state.last_caught_up_time_ms, state.last_fetch_time_ms)
        state.log_end_offset = log_end_offset
        if log_start_offset >= 0:
            state.log_start_offset = log_start_offset
        state.last_fetch_leader_log_end_offset = max(
            leader_end_offset, state.last_fetch_leader_log_end_offset
        )
        state.last_fetch_time_ms = now_ms
        return self.maybe_advance_high_watermark(now_ms)

    def update_follower_high_watermark(self, leader_high_watermark: int) -> bool:
        """A follower learns the leader's HW from a fetch response: its own is min(the leader's, its log end
        offset), as Kafka's Partition.updateFollowerFetchState sets it (it may move back after a change of
        leader). True when it changed."""
        if self.is_leader or leader_high_watermark < 0:
            return False
        new_high_watermark = max(min(leader_high_watermark, self.log.log_end_offset), self.log.log_start_offset)
        if new_high_watermark == self._high_watermark:
            return False
        self._high_watermark = new_high_watermark
        if self._producer_state is not None:
            self._producer_state.on_high_watermark_updated(new_high_watermark)
        return True

    def after_follower_truncation(self) -> None:
        """The follower's log was truncated (or started over): the HW stays within the log."""
        self._high_watermark = max(min(self._high_watermark, self.log.log_end_offset), self.log.log_start_offset)

    def maybe_advance_high_watermark(self, now_ms: int) -> bool:
        """Raise the HW to the smallest LEO that must hold it; True when it moved. Not while the ISR is
        below min.insync.replicas (bounded by the replica count): Kafka 4's strict min ISR (KIP-966), which
        is what makes a replica that left a too-small ISR still hold everything under the HW, and so
        electable (the ELR)."""
        if not self.is_leader or len(self.isr) < min(self.min_insync_replicas, len(self.replicas) or 1):
            return False
        leader_end_offset = self.log.log_end_offset
        new_high_watermark = leader_end_offset
        eligible = self._is_replica_eligible
        # Kafka's maximal ISR: a proposed ISR that adds a replica counts it from the moment it is proposed.
        # The controller may take the proposal whatever this replica did since (a quorum that was lost
        # decides it later), so the HW must not pass a replica that may become in sync without fetching
        # again: it would join the ISR behind the HW, and an election could then lose acknowledged records.
        pending = self.pending_isr or ()
        for replica_id, state in self._follower_states.items():
            if state.log_end_offset < new_high_watermark and (
                replica_id in self.isr
                or replica_id in pending
                or (
                    (eligible is None or eligible(replica_id))
                    and state.is_caught_up(leader_end_offset, now_ms, self.replica_lag_time_max_ms)
                )
            ):
                new_high_watermark = state.log_end_offset
        if new_high_watermark > self._high_watermark:
            self._high_watermark = new_high_watermark
            if self._producer_state is not None:
                self._producer_state.on_high_watermark_updated(new_high_watermark)
            for listener in self._listeners:
                listener(self.topic_partition, new_high_watermark)
            return True
        return False

    def low_watermark(self, is_alive: Callable[[int], bool] | None = None) -> int:
        """The smallest log start offset among this leader and its followers on live brokers (Kafka's
        lowWatermarkIfLeader): what DeleteRecords reports, and waits on, once every replica has deleted."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"{self.topic_partition} is not led here")
        low = self.log.log_start_offset
        for replica_id, state in self._follower_states.items():
            if (is_alive is None or is_alive(replica_id)) and state.log_start_offset < low:
                low = state.log_start_offset
        return low

    def out_of_sync_replicas(self, now_ms: int) -> list[int]:
        """ISR followers not caught up within `replica_lag_time_max_ms`: candidates for an ISR shrink."""
        if not self.is_leader:
            return []
        leader_end_offset = self.log.log_end_offset
        return [
            replica_id
            for replica_id in self.isr
            if replica_id != self.local_broker_id
            and not self._follower_states[replica_id].is_caught_up(
                leader_end_offset, now_ms, self.replica_lag_time_max_ms
            )
        ]

    def is_read_replica_candidate(self, replica_id: int, now_ms: int) -> bool:
        """Whether this leader may send consumers to follower `replica_id` (KIP-392): it is in the ISR and
        in any ISR proposed meanwhile, may stay in it (not fenced, not shutting down), and is caught up
        within replica.lag.time.max.ms. The last three go beyond Kafka's check (ISR membership only) on
        purpose: the follower refuses consumers once the image drops it from the ISR, and the image can
        reach it before this leader. A leader that kept answering with it then would bounce the consumer
        between the two (librdkafka 2.16 was seen losing track of the leader in that loop)."""
        if replica_id not in self.isr or (self.pending_isr is not None and replica_id not in self.pending_isr):
            return False
        if self._is_replica_eligible is not None and not self._is_replica_eligible(replica_id):
            return False
        state = self._follower_states.get(replica_id)
        return state is not None and state.is_caught_up(self.log.log_end_offset, now_ms, self.replica_lag_time_max_ms)

    def proposed_isr(self, now_ms: int) -> tuple[int, ...] | None:
        """The ISR this leader should ask the controller for now, or None (Kafka's maybeShrinkIsr and
        maybeExpandIsr in one): ISR followers not caught up within replica.lag.time.max.ms leave it, and
        followers outside it that have fetched in this leadership up to the HW, and may join, join it.

        A joining follower must also hold everything up to where this leader's epoch began, as Kafka's
        isFollowerInSync asks: a new leader's HW may lag what the previous leader acknowledged, and with
        strict min ISR (the HW held while the ISR is below min.insync.replicas) it stays there, so a
        follower restarted below the acknowledged records would otherwise join the ISR, be elected, and
        lose them (the replication simulation found it, seed 29 of the long run)."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        out = set(self.out_of_sync_replicas(now_ms))
        eligible = self._is_replica_eligible
        joining = [
            replica_id for replica_id, state in self._follower_states.items()
            if replica_id not in self.isr and state.last_fetch_time_ms is not None
            and state.log_end_offset >= max(self._high_watermark, self._leader_epoch_start_offset)
            and (eligible is None or eligible(replica_id))
        ]
        if not out and not joining:
            return None
        return tuple(r for r in self.isr if r not in out) + tuple(sorted(joining))

    def check_append_as_leader(self, required_acks: int) -> None:
        """Refuse an append this broker must not take: not the leader, or acks=all with too small an ISR."""
        if not self.is_leader:
            raise NotLeaderOrFollowerError(f"{self.topic_partition} is not led here")
        if required_acks == -1 and len(self.isr) < self.min_insync_replicas:
            raise NotEnoughReplicasError(
                f"ISR {list(self.isr)} is smaller than min.insync.replicas={self.min_insync_replicas}"
            )

    def check_enough_replicas_reach_offset(self, required_offset: int) -> tuple[bool, ErrorCode]:
        """acks=all progress for a batch ending before `required_offset`: (done, error)."""
        if not self.is_leader:
            return False, ErrorCode.NOT_LEADER_OR_FOLLOWER
        if self._high_watermark >= required_offset:
            if len(self.isr) >= self.min_insync_replicas:
                return True, ErrorCode.NONE
            return True, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return False, ErrorCode.NONE

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Fence a request from an older epoch; refuse one from an epoch this broker has not seen yet."""
        if current_leader_epoch == NO_LEADER_EPOCH:
            return
        if current_leader_epoch < self.leader_epoch:
            raise FencedLeaderEpochError(f"{current_leader_epoch} < {self.leader_epoch}")
        if current_leader_epoch > self.leader_epoch:
            raise UnknownLeaderEpochError(f"{current_leader_epoch} > {self.leader_epoch}")

    def fetch_offset_snapshot(
        self, current_leader_epoch: int = NO_LEADER_EPOCH, *, fetch_only_from_leader: bool = True
    ) -> LogOffsetSnapshot:
        self.check_leader_epoch(current_leader_epoch)
        if fetch_only_from_leader and not self.is_leader:
            raise NotLeaderOrFollowerError(f"{self.topic_partition} is not led here")
        return LogOffsetSnapshot(
            log_start_offset=self.log.log_start_offset,
            log_end_offset=self.log.log_end_offset,
            high_watermark=self._high_watermark,
            last_stable_offset=self.last_stable_offset,
        )

    def __repr__(self) -> str:
        return (
            f"<Partition {self.topic_partition} leader={self.leader_id} epoch={self.leader_epoch} "
            f"isr={list(self.isr)} hw={self._high_watermark} leo={self.log.log_end_offset}>"
        )


HostedPartition: TypeAlias = "Partition[Log]"
"""A partition as the replica manager hosts it: over storage's `Log`, which the data path reads, appends to
and truncates through `partition.log` (`Partition` itself needs only the log's two offsets)."""
