"""The partition log: appends, reads, rolls, indexes, timestamps, truncation, leader epochs, retention."""

from __future__ import annotations

import os

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from odradek.protocol.codec import FileRegion
from odradek.protocol.records import build_batch, iter_batches, iter_records, read_batch_header
from odradek.storage.config import LogConfig
from odradek.storage.errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    UnexpectedAppendOffsetError,
)
from odradek.storage.log import Log

NOW = 1_700_000_000_000


def batch(n=1, *, ts=NOW, key=b"k", value=b"v" * 50, **kw) -> bytearray:
    return bytearray(build_batch([(key + b"%d" % i, value, None, ts + i) for i in range(n)], **kw))


def read_bytes(info) -> bytes:
    return b"".join(os.pread(r.fd, r.length, r.position) for r in info.regions)


def batches_of(data: bytes):
    return [h for _, h in iter_batches(data)]


def records_of(data: bytes):
    return [r for p, h in iter_batches(data) for r in iter_records(data[p : p + h.size], max_uncompressed_bytes=1 << 20)]


@pytest.fixture
def small():
    return LogConfig(segment_bytes=2048, index_interval_bytes=200, segment_index_bytes=4096)


def test_append_assigns_offsets_stamps_epoch_and_reads_whole_batches(tmp_path, small):
    log = Log.open(str(tmp_path / "t-0"), small, now_ms=NOW)
    infos = [log.append(batch(3), leader_epoch=7, now_ms=NOW) for _ in range(10)]
    assert [i.first_offset for i in infos] == list(range(0, 30, 3))
    assert infos[-1].last_offset == 29 and log.log_end_offset == 30
    assert infos[0].log_append_time == -1 and not infos[0].duplicate

    read = log.read(4, 10_000)
    assert read.first_offset == 3
    headers = batches_of(read_bytes(read))
    assert headers[0].base_offset == 3
    assert all(h.partition_leader_epoch == 7 for h in headers)
    assert all(isinstance(r, FileRegion) for r in read.regions)
    for h in headers:
        assert h.base_offset % 3 == 0 and h.last_offset == h.base_offset + 2


def test_one_write_of_several_batches(tmp_path, small):
    log = Log.open(str(tmp_path / "t-0"), small, now_ms=NOW)
    buf = batch(2) + batch(3) + batch(1)
    info = log.append(buf, leader_epoch=0, now_ms=NOW)
    assert (info.first_offset, info.last_offset) == (0, 5)
    assert [h.base_offset for h in batches_of(read_bytes(log.read(0, 10_000)))] == [0, 2, 5]


def test_rolls_on_segment_bytes_and_reads_span_segments(tmp_path, small):
    log = Log.open(str(tmp_path / "t-0"), small, now_ms=NOW)
    for _ in range(60):
        log.append(batch(2), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) > 3
    assert all(s.size <= small.segment_bytes for s in log.segments)
    offset, seen = 0, []
    while offset < log.log_end_offset:
        read = log.read(offset, 700)
        hs = batches_of(read_bytes(read))
        assert hs, offset
        seen += [h.base_offset for h in hs]
        offset = hs[-1].next_offset
    assert seen == list(range(0, 120, 2))


def test_roll_on_segment_ms_uses_record_timestamps(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), LogConfig(segment_ms=1000), now_ms=NOW)
    log.append(batch(1, ts=NOW), leader_epoch=0, now_ms=NOW)
    log.append(batch(1, ts=NOW + 500), leader_epoch=0, now_ms=NOW + 500)
    assert len(log.segments) == 1
    log.append(batch(1, ts=NOW + 1500), leader_epoch=0, now_ms=NOW + 1500)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_on_full_index(tmp_path):
    config = LogConfig(index_interval_bytes=0, segment_index_bytes=8 * 4)
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=NOW)
    for _ in range(12):
        log.append(batch(1), leader_epoch=0, now_ms=NOW)
    assert len(log.segments) >= 2
    assert all(s.offset_index.entries <= 4 for s in log.segments)


