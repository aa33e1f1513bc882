"""The leader's ISR decisions (Partition.proposed_isr) and ISR eligibility, on a manual clock.

A follower that has not caught up within replica.lag.time.max.ms leaves the ISR; one outside it that has
fetched up to the high watermark in this leadership joins it, unless it may not (fenced or shutting down).
One change at a time: a proposal is pending until the image's partition epoch moves. A caught-up follower
outside the ISR holds the high watermark only while it is eligible.
"""

from __future__ import annotations

import uuid

from odradek.protocol.records import build_batch
from odradek.replication.partition import FetchIsolation
from odradek.replication.replica_manager import FetchRequestPartition, ReplicaManager
from odradek.purgatory.timing_wheel import Timer
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.names import TopicPartition

NOW = 1_700_000_000_000
LAG_MS = 1000
TP = TopicPartition("t", 0)
TOPIC_ID = uuid.UUID(int=9)


def leader(tmp_path, isr=(1, 2, 3)):
    rm = ReplicaManager(node_id=1, timer=Timer(tick_ms=1, wheel_size=20, start_ms=NOW), replica_lag_time_max_ms=LAG_MS)
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=NOW)
    rm.apply_partition_state(TP, topic_id=TOPIC_ID, log=log, leader_id=1, leader_epoch=0, replicas=(1, 2, 3), isr=isr,
                             min_insync_replicas=1, now_ms=NOW, partition_epoch=0)
    return rm


def append(rm, n: int, now_ms: int = NOW) -> None:
    log = rm.get_partition(TP).log
    for i in range(n):
        log.append(bytearray(build_batch([(None, b"v%d" % i, None, now_ms)])), leader_epoch=0, now_ms=now_ms)


def fetch(rm, replica_id: int, offset: int, now_ms: int) -> None:
    rm.fetch_records([FetchRequestPartition(TP, offset, 1 << 20, 0, -1)], max_bytes=1 << 20, min_bytes=1,
                     max_wait_ms=0, isolation=FetchIsolation.LOG_END, now_ms=now_ms, respond=lambda _: None,
                     replica_id=replica_id)


def test_a_follower_lagging_longer_than_the_lag_time_leaves_the_isr(tmp_path):
    rm = leader(tmp_path)
    partition = rm.get_partition(TP)
    append(rm, 3)
    fetch(rm, 2, 3, NOW + 10)  # follower 2 is at the end; 3 never fetches
    assert partition.proposed_isr(NOW + LAG_MS) is None  # within the lag time
    assert partition.proposed_isr(NOW + LAG_MS + 1) == (1, 2)
    assert rm.proposed_isr_changes(NOW + LAG_MS + 1) == [(partition, (1, 2))]


def test_one_change_at_a_time_until_the_image_moves(tmp_path):
    rm = leader(tmp_path)
    partition = rm.get_partition(TP)
    append(rm, 3)
    fetch(rm, 2, 3, NOW + 10)
    partition.pending_isr = partition.proposed_isr(NOW + 2 * LAG_MS)
    assert partition.proposed_isr(NOW + 2 * LAG_MS) is None and rm.proposed_isr_changes(NOW + 2 * LAG_MS) == []
    rm.apply_partition_state(TP, topic_id=TOPIC_ID, log=partition.log, leader_id=1, leader_epoch=0, replicas=(1, 2, 3),
                             isr=(1, 2), min_insync_replicas=1, now_ms=NOW + 2 * LAG_MS, partition_epoch=1)
    assert partition.pending_isr is None and partition.isr == (1, 2)
    assert partition.proposed_isr(NOW + 2 * LAG_MS) is None


def test_a_follower_that_reaches_the_high_watermark_joins_the_isr(tmp_path):
    rm = leader(tmp_path, isr=(1, 2))
    partition = rm.get_partition(TP)
    append(rm, 3)
    fetch(rm, 2, 3, NOW + 1)
    fetch(rm, 2, 3, NOW + 2)
    assert partition.high_watermark == 3
    fetch(rm, 3, 1, NOW + 3)
    assert partition.proposed_isr(NOW + 3) is None  # behind the HW
    fetch(rm, 3, 3, NOW + 4)
    assert partition.proposed_isr(NOW + 4) == (1, 2, 3)
    rm.set_ineligible_replicas({3}, NOW + 4)  # fenced, or shutting down: may not join
    assert partition.proposed_isr(NOW + 4) is None


def test_a_follower_never_seen_in_this_leadership_does_not_join(tmp_path):
    rm = leader(tmp_path, isr=(1, 2))
    assert rm.get_partition(TP).proposed_isr(NOW + 5) is None  # 3 is at 0 = the HW, but has not fetched


def test_no_proposals_from_a_follower(tmp_path):
    rm = leader(tmp_path)
    partition = rm.get_partition(TP)
    rm.apply_partition_state(TP, topic_id=TOPIC_ID, log=partition.log, leader_id=2, leader_epoch=1, replicas=(1, 2, 3),
                             isr=(2,), min_insync_replicas=1, now_ms=NOW, partition_epoch=1)
    assert partition.proposed_isr(NOW + 10 * LAG_MS) is None and rm.proposed_isr_changes(NOW + 10 * LAG_MS) == []


