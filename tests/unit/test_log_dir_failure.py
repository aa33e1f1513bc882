"""A log directory that fails (EIO) or fills up (ENOSPC): storage, the replica manager and the broker's log
directories (broker/log_dirs.py), without a process.

  * an append that meets an I/O error, in the log file or an index, leaves nothing behind (the file is cut
    back, the log end offset unchanged) and raises the OSError itself, so that the caller takes the
    directory offline instead of answering one request with KAFKA_STORAGE_ERROR for ever;
  * an index page is given disk blocks before the map writes it (posix_fallocate): a full disk is an
    ENOSPC, not SIGBUS;
  * a directory failing at start starts offline, the others serve; the metadata log directory failing,
    or every data directory, refuses the start;
  * while a data directory is offline, a replica that is not new is not created elsewhere (Kafka's
    getOrCreateLog); the replica manager reports it, and the log directories tell the controller
    (AssignReplicasToDirs, DirectoryId.LOST);
  * the state machine of a failing directory: online -> offline once (one log line, one count), its
    replicas offline and reported until the controller answers; the metadata log directory stops the node.
"""

from __future__ import annotations

import asyncio
import errno
import os
import uuid

import pytest

from odradek.broker.log_dirs import LOST_DIRECTORY_ID, LogDirs
from odradek.metadata.image import BrokerRegistration, MetadataImage, PartitionImage, TopicImage
from odradek.metadata.publisher import MetadataPublisher, MetadataUpdate
from odradek.protocol.records import build_batch
from odradek.purgatory.deferred import Deferred
from odradek.purgatory.timing_wheel import Timer
from odradek.replication.hosting import PartitionHosting
from odradek.replication.replica_manager import ReplicaManager
from odradek.storage import faults
from odradek.storage.config import LogConfig
from odradek.storage.errors import KafkaStorageError
from odradek.storage.log_manager import LogManager
from odradek.storage.names import TopicPartition

TOPIC_ID = uuid.UUID(int=7)


def batch(size: int = 100) -> bytearray:
    return bytearray(build_batch([(None, b"v" * size, None, 1000)]))


@pytest.fixture(autouse=True)
def _disarmed():
    yield
    faults.disarm()


# -- storage


def test_an_append_that_meets_an_io_error_leaves_nothing_and_raises_it(tmp_path):
    manager = LogManager([str(tmp_path / "a")], now_ms=0)
    tp = TopicPartition("t", 0)
    log = manager.get_or_create_log(tp, now_ms=0)
    log.append(batch(), leader_epoch=0, now_ms=1000)
    size, end = log.size_bytes, log.log_end_offset
    faults.arm(str(tmp_path / "a"), after_bytes=0)
    with pytest.raises(OSError) as e:
        log.append(batch(), leader_epoch=0, now_ms=1000)
    assert e.value.errno == errno.EIO and not isinstance(e.value, KafkaStorageError)
    assert (log.size_bytes, log.log_end_offset) == (size, end)
    assert os.path.getsize(log.active_segment.path()) == size  # nothing half-written stays in the file
    faults.disarm()
    assert log.append(batch(), leader_epoch=0, now_ms=1000).first_offset == end  # the same offset, next time
    manager.close()


def test_a_follower_append_that_meets_an_io_error_raises_it_too(tmp_path):
    leader = LogManager([str(tmp_path / "l")], now_ms=0).get_or_create_log(TopicPartition("t", 0), now_ms=0)
    follower_manager = LogManager([str(tmp_path / "f")], now_ms=0)
    follower = follower_manager.get_or_create_log(TopicPartition("t", 0), now_ms=0)
    leader.append(batch(), leader_epoch=0, now_ms=1000)
    faults.arm(str(tmp_path / "f"))
    with pytest.raises(OSError):
        follower.append_as_follower(leader.read_bytes(0, 1 << 20), now_ms=1000)
    assert follower.log_end_offset == 0


def test_an_index_page_the_disk_cannot_back_is_an_enospc_not_a_sigbus(tmp_path, monkeypatch):
    manager = LogManager([str(tmp_path / "a")], now_ms=0)
    log = manager.get_or_create_log(TopicPartition("t", 0), now_ms=0)
    log.append(batch(5000), leader_epoch=0, now_ms=1000)  # past index.interval.bytes: the next one is indexed
    size = log.size_bytes

    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(OSError) as e:
        log.append(batch(5000), leader_epoch=0, now_ms=1000)
    assert e.value.errno == errno.ENOSPC
    assert os.path.getsize(log.active_segment.path()) == size and log.log_end_offset == 1
    monkeypatch.undo()
    log.append(batch(5000), leader_epoch=0, now_ms=1000)
    assert log.active_segment.offset_index.entries == 1


