"""Transactions V2 (KIP-890 part 2) in the transaction coordinator, on a manual clock: the epoch bump on every
EndTxn v5, the producer id rotation when the epoch runs out, retries recognised by the epoch before the bump,
an abort with nothing added, timeouts, and the records that carry the client's transaction version. The
version 1 rules (no bump) are tests/unit/test_txn_coordinator.py's."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from odradek.coordinator.transaction.metadata import TV_0, TV_2
from odradek.coordinator.transaction.records import TransactionRecord, deserialize, serialize
from odradek.protocol.errors import ErrorCode
from odradek.protocol.messages import EndTxnResponse
from tests.harness.txn_coordinator import Harness, S, TIMEOUT_MS, TXN

PID = 1001


def _answer(r) -> tuple[int, int, int]:
    return r.error_code, r.producer_id, r.producer_epoch


def test_every_end_bumps_the_epoch_and_the_markers_carry_it():
    h = Harness()
    h.init()
    assert h.broker_add(PID, 0, [("t", 0), ("t", 1)]) == {("t", 0): 0, ("t", 1): 0}
    assert h.state().client_transaction_version == TV_2
    assert _answer(h.end(PID, 0, version=5)) == (0, PID, 1)
    m = h.state()
    assert (m.state, m.producer_epoch, m.last_producer_epoch) == (S.PREPARE_COMMIT, 1, 0)
    (job,) = h.sink.jobs
    assert job.committed and job.producer_epoch == 1  # a late write of epoch 0 is fenced by the marker
    # The client retries the EndTxn whose answer it lost, with the epoch before the bump.
    assert h.end(PID, 0, version=5).error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    h.finish_markers()
    assert _answer(h.end(PID, 0, version=5)) == (0, PID, 1)
    assert h.end(PID, 0, commit=False, version=5).error_code == ErrorCode.INVALID_TXN_STATE
    # The next transaction goes on with the new epoch; the old one is fenced.
    assert h.broker_add(PID, 0) == {("t", 0): ErrorCode.PRODUCER_FENCED}
    assert h.broker_add(PID, 1, [("t", 2)]) == {("t", 2): 0}
    assert _answer(h.end(PID, 1, commit=False, version=5)) == (0, PID, 2)
    (job,) = h.finish_markers()
    assert not job.committed and job.partitions == {("t", 2)} and job.producer_epoch == 2
    assert h.state().state is S.COMPLETE_ABORT
    assert h.end(PID, 0, version=5).error_code == ErrorCode.PRODUCER_FENCED  # two bumps behind: a zombie


def test_many_transactions_each_a_new_epoch():
    h = Harness()
    h.init()
    epoch = 0
    for i in range(20):
        h.broker_add(PID, epoch, [("t", i % 3)])
        r = h.end(PID, epoch, commit=i % 2 == 0, version=5)
        assert _answer(r) == (0, PID, epoch + 1)
        (job,) = h.finish_markers()
        assert job.producer_epoch == epoch + 1 and job.committed == (i % 2 == 0)
        epoch = r.producer_epoch
    assert h.state().producer_epoch == 20
    assert (h.tc.counts.epoch_bumps, h.tc.counts.producer_ids_rotated) == (20, 0)  # (the metrics' counts)


def test_an_abort_with_nothing_added_bumps_too():
    """A TV2 client cannot know whether a partition leader added its partition before a failure, so it may
    abort a transaction that never opened here (Kafka's noPartitionAdded): answered with a new epoch,
    no markers to write."""
    h = Harness()
    h.init()
    assert h.end(PID, 0, version=5).error_code == ErrorCode.INVALID_TXN_STATE  # nothing to commit
    assert _answer(h.end(PID, 0, commit=False, version=5)) == (0, PID, 1)
    m = h.state()
    assert m.state is S.PREPARE_ABORT and m.partitions == frozenset() and m.txn_start_timestamp_ms == h.now
    (job,) = h.finish_markers()
    assert job.partitions == frozenset() and h.state().state is S.COMPLETE_ABORT
    assert _answer(h.end(PID, 1, commit=False, version=5)) == (0, PID, 2)  # after a Complete, too
    h.finish_markers()
    # Version 1 keeps Kafka's older rule: an abort of nothing is INVALID_TXN_STATE.
    assert _answer(h.init()) == (0, PID, 3)
    assert h.end(PID, 3, commit=False, version=4).error_code == ErrorCode.INVALID_TXN_STATE


def test_an_exhausted_epoch_moves_to_a_new_producer_id():
    h = Harness()
    h.init()
    shard = h.tc.shard_for(TXN)
    shard.transactions[TXN] = replace(h.state(), producer_epoch=32765)
    h.broker_add(PID, 32765)
    assert _answer(h.end(PID, 32765, version=5)) == (0, PID, 32766)
    h.finish_markers()
    h.broker_add(PID, 32766)
    assert _answer(h.end(PID, 32766, version=5)) == (0, 1002, 0)  # 32767 is kept for fencing
    m = h.state()
    assert (m.producer_id, m.producer_epoch, m.next_producer_id) == (PID, 32767, 1002)
    (job,) = h.sink.jobs
    assert (job.producer_id, job.producer_epoch) == (PID, 32767)  # the markers close the old id's transaction
    assert h.end(1002, 0, version=5).error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    h.finish_markers()
    m = h.state()
    assert (m.producer_id, m.producer_epoch, m.previous_producer_id, m.next_producer_id) == (1002, 0, PID, -1)
    # A retry of the rotating EndTxn (its answer lost) is recognised by the old id's last epoch.
    assert _answer(h.end(PID, 32766, version=5)) == (0, 1002, 0)
    assert h.broker_add(1002, 0) == {("t", 0): 0}
    assert _answer(h.end(1002, 0, version=5)) == (0, 1002, 1)
    assert (h.tc.counts.epoch_bumps, h.tc.counts.producer_ids_rotated) == (3, 1)


def test_a_timed_out_transaction_is_aborted_with_one_bump():
    h = Harness()
    h.init()
    h.broker_add(PID, 0)
    h.advance(TIMEOUT_MS + 1)
    m = h.state()
    assert m.state is S.PREPARE_ABORT and m.producer_epoch == 1
    h.finish_markers()
    # The producer's own abort, with the epoch before the bump, is answered as a retry: it goes on at epoch 1.
    assert _answer(h.end(PID, 0, commit=False, version=5)) == (0, PID, 1)
    assert h.end(PID, 0, commit=True, version=5).error_code == ErrorCode.INVALID_TXN_STATE


def test_a_new_producer_instance_fences_a_tv2_zombie():
    h = Harness()
    h.init()
    h.broker_add(PID, 0)
    assert h.init().error_code == ErrorCode.CONCURRENT_TRANSACTIONS  # aborts the open one, epoch 1
    h.finish_markers()
    r = h.init()
    assert _answer(r) == (0, PID, 2)
    # The zombie (epoch 0) is two behind; one behind (epoch 1, the fencing abort's) is not its own end either.
    assert h.end(PID, 0, version=5).error_code == ErrorCode.PRODUCER_FENCED
    assert h.broker_add(PID, 2) == {("t", 0): 0}
    assert h.end(PID, 1, version=5).error_code == ErrorCode.PRODUCER_FENCED


def test_end_txn_v5_answer_carries_the_producer():
    h = Harness()
    h.init()
    h.broker_add(PID, 0)
    r = h.end(PID, 0, version=5)
    assert isinstance(r, EndTxnResponse) and (r.producer_id, r.producer_epoch) == (PID, 1)


def test_records_carry_the_client_transaction_version():
    h = Harness()
    h.init()
    h.broker_add(PID, 0)
    m = h.state()
    key, value = serialize(TransactionRecord(TXN, m))
    assert value[:2] == b"\x00\x01"  # version 1: the tagged ClientTransactionVersion needs it
    assert deserialize(key, value).metadata == replace(m, last_producer_epoch=-1)
    h.end(PID, 0, version=5)
    h.finish_markers()
    # Replayed by a new coordinator (a failover), the transaction keeps its version and epoch.
    h.reload()
    h.tc.on_elected(h.tc.partition_for(TXN), h.now)
    m = h.state()
    assert (m.state, m.producer_epoch, m.client_transaction_version) == (S.COMPLETE_COMMIT, 1, TV_2)
    # A client's own AddPartitionsToTxn (v3) is version 1's: its EndTxn v4 does not bump.
    assert h.add(PID, 1) == {("t", 0): 0}
    assert h.state().client_transaction_version == TV_0
    assert _answer(h.end(PID, 1, version=4))[0] == 0 and h.state().producer_epoch == 1


@pytest.mark.parametrize("seed", range(12))
def test_a_tv2_client_against_the_coordinator_random_steps(seed):
    """A Transactions V2 client (the Java client's rules: add through its leaders, end with EndTxn v5, take the
    answered producer, abort when fenced by a timeout, retry an end whose answer it lost) against the
    coordinator, in seeded random steps with markers, timeouts and failovers (replay) in between. After every
    step: the client's producer is the coordinator's once nothing is in flight, epochs only grow within a
    producer id, a new id comes only from the epoch running out, and a reload replays the same table."""
    rng = random.Random(seed)
    h = Harness()
    r = h.init()
    pid, epoch = r.producer_id, r.producer_epoch
    if seed % 3 == 0:  # near the end of the epochs: the rotation is exercised too
        shard = h.tc.shard_for(TXN)
        shard.transactions[TXN] = replace(h.state(), producer_epoch=32760)
        epoch = 32760
    seen_ids = [pid]
    last_answered: tuple[int, int] | None = None  # an EndTxn whose answer the client "lost"
    for step in range(120):
        op = rng.random()
        if op < 0.35:
            (code,) = h.broker_add(pid, epoch, [("t", rng.randrange(3))]).values()
            if code == ErrorCode.PRODUCER_FENCED:  # a timeout aborted it (epoch bumped): the client aborts
                r = h.end(pid, epoch, commit=False, version=5)
                assert r.error_code in (0, ErrorCode.CONCURRENT_TRANSACTIONS), (seed, step, r)
                if r.error_code == 0:
                    pid, epoch = r.producer_id, r.producer_epoch
            else:
                assert code in (0, ErrorCode.CONCURRENT_TRANSACTIONS), (seed, step, code)
        elif op < 0.6:
            before = (pid, epoch)
            r = h.end(pid, epoch, commit=rng.random() < 0.6, version=5)
            assert r.error_code in (0, ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.INVALID_TXN_STATE), (seed, step, r)
            if r.error_code == ErrorCode.INVALID_TXN_STATE and h.state().producer_epoch == epoch + 1:
                # A commit of what a timeout aborted: the client aborts, as the Java client does when fenced.
                r = h.end(pid, epoch, commit=False, version=5)
                assert r.error_code in (0, ErrorCode.CONCURRENT_TRANSACTIONS), (seed, step, r)
            if r.error_code == 0:
                assert (r.producer_id, r.producer_epoch) == (pid, epoch + 1) or (
                    epoch >= 32766 and r.producer_epoch == 0 and r.producer_id > pid), (seed, step, before, r)
                last_answered = before
                pid, epoch = r.producer_id, r.producer_epoch
                if pid not in seen_ids:
                    seen_ids.append(pid)
        elif op < 0.8:
            h.finish_markers()
        elif op < 0.88 and last_answered is not None:
            # A retry of the last end with the epoch (and id) before it: answered the current producer, or told
            # to wait, or (the other way round, or a later transaction under way) refused; never a new bump.
            state_before = h.state()
            r = h.end(*last_answered, commit=state_before.state is not S.COMPLETE_ABORT, version=5)
            assert h.state() == state_before, (seed, step)
            if r.error_code == 0:
                assert (r.producer_id, r.producer_epoch) == (pid, epoch), (seed, step, r)
        elif op < 0.93:
            h.advance(TIMEOUT_MS + 1)  # an Ongoing transaction times out (its epoch bumped: the client is fenced)
        else:
            before = {p: dict(h.tc.runtime.shard(p).transactions) for p in h.tc.runtime.partitions}
            h.reload()
            after = {p: dict(h.tc.runtime.shard(p).transactions) for p in h.tc.runtime.partitions}
            strip = lambda t: {p: {k: replace(m, last_producer_epoch=-1) for k, m in d.items()} for p, d in t.items()}
            assert strip(before) == strip(after), (seed, step)
        m = h.state()
        assert m.producer_id in seen_ids or m.next_producer_id in seen_ids or m.producer_id > seen_ids[-1], (seed, step)
        assert seen_ids == sorted(seen_ids), (seed, step)
        if not m.state.is_prepare and m.producer_id == pid:
            assert m.producer_epoch >= epoch, (seed, step, m, epoch)
    h.finish_markers()
    h.finish_markers()
    m = h.state()
    assert not m.state.is_prepare and m.producer_id == pid, (seed, m, pid)