def test_an_ineligible_follower_no_longer_holds_the_high_watermark(tmp_path):
    # Follower 3 left the ISR but is caught up (it fetched a moment ago): it holds the HW so that it can
    # rejoin, until it becomes ineligible (its broker shuts down); then a waiting acks=all completes.
    rm = leader(tmp_path, isr=(1, 2))
    partition = rm.get_partition(TP)
    fetch(rm, 3, 0, NOW)
    fetch(rm, 2, 0, NOW)
    done = {}
    rm.append_records({TP: bytearray(build_batch([(None, b"x", None, NOW)]))}, required_acks=-1, timeout_ms=30_000,
                      now_ms=NOW + 1, respond=done.update)
    fetch(rm, 2, 1, NOW + 2)
    assert partition.high_watermark == 0 and done == {}  # held by 3, caught up within the lag time
    rm.set_ineligible_replicas({3}, NOW + 3)
    assert partition.high_watermark == 1 and done[TP].error_code == 0


def test_a_lost_lease_strands_only_partitions_whose_isr_needs_a_change(tmp_path):
    """No controller has answered for a session (the quorum is lost, or this broker is cut off): the leader
    keeps serving on its last metadata. acks=1 goes on; acks=all goes on while the ISR needs no change; once
    a follower in the ISR falls out of sync (the shrink needs the controller), the partition is stranded:
    its waiting acks=all appends fail with NOT_LEADER_OR_FOLLOWER (retriable) and new ones are refused so
    before the append. An answered heartbeat ends it."""
    from odradek.protocol.errors import ErrorCode

    rm = leader(tmp_path)
    tp_batch = lambda: {TP: bytearray(build_batch([(None, b"x", None, NOW)]))}  # noqa: E731
    codes = lambda answer: [r.error_code for r in answer.values()]  # noqa: E731
    waiting, answers = [], []
    rm.append_records(tp_batch(), required_acks=-1, timeout_ms=30_000, now_ms=NOW, respond=waiting.append)
    rm.set_lease_expired(True, NOW + 1)
    assert waiting == [] and rm.stranded == frozenset()  # followers 2 and 3 are within the lag time
    rm.append_records(tp_batch(), required_acks=1, timeout_ms=30_000, now_ms=NOW + 2, respond=answers.append)
    assert codes(answers[0]) == [0]

    rm.refresh_stranded(NOW + LAG_MS + 1)  # 2 and 3 have not caught up: the ISR needs a shrink
    assert rm.stranded == {TP}
    assert codes(waiting[0]) == [int(ErrorCode.NOT_LEADER_OR_FOLLOWER)]  # the waiting acks=all append
    rm.append_records(tp_batch(), required_acks=-1, timeout_ms=30_000, now_ms=NOW + LAG_MS + 2, respond=answers.append)
    assert codes(answers[1]) == [int(ErrorCode.NOT_LEADER_OR_FOLLOWER)]
    assert rm.get_partition(TP).log.log_end_offset == 2  # refused before the append
    rm.append_records(tp_batch(), required_acks=1, timeout_ms=30_000, now_ms=NOW + LAG_MS + 3, respond=answers.append)
    assert codes(answers[2]) == [0]  # acks=1 is the leader's log only: still taken

    rm.set_lease_expired(False, NOW + LAG_MS + 4)
    assert rm.stranded == frozenset()
    rm.append_records(tp_batch(), required_acks=-1, timeout_ms=30_000, now_ms=NOW + LAG_MS + 5, respond=answers.append)
    assert len(answers) == 3  # waits for the followers again, as any acks=all append


def test_a_lost_lease_keeps_acks_all_where_the_leader_is_the_whole_isr(tmp_path):
    """An ISR of the leader alone needs no change: acks=all is committed here as before, lease or not."""
    rm = leader(tmp_path, isr=(1,))
    rm.set_lease_expired(True, NOW + LAG_MS + 1)
    answers = []
    rm.append_records({TP: bytearray(build_batch([(None, b"x", None, NOW)]))}, required_acks=-1, timeout_ms=30_000,
                      now_ms=NOW + LAG_MS + 2, respond=answers.append)
    assert [r.error_code for r in answers[0].values()] == [0]


def test_a_coordinator_write_to_a_stranded_partition_is_refused_at_once(tmp_path):
    """A coordinator on a broker cut off from the controller (lease lost) whose partition's ISR needs a
    change can never commit a write there: the write is refused before the append with
    NOT_LEADER_OR_FOLLOWER, which the coordinators answer NOT_COORDINATOR (the client looks for the
    coordinator again) instead of holding the request for request.timeout.ms."""
    import pytest

    from odradek.broker.internal_topics import InternalTopicWriter
    from odradek.coordinator.group.group_coordinator import error_code_of
    from odradek.protocol.errors import ErrorCode
    from odradek.replication.errors import NotLeaderOrFollowerError

    rm = leader(tmp_path)
    writer = InternalTopicWriter(rm, TP.topic, enforce_min_isr=True)
    assert writer.append(0, [(b"k", b"v")], NOW) == 1  # waits for the followers, as any acks=all write
    rm.set_lease_expired(True, NOW + 1)
    rm.refresh_stranded(NOW + LAG_MS + 1)
    with pytest.raises(NotLeaderOrFollowerError) as refused:
        writer.append(0, [(b"k", b"v2")], NOW + LAG_MS + 2)
    assert error_code_of(refused.value) == ErrorCode.NOT_COORDINATOR
    assert rm.get_partition(TP).log.log_end_offset == 1  # nothing written
