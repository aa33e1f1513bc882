"""The classic group protocol on a manual clock: the transition table, join/sync, timers, static members."""

from __future__ import annotations

import itertools

import pytest

from odradek.coordinator.group.classic_group import (
    TRANSITIONS,
    ClassicGroup,
    ClassicGroupMember,
    ClassicGroupState,
    IllegalStateTransition,
)
from odradek.coordinator.group.records import RecordType
from odradek.protocol.errors import ErrorCode

from tests.harness.group_coordinator import DELAY_MS, REBALANCE_MS, SESSION_MS, Harness, form_group, subscription

S = ClassicGroupState


# ---------------------------------------------------------------------------------------------------
# The transition table

EXPECTED = {
    (S.EMPTY, S.PREPARING_REBALANCE), (S.EMPTY, S.DEAD),
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE), (S.PREPARING_REBALANCE, S.EMPTY), (S.PREPARING_REBALANCE, S.DEAD),
    (S.COMPLETING_REBALANCE, S.STABLE), (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.DEAD),
    (S.STABLE, S.PREPARING_REBALANCE), (S.STABLE, S.DEAD),
    (S.DEAD, S.DEAD),
}


@pytest.mark.parametrize("source,target", list(itertools.product(S, S)))
def test_transition_table(source, target):
    group = ClassicGroup("g", state=source)
    allowed = (source, target) in EXPECTED
    assert (target in TRANSITIONS[source]) == allowed
    if allowed:
        group.transition_to(target, 5)
        assert (group.state, group.previous_state, group.state_timestamp_ms) == (target, source, 5)
    else:
        with pytest.raises(IllegalStateTransition):
            group.transition_to(target, 5)
        assert group.state is source


def test_can_rebalance_follows_the_table():
    for state in S:
        assert ClassicGroup("g", state=state).can_rebalance() == (state in (S.EMPTY, S.COMPLETING_REBALANCE, S.STABLE))


def _member(member_id: str, *protocols: str) -> ClassicGroupMember:
    return ClassicGroupMember(member_id, None, "c", "h", 1000, 1000, "consumer", [(p, b"") for p in protocols])


def test_protocol_selection_votes_for_preferences_among_common_protocols():
    group = ClassicGroup("g")
    group.add(_member("a", "roundrobin", "range"))
    group.add(_member("b", "range", "roundrobin", "sticky"))
    group.add(_member("c", "range", "roundrobin"))
    assert group.candidate_protocols() == {"range", "roundrobin"}
    assert group.select_protocol() == "range"
    assert group.supports_protocols("consumer", [("sticky", b""), ("range", b"")])
    assert not group.supports_protocols("consumer", [("sticky", b"")])
    assert not group.supports_protocols("connect", [("range", b"")])
    group.remove("b")
    assert group.candidate_protocols() == {"range", "roundrobin"}


# ---------------------------------------------------------------------------------------------------
# Join and sync


def test_single_member_join_and_sync():
    h = Harness()
    member_id, join = h.join_member("g")
    assert member_id.startswith("client-")
    assert not join.done  # the first rebalance of a new group waits for the initial delay
    assert h.group("g").state is S.PREPARING_REBALANCE
    h.advance(DELAY_MS - 1)
    assert not join.done
    h.advance(1)
    r = join.result()
    assert (r.error_code, r.generation_id, r.leader, r.member_id, r.protocol_name) == (0, 1, member_id, member_id,
                                                                                      "range")
    assert [m.member_id for m in r.members] == [member_id]
    assert h.group("g").state is S.COMPLETING_REBALANCE
    sync = h.sync("g", member_id, 1, {member_id: b"assignment"})
    assert sync.result().error_code == 0 and sync.result().assignment == b"assignment"
    assert h.group("g").state is S.STABLE
    records = h.records("g")
    assert [r.type for r in records] == [RecordType.GROUP_METADATA]
    value = records[0].value
    assert (value.generation, value.protocol, value.leader, value.protocol_type) == (1, "range", member_id, "consumer")
    assert [(m.member_id, m.assignment) for m in value.members] == [(member_id, b"assignment")]
    assert h.heartbeat("g", member_id, 1) == 0


