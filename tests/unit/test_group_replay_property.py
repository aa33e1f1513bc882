"""The coordinator as a replicated state machine: after any sequence of operations, the state equals the
state rebuilt by replaying the records they produced (the log as written, and the log once compacted),
and every classic group at rest matches its last GroupMetadata record."""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.coordinator.group.classic_group import ClassicGroupState
from odradek.coordinator.group.records import deserialize
from odradek.coordinator.group.shard import GroupCoordinatorShard
from odradek.coordinator.topics import TopicsImage
from odradek.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    DeleteGroupsRequest,
    OffsetDeleteRequest,
)

from tests.harness.group_coordinator import NUM_PARTITIONS, Harness, subscription

GROUPS = ["g0", "g1", "g2"]
SLOTS = 4
TOPICS = ["t", "u"]

ops = st.lists(st.one_of(
    st.tuples(st.just("join"), st.sampled_from(GROUPS[:2]), st.integers(0, SLOTS - 1), st.booleans(),
              st.sampled_from(TOPICS)),
    st.tuples(st.just("sync"), st.sampled_from(GROUPS[:2]), st.integers(0, SLOTS - 1)),
    st.tuples(st.just("heartbeat"), st.sampled_from(GROUPS[:2]), st.integers(0, SLOTS - 1)),
    st.tuples(st.just("leave"), st.sampled_from(GROUPS[:2]), st.integers(0, SLOTS - 1)),
    st.tuples(st.just("commit"), st.sampled_from(GROUPS), st.integers(-1, SLOTS - 1), st.sampled_from(TOPICS),
              st.integers(0, 2), st.integers(0, 1000)),
    st.tuples(st.just("offset_delete"), st.sampled_from(GROUPS), st.sampled_from(TOPICS)),
    st.tuples(st.just("delete"), st.sampled_from(GROUPS)),
    st.tuples(st.just("advance"), st.sampled_from([10, 1000, 3000, 10_000, 40_000])),
    st.tuples(st.just("cg_heartbeat"), st.integers(0, SLOTS - 1), st.sampled_from(["join", "ack", "plain", "leave"]),
              st.sampled_from(TOPICS)),
), max_size=60)


