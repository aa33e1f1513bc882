"""The roles of a quorum member, one object per role, and the one table of the moves between them.

Kafka's QuorumState keeps the node's current `EpochState` and changes it only through its
`transitionTo*` methods; every role (Unattached, Prospective, Candidate, Leader, Follower, Resigned) is
a class that holds what that role needs and nothing else. We do the same. A `RaftNode` holds exactly
one of these objects in `node.state`; it never clears a field by hand: leaving a role drops its object,
and entering one builds a fresh object with fresh timers. What a role knows:

  * every role: the epoch, and whom this node voted for in it (`voted_id`, carried across roles within an
    epoch and persisted, so that no node votes twice in one epoch); `leader_id` is the leader this role
    names (NO_ID when it names none).
  * Unattached: no leader known in this epoch. A voter waits for its election timeout (`timeout_ms`)
    before it asks for pre-votes; an observer has no election to run, and asks a random voter who leads
    (`next_fetch_ms`).
  * Prospective (KIP-996): a pre-vote round. It changes neither the epoch nor the vote, so nothing is
    persisted; it keeps the leader it gave up on (a follower's), so that answers naming that leader do
    not pull it back, and a lost round returns it to following that leader.
  * Candidate: a real vote round in a new epoch it has voted itself in (persisted before any request).
  * Leader: the per-replica progress, the pending BeginQuorumEpoch sends, the check-quorum timer and
    parked fetches (raft/leader.py: `LeaderState`).
  * Follower: the fetch timer (`timeout_ms`: the fetch timeout, after which a voter stands for election
    and an observer forgets the leader; cut short to a grace when the leader's host closes the
    connection), when to fetch next, whether the leader has answered a fetch in
    this epoch (pre-votes are refused while it is alive), and a snapshot being pulled in chunks.
  * Resigned: a leader that stepped down (gracefully, on a failed check quorum, or by restarting as the
    leader it was). It may not lead this epoch again, names no leader to others, and waits out an
    election timeout before it stands in the next epoch.

The table (`TRANSITIONS`) is the whole of the protocol's role graph. Moves to the same role are real
moves (a new epoch, a vote granted, a new round) and build a new object. Observers only ever hold the
Unattached and Follower roles. `check_transition` refuses anything else with `IllegalTransitionError`,
an invariant error: the simulation stops on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar

from odradek.raft.log import SnapshotId
from odradek.raft.quorum_state import NO_ID

# A deadline that never comes (a lone leader with nothing to flush; an observer's election timer).
NO_DEADLINE_MS = 1 << 62


class Role(IntEnum):
    UNATTACHED = 0
    PROSPECTIVE = 1
    CANDIDATE = 2
    LEADER = 3
    FOLLOWER = 4
    RESIGNED = 5


class RaftInvariantError(AssertionError):
    """Something Raft guarantees cannot happen did (a second leader in an epoch, truncation below the
    high watermark, a move off the role table). Raised rather than carried on from, so that the
    simulation stops on it."""


class IllegalTransitionError(RaftInvariantError):
    """A role change the table does not allow."""


_ANY_EPOCH_CHANGE = frozenset({Role.UNATTACHED, Role.FOLLOWER})

# From each role, the roles it may move to. Every role may learn of a higher epoch (Unattached when the
# news names no leader, Follower when it does) and a voter may find the leader of its own epoch
# (Follower); the rest is the election: a timer makes a voter Prospective, a majority of pre-votes makes
# it Candidate, a majority of votes Leader, and a leader steps down to Resigned.
TRANSITIONS: dict[Role, frozenset[Role]] = {
    Role.UNATTACHED: _ANY_EPOCH_CHANGE | {Role.PROSPECTIVE},  # Unattached->Unattached: a vote granted
    Role.PROSPECTIVE: _ANY_EPOCH_CHANGE | {Role.PROSPECTIVE, Role.CANDIDATE},
    Role.CANDIDATE: _ANY_EPOCH_CHANGE | {Role.PROSPECTIVE, Role.LEADER},
    Role.LEADER: _ANY_EPOCH_CHANGE | {Role.RESIGNED},
    Role.FOLLOWER: _ANY_EPOCH_CHANGE | {Role.PROSPECTIVE},
    Role.RESIGNED: _ANY_EPOCH_CHANGE | {Role.PROSPECTIVE},
}

# The roles an observer (a node not in the voter set) can hold.
OBSERVER_ROLES = frozenset({Role.UNATTACHED, Role.FOLLOWER})


def check_transition(source: Role, target: Role, is_voter: bool) -> None:
    """Raise IllegalTransitionError unless the table allows `source` -> `target` for this node."""
    if target not in TRANSITIONS[source]:
        raise IllegalTransitionError(f"{source.name} may not become {target.name}")
    if not is_voter and target not in OBSERVER_ROLES:
        raise IllegalTransitionError(f"an observer may not become {target.name}")


@dataclass(slots=True, kw_only=True)
class UnattachedState:
    """No leader known in `epoch` (perhaps a vote granted in it)."""

    role: ClassVar[Role] = Role.UNATTACHED
    durable: ClassVar[bool] = True
    epoch: int
    voted_id: int = NO_ID
    timeout_ms: int = NO_DEADLINE_MS  # a voter's election timeout
    next_fetch_ms: int = NO_DEADLINE_MS  # an observer's next "who leads?" fetch to a random voter

    @property
    def leader_id(self) -> int:
        return NO_ID


@dataclass(slots=True, kw_only=True)
class VoteRound:
    """A round of (pre-)votes: who said yes, who said no, when to ask each silent voter again."""

    epoch: int
    voted_id: int
    timeout_ms: int  # when an undecided round gives up
    granted: set[int]
    rejected: set[int] = field(default_factory=set)
    retry_ms: dict[int, int] = field(default_factory=dict)  # voter -> when to (re)send its Vote request

    def won(self, majority: int) -> bool:
        return len(self.granted) >= majority

    def lost(self, majority: int) -> bool:
        return len(self.rejected) >= majority


@dataclass(slots=True, kw_only=True)
class ProspectiveState(VoteRound):
    """A pre-vote round at the current epoch; `leader_id` is the leader a follower gave up on."""

    role: ClassVar[Role] = Role.PROSPECTIVE
    durable: ClassVar[bool] = False
    pre_vote: ClassVar[bool] = True
    leader_id: int = NO_ID


@dataclass(slots=True, kw_only=True)
class CandidateState(VoteRound):
    """A vote round in an epoch this node started and voted itself in."""

    role: ClassVar[Role] = Role.CANDIDATE
    durable: ClassVar[bool] = True
    pre_vote: ClassVar[bool] = False

    @property
    def leader_id(self) -> int:
        return NO_ID


@dataclass(slots=True)
class SnapshotFetch:
    """A snapshot a follower pulls from the leader, chunk by chunk."""

    snapshot_id: SnapshotId
    data: bytearray = field(default_factory=bytearray)


@dataclass(slots=True, kw_only=True)
class FollowerState:
    """Fetching from `leader_id`, the leader of `epoch`."""

    role: ClassVar[Role] = Role.FOLLOWER
    durable: ClassVar[bool] = True
    epoch: int
    leader_id: int
    voted_id: int = NO_ID
    timeout_ms: int  # the fetch timeout, pushed on by every good answer from the leader
    next_fetch_ms: int
    has_fetched: bool = False  # the leader answered a fetch in this epoch
    last_fetch_ok_ms: int = -1
    end_quorum_received: bool = False  # the leader said it resigns
    disconnected: bool = False  # the leader's host closed our connection and no fetch was answered since
    snapshot_fetch: SnapshotFetch | None = None

    def fetched(self, now_ms: int, fetch_timeout_ms: int) -> None:
        """The leader answered a fetch: it is alive, and the next fetch may go at once."""
        self.has_fetched = True
        self.disconnected = False
        self.last_fetch_ok_ms = now_ms
        self.timeout_ms = now_ms + fetch_timeout_ms
        self.next_fetch_ms = now_ms

    def leader_disconnected(self, now_ms: int, wait_ms: int) -> bool:
        """The leader's host closed or refused our connection: stand unless it answers within `wait_ms`
        (RaftNode.handle_disconnect has the rule and why it is safe). True when this moved the deadline."""
        self.disconnected = True
        if now_ms + wait_ms >= self.timeout_ms:
            return False
        self.timeout_ms = now_ms + wait_ms
        return True

    def leader_alive(self, now_ms: int, fetch_timeout_ms: int) -> bool:
        """KIP-996: a follower refuses a pre-vote while its leader answers its fetches (and not once its
        fetch deadline, cut short by a closed connection, has passed)."""
        return (self.has_fetched and not self.end_quorum_received
                and now_ms - self.last_fetch_ok_ms < fetch_timeout_ms and now_ms < self.timeout_ms)


@dataclass(slots=True, kw_only=True)
class ResignedState:
    """A leader of `epoch` that stepped down; it stands again once `timeout_ms` passes."""

    role: ClassVar[Role] = Role.RESIGNED
    durable: ClassVar[bool] = False  # soft: a restarted leader always comes back Resigned
    epoch: int
    leader_id: int  # this node: it led the epoch, though it names no leader to others now
    voted_id: int = NO_ID
    timeout_ms: int
