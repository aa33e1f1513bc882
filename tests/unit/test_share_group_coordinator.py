"""KIP-932 share groups on the group coordinator: heartbeat rules, assignment, describe, expiry, replay."""

from __future__ import annotations

import random
import uuid

import pytest

from odradek.coordinator.group.group_coordinator import GroupCoordinator
from odradek.coordinator.group.records import RecordType, deserialize, serialize
from odradek.coordinator.group.share_assignor import simple_assignor
from odradek.coordinator.topics import TopicsImage
from odradek.protocol.errors import ErrorCode
from odradek.purgatory.timing_wheel import Timer
from odradek.protocol.messages import (
    ConsumerGroupHeartbeatRequest,
    ShareGroupDescribeRequest,
    ShareGroupHeartbeatRequest,
)

from tests.harness.group_coordinator import Harness

T = uuid.UUID(int=1)
U = uuid.UUID(int=2)
SESSION_MS = 45_000


@pytest.fixture
def h() -> Harness:
    topics = TopicsImage()
    topics.add("t", 4, T)
    topics.add("u", 2, U)
    return Harness(topics=topics)


def hb(h: Harness, member_id: str, epoch: int, topics=None, group_id: str = "g", rack_id=None):
    request = ShareGroupHeartbeatRequest(group_id=group_id, member_id=member_id, member_epoch=epoch,
                                         rack_id=rack_id, subscribed_topic_names=topics)
    return h.gc.share_group_heartbeat(request, h.now, "client", "/10.0.0.1").result()


def parts(response) -> set[tuple[uuid.UUID, int]]:
    return {(tp.topic_id, p) for tp in response.assignment.topic_partitions for p in tp.partitions}


def group(h: Harness, group_id: str = "g"):
    return h.shard(group_id).share_groups[group_id]


def describe(h: Harness, *group_ids: str):
    return h.gc.share_group_describe(ShareGroupDescribeRequest(group_ids=list(group_ids),
                                                                include_authorized_operations=False), h.now).groups


def test_join_gets_every_partition_and_the_heartbeat_interval(h):
    r = hb(h, "m-a", 0, ["t"])
    assert (r.error_code, r.member_id, r.member_epoch, r.heartbeat_interval_ms) == (0, "m-a", 1, 5000)
    assert parts(r) == {(T, p) for p in range(4)}
    r = hb(h, "m-a", 1)
    assert (r.error_code, r.member_epoch, r.assignment) == (0, 1, None)
    assert str(group(h).state) == "Stable"


def test_members_beyond_partitions_share_them_without_revocation(h):
    responses = {m: hb(h, m, 0, ["u"]) for m in ("a", "b", "c", "d", "e")}
    # Every member has its assignment at once (no revocation: the others are never asked to give up).
    for m, r in responses.items():
        assert r.error_code == 0 and parts(r), (m, r)
    g = group(h)
    # The target may have moved on since a member's last heartbeat; each heartbeat brings it up to date.
    for m in ("a", "b", "c", "d", "e"):
        hb(h, m, g.members[m].member_epoch)
    g = group(h)
    counts = {p: 0 for p in range(2)}
    for m in g.members.values():
        assert m.member_epoch == g.assignment_epoch == g.group_epoch == 5
        for t, ps in m.assigned_partitions.items():
            for p in ps:
                counts[p] += 1
    assert sorted(counts.values()) == [2, 3]
    assert all(len(m.assigned_partitions[U]) == 1 for m in g.members.values())


def test_subscription_change_bumps_the_epoch_and_reassigns(h):
    hb(h, "a", 0, ["t"])
    r = hb(h, "a", 1, ["t", "u"])
    assert r.member_epoch == 2
    assert parts(r) == {(T, p) for p in range(4)} | {(U, 0), (U, 1)}
    r = hb(h, "a", 2, ["t", "u"])  # unchanged: no bump, no records
    before = len(h.records("g"))
    assert (r.member_epoch, r.assignment) == (2, None)
    assert len(h.records("g")) == before


def test_epoch_rules(h):
    hb(h, "a", 0, ["t"])
    assert hb(h, "a", 5).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    hb(h, "b", 0, ["t"])  # bumps the group to 2; a is still at 1
    assert hb(h, "a", 2).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert hb(h, "a", 1).member_epoch == 2
    # The previous epoch is accepted (the response that moved the member on may have been lost) ...
    r = hb(h, "a", 1)
    assert (r.error_code, r.member_epoch) == (0, 2)
    # ... an older one is not.
    hb(h, "c", 0, ["t"])
    hb(h, "a", 2)
    r = hb(h, "a", 1)
    assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert "smaller member epoch (1)" in r.error_message
    assert hb(h, "zz", 3).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert hb(h, "a", 0, ["t"]).error_code == 0  # a rejoin with epoch 0 is always accepted
    assert hb(h, "a", 1, group_id="nope").error_code == ErrorCode.GROUP_ID_NOT_FOUND


