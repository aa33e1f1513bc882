"""The follower's fetch state (replication/fetcher_state.py), on real logs and a manual clock.

A leader's and a follower's replica managers, each with its own log, talk through `wire`: the follower's
Fetch request is encoded and decoded by the codec, served by the leader's `fetch_records` as the broker's
handler serves it (replica id, log end isolation, diverging epoch), and the answer goes back through the
codec too. The truncation and reset decisions are also checked as the pure functions they are.
"""

from __future__ import annotations

import uuid

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import FetchRequest, FetchResponse
from odradek.protocol.records import build_batch
from odradek.replication.fetcher_state import (
    FollowerFetcher,
    Reset,
    ResetKind,
    out_of_range_reset,
    retry_delay_ms,
    truncation_offset,
    whole_batches,
)
from odradek.replication.partition import FetchIsolation
from odradek.replication.replica_manager import AWAIT_FOLLOWER_MS, AWAITED_PARK_MS, FetchRequestPartition, ReplicaManager
from odradek.purgatory.timing_wheel import Timer
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.names import TopicPartition
from odradek.storage.segment import read_regions

NOW = 1_700_000_000_000
TP = TopicPartition("t", 0)
TOPIC_ID = uuid.UUID(int=7)
LEADER, FOLLOWER = 1, 2
BACKOFF_MS = 1000

PartitionData = FetchResponse.FetchableTopicResponse.PartitionData


# -- the pure decisions


def test_truncation_when_both_know_the_leaders_epoch():
    # The leader's epoch 3 ends at 10; this replica's epoch 3 ends at 14 (its log end): cut back to 10.
    assert truncation_offset(3, 10, (3, 14), 14) == (10, True)
    # Ours ends earlier than the leader's: keep ours.
    assert truncation_offset(3, 10, (3, 8), 12) == (8, True)


def test_truncation_when_this_replica_never_saw_the_leaders_epoch():
    # The leader answers epoch 2 ending at 10; our largest epoch at or below 2 is 1, ending at 6: an
    # intermediate truncation to 6, and the next fetch asks again with epoch 1.
    assert truncation_offset(2, 10, (1, 6), 12) == (6, False)


def test_truncation_with_no_epochs_or_an_unknown_end():
    assert truncation_offset(2, 10, (-1, -1), 12) == (10, True)  # we track no epoch at or below the leader's
    assert truncation_offset(2, 10, (-1, -1), 7) == (7, True)  # never past our own end
    assert truncation_offset(-1, 5, (-1, -1), 9) == (5, True)  # the leader names no epoch: its end offset
    assert truncation_offset(4, -1, (4, 9), 9) == (9, True)  # the leader knows nothing: keep what we have


def test_out_of_range_resets():
    # Behind the leader's log start: start over there.
    assert out_of_range_reset(3, 3, leader_log_start_offset=50, leader_high_watermark=80) == Reset(ResetKind.START_AT, 50)
    # Ahead of the leader (an unclean election): down to what the leader surely has.
    assert out_of_range_reset(90, 90, leader_log_start_offset=0, leader_high_watermark=60) == Reset(ResetKind.TRUNCATE_TO, 60)
    # Nothing to learn from the answer: ask again later.
    assert out_of_range_reset(10, 10, leader_log_start_offset=0, leader_high_watermark=20) is None


def test_a_partial_batch_at_the_end_of_a_response_is_left_out():
    one = bytes(build_batch([(None, b"a", None, NOW)]))
    two = bytes(build_batch([(None, b"b", None, NOW)]))
    assert bytes(whole_batches(one + two)) == one + two
    assert bytes(whole_batches(one + two[:20])) == one
    assert bytes(whole_batches(two[:5])) == b""


# -- a follower against a leader


def manager(tmp_path, node_id: int, leader_id: int, epoch: int = 0, isr=(LEADER, FOLLOWER)):
    rm = ReplicaManager(node_id=node_id, timer=Timer(tick_ms=1, wheel_size=20, start_ms=NOW))
    log = Log.open(str(tmp_path / f"node{node_id}" / "t-0"), LogConfig(), now_ms=NOW)
    rm.apply_partition_state(TP, topic_id=TOPIC_ID, log=log, leader_id=leader_id, leader_epoch=epoch,
                             replicas=(LEADER, FOLLOWER), isr=isr, min_insync_replicas=1, now_ms=NOW)
    return rm