# -- start-up


def test_a_directory_failing_at_start_starts_offline_and_the_others_serve(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    b.write_text("not a directory")  # makedirs fails with an OSError, as a dead mount would
    manager = LogManager([str(a), str(b)], now_ms=0)
    assert [d.online for d in manager.dirs] == [True, False]
    assert manager.failed_at_start == [(str(b), manager.dirs[1].error)] and "at start" in manager.dirs[1].error
    # A partition that existed before may have its log on b: not created again in a.
    with pytest.raises(KafkaStorageError, match="are offline"):
        manager.get_or_create_log(TopicPartition("t", 0), now_ms=0, is_new=False)
    manager.get_or_create_log(TopicPartition("t", 1), now_ms=0)  # a new one is
    assert manager.dir_of(TopicPartition("t", 1)).path == str(a)
    manager.close()
    b.unlink()
    again = LogManager([str(a), str(b)], now_ms=0)  # the disk is back: so is the directory
    assert all(d.online for d in again.dirs) and again.failed_at_start == []
    again.close()


def test_the_metadata_directory_or_every_data_directory_failing_refuses_the_start(tmp_path):
    a, b, m = tmp_path / "a", tmp_path / "b", tmp_path / "m"
    m.write_text("x")
    with pytest.raises(KafkaStorageError, match="metadata log directory"):
        LogManager([str(a)], now_ms=0, metadata_log_dir=str(m))
    c, d = tmp_path / "c", tmp_path / "d"
    c.write_text("x")
    d.write_text("x")
    with pytest.raises(KafkaStorageError, match="every log directory"):
        LogManager([str(c), str(d)], now_ms=0, metadata_log_dir=str(tmp_path / "meta"))
    m.unlink()
    LogManager([str(a)], now_ms=0, metadata_log_dir=str(m)).close()  # (the locks were released)


# -- the replica manager


def image_with(partitions: dict[int, PartitionImage]) -> MetadataImage:
    topic = TopicImage("t", TOPIC_ID, partitions)
    brokers = {n: BrokerRegistration(n, uuid.UUID(int=n), 5, (), None, False, False) for n in (1, 2)}
    return MetadataImage(brokers=brokers, topics_by_id={TOPIC_ID: topic}, topics_by_name={"t": topic})


def hosting(tmp_path, dirs):
    manager = LogManager([str(tmp_path / d) for d in dirs], now_ms=0)
    replicas = ReplicaManager(node_id=1, timer=Timer())
    publisher = MetadataPublisher()
    publisher.register(PartitionHosting(replicas, manager, lambda image, name: (LogConfig(), 1), lambda: 1000, None))
    return manager, replicas, publisher


def test_a_replica_that_is_not_new_waits_offline_while_a_directory_is(tmp_path):
    manager, replicas, publisher = hosting(tmp_path, ["a", "b"])
    manager.mark_dir_offline(str(tmp_path / "b"), "EIO")
    told: list[TopicPartition] = []
    replicas.report_storage_errors_to(lambda path, error: None, lambda tp, why: told.append(tp))
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    first = image_with({0: PartitionImage((1, 2), (1, 2), leader=1, leader_epoch=1, partition_epoch=1)})
    publisher.publish(MetadataUpdate.snapshot(first))  # (a start: nothing is new)
    assert replicas.get_partition(tp0) is None and tp0 in replicas.offline_partitions and told == [tp0]
    assert manager.get_log(tp0) is None
    second = image_with({0: PartitionImage((1, 2), (1, 2), leader=1, leader_epoch=1, partition_epoch=1),
                         1: PartitionImage((1, 2), (1, 2), leader=1, leader_epoch=0, partition_epoch=0)})
    publisher.publish(MetadataUpdate(first, second, frozenset({TOPIC_ID})))  # partition 1 is created now
    assert replicas.get_partition(tp1) is not None and manager.dir_of(tp1).path == str(tmp_path / "a")
    assert told == [tp0]
    # Replayed at start from the metadata log the broker had (offset 40 at most), a creation is not news.
    replicas.metadata_known_through = 40
    third = image_with({**second.topics_by_id[TOPIC_ID].partitions,
                        2: PartitionImage((1, 2), (1, 2), leader=1, leader_epoch=0, partition_epoch=0)})
    publisher.publish(MetadataUpdate(second, third, frozenset({TOPIC_ID}), offset=40))
    assert TopicPartition("t", 2) in replicas.offline_partitions and told == [tp0, TopicPartition("t", 2)]
    fourth = image_with({**third.topics_by_id[TOPIC_ID].partitions,
                         3: PartitionImage((1, 2), (1, 2), leader=1, leader_epoch=0, partition_epoch=0)})
    publisher.publish(MetadataUpdate(third, fourth, frozenset({TOPIC_ID}), offset=41))  # fetched after the start
    assert replicas.get_partition(TopicPartition("t", 3)) is not None


def test_a_coordinator_write_that_meets_an_io_error_reports_the_directory(tmp_path):
    manager, replicas, publisher = hosting(tmp_path, ["a"])
    failed: list[str] = []
    replicas.report_storage_errors_to(lambda path, error: failed.append(path))
    publisher.publish(MetadataUpdate.snapshot(image_with(
        {0: PartitionImage((1,), (1,), leader=1, leader_epoch=1, partition_epoch=1)})))
    faults.arm(str(tmp_path / "a"))
    with pytest.raises(KafkaStorageError):
        replicas.append_internal(TopicPartition("t", 0), batch(), now_ms=1000)
    assert failed and failed[0].startswith(str(tmp_path / "a"))


# -- the log directories' state machine


class Controller:
    def __init__(self) -> None:
        self.requests: list = []
        self.refuse = 0

    def assign_replicas_to_dirs(self, request) -> Deferred:
        from odradek.protocol.messages import AssignReplicasToDirsResponse

        self.requests.append(request)
        if self.refuse:
            self.refuse -= 1
            return Deferred.failed(ConnectionError("no controller"))
        return Deferred.completed(AssignReplicasToDirsResponse(throttle_time_ms=0, error_code=0, directories=[]))


async def until(predicate, what: str) -> None:
    for _ in range(400):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_failing_directory_goes_offline_once_and_the_controller_is_told(tmp_path):
    manager, replicas, publisher = hosting(tmp_path, ["a", "b", "c"])
    publisher.publish(MetadataUpdate.snapshot(image_with(
        {i: PartitionImage((1, 2), (1, 2), leader=1, leader_epoch=1, partition_epoch=1) for i in range(3)})))
    in_b = [tp for tp in manager.logs if manager.dir_of(tp).path == str(tmp_path / "b")]
    controller = Controller()
    controller.refuse = 1  # the first report meets no controller: it is sent again
    dirs = LogDirs(manager, replicas, None, publisher, controller, node_id=1, broker_epoch=lambda: 5,  # type: ignore[arg-type]
                   clock=lambda: 1000)
    fatal: list[str] = []
    dirs.on_fatal_error(fatal.append)
    dirs.start()
    try:
        assert dirs.gauges() == {"offline_log_dirs": 0, "offline_replicas": 0}
        dirs.storage_failed(str(tmp_path / "b" / in_b[0].dir_name), "[Errno 28] No space left on device")
        dirs.storage_failed(str(tmp_path / "b"), "again")  # offline already: nothing more happens
        assert dirs.failures == 1 and manager.dirs[1].error == "[Errno 28] No space left on device"
        assert all(replicas.get_partition(tp) is None and tp in replicas.offline_partitions for tp in in_b)
        assert dirs.gauges() == {"offline_log_dirs": 1, "offline_replicas": len(in_b)}
        await until(lambda: not dirs.unreported, "the controller told")
        last = controller.requests[-1]
        assert len(controller.requests) == 2 and last.broker_epoch == 5
        assert [d.id for d in last.directories] == [LOST_DIRECTORY_ID]
        assert sorted(p.partition_index for t in last.directories[0].topics for p in t.partitions) == sorted(
            tp.partition for tp in in_b)
        assert dirs.offline_dir_ids() and fatal == []
        # The metadata log directory (the first data directory here) failing stops the node.
        dirs.storage_failed(str(tmp_path / "a"), "[Errno 5] Input/output error")
        dirs.storage_failed(str(tmp_path / "a"), "[Errno 5] Input/output error")
        assert len(fatal) == 1 and "metadata log directory" in fatal[0] and dirs.failures == 2
    finally:
        await dirs.stop()
        manager.close()
