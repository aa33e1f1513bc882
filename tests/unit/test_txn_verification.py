"""KIP-890 part 1 on the partitions' side: the verification guard (Kafka's VerificationStateEntry and
UnifiedLog's batchMissingRequiredVerification) and the producer-state expiry around it.

Every interleaving here is driven step by step, with time as an argument: take a guard (what the broker
does before asking the coordinator), write markers or other batches, then append presenting the guard.
"""

from __future__ import annotations

import uuid

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import ABORT, COMMIT, build_batch, build_control_batch
from odradek.replication.replica_manager import ReplicaManager
from odradek.purgatory.timing_wheel import Timer
from odradek.storage.config import LogConfig
from odradek.storage.errors import InvalidTxnStateError, OutOfOrderSequenceError, UnknownProducerIdError
from odradek.storage.log import Log
from odradek.storage.names import TopicPartition
from odradek.storage.producer_state import SENTINEL, AppendOrigin, VerificationGuard

NOW = 1_700_000_000_000
HOUR = 3600 * 1000
PID, EPOCH = 4000, 0


def txn(seq: int, *, pid: int = PID, epoch: int = EPOCH, n: int = 1) -> bytearray:
    return bytearray(build_batch([(b"k", b"%d-%d" % (pid, seq + i), None, NOW) for i in range(n)], producer_id=pid,
                                 producer_epoch=epoch, base_sequence=seq, transactional=True))


def marker(log: Log, kind: int = ABORT, *, pid: int = PID, epoch: int = EPOCH, now_ms: int = NOW):
    return log.append(bytearray(build_control_batch(kind, pid, epoch, 0, now_ms)), leader_epoch=0, now_ms=now_ms,
                      origin=AppendOrigin.COORDINATOR)


def put(log: Log, buf: bytearray, guard, now_ms: int = NOW):
    return log.append(buf, leader_epoch=0, now_ms=now_ms, verification_guard=guard)


def start(log: Log, seq: int = 0, *, pid: int = PID, epoch: int = EPOCH, now_ms: int = NOW):
    return log.maybe_start_transaction_verification(pid, seq, epoch, now_ms)


@pytest.fixture(params=["single batch", "general loop"])
def log(request, tmp_path):
    """Both ways through Log.append: the one-batch path and the general loop (a compacted topic takes it)."""
    config = LogConfig(segment_bytes=1 << 20, cleanup_policy="compact" if request.param == "general loop" else "delete")
    return Log.open(str(tmp_path / "t-0"), config, now_ms=NOW)


def test_a_verified_write_opens_the_transaction_and_later_writes_need_no_guard(log):
    guard = start(log)
    assert isinstance(guard, VerificationGuard) and guard is not SENTINEL
    assert put(log, txn(0), guard).first_offset == 0
    assert log.producer_state.verification_states == {}  # spent by the write
    assert start(log, 1) is SENTINEL  # the transaction is open here: nothing to ask the coordinator
    assert put(log, txn(1), SENTINEL).first_offset == 1
    marker(log, COMMIT)
    assert log.producer_state.producers[PID].current_txn_first_offset == -1
    # The next transaction starts over: verified again.
    with pytest.raises(InvalidTxnStateError):
        put(log, txn(2), SENTINEL)
    assert put(log, txn(2), start(log, 2)).first_offset == 3


def test_a_marker_between_the_verification_and_the_write_refuses_the_write(log):
    """The race the guard closes: the coordinator said "in the transaction", then aborted it (its marker is
    written here), then the verified write arrives. Appended, it would open a transaction nobody ends."""
    put(log, txn(0), start(log))                     # 0: the transaction is open here
    guard = start(log, 1, epoch=EPOCH + 1)           # a write of the next epoch asks its coordinator...
    marker(log, ABORT, epoch=EPOCH + 1)              # 1: ...which aborts (a fence) before the answer lands
    end = log.log_end_offset
    with pytest.raises(InvalidTxnStateError, match="not part of a transaction"):
        put(log, txn(0, epoch=EPOCH + 1), guard)
    assert log.log_end_offset == end and log.producer_state.ongoing == {}
    assert log.first_unstable_offset == 0  # (only the aborted one, until the high watermark passes its marker)
    log.producer_state.on_high_watermark_updated(log.log_end_offset)
    assert log.first_unstable_offset is None  # nothing left hanging: the LSO moves on


