"""Consumer groups (classic protocol) with real clients against real broker processes.

confluent-kafka (librdkafka), aiokafka and kafka-python groups: three members on six partitions get
disjoint, complete assignments; a member killed with kill -9 (it runs in a subprocess of its own) loses
its partitions once its session times out; a member that leaves (close) loses them at once; static members
(group.instance.id) come back without a rebalance; cooperative-sticky rebalances only revoke what moves.
Committed offsets are where a restarted consumer resumes, and they and the group's state outlive a broker
restart, clean or kill -9. The admin side (confluent-kafka's AdminClient, kafka-python's KafkaAdminClient
and `odradek group`) lists, describes and deletes groups and reads their offsets and lag.

Each member runs on a thread of its own that owns its consumer (the clients are not thread-safe) and
polls until told to stop; the test reads the assignment the member last saw and the rebalance callbacks
it got. Every wait is a poll loop with a deadline. Tests that do not restart the broker share the module's
broker and use group and topic names of their own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupType, KafkaError
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as CkTP
from confluent_kafka.admin import OffsetSpec
from kafka import KafkaAdminClient
from tests.harness.groups import (
    ChildMember,
    HEARTBEAT_MS,
    LONG_SESSION_MS,
    Member,
    REPO_ROOT,
    TIMEOUT_S,
    admin_client,
    close_all,
    create_topic,
    describe_group,
    group_offsets,
    name,
    produce,
    settled,
    wait_for,
)

pytestmark = pytest.mark.timeout(150)

CLIENTS = ["confluent", "aiokafka", "kafka-python"]
SESSION_MS = 6000  # the killed member's session: the broker's group.min.session.timeout.ms default

# ----------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("client", CLIENTS)
def test_three_members_then_one_killed_then_one_leaves(broker, client):
    """Three members split six partitions; kill -9 one: its partitions move once its session expires;
    one closes: its partitions move at once (long before its own, longer, session timeout)."""
    topic, group = create_topic(broker.bootstrap, 6), name(f"g-{client}")
    a = b = victim = None
    try:
        a = Member(client, broker.bootstrap, group, topic, label="a")
        b = Member(client, broker.bootstrap, group, topic, label="b")
        victim = ChildMember(client, broker.bootstrap, group, topic, SESSION_MS)
        wait_for(lambda: settled([a, b, victim], [2, 2, 2], 6), 60,
                 lambda: f"three disjoint, complete assignments of two partitions each, not "
                         f"{[a.assigned, b.assigned, victim.assigned]} (victim stderr: {victim.tail()})")
        lost = victim.assigned

        killed_at = time.monotonic()
        victim.kill()
        wait_for(lambda: settled([a, b], [3, 3], 6), 30, "the killed member's partitions to move to the others")
        elapsed = time.monotonic() - killed_at
        assert lost <= a.assigned | b.assigned
        # The broker cannot tell a killed member from a slow one before its session expires (the last
        # heartbeat can be up to one interval before the kill): a loose lower bound, not a timing claim.
        assert elapsed >= SESSION_MS / 1000 / 2, f"partitions moved {elapsed:.1f}s after the kill"

        left = b.assigned
        b.close()
        b = None
        wait_for(lambda: settled([a], [6], 6), LONG_SESSION_MS / 1000 / 2,
                 "the leaving member's partitions to move at once, before its session timeout")
        assert left <= a.assigned
    finally:
        close_all(victim, b, a)


def test_cooperative_sticky_only_revokes_what_moves(broker):
    """confluent-kafka with cooperative-sticky: a third member joining takes partitions from the others,
    who give up only those; then it leaves and the others gain its partitions without revoking any."""
    topic, group = create_topic(broker.bootstrap, 6), name("g-coop")
    members = []
    try:
        a = Member("confluent", broker.bootstrap, group, topic, strategy="cooperative-sticky", label="a")
        b = Member("confluent", broker.bootstrap, group, topic, strategy="cooperative-sticky", label="b")
        members += [a, b]
        wait_for(lambda: settled([a, b], [3, 3], 6), 60, "two members with three partitions each")
        assert describe_group(broker.bootstrap, group).partition_assignor == "cooperative-sticky"
        before = {m: m.assigned for m in (a, b)}
        marks = {m: m.event_count() for m in (a, b)}

        c = Member("confluent", broker.bootstrap, group, topic, strategy="cooperative-sticky", label="c")
        members.append(c)
        wait_for(lambda: settled([a, b, c], [2, 2, 2], 6), 60, "three members with two partitions each")
        for m in (a, b):
            after = m.assigned
            assert after <= before[m], "a sticky assignor keeps the partitions that stay"
            revoked = set().union(*(ps for kind, ps in m.events[marks[m]:] if kind == "revoke"))
            assert revoked == before[m] - after, (m.label, m.events[marks[m]:])
            assert not any(kind == "lost" for kind, _ in m.events[marks[m]:])
        assert not any(kind in ("revoke", "lost") and ps for kind, ps in c.events)

        taken = c.assigned
        marks = {m: m.event_count() for m in (a, b)}
        before = {m: m.assigned for m in (a, b)}
        c.close()
        members.remove(c)
        wait_for(lambda: settled([a, b], [3, 3], 6), 30, "the leaver's partitions to move to the others")
        for m in (a, b):
            assert before[m] <= m.assigned
            new_events = m.events[marks[m]:]
            assert not any(kind in ("revoke", "lost") and ps for kind, ps in new_events), (m.label, new_events)
            gained = set().union(*(ps for kind, ps in new_events if kind == "assign"))
            assert gained == m.assigned - before[m]
        assert a.assigned | b.assigned >= taken
    finally:
        close_all(*reversed(members))


@pytest.mark.parametrize("client", CLIENTS)
def test_static_member_restarts_without_rebalance(broker, client):
    """Three static members (group.instance.id); one closes (a static member does not leave) and a new
    consumer with its instance id comes back: it gets the same partitions, and the others see no rebalance."""
    topic, group = create_topic(broker.bootstrap, 6), name(f"g-static-{client}")
    members = []
    try:
        # The first member alone first, so that it is the leader and stays it: the one restarted is not.
        first = Member(client, broker.bootstrap, group, topic, instance_id="s0", label="s0")
        members.append(first)
        wait_for(lambda: settled([first], [6], 6), 60, "the first member to get every partition")
        members += [Member(client, broker.bootstrap, group, topic, instance_id=f"s{i}", label=f"s{i}") for i in (1, 2)]
        wait_for(lambda: settled(members, [2, 2, 2], 6), 60, "three static members with two partitions each")
        s0, s1, s2 = members
        stay = (s0, s1)
        before = {m: (m.assigned, m.event_count(), m.generation(), m.member_id()) for m in stay}
        s2_partitions, s2_id = s2.assigned, s2.member_id()

        s2.close()
        members.remove(s2)
        description = describe_group(broker.bootstrap, group)
        assert len(description.members) == 3, "a static member that closes stays in the group"

        back = Member(client, broker.bootstrap, group, topic, instance_id="s2", label="s2-again")
        members.append(back)
        wait_for(lambda: back.assigned, 30, "the restarted static member's assignment")
        assert back.assigned == s2_partitions
        assert back.member_id() != s2_id, "the coordinator gives the new instance a new member id"
        description = describe_group(broker.bootstrap, group)
        assert description.state == ConsumerGroupState.STABLE
        by_instance = {m.group_instance_id: m for m in description.members}
        assert set(by_instance) == {"s0", "s1", "s2"}
        assert by_instance["s2"].member_id == back.member_id()
        # A rebalance would reach the others by their next heartbeat: watch them for three heartbeat
        # intervals. No rebalance callback, the same partitions, generation and member id throughout.
        deadline = time.monotonic() + 3 * HEARTBEAT_MS / 1000
        while True:
            for m in stay:
                assigned, events, generation, member_id = before[m]
                assert m.event_count() == events, (m.label, m.events[events:])
                assert m.assigned == assigned, m.label
                assert m.generation() == generation and m.member_id() == member_id, m.label
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        close_all(*reversed(members))


@pytest.mark.parametrize("client", CLIENTS)
def test_commit_stop_restart_resumes_at_committed_offset(broker, client):
    topic, group = create_topic(broker.bootstrap, 2), name(f"g-resume-{client}")
    produce(broker.bootstrap, topic, {0: 20, 1: 20})
    first = Member(client, broker.bootstrap, group, topic)
    try:
        wait_for(lambda: len(first.records) >= 10, 60, "records read by the first consumer")
        first.commit({0: 7, 1: 13})
        assert first.committed([0, 1]) == {0: 7, 1: 13}
    finally:
        first.close()
    second = Member(client, broker.bootstrap, group, topic)
    try:
        wait_for(lambda: len(second.first_offsets()) == 2, 60, "records from both partitions after the restart")
        assert second.first_offsets() == {0: 7, 1: 13}
        assert second.committed([0, 1]) == {0: 7, 1: 13}
    finally:
        second.close()
    assert group_offsets(broker.bootstrap, group) == {0: 7, 1: 13}


@pytest.mark.parametrize("hard", [False, True], ids=["clean", "kill9"])
def test_offsets_and_group_state_survive_broker_restart(fresh_broker, hard):
    """Two groups: one Empty with committed offsets, one with a live member. After the broker restarts
    (SIGTERM, or kill -9), the offsets are there, the empty group is Empty, and the live member carries
    on in the same generation under the same member id: its group was loaded back, not rebuilt."""
    bootstrap = fresh_broker.bootstrap
    topic = create_topic(bootstrap, 2)
    produce(bootstrap, topic, {0: 10, 1: 10})
    idle_group, live_group = name("g-idle"), name("g-live")

    idle = Member("confluent", bootstrap, idle_group, topic)
    try:
        wait_for(lambda: idle.assigned, 60, "the idle group's member to join")
        idle.commit({0: 2, 1: 3})
    finally:
        idle.close()
    live = Member("confluent", bootstrap, live_group, topic)
    try:
        wait_for(lambda: live.assigned == {0, 1}, 60, "the live member's assignment")
        live.commit({0: 4, 1: 6})
        member_id, events = live.member_id(), live.event_count()
        assert describe_group(bootstrap, idle_group).state == ConsumerGroupState.EMPTY

        fresh_broker.restart(hard=hard)

        def commit_again():
            try:
                live.commit({0: 5, 1: 7})
                return True
            except KafkaException:  # the coordinator is still being found or loaded: try again
                return False
        wait_for(commit_again, 30, "a commit by the live member after the restart", interval_s=0.2)
        assert live.member_id() == member_id
        assert live.event_count() == events, live.events[events:]
        description = describe_group(bootstrap, live_group)
        assert description.state == ConsumerGroupState.STABLE
        assert [m.member_id for m in description.members] == [member_id]
        assert {tp.partition for tp in description.members[0].assignment.topic_partitions} == {0, 1}
        assert describe_group(bootstrap, idle_group).state == ConsumerGroupState.EMPTY
        assert group_offsets(bootstrap, idle_group) == {0: 2, 1: 3}
        assert group_offsets(bootstrap, live_group) == {0: 5, 1: 7}
    finally:
        live.close()

    again = Member("confluent", bootstrap, idle_group, topic)
    try:
        wait_for(lambda: len(again.first_offsets()) == 2, 60, "records from both partitions")
        assert again.first_offsets() == {0: 2, 1: 3}
    finally:
        again.close()


def test_admin_clients_list_describe_delete_and_lag(broker):
    bootstrap = broker.bootstrap
    topic, group = create_topic(bootstrap, 3), name("g-admin")
    produce(bootstrap, topic, {0: 10, 1: 10, 2: 4})
    committed = {0: 3, 1: 5, 2: 4}
    members = [Member("confluent", bootstrap, group, topic, label=f"admin-{i}") for i in range(2)]
    admin = admin_client(bootstrap)
    kp = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        wait_for(lambda: settled(members, [1, 2], 3), 60, "two members sharing three partitions")
        members[0].commit(committed)

        # confluent-kafka AdminClient
        listed = admin.list_consumer_groups(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
        assert not listed.errors
        mine = [g for g in listed.valid if g.group_id == group]
        assert len(mine) == 1 and not mine[0].is_simple_consumer_group
        assert mine[0].state == ConsumerGroupState.STABLE
        assert mine[0].type in (ConsumerGroupType.CLASSIC, ConsumerGroupType.UNKNOWN)

        description = describe_group(bootstrap, group)
        assert description.state == ConsumerGroupState.STABLE and description.partition_assignor == "range"
        assert sorted(m.client_id for m in description.members) == ["admin-0", "admin-1"]
        assigned = [{tp.partition for tp in m.assignment.topic_partitions} for m in description.members]
        assert sorted(map(len, assigned)) == [1, 2] and set().union(*assigned) == {0, 1, 2}
        assert all(m.host for m in description.members)

        with pytest.raises(KafkaException) as excinfo:
            admin.delete_consumer_groups([group], request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)
        assert excinfo.value.args[0].code() == KafkaError.NON_EMPTY_GROUP

        assert group_offsets(bootstrap, group) == committed
        ends = admin.list_offsets({CkTP(topic, p): OffsetSpec.latest() for p in range(3)},
                                  request_timeout=TIMEOUT_S)
        high = {tp.partition: f.result(TIMEOUT_S).offset for tp, f in ends.items()}
        lag = {p: high[p] - committed[p] for p in range(3)}
        assert high == {0: 10, 1: 10, 2: 4} and lag == {0: 7, 1: 5, 2: 0}

        # kafka-python KafkaAdminClient (3.0 names: list_groups, describe_groups, list_group_offsets)
        groups = {g["group_id"]: g for g in kp.list_groups()}
        assert groups[group]["protocol_type"] == "consumer"
        described = kp.describe_groups([group])[group]
        assert described["group_state"] == "Stable" and described["protocol_data"] == "range"
        assert len(described["members"]) == 2
        offsets = kp.list_group_offsets(group)[group]
        assert {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic} == committed

        # odradek group list / describe
        cli = [sys.executable, "-m", "odradek", "-b", bootstrap, "-o", "json", "group"]
        out = subprocess.run(cli + ["list"], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
        assert out.returncode == 0, out.stderr
        assert any(g["group"] == group for g in json.loads(out.stdout))
        out = subprocess.run(cli + ["describe", group], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
        assert out.returncode == 0, out.stderr
        cli_view = json.loads(out.stdout)
        assert cli_view["group"] == group and len(cli_view["members"]) == 2

        # Once every member has left, the group is Empty and can be deleted, offsets and all.
        for m in members:
            m.close()
        members = []
        wait_for(lambda: describe_group(bootstrap, group).state == ConsumerGroupState.EMPTY, 20, "an Empty group")
        admin.delete_consumer_groups([group], request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)
        listed = admin.list_consumer_groups(request_timeout=TIMEOUT_S).result(TIMEOUT_S)
        assert group not in {g.group_id for g in listed.valid}
        assert group_offsets(bootstrap, group) == {}
    finally:
        kp.close()
        close_all(*members)
