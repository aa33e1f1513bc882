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

Eligible leader replicas (KIP-966, with an `Elr` policy: the cluster finalized
eligible.leader.replicas.version 1)
-------------------------------------------------------------------------------------------------------
Kafka 4 brokers do not advance the high watermark while the ISR is smaller than min.insync.replicas
("strict min ISR"). So a replica that leaves the ISR while it is below min ISR, or that takes it below,
still holds every record under the high watermark: it is as good a leader as an ISR member, and the
partition remembers it in the ELR. The rules, Kafka's, in the order of the build:

a. ELR upkeep (before the election): with the target ISR at min ISR or above, the ELR is cleared (a
   full ISR needs no memory). Below it, the ELR becomes (the ELR and the current ISR) less the
   target ISR, less `unclean_shutdown` replicas: a broker that restarted without a clean shutdown may
   have lost records it had acknowledged, so it is no longer known to hold them. (And less the replicas a
   reassignment removes, which Kafka's builder keeps: a replica that is not one cannot lead.)
b. Election: a valid leader is in the target ISR, or, only when the ISR is empty, in the ELR (and
   acceptable). A leader taken from the ELR leaves it and becomes the ISR alone: a clean election.
c. An unclean election (or ELR off) clears the ELR: the new leader's log is the truth now.
d. The ISR may become empty (Kafka without ELR keeps the last member instead): the last members wait in
   the ELR. The first time it empties, LastKnownElr records the leader it had; once a leader is elected
   LastKnownElr is cleared.

One rule differs from Kafka, deliberately. With ISR and ELR both empty, Kafka 4 elects the last known
leader as soon as it is back ("balanced recovery", marked RECOVERING) even under ONLINE elections. But it
only gets there when every replica left the ELR, which (with clean shutdowns keeping their ELR place)
means they all restarted uncleanly: each may have lost acknowledged records it had not flushed, and
electing one silently makes the loss final. Odradek keeps such a partition offline (leader -1) until an
ISR or ELR member returns or an unclean election is allowed (the topic's unclean.leader.election.enable,
or ElectLeaders UNCLEAN): that election then prefers the last known leader, which had the most. The one
exception is a single-replica partition, where nothing better can ever return: its last leader is elected
at once, uncleanly (RECOVERING), as Kafka does.
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
    "Elr",
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
class Elr:
    """How a change keeps the ELR (the module doc's rules a-d): the topic's effective min ISR
    (min.insync.replicas bounded by the replication factor) and the replicas whose broker just registered
    after an unclean shutdown."""

    min_isr: int
    unclean_shutdown: tuple[int, ...] = ()


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
    elr: Elr | None = None,
) -> Any | None:  # a PartitionChangeRecord: the record classes are built at import, not types
    """The record moving `partition` to the targets (None: as it is), or None if nothing changes. See the
    module doc for the rules. `is_acceptable_leader(broker_id)`: registered, unfenced, not shutting down.
    `elr`: the ELR rules apply (None: ELR is off, and any ELR the partition has is cleared)."""
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

    # a. ELR upkeep.
    target_elr = list(partition.elr)
    if elr is not None:
        if len(isr) >= elr.min_isr:
            target_elr = []
        else:
            candidates = _ordered_union(partition.elr, partition.isr)
            target_elr = [r for r in candidates if r not in isr and r not in elr.unclean_shutdown and r in replicas]

    # b. Election.
    def valid(broker_id: int) -> bool:
        in_elr = not isr and broker_id in target_elr
        return (broker_id in isr or in_elr) and is_acceptable_leader(broker_id)

    last_known = _last_known_leader(partition, isr, target_elr, replicas, elr)
    leader, unclean = _elect(partition.leader, replicas, valid, is_acceptable_leader, election, last_known)
    if leader != partition.leader:
        record.leader = leader
        if leader in target_elr:
            isr = [leader]
            target_elr = [r for r in target_elr if r != leader]
        if unclean:
            # The new leader may lack records the ISR had: it is the ISR now, and recovering.
            record.isr = [leader]
            if partition.leader_recovery_state != LeaderRecoveryState.RECOVERING:
                record.leader_recovery_state = LeaderRecoveryState.RECOVERING
                recovery = LeaderRecoveryState.RECOVERING

    if record.leader == NO_LEADER_CHANGE and not set(partition.replicas) <= set(replicas):
        record.leader = partition.leader  # a replica leaves: a new leader epoch

    # c. An unclean election, or ELR off, clears the ELR fields.
    if record.isr is not None or elr is None:
        target_elr = []
    if tuple(target_elr) != partition.elr:
        record.eligible_leader_replicas = target_elr

    # d. The ISR, empty only under ELR; LastKnownElr holds the last leader while there is none.
    if record.isr is None and (isr or elr is not None) and tuple(isr) != partition.isr:
        record.isr = isr
    if elr is not None:
        if record.isr == [] and partition.leader != NO_LEADER and partition.last_known_elr != (partition.leader,):
            record.last_known_elr = [partition.leader]
        elif (record.leader >= 0 or (partition.leader != NO_LEADER and record.leader != NO_LEADER)) and (
            partition.last_known_elr
        ):
            record.last_known_elr = []

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


def _ordered_union(first: Sequence[int], second: Sequence[int]) -> list[int]:
    """`first` then the members of `second` not in it: a set union in a deterministic order."""
    out = list(dict.fromkeys(first))
    out.extend(r for r in second if r not in out)
    return out


def _last_known_leader(
    partition: PartitionImage, isr: Sequence[int], target_elr: Sequence[int], replicas: Sequence[int], elr: Elr | None
) -> tuple[int | None, bool]:
    """(the last known leader, whether an ONLINE election may take it): only with ELR on, ISR and ELR
    empty and LastKnownElr naming one leader (Kafka's canElectLastKnownLeader); ONLINE may take it only for
    a single-replica partition (the module doc says why)."""
    if elr is None or isr or target_elr or len(partition.last_known_elr) != 1:
        return None, False
    return partition.last_known_elr[0], len(replicas) == 1


def _elect(
    current: int,
    replicas: Sequence[int],
    valid: Callable[[int], bool],
    acceptable: Callable[[int], bool],
    election: Election,
    last_known: tuple[int | None, bool] = (None, False),
) -> tuple[int, bool]:
    """(leader, unclean) as Kafka's PartitionChangeBuilder.electLeader; `last_known` as
    `_last_known_leader` answers."""
    last_leader, online_may_take = last_known
    if election == Election.PREFERRED:
        if replicas and valid(replicas[0]):
            return replicas[0], False
        if valid(current):
            return current, False
        for r in replicas[1:]:
            if valid(r):
                return r, False
    else:
        if valid(current):
            return current, False
        for r in replicas:
            if valid(r):
                return r, False
    if last_leader is not None and acceptable(last_leader) and (online_may_take or election == Election.UNCLEAN):
        return last_leader, True
    if election == Election.UNCLEAN:
        for r in replicas:
            if acceptable(r):
                return r, True
    return NO_LEADER, False


def _is_no_op(record) -> bool:
    return (
        record.isr is None
        and record.eligible_leader_replicas is None
        and record.last_known_elr is None
        and record.leader == NO_LEADER_CHANGE
        and record.replicas is None
        and record.removing_replicas is None
        and record.adding_replicas is None
        and record.leader_recovery_state == LeaderRecoveryState.NO_CHANGE
    )
