"""A broker that no controller answers keeps serving on its last committed metadata, on a manual clock.

The broker lifecycle's rule (components.heartbeat_outcome over node.Membership and the ReplicaManager),
heartbeat after heartbeat failing for several sessions as when the controller quorum is lost: the broker
is not fenced by it, its image stays what was committed, Metadata still lists every registered broker and
names this broker leader of what it leads; acks=1 is taken, and acks=all while the ISR needs no change.
Then the quorum leader watch (broker/quorum.py) and the `odradek_quorum_*` figures it feeds.
"""

from __future__ import annotations

import types
import uuid

from odradek.broker.components import heartbeat_outcome, quorum_figures
from odradek.broker.handlers.metadata import broker_entries, topic_response
from odradek.broker.node import Membership
from odradek.broker.quorum import QuorumLeaderWatch, known_leader
from odradek.broker.services import BrokerServices
from odradek.metadata.image import BrokerRegistration, Endpoint, MetadataImage, PartitionImage, TopicImage
from odradek.metadata.publisher import MetadataPublisher
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch
from odradek.purgatory.timing_wheel import Timer
from odradek.raft import Role
from odradek.raft.state import FollowerState
from odradek.replication.replica_manager import ReplicaManager
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.names import TopicPartition

NOW = 1_700_000_000_000
SESSION_MS = 9000
HEARTBEAT_MS = 2000
LAG_MS = 30_000  # replica.lag.time.max.ms: longer than a session, as Kafka's defaults
TOPIC_ID = uuid.UUID(int=7)
TP = TopicPartition("t", 0)


def image() -> MetadataImage:
    brokers = {b: BrokerRegistration(b, uuid.UUID(int=b), 10 + b, (Endpoint("PLAINTEXT", "localhost", 9090 + b),),
                                     None, fenced=False, in_controlled_shutdown=False) for b in (1, 2, 3)}
    topic = TopicImage("t", TOPIC_ID, {0: PartitionImage(replicas=(1, 2, 3), isr=(1, 2, 3), leader=1, leader_epoch=4,
                                                         partition_epoch=4)})
    return MetadataImage(cluster_id="c", brokers=brokers, topics_by_id={TOPIC_ID: topic}, topics_by_name={"t": topic})


def broker_one(tmp_path) -> tuple[Membership, ReplicaManager, MetadataPublisher]:
    """Broker 1, registered and unfenced, leading t-0 (replicas 1, 2, 3, all in sync) in the image."""
    data = ReplicaManager(node_id=1, timer=Timer(tick_ms=1, wheel_size=20, start_ms=NOW), replica_lag_time_max_ms=LAG_MS)
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=NOW)
    data.apply_partition_state(TP, topic_id=TOPIC_ID, log=log, leader_id=1, leader_epoch=4, replicas=(1, 2, 3),
                               isr=(1, 2, 3), min_insync_replicas=1, now_ms=NOW, partition_epoch=4)
    publisher = MetadataPublisher()
    publisher.image = image()
    membership = Membership()
    membership.registered(11, NOW)
    membership.heard(fenced=False)
    return membership, data, publisher


def services_of(publisher: MetadataPublisher, data: ReplicaManager):
    """What the Metadata handler reads, the rest of BrokerServices left out."""
    stub = types.SimpleNamespace(node_id=1, metadata=publisher, data=data, is_internal_topic=lambda name: False)
    stub.live_brokers = lambda: BrokerServices.live_brokers(stub)  # type: ignore[arg-type]
    stub.endpoint = lambda broker_id, listener: BrokerServices.endpoint(stub, broker_id, listener)  # type: ignore[arg-type]
    return stub


def produce(data: ReplicaManager, acks: int, now: int) -> list:
    answers: list = []
    data.append_records({TP: bytearray(build_batch([(None, b"v", None, now)]))}, required_acks=acks, timeout_ms=30_000,
                        now_ms=now, respond=answers.append)
    return [r.error_code for answer in answers for r in answer.values()]


