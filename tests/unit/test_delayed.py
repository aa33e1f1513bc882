"""DelayedProduce and DelayedFetch through the purgatory, on a manual clock."""

from __future__ import annotations

import uuid

import pytest

from odradek.replication.delayed import (
    DelayedFetch,
    DelayedProduce,
    FetchPartitionStatus,
    ProducePartitionStatus,
)
from odradek.protocol.errors import ErrorCode
from odradek.replication.errors import ReplicationError
from odradek.replication.partition import FetchIsolation, Partition, TopicPartition
from odradek.purgatory.delayed_operation import DelayedOperationPurgatory
from odradek.purgatory.timing_wheel import Timer
from odradek.storage.errors import KafkaStorageError

A = TopicPartition("a", 0)
B = TopicPartition("b", 0)
BYTES_PER_RECORD = 10


class FakeLog:
    def __init__(self) -> None:
        self.log_start_offset = 0
        self.log_end_offset = 0

    def append(self, count: int) -> int:
        self.log_end_offset += count
        return self.log_end_offset


class Broker:
    """Just enough of a broker: partitions, purgatories, one timer, and the completion calls."""

    def __init__(self, replicas: tuple[int, ...] = (1,), min_insync_replicas: int = 1) -> None:
        self.timer = Timer(start_ms=0)
        self.produce_purgatory = DelayedOperationPurgatory("produce", self.timer)
        self.fetch_purgatory = DelayedOperationPurgatory("fetch", self.timer)
        self.logs: dict[TopicPartition, FakeLog] = {}
        self.partitions: dict[TopicPartition, Partition] = {}
        for tp in (A, B):
            self.logs[tp] = FakeLog()
            self.partitions[tp] = Partition(
                tp,
                topic_id=uuid.uuid4(),
                log=self.logs[tp],
                local_broker_id=1,
                min_insync_replicas=min_insync_replicas,
            )
            self.partitions[tp].make_leader(leader_epoch=0, replicas=replicas, isr=replicas, now_ms=0)

    def get_partition(self, tp: TopicPartition) -> Partition | None:
        return self.partitions.get(tp)

    def high_watermark_moved(self, tp: TopicPartition) -> None:
        self.produce_purgatory.check_and_complete(tp)
        self.fetch_purgatory.check_and_complete(tp)

    def append(self, tp: TopicPartition, count: int, now_ms: int) -> int:
        required_offset = self.logs[tp].append(count)
        self.fetch_purgatory.check_and_complete(tp)
        if self.partitions[tp].maybe_advance_high_watermark(now_ms):
            self.high_watermark_moved(tp)
        return required_offset

    def follower_fetch(self, tp: TopicPartition, replica_id: int, log_end_offset: int, now_ms: int) -> None:
        if self.partitions[tp].update_follower_fetch_state(replica_id, log_end_offset, now_ms):
            self.high_watermark_moved(tp)

    def produce(self, appends: dict[TopicPartition, int], now_ms: int, timeout_ms: int = 1000):
        responses: list[dict[TopicPartition, ErrorCode]] = []
        status = {}
        for tp, count in appends.items():
            try:
                self.partitions[tp].check_append_as_leader(-1)
            except ReplicationError as error:
                status[tp] = ProducePartitionStatus(required_offset=-1, error_code=error.error_code)
            else:
                status[tp] = ProducePartitionStatus(required_offset=self.append(tp, count, now_ms))
        op = DelayedProduce(
            timeout_ms,
            now_ms=now_ms,
            produce_status=status,
            get_partition=self.get_partition,
            response_callback=responses.append,
        )
        completed = self.produce_purgatory.try_complete_else_watch(op, list(appends))
        return op, completed, responses

    def fetch(self, statuses, *, min_bytes: int, now_ms: int, timeout_ms: int = 500, **kwargs):
        responses: list[int] = []
        op = DelayedFetch(
            timeout_ms,
            now_ms=now_ms,
            fetch_partitions=statuses,
            min_bytes=min_bytes,
            get_partition=self.get_partition,
            bytes_available=lambda partition, start, end: (end - start) * BYTES_PER_RECORD,
            respond=lambda: responses.append(now_ms),
            **kwargs,
        )
        completed = self.fetch_purgatory.try_complete_else_watch(op, op.watch_keys)
        return op, completed, responses


def test_produce_on_a_single_replica_completes_at_once() -> None:
    broker = Broker()
    op, completed, responses = broker.produce({A: 3, B: 2}, now_ms=0)
    assert completed and op.is_completed
    assert responses == [{A: ErrorCode.NONE, B: ErrorCode.NONE}]
    assert broker.produce_purgatory.num_delayed() == 0 and broker.timer.size == 0


