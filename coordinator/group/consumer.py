"""The consumer group protocol (KIP-848): ConsumerGroupHeartbeat and ConsumerGroupDescribe on a shard.

Theory of operation
-------------------
One heartbeat is one write operation in three steps, as in Kafka's GroupMetadataManager:

1. The member is created or updated. A changed subscription (or a new member) bumps the group epoch; so
   does a change in the metadata of the subscribed topics (a topic created, deleted or grown), noticed
   through a hash of it kept in the group's epoch record.
2. If the group epoch is ahead of the target assignment's epoch, the group's assignor computes a new
   target assignment for every member; the members whose target changed get a record.
3. The member's current assignment is reconciled towards its target (consumer_group.reconcile): it
   first revokes what it must give up, then receives the rest once the previous owners released it.

Everything it decides is in records; the group object changes only on replay. The response carries the
member's epoch and, when it changed or the request was a full one (joining, or after an error), its
assignment.

Timers: a member's session (`group.consumer.session.timeout.ms`, re-armed by each heartbeat) and, while
it owes revocations, its rebalance timeout. Either expiring fences the member: its records are
tombstoned and the group epoch bumped, so the others rebalance without it.

A static member (instance id) that leaves with epoch -2 keeps its assignment until its session expires;
a new member id joining with the same instance id within that time takes its place and its partitions
without a rebalance.
"""

from __future__ import annotations

import base64
import hashlib
import re
import uuid
from typing import TYPE_CHECKING

import structlog

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatResponse

from .assignors import ASSIGNORS
from .consumer_group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    Assignment,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    owned_from_request,
    reconcile,
    validate_member_epoch,
)
from .records import (
    ConsumerGroupMemberMetadataValue,
    CoordinatorRecord,
    RecordType,
    consumer_group_epoch_record,
    consumer_group_epoch_tombstone,
    consumer_group_member_record,
    consumer_group_member_tombstone,
    current_assignment_record,
    current_assignment_tombstone,
    target_assignment_epoch_record,
    target_assignment_epoch_tombstone,
    target_assignment_member_record,
    target_assignment_member_tombstone,
)
from ..runtime import Batch, CoordinatorError, Result
from .committed import CommittedView

if TYPE_CHECKING:
    from .shard import GroupCoordinatorShard

__all__ = ["ConsumerGroupManager", "kafka_uuid_string"]

log = structlog.get_logger("odradek.coordinator.group")

ALL_GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)  # READ DELETE DESCRIBE *_CONFIGS


