"""DeleteRecords per replica, as Kafka's: the leader moves its log start, then the answer waits until every
live replica's log start offset (sent in its fetches) has followed: the low watermark."""

from __future__ import annotations

import uuid

from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch
from odradek.replication.partition import FetchIsolation
from odradek.replication.replica_manager import FetchRequestPartition, ReplicaManager
from odradek.purgatory.timing_wheel import Timer
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.names import TopicPartition

NOW = 1_700_000_000_000
TP = TopicPartition("t", 0)


def leader(tmp_path, *, node_id: int = 1, leader_id: int = 1):
    timer = Timer(tick_ms=1, wheel_size=20, start_ms=NOW)
    rm = ReplicaManager(node_id=node_id, timer=timer)
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=NOW)
    for i in range(5):
        log.append(bytearray(build_batch([(None, b"v%d" % i, None, NOW)])), leader_epoch=0, now_ms=NOW)
    rm.apply_partition_state(TP, topic_id=uuid.UUID(int=4), log=log, leader_id=leader_id, leader_epoch=0,
                             replicas=(1, 2, 3), isr=(1, 2, 3), min_insync_replicas=1, now_ms=NOW)
    return rm, timer


def follower_fetch(rm, replica_id: int, offset: int, log_start_offset: int) -> None:
    rm.fetch_records([FetchRequestPartition(TP, offset, 1 << 20, log_start_offset=log_start_offset)], max_bytes=1 << 20,
                     min_bytes=1, max_wait_ms=0, isolation=FetchIsolation.LOG_END, now_ms=NOW, respond=lambda r: None,
                     replica_id=replica_id)


def delete(rm, offset: int, timeout_ms: int = 30_000):
    got = []
    rm.delete_records([(TP, offset)], timeout_ms=timeout_ms, now_ms=NOW, respond=got.extend)
    return got


def test_the_answer_waits_for_every_live_replicas_log_start(tmp_path):
    rm, _ = leader(tmp_path)
    for replica_id in (2, 3):
        follower_fetch(rm, replica_id, 5, 0)
    assert rm.get_partition(TP).high_watermark == 5
    got = delete(rm, 3)
    assert got == [] and rm.get_partition(TP).log_start_offset == 3  # the leader's moved; the answer waits
    follower_fetch(rm, 2, 5, 3)
    assert got == []
    follower_fetch(rm, 3, 5, 4)  # (a replica that went further is fine)
    assert got == [(0, 3)]


def test_a_replica_on_a_dead_broker_does_not_hold_it_and_a_silent_one_times_it_out(tmp_path):
    rm, timer = leader(tmp_path)
    for replica_id in (2, 3):
        follower_fetch(rm, replica_id, 5, 0)
    rm.is_broker_alive = lambda broker_id: broker_id != 3
    got = delete(rm, 2, timeout_ms=100)
    follower_fetch(rm, 2, 5, 2)
    assert got == [(0, 2)]
    rm.is_broker_alive = lambda broker_id: True
    late = delete(rm, 4, timeout_ms=100)
    timer.advance_clock(NOW + 200)
    assert late == [(ErrorCode.REQUEST_TIMED_OUT, -1)]


def test_errors_answer_at_once_and_losing_leadership_ends_the_wait(tmp_path):
    rm, _ = leader(tmp_path)
    assert delete(rm, 7) == [(ErrorCode.OFFSET_OUT_OF_RANGE, -1)]  # past the high watermark (0 here)
    for replica_id in (2, 3):
        follower_fetch(rm, replica_id, 5, 0)
    got = delete(rm, -1)  # -1: the high watermark
    assert got == [] and rm.get_partition(TP).log_start_offset == 5
    partition = rm.get_partition(TP)
    rm.apply_partition_state(TP, topic_id=uuid.UUID(int=4), log=partition.log, leader_id=2, leader_epoch=1,
                             replicas=(1, 2, 3), isr=(1, 2, 3), min_insync_replicas=1, now_ms=NOW)
    assert got == [(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)]
    assert delete(rm, 0) == [(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1)]  # a follower refuses