def test_min_one_message_and_max_offset(tmp_path, small):
    log = Log.open(str(tmp_path / "t-0"), small, now_ms=NOW)
    for _ in range(5):
        log.append(batch(2, value=b"x" * 300), leader_epoch=0, now_ms=NOW)
    size = batches_of(read_bytes(log.read(0, 10_000)))[0].size
    one = log.read(0, 10)
    assert one.size == size
    assert log.read(0, 10, min_one_message=False).regions == []
    two = log.read(0, 2 * size + 5)
    assert two.size == 2 * size
    bounded = log.read(0, 10_000, max_offset=4)
    assert [h.base_offset for h in batches_of(read_bytes(bounded))] == [0, 2]
    assert log.read(4, 10_000, max_offset=4).regions == []
    assert log.read(log.log_end_offset, 100).regions == []
    with pytest.raises(OffsetOutOfRangeError) as e:
        log.read(log.log_end_offset + 1, 100)
    assert e.value.error_code == 1


def test_index_lookups_agree_with_a_linear_scan(tmp_path):
    config = LogConfig(index_interval_bytes=150)
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=NOW)
    sizes = [1, 4, 2, 7, 1, 3, 5, 2, 1, 9] * 4
    for n in sizes:
        log.append(batch(n, value=b"y" * 40), leader_epoch=0, now_ms=NOW)
    segment = log.active_segment
    assert segment.offset_index.entries > 3
    scan = [(p, h) for p, h in segment.headers()]
    for target in range(log.log_end_offset):
        expected = next((p, h.base_offset) for p, h in scan if h.last_offset >= target)
        position, header = segment.translate_offset(target)
        assert (position, header.base_offset) == expected


def test_time_lookups_agree_with_a_linear_scan(tmp_path, small):
    log = Log.open(str(tmp_path / "t-0"), small, now_ms=NOW)
    stamps = [5, 3, 9, 9, 2, 20, 15, 21, 21, 40, 1, 33]
    for i, t in enumerate(stamps):
        log.append(bytearray(build_batch([(b"a", b"b" * 100, None, NOW + t), (b"c", b"d", None, NOW + t + 1)])),
                   leader_epoch=i // 4, now_ms=NOW)
    flat = [(2 * i + j, NOW + t + j) for i, t in enumerate(stamps) for j in (0, 1)]
    for target in range(NOW, NOW + 45):
        expected = next(((o, ts) for o, ts in flat if ts >= target), None)
        found = log.fetch_offset_by_timestamp(target)
        assert (None if found is None else (found.offset, found.timestamp)) == expected, target
    top = log.fetch_offset_of_max_timestamp()
    assert (top.timestamp, top.offset) == (NOW + 41, 19)
    assert top.leader_epoch == 2


def test_log_append_time(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), LogConfig(message_timestamp_type="LogAppendTime"), now_ms=NOW)
    info = log.append(batch(3, ts=5), leader_epoch=0, now_ms=NOW + 42)
    assert info.log_append_time == NOW + 42 and info.max_timestamp == NOW + 42
    data = read_bytes(log.read(0, 10_000))
    header = read_batch_header(data)
    assert header.timestamp_type_log_append and header.max_timestamp == NOW + 42
    assert [r.timestamp for r in records_of(data)] == [NOW + 42] * 3


def test_batches_from_a_real_client_builder(tmp_path):
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for i in range(5):
        builder.append(i, timestamp=NOW + i, key=b"key", value=b"value%d" % i, headers=[])
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=NOW)
    log.append(bytearray(builder.build()), leader_epoch=1, now_ms=NOW)
    log.append(bytearray(builder.build()), leader_epoch=1, now_ms=NOW)
    assert [r.offset for r in records_of(read_bytes(log.read(0, 1 << 20)))] == list(range(10))


