"""A KIP-932 share group: its replicated state (members, subscriptions, target and current assignments).

Theory of operation
-------------------
A share group is a KIP-848 group without the revocation dance. Its state is entirely replicated in
`__consumer_offsets` (records 10-15, see records.py):

- the group epoch and a hash of the subscribed topics' metadata (ShareGroupMetadata), bumped when a
  member joins or leaves, a subscription changes or a subscribed topic is created, deleted or grown;
- per member its subscription (ShareGroupMemberMetadata) and its current assignment with its member
  epoch (ShareGroupCurrentMemberAssignment);
- the target assignment computed by the share assignor at an epoch (ShareGroupTargetAssignment*).

Since a partition may be consumed by many members at once (the share-partition leader hands each record
to one member under a lock), a member can take its target the moment it is computed: there is nothing to
revoke first, so a member's current assignment is always its target and its epoch the assignment epoch.
Kafka still writes both records (the layout is the consumer group's); so do we, for a faithful log.

States, as ShareGroupDescribe reports them (Kafka's ShareGroup.ShareGroupState): Empty (no member),
Stable (members), Dead (the group was deleted, or never existed).
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field
from enum import Enum

from odradek.protocol.errors import ErrorCode

from .share_state import StatePartitions
from ..runtime import CoordinatorError

__all__ = ["ShareGroup", "ShareGroupMember", "ShareGroupState"]

Assignment = dict[uuid.UUID, frozenset[int]]


class ShareGroupState(Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class ShareGroupMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: int = 0  # MemberState.STABLE: a share member never waits on a revocation
    assigned_partitions: Assignment = field(default_factory=dict)

    def replace(self, **changes) -> ShareGroupMember:
        return dataclasses.replace(self, **changes)


@dataclass(eq=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareGroupMember] = field(default_factory=dict)
    target_assignment: dict[str, Assignment] = field(default_factory=dict)
    # ShareGroupStatePartitionMetadata: which share-partitions have state with the share coordinator
    # (share_state.py).
    state_partitions: StatePartitions = field(default_factory=StatePartitions)

    @property
    def state(self) -> ShareGroupState:
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    @property
    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topic_names(self) -> set[str]:
        topics: set[str] = set()
        for member in self.members.values():
            topics.update(member.subscribed_topic_names)
        return topics

    # Offsets of a share group live in __share_group_state, not here: the offset APIs of classic and
    # consumer groups do not apply to it (Kafka answers them GROUP_ID_NOT_FOUND for a share group id).

    def validate_offset_commit(self, *args, **kwargs) -> None:
        raise CoordinatorError(f"Group {self.group_id} is a share group.", ErrorCode.GROUP_ID_NOT_FOUND)

    def validate_offset_fetch(self, *args, **kwargs) -> None:
        raise CoordinatorError(f"Group {self.group_id} is a share group.", ErrorCode.GROUP_ID_NOT_FOUND)

    def validate_offset_delete(self) -> None:
        raise CoordinatorError(f"Group {self.group_id} is a share group.", ErrorCode.GROUP_ID_NOT_FOUND)

    def validate_delete_group(self) -> None:
        if self.members:
            raise CoordinatorError("the group is not empty", ErrorCode.NON_EMPTY_GROUP)
