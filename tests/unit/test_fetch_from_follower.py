"""Fetch from the closest replica (KIP-392) in the replica manager, and the selectors themselves.

The leader answers a consumer of another rack (Fetch v11+, `client_metadata`) with a preferred read
replica when an in-sync follower of that rack holds the fetch offset, reading nothing; a follower serves
consumers up to its own high watermark, answers OFFSET_OUT_OF_RANGE past its log end, and refuses them once
it is out of the ISR (the client goes back to the leader). Consumers before v11 are served by leaders only.
"""

from __future__ import annotations

import uuid

import pytest

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch
from odradek.replication.partition import FetchIsolation
from odradek.replication.replica_manager import FetchRequestPartition, ReplicaManager
from odradek.replication.replica_selector import (
    LEADER_SELECTOR,
    RACK_AWARE_REPLICA_SELECTOR,
    ClientMetadata,
    LeaderSelector,
    RackAwareReplicaSelector,
    ReplicaView,
    replica_selector_for,
)
from odradek.purgatory.timing_wheel import Timer
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.names import TopicPartition

NOW = 1_700_000_000_000
TP = TopicPartition("t", 0)
RACKS = {1: "a", 2: "b", 3: "c"}
TOPIC_ID = uuid.UUID(int=7)


def manager(tmp_path, *, node_id: int, leader: int, isr=(1, 2, 3), selector=RACK_AWARE_REPLICA_SELECTOR):
    rm = ReplicaManager(node_id=node_id, timer=Timer(tick_ms=1, wheel_size=20, start_ms=NOW))
    rm.replica_selector = replica_selector_for(selector)
    rm.replica_rack = lambda broker_id, listener: (listener == "PLAINTEXT", RACKS.get(broker_id))
    log = Log.open(str(tmp_path / f"n{node_id}" / "t-0"), LogConfig(), now_ms=NOW)
    rm.apply_partition_state(TP, topic_id=TOPIC_ID, log=log, leader_id=leader, leader_epoch=0, replicas=(1, 2, 3),
                             isr=isr, min_insync_replicas=1, now_ms=NOW)
    return rm


def append(rm, n: int) -> None:
    partition = rm.get_partition(TP)
    for i in range(n):
        partition.log.append(bytearray(build_batch([(None, b"v%d" % i, None, NOW)])), leader_epoch=0, now_ms=NOW)


def fetch(rm, offset: int, *, replica_id: int = -1, rack: str | None = "b", max_wait_ms: int = 0, now_ms: int = NOW):
    got = {}
    client = ClientMetadata(rack_id=rack, listener_name="PLAINTEXT") if rack is not None else None
    isolation = FetchIsolation.LOG_END if replica_id >= 0 else FetchIsolation.HIGH_WATERMARK
    rm.fetch_records([FetchRequestPartition(TP, offset, 1 << 20)], max_bytes=1 << 20, min_bytes=1,
                     max_wait_ms=max_wait_ms, isolation=isolation, now_ms=now_ms, respond=got.update,
                     replica_id=replica_id, client_metadata=client if replica_id < 0 else None)
    return got.get(TP)


def test_the_leader_points_a_consumer_of_another_rack_to_the_in_sync_follower_of_its_rack(tmp_path):
    leader = manager(tmp_path, node_id=1, leader=1)
    append(leader, 3)
    for follower in (2, 3):
        fetch(leader, 3, replica_id=follower)
    assert leader.get_partition(TP).high_watermark == 3
    answer = fetch(leader, 0, rack="b")
    assert answer.preferred_read_replica == 2 and answer.size == 0 and answer.high_watermark == 3
    assert leader.preferred_replica_answers == 1
    # In the leader's rack, without a rack, or in a rack with no replica: the leader serves.
    for rack in ("a", "", "z"):
        served = fetch(leader, 0, rack=rack)
        assert served.preferred_read_replica == -1 and served.size > 0
    # A consumer before Fetch v11 (no client metadata) is never redirected.
    assert fetch(leader, 0, rack=None).preferred_read_replica == -1


def test_no_selector_or_the_leader_selector_keeps_consumers_on_the_leader(tmp_path):
    for selector in (None, LEADER_SELECTOR):
        leader = manager(tmp_path / str(selector), node_id=1, leader=1, selector=selector)
        append(leader, 2)
        fetch(leader, 2, replica_id=2)
        fetch(leader, 2, replica_id=3)
        assert fetch(leader, 0, rack="b").preferred_read_replica == -1


def test_a_follower_out_of_the_isr_or_without_the_offset_is_not_preferred(tmp_path):
    leader = manager(tmp_path, node_id=1, leader=1, isr=(1, 3))
    append(leader, 3)
    fetch(leader, 3, replica_id=3)
    fetch(leader, 3, replica_id=2)  # caught up, but not in the ISR (the image's word)
    assert fetch(leader, 0, rack="b").preferred_read_replica == -1
    leader = manager(tmp_path / "lag", node_id=1, leader=1)
    append(leader, 3)
    fetch(leader, 1, replica_id=2)  # in the ISR, holds offsets 0..0
    fetch(leader, 3, replica_id=3)
    assert fetch(leader, 0, rack="b").preferred_read_replica == 2
    assert fetch(leader, 2, rack="b").preferred_read_replica == -1  # 2 has not got offset 2 yet