@pytest.mark.parametrize("fields, message", [
    (dict(member_id=""), "MemberId can't be empty."),
    (dict(rack_id=""), "RackId can't be empty."),
    (dict(subscribed_topic_names=None), "SubscribedTopicNames must be set in first request."),
    (dict(subscribed_topic_names=[]), "SubscribedTopicNames must be set in first request."),
    (dict(member_epoch=-2), "MemberEpoch is invalid."),
    (dict(member_id=" ", rack_id=""), "MemberId can't be empty."),
])
def test_invalid_requests(h, fields, message):
    request = ShareGroupHeartbeatRequest(group_id="g", member_id="a", member_epoch=0, rack_id=None,
                                         subscribed_topic_names=["t"])
    for name, value in fields.items():
        setattr(request, name, value)
    r = h.gc.share_group_heartbeat(request, h.now).result()
    assert (r.error_code, r.error_message) == (ErrorCode.INVALID_REQUEST, message)
    assert "g" not in h.shard("g").share_groups


def test_leave_bumps_the_epoch_and_the_others_get_the_partitions(h):
    hb(h, "a", 0, ["t"])
    hb(h, "b", 0, ["t"])
    r = hb(h, "a", -1)
    assert (r.error_code, r.member_epoch) == (0, -1)
    assert set(group(h).members) == {"b"}
    r = hb(h, "b", 2)
    assert r.member_epoch == 3 and parts(r) == {(T, p) for p in range(4)}
    assert hb(h, "a", -1).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    hb(h, "b", -1)
    assert str(group(h).state) == "Empty"
    assert [d.group_state for d in describe(h, "g")] == ["Empty"]


def test_session_timeout_expires_a_member_on_the_manual_clock(h):
    hb(h, "a", 0, ["t"])
    hb(h, "b", 0, ["t"])
    h.advance(SESSION_MS - 1000)
    assert hb(h, "a", 1).member_epoch == 2  # a keeps its session; b does not heartbeat
    h.advance(1000)
    assert set(group(h).members) == {"a"}
    assert group(h).group_epoch == 3
    h.advance(SESSION_MS)
    assert group(h).members == {}


def test_group_max_size(h):
    small = Harness(topics=h.topics, share_group_max_size=2)
    assert hb(small, "a", 0, ["t"]).error_code == 0
    assert hb(small, "b", 0, ["t"]).error_code == 0
    r = hb(small, "c", 0, ["t"])
    assert r.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED
    assert hb(small, "a", 0, ["t"]).error_code == 0  # a member already in is not counted twice
    # The size check comes before the member lookup, as in Kafka.
    assert hb(small, "zz", 4).error_code == ErrorCode.GROUP_MAX_SIZE_REACHED