def test_validation_errors_carry_kafka_codes(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), LogConfig(max_message_bytes=500, segment_bytes=1024), now_ms=NOW)
    corrupt = batch(1)
    corrupt[-1] ^= 1
    with pytest.raises(CorruptMessageError) as e:
        log.append(corrupt, leader_epoch=0, now_ms=NOW)
    assert e.value.error_code == 2
    with pytest.raises(MessageTooLargeError) as e:
        log.append(batch(1, value=b"x" * 600), leader_epoch=0, now_ms=NOW)
    assert e.value.error_code == 10
    with pytest.raises(RecordListTooLargeError) as e:
        log.append(batch(1, value=b"x" * 400) * 3, leader_epoch=0, now_ms=NOW)
    assert e.value.error_code == 18
    with pytest.raises(InvalidTimestampError) as e:
        log.append(batch(1, ts=NOW + 2 * 3600 * 1000), leader_epoch=0, now_ms=NOW)
    assert e.value.error_code == 32
    with pytest.raises(InvalidRecordError):
        log.append(bytearray(build_batch([(b"k", b"v", None, NOW)], control=True)), leader_epoch=0, now_ms=NOW)
    with pytest.raises(TypeError):
        log.append(bytes(batch(1)), leader_epoch=0, now_ms=NOW)
    assert log.log_end_offset == 0


def test_compacted_topic_requires_keys(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), LogConfig(cleanup_policy="compact"), now_ms=NOW)
    with pytest.raises(InvalidRecordError):
        log.append(bytearray(build_batch([(None, b"v", None, NOW)])), leader_epoch=0, now_ms=NOW)
    log.append(batch(2), leader_epoch=0, now_ms=NOW)


def test_per_record_errors_name_each_bad_record_as_kafka_does(tmp_path):
    """KIP-467, as Kafka's LogValidator builds it (storage/.../log/LogValidator.java, validateKey,
    validateTimestamp, processRecordErrors): each bad record's index in its batch and why; the key is checked
    before the timestamp, so a record has one error; INVALID_TIMESTAMP (32) if any timestamp is bad, else
    INVALID_RECORD (87), whose message shows at most three RecordError(batchIndex=..., message='...')."""
    log = Log.open(str(tmp_path / "events-3"), LogConfig(cleanup_policy="compact", message_timestamp_before_max_ms=1000,
                                                         message_timestamp_after_max_ms=500), now_ms=NOW)
    records = [(b"k%d" % i, b"v", None, NOW) for i in range(10)]
    records[4] = (None, b"v", None, NOW)
    for codec in (0, 1, 4):  # uncompressed, gzip, zstd: compressed batches are read too
        with pytest.raises(InvalidRecordError) as e:
            log.append(bytearray(build_batch(records, compression=codec)), leader_epoch=0, now_ms=NOW)
        key_error = "Compacted topic cannot accept message without key in topic partition events-3"
        assert e.value.error_code == 87 and e.value.record_errors == [(4, key_error)]
        assert str(e.value) == ("One or more records have been rejected due to 1 record errors in total, and only "
                                f"showing the first three errors at most: [RecordError(batchIndex=4, message='{key_error}')]")
    keyless = [(None, b"v", None, NOW)] * 5
    with pytest.raises(InvalidRecordError) as e:
        log.append(bytearray(build_batch(keyless)), leader_epoch=0, now_ms=NOW)
    assert [i for i, _ in e.value.record_errors] == [0, 1, 2, 3, 4]
    assert "5 record errors in total" in str(e.value) and str(e.value).count("RecordError(") == 3
    # A timestamp out of range on one record, a missing key on another: INVALID_TIMESTAMP lists both.
    mixed = [(b"a", b"v", None, NOW), (None, b"v", None, NOW + 1), (b"c", b"v", None, NOW + 600)]
    with pytest.raises(InvalidTimestampError) as e:
        log.append(bytearray(build_batch(mixed)), leader_epoch=0, now_ms=NOW)
    assert e.value.error_code == 32 and str(e.value) == "One or more records have been rejected due to invalid timestamp"
    assert e.value.record_errors == [
        (1, key_error),
        (2, f"Timestamp {NOW + 600} of message with offset 2 is out of range. The timestamp should be within "
            f"[{NOW - 1000}, {NOW + 500}]")]
    assert log.log_end_offset == 0


