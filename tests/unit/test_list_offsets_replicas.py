"""ListOffsets per replica, as Kafka's Partition.fetchOffsetForTimestamp answers it.

Only the leader answers consumers; a follower answers the debugging replica id (-2), up to its log end. A
leader just elected, whose high watermark is below the start of its epoch, answers OFFSET_NOT_AVAILABLE
(LEADER_NOT_AVAILABLE before v5) for "latest". A partition in the image but not hosted here is
NOT_LEADER_OR_FOLLOWER; one whose log directory failed, KAFKA_STORAGE_ERROR.
"""

from __future__ import annotations

import types
import uuid

from odradek.broker.handlers.list_offsets import _list_one
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import ListOffsetsRequest
from odradek.protocol.records import build_batch
from odradek.replication.replica_manager import ReplicaManager
from odradek.purgatory.timing_wheel import Timer
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.names import TopicPartition

NOW = 1_700_000_000_000
TP = TopicPartition("t", 0)
LATEST, EARLIEST = -1, -2


def hosting(tmp_path, *, leader: int, node_id: int = 1, epoch: int = 0):
    rm = ReplicaManager(node_id=node_id, timer=Timer(tick_ms=1, wheel_size=20, start_ms=NOW))
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=NOW)
    for i in range(4):
        log.append(bytearray(build_batch([(None, b"v%d" % i, None, NOW + i)])), leader_epoch=0, now_ms=NOW)
    rm.apply_partition_state(TP, topic_id=uuid.UUID(int=3), log=log, leader_id=leader, leader_epoch=epoch,
                             replicas=(1, 2), isr=(1, 2), min_insync_replicas=1, now_ms=NOW)
    services = types.SimpleNamespace(data=rm, partition_leader=lambda topic, partition: (leader, epoch))
    return rm, services


def ask(services, timestamp: int, *, replica_id: int = -1, version: int = 7, isolation_level: int = 0, tp=TP):
    p = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(partition_index=tp.partition, timestamp=timestamp)
    return _list_one(services, tp, p, replica_id, isolation_level, version)


def test_a_follower_answers_only_the_debugging_replica_up_to_its_log_end(tmp_path):
    rm, services = hosting(tmp_path, leader=2)
    rm.get_partition(TP).update_follower_high_watermark(2)
    assert ask(services, LATEST).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert ask(services, EARLIEST).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    debug = ask(services, LATEST, replica_id=-2)
    assert (debug.error_code, debug.offset) == (0, 4)
    assert ask(services, NOW + 3, replica_id=-2).offset == 3  # found beyond the follower's HW: the log end bounds it


def test_the_leader_bounds_consumers_by_the_high_watermark(tmp_path):
    rm, services = hosting(tmp_path, leader=1)
    partition = rm.get_partition(TP)
    partition.update_follower_fetch_state(2, 3, NOW)
    assert partition.high_watermark == 3
    # The epoch began at offset 0 (its first batch), below the HW: offsets are available.
    assert (ask(services, LATEST).offset, ask(services, LATEST, replica_id=1).offset) == (3, 4)
    assert ask(services, NOW + 3).offset == -1  # past the HW: not found yet, no error
    assert ask(services, NOW + 2).offset == 2


def test_a_new_leader_whose_high_watermark_lags_its_epoch_start_answers_offset_not_available(tmp_path):
    rm, services = hosting(tmp_path, leader=2)
    partition = rm.get_partition(TP)
    partition.update_follower_high_watermark(1)  # followed epoch 0 up to HW 1
    rm.apply_partition_state(TP, topic_id=uuid.UUID(int=3), log=partition.log, leader_id=1, leader_epoch=1,
                             replicas=(1, 2), isr=(1, 2), min_insync_replicas=1, now_ms=NOW)
    services.partition_leader = lambda topic, index: (1, 1)
    assert partition.high_watermark == 1 and partition.log_end_offset == 4
    assert ask(services, LATEST, version=5).error_code == ErrorCode.OFFSET_NOT_AVAILABLE
    assert ask(services, LATEST, version=4).error_code == ErrorCode.LEADER_NOT_AVAILABLE
    assert ask(services, NOW + 3, version=7).error_code == ErrorCode.OFFSET_NOT_AVAILABLE
    assert ask(services, EARLIEST, version=7).error_code == 0
    partition.update_follower_fetch_state(2, 4, NOW)  # the follower caught up: the HW reaches the epoch start
    assert ask(services, LATEST, version=7).offset == 4


def test_not_hosted_or_offline(tmp_path):
    rm, services = hosting(tmp_path, leader=1)
    other = TopicPartition("t", 1)
    assert ask(services, LATEST, tp=other).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    rm.take_offline(TP)
    assert ask(services, LATEST).error_code == ErrorCode.KAFKA_STORAGE_ERROR
    services.partition_leader = lambda topic, index: None
    assert ask(services, LATEST, tp=other).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
