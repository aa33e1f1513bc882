"""A seeded, deterministic simulation of the KRaft quorum core (raft/) under faults.

One run is one seed: a cluster of voters and observers, each a `RaftNode` over a `MemoryRaftLog`
(which loses what was not flushed when its node crashes) and a quorum-state store, joined by a
simulated network that drops, delays, duplicates and reorders messages and can cut links one way or
both. For `chaos_ms` of simulated time, nodes crash and restart, links are cut and healed, clients
append records to whoever leads, and nodes take snapshots (removing the log below them). Then the
network heals, every node restarts, and the quorum has `settle_ms` to elect a leader and bring every
node, observers too, to the same high watermark with a last record committed everywhere.

After EVERY event the checker asserts:
  * at most one leader per epoch, ever;
  * a node's high watermark never goes back within its life;
  * whatever any node holds below its high watermark agrees, batch for batch, with what was committed
    before (the first node to commit an offset defines it: nothing committed is ever lost or changed);
  * every node's applied state (records and snapshots loaded) is a prefix of the committed records;
and `RaftInvariantError` from a node (a second leader claim, truncation below the high watermark) is a
failure too. A failure prints the seed and the command that replays it; a run depends only on its seed
(one `random.Random(seed)` feeds everything, events are ordered by (time, sequence number), and no
set or dict is iterated where its order could depend on hashing).

    python -m tests.sim.raft --seeds 5000            # seeds 0..4999, a summary at the end
    python -m tests.sim.raft --seed 1234 --verbose   # replay one seed, printing the events
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import logging
import random
import sys
import time
from dataclasses import dataclass, field

import structlog

from odradek.protocol.messages import VoteResponse
from odradek.protocol.records import iter_batches, iter_records
from odradek.raft import (
    CommittedBatch,
    MemoryQuorumStateStore,
    MemoryRaftLog,
    NotLeaderError,
    OutboundRequest,
    RaftConfig,
    RaftInvariantError,
    RaftNode,
    Role,
    SnapshotId,
)


class SimulationFailure(AssertionError):
    pass


class StateMachine:
    """The upper layer: applies committed records in order; its snapshot is every (offset, value) so far."""

    def __init__(self) -> None:
        self.values: list[tuple[int, bytes]] = []
        self.next_offset = 0
        self.leader_changes = 0
        self.snapshots_loaded = 0

    def handle_commit(self, batch: CommittedBatch) -> None:
        if batch.base_offset != self.next_offset:
            raise SimulationFailure(f"commit of batch at {batch.base_offset}, expected {self.next_offset}")
        for i, value in enumerate(batch.records):
            self.values.append((batch.base_offset + i, value))
        self.next_offset = batch.last_offset + 1

    def handle_load_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        self.values = decode_snapshot(data)
        self.next_offset = snapshot_id.end_offset
        self.snapshots_loaded += 1

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self.leader_changes += 1

    def snapshot(self) -> bytes:
        return encode_snapshot(self.values)


def encode_snapshot(values: list[tuple[int, bytes]]) -> bytes:
    out = bytearray()
    for offset, value in values:
        out += offset.to_bytes(8, "big") + len(value).to_bytes(4, "big") + value
    return bytes(out)


def decode_snapshot(data: bytes) -> list[tuple[int, bytes]]:
    values = []
    pos = 0
    while pos < len(data):
        offset = int.from_bytes(data[pos : pos + 8], "big")
        n = int.from_bytes(data[pos + 8 : pos + 12], "big")
        values.append((offset, data[pos + 12 : pos + 12 + n]))
        pos += 12 + n
    return values


@dataclass
class SimNode:
    node_id: int
    config: RaftConfig
    log: MemoryRaftLog = field(default_factory=MemoryRaftLog)
    store: MemoryQuorumStateStore = field(default_factory=MemoryQuorumStateStore)
    machine: StateMachine = field(default_factory=StateMachine)
    raft: RaftNode | None = None
    incarnation: int = 0
    alive: bool = True
    poll_at: int = -1
    last_hw: int = 0
    verified_end: int = 0  # log below this offset was compared with the committed batches
    applied_checked: int = 0  # machine.values below this index were compared
    loads_checked: int = 0
    last_poll: int = -1
    last_role: Role | None = None
    polls_now: int = 0


@dataclass
class Params:
    voters: int = 3
    observers: int = 1
    chaos_ms: int = 20_000
    settle_ms: int = 30_000
    drop: float = 0.05
    duplicate: float = 0.02
    min_delay_ms: int = 1
    max_delay_ms: int = 30
    crash_every_ms: int = 3000
    partition_every_ms: int = 3000
    append_every_ms: int = 40
    snapshot_every_ms: int = 2500
    # Targeted crashes, where the protocol's durability rules matter: a leader shortly after an append
    # (before it flushes), and some voter shortly after anyone changes role (between a vote and its use).
    crash_after_append: float = 0.02
    crash_after_role_change: float = 0.1
    crash_after_vote: float = 0.2
    # A crashed node's peers see its connections close (its host stays up), and a request to a dead node
    # is refused: RaftNode.handle_disconnect, with this grace (-1: KRaft's rule, no disconnect rule).
    disconnect_grace_ms: int = 500
    # Connection resets with nobody dead (a wrongly suspected leader): how often one hits a random link.
    spurious_disconnect_every_ms: int = 0
    wire: bool = False  # pass every message through the codec (encode, then decode)


@dataclass
class Stats:
    events: int = 0
    messages: int = 0
    crashes: int = 0
    partitions: int = 0
    appends: int = 0
    committed_offsets: int = 0
    snapshots: int = 0
    snapshots_loaded: int = 0
    disconnects: int = 0
    max_epoch: int = 0
    settle_ms: int = 0
    digest: str = ""  # of the committed log, for comparing runs


def params_for_seed(seed: int, rng: random.Random) -> Params:
    """Each seed draws its own cluster shape and fault rates, so a batch of seeds covers a range."""
    return Params(
        voters=rng.choice((3, 3, 5)),
        observers=rng.choice((0, 1, 2)),
        drop=rng.choice((0.0, 0.02, 0.1, 0.25)),
        duplicate=rng.choice((0.0, 0.02, 0.1)),
        max_delay_ms=rng.choice((5, 30, 150)),
        crash_every_ms=rng.choice((1000, 3000, 8000)),
        partition_every_ms=rng.choice((1000, 3000, 8000)),
        snapshot_every_ms=rng.choice((700, 2500, 10_000)),
        crash_after_append=rng.choice((0.0, 0.02, 0.05)),
        crash_after_role_change=rng.choice((0.0, 0.1, 0.3)),
        crash_after_vote=rng.choice((0.0, 0.2, 0.5)),
        wire=seed % 8 == 0,
        disconnect_grace_ms=(-1, 0, 100, 500)[seed % 4],
        spurious_disconnect_every_ms=(0, 300, 2000)[(seed // 4) % 3],
    )


class Simulation:
    def __init__(self, seed: int, params: Params | None = None, verbose: bool = False) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.params = params or params_for_seed(seed, self.rng)
        self.verbose = verbose
        self.now = 0
        self.queue: list[tuple[int, int, str, tuple]] = []
        self.seq = 0
        p = self.params
        voter_ids = tuple(range(1, p.voters + 1))
        ids = list(voter_ids) + [100 + i for i in range(p.observers)]
        self.nodes: dict[int, SimNode] = {}
        for node_id in ids:
            config = RaftConfig(node_id=node_id, voters=voter_ids, cluster_id="sim-cluster",
                                leader_disconnect_grace_ms=p.disconnect_grace_ms,
                                snapshot_chunk_bytes=self.rng.choice((1024, 8192, 1 << 20)),
                                leader_flush_interval_ms=self.rng.choice((0, 5, 50)),
                                fetch_max_bytes=self.rng.choice((600, 8192, 1 << 20)))
            self.nodes[node_id] = SimNode(node_id, config)
        self.ids = ids
        self.cut: set[tuple[int, int]] = set()  # (from, to) links that drop everything
        self.requests: dict[int, tuple[int, int, int]] = {}  # request id -> (node, incarnation, correlation)
        self.next_request_id = 0
        self.leader_of_epoch: dict[int, int] = {}
        self.committed: dict[int, tuple[int, bytes]] = {}  # base offset -> (last offset, batch bytes)
        self.committed_end = 0
        self.committed_values: dict[int, bytes] = {}
        self.appended = 0
        self.chaos = True
        self.stats = Stats()
        self.trace: list[str] = []
        for node_id in ids:
            self._start(self.nodes[node_id])

    # -------------------------------------------------------------------------------- plumbing

    def log(self, text: str) -> None:
        line = f"{self.now:>7} {text}"
        if self.verbose:
            print(line)
        self.trace.append(line)
        if len(self.trace) > 60:
            del self.trace[:20]

    def schedule(self, at: int, kind: str, payload: tuple = ()) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (at, self.seq, kind, payload))

    def _start(self, node: SimNode) -> None:
        node.raft = RaftNode(node.config, node.log, node.store, node.machine,
                             random.Random(self.rng.getrandbits(64)), self.now)
        node.alive = True
        node.last_hw = node.raft.high_watermark
        node.verified_end = node.log.log_start_offset
        node.applied_checked = 0
        node.loads_checked = 0
        node.last_role = None
        node.poll_at = -1
        self._after(node, node.raft.poll(self.now))

    def _after(self, node: SimNode, outbound: list) -> None:
        """Send what a node emitted, schedule its next poll, and check the invariants."""
        for message in outbound:
            self._send(node, message)
        deadline = max(self.now, node.raft.next_deadline_ms)
        if node.poll_at < self.now or deadline < node.poll_at:
            node.poll_at = deadline
            self.schedule(deadline, "poll", (node.node_id, node.incarnation))
        self._check(node)

    def _wire(self, message, version: int):
        if not self.params.wire:
            return message
        return type(message).decode(message.encode(version), version)

    def _send(self, node: SimNode, message) -> None:
        self.stats.messages += 1
        p = self.params
        if isinstance(message, OutboundRequest):
            self.next_request_id += 1
            request_id = self.next_request_id
            self.requests[request_id] = (node.node_id, node.incarnation, message.correlation_id)
            payload = ("request", node.node_id, message.destination, request_id, message.message, message.api_version)
        else:
            route = self.requests.get(message.request_id)
            if route is None:
                return
            if (self.chaos and isinstance(message.message, VoteResponse)
                    and message.message.topics and message.message.topics[0].partitions[0].vote_granted
                    and self.rng.random() < p.crash_after_vote):
                self.schedule(self.now + self.rng.randint(0, 20), "crash-now", (node.node_id, node.incarnation, 100))
            payload = ("response", node.node_id, route[0], route[1], route[2], message.message, message.api_version)
        destination = payload[2]
        if (node.node_id, destination) in self.cut:
            return
        if self.chaos and self.rng.random() < p.drop:
            return
        copies = 2 if self.chaos and self.rng.random() < p.duplicate else 1
        for _ in range(copies):
            self.schedule(self.now + self.rng.randint(p.min_delay_ms, p.max_delay_ms), "deliver", payload)

    def _deliver(self, payload: tuple) -> None:
        kind, source, destination = payload[0], payload[1], payload[2]
        node = self.nodes[destination]
        if (source, destination) in self.cut:
            return
        if not node.alive:
            if kind == "request" and (destination, source) not in self.cut:
                # Nobody listens on the dead node's port: its host refuses the connection.
                self._schedule_disconnect(source, destination)
            return
        if kind == "request":
            _, _, _, request_id, message, version = payload
            out = node.raft.handle_request(source, request_id, self._wire(message, version), self.now)
        else:
            _, _, _, incarnation, correlation_id, message, version = payload
            if incarnation != node.incarnation:
                return
            out = node.raft.handle_response(source, correlation_id, self._wire(message, version), self.now)
        self._after(node, out)

    def _schedule_disconnect(self, node_id: int, peer: int) -> None:
        """`node_id` learns, a message delay from now, that `peer` closed or refused its connection."""
        node = self.nodes[node_id]
        if node.alive:
            self.schedule(self.now + self.rng.randint(self.params.min_delay_ms, self.params.max_delay_ms),
                          "disconnect", (node_id, node.incarnation, peer))

    def _disconnect(self, payload: tuple) -> None:
        node_id, incarnation, peer = payload
        node = self.nodes[node_id]
        if node.alive and node.incarnation == incarnation:
            self.stats.disconnects += 1
            self._after(node, node.raft.handle_disconnect(peer, self.now))

    # -------------------------------------------------------------------------------- faults and clients

    def _crash(self, node: SimNode) -> None:
        self.log(f"crash {node.node_id} ({node.raft.role.name} e{node.raft.epoch} hw={node.raft.high_watermark} "
                 f"leo={node.log.log_end_offset} flushed={node.log.flushed_end_offset})")
        self.stats.crashes += 1
        # The process dies, its host stays up: every peer that can still reach the host sees the connection close.
        for other in self.ids:
            if other != node.node_id and (node.node_id, other) not in self.cut:
                self._schedule_disconnect(other, node.node_id)
        node.alive = False
        node.incarnation += 1
        node.log = node.log.crash()
        node.machine = StateMachine()
        node.raft = None

    def _restart(self, node: SimNode) -> None:
        if node.alive:
            return
        self.log(f"restart {node.node_id} (log {node.log.log_start_offset}..{node.log.log_end_offset})")
        self._start(node)

    def _chaos_event(self, kind: str, payload: tuple) -> None:
        p = self.params
        if kind == "crash":
            node = self.nodes[self.rng.choice(self.ids)]
            if node.alive:
                self._crash(node)
                self.schedule(self.now + self.rng.randint(50, 4000), "restart", (node.node_id,))
            self.schedule(self.now + self.rng.randint(1, 2 * p.crash_every_ms), "crash")
        elif kind == "crash-now":
            node = self.nodes[payload[0]]
            if node.alive and node.incarnation == payload[1]:
                self._crash(node)
                down_ms = payload[2] if len(payload) > 2 else 600
                self.schedule(self.now + self.rng.randint(10, down_ms), "restart", (node.node_id,))
        elif kind == "partition":
            self.stats.partitions += 1
            choice = self.rng.random()
            if choice < 0.4:
                a, b = self.rng.sample(self.ids, 2)
                self.cut.add((a, b))  # one way
                self.log(f"cut {a}->{b}")
            elif choice < 0.8:
                side = set(self.rng.sample(self.ids, self.rng.randint(1, len(self.ids) - 1)))
                for a in self.ids:
                    for b in self.ids:
                        if (a in side) != (b in side):
                            self.cut.add((a, b))
                self.log(f"partition {sorted(side)} | rest")
            else:
                self.cut.clear()
                self.log("heal")
            self.schedule(self.now + self.rng.randint(1, 2 * p.partition_every_ms), "partition")
        elif kind == "append":
            self._client_append()
            self.schedule(self.now + self.rng.randint(1, 2 * p.append_every_ms), "append")
        elif kind == "snapshot":
            node = self.nodes[self.rng.choice(self.ids)]
            if node.alive:
                self._snapshot(node)
            self.schedule(self.now + self.rng.randint(1, 2 * p.snapshot_every_ms), "snapshot")
        elif kind == "spurious-disconnect":
            # A reset with both ends alive (a middlebox, a restarted listener): the node must not be deposed
            # for good, nor the quorum kept from converging, by such wrong suspicions.
            a, b = self.rng.sample(self.ids, 2)
            self.log(f"spurious disconnect {b} seen by {a}")
            self._schedule_disconnect(a, b)
            self.schedule(self.now + self.rng.randint(1, 2 * p.spurious_disconnect_every_ms), "spurious-disconnect")

    def _client_append(self) -> int | None:
        leaders = [n for n in self.nodes.values() if n.alive and n.raft.role == Role.LEADER]
        if not leaders:
            return None
        node = self.rng.choice(leaders)
        self.appended += 1
        self.stats.appends += 1
        count = self.rng.randint(1, 3)
        values = [f"s{self.seed}-r{self.appended}-{i}".encode() for i in range(count)]
        try:
            offset = node.raft.append(values, self.now)
        except NotLeaderError:
            return None
        self._after(node, [])
        if self.chaos and self.rng.random() < self.params.crash_after_append:
            self.schedule(self.now + self.rng.randint(0, 60), "crash-now", (node.node_id, node.incarnation))
        return offset

    def _snapshot(self, node: SimNode) -> None:
        end = node.machine.next_offset
        if end <= node.log.log_start_offset:
            return
        snapshot_id = node.raft.create_snapshot(end, node.machine.snapshot())
        self.stats.snapshots += 1
        self.log(f"snapshot {node.node_id} at {snapshot_id}")
        self._after(node, [])

    # -------------------------------------------------------------------------------- invariants

    def fail(self, text: str) -> None:
        raise SimulationFailure(text)

    def _check(self, node: SimNode) -> None:
        raft = node.raft
        if raft.role != node.last_role:
            node.last_role = raft.role
            if self.chaos and self.rng.random() < self.params.crash_after_role_change:
                victim = self.nodes[self.rng.choice(self.ids[: self.params.voters])]
                self.schedule(self.now + self.rng.randint(0, 40), "crash-now", (victim.node_id, victim.incarnation))
        if raft.role == Role.LEADER:
            self.stats.max_epoch = max(self.stats.max_epoch, raft.epoch)
            other = self.leader_of_epoch.setdefault(raft.epoch, node.node_id)
            if other != node.node_id:
                self.fail(f"two leaders in epoch {raft.epoch}: {other} and {node.node_id}")
        hw = raft.high_watermark
        if hw < node.last_hw:
            self.fail(f"node {node.node_id}: high watermark went back {node.last_hw} -> {hw}")
        node.last_hw = hw
        # The log below the high watermark must be the committed log.
        log = node.log
        if node.verified_end < log.log_start_offset:
            node.verified_end = log.log_start_offset
        if node.verified_end < hw:
            data = log.read(node.verified_end, 1 << 30)
            for pos, header in iter_batches(data):
                if header.next_offset > hw:
                    break
                if header.base_offset < node.verified_end:
                    continue
                batch = bytes(data[pos : pos + header.size])
                known = self.committed.get(header.base_offset)
                if known is None:
                    if header.base_offset != self.committed_end:
                        self.fail(f"node {node.node_id}: committed batch at {header.base_offset} but the "
                                  f"committed log ends at {self.committed_end}")
                    self.committed[header.base_offset] = (header.last_offset, batch)
                    self.committed_end = header.next_offset
                    self.stats.committed_offsets = self.committed_end
                    if not header.is_control:
                        for record in iter_records(batch, max_uncompressed_bytes=1 << 20):
                            self.committed_values[record.offset] = record.value
                elif known != (header.last_offset, batch):
                    self.fail(f"node {node.node_id}: batch at {header.base_offset} differs from the committed one")
                node.verified_end = header.next_offset
        # The applied state must be a prefix of the committed records (all of it again after a snapshot load).
        if node.machine.snapshots_loaded != node.loads_checked:
            node.loads_checked = node.machine.snapshots_loaded
            node.applied_checked = 0
            self.stats.snapshots_loaded += 1
        values = node.machine.values
        for i in range(node.applied_checked, len(values)):
            offset, value = values[i]
            if self.committed_values.get(offset) != value:
                self.fail(f"node {node.node_id}: applied {offset}={value!r} but committed is "
                          f"{self.committed_values.get(offset)!r}")
        node.applied_checked = len(values)

    # -------------------------------------------------------------------------------- the run

    def run(self) -> Stats:
        p = self.params
        self.schedule(self.rng.randint(1, p.crash_every_ms), "crash")
        self.schedule(self.rng.randint(1, p.partition_every_ms), "partition")
        self.schedule(self.rng.randint(1, p.append_every_ms), "append")
        self.schedule(self.rng.randint(1, p.snapshot_every_ms), "snapshot")
        if p.spurious_disconnect_every_ms > 0:
            self.schedule(self.rng.randint(1, p.spurious_disconnect_every_ms), "spurious-disconnect")
        self.schedule(p.chaos_ms, "settle")
        deadline = p.chaos_ms + p.settle_ms
        final: tuple[int, int] | None = None  # (offset, epoch) of the record appended after the faults
        try:
            while self.queue:
                at, _, kind, payload = heapq.heappop(self.queue)
                if at > deadline:
                    break
                self.now = at
                self.stats.events += 1
                if kind == "deliver":
                    self._deliver(payload)
                elif kind == "poll":
                    node = self.nodes[payload[0]]
                    if node.alive and node.incarnation == payload[1] and node.poll_at == at:
                        node.polls_now = node.polls_now + 1 if node.last_poll == at else 0
                        node.last_poll = at
                        if node.polls_now > 50:
                            self.fail(f"node {node.node_id} asks to be polled again and again at {at}")
                        node.poll_at = -1
                        self._after(node, node.raft.poll(self.now))
                elif kind == "restart":
                    self._restart(self.nodes[payload[0]])
                elif kind == "disconnect":
                    self._disconnect(payload)
                elif kind == "settle":
                    self._settle()
                elif kind == "final":
                    final = self._final_append(final)
                    if self._converged(final):
                        self.stats.settle_ms = self.now - p.chaos_ms
                        digest = hashlib.sha256()
                        for base in sorted(self.committed):
                            digest.update(self.committed[base][1])
                        self.stats.digest = digest.hexdigest()[:16]
                        return self.stats
                    self.schedule(self.now + 100, "final")
                elif self.chaos:
                    self._chaos_event(kind, payload)
        except RaftInvariantError as e:
            self.fail(f"RaftInvariantError: {e}")
        self.fail(f"no convergence within {p.settle_ms} ms after the faults stopped: {self.describe()}")
        raise AssertionError("unreachable")

    def _settle(self) -> None:
        self.log("settle: heal, restart all, no more faults")
        self.chaos = False
        self.cut.clear()
        for node_id in self.ids:
            self._restart(self.nodes[node_id])
        self.schedule(self.now + 100, "final")

    def _final_append(self, final: tuple[int, int] | None) -> tuple[int, int] | None:
        """A record appended after the faults stopped must reach every node. It is appended again if its
        leader lost the lead before committing it (an uncommitted record may be lost)."""
        leaders = [n for n in self.nodes.values() if n.raft.role == Role.LEADER]
        if len(leaders) != 1:
            return final
        if final is not None and final[1] == leaders[0].raft.epoch:
            return final
        offset = self._client_append()
        return None if offset is None else (offset, leaders[0].raft.epoch)

    def _converged(self, final: tuple[int, int] | None) -> bool:
        if final is None:
            return False
        leaders = [n for n in self.nodes.values() if n.raft.role == Role.LEADER]
        if len(leaders) != 1:
            return False
        leader = leaders[0]
        if leader.raft.epoch != final[1] or leader.raft.high_watermark <= final[0]:
            return False
        target = leader.raft.high_watermark
        if leader.log.log_end_offset != target:
            return False
        for node in self.nodes.values():
            if node.raft.high_watermark != target or node.machine.next_offset != target:
                return False
            if node.raft.epoch != leader.raft.epoch or node.raft.leader_id != leader.node_id:
                return False
        if target < self.committed_end:
            self.fail(f"final high watermark {target} is below the committed end {self.committed_end}")
        expected = sorted(self.committed_values.items())
        for node in self.nodes.values():
            if sorted(node.machine.values) != expected:
                self.fail(f"node {node.node_id}: final state differs from the committed records")
        return True

    # -------------------------------------------------------------------------------- commit latency

    def propagation(self, rounds: int = 3, idle_ms: int = 1000) -> list[int]:
        """After `run()` converged: on the healed, quiet quorum, `rounds` times, let every fetch come to rest
        at the leader (parked) for `idle_ms`, append one record, and measure the simulated time until every
        node's high watermark has passed it. The bound a caller checks is a few message delays and the
        leader's flush interval: the append answers the parked fetches with the record, the followers'
        next fetches commit it, and every fetcher is told at once (a parked fetch when the high watermark
        moves, a later one because it says it knows an older high watermark), never a max wait later."""
        took = []
        for _ in range(rounds):
            self._events_until(self.now + idle_ms, lambda: False)
            offset = self._client_append()
            if offset is None:
                self.fail("no leader on the quiet quorum")
            start = self.now
            if not self._events_until(self.now + 10_000, lambda: all(
                    n.raft.high_watermark > offset for n in self.nodes.values())):
                self.fail(f"record {offset} not committed everywhere within 10 s: {self.describe()}")
            took.append(self.now - start)
        return took

    def _events_until(self, until: int, done) -> bool:
        """Run message deliveries and polls (no faults, no final rounds) until `done()` or the clock passes
        `until`; whether `done()` held."""
        while self.queue and not done():
            at, _, kind, payload = self.queue[0]
            if at > until:
                break
            heapq.heappop(self.queue)
            self.now = at
            if kind == "deliver":
                self._deliver(payload)
            elif kind == "poll":
                node = self.nodes[payload[0]]
                if node.alive and node.incarnation == payload[1] and node.poll_at == at:
                    node.poll_at = -1
                    self._after(node, node.raft.poll(self.now))
        self.now = max(self.now, until) if not done() else self.now
        return done()

    def describe(self) -> str:
        parts = []
        for node in self.nodes.values():
            r = node.raft
            parts.append(f"{node.node_id}:{r.role.name} e{r.epoch} leader={r.leader_id} hw={r.high_watermark} "
                         f"log={node.log.log_start_offset}..{node.log.log_end_offset} "
                         f"applied={node.machine.next_offset}")
        return "; ".join(parts) + f"; committed end {self.committed_end}"


def run_seed(seed: int, verbose: bool = False) -> Stats:
    sim = Simulation(seed, verbose=verbose)
    try:
        return sim.run()
    except Exception as e:  # any exception a node raises fails the seed, with the way to replay it
        trace = "\n".join(sim.trace[-25:])
        what = str(e) if isinstance(e, SimulationFailure) else f"{type(e).__name__}: {e}"
        raise SimulationFailure(
            f"seed {seed} failed at {sim.now} ms: {what}\n{sim.params}\nlast events:\n{trace}\n"
            f"replay: python -m tests.sim.raft --seed {seed} --verbose"
        ) from e


def quiet_node_logs() -> None:
    """The nodes log their role changes (raft/core.py): thousands in a run, on stdout unless structlog is
    configured, with wall-clock timestamps that would make two runs of one seed print differently. A
    simulation reports through its trace and stats; only a node's warnings are shown."""
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=200, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--seed", type=int, help="run this one seed only")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args(argv)
    quiet_node_logs()
    seeds = [args.seed] if args.seed is not None else list(range(args.start, args.start + args.seeds))
    digests = hashlib.sha256()
    failures = []
    totals = Stats()
    settle = []
    started = time.process_time()
    for seed in seeds:
        try:
            stats = run_seed(seed, verbose=args.verbose)
        except SimulationFailure as e:
            failures.append(seed)
            print(e, file=sys.stderr)
            continue
        for name in ("events", "messages", "crashes", "partitions", "appends", "snapshots", "disconnects"):
            setattr(totals, name, getattr(totals, name) + getattr(stats, name))
        totals.committed_offsets += stats.committed_offsets
        totals.max_epoch = max(totals.max_epoch, stats.max_epoch)
        digests.update(stats.digest.encode())
        settle.append(stats.settle_ms)
    elapsed = time.process_time() - started
    settle.sort()
    print(f"{len(seeds)} seeds, {len(failures)} failed {failures[:20]}; {elapsed:.1f} s CPU "
          f"({elapsed / max(1, len(seeds)) * 1000:.0f} ms/seed)")
    print(f"events {totals.events}, messages {totals.messages}, crashes {totals.crashes}, "
          f"partition changes {totals.partitions}, appends {totals.appends}, snapshots {totals.snapshots}, "
          f"disconnects seen {totals.disconnects}, "
          f"committed offsets {totals.committed_offsets}, highest epoch {totals.max_epoch}")
    print(f"digest of the committed logs: {digests.hexdigest()[:16]}")
    if settle:
        print(f"time to converge after the faults stopped: median {settle[len(settle) // 2]} ms, "
              f"max {settle[-1]} ms")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
