"""Transactions in a partition log: markers, the last stable offset, the aborted-transaction index
(format, collection, truncation, retention, recovery), followers, and the cleaner."""

from __future__ import annotations

import os
import struct

import pytest

from odradek.protocol.records import ABORT, COMMIT, build_batch, build_control_batch, iter_batches, iter_records
from odradek.storage.cleaner import Cleaner
from odradek.storage.config import LogConfig
from odradek.storage.errors import InvalidProducerEpochError, InvalidTxnStateError, TransactionCoordinatorFencedError
from odradek.storage.log import Log
from odradek.storage.producer_state import AppendOrigin
from odradek.storage.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex

NOW = 1_700_000_000_000
DAY = 24 * 3600 * 1000


def data(pid: int, seq: int, n: int = 1, *, epoch: int = 0, transactional: bool = True, key: bytes = b"k",
         ts: int = NOW) -> bytearray:
    return bytearray(build_batch([(key, b"%d-%d" % (pid, seq + i), None, ts) for i in range(n)], producer_id=pid,
                                 producer_epoch=epoch, base_sequence=seq, transactional=transactional))


def marker(log: Log, pid: int, kind: int, *, epoch: int = 0, coordinator_epoch: int = 0, now_ms: int = NOW):
    return log.append(bytearray(build_control_batch(kind, pid, epoch, coordinator_epoch, now_ms)), leader_epoch=0,
                      now_ms=now_ms, origin=AppendOrigin.COORDINATOR)


def put(log: Log, buf: bytearray, now_ms: int = NOW):
    return log.append(buf, leader_epoch=0, now_ms=now_ms)


def index_entries(log: Log) -> list[tuple[int, AbortedTxn]]:
    return [(s.base_offset, t) for s in log.segments for t in s.txn_index.entries]


def stable(log: Log) -> int | None:
    """The first unstable offset once everything appended is replicated (a single replica)."""
    log.producer_state.on_high_watermark_updated(log.log_end_offset)
    return log.first_unstable_offset


def test_index_file_is_kafkas_format_and_collects_overlapping_ranges(tmp_path):
    index = TransactionIndex(str(tmp_path / "00000000000000000000.txnindex"), 0)
    index.append(AbortedTxn(7, 0, 10, 11))
    index.append(AbortedTxn(8, 5, 20, 21))
    index.append(AbortedTxn(9, 30, 40, 50))
    raw = open(index.path, "rb").read()
    assert ENTRY_SIZE == 34 and len(raw) == 3 * 34
    assert struct.unpack_from(">hqqqq", raw, 34) == (0, 8, 5, 20, 21)
    with pytest.raises(ValueError):
        index.append(AbortedTxn(1, 0, 40, 41))  # last offsets must grow
    assert index.collect(11, 25) == ([AbortedTxn(8, 5, 20, 21)], True)  # 9's LSO 50 >= 25: complete
    assert index.collect(11, 60) == ([AbortedTxn(8, 5, 20, 21), AbortedTxn(9, 30, 40, 50)], False)
    assert index.collect(0, 11) == ([AbortedTxn(7, 0, 10, 11)], True)  # its LSO reaches the bound: complete
    # A torn last entry (crash mid-append) is cut when the file is read again; truncation by marker offset.
    with open(index.path, "ab") as f:
        f.write(b"\x00" * 10)
    again = TransactionIndex(index.path, 0)
    assert [t.producer_id for t in again.entries] == [7, 8, 9] and os.path.getsize(index.path) == 3 * 34
    again.truncate_to(20)
    assert [t.producer_id for t in TransactionIndex(index.path, 0).entries] == [7]
    again.reset()
    assert not os.path.exists(index.path)


def test_markers_move_the_last_stable_offset_and_index_aborts(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=NOW)
    put(log, data(1, 0))                                  # 0  (A)
    put(log, data(2, 0))                                  # 1  (B)
    put(log, data(3, 0, transactional=False))             # 2  plain
    assert stable(log) == 0
    marker(log, 1, COMMIT)                                # 3
    assert log.first_unstable_offset == 0  # decided but not yet below the high watermark
    assert stable(log) == 1
    marker(log, 2, ABORT)                                 # 4
    assert stable(log) is None
    assert index_entries(log) == [(0, AbortedTxn(2, 1, 4, 5))]
    # An abort with another transaction still open records that one's start as the LSO.
    put(log, data(1, 1))                                  # 5  (A again)
    put(log, data(2, 1))                                  # 6  (B again)
    marker(log, 2, ABORT)                                 # 7
    assert index_entries(log)[-1] == (0, AbortedTxn(2, 6, 7, 5))
    assert stable(log) == 5
    assert [(t.producer_id, t.first_offset) for t in log.collect_aborted_transactions(0, 8)] == [(2, 1), (2, 6)]
    assert log.collect_aborted_transactions(5, 6) == []  # the entry at 4 ends before the range... and LSO 5 stops it
    # A marker without a transaction (nothing written) completes nothing and indexes nothing.
    marker(log, 9, ABORT)
    assert len(index_entries(log)) == 2


