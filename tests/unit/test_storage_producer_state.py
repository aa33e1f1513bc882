"""Idempotent producers: duplicates, sequence and epoch checks, and state that survives restarts."""

from __future__ import annotations

import os

import pytest

from odradek.protocol.records import build_batch, build_control_batch, COMMIT
from odradek.storage.config import LogConfig
from odradek.storage.errors import InvalidProducerEpochError, OutOfOrderSequenceError, UnknownProducerIdError
from odradek.storage.log import Log
from odradek.storage.producer_state import AppendOrigin, decode_snapshot, encode_snapshot

NOW = 1_700_000_000_000
INT32_MAX = 2**31 - 1


def pbatch(pid: int, epoch: int, seq: int, n: int = 1, *, transactional: bool = False) -> bytearray:
    return bytearray(build_batch([(b"k", b"v%d" % i, None, NOW) for i in range(n)], producer_id=pid,
                                 producer_epoch=epoch, base_sequence=seq, transactional=transactional))


def append(log: Log, buf: bytearray):
    return log.append(buf, leader_epoch=0, now_ms=NOW)


@pytest.fixture
def log(tmp_path):
    return Log.open(str(tmp_path / "t-0"), LogConfig(segment_bytes=1024), now_ms=NOW)


def test_retried_batch_returns_its_original_offsets(log):
    first = append(log, pbatch(1, 0, 0, 3))
    append(log, pbatch(2, 0, 0, 2))
    second = append(log, pbatch(1, 0, 3, 2))
    end = log.log_end_offset
    retry = append(log, pbatch(1, 0, 0, 3))
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    retry = append(log, pbatch(1, 0, 3, 2))
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (second.first_offset, second.last_offset)
    assert log.log_end_offset == end


def test_only_the_last_five_batches_are_remembered(log):
    for seq in range(7):
        append(log, pbatch(1, 0, seq))
    assert append(log, pbatch(1, 0, 2)).duplicate
    with pytest.raises(OutOfOrderSequenceError):
        append(log, pbatch(1, 0, 1))


def test_out_of_order_and_fenced_epochs_are_rejected(log):
    append(log, pbatch(1, 3, 0, 2))
    with pytest.raises(OutOfOrderSequenceError) as e:
        append(log, pbatch(1, 3, 5))
    assert e.value.error_code == 45
    with pytest.raises(InvalidProducerEpochError) as e:
        append(log, pbatch(1, 2, 2))
    assert e.value.error_code == 47
    with pytest.raises(OutOfOrderSequenceError):
        append(log, pbatch(1, 4, 1))
    assert append(log, pbatch(1, 4, 0)).first_offset == 2
    assert append(log, pbatch(1, 4, 1)).first_offset == 3


def test_unknown_producer_must_start_at_sequence_zero(log):
    with pytest.raises(UnknownProducerIdError) as e:
        append(log, pbatch(9, 0, 17))
    assert e.value.error_code == 59
    assert log.log_end_offset == 0
    append(log, pbatch(9, 0, 0))


def test_sequences_wrap_at_int32_max(log):
    log.append_as_follower(_at(pbatch(1, 0, INT32_MAX - 1, 2), 0), now_ms=NOW)
    assert log.producer_state.producers[1].last_seq == INT32_MAX
    append(log, pbatch(1, 0, 0, 3))
    with pytest.raises(OutOfOrderSequenceError):
        append(log, pbatch(1, 0, 0))


def test_a_rejected_batch_in_a_multi_batch_append_writes_nothing(log):
    append(log, pbatch(1, 0, 0))
    with pytest.raises(OutOfOrderSequenceError):
        append(log, pbatch(2, 0, 0) + pbatch(1, 0, 5))
    assert log.log_end_offset == 1
    assert 2 not in log.producer_state.producers


def test_state_survives_clean_and_unclean_reopen(tmp_path):
    directory = str(tmp_path / "t-0")
    config = LogConfig(segment_bytes=1024)
    log = Log.open(directory, config, now_ms=NOW)
    offsets = {}
    for i in range(40):
        pid = i % 3
        info = append(log, pbatch(pid, 1, i // 3, 1))
        offsets[(pid, i // 3)] = info.first_offset
    assert len(log.segments) > 2
    end = log.log_end_offset
    log.close()

    clean = Log.open(directory, config, now_ms=NOW, recovery_point=end, had_clean_shutdown=True)
    retry = append(clean, pbatch(0, 1, 13))
    assert retry.duplicate and retry.first_offset == offsets[(0, 13)]
    with pytest.raises(OutOfOrderSequenceError):
        append(clean, pbatch(1, 1, 20))
    append(clean, pbatch(1, 1, 13))
    del clean

    for name in os.listdir(directory):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(directory, name))
    unclean = Log.open(directory, config, now_ms=NOW)
    assert append(unclean, pbatch(1, 1, 13)).duplicate
    assert append(unclean, pbatch(2, 1, 12)).duplicate
    with pytest.raises(InvalidProducerEpochError):
        append(unclean, pbatch(2, 0, 0))
    append(unclean, pbatch(2, 1, 13))


def test_truncation_rewinds_producer_state(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), LogConfig(segment_bytes=1024), now_ms=NOW)
    for seq in range(30):
        append(log, pbatch(1, 0, seq))
    log.truncate_to(12)
    assert log.producer_state.producers[1].last_seq == 11
    assert append(log, pbatch(1, 0, 12)).first_offset == 12
    log.truncate_to(0)
    with pytest.raises(UnknownProducerIdError):
        append(log, pbatch(1, 0, 5))


def test_transactions_set_the_first_unstable_offset(log):
    append(log, pbatch(1, 0, 0))
    append(log, pbatch(5, 2, 0, 2, transactional=True))
    append(log, pbatch(5, 2, 2, 1, transactional=True))
    assert log.first_unstable_offset == 1
    marker = bytearray(build_control_batch(COMMIT, 5, 2, 0, NOW))
    log.append(marker, leader_epoch=0, now_ms=NOW, origin=AppendOrigin.COORDINATOR)
    assert log.first_unstable_offset == 1  # decided, but stable only once the marker is replicated
    log.producer_state.on_high_watermark_updated(log.log_end_offset - 1)
    assert log.first_unstable_offset == 1
    log.producer_state.on_high_watermark_updated(log.log_end_offset)
    assert log.first_unstable_offset is None


def test_expired_producers_are_forgotten(log):
    append(log, pbatch(1, 0, 0))
    assert log.remove_expired_producers(NOW + 1000) == 0
    assert log.remove_expired_producers(NOW + 24 * 3600 * 1000) == 1
    with pytest.raises(UnknownProducerIdError):
        append(log, pbatch(1, 0, 1))


def test_snapshot_round_trip_and_corruption(log):
    for seq in range(8):
        append(log, pbatch(seq % 2, 0, (seq // 2) * 2, 2))
    data = encode_snapshot(log.producer_state.producers.values())
    assert decode_snapshot(data) == list(log.producer_state.producers.values())
    for cut in (0, 3, len(data) - 1):
        with pytest.raises(ValueError):
            decode_snapshot(data[:cut])
    flipped = bytearray(data)
    flipped[-3] ^= 0x10
    with pytest.raises(ValueError):
        decode_snapshot(bytes(flipped))


def _at(buf: bytearray, offset: int) -> bytearray:
    """Stamp a base offset as a leader would, for follower appends."""
    buf[0:8] = offset.to_bytes(8, "big")
    return buf