def reassign(rm, leader_id: int, epoch: int, isr=(LEADER, FOLLOWER)) -> None:
    p = rm.get_partition(TP)
    rm.apply_partition_state(TP, topic_id=TOPIC_ID, log=p.log, leader_id=leader_id, leader_epoch=epoch,
                             replicas=(LEADER, FOLLOWER), isr=isr, min_insync_replicas=1, now_ms=NOW)


def append(rm, n: int, epoch: int, tag: bytes = b"v") -> None:
    log = rm.get_partition(TP).log
    for i in range(n):
        log.append(bytearray(build_batch([(None, tag + b"%d" % i, None, NOW)])), leader_epoch=epoch, now_ms=NOW)


def fetcher(follower_rm, *, max_bytes: int = 1 << 20) -> FollowerFetcher:
    f = FollowerFetcher(LEADER, node_id=FOLLOWER, get_partition=follower_rm.get_partition, max_bytes=max_bytes,
                        min_bytes=1, max_wait_ms=0, response_max_bytes=10 << 20, backoff_ms=BACKOFF_MS)
    partition = follower_rm.get_partition(TP)
    f.add_partition(TP, topic_id=TOPIC_ID, leader_epoch=partition.leader_epoch)
    return f


def wire(leader_rm, request: FetchRequest, now_ms: int, version: int = 17) -> FetchResponse:
    """The leader's side of one Fetch, as broker/handlers/fetch.py serves it, through the codec both ways."""
    request = FetchRequest.decode(request.encode(version), version)
    replica_id = request.replica_state.replica_id if version >= 15 else request.replica_id
    wanted = [
        FetchRequestPartition(TopicPartition(TP.topic, p.partition), p.fetch_offset, p.partition_max_bytes,
                              p.current_leader_epoch, p.last_fetched_epoch)
        for t in request.topics for p in t.partitions
    ]
    got = {}
    leader_rm.fetch_records(wanted, max_bytes=request.max_bytes, min_bytes=request.min_bytes, max_wait_ms=0,
                            isolation=FetchIsolation.LOG_END, now_ms=now_ms, respond=got.update, replica_id=replica_id)
    parts = []
    for tp, r in got.items():
        data = PartitionData(partition_index=tp.partition, error_code=r.error_code, high_watermark=r.high_watermark,
                             last_stable_offset=r.last_stable_offset, log_start_offset=r.log_start_offset,
                             aborted_transactions=None, records=read_regions(r.records) if r.records else b"")
        if r.diverging_epoch is not None:
            data.diverging_epoch = PartitionData.EpochEndOffset(epoch=r.diverging_epoch[0], end_offset=r.diverging_epoch[1])
        parts.append(data)
    response = FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[
        FetchResponse.FetchableTopicResponse(topic_id=TOPIC_ID, partitions=parts)])
    return FetchResponse.decode(response.encode(version), version)


def round_trip(f: FollowerFetcher, leader_rm, now_ms: int = NOW) -> int:
    built = f.build_request(now_ms, version=17, broker_epoch=5)
    assert built is not None
    request, sent = built
    return f.handle_response(sent, wire(leader_rm, request, now_ms), now_ms)


def whole(rm) -> bytes:
    log = rm.get_partition(TP).log
    return log.read_bytes(log.log_start_offset, 1 << 30) if log.log_end_offset > log.log_start_offset else b""


def test_the_request_names_the_replica_its_epochs_and_offsets(tmp_path):
    leader, follower = manager(tmp_path, LEADER, LEADER, epoch=4), manager(tmp_path, FOLLOWER, LEADER, epoch=4)
    f = fetcher(follower)
    request, sent = f.build_request(NOW, version=17, broker_epoch=9)
    assert (request.replica_state.replica_id, request.replica_state.replica_epoch) == (FOLLOWER, 9)
    (topic,) = request.topics
    (p,) = topic.partitions
    assert topic.topic_id == TOPIC_ID and (p.partition, p.fetch_offset, p.current_leader_epoch, p.last_fetched_epoch) == (0, 0, 4, -1)
    older, _ = f.build_request(NOW, version=12)
    assert older.replica_id == FOLLOWER  # before v15 the top-level field
    assert list(sent) == [TP] and leader.get_partition(TP).is_leader