def test_three_members_leader_gets_every_metadata_followers_none():
    h = Harness()
    pending = [h.join_member("g", client_id=f"c{i}", protocols=[("range", subscription(f"t{i}"))]) for i in range(3)]
    h.advance(DELAY_MS)
    assert not pending[0][1].done  # members arrived during the initial delay: it runs once more
    h.advance(DELAY_MS)
    responses = {m: p.result() for m, p in pending}
    leader = responses[pending[0][0]].leader
    assert leader == pending[0][0]
    assert {r.generation_id for r in responses.values()} == {1}
    assert sorted(m.member_id for m in responses[leader].members) == sorted(responses)
    assert all(not r.members for m, r in responses.items() if m != leader)
    followers = [m for m in responses if m != leader]
    follower_syncs = [h.sync("g", m, 1) for m in followers]
    assert not any(s.done for s in follower_syncs)  # followers wait for the leader's assignment
    leader_sync = h.sync("g", leader, 1, {m: m.encode() for m in responses})
    for m, s in zip(followers + [leader], follower_syncs + [leader_sync]):
        assert s.result().error_code == 0 and s.result().assignment == m.encode()
    assert h.group("g").state is S.STABLE


def test_member_id_required_and_the_join_response_lost():
    h = Harness()
    first = h.join("g", version=4).result()
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
    assert first.member_id in h.group("g").pending_members
    # v3 clients are given a member id straight away.
    old = h.join("g", version=3)
    assert not old.done
    second = h.join("g", first.member_id, version=4)
    h.advance(2 * DELAY_MS)
    assert second.result().error_code == 0 and old.result().error_code == 0
    assert second.result().generation_id == 1
    # A member that lost its JoinGroup response rejoins with the same metadata and gets the generation again.
    again = h.join("g", first.member_id, version=4).result()
    assert (again.error_code, again.generation_id) == (0, 1)


def test_pending_member_expires_and_stops_blocking_the_rebalance():
    h = Harness()
    members, generation = form_group(h, "g", 1)
    pending = h.join("g").result().member_id  # handed an id, never comes back
    rejoin = h.join("g", members[0])  # the leader rejoins: a rebalance starts
    assert h.group("g").state is S.PREPARING_REBALANCE
    assert not rejoin.done  # blocked by the pending member
    h.advance(SESSION_MS)
    assert pending not in h.group("g").pending_members
    assert rejoin.result().generation_id == generation + 1


def test_initial_delay_extends_while_members_keep_joining():
    h = Harness()
    _, first = h.join_member("g", client_id="a", rebalance_ms=10_000)
    h.advance(DELAY_MS - 1)
    _, second = h.join_member("g", client_id="b", rebalance_ms=10_000)
    h.advance(1)
    assert not first.done  # a member arrived during the delay: the delay starts over
    h.advance(DELAY_MS)
    assert first.result().generation_id == second.result().generation_id == 1
    assert len(first.result().members) == 2


def test_initial_delay_is_bounded_by_the_rebalance_timeout():
    h = Harness()
    _, first = h.join_member("g", client_id="a", rebalance_ms=4000)
    for i in range(5):
        h.advance(DELAY_MS - 1)
        h.join_member("g", client_id=f"x{i}", rebalance_ms=4000)
        if first.done:
            break
    h.advance(DELAY_MS)
    assert first.done and h.now <= 2 * DELAY_MS + 4000


