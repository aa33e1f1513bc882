"""Offset and time indexes, the leader-epoch cache, checkpoint files and LogConfig."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.storage.checkpoints import LeaderEpochCheckpointFile, OffsetCheckpointFile, PartitionMetadataFile
from odradek.storage.config import LogConfig
from odradek.storage.errors import KafkaStorageError
from odradek.storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from odradek.storage.leader_epoch import LeaderEpochCache
from odradek.storage.names import TopicPartition, parse_offset_file_name


@settings(max_examples=50, deadline=None)
@given(gaps=st.lists(st.integers(1, 50), min_size=0, max_size=60), targets=st.lists(st.integers(0, 4000), max_size=20))
def test_offset_index_lookups_agree_with_a_linear_scan(tmp_path_factory, gaps, targets):
    path = str(tmp_path_factory.mktemp("idx") / "00000000000000000100.index")
    index = OffsetIndex(path, 100, 8 * 100, create=True)
    entries, offset = [], 100
    for i, gap in enumerate(gaps):
        offset += gap
        index.append(offset, i * 64)
        entries.append((offset, i * 64))
    for target in targets + [e[0] for e in entries]:
        target += 100
        expected = max((e for e in entries if e[0] <= target), default=(100, 0))
        assert index.lookup(target) == expected
        by_position = max((e for e in entries if e[1] <= target), default=(100, 0))
        assert index.lookup_position(target) == by_position
    index.trim()
    assert os.path.getsize(path) == 8 * len(entries)
    index.close()
    reopened = OffsetIndex(path, 100, 8 * 100)
    assert reopened.entries == len(entries)
    assert reopened.last_entry == (entries[-1] if entries else (100, 0))


def test_offset_index_truncation_and_preallocation(tmp_path):
    path = str(tmp_path / "00000000000000000000.index")
    index = OffsetIndex(path, 0, 80, create=True)
    assert os.path.getsize(path) == 80
    for i in range(10):
        index.append(i * 10 + 9, i * 100)
    assert index.is_full
    with pytest.raises(ValueError):
        index.append(1000, 1000)
    index.truncate_to(45)
    assert index.entries == 4 and index.last_entry == (39, 300)
    index.truncate_to(39)
    assert index.entries == 3
    index.append(50, 400)
    with pytest.raises(ValueError):
        index.append(50, 500)
    index.trim()
    assert os.path.getsize(path) == 32
    index.append(60, 500)
    assert index.entries == 5
    index.close()
    with open(path, "ab") as f:
        f.write(b"\x01")
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, 0, 80).lookup(3)


def test_time_index_keeps_growing_timestamps_and_a_spare_slot(tmp_path):
    index = TimeIndex(str(tmp_path / "00000000000000000000.timeindex"), 0, 12 * 4, create=True)
    assert index.maybe_append(100, 5)
    assert not index.maybe_append(100, 7)
    assert not index.maybe_append(90, 8)
    assert index.maybe_append(150, 9)
    assert index.maybe_append(170, 12)
    assert index.is_full
    assert index.maybe_append(200, 15, skip_full_check=True)
    assert index.lookup(99) == (-1, 0)
    assert index.lookup(160) == (150, 9)
    assert index.last_entry == (200, 15)
    index.truncate_to(12)
    assert index.last_entry == (150, 9)


def test_leader_epoch_cache_rules(tmp_path):
    cache = LeaderEpochCache(LeaderEpochCheckpointFile(str(tmp_path / "leader-epoch-checkpoint")))
    assert cache.assign(2, 10) and not cache.assign(2, 15) and not cache.assign(-1, 20)
    assert cache.assign(4, 20) and cache.assign(5, 30)
    assert cache.assign(3, 25)
    assert cache.entries == [(2, 10), (3, 25)]
    assert cache.assign(2, 5)
    assert cache.entries == [(2, 5)]
    cache.assign(4, 20)
    cache.assign(7, 40)
    cache.truncate_from_start(30)
    assert cache.entries == [(4, 30), (7, 40)]
    assert cache.epoch_for_offset(35) == 4 and cache.epoch_for_offset(10) == -1
    cache.truncate_from_end(40)
    assert cache.entries == [(4, 30)]
    assert LeaderEpochCache(LeaderEpochCheckpointFile(str(tmp_path / "leader-epoch-checkpoint"))).entries == [(4, 30)]


def test_checkpoint_files(tmp_path):
    offsets = OffsetCheckpointFile(str(tmp_path / "cp"))
    assert offsets.read() == {}
    value = {TopicPartition("a-b", 0): 5, TopicPartition("c", 12): 1 << 40}
    offsets.write(value)
    assert offsets.read() == value
    assert (tmp_path / "cp").read_text().splitlines()[:2] == ["0", "2"]
    (tmp_path / "cp").write_text("0\n3\na 0 1\n")
    with pytest.raises(KafkaStorageError):
        offsets.read()
    metadata = PartitionMetadataFile(str(tmp_path / "partition.metadata"))
    metadata.write(bytes(range(16)))
    assert metadata.read() == bytes(range(16))
    assert (tmp_path / "partition.metadata").read_text().startswith("version: 0\ntopic_id: AAECAwQFBgcICQoLDA0ODw")


def test_log_config_from_kafka_names():
    config = LogConfig.from_topic_configs({"segment.bytes": "1048576", "cleanup.policy": "delete,compact",
                                           "min.cleanable.dirty.ratio": "0.1", "flush.messages": str(2**63 - 1)})
    assert config.segment_bytes == 1 << 20 and config.compact and config.delete
    assert config.min_cleanable_dirty_ratio == 0.1 and config.flush_messages is None
    assert config.retention_ms == 7 * 24 * 3600 * 1000 and config.max_message_bytes == 1048588
    with pytest.raises(ValueError):
        LogConfig.from_topic_configs({"segment.byte": "1"})
    with pytest.raises(ValueError):
        LogConfig(cleanup_policy="archive")


def test_file_names():
    assert parse_offset_file_name("00000000000000000042.log") == (42, ".log", "")
    assert parse_offset_file_name("00000000000000000042.index.swap") == (42, ".index", ".swap")
    assert parse_offset_file_name("leader-epoch-checkpoint") is None