def test_stale_markers_and_non_transactional_writes_inside_a_transaction_are_refused(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=NOW)
    put(log, data(1, 0, epoch=3))
    with pytest.raises(InvalidTxnStateError):
        put(log, data(1, 1, epoch=3, transactional=False))
    marker(log, 1, ABORT, epoch=3, coordinator_epoch=7)
    with pytest.raises(TransactionCoordinatorFencedError) as e:
        marker(log, 1, COMMIT, epoch=3, coordinator_epoch=6)
    assert e.value.error_code == 52
    with pytest.raises(InvalidProducerEpochError):
        marker(log, 1, COMMIT, epoch=2, coordinator_epoch=7)
    end = log.log_end_offset
    marker(log, 1, ABORT, epoch=4, coordinator_epoch=7)  # a bump (transaction version 2 writes markers so)
    assert log.log_end_offset == end + 1 and log.producer_state.producers[1].producer_epoch == 4


def multi_segment_log(path) -> Log:
    """Two producers' transactions spread over several small segments, aborted and committed."""
    log = Log.open(str(path), LogConfig(segment_bytes=400), now_ms=NOW)
    seqs = {1: 0, 2: 0}
    for round_ in range(6):
        for pid in (1, 2):
            put(log, data(pid, seqs[pid], 2, key=b"key%d" % round_))
            seqs[pid] += 2
        marker(log, 1, ABORT if round_ % 2 else COMMIT)
        marker(log, 2, ABORT if round_ % 3 == 0 else COMMIT)
    put(log, data(1, seqs[1]))  # one left open
    return log


def test_truncation_removes_index_entries_and_reopens_the_transaction(tmp_path):
    log = multi_segment_log(tmp_path / "t-0")
    assert len(log.segments) > 3
    entries = index_entries(log)
    assert [t.producer_id for _, t in entries] == [2, 1, 1, 2, 1]
    last = entries[-1][1]
    log.truncate_to(last.last_offset)  # the marker goes: the transaction is open again
    assert index_entries(log) == entries[:-1]
    assert log.producer_state.producers[1].current_txn_first_offset == last.first_offset
    assert log.first_unstable_offset == last.first_offset


def test_unclean_recovery_rebuilds_the_index(tmp_path):
    log = multi_segment_log(tmp_path / "t-0")
    entries = index_entries(log)
    ongoing = dict(log.producer_state.ongoing)
    for s in log.segments:
        s.flush()
    # Lose every index file; the log reopens without a clean shutdown from the start.
    for name in os.listdir(log.directory):
        if name.endswith(".txnindex") or name.endswith(".snapshot"):
            os.unlink(os.path.join(log.directory, name))
    reopened = Log.open(log.directory, LogConfig(segment_bytes=400), now_ms=NOW, recovery_point=0)
    assert index_entries(reopened) == entries
    assert reopened.producer_state.ongoing == ongoing
    # And a recovery from a later point keeps the earlier entries and rebuilds the rest the same.
    third = reopened.segments[2].base_offset
    again = Log.open(log.directory, LogConfig(segment_bytes=400), now_ms=NOW, recovery_point=third)
    assert index_entries(again) == entries


def test_a_clean_restart_keeps_the_index_and_open_transactions(tmp_path):
    log = multi_segment_log(tmp_path / "t-0")
    entries, ongoing = index_entries(log), dict(log.producer_state.ongoing)
    log.close()
    reopened = Log.open(log.directory, LogConfig(segment_bytes=400), now_ms=NOW, had_clean_shutdown=True)
    assert index_entries(reopened) == entries and reopened.producer_state.ongoing == ongoing
    assert reopened.has_aborted_txns


