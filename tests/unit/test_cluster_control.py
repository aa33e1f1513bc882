"""The controller's cluster decisions: broker lifecycle, fencing and elections, AlterPartition, placement,
ElectLeaders, leader balance and reassignments, with Kafka's error codes. A manual clock throughout."""

from __future__ import annotations

import random
import uuid
from collections import Counter

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import BrokerHeartbeatRequest, BrokerRegistrationRequest
from odradek.metadata.controller import ElectionType
from odradek.metadata.broker_heartbeats import BrokerHeartbeatManager
from odradek.metadata.controller import Controller
from odradek.metadata.image import (
    NO_LEADER,
    Endpoint,
    PartitionImage,
    merge_partition_change,
    replay_all,
)
from odradek.metadata.records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    ConfigResourceType,
    PartitionChangeRecord,
    RegisterBrokerRecord,
)
from odradek.metadata.partition_change import Election, build_partition_change
from odradek.metadata.replica_placement import place_replicas

from .cluster_harness import AP, CLUSTER_ID, Cluster, error_of

TIMEOUT_MS = 9000


def cluster_of(*broker_ids: int, racks: dict | None = None, **options) -> Cluster:
    cluster = Cluster(**options)
    for broker_id in broker_ids:
        cluster.start(broker_id, 0, rack=(racks or {}).get(broker_id))
    return cluster


def set_unclean(cluster: Cluster, topic: str | None, enabled: bool = True) -> None:
    resource_type = ConfigResourceType.TOPIC if topic else ConfigResourceType.BROKER
    cluster.commit(cluster.controller.alter_configs(
        resource_type, topic or "", {"unclean.leader.election.enable": "true" if enabled else "false"}
    ))


# ------------------------------------------------------------------------------------------ registration


def test_registration_checks_the_cluster_id():
    cluster = Cluster()
    request = cluster.registration(1, cluster_id="another")
    assert error_of(lambda: cluster.controller.register(request, 0)) == ErrorCode.INCONSISTENT_CLUSTER_ID


def test_a_new_broker_registers_fenced_with_the_offset_of_its_record_as_epoch():
    cluster = Cluster()
    offset = cluster.log_end_offset
    epoch = cluster.register(1, 0, rack="r1")
    broker = cluster.image.brokers[1]
    assert epoch == offset == broker.broker_epoch
    assert broker.fenced and broker.rack == "r1"
    assert cluster.written[offset].RECORD_TYPE == RegisterBrokerRecord.RECORD_TYPE


def test_reregistering_the_same_incarnation_is_idempotent():
    cluster = cluster_of(1)
    epoch = cluster.epochs[1]
    records, response = cluster.controller.register(cluster.registration(1), 100)
    assert records == [] and response.broker_epoch == epoch
    # New endpoints are amended in place: same epoch, same (unfenced) state.
    records, response = cluster.controller.register(cluster.registration(1, port=7777), 200)
    assert len(records) == 1 and records[0].broker_epoch == epoch and not records[0].fenced
    cluster.commit(records)
    assert cluster.image.brokers[1].endpoints[0].port == 7777 and not cluster.image.brokers[1].fenced


def test_a_new_incarnation_is_refused_while_the_old_session_lives_then_gets_a_new_epoch():
    cluster = cluster_of(1, 2)
    cluster.create_topic("t", 1, 2, assignments={0: [1, 2]})
    old_epoch = cluster.epochs[1]
    new = uuid.UUID(int=99)
    request = cluster.registration(1, incarnation=new)
    assert error_of(lambda: cluster.controller.register(request, TIMEOUT_MS)) == ErrorCode.DUPLICATE_BROKER_REGISTRATION
    # The session has expired (no tick fenced it yet): the new incarnation takes over, and the old one
    # first leaves the ISR and the leadership it held.
    cluster.heartbeat(2, TIMEOUT_MS)
    epoch = cluster.register(1, TIMEOUT_MS + 1, incarnation=new)
    assert epoch > old_epoch and cluster.image.brokers[1].fenced
    assert cluster.image.brokers[1].incarnation_id == new
    p = cluster.partition("t")
    assert p.leader == 2 and p.isr == (2,) and p.leader_epoch == 1


