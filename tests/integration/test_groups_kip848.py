"""Consumer groups with the KIP-848 protocol (ConsumerGroupHeartbeat): librdkafka with group.protocol=consumer
against real broker processes. The broker assigns (uniform assignor); members join, get disjoint and
complete assignments, leave, commit offsets and resume from them, and the group outlives a broker kill -9.

A killed member of a KIP-848 group is only fenced after group.consumer.session.timeout.ms (45 s, not a
client setting), too long for this suite: kill -9 of a member is covered for classic groups (test_groups.py).
"""

from __future__ import annotations

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupType, KafkaException

from tests.harness.groups import (
    Member,
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


def consumer_member(bootstrap: str, group: str, topic: str, label: str | None = None) -> Member:
    return Member("confluent", bootstrap, group, topic, protocol="consumer", label=label)


def test_join_assign_leave(broker):
    topic, group = create_topic(broker.bootstrap, 6), name("g848")
    members = []
    try:
        members = [consumer_member(broker.bootstrap, group, topic, label=f"m{i}") for i in range(3)]
        wait_for(lambda: settled(members, [2, 2, 2], 6), 60,
                 lambda: f"three disjoint, complete assignments, not {[m.assigned for m in members]}")

        description = describe_group(broker.bootstrap, group)
        assert description.type == ConsumerGroupType.CONSUMER
        assert description.state == ConsumerGroupState.STABLE
        assert sorted(m.client_id for m in description.members) == ["m0", "m1", "m2"]
        by_client = {m.client_id: {tp.partition for tp in m.assignment.topic_partitions} for m in description.members}
        assert by_client == {m.label: set(m.assigned) for m in members}

        leaver = members.pop()
        left = leaver.assigned
        marks = {m: (m.event_count(), m.assigned) for m in members}
        leaver.close()
        # Well inside the 45 s session timeout: the leave heartbeat (member epoch -1) did it.
        wait_for(lambda: settled(members, [3, 3], 6), 20,
                 lambda: f"the leaver's partitions to move, not {[m.assigned for m in members]}")
        assert left <= set().union(*(m.assigned for m in members))
        # The others only gain: KIP-848 reconciliation is incremental, partitions that stay are not revoked.
        for m in members:
            mark, before = marks[m]
            new_events = m.events[mark:]
            assert not any(kind in ("revoke", "lost") and ps for kind, ps in new_events), (m.label, new_events)
            assert set().union(*(ps for kind, ps in new_events if kind == "assign")) == m.assigned - before
        wait_for(lambda: len(describe_group(broker.bootstrap, group).members) == 2, 10, "two members described")
    finally:
        close_all(*members)


def test_commit_stop_restart_resumes(broker):
    topic, group = create_topic(broker.bootstrap, 2), name("g848-resume")
    produce(broker.bootstrap, topic, {0: 20, 1: 20})
    first = consumer_member(broker.bootstrap, group, topic)
    try:
        wait_for(lambda: len(first.records) >= 10, 60, "records read by the first consumer")
        first.commit({0: 7, 1: 13})
        assert first.committed([0, 1]) == {0: 7, 1: 13}
    finally:
        first.close()
    wait_for(lambda: describe_group(broker.bootstrap, group).state == ConsumerGroupState.EMPTY, 20, "an Empty group")
    second = consumer_member(broker.bootstrap, group, topic)
    try:
        wait_for(lambda: len(second.first_offsets()) == 2, 60, "records from both partitions after the restart")
        assert second.first_offsets() == {0: 7, 1: 13}
    finally:
        second.close()
    assert group_offsets(broker.bootstrap, group) == {0: 7, 1: 13}


def test_group_survives_broker_kill(fresh_broker):
    """A member keeps its member id and assignment across a kill -9 of the broker: the group (members,
    epochs, assignments) is loaded back from __consumer_offsets, so its heartbeats are not fenced."""
    bootstrap = fresh_broker.bootstrap
    topic, group = create_topic(bootstrap, 2), name("g848-restart")
    produce(bootstrap, topic, {0: 10, 1: 10})
    member = consumer_member(bootstrap, group, topic)
    try:
        wait_for(lambda: member.assigned == {0, 1}, 60, "the member's assignment")
        member.commit({0: 4, 1: 6})
        member_id, events = member.member_id(), member.event_count()

        fresh_broker.restart(hard=True)

        def commit_again():
            try:
                member.commit({0: 5, 1: 7})
                return True
            except KafkaException:  # the coordinator is still being found or loaded: try again
                return False
        wait_for(commit_again, 30, "a commit after the restart", interval_s=0.2)
        assert member.member_id() == member_id
        assert member.event_count() == events, member.events[events:]
        description = describe_group(bootstrap, group)
        assert description.type == ConsumerGroupType.CONSUMER
        assert [m.member_id for m in description.members] == [member_id]
        assert group_offsets(bootstrap, group) == {0: 5, 1: 7}
    finally:
        member.close()
