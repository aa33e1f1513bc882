"""Several log directories in one log manager (JBOD): placement, identity, future logs, failed directories."""

from __future__ import annotations

import os

import pytest

from odradek.protocol.records import build_batch
from odradek.storage.config import LogConfig
from odradek.storage.errors import ForeignLogDirectoryError, KafkaStorageError
from odradek.storage.log_manager import LogManager
from odradek.storage.log_mover import copy_step
from odradek.storage.meta_properties import read_meta_properties
from odradek.storage.names import TopicPartition

NOW = 1_700_000_000_000
SMALL = LogConfig(segment_bytes=1024, index_interval_bytes=128)


def batch(n=1, ts=NOW, value=b"v") -> bytearray:
    return bytearray(build_batch([(b"k", value * 60, None, ts) for _ in range(n)]))


def dirs(tmp_path, n=2):
    return [str(tmp_path / f"d{i}") for i in range(n)]


def test_partitions_go_to_the_least_loaded_directory_and_stay_there_across_restarts(tmp_path):
    paths = dirs(tmp_path, 3)
    manager = LogManager(paths, now_ms=NOW, node_id=1, cluster_id="c")
    tps = [TopicPartition("t", i) for i in range(7)]
    for tp in tps:
        manager.get_or_create_log(tp, now_ms=NOW).append(batch(), leader_epoch=0, now_ms=NOW)
    placed = {tp: manager.dir_of(tp).path for tp in tps}
    assert sorted(list(placed.values()).count(os.path.abspath(p)) for p in paths) == [2, 2, 3]
    assert [placed[TopicPartition("t", i)] for i in range(3)] == [os.path.abspath(p) for p in paths]
    ids = {read_meta_properties(p)["directory.id"] for p in paths}
    assert len(ids) == 3 and all(len(i) == 22 for i in ids)  # each directory its own id, as Kafka's
    manager.close()
    reopened = LogManager(paths, now_ms=NOW, node_id=1, cluster_id="c")
    assert reopened.had_clean_shutdown
    assert {tp: reopened.dir_of(tp).path for tp in tps} == placed
    assert all(reopened.get_log(tp).log_end_offset == 1 for tp in tps)
    reopened.close()


def test_a_copied_directory_or_a_partition_in_two_directories_is_refused(tmp_path):
    a, b = dirs(tmp_path)
    manager = LogManager([a], now_ms=NOW, node_id=1)
    manager.get_or_create_log(TopicPartition("t", 0), now_ms=NOW).append(batch(), leader_epoch=0, now_ms=NOW)
    manager.close()
    import shutil

    shutil.copytree(a, b)
    with pytest.raises(ForeignLogDirectoryError, match="same directory.id"):
        LogManager([a, b], now_ms=NOW, node_id=1)
    os.unlink(os.path.join(b, "meta.properties"))
    LogManager([str(tmp_path / "fresh")], now_ms=NOW, node_id=1).close()
    shutil.copy(os.path.join(str(tmp_path / "fresh"), "meta.properties"), os.path.join(b, "meta.properties"))
    with pytest.raises(KafkaStorageError, match="two log directories"):
        LogManager([a, b], now_ms=NOW, node_id=1)


def test_a_future_log_catches_up_while_written_then_is_swapped_in(tmp_path):
    a, b = dirs(tmp_path)
    manager = LogManager([a, b], now_ms=NOW, default_config=SMALL)
    tp = TopicPartition("t", 0)
    current = manager.get_or_create_log(tp, now_ms=NOW, topic_id=b"\x01" * 16, log_dir=a)
    for _ in range(20):
        current.append(batch(3), leader_epoch=1, now_ms=NOW)
    current.delete_records_before(4, now_ms=NOW)  # a log start inside a batch
    future = manager.create_future_log(tp, b, now_ms=NOW)
    assert manager.future_dir_of(tp).path == os.path.abspath(b)
    steps = 0
    while not copy_step(current, future, max_bytes=300, now_ms=NOW):
        steps += 1
        if steps % 3 == 0 and steps < 30:
            current.append(batch(2), leader_epoch=2, now_ms=NOW)  # written while it moves
        assert steps < 200
    current.assign_epoch_start_offset(3, current.log_end_offset)  # an epoch without a batch yet
    assert copy_step(current, future, max_bytes=300, now_ms=NOW)
    assert (future.log_start_offset, future.log_end_offset) == (current.log_start_offset, current.log_end_offset)
    expected = current.read_bytes(current.log_start_offset, 1 << 30, min_one_message=True)
    entries = current.leader_epoch_entries
    moved = manager.replace_current_with_future(tp, now_ms=NOW)
    assert manager.get_log(tp) is moved and manager.dir_of(tp).path == os.path.abspath(b)
    assert not os.path.exists(os.path.join(a, tp.dir_name))
    assert moved.leader_epoch_entries == entries and moved.topic_id == b"\x01" * 16
    got = b"".join(moved.read_bytes(o, 1 << 30) for o in [moved.log_start_offset])
    assert got[:len(expected)] == expected[:len(got)] and moved.log_end_offset == current.log_end_offset
    moved.append(batch(), leader_epoch=3, now_ms=NOW)
    manager.close()
    reopened = LogManager([a, b], now_ms=NOW, default_config=SMALL)
    assert reopened.dir_of(tp).path == os.path.abspath(b) and reopened.get_log(tp).log_end_offset == moved.log_end_offset
    reopened.close()


