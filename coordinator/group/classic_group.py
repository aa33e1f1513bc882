"""A classic (JoinGroup/SyncGroup) group as the coordinator holds it while it leads the partition.

Theory of operation
-------------------
A classic group rebalances in generations. Members send JoinGroup; once every known member has rejoined
(or the rebalance timeout ends the wait), the join phase completes: the generation is bumped, one
protocol is selected among those every member supports, and the leader receives every member's
metadata. The leader computes the assignment and sends it in SyncGroup; the coordinator stores the group
(a GroupMetadata record) and hands each member its assignment. Heartbeats keep members alive between
rebalances and tell them, with REBALANCE_IN_PROGRESS, to rejoin.

The states, and the only moves between them (`TRANSITIONS`, enforced by `transition_to`):

    Empty ──────────────── first member joins ───────────────▶ PreparingRebalance
    PreparingRebalance ─── join phase complete, members ─────▶ CompletingRebalance
    PreparingRebalance ─── join phase complete, no member ───▶ Empty
    CompletingRebalance ── leader's assignment durable ──────▶ Stable
    CompletingRebalance ── member joins / leaves / expires ──▶ PreparingRebalance
    Stable ─────────────── member joins / leaves / expires ──▶ PreparingRebalance
    any state ──────────── group deleted or unloaded ────────▶ Dead

What is replicated and what is not. The GroupMetadata record holds the group at its last stable point
(generation, protocol, leader, members with their subscription and assignment), and the coordinator's
replicated state holds exactly that (`GroupCoordinatorShard.replay`). This object is the leader's live
view on top of it: the rebalance in flight, members' pending JoinGroup/SyncGroup responses (long polls
tied to connections on this broker), members waiting for a member id. None of that survives a change of
leader, in Kafka neither: clients answer NOT_COORDINATOR by finding the new coordinator and rejoining.
A loaded group starts from its record: Stable with the recorded members, or Empty.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import Enum

import structlog

from odradek.protocol.codec import decode_from
from odradek.protocol.errors import ErrorCode, ProtocolError
from odradek.protocol.messages import ConsumerProtocolSubscription

from .records import GroupMetadataValue
from odradek.purgatory.deferred import Deferred

from ..runtime import CoordinatorError

log = structlog.get_logger("odradek.coordinator.group")

__all__ = [
    "ClassicGroup",
    "ClassicGroupMember",
    "ClassicGroupState",
    "IllegalStateTransition",
    "TRANSITIONS",
    "parse_subscription_topics",
]


class ClassicGroupState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    def __str__(self) -> str:
        return self.value


_S = ClassicGroupState

# state -> the states it may move to. Everything that moves a classic group's state goes through here.
TRANSITIONS: dict[ClassicGroupState, frozenset[ClassicGroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE, _S.DEAD}),
    _S.PREPARING_REBALANCE: frozenset({_S.COMPLETING_REBALANCE, _S.EMPTY, _S.DEAD}),
    _S.COMPLETING_REBALANCE: frozenset({_S.STABLE, _S.PREPARING_REBALANCE, _S.DEAD}),
    _S.STABLE: frozenset({_S.PREPARING_REBALANCE, _S.DEAD}),
    _S.DEAD: frozenset({_S.DEAD}),
}


class IllegalStateTransition(Exception):
    """A move the transition table does not allow: a bug in the coordinator, never the client's fault."""


@dataclass(slots=True, eq=False)
class ClassicGroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata), in the member's order of preference
    assignment: bytes = b""
    join_deferred: Deferred | None = None
    sync_deferred: Deferred | None = None
    is_new: bool = False

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_deferred is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_deferred is not None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def has_satisfied_heartbeat(self) -> bool:
        """Whether a session expiry spares the member: one waiting in a rebalance is alive by definition,
        except a new member, whose join may be abandoned before it ever learns its member id."""
        if self.is_new:
            return False
        return self.is_awaiting_join or self.is_awaiting_sync