def test_a_follower_catches_up_and_follows_the_high_watermark(tmp_path):
    leader, follower = manager(tmp_path, LEADER, LEADER), manager(tmp_path, FOLLOWER, LEADER)
    f = fetcher(follower, max_bytes=150)  # a few batches per fetch
    append(leader, 10, epoch=0)
    lp, fp = leader.get_partition(TP), follower.get_partition(TP)
    rounds = 0
    while fp.log_end_offset < lp.log_end_offset:
        assert round_trip(f, leader) > 0
        rounds += 1
        assert rounds < 20
        assert fp.high_watermark <= fp.log_end_offset
    assert rounds > 1
    assert whole(follower) == whole(leader)
    assert lp.high_watermark < 10  # the leader learns the follower's position from its next fetch
    round_trip(f, leader)
    assert lp.high_watermark == 10 and fp.high_watermark < 10  # answered with the HW from before it moved
    round_trip(f, leader)
    assert fp.high_watermark == 10
    assert follower.get_partition(TP).log.latest_epoch == 0 and f.states[TP].last_fetched_epoch == 0


def test_acks_all_completes_once_the_follower_has_fetched_past_it(tmp_path):
    leader, follower = manager(tmp_path, LEADER, LEADER), manager(tmp_path, FOLLOWER, LEADER)
    f = fetcher(follower)
    done = {}
    leader.append_records({TP: bytearray(build_batch([(None, b"x", None, NOW)]))}, required_acks=-1, timeout_ms=30_000,
                          now_ms=NOW, respond=done.update)
    assert done == {}
    round_trip(f, leader)  # gets the batch
    assert done == {}
    round_trip(f, leader)  # says it has it
    assert done[TP].error_code == 0 and done[TP].base_offset == 0


def test_a_follower_truncates_where_its_log_diverges_from_the_new_leaders(tmp_path):
    # Node 2 led epoch 0 and wrote offsets 0-5; node 1 only got 0-2 before it took over in epoch 1 and
    # wrote its own offsets 3-6. Node 2, now a follower, must lose its 3-5 and take node 1's.
    old = manager(tmp_path, FOLLOWER, FOLLOWER)
    new = manager(tmp_path, LEADER, FOLLOWER)
    append(old, 3, epoch=0, tag=b"common")
    f_new = FollowerFetcher(FOLLOWER, node_id=LEADER, get_partition=new.get_partition, max_bytes=1 << 20, min_bytes=1,
                            max_wait_ms=0, response_max_bytes=1 << 20, backoff_ms=BACKOFF_MS)
    f_new.add_partition(TP, topic_id=TOPIC_ID, leader_epoch=0)
    round_trip(f_new, old)
    append(old, 3, epoch=0, tag=b"lost")  # never replicated
    reassign(new, LEADER, 1)
    reassign(old, LEADER, 1)
    append(new, 4, epoch=1, tag=b"new")
    f = fetcher(old)
    assert f.states[TP].last_fetched_epoch == 0 and f.states[TP].fetch_offset == 6
    round_trip(f, new)  # diverging epoch 0 ends at 3: truncate to 3
    assert old.get_partition(TP).log_end_offset == 3 and f.states[TP].fetch_offset == 3
    round_trip(f, new)
    assert whole(old) == whole(new)
    round_trip(f, new)  # tells the leader where it is: the leader's HW moves
    round_trip(f, new)  # and the answer carries it back
    assert old.get_partition(TP).high_watermark == new.get_partition(TP).high_watermark == 7