def test_timestamp_errors_name_the_records_on_a_plain_topic(tmp_path):
    """An uncompacted CreateTime topic reads records only when the batch's base or max timestamp is out of
    range (the common append decodes none); then every bad record is named."""
    log = Log.open(str(tmp_path / "t-0"), LogConfig(message_timestamp_after_max_ms=500), now_ms=NOW)
    records = [(None, b"v", None, NOW + i * 300) for i in range(4)]  # the last two are past NOW + 500
    with pytest.raises(InvalidTimestampError) as e:
        log.append(bytearray(build_batch(records)), leader_epoch=0, now_ms=NOW)
    assert [i for i, _ in e.value.record_errors] == [2, 3]
    assert e.value.record_errors[0][1].startswith(f"Timestamp {NOW + 600} of message with offset 2 is out of range")
    log.append(bytearray(build_batch(records[:2])), leader_epoch=0, now_ms=NOW)  # keyless is fine here
    assert log.log_end_offset == 2


def test_truncate_to(tmp_path, small):
    log = Log.open(str(tmp_path / "t-0"), small, now_ms=NOW)
    for i in range(40):
        log.append(batch(2), leader_epoch=i // 10, now_ms=NOW)
    assert log.truncate_to(31)
    assert log.log_end_offset == 31
    assert batches_of(read_bytes(log.read(28, 10_000)))[-1].last_offset == 29
    assert not log.truncate_to(50)
    assert log.leader_epoch_entries == [(0, 0), (1, 20), (2, 40)][:2]
    info = log.append(batch(1), leader_epoch=5, now_ms=NOW)
    assert info.first_offset == 31
    assert log.end_offset_for_epoch(1) == (1, 31)
    assert log.end_offset_for_epoch(5) == (5, 32)
    assert log.truncate_to(3)
    assert log.log_end_offset == 3 and len(log.segments) == 1
    log.truncate_fully_and_start_at(100, now_ms=NOW)
    assert (log.log_start_offset, log.log_end_offset) == (100, 100)
    assert log.append(batch(1), leader_epoch=6, now_ms=NOW).first_offset == 100


def test_leader_epoch_cache_semantics(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=NOW)
    for epoch, n in [(1, 3), (1, 2), (3, 4), (6, 1)]:
        log.append(batch(n), leader_epoch=epoch, now_ms=NOW)
    assert log.leader_epoch_entries == [(1, 0), (3, 5), (6, 9)]
    assert log.end_offset_for_epoch(0) == (0, 0)
    assert log.end_offset_for_epoch(1) == (1, 5)
    assert log.end_offset_for_epoch(2) == (1, 5)
    assert log.end_offset_for_epoch(3) == (3, 9)
    assert log.end_offset_for_epoch(6) == (6, 10)
    assert log.end_offset_for_epoch(7) == (-1, -1)
    assert log.end_offset_for_epoch(-1) == (-1, -1)
    log.close()
    again = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=NOW)
    assert again.leader_epoch_entries == [(1, 0), (3, 5), (6, 9)]


def test_follower_append_keeps_offsets_and_epochs(tmp_path):
    leader = Log.open(str(tmp_path / "l-0"), LogConfig(), now_ms=NOW)
    for epoch in (1, 1, 2):
        leader.append(batch(2), leader_epoch=epoch, now_ms=NOW)
    follower = Log.open(str(tmp_path / "f-0"), LogConfig(), now_ms=NOW)
    data = read_bytes(leader.read(0, 1 << 20))
    info = follower.append_as_follower(data, now_ms=NOW)
    assert (info.first_offset, info.last_offset) == (0, 5)
    assert follower.leader_epoch_entries == [(1, 0), (2, 4)]
    with pytest.raises(UnexpectedAppendOffsetError):
        follower.append_as_follower(data, now_ms=NOW)
    assert read_bytes(follower.read(0, 1 << 20)) == data


