"""A group coordinator on a manual clock and an in-memory log, with shorthands for the requests."""

from __future__ import annotations

import random
import uuid

from odradek.coordinator.group.config import GroupCoordinatorConfig
from odradek.coordinator.group.group_coordinator import GroupCoordinator
from odradek.coordinator.group.records import deserialize
from odradek.coordinator.group.shard import GroupCoordinatorShard
from odradek.coordinator.runtime import InMemoryPartitionWriter
from odradek.protocol.messages import (
    ConsumerProtocolSubscription,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from odradek.purgatory.timing_wheel import Timer

NUM_PARTITIONS = 4
SESSION_MS = 10_000
REBALANCE_MS = 30_000
DELAY_MS = 3000


def subscription(*topics: str) -> bytes:
    return b"\x00\x01" + ConsumerProtocolSubscription(topics=list(topics), owned_partitions=[]).encode(1)


class Harness:
    """One coordinator leading every partition; `now` only moves with `advance`."""

    def __init__(self, *, commit_later: bool = False, topics=None, **config) -> None:
        rng = random.Random(7)
        defaults = dict(offsets_topic_num_partitions=NUM_PARTITIONS, group_initial_rebalance_delay_ms=DELAY_MS,
                        uuid_factory=lambda: uuid.UUID(int=rng.getrandbits(128)))
        defaults.update(config)
        self.config = GroupCoordinatorConfig(**defaults)
        self.writer = InMemoryPartitionWriter(commit_later=commit_later)
        self.topics = topics
        self.now = 0
        self.timer = Timer(start_ms=0)
        self.gc = GroupCoordinator(self.writer, self.timer, self.config, topics=topics)
        self.gc.startup(self.now)

    def advance(self, ms: int) -> None:
        """Move the clock, running timers as the broker does: again while callbacks left work due."""
        self.now += ms
        self.timer.advance_clock(self.now)
        while (deadline := self.timer.next_expiration_ms()) is not None and deadline <= self.now:
            self.timer.advance_clock(self.now)

    def reload(self) -> GroupCoordinator:
        """A second coordinator loading the same log, as after a restart or a change of leader."""
        timer = Timer(start_ms=self.now)
        gc = GroupCoordinator(self.writer, timer, self.config, topics=self.topics)
        gc.startup(self.now)
        return gc

    def shard(self, group_id: str) -> GroupCoordinatorShard:
        return self.gc.shard_for(group_id)

    def group(self, group_id: str):
        return self.shard(group_id).group(group_id)

    def records(self, group_id: str) -> list:
        return [deserialize(k, v) for k, v in self.writer.logs.get(self.gc.partition_for(group_id), [])]

    # -- requests --

    def join(self, group_id: str, member_id: str = "", *, version: int = 5, protocols=None, instance_id=None,
             session_ms: int = SESSION_MS, rebalance_ms: int = REBALANCE_MS, client_id: str = "client",
             protocol_type: str = "consumer"):
        protocols = protocols if protocols is not None else [("range", subscription("t"))]
        request = JoinGroupRequest(
            group_id=group_id, session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms, member_id=member_id,
            group_instance_id=instance_id, protocol_type=protocol_type,
            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols])
        return self.gc.join_group(request, version, self.now, client_id, "/127.0.0.1")

    def join_member(self, group_id: str, **kwargs) -> tuple[str, object]:
        """MEMBER_ID_REQUIRED round trip: returns (member id, pending JoinGroup)."""
        first = self.join(group_id, **kwargs).result()
        assert first.error_code == 79, first
        return first.member_id, self.join(group_id, first.member_id, **kwargs)

    def sync(self, group_id: str, member_id: str, generation: int, assignments: dict[str, bytes] | None = None, *,
             version: int = 3, instance_id=None):
        request = SyncGroupRequest(
            group_id=group_id, generation_id=generation, member_id=member_id, group_instance_id=instance_id,
            assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                         for m, a in (assignments or {}).items()])
        return self.gc.sync_group(request, version, self.now)

    def heartbeat(self, group_id: str, member_id: str, generation: int, *, instance_id=None) -> int:
        request = HeartbeatRequest(group_id=group_id, generation_id=generation, member_id=member_id,
                                   group_instance_id=instance_id)
        return self.gc.heartbeat(request, 3, self.now).result().error_code

    def leave(self, group_id: str, *members: tuple[str, str | None], version: int = 3):
        if version <= 2:
            request = LeaveGroupRequest(group_id=group_id, member_id=members[0][0])
        else:
            request = LeaveGroupRequest(group_id=group_id, members=[
                LeaveGroupRequest.MemberIdentity(member_id=m, group_instance_id=i) for m, i in members])
        return self.gc.leave_group(request, version, self.now).result()

    def commit(self, group_id: str, offsets: dict[tuple[str, int], int], *, generation: int = -1, member_id: str = "",
               instance_id=None, version: int = 8, metadata: str | None = "", leader_epoch: int = -1,
               retention_ms: int = -1):
        topics: dict[str, list] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_metadata=metadata,
                committed_leader_epoch=leader_epoch if version >= 6 else -1))
        request = OffsetCommitRequest(
            group_id=group_id, generation_id_or_member_epoch=generation, member_id=member_id,
            group_instance_id=instance_id if version >= 7 else None,
            retention_time_ms=retention_ms if 2 <= version <= 4 else -1,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()])
        return self.gc.offset_commit(request, version, self.now).result()

    def commit_errors(self, group_id: str, offsets: dict[tuple[str, int], int], **kwargs) -> list[int]:
        response = self.commit(group_id, offsets, **kwargs)
        return [p.error_code for t in response.topics for p in t.partitions]

    def fetch(self, group_id: str, topics: dict[str, list[int]] | None = None, *, gc=None, member_id=None,
              member_epoch: int = -1) -> tuple[int, dict[tuple[str, int], tuple[int, int, str]]]:
        """(group error, {(topic, partition): (offset, leader epoch, metadata)}) through OffsetFetch v8."""
        group = OffsetFetchRequest.OffsetFetchRequestGroup(
            group_id=group_id, member_id=member_id, member_epoch=member_epoch,
            topics=None if topics is None else [
                OffsetFetchRequest.OffsetFetchRequestGroup.OffsetFetchRequestTopics(name=t, partition_indexes=ps)
                for t, ps in topics.items()])
        response = (gc or self.gc).offset_fetch(OffsetFetchRequest(groups=[group]), 9, self.now)
        g = response.groups[0]
        return g.error_code, {(t.name, p.partition_index): (p.committed_offset, p.committed_leader_epoch, p.metadata)
                              for t in g.topics for p in t.partitions}


def form_group(h: Harness, group_id: str, n: int, **join_kwargs) -> tuple[list[str], int]:
    """n members join a new group and sync: returns (member ids, generation); the group is Stable."""
    pending = [h.join_member(group_id, client_id=f"c{i}", **join_kwargs) for i in range(n)]
    h.advance(DELAY_MS)  # members joining during the initial delay extend it once more
    if not pending[0][1].done:
        h.advance(DELAY_MS)
    responses = [p.result() for _, p in pending]
    assert all(r.error_code == 0 for r in responses), responses
    generation = responses[0].generation_id
    leader = responses[0].leader
    member_ids = [m for m, _ in pending]
    syncs = [h.sync(group_id, m, generation, {x: x.encode() for x in member_ids} if m == leader else None)
             for m in member_ids]
    assert all(s.result().error_code == 0 for s in syncs)
    return member_ids, generation
