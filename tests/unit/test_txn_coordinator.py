"""The transaction coordinator on a manual clock and an in-memory log: Kafka's rules for InitProducerId,
AddPartitionsToTxn (and its v4 verification), AddOffsetsToTxn, EndTxn, markers, timeouts, expiry, replay."""

from __future__ import annotations

import pytest

from odradek.coordinator.transaction.coordinator import TransactionCoordinator
from odradek.coordinator.transaction.metadata import VALID_PREVIOUS_STATES, InvalidTransitionError, TransactionMetadata
from odradek.coordinator.transaction.records import TransactionRecord, deserialize, serialize
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    ListTransactionsRequest,
)
from tests.harness.txn_coordinator import Harness, S, TIMEOUT_MS, TXN


def test_records_round_trip_as_kafka_lays_them_out():
    m = TransactionMetadata("id", 7, 3, 60_000, S.ONGOING, frozenset({("t", 1), ("t", 0), ("u", 2)}), 100, 200)
    key, value = serialize(TransactionRecord("id", m))
    assert key == b"\x00\x00\x00\x02id"  # key version 0, then the string
    assert value[:2] == b"\x00\x00"  # value version 0
    back = deserialize(key, value)
    assert back.metadata == m
    empty = TransactionMetadata("id", 7, 4, 60_000, S.EMPTY, frozenset(), -1, 300)
    _, value = serialize(TransactionRecord("id", empty))
    assert deserialize(key, value).metadata == empty
    assert deserialize(key, None) == TransactionRecord("id", None)
    assert deserialize(b"\x00\x05xx", b"") is None  # an unknown key version is skipped


def test_transition_table_is_kafkas():
    assert VALID_PREVIOUS_STATES[S.PREPARE_COMMIT] == {S.ONGOING}
    # Kafka 4.x: a Transactions V2 client may abort from Empty and Complete* too
    assert VALID_PREVIOUS_STATES[S.PREPARE_ABORT] == {S.ONGOING, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT,
                                                      S.COMPLETE_ABORT}
    m = TransactionMetadata("id", 1, 0, 1000)
    with pytest.raises(InvalidTransitionError):
        m.transit(S.PREPARE_COMMIT, 5)


def test_init_commit_cycle():
    h = Harness()
    r = h.init()
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, 1001, 0)
    assert h.add(1001, 0, [("t", 0), ("t", 1)]) == {("t", 0): 0, ("t", 1): 0}
    assert h.state().state is S.ONGOING and h.state().txn_start_timestamp_ms == h.now
    assert h.end(1001, 0, commit=True).error_code == 0
    assert h.state().state is S.PREPARE_COMMIT
    (job,) = h.sink.jobs
    assert job.committed and job.partitions == {("t", 0), ("t", 1)} and job.producer_epoch == 0
    # While markers are in flight the producer's next steps are told to wait.
    assert h.add(1001, 0) == {("t", 0): ErrorCode.CONCURRENT_TRANSACTIONS}
    assert h.end(1001, 0).error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    assert h.end(1001, 0, commit=False).error_code == ErrorCode.INVALID_TXN_STATE
    h.finish_markers()
    assert h.state().state is S.COMPLETE_COMMIT and h.state().partitions == frozenset()
    assert h.end(1001, 0).error_code == 0  # a retried commit
    # Next transaction on the same epoch (transaction version 1: no bump per transaction).
    assert h.add(1001, 0, [("t", 2)]) == {("t", 2): 0}
    assert h.end(1001, 0, commit=False).error_code == 0
    (job,) = h.finish_markers()
    assert not job.committed and h.state().state is S.COMPLETE_ABORT