def test_produce_waits_for_the_isr() -> None:
    broker = Broker(replicas=(1, 2, 3))
    op, completed, responses = broker.produce({A: 3, B: 2}, now_ms=0)
    assert not completed and responses == []
    assert broker.produce_purgatory.watched(A) == broker.produce_purgatory.watched(B) == 1
    broker.follower_fetch(A, 2, 3, now_ms=1)
    broker.follower_fetch(A, 3, 3, now_ms=2)
    broker.follower_fetch(B, 2, 2, now_ms=3)
    assert responses == []
    broker.follower_fetch(B, 3, 2, now_ms=4)
    assert responses == [{A: ErrorCode.NONE, B: ErrorCode.NONE}]
    assert broker.produce_purgatory.watch_keys() == [] and broker.timer.size == 0
    broker.timer.advance_clock(5000)
    assert len(responses) == 1


def test_produce_expires_with_request_timed_out_per_unfinished_partition() -> None:
    broker = Broker(replicas=(1, 2))
    op, _, responses = broker.produce({A: 1, B: 1}, now_ms=100, timeout_ms=1000)
    broker.follower_fetch(A, 2, 1, now_ms=200)
    assert responses == []
    broker.timer.advance_clock(1099)
    assert responses == []
    assert broker.timer.advance_clock(1100) == [op]
    assert responses == [{A: ErrorCode.NONE, B: ErrorCode.REQUEST_TIMED_OUT}]
    broker.follower_fetch(B, 2, 1, now_ms=1101)
    assert len(responses) == 1


def test_produce_keeps_an_append_error_and_waits_for_the_rest() -> None:
    broker = Broker(replicas=(1, 2))
    broker.partitions[B].make_leader(leader_epoch=1, replicas=[1, 2], isr=[1], now_ms=0)
    broker.partitions[B].min_insync_replicas = 2
    broker.partitions[A].min_insync_replicas = 2
    op, completed, responses = broker.produce({A: 1, B: 1}, now_ms=0)
    assert not completed
    assert op.watch_keys == [A]
    broker.follower_fetch(A, 2, 1, now_ms=1)
    assert responses == [{A: ErrorCode.NONE, B: ErrorCode.NOT_ENOUGH_REPLICAS}]


def test_produce_after_the_isr_shrank_below_min_insync_replicas() -> None:
    # Kafka 4's strict min ISR (KIP-966): the HW does not move over a leader whose ISR is below
    # min.insync.replicas, so a write appended before the shrink waits (for the ISR, or its timeout)...
    broker = Broker(replicas=(1, 2), min_insync_replicas=2)
    _, _, responses = broker.produce({A: 1}, now_ms=0)
    broker.partitions[A].make_leader(leader_epoch=1, replicas=[1, 2], isr=[1], now_ms=1)
    broker.high_watermark_moved(A)
    assert responses == []
    broker.timer.advance_clock(1000)
    assert responses == [{A: ErrorCode.REQUEST_TIMED_OUT}]
    # ...and one the HW passed while the ISR was whole, checked after it shrank, is answered
    # NOT_ENOUGH_REPLICAS_AFTER_APPEND.
    broker = Broker(replicas=(1, 2), min_insync_replicas=2)
    _, _, responses = broker.produce({A: 1}, now_ms=0)
    assert broker.partitions[A].update_follower_fetch_state(2, 1, 1)  # the HW passes it; not checked yet
    broker.partitions[A].make_leader(leader_epoch=1, replicas=[1, 2], isr=[1], now_ms=1)
    broker.high_watermark_moved(A)
    assert responses == [{A: ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND}]


@pytest.mark.parametrize("how", ["follower", "gone"])
def test_produce_fails_when_leadership_moves(how: str) -> None:
    broker = Broker(replicas=(1, 2))
    _, _, responses = broker.produce({A: 1}, now_ms=0)
    if how == "follower":
        broker.partitions[A].make_follower(leader_id=2, leader_epoch=1, replicas=[1, 2], isr=[2])
    else:
        del broker.partitions[A]
    assert broker.produce_purgatory.check_and_complete(A) == 1
    assert responses == [{A: ErrorCode.NOT_LEADER_OR_FOLLOWER}]


def test_fetch_with_enough_bytes_completes_at_once() -> None:
    broker = Broker()
    broker.append(A, 5, now_ms=0)
    _, completed, responses = broker.fetch([FetchPartitionStatus(A, 0, 1000)], min_bytes=50, now_ms=0)
    assert completed and responses == [0]


