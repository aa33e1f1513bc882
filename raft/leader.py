"""The leader's role: what it knows of each replica, and what follows from that.

Replication is pull, so the leader learns a replica's progress from its fetches: a valid Fetch at
`fetch_offset` says the replica holds (durably: followers flush before they fetch again) everything
below it. From those offsets the leader derives three things, all kept here (Kafka's LeaderState):

  * The high watermark: the largest offset a majority of voters hold, the leader counting what it has
    flushed (not merely appended), so that an acknowledged record survives any minority of crashes. It
    must also be above the epoch's start offset: a new leader's first batch is its LeaderChange control
    record, and records of earlier epochs commit only together with a record of this one (Raft's rule
    that a leader commits only entries of its own term, which is what makes an old entry that a
    majority once held safe to call committed). The node keeps the high watermark itself, since it
    outlives the role; `majority_end_offset` is the leader's proposal for it.
  * Check quorum: a leader that has not been fetched from by a majority (itself included) for
    1.5 x fetch_timeout_ms has lost touch with the quorum and resigns, so that a partitioned leader does
    not keep answering as one. `fetched_voters` collects the voters heard from since the last renewal.
  * BeginQuorumEpoch: a new leader tells every voter of its epoch until the voter fetches (or answers);
    `begin_pending` holds when to send to each voter again.

An idle fetch (nothing to return) is parked here for its max wait and answered when records are
appended or the high watermark moves, or with NOT_LEADER when the role ends; one whose fetcher knows an
older high watermark than the leader's (Fetch v18, KIP-1166) is not parked at all (raft/core.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from odradek.raft.state import Role


@dataclass(slots=True)
class ReplicaState:
    """The leader's view of one fetching replica (DescribeQuorum's ReplicaState)."""

    replica_id: int
    end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1


@dataclass(slots=True)
class ParkedFetch:
    """An idle Fetch held at the leader until `deadline_ms` or until there is something to say."""

    source: int
    request_id: int
    replica_id: int
    partition: object
    deadline_ms: int


@dataclass(slots=True, kw_only=True)
class LeaderState:
    """This node leads `epoch`; its log from `epoch_start_offset` on is this epoch's."""

    role: ClassVar[Role] = Role.LEADER
    durable: ClassVar[bool] = True
    epoch: int
    leader_id: int  # this node
    voted_id: int
    voters: tuple[int, ...]
    majority: int
    epoch_start_offset: int
    check_quorum_timeout_ms: int
    check_quorum_ms: int  # resign if no majority has fetched by then
    replicas: dict[int, ReplicaState] = field(default_factory=dict)
    begin_pending: dict[int, int] = field(default_factory=dict)  # voter -> when to (re)send BeginQuorumEpoch
    fetched_voters: set[int] = field(default_factory=set)
    parked: list[ParkedFetch] = field(default_factory=list)

    @classmethod
    def elected(cls, *, node_id: int, epoch: int, voted_id: int, voters: tuple[int, ...], majority: int,
                epoch_start_offset: int, check_quorum_timeout_ms: int, now_ms: int) -> LeaderState:
        return cls(
            epoch=epoch, leader_id=node_id, voted_id=voted_id, voters=voters, majority=majority,
            epoch_start_offset=epoch_start_offset, check_quorum_timeout_ms=check_quorum_timeout_ms,
            check_quorum_ms=now_ms + check_quorum_timeout_ms,
            replicas={v: ReplicaState(v) for v in voters},
            begin_pending={v: now_ms for v in voters if v != node_id},
        )

    @property
    def checks_quorum(self) -> bool:
        """A lone voter is its own majority: it has no one to lose touch with."""
        return len(self.voters) > 1

    def record_fetch(self, replica_id: int, fetch_offset: int, log_end_offset: int, now_ms: int) -> bool:
        """A valid fetch from `replica_id` at `fetch_offset`. True when it was a voter's (so the high
        watermark may move)."""
        if replica_id < 0 or replica_id == self.leader_id:
            return False
        state = self.replicas.get(replica_id)
        if state is None:
            state = self.replicas[replica_id] = ReplicaState(replica_id)
        state.end_offset = fetch_offset
        state.last_fetch_ms = now_ms
        if fetch_offset >= log_end_offset:
            state.last_caught_up_ms = now_ms
        if replica_id not in self.voters:
            return False
        self.begin_pending.pop(replica_id, None)
        self.fetched_voters.add(replica_id)
        if len(self.fetched_voters) + 1 >= self.majority:
            self.fetched_voters.clear()
            self.check_quorum_ms = now_ms + self.check_quorum_timeout_ms
        return True

    def majority_end_offset(self, flushed_end_offset: int) -> int | None:
        """The high watermark the voters' progress allows, or None when it allows none in this epoch."""
        self.replicas[self.leader_id].end_offset = flushed_end_offset
        offsets = sorted((self.replicas[v].end_offset for v in self.voters), reverse=True)
        candidate = offsets[self.majority - 1]
        return candidate if candidate > self.epoch_start_offset else None

    def successors(self) -> list[int]:
        """The other voters, most caught-up first: whom EndQuorumEpoch asks to stand first."""
        others = (r for r in self.replicas.values() if r.replica_id != self.leader_id and r.replica_id in self.voters)
        return [r.replica_id for r in sorted(others, key=lambda r: (-r.end_offset, r.replica_id))]

    def take_parked(self, now_ms: int, only_due: bool) -> list[ParkedFetch]:
        """Remove and return the parked fetches to answer now: all of them, or those past their wait."""
        if not self.parked:
            return []
        keep: list[ParkedFetch] = []
        due: list[ParkedFetch] = []
        for p in self.parked:
            (due if not only_due or p.deadline_ms <= now_ms else keep).append(p)
        self.parked = keep
        return due

    def deadlines(self) -> Iterable[int]:
        yield from (p.deadline_ms for p in self.parked)
        yield from self.begin_pending.values()
        if self.checks_quorum:
            yield self.check_quorum_ms
