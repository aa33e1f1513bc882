"""Partition state: roles, follower positions, high watermark, acks=all checks, fetch snapshots."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.errors import ErrorCode
from odradek.replication.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from odradek.replication.partition import FetchIsolation, Partition, TopicPartition
from odradek.storage.errors import OffsetOutOfRangeError

TP = TopicPartition("orders", 0)
LAG_MS = 10_000


class FakeLog:
    def __init__(self, log_start_offset: int = 0, log_end_offset: int = 0) -> None:
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset

    def append(self, count: int) -> None:
        self.log_end_offset += count


def make_partition(log: FakeLog | None = None, *, local: int = 1, **kwargs) -> Partition:
    return Partition(
        TP,
        topic_id=uuid.UUID(int=7),
        log=log if log is not None else FakeLog(),
        local_broker_id=local,
        replica_lag_time_max_ms=LAG_MS,
        **kwargs,
    )


def leader_of_three(log: FakeLog, **kwargs) -> Partition:
    partition = make_partition(log, **kwargs)
    partition.make_leader(leader_epoch=5, replicas=[1, 2, 3], isr=[1, 2, 3], now_ms=0)
    return partition


ERRORS = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER: NotLeaderOrFollowerError,
    ErrorCode.NOT_ENOUGH_REPLICAS: NotEnoughReplicasError,
    ErrorCode.FENCED_LEADER_EPOCH: FencedLeaderEpochError,
    ErrorCode.UNKNOWN_LEADER_EPOCH: UnknownLeaderEpochError,
    ErrorCode.OFFSET_OUT_OF_RANGE: OffsetOutOfRangeError,
}


def assert_api_error(code: ErrorCode, call, *args, **kwargs) -> None:
    with pytest.raises(ERRORS[code]) as info:
        call(*args, **kwargs)
    assert info.value.error_code == code


def test_single_replica_high_watermark_follows_the_log_end() -> None:
    log = FakeLog()
    partition = make_partition(log)
    assert not partition.is_leader
    assert not partition.make_leader(leader_epoch=0, replicas=[1], isr=[1], now_ms=0)
    assert (partition.topic, partition.partition, partition.topic_id.int) == ("orders", 0, 7)
    assert partition.high_watermark == 0
    log.append(5)
    assert partition.maybe_advance_high_watermark(now_ms=1)
    assert partition.high_watermark == partition.log_end_offset == 5
    assert not partition.maybe_advance_high_watermark(now_ms=2)
    assert partition.last_stable_offset == 5


def test_high_watermark_is_the_smallest_isr_log_end_offset() -> None:
    log = FakeLog()
    partition = leader_of_three(log)
    log.append(10)
    assert not partition.maybe_advance_high_watermark(now_ms=1)
    assert partition.high_watermark == 0
    assert not partition.update_follower_fetch_state(2, 10, now_ms=2)
    assert partition.update_follower_fetch_state(3, 4, now_ms=3)
    assert partition.high_watermark == 4
    assert partition.update_follower_fetch_state(3, 10, now_ms=4)
    assert partition.high_watermark == 10


def test_high_watermark_never_moves_backwards() -> None:
    log = FakeLog()
    partition = leader_of_three(log)
    log.append(10)
    partition.update_follower_fetch_state(2, 10, now_ms=1)
    partition.update_follower_fetch_state(3, 10, now_ms=1)
    assert partition.high_watermark == 10
    assert not partition.update_follower_fetch_state(3, 6, now_ms=2)
    assert partition.high_watermark == 10


def test_new_leadership_waits_for_followers_to_fetch() -> None:
    log = FakeLog(log_end_offset=20)
    partition = make_partition(log, high_watermark=12)
    assert partition.high_watermark == 12
    assert not partition.make_leader(leader_epoch=1, replicas=[1, 2], isr=[1, 2], now_ms=0)
    assert partition.follower_state(2).log_end_offset == -1
    assert partition.high_watermark == 12
    assert partition.update_follower_fetch_state(2, 20, now_ms=1)
    assert partition.high_watermark == 20


def test_leader_epoch_bump_keeps_follower_positions() -> None:
    log = FakeLog()
    partition = leader_of_three(log)
    log.append(4)
    partition.update_follower_fetch_state(2, 4, now_ms=1)
    partition.update_follower_fetch_state(3, 2, now_ms=1)
    assert partition.high_watermark == 2
    assert partition.make_leader(leader_epoch=6, replicas=[1, 2, 3], isr=[1, 2], now_ms=LAG_MS * 3)
    assert partition.high_watermark == 4
    assert partition.follower_state(3).log_end_offset == 2


def test_caught_up_follower_outside_the_isr_holds_the_high_watermark() -> None:
    log = FakeLog()
    partition = make_partition(log)
    partition.make_leader(leader_epoch=0, replicas=[1, 2], isr=[1], now_ms=0)
    log.append(10)
    partition.update_follower_fetch_state(2, 10, now_ms=100)
    log.append(5)
    assert partition.update_follower_fetch_state(2, 12, now_ms=200)
    assert partition.high_watermark == 12
    assert partition.maybe_advance_high_watermark(now_ms=100 + LAG_MS + 1)
    assert partition.high_watermark == 15


def test_out_of_sync_replicas() -> None:
    log = FakeLog()
    partition = leader_of_three(log)
    log.append(10)
    partition.update_follower_fetch_state(2, 10, now_ms=5_000)
    partition.update_follower_fetch_state(3, 3, now_ms=5_000)
    assert partition.out_of_sync_replicas(now_ms=LAG_MS) == []
    assert partition.out_of_sync_replicas(now_ms=LAG_MS + 1) == [3]
    log.append(1)
    assert partition.out_of_sync_replicas(now_ms=5_000 + LAG_MS + 1) == [2, 3]


def test_follower_caught_up_to_the_end_seen_at_its_previous_fetch() -> None:
    log = FakeLog(log_end_offset=10)
    partition = leader_of_three(log)
    partition.update_follower_fetch_state(2, 10, now_ms=1_000)
    log.append(5)
    partition.update_follower_fetch_state(2, 10, now_ms=2_000)
    log.append(5)
    partition.update_follower_fetch_state(2, 15, now_ms=3_000)
    assert partition.follower_state(2).last_caught_up_time_ms == 2_000


def test_acks_all_needs_min_insync_replicas() -> None:
    log = FakeLog()
    partition = make_partition(log, min_insync_replicas=2)
    partition.make_leader(leader_epoch=0, replicas=[1, 2], isr=[1], now_ms=0)
    assert_api_error(ErrorCode.NOT_ENOUGH_REPLICAS, partition.check_append_as_leader, -1)
    partition.check_append_as_leader(1)
    partition.check_append_as_leader(0)
    partition.make_leader(leader_epoch=1, replicas=[1, 2], isr=[1, 2], now_ms=0)
    partition.check_append_as_leader(-1)


def test_check_enough_replicas_reach_offset() -> None:
    log = FakeLog()
    partition = make_partition(log, min_insync_replicas=2)
    partition.make_leader(leader_epoch=0, replicas=[1, 2], isr=[1, 2], now_ms=0)
    log.append(3)
    assert partition.check_enough_replicas_reach_offset(3) == (False, ErrorCode.NONE)
    partition.update_follower_fetch_state(2, 3, now_ms=1)
    assert partition.check_enough_replicas_reach_offset(3) == (True, ErrorCode.NONE)
    partition.make_leader(leader_epoch=1, replicas=[1, 2], isr=[1], now_ms=2)
    assert partition.check_enough_replicas_reach_offset(3) == (
        True,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    )
    partition.make_follower(leader_id=2, leader_epoch=2, replicas=[1, 2], isr=[2])
    assert partition.check_enough_replicas_reach_offset(3) == (False, ErrorCode.NOT_LEADER_OR_FOLLOWER)


def test_follower_role() -> None:
    log = FakeLog(log_end_offset=8)
    partition = make_partition(log, high_watermark=5)
    partition.make_follower(leader_id=2, leader_epoch=3, replicas=[1, 2], isr=[1, 2])
    assert not partition.is_leader and partition.leader_id == 2
    assert not partition.maybe_advance_high_watermark(now_ms=0)
    assert_api_error(ErrorCode.NOT_LEADER_OR_FOLLOWER, partition.check_append_as_leader, 1)
    assert_api_error(ErrorCode.NOT_LEADER_OR_FOLLOWER, partition.update_follower_fetch_state, 2, 8, 0)
    assert_api_error(ErrorCode.NOT_LEADER_OR_FOLLOWER, partition.fetch_offset_snapshot, 3)
    snapshot = partition.fetch_offset_snapshot(3, fetch_only_from_leader=False)
    assert (snapshot.high_watermark, snapshot.log_end_offset) == (5, 8)
    assert partition.out_of_sync_replicas(now_ms=0) == []


def test_fetch_offset_snapshot_and_leader_epochs() -> None:
    log = FakeLog(log_start_offset=2, log_end_offset=9)
    partition = make_partition(log, first_unstable_offset=lambda: 4)
    partition.make_leader(leader_epoch=5, replicas=[1, 2], isr=[1, 2], now_ms=0)
    partition.update_follower_fetch_state(2, 7, now_ms=1)
    snapshot = partition.fetch_offset_snapshot()
    assert (snapshot.log_start_offset, snapshot.log_end_offset) == (2, 9)
    assert (snapshot.high_watermark, snapshot.last_stable_offset) == (7, 4)
    assert snapshot.end_offset(FetchIsolation.LOG_END) == 9
    assert snapshot.end_offset(FetchIsolation.HIGH_WATERMARK) == 7
    assert snapshot.end_offset(FetchIsolation.TXN_COMMITTED) == 4
    partition.fetch_offset_snapshot(5)
    assert_api_error(ErrorCode.FENCED_LEADER_EPOCH, partition.fetch_offset_snapshot, 4)
    assert_api_error(ErrorCode.UNKNOWN_LEADER_EPOCH, partition.fetch_offset_snapshot, 6)


def test_last_stable_offset_hook() -> None:
    log = FakeLog(log_end_offset=10)
    first_unstable: list[int | None] = [None]
    partition = make_partition(log, first_unstable_offset=lambda: first_unstable[0])
    partition.make_leader(leader_epoch=0, replicas=[1], isr=[1], now_ms=0)
    assert partition.last_stable_offset == 10
    first_unstable[0] = 6
    assert partition.last_stable_offset == 6
    first_unstable[0] = 12
    assert partition.last_stable_offset == 10


def test_follower_fetch_errors() -> None:
    log = FakeLog(log_end_offset=5)
    partition = leader_of_three(log)
    assert_api_error(ErrorCode.NOT_LEADER_OR_FOLLOWER, partition.update_follower_fetch_state, 9, 5, 0)
    assert_api_error(ErrorCode.OFFSET_OUT_OF_RANGE, partition.update_follower_fetch_state, 2, 6, 0)


def test_assignment_validation() -> None:
    partition = make_partition()
    with pytest.raises(ValueError):
        partition.make_leader(leader_epoch=0, replicas=[2, 3], isr=[2], now_ms=0)
    with pytest.raises(ValueError):
        partition.make_leader(leader_epoch=0, replicas=[1, 2], isr=[1, 4], now_ms=0)
    with pytest.raises(ValueError):
        partition.make_follower(leader_id=1, leader_epoch=0, replicas=[1, 2], isr=[1])


def test_initial_high_watermark_is_clamped_to_the_log() -> None:
    assert make_partition(FakeLog(3, 9)).high_watermark == 3
    assert make_partition(FakeLog(3, 9), high_watermark=1).high_watermark == 3
    assert make_partition(FakeLog(3, 9), high_watermark=50).high_watermark == 9


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["append", "fetch2", "fetch3", "tick"]), st.integers(0, 20)),
        max_size=100,
    )
)
def test_high_watermark_invariants(events: list[tuple[str, int]]) -> None:
    log = FakeLog()
    partition = leader_of_three(log)
    follower_leo = {2: 0, 3: 0}
    now = 0
    previous = partition.high_watermark
    for kind, n in events:
        now += 1
        if kind == "append":
            log.append(n)
            partition.maybe_advance_high_watermark(now)
        elif kind == "tick":
            now += n * 1000
            partition.maybe_advance_high_watermark(now)
        else:
            replica = int(kind[-1])
            follower_leo[replica] = min(log.log_end_offset, follower_leo[replica] + n)
            partition.update_follower_fetch_state(replica, follower_leo[replica], now)
        assert previous <= partition.high_watermark <= log.log_end_offset
        assert partition.high_watermark <= min(follower_leo.values())
        previous = partition.high_watermark