def test_heartbeats_unanswered_for_sessions_fence_nothing_and_keep_serving(tmp_path):
    membership, data, publisher = broker_one(tmp_path)
    committed = publisher.image
    outcomes = []
    now = NOW
    while now < NOW + 3 * SESSION_MS:  # the quorum is gone: every heartbeat fails
        now += HEARTBEAT_MS
        outcomes.append(heartbeat_outcome(membership, data, answered=False, now=now, session_timeout_ms=SESSION_MS))
    assert outcomes.count("lost") == 1 and outcomes.index("lost") == SESSION_MS // HEARTBEAT_MS  # once, past a session
    assert membership.lease_lost and not membership.fenced and membership.broker_epoch == 11
    assert publisher.image is committed  # nothing fenced, nothing dropped: the last committed image

    services = services_of(publisher, data)
    assert [b.node_id for b in broker_entries(services, "PLAINTEXT")] == [1, 2, 3]
    answer = topic_response(services, committed.topics_by_name["t"], 12, False)
    assert [(p.leader_id, p.error_code) for p in answer.partitions] == [(1, 0)]

    assert produce(data, 1, now) == [0]  # acks=1: the leader's log, as ever
    assert data.stranded == frozenset()  # followers within replica.lag.time.max.ms: the ISR needs no change yet
    assert membership.contact_age_ms(now) == now - NOW


def test_a_follower_out_of_sync_strands_the_partition_until_the_controller_answers(tmp_path):
    membership, data, publisher = broker_one(tmp_path)
    now = NOW
    while now <= NOW + LAG_MS:
        now += HEARTBEAT_MS
        heartbeat_outcome(membership, data, answered=False, now=now, session_timeout_ms=SESSION_MS)
    assert data.stranded == {TP}  # followers 2 and 3 silent past the lag time: the shrink needs the controller
    assert produce(data, -1, now) == [int(ErrorCode.NOT_LEADER_OR_FOLLOWER)]
    assert produce(data, 1, now) == [0]
    assert topic_response(services_of(publisher, data), publisher.image.topics_by_name["t"], 12, False).partitions[0].leader_id == 1

    assert heartbeat_outcome(membership, data, answered=True, now=now + 1, session_timeout_ms=SESSION_MS) == "regained"
    assert not membership.lease_lost and data.stranded == frozenset()
    assert heartbeat_outcome(membership, data, answered=True, now=now + 2, session_timeout_ms=SESSION_MS) is None


def test_the_quorum_leader_watch_reports_loss_and_return():
    watch = QuorumLeaderWatch(NOW)
    assert watch.observe(-1, 0, NOW) is None and not watch.leader_known
    assert watch.observe(2, 1, NOW + 10) == "elected"
    assert watch.observe(2, 1, NOW + 20) is None
    assert watch.observe(-1, 1, NOW + 2000) == "lost"  # the leader stopped answering
    assert (watch.leader_id, watch.last_leader_id) == (-1, 2)
    assert watch.observe(-1, 2, NOW + 3000) is None  # epochs go by, still no leader
    assert watch.seconds_without_leader(NOW + 7000) == 5.0 and watch.epoch == 2

    membership = Membership()
    membership.registered(11, NOW)
    figures = quorum_figures(types.SimpleNamespace(leader_watch=watch), membership, NOW + 7000)  # type: ignore[arg-type]
    assert figures == {"quorum_leader_known": 0, "quorum_leader_id": -1, "quorum_epoch": 2,
                       "quorum_seconds_without_leader": 5.0, "quorum_controller_contact_age_seconds": 7.0}

    assert watch.observe(1, 3, NOW + 8000) == "elected"
    assert watch.observe(3, 4, NOW + 9500) == "moved"


def test_known_leader_needs_an_answer_from_the_leader_followed():
    """A follower whose leader is silent goes prospective; losing the pre-vote round it goes back to
    following the same leader (KIP-996) without having heard from it: no leader is known for that."""
    state = FollowerState(epoch=1, leader_id=2, timeout_ms=NOW + 2000, next_fetch_ms=NOW)
    raft = types.SimpleNamespace(state=state, role=Role.FOLLOWER, leader_id=2)
    assert known_leader(raft) == -1  # type: ignore[arg-type]
    state.fetched(NOW + 5, 2000)
    assert known_leader(raft) == 2  # type: ignore[arg-type]
    raft.state, raft.role = types.SimpleNamespace(), Role.PROSPECTIVE
    assert known_leader(raft) == -1  # type: ignore[arg-type]
    raft.role, raft.leader_id = Role.LEADER, 1
    assert known_leader(raft) == 1  # type: ignore[arg-type]