def test_errors_for_unknown_and_fenced_producers():
    h = Harness()
    h.init()
    assert h.add(999, 0) == {("t", 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING}
    assert h.add(1001, 5) == {("t", 0): ErrorCode.PRODUCER_FENCED}
    assert h.add(1001, 5, version=1) == {("t", 0): ErrorCode.INVALID_PRODUCER_EPOCH}
    assert h.add(1001, 0, [("t", 0), ("nope", 0)]) == {("t", 0): ErrorCode.OPERATION_NOT_ATTEMPTED,
                                                         ("nope", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert h.end(1001, 0).error_code == ErrorCode.INVALID_TXN_STATE  # nothing open
    assert h.init(timeout_ms=10**9).error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT
    assert h.init(txn="").error_code == ErrorCode.INVALID_REQUEST


def test_reinit_fences_the_old_producer_and_aborts_its_transaction():
    h = Harness()
    h.init()
    h.add(1001, 0)
    r = h.init()  # a second producer with the same transactional id
    assert r.error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    m = h.state()
    assert m.state is S.PREPARE_ABORT and m.producer_epoch == 1  # the markers fence epoch 0
    (job,) = h.sink.jobs
    assert not job.committed and job.producer_epoch == 1
    assert h.init().error_code == ErrorCode.CONCURRENT_TRANSACTIONS  # still aborting
    h.finish_markers()
    r = h.init()
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, 1001, 2)
    # The zombie is fenced everywhere.
    assert h.add(1001, 0) == {("t", 0): ErrorCode.PRODUCER_FENCED}
    assert h.end(1001, 0).error_code == ErrorCode.PRODUCER_FENCED
    assert h.init(producer_id=1001, producer_epoch=0).error_code == ErrorCode.PRODUCER_FENCED
    assert h.init(producer_id=1001, producer_epoch=0, version=3).error_code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_kip360_recovery_and_epoch_exhaustion():
    h = Harness()
    h.init()
    r = h.init(producer_id=1001, producer_epoch=0)
    assert (r.error_code, r.producer_epoch) == (0, 1)
    r = h.init(producer_id=1001, producer_epoch=0)  # a retry of that bump: the same epoch again
    assert (r.error_code, r.producer_epoch) == (0, 1)
    r = h.init(producer_id=55, producer_epoch=3)  # not this id's producer
    assert r.error_code == ErrorCode.PRODUCER_FENCED
    shard = h.tc.shard_for(TXN)
    from dataclasses import replace
    shard.transactions[TXN] = replace(h.state(), producer_epoch=32766)
    r = h.init(producer_id=1001, producer_epoch=32766)
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, 1002, 0)
    assert h.state().previous_producer_id == 1001
    # A fresh id given a stale producer id (its old state expired): served, KIP-360.
    r = h.init(txn="fresh", producer_id=77, producer_epoch=4)
    assert (r.error_code, r.producer_epoch) == (0, 0)


def test_verify_only_says_which_partitions_are_in_the_transaction():
    h = Harness()
    h.init()
    h.add(1001, 0, [("t", 0)])
    assert h.verify(1001, 0, [("t", 0), ("t", 1)]) == {("t", 0): 0, ("t", 1): ErrorCode.TRANSACTION_ABORTABLE}
    assert h.verify(1001, 9, [("t", 0)]) == {("t", 0): ErrorCode.PRODUCER_FENCED}
    assert h.verify(5, 0, [("t", 0)], txn="other") == {("t", 0): ErrorCode.INVALID_PRODUCER_ID_MAPPING}
    assert len(h.writer.logs[h.tc.partition_for(TXN)]) == 2  # verification writes nothing


def test_add_offsets_adds_the_groups_offsets_partition():
    h = Harness()
    r = h.init()
    req = AddOffsetsToTxnRequest(transactional_id=TXN, producer_id=1001, producer_epoch=0, group_id="g")
    assert h.tc.add_offsets_to_txn(req, 3, h.now).result().error_code == 0
    from odradek.coordinator.partitioning import partition_for
    assert ("__consumer_offsets", partition_for("g", 5)) in h.state().partitions


def test_timeout_aborts_with_an_epoch_bump():
    h = Harness()
    h.init(timeout_ms=5_000)
    h.add(1001, 0)
    h.advance(4_000)
    assert h.state().state is S.ONGOING
    h.advance(1_000)
    m = h.state()
    assert m.state is S.PREPARE_ABORT and m.producer_epoch == 1
    h.finish_markers()
    assert h.state().state is S.COMPLETE_ABORT
    assert h.end(1001, 0).error_code == ErrorCode.PRODUCER_FENCED  # the producer learns it was fenced
    r = h.init(producer_id=1001, producer_epoch=0)
    assert r.error_code == ErrorCode.PRODUCER_FENCED


def test_a_committed_transaction_has_no_timer_left_to_abort_it():
    h = Harness()
    h.init(timeout_ms=5_000)
    h.add(1001, 0)
    h.end(1001, 0)
    h.finish_markers()
    h.advance(10_000)
    assert h.state().state is S.COMPLETE_COMMIT and not h.sink.jobs


def test_reload_resumes_markers_and_timers():
    h = Harness()
    h.init(timeout_ms=5_000)
    h.add(1001, 0)
    h.init(txn="b", timeout_ms=5_000)
    h.add(1002, 0, txn="b")
    h.end(1002, 0, txn="b")
    h.sink.jobs.clear()
    h.reload()
    (job,) = h.sink.jobs
    assert job.transactional_id == "b" and job.committed
    h.finish_markers()
    assert h.state("b").state is S.COMPLETE_COMMIT
    h.advance(5_000)
    assert h.state().state is S.PREPARE_ABORT  # the Ongoing one's timer was re-armed on load


def test_replay_of_the_log_gives_the_same_table():
    h = Harness()
    h.init()
    h.add(1001, 0, [("t", 0), ("t", 3)])
    h.init(txn="b")
    h.end(1001, 0)
    before = {p: dict(h.tc.runtime.shard(p).transactions) for p in h.tc.runtime.partitions}
    h.reload()
    after = {p: dict(h.tc.runtime.shard(p).transactions) for p in h.tc.runtime.partitions}
    strip = lambda t: {p: {k: (m.producer_id, m.producer_epoch, m.state, m.partitions, m.txn_start_timestamp_ms)
                           for k, m in d.items()} for p, d in t.items()}
    assert strip(before) == strip(after)


def test_expiry_tombstones_idle_ids():
    h = Harness(transactional_id_expiration_ms=10_000, remove_expired_transaction_cleanup_interval_ms=1_000)
    h.init()
    h.init(txn="busy")
    h.add(1002, 0, txn="busy")
    h.advance(11_000)
    shard = h.tc.shard_for(TXN)
    assert TXN not in shard.transactions
    assert h.state("busy").state is S.ONGOING  # never expires while open
    assert (b"\x00\x00\x00\x05txn-a", None) in h.writer.logs[h.tc.partition_for(TXN)]


def test_describe_and_list():
    h = Harness()
    h.init()
    h.add(1001, 0, [("t", 1)])
    h.init(txn="b")
    d = h.tc.describe_transactions(DescribeTransactionsRequest(transactional_ids=[TXN, "zz"]), 0, h.now)
    a, z = d.transaction_states
    assert (a.error_code, a.transaction_state, a.producer_id) == (0, "Ongoing", 1001)
    assert [(t.topic, t.partitions) for t in a.topics] == [("t", [1])]
    assert z.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    # the schema's zeros, as Kafka 4.4 answers an unknown id (tests/integration/test_kafka_differential.py)
    assert (z.producer_id, z.producer_epoch, z.transaction_start_time_ms) == (0, 0, 0)
    lst = h.tc.list_transactions(ListTransactionsRequest(state_filters=["Ongoing", "Bogus"], producer_id_filters=[]), 1, h.now)
    assert [t.transactional_id for t in lst.transaction_states] == [TXN]
    assert lst.unknown_state_filters == ["Bogus"]
    lst = h.tc.list_transactions(ListTransactionsRequest(state_filters=[], producer_id_filters=[],
                                                         transactional_id_pattern="b"), 2, h.now)
    assert [t.transactional_id for t in lst.transaction_states] == ["b"]


def test_unloaded_partition_answers_not_coordinator():
    h = Harness()
    h.tc.on_resigned(h.tc.partition_for(TXN))
    assert h.init().error_code == ErrorCode.NOT_COORDINATOR
    assert h.sink.cancelled == [h.tc.partition_for(TXN)]


def test_a_write_not_replicated_in_time_is_answered_coordinator_not_available():
    """Kafka's appendTransactionToLog: a __transaction_state write still short of the high watermark after
    request.timeout.ms answers COORDINATOR_NOT_AVAILABLE (the client finds the coordinator again and
    retries) instead of holding the request for as long as the ISR cannot move."""
    h = Harness(request_timeout_ms=5_000)
    h.writer.commit_later = True  # appends wait for the high watermark, which the test moves
    partition = h.tc.partition_for(TXN)
    timers_idle = h.timer.size
    request = InitProducerIdRequest(transactional_id=TXN, transaction_timeout_ms=TIMEOUT_MS, producer_id=-1,
                                    producer_epoch=-1)
    pending = h.tc.init_producer_id(request, 4, h.now)
    h.advance(4_999)
    assert not pending.done
    h.advance(1)
    assert pending.result().error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    # The record is in the log and the shard has it: replicated late, it changes nothing for the answered
    # request; the retry bumps the epoch once more and is answered when its own record is replicated.
    h.writer.commit(partition)
    assert h.state().producer_epoch == 0
    retry = h.tc.init_producer_id(request, 4, h.now)
    assert not retry.done
    h.writer.commit(partition)
    assert (retry.result().error_code, retry.result().producer_epoch) == (0, 1)
    assert h.timer.size == timers_idle  # a write answered in time leaves no timeout behind

    # EndTxn timed out: the retry sees the transaction's markers being written, then its completion.
    added = h.tc.add_partitions_to_txn(AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TXN, v3_and_below_producer_id=1001, v3_and_below_producer_epoch=1,
        v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name="t", partitions=[0])]), 3, h.now)
    h.writer.commit(partition)
    assert added.done
    end = h.tc.end_txn(EndTxnRequest(transactional_id=TXN, producer_id=1001, producer_epoch=1, committed=True), 3, h.now)
    h.advance(5_000)
    assert end.result().error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.state().state is S.PREPARE_COMMIT and h.sink.jobs == []  # markers wait for the durable record
    # The retry reports a state whose record is not durable yet: it waits for it, as any response does.
    retry = h.tc.end_txn(EndTxnRequest(transactional_id=TXN, producer_id=1001, producer_epoch=1, committed=True), 3,
                         h.now)
    assert not retry.done
    h.writer.commit(partition)
    assert retry.result().error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    (job,) = h.sink.jobs
    h.sink.jobs = []
    h.tc.on_markers_written(job, h.now)
    h.writer.commit(partition)
    assert h.state().state is S.COMPLETE_COMMIT
    assert h.end(1001, 1).error_code == 0