def test_a_follower_rebuilds_the_same_state_from_the_same_batches(tmp_path):
    leader = multi_segment_log(tmp_path / "leader")
    follower = Log.open(str(tmp_path / "follower"), LogConfig(segment_bytes=400), now_ms=NOW)
    offset = 0
    while offset < leader.log_end_offset:
        chunk = leader.read_bytes(offset, 1 << 20, max_offset=leader.log_end_offset)
        follower.append_as_follower(bytearray(chunk), now_ms=NOW)
        offset = follower.log_end_offset
    assert [t for _, t in index_entries(follower)] == [t for _, t in index_entries(leader)]
    assert follower.producer_state.ongoing == leader.producer_state.ongoing
    assert {p: (e.producer_epoch, e.coordinator_epoch, e.current_txn_first_offset, e.last_seq)
            for p, e in follower.producer_state.producers.items()} == \
        {p: (e.producer_epoch, e.coordinator_epoch, e.current_txn_first_offset, e.last_seq)
         for p, e in leader.producer_state.producers.items()}


def test_retention_deletes_indexes_with_their_segments(tmp_path):
    log = multi_segment_log(tmp_path / "t-0")
    first = log.segments[0]
    assert first.txn_index.entries and os.path.exists(first.txn_index.path)
    log.delete_records_before(log.segments[1].base_offset, now_ms=NOW)
    assert not os.path.exists(first.txn_index.path)
    assert all(s.base_offset > first.base_offset for s in log.segments)


def records_of(log: Log):
    out = []
    for segment in log.segments:
        raw = segment.read_at(0, segment.size)
        for pos, header in iter_batches(raw):
            recs = list(iter_records(raw[pos : pos + header.size], max_uncompressed_bytes=1 << 24))
            out.append((header.is_control, header.producer_id, [r.value for r in recs]))
    return out


def test_the_cleaner_removes_aborted_data_then_its_markers_after_the_delete_horizon(tmp_path):
    config = LogConfig(cleanup_policy="compact", segment_bytes=300, min_cleanable_dirty_ratio=0.0,
                       delete_retention_ms=DAY)
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=NOW)
    put(log, data(1, 0, key=b"a"))      # committed a=1-0
    put(log, data(2, 0, key=b"a"))      # aborted a=2-0: must not shadow the committed value
    put(log, data(2, 1, key=b"b"))      # aborted
    marker(log, 1, COMMIT)
    marker(log, 2, ABORT)
    for i in range(6):                  # unrelated keys, so that the markers' segments are inactive
        put(log, data(5, i, key=b"z%d" % i, transactional=False))
    log.producer_state.on_high_watermark_updated(log.log_end_offset)
    Cleaner().clean(log, now_ms=NOW)
    kept = records_of(log)
    values = [v for control, _, vals in kept if not control for v in vals]
    assert b"1-0" in values and b"2-0" not in values and b"2-1" not in values
    markers = [pid for control, pid, _ in kept if control]
    assert markers == [1, 2]  # this pass still saw the aborted data: the marker and its entry stay
    assert [t.producer_id for _, t in index_entries(log)] == [2]
    # Producer 2's last batch is kept (emptied) while the producer is active, and with it the marker, as
    # in Kafka; once it expires, the batch goes, then the marker after its delete horizon.
    log.remove_expired_producers(NOW + 2 * DAY)
    Cleaner().clean(log, now_ms=NOW + 2 * DAY)  # the emptied batch goes (this pass still saw it)
    assert [(control, pid) for control, pid, _ in records_of(log)][:3] == [(False, 1), (True, 1), (True, 2)]
    Cleaner().clean(log, now_ms=NOW + 2 * DAY)
    assert [pid for control, pid, _ in records_of(log) if control] == [1, 2]  # stamped with a horizon
    assert index_entries(log) == []  # no aborted data left, so nothing to index
    Cleaner().clean(log, now_ms=NOW + 4 * DAY)
    assert [pid for control, pid, _ in records_of(log) if control] == [1]
    assert [v for control, _, vals in records_of(log) if not control for v in vals][0] == b"1-0"