class Model:
    """Drives a coordinator the way clients would, remembering what each client slot was told."""

    def __init__(self) -> None:
        self.topics = TopicsImage()
        self.topics.add("t", 3, uuid.UUID(int=1))
        self.topics.add("u", 2, uuid.UUID(int=2))
        self.h = Harness(topics=self.topics, offsets_retention_ms=60_000, offsets_retention_check_interval_ms=20_000,
                         consumer_group_session_timeout_ms=15_000)
        self.members: dict[tuple[str, int], tuple[str, int]] = {}  # (group, slot) -> (member id, generation)
        self.pending: list = []
        self.cg: dict[int, tuple[str, int, list]] = {}  # slot -> (member id, epoch, owned)

    def run(self, op) -> None:
        h = self.h
        kind = op[0]
        if kind == "join":
            _, group, slot, static, topic = op
            member_id, _ = self.members.get((group, slot), ("", -1))
            join = h.join(group, member_id, instance_id=f"{group}-{slot}" if static else None,
                          protocols=[("range", subscription(topic))], client_id=f"c{slot}")
            self.pending.append(((group, slot), join))
        elif kind in ("sync", "heartbeat", "leave"):
            _, group, slot = op
            if (group, slot) not in self.members:
                return
            member_id, generation = self.members[(group, slot)]
            if kind == "sync":
                live = h.shard(group).live_classic_group(group)
                assignments = {m: m.encode() for m in live.members} if live is not None else {}
                self.pending.append(((group, slot), h.sync(group, member_id, generation, assignments)))
            elif kind == "heartbeat":
                h.heartbeat(group, member_id, generation)
            else:
                h.leave(group, (member_id, None))
        elif kind == "commit":
            _, group, slot, topic, partition, offset = op
            member_id, generation = self.members.get((group, slot), ("", -1)) if slot >= 0 else ("", -1)
            h.commit(group, {(topic, partition): offset}, generation=generation, member_id=member_id)
        elif kind == "offset_delete":
            _, group, topic = op
            request = OffsetDeleteRequest(group_id=group, topics=[OffsetDeleteRequest.OffsetDeleteRequestTopic(
                name=topic, partitions=[OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(
                    partition_index=0)])])
            h.gc.offset_delete(request, 0, h.now)
        elif kind == "delete":
            h.gc.delete_groups(DeleteGroupsRequest(groups_names=[op[1]]), 2, h.now)
        elif kind == "advance":
            h.advance(op[1])
        elif kind == "cg_heartbeat":
            self.consumer_heartbeat(*op[1:])
        self.collect()

    def consumer_heartbeat(self, slot: int, action: str, topic: str) -> None:
        h = self.h
        member_id, epoch, owned = self.cg.get(slot, (f"m{slot}", 0, []))
        tp = ConsumerGroupHeartbeatRequest.TopicPartitions
        if action == "join" or slot not in self.cg:
            request = ConsumerGroupHeartbeatRequest(group_id="g2", member_id=member_id, member_epoch=0,
                                                    rebalance_timeout_ms=20_000, subscribed_topic_names=[topic],
                                                    topic_partitions=[])
        elif action == "leave":
            request = ConsumerGroupHeartbeatRequest(group_id="g2", member_id=member_id, member_epoch=-1)
        else:
            request = ConsumerGroupHeartbeatRequest(
                group_id="g2", member_id=member_id, member_epoch=epoch,
                topic_partitions=[tp(topic_id=t, partitions=ps) for t, ps in owned] if action == "ack" else None)
        response = h.gc.consumer_group_heartbeat(request, 1, h.now, "client", "/h").result()
        if response.error_code != 0 or response.member_epoch < 0:
            self.cg.pop(slot, None)
            return
        if response.assignment is not None:
            owned = [(t.topic_id, list(t.partitions)) for t in response.assignment.topic_partitions]
        self.cg[slot] = (member_id, response.member_epoch, owned)

    def collect(self) -> None:
        rejoin = []
        pending, self.pending = self.pending, []
        for key, deferred in pending:
            if not deferred.done:
                self.pending.append((key, deferred))
                continue
            response = deferred.result()
            if getattr(response, "member_id", None) and response.error_code in (0, 79):
                self.members[key] = (response.member_id, getattr(response, "generation_id", -1))
                if response.error_code == 79:
                    rejoin.append(key)
            elif response.error_code in (22, 25, 82):
                self.members.pop(key, None)
        for group, slot in rejoin:
            self.run(("join", group, slot, False, "t"))


def rebuilt(h: Harness, partition: int, log) -> GroupCoordinatorShard:
    shard = GroupCoordinatorShard(partition, h.config, None, h.topics)
    for key, value in log:
        record = deserialize(key, value)
        if record is not None:
            shard.replay(record)
    return shard


def check_invariants(h: Harness) -> None:
    for partition in range(NUM_PARTITIONS):
        shard = h.gc.runtime.shard(partition)
        state = shard.replicated_state()
        assert rebuilt(h, partition, h.writer.logs.get(partition, [])).replicated_state() == state
        assert rebuilt(h, partition, h.writer.compacted(partition)).replicated_state() == state
        for group_id, group in shard.classic_groups.items():
            value = shard.group_metadata.get(group_id)
            if value is None or group.state not in (ClassicGroupState.STABLE, ClassicGroupState.EMPTY):
                continue
            live = group.metadata_value()
            assert (live.generation, live.protocol, live.leader, live.protocol_type) == (
                value.generation, value.protocol, value.leader, value.protocol_type)
            assert [(m.member_id, m.group_instance_id, m.subscription, m.assignment) for m in live.members] == [
                (m.member_id, m.group_instance_id, m.subscription, m.assignment) for m in value.members]
        for group in shard.consumer_groups.values():
            owners: dict = {}
            for member in group.members.values():
                for assignment in (member.assigned_partitions, member.partitions_pending_revocation):
                    for topic_id, partitions in assignment.items():
                        for p in partitions:
                            assert (topic_id, p) not in owners, "a partition owned by two members"
                            owners[(topic_id, p)] = member.member_id


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_state_equals_the_replay_of_the_records(operations):
    model = Model()
    for op in operations:
        model.run(op)
    check_invariants(model.h)
    # And a coordinator loading the log serves the same state.
    reloaded = model.h.reload()
    for partition in range(NUM_PARTITIONS):
        assert reloaded.runtime.shard(partition).replicated_state() == model.h.gc.runtime.shard(
            partition).replicated_state()
