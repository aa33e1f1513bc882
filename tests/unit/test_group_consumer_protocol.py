"""KIP-848 consumer groups: heartbeat flows, revocation before assignment, epochs, static members, assignors."""

from __future__ import annotations

import uuid

import pytest

from odradek.coordinator.group.assignors import range_assignor, uniform_assignor
from odradek.coordinator.group.consumer_group import MemberState
from odradek.coordinator.topics import TopicsImage
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    DeleteGroupsRequest,
    ListGroupsRequest,
)

from tests.harness.group_coordinator import Harness

T = uuid.UUID(int=1)
U = uuid.UUID(int=2)
TP = ConsumerGroupHeartbeatRequest.TopicPartitions
SESSION_MS = 45_000


@pytest.fixture
def h() -> Harness:
    topics = TopicsImage()
    topics.add("t", 4, T)
    topics.add("u", 2, U)
    return Harness(topics=topics)


class Member:
    """A consumer protocol client: remembers its epoch and what it owns, and acknowledges revocations."""

    def __init__(self, h: Harness, member_id: str, group_id: str = "g", topics=("t",), instance_id=None,
                 assignor=None, version: int = 1) -> None:
        self.h, self.member_id, self.group_id = h, member_id, group_id
        self.topics, self.instance_id, self.assignor, self.version = list(topics), instance_id, assignor, version
        self.epoch = 0
        self.owned: dict[uuid.UUID, list[int]] = {}
        self.last = None

    def heartbeat(self, *, epoch: int | None = None, owned: dict | None = None, full: bool = False, **fields):
        epoch = self.epoch if epoch is None else epoch
        joining = epoch == 0
        owned = self.owned if owned is None else owned
        request = ConsumerGroupHeartbeatRequest(
            group_id=self.group_id, member_id=self.member_id, member_epoch=epoch, instance_id=self.instance_id,
            rebalance_timeout_ms=30_000 if joining or full else -1,
            subscribed_topic_names=self.topics if joining or full else None,
            server_assignor=self.assignor if joining else None,
            topic_partitions=[] if joining else [TP(topic_id=t, partitions=ps) for t, ps in owned.items()],
        )
        for name, value in fields.items():
            setattr(request, name, value)
        response = self.h.gc.consumer_group_heartbeat(request, self.version, self.h.now, "client", "/10.0.0.1").result()
        self.last = response
        if response.error_code == 0:
            if response.member_id:
                self.member_id = response.member_id
            self.epoch = response.member_epoch
            if response.assignment is not None:
                self.owned = {tp.topic_id: list(tp.partitions) for tp in response.assignment.topic_partitions}
        return response

    def join(self):
        self.epoch = 0
        return self.heartbeat()

    @property
    def partitions(self) -> set[tuple[uuid.UUID, int]]:
        return {(t, p) for t, ps in self.owned.items() for p in ps}


def state(h: Harness, group_id: str = "g"):
    return h.shard(group_id).consumer_groups[group_id]


def test_a_member_joins_and_gets_every_partition(h):
    a = Member(h, "a")
    r = a.join()
    assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (0, "a", 1, 5000)
    assert a.partitions == {(T, p) for p in range(4)}
    group = state(h)
    assert (group.group_epoch, group.assignment_epoch, str(group.state)) == (1, 1, "Stable")
    r = a.heartbeat()
    assert r.member_epoch == 1 and r.assignment is None  # nothing changed: no assignment sent


def test_v0_member_ids_are_given_by_the_coordinator(h):
    a = Member(h, "", version=0)
    r = a.join()
    assert r.error_code == 0 and len(r.member_id) == 22  # Kafka's base64 Uuid
    v1 = Member(h, "")
    assert v1.join().error_code == ErrorCode.INVALID_REQUEST


