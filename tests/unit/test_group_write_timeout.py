"""Group writes bounded by offsets.commit.timeout.ms (Kafka's write timeout of every GroupCoordinatorService
operation): with replication held, a commit is answered COORDINATOR_NOT_AVAILABLE at the deadline, not
before, and its record takes effect if it is replicated later. Manual clock, in-memory log."""

from __future__ import annotations

from odradek.coordinator.runtime import CoordinatorRuntime, InMemoryPartitionWriter, Result
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import OffsetCommitRequest, TxnOffsetCommitRequest
from odradek.purgatory.timing_wheel import Timer

from tests.harness.group_coordinator import Harness

G = "g"
TIMEOUT_MS = 5_000


def commit_request(offset: int) -> OffsetCommitRequest:
    T = OffsetCommitRequest.OffsetCommitRequestTopic
    return OffsetCommitRequest(group_id=G, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                               retention_time_ms=-1, topics=[T(name="in", partitions=[T.OffsetCommitRequestPartition(
                                   partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                                   committed_metadata="")])])


def codes(response) -> list[int]:
    return [p.error_code for t in response.topics for p in t.partitions]


def test_a_commit_not_replicated_in_time_is_answered_coordinator_not_available():
    h = Harness(commit_later=True, offsets_commit_timeout_ms=TIMEOUT_MS)
    partition = h.gc.partition_for(G)
    timers_idle = h.timer.size
    pending = h.gc.offset_commit(commit_request(10), 8, h.now)
    h.advance(TIMEOUT_MS - 1)
    assert not pending.done
    h.advance(1)
    assert codes(pending.result()) == [ErrorCode.COORDINATOR_NOT_AVAILABLE]
    # The record is written; replicated late, it takes effect (as Kafka's: the timeout gives up the answer,
    # not the write) and the answered request is not answered twice.
    h.writer.commit(partition)
    assert h.fetch(G, {"in": [0]})[1] == {("in", 0): (10, -1, "")}
    # A commit replicated in time is answered NONE and leaves no timeout on the wheel.
    in_time = h.gc.offset_commit(commit_request(11), 8, h.now)
    h.advance(TIMEOUT_MS - 1)
    h.writer.commit(partition)
    assert codes(in_time.result()) == [ErrorCode.NONE]
    assert h.timer.size == timers_idle
    assert h.fetch(G, {"in": [0]})[1] == {("in", 0): (11, -1, "")}


def test_a_txn_offset_commit_times_out_the_same_way():
    h = Harness(commit_later=True, offsets_commit_timeout_ms=TIMEOUT_MS)
    T = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
    request = TxnOffsetCommitRequest(transactional_id="t", group_id=G, producer_id=7, producer_epoch=0,
                                     generation_id=-1, member_id="", group_instance_id=None,
                                     topics=[T(name="in", partitions=[T.TxnOffsetCommitRequestPartition(
                                         partition_index=0, committed_offset=3, committed_leader_epoch=-1,
                                         committed_metadata="")])])
    txn = h.gc.txn_offset_commit(request, 3, h.now)
    h.advance(TIMEOUT_MS)
    assert codes(txn.result()) == [ErrorCode.COORDINATOR_NOT_AVAILABLE]


def test_the_runtime_bound_fails_with_request_timed_out_and_replays_anyway():
    """The runtime's own answer is REQUEST_TIMED_OUT; each coordinator maps it for its API."""
    writer = InMemoryPartitionWriter(commit_later=True)
    timer = Timer(start_ms=0)
    replayed = []

    class Shard:
        def replay(self, record):
            replayed.append(record)

        def on_loaded(self, now_ms):
            pass

        def on_unloaded(self):
            pass

    runtime = CoordinatorRuntime(writer, lambda p: Shard(), timer, serialize=lambda r: (r, r),
                                 deserialize=lambda k, v: v)
    runtime.load(0, 0)
    written = runtime.write(0, lambda shard: Result([b"r"], "ok"), 0, timeout_ms=100)
    assert replayed == [b"r"] and not written.done
    timer.advance_clock(100)
    assert written.failed_with.error_code == ErrorCode.REQUEST_TIMED_OUT
    writer.commit(0)  # released late: nothing more happens to the answered Deferred
    assert written.failed_with is not None
    assert runtime.write(0, lambda shard: Result([], "read"), 100, timeout_ms=100).result() == "read"
