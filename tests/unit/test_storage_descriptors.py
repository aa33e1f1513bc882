"""What an idle partition costs: descriptors, index maps and fsyncs.

A new or idle partition holds no descriptor (its log file opens on first use), index maps are opened on
demand and bounded by the log manager's `IndexMaps`, and creating a log fsyncs nothing until its first
flush with data.
"""

from __future__ import annotations

import os

import pytest

from odradek.protocol.records import build_batch
from odradek.storage import checkpoints, log as log_module
from odradek.storage.checkpoints import PartitionMetadataFile
from odradek.storage.config import LogConfig
from odradek.storage.index import IndexMaps, OffsetIndex
from odradek.storage.log import Log
from odradek.storage.log_manager import LogManager
from odradek.storage.names import TopicPartition

NOW = 1_700_000_000_000
FD_DIR = "/proc/self/fd"

needs_proc = pytest.mark.skipif(not os.path.isdir(FD_DIR), reason="counts descriptors in /proc/self/fd")


def open_fds() -> int:
    return len(os.listdir(FD_DIR))


def batch(value: bytes, ts: int = NOW) -> bytearray:
    return bytearray(build_batch([(b"k", value, None, ts)]))


def read_values(log: Log, offset: int = 0) -> list[bytes]:
    from odradek.protocol.records import iter_records

    out = []
    while offset < log.log_end_offset:
        info = log.read(offset, 1 << 20)
        data = b"".join(os.pread(r.fd, r.length, r.position) for r in info.regions)
        records = list(iter_records(data, max_uncompressed_bytes=1 << 20))
        out += [r.value for r in records]
        offset = records[-1].offset + 1
    return out


@needs_proc
def test_two_thousand_empty_partitions_hold_no_descriptor_and_still_work(tmp_path, monkeypatch):
    # This test counts descriptors; fsyncs (leader-epoch checkpoints, flushes on close) only cost it time.
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    monkeypatch.setattr(os, "fdatasync", lambda fd: None)
    n, maps = 2_000, 64
    config = LogConfig(index_interval_bytes=64)  # an index entry from the second batch on
    manager = LogManager(str(tmp_path), now_ms=NOW, default_config=config, max_open_index_maps=maps)
    tps = [TopicPartition(f"wide-{p // 100}", p % 100) for p in range(n)]
    base = open_fds()
    for tp in tps:
        manager.get_or_create_log(tp, now_ms=NOW, topic_id=bytes([tp.partition]) * 16)
    assert open_fds() - base <= n + 8
    assert open_fds() - base <= 8  # in fact none: no log file open, no index mapped
    assert len(manager.index_maps) == 0

    # Every partition still takes appends and serves reads: one log descriptor each, index maps bounded
    # (every 25th partition gets enough batches for index entries: 160 indexes written, 64 maps at most).
    def value(tp: TopicPartition, i: int) -> bytes:
        return b"%s/%d/" % (tp.dir_name.encode(), i) + b"x" * 100

    for k, tp in enumerate(tps):
        log = manager.get_log(tp)
        for i in range(4 if k % 25 == 0 else 1):
            log.append(batch(value(tp, i)), leader_epoch=0, now_ms=NOW)
    for k, tp in enumerate(tps):
        log = manager.get_log(tp)
        assert read_values(log) == [value(tp, i) for i in range(log.log_end_offset)]
        if k % 25 == 0:
            assert read_values(log, 2) == [value(tp, 2), value(tp, 3)]
    assert sum(s.offset_index._mapped or s.time_index._mapped for tp in tps for s in manager.get_log(tp).segments) > 0
    assert len(manager.index_maps) <= maps
    assert open_fds() - base <= n + maps + 8
    manager.close()
    assert open_fds() - base <= 8

    # A clean restart opens them all lazily again, with their data and topic ids.
    manager = LogManager(str(tmp_path), now_ms=NOW, default_config=config, max_open_index_maps=maps)
    assert open_fds() - base <= 8
    assert len(manager.logs) == n
    assert all(log.log_end_offset == (4 if k % 25 == 0 else 1) for k, log in enumerate(map(manager.get_log, tps)))
    log = manager.get_log(tps[-1])
    assert log.topic_id == bytes([tps[-1].partition]) * 16
    log.append(batch(b"after"), leader_epoch=1, now_ms=NOW)
    assert read_values(log)[-1] == b"after"
    manager.close()