def test_revocation_comes_before_assignment(h):
    a, b = Member(h, "a"), Member(h, "b")
    a.join()
    rb = b.join()
    assert rb.member_epoch == 2
    assert b.partitions == set()  # b's target partitions are still a's
    assert state(h).members["b"].state is MemberState.UNRELEASED_PARTITIONS
    target_a = state(h).target_assignment["a"]
    # a learns what to give up, still at epoch 1.
    ra = a.heartbeat()
    assert ra.member_epoch == 1 and a.partitions == {(T, p) for p in target_a[T]}
    assert state(h).members["a"].state is MemberState.UNREVOKED_PARTITIONS
    # Until a confirms, b gets nothing.
    assert b.heartbeat().assignment is None and b.partitions == set()
    # a confirms by owning only what it kept: it moves to epoch 2.
    assert a.heartbeat().member_epoch == 2
    rb = b.heartbeat()
    assert rb.member_epoch == 2 and len(b.partitions) == 2
    assert a.partitions.isdisjoint(b.partitions) and len(a.partitions | b.partitions) == 4
    assert str(state(h).state) == "Stable"


def test_leave_gives_the_partitions_back(h):
    a, b = Member(h, "a"), Member(h, "b")
    a.join(), b.join(), a.heartbeat(), a.heartbeat(), b.heartbeat()
    epoch = state(h).group_epoch
    r = b.heartbeat(epoch=-1)
    assert (r.error_code, r.member_epoch) == (0, -1)
    assert "b" not in state(h).members and state(h).group_epoch == epoch + 1
    a.heartbeat()
    assert a.partitions == {(T, p) for p in range(4)} and a.epoch == epoch + 1


def test_fenced_and_unknown_member_epochs(h):
    a = Member(h, "a")
    a.join()
    assert a.heartbeat(epoch=5).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    b = Member(h, "b")
    b.join()
    a.heartbeat()  # a revokes at epoch 1 ...
    a.heartbeat()  # ... and moves to epoch 2; its previous epoch is 1
    assert a.heartbeat(epoch=1, owned={T: [next(iter(a.owned[T]))]}).error_code == 0  # a lost response is fine
    assert a.heartbeat(epoch=1, owned={T: [0, 1, 2, 3]}).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert a.heartbeat(epoch=0).error_code == 0  # a rejoin (epoch 0) under the same member id is accepted
    ghost = Member(h, "ghost")
    assert ghost.heartbeat(epoch=3).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert Member(h, "x", group_id="nothing").heartbeat(epoch=3).error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_request_validation(h):
    m = Member(h, "m")
    assert m.heartbeat(rebalance_timeout_ms=-1).error_code == ErrorCode.INVALID_REQUEST
    assert m.heartbeat(topic_partitions=None).error_code == ErrorCode.INVALID_REQUEST
    assert m.heartbeat(subscribed_topic_names=None).error_code == ErrorCode.INVALID_REQUEST
    assert m.heartbeat(instance_id="").error_code == ErrorCode.INVALID_REQUEST
    assert m.heartbeat(epoch=-3).error_code == ErrorCode.INVALID_REQUEST
    assert m.heartbeat(epoch=-2).error_code == ErrorCode.INVALID_REQUEST
    assert m.heartbeat(server_assignor="sticky").error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert m.heartbeat(subscribed_topic_regex="(").error_code == ErrorCode.INVALID_REGULAR_EXPRESSION


