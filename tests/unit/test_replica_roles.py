"""The replica manager hosts partitions as the metadata image says, and serves followers' fetches.

`apply_partition_state` makes a partition led here, followed, or leaderless, and is idempotent; a change
of role re-checks waiting requests. A follower's fetch (a replica id) reads to the log end, moves the
high watermark through the follower's position, and is told where its log diverges from the leader's
(KIP-320: the end offset of its last fetched epoch in the leader's epoch history).
"""

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


def manager(tmp_path, *, leader: int = 1, isr=(1, 2), epoch: int = 0):
    rm = ReplicaManager(node_id=1, timer=Timer(tick_ms=1, wheel_size=20, start_ms=NOW))
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=NOW)
    rm.apply_partition_state(TP, topic_id=uuid.UUID(int=5), log=log, leader_id=leader, leader_epoch=epoch,
                             replicas=(1, 2), isr=isr, min_insync_replicas=1, now_ms=NOW)
    return rm, log


def append(rm, n: int, epoch: int) -> None:
    partition = rm.get_partition(TP)
    for i in range(n):
        partition.log.append(bytearray(build_batch([(None, b"v%d" % i, None, NOW)])), leader_epoch=epoch, now_ms=NOW)


def follower_fetch(rm, offset: int, last_fetched_epoch: int = -1):
    got = {}
    rm.fetch_records([FetchRequestPartition(TP, offset, 1 << 20, -1, last_fetched_epoch)], max_bytes=1 << 20,
                     min_bytes=1, max_wait_ms=0, isolation=FetchIsolation.LOG_END, now_ms=NOW,
                     respond=got.update, replica_id=2)
    return got[TP]


def test_roles_follow_the_state_given_and_reapplying_changes_nothing(tmp_path):
    rm, log = manager(tmp_path)
    partition = rm.get_partition(TP)
    assert partition.is_leader and partition.leader_epoch == 0
    same = rm.apply_partition_state(TP, topic_id=uuid.UUID(int=5), log=log, leader_id=1, leader_epoch=0,
                                    replicas=(1, 2), isr=(1, 2), min_insync_replicas=1, now_ms=NOW)
    assert same is partition and partition.is_leader
    rm.apply_partition_state(TP, topic_id=uuid.UUID(int=5), log=log, leader_id=2, leader_epoch=1,
                             replicas=(1, 2), isr=(1, 2), min_insync_replicas=1, now_ms=NOW)
    assert (partition.is_leader, partition.leader_id, partition.leader_epoch) == (False, 2, 1)
    rm.apply_partition_state(TP, topic_id=uuid.UUID(int=5), log=log, leader_id=-1, leader_epoch=2,
                             replicas=(1, 2), isr=(2,), min_insync_replicas=1, now_ms=NOW)
    assert (partition.leader_id, partition.leader_epoch, partition.isr) == (None, 2, (2,))


def test_a_followers_position_moves_the_high_watermark(tmp_path):
    rm, _ = manager(tmp_path)
    append(rm, 3, epoch=0)
    partition = rm.get_partition(TP)
    assert partition.high_watermark == 0  # follower 2 of the ISR has nothing yet
    data = follower_fetch(rm, 0)
    assert data.error_code == 0 and data.size > 0 and data.high_watermark == 0
    follower_fetch(rm, 2)
    assert partition.high_watermark == 2
    follower_fetch(rm, 3)
    assert partition.high_watermark == 3


def test_a_follower_learns_where_its_log_diverges(tmp_path):
    rm, log = manager(tmp_path)
    append(rm, 2, epoch=0)  # offsets 0-1 in epoch 0
    log.assign_epoch_start_offset(3, 2)
    append(rm, 2, epoch=3)  # offsets 2-3 in epoch 3
    # A follower that took offsets 0-2 in epoch 0 (from a deposed leader): its epoch 0 ends at 2 here.
    diverged = follower_fetch(rm, 3, last_fetched_epoch=0)
    assert diverged.diverging_epoch == (0, 2) and not diverged.records
    # One in step (last fetched epoch 3, offset inside it) reads on.
    in_step = follower_fetch(rm, 3, last_fetched_epoch=3)
    assert in_step.diverging_epoch is None and in_step.size > 0


def test_only_replicas_may_fetch_as_followers(tmp_path):
    rm, _ = manager(tmp_path)
    got = {}
    rm.fetch_records([FetchRequestPartition(TP, 0, 1 << 20)], max_bytes=1 << 20, min_bytes=1, max_wait_ms=0,
                     isolation=FetchIsolation.LOG_END, now_ms=NOW, respond=got.update, replica_id=9)
    assert got[TP].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