def test_an_intermediate_truncation_converges(tmp_path):
    # Both hold offsets 0-1 of epoch 0. The follower then has 2-3 in epoch 0 and 4-5 in epoch 2; the
    # leader has 2-3 in epoch 1 and 4-6 in epoch 3. The leader's answer to epoch 2 is "epoch 1 ends at
    # 4", an epoch the follower never saw: it cuts back to the end of its own epoch 0 (4) and asks again
    # with epoch 0, which ends at 2 on the leader.
    # (The leader's history is written before it leads epoch 3: becoming leader records its epoch's start.)
    leader, follower = manager(tmp_path, LEADER, FOLLOWER, epoch=3), manager(tmp_path, FOLLOWER, LEADER, epoch=3)
    for rm in (leader, follower):
        append(rm, 2, epoch=0, tag=b"common")
    append(follower, 2, epoch=0, tag=b"old")
    append(follower, 2, epoch=2, tag=b"stale")
    append(leader, 2, epoch=1, tag=b"one")
    append(leader, 3, epoch=3, tag=b"three")
    reassign(leader, LEADER, 3)
    f = fetcher(follower)
    flog = follower.get_partition(TP).log
    round_trip(f, leader)
    assert (flog.log_end_offset, f.states[TP].last_fetched_epoch) == (4, 0)  # intermediate
    round_trip(f, leader)
    assert (flog.log_end_offset, f.states[TP].last_fetched_epoch) == (2, 0)  # where the logs agree
    round_trip(f, leader)
    assert whole(follower) == whole(leader) and flog.leader_epoch_entries == leader.get_partition(TP).log.leader_epoch_entries


def test_behind_the_leaders_log_start_the_follower_starts_over_there(tmp_path):
    leader, follower = manager(tmp_path, LEADER, LEADER), manager(tmp_path, FOLLOWER, LEADER)
    append(leader, 5, epoch=0)
    leader.get_partition(TP).log.truncate_fully_and_start_at(40, now_ms=NOW)
    append(leader, 2, epoch=0)
    f = fetcher(follower)
    round_trip(f, leader)  # OFFSET_OUT_OF_RANGE at 0: start at 40
    assert follower.get_partition(TP).log.log_start_offset == 40 and f.states[TP].fetch_offset == 40
    round_trip(f, leader)
    assert follower.get_partition(TP).log_end_offset == 42 and whole(follower) == whole(leader)


def error_answer(sent, error, partition: int = 0) -> FetchResponse:
    return FetchResponse(error_code=0, session_id=0, responses=[FetchResponse.FetchableTopicResponse(
        topic_id=TOPIC_ID, partitions=[PartitionData(partition_index=partition, error_code=int(error), high_watermark=-1,
                                                     records=b"")])])


def test_another_error_backs_the_partition_off(tmp_path):
    follower = manager(tmp_path, FOLLOWER, LEADER)
    f = fetcher(follower)
    request, sent = f.build_request(NOW, version=17)
    f.handle_response(sent, error_answer(sent, ErrorCode.KAFKA_STORAGE_ERROR), NOW)
    assert f.build_request(NOW + BACKOFF_MS - 1, version=17) is None
    assert f.next_ready_ms() == NOW + BACKOFF_MS
    assert f.build_request(NOW + BACKOFF_MS, version=17) is not None


def test_retry_delays_grow_from_ten_ms_to_the_backoff():
    assert [retry_delay_ms(n, 1000) for n in range(0, 10)] == [0, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]
    assert retry_delay_ms(1, 5) == 5  # a back-off below 10 ms is never exceeded
    assert retry_delay_ms(500, 1000) == 1000


@pytest.mark.parametrize("error", [ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                   ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.FENCED_LEADER_EPOCH,
                                   ErrorCode.UNKNOWN_LEADER_EPOCH])
def test_a_leader_behind_on_metadata_is_retried_soon_then_less_often(tmp_path, error):
    # The follower's image says node 1 leads the partition; node 1 has not applied that metadata yet.
    follower = manager(tmp_path, FOLLOWER, LEADER)
    f = fetcher(follower)
    now = NOW
    waits = []
    for _ in range(9):
        built = f.build_request(now, version=17)
        assert built is not None
        f.handle_response(built[1], error_answer(built[1], error), now)
        ready = f.next_ready_ms()
        assert f.build_request(ready - 1, version=17) is None
        waits.append(ready - now)
        now = ready
    assert waits == [10, 20, 40, 80, 160, 320, 640, 1000, 1000]
    assert f.states[TP].lag_errors == 9