# ---------------------------------------------------------------------------------------------------
# A log that cannot take the write (ISR below transaction.state.log.min.isr: NOT_ENOUGH_REPLICAS before
# anything is appended) changes nothing, is answered COORDINATOR_NOT_AVAILABLE, and is tried again.


def _not_enough_replicas():
    from odradek.replication.errors import NotEnoughReplicasError

    return NotEnoughReplicasError("ISR [1] is smaller than min.insync.replicas=2")


def test_end_txn_refused_by_the_log_leaves_the_transaction_open():
    h = Harness()
    h.init()
    h.add(1001, 0)
    h.writer.fail_next = _not_enough_replicas()
    assert h.end(1001, 0).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.state().state is S.ONGOING and h.sink.jobs == []  # no Prepare state, no markers
    assert h.end(1001, 0).error_code == 0  # the client's retry, once the ISR is back
    assert h.state().state is S.PREPARE_COMMIT and len(h.sink.jobs) == 1


def test_completion_refused_by_the_log_is_retriable_and_the_transaction_stays_prepared():
    h = Harness()
    h.init()
    h.add(1001, 0)
    h.end(1001, 0)
    (job,) = h.sink.jobs
    h.writer.fail_next = _not_enough_replicas()
    assert h.tc.on_markers_written(job, h.now).result() is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.state().state is S.PREPARE_COMMIT
    assert h.end(1001, 0).error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    assert h.tc.on_markers_written(job, h.now).result() is ErrorCode.NONE  # the sender's retry
    assert h.state().state is S.COMPLETE_COMMIT and h.end(1001, 0).error_code == 0


