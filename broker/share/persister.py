"""The share-group state persister: how a partition leader and the group coordinator reach the share
coordinator (Kafka's `org.apache.kafka.server.share.persister.Persister`).

Kafka's leader never writes `__share_group_state` itself: it sends Initialize/Read/Write/Delete/
ReadSummaryShareGroupState to the share coordinator that owns the key `group:topic_id:partition`
(FindCoordinator key type 2), and that coordinator appends ShareSnapshot/ShareUpdate records on its
runtime. A leader calls `read` when it first serves a share partition (or after it became leader), `write`
after every change it must not lose (acknowledgements, releases, archiving, the start offset moving), and
never acknowledges to a client before the write succeeded. The group coordinator calls `initialize` when it
first assigns a share partition and `delete` when a group (or its offsets) is deleted.

Errors come back as Kafka's codes in the results, never as exceptions: NOT_COORDINATOR /
COORDINATOR_NOT_AVAILABLE / COORDINATOR_LOAD_IN_PROGRESS are retriable (the caller retries after
rediscovering the coordinator), FENCED_STATE_EPOCH and FENCED_LEADER_EPOCH mean a newer writer exists (the
leader drops its in-memory state and reads again), UNKNOWN_TOPIC_OR_PARTITION means nothing was
initialized. A read of a partition that was never initialized answers start offset -1 (Kafka's
PartitionFactory.UNINITIALIZED_START_OFFSET): the leader then starts at `share.auto.offset.reset`.

`InMemoryPersister` keeps the same rules in a dict; it is for unit tests of one layer and for the
single-broker path before the share coordinator is reachable, never a proof of durability.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from odradek.coordinator.partitioning import share_coordinator_key
from odradek.protocol.errors import ErrorCode
from odradek.replication.share import ShareSnapshot

UNINITIALIZED_START_OFFSET = -1


@dataclass(frozen=True, slots=True)
class SharePartitionKey:
    """One share-partition: a share group's view of one topic partition (Kafka's SharePartitionKey)."""

    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """The FindCoordinator key (type 2, SHARE) that routes this partition's state."""
        return share_coordinator_key(self.group_id, self.topic_id, self.partition)


@dataclass(frozen=True, slots=True)
class ReadResult:
    """ReadShareGroupState for one partition. `snapshot` is None unless error_code is NONE; an
    uninitialized partition reads as a snapshot with start_offset -1 and no batches."""

    error_code: ErrorCode
    snapshot: ShareSnapshot | None = None
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class SummaryResult:
    """ReadShareGroupStateSummary for one partition (what DescribeShareGroupOffsets shows)."""

    error_code: ErrorCode
    state_epoch: int = 0
    leader_epoch: int = -1
    start_offset: int = UNINITIALIZED_START_OFFSET
    delivery_complete_count: int = -1
    error_message: str | None = None


class SharePersister(Protocol):
    """What the broker needs from the share coordinator; one call per partition keeps the callers simple
    (an implementation may batch calls that arrive together into one request per coordinator)."""

    async def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> ErrorCode:
        """InitializeShareGroupState: start (or restart, with a higher state epoch) a share-partition at
        `start_offset`, dropping any batches it had."""
        ...

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> ReadResult:
        """ReadShareGroupState, fencing writers from older leader epochs."""
        ...

    async def write(
        self,
        key: SharePartitionKey,
        leader_epoch: int,
        snapshot: ShareSnapshot,
        delivery_complete_count: int = -1,
    ) -> ErrorCode:
        """WriteShareGroupState: the state epoch and batches of `snapshot` (its start offset, -1 for
        unchanged). The coordinator refuses an older state epoch (FENCED_STATE_EPOCH) or leader epoch
        (FENCED_LEADER_EPOCH)."""
        ...

    async def delete(self, group_id: str, partitions: Sequence[tuple[uuid.UUID, int]]) -> dict[tuple[uuid.UUID, int], ErrorCode]:
        """DeleteShareGroupState for some of a group's partitions."""
        ...

    async def read_summary(self, key: SharePartitionKey, leader_epoch: int = -1) -> SummaryResult:
        """ReadShareGroupStateSummary: start offset and epochs without the batches."""
        ...


class InMemoryPersister:
    """The persister rules kept in a dict (unit tests; see the module docstring)."""

    def __init__(self) -> None:
        self._state: dict[SharePartitionKey, ShareSnapshot] = {}
        self._leader_epochs: dict[SharePartitionKey, int] = {}

    async def initialize(self, key: SharePartitionKey, state_epoch: int, start_offset: int) -> ErrorCode:
        current = self._state.get(key)
        if current is not None and state_epoch < current.state_epoch:
            return ErrorCode.FENCED_STATE_EPOCH
        self._state[key] = ShareSnapshot(state_epoch, start_offset, ())
        return ErrorCode.NONE

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> ReadResult:
        fenced = self._fence(key, leader_epoch)
        if fenced is not ErrorCode.NONE:
            return ReadResult(fenced, error_message=f"leader epoch {leader_epoch} is older than the last writer's")
        return ReadResult(ErrorCode.NONE, self._state.get(key, ShareSnapshot(0, UNINITIALIZED_START_OFFSET, ())))

    async def write(
        self,
        key: SharePartitionKey,
        leader_epoch: int,
        snapshot: ShareSnapshot,
        delivery_complete_count: int = -1,
    ) -> ErrorCode:
        current = self._state.get(key)
        if current is not None and snapshot.state_epoch < current.state_epoch:
            return ErrorCode.FENCED_STATE_EPOCH
        fenced = self._fence(key, leader_epoch)
        if fenced is not ErrorCode.NONE:
            return fenced
        start = snapshot.start_offset
        if start == UNINITIALIZED_START_OFFSET and current is not None:
            start = current.start_offset
        self._state[key] = ShareSnapshot(snapshot.state_epoch, start, snapshot.state_batches)
        return ErrorCode.NONE

    async def delete(self, group_id: str, partitions: Sequence[tuple[uuid.UUID, int]]) -> dict[tuple[uuid.UUID, int], ErrorCode]:
        out: dict[tuple[uuid.UUID, int], ErrorCode] = {}
        for topic_id, partition in partitions:
            key = SharePartitionKey(group_id, topic_id, partition)
            self._state.pop(key, None)
            self._leader_epochs.pop(key, None)
            out[(topic_id, partition)] = ErrorCode.NONE
        return out

    async def read_summary(self, key: SharePartitionKey, leader_epoch: int = -1) -> SummaryResult:
        current = self._state.get(key)
        if current is None:
            return SummaryResult(ErrorCode.NONE)
        return SummaryResult(ErrorCode.NONE, current.state_epoch, self._leader_epochs.get(key, -1),
                             current.start_offset)

    def _fence(self, key: SharePartitionKey, leader_epoch: int) -> ErrorCode:
        known = self._leader_epochs.get(key, -1)
        if leader_epoch < known:
            return ErrorCode.FENCED_LEADER_EPOCH
        if leader_epoch >= 0:
            self._leader_epochs[key] = leader_epoch
        return ErrorCode.NONE