def test_a_truncated_current_log_restarts_the_copy(tmp_path):
    a, b = dirs(tmp_path)
    manager = LogManager([a, b], now_ms=NOW)
    tp = TopicPartition("t", 0)
    current = manager.get_or_create_log(tp, now_ms=NOW, log_dir=a)
    for _ in range(10):
        current.append(batch(), leader_epoch=1, now_ms=NOW)
    future = manager.create_future_log(tp, b, now_ms=NOW)
    assert copy_step(current, future, max_bytes=1 << 20, now_ms=NOW)
    # A follower's truncation, then the new leader's records at the same offsets in a newer epoch.
    current.truncate_to(6)
    current.assign_epoch_start_offset(2, 6)
    for _ in range(4):
        current.append(batch(value=b"w"), leader_epoch=2, now_ms=NOW)
    assert current.log_end_offset == future.log_end_offset == 10  # same end, different records
    while not copy_step(current, future, max_bytes=1 << 20, now_ms=NOW):
        pass
    assert future.read_bytes(0, 1 << 30) == current.read_bytes(0, 1 << 30)
    manager.close()


def test_a_failed_directory_takes_only_its_logs_offline(tmp_path):
    a, b = dirs(tmp_path)
    manager = LogManager([a, b], now_ms=NOW)
    t0, t1 = TopicPartition("t", 0), TopicPartition("t", 1)
    manager.get_or_create_log(t0, now_ms=NOW)
    manager.get_or_create_log(t1, now_ms=NOW)
    assert manager.dir_of(t1).path == os.path.abspath(b)
    assert manager.mark_dir_offline(os.path.join(b, t1.dir_name), "EIO") == [t1]
    assert manager.mark_dir_offline(b, "EIO") == []  # once
    assert manager.get_log(t1) is None and t1 in manager.offline_partitions
    with pytest.raises(KafkaStorageError, match="offline"):
        manager.get_or_create_log(t1, now_ms=NOW)  # not recreated elsewhere: its data is on the failed disk
    assert manager.get_or_create_log(TopicPartition("u", 0), now_ms=NOW) is not None  # placed in a
    assert manager.dir_of(TopicPartition("u", 0)).path == os.path.abspath(a)
    manager.failed_paths.append((b, "EIO"))
    manager.close()
    assert os.path.exists(os.path.join(a, ".kafka_cleanshutdown"))
    assert not os.path.exists(os.path.join(b, ".kafka_cleanshutdown"))


def test_a_move_under_way_at_shutdown_is_found_again_at_start(tmp_path):
    a, b = dirs(tmp_path)
    manager = LogManager([a, b], now_ms=NOW)
    tp = TopicPartition("t", 0)
    current = manager.get_or_create_log(tp, now_ms=NOW, log_dir=a)
    for _ in range(3):
        current.append(batch(), leader_epoch=0, now_ms=NOW)
    future = manager.create_future_log(tp, b, now_ms=NOW)
    copy_step(current, future, max_bytes=100, now_ms=NOW)  # part of it
    manager.close()
    reopened = LogManager([a, b], now_ms=NOW)
    assert reopened.dir_of(tp).path == os.path.abspath(a)
    assert reopened.future_dir_of(tp).path == os.path.abspath(b)
    future = reopened.future_logs[tp]
    while not copy_step(reopened.get_log(tp), future, max_bytes=100, now_ms=NOW):
        pass
    assert reopened.replace_current_with_future(tp, now_ms=NOW).log_end_offset == 3
    assert reopened.abandon_future_log(tp) is False
    reopened.close()
