"""The log manager: directory identity and lock, clean and unclean starts, scheduled work."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from odradek.protocol.records import build_batch
from odradek.storage.checkpoints import OffsetCheckpointFile
from odradek.storage.config import LogConfig
from odradek.storage.errors import ForeignLogDirectoryError, KafkaStorageError, LogDirectoryLockedError
from odradek.storage.log_manager import LogManager
from odradek.storage.names import TopicPartition

NOW = 1_700_000_000_000
SMALL = LogConfig(segment_bytes=1024, index_interval_bytes=128)


def batch(n=1, ts=NOW) -> bytearray:
    return bytearray(build_batch([(b"k", b"v" * 60, None, ts) for _ in range(n)]))


def test_a_second_manager_on_the_same_directory_is_refused(tmp_path):
    first = LogManager(str(tmp_path), now_ms=NOW)
    with pytest.raises(LogDirectoryLockedError, match="locked") as e:
        LogManager(str(tmp_path), now_ms=NOW)
    assert e.value.error_code == 56 and isinstance(e.value, KafkaStorageError)
    first.close()
    LogManager(str(tmp_path), now_ms=NOW).close()


def test_the_lock_also_holds_against_another_process(tmp_path):
    manager = LogManager(str(tmp_path), now_ms=NOW)
    code = ("import sys\nfrom odradek.storage.log_manager import LogManager\n"
            "from odradek.storage.errors import LogDirectoryLockedError\n"
            "try:\n    LogManager(sys.argv[1], now_ms=0)\nexcept LogDirectoryLockedError:\n    sys.exit(3)\n")
    assert subprocess.run([sys.executable, "-c", code, str(tmp_path)]).returncode == 3
    manager.close()


def test_a_foreign_directory_is_refused(tmp_path):
    (tmp_path / "photos").mkdir()
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ForeignLogDirectoryError, match="not an Odradek log directory"):
        LogManager(str(tmp_path), now_ms=NOW)
    assert sorted(os.listdir(tmp_path)) == ["notes.txt", "photos"]


def test_another_nodes_or_clusters_directory_is_refused(tmp_path):
    LogManager(str(tmp_path), now_ms=NOW, node_id=1, cluster_id="blue").close()
    with pytest.raises(ForeignLogDirectoryError, match="node 1"):
        LogManager(str(tmp_path), now_ms=NOW, node_id=2)
    with pytest.raises(ForeignLogDirectoryError, match="cluster blue"):
        LogManager(str(tmp_path), now_ms=NOW, node_id=1, cluster_id="green")
    LogManager(str(tmp_path), now_ms=NOW, node_id=1, cluster_id="blue").close()


def test_clean_restart_opens_lazily_and_unclean_restart_recovers(tmp_path):
    manager = LogManager(str(tmp_path), now_ms=NOW, default_config=SMALL)
    tps = [TopicPartition("orders", p) for p in range(3)] + [TopicPartition("a-b.c_d", 12)]
    for i, tp in enumerate(tps):
        log = manager.get_or_create_log(tp, now_ms=NOW, topic_id=bytes([i]) * 16)
        for _ in range(20 + i):
            log.append(batch(2), leader_epoch=1, now_ms=NOW)
    ends = {tp: manager.get_log(tp).log_end_offset for tp in tps}
    manager.close()
    assert os.path.exists(tmp_path / ".kafka_cleanshutdown")
    points = OffsetCheckpointFile(str(tmp_path / "recovery-point-offset-checkpoint")).read()
    assert points == ends

    manager = LogManager(str(tmp_path), now_ms=NOW, default_config=SMALL)
    assert manager.had_clean_shutdown and not os.path.exists(tmp_path / ".kafka_cleanshutdown")
    assert {tp: log.log_end_offset for tp, log in manager.logs.items()} == ends
    assert manager.get_log(tps[3]).topic_id == bytes([3]) * 16
    assert all(s._file is None and not s.offset_index._mapped for log in manager.logs.values() for s in log.segments)
    log = manager.get_log(tps[0])
    log.append(batch(3), leader_epoch=2, now_ms=NOW)
    path = log.active_segment.path()
    manager.abandon()
    with open(path, "ab") as f:
        f.write(b"\x00garbage")

    manager = LogManager(str(tmp_path), now_ms=NOW, default_config=SMALL)
    assert not manager.had_clean_shutdown
    assert manager.get_log(tps[0]).log_end_offset == ends[tps[0]] + 3
    assert manager.get_log(tps[0]).leader_epoch_entries == [(1, 0), (2, ends[tps[0]])]
    manager.close()


def test_scheduled_retention_flush_and_checkpoints(tmp_path):
    config = SMALL.with_overrides(retention_ms=60_000)
    manager = LogManager(str(tmp_path), now_ms=NOW, default_config=config)
    log = manager.get_or_create_log(TopicPartition("t", 0), now_ms=NOW)
    for i in range(40):
        log.append(batch(1, ts=NOW + i * 1000), leader_epoch=0, now_ms=NOW + i * 1000)
    assert manager.maybe_flush(NOW + 40_000) == 1
    assert log.recovery_point == log.active_segment.base_offset
    assert manager.maybe_flush(NOW + 40_000) == 0
    assert manager.maybe_delete_old_segments(NOW + 60_000) == 0
    deleted = manager.maybe_delete_old_segments(NOW + 400_000,
                                                upper_bound_offset=lambda tp: log.segments[2].base_offset)
    assert deleted == 2 and log.log_start_offset == log.segments[0].base_offset
    assert not manager.maybe_checkpoint(NOW + 1000)
    assert manager.maybe_checkpoint(NOW + 400_000)
    starts = OffsetCheckpointFile(str(tmp_path / "log-start-offset-checkpoint")).read()
    assert starts == {TopicPartition("t", 0): log.log_start_offset}
    manager.close()


def test_topic_configs_and_delete(tmp_path):
    compacted = LogConfig(cleanup_policy="compact")
    manager = LogManager(str(tmp_path), now_ms=NOW, topic_configs={"__consumer_offsets": compacted})
    offsets = manager.get_or_create_log(TopicPartition("__consumer_offsets", 0), now_ms=NOW)
    other = manager.get_or_create_log(TopicPartition("t", 0), now_ms=NOW)
    assert offsets.config.compact and not other.config.compact
    manager.update_topic_config("t", SMALL)
    assert other.config is SMALL
    other.append(batch(1), leader_epoch=0, now_ms=NOW)
    read = other.read(0, 1000)
    assert manager.delete_log(TopicPartition("t", 0))
    assert sorted(n for n in os.listdir(tmp_path) if not n.startswith((".", "meta"))) == ["__consumer_offsets-0"]
    assert len(os.pread(read.regions[0].fd, read.regions[0].length, 0)) == read.regions[0].length
    manager.close()
    manager = LogManager(str(tmp_path), now_ms=NOW)
    assert list(manager.logs) == [TopicPartition("__consumer_offsets", 0)]
    manager.close()


def test_many_partitions_open(tmp_path):
    manager = LogManager(str(tmp_path), now_ms=NOW)
    for p in range(100):
        manager.get_or_create_log(TopicPartition("wide", p), now_ms=NOW).append(batch(1), leader_epoch=0, now_ms=NOW)
    manager.close()
    manager = LogManager(str(tmp_path), now_ms=NOW)
    assert len(manager.logs) == 100
    assert all(log.log_end_offset == 1 for log in manager.logs.values())
    manager.close()


def test_topic_partition_directory_names():
    assert TopicPartition.from_dir_name("my-topic-12") == TopicPartition("my-topic", 12)
    assert TopicPartition.from_dir_name("nodash") is None
    assert TopicPartition.from_dir_name("bad topic-1") is None
    assert TopicPartition("x", 3).dir_name == "x-3"


def test_flush_due_says_when_a_roll_or_flush_ms_needs_a_flush_without_visiting_every_log(tmp_path):
    from odradek.protocol.records import build_batch

    manager = LogManager(str(tmp_path / "data"), now_ms=NOW, checkpoint_interval_ms=60_000)
    try:
        log = manager.get_or_create_log(TopicPartition("t", 0), now_ms=NOW)
        assert not manager.flush_due(NOW) and not manager.checkpoint_due(NOW + 1)
        log.append(bytearray(build_batch([(b"k", b"v", None, NOW)])), leader_epoch=0, now_ms=NOW)
        assert not manager.flush_due(NOW)  # data alone is the OS's to write (no flush.ms)
        log.roll(now_ms=NOW)
        assert manager.flush_due(NOW)
        assert manager.maybe_flush(NOW) == 1
        assert not manager.flush_due(NOW)
        manager.update_topic_config("t", LogConfig(flush_ms=1000))
        log.append(bytearray(build_batch([(b"k", b"v", None, NOW)])), leader_epoch=0, now_ms=NOW)
        assert manager.flush_due(NOW + 2000)
        assert manager.checkpoint_due(NOW + 60_000)
    finally:
        manager.close()