def kafka_uuid_string(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, unpadded."""
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode("ascii")


def _assignment_from(topic_partitions) -> Assignment:
    return {tp.topic_id: frozenset(tp.partitions) for tp in topic_partitions if tp.partitions}


# Records keyed by a member (their key has a member_id).
_MEMBER_RECORDS = (
    RecordType.CONSUMER_GROUP_MEMBER_METADATA,
    RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
)
_GROUP = None  # the committed view's key for the group's own existence (a member's key is its id)


class ConsumerGroupManager:
    def __init__(self, shard: GroupCoordinatorShard) -> None:
        self.shard = shard
        self.config = shard.config
        # What OffsetFetch validates, as Kafka does, at the high watermark (committed.py): whether each
        # group existed as a consumer group then (key None, value 0) and its members' epochs (key: member
        # id; None: not a member), for the groups changed by records not committed yet.
        self.committed_members: CommittedView[str | None, int] = CommittedView()

    @property
    def groups(self) -> dict[str, ConsumerGroup]:
        return self.shard.consumer_groups

    # ------------------------------------------------------------------------------------------------
    # Replay

    def replay(self, record: CoordinatorRecord) -> None:
        at = self.shard.replaying_offset()
        view = self.committed_members
        if at is None and not view:
            self._replay(record)
            return
        view.advance(self.shard.committed_offset())
        group_id = record.key.group_id
        member_id = record.key.member_id if record.type in _MEMBER_RECORDS else None
        existed, epoch = self._fetch_state(group_id, member_id)
        self._replay(record)
        exists, new_epoch = self._fetch_state(group_id, member_id)
        if exists != existed:
            view.change(group_id, _GROUP, exists, at, existed)
        if member_id is not None and new_epoch != epoch:
            view.change(group_id, member_id, new_epoch, at, epoch)

    def _fetch_state(self, group_id: str, member_id: str | None) -> tuple[int | None, int | None]:
        """(0 if the group exists else None, the member's epoch or None): what OffsetFetch validates."""
        group = self.groups.get(group_id)
        if group is None:
            return None, None
        member = group.members.get(member_id) if member_id is not None else None
        return 0, (member.member_epoch if member is not None else None)

    def validate_offset_fetch(self, group: ConsumerGroup, member_id: str | None, member_epoch: int) -> None:
        """ConsumerGroup.validate_offset_fetch at the high watermark, as Kafka's read operation validates:
        a member's epoch as committed (a new epoch is told to the member only once it is committed, so a
        fetch with the one it knows must not be STALE_MEMBER_EPOCH meanwhile). A group that was not a
        consumer group at the high watermark checks no member: Kafka finds no group there (an empty answer)
        or the classic group it was (no member to check), and its offsets there are what is answered."""
        view = self.committed_members
        if not view:
            group.validate_offset_fetch(member_id, member_epoch)
            return
        view.advance(self.shard.committed_offset())
        if view.get(group.group_id, _GROUP, 0) is None:
            return
        if member_epoch < 0 and member_id is None:
            return
        member = group.members.get(member_id or "")
        committed_epoch = view.get(group.group_id, member_id or "", member.member_epoch if member is not None else None)
        if committed_epoch is None:
            raise CoordinatorError(f"unknown member {member_id}", ErrorCode.UNKNOWN_MEMBER_ID)
        validate_member_epoch(member_epoch, committed_epoch)

    def _replay(self, record: CoordinatorRecord) -> None:
        key, value = record.key, record.value
        group: ConsumerGroup | None
        t = record.type
        if t is RecordType.CONSUMER_GROUP_METADATA:
            if value is None:
                self.groups.pop(key.group_id, None)
            else:
                group = self._get_or_create(key.group_id)
                group.group_epoch = value.epoch
                group.metadata_hash = value.metadata_hash
        elif t is RecordType.CONSUMER_GROUP_MEMBER_METADATA:
            if value is None:
                group = self.groups.get(key.group_id)
                if group is not None:
                    group.remove_member(key.member_id)
                return
            group = self._get_or_create(key.group_id)
            member = group.members.get(key.member_id) or ConsumerGroupMember(key.member_id)
            group.put_member(member.replace(
                instance_id=value.instance_id,
                rack_id=value.rack_id,
                client_id=value.client_id,
                client_host=value.client_host,
                subscribed_topic_names=tuple(value.subscribed_topic_names),
                subscribed_topic_regex=value.subscribed_topic_regex,
                rebalance_timeout_ms=value.rebalance_timeout_ms,
                server_assignor=value.server_assignor,
            ))
        elif t is RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA:
            if value is None:
                group = self.groups.get(key.group_id)
                if group is not None:
                    group.assignment_epoch = 0
            else:
                self._get_or_create(key.group_id).assignment_epoch = value.assignment_epoch
        elif t is RecordType.CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER:
            if value is None:
                group = self.groups.get(key.group_id)
                if group is not None:
                    group.target_assignment.pop(key.member_id, None)
            else:
                self._get_or_create(key.group_id).target_assignment[key.member_id] = _assignment_from(
                    value.topic_partitions)
        elif t is RecordType.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT:
            group = self.groups.get(key.group_id) if value is None else self._get_or_create(key.group_id)
            if group is None:
                return
            old = group.members.get(key.member_id)
            if value is None:
                if old is not None:
                    group.update_partition_epochs(old, None)
                    group.put_member(old.replace(member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                                 previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                                                 state=MemberState.STABLE, assigned_partitions={},
                                                 partitions_pending_revocation={}))
                return
            base = old if old is not None else ConsumerGroupMember(key.member_id)
            try:
                state = MemberState(value.state)
            except ValueError:
                state = MemberState.UNKNOWN
            new = base.replace(
                member_epoch=value.member_epoch,
                previous_member_epoch=value.previous_member_epoch,
                state=state,
                assigned_partitions=_assignment_from(value.assigned_partitions),
                partitions_pending_revocation=_assignment_from(value.partitions_pending_revocation),
            )
            group.update_partition_epochs(old, new)
            group.put_member(new)

    def _get_or_create(self, group_id: str) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ConsumerGroup(group_id)
        return group

    # ------------------------------------------------------------------------------------------------
    # ConsumerGroupHeartbeat

    def heartbeat(self, request, version: int, client_id: str, client_host: str, now_ms: int) -> Result:
        out = Batch()
        try:
            self._validate(request, version)
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                response = self._leave(request, out)
            else:
                response = self._heartbeat(request, client_id, client_host, out, now_ms)
        except CoordinatorError as e:
            return Result(response=ConsumerGroupHeartbeatResponse(error_code=e.error_code, error_message=str(e) or None))
        return out.result(response)

    def _validate(self, request, version: int) -> None:
        def invalid(message: str) -> CoordinatorError:
            return CoordinatorError(message, ErrorCode.INVALID_REQUEST)

        epoch = request.member_epoch
        if (version >= 1 or epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH) and not request.member_id:
            raise invalid("MemberId can't be empty.")
        if not request.group_id:
            raise invalid("GroupId can't be empty.")
        if request.instance_id == "":
            raise invalid("InstanceId can't be empty.")
        if request.rack_id == "":
            raise invalid("RackId can't be empty.")
        if epoch == 0:
            if request.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if request.topic_partitions is None or request.topic_partitions:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                raise invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if request.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        if request.subscribed_topic_regex is not None:
            try:
                re.compile(request.subscribed_topic_regex)
            except re.error as e:
                raise CoordinatorError(f"SubscribedTopicRegex is not a valid regular expression: {e}",
                                       ErrorCode.INVALID_REGULAR_EXPRESSION) from e
        if request.server_assignor is not None and request.server_assignor not in self._assignors():
            raise CoordinatorError(
                f"ServerAssignor {request.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(self._assignors())}.", ErrorCode.UNSUPPORTED_ASSIGNOR)

    def _assignors(self) -> tuple[str, ...]:
        return tuple(name for name in self.config.consumer_group_assignors if name in ASSIGNORS)

    def _heartbeat(self, request, client_id: str, client_host: str, out: Batch, now_ms: int):
        group_id = request.group_id
        epoch = request.member_epoch
        joining = epoch == 0
        group = self._get_or_maybe_create_group(group_id, joining, out, now_ms)
        member_id = request.member_id or kafka_uuid_string(self.config.uuid_factory())
        if len(group.members) >= self.config.consumer_group_max_size and member_id not in group.members:
            raise CoordinatorError("the consumer group is full", ErrorCode.GROUP_MAX_SIZE_REACHED)
        owned = owned_from_request(request.topic_partitions)
        replaced: ConsumerGroupMember | None = None
        if request.instance_id is None:
            member = self._dynamic_member(group, member_id, epoch, owned, joining)
        else:
            member, replaced = self._static_member(group, member_id, epoch, request.instance_id, owned, joining, out)

        updated = member.replace(
            instance_id=request.instance_id if request.instance_id is not None else member.instance_id,
            rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(request.rebalance_timeout_ms if request.rebalance_timeout_ms != -1
                                  else member.rebalance_timeout_ms),
            server_assignor=request.server_assignor if request.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=(tuple(sorted(set(request.subscribed_topic_names)))
                                    if request.subscribed_topic_names is not None else member.subscribed_topic_names),
            subscribed_topic_regex=(request.subscribed_topic_regex if request.subscribed_topic_regex is not None
                                    else member.subscribed_topic_regex),
            client_id=client_id,
            client_host=client_host,
        )
        bump = group.group_epoch == 0
        if _subscription_fields(updated) != _subscription_fields(member) or replaced is not None:
            out.records.append(consumer_group_member_record(group_id, updated.member_id, _member_value(updated)))
            bump |= (updated.subscribed_topic_names != member.subscribed_topic_names
                     or updated.subscribed_topic_regex != member.subscribed_topic_regex
                     or updated.server_assignor != member.server_assignor)

        members_after = {m_id: m for m_id, m in group.members.items() if replaced is None or m_id != replaced.member_id}
        members_after[updated.member_id] = updated
        metadata_hash = self._metadata_hash(members_after.values())
        group_epoch = group.group_epoch
        if bump or metadata_hash != group.metadata_hash:
            group_epoch += 1
            out.records.append(consumer_group_epoch_record(group_id, group_epoch, metadata_hash))
            log.info("group rebalancing", group=group_id, group_epoch=group_epoch, members=len(members_after),
                     member=updated.member_id, client_id=client_id, type="consumer")

        if group_epoch > group.assignment_epoch:
            targets = self._update_target_assignment(
                group, group_epoch, members_after,
                (replaced.member_id, updated.member_id) if replaced is not None else None, out)
            target_epoch = group_epoch
            target = targets.get(updated.member_id, {})
        else:
            target_epoch = group.assignment_epoch
            target_owner = replaced.member_id if replaced is not None else updated.member_id
            target = group.target_assignment.get(target_owner, {})

        reconciled = self._maybe_reconcile(group, updated, target_epoch, target, owned, out, now_ms)
        self._schedule_session_timeout(group_id, reconciled.member_id, now_ms)

        response = ConsumerGroupHeartbeatResponse(
            error_code=ErrorCode.NONE,
            member_id=reconciled.member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.config.consumer_group_heartbeat_interval_ms,
        )
        full_request = joining or (request.rebalance_timeout_ms != -1 and request.topic_partitions is not None and (
            request.subscribed_topic_names is not None or request.subscribed_topic_regex is not None))
        if full_request or reconciled.assigned_partitions != member.assigned_partitions:
            response.assignment = _response_assignment(reconciled.assigned_partitions)
        return response

    def _get_or_maybe_create_group(self, group_id: str, create: bool, out: Batch, now_ms: int) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is not None:
            return group
        if group_id in self.shard.share_groups:
            raise CoordinatorError(f"Group {group_id} is not a consumer group.", ErrorCode.GROUP_ID_NOT_FOUND)
        classic = self.shard.classic_group(group_id)
        if classic is not None:
            if not create or not classic.is_empty or classic.pending_members:
                raise CoordinatorError(f"Group {group_id} is not a consumer group.", ErrorCode.GROUP_ID_NOT_FOUND)
            # An empty classic group (or a group of committed offsets only) becomes a consumer group.
            self.shard.delete_classic_group(classic, out, now_ms)
        elif not create:
            raise CoordinatorError(f"Group {group_id} not found.", ErrorCode.GROUP_ID_NOT_FOUND)
        log.info("group created", group=group_id, type="consumer")
        return ConsumerGroup(group_id)

    @staticmethod
    def _dynamic_member(group: ConsumerGroup, member_id: str, epoch: int, owned, joining: bool) -> ConsumerGroupMember:
        member = group.members.get(member_id)
        if member is None:
            if not joining:
                raise CoordinatorError(f"Member {member_id} is not a member of group {group.group_id}.",
                                       ErrorCode.UNKNOWN_MEMBER_ID)
            return ConsumerGroupMember(member_id)
        if not joining:
            _validate_member_epoch(member, epoch, owned)
        return member

    def _static_member(self, group: ConsumerGroup, member_id: str, epoch: int, instance_id: str, owned, joining: bool,
                       out: Batch) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
        existing = group.static_member(instance_id)
        if joining:
            if existing is None:
                return group.members.get(member_id) or ConsumerGroupMember(member_id), None
            if existing.member_id == member_id:
                return existing, None
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise CoordinatorError(
                    f"Static member {member_id} with instance id {instance_id} cannot join the group because the "
                    f"instance id is owned by {existing.member_id} member.", ErrorCode.UNRELEASED_INSTANCE_ID)
            # The instance comes back under a new member id: it takes the old member's place and partitions.
            new = existing.replace(member_id=member_id, member_epoch=0, previous_member_epoch=0)
            self._remove_member_records(group.group_id, existing.member_id, out)
            self._cancel_timers(group.group_id, existing.member_id)
            out.records.append(consumer_group_member_record(group.group_id, member_id, _member_value(new)))
            out.records.append(target_assignment_member_record(
                group.group_id, member_id, group.target_assignment.get(existing.member_id, {})))
            out.records.append(_current_assignment(group.group_id, new))
            return new, existing
        if existing is None:
            raise CoordinatorError(f"Instance id {instance_id} is unknown.", ErrorCode.UNKNOWN_MEMBER_ID)
        if existing.member_id != member_id:
            raise CoordinatorError(
                f"Static member {member_id} with instance id {instance_id} was fenced by member "
                f"{existing.member_id}.", ErrorCode.FENCED_INSTANCE_ID)
        _validate_member_epoch(existing, epoch, owned)
        return existing, None

    def _update_target_assignment(self, group: ConsumerGroup, group_epoch: int,
                                  members: dict[str, ConsumerGroupMember], replaced: tuple[str, str] | None,
                                  out: Batch) -> dict[str, Assignment]:
        subscriptions = {m_id: frozenset(self._subscribed_topic_ids(m)) for m_id, m in members.items()}
        partitions: dict[uuid.UUID, int] = {}
        topics = self.shard.topics
        if topics is not None:
            for topic_ids in subscriptions.values():
                for topic_id in topic_ids:
                    info = topics.topic_by_id(topic_id)
                    if info is not None:
                        partitions[topic_id] = info.num_partitions
        current = dict(group.target_assignment)
        if replaced is not None:
            old_id, new_id = replaced
            current[new_id] = current.pop(old_id, {})
        assignor = ASSIGNORS[self._preferred_assignor(members.values())]
        targets = assignor(subscriptions, partitions, current)
        for member_id in members:
            new = targets.get(member_id, {})
            if member_id not in current or current[member_id] != new:
                out.records.append(target_assignment_member_record(group.group_id, member_id, new))
        out.records.append(target_assignment_epoch_record(group.group_id, group_epoch))
        return targets

    def _preferred_assignor(self, members) -> str:
        assignors = self._assignors()
        counts: dict[str, int] = {}
        for m in members:
            if m.server_assignor in assignors:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if counts:
            return max(sorted(counts), key=lambda name: counts[name])
        return assignors[0] if assignors else "uniform"

    def _maybe_reconcile(self, group: ConsumerGroup, member: ConsumerGroupMember, target_epoch: int,
                         target: Assignment, owned, out: Batch, now_ms: int) -> ConsumerGroupMember:
        if member.is_reconciled_to(target_epoch):
            return member
        updated = reconcile(member, target_epoch, target, owned, group.current_partition_epoch,
                            self._subscribed_topic_ids(member))
        if updated != member:
            out.records.append(_current_assignment(group.group_id, updated))
            if updated.state is MemberState.UNREVOKED_PARTITIONS:
                self._schedule_rebalance_timeout(group.group_id, updated, now_ms)
            else:
                self.shard.cancel(("consumer-rebalance", group.group_id, updated.member_id))
        return updated

    # -- leaving and fencing --

    def _leave(self, request, out: Batch) -> ConsumerGroupHeartbeatResponse:
        group = self.groups.get(request.group_id)
        if group is None:
            raise CoordinatorError(f"Group {request.group_id} not found.", ErrorCode.GROUP_ID_NOT_FOUND)
        if request.instance_id is None:
            member = group.members.get(request.member_id)
            if member is None:
                raise CoordinatorError(f"Member {request.member_id} is not a member of group {group.group_id}.",
                                       ErrorCode.UNKNOWN_MEMBER_ID)
            self.fence_member(group, member, out)
            epoch = LEAVE_GROUP_MEMBER_EPOCH
        else:
            member = group.static_member(request.instance_id)
            if member is None:
                raise CoordinatorError(f"Instance id {request.instance_id} is unknown.", ErrorCode.UNKNOWN_MEMBER_ID)
            if member.member_id != request.member_id:
                raise CoordinatorError(f"Static member {request.member_id} was fenced by member {member.member_id}.",
                                       ErrorCode.FENCED_INSTANCE_ID)
            if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # A static member going away for a while keeps its partitions until its session expires.
                out.records.append(_current_assignment(group.group_id, member.replace(
                    member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, partitions_pending_revocation={})))
                epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
            else:
                self.fence_member(group, member, out)
                epoch = LEAVE_GROUP_MEMBER_EPOCH
        return ConsumerGroupHeartbeatResponse(error_code=ErrorCode.NONE, member_id=request.member_id,
                                              member_epoch=epoch)

    def fence_member(self, group: ConsumerGroup, member: ConsumerGroupMember, out: Batch) -> None:
        self._remove_member_records(group.group_id, member.member_id, out)
        remaining = [m for m_id, m in group.members.items() if m_id != member.member_id]
        if not remaining:
            log.info("group emptied", group=group.group_id, group_epoch=group.group_epoch + 1, type="consumer")
        out.records.append(consumer_group_epoch_record(group.group_id, group.group_epoch + 1,
                                                       self._metadata_hash(remaining)))
        self._cancel_timers(group.group_id, member.member_id)

    @staticmethod
    def _remove_member_records(group_id: str, member_id: str, out: Batch) -> None:
        out.records.append(current_assignment_tombstone(group_id, member_id))
        out.records.append(target_assignment_member_tombstone(group_id, member_id))
        out.records.append(consumer_group_member_tombstone(group_id, member_id))

    def delete_group(self, group_id: str, out: Batch) -> None:
        """Tombstones for a whole (empty) group; its members', if any, first."""
        group = self.groups.get(group_id)
        if group is None:
            return
        for member_id in group.members:
            self._remove_member_records(group_id, member_id, out)
            self._cancel_timers(group_id, member_id)
        out.records.append(target_assignment_epoch_tombstone(group_id))
        out.records.append(consumer_group_epoch_tombstone(group_id))

    # -- timers --

    def _schedule_session_timeout(self, group_id: str, member_id: str, now_ms: int) -> None:
        self.shard.schedule(("consumer-session", group_id, member_id),
                            now_ms + self.config.consumer_group_session_timeout_ms,
                            lambda shard, now: shard.consumer._on_session_timeout(group_id, member_id))

    def _schedule_rebalance_timeout(self, group_id: str, member: ConsumerGroupMember, now_ms: int) -> None:
        member_id, epoch = member.member_id, member.member_epoch
        self.shard.schedule(("consumer-rebalance", group_id, member_id), now_ms + max(member.rebalance_timeout_ms, 0),
                            lambda shard, now: shard.consumer._on_rebalance_timeout(group_id, member_id, epoch))

    def _cancel_timers(self, group_id: str, member_id: str) -> None:
        self.shard.cancel(("consumer-session", group_id, member_id))
        self.shard.cancel(("consumer-rebalance", group_id, member_id))

    def _on_session_timeout(self, group_id: str, member_id: str) -> Result:
        out = Batch()
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is not None and member is not None:
            self.fence_member(group, member, out)
        return out.result()

    def _on_rebalance_timeout(self, group_id: str, member_id: str, epoch: int) -> Result:
        out = Batch()
        group = self.groups.get(group_id)
        member = group.members.get(member_id) if group is not None else None
        if group is not None and member is not None and member.state is MemberState.UNREVOKED_PARTITIONS and member.member_epoch == epoch:
            self.fence_member(group, member, out)
        return out.result()

    def on_loaded(self, now_ms: int) -> None:
        for group in self.groups.values():
            for member in group.members.values():
                self._schedule_session_timeout(group.group_id, member.member_id, now_ms)
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    self._schedule_rebalance_timeout(group.group_id, member, now_ms)

    # -- subscriptions and topic metadata --

    def _subscribed_topic_names(self, member: ConsumerGroupMember) -> set[str]:
        names = set(member.subscribed_topic_names)
        topics = self.shard.topics
        if member.subscribed_topic_regex and topics is not None:
            pattern = re.compile(member.subscribed_topic_regex)
            names.update(name for name in topics.topic_names() if pattern.fullmatch(name))
        return names

    def _subscribed_topic_ids(self, member: ConsumerGroupMember) -> list[uuid.UUID]:
        topics = self.shard.topics
        if topics is None:
            return []
        ids = []
        for name in sorted(self._subscribed_topic_names(member)):
            info = topics.topic_by_name(name)
            if info is not None:
                ids.append(info.topic_id)
        return ids

    def _metadata_hash(self, members) -> int:
        """A hash of the metadata of every topic the members subscribe to (0: none)."""
        names: set[str] = set()
        for member in members:
            names |= self._subscribed_topic_names(member)
        topics = self.shard.topics
        digest = hashlib.blake2b(digest_size=8)
        found = False
        for name in sorted(names):
            info = topics.topic_by_name(name) if topics is not None else None
            if info is None:
                continue
            found = True
            digest.update(f"{name}\0{info.topic_id}\0{info.num_partitions}\0".encode())
        return int.from_bytes(digest.digest(), "big", signed=True) if found else 0

    # ------------------------------------------------------------------------------------------------
    # ConsumerGroupDescribe

    def describe(self, group_id: str, include_authorized_operations: bool, version: int):
        response_cls = ConsumerGroupDescribeResponse
        group = self.groups.get(group_id)
        if group is None:
            return response_cls.DescribedGroup(error_code=ErrorCode.GROUP_ID_NOT_FOUND, group_id=group_id,
                                               error_message=f"Group {group_id} is not a consumer group.")
        members = []
        for member in group.members.values():
            members.append(response_cls.DescribedGroup.Member(
                member_id=member.member_id,
                instance_id=member.instance_id,
                rack_id=member.rack_id,
                member_epoch=member.member_epoch,
                client_id=member.client_id,
                client_host=member.client_host,
                subscribed_topic_names=list(member.subscribed_topic_names),
                subscribed_topic_regex=member.subscribed_topic_regex,
                assignment=self._described_assignment(member.assigned_partitions),
                target_assignment=self._described_assignment(group.target_assignment.get(member.member_id, {})),
                member_type=1 if version >= 1 else -1,
            ))
        return response_cls.DescribedGroup(
            error_code=ErrorCode.NONE,
            group_id=group_id,
            group_state=str(group.state),
            group_epoch=group.group_epoch,
            assignment_epoch=group.assignment_epoch,
            assignor_name=self._preferred_assignor(group.members.values()),
            members=members,
            authorized_operations=ALL_GROUP_OPERATIONS if include_authorized_operations else -(1 << 31),
        )

    def _described_assignment(self, assignment: Assignment):
        assignment_cls = ConsumerGroupDescribeResponse.DescribedGroup.Member.Assignment
        topics = self.shard.topics
        topic_partitions = []
        for topic_id, partitions in sorted(assignment.items()):
            info = topics.topic_by_id(topic_id) if topics is not None else None
            topic_partitions.append(assignment_cls.TopicPartitions(
                topic_id=topic_id, topic_name=info.name if info is not None else "", partitions=sorted(partitions)))
        return assignment_cls(topic_partitions=topic_partitions)


def _validate_member_epoch(member: ConsumerGroupMember, received: int, owned) -> None:
    if received > member.member_epoch:
        raise CoordinatorError(
            f"The consumer group member has a greater member epoch ({received}) than the one known by the group "
            f"coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
            ErrorCode.FENCED_MEMBER_EPOCH)
    if received < member.member_epoch:
        # The previous epoch is accepted while the member holds no more than its assignment: the response
        # that bumped its epoch may have been lost.
        if received != member.previous_member_epoch or not _is_subset(owned, member.assigned_partitions):
            raise CoordinatorError(
                f"The consumer group member has a smaller member epoch ({received}) than the one known by the "
                f"group coordinator ({member.member_epoch}). The member must abandon all its partitions and rejoin.",
                ErrorCode.FENCED_MEMBER_EPOCH)


def _is_subset(owned: Assignment | None, assigned: Assignment) -> bool:
    if owned is None:
        return False
    return all(parts <= assigned.get(topic_id, frozenset()) for topic_id, parts in owned.items())


def _subscription_fields(member: ConsumerGroupMember) -> tuple:
    return (member.instance_id, member.rack_id, member.client_id, member.client_host, member.subscribed_topic_names,
            member.subscribed_topic_regex, member.rebalance_timeout_ms, member.server_assignor)


def _member_value(member: ConsumerGroupMember):
    return ConsumerGroupMemberMetadataValue(
        instance_id=member.instance_id,
        rack_id=member.rack_id,
        client_id=member.client_id,
        client_host=member.client_host,
        subscribed_topic_names=list(member.subscribed_topic_names),
        subscribed_topic_regex=member.subscribed_topic_regex,
        rebalance_timeout_ms=member.rebalance_timeout_ms,
        server_assignor=member.server_assignor,
    )


def _current_assignment(group_id: str, member: ConsumerGroupMember) -> CoordinatorRecord:
    return current_assignment_record(group_id, member.member_id, member.member_epoch, member.previous_member_epoch,
                                     int(member.state), member.assigned_partitions, member.partitions_pending_revocation)


def _response_assignment(assignment: Assignment):
    response_cls = ConsumerGroupHeartbeatResponse.Assignment
    return response_cls(topic_partitions=[
        response_cls.TopicPartitions(topic_id=topic_id, partitions=sorted(partitions))
        for topic_id, partitions in sorted(assignment.items()) if partitions
    ])
