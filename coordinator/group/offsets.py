"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete and offset retention, over OffsetCommit records.

Theory of operation
-------------------
A commit is validated against the group it names, then written as one OffsetCommit record per partition;
the offsets table changes only when those records are replayed, so a fetch after the commit's response
sees it, and a coordinator that loads the partition sees the same table. Deleting an offset writes a
tombstone for its key.

Reads see what is committed. An OffsetFetch without `require_stable` is, in Kafka's GroupCoordinatorService,
a read operation: it reads the shard's timeline structures at the partition's last committed offset (its
high watermark), so an offset whose record is appended but not yet on every in-sync replica is not shown
to anyone, and nobody is told an offset a change of leader could still take back (the consumer that
committed it is answered only once it is committed, so it cannot tell the difference; another consumer
taking over the partition, or an admin listing the group's offsets, could). The same holds for a
deletion: a tombstone (OffsetDelete, DeleteGroups, retention) hides the offset once it is committed. The
shard itself replays every record at once (writes validate against the latest state, as Kafka's writes
do; runtime.py explains why the replicated state runs that far ahead of the high watermark safely), so
the reads need the offsets as they stood at the high watermark, and Kafka's general snapshot registry
would be more than that takes: a `CommittedView` (committed.py) keeps, for each key changed by a record
not committed yet, its value at the high watermark and the uncommitted values tagged with the offset the
high watermark must reach, in log order. The runtime reports the high watermark (`on_committed`), and the
view folds in and forgets what it has passed, so it holds no more than the offset records not yet
committed; a key it does not hold reads its latest value, which is then the committed one. The tags come
from the runtime (`replaying_offset`): the end offset a write's append returned, or, when a partition is
loaded, the position of each batch the high watermark has not passed yet; records below it are committed.
A change of leader that truncates the log unloads the shard, the view with it, and the next leader loads
what survived. A transaction's offsets are pending until its marker, and the marker reaches the
coordinator once it is committed (WriteTxnMarkers is an acks=all append): they take the key at the high
watermark at once, unless a newer plain commit holds it there, while records appended after the marker
and not yet committed stay hidden. A `require_stable` fetch (KIP-447) is a write without records, as in
Kafka: it reads the latest state and is answered once all of it is committed.

Kafka validates the fetch at the committed offset too (GroupMetadataManager.group(id, committedOffset),
ConsumerGroup.validateOffsetFetch reading its members there). A KIP-848 member's epoch is checked as
committed (consumer.py, `validate_offset_fetch`), so a member fetching with the epoch it was told is not
answered STALE_MEMBER_EPOCH while its next epoch waits for replication. A consumer group whose records
are not committed checks no member (Kafka finds no group there, or the classic group it was). A group
deleted by records not committed is not validated at all: it has no members (DeleteGroups requires
that), and its offsets show until the tombstones are committed. Classic groups are validated against
their live state, which only ever refuses a Dead group, one already gone from the replicated state.

Who may commit (Kafka's rules):
- generation -1 with no member id: an admin client or a consumer without group management, accepted
  while the group is empty; an unknown group is created on the fly as a "simple" classic group;
- a classic group member: its member id (and instance id, if static) must be known and its generation
  current (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID), and not while the group waits for
  the leader's assignment (REBALANCE_IN_PROGRESS);
- a KIP-848 member (v9+): its member epoch must equal the coordinator's (a newer epoch is
  FENCED_MEMBER_EPOCH, an older one STALE_MEMBER_EPOCH).

Retention (`offsets.retention.minutes`): every `offsets.retention.check.interval.ms` the coordinator expires
offsets of groups that no longer use them: an empty consumer group's offsets once the group has been
empty for the retention time; a "simple" group's offsets (no protocol type) retention time after their
commit; a stable consumer group's offsets for topics it no longer subscribes to. Offsets of a topic the
group subscribes to never expire. An offset committed with an explicit retention (OffsetCommit v2-4)
expires at its own expire timestamp instead, under the same conditions. A group left empty and without
offsets is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import structlog

from odradek.protocol.errors import ErrorCode

from .classic_group import ClassicGroup, ClassicGroupState
from .committed import CommittedView
from .consumer_group import ConsumerGroup
from .records import CoordinatorRecord, offset_commit_record, offset_commit_tombstone
from ..runtime import Batch, CoordinatorError, Result

if TYPE_CHECKING:
    from .shard import GroupCoordinatorShard

__all__ = ["NO_OFFSET", "OffsetAndMetadata", "OffsetManager", "PartitionCommit"]

NO_OFFSET = -1

log = structlog.get_logger("odradek.coordinator.group")


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    committed_offset: int
    leader_epoch: int  # -1: none
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1  # -1: expires by the group's retention rule
    # The record's place in replay (= log) order; a COMMIT marker keeps the newer of a pending and a
    # committed offset. Not part of the value: two replicas compare equal whatever they counted from.
    replayed_as: int = field(default=-1, compare=False)

    def is_expired(self, now_ms: int, base_timestamp_ms: int, retention_ms: int) -> bool:
        if self.expire_timestamp_ms >= 0:
            return now_ms >= self.expire_timestamp_ms
        return now_ms - base_timestamp_ms >= retention_ms


@dataclass(frozen=True, slots=True)
class PartitionCommit:
    """One partition of an OffsetCommit request, in the coordinator's terms."""

    topic: str
    partition: int
    committed_offset: int
    leader_epoch: int
    metadata: str | None


_Key = tuple[str, int]  # (topic, partition)


class OffsetManager:
    """Commits, fetches, deletes and expires offsets; the table is `shard.offsets`, changed by replay."""

    def __init__(self, shard: GroupCoordinatorShard) -> None:
        self.shard = shard
        self.config = shard.config
        self._replayed = 0  # offset records replayed so far: their log order
        self.committed_view: CommittedView[_Key, OffsetAndMetadata] = CommittedView()

    # -- the latest state and the committed one --

    def _set(self, group_id: str, key: _Key, value: OffsetAndMetadata | None) -> None:
        """The only change of `shard.offsets`: the latest value of the key, and what the view must keep."""
        offsets = self.shard.offsets
        group = offsets.get(group_id)
        latest = group.get(key) if group is not None else None
        at = self.shard.replaying_offset()
        if at is not None or self.committed_view:
            self.committed_view.advance(self.shard.committed_offset())
        self.committed_view.change(group_id, key, value, at, latest)
        if value is not None:
            (group if group is not None else offsets.setdefault(group_id, {}))[key] = value
        elif group is not None:
            group.pop(key, None)
            if not group:
                del offsets[group_id]

    def on_committed(self, committed_offset: int) -> None:
        """The partition's high watermark advanced (the runtime's hook)."""
        self.committed_view.advance(committed_offset)

    def committed_offsets(self, group_id: str) -> dict[_Key, OffsetAndMetadata]:
        """The group's offsets as of the partition's high watermark (what OffsetFetch answers)."""
        if self.committed_view:
            self.committed_view.advance(self.shard.committed_offset())
        return self.committed_view.of_group(group_id, self.shard.offsets.get(group_id, {}))

    # -- replay --

    def _offset_of(self, value) -> OffsetAndMetadata:
        self._replayed += 1
        return OffsetAndMetadata(committed_offset=value.offset, leader_epoch=value.leader_epoch, metadata=value.metadata,
                                 commit_timestamp_ms=value.commit_timestamp, expire_timestamp_ms=value.expire_timestamp,
                                 replayed_as=self._replayed)

    def replay_transactional(self, producer_id: int, record: CoordinatorRecord) -> None:
        """A TxnOffsetCommit record: pending until the producer's transaction ends."""
        if record.value is None:
            return
        key = record.key
        pending = self.shard.pending_txn_offsets.setdefault(producer_id, {})
        pending.setdefault(key.group, {})[(key.topic, key.partition)] = self._offset_of(record.value)

    def replay_end_transaction(self, producer_id: int, committed: bool) -> None:
        """The producer's marker: its pending offsets become the group's committed ones, or are dropped."""
        pending = self.shard.pending_txn_offsets.pop(producer_id, None)
        if not pending or not committed:
            return
        offsets = self.shard.offsets
        settled = self.shard.replaying_offset() is None  # the marker is committed (runtime.complete_transaction)
        if settled and self.committed_view:
            self.committed_view.advance(self.shard.committed_offset())
        for group_id, by_partition in pending.items():
            for key, offset in by_partition.items():
                existing = offsets.get(group_id, {}).get(key)
                if existing is None or offset.replayed_as > existing.replayed_as:
                    self._set(group_id, key, offset)
                else:
                    if settled:
                        # Committed beneath the newer plain commit that holds the latest value.
                        held, at_hw = self.committed_view.committed_value(group_id, key)
                        if held and (at_hw is None or offset.replayed_as > at_hw.replayed_as):
                            self.committed_view.replace_committed(group_id, key, offset)
                    log.info("transactional offset commit not materialized: a later plain commit holds the partition",
                             producer_id=producer_id, group_id=group_id, topic=key[0], partition=key[1],
                             pending_offset=offset.committed_offset, committed_offset=existing.committed_offset)

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        """An uncommitted transactional offset for the partition (OffsetFetch with require_stable waits)."""
        return any((topic, partition) in groups.get(group_id, ())
                   for groups in self.shard.pending_txn_offsets.values())

    def pending_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """The group's partitions with an offset pending in an open transaction."""
        return {key for groups in self.shard.pending_txn_offsets.values() for key in groups.get(group_id, ())}

    def has_open_transactions(self, group_id: str) -> bool:
        return any(group_id in groups for groups in self.shard.pending_txn_offsets.values())

    def replay(self, record: CoordinatorRecord) -> None:
        key = record.key
        if record.value is None:
            self._set(key.group, (key.topic, key.partition), None)
            self._drop_pending(key.group, (key.topic, key.partition))
            return
        self._set(key.group, (key.topic, key.partition), self._offset_of(record.value))

    def _drop_pending(self, group_id: str, partition_key: tuple[str, int]) -> None:
        """A tombstone deletes the key's pending offsets too (Kafka's replay of a tombstone): a transaction
        committed later must not bring back what was deleted."""
        pending = self.shard.pending_txn_offsets
        for groups in pending.values():
            by_partition = groups.get(group_id)
            if by_partition is not None:
                by_partition.pop(partition_key, None)
                if not by_partition:
                    del groups[group_id]

    # -- OffsetCommit --

    def commit(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id_or_member_epoch: int,
               retention_time_ms: int, partitions: list[PartitionCommit], api_version: int, now_ms: int) -> Result:
        """Response: one error code per entry of `partitions`, in order."""
        out = Batch()
        try:
            self._validate_commit(group_id, member_id, group_instance_id, generation_id_or_member_epoch, api_version,
                                  now_ms)
        except CoordinatorError as e:
            return out.result([e.error_code] * len(partitions))
        expire_timestamp_ms = now_ms + retention_time_ms if retention_time_ms >= 0 else -1
        return out.result(self._commit_records(out, group_id, partitions, now_ms, expire_timestamp_ms))

    def _commit_records(self, out: Batch, group_id: str, partitions: list[PartitionCommit], now_ms: int,
                        expire_timestamp_ms: int = -1) -> list[ErrorCode]:
        """An offset record in `out` for each valid entry; the entries' error codes, in order (OffsetCommit
        and TxnOffsetCommit check the same)."""
        errors = []
        for p in partitions:
            metadata = p.metadata if p.metadata is not None else ""
            if len(metadata.encode("utf-8")) > self.config.offset_metadata_max_bytes:
                errors.append(ErrorCode.OFFSET_METADATA_TOO_LARGE)
            elif not self.shard.topic_partition_exists(p.topic, p.partition):
                errors.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            else:
                out.records.append(offset_commit_record(group_id, p.topic, p.partition, p.committed_offset,
                                                        p.leader_epoch, metadata, now_ms, expire_timestamp_ms))
                errors.append(ErrorCode.NONE)
        return errors

    def _validate_commit(self, group_id: str, member_id: str, group_instance_id: str | None, generation: int,
                         api_version: int, now_ms: int) -> None:
        group = self.shard.group(group_id)
        if group is None:
            if generation >= 0:
                # v9+ says so; older clients expect ILLEGAL_GENERATION for a group that is gone.
                code = ErrorCode.GROUP_ID_NOT_FOUND if api_version >= 9 else ErrorCode.ILLEGAL_GENERATION
                raise CoordinatorError(f"group {group_id} does not exist", code)
            # A consumer that manages its own partitions (or an admin) commits into a "simple" group.
            group = self.shard.create_classic_group(group_id, now_ms)
        group.validate_offset_commit(member_id, group_instance_id, generation, api_version)

    # -- TxnOffsetCommit --

    def txn_commit(self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int,
                   producer_id: int, producer_epoch: int, partitions: list[PartitionCommit], api_version: int,
                   now_ms: int) -> Result:
        """Offsets written in the producer's transaction (a transactional batch); response: one error per
        entry of `partitions`. Kafka's rules: an unknown group is created as a "simple" group for
        generation -1, else ILLEGAL_GENERATION; a request without member and generation (v0-2) is let
        through even while the group has members, since those versions carry neither."""
        out = Batch()
        try:
            group = self.shard.group(group_id)
            if group is None:
                if generation_id >= 0:
                    raise CoordinatorError(f"group {group_id} does not exist", ErrorCode.ILLEGAL_GENERATION)
                group = self.shard.create_classic_group(group_id, now_ms)
            group.validate_offset_commit(member_id, group_instance_id, generation_id, api_version, is_transactional=True)
        except CoordinatorError as e:
            code = ErrorCode.ILLEGAL_GENERATION if e.error_code is ErrorCode.STALE_MEMBER_EPOCH else e.error_code
            return out.result([code] * len(partitions))
        result = out.result(self._commit_records(out, group_id, partitions, now_ms))
        result.producer = (producer_id, producer_epoch)
        return result

    # -- OffsetFetch --

    def fetch(self, group_id: str, member_id: str | None, member_epoch: int,
              topics: list[tuple[str, list[int]]] | None,
              latest: bool = False) -> tuple[ErrorCode, list[tuple[str, list[tuple[int, OffsetAndMetadata | None]]]]]:
        """(group error, [(topic, [(partition, offset or None)])]); `topics` None asks for every offset. The
        offsets at the high watermark, or with `latest` (a require_stable fetch, answered only once all
        is committed) the latest replayed ones."""
        group = self.shard.group(group_id)
        committed = self.shard.offsets.get(group_id, {}) if latest else self.committed_offsets(group_id)
        if group is not None:
            try:
                if isinstance(group, ConsumerGroup) and not latest:
                    self.shard.consumer.validate_offset_fetch(group, member_id, member_epoch)
                else:
                    group.validate_offset_fetch(member_id, member_epoch)
            except CoordinatorError as e:
                if e.error_code is not ErrorCode.GROUP_ID_NOT_FOUND:
                    return e.error_code, []
                committed = {}
        if topics is None:
            by_topic: dict[str, list[tuple[int, OffsetAndMetadata | None]]] = {}
            for (topic, partition), offset in sorted(committed.items()):
                by_topic.setdefault(topic, []).append((partition, offset))
            return ErrorCode.NONE, list(by_topic.items())
        return ErrorCode.NONE, [
            (topic, [(partition, committed.get((topic, partition))) for partition in partitions])
            for topic, partitions in topics
        ]

    # -- OffsetDelete --

    def delete(self, group_id: str, topics: list[tuple[str, list[int]]]) -> Result:
        """Response: (group error, [(topic, [(partition, error)])])."""
        out = Batch()
        group = self.shard.group(group_id)
        if group is None:
            return out.result((ErrorCode.GROUP_ID_NOT_FOUND, []))
        try:
            group.validate_offset_delete()
        except CoordinatorError as e:
            return out.result((e.error_code, []))
        committed = self.shard.offsets.get(group_id, {})
        pending = self.pending_partitions(group_id)
        results = []
        for topic, partitions in topics:
            subscribed = not group.is_empty and group.is_subscribed_to_topic(topic)
            errors = []
            for partition in partitions:
                if subscribed:
                    errors.append((partition, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC))
                    continue
                if (topic, partition) in committed or (topic, partition) in pending:
                    out.records.append(offset_commit_tombstone(group_id, topic, partition))
                errors.append((partition, ErrorCode.NONE))
            results.append((topic, errors))
        return out.result((ErrorCode.NONE, results))

    def delete_all(self, group_id: str, out: Batch) -> int:
        """Tombstones for every committed offset of the group and every partition that only has a pending one."""
        keys = set(self.shard.offsets.get(group_id, {})) | self.pending_partitions(group_id)
        for topic, partition in sorted(keys):
            out.records.append(offset_commit_tombstone(group_id, topic, partition))
        return len(keys)

    # -- retention --

    def expire(self, group_id: str, now_ms: int, out: Batch) -> bool:
        """Tombstone the group's expired offsets; True when the group is left without offsets."""
        committed = self.shard.offsets.get(group_id)
        if not committed:
            return not self.has_open_transactions(group_id)
        group = self.shard.group(group_id)
        condition = self._expiration_condition(group)
        if condition is None:
            return False
        retention_ms = self.config.offsets_retention_ms
        pending = self.pending_partitions(group_id)
        expired = 0
        for (topic, partition), offset in committed.items():
            base_timestamp_ms = condition(topic, offset)
            if (base_timestamp_ms is not None and offset.is_expired(now_ms, base_timestamp_ms, retention_ms)
                    and (topic, partition) not in pending):
                out.records.append(offset_commit_tombstone(group_id, topic, partition))
                expired += 1
        return expired == len(committed) and not self.has_open_transactions(group_id)

    def _expiration_condition(self, group):
        """(topic, offset) -> the timestamp its retention counts from, or None to keep it."""
        if group is None:
            return lambda topic, offset: offset.commit_timestamp_ms
        if isinstance(group, ClassicGroup):
            if group.protocol_type is None:
                return lambda topic, offset: offset.commit_timestamp_ms
            if group.is_empty:
                since = group.state_timestamp_ms
                return lambda topic, offset: since if since >= 0 else offset.commit_timestamp_ms
            subscribed = group.subscribed_topics() if group.is_in(ClassicGroupState.STABLE) else None
            if group.protocol_type == "consumer" and subscribed is not None:
                return lambda topic, offset: None if topic in subscribed else offset.commit_timestamp_ms
            return None
        if group.is_empty:
            return lambda topic, offset: offset.commit_timestamp_ms
        subscribed_topics = group.subscribed_topic_names()
        return lambda topic, offset: None if topic in subscribed_topics else offset.commit_timestamp_ms