def test_the_race_with_no_transaction_open_yet(log):
    """The first write of a transaction: verify, then the transaction is aborted (a marker with no data
    here, written because the partition was added), then the verified write: refused."""
    guard = start(log)
    marker(log, ABORT)
    with pytest.raises(InvalidTxnStateError):
        put(log, txn(0), guard)
    assert log.log_end_offset == 1 and log.producer_state.ongoing == {}


def test_a_stale_guard_does_not_pass_for_a_new_verification(log):
    """ABA: verification 1, its transaction aborted, verification 2 for the next transaction; the answer to
    1 arriving now must not let its write through, however the states compare."""
    first = start(log)
    marker(log, ABORT)
    second = start(log)
    assert second is not first
    with pytest.raises(InvalidTxnStateError):
        put(log, txn(0), first)
    assert put(log, txn(0), second).first_offset == 1


def test_without_a_verification_only_an_open_transaction_takes_transactional_writes(log):
    with pytest.raises(InvalidTxnStateError):
        put(log, txn(0), SENTINEL)  # a stray transactional batch: no coordinator knows of it
    with pytest.raises(InvalidTxnStateError):
        put(log, txn(0), VerificationGuard())  # a guard this partition never gave out
    assert log.log_end_offset == 0 and PID not in log.producer_state.producers
    # Non-transactional batches never need one; a caller that does not verify (None) is not checked.
    assert put(log, bytearray(build_batch([(b"k", b"plain", None, NOW)])), SENTINEL).first_offset == 0
    assert put(log, txn(0), None).first_offset == 1


def test_a_write_of_another_epoch_than_the_open_transaction_needs_a_guard(log):
    put(log, txn(0), start(log))
    with pytest.raises(InvalidTxnStateError):
        put(log, txn(0, epoch=EPOCH + 1), SENTINEL)
    assert start(log, 0, epoch=EPOCH + 1) is not SENTINEL


def test_a_higher_sequence_waits_for_the_lowest_being_verified(log):
    """Kafka's lowest-sequence rule: while batch 0 is being verified (say its first try failed with a
    retriable coordinator error), batch 1 of the same producer, verified meanwhile, may not overtake it."""
    guard = start(log, 0)
    assert start(log, 1) is guard  # a verification under way is joined
    with pytest.raises(OutOfOrderSequenceError, match="still being verified"):
        put(log, txn(1), guard)
    assert put(log, txn(0), guard).first_offset == 0
    assert put(log, txn(1), SENTINEL).first_offset == 1


def test_a_new_epoch_resets_the_lowest_sequence(log):
    state = log.producer_state
    start(log, 5)
    start(log, 3)
    assert (state.verification_states[PID].lowest_sequence, state.verification_states[PID].epoch) == (3, EPOCH)
    start(log, 0, epoch=EPOCH + 1)
    assert (state.verification_states[PID].lowest_sequence, state.verification_states[PID].epoch) == (0, EPOCH + 1)
    start(log, 7)  # an older epoch changes nothing
    assert state.verification_states[PID].lowest_sequence == 0


def test_verifications_never_followed_by_a_write_expire_with_the_producer_ids(log):
    expiration_ms = log.producer_state.producer_id_expiration_ms
    guard = start(log, now_ms=NOW)
    log.remove_expired_producers(NOW + expiration_ms - 1)
    assert PID in log.producer_state.verification_states
    log.remove_expired_producers(NOW + expiration_ms)
    assert log.producer_state.verification_states == {}
    with pytest.raises(InvalidTxnStateError):
        put(log, txn(0), guard)


