"""How one partition's registration changes: the rules of Kafka's PartitionChangeBuilder, as a function.

Theory of operation
-------------------
Every change the controller makes to a partition (a broker fenced or unfenced, an ISR proposed by the
leader, an election, a reassignment begun, completed or cancelled) is written as one PartitionChangeRecord,
and every such record is built here from the partition as it is (`PartitionImage`) and the targets the
caller sets: the ISR, the replicas, the adding and removing replicas, the leader recovery state, and the
kind of election. The build, in Kafka's order:

1. A reassignment in progress completes if the target ISR, less the replicas being removed, holds every
   replica that stays: replicas and ISR drop the removed ones, adding/removing are cleared.
2. An election: the current leader stays if it is still a valid leader (in the target ISR and acceptable);
   otherwise the first valid replica in replica order (PREFERRED tries the first replica before keeping the
   current leader). Only UNCLEAN may then pick an acceptable replica outside the ISR: the ISR becomes that
   replica alone and the leader is RECOVERING. Nobody valid: the leader is -1 (NO_LEADER).
3. The replicas losing a member start a new leader epoch even when the leader stays (followers removed by
   a reassignment must not fetch as if nothing happened).
4. The target ISR is written if it differs, but never an empty one: Kafka (without ELR) keeps the last
   member of the ISR when it is fenced, so that the partition comes back with it and no other.
5. Replicas, adding, removing and the recovery state are written where they differ.

Nothing written: None (the partition needs no change). Replay (`merge_partition_change` in
metadata_image) bumps the leader epoch whenever the record names a leader, even the same one, and the
partition epoch on every record. The ISR shrinking alone does not bump the leader epoch: that was a
workaround for a broker bug (KAFKA-15021) that Kafka drops from metadata.version 3.6 on, and our brokers
read ISR changes from the partition epoch.

ELR (KIP-966, eligible leader replicas) is not implemented: the records never set it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from odradek.metadata.image import NO_LEADER, NO_LEADER_CHANGE, PartitionImage
from odradek.metadata.records import PartitionChangeRecord

__all__ = [
    "Election",
    "LeaderRecoveryState",
    "ReassignmentReplicas",
    "build_partition_change",
    "is_reassigning",
    "revert_reassignment",
]


class Election(IntEnum):
    PREFERRED = 0  # the first replica if it can lead, else as ONLINE
    ONLINE = 1  # keep the partition online from the ISR
    UNCLEAN = 2  # as ONLINE, else any acceptable replica (data written only to the ISR may be lost)


class LeaderRecoveryState(IntEnum):
    RECOVERED = 0
    RECOVERING = 1  # the leader was elected uncleanly and has not yet said it recovered
    NO_CHANGE = -1  # PartitionChangeRecord only


@dataclass(frozen=True, slots=True)
class ReassignmentReplicas:
    """A reassignment as the partition records it: `replicas` is the target followed by the replicas being
    removed, `adding` the target's new replicas, `removing` the current replicas not in the target."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    @classmethod
    def of(cls, current: Sequence[int], target: Sequence[int]) -> ReassignmentReplicas:
        removing = tuple(sorted(set(current) - set(target)))
        adding = tuple(sorted(set(target) - set(current)))
        return cls(tuple(target) + removing, adding, removing)

    @property
    def in_progress(self) -> bool:
        return bool(self.adding or self.removing)

    def original(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)

    def target(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    def completed(self, isr: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """(replicas, isr) once `isr` lets the reassignment complete, else None."""
        if not self.in_progress:
            return None
        new_isr = tuple(r for r in isr if r not in self.removing)
        new_replicas = self.target()
        if not new_isr or not new_replicas or not set(new_replicas) <= set(new_isr):
            return None
        return new_replicas, new_isr


def is_reassigning(partition: PartitionImage) -> bool:
    return bool(partition.adding_replicas or partition.removing_replicas)


def revert_reassignment(partition: PartitionImage) -> tuple[tuple[int, ...], tuple[int, ...], bool]:
    """(replicas, isr, unclean) after cancelling the partition's reassignment: the replicas being added go,
    those being removed stay. If only added replicas were in the ISR, the first original replica becomes
    the ISR, which is an unclean election (`unclean` True): allowed only where unclean election is."""
    ongoing = ReassignmentReplicas(partition.replicas, partition.adding_replicas, partition.removing_replicas)
    replicas = ongoing.original()
    isr = tuple(r for r in partition.isr if r not in ongoing.adding)
    if isr:
        return replicas, isr, False
    return replicas, replicas[:1], True


def build_partition_change(
    partition: PartitionImage,
    topic_id: uuid.UUID,
    partition_id: int,
    is_acceptable_leader: Callable[[int], bool],
    *,
    election: Election = Election.ONLINE,
    target_isr: Sequence[int] | None = None,
    target_replicas: Sequence[int] | None = None,
    target_removing: Sequence[int] | None = None,
    target_adding: Sequence[int] | None = None,
    target_leader_recovery_state: int | None = None,
) -> Any | None:  # a PartitionChangeRecord: the record classes are built at import, not types
    """The record moving `partition` to the targets (None: as it is), or None if nothing changes. See the
    module doc for the rules. `is_acceptable_leader(broker_id)`: registered, unfenced, not shutting down."""
    isr = list(partition.isr if target_isr is None else target_isr)
    replicas = list(partition.replicas if target_replicas is None else target_replicas)
    removing = list(partition.removing_replicas if target_removing is None else target_removing)
    adding = list(partition.adding_replicas if target_adding is None else target_adding)
    recovery = partition.leader_recovery_state if target_leader_recovery_state is None else target_leader_recovery_state

    completed = ReassignmentReplicas(tuple(replicas), tuple(adding), tuple(removing)).completed(isr)
    if completed is not None:
        replicas, isr = list(completed[0]), list(completed[1])
        removing, adding = [], []

    record = PartitionChangeRecord(partition_id=partition_id, topic_id=topic_id)

    def valid(broker_id: int) -> bool:
        return broker_id in isr and is_acceptable_leader(broker_id)

    leader, unclean = _elect(partition.leader, replicas, valid, is_acceptable_leader, election)
    if leader != partition.leader:
        record.leader = leader
        if unclean:
            # The new leader may lack records the ISR had: it is the ISR now, and recovering.
            record.isr = [leader]
            if partition.leader_recovery_state != LeaderRecoveryState.RECOVERING:
                record.leader_recovery_state = LeaderRecoveryState.RECOVERING
                recovery = LeaderRecoveryState.RECOVERING

    if record.leader == NO_LEADER_CHANGE and not set(partition.replicas) <= set(replicas):
        record.leader = partition.leader  # a replica leaves: a new leader epoch

    if record.isr is None and isr and tuple(isr) != partition.isr:
        record.isr = isr

    if replicas and tuple(replicas) != partition.replicas:
        record.replicas = replicas
    if tuple(removing) != partition.removing_replicas:
        record.removing_replicas = removing
    if tuple(adding) != partition.adding_replicas:
        record.adding_replicas = adding
    if recovery != partition.leader_recovery_state and record.leader_recovery_state == LeaderRecoveryState.NO_CHANGE:
        record.leader_recovery_state = recovery

    if _is_no_op(record):
        return None
    return record


def _elect(
    current: int,
    replicas: Sequence[int],
    valid: Callable[[int], bool],
    acceptable: Callable[[int], bool],
    election: Election,
) -> tuple[int, bool]:
    """(leader, unclean) as Kafka's PartitionChangeBuilder.electLeader, without ELR."""
    if election == Election.PREFERRED:
        if replicas and valid(replicas[0]):
            return replicas[0], False
        if valid(current):
            return current, False
        for r in replicas[1:]:
            if valid(r):
                return r, False
        return NO_LEADER, False
    if valid(current):
        return current, False
    for r in replicas:
        if valid(r):
            return r, False
    if election == Election.UNCLEAN:
        for r in replicas:
            if acceptable(r):
                return r, True
    return NO_LEADER, False


def _is_no_op(record) -> bool:
    return (
        record.isr is None
        and record.leader == NO_LEADER_CHANGE
        and record.replicas is None
        and record.removing_replicas is None
        and record.adding_replicas is None
        and record.leader_recovery_state == LeaderRecoveryState.NO_CHANGE
    )