def test_fetch_with_min_bytes_zero_completes_at_once() -> None:
    broker = Broker()
    _, completed, _ = broker.fetch([FetchPartitionStatus(A, 0, 1000)], min_bytes=0, now_ms=0)
    assert completed


def test_fetch_accumulates_across_partitions_and_caps_at_max_bytes() -> None:
    broker = Broker()
    statuses = [FetchPartitionStatus(A, 0, 30), FetchPartitionStatus(B, 0, 1000)]
    op, completed, responses = broker.fetch(statuses, min_bytes=60, now_ms=0)
    assert not completed
    broker.append(A, 10, now_ms=1)
    assert responses == []
    broker.append(B, 2, now_ms=2)
    assert responses == []
    broker.append(B, 1, now_ms=3)
    assert op.is_completed and len(responses) == 1
    assert broker.fetch_purgatory.watch_keys() == [] and broker.timer.size == 0


def test_consumer_fetch_counts_only_below_the_high_watermark() -> None:
    broker = Broker(replicas=(1, 2))
    broker.append(A, 10, now_ms=0)
    op, completed, responses = broker.fetch([FetchPartitionStatus(A, 0, 1000)], min_bytes=50, now_ms=0)
    assert not completed
    broker.follower_fetch(A, 2, 4, now_ms=1)
    assert responses == []
    broker.follower_fetch(A, 2, 5, now_ms=2)
    assert responses == [0]


def test_follower_fetch_counts_up_to_the_log_end() -> None:
    broker = Broker(replicas=(1, 2))
    statuses = [FetchPartitionStatus(A, 0, 1000)]
    _, completed, responses = broker.fetch(
        statuses, min_bytes=20, now_ms=0, isolation=FetchIsolation.LOG_END
    )
    assert not completed
    broker.append(A, 2, now_ms=1)
    assert responses == [0]


def test_fetch_expires_and_responds_once() -> None:
    broker = Broker()
    op, _, responses = broker.fetch([FetchPartitionStatus(A, 0, 1000)], min_bytes=1, now_ms=10)
    assert broker.timer.advance_clock(509) == []
    assert broker.timer.advance_clock(510) == [op]
    assert responses == [10]
    broker.append(A, 5, now_ms=511)
    assert responses == [10]


@pytest.mark.parametrize("breakage", ["gone", "not_leader", "fenced_epoch", "unknown_epoch", "truncated"])
def test_fetch_completes_at_once_when_a_partition_cannot_be_waited_on(breakage: str) -> None:
    broker = Broker()
    broker.append(A, 3, now_ms=0)
    fetch_offset, epoch = 3, 0
    if breakage == "gone":
        del broker.partitions[A]
    elif breakage == "not_leader":
        broker.partitions[A].make_follower(leader_id=2, leader_epoch=1, replicas=[1, 2], isr=[2])
        epoch = 1
    elif breakage == "fenced_epoch":
        broker.partitions[A].make_leader(leader_epoch=3, replicas=[1], isr=[1], now_ms=0)
    elif breakage == "unknown_epoch":
        epoch = 9
    elif breakage == "truncated":
        fetch_offset = 7
    statuses = [FetchPartitionStatus(B, 0, 1000), FetchPartitionStatus(A, fetch_offset, 1000, epoch)]
    _, completed, responses = broker.fetch(statuses, min_bytes=10_000, now_ms=0)
    assert completed and responses == [0]


def test_fetch_completes_at_once_when_counting_bytes_fails() -> None:
    broker = Broker()
    broker.append(A, 3, now_ms=0)

    def bytes_available(partition: Partition, start: int, end: int) -> int:
        raise KafkaStorageError("log directory offline")

    responses: list[str] = []
    op = DelayedFetch(
        500,
        now_ms=0,
        fetch_partitions=[FetchPartitionStatus(A, 0, 1000)],
        min_bytes=1,
        get_partition=broker.get_partition,
        bytes_available=bytes_available,
        respond=lambda: responses.append("responded"),
    )
    assert broker.fetch_purgatory.try_complete_else_watch(op, op.watch_keys)
    assert responses == ["responded"]


def test_fetch_completed_by_a_leadership_change_while_waiting() -> None:
    broker = Broker()
    _, completed, responses = broker.fetch([FetchPartitionStatus(A, 0, 1000)], min_bytes=1, now_ms=0)
    assert not completed
    broker.partitions[A].make_follower(leader_id=2, leader_epoch=1, replicas=[1, 2], isr=[2])
    assert broker.fetch_purgatory.check_and_complete(A) == 1
    assert responses == [0]