def test_registration_refuses_a_finalized_feature_level_the_broker_cannot_run():
    cluster = Cluster()
    feature = BrokerRegistrationRequest.Feature(
        name="metadata.version", min_supported_version=1, max_supported_version=5
    )
    request = cluster.registration(1, features=[feature])
    assert error_of(lambda: cluster.controller.register(request, 0)) == ErrorCode.UNSUPPORTED_VERSION
    feature.max_supported_version = 20
    records, _ = cluster.controller.register(request, 0)
    assert records[-1].features[0].name == "metadata.version"


# ------------------------------------------------------------------------------------------- heartbeats


def test_heartbeat_unfences_once_caught_up_with_the_registration():
    cluster = Cluster()
    epoch = cluster.register(1, 0)
    response = cluster.heartbeat(1, 10, offset=epoch - 1)
    assert response.is_fenced and not response.is_caught_up and cluster.image.brokers[1].fenced
    response = cluster.heartbeat(1, 20, offset=epoch - 1, want_fence=True)
    assert response.is_fenced
    response = cluster.heartbeat(1, 30, offset=epoch)
    assert not response.is_fenced and response.is_caught_up and not response.should_shut_down
    assert not cluster.image.brokers[1].fenced
    # Nothing more to write while nothing changes.
    records, response = cluster.controller.heartbeat(_heartbeat_request(cluster, 1), 40)
    assert records == [] and not response.is_fenced


def _heartbeat_request(cluster, broker_id, **fields):
    return BrokerHeartbeatRequest(
        broker_id=broker_id, broker_epoch=cluster.epochs[broker_id],
        current_metadata_offset=cluster.log_end_offset - 1, **fields
    )


def test_heartbeat_with_a_stale_or_unknown_broker_epoch():
    cluster = cluster_of(1)
    assert error_of(lambda: cluster.heartbeat(1, 0, epoch=cluster.epochs[1] - 1)) == ErrorCode.STALE_BROKER_EPOCH
    assert error_of(lambda: cluster.heartbeat(7, 0, epoch=0)) == ErrorCode.STALE_BROKER_EPOCH


def test_an_unfenced_broker_may_ask_to_be_fenced():
    cluster = cluster_of(1, 2)
    cluster.create_topic("t", 1, 2, assignments={0: [1, 2]})
    response = cluster.heartbeat(1, 10, want_fence=True)
    assert response.is_fenced and cluster.image.brokers[1].fenced
    assert cluster.partition("t").leader == 2


def test_silent_brokers_are_fenced_after_the_session_timeout():
    cluster = cluster_of(1, 2, 3)
    cluster.create_topic("t", 1, 3, assignments={0: [1, 2, 3]})
    cluster.heartbeat(2, 5000)
    cluster.heartbeat(3, 5000)
    assert cluster.controller.maybe_fence_stale_brokers(TIMEOUT_MS) == []
    assert cluster.controller.next_deadline_ms() == TIMEOUT_MS + 1
    records = cluster.commit(cluster.controller.maybe_fence_stale_brokers(TIMEOUT_MS + 1))
    assert [type(r).__name__ for r in records] == ["PartitionChangeRecord", "BrokerRegistrationChangeRecord"]
    p = cluster.partition("t")
    assert cluster.image.brokers[1].fenced
    assert p.leader == 2 and p.isr == (2, 3) and (p.leader_epoch, p.partition_epoch) == (1, 1)
    # Once fenced, it is not fenced again.
    assert cluster.controller.maybe_fence_stale_brokers(TIMEOUT_MS + 2) == []