def test_session_expiry_moves_the_group_to_rebalance():
    h = Harness()
    (a, b), generation = form_group(h, "g", 2)
    for _ in range(2):
        h.advance(SESSION_MS * 2 // 5)
        assert h.heartbeat("g", a, generation) == 0
    assert h.group("g").state is S.STABLE
    h.advance(SESSION_MS // 5)  # b's session runs out
    assert h.group("g").state is S.PREPARING_REBALANCE
    assert b not in h.group("g").members
    assert h.heartbeat("g", a, generation) == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.heartbeat("g", b, generation) == ErrorCode.UNKNOWN_MEMBER_ID
    rejoin = h.join("g", a)
    r = rejoin.result()  # every remaining member has rejoined: the join phase completes at once
    assert (r.generation_id, r.leader, [m.member_id for m in r.members]) == (generation + 1, a, [a])


def test_rebalance_timeout_removes_members_that_do_not_rejoin():
    h = Harness()
    (a, b), generation = form_group(h, "g", 2)
    rejoin = h.join("g", a, protocols=[("range", subscription("t", "u"))])  # new metadata: rebalance
    assert not rejoin.done
    for _ in range(REBALANCE_MS // 5000):
        h.advance(5000)
        h.heartbeat("g", b, generation)  # b heartbeats but never rejoins
    r = rejoin.result()
    assert r.generation_id == generation + 1 and [m.member_id for m in r.members] == [a]
    assert h.heartbeat("g", b, generation) == ErrorCode.UNKNOWN_MEMBER_ID


def test_members_that_never_sync_are_removed():
    h = Harness()
    pending = [h.join_member("g", client_id=f"c{i}") for i in range(2)]
    h.advance(2 * DELAY_MS)
    leader = pending[0][1].result().leader
    h.sync("g", leader, 1, {})
    assert h.group("g").state is S.STABLE
    for _ in range(REBALANCE_MS // 5000):
        h.advance(5000)
        h.heartbeat("g", leader, 1)
    group = h.group("g")
    assert list(group.members) == [leader] and group.state is S.PREPARING_REBALANCE


def test_leave_group_v1_and_batched_v3():
    h = Harness()
    (a, b, c), generation = form_group(h, "g", 3)
    assert h.leave("g", (a, None), version=1).error_code == 0
    assert h.group("g").state is S.PREPARING_REBALANCE
    assert h.leave("g", ("nobody", None), version=1).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    r = h.leave("g", (b, None), ("nobody", None), (c, None), version=3)
    assert r.error_code == 0
    assert [(m.member_id, m.error_code) for m in r.members] == [(b, 0), ("nobody", ErrorCode.UNKNOWN_MEMBER_ID), (c, 0)]
    group = h.group("g")
    assert group.state is S.EMPTY and group.generation_id == generation + 1
    last = h.records("g")[-1]
    assert last.type is RecordType.GROUP_METADATA and last.value.members == [] and last.value.protocol is None
    assert h.leave("unknown", ("x", None)).error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_heartbeat_errors():
    h = Harness()
    (a,), generation = form_group(h, "g", 1)
    assert h.heartbeat("g", a, generation + 1) == ErrorCode.ILLEGAL_GENERATION
    assert h.heartbeat("g", "other", generation) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat("nope", a, generation) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat("", a, generation) == ErrorCode.INVALID_GROUP_ID


def test_join_validation():
    h = Harness()
    assert h.join("g", session_ms=1).result().error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    assert h.join("", version=5).result().error_code == ErrorCode.INVALID_GROUP_ID
    assert h.join("g", "stranger").result().error_code == ErrorCode.UNKNOWN_MEMBER_ID
    form_group(h, "g", 1)
    assert h.join("g", protocols=[("roundrobin", b"")]).result().error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.join("g", protocol_type="connect").result().error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_join_v0_uses_the_session_timeout_as_rebalance_timeout():
    h = Harness()
    join = h.join("g", version=0, rebalance_ms=-1)
    h.advance(DELAY_MS)
    r = join.result()
    assert r.error_code == 0 and r.generation_id == 1
    assert h.group("g").members[r.member_id].rebalance_timeout_ms == SESSION_MS


def test_sync_errors():
    h = Harness()
    (a, b), generation = form_group(h, "g", 2)
    assert h.sync("g", a, generation + 1).result().error_code == ErrorCode.ILLEGAL_GENERATION
    assert h.sync("g", "x", generation).result().error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.sync("nope", a, generation).result().error_code == ErrorCode.UNKNOWN_MEMBER_ID
    h.join("g", a, protocols=[("range", subscription("x"))])
    assert h.sync("g", b, generation).result().error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_a_join_during_completing_rebalance_answers_pending_syncs_with_rebalance_in_progress():
    h = Harness()
    pending = [h.join_member("g", client_id=f"c{i}") for i in range(2)]
    h.advance(2 * DELAY_MS)
    follower = [m for m, p in pending if p.result().leader != m][0]
    waiting = h.sync("g", follower, 1)
    h.join_member("g", client_id="late")
    assert waiting.result().error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_group_max_size():
    h = Harness(group_max_size=1)
    form_group(h, "g", 1)
    assert h.join("g").result().error_code == ErrorCode.GROUP_MAX_SIZE_REACHED


# ---------------------------------------------------------------------------------------------------
# Static membership


def test_static_member_rejoins_without_rebalance_and_the_old_id_is_fenced():
    h = Harness()
    joins = [h.join("g", instance_id=f"i{i}", client_id=f"c{i}") for i in range(2)]
    h.advance(2 * DELAY_MS)
    r0, r1 = joins[0].result(), joins[1].result()
    assert r0.member_id.startswith("i0-")
    leader, follower = r0.member_id, r1.member_id
    h.sync("g", leader, 1, {leader: b"A", follower: b"B"}, instance_id="i0")
    h.sync("g", follower, 1, instance_id="i1")
    records_before = len(h.records("g"))
    # The follower restarts: same instance id, no member id.
    rejoin = h.join("g", instance_id="i1", client_id="c1").result()
    new_id = rejoin.member_id
    assert rejoin.error_code == 0 and new_id != follower and rejoin.generation_id == 1
    assert h.group("g").state is S.STABLE  # no rebalance
    stored = h.records("g")[records_before:]
    assert [m.member_id for m in stored[-1].value.members] == [leader, new_id]
    sync = h.sync("g", new_id, 1, instance_id="i1").result()
    assert sync.error_code == 0 and sync.assignment == b"B"
    # The previous incarnation is fenced.
    assert h.heartbeat("g", follower, 1, instance_id="i1") == ErrorCode.FENCED_INSTANCE_ID
    assert h.join("g", follower, instance_id="i1").result().error_code == ErrorCode.FENCED_INSTANCE_ID
    assert h.commit_errors("g", {("t", 0): 1}, generation=1, member_id=follower, instance_id="i1") == [
        ErrorCode.FENCED_INSTANCE_ID]
    assert h.heartbeat("g", new_id, 1, instance_id="i1") == 0


def test_static_leader_rejoin_v9_skips_assignment_and_older_versions_see_the_old_leader():
    h = Harness()
    join = h.join("g", instance_id="i0")
    h.advance(DELAY_MS)
    leader = join.result().member_id
    h.sync("g", leader, 1, {leader: b"A"}, instance_id="i0")
    r9 = h.join("g", instance_id="i0", version=9).result()
    assert r9.skip_assignment and r9.leader == r9.member_id and len(r9.members) == 1
    r5 = h.join("g", instance_id="i0", version=5).result()
    assert not r5.skip_assignment and r5.leader == r9.member_id != r5.member_id
    assert h.group("g").state is S.STABLE


def test_static_member_is_not_removed_for_missing_a_rebalance_but_its_session_expires():
    h = Harness()
    joins = [h.join("g", instance_id=f"i{i}") for i in range(2)]
    h.advance(2 * DELAY_MS)
    a, b = joins[0].result().member_id, joins[1].result().member_id
    h.sync("g", a, 1, {}, instance_id="i0")
    h.sync("g", b, 1, instance_id="i1")
    h.leave("g", ("", "i1"))  # an admin removes i1 by instance id
    assert list(h.group("g").members) == [a]
    rejoin = h.join("g", a, instance_id="i0").result()
    assert rejoin.generation_id == 2
    h.advance(SESSION_MS)  # a never syncs nor heartbeats: its session expires and the group empties
    group = h.group("g")
    assert group.members == {} and group.state is S.EMPTY and group.generation_id == 3


def test_unloading_the_partition_answers_pending_long_polls_with_not_coordinator():
    h = Harness()
    _, join = h.join_member("g")
    h.gc.on_resigned(h.gc.partition_for("g"))
    assert join.result().error_code == ErrorCode.NOT_COORDINATOR
    assert h.timer.size == sum(len(c.timers) for c in h.gc.runtime._contexts.values())


def test_static_rejoin_that_cannot_be_stored_keeps_the_old_member_id():
    h = Harness()
    join = h.join("g", instance_id="i0")
    h.advance(DELAY_MS)
    old = join.result().member_id
    h.sync("g", old, 1, {old: b"A"}, instance_id="i0")
    h.writer.fail_next = OSError("disk full")
    failed = h.join("g", instance_id="i0").result()
    assert failed.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert list(h.group("g").members) == [old] and h.group("g").state is S.STABLE
    assert h.heartbeat("g", old, 1, instance_id="i0") == 0
    h.advance(SESSION_MS - 1)
    assert h.heartbeat("g", old, 1, instance_id="i0") == 0
