"""The controller's failover rules on a manual clock (metadata/broker_heartbeats.py, cluster_control.py):
a broker whose heartbeat connection closed is fenced after the disconnect grace, not after the session;
one that heartbeats within the grace is not; one wrongly suspected rejoins by heartbeating, with its
epoch and its replicas' data; a session a new controller only presumed must be confirmed by a heartbeat
within an interval and the grace; and a new incarnation replaces an old one that is not proven live at
once (a restart does not wait out the old session)."""

from __future__ import annotations

import uuid

from odradek.protocol.errors import ErrorCode
from odradek.metadata.broker_heartbeats import BrokerHeartbeatManager

from .cluster_harness import Cluster, error_of

SESSION_MS = 9000
GRACE_MS = 500
INTERVAL_MS = 2000


def cluster_of(*broker_ids: int, grace_ms: int = GRACE_MS) -> Cluster:
    cluster = Cluster(broker_disconnect_grace_ms=grace_ms, broker_heartbeat_interval_ms=INTERVAL_MS)
    for broker_id in broker_ids:
        cluster.start(broker_id, 0)
    cluster.create_topic("t", 1, 3, assignments={0: [1, 2, 3]})
    return cluster


def fenced(cluster: Cluster) -> set[int]:
    return {b.broker_id for b in cluster.image.brokers.values() if b.fenced}


def tick(cluster: Cluster, now_ms: int) -> list:
    return cluster.commit(cluster.controller.tick(now_ms))


def test_a_closed_connection_fences_the_broker_after_the_grace_not_the_session():
    cluster = cluster_of(1, 2, 3)
    for b in (2, 3):
        cluster.heartbeat(b, 1000)
    assert cluster.controller.broker_disconnected(1, 1000)
    assert not cluster.controller.broker_disconnected(1, 1200)  # the first close starts the grace
    assert cluster.controller.next_deadline_ms() == 1000 + GRACE_MS + 1
    assert tick(cluster, 1000 + GRACE_MS) == [] and not fenced(cluster)
    records = tick(cluster, 1000 + GRACE_MS + 1)
    assert [type(r).__name__ for r in records] == ["PartitionChangeRecord", "BrokerRegistrationChangeRecord"]
    assert fenced(cluster) == {1}
    p = cluster.partition("t")
    assert p.leader == 2 and p.isr == (2, 3) and p.leader_epoch == 1  # long before the 9 s session


def test_a_broker_that_heartbeats_within_the_grace_is_not_fenced():
    cluster = cluster_of(1, 2, 3)
    cluster.controller.broker_disconnected(1, 1000)
    cluster.heartbeat(1, 1000 + GRACE_MS)  # it reconnected: the heartbeat came over a new connection
    for b in (2, 3):
        cluster.heartbeat(b, 1000 + GRACE_MS)
    assert tick(cluster, 1000 + GRACE_MS + 1) == [] and not fenced(cluster)
    # Back to the plain session: fenced only when silent for broker.session.timeout.ms.
    assert cluster.controller.heartbeats.next_expiry_ms() == 1000 + GRACE_MS + SESSION_MS + 1


def test_a_wrongly_suspected_broker_rejoins_by_heartbeating_with_its_epoch():
    cluster = cluster_of(1, 2, 3)
    epoch = cluster.epochs[1]
    cluster.controller.broker_disconnected(1, 1000)
    for b in (2, 3):
        cluster.heartbeat(b, 1600)
    tick(cluster, 1600)
    assert fenced(cluster) == {1} and cluster.partition("t").isr == (2, 3)
    # Its next heartbeat (the broker never died) unfences it with the same registration: no new epoch,
    # nothing of its logs given up; it comes back into the ISR through AlterPartition as any follower.
    response = cluster.heartbeat(1, 2000)
    assert not response.is_fenced and response.is_caught_up and not fenced(cluster)
    assert cluster.epochs[1] == epoch == cluster.image.brokers[1].broker_epoch
    cluster.alter_partition("t", 0, [2, 3, 1], broker_id=cluster.partition("t").leader)
    assert cluster.partition("t").isr == (2, 3, 1)


def test_the_rule_is_off_with_a_negative_grace():
    cluster = cluster_of(1, 2, 3, grace_ms=-1)
    assert cluster.controller.broker_disconnected(1, 1000)  # noted, but it ends nothing
    for b in (2, 3):
        cluster.heartbeat(b, SESSION_MS)
    assert tick(cluster, SESSION_MS) == [] and not fenced(cluster)
    tick(cluster, SESSION_MS + 1)
    assert fenced(cluster) == {1}