@dataclass(eq=False)
class ClassicGroup:
    group_id: str
    state: ClassicGroupState = ClassicGroupState.EMPTY
    previous_state: ClassicGroupState | None = None
    state_timestamp_ms: int = -1
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, ClassicGroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_members: set[str] = field(default_factory=set)  # given a member id, not yet rejoined with it
    pending_sync_members: set[str] = field(default_factory=set)
    new_member_added: bool = False
    _protocol_votes: Counter = field(default_factory=Counter)

    @classmethod
    def from_record(cls, group_id: str, value) -> ClassicGroup:
        """The group as a GroupMetadata record left it: Stable with its members, or Empty."""
        group = cls(
            group_id,
            state=ClassicGroupState.STABLE if value.members else ClassicGroupState.EMPTY,
            state_timestamp_ms=value.current_state_timestamp,
            generation_id=value.generation,
            protocol_type=value.protocol_type or None,
            protocol_name=value.protocol,
            leader_id=value.leader,
        )
        for m in value.members:
            member = ClassicGroupMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout,
                session_timeout_ms=m.session_timeout,
                protocol_type=value.protocol_type,
                protocols=[(value.protocol or "", bytes(m.subscription))],
                assignment=bytes(m.assignment),
            )
            group.members[member.member_id] = member
            group._protocol_votes.update(name for name, _ in member.protocols)
            if member.group_instance_id is not None:
                group.static_members[member.group_instance_id] = member.member_id
        return group

    def metadata_value(self, assignments: dict[str, bytes] | None = None):
        """The GroupMetadata record value for the group now, with `assignments` (default: the members')."""
        member_cls = GroupMetadataValue.MemberMetadata
        members = [
            member_cls(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms,
                subscription=m.metadata(self.protocol_name),
                assignment=(assignments.get(m.member_id, b"") if assignments is not None else m.assignment),
            )
            for m in self.members.values()
        ]
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id if self.members else None,
            current_state_timestamp=self.state_timestamp_ms,
            members=members,
        )

    # -- state --

    def transition_to(self, target: ClassicGroupState, now_ms: int) -> None:
        if target not in TRANSITIONS[self.state]:
            raise IllegalStateTransition(f"group {self.group_id}: {self.state} -> {target} is not a valid transition")
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = now_ms
        # Logged where the group lives (its coordinator), once per transition, as Kafka's GroupCoordinator
        # does ("Preparing to rebalance group", "Stabilized group", "Group ... transitioned to Empty/Dead").
        fields = {"group": self.group_id, "generation": self.generation_id, "members": len(self.members),
                  "previous_state": self.previous_state.value}
        if target is ClassicGroupState.PREPARING_REBALANCE:
            log.info("group rebalancing", **fields)
        elif target is ClassicGroupState.COMPLETING_REBALANCE:
            log.info("group rebalanced", **fields, protocol=self.protocol_name, leader=self.leader_id)
        elif target is ClassicGroupState.STABLE:
            log.debug("group stable", **fields)
        elif target is ClassicGroupState.EMPTY:
            log.info("group emptied", **fields)
        else:
            log.info("group dead", **fields)

    def is_in(self, *states: ClassicGroupState) -> bool:
        return self.state in states

    def can_rebalance(self) -> bool:
        return ClassicGroupState.PREPARING_REBALANCE in TRANSITIONS[self.state]

    @property
    def is_empty(self) -> bool:
        return self.state is ClassicGroupState.EMPTY

    # -- membership --

    def has_member(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def static_member_id(self, group_instance_id: str | None) -> str | None:
        return None if group_instance_id is None else self.static_members.get(group_instance_id)

    def add(self, member: ClassicGroupMember, join_deferred: Deferred | None = None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self._protocol_votes.update(name for name, _ in member.protocols)
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if self.leader_id is None:
            self.leader_id = member.member_id
        member.join_deferred = join_deferred
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> ClassicGroupMember | None:
        self.pending_members.discard(member_id)
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._protocol_votes.subtract(name for name, _ in member.protocols)
        self._protocol_votes += Counter()
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        self.pending_sync_members.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def update_member(self, member: ClassicGroupMember, protocols: list[tuple[str, bytes]], rebalance_timeout_ms: int,
                      session_timeout_ms: int, join_deferred: Deferred | None) -> Deferred | None:
        """Replace a member's protocols and timeouts; returns a join response it displaced, if any."""
        self._protocol_votes.subtract(name for name, _ in member.protocols)
        self._protocol_votes += Counter()
        member.protocols = protocols
        self._protocol_votes.update(name for name, _ in protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        displaced = member.join_deferred
        member.join_deferred = join_deferred
        return displaced if displaced is not join_deferred else None

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> tuple[
            ClassicGroupMember, ClassicGroupMember]:
        """Give a static member's place to a new member id; returns (old member, new member)."""
        old = self.members.pop(old_member_id)
        new = ClassicGroupMember(
            member_id=new_member_id,
            group_instance_id=old.group_instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
            assignment=old.assignment,
        )
        self.members[new_member_id] = new
        if old_member_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_member_id)
            self.pending_sync_members.add(new_member_id)
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return old, new

    @property
    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.is_awaiting_join)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def not_yet_rejoined(self) -> list[ClassicGroupMember]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    def has_received_sync_from_all_members(self) -> bool:
        return not self.pending_sync_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else promote a member that did; False if none did."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for member in self.members.values():
            if member.is_awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # -- protocols --

    def supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        names = {name for name, _ in protocols}
        if not self.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        return any(self._protocol_votes[name] == len(self.members) for name in names)

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self._protocol_votes.items() if count == n}

    def select_protocol(self) -> str:
        """The protocol most members prefer among those all of them support (ties: the leader's order)."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise IllegalStateTransition(f"group {self.group_id}: no protocol supported by every member")
        votes: Counter = Counter()
        for member in self.members.values():
            for name, _ in member.protocols:
                if name in candidates:
                    votes[name] += 1
                    break
        order = [name for name, _ in self.members[self.leader_id].protocols] if self.leader_id in self.members else []
        rank = {name: i for i, name in enumerate(order)}
        return max(votes, key=lambda name: (votes[name], -rank.get(name, len(rank))))

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        if self.members:
            self.protocol_name = self.select_protocol()
            self.transition_to(ClassicGroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.transition_to(ClassicGroupState.EMPTY, now_ms)
        self.pending_sync_members.clear()

    # -- responses --

    def current_members_metadata(self) -> list[tuple[ClassicGroupMember, bytes]]:
        return [(m, m.metadata(self.protocol_name)) for m in self.members.values()]

    def assignments(self) -> dict[str, bytes]:
        return {member_id: m.assignment for member_id, m in self.members.items()}

    # -- validation (raises CoordinatorError with the code to answer) --

    def validate_member(self, member_id: str, group_instance_id: str | None) -> None:
        if group_instance_id is not None:
            existing = self.static_members.get(group_instance_id)
            if existing is None:
                raise CoordinatorError(f"unknown group.instance.id {group_instance_id}", ErrorCode.UNKNOWN_MEMBER_ID)
            if existing != member_id:
                raise CoordinatorError(f"instance {group_instance_id} is owned by {existing}", ErrorCode.FENCED_INSTANCE_ID)
        elif member_id not in self.members:
            raise CoordinatorError(f"unknown member {member_id}", ErrorCode.UNKNOWN_MEMBER_ID)

    def validate_offset_commit(self, member_id: str, group_instance_id: str | None, generation_id: int,
                               api_version: int, is_transactional: bool = False) -> None:
        if self.state is _S.DEAD:
            raise CoordinatorError("group is dead", ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if generation_id < 0 and self.state is _S.EMPTY:
            return
        if generation_id >= 0 or member_id or group_instance_id is not None:
            self.validate_member(member_id, group_instance_id)
            if generation_id != self.generation_id:
                raise CoordinatorError(f"generation {generation_id} is not {self.generation_id}", ErrorCode.ILLEGAL_GENERATION)
        elif not is_transactional and self.state is not _S.EMPTY:
            raise CoordinatorError("commits without a member id need an empty group", ErrorCode.UNKNOWN_MEMBER_ID)
        if not is_transactional and self.state is _S.COMPLETING_REBALANCE:
            raise CoordinatorError("the group awaits its assignment", ErrorCode.REBALANCE_IN_PROGRESS)

    def validate_offset_fetch(self, member_id: str | None, member_epoch: int) -> None:
        if self.state is _S.DEAD:
            raise CoordinatorError("group is dead", ErrorCode.GROUP_ID_NOT_FOUND)

    def validate_offset_delete(self) -> None:
        if self.state is _S.DEAD:
            raise CoordinatorError("group is dead", ErrorCode.GROUP_ID_NOT_FOUND)
        if self.state is not _S.EMPTY and self.protocol_type != "consumer":
            raise CoordinatorError("the group is not empty", ErrorCode.NON_EMPTY_GROUP)

    def validate_delete_group(self) -> None:
        if self.state is _S.DEAD:
            raise CoordinatorError("group is dead", ErrorCode.GROUP_ID_NOT_FOUND)
        if self.state is not _S.EMPTY:
            raise CoordinatorError("the group is not empty", ErrorCode.NON_EMPTY_GROUP)

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to under the selected "consumer" protocol; None if unknown."""
        if self.protocol_type != "consumer" or self.protocol_name is None or not self.members:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            parsed = parse_subscription_topics(member.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics |= parsed
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        topics = self.subscribed_topics()
        return topics is not None and topic in topics


def parse_subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics of a "consumer" protocol subscription blob; None if it cannot be read.

    A blob newer than the newest layout we know is read with that layout, its tail ignored, as Kafka
    does: versions may only append fields.
    """
    if len(metadata) < 2:
        return None
    version = int.from_bytes(metadata[:2], "big", signed=True)
    if version < 0:
        return None
    low, high = ConsumerProtocolSubscription.VALID_VERSIONS
    try:
        subscription, _ = decode_from(ConsumerProtocolSubscription, metadata, min(max(version, low), high), 2)
    except ProtocolError:
        return None
    return set(subscription.topics)