def test_completion_on_a_partition_no_longer_led_is_not_coordinator():
    h = Harness()
    h.init()
    h.add(1001, 0)
    h.end(1001, 0)
    (job,) = h.sink.jobs
    h.tc.on_resigned(job.txn_partition)
    assert h.tc.on_markers_written(job, h.now).result() is ErrorCode.NOT_COORDINATOR  # the sender stops


def test_a_timeout_abort_refused_by_the_log_is_tried_again_after_the_cleanup_interval():
    h = Harness(abort_timed_out_transaction_cleanup_interval_ms=2_000)
    h.init(timeout_ms=5_000)
    h.add(1001, 0)
    h.advance(4_999)
    h.writer.fail_next = _not_enough_replicas()
    h.advance(1)
    assert h.state().state is S.ONGOING and h.sink.jobs == []  # refused: the timer must not be lost
    h.advance(1_999)
    assert h.state().state is S.ONGOING
    h.advance(1)
    m = h.state()
    assert m.state is S.PREPARE_ABORT and m.producer_epoch == 1 and len(h.sink.jobs) == 1


def test_add_offsets_uses_the_group_coordinators_placement():
    """AddOffsetsToTxn adds the partition the group coordinator places the group in (over the real
    partition count of __consumer_offsets), not a hash over the configured count."""
    from odradek.coordinator.partitioning import partition_for

    h = Harness()
    placed = []

    def offsets_partition_for(group_id: str) -> int:
        placed.append(group_id)
        return partition_for(group_id, 7)

    h.tc = TransactionCoordinator(h.writer, h.timer, h.config, next_producer_id=h._next_producer_id, markers=h.sink,
                                  topics=h.topics, offsets_partition_for=offsets_partition_for,
                                  offsets_topic_num_partitions=50)
    h.tc.startup(h.now)
    h.init()
    group = next(g for g in (f"g{i}" for i in range(100)) if partition_for(g, 7) != partition_for(g, 50))
    r = h.tc.add_offsets_to_txn(AddOffsetsToTxnRequest(transactional_id=TXN, producer_id=1001, producer_epoch=0,
                                                       group_id=group), 3, h.now).result()
    assert r.error_code == 0 and placed == [group]
    assert h.state().partitions == {("__consumer_offsets", partition_for(group, 7))}


