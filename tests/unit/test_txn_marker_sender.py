"""The end of a transaction as the coordinator drives it (coordinator/transaction/markers.py): markers to each
partition's leader through the broker's channel, retried after a doubling backoff while retriable, stopped by
a newer epoch; then the Complete state, written again while `__transaction_state` cannot take it (Kafka's
TransactionMarkerChannelManager.tryAppendToLog retries COORDINATOR_NOT_AVAILABLE), so a transaction in
PrepareCommit/PrepareAbort completes once the ISR is back; NOT_COORDINATOR ends the job (the partition's new
leader completes it). No sockets and no loop: a fake channel and the timing wheel."""

from __future__ import annotations

from types import SimpleNamespace

from odradek.coordinator.transaction.markers import TransactionMarkerChannelManager
from odradek.coordinator.transaction.shard import MarkerJob
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import WriteTxnMarkersResponse
from odradek.purgatory.deferred import Deferred
from odradek.purgatory.timing_wheel import Timer

JOB = MarkerJob(txn_partition=0, coordinator_epoch=0, transactional_id="t", producer_id=5, producer_epoch=0,
                committed=True, partitions=frozenset())  # no partition left to mark: straight to completion


class Channel:
    def __init__(self) -> None:
        self.now = 0
        self.sent: list[tuple[int, object, object]] = []

    def send(self, leader_id, request, done) -> None:
        self.sent.append((leader_id, request, done))

    def now_ms(self) -> int:
        return self.now

    def timers_changed(self) -> None:
        pass


class Harness:
    def __init__(self, completions=(), leaders=None) -> None:
        self.channel = Channel()
        self.timer = Timer()
        self.completions = list(completions)
        self.completed = 0
        topics = {}
        for (topic, index), leader in (leaders or {}).items():
            topics.setdefault(topic, SimpleNamespace(partitions={})).partitions[index] = SimpleNamespace(leader=leader)
        self.image = SimpleNamespace(topics_by_name=topics)
        self.manager = TransactionMarkerChannelManager(self.channel, self.timer, image=lambda: self.image,
                                                       complete=self.complete)

    def complete(self, job, now_ms):
        self.completed += 1
        answer = self.completions.pop(0)
        return answer if isinstance(answer, Deferred) else Deferred.completed(answer)

    def advance(self, ms: int) -> None:
        self.channel.now += ms
        self.timer.advance_clock(self.channel.now)

    def answer(self, index: int, codes: dict) -> None:
        """Answer the `index`th request sent with `codes` ({(topic, partition): ErrorCode}); None: it failed."""
        _leader, request, done = self.channel.sent[index]
        if codes is None:
            done(None)
            return
        R = WriteTxnMarkersResponse.WritableTxnMarkerResult
        T = R.WritableTxnMarkerTopicResult
        P = T.WritableTxnMarkerPartitionResult
        by_topic: dict[str, list] = {}
        for (topic, index_), code in codes.items():
            by_topic.setdefault(topic, []).append(P(partition_index=index_, error_code=int(code)))
        done(WriteTxnMarkersResponse(markers=[R(producer_id=request.markers[0].producer_id, topics=[
            T(name=t, partitions=ps) for t, ps in by_topic.items()])]))


def test_completion_is_retried_while_the_log_refuses_it():
    unavailable = ErrorCode.COORDINATOR_NOT_AVAILABLE
    later = Deferred()
    h = Harness([unavailable, unavailable, later, ErrorCode.NONE])
    h.manager.send(JOB)
    assert h.completed == 0  # never from inside the Prepare write's completion
    h.advance(0)
    assert h.completed == 1
    h.advance(9)
    assert h.completed == 1  # the first backoff is 10 ms
    h.advance(1)
    assert h.completed == 2
    h.advance(20)
    assert h.completed == 3 and h.manager.jobs == 1  # the third try waits for its write to be replicated
    later.complete(unavailable)  # ... which timed out: once more, after 40 ms
    h.advance(39)
    assert h.completed == 3
    h.advance(1)
    assert h.completed == 4 and h.completions == [] and h.manager.jobs == 0


def test_completion_stops_when_the_partition_moved():
    h = Harness([ErrorCode.NOT_COORDINATOR])
    h.manager.send(JOB)
    h.advance(0)
    h.advance(5000)
    assert h.completed == 1 and h.manager.jobs == 0


def test_markers_go_to_each_leader_and_retriable_errors_are_retried():
    job = MarkerJob(0, 3, "t", 5, 1, True, frozenset({("a", 0), ("a", 1), ("b", 0), ("gone", 0)}))
    h = Harness([ErrorCode.NONE], leaders={("a", 0): 1, ("a", 1): 2, ("b", 0): 1})
    h.manager.send(job)
    h.advance(0)
    assert sorted(leader for leader, _, _ in h.channel.sent) == [1, 2]  # the deleted topic is skipped
    first = next(i for i, (leader, _, _) in enumerate(h.channel.sent) if leader == 1)
    request = h.channel.sent[first][1]
    (marker,) = request.markers
    assert (marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.transaction_result) == (5, 1, 3, True)
    assert sorted((t.name, tuple(t.partition_indexes)) for t in marker.topics) == [("a", (0,)), ("b", (0,))]
    h.answer(first, {("a", 0): ErrorCode.NONE, ("b", 0): ErrorCode.NOT_LEADER_OR_FOLLOWER})
    assert len(h.channel.sent) == 2  # the round waits for every leader
    h.answer(1 - first, None)  # leader 2 unreachable
    h.image.topics_by_name["b"].partitions[0].leader = 2  # b-0 moved to broker 2
    h.advance(9)
    assert len(h.channel.sent) == 2
    h.advance(1)  # the backoff: 10 ms
    assert [leader for leader, _, _ in h.channel.sent[2:]] == [2]
    h.answer(2, {("a", 1): ErrorCode.NONE, ("b", 0): ErrorCode.NONE})
    assert h.completed == 1 and h.manager.jobs == 0 and h.manager.markers_written == 3


def test_a_newer_epoch_stops_the_job_and_losing_the_partition_cancels_it():
    job = MarkerJob(0, 0, "t", 5, 1, False, frozenset({("a", 0)}))
    h = Harness([], leaders={("a", 0): 1})
    h.manager.send(job)
    h.advance(0)
    h.answer(0, {("a", 0): ErrorCode.INVALID_PRODUCER_EPOCH})
    h.advance(5000)
    assert h.completed == 0 and len(h.channel.sent) == 1 and h.manager.jobs == 0

    h.manager.send(job)
    h.advance(0)
    h.manager.cancel(0)
    h.answer(1, {("a", 0): ErrorCode.NONE})  # answered after the partition was lost: ignored
    h.advance(5000)
    assert h.completed == 0 and h.manager.jobs == 0