def test_the_cleaner_carries_index_entries_of_aborted_data_it_keeps(tmp_path):
    # An aborted transaction whose data the cleaner cannot drop yet (here, its producer's last batch is
    # kept empty) keeps its marker and index entry in the cleaned segment.
    config = LogConfig(cleanup_policy="compact", segment_bytes=300, min_cleanable_dirty_ratio=0.0)
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=NOW)
    put(log, data(2, 0, key=b"a"))
    marker(log, 2, ABORT)
    for i in range(6):
        put(log, data(5, i, key=b"z%d" % i, transactional=False))
    log.producer_state.on_high_watermark_updated(log.log_end_offset)
    before = [t for _, t in index_entries(log)]
    Cleaner().clean(log, now_ms=NOW)
    assert [t for _, t in index_entries(log)] == before
    assert [pid for control, pid, _ in records_of(log) if control] == [2]
    assert [vals for control, pid, vals in records_of(log) if pid == 2 and not control] == [[]]


# -- the replica manager: marker appends with acks=all, read_committed reads ---------------------------

def replicated_leader(tmp_path):
    import uuid

    from odradek.replication.replica_manager import ReplicaManager
    from odradek.purgatory.timing_wheel import Timer
    from odradek.storage.names import TopicPartition

    rm = ReplicaManager(node_id=1, timer=Timer(tick_ms=1, wheel_size=20, start_ms=NOW))
    log = Log.open(str(tmp_path / "t-0"), LogConfig(segment_bytes=400), now_ms=NOW)
    tp = TopicPartition("t", 0)
    rm.apply_partition_state(tp, topic_id=uuid.UUID(int=1), log=log, leader_id=1, leader_epoch=0, replicas=(1, 2),
                             isr=(1, 2), min_insync_replicas=1, now_ms=NOW, partition_epoch=0)
    return rm, tp, log


def read(rm, tp, offset: int, isolation, replica_id: int = -1):
    from odradek.replication.replica_manager import FetchRequestPartition

    got = {}
    rm.fetch_records([FetchRequestPartition(tp, offset, 1 << 20)], max_bytes=1 << 20, min_bytes=1, max_wait_ms=0,
                     isolation=isolation, now_ms=NOW, respond=got.update, replica_id=replica_id)
    return got[tp]


def test_a_marker_waits_for_the_isr_and_read_committed_stops_at_the_lso(tmp_path):
    from odradek.replication.partition import FetchIsolation

    rm, tp, log = replicated_leader(tmp_path)
    put(log, data(1, 0, 2))                             # 0-1, aborted later
    put(log, data(3, 0, transactional=False))           # 2
    read(rm, tp, 3, FetchIsolation.LOG_END, replica_id=2)  # the follower has it all: HW 3
    committed = read(rm, tp, 0, FetchIsolation.TXN_COMMITTED)
    assert (committed.high_watermark, committed.last_stable_offset, committed.size) == (3, 0, 0)
    answers = []
    rm.append_records({tp: bytearray(build_control_batch(ABORT, 1, 0, 0, NOW))}, required_acks=-1, timeout_ms=1000,
                      now_ms=NOW, respond=answers.append, origin=AppendOrigin.COORDINATOR)
    assert answers == []  # acks=all: waits for the follower
    assert read(rm, tp, 0, FetchIsolation.TXN_COMMITTED).last_stable_offset == 0  # decided, not yet replicated
    read(rm, tp, 4, FetchIsolation.LOG_END, replica_id=2)
    assert answers and answers[0][tp].error_code == 0 and answers[0][tp].base_offset == 3
    committed = read(rm, tp, 0, FetchIsolation.TXN_COMMITTED)
    assert committed.last_stable_offset == 4 and committed.aborted_transactions == [(1, 0)]
    # Past the aborted range (or with none at all, read_uncommitted): nothing to say, so the packed path.
    assert read(rm, tp, 2, FetchIsolation.TXN_COMMITTED).aborted_transactions == [(1, 0)]  # its marker is at 3
    put(log, data(3, 1, transactional=False))           # 4
    read(rm, tp, 5, FetchIsolation.LOG_END, replica_id=2)
    assert read(rm, tp, 4, FetchIsolation.TXN_COMMITTED).aborted_transactions is None
    assert read(rm, tp, 0, FetchIsolation.HIGH_WATERMARK).aborted_transactions is None
    # A client may not write markers.
    rm.append_records({tp: bytearray(build_control_batch(ABORT, 1, 0, 0, NOW))}, required_acks=1, timeout_ms=1000,
                      now_ms=NOW, respond=answers.append)
    assert answers[-1][tp].error_code == 87  # INVALID_RECORD


