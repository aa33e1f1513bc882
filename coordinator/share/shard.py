"""One partition of `__share_group_state`: the share-partitions that hash to it, as a replicated state machine.

Theory of operation
-------------------
A share group's progress on one topic partition (a *share-partition*: its start offset, the delivery state
and count of each in-flight range, its state epoch) lives on the partition's leader while it serves the
group (replication/share/partition.py), and is made durable here: the leader sends it with
WriteShareGroupState, and a new leader reads it back with ReadShareGroupState. The share coordinator never
decides what was delivered; it keeps what leaders report, refuses reports from writers that have been
replaced, and answers reads with the latest state.

The replicated state is `offsets: key -> ShareGroupOffset` plus the epochs seen per key, changed only by
`replay(record)`. Two record types (records.py), as Kafka writes them:

* ShareSnapshot: the whole state of one share-partition. Written by InitializeShareGroupState, by the
  first write of a share-partition, and by every write once `snapshot_update_records_per_snapshot`
  updates have been written since the last snapshot (Kafka's
  `share.coordinator.snapshot.update.records.per.snapshot`, default 500).
* ShareUpdate: what one write changed: the start offset (-1: unchanged), the leader epoch and the ranges
  written, which override the ranges they overlap when replayed on top of the state (Kafka's
  PersisterStateBatchCombiner: newer ranges win, ranges below the start offset are dropped, contiguous
  ranges with the same state and count are one).

Replaying a snapshot replaces the state; replaying an update merges into it. A load replays the partition's
log from its start, so the state after a failover is exactly the state the records describe, and the
snapshots bound how much a share-partition's history weighs.

Pruning (Kafka's cold-partition snapshots and state-topic pruning). Everything before the latest
ShareSnapshot of every live share-partition is redundant: a load from there gives the same state. The shard
learns no offsets, so it works with marks instead. `snapshot_cold(log_end_offset)` is one round: it writes
a ShareSnapshot of every live share-partition that has had none replayed since the previous round, and
moves the mark to `log_end_offset` (the log's end before these records). Once that round's records are
durable, every live share-partition has a snapshot at or past the PREVIOUS mark (those that had one since
it, and those snapshotted now, past the new one), so the log below the previous mark is redundant: that
offset is the round's answer, and the coordinator deletes below it (coordinator.py). A tombstone needs
nothing kept. After a load the first round only sets the mark. Hot share-partitions snapshot every
`snapshot_update_records_per_snapshot` writes anyway; a round adds one snapshot per cold one, which is what
Kafka's cold-partition snapshot does. The mark and the set of share-partitions snapshotted since it are this
leader's bookkeeping about its own log, not replicated state (a new leader starts without them).

Fencing, as Kafka's ShareCoordinatorShard answers it:

* FENCED_LEADER_EPOCH: a read or write whose leader epoch is older than the newest this share-partition has
  seen (a deposed partition leader must not overwrite its successor's state). A read with a newer leader
  epoch records it (one ShareUpdate with no ranges), so that the old leader is fenced from then on.
* FENCED_STATE_EPOCH: a write or initialize with a state epoch older than the state's. The state epoch
  moves only by InitializeShareGroupState (the group coordinator resetting or altering offsets, KIP-932).
* INVALID_REQUEST: a negative partition or state epoch, a leader epoch below -1, an empty group id.
* UNKNOWN_TOPIC_OR_PARTITION: the topic partition is not in the metadata image (when the coordinator is
  given a view of the topics).

Two rules differ from Kafka 4.4, where its group coordinator always initializes a share-partition before
its leader touches it and the shard refuses both a read and a write of an uninitialized one (INVALID_REQUEST):
here a read of a share-partition never initialized answers start offset -1, state epoch 0, no ranges (Kafka
4.0's answer, and the persister contract of broker/share/persister.py, which the partition leaders and the
group coordinator are written against), and a write of one creates it (a snapshot), so a leader's
acknowledgements are never refused because an initialization raced them. A leader epoch of -1 means "not a
partition leader" (an admin read): it is neither fenced nor recorded. These are inter-broker APIs that only
Odradek brokers send each other.

Delete writes a tombstone (a ShareSnapshot key with a null value, Kafka's newShareStateTombstoneRecord);
replaying it forgets the share-partition and its epochs. Deleting what does not exist succeeds and writes
nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import structlog

from odradek.metadata.image import uuid_string
from odradek.protocol.errors import ErrorCode
from odradek.replication.share import StateBatch

from ..runtime import Batch, Result
from ..topics import TopicsView
from .config import ShareCoordinatorConfig
from .records import ShareRecord, ShareRecordType, ShareStateKey

__all__ = [
    "ShareCounts",
    "ShareGroupOffset",
    "ShareStateAnswer",
    "ShareCoordinatorShard",
    "combine_state_batches",
]

log = structlog.get_logger("odradek.coordinator.share")

UNINITIALIZED_START_OFFSET = -1
NO_LEADER_EPOCH = -1


@dataclass(frozen=True, slots=True)
class ShareGroupOffset:
    """One share-partition's state as the records left it (Kafka's ShareGroupOffset)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int
    batches: tuple[StateBatch, ...]
    create_timestamp: int = 0
    write_timestamp: int = 0