def test_a_leader_that_catches_up_is_fetched_from_at_once_and_the_count_starts_over(tmp_path):
    leader, follower = manager(tmp_path, LEADER, LEADER), manager(tmp_path, FOLLOWER, LEADER)
    append(leader, 2, epoch=0)
    f = fetcher(follower)
    for n, now in enumerate((NOW, NOW + 10, NOW + 30), start=1):
        _, sent = f.build_request(now, version=17)
        f.handle_response(sent, error_answer(sent, ErrorCode.UNKNOWN_TOPIC_ID), now)
        assert f.states[TP].lag_errors == n
    assert f.next_ready_ms() == NOW + 70
    assert round_trip(f, leader, NOW + 70) > 0  # the leader has it now: data, and the count is reset
    assert f.states[TP].lag_errors == 0
    _, sent = f.build_request(NOW + 71, version=17)
    f.handle_response(sent, error_answer(sent, ErrorCode.NOT_LEADER_OR_FOLLOWER), NOW + 71)
    assert f.next_ready_ms() == NOW + 81  # a fresh first retry


def test_a_failed_request_backs_off_everything_it_carried(tmp_path):
    follower = manager(tmp_path, FOLLOWER, LEADER)
    f = fetcher(follower)
    _, sent = f.build_request(NOW, version=17)
    f.handle_failure(sent, NOW)
    assert f.build_request(NOW + 1, version=17) is None and f.next_ready_ms() == NOW + BACKOFF_MS


def test_an_answer_to_a_partition_re_added_meanwhile_is_ignored(tmp_path):
    leader, follower = manager(tmp_path, LEADER, LEADER), manager(tmp_path, FOLLOWER, LEADER)
    append(leader, 3, epoch=0)
    f = fetcher(follower)
    request, sent = f.build_request(NOW, version=17)
    response = wire(leader, request, NOW)
    reassign(follower, LEADER, 1)
    reassign(leader, LEADER, 1)
    assert f.add_partition(TP, topic_id=TOPIC_ID, leader_epoch=1)  # a new epoch: a new state
    assert not f.add_partition(TP, topic_id=TOPIC_ID, leader_epoch=1)  # the same again: nothing changes
    assert f.handle_response(sent, response, NOW) == 0
    assert follower.get_partition(TP).log_end_offset == 0
    assert round_trip(f, leader) > 0 and follower.get_partition(TP).log_end_offset == 3


def test_producer_state_is_rebuilt_from_replicated_batches(tmp_path):
    leader, follower = manager(tmp_path, LEADER, LEADER), manager(tmp_path, FOLLOWER, LEADER)
    log = leader.get_partition(TP).log
    for seq in range(3):
        log.append(bytearray(build_batch([(None, b"p%d" % seq, None, NOW)], producer_id=77, producer_epoch=0,
                                         base_sequence=seq)), leader_epoch=0, now_ms=NOW)
    f = fetcher(follower)
    round_trip(f, leader)
    assert follower.get_partition(TP).log.producer_last_offsets() == log.producer_last_offsets() == {77: 2}


def test_the_followers_log_start_follows_the_leaders(tmp_path):
    leader, follower = manager(tmp_path, LEADER, LEADER), manager(tmp_path, FOLLOWER, LEADER)
    append(leader, 6, epoch=0)
    f = fetcher(follower)
    for _ in range(3):
        round_trip(f, leader)
    assert follower.get_partition(TP).high_watermark == 6
    leader.get_partition(TP).log.delete_records_before(4, now_ms=NOW)  # DeleteRecords on the leader
    round_trip(f, leader)
    assert follower.get_partition(TP).log.log_start_offset == 4


# -- the leader's side of a new partition: parked follower fetches that do not carry it


TP2 = TopicPartition("t", 1)


def lead_new_partition(rm, tmp_path, tp: TopicPartition = TP2, replicas=(LEADER, FOLLOWER), epoch: int = 0, now_ms: int = NOW):
    log = Log.open(str(tmp_path / f"node{rm.node_id}" / f"{tp.topic}-{tp.partition}"), LogConfig(), now_ms=now_ms)
    rm.apply_partition_state(tp, topic_id=TOPIC_ID, log=log, leader_id=LEADER, leader_epoch=epoch, replicas=replicas,
                             isr=replicas, min_insync_replicas=1, now_ms=now_ms)