def test_the_cleaner_keeps_a_marker_that_is_its_active_producers_last_write(tmp_path):
    # An abort that bumped the epoch (transaction version 2) is the producer's last write: kept, emptied,
    # after its horizon, so the epoch that fences the producer's zombies survives a replay.
    config = LogConfig(cleanup_policy="compact", segment_bytes=300, min_cleanable_dirty_ratio=0.0,
                       delete_retention_ms=DAY)
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=NOW)
    put(log, data(7, 0, key=b"a"))
    marker(log, 7, ABORT, epoch=1)
    for i in range(6):
        put(log, data(5, i, key=b"z%d" % i, transactional=False))
    log.producer_state.on_high_watermark_updated(log.log_end_offset)
    for now_ms in (NOW, NOW, NOW + 2 * DAY):
        Cleaner().clean(log, now_ms=now_ms)
    kept = [(control, pid, vals) for control, pid, vals in records_of(log) if pid == 7]
    assert kept == [(True, 7, [])]


def read_committed_view(log: Log) -> dict[bytes, bytes | None]:
    """Latest value per key as a read_committed consumer sees the log: the aborted transactions of the
    whole range from the index, applied batch by batch as Kafka's consumer does (a producer's batches are
    skipped from the first offset of an aborted transaction until its ABORT marker)."""
    pending = sorted(log.collect_aborted_transactions(log.log_start_offset, log.log_end_offset),
                     key=lambda t: t.first_offset)
    aborting: set[int] = set()
    latest: dict[bytes, bytes | None] = {}
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        raw = log.read_bytes(offset, 1 << 20)
        batches = list(iter_batches(raw))
        if not batches:
            break
        for pos, header in batches:
            while pending and pending[0].first_offset <= header.last_offset:
                aborting.add(pending.pop(0).producer_id)
            records = list(iter_records(raw[pos : pos + header.size], max_uncompressed_bytes=1 << 24))
            if header.is_control:
                if records and records[0].key[2:4] == b"\x00\x00":  # ABORT
                    aborting.discard(header.producer_id)
            elif not (header.is_transactional and header.producer_id in aborting):
                latest.update((r.key, r.value) for r in records)
            offset = header.next_offset
    return latest


def _transactional_log(directory: str, config: LogConfig) -> Log:
    import random

    rng = random.Random(11)
    log = Log.open(directory, config, now_ms=NOW)
    seqs = {1: 0, 2: 0, 3: 0}
    open_txn = set()
    for i in range(120):
        pid = rng.choice((1, 2, 3))
        if pid in open_txn and rng.random() < 0.3:
            marker(log, pid, COMMIT if rng.random() < 0.5 else ABORT)
            open_txn.discard(pid)
        elif rng.random() < 0.2:
            put(log, bytearray(build_batch([(b"k%d" % rng.randrange(6), b"plain%d" % i, None, NOW)])))
        else:
            put(log, data(pid, seqs[pid], key=b"k%d" % rng.randrange(6)))
            seqs[pid] += 1
            open_txn.add(pid)
    for pid in sorted(open_txn):
        marker(log, pid, ABORT)
    log.producer_state.on_high_watermark_updated(log.log_end_offset)
    return log


def test_compaction_and_a_crash_at_any_step_keep_what_read_committed_readers_see(tmp_path, monkeypatch):
    from tests.harness.crash import Crash, crash_after

    # (crashes are simulated by failing renames and unlinks, so the fsyncs, slow on a busy disk, can go)
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    monkeypatch.setattr(os, "fdatasync", lambda fd: None)
    config = LogConfig(cleanup_policy="compact", segment_bytes=3000, min_cleanable_dirty_ratio=0.0)
    reference = _transactional_log(str(tmp_path / "ref" / "t-0"), config)
    assert index_entries(reference)
    view = read_committed_view(reference)
    Cleaner().clean(reference, now_ms=NOW)
    assert read_committed_view(reference) == view
    steps = 0
    while True:
        steps += 1
        directory = str(tmp_path / f"run{steps}" / "t-0")
        log = _transactional_log(directory, config)
        with monkeypatch.context() as patch:
            state = crash_after(patch, steps)
            try:
                Cleaner().clean(log, now_ms=NOW)
            except Crash:
                pass
        finished = not state["crashed"]
        del log
        recovered = Log.open(directory, config, now_ms=NOW, recovery_point=0)
        assert read_committed_view(recovered) == view, steps
        if finished:
            break
    assert steps > 10, steps