def test_retention_by_time_and_size_and_log_start_offset(tmp_path, small):
    config = small.with_overrides(retention_ms=10_000)
    log = Log.open(str(tmp_path / "t-0"), config, now_ms=NOW)
    for i in range(30):
        log.append(batch(2, ts=NOW + i * 1000), leader_epoch=0, now_ms=NOW + i * 1000)
    count = len(log.segments)
    assert log.delete_old_segments(NOW + 25_000) >= 1
    assert log.segments[0].max_timestamp >= NOW + 15_000
    assert log.log_start_offset == log.segments[0].base_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)
    assert len(log.segments) < count
    log.update_config(config.with_overrides(retention_ms=-1, retention_bytes=3000))
    log.delete_old_segments(NOW + 25_000)
    assert log.size_bytes - log.active_segment.size <= 3000
    bound = log.segments[1].base_offset
    log.update_config(config.with_overrides(retention_ms=0))
    log.delete_old_segments(NOW + 10**9, upper_bound_offset=bound)
    assert log.log_start_offset == log.segments[0].base_offset == bound
    end = log.log_end_offset
    log.delete_old_segments(NOW + 10**9)
    assert len(log.segments) == 1 and log.active_segment.size == 0
    assert log.log_start_offset == log.log_end_offset == end


def test_delete_records_before(tmp_path, small):
    log = Log.open(str(tmp_path / "t-0"), small, now_ms=NOW)
    for i in range(30):
        log.append(batch(2), leader_epoch=i // 10, now_ms=NOW)
    assert log.delete_records_before(33, now_ms=NOW) == 33
    assert log.segments[0].base_offset <= 33 < log.segments[1].base_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read(32, 100)
    assert log.read(33, 100).first_offset == 32
    assert log.leader_epoch_entries[0] == (1, 33)
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(61, now_ms=NOW)
    log.close()
    again = Log.open(str(tmp_path / "t-0"), small, now_ms=NOW, log_start_offset=33, had_clean_shutdown=True)
    assert again.log_start_offset == 33


def test_regions_survive_deletion_of_their_segment(tmp_path, small):
    log = Log.open(str(tmp_path / "t-0"), small.with_overrides(retention_ms=0), now_ms=NOW)
    for _ in range(30):
        log.append(batch(2), leader_epoch=0, now_ms=NOW)
    read = log.read(0, 1000)
    expected = read_bytes(read)
    first_path = log.segments[0].path()
    log.delete_old_segments(NOW + 10**9)
    assert not os.path.exists(first_path)
    assert read_bytes(read) == expected


def test_flush_moves_the_recovery_point(tmp_path, small):
    log = Log.open(str(tmp_path / "t-0"), small.with_overrides(flush_messages=10), now_ms=NOW)
    log.append(batch(4), leader_epoch=0, now_ms=NOW)
    assert log.recovery_point == 0
    log.append(batch(8), leader_epoch=0, now_ms=NOW)
    assert log.recovery_point == 12
    log.update_config(small.with_overrides(flush_ms=1000))
    log.append(batch(1), leader_epoch=0, now_ms=NOW)
    assert not log.maybe_flush(NOW + 10)
    assert log.maybe_flush(NOW + 2000) and log.recovery_point == 13
    for _ in range(40):
        log.append(batch(1), leader_epoch=0, now_ms=NOW + 2000)
    assert log.maybe_flush(NOW + 2001)
    assert log.recovery_point == log.active_segment.base_offset


def test_clean_reopen_is_lazy_and_keeps_everything(tmp_path, small):
    log = Log.open(str(tmp_path / "t-0"), small, now_ms=NOW)
    for i in range(50):
        log.append(batch(2, ts=NOW + i), leader_epoch=i // 20, now_ms=NOW)
    before = read_bytes(log.read(0, 1 << 20, min_one_message=True))
    end, segments, top = log.log_end_offset, len(log.segments), log.fetch_offset_of_max_timestamp()
    log.close()
    again = Log.open(str(tmp_path / "t-0"), small, now_ms=NOW, recovery_point=end, had_clean_shutdown=True)
    assert all(s._file is None for s in again.segments)
    assert again.log_end_offset == end and len(again.segments) == segments
    assert read_bytes(again.read(0, 1 << 20)) == before
    assert again.fetch_offset_of_max_timestamp() == top
    assert again.append(batch(1), leader_epoch=3, now_ms=NOW).first_offset == end


def test_an_empty_logs_epoch_checkpoint_is_made_durable_with_its_first_data(tmp_path, small, monkeypatch):
    """A new leadership on a log without data writes leader-epoch-checkpoint without fsync (a topic of
    thousands of partitions made each broker fsync a file and a directory per partition on its event loop);
    the first flush that covers data fsyncs it with the rest, and an empty file (what a crash can leave of
    the unsynced write) reads as no entries."""
    import odradek.storage.checkpoints as checkpoints
    import odradek.storage.log as log_module

    fsynced: list[str] = []
    real_fsync_file = log_module._fsync_file
    monkeypatch.setattr(log_module, "_fsync_file", lambda path: (fsynced.append(os.path.basename(path)), real_fsync_file(path)))
    writes: list[bool] = []
    real_atomic_write = checkpoints.atomic_write
    monkeypatch.setattr(checkpoints, "atomic_write", lambda path, data, *, fsync=True: (writes.append(fsync), real_atomic_write(path, data, fsync=fsync)))
    log = Log.open(str(tmp_path / "t-0"), small, now_ms=NOW)
    log.assign_epoch_start_offset(3, 0)
    assert writes == [False] and log.leader_epoch_entries == [(3, 0)]
    log.append(batch(2), leader_epoch=4, now_ms=NOW)
    assert writes == [False, False]  # nothing of the log is durable before its first flush
    log.flush(now_ms=NOW)
    assert "leader-epoch-checkpoint" in fsynced
    log.assign_epoch_start_offset(5, log.log_end_offset)
    assert writes[-1] is True  # a log with durable data: Kafka's synchronous write
    log.close()
    checkpoint = tmp_path / "t-0" / "leader-epoch-checkpoint"
    checkpoint.write_bytes(b"")
    assert checkpoints.LeaderEpochCheckpointFile(str(checkpoint)).read() == []


def test_a_log_opened_in_a_directory_it_makes_is_the_same_as_one_loaded_empty(tmp_path):
    """Log.open's fast path for a new directory (_start_empty: nothing listed or read) gives what _load gives
    for an empty directory, and the log then behaves as any other: epochs, topic id, data and a reopen."""
    made = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=NOW)
    os.mkdir(tmp_path / "u-0")
    loaded = Log.open(str(tmp_path / "u-0"), LogConfig(), now_ms=NOW)
    for log in (made, loaded):
        assert (log.log_start_offset, log.log_end_offset, log.latest_epoch) == (0, 0, -1)
        assert sorted(os.listdir(log.directory)) == []  # nothing written before there is data
    made.assign_topic_id(b"\x01" * 16)
    made.assign_epoch_start_offset(3, 0)
    made.append(batch(2), leader_epoch=3, now_ms=NOW)
    made.flush()
    made.close()
    again = Log.open(str(tmp_path / "t-0"), LogConfig(), now_ms=NOW)
    assert (again.log_end_offset, again.latest_epoch, again.topic_id) == (2, 3, b"\x01" * 16)
    again.close()
    loaded.close()
