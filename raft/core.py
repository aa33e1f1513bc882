"""The KRaft controller quorum: a deterministic, sans-I/O Raft node for the `__cluster_metadata` log.

Theory of operation
-------------------
A `RaftNode` is a state machine with no clock, no sockets and no tasks. The driver (the broker's
network layer, or the simulation in tests/sim) feeds it what happened and when:

    out = node.handle_request(source, request_id, request, now_ms)     # an inbound Kafka request
    out = node.handle_response(source, correlation_id, response, now_ms)  # None: the request failed
    out = node.poll(now_ms)                                            # timers; call by next_deadline_ms
    offset = node.append([b"record", ...], now_ms)                     # as leader

and sends what comes back: `OutboundRequest`s (to a node, with a correlation id the node picked) and
`OutboundResponse`s (to the request id the driver gave). Payloads are the protocol package's own
message classes (Vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot, DescribeQuorum), built
for the versions in `API_VERSIONS` (what Kafka 4.x controllers speak), so a driver puts them on the
wire unchanged. Durable state goes through two injected interfaces, a `RaftLog` (record batches,
leader-epoch cache, snapshots, a flush point) and a `QuorumStateStore` (Kafka's `quorum-state`).
Randomness (election timeouts, which voter an observer asks first) comes from an injected rng.

The protocol is KRaft's (KIP-595, pre-vote from KIP-996), not textbook Raft:
  * Replication is pull. Followers and observers send Fetch(fetch_offset, last_fetched_epoch) to the
    leader; the fetch offset doubles as the acknowledgement. The leader checks the pair against its
    log: a follower whose epoch history diverges gets `diverging_epoch` (the leader's
    end_offset_for_epoch) and truncates to min(that end, its own end for that epoch); one below the
    leader's log start gets `snapshot_id` and pulls the snapshot in chunks with FetchSnapshot.
    An idle fetch is parked at the leader for max_wait_ms and answered when records are appended or
    the high watermark moves; one from a fetcher that has not yet heard of the leader's high watermark
    (Fetch v18 says which it knows, KIP-1166) is answered at once. So a follower learns that a record
    is committed one fetch round trip after the fetch that committed it, whichever voter sent that.
  * The leader's high watermark is the offset a majority of voters have; the leader counts only
    what it has flushed, followers flush before they fetch again (their fetch offset is flushed),
    and it must be above the epoch's start offset: a new leader first appends a LeaderChange control
    batch, and records of earlier epochs commit only with it.
  * Elections: a voter that hears nothing from a leader for fetch_timeout_ms (or from nobody for a
    randomized election timeout; or, after its connection to the leader was closed by the leader's host,
    for leader_disconnect_grace_ms: `handle_disconnect`) becomes Prospective and asks for pre-votes at its current epoch;
    nobody changes state for a pre-vote, and a follower still fetching from a live leader refuses
    one, so a node cut off from the quorum cannot disrupt it when it returns. With a majority of
    pre-votes it becomes Candidate (epoch + 1, votes for itself, persisted before any request goes
    out) and asks for votes; votes are persisted before they are answered. The winner sends
    BeginQuorumEpoch to the voters. A leader that has not been fetched from by a majority for
    1.5 x fetch_timeout_ms resigns (check quorum) and tells the voters with EndQuorumEpoch, so that
    the most caught-up one stands first. A lone voter (voters == its own id) is its own majority: it
    stands at its first poll and leads without a message sent or received (Kafka's combined mode).
  * Every response carries the responder's leader and epoch; a higher epoch anywhere moves this node
    to it (as follower when the leader is named, else unattached) before anything else is done.
  * The upper layer sees committed batches in order (`RaftListener.handle_commit`) once the high
    watermark passes them, a snapshot first when its state starts above what it has applied
    (`handle_load_snapshot`: on restart, or after a FetchSnapshot), and can store a snapshot of its
    own state at any applied offset (`create_snapshot`); the log below the newest snapshot is removed.
    A restarted node therefore loads its snapshot and the log after it, never replays from 0.

Roles are objects (Kafka's QuorumState and its EpochStates): `node.state` is one of the classes in
raft/state.py (Unattached, Prospective, Candidate, Follower, Resigned) or raft/leader.py (Leader), each
holding only its role's fields, and `_transition_to` is the one place the role changes, checked against
the table in raft/state.py. Leaving a role drops its object; nothing is cleared by hand. What outlives
a role lives on the node: the high watermark and what is applied, requests in flight, the log. The
node's other helpers are modules of their own: the log's epoch history and fetch validation
(raft/epochs.py) and the wire shapes of the quorum's RPCs (raft/rpc.py).

Why our own Raft rather than a Python Raft library: KRaft is not generic Raft. Its log IS a Kafka
partition, `__cluster_metadata-0`, stored by storage/ like any other (record batches, the
leader-epoch cache, segments, snapshots); replication is Kafka's pull-based Fetch with leader epochs
and diverging-epoch truncation instead of AppendEntries; and the peers speak Kafka's own RPCs, which
Kafka's tools (DescribeQuorum from any admin client) understand. A library brings its own log format,
push replication and RPCs, and an event loop; fitting those to this log and these messages would be
more code than the protocol itself, and would lose the deterministic, time-as-an-argument core that the
simulation tests depend on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from random import Random
from typing import NamedTuple, Protocol

import structlog

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
)
from odradek.protocol.records import build_batch, iter_batches, iter_records
from odradek.raft import rpc
from odradek.raft.epochs import (
    Validity,
    last_epoch,
    log_up_to_date,
    truncation_offset,
    validate_offset_and_epoch,
)
from odradek.raft.leader import LeaderState, ParkedFetch, ReplicaState
from odradek.raft.log import RaftLog, SnapshotId
from odradek.raft.rpc import (
    API_VERSIONS,
    BEGIN_QUORUM_EPOCH,
    DESCRIBE_QUORUM,
    END_QUORUM_EPOCH,
    FETCH,
    FETCH_SNAPSHOT,
    METADATA_PARTITION,
    METADATA_TOPIC,
    METADATA_TOPIC_ID,
    VOTE,
    leader_change_record,
)
from odradek.raft.quorum_state import NO_ID, QuorumStateData, QuorumStateStore
from odradek.raft.state import (
    NO_DEADLINE_MS,
    CandidateState,
    FollowerState,
    ProspectiveState,
    RaftInvariantError,
    ResignedState,
    Role,
    SnapshotFetch,
    UnattachedState,
    VoteRound,
    check_transition,
)

log = structlog.get_logger("odradek.raft")

# One object per role (raft/state.py, raft/leader.py); `RaftNode.state` is always one of these.
QuorumRole = UnattachedState | ProspectiveState | CandidateState | LeaderState | FollowerState | ResignedState

_MAX_BATCH_BYTES = 64 * 1024 * 1024


class NotLeaderError(Exception):
    """append() on a node that is not the leader (or is, but of an epoch it no longer holds)."""


@dataclass(frozen=True, slots=True)
class RaftConfig:
    """Kafka's controller.quorum.* settings (same defaults) and this node's identity."""

    node_id: int
    voters: tuple[int, ...]
    cluster_id: str | None = None
    election_timeout_ms: int = 1000  # controller.quorum.election.timeout.ms
    election_backoff_max_ms: int = 1000  # controller.quorum.election.backoff.max.ms
    fetch_timeout_ms: int = 2000  # controller.quorum.fetch.timeout.ms
    request_timeout_ms: int = 2000  # controller.quorum.request.timeout.ms
    retry_backoff_ms: int = 20  # controller.quorum.retry.backoff.ms
    fetch_max_wait_ms: int = 500  # KafkaRaftClient's FETCH_MAX_WAIT_MS
    fetch_max_bytes: int = 8 * 1024 * 1024
    snapshot_chunk_bytes: int = 1024 * 1024
    # Group commit: the leader flushes appended records at most this often (0: at every poll). What it
    # has not flushed does not count toward the high watermark, so this trades commit latency for
    # fewer fsyncs, never safety.
    leader_flush_interval_ms: int = 0
    # Odradek's, not KRaft's (-1: off, KRaft's rule): a follower whose connection to its leader was closed
    # or refused by the leader's host (the process died; its kernel answers) gives the leader this long
    # to answer a fetch again before it stands, instead of the whole fetch timeout. `handle_disconnect`.
    leader_disconnect_grace_ms: int = -1

    @property
    def is_voter(self) -> bool:
        return self.node_id in self.voters

    @property
    def majority(self) -> int:
        return len(self.voters) // 2 + 1


class CommittedBatch(NamedTuple):
    """One batch below the high watermark. Control batches (LeaderChange) come with no records."""

    base_offset: int
    last_offset: int
    epoch: int
    records: list[bytes]
    is_control: bool


class RaftListener(Protocol):
    def handle_commit(self, batch: CommittedBatch) -> None: ...
    def handle_load_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None: ...
    def handle_leader_change(self, leader_id: int, epoch: int) -> None: ...


class OutboundRequest(NamedTuple):
    destination: int
    correlation_id: int
    message: object
    api_version: int


class OutboundResponse(NamedTuple):
    destination: int
    request_id: int
    message: object
    api_version: int


Outbound = OutboundRequest | OutboundResponse


@dataclass(slots=True)
class _InFlight:
    destination: int
    api_key: int
    deadline_ms: int
    generation: int
    pre_vote: bool = False


_LEADER_ONLY_ERRORS = (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_LEADER_EPOCH)


class RaftNode:
    """One member of the quorum: a voter (its id is in config.voters) or an observer."""

    def __init__(self, config: RaftConfig, log: RaftLog, store: QuorumStateStore, listener: RaftListener,
                 rng: Random, now_ms: int) -> None:
        self.config = config
        self.node_id = config.node_id
        self.log = log
        self.store = store
        self.listener = listener
        self.rng = rng
        self._now_ms = now_ms
        self._out: list[Outbound] = []
        self._inflight: dict[int, _InFlight] = {}
        self._next_correlation = 0
        # Bumped by every role change: a response to a request sent in an earlier role is stale for
        # the role's own bookkeeping (it may still carry news of the epoch and leader).
        self._generation = 0
        # Group commit: when the leader last flushed. The node's rather than the role's: it paces the
        # log's fsyncs, whichever leadership appended what is flushed. A new node has not flushed yet,
        # so its first flush as leader is not held back (a lone voter leads at its first poll).
        self._last_flush_ms = now_ms - config.leader_flush_interval_ms
        # Commitment: the high watermark only grows within a node's life (it outlives roles). It starts
        # at the snapshot's end, which is committed by construction.
        snapshot = log.latest_snapshot_id()
        self.high_watermark = max(log.log_start_offset, snapshot.end_offset if snapshot else 0)
        self.applied_end_offset = 0
        self.state: QuorumRole = self._initial_state(now_ms)

    # ------------------------------------------------------------------------------ public surface

    @property
    def role(self) -> Role:
        return self.state.role

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def leader_id(self) -> int:
        """The leader the current role names: this node as leader or resigned, NO_ID when none is known."""
        return self.state.leader_id

    @property
    def voted_id(self) -> int:
        return self.state.voted_id

    @property
    def is_leader(self) -> bool:
        return self.role == Role.LEADER

    @property
    def is_voter(self) -> bool:
        return self.config.is_voter

    @property
    def next_deadline_ms(self) -> int:
        """When poll() has work next (timers, retries, request timeouts, a leader's pending flush)."""
        deadlines = [f.deadline_ms for f in self._inflight.values()]
        state = self.state
        if isinstance(state, LeaderState):
            if self.log.flushed_end_offset < self.log.log_end_offset:
                deadlines.append(max(self._now_ms, self._last_flush_ms + self.config.leader_flush_interval_ms))
            deadlines.extend(state.deadlines())
            return min(deadlines, default=NO_DEADLINE_MS)
        deadlines.append(state.timeout_ms)  # NO_DEADLINE_MS for an observer that knows no leader
        fetching = self._fetching_state()
        if fetching is not None and not self._has_inflight_fetch():
            deadlines.append(fetching.next_fetch_ms)
        if isinstance(state, VoteRound):
            deadlines.extend(state.retry_ms.values())
        return min(deadlines, default=NO_DEADLINE_MS)

    def poll(self, now_ms: int) -> list[Outbound]:
        self._now_ms = max(self._now_ms, now_ms)
        self._step()
        return self._drain()

    def handle_request(self, source: int, request_id: int, request, now_ms: int) -> list[Outbound]:
        self._now_ms = max(self._now_ms, now_ms)
        handler = {
            VoteRequest: self._on_vote_request,
            BeginQuorumEpochRequest: self._on_begin_quorum_epoch_request,
            EndQuorumEpochRequest: self._on_end_quorum_epoch_request,
            FetchRequest: self._on_fetch_request,
            FetchSnapshotRequest: self._on_fetch_snapshot_request,
            DescribeQuorumRequest: self._on_describe_quorum_request,
        }.get(type(request))
        if handler is None:
            raise ValueError(f"the quorum does not serve {type(request).__name__}")
        handler(source, request_id, request)
        self._step()
        return self._drain()

    def handle_response(self, source: int, correlation_id: int, response, now_ms: int) -> list[Outbound]:
        """A response to one of our requests, or None when it failed (disconnect, timeout at the driver)."""
        self._now_ms = max(self._now_ms, now_ms)
        inflight = self._inflight.get(correlation_id)
        if inflight is not None and inflight.destination == source:
            del self._inflight[correlation_id]
            self._dispatch_response(inflight, response)
            self._step()
        return self._drain()

    def handle_disconnect(self, source: int, now_ms: int) -> list[Outbound]:
        """The driver saw `source` close its connection to this node, or refuse a new one: its process is
        gone (or restarting) while its host still answers. A frozen host or a cut network closes nothing
        and is found by the fetch timeout as before.

        The rule: a voter following `source` stands for election once `leader_disconnect_grace_ms` (drawn
        up to twice that, so that the followers do not all stand at once) has passed without a fetch
        answered by it, rather than after the whole fetch timeout, and from then
        on it also grants pre-votes as for a leader it no longer hears from (both followers of a dead
        leader see its sockets close, so a pre-vote round can win). Why this is safe: it only moves the
        moment a follower stands; every election still goes through pre-vote, then a vote in a higher
        epoch with Raft's up-to-date check, so it cannot elect a second leader in an epoch nor one that
        misses committed records. The cost of a wrong suspicion (a live leader whose connection was reset
        and did not answer within the grace) is liveness only, an election KRaft would also hold after
        a longer wait; a leader that answers a fetch within the grace pushes the deadline back to the full
        fetch timeout, so a transient reset alone does not depose it. And a node cut off from the others
        (no disconnect seen by them) still cannot disrupt them: they refuse its pre-votes while their
        leader answers them."""
        self._now_ms = max(self._now_ms, now_ms)
        # What was in flight on the closed connection is lost with it (the driver may also report each
        # one failed; those reports then find nothing in flight).
        for correlation_id in [c for c, f in self._inflight.items() if f.destination == source]:
            self._dispatch_response(self._inflight.pop(correlation_id), None)
        state = self.state
        grace = self.config.leader_disconnect_grace_ms
        if isinstance(state, FollowerState) and state.leader_id == source and self.is_voter and grace >= 0:
            # Randomized up to twice the grace, as the election timeout is: every follower of a dead leader
            # sees its connections close at the same moment, and equal deadlines would split the vote.
            wait_ms = grace + self.rng.randrange(max(1, grace))
            if state.leader_disconnected(self._now_ms, wait_ms):
                log.info("the quorum leader's connection closed: standing for election unless it answers first",
                         node=self.node_id, leader=source, epoch=state.epoch, wait_ms=wait_ms)
        self._step()
        return self._drain()

    def append(self, records: Sequence[bytes], now_ms: int) -> int:
        """Append records as one batch in the leader's epoch; returns the offset of the last one. They are
        committed once the high watermark passes it (handle_commit reports them)."""
        self._now_ms = max(self._now_ms, now_ms)
        if self.role != Role.LEADER:
            raise NotLeaderError(f"node {self.node_id} is {self.role.name}, leader is {self.leader_id}")
        batch = build_batch([(None, r, None, self._now_ms) for r in records])
        appended = self.log.append_as_leader(batch, self.epoch, now_ms=self._now_ms)
        self._complete_parked(only_due=False)
        return appended.last_offset

    def create_snapshot(self, end_offset: int, data: bytes, now_ms: int | None = None) -> SnapshotId:
        """Store the upper layer's state for offsets below `end_offset` (applied and committed) and remove
        the log below it. A snapshot at or below the latest one is not stored again."""
        if now_ms is not None:
            self._now_ms = max(self._now_ms, now_ms)
        if end_offset > self.applied_end_offset or end_offset > self.high_watermark:
            raise ValueError(f"snapshot end {end_offset} is above what is applied ({self.applied_end_offset}) "
                             f"or committed ({self.high_watermark})")
        latest = self.log.latest_snapshot_id()
        if latest is not None and end_offset <= latest.end_offset:
            return latest
        if end_offset <= self.log.log_start_offset:
            raise ValueError(f"snapshot end {end_offset} is not above the log start {self.log.log_start_offset}")
        snapshot_id = SnapshotId(end_offset, self.log.epoch_for_offset(end_offset - 1))
        self.log.store_snapshot(snapshot_id, data)
        self.log.delete_before(end_offset, now_ms=self._now_ms)
        return snapshot_id

    def resign(self, now_ms: int) -> list[Outbound]:
        """A graceful leader resignation (shutdown): stop leading and hand over with EndQuorumEpoch."""
        self._now_ms = max(self._now_ms, now_ms)
        if self.role == Role.LEADER:
            self._become_resigned()
        return self._drain()

    def describe_quorum(self) -> DescribeQuorumResponse:
        return self._describe_quorum_response()

    # ------------------------------------------------------------------------------ role changes
    #
    # Each _become_* is Kafka's transitionTo* and onBecome* in one: build the new role's object (its
    # timers drawn now), hand it to _transition_to (the table check, the old object dropped, the new
    # one persisted when durable), then do what entering the role does (count our own vote, append the
    # LeaderChange batch, send EndQuorumEpoch, tell the listener).

    def _initial_state(self, now_ms: int) -> QuorumRole:
        """Kafka's QuorumState.initialize: the role the persisted election state implies. The only role
        not entered through `_transition_to` (there is no role to leave)."""
        saved = self.store.read()
        # A lone voter is its own majority and has nobody to hear from: it stands at once (as Kafka's
        # KafkaRaftClient.initialize does), instead of waiting out an election or fetch timeout first.
        lone = self.config.voters == (self.node_id,)
        if saved is None:
            state: QuorumRole = self._unattached(0, NO_ID, timeout_ms=now_ms if lone else None)
            self._persist(state)
            return state
        if saved.leader_id == self.node_id:
            # A leader that restarts cannot pick up its epoch where it was: it resigns it.
            return ResignedState(epoch=saved.leader_epoch, leader_id=self.node_id, voted_id=saved.voted_id,
                                 timeout_ms=now_ms if lone else now_ms + self._random_election_timeout())
        if saved.leader_id != NO_ID:
            return FollowerState(epoch=saved.leader_epoch, leader_id=saved.leader_id, voted_id=saved.voted_id,
                                 timeout_ms=now_ms if lone else now_ms + self.config.fetch_timeout_ms,
                                 next_fetch_ms=now_ms)
        return self._unattached(saved.leader_epoch, saved.voted_id, timeout_ms=now_ms if lone else None)

    def _persist(self, state: QuorumRole) -> None:
        self.store.write(QuorumStateData(
            leader_epoch=state.epoch,
            leader_id=state.leader_id,
            voted_id=state.voted_id,
            current_voters=tuple(sorted(self.config.voters)),
            cluster_id=self.config.cluster_id or "",
        ))

    def _transition_to(self, new: QuorumRole) -> None:
        """The one place the role changes. The table in raft/state.py decides whether `new` may follow
        the current role (IllegalTransitionError if not). The old role's object is dropped with all it
        held; a leader first answers the fetches it parked (in its own epoch, naming no leader). A
        durable role (Kafka's: all but Prospective and Resigned) is persisted before the node acts in it."""
        old = self.state
        check_transition(old.role, new.role, self.is_voter)
        self._generation += 1
        if isinstance(old, LeaderState):
            for parked in old.take_parked(self._now_ms, only_due=False):
                self._respond_fetch(parked, self._fetch_error_response(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                                                       leader_id=NO_ID))
        self.state = new
        if new.durable:
            self._persist(new)
        # The node's own quorum state, on the node (Kafka's "Completed transition to ..."): a leader or a
        # leader learnt is INFO, the steps of an election (prospective, candidate, unattached) DEBUG.
        (log.info if new.role in (Role.LEADER, Role.FOLLOWER, Role.RESIGNED) else log.debug)(
            "quorum state changed", node=self.node_id, role=new.role.name, epoch=new.epoch,
            leader=new.leader_id, previous_role=old.role.name, previous_epoch=old.epoch)

    def _unattached(self, epoch: int, voted_id: int, timeout_ms: int | None = None) -> UnattachedState:
        if self.is_voter:
            if timeout_ms is None:
                timeout_ms = self._now_ms + self._random_election_timeout()
            return UnattachedState(epoch=epoch, voted_id=voted_id, timeout_ms=timeout_ms)
        # An observer runs no election; it asks a voter who leads, now.
        return UnattachedState(epoch=epoch, voted_id=voted_id, next_fetch_ms=self._now_ms)

    def _become_unattached(self, epoch: int, voted_id: int = NO_ID) -> None:
        """A higher epoch with no known leader, or (same epoch) a vote granted: the vote is durable
        before the candidate hears of it. A new epoch forgets the old one's vote."""
        if voted_id == NO_ID and epoch == self.epoch:
            voted_id = self.voted_id
        self._transition_to(self._unattached(epoch, voted_id))

    def _become_follower(self, epoch: int, leader_id: int) -> None:
        if self.role == Role.LEADER and epoch == self.epoch:
            raise RaftInvariantError(f"node {self.node_id} leads epoch {epoch} but {leader_id} claims it")
        self._transition_to(FollowerState(
            epoch=epoch, leader_id=leader_id, voted_id=self.voted_id if epoch == self.epoch else NO_ID,
            timeout_ms=self._now_ms + self.config.fetch_timeout_ms, next_fetch_ms=self._now_ms))
        self.listener.handle_leader_change(leader_id, epoch)

    def _vote_round(self) -> dict:
        """A new round's fields: our own vote counted, every other voter to ask now."""
        return dict(granted={self.node_id}, timeout_ms=self._now_ms + self._random_election_timeout(),
                    retry_ms={v: self._now_ms for v in self.config.voters if v != self.node_id})

    def _become_prospective(self) -> None:
        # A follower keeps the leader it gave up on (a prospective, the one it kept); other roles name none.
        state = self.state
        keep_leader = state.leader_id if state.role in (Role.FOLLOWER, Role.PROSPECTIVE) else NO_ID
        self._transition_to(ProspectiveState(epoch=self.epoch, voted_id=self.voted_id, leader_id=keep_leader,
                                             **self._vote_round()))
        self._maybe_win_round()

    def _become_candidate(self) -> None:
        self._transition_to(CandidateState(epoch=self.epoch + 1, voted_id=self.node_id, **self._vote_round()))
        self._maybe_win_round()

    def _maybe_win_round(self) -> None:
        state = self.state
        if not isinstance(state, VoteRound) or not state.won(self.config.majority):
            return
        if isinstance(state, ProspectiveState):
            self._become_candidate()
        else:
            self._become_leader(state)

    def _become_leader(self, candidate: CandidateState) -> None:
        granting = sorted(candidate.granted)
        leader = LeaderState.elected(
            node_id=self.node_id, epoch=candidate.epoch, voted_id=candidate.voted_id, voters=self.config.voters,
            majority=self.config.majority, epoch_start_offset=self.log.log_end_offset,
            check_quorum_timeout_ms=self._check_quorum_timeout(), now_ms=self._now_ms)
        self._transition_to(leader)
        # The epoch's first batch: records of earlier epochs commit only with one of this epoch.
        key, value = leader_change_record(self.node_id, sorted(self.config.voters), granting)
        batch = build_batch([(key, value, None, self._now_ms)], control=True)
        self.log.append_as_leader(batch, self.epoch, now_ms=self._now_ms)
        self.listener.handle_leader_change(self.node_id, self.epoch)
        self._update_high_watermark()

    def _become_resigned(self) -> None:
        leader = self.state
        assert isinstance(leader, LeaderState)
        preferred = leader.successors()
        self._transition_to(ResignedState(epoch=leader.epoch, leader_id=self.node_id, voted_id=leader.voted_id,
                                          timeout_ms=self._now_ms + self._random_election_timeout()))
        for voter in sorted(self.config.voters):
            if voter != self.node_id:
                self._send(voter, END_QUORUM_EPOCH, self._end_quorum_epoch_request(preferred))

    # ------------------------------------------------------------------------------ the step

    def _step(self) -> None:
        now = self._now_ms
        for correlation_id in [c for c, f in self._inflight.items() if f.deadline_ms <= now]:
            inflight = self._inflight.pop(correlation_id)
            self._dispatch_response(inflight, None)
        # A state change inside a step gets the new state's first step at once (a fetch timeout becomes
        # a pre-vote round whose requests go out now, not at the next poll).
        for _ in range(4):
            generation = self._generation
            self._role_step(now)
            if generation == self._generation:
                break
        self._deliver_committed()

    def _role_step(self, now: int) -> None:
        state = self.state
        if isinstance(state, LeaderState):
            self._leader_step(now, state)
        elif isinstance(state, FollowerState):
            if now >= state.timeout_ms:
                self._on_fetch_timeout()
            else:
                self._maybe_send_fetch(now)
        elif isinstance(state, UnattachedState):
            if now >= state.timeout_ms and self.is_voter:
                self._become_prospective()
            elif not self.is_voter:
                self._maybe_send_fetch(now)
        elif isinstance(state, VoteRound):
            if now >= state.timeout_ms:
                # Lost or undecided round: a candidate falls back to pre-voting; a prospective goes back to
                # the leader it knew, or tries again.
                if isinstance(state, ProspectiveState) and state.leader_id != NO_ID:
                    self._become_follower(state.epoch, state.leader_id)
                else:
                    self._become_prospective()
            else:
                self._send_votes(now, state)
        elif isinstance(state, ResignedState):
            if now >= state.timeout_ms:
                self._become_prospective()

    def _on_fetch_timeout(self) -> None:
        if self.is_voter:
            self._become_prospective()
        else:
            self._become_unattached(self.epoch)

    def _leader_step(self, now: int, leader: LeaderState) -> None:
        if (self.log.flushed_end_offset < self.log.log_end_offset
                and now >= self._last_flush_ms + self.config.leader_flush_interval_ms):
            self.log.flush(now_ms=now)
            self._last_flush_ms = now
        self._update_high_watermark()
        if leader.checks_quorum and now >= leader.check_quorum_ms:
            self._become_resigned()
            return
        self._complete_parked(only_due=True)
        for voter, due in list(leader.begin_pending.items()):
            if due <= now:
                self._send(voter, BEGIN_QUORUM_EPOCH, self._begin_quorum_epoch_request(voter))
                leader.begin_pending[voter] = now + self.config.request_timeout_ms

    def _send_votes(self, now: int, round_: ProspectiveState | CandidateState) -> None:
        pre_vote = round_.pre_vote
        for voter, due in list(round_.retry_ms.items()):
            if due <= now:
                self._send(voter, VOTE, self._vote_request(voter, pre_vote), pre_vote=pre_vote)
                round_.retry_ms[voter] = now + self.config.request_timeout_ms

    def _fetching_state(self) -> FollowerState | UnattachedState | None:
        """The role that fetches, if ours does: a follower from its leader, an observer that knows no
        leader from a random voter (whose answer names the leader)."""
        state = self.state
        if isinstance(state, FollowerState) or (isinstance(state, UnattachedState) and not self.is_voter):
            return state
        return None

    def _maybe_send_fetch(self, now: int) -> None:
        state = self._fetching_state()
        if state is None or self._has_inflight_fetch() or now < state.next_fetch_ms:
            return
        if isinstance(state, FollowerState):
            target = state.leader_id
        else:
            target = self.rng.choice(sorted(self.config.voters))
        if self.log.flushed_end_offset < self.log.log_end_offset:
            self.log.flush(now_ms=now)  # e.g. a log reopened with a recovery point below its end
        if isinstance(state, FollowerState) and state.snapshot_fetch is not None:
            self._send(target, FETCH_SNAPSHOT, self._fetch_snapshot_request(state.snapshot_fetch))
        else:
            self._send(target, FETCH, self._fetch_request())

    def _sender_state(self, inflight: _InFlight) -> QuorumRole | None:
        """The role that sent `inflight`, if it is still ours (None: the role has changed since)."""
        return self.state if inflight.generation == self._generation else None

    def _has_inflight_fetch(self) -> bool:
        return any(f.api_key in (FETCH, FETCH_SNAPSHOT) for f in self._inflight.values())

    def _send(self, destination: int, api_key: int, message, *, pre_vote: bool = False) -> None:
        self._next_correlation += 1
        timeout = self.config.request_timeout_ms
        self._inflight[self._next_correlation] = _InFlight(destination, api_key, self._now_ms + timeout,
                                                           self._generation, pre_vote)
        self._out.append(OutboundRequest(destination, self._next_correlation, message, API_VERSIONS[api_key]))

    def _reply(self, destination: int, request_id: int, api_key: int, message) -> None:
        self._out.append(OutboundResponse(destination, request_id, message, API_VERSIONS[api_key]))

    def _drain(self) -> list[Outbound]:
        out, self._out = self._out, []
        return out

    def _random_election_timeout(self) -> int:
        return self.config.election_timeout_ms + self.rng.randrange(self.config.election_timeout_ms)

    def _random_backoff(self) -> int:
        return self.rng.randrange(1, max(2, self.config.election_backoff_max_ms))

    def _check_quorum_timeout(self) -> int:
        return self.config.fetch_timeout_ms * 3 // 2

    # ------------------------------------------------------------------------------ common checks

    def _cluster_ok(self, cluster_id) -> bool:
        return cluster_id is None or self.config.cluster_id is None or cluster_id == self.config.cluster_id

    def _validate_leader_only(self, request_epoch: int) -> ErrorCode:
        if request_epoch < self.epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        if request_epoch > self.epoch:
            return ErrorCode.UNKNOWN_LEADER_EPOCH
        if self.role != Role.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.NONE

    def _known_leader(self) -> int:
        return self.leader_id if self.role in (Role.LEADER, Role.FOLLOWER) else NO_ID

    def _handle_common(self, error: int, leader_id: int, epoch: int) -> bool:
        """KafkaRaftClient.maybeHandleCommonResponse: act on the leader and epoch a response names. True
        when the response needs nothing more (it moved us, it is stale, or it carries a leader error)."""
        if epoch > self.epoch:
            if leader_id >= 0 and leader_id != self.node_id:
                self._become_follower(epoch, leader_id)
            else:
                self._become_unattached(epoch)
            return True
        if epoch < self.epoch:
            return True
        if leader_id >= 0 and leader_id != self.node_id and not (
            self.role in (Role.FOLLOWER, Role.PROSPECTIVE) and self.leader_id == leader_id
        ):
            self._become_follower(epoch, leader_id)
            return True
        return error in _LEADER_ONLY_ERRORS

    # ------------------------------------------------------------------------------ Vote

    def _vote_request(self, voter: int, pre_vote: bool) -> VoteRequest:
        return rpc.vote_request(cluster_id=self.config.cluster_id, candidate_id=self.node_id, epoch=self.epoch,
                                last_epoch=last_epoch(self.log), end_offset=self.log.log_end_offset,
                                voter=voter, pre_vote=pre_vote)

    def _vote_response(self, error: ErrorCode, granted: bool, pre_vote: bool, top_error=ErrorCode.NONE) -> VoteResponse:
        return rpc.vote_response(error, granted, pre_vote, leader_id=self._known_leader(), epoch=self.epoch,
                                 top_error=top_error)

    def _on_vote_request(self, source: int, request_id: int, request: VoteRequest) -> None:
        def reply(response):
            self._reply(source, request_id, VOTE, response)

        if not self._cluster_ok(request.cluster_id):
            reply(self._vote_response(ErrorCode.NONE, False, False, ErrorCode.INCONSISTENT_CLUSTER_ID))
            return
        p = request.topics[0].partitions[0]
        candidate, candidate_epoch, pre_vote = p.replica_id, p.replica_epoch, p.pre_vote
        if (p.last_offset < 0 or p.last_offset_epoch < 0 or p.last_offset_epoch > candidate_epoch
                or (not pre_vote and p.last_offset_epoch == candidate_epoch)):
            reply(self._vote_response(ErrorCode.INVALID_REQUEST, False, pre_vote))
            return
        if not self.is_voter or candidate not in self.config.voters:
            reply(self._vote_response(ErrorCode.INCONSISTENT_VOTER_SET, False, pre_vote))
            return
        if candidate_epoch < self.epoch:
            reply(self._vote_response(ErrorCode.FENCED_LEADER_EPOCH, False, pre_vote))
            return
        if candidate_epoch > self.epoch and not pre_vote:
            self._become_unattached(candidate_epoch)
        up_to_date = log_up_to_date(self.log, p.last_offset_epoch, p.last_offset)
        state = self.state
        role = state.role
        if pre_vote:
            if isinstance(state, FollowerState):
                granted = up_to_date and not state.leader_alive(self._now_ms, self.config.fetch_timeout_ms)
            else:
                granted = up_to_date and role in (Role.UNATTACHED, Role.PROSPECTIVE, Role.CANDIDATE)
        else:
            if role in (Role.UNATTACHED, Role.PROSPECTIVE):
                granted = up_to_date and self.voted_id in (NO_ID, candidate)
            else:
                granted = role == Role.CANDIDATE and candidate == self.node_id
            if granted and self.voted_id == NO_ID:
                # The vote is durable before the candidate hears of it.
                self._become_unattached(self.epoch, voted_id=candidate)
        reply(self._vote_response(ErrorCode.NONE, granted, pre_vote))

    def _on_vote_response(self, inflight: _InFlight, response: VoteResponse | None) -> None:
        source = inflight.destination
        if response is None or response.error_code != ErrorCode.NONE:
            self._retry_vote(source, inflight)
            return
        p = response.topics[0].partitions[0]
        # A voter does not move to a pre-voter's epoch, so a pre-vote answer may name an older epoch
        # than ours (we are a candidate that fell back to pre-voting); it still answers our question.
        stale_pre_vote_answer = (inflight.pre_vote and p.leader_epoch < self.epoch and p.leader_id < 0
                                 and p.error_code == ErrorCode.NONE)
        if not stale_pre_vote_answer and self._handle_common(p.error_code, p.leader_id, p.leader_epoch):
            if inflight.generation == self._generation:
                self._retry_vote(source, inflight)
            return
        round_ = self.state
        if inflight.generation != self._generation or not isinstance(round_, VoteRound):
            return
        if p.error_code != ErrorCode.NONE:
            self._retry_vote(source, inflight)
            return
        round_.retry_ms.pop(source, None)
        if p.vote_granted:
            round_.granted.add(source)
            self._maybe_win_round()
        else:
            round_.rejected.add(source)
            if round_.lost(self.config.majority):
                # Lost: wait a random backoff before the next round instead of the full timeout.
                round_.timeout_ms = min(round_.timeout_ms, self._now_ms + self._random_backoff())

    def _retry_vote(self, source: int, inflight: _InFlight) -> None:
        round_ = self.state
        if inflight.generation == self._generation and isinstance(round_, VoteRound) and source in round_.retry_ms:
            round_.retry_ms[source] = self._now_ms + self.config.retry_backoff_ms

    # ------------------------------------------------------------------------------ Begin/EndQuorumEpoch

    def _begin_quorum_epoch_request(self, voter: int) -> BeginQuorumEpochRequest:
        return rpc.begin_quorum_epoch_request(cluster_id=self.config.cluster_id, leader_id=self.node_id,
                                              epoch=self.epoch, voter=voter)

    def _end_quorum_epoch_request(self, preferred: list[int]) -> EndQuorumEpochRequest:
        return rpc.end_quorum_epoch_request(cluster_id=self.config.cluster_id, leader_id=self.node_id,
                                            epoch=self.epoch, preferred=preferred)

    def _epoch_response(self, cls, error: ErrorCode, top_error=ErrorCode.NONE):
        return rpc.epoch_response(cls, error, leader_id=self._known_leader(), epoch=self.epoch, top_error=top_error)

    def _on_begin_quorum_epoch_request(self, source: int, request_id: int, request) -> None:
        if not self._cluster_ok(request.cluster_id):
            self._reply(source, request_id, BEGIN_QUORUM_EPOCH, self._epoch_response(
                BeginQuorumEpochResponse, ErrorCode.NONE, ErrorCode.INCONSISTENT_CLUSTER_ID))
            return
        p = request.topics[0].partitions[0]
        if p.leader_epoch < self.epoch:
            error = ErrorCode.FENCED_LEADER_EPOCH
        else:
            error = ErrorCode.NONE
            if p.leader_epoch > self.epoch or not (self.role == Role.FOLLOWER and self.leader_id == p.leader_id):
                self._become_follower(p.leader_epoch, p.leader_id)
        self._reply(source, request_id, BEGIN_QUORUM_EPOCH, self._epoch_response(BeginQuorumEpochResponse, error))

    def _on_begin_quorum_epoch_response(self, inflight: _InFlight, response) -> None:
        voter = inflight.destination
        if response is None or response.error_code != ErrorCode.NONE:
            leader = self._sender_state(inflight)
            if isinstance(leader, LeaderState) and voter in leader.begin_pending:
                leader.begin_pending[voter] = self._now_ms + self.config.retry_backoff_ms
            return
        p = response.topics[0].partitions[0]
        if self._handle_common(p.error_code, p.leader_id, p.leader_epoch):
            return
        leader = self._sender_state(inflight)
        if isinstance(leader, LeaderState) and p.error_code == ErrorCode.NONE:
            leader.begin_pending.pop(voter, None)

    def _on_end_quorum_epoch_request(self, source: int, request_id: int, request) -> None:
        if not self._cluster_ok(request.cluster_id):
            self._reply(source, request_id, END_QUORUM_EPOCH, self._epoch_response(
                EndQuorumEpochResponse, ErrorCode.NONE, ErrorCode.INCONSISTENT_CLUSTER_ID))
            return
        p = request.topics[0].partitions[0]
        if p.leader_epoch < self.epoch:
            self._reply(source, request_id, END_QUORUM_EPOCH,
                        self._epoch_response(EndQuorumEpochResponse, ErrorCode.FENCED_LEADER_EPOCH))
            return
        if p.leader_epoch > self.epoch or (self.role != Role.FOLLOWER and self.role != Role.RESIGNED
                                            and p.leader_id != self.node_id):
            self._become_follower(p.leader_epoch, p.leader_id)
        follower = self.state
        if isinstance(follower, FollowerState) and follower.leader_id == p.leader_id and self.is_voter:
            follower.end_quorum_received = True
            preferred = list(p.preferred_candidates and [c.candidate_id for c in p.preferred_candidates]
                             or p.preferred_successors)
            if self.node_id in preferred:
                position = preferred.index(self.node_id)
                delay = 0 if position == 0 else min(self.config.election_backoff_max_ms,
                                                    self.config.retry_backoff_ms << position)
            else:
                delay = self._random_backoff()
            follower.timeout_ms = min(follower.timeout_ms, self._now_ms + delay)
        self._reply(source, request_id, END_QUORUM_EPOCH, self._epoch_response(EndQuorumEpochResponse, ErrorCode.NONE))

    def _on_end_quorum_epoch_response(self, inflight: _InFlight, response) -> None:
        if response is None or response.error_code != ErrorCode.NONE:
            return
        p = response.topics[0].partitions[0]
        self._handle_common(p.error_code, p.leader_id, p.leader_epoch)

    # ------------------------------------------------------------------------------ Fetch (follower side)

    def _fetch_request(self) -> FetchRequest:
        # A follower's fetch offset is its acknowledgement, so it must be durable: the log is flushed
        # after every append, and only the flushed end is offered.
        # A follower that saw its leader's connection close asks to be answered at once (max wait 0): a
        # live leader then proves itself within the disconnect grace, not a parked fetch's max wait later.
        state = self.state
        probing = isinstance(state, FollowerState) and state.disconnected
        return rpc.fetch_request(
            cluster_id=self.config.cluster_id, replica_id=self.node_id, epoch=self.epoch,
            fetch_offset=self.log.flushed_end_offset, last_fetched_epoch=last_epoch(self.log),
            log_start_offset=self.log.log_start_offset, max_bytes=self.config.fetch_max_bytes,
            max_wait_ms=0 if probing else self.config.fetch_max_wait_ms, high_watermark=self.high_watermark)

    def _fetch_failed(self) -> None:
        state = self._fetching_state()
        if state is not None:
            state.next_fetch_ms = self._now_ms + self.config.retry_backoff_ms

    def _fetched_from_leader(self, inflight: _InFlight) -> FollowerState | None:
        """The follower role that sent `inflight` to its leader, if it is still ours."""
        follower = self._sender_state(inflight)
        if isinstance(follower, FollowerState) and inflight.destination == follower.leader_id:
            return follower
        return None

    def _on_fetch_response(self, inflight: _InFlight, response: FetchResponse | None) -> None:
        if response is None or response.error_code != ErrorCode.NONE:
            self._fetch_failed()
            return
        p = response.responses[0].partitions[0]
        leader = p.current_leader
        if self._handle_common(p.error_code, leader.leader_id, leader.leader_epoch):
            self._fetch_failed()
            return
        follower = self._fetched_from_leader(inflight)
        if follower is None:
            return
        if p.error_code != ErrorCode.NONE:
            self._fetch_failed()
            return
        follower.fetched(self._now_ms, self.config.fetch_timeout_ms)
        diverging, snapshot = p.diverging_epoch, p.snapshot_id
        if diverging.epoch >= 0 or diverging.end_offset >= 0:
            self._truncate_to_end_offset(diverging.end_offset, diverging.epoch)
        elif snapshot.epoch >= 0 or snapshot.end_offset >= 0:
            if snapshot.epoch < 0 or snapshot.end_offset < 0:
                return
            snapshot_id = SnapshotId(snapshot.end_offset, snapshot.epoch)
            if snapshot_id != self.log.latest_snapshot_id():
                follower.snapshot_fetch = SnapshotFetch(snapshot_id)
        else:
            records = p.records
            if records:
                first = next(iter_batches(records), None)
                if first is None or first[1].base_offset != self.log.log_end_offset:
                    return  # not where our log ends (a stale answer); fetch again from the end
                self.log.append_as_follower(bytes(records), now_ms=self._now_ms)
                self.log.flush(now_ms=self._now_ms)
            self._follower_high_watermark(p.high_watermark)

    def _follower_high_watermark(self, leader_high_watermark: int) -> None:
        new = min(leader_high_watermark, self.log.flushed_end_offset)
        if new > self.high_watermark:
            self.high_watermark = new

    def _truncate_to_end_offset(self, end_offset: int, epoch: int) -> None:
        """ReplicatedLog.truncateToEndOffset, refusing to cut what is committed or below the log start."""
        offset = truncation_offset(self.log, end_offset, epoch)
        if offset < self.high_watermark:
            raise RaftInvariantError(f"node {self.node_id}: leader {self.leader_id} asks to truncate to {offset}, "
                                     f"below the high watermark {self.high_watermark}")
        if offset < self.log.log_start_offset:
            raise RaftInvariantError(f"node {self.node_id}: truncation to {offset} is below the log start")
        self.log.truncate_to(offset)

    # ------------------------------------------------------------------------------ FetchSnapshot (follower)

    def _fetch_snapshot_request(self, fetch: SnapshotFetch) -> FetchSnapshotRequest:
        return rpc.fetch_snapshot_request(
            cluster_id=self.config.cluster_id, replica_id=self.node_id, epoch=self.epoch,
            snapshot_id=fetch.snapshot_id, position=len(fetch.data), max_bytes=self.config.snapshot_chunk_bytes)

    def _on_fetch_snapshot_response(self, inflight: _InFlight, response) -> None:
        if response is None or response.error_code != ErrorCode.NONE:
            self._fetch_failed()
            return
        p = response.topics[0].partitions[0]
        leader = p.current_leader
        if self._handle_common(p.error_code, leader.leader_id, leader.leader_epoch):
            self._fetch_failed()
            return
        follower = self._fetched_from_leader(inflight)
        fetch = follower.snapshot_fetch if follower is not None else None
        if follower is None or fetch is None:
            return
        if p.error_code != ErrorCode.NONE:
            # SNAPSHOT_NOT_FOUND (the leader moved on to a newer one) or a bad position: fetch the log
            # again, and the leader names the snapshot to take.
            follower.snapshot_fetch = None
            self._fetch_failed()
            return
        follower.fetched(self._now_ms, self.config.fetch_timeout_ms)
        if (SnapshotId(p.snapshot_id.end_offset, p.snapshot_id.epoch) != fetch.snapshot_id
                or p.position != len(fetch.data)):
            return
        fetch.data += bytes(p.unaligned_records or b"")
        if len(fetch.data) < p.size:
            return
        follower.snapshot_fetch = None
        snapshot_id = fetch.snapshot_id
        self.log.store_snapshot(snapshot_id, bytes(fetch.data))
        self.log.truncate_fully_and_start_at(snapshot_id.end_offset, now_ms=self._now_ms)
        # The snapshot holds committed offsets only, and the listener loads it in _deliver_committed.
        self.high_watermark = max(self.high_watermark, snapshot_id.end_offset)

    # ------------------------------------------------------------------------------ Fetch (leader side)

    def _fetch_error_response(self, error: ErrorCode, top_error: ErrorCode = ErrorCode.NONE,
                              leader_id: int | None = None) -> FetchResponse:
        leader = self._known_leader() if leader_id is None else leader_id
        return rpc.fetch_error_response(error, leader_id=leader, epoch=self.epoch, top_error=top_error)

    def _on_fetch_request(self, source: int, request_id: int, request: FetchRequest) -> None:
        if not self._cluster_ok(request.cluster_id):
            self._reply(source, request_id, FETCH,
                        self._fetch_error_response(ErrorCode.NONE, ErrorCode.INCONSISTENT_CLUSTER_ID))
            return
        partition = request.topics[0].partitions[0]
        # Fetch v15+ names the fetching replica in ReplicaState, older versions in ReplicaId.
        replica_id = request.replica_state.replica_id if request.replica_state.replica_id >= 0 else request.replica_id
        error = self._validate_leader_only(partition.current_leader_epoch)
        if error != ErrorCode.NONE:
            self._reply(source, request_id, FETCH, self._fetch_error_response(error))
            return
        leader = self.state
        assert isinstance(leader, LeaderState)
        hw_before = self.high_watermark
        response, empty = self._try_complete_fetch(replica_id, partition, update=True)
        # Park an idle fetch unless the fetcher has yet to hear of our high watermark: because this fetch
        # just moved it, or (Fetch v18, KIP-1166) because the high watermark it says it knows is below
        # ours. Without the second test, of two followers the one whose fetch arrives after the other's
        # moved the high watermark is parked knowing the old one, and learns that its records are
        # committed a whole max wait (500 ms) later; a fetch of v17 or below carries Long.MAX_VALUE there
        # (unknown), and only the first test applies.
        if (empty and request.max_wait_ms > 0 and self.high_watermark == hw_before
                and partition.high_watermark >= self.high_watermark):
            leader.parked.append(ParkedFetch(source, request_id, replica_id, partition,
                                             self._now_ms + request.max_wait_ms))
        else:
            self._reply(source, request_id, FETCH, response)

    def _try_complete_fetch(self, replica_id: int, partition, update: bool) -> tuple[FetchResponse, bool]:
        fetch_offset, last_fetched_epoch = partition.fetch_offset, partition.last_fetched_epoch
        snapshot = self.log.latest_snapshot_id()
        if fetch_offset == 0 and snapshot is not None:
            validity, v_offset, v_epoch = Validity.SNAPSHOT, snapshot.end_offset, snapshot.epoch
        else:
            validity, v_offset, v_epoch = validate_offset_and_epoch(self.log, fetch_offset, last_fetched_epoch)
        records = b""
        if validity == Validity.VALID:
            if fetch_offset < self.log.log_end_offset:
                records = self.log.read(fetch_offset, partition.partition_max_bytes)
            leader = self.state
            if update and isinstance(leader, LeaderState):
                if leader.record_fetch(replica_id, fetch_offset, self.log.log_end_offset, self._now_ms):
                    self._update_high_watermark()
        PD = FetchResponse.FetchableTopicResponse.PartitionData
        pd = PD(partition_index=METADATA_PARTITION, error_code=ErrorCode.NONE,
                high_watermark=self.high_watermark, log_start_offset=self.log.log_start_offset,
                current_leader=PD.LeaderIdAndEpoch(leader_id=self.node_id, leader_epoch=self.epoch),
                records=records)
        if validity == Validity.DIVERGING:
            pd.diverging_epoch = PD.EpochEndOffset(epoch=v_epoch, end_offset=v_offset)
        elif validity == Validity.SNAPSHOT:
            pd.snapshot_id = PD.SnapshotId(end_offset=v_offset, epoch=v_epoch)
        response = FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
            topic_id=METADATA_TOPIC_ID, partitions=[pd])])
        return response, validity == Validity.VALID and not records

    def _update_high_watermark(self) -> None:
        leader = self.state
        if not isinstance(leader, LeaderState):
            return
        # The leader counts what it has flushed, not what it has appended: an acknowledgement must
        # survive the leader's crash like any follower's.
        candidate = leader.majority_end_offset(self.log.flushed_end_offset)
        if candidate is not None and candidate > self.high_watermark:
            self.high_watermark = candidate
            self._complete_parked(only_due=False)

    def _complete_parked(self, only_due: bool) -> None:
        leader = self.state
        if not isinstance(leader, LeaderState):
            return
        for p in leader.take_parked(self._now_ms, only_due):
            response, _ = self._try_complete_fetch(p.replica_id, p.partition, update=False)
            self._respond_fetch(p, response)

    def _respond_fetch(self, parked: ParkedFetch, response: FetchResponse) -> None:
        self._reply(parked.source, parked.request_id, FETCH, response)

    # ------------------------------------------------------------------------------ FetchSnapshot (leader)

    def _on_fetch_snapshot_request(self, source: int, request_id: int, request: FetchSnapshotRequest) -> None:
        P = FetchSnapshotResponse.TopicSnapshot.PartitionSnapshot

        def reply(error: ErrorCode, top_error=ErrorCode.NONE, **fields) -> None:
            partition = P(index=METADATA_PARTITION, error_code=error,
                          current_leader=P.LeaderIdAndEpoch(leader_id=self._known_leader(), leader_epoch=self.epoch),
                          unaligned_records=fields.pop("records", b""), **fields)
            self._reply(source, request_id, FETCH_SNAPSHOT, FetchSnapshotResponse(
                error_code=top_error, topics=[FetchSnapshotResponse.TopicSnapshot(name=METADATA_TOPIC,
                                                                                  partitions=[partition])]))

        if not self._cluster_ok(request.cluster_id):
            reply(ErrorCode.NONE, ErrorCode.INCONSISTENT_CLUSTER_ID)
            return
        p = request.topics[0].partitions[0]
        error = self._validate_leader_only(p.current_leader_epoch)
        if error != ErrorCode.NONE:
            reply(error)
            return
        snapshot_id = SnapshotId(p.snapshot_id.end_offset, p.snapshot_id.epoch)
        data = self.log.read_snapshot(snapshot_id)
        if data is None:
            reply(ErrorCode.SNAPSHOT_NOT_FOUND)
            return
        if p.position < 0 or p.position > len(data):
            reply(ErrorCode.POSITION_OUT_OF_RANGE)
            return
        chunk = data[p.position : p.position + min(max(request.max_bytes, 1), self.config.snapshot_chunk_bytes)]
        reply(ErrorCode.NONE, snapshot_id=P.SnapshotId(end_offset=snapshot_id.end_offset, epoch=snapshot_id.epoch),
              size=len(data), position=p.position, records=chunk)

    # ------------------------------------------------------------------------------ DescribeQuorum

    def _describe_quorum_response(self) -> DescribeQuorumResponse:
        PD = DescribeQuorumResponse.TopicData.PartitionData
        leader = self.state
        if not isinstance(leader, LeaderState):
            partition = PD(partition_index=METADATA_PARTITION, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                           leader_id=self._known_leader(), leader_epoch=self.epoch, high_watermark=-1)
        else:
            def state(r: ReplicaState):
                end = self.log.log_end_offset if r.replica_id == self.node_id else r.end_offset
                seen = self._now_ms if r.replica_id == self.node_id else r.last_fetch_ms
                caught = self._now_ms if r.replica_id == self.node_id else r.last_caught_up_ms
                return PD.ReplicaState(replica_id=r.replica_id, log_end_offset=end,
                                       last_fetch_timestamp=seen, last_caught_up_timestamp=caught)

            replicas = sorted(leader.replicas.values(), key=lambda r: r.replica_id)
            partition = PD(
                partition_index=METADATA_PARTITION, error_code=ErrorCode.NONE, leader_id=self.node_id,
                leader_epoch=self.epoch, high_watermark=self.high_watermark,
                current_voters=[state(r) for r in replicas if r.replica_id in self.config.voters],
                observers=[state(r) for r in replicas if r.replica_id not in self.config.voters],
            )
        return DescribeQuorumResponse(topics=[DescribeQuorumResponse.TopicData(topic_name=METADATA_TOPIC,
                                                                               partitions=[partition])])

    def _on_describe_quorum_request(self, source: int, request_id: int, request) -> None:
        self._reply(source, request_id, DESCRIBE_QUORUM, self._describe_quorum_response())

    # ------------------------------------------------------------------------------ dispatch, delivery

    def _dispatch_response(self, inflight: _InFlight, response) -> None:
        api = inflight.api_key
        if api == FETCH:
            self._on_fetch_response(inflight, response)
        elif api == VOTE:
            self._on_vote_response(inflight, response)
        elif api == BEGIN_QUORUM_EPOCH:
            self._on_begin_quorum_epoch_response(inflight, response)
        elif api == END_QUORUM_EPOCH:
            self._on_end_quorum_epoch_response(inflight, response)
        elif api == FETCH_SNAPSHOT:
            self._on_fetch_snapshot_response(inflight, response)

    def _deliver_committed(self) -> None:
        if self.applied_end_offset < self.log.log_start_offset:
            snapshot_id = self.log.latest_snapshot_id()
            if snapshot_id is None or snapshot_id.end_offset != self.log.log_start_offset:
                raise RaftInvariantError(f"node {self.node_id}: log starts at {self.log.log_start_offset} "
                                         f"without a snapshot there ({snapshot_id})")
            self.listener.handle_load_snapshot(snapshot_id, self.log.read_snapshot(snapshot_id) or b"")
            self.applied_end_offset = snapshot_id.end_offset
        while self.applied_end_offset < self.high_watermark:
            data = self.log.read(self.applied_end_offset, self.config.fetch_max_bytes)
            progressed = False
            for pos, header in iter_batches(data):
                if header.last_offset < self.applied_end_offset:
                    continue
                if header.next_offset > self.high_watermark:
                    break
                batch = memoryview(data)[pos : pos + header.size]
                records = [] if header.is_control else [
                    r.value or b"" for r in iter_records(batch, max_uncompressed_bytes=_MAX_BATCH_BYTES)]
                self.listener.handle_commit(CommittedBatch(header.base_offset, header.last_offset,
                                                           header.partition_leader_epoch, records,
                                                           header.is_control))
                self.applied_end_offset = header.next_offset
                progressed = True
            if not progressed:
                break