def test_index_maps_stay_bounded_and_lookups_map_again(tmp_path):
    maps = IndexMaps(4)
    config = LogConfig(index_interval_bytes=32, segment_bytes=2048)
    logs = [Log.open(str(tmp_path / f"t-{i}"), config, now_ms=NOW, index_maps=maps) for i in range(6)]
    for round_ in range(40):
        for i, log in enumerate(logs):
            log.append(batch(b"%d-%d" % (i, round_) + b"y" * 60, ts=NOW + round_), leader_epoch=0, now_ms=NOW)
            assert len(maps) <= 4
    for i, log in enumerate(logs):
        assert len(log.segments) > 2
        values = read_values(log)
        assert values == [b"%d-%d" % (i, r) + b"y" * 60 for r in range(40)]
        for offset in (0, 7, 21, 39):
            assert read_values(log, offset)[0].startswith(b"%d-%d" % (i, offset))
        found = log.fetch_offset_by_timestamp(NOW + 25)
        assert (found.timestamp, found.offset) == (NOW + 25, 25)
        assert len(maps) <= 4
    # Indexes written through maps since closed reach the disk with flush, and read back after a restart.
    for log in logs:
        log.close()
    assert len(maps) == 0
    for i in range(6):
        again = Log.open(str(tmp_path / f"t-{i}"), config, now_ms=NOW, recovery_point=40, had_clean_shutdown=True,
                         index_maps=maps)
        assert all(s.offset_index.entries * 8 == os.path.getsize(s.path(".index")) for s in again.segments)
        assert read_values(again, 33)[0].startswith(b"%d-33" % i)
        again.close()


def test_an_evicted_index_keeps_its_entries(tmp_path):
    maps = IndexMaps(2)
    indexes = [OffsetIndex(str(tmp_path / f"{i:020d}.index"), i, 8 * 16, create=True, preallocate=False, maps=maps)
               for i in range(3)]
    assert not any(os.path.exists(ix.path) for ix in indexes)  # no file until the first entry
    for k in range(1, 6):
        for i, ix in enumerate(indexes):
            ix.append(i + 10 * k, 100 * k)
    assert len(maps) == 2 and sum(ix._mapped for ix in indexes) == 2
    for i, ix in enumerate(indexes):
        assert ix.lookup(i + 35) == (i + 30, 300)
        assert ix.last_entry == (i + 50, 500)
        ix.flush()
        ix.trim()
        assert os.path.getsize(ix.path) == 5 * 8
    assert len(maps) <= 2


def test_creating_a_log_fsyncs_nothing_until_its_first_flush(tmp_path, monkeypatch):
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}") if os.path.isdir(FD_DIR) else str(fd))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fdatasync", fsync)
    manager = LogManager(str(tmp_path), now_ms=NOW)
    synced.clear()
    tp = TopicPartition("t", 0)
    log = manager.get_or_create_log(tp, now_ms=NOW, topic_id=bytes(range(16)))
    assert synced == []
    directory = os.path.join(str(tmp_path), tp.dir_name)
    assert os.listdir(directory) == []  # the segment file comes with the first append, the rest with data
    assert log.topic_id == bytes(range(16))
    log.flush()  # nothing to make durable yet
    assert synced == []

    log.append(batch(b"v"), leader_epoch=0, now_ms=NOW)
    synced.clear()
    log.flush()
    assert "00000000000000000000.log" in os.listdir(directory)
    if os.path.isdir(FD_DIR):
        assert os.path.join(directory, "partition.metadata") in synced
        assert directory in synced and os.path.realpath(str(tmp_path)) in [os.path.realpath(p) for p in synced]
    assert PartitionMetadataFile(os.path.join(directory, "partition.metadata")).read() == bytes(range(16))
    synced.clear()
    log.flush()
    assert synced == []
    manager.close()


def test_a_crash_before_the_first_flush_leaves_an_openable_log(tmp_path):
    directory = str(tmp_path / "t-0")
    log = Log.open(directory, LogConfig(), now_ms=NOW)
    log.assign_topic_id(bytes(range(16)))
    log.close()  # an empty log: partition.metadata waits for data
    # What a crash can leave of the unsynced creation: an empty partition.metadata, no log file.
    with open(os.path.join(directory, "partition.metadata"), "wb"):
        pass
    again = Log.open(directory, LogConfig(), now_ms=NOW)
    assert again.topic_id is None and again.log_end_offset == 0
    again.assign_topic_id(bytes(range(16)))
    for name in os.listdir(directory):
        os.unlink(os.path.join(directory, name))
    again = Log.open(directory, LogConfig(), now_ms=NOW)
    again.append(batch(b"v"), leader_epoch=0, now_ms=NOW)
    assert read_values(again) == [b"v"]
    again.close()
    assert PartitionMetadataFile(os.path.join(directory, "partition.metadata")).read() is None
    again = Log.open(directory, LogConfig(), now_ms=NOW, recovery_point=1, had_clean_shutdown=True)
    again.assign_topic_id(bytes(range(16)))  # a log with data writes it at once, durably
    assert PartitionMetadataFile(os.path.join(directory, "partition.metadata")).read() == bytes(range(16))
    again.close()


def test_partition_metadata_empty_or_nul_reads_as_no_topic_id(tmp_path):
    path = tmp_path / "partition.metadata"
    for content in (b"", b"\x00" * 40):
        path.write_bytes(content)
        assert PartitionMetadataFile(str(path)).read() is None
    path.write_bytes(b"version: 0\ntopic_id: short\n")
    with pytest.raises(checkpoints.KafkaStorageError):
        PartitionMetadataFile(str(path)).read()
    assert log_module.PARTITION_METADATA == "partition.metadata"