def test_session_timeout_fences_the_member(h):
    a, b = Member(h, "a"), Member(h, "b")
    a.join(), b.join()
    for _ in range(4):
        h.advance(SESSION_MS // 3)
        a.heartbeat()
    assert set(state(h).members) == {"a"}
    assert a.partitions == {(T, p) for p in range(4)}


def test_a_member_that_does_not_revoke_in_time_is_fenced(h):
    a, b = Member(h, "a"), Member(h, "b")
    a.join(), b.join()
    a.heartbeat(owned=None)  # told to revoke; keeps heartbeating without ever confirming
    assert state(h).members["a"].state is MemberState.UNREVOKED_PARTITIONS
    for _ in range(4):
        h.advance(10_000)
        a.heartbeat(owned={T: [0, 1, 2, 3]})
        b.heartbeat()
    assert "a" not in state(h).members
    assert b.partitions == {(T, p) for p in range(4)}


def test_static_member_leaves_temporarily_and_comes_back_with_its_partitions(h):
    a, b = Member(h, "a", instance_id="ia"), Member(h, "b", instance_id="ib")
    a.join(), b.join(), a.heartbeat(), a.heartbeat(), b.heartbeat()
    owned_b = b.partitions
    epoch = state(h).group_epoch
    assert b.heartbeat(epoch=-2).member_epoch == -2
    assert state(h).group_epoch == epoch  # no rebalance
    # Another process claiming the instance id while b is still a member (not left) is refused.
    intruder = Member(h, "c", instance_id="ia")
    assert intruder.join().error_code == ErrorCode.UNRELEASED_INSTANCE_ID
    b2 = Member(h, "b2", instance_id="ib")
    r = b2.join()
    assert r.error_code == 0 and b2.partitions == owned_b and state(h).group_epoch == epoch
    assert "b" not in state(h).members
    assert b.heartbeat(epoch=b.epoch).error_code == ErrorCode.FENCED_INSTANCE_ID


def test_new_partitions_bump_the_group_epoch(h):
    a, b = Member(h, "a", topics=["u"]), Member(h, "b", topics=["u"])
    a.join(), b.join(), a.heartbeat(), a.heartbeat(), b.heartbeat()
    epoch = state(h).group_epoch
    h.topics.add("u", 4)
    a.heartbeat(), b.heartbeat(), a.heartbeat(), b.heartbeat()
    assert state(h).group_epoch == epoch + 1
    assert len(a.partitions | b.partitions) == 4 and a.partitions.isdisjoint(b.partitions)


def test_regex_subscription(h):
    a = Member(h, "a", topics=[])
    a.heartbeat(subscribed_topic_names=None, subscribed_topic_regex="t|u")
    assert a.partitions == {(T, p) for p in range(4)} | {(U, p) for p in range(2)}


def test_offset_commit_and_fetch_check_member_epochs(h):
    a = Member(h, "a")
    a.join()
    assert h.commit_errors("g", {("t", 0): 5}, generation=1, member_id="a", version=9) == [0]
    assert h.commit_errors("g", {("t", 0): 6}, generation=2, member_id="a", version=9) == [
        ErrorCode.FENCED_MEMBER_EPOCH]
    Member(h, "b").join()
    a.heartbeat(), a.heartbeat()
    assert a.epoch == 2
    assert h.commit_errors("g", {("t", 0): 6}, generation=1, member_id="a", version=9) == [
        ErrorCode.STALE_MEMBER_EPOCH]
    assert h.commit_errors("g", {("t", 0): 6}, generation=2, member_id="nobody", version=9) == [
        ErrorCode.UNKNOWN_MEMBER_ID]
    assert h.commit_errors("g", {("t", 0): 6}, generation=2, member_id="a", version=8) == [
        ErrorCode.UNSUPPORTED_VERSION]
    assert h.commit_errors("g", {("t", 0): 6}) == [ErrorCode.UNKNOWN_MEMBER_ID]  # not while it has members
    assert h.fetch("g", member_id="a", member_epoch=1)[0] == ErrorCode.STALE_MEMBER_EPOCH
    assert h.fetch("g", member_id="a", member_epoch=3)[0] == ErrorCode.FENCED_MEMBER_EPOCH
    assert h.fetch("g", member_id="a", member_epoch=2) == (0, {("t", 0): (5, -1, "")})
    assert h.fetch("g") == (0, {("t", 0): (5, -1, "")})  # an admin (no member id, epoch -1)


def test_describe_list_delete_and_reload(h):
    a = Member(h, "a", assignor="range")
    a.join()
    described = h.gc.consumer_group_describe(ConsumerGroupDescribeRequest(group_ids=["g", "nope"]), 1, h.now)
    g, nope = described.groups
    assert (g.error_code, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name) == (
        0, "Stable", 1, 1, "range")
    member = g.members[0]
    assert (member.member_id, member.member_epoch, member.client_host, member.member_type) == ("a", 1, "/10.0.0.1", 1)
    assert [(tp.topic_name, tp.partitions) for tp in member.assignment.topic_partitions] == [("t", [0, 1, 2, 3])]
    assert nope.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    described.encode(1)
    listed = h.gc.list_groups(ListGroupsRequest(types_filter=["consumer"]), 5, h.now).groups
    assert [(x.group_id, x.protocol_type, x.group_state, x.group_type) for x in listed] == [
        ("g", "consumer", "Stable", "consumer")]
    reloaded = h.reload()
    assert reloaded.shard_for("g").replicated_state() == h.shard("g").replicated_state()
    assert h.gc.delete_groups(DeleteGroupsRequest(groups_names=["g"]), 2, h.now).result().results[0].error_code == (
        ErrorCode.NON_EMPTY_GROUP)
    a.heartbeat(epoch=-1)
    assert h.gc.delete_groups(DeleteGroupsRequest(groups_names=["g"]), 2, h.now).result().results[0].error_code == 0
    assert "g" not in h.shard("g").consumer_groups


def test_classic_and_consumer_groups_do_not_mix(h):
    Member(h, "a", group_id="cg").join()
    assert h.join("cg").result().error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    from tests.harness.group_coordinator import form_group

    form_group(h, "classic", 1)
    assert Member(h, "m", group_id="classic").join().error_code == ErrorCode.GROUP_ID_NOT_FOUND
    # A group of committed offsets only becomes a consumer group, keeping its offsets.
    h.commit("offsets-only", {("t", 0): 9})
    assert Member(h, "m", group_id="offsets-only").join().error_code == 0
    assert h.fetch("offsets-only")[1] == {("t", 0): (9, -1, "")}


# ---------------------------------------------------------------------------------------------------
# Assignors


def _owners(assignment):
    owners = {}
    for member, topics in assignment.items():
        for t, ps in topics.items():
            for p in ps:
                assert (t, p) not in owners
                owners[(t, p)] = member
    return owners


def test_range_assignor_gives_contiguous_ranges_per_topic():
    subs = {"a": frozenset({T, U}), "b": frozenset({T}), "c": frozenset({T, U})}
    out = range_assignor(subs, {T: 4, U: 3}, {})
    assert out == {"a": {T: frozenset({0, 1}), U: frozenset({0, 1})}, "b": {T: frozenset({2})},
                   "c": {T: frozenset({3}), U: frozenset({2})}}


def test_uniform_assignor_balances_and_is_sticky():
    subs = {m: frozenset({T, U}) for m in "abc"}
    first = uniform_assignor(subs, {T: 4, U: 3}, {})
    counts = sorted(sum(len(ps) for ps in topics.values()) for topics in first.values())
    assert counts == [2, 2, 3] and len(_owners(first)) == 7
    # A fourth member joins: the others keep what they can.
    subs["d"] = frozenset({T, U})
    second = uniform_assignor(subs, {T: 4, U: 3}, first)
    counts = sorted(sum(len(ps) for ps in topics.values()) for topics in second.values())
    assert counts == [1, 2, 2, 2]
    moved = sum(1 for tp, m in _owners(second).items() if _owners(first)[tp] != m)
    assert moved == 1
    # Members only get topics they subscribe to.
    hetero = uniform_assignor({"a": frozenset({T}), "b": frozenset({U})}, {T: 2, U: 2}, {})
    assert hetero == {"a": {T: frozenset({0, 1})}, "b": {U: frozenset({0, 1})}}