def test_ended_transactions_are_counted_once_durable():
    # The broker's odradek_transactions_completed_total / timed_out_total: a commit, an abort and a timeout,
    # each counted when its Complete (or timeout's PrepareAbort) record is durable, a refused write not at all.
    h = Harness()
    counts = h.tc.counts
    h.init(timeout_ms=5_000)
    h.add(1001, 0)
    h.end(1001, 0, commit=True)
    (job,) = h.sink.jobs
    h.writer.fail_next = _not_enough_replicas()
    h.tc.on_markers_written(job, h.now).result()
    assert (counts.committed, counts.aborted, counts.timed_out) == (0, 0, 0)  # refused: nothing ended
    h.finish_markers()
    assert (counts.committed, counts.aborted, counts.timed_out) == (1, 0, 0)
    h.add(1001, 0, [("t", 1)])
    h.end(1001, 0, commit=False)
    h.finish_markers()
    assert (counts.committed, counts.aborted, counts.timed_out) == (1, 1, 0)
    h.add(1001, 0, [("t", 2)])
    h.advance(5_000)
    assert h.state().state is S.PREPARE_ABORT and counts.timed_out == 1
    h.finish_markers()
    assert (counts.committed, counts.aborted, counts.timed_out) == (1, 2, 1)
    h.tc.on_resigned(job.txn_partition)  # the counts outlive the shard
    assert (counts.committed, counts.aborted, counts.timed_out) == (1, 2, 1)