def test_group_ids_are_one_namespace(h):
    consumer = ConsumerGroupHeartbeatRequest(group_id="cg", member_id="m", member_epoch=0, rebalance_timeout_ms=30_000,
                                             subscribed_topic_names=["t"], topic_partitions=[])
    assert h.gc.consumer_group_heartbeat(consumer, 1, h.now).result().error_code == 0
    r = hb(h, "x", 0, ["t"], group_id="cg")
    assert (r.error_code, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group cg is not a share group.")
    hb(h, "a", 0, ["t"], group_id="sg")
    consumer.group_id = "sg"
    assert h.gc.consumer_group_heartbeat(consumer, 1, h.now).result().error_code == ErrorCode.GROUP_ID_NOT_FOUND
    join = h.join("sg").result()
    assert join.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.commit("sg", {("t", 0): 5}).topics[0].partitions[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND


def test_describe(h):
    hb(h, "a", 0, ["t"], rack_id="r1")
    hb(h, "b", 0, ["t", "u"])
    hb(h, "a", 1)
    [d, missing] = describe(h, "g", "unknown")
    assert (d.error_code, d.group_state, d.group_epoch, d.assignment_epoch, d.assignor_name) == (0, "Stable", 2, 2,
                                                                                                  "simple")
    a, b = d.members
    assert (a.member_id, a.rack_id, a.member_epoch, a.client_id, a.client_host, a.subscribed_topic_names) == (
        "a", "r1", 2, "client", "/10.0.0.1", ["t"])
    assert {tp.topic_name for tp in b.assignment.topic_partitions} <= {"t", "u"}
    assigned = {(tp.topic_name, p) for m in d.members for tp in m.assignment.topic_partitions for p in tp.partitions}
    assert assigned == {("t", p) for p in range(4)} | {("u", 0), ("u", 1)}
    assert (missing.error_code, missing.error_message, missing.members) == (
        ErrorCode.GROUP_ID_NOT_FOUND, "Group unknown not found.", [])
    h.join("classic")
    [other] = describe(h, "classic")
    assert (other.error_code, other.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                       "Group classic is not a share group.")


def test_list_and_delete_groups(h):
    hb(h, "a", 0, ["t"])
    assert ("g", "share", "Stable", "share") in h.shard("g").list_groups()
    assert h.shard("g").delete_groups(["g"], h.now).response == [("g", ErrorCode.NON_EMPTY_GROUP)]
    hb(h, "a", -1)
    result = h.gc.delete_groups(["g"], h.now) if hasattr(h.gc, "delete_groups_sync") else None
    shard = h.shard("g")
    deleted = shard.delete_groups(["g"], h.now)
    assert deleted.response == [("g", ErrorCode.NONE)]
    for record in deleted.records:
        shard.replay(record)
    assert "g" not in shard.share_groups
    del result


def test_records_round_trip_and_reload_gives_the_same_state(h):
    hb(h, "a", 0, ["t"], rack_id="r")
    hb(h, "b", 0, ["t", "u"])
    hb(h, "c", 0, ["u"])
    hb(h, "a", 1)
    hb(h, "b", -1)
    types = {r.type for r in h.records("g")}
    assert {RecordType.SHARE_GROUP_METADATA, RecordType.SHARE_GROUP_MEMBER_METADATA,
            RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_METADATA, RecordType.SHARE_GROUP_TARGET_ASSIGNMENT_MEMBER,
            RecordType.SHARE_GROUP_CURRENT_MEMBER_ASSIGNMENT} <= types
    for record in h.records("g"):
        assert deserialize(*serialize(record)) == record
    reloaded = h.reload()
    assert reloaded.shard_for("g").replicated_state() == h.shard("g").replicated_state()
    assert reloaded.shard_for("g").share_groups["g"] == group(h)
    # A reloaded coordinator re-arms the sessions: nobody heartbeats, everyone expires.
    timer = Timer(start_ms=h.now)
    again = GroupCoordinator(h.writer, timer, h.config, topics=h.topics)
    again.startup(h.now)
    timer.advance_clock(h.now + SESSION_MS)
    assert again.shard_for("g").share_groups["g"].members == {}


def test_state_partition_metadata_record_reads_back(h):
    from odradek.coordinator.group.records import (
        CoordinatorRecord,
        ShareGroupStatePartitionMetadataKey,
        ShareGroupStatePartitionMetadataValue,
    )
    value = ShareGroupStatePartitionMetadataValue(
        initializing_topics=[], deleting_topics=[],
        initialized_topics=[ShareGroupStatePartitionMetadataValue.TopicPartitionsInfo(
            topic_id=T, topic_name="t", partitions=[0, 1], create_timestamp=5)])
    record = CoordinatorRecord(RecordType.SHARE_GROUP_STATE_PARTITION_METADATA,
                               ShareGroupStatePartitionMetadataKey(group_id="g"), value, 0)
    key, raw = serialize(record)
    assert key[:2] == b"\x00\x0f"
    assert deserialize(key, raw) == record


# ---- the assignor --------------------------------------------------------------------------------


def _check(subscriptions, partitions, assignment):
    assignable = {(t, p) for m, ts in subscriptions.items() for t in ts for p in range(partitions.get(t, 0))}
    covered = set()
    for member_id, a in assignment.items():
        for t, ps in a.items():
            assert t in subscriptions[member_id]
            covered |= {(t, p) for p in ps}
    if any(subscriptions.values()):
        assert covered == assignable


@pytest.mark.parametrize("seed", range(200))
def test_assignor_properties(seed):
    rng = random.Random(seed)
    topics = {uuid.UUID(int=i + 1): rng.randint(1, 6) for i in range(rng.randint(1, 3))}
    homogeneous = rng.random() < 0.6
    members = [f"m{i}" for i in range(rng.randint(1, 12))]
    subscriptions = {m: frozenset(topics) if homogeneous else frozenset(rng.sample(sorted(topics), rng.randint(1, len(topics))))
                     for m in members}
    assignment = simple_assignor(subscriptions, topics, {})
    _check(subscriptions, topics, assignment)
    assert simple_assignor(subscriptions, topics, {}) == assignment  # deterministic
    if homogeneous:
        sizes = [sum(len(ps) for ps in assignment[m].values()) for m in members]
        assert max(sizes) - min(sizes) <= 1
        total = sum(topics.values())
        if len(members) >= total:
            per_partition: dict = {}
            for a in assignment.values():
                for t, ps in a.items():
                    for p in ps:
                        per_partition[(t, p)] = per_partition.get((t, p), 0) + 1
            assert max(per_partition.values()) - min(per_partition.values()) <= 1
    # Stickiness: a member joining moves nobody's partitions when there are more members than partitions.
    if homogeneous and len(members) > sum(topics.values()):
        grown = dict(subscriptions, newcomer=frozenset(topics))
        again = simple_assignor(grown, topics, assignment)
        _check(grown, topics, again)
        moved = [m for m in members if again[m] != assignment[m]]
        assert len(moved) <= 1


def test_assignor_is_sticky_when_a_member_leaves():
    subscriptions = {m: frozenset({T}) for m in "abc"}
    first = simple_assignor(subscriptions, {T: 6}, {})
    del subscriptions["b"]
    second = simple_assignor(subscriptions, {T: 6}, first)
    assert first["a"][T] <= second["a"][T]
    assert first["c"][T] <= second["c"][T]


def test_topic_metadata_changes_bump_the_epoch(h):
    hb(h, "a", 0, ["t", "later"])
    assert group(h).group_epoch == 1
    h.topics.add("later", 3, uuid.UUID(int=9))  # a subscribed topic appears
    r = hb(h, "a", 1)
    assert r.member_epoch == 2 and (uuid.UUID(int=9), 2) in parts(r)
    h.topics.add("t", 6, T)  # a subscribed topic grows
    r = hb(h, "a", 2)
    assert r.member_epoch == 3 and {(T, 4), (T, 5)} <= parts(r)
    h.topics.remove("later")  # and one is deleted
    r = hb(h, "a", 3)
    assert r.member_epoch == 4 and {t for t, _ in parts(r)} == {T}
    h.topics.add("unrelated", 1)  # a topic nobody subscribes to changes nothing
    r = hb(h, "a", 4)
    assert (r.member_epoch, r.assignment) == (4, None)


@pytest.mark.parametrize("seed", range(20))
def test_random_membership_keeps_every_partition_covered_and_replays(seed):
    """Joins, leaves, subscription changes and expiries in a seeded order: after every member has caught
    up, every subscribed partition has a member, members hold exactly their target, and a reload of the
    log gives the same state."""
    rng = random.Random(seed)
    topics = TopicsImage()
    topics.add("t", rng.randint(1, 5), T)
    topics.add("u", rng.randint(1, 3), U)
    h = Harness(topics=topics)
    epochs: dict[str, int] = {}
    for _ in range(40):
        op = rng.random()
        member_id = f"m{rng.randint(0, 7)}"
        if op < 0.45 or member_id not in epochs:
            r = hb(h, member_id, 0, rng.choice([["t"], ["u"], ["t", "u"]]))
        elif op < 0.7:
            r = hb(h, member_id, epochs[member_id])
        elif op < 0.8:
            r = hb(h, member_id, epochs[member_id], rng.choice([["t"], ["u"], ["t", "u"]]))
        elif op < 0.9:
            r = hb(h, member_id, -1)
            epochs.pop(member_id, None)
            continue
        else:
            h.advance(SESSION_MS)  # everyone not heartbeating since expires
            live = h.shard("g").share_groups.get("g")
            epochs = {m: e for m, e in epochs.items() if live is not None and m in live.members}
            continue
        if r.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
            epochs.pop(member_id, None)
            continue
        assert r.error_code == 0, r
        epochs[member_id] = r.member_epoch
    for member_id in list(epochs):
        epochs[member_id] = hb(h, member_id, epochs[member_id]).member_epoch
    g = h.shard("g").share_groups.get("g")
    if g is not None and g.members:
        covered = {(t, p) for m in g.members.values() for t, ps in m.assigned_partitions.items() for p in ps}
        wanted = {(info.topic_id, p) for name in g.subscribed_topic_names()
                  if (info := topics.topic_by_name(name)) is not None for p in range(info.num_partitions)}
        assert covered == wanted
        for member in g.members.values():
            assert member.assigned_partitions == g.target_assignment.get(member.member_id, {})
            assert member.member_epoch == g.assignment_epoch == g.group_epoch
    assert h.reload().shard_for("g").replicated_state() == h.shard("g").replicated_state()


def test_an_empty_share_group_outlives_the_retention_cleanup(h):
    """Its progress lives in __share_group_state; only DeleteGroups removes it."""
    hb(h, "a", 0, ["t"])
    hb(h, "a", -1)
    h.advance(h.config.offsets_retention_check_interval_ms * 3)
    assert "g" in h.shard("g").share_groups
    assert h.reload().shard_for("g").share_groups["g"].group_epoch == 2