def test_producer_ids_expire_after_their_last_write_except_with_a_transaction_open(tmp_path):
    """producer.id.expiration.ms as Kafka's: counted from the timestamp of the producer's last batch (or
    marker), checked when the broker's periodic task asks, never while the producer has a transaction open
    on the partition (its marker must still be accepted and its LSO kept)."""
    log = Log.open(str(tmp_path / "t-0"), LogConfig(producer_id_expiration_ms=HOUR), now_ms=NOW)
    idle, busy = 4001, 4002
    log.append(bytearray(build_batch([(None, b"i", None, NOW)], producer_id=idle, producer_epoch=0, base_sequence=0)),
               leader_epoch=0, now_ms=NOW)
    put(log, txn(0, pid=busy), start(log, pid=busy))
    assert log.remove_expired_producers(NOW + HOUR - 1) == 0
    assert log.remove_expired_producers(NOW + HOUR) == 1
    assert set(log.producer_state.producers) == {busy}
    assert log.remove_expired_producers(NOW + 100 * HOUR) == 0  # open: kept however long
    with pytest.raises(UnknownProducerIdError):  # the idle one is forgotten: a sequence > 0 is unknown
        log.append(bytearray(build_batch([(None, b"i", None, NOW)], producer_id=idle, producer_epoch=0,
                                         base_sequence=1)), leader_epoch=0, now_ms=NOW + HOUR)
    marker(log, COMMIT, pid=busy, now_ms=NOW + 100 * HOUR)  # the marker's timestamp is its last write now
    assert log.remove_expired_producers(NOW + 101 * HOUR - 1) == 0
    assert log.remove_expired_producers(NOW + 101 * HOUR) == 1 and log.producer_state.producers == {}


def test_a_new_expiration_applies_to_an_open_log(tmp_path):
    """The broker passes producer.id.expiration.ms in the log's config; a change reaches open logs."""
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=NOW)
    log.append(bytearray(build_batch([(None, b"i", None, NOW)], producer_id=1, producer_epoch=0, base_sequence=0)),
               leader_epoch=0, now_ms=NOW)
    assert log.remove_expired_producers(NOW + HOUR) == 0
    log.update_config(LogConfig(producer_id_expiration_ms=HOUR))
    assert log.remove_expired_producers(NOW + HOUR) == 1


def test_reopening_forgets_producers_expired_meanwhile_but_not_open_transactions(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), LogConfig(producer_id_expiration_ms=HOUR), now_ms=NOW)
    log.append(bytearray(build_batch([(None, b"i", None, NOW)], producer_id=1, producer_epoch=0, base_sequence=0)),
               leader_epoch=0, now_ms=NOW)
    put(log, txn(0), start(log))
    log.close()
    again = Log.open(str(tmp_path / "t-0"), LogConfig(producer_id_expiration_ms=HOUR), now_ms=NOW + 2 * HOUR)
    assert set(again.producer_state.producers) == {PID} and again.producer_state.ongoing == {1: PID}


# -- the replica manager: the guard travels from the verification to the append


def leader(tmp_path):
    rm = ReplicaManager(node_id=1, timer=Timer(tick_ms=1, wheel_size=20, start_ms=NOW))
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=NOW)
    tp = TopicPartition("t", 0)
    rm.apply_partition_state(tp, topic_id=uuid.UUID(int=1), log=log, leader_id=1, leader_epoch=0, replicas=(1,),
                             isr=(1,), min_insync_replicas=1, now_ms=NOW, partition_epoch=0)
    return rm, tp, log


def append(rm, entries, *, guards=None, origin=AppendOrigin.CLIENT):
    answers = []
    rm.append_records(entries, required_acks=1, timeout_ms=1000, now_ms=NOW, respond=answers.append, origin=origin,
                      verification_guards=guards)
    return answers[0]


