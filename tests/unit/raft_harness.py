"""A small driver for RaftNodes on a manual clock, for the scenario tests (tests/unit/test_raft_*.py).

Messages are delivered in order, with no delay, unless a link is cut (then they are dropped); time moves
only when a test advances it. Every message any node emits is kept in `sent`, so tests can look at what
went over the wire.
"""

from __future__ import annotations

import random
from collections import deque

from odradek.raft import (
    CommittedBatch,
    MemoryQuorumStateStore,
    MemoryRaftLog,
    OutboundRequest,
    RaftConfig,
    RaftNode,
    Role,
    SnapshotId,
)


class Machine:
    def __init__(self) -> None:
        self.values: list[tuple[int, bytes]] = []
        self.commits: list[CommittedBatch] = []
        self.loads: list[SnapshotId] = []
        self.next_offset = 0
        self.leaders: list[tuple[int, int]] = []

    def handle_commit(self, batch: CommittedBatch) -> None:
        assert batch.base_offset == self.next_offset, (batch.base_offset, self.next_offset)
        self.commits.append(batch)
        self.values.extend((batch.base_offset + i, v) for i, v in enumerate(batch.records))
        self.next_offset = batch.last_offset + 1

    def handle_load_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        self.loads.append(snapshot_id)
        self.values = [(int(o), v.encode()) for o, v in (item.split("=") for item in data.decode().split(",") if item)]
        self.next_offset = snapshot_id.end_offset

    def handle_leader_change(self, leader_id: int, epoch: int) -> None:
        self.leaders.append((leader_id, epoch))

    def snapshot(self) -> bytes:
        return ",".join(f"{o}={v.decode()}" for o, v in self.values).encode()


class Cluster:
    def __init__(self, voters=(1, 2, 3), observers=(), seed: int = 0, preload=None, **config) -> None:
        """`preload` maps a node id to the (log, QuorumStateData or a store) it starts from."""
        self.now = 0
        self.rng = random.Random(seed)
        self.voters = tuple(voters)
        self.config = config
        self.logs: dict[int, MemoryRaftLog] = {}
        self.stores: dict[int, MemoryQuorumStateStore] = {}
        self.machines: dict[int, Machine] = {}
        self.nodes: dict[int, RaftNode | None] = {}
        self.incarnation: dict[int, int] = {}
        self.queue: deque = deque()
        self.cut: set[tuple[int, int]] = set()
        self.routes: dict[int, tuple[int, int, int]] = {}
        self.next_request_id = 0
        self.sent: list[tuple[int, object]] = []  # (source, Outbound)
        for node_id in list(voters) + list(observers):
            log, state = (preload or {}).get(node_id, (MemoryRaftLog(), None))
            self.logs[node_id] = log
            self.stores[node_id] = state if hasattr(state, "write") else MemoryQuorumStateStore(state)
            self.incarnation[node_id] = 0
            self.start(node_id)

    # -- nodes

    def start(self, node_id: int) -> RaftNode:
        config = RaftConfig(node_id=node_id, voters=self.voters, cluster_id="test", **self.config)
        self.machines[node_id] = Machine()
        node = RaftNode(config, self.logs[node_id], self.stores[node_id], self.machines[node_id],
                        random.Random(self.rng.getrandbits(32)), self.now)
        self.nodes[node_id] = node
        self.emit(node_id, node.poll(self.now))
        return node

    def crash(self, node_id: int) -> None:
        self.nodes[node_id] = None
        self.incarnation[node_id] += 1
        self.logs[node_id] = self.logs[node_id].crash()

    def restart(self, node_id: int) -> RaftNode:
        return self.start(node_id)

    def __getitem__(self, node_id: int) -> RaftNode:
        node = self.nodes[node_id]
        assert node is not None
        return node

    def leaders(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n is not None and n.role == Role.LEADER]

    def leader(self) -> RaftNode:
        ids = self.leaders()
        assert len(ids) == 1, ids
        return self[ids[0]]

    # -- network

    def isolate(self, node_id: int) -> None:
        for other in self.nodes:
            if other != node_id:
                self.cut.add((node_id, other))
                self.cut.add((other, node_id))

    def heal(self) -> None:
        self.cut.clear()

    def emit(self, source: int, outbound) -> None:
        for message in outbound:
            self.sent.append((source, message))
            if isinstance(message, OutboundRequest):
                self.next_request_id += 1
                self.routes[self.next_request_id] = (source, self.incarnation[source], message.correlation_id)
                self.queue.append(("request", source, message.destination, self.next_request_id, message.message))
            else:
                route = self.routes.get(message.request_id)
                if route is not None:
                    self.queue.append(("response", source, route[0], route, message.message))

    def deliver(self) -> None:
        for _ in range(100_000):
            if not self.queue:
                return
            kind, source, dest, route, message = self.queue.popleft()
            node = self.nodes.get(dest)
            if node is None or (source, dest) in self.cut:
                continue
            if kind == "request":
                self.emit(dest, node.handle_request(source, route, message, self.now))
            elif route[1] == self.incarnation[dest]:
                self.emit(dest, node.handle_response(source, route[2], message, self.now))
        raise AssertionError("messages never stop flowing")

    def tick(self) -> None:
        self.deliver()
        for node_id, node in list(self.nodes.items()):
            if node is not None and node.next_deadline_ms <= self.now:
                self.emit(node_id, node.poll(self.now))
        self.deliver()

    def advance(self, ms: int, step: int = 5) -> None:
        end = self.now + ms
        while self.now < end:
            self.now = min(end, self.now + step)
            self.tick()

    def run_until(self, predicate, max_ms: int = 20_000, step: int = 5) -> int:
        start = self.now
        self.tick()
        while not predicate():
            if self.now - start > max_ms:
                raise AssertionError(f"condition not met within {max_ms} ms")
            self.now += step
            self.tick()
        return self.now - start

    def append(self, *values: bytes) -> int:
        leader = self.leader()
        offset = leader.append(list(values), self.now)
        self.tick()
        return offset

    def committed_everywhere(self, offset: int) -> bool:
        return all(n is not None and n.high_watermark > offset and self.machines[i].next_offset > offset
                   for i, n in self.nodes.items())

    def messages(self, cls) -> list:
        return [m.message for _, m in self.sent if isinstance(m.message, cls)]
