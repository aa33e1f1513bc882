"""KIP-1166 on replicated partitions: a follower's Fetch v18 says the high watermark it knows, and the leader
does not leave it parked behind a higher one.

- a fetch whose follower knows less than the leader's high watermark is answered at once (not parked);
- a parked follower fetch is answered when the leader's high watermark passes the follower's;
- the fetch that itself advances the high watermark (the last in-sync follower catching up, which completes
  an acks=all produce) is answered with the new one, and with the deferred completion, only after the
  produce's answer (`complete_delayed_fetches`, which the broker runs once responses are written);
- a follower that does not say it (v17 and before) is parked as before.
"""

from __future__ import annotations

import uuid

from odradek.protocol.records import build_batch
from odradek.replication.partition import FetchIsolation
from odradek.protocol.fast_fetch import NO_HIGH_WATERMARK
from odradek.replication.replica_manager import FetchRequestPartition, ReplicaManager
from odradek.purgatory.timing_wheel import Timer
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.names import TopicPartition

NOW = 1_700_000_000_000
TP = TopicPartition("t", 0)


def leader(tmp_path, *, defer: bool = False) -> ReplicaManager:
    rm = ReplicaManager(node_id=1, timer=Timer(tick_ms=1, wheel_size=20, start_ms=NOW), defer_fetch_completion=defer)
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=NOW)
    rm.apply_partition_state(TP, topic_id=uuid.UUID(int=7), log=log, leader_id=1, leader_epoch=0, replicas=(1, 2, 3),
                             isr=(1, 2, 3), min_insync_replicas=2, now_ms=NOW)
    return rm


def produce(rm: ReplicaManager, answers: list) -> None:
    batch = bytearray(build_batch([(None, b"v", None, NOW)]))
    rm.append_records({TP: batch}, required_acks=-1, timeout_ms=30_000, now_ms=NOW,
                      respond=lambda results: answers.append(("produce", results[TP].error_code)))


def fetch(rm: ReplicaManager, replica: int, offset: int, hw: int, answers: list) -> None:
    rm.fetch_records([FetchRequestPartition(TP, offset, 1 << 20, high_watermark=hw)], max_bytes=1 << 20, min_bytes=1,
                     max_wait_ms=500, isolation=FetchIsolation.LOG_END, now_ms=NOW, replica_id=replica,
                     respond=lambda results: answers.append((replica, results[TP].high_watermark, results[TP].size)))


def test_a_follower_behind_the_leaders_high_watermark_is_answered_at_once(tmp_path):
    rm = leader(tmp_path)
    answers: list = []
    produce(rm, answers)
    fetch(rm, 2, 1, 0, answers)
    fetch(rm, 3, 1, 0, answers)  # the last in-sync follower: HW 0 -> 1, the produce completes
    assert ("produce", 0) in answers
    assert answers[-1] == (3, 1, 0)  # answered with the new high watermark, nothing parked
    assert (2, 1, 0) in answers  # the other follower's parked fetch, answered as the HW passed its 0
    answers.clear()
    fetch(rm, 2, 1, 0, answers)  # a fetch that still says 0: not parked
    assert answers == [(2, 1, 0)]
    fetch(rm, 2, 1, 1, answers)  # knows it all: parked
    assert answers == [(2, 1, 0)]
    assert rm.fetch_purgatory.num_delayed() == 1


def test_the_follower_that_advanced_the_high_watermark_is_answered_after_the_produce(tmp_path):
    rm = leader(tmp_path, defer=True)
    answers: list = []
    fetch(rm, 2, 0, 0, answers)
    fetch(rm, 3, 0, 0, answers)
    produce(rm, answers)
    rm.complete_delayed_fetches()  # the broker's turn after the produce was parked: both followers get the batch
    assert sorted(a[0] for a in answers) == [2, 3] and all(a[2] > 0 for a in answers)
    answers.clear()
    fetch(rm, 2, 1, 0, answers)
    fetch(rm, 3, 1, 0, answers)
    # The produce is answered by the fetch that advanced the high watermark; that follower's own answer
    # (and the other's, parked) waits for the deferred completion.
    assert answers == [("produce", 0)]
    rm.complete_delayed_fetches()
    assert sorted(answers[1:]) == [(2, 1, 0), (3, 1, 0)]
    assert rm.fetch_purgatory.num_delayed() == 0


def test_a_follower_that_does_not_say_its_high_watermark_is_parked_as_before(tmp_path):
    rm = leader(tmp_path)
    answers: list = []
    produce(rm, answers)
    fetch(rm, 2, 1, NO_HIGH_WATERMARK, answers)
    fetch(rm, 3, 1, NO_HIGH_WATERMARK, answers)
    assert answers == [("produce", 0)]  # both fetches parked until new data or their wait ends
    assert rm.fetch_purgatory.num_delayed() == 2