def test_a_follower_serves_consumers_up_to_its_high_watermark(tmp_path):
    follower = manager(tmp_path, node_id=2, leader=1)
    append(follower, 4)  # replicated here; the leader has said the high watermark is 2
    partition = follower.get_partition(TP)
    partition.update_follower_high_watermark(2)
    served = fetch(follower, 0, rack="b")
    assert served.error_code == 0 and served.high_watermark == 2 and served.size > 0
    assert follower.follower_consumer_reads == 1
    batches_read = served.records
    assert sum(r[2] for r in batches_read) == served.size
    # Between its high watermark and its log end: nothing yet, no error.
    beyond = fetch(follower, 3, rack="b")
    assert beyond.error_code == 0 and beyond.size == 0
    # Past its log end: OFFSET_OUT_OF_RANGE, which sends the client back to the leader.
    assert fetch(follower, 9, rack="b").error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    # A consumer before v11 is refused by a follower, as Kafka does.
    assert fetch(follower, 0, rack=None).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_consumer_waiting_on_a_follower_is_answered_when_its_high_watermark_moves(tmp_path):
    follower = manager(tmp_path, node_id=2, leader=1)
    append(follower, 3)
    partition = follower.get_partition(TP)
    partition.update_follower_high_watermark(1)
    got = {}
    follower.fetch_records([FetchRequestPartition(TP, 1, 1 << 20)], max_bytes=1 << 20, min_bytes=1, max_wait_ms=5000,
                           isolation=FetchIsolation.HIGH_WATERMARK, now_ms=NOW, respond=got.update,
                           client_metadata=ClientMetadata(rack_id="b", listener_name="PLAINTEXT"))
    assert not got  # parked: nothing below the high watermark from offset 1
    partition.update_follower_high_watermark(3)
    assert follower.follower_high_watermarks_moved([TP]) == 1
    assert got[TP].error_code == 0 and got[TP].size > 0 and got[TP].high_watermark == 3


def test_a_follower_out_of_the_isr_sends_consumers_back_to_the_leader(tmp_path):
    follower = manager(tmp_path, node_id=2, leader=1, isr=(1, 3))
    append(follower, 2)
    follower.get_partition(TP).update_follower_high_watermark(2)
    assert fetch(follower, 0, rack="b").error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    leaderless = manager(tmp_path / "x", node_id=2, leader=-1, isr=(2,))
    assert fetch(leaderless, 0, rack="b").error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_follower_the_leader_sees_lagging_or_leaving_the_isr_is_no_longer_preferred(tmp_path):
    """The follower refuses consumers once the image drops it from the ISR, which may reach it before the
    leader: the leader must stop pointing consumers there as soon as it sees the follower fall behind (or
    has proposed dropping it), or a consumer bounces between the two (the intermittent failure of
    test_fetch_from_follower_inprocess: librdkafka lost track of the leader in that loop)."""
    leader = manager(tmp_path, node_id=1, leader=1)
    partition = leader.get_partition(TP)
    append(leader, 3)
    for follower in (2, 3):
        fetch(leader, 3, replica_id=follower)
    assert fetch(leader, 3, rack="b").preferred_read_replica == 2
    append(leader, 2)  # follower 2 stops fetching; 3 keeps up
    later = NOW + leader.replica_lag_time_max_ms + 1
    fetch(leader, 5, replica_id=3, now_ms=later)
    assert partition.isr == (1, 2, 3)  # the image still has 2 in the ISR ...
    assert partition.proposed_isr(later) == (1, 3)  # ... but the leader sees it lagging
    answer = fetch(leader, 0, rack="b", now_ms=later)  # follower 2 holds offset 0, but is behind
    assert answer.preferred_read_replica == -1 and answer.size > 0

    caught_up = manager(tmp_path / "pending", node_id=1, leader=1)
    append(caught_up, 3)
    for follower in (2, 3):
        fetch(caught_up, 3, replica_id=follower)
    caught_up.get_partition(TP).pending_isr = (1, 3)  # an AlterPartition dropping 2 is in flight
    assert fetch(caught_up, 0, rack="b").preferred_read_replica == -1
    caught_up.get_partition(TP).pending_isr = None
    assert fetch(caught_up, 0, rack="b").preferred_read_replica == 2
    caught_up.get_partition(TP)._is_replica_eligible = lambda replica_id: replica_id != 2  # fenced, or leaving
    assert fetch(caught_up, 0, rack="b").preferred_read_replica == -1


def test_rack_aware_selector_prefers_the_most_caught_up_replica_of_the_clients_rack():
    client = ClientMetadata(rack_id="b")
    leader = ReplicaView(1, "a", 10, 0)
    behind = ReplicaView(2, "b", 8, 0)
    ahead = ReplicaView(3, "b", 10, 50)
    fresher = ReplicaView(4, "b", 10, 10)
    selector = RackAwareReplicaSelector()
    assert selector.select(client, leader, [leader, behind, ahead]) == ahead
    assert selector.select(client, leader, [leader, behind, ahead, fresher]) == fresher
    assert selector.select(ClientMetadata(rack_id="a"), leader, [leader, ahead]) == leader
    assert selector.select(ClientMetadata(rack_id=""), leader, [leader, ahead]) == leader
    assert LeaderSelector().select(client, leader, [leader, ahead]) == leader


def test_replica_selector_class_accepts_kafkas_names_and_refuses_others():
    assert BrokerConfig.from_properties({}).replica_selector_class is None
    cfg = BrokerConfig.from_properties({"replica.selector.class": RACK_AWARE_REPLICA_SELECTOR})
    assert isinstance(replica_selector_for(cfg.replica_selector_class), RackAwareReplicaSelector)
    with pytest.raises(ConfigError, match="replica.selector.class"):
        BrokerConfig.from_properties({"replica.selector.class": "com.example.MySelector"})
