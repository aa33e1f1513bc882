"""MemoryRaftLog: the in-memory log behind the Raft tests, and the crash model they rely on."""

from __future__ import annotations

import pytest

from odradek.protocol.records import build_batch, iter_batches
from odradek.raft import MemoryRaftLog, SnapshotId


def batch(*values: bytes) -> bytes:
    return build_batch([(None, v, None, 0) for v in values])


def test_leader_appends_assign_offsets_and_stamp_the_epoch():
    log = MemoryRaftLog()
    assert log.append_as_leader(batch(b"a", b"b"), 1) == (0, 1)
    assert log.append_as_leader(batch(b"c") + batch(b"d"), 2) == (2, 3)
    data = log.read(0, 1 << 20)
    headers = [h for _, h in iter_batches(data)]
    assert [(h.base_offset, h.last_offset, h.partition_leader_epoch) for h in headers] == [
        (0, 1, 1), (2, 2, 2), (3, 3, 2)]
    assert log.log_end_offset == 4 and log.latest_epoch == 2
    # A read starts at the batch holding the offset and returns at least one batch.
    assert next(iter_batches(log.read(1, 1)))[1].base_offset == 0
    assert len(list(iter_batches(log.read(2, 1)))) == 1


def test_follower_appends_keep_offsets_and_must_continue_the_log():
    leader, follower = MemoryRaftLog(), MemoryRaftLog()
    leader.append_as_leader(batch(b"a"), 3)
    leader.append_as_leader(batch(b"b"), 4)
    follower.append_as_follower(leader.read(0, 1 << 20))
    assert follower.batches() == leader.batches()
    with pytest.raises(ValueError):
        follower.append_as_follower(leader.read(0, 1 << 20))


def test_end_offset_for_epoch_has_the_leader_epoch_cache_semantics():
    log = MemoryRaftLog()
    for epoch in (1, 1, 3, 3, 5):
        log.append_as_leader(batch(b"x"), epoch)
    assert log.end_offset_for_epoch(1) == (1, 2)
    assert log.end_offset_for_epoch(2) == (1, 2)  # the largest epoch at or below it
    assert log.end_offset_for_epoch(3) == (3, 4)
    assert log.end_offset_for_epoch(5) == (5, 5)
    assert log.end_offset_for_epoch(6) == (-1, -1)
    log.truncate_to(3)
    assert log.end_offset_for_epoch(3) == (3, 3) and log.latest_epoch == 3


def test_crash_keeps_only_what_was_flushed_and_truncation_is_durable():
    log = MemoryRaftLog()
    log.append_as_leader(batch(b"a"), 1)
    log.append_as_leader(batch(b"b"), 1)
    log.flush()
    log.append_as_leader(batch(b"c"), 1)
    assert (log.log_end_offset, log.flushed_end_offset) == (3, 2)
    restarted = log.crash()
    assert (restarted.log_end_offset, restarted.flushed_end_offset) == (2, 2)
    log.truncate_to(1)
    assert log.crash().log_end_offset == 1


def test_snapshots_survive_and_the_log_starts_after_them():
    log = MemoryRaftLog()
    for _ in range(4):
        log.append_as_leader(batch(b"x"), 2)
    log.flush()
    log.store_snapshot(SnapshotId(3, 2), b"state")
    log.delete_before(3)
    assert log.log_start_offset == 3 and log.end_offset_for_epoch(2) == (2, 4)
    restarted = log.crash()
    assert restarted.latest_snapshot_id() == SnapshotId(3, 2) and restarted.read_snapshot(SnapshotId(3, 2)) == b"state"
    assert (restarted.log_start_offset, restarted.log_end_offset) == (3, 4)
    restarted.truncate_fully_and_start_at(10)
    assert (restarted.log_start_offset, restarted.log_end_offset, restarted.latest_epoch) == (10, 10, -1)