def test_a_last_isr_member_fenced_stays_in_the_isr_and_the_partition_goes_offline_until_it_returns():
    cluster = cluster_of(1, 2)
    cluster.create_topic("t", 1, 2, assignments={0: [1, 2]})
    cluster.alter_partition("t", 0, [1])  # 2 fell behind
    cluster.commit(cluster.controller.fence_broker(1))
    p = cluster.partition("t")
    assert p.leader == NO_LEADER and p.isr == (1,) and p.leader_epoch == 1
    # Broker 2 is alive but out of sync: no unclean election unless enabled.
    assert cluster.controller.tick(0) == []
    assert cluster.elect(ElectionType.PREFERRED, {"t": [0]}) == {("t", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}
    # Broker 1 comes back (a new incarnation, caught up): the partition is led by it again.
    cluster.register(1, 100, incarnation=uuid.UUID(int=5))
    cluster.heartbeat(1, 100)
    p = cluster.partition("t")
    assert p.leader == 1 and p.isr == (1,) and p.leader_epoch == 2


@pytest.mark.parametrize("where", ["topic", "cluster"])
def test_unclean_election_when_enabled_picks_an_out_of_sync_replica(where):
    cluster = cluster_of(1, 2)
    cluster.create_topic("t", 1, 2, assignments={0: [1, 2]})
    cluster.alter_partition("t", 0, [1])
    set_unclean(cluster, "t" if where == "topic" else None)
    cluster.commit(cluster.controller.fence_broker(1))
    p = cluster.partition("t")
    assert p.leader == 2 and p.isr == (2,) and p.leader_recovery_state == 1  # RECOVERING


def test_unclean_election_enabled_later_brings_an_offline_partition_back_on_tick():
    cluster = cluster_of(1, 2)
    cluster.create_topic("t", 1, 2, assignments={0: [1, 2]})
    cluster.alter_partition("t", 0, [1])
    cluster.commit(cluster.controller.fence_broker(1))
    assert cluster.controller.maybe_elect_unclean_leaders() == []
    set_unclean(cluster, "t")
    cluster.commit(cluster.controller.tick(0))
    assert cluster.partition("t").leader == 2


def test_controlled_shutdown_moves_leaderships_then_lets_the_broker_go():
    cluster = cluster_of(1, 2, 3)
    cluster.create_topic("t", 2, 3, assignments={0: [1, 2, 3], 1: [2, 1, 3]})
    response = cluster.heartbeat(1, 100, want_shut_down=True)
    assert not response.should_shut_down and not response.is_fenced
    assert cluster.image.brokers[1].in_controlled_shutdown
    p0, p1 = cluster.partition("t", 0), cluster.partition("t", 1)
    assert p0.leader == 2 and 1 not in p0.isr and 1 not in p1.isr and p1.leader == 2
    # Brokers 2 and 3 have not yet replayed the change: the broker must wait.
    response = cluster.heartbeat(1, 200, want_shut_down=True)
    assert not response.should_shut_down
    cluster.heartbeat(2, 300)
    cluster.heartbeat(3, 300)
    response = cluster.heartbeat(1, 400, want_shut_down=True)
    assert response.should_shut_down and response.is_fenced and cluster.image.brokers[1].fenced
    # It is not placed on and cannot join an ISR.
    assert 1 not in cluster.create_topic("u", 4, 2).partitions[0].replicas


def test_a_broker_leading_nothing_shuts_down_at_once():
    cluster = cluster_of(1, 2)
    response = cluster.heartbeat(1, 100, want_shut_down=True)
    assert response.should_shut_down and cluster.image.brokers[1].fenced


def test_a_fenced_broker_may_shut_down_at_once():
    cluster = Cluster()
    cluster.register(1, 0)
    response = cluster.heartbeat(1, 10, offset=0, want_shut_down=True)
    assert response.should_shut_down and response.is_fenced


def test_unregister_removes_the_broker_from_isrs_and_leaderships():
    cluster = cluster_of(1, 2)
    cluster.create_topic("t", 1, 2, assignments={0: [1, 2]})
    cluster.unregister(1)
    assert 1 not in cluster.image.brokers
    p = cluster.partition("t")
    assert p.leader == 2 and p.isr == (2,)
    assert error_of(lambda: cluster.unregister(1)) == ErrorCode.BROKER_ID_NOT_REGISTERED
    assert cluster.controller.maybe_fence_stale_brokers(10 * TIMEOUT_MS) == [] or 1 not in cluster.image.brokers


def test_activation_gives_every_registered_broker_a_session():
    cluster = cluster_of(1)
    cluster.controller.heartbeats.sessions.clear()  # a new controller knows no sessions
    assert cluster.controller.maybe_fence_stale_brokers(10 * TIMEOUT_MS) == []
    cluster.controller.activate(10 * TIMEOUT_MS)
    assert cluster.controller.maybe_fence_stale_brokers(11 * TIMEOUT_MS) == []
    assert cluster.commit(cluster.controller.maybe_fence_stale_brokers(11 * TIMEOUT_MS + 1))
    assert cluster.image.brokers[1].fenced


def test_activation_again_forgets_the_sessions_of_an_earlier_term():
    """A node active before, then not (the brokers heartbeated to another controller), then active again:
    old last-contact times would fence live brokers at once, and an old fenced flag would hide a broker
    that really goes silent."""
    cluster = cluster_of(1, 2)
    cluster.controller.heartbeats.fence(2)  # what this node saw in its earlier term
    cluster.controller.activate(10 * TIMEOUT_MS)  # much later: every session starts now, as the image says
    assert cluster.controller.maybe_fence_stale_brokers(11 * TIMEOUT_MS) == []
    assert cluster.commit(cluster.controller.maybe_fence_stale_brokers(11 * TIMEOUT_MS + 1))
    assert cluster.image.brokers[1].fenced and cluster.image.brokers[2].fenced


# ------------------------------------------------------------------------------------------- AlterPartition


def test_alter_partition_shrinks_and_expands_the_isr():
    cluster = cluster_of(1, 2, 3)
    cluster.create_topic("t", 1, 3, assignments={0: [1, 2, 3]})
    result = cluster.alter_partition("t", 0, [1, 2])
    p = cluster.partition("t")
    assert result.error_code == 0 and p.isr == (1, 2)
    assert (result.leader_id, result.leader_epoch, result.partition_epoch, result.isr) == (1, 0, 1, [1, 2])
    result = cluster.alter_partition("t", 0, [1, 2, 3], version=2)
    assert result.error_code == 0 and result.partition_epoch == 2 and cluster.partition("t").isr == (1, 2, 3)


@pytest.mark.parametrize(
    "change, error",
    [
        ({"leader_epoch": -1}, ErrorCode.FENCED_LEADER_EPOCH),
        ({"leader_epoch": 5}, ErrorCode.NOT_CONTROLLER),
        ({"partition_epoch": -1}, ErrorCode.INVALID_UPDATE_VERSION),
        ({"partition_epoch": 5}, ErrorCode.NOT_CONTROLLER),
        ({"broker_id": 2}, ErrorCode.INVALID_REQUEST),  # not the leader
        ({"new_isr": [1, 4]}, ErrorCode.INVALID_REQUEST),  # 4 is not a replica
        ({"new_isr": [2, 3]}, ErrorCode.INVALID_REQUEST),  # without the leader
        ({"new_isr": [1, 1]}, ErrorCode.INVALID_REQUEST),
        ({"leader_recovery_state": 1}, ErrorCode.INVALID_REQUEST),  # RECOVERED cannot go back
        ({"member_epochs": {2: 12345}}, ErrorCode.INELIGIBLE_REPLICA),
    ],
)
def test_alter_partition_errors(change, error):
    cluster = cluster_of(1, 2, 3)
    cluster.create_topic("t", 1, 3, assignments={0: [1, 2, 3]})
    cluster.alter_partition("t", 0, [1])
    new_isr = change.pop("new_isr", [1, 2])
    before = cluster.partition("t")
    result = cluster.alter_partition("t", 0, new_isr, **change)
    assert result.error_code == error and cluster.partition("t") == before


def test_alter_partition_refuses_fenced_and_shutting_down_members():
    cluster = cluster_of(1, 2, 3)
    cluster.create_topic("t", 1, 3, assignments={0: [1, 2, 3]})
    cluster.alter_partition("t", 0, [1])
    cluster.commit(cluster.controller.fence_broker(2))
    assert cluster.alter_partition("t", 0, [1, 2], version=2).error_code == ErrorCode.INELIGIBLE_REPLICA
    cluster.create_topic("u", 1, 2, assignments={0: [1, 3]})
    cluster.heartbeat(3, 10, want_shut_down=True)  # 3 leads nothing: straight to fenced
    assert cluster.alter_partition("t", 0, [1, 3]).error_code == ErrorCode.INELIGIBLE_REPLICA


def test_alter_partition_from_a_stale_broker_epoch_is_refused_whole():
    cluster = cluster_of(1, 2)
    cluster.create_topic("t", 1, 2, assignments={0: [1, 2]})
    assert error_of(lambda: cluster.alter_partition("t", 0, [1], broker_epoch=0)) == ErrorCode.STALE_BROKER_EPOCH


def test_alter_partition_unknown_topic_and_partition():
    cluster = cluster_of(1)
    cluster.create_topic("t", 1, 1)
    request = AP(broker_id=1, broker_epoch=cluster.epochs[1], topics=[
        AP.TopicData(topic_id=uuid.UUID(int=77), partitions=[AP.TopicData.PartitionData(partition_index=0)]),
        AP.TopicData(topic_id=cluster.image.topics_by_name["t"].topic_id,
                     partitions=[AP.TopicData.PartitionData(partition_index=9)]),
    ])
    records, response = cluster.controller.alter_partition(request, 3)
    assert records == []
    assert [p.error_code for t in response.topics for p in t.partitions] == [
        ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    ]


def test_a_recovering_leader_reports_recovery():
    cluster = cluster_of(1, 2)
    cluster.create_topic("t", 1, 2, assignments={0: [1, 2]})
    cluster.alter_partition("t", 0, [1])
    set_unclean(cluster, "t")
    cluster.commit(cluster.controller.fence_broker(1))
    assert cluster.partition("t").leader_recovery_state == 1
    assert cluster.alter_partition("t", 0, [2], leader_recovery_state=0).error_code == 0
    assert cluster.partition("t").leader_recovery_state == 0


# ------------------------------------------------------------------------------------------- placement


def test_placement_spreads_replicas_over_racks_then_brokers():
    brokers = [(b, f"r{b % 3}") for b in range(1, 10)]  # 3 racks of 3
    placement = place_replicas(brokers, 30, 3, random.Random(7))
    racks = dict(brokers)
    assert all(len({racks[b] for b in replicas}) == 3 for replicas in placement)
    # Leaders are striped over the racks (within a rack, Kafka's cursors may favour some brokers).
    assert Counter(racks[replicas[0]] for replicas in placement) == {"r0": 10, "r1": 10, "r2": 10}
    assert all(len(set(r)) == 3 for r in placement)
    assert place_replicas(brokers, 30, 3, random.Random(7)) == placement


def test_placement_with_uneven_racks_and_without_racks():
    brokers = [(1, "a"), (2, "a"), (3, "a"), (4, "b")]
    placement = place_replicas(brokers, 8, 2, random.Random(3))
    assert all({dict(brokers)[b] for b in replicas} == {"a", "b"} for replicas in placement)
    plain = place_replicas([(b, None) for b in (1, 2, 3)], 6, 3, random.Random(3))
    assert all(sorted(r) == [1, 2, 3] for r in plain)
    assert Counter(r[0] for r in plain) == {1: 2, 2: 2, 3: 2}


def test_placement_errors():
    def refused(brokers, rf):
        return error_of(lambda: place_replicas(brokers, 1, rf, random.Random(1)))

    assert refused([(1, None)], 2) == ErrorCode.INVALID_REPLICATION_FACTOR
    assert refused([(1, None)], 0) == ErrorCode.INVALID_REPLICATION_FACTOR
    assert refused([], 1) == ErrorCode.INVALID_REPLICATION_FACTOR


def test_create_topic_places_rack_aware_on_unfenced_brokers_only():
    cluster = cluster_of(1, 2, 3, 4, racks={1: "a", 2: "a", 3: "b", 4: "b"})
    cluster.commit(cluster.controller.fence_broker(4))
    topic = cluster.create_topic("t", 6, 2)
    for p in topic.partitions.values():
        assert 4 not in p.replicas and {cluster.image.brokers[b].rack for b in p.replicas} == {"a", "b"}
        assert p.isr == p.replicas and p.leader == p.replicas[0]


# ------------------------------------------------------------------------------------------- elections


def test_preferred_election():
    cluster = cluster_of(1, 2, 3)
    cluster.create_topic("t", 2, 3, assignments={0: [1, 2, 3], 1: [2, 3, 1]})
    assert cluster.elect(ElectionType.PREFERRED, {"t": [0]}) == {("t", 0): ErrorCode.ELECTION_NOT_NEEDED}
    cluster.commit(cluster.controller.fence_broker(1))
    assert cluster.partition("t", 0).leader == 2
    assert cluster.elect(ElectionType.PREFERRED, {"t": [0]}) == {("t", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}
    cluster.register(1, 10, incarnation=uuid.UUID(int=3))
    cluster.heartbeat(1, 10)
    assert cluster.partition("t", 0).leader == 2  # unfenced, but not yet in the ISR
    assert cluster.elect(ElectionType.PREFERRED, {"t": [0]}) == {("t", 0): ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE}
    cluster.alter_partition("t", 0, [2, 3, 1])
    epoch = cluster.partition("t", 0).leader_epoch
    results = cluster.elect(ElectionType.PREFERRED, {"t": [0, 1, 7], "nope": [0]})
    assert results == {
        ("t", 0): ErrorCode.NONE, ("t", 1): ErrorCode.ELECTION_NOT_NEEDED,
        ("t", 7): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert cluster.partition("t", 0).leader == 1 and cluster.partition("t", 0).leader_epoch == epoch + 1
    # All partitions: the ones that need no election are left out.
    assert cluster.elect(ElectionType.PREFERRED, None) == {}


def test_unclean_election_type():
    cluster = cluster_of(1, 2)
    cluster.create_topic("t", 1, 2, assignments={0: [1, 2]})
    assert cluster.elect(ElectionType.UNCLEAN, {"t": [0]}) == {("t", 0): ErrorCode.ELECTION_NOT_NEEDED}
    cluster.alter_partition("t", 0, [1])
    cluster.commit(cluster.controller.fence_broker(1))
    # ElectLeaders UNCLEAN is the operator's explicit choice: it needs no config.
    assert cluster.elect(ElectionType.UNCLEAN, {"t": [0]}) == {("t", 0): ErrorCode.NONE}
    p = cluster.partition("t")
    assert p.leader == 2 and p.isr == (2,) and p.leader_recovery_state == 1


def test_unknown_election_type():
    cluster = cluster_of(1)
    assert error_of(lambda: cluster.elect(5, None)) == ErrorCode.INVALID_REQUEST


def test_auto_leader_rebalance():
    cluster = cluster_of(1, 2, leader_imbalance_check_interval_ms=1000)
    cluster.create_topic("t", 2, 2, assignments={0: [1, 2], 1: [2, 1]})
    cluster.commit(cluster.controller.fence_broker(1))
    cluster.register(1, 0, incarnation=uuid.UUID(int=8))
    cluster.heartbeat(1, 0)
    cluster.alter_partition("t", 0, [2, 1])
    assert cluster.partition("t", 0).leader == 2
    assert cluster.commit(cluster.controller.maybe_balance_partition_leaders(0))
    assert cluster.partition("t", 0).leader == 1 and cluster.partition("t", 1).leader == 2
    # Not before the interval has passed again.
    cluster.commit(cluster.controller.fence_broker(1))
    cluster.register(1, 0, incarnation=uuid.UUID(int=9))
    cluster.heartbeat(1, 0)
    cluster.alter_partition("t", 0, [2, 1])
    assert cluster.controller.maybe_balance_partition_leaders(999) == []
    assert cluster.controller.next_deadline_ms() == 1000
    assert cluster.commit(cluster.controller.maybe_balance_partition_leaders(1000))
    # Disabled cluster-wide by a dynamic config.
    cluster.commit(cluster.controller.fence_broker(1))
    cluster.register(1, 0, incarnation=uuid.UUID(int=10))
    cluster.heartbeat(1, 0)
    cluster.alter_partition("t", 0, [2, 1])
    cluster.commit(cluster.controller.alter_configs(
        ConfigResourceType.BROKER, "", {"auto.leader.rebalance.enable": "false"}
    ))
    assert cluster.controller.maybe_balance_partition_leaders(5000) == []


# ------------------------------------------------------------------------------------------- reassignment


def test_reassignment_adds_then_completes_when_the_isr_catches_up():
    cluster = cluster_of(1, 2, 3, 4)
    cluster.create_topic("t", 1, 2, assignments={0: [1, 2]})
    assert cluster.reassign({("t", 0): [3, 1]}) == {("t", 0): ErrorCode.NONE}
    p = cluster.partition("t")
    assert p.replicas == (3, 1, 2) and p.adding_replicas == (3,) and p.removing_replicas == (2,)
    assert p.leader == 1 and p.leader_epoch == 0  # nothing left the replicas yet
    assert cluster.list_reassignments() == {("t", 0): ([3, 1, 2], [3], [2])}
    assert cluster.list_reassignments({"t": [0, 5], "u": [0]}) == {("t", 0): ([3, 1, 2], [3], [2])}
    result = cluster.alter_partition("t", 0, [1, 2, 3])
    p = cluster.partition("t")
    assert result.error_code == 0 and p.replicas == (3, 1) and p.isr == (1, 3)
    assert p.adding_replicas == () and p.removing_replicas == () and p.leader == 1 and p.leader_epoch == 1
    assert cluster.list_reassignments() == {}


def test_reassignment_that_removes_the_leader_moves_it_and_answers_new_leader_elected():
    cluster = cluster_of(1, 2, 3)
    cluster.create_topic("t", 1, 2, assignments={0: [1, 2]})
    cluster.reassign({("t", 0): [2, 3]})
    result = cluster.alter_partition("t", 0, [1, 2, 3])
    assert result.error_code == ErrorCode.NEW_LEADER_ELECTED
    p = cluster.partition("t")
    assert p.replicas == (2, 3) and p.isr == (2, 3) and p.leader == 2 and p.leader_epoch == 1


def test_a_reordering_completes_at_once():
    cluster = cluster_of(1, 2)
    cluster.create_topic("t", 1, 2, assignments={0: [1, 2]})
    assert cluster.reassign({("t", 0): [2, 1]}) == {("t", 0): ErrorCode.NONE}
    p = cluster.partition("t")
    assert p.replicas == (2, 1) and p.adding_replicas == () and p.leader == 1


def test_cancel_a_reassignment():
    cluster = cluster_of(1, 2, 3, 4)
    cluster.create_topic("t", 1, 2, assignments={0: [1, 2]})
    assert cluster.reassign({("t", 0): None}) == {("t", 0): ErrorCode.NO_REASSIGNMENT_IN_PROGRESS}
    cluster.reassign({("t", 0): [3, 4]})
    cluster.alter_partition("t", 0, [1, 2, 3])
    assert cluster.reassign({("t", 0): None}) == {("t", 0): ErrorCode.NONE}
    p = cluster.partition("t")
    assert p.replicas == (1, 2) and p.isr == (1, 2) and p.adding_replicas == () and p.removing_replicas == ()


def test_reassignment_errors():
    cluster = cluster_of(1, 2, 3)
    cluster.commit(cluster.controller.fence_broker(3))
    cluster.create_topic("t", 1, 2, assignments={0: [1, 2]})
    results = cluster.reassign({("t", 0): [1, 1], ("t", 3): [1], ("u", 0): [1]})
    assert results == {
        ("t", 0): ErrorCode.INVALID_REPLICA_ASSIGNMENT, ("t", 3): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ("u", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert cluster.reassign({("t", 0): [3]}) == {("t", 0): ErrorCode.INVALID_REPLICA_ASSIGNMENT}  # only fenced
    assert cluster.reassign({("t", 0): [7]}) == {("t", 0): ErrorCode.INVALID_REPLICA_ASSIGNMENT}
    assert cluster.reassign({("t", 0): []}) == {("t", 0): ErrorCode.INVALID_REPLICA_ASSIGNMENT}
    assert cluster.reassign({("t", 0): [1]}, allow_replication_factor_change=False) == {
        ("t", 0): ErrorCode.INVALID_REPLICATION_FACTOR
    }


def test_cancelling_when_only_added_replicas_are_in_sync_needs_unclean_election():
    cluster = cluster_of(1, 2, 3)
    cluster.create_topic("t", 1, 1, assignments={0: [1]})
    cluster.reassign({("t", 0): [2]})
    cluster.alter_partition("t", 0, [1, 2])  # completes: replicas [2]
    cluster.reassign({("t", 0): [3]})
    # Stage one: replicas [3, 2]; the ISR holds only 2, which the cancel would keep: a clean cancel.
    assert cluster.reassign({("t", 0): None}) == {("t", 0): ErrorCode.NONE}
    assert cluster.partition("t").replicas == (2,)


# ------------------------------------------------------------------------------------------- records


def test_merge_partition_change_handles_every_field():
    p = PartitionImage(replicas=(1, 2), isr=(1, 2), leader=1, leader_epoch=4, partition_epoch=7)
    same = merge_partition_change(p, PartitionChangeRecord(partition_id=0, topic_id=uuid.UUID(int=9)))
    assert same == PartitionImage((1, 2), (1, 2), 1, 4, 8)
    changed = merge_partition_change(p, PartitionChangeRecord(
        partition_id=0, topic_id=uuid.UUID(int=9), isr=[2], leader=2, replicas=[2, 1, 3],
        removing_replicas=[1], adding_replicas=[3], leader_recovery_state=1,
    ))
    assert changed == PartitionImage((2, 1, 3), (2,), 2, 5, 8, (1,), (3,), 1)
    # Naming the same leader starts a new leader epoch; no leader is a leader too.
    assert merge_partition_change(p, PartitionChangeRecord(topic_id=uuid.UUID(int=9), leader=1)).leader_epoch == 5
    assert merge_partition_change(p, PartitionChangeRecord(topic_id=uuid.UUID(int=9), leader=-1)).leader == -1


def test_build_partition_change_never_empties_the_isr_and_is_none_when_nothing_changes():
    p = PartitionImage(replicas=(1, 2), isr=(1,), leader=1, leader_epoch=0, partition_epoch=0)
    topic_id = uuid.UUID(int=9)
    assert build_partition_change(p, topic_id, 0, lambda b: True) is None
    record = build_partition_change(p, topic_id, 0, lambda b: b != 1, target_isr=[])
    assert record.isr is None and record.leader == NO_LEADER
    record = build_partition_change(p, topic_id, 0, lambda b: b != 1, target_isr=[], election=Election.UNCLEAN)
    assert record.isr == [2] and record.leader == 2 and record.leader_recovery_state == 1


def test_replay_refuses_a_change_for_the_wrong_broker_epoch():
    cluster = cluster_of(1)
    bad = BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=12345, fenced=1)
    with pytest.raises(Exception):
        cluster.commit([bad])


def test_configs_records_are_config_records():
    cluster = cluster_of(1)
    set_unclean(cluster, None)
    assert isinstance(cluster.written[-1], ConfigRecord)
    assert cluster.image.broker_configs()["unclean.leader.election.enable"] == "true"
    assert CLUSTER_ID == cluster.image.cluster_id


# ------------------------------------------------------------------------------------------- a cluster of one


def test_the_bootstrapped_node_of_a_cluster_of_one_is_unfenced_and_has_no_session_to_expire():
    controller = Controller(rng=random.Random(4))
    records = controller.bootstrap(None, 1, [Endpoint("PLAINTEXT", "localhost", 9092)])
    image = replay_all(records)
    controller.advance(image, len(records))
    assert not image.brokers[1].fenced
    controller.advance(replay_all(controller.create_topic("t", 3, 1), image), len(records) + 4)
    assert controller.tick(10 * TIMEOUT_MS) == []  # no heartbeats, and no session to time out
    assert controller.next_deadline_ms() == 10 * TIMEOUT_MS + 300_000  # only the leader-balance check


def test_heartbeat_manager_sessions():
    heartbeats = BrokerHeartbeatManager(1000)
    heartbeats.touch(1, False, 5, 0)
    heartbeats.touch(2, False, 3, 100)
    heartbeats.touch(3, True, 0, 0)
    assert heartbeats.stale_brokers(1000) == [] and heartbeats.stale_brokers(1001) == [1]
    assert heartbeats.stale_brokers(5000) == [1, 2]  # longest silent first; fenced brokers are not stale
    assert heartbeats.next_expiry_ms() == 1001
    assert heartbeats.lowest_active_offset() == 3
    heartbeats.enter_controlled_shutdown(2, 9)
    assert heartbeats.lowest_active_offset() == 5  # a broker shutting down is not active
    heartbeats.touch(2, True, 3, 200)
    assert not heartbeats.sessions[2].shutting_down  # fencing ends the controlled shutdown
    assert not heartbeats.has_valid_session(3, 0) and heartbeats.has_valid_session(1, 1000)