def test_replica_manager_verify_then_marker_then_append_is_invalid_txn_state(tmp_path):
    rm, tp, log = leader(tmp_path)
    guard = rm.maybe_start_transaction_verification(tp, PID, 0, EPOCH, NOW)
    # (the coordinator is asked here; it aborts the transaction and its marker arrives first)
    assert append(rm, {tp: bytearray(build_control_batch(ABORT, PID, EPOCH, 0, NOW))},
                  origin=AppendOrigin.COORDINATOR)[tp].error_code == 0
    result = append(rm, {tp: txn(0)}, guards={tp: guard})[tp]
    assert result.error_code == ErrorCode.INVALID_TXN_STATE and result.base_offset == -1
    assert log.log_end_offset == 1  # only the marker
    assert log.first_unstable_offset is None and log.producer_state.ongoing == {}  # no transaction left hanging


def test_replica_manager_normal_path_and_the_sentinel(tmp_path):
    rm, tp, log = leader(tmp_path)
    other = TopicPartition("t", 1)
    assert rm.maybe_start_transaction_verification(other, PID, 0, EPOCH, NOW) is None  # not hosted: no guard
    guard = rm.maybe_start_transaction_verification(tp, PID, 0, EPOCH, NOW)
    assert append(rm, {tp: txn(0)}, guards={tp: guard})[tp].error_code == 0
    assert rm.maybe_start_transaction_verification(tp, PID, 1, EPOCH, NOW) is SENTINEL
    assert append(rm, {tp: txn(1)}, guards={})[tp].error_code == 0  # the SENTINEL: in the open transaction
    append(rm, {tp: bytearray(build_control_batch(COMMIT, PID, EPOCH, 0, NOW))}, origin=AppendOrigin.COORDINATOR)
    assert append(rm, {tp: txn(2)}, guards={})[tp].error_code == ErrorCode.INVALID_TXN_STATE
    assert append(rm, {tp: txn(2)}, guards=None)[tp].error_code == 0  # verification switched off: unchecked


@pytest.mark.parametrize("seed", range(8))
def test_no_transaction_opens_on_a_guard_older_than_the_producers_last_marker(tmp_path, seed):
    """Seeded interleavings of verifications, markers and appends (verified, stale, SENTINEL) for a few
    producers: a transaction opens only on a guard taken after the producer's last marker, a stale guard
    never opens one, and the log's open transactions are exactly the model's."""
    import random

    rnd = random.Random(seed)
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=NOW)
    pids = (5001, 5002, 5003)
    markers = dict.fromkeys(pids, 0)  # markers written per producer so far
    sequence = dict.fromkeys(pids, 0)
    open_txn: dict[int, bool] = dict.fromkeys(pids, False)
    guards: list[tuple[int, object, int]] = []  # (producer, guard, markers when taken)
    opened = refused_stale = 0
    for _ in range(400):
        pid = rnd.choice(pids)
        roll = rnd.random()
        if roll < 0.3:
            guard = start(log, sequence[pid], pid=pid)
            if guard is not SENTINEL:
                guards.append((pid, guard, markers[pid]))
            else:
                assert open_txn[pid]
        elif roll < 0.45:
            marker(log, rnd.choice((ABORT, COMMIT)), pid=pid)
            markers[pid] += 1
            open_txn[pid] = False
        else:
            choices = [g for g in guards if g[0] == pid] or [(pid, SENTINEL, -1)]
            _, guard, taken_at = rnd.choice(choices + [(pid, SENTINEL, -1)])
            try:
                put(log, txn(sequence[pid], pid=pid), guard)
            except InvalidTxnStateError:
                assert not open_txn[pid]  # an open transaction takes its producer's batches with any guard
                refused_stale += taken_at != -1 and taken_at < markers[pid]
                continue
            except OutOfOrderSequenceError:
                continue
            if not open_txn[pid]:
                assert taken_at == markers[pid], "a transaction opened on a guard from before the last marker"
                open_txn[pid] = True
                opened += 1
            sequence[pid] += 1
        assert {p for p, is_open in open_txn.items() if is_open} == set(log.producer_state.ongoing.values())
    assert opened >= 5 and refused_stale > 0  # the mix reached both outcomes
