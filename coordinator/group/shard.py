"""One partition of `__consumer_offsets`: the groups that hash to it, as a replicated state machine.

Theory of operation
-------------------
The shard's replicated state is four tables, changed only by `replay(record)`:

    offsets          group -> (topic, partition) -> OffsetAndMetadata     OffsetCommit records
    group_metadata   classic group -> its last stable GroupMetadata value  GroupMetadata records
    consumer_groups  KIP-848 group -> ConsumerGroup                        ConsumerGroup* records
    share_groups     KIP-932 group -> ShareGroup                           ShareGroup* records

`replicated_state()` returns them; replaying the records an operation wrote onto a fresh shard gives the
same tables (the property the tests check). On top, while this broker leads the partition, the shard
keeps the live classic groups (classic_group.py explains why a rebalance in flight is not replicated):
built from `group_metadata` when the partition is loaded, created on first JoinGroup, and for a group
known only by its committed offsets (a "simple" group) on first use.

The shard is also the managers' window on the runtime: timers (`schedule`, `cancel`), follow-up writes
(`submit`), the clock, member ids, and the topics view.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import structlog

from odradek.protocol.errors import ErrorCode

from .classic import ClassicGroupManager
from .classic_group import ClassicGroup, ClassicGroupState
from .config import GroupCoordinatorConfig
from .consumer import ConsumerGroupManager
from .consumer_group import ConsumerGroup
from .offsets import OffsetAndMetadata, OffsetManager
from .records import CoordinatorRecord, RecordType, group_metadata_tombstone
from .share import ShareGroupManager
from .share_group import ShareGroup
from .share_state import Initialization
from ..runtime import Batch, CoordinatorError, Result
from ..topics import TopicsView

log = structlog.get_logger("odradek.coordinator.group")

if TYPE_CHECKING:
    from ..runtime import CoordinatorRuntime

__all__ = ["GroupCoordinatorShard"]

_OFFSET_TYPES = (RecordType.OFFSET_COMMIT, RecordType.OFFSET_COMMIT_LEGACY)
_CONSUMER_TYPES = (
    RecordType.CONSUMER_GROUP_METADATA,
    RecordType.CONSUMER_GROUP_MEMBER_METADATA,
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
)
_SHARE_TYPES = (
    RecordType.SHARE_GROUP_PARTITION_METADATA,
    RecordType.SHARE_GROUP_MEMBER_METADATA,
    RecordType.SHARE_GROUP_METADATA,
    RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA,
    RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
    RecordType.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    RecordType.SHARE_GROUP_STATE_PARTITION_METADATA,
)


class GroupCoordinatorShard:
    def __init__(self, partition: int, config: GroupCoordinatorConfig, runtime: CoordinatorRuntime | None = None,
                 topics: TopicsView | None = None) -> None:
        self.partition = partition
        self.config = config
        self.topics = topics
        self._runtime = runtime
        # Replicated state: changed by replay() only.
        self.offsets: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        self.group_metadata: dict[str, Any] = {}
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.share_groups: dict[str, ShareGroup] = {}
        # Offsets of open transactions: producer id -> group -> (topic, partition) -> offset (TxnOffsetCommit
        # records, replayed from transactional batches; their marker commits or drops them).
        self.pending_txn_offsets: dict[int, dict[str, dict[tuple[str, int], OffsetAndMetadata]]] = {}
        # The leader's live classic groups.
        self.classic_groups: dict[str, ClassicGroup] = {}
        self.classic = ClassicGroupManager(self)
        self.offset_manager = OffsetManager(self)
        self.consumer = ConsumerGroupManager(self)
        self.share = ShareGroupManager(self)
        # Set by the group coordinator: called with a share_state.Initialization once its records are
        # durable, for the broker to send through its persister.
        self.share_state_hook: Callable[[Initialization], None] | None = None
        # Whether the broker carries Initializations out (a persister is wired); without, share-partitions
        # have no state to wait for (share.py `_assignable`).
        self.share_state_wired: Callable[[], bool] = lambda: False
        # Set by the group coordinator: a group's dynamic GROUP configs (metadata/group_config.py), by name.
        self.group_configs: Callable[[str], Mapping[str, str]] = lambda group_id: {}

    # ------------------------------------------------------------------------------------------------
    # Replication

    def replay(self, record: CoordinatorRecord) -> None:
        if record.type in _OFFSET_TYPES:
            self.offset_manager.replay(record)
        elif record.type is RecordType.GROUP_METADATA:
            if record.value is None:
                self.group_metadata.pop(record.key.group, None)
            else:
                self.group_metadata[record.key.group] = record.value
        elif record.type in _CONSUMER_TYPES:
            self.consumer.replay(record)
        elif record.type in _SHARE_TYPES:
            self.share.replay(record)

    def replay_transactional(self, producer_id: int, producer_epoch: int, record: CoordinatorRecord) -> None:
        if record.type in _OFFSET_TYPES:
            self.offset_manager.replay_transactional(producer_id, record)

    def replay_end_transaction(self, producer_id: int, committed: bool) -> None:
        self.offset_manager.replay_end_transaction(producer_id, committed)

    def replicated_state(self) -> dict[str, Any]:
        return {
            "offsets": {g: dict(o) for g, o in self.offsets.items()},
            "group_metadata": dict(self.group_metadata),
            "consumer_groups": {g: _consumer_group_state(c) for g, c in self.consumer_groups.items()},
            "share_groups": {g: (s.group_epoch, s.metadata_hash, s.assignment_epoch, dict(s.members),
                                 dict(s.target_assignment)) for g, s in self.share_groups.items()},
        }

    def on_loaded(self, now_ms: int) -> None:
        for group_id, value in self.group_metadata.items():
            if group_id not in self.consumer_groups and group_id not in self.share_groups:
                group = ClassicGroup.from_record(group_id, value)
                self.classic_groups[group_id] = group
                self.classic.on_loaded(group, now_ms)
        self.consumer.on_loaded(now_ms)
        self.share.on_loaded(now_ms)
        self._schedule_cleanup(now_ms)

    def on_unloaded(self) -> None:
        for group in self.classic_groups.values():
            for member in group.members.values():
                self.classic._fence(member, ErrorCode.NOT_COORDINATOR)
        self.classic_groups.clear()

    # ------------------------------------------------------------------------------------------------
    # Groups

    def live_classic_group(self, group_id: str) -> ClassicGroup | None:
        return self.classic_groups.get(group_id)

    def classic_group(self, group_id: str) -> ClassicGroup | None:
        """The live classic group, built from its record or its offsets if not built yet."""
        group = self.classic_groups.get(group_id)
        if group is not None or group_id in self.consumer_groups or group_id in self.share_groups:
            return group
        value = self.group_metadata.get(group_id)
        if value is not None:
            group = self.classic_groups[group_id] = ClassicGroup.from_record(group_id, value)
            self.classic.on_loaded(group, self.now_ms())
        elif group_id in self.offsets:
            group = self.classic_groups[group_id] = ClassicGroup(group_id)
        return group

    def group(self, group_id: str) -> ClassicGroup | ConsumerGroup | ShareGroup | None:
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            return consumer_group
        share_group = self.share_groups.get(group_id)
        return share_group if share_group is not None else self.classic_group(group_id)

    def create_classic_group(self, group_id: str, now_ms: int) -> ClassicGroup:
        group = self.classic_groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=now_ms)
        log.info("group created", group=group_id, type="classic")
        return group

    def delete_classic_group(self, group: ClassicGroup, out: Batch, now_ms: int) -> None:
        out.records.append(group_metadata_tombstone(group.group_id))
        self.classic.on_deleted(group, now_ms)
        self.classic_groups.pop(group.group_id, None)

    def group_ids(self) -> list[str]:
        ids = dict.fromkeys(self.classic_groups)
        ids.update(dict.fromkeys(self.group_metadata))
        ids.update(dict.fromkeys(self.offsets))
        ids.update(dict.fromkeys(self.consumer_groups))
        ids.update(dict.fromkeys(self.share_groups))
        return list(ids)

    # -- DeleteGroups --

    def delete_groups(self, group_ids: list[str], now_ms: int) -> Result:
        """Response: [(group_id, error)]."""
        out = Batch()
        results = []
        for group_id in group_ids:
            group = self.group(group_id)
            if group is None:
                results.append((group_id, ErrorCode.GROUP_ID_NOT_FOUND))
                continue
            try:
                group.validate_delete_group()
            except CoordinatorError as e:
                results.append((group_id, e.error_code))
                continue
            self.offset_manager.delete_all(group_id, out)
            self._delete_group(group, out, now_ms)
            results.append((group_id, ErrorCode.NONE))
        return out.result(results)

    def _delete_group(self, group: ClassicGroup | ConsumerGroup | ShareGroup, out: Batch, now_ms: int) -> None:
        if isinstance(group, ClassicGroup):
            self.delete_classic_group(group, out, now_ms)
        elif isinstance(group, ShareGroup):
            self.share.delete_group(group.group_id, out)
        else:
            self.consumer.delete_group(group.group_id, out)

    # -- ListGroups --

    def list_groups(self) -> list[tuple[str, str, str, str]]:
        """[(group_id, protocol_type, state, type)] of every group that is not dead."""
        listed = []
        for group_id in self.group_ids():
            group = self.group(group_id)
            if group is None:
                continue
            if isinstance(group, ClassicGroup):
                if group.is_in(ClassicGroupState.DEAD):
                    continue
                listed.append((group_id, group.protocol_type or "", str(group.state), "classic"))
            elif isinstance(group, ShareGroup):
                listed.append((group_id, "share", str(group.state), "share"))
            else:
                listed.append((group_id, "consumer", str(group.state), "consumer"))
        return listed

    # -- retention --

    def _schedule_cleanup(self, now_ms: int) -> None:
        self.schedule(("cleanup-group-metadata",), now_ms + self.config.offsets_retention_check_interval_ms,
                      lambda shard, now: shard.cleanup_group_metadata(now))

    def cleanup_group_metadata(self, now_ms: int) -> Result:
        """Expire offsets that outlived their retention; delete groups left empty and without offsets."""
        out = Batch()
        for group_id in self.group_ids():
            if self.offset_manager.expire(group_id, now_ms, out):
                group = self.group(group_id)
                # An empty share group is kept: its progress (each share-partition's start offset and
                # acknowledged records) lives in __share_group_state, not in offsets here, and dropping the
                # group would forget it. Only DeleteGroups deletes a share group.
                if isinstance(group, ShareGroup):
                    continue
                if group is not None and group.is_empty and not getattr(group, "pending_members", None):
                    self._delete_group(group, out, now_ms)
        self._schedule_cleanup(now_ms)
        return out.result()

    # ------------------------------------------------------------------------------------------------
    # The runtime, for the managers

    def schedule(self, key: Any, deadline_ms: int, op: Callable[[GroupCoordinatorShard, int], Result]) -> None:
        if self._runtime is not None:
            self._runtime.schedule(self.partition, key, deadline_ms, op)

    def cancel(self, key: Any) -> None:
        if self._runtime is not None:
            self._runtime.cancel(self.partition, key)

    def submit(self, op: Callable[[GroupCoordinatorShard, int], Result]) -> None:
        """Run `op` as a write of its own, after the current one."""
        if self._runtime is not None:
            now_ms = self.now_ms()
            self._runtime.write(self.partition, lambda shard: op(shard, now_ms), now_ms)

    def on_committed(self, committed_offset: int) -> None:
        """The partition's high watermark advanced (the runtime's hook): the views of what is committed
        (committed.py) forget what it passed."""
        self.offset_manager.on_committed(committed_offset)
        self.consumer.committed_members.advance(committed_offset)

    def replaying_offset(self) -> int | None:
        """While the runtime replays records into this shard: the offset they are committed at (None: they
        are committed; always None without a runtime)."""
        return self._runtime.replaying_offset(self.partition) if self._runtime is not None else None

    def committed_offset(self) -> int:
        """The partition's high watermark as the runtime last heard it (-1 without a runtime)."""
        return self._runtime.committed_offset(self.partition) if self._runtime is not None else -1

    def now_ms(self) -> int:
        return self._runtime.clock_ms if self._runtime is not None else 0

    def new_member_id(self, prefix: str) -> str:
        return f"{prefix}-{self.config.uuid_factory()}"

    def topic_partition_exists(self, topic: str, partition: int) -> bool:
        if self.topics is None:
            return True
        info = self.topics.topic_by_name(topic)
        return info is not None and 0 <= partition < info.num_partitions


def _consumer_group_state(group: ConsumerGroup) -> tuple:
    return (group.group_epoch, group.metadata_hash, group.assignment_epoch, dict(group.members),
            dict(group.target_assignment), dict(group.partition_epochs), dict(group.static_members))
