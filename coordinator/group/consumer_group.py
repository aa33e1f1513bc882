"""A KIP-848 consumer group: its replicated state, and the reconciliation of a member's assignment.

Theory of operation
-------------------
In the consumer protocol the coordinator assigns partitions itself. The state is entirely replicated:

- the group epoch, bumped whenever the membership, a subscription or the subscribed topics' metadata
  changes (ConsumerGroupMetadata record);
- per member, its subscription (ConsumerGroupMemberMetadata) and its current assignment with its member
  epoch and reconciliation state (ConsumerGroupCurrentMemberAssignment);
- the target assignment: what a server-side assignor computed for the group epoch it was computed at
  (ConsumerGroupTargetAssignmentMember per member, ConsumerGroupTargetAssignmentMetadata for the epoch).

A member converges on its target one heartbeat at a time (`reconcile`, Kafka's CurrentAssignmentBuilder):

    STABLE                  member epoch = target epoch; nothing to do
    UNREVOKED_PARTITIONS    must first give up partitions no longer in its target; it stays at its epoch
                            and is not given anything new until a heartbeat shows it no longer owns them
    UNRELEASED_PARTITIONS   moved to the target epoch, but some target partitions are still owned by
                            another member (still pending revocation there); they are added once free

So a partition is never owned by two members: it is assigned to its new owner only after the previous
owner has acknowledged its revocation. `partition_epochs` maps each owned partition (assigned or pending
revocation) to its owner's epoch; it is derived from the members' current assignments on replay.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import Enum, IntEnum

from odradek.protocol.errors import ErrorCode

from ..runtime import CoordinatorError

__all__ = [
    "Assignment",
    "ConsumerGroup",
    "ConsumerGroupMember",
    "ConsumerGroupState",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "MemberState",
    "reconcile",
    "validate_member_epoch",
]

LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2

Assignment = dict[uuid.UUID, frozenset[int]]


class MemberState(IntEnum):
    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned_partitions: Assignment = field(default_factory=dict)
    partitions_pending_revocation: Assignment = field(default_factory=dict)

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def replace(self, **changes) -> ConsumerGroupMember:
        return dataclasses.replace(self, **changes)


@dataclass(eq=True)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    target_assignment: dict[str, Assignment] = field(default_factory=dict)
    partition_epochs: dict[tuple[uuid.UUID, int], int] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for member in self.members.values():
            if not member.is_reconciled_to(self.assignment_epoch):
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    @property
    def is_empty(self) -> bool:
        return not self.members

    def current_partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        return self.partition_epochs.get((topic_id, partition), -1)

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def subscribed_topic_names(self) -> set[str]:
        topics: set[str] = set()
        for member in self.members.values():
            topics.update(member.subscribed_topic_names)
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        return any(topic in m.subscribed_topic_names for m in self.members.values())

    # -- replay (the only mutations) --

    def put_member(self, member: ConsumerGroupMember) -> None:
        old = self.members.get(member.member_id)
        if old is not None and old.instance_id is not None and self.static_members.get(old.instance_id) == old.member_id:
            del self.static_members[old.instance_id]
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove_member(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None and member.instance_id is not None and self.static_members.get(member.instance_id) == member_id:
            del self.static_members[member.instance_id]

    def update_partition_epochs(self, old: ConsumerGroupMember | None, new: ConsumerGroupMember | None) -> None:
        if old is not None:
            for assignment in (old.assigned_partitions, old.partitions_pending_revocation):
                for topic_id, partitions in assignment.items():
                    for p in partitions:
                        if self.partition_epochs.get((topic_id, p)) == old.member_epoch:
                            del self.partition_epochs[(topic_id, p)]
        if new is not None:
            for assignment in (new.assigned_partitions, new.partitions_pending_revocation):
                for topic_id, partitions in assignment.items():
                    for p in partitions:
                        self.partition_epochs[(topic_id, p)] = new.member_epoch

    # -- validation of offset requests (raises CoordinatorError) --

    def validate_offset_commit(self, member_id: str, group_instance_id: str | None, member_epoch: int,
                               api_version: int, is_transactional: bool = False) -> None:
        if member_epoch < 0 and not self.members:
            return
        if is_transactional and member_epoch < 0 and not member_id and group_instance_id is None:
            return
        member = self.members.get(member_id)
        if member is None:
            raise CoordinatorError(f"unknown member {member_id}", ErrorCode.UNKNOWN_MEMBER_ID)
        if not is_transactional and api_version < 9:
            raise CoordinatorError("members of a consumer group commit with OffsetCommit v9+",
                                   ErrorCode.UNSUPPORTED_VERSION)
        validate_member_epoch(member_epoch, member.member_epoch)

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> None:
        if member_epoch < 0 and member_id is None:
            return
        member = self.members.get(member_id or "")
        if member is None:
            raise CoordinatorError(f"unknown member {member_id}", ErrorCode.UNKNOWN_MEMBER_ID)
        validate_member_epoch(member_epoch, member.member_epoch)

    def validate_offset_delete(self) -> None:
        return None

    def validate_delete_group(self) -> None:
        if self.members:
            raise CoordinatorError("the group is not empty", ErrorCode.NON_EMPTY_GROUP)


def validate_member_epoch(received: int, expected: int) -> None:
    if received > expected:
        raise CoordinatorError(f"member epoch {received} is ahead of {expected}", ErrorCode.FENCED_MEMBER_EPOCH)
    if received < expected:
        raise CoordinatorError(f"member epoch {received} is older than {expected}", ErrorCode.STALE_MEMBER_EPOCH)


def owned_from_request(topic_partitions) -> Assignment | None:
    """The partitions a heartbeat says the member owns (None: the request did not say)."""
    if topic_partitions is None:
        return None
    owned: dict[uuid.UUID, set[int]] = {}
    for tp in topic_partitions:
        owned.setdefault(tp.topic_id, set()).update(tp.partitions)
    return {topic_id: frozenset(parts) for topic_id, parts in owned.items()}


def _owns_any(owned: Assignment | None, partitions: Assignment) -> bool:
    if owned is None:
        return True
    return any(owned.get(topic_id, frozenset()) & parts for topic_id, parts in partitions.items())


def reconcile(member: ConsumerGroupMember, target_epoch: int, target: Assignment, owned: Assignment | None,
              current_partition_epoch: Callable[[uuid.UUID, int], int],
              subscribed_topic_ids: Iterable[uuid.UUID]) -> ConsumerGroupMember:
    """The member's next state on its way to `target` (Kafka's CurrentAssignmentBuilder.build)."""
    if member.state is MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next_assignment(member, member.member_epoch, target_epoch, target, owned, current_partition_epoch,
                                subscribed_topic_ids)
    if member.state is MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.partitions_pending_revocation):
            return member
        return _next_assignment(member, member.member_epoch, target_epoch, target, owned, current_partition_epoch,
                                subscribed_topic_ids)
    if member.state is MemberState.UNRELEASED_PARTITIONS:
        return _next_assignment(member, member.member_epoch, target_epoch, target, owned, current_partition_epoch,
                                subscribed_topic_ids)
    if owned is None or owned:
        raise CoordinatorError("member in an unknown state must rejoin without partitions",
                               ErrorCode.FENCED_MEMBER_EPOCH)
    return _next_assignment(member, target_epoch, target_epoch, target, owned, current_partition_epoch,
                            subscribed_topic_ids)


def _next_assignment(member: ConsumerGroupMember, member_epoch: int, target_epoch: int, target: Assignment,
                     owned: Assignment | None, current_partition_epoch: Callable[[uuid.UUID, int], int],
                     subscribed_topic_ids: Iterable[uuid.UUID]) -> ConsumerGroupMember:
    subscribed = set(subscribed_topic_ids)
    has_unreleased = False
    new_assigned: dict[uuid.UUID, frozenset[int]] = {}
    new_pending_revocation: dict[uuid.UUID, frozenset[int]] = {}
    new_pending_assignment: dict[uuid.UUID, frozenset[int]] = {}
    for topic_id in set(target) | set(member.assigned_partitions):
        target_parts = target.get(topic_id, frozenset()) if topic_id in subscribed else frozenset()
        current = member.assigned_partitions.get(topic_id, frozenset())
        assigned = current & target_parts
        revoking = current - assigned
        own_pending = member.partitions_pending_revocation.get(topic_id, frozenset())
        pending_assignment = set()
        for p in target_parts - assigned:
            # A partition still owned by another member is not free yet; one this member is itself
            # revoking is (only one member owns a partition at a time).
            if current_partition_epoch(topic_id, p) != -1 and p not in own_pending:
                has_unreleased = True
            else:
                pending_assignment.add(p)
        if assigned:
            new_assigned[topic_id] = assigned
        if revoking:
            new_pending_revocation[topic_id] = revoking
        if pending_assignment:
            new_pending_assignment[topic_id] = frozenset(pending_assignment)
    if new_pending_revocation and _owns_any(owned, new_pending_revocation):
        return member.replace(
            state=MemberState.UNREVOKED_PARTITIONS,
            previous_member_epoch=member.member_epoch,
            member_epoch=member_epoch,
            assigned_partitions=new_assigned,
            partitions_pending_revocation=new_pending_revocation,
        )
    for topic_id, parts in new_pending_assignment.items():
        new_assigned[topic_id] = new_assigned.get(topic_id, frozenset()) | parts
    return member.replace(
        state=MemberState.UNRELEASED_PARTITIONS if has_unreleased else MemberState.STABLE,
        previous_member_epoch=member.member_epoch,
        member_epoch=target_epoch,
        assigned_partitions=new_assigned,
        partitions_pending_revocation={},
    )