def park(rm, tps, *, replica_id: int = FOLLOWER, now_ms: int = NOW, max_wait_ms: int = 500) -> dict:
    """A follower fetch of `tps` (each at its log end, epoch 0), up to `max_wait_ms`; the dict fills in on the answer."""
    got: dict = {}
    wanted = [FetchRequestPartition(tp, rm.get_partition(tp).log_end_offset, 1 << 20, 0, -1) for tp in tps]
    rm.fetch_records(wanted, max_bytes=1 << 20, min_bytes=1, max_wait_ms=max_wait_ms, isolation=FetchIsolation.LOG_END,
                     now_ms=now_ms, respond=got.update, replica_id=replica_id)
    return got


def test_a_parked_follower_fetch_is_answered_when_the_leader_gains_a_partition_it_lacks(tmp_path):
    leader = manager(tmp_path, LEADER, LEADER)
    got = park(leader, [TP])
    assert got == {}  # parked: nothing new
    lead_new_partition(leader, tmp_path)
    assert set(got) == {TP} and got[TP].error_code == 0 and got[TP].size == 0  # answered now, empty
    assert leader.follower_fetches_woken == 1


def test_a_follower_behind_on_metadata_is_parked_briefly_until_it_asks_for_the_partition(tmp_path):
    leader = manager(tmp_path, LEADER, LEADER)
    lead_new_partition(leader, tmp_path)  # no fetch parked: the follower is waited for
    got = park(leader, [TP], now_ms=NOW)  # its metadata does not have t-1 yet
    leader.timer.advance_clock(NOW + AWAITED_PARK_MS - 1)
    assert got == {}
    leader.timer.advance_clock(NOW + AWAITED_PARK_MS)
    assert set(got) == {TP}  # after 20 ms, not 500
    got = park(leader, [TP, TP2], now_ms=NOW + 30)  # it has learned: the usual wait again
    leader.timer.advance_clock(NOW + 30 + 499)
    assert got == {}
    got_next = park(leader, [TP], now_ms=NOW + 40, replica_id=FOLLOWER)  # (the partition was asked for: no longer awaited)
    leader.timer.advance_clock(NOW + 40 + 100)
    assert got_next == {}


def test_a_follower_that_never_asks_is_parked_as_usual_after_the_window(tmp_path):
    leader = manager(tmp_path, LEADER, LEADER)
    lead_new_partition(leader, tmp_path)
    later = NOW + AWAIT_FOLLOWER_MS
    leader.timer.advance_clock(later)
    got = park(leader, [TP], now_ms=later)
    leader.timer.advance_clock(later + 100)
    assert got == {}  # the full wait: 5 s passed without the follower asking


def test_fetches_of_other_brokers_and_fetches_carrying_the_partition_stay_parked(tmp_path):
    leader = manager(tmp_path, LEADER, LEADER)
    lead_new_partition(leader, tmp_path, TP2)
    carrying = park(leader, [TP, TP2])
    other = park(leader, [TP], replica_id=3)  # node 3 is no replica of t-1 (nor of t-0: answered at once)
    assert other and other[TP].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    tp3 = TopicPartition("t", 2)
    lead_new_partition(leader, tmp_path, tp3, replicas=(LEADER, 3))  # a partition follower 2 has no part in
    assert carrying == {} and leader.follower_fetches_woken == 0
    lead_new_partition(leader, tmp_path, TP2, epoch=1)  # a new epoch of t-1: the fetch at epoch 0 is fenced
    assert carrying[TP2].error_code == ErrorCode.FENCED_LEADER_EPOCH


def test_a_consumer_fetch_is_not_woken_by_a_new_leadership(tmp_path):
    leader = manager(tmp_path, LEADER, LEADER)
    got: dict = {}
    leader.fetch_records([FetchRequestPartition(TP, 0, 1 << 20, 0, -1)], max_bytes=1 << 20, min_bytes=1, max_wait_ms=500,
                         isolation=FetchIsolation.HIGH_WATERMARK, now_ms=NOW, respond=got.update)
    lead_new_partition(leader, tmp_path)
    assert got == {} and leader.follower_fetches_woken == 0