def test_a_fenced_or_unknown_broker_is_not_suspected():
    cluster = cluster_of(1, 2, 3)
    cluster.heartbeat(1, 100, want_fence=True)
    assert not cluster.controller.broker_disconnected(1, 1000)
    assert not cluster.controller.broker_disconnected(7, 1000)


def test_a_session_presumed_at_activation_must_be_confirmed_within_an_interval_and_the_grace():
    """The active controller died with its own broker: the new one has no connection history, and the
    dead broker's presumed session ends after one heartbeat interval plus the grace, not a session."""
    cluster = cluster_of(1, 2, 3)
    now = 50_000
    cluster.controller.activate(now)
    limit = now + INTERVAL_MS + GRACE_MS
    assert cluster.controller.next_deadline_ms() == limit + 1
    cluster.heartbeat(2, now + 10)  # live brokers heartbeat to the new controller at once
    cluster.heartbeat(3, limit)
    assert tick(cluster, limit) == [] and not fenced(cluster)
    tick(cluster, limit + 1)
    assert fenced(cluster) == {1}
    assert cluster.partition("t").leader in (2, 3)


def test_without_the_rule_activation_presumes_a_whole_session():
    cluster = cluster_of(1, 2, 3, grace_ms=-1)
    cluster.controller.activate(50_000)
    assert cluster.controller.next_deadline_ms() == 50_000 + SESSION_MS + 1


def test_a_restarted_broker_registers_at_once_when_the_old_session_was_only_presumed():
    """docker-compose down then up: the last node stopped still holds an unfenced registration, and the
    controller activated after the restart presumes its session. Its new incarnation is not refused
    (it was refused for broker.session.timeout.ms before); the old one first leaves ISRs and leaderships."""
    cluster = cluster_of(1, 2, 3)
    cluster.controller.activate(50_000)
    new = uuid.UUID(int=7)
    old_epoch = cluster.epochs[1]
    epoch = cluster.register(1, 50_001, incarnation=new)
    assert epoch > old_epoch and cluster.image.brokers[1].incarnation_id == new
    assert 1 in fenced(cluster) and 1 not in cluster.partition("t").isr
    response = cluster.heartbeat(1, 50_002)
    assert not response.is_fenced


def test_a_restarted_broker_registers_at_once_when_its_old_connection_closed():
    cluster = cluster_of(1, 2, 3)
    cluster.controller.broker_disconnected(1, 1000)
    epoch = cluster.register(1, 1100, incarnation=uuid.UUID(int=8))  # before the grace ends
    assert cluster.image.brokers[1].broker_epoch == epoch and 1 in fenced(cluster)


def test_a_second_live_process_with_the_same_id_is_still_refused():
    cluster = cluster_of(1, 2, 3)
    request = cluster.registration(1, incarnation=uuid.UUID(int=9))
    assert error_of(lambda: cluster.controller.register(request, 1000)) == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    # Even right after activation, once the running one has heartbeated to the new controller.
    cluster.controller.activate(5000)
    cluster.heartbeat(1, 5001)
    assert error_of(lambda: cluster.controller.register(request, 5002)) == ErrorCode.DUPLICATE_BROKER_REGISTRATION


def test_heartbeat_manager_expiry_rules():
    heartbeats = BrokerHeartbeatManager(1000, disconnect_grace_ms=100, heartbeat_interval_ms=300)
    heartbeats.touch(1, False, 5, 0)
    heartbeats.touch(2, False, 5, 0)
    assert heartbeats.is_proven_live(1, 0)
    heartbeats.disconnected(1, 50)
    assert heartbeats.has_valid_session(1, 150) and not heartbeats.has_valid_session(1, 151)
    assert not heartbeats.is_proven_live(1, 60)
    assert heartbeats.stale_brokers(151) == [1] and heartbeats.next_expiry_ms() == 151
    heartbeats.start_sessions({1: False, 2: False, 3: True}, 2000)
    assert not heartbeats.is_proven_live(1, 2000) and heartbeats.has_valid_session(1, 2400)
    assert heartbeats.stale_brokers(2401) == [1, 2]  # fenced brokers are never stale
    heartbeats.touch(2, False, 5, 2200)
    assert heartbeats.stale_brokers(2401) == [1] and heartbeats.is_proven_live(2, 2300)


def test_a_connection_context_tells_each_watcher_of_its_close_once():
    from odradek.broker.context import ConnectionContext

    connection = ConnectionContext("c", "127.0.0.1", "CONTROLLER")
    seen: list[str] = []
    connection.when_closed(lambda: seen.append("first"))
    connection.when_closed(lambda: seen.append("second"))
    connection.mark_closed()
    connection.mark_closed()
    assert seen == ["first", "second"]
    connection.when_closed(lambda: seen.append("late"))  # closed already: told at once
    assert seen == ["first", "second", "late"]