@dataclass(frozen=True, slots=True)
class ShareStateAnswer:
    """What one share-partition's operation answers (the per-partition result of APIs 83-87)."""

    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    state_epoch: int = 0
    leader_epoch: int = NO_LEADER_EPOCH
    start_offset: int = UNINITIALIZED_START_OFFSET
    delivery_complete_count: int = -1
    batches: tuple[StateBatch, ...] = ()


@dataclass(slots=True)
class ShareCounts:
    """What this coordinator wrote since it started, counted once durable (the coordinator's, not a shard's:
    a partition moving away takes its shard, not the counts, so they only grow, as counters must)."""

    writes: int = 0  # WriteShareGroupState operations made durable
    snapshots: int = 0  # ShareSnapshot records (initialize, first write, every N updates, cold rounds)
    pruned: int = 0  # records deleted from __share_group_state below the oldest offset still needed
    updates: int = 0  # ShareUpdate records
    initialized: int = 0
    deleted: int = 0
    fenced: dict[str, int] = field(default_factory=dict)  # error name -> refused operations


def combine_state_batches(current: Iterable[StateBatch], new: Iterable[StateBatch], start_offset: int) -> tuple[StateBatch, ...]:
    """The ranges after `new` is written over `current` (Kafka's PersisterStateBatchCombiner): a new range
    replaces whatever it overlaps, nothing below `start_offset` is kept (a range crossing it is cut), and
    contiguous ranges with the same state and count become one. The result is sorted and disjoint."""
    ranges = sorted(current, key=lambda b: b.first_offset)
    for nb in sorted(new, key=lambda b: b.first_offset):
        kept: list[StateBatch] = []
        for b in ranges:
            if b.last_offset < nb.first_offset or b.first_offset > nb.last_offset:
                kept.append(b)
                continue
            if b.first_offset < nb.first_offset:
                kept.append(StateBatch(b.first_offset, nb.first_offset - 1, b.delivery_state, b.delivery_count))
            if b.last_offset > nb.last_offset:
                kept.append(StateBatch(nb.last_offset + 1, b.last_offset, b.delivery_state, b.delivery_count))
        kept.append(nb)
        ranges = sorted(kept, key=lambda b: b.first_offset)
    out: list[StateBatch] = []
    for b in ranges:
        if start_offset >= 0:
            if b.last_offset < start_offset:
                continue
            if b.first_offset < start_offset:
                b = StateBatch(start_offset, b.last_offset, b.delivery_state, b.delivery_count)
        if out:
            last = out[-1]
            if (last.last_offset + 1 == b.first_offset and last.delivery_state == b.delivery_state
                    and last.delivery_count == b.delivery_count):
                out[-1] = StateBatch(last.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                continue
        out.append(b)
    return tuple(out)


def _answer_error(code: ErrorCode, message: str) -> ShareStateAnswer:
    return ShareStateAnswer(code, message)


class ShareCoordinatorShard:
    def __init__(self, partition: int, config: ShareCoordinatorConfig, *, topics: TopicsView | None = None,
                 counts: ShareCounts | None = None) -> None:
        self.partition = partition
        self.config = config
        self.topics = topics
        self.counts = counts if counts is not None else ShareCounts()
        # Replicated: changed by replay() only.
        self.offsets: dict[ShareStateKey, ShareGroupOffset] = {}
        self.leader_epochs: dict[ShareStateKey, int] = {}
        self.state_epochs: dict[ShareStateKey, int] = {}
        self.updates_since_snapshot: dict[ShareStateKey, int] = {}
        # Pruning (see the module docstring): the log end offset at the last cold-snapshot round (None before
        # the first round since the load), and the share-partitions with a snapshot replayed since it.
        self.prune_mark: int | None = None
        self.snapshotted_since_mark: set[ShareStateKey] = set()

    # ------------------------------------------------------------------------------------------------
    # Replication

    def replay(self, record: ShareRecord) -> None:
        key = record.key
        if record.is_tombstone:
            self.offsets.pop(key, None)
            self.leader_epochs.pop(key, None)
            self.state_epochs.pop(key, None)
            self.updates_since_snapshot.pop(key, None)
            self.snapshotted_since_mark.discard(key)
            return
        assert record.batches is not None
        if record.leader_epoch > self.leader_epochs.get(key, NO_LEADER_EPOCH):
            self.leader_epochs[key] = record.leader_epoch
        if record.type is ShareRecordType.SHARE_SNAPSHOT:
            if record.state_epoch > self.state_epochs.get(key, -1):
                self.state_epochs[key] = record.state_epoch
            self.offsets[key] = ShareGroupOffset(record.snapshot_epoch, record.state_epoch, record.leader_epoch,
                                                 record.start_offset, record.delivery_complete_count, record.batches,
                                                 record.create_timestamp, record.write_timestamp)
            self.updates_since_snapshot[key] = 0
            self.snapshotted_since_mark.add(key)
            return
        current = self.offsets.get(key)
        if current is None:  # an update with no snapshot before it (its snapshot was pruned): Kafka takes it whole
            self.offsets[key] = ShareGroupOffset(record.snapshot_epoch, 0, record.leader_epoch, record.start_offset,
                                                 record.delivery_complete_count,
                                                 combine_state_batches((), record.batches, record.start_offset))
        else:
            start = current.start_offset if record.start_offset == UNINITIALIZED_START_OFFSET else record.start_offset
            self.offsets[key] = replace(
                current, leader_epoch=max(current.leader_epoch, record.leader_epoch), start_offset=start,
                delivery_complete_count=record.delivery_complete_count,
                batches=combine_state_batches(current.batches, record.batches, start))
        self.updates_since_snapshot[key] = self.updates_since_snapshot.get(key, 0) + 1

    def on_loaded(self, now_ms: int) -> None:
        pass

    def on_unloaded(self) -> None:
        pass

    # ------------------------------------------------------------------------------------------------
    # Checks shared by the operations

    def _invalid(self, key: ShareStateKey, *, state_epoch: int = 0, leader_epoch: int = NO_LEADER_EPOCH) -> ShareStateAnswer | None:
        if not key.group_id:
            return _answer_error(ErrorCode.INVALID_REQUEST, "The group id must be specified and non-empty.")
        if key.partition < 0:
            return _answer_error(ErrorCode.INVALID_REQUEST, "The partition id cannot be a negative number.")
        if leader_epoch < NO_LEADER_EPOCH:
            return _answer_error(ErrorCode.INVALID_REQUEST, "The leader epoch cannot be a negative number.")
        if state_epoch < 0:
            return _answer_error(ErrorCode.INVALID_REQUEST, "The state epoch cannot be a negative number.")
        return None

    def _unknown(self, key: ShareStateKey, doing: str) -> ShareStateAnswer | None:
        if self.topics is None:
            return None
        topic = self.topics.topic_by_id(key.topic_id)
        if topic is None or key.partition >= topic.num_partitions:
            return _answer_error(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"Topic or partition not found in metadata image when {doing}: "
                                 f"{key.group_id}:{key.topic_id}-{key.partition}.")
        return None

    def _fenced_leader(self, key: ShareStateKey, leader_epoch: int, doing: str) -> ShareStateAnswer | None:
        known = self.leader_epochs.get(key, NO_LEADER_EPOCH)
        if leader_epoch != NO_LEADER_EPOCH and known > leader_epoch:
            self._count_fenced(ErrorCode.FENCED_LEADER_EPOCH)
            return _answer_error(ErrorCode.FENCED_LEADER_EPOCH,
                                 f"{doing} request leader epoch is smaller than last recorded current: {known}, "
                                 f"requested: {leader_epoch}.")
        return None

    def _fenced_state(self, key: ShareStateKey, state_epoch: int, doing: str) -> ShareStateAnswer | None:
        known = self.state_epochs.get(key, -1)
        if known > state_epoch:
            self._count_fenced(ErrorCode.FENCED_STATE_EPOCH)
            return _answer_error(ErrorCode.FENCED_STATE_EPOCH,
                                 f"{doing} request state epoch is smaller than last recorded current: {known}, "
                                 f"requested: {state_epoch}.")
        return None

    def _count_fenced(self, code: ErrorCode) -> None:
        self.counts.fenced[code.name] = self.counts.fenced.get(code.name, 0) + 1

    def _emit(self, out: Batch, record: ShareRecord) -> None:
        out.records.append(record)
        counts = self.counts
        snapshot = record.type is ShareRecordType.SHARE_SNAPSHOT and not record.is_tombstone

        def count(error: BaseException | None) -> None:
            if error is None:
                if snapshot:
                    counts.snapshots += 1
                elif not record.is_tombstone:
                    counts.updates += 1

        out.callbacks.append(count)

    # ------------------------------------------------------------------------------------------------
    # InitializeShareGroupState (83)

    def initialize(self, key: ShareStateKey, state_epoch: int, start_offset: int, now_ms: int) -> Result:
        out = Batch()
        refused = (self._invalid(key, state_epoch=state_epoch) or self._unknown(key, "initializing")
                   or self._fenced_state(key, state_epoch, "Initialize"))
        if refused is not None:
            return out.result(refused)
        if start_offset < UNINITIALIZED_START_OFFSET:
            return out.result(_answer_error(ErrorCode.INVALID_REQUEST, f"Invalid start offset {start_offset}."))
        current = self.offsets.get(key)
        # Kafka's ShareGroupOffset.fromRequest: with a start offset the lag can be counted from it (0 complete),
        # without one (-1: the leader starts at share.auto.offset.reset) it cannot yet (-1).
        self._emit(out, ShareRecord(
            ShareRecordType.SHARE_SNAPSHOT, key, snapshot_epoch=0 if current is None else current.snapshot_epoch + 1,
            state_epoch=state_epoch, leader_epoch=0, start_offset=start_offset,
            delivery_complete_count=-1 if start_offset == UNINITIALIZED_START_OFFSET else 0, batches=(),
            create_timestamp=now_ms, write_timestamp=now_ms))
        counts = self.counts

        def logged(error: BaseException | None) -> None:
            if error is None:
                counts.initialized += 1
                log.info("share-partition state initialized", group_id=key.group_id, topic_id=uuid_string(key.topic_id),
                         partition=key.partition, state_epoch=state_epoch, start_offset=start_offset,
                         state_partition=self.partition)

        out.callbacks.append(logged)
        return out.result(ShareStateAnswer(state_epoch=state_epoch, start_offset=start_offset))

    # ------------------------------------------------------------------------------------------------
    # ReadShareGroupState (84)

    def read(self, key: ShareStateKey, leader_epoch: int, now_ms: int) -> Result:
        out = Batch()
        refused = (self._invalid(key, leader_epoch=leader_epoch) or self._unknown(key, "reading")
                   or self._fenced_leader(key, leader_epoch, "Read"))
        if refused is not None:
            return out.result(refused)
        current = self.offsets.get(key)
        if current is None:
            return out.result(ShareStateAnswer())
        if leader_epoch != NO_LEADER_EPOCH and leader_epoch > self.leader_epochs.get(key, NO_LEADER_EPOCH):
            # A new leader has read: record its epoch, so that the one before it is fenced from now on.
            self._emit(out, self._state_record(key, current, leader_epoch, UNINITIALIZED_START_OFFSET,
                                               current.delivery_complete_count, (), now_ms))
        return out.result(ShareStateAnswer(state_epoch=current.state_epoch, leader_epoch=max(leader_epoch, current.leader_epoch),
                                           start_offset=current.start_offset,
                                           delivery_complete_count=current.delivery_complete_count,
                                           batches=current.batches))

    # ------------------------------------------------------------------------------------------------
    # WriteShareGroupState (85)

    def write(self, key: ShareStateKey, state_epoch: int, leader_epoch: int, start_offset: int,
              delivery_complete_count: int, batches: Sequence[StateBatch], now_ms: int) -> Result:
        out = Batch()
        refused = (self._invalid(key, state_epoch=state_epoch, leader_epoch=leader_epoch)
                   or self._fenced_leader(key, leader_epoch, "Write") or self._fenced_state(key, state_epoch, "Write")
                   or self._unknown(key, "writing") or self._invalid_batches(batches))
        if refused is not None:
            return out.result(refused)
        current = self.offsets.get(key)
        if current is None:
            self._emit(out, ShareRecord(
                ShareRecordType.SHARE_SNAPSHOT, key, snapshot_epoch=0, state_epoch=state_epoch,
                leader_epoch=max(leader_epoch, 0), start_offset=start_offset,
                delivery_complete_count=delivery_complete_count,
                batches=combine_state_batches((), batches, start_offset), create_timestamp=now_ms,
                write_timestamp=now_ms))
        else:
            self._emit(out, self._state_record(key, current, leader_epoch, start_offset, delivery_complete_count,
                                               batches, now_ms))
        counts = self.counts

        def count(error: BaseException | None) -> None:
            if error is None:
                counts.writes += 1

        out.callbacks.append(count)
        return out.result(ShareStateAnswer(state_epoch=state_epoch, leader_epoch=leader_epoch))

    @staticmethod
    def _invalid_batches(batches: Sequence[StateBatch]) -> ShareStateAnswer | None:
        for b in batches:
            if b.last_offset < b.first_offset or b.first_offset < 0 or b.delivery_count < 0:
                return _answer_error(ErrorCode.INVALID_REQUEST,
                                     f"Invalid state batch {b.first_offset}-{b.last_offset} count {b.delivery_count}.")
            if int(b.delivery_state) not in (0, 2, 4):
                return _answer_error(ErrorCode.INVALID_REQUEST,
                                     f"Invalid delivery state {int(b.delivery_state)} (0 available, 2 acknowledged, "
                                     "4 archived).")
        return None

    def _state_record(self, key: ShareStateKey, current: ShareGroupOffset, leader_epoch: int, start_offset: int,
                      delivery_complete_count: int, batches: Sequence[StateBatch], now_ms: int) -> ShareRecord:
        """A write's record for an existing share-partition: an update, or (every N updates) a snapshot of the
        state the update would have produced (Kafka's generateShareStateRecord)."""
        leader = max(leader_epoch, current.leader_epoch)
        if start_offset == UNINITIALIZED_START_OFFSET:
            start = current.start_offset
            complete = delivery_complete_count if delivery_complete_count != -1 else current.delivery_complete_count
        else:
            start = max(start_offset, current.start_offset)
            complete = delivery_complete_count
        if self.updates_since_snapshot.get(key, 0) >= self.config.snapshot_update_records_per_snapshot:
            return ShareRecord(ShareRecordType.SHARE_SNAPSHOT, key, snapshot_epoch=current.snapshot_epoch + 1,
                               state_epoch=current.state_epoch, leader_epoch=leader, start_offset=start,
                               delivery_complete_count=complete,
                               batches=combine_state_batches(current.batches, batches, start),
                               create_timestamp=current.create_timestamp or now_ms, write_timestamp=now_ms)
        return ShareRecord(ShareRecordType.SHARE_UPDATE, key, snapshot_epoch=current.snapshot_epoch,
                           leader_epoch=leader, start_offset=-1 if start == current.start_offset else start,
                           delivery_complete_count=complete, batches=tuple(batches))

    # ------------------------------------------------------------------------------------------------
    # Cold-partition snapshots, for pruning

    def snapshot_cold(self, log_end_offset: int, now_ms: int) -> Result:
        """One cold-snapshot round (module docstring): a ShareSnapshot of each live share-partition with none
        since the last mark, and the mark moved to `log_end_offset`, the log's end before these records.
        Answers the offset below which the log is redundant once these records are durable (the previous
        mark), or None after a load (no mark yet)."""
        out = Batch()
        previous = self.prune_mark
        for key, current in self.offsets.items():
            if key not in self.snapshotted_since_mark:
                self._emit(out, ShareRecord(
                    ShareRecordType.SHARE_SNAPSHOT, key, snapshot_epoch=current.snapshot_epoch + 1,
                    state_epoch=current.state_epoch,
                    leader_epoch=max(current.leader_epoch, self.leader_epochs.get(key, NO_LEADER_EPOCH)),
                    start_offset=current.start_offset, delivery_complete_count=current.delivery_complete_count,
                    batches=current.batches, create_timestamp=current.create_timestamp or now_ms,
                    write_timestamp=now_ms))
        # Reset before the records are replayed: those written now land past the new mark and count for it.
        self.snapshotted_since_mark = set()
        self.prune_mark = log_end_offset
        return out.result(previous)

    # ------------------------------------------------------------------------------------------------
    # DeleteShareGroupState (86)

    def delete(self, key: ShareStateKey, now_ms: int) -> Result:
        out = Batch()
        refused = self._invalid(key)
        if refused is not None:
            return out.result(refused)
        if key not in self.offsets:
            return out.result(ShareStateAnswer())
        self._emit(out, ShareRecord(ShareRecordType.SHARE_SNAPSHOT, key, batches=None))
        counts = self.counts

        def logged(error: BaseException | None) -> None:
            if error is None:
                counts.deleted += 1
                log.info("share-partition state deleted", group_id=key.group_id, topic_id=uuid_string(key.topic_id),
                         partition=key.partition, state_partition=self.partition)

        out.callbacks.append(logged)
        return out.result(ShareStateAnswer())

    # ------------------------------------------------------------------------------------------------
    # ReadShareGroupStateSummary (87)

    def read_summary(self, key: ShareStateKey) -> Result:
        out = Batch()
        refused = self._invalid(key) or self._unknown(key, "reading summary")
        if refused is not None:
            return out.result(refused)
        current = self.offsets.get(key)
        if current is None:
            return out.result(ShareStateAnswer())
        return out.result(ShareStateAnswer(state_epoch=current.state_epoch,
                                           leader_epoch=self.leader_epochs.get(key, current.leader_epoch),
                                           start_offset=current.start_offset,
                                           delivery_complete_count=current.delivery_complete_count))
