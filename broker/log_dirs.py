"""Several log directories per broker (JBOD): moving replicas between them, and surviving one that fails.

Theory of operation
-------------------
`LogDirs` is the broker's part of what storage/log_manager.py keeps per directory:

  * AlterReplicaLogDirs (`alter`) makes a future log of the replica in the target directory and wakes the
    mover, one asyncio task that copies batches from each moving replica's current log into its future log
    (storage/log_mover.py, at most `MOVE_STEP_BYTES` per step, yielding to the event loop between steps)
    and, in the step that finds it caught up, swaps it in: the log manager renames it into place and the
    partition reads and writes the new log from the next request on. A partition dropped meanwhile
    abandons its move.
  * A failed directory: an I/O error met by an append, a read, a follower's append, a flush or a checkpoint
    (`storage_failed(path, error)`, on the event loop) takes the directory offline in the log manager; its
    partitions stop being fetched and are hosted no more here (answered KAFKA_STORAGE_ERROR), and the
    controller is told with AssignReplicasToDirs naming them in DirectoryId.LOST (retried until it
    answers): it moves their leadership and ISR membership to other brokers, and the broker carries on
    with its other directories (Kafka's LogDirFailureChannel and offline-directory handling). The
    directory's id is listed by `offline_dir_ids` (DescribeLogDirs shows the directory with
    KAFKA_STORAGE_ERROR).

A directory's life: online -> offline, once, on the first I/O error met in it (later ones find it offline
and change nothing), logged once with the directory, the cause and the partitions it took, counted in
`odradek_log_directories_offline` / `odradek_replicas_offline`. It stays offline until the broker restarts
(Kafka's rule too: a disk that failed once is not trusted again behind the operator's back); a restart
finds it online again if it can be opened, else it starts offline and the node serves from its other
directories (LogManager._failed_at_start). A full disk is such an error: segment appends raise the
ENOSPC itself (storage/segment.py) and index pages are given blocks before they are written
(storage/index.py), so a full disk is never a half-written batch, nor SIGBUS.

How the controller is told. Kafka (KIP-858) names the failed directory in BrokerHeartbeat's
OfflineLogDirs and the controller, which tracks each replica's directory (PartitionRecord.Directories),
finds the partitions. Odradek's image does not track directories (PartitionRecord v0), so the broker,
which knows which replicas were in the directory, names them: AssignReplicasToDirs with DirectoryId.LOST,
which the controller answers by taking this broker out of their ISR and leadership at once (not after
replica.lag.time.max.ms). A replica the image gives this broker, that has no log here while a directory
is offline and is not new (its partition existed before this broker started: ReplicaManager.
metadata_known_through), is reported the same way (`replica_offline`): its log may be on the failed disk
(one that failed at start could not even be listed), and an empty log made elsewhere would pass for a
replica that lost everything; Kafka's getOrCreateLog refuses to create it for the same reason.

The metadata log directory (metadata.log.dir, else the first of log.dirs) is the exception: Kafka stops
the broker when it fails, and so does this one (the daemon, through `on_fatal_error`): a node that cannot
keep the metadata log cannot follow the cluster. Put the data on other disks than the metadata log
(log.dirs after the first, or a separate metadata.log.dir) to have a data disk fail alone.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from odradek.protocol.errors import ErrorCode
from odradek.storage.errors import KafkaStorageError, StorageError
from odradek.storage.log_mover import copy_step
from odradek.storage.names import TopicPartition

from .services import BrokerServices

if TYPE_CHECKING:
    from odradek.metadata.publisher import MetadataPublisher
    from odradek.replication.replica_manager import ReplicaManager
    from odradek.storage.log_manager import LogManager

    from .controller_channel import ControllerChannel
    from .replica_fetcher import ReplicaFetcherManager

log = structlog.get_logger("odradek.log_dirs")

MOVE_STEP_BYTES = 1 << 20
LOST_DIRECTORY_ID = uuid.UUID(int=2)  # Kafka's DirectoryId.LOST


def directory_uuid(directory_id: str | None) -> uuid.UUID | None:
    """A meta.properties `directory.id` (22 characters of base64) as a UUID."""
    import base64

    if not directory_id:
        return None
    try:
        return uuid.UUID(bytes=base64.urlsafe_b64decode(directory_id + "=="))
    except ValueError:
        return None


class LogDirs:
    def __init__(self, log_manager: LogManager, data: ReplicaManager, fetchers: ReplicaFetcherManager | None,
                 metadata: MetadataPublisher, controller: ControllerChannel, *, node_id: int,
                 broker_epoch: Callable[[], int], clock: Callable[[], int]) -> None:
        self.log_manager = log_manager
        self.data = data
        self.fetchers = fetchers
        self.metadata = metadata
        self.controller = controller
        self.node_id = node_id
        self.broker_epoch = broker_epoch  # this broker's, once registered (-1 before)
        self.clock = clock
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._reporting: asyncio.Task | None = None
        self.unreported: set[TopicPartition] = set()  # offline replicas the controller has not heard of yet
        self.moves_completed = 0
        self.failures = 0  # directories that went offline since start (at start included)
        self._on_fatal: Callable[[str], None] | None = None
        self._fatal: str | None = None  # why the node is stopping (its metadata log directory failed)

    def follow_with(self, fetchers: ReplicaFetcherManager) -> None:
        """The follower fetchers that replaced the first ones (node.Node.follow_with)."""
        self.fetchers = fetchers

    def on_fatal_error(self, callback: Callable[[str], None]) -> None:
        """Who stops the node when the metadata log directory fails (`callback(why)`: the daemon)."""
        self._on_fatal = callback

    def start(self) -> None:
        self.data.report_storage_errors_to(self.storage_failed, self.replica_offline)
        for path, why in self.log_manager.failed_at_start:
            self.failures += 1
            log.error("log directory offline at start; the node starts with its other directories", log_dir=path,
                      cause=why, online=[d.path for d in self.log_manager.dirs if d.online])
        if self.data.offline_partitions:  # refused while the image was applied, before this start
            self.unreported.update(self.data.offline_partitions)
            self._reporting = asyncio.get_running_loop().create_task(self._report())
        self._task = asyncio.get_running_loop().create_task(self._mover())
        if self.log_manager.future_logs:
            self._wake.set()  # moves that were under way at the last shutdown resume

    async def stop(self) -> None:
        for task in (self._task, self._reporting):
            if task is not None:
                task.cancel()
                try:
                    await task
                except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping
                    pass

    # -- AlterReplicaLogDirs

    def alter(self, tp: TopicPartition, path: str) -> ErrorCode:
        """Move `tp`'s replica on this broker to the log directory `path` (absolute, as DescribeLogDirs
        names it); the answer per partition, as Kafka's alterReplicaLogDirs gives it."""
        manager = self.log_manager
        target = manager.find_dir(path)
        if target is None or not target.placement:
            return ErrorCode.LOG_DIR_NOT_FOUND
        if not target.online:
            return ErrorCode.KAFKA_STORAGE_ERROR
        if tp in self.data.offline_partitions:
            return ErrorCode.KAFKA_STORAGE_ERROR
        partition = self.data.get_partition(tp)
        if partition is None or tp.topic == "__cluster_metadata":
            return ErrorCode.REPLICA_NOT_AVAILABLE
        if manager.dir_of(tp) is target:
            manager.abandon_future_log(tp)  # moving back where it is: a move under way stops
            return ErrorCode.NONE
        try:
            manager.create_future_log(tp, target.path, now_ms=self.broker_now())
        except KafkaStorageError:
            return ErrorCode.KAFKA_STORAGE_ERROR
        except OSError as e:
            self.storage_failed(target.path, str(e))
            return ErrorCode.KAFKA_STORAGE_ERROR
        self._wake.set()
        return ErrorCode.NONE

    def broker_now(self) -> int:
        return self.clock()

    async def _mover(self) -> None:
        manager = self.log_manager
        while True:
            await self._wake.wait()
            self._wake.clear()
            while manager.future_logs:
                progressed = False
                for tp in list(manager.future_logs):
                    progressed = self._step(tp) or progressed
                    await asyncio.sleep(0)  # requests go on between steps
                if not progressed:
                    # Only moves of partitions not hosted yet (a start, before the image names them): look
                    # again a little later rather than spin.
                    await asyncio.sleep(0.5)

    def _step(self, tp: TopicPartition) -> bool:
        """One copy step of `tp`'s move, and the swap once caught up; False when nothing could be done."""
        manager = self.log_manager
        future = manager.future_logs.get(tp)
        partition = self.data.get_partition(tp)
        if future is None:
            return False
        if partition is None:
            if manager.get_log(tp) is None:
                manager.abandon_future_log(tp)  # the replica is gone: so is its move
                return True
            return False  # not hosted yet (a start): the move resumes once it is
        now = self.broker_now()
        try:
            if copy_step(partition.log, future, max_bytes=MOVE_STEP_BYTES, now_ms=now):
                moved = manager.replace_current_with_future(tp, now_ms=now)
                self.data.replace_log(tp, moved)
                self.moves_completed += 1
                moved_to = manager.dir_of(tp)
                log.info("replica moved to another log directory", partition=str(tp),
                         log_dir=moved_to.path if moved_to is not None else None)
        except StorageError as e:  # (e.g. the current log cut under the read): this move gives up
            log.warning("moving a replica failed; the move is abandoned", partition=str(tp), error=str(e))
            manager.abandon_future_log(tp)
        except OSError as e:
            # Either directory may be failing: the one the error names goes offline.
            path = e.filename or future.directory
            self.storage_failed(str(path), str(e))
            future_dir = manager.future_dir_of(tp) if tp in manager.future_logs else None
            if future_dir is not None and not future_dir.online:
                manager.abandon_future_log(tp)
        return True

    # -- failed directories

    def storage_failed(self, path: str, error: str) -> None:
        manager = self.log_manager
        d = next((d for d in manager.dirs if path == d.path or path.startswith(d.path + "/")), None)
        if d is None or not d.online:
            return  # not a log directory's, or offline already (and handled then)
        if d.path == manager.metadata_log_dir and self._fatal is not None:
            return  # stopping for it already
        if d.path == manager.metadata_log_dir and self._on_fatal is not None:
            # Kafka stops the broker when its metadata log directory fails: the node can no longer keep the
            # metadata log (nor, as a voter, vote), and a broker that cannot follow the metadata would serve
            # on a stale view for ever. The daemon stops it cleanly (exit status 1); its replicas move as
            # when any broker stops. (Put data elsewhere, in log.dirs after the first or with
            # metadata.log.dir, to have a data disk fail alone.) The Broker always gives this callback: it
            # fails a start that is under way, else tells the daemon (an embedded broker records the cause
            # in Broker.fatal_error). LogDirs used without a callback takes the directory offline as any other.
            log.critical("the metadata log directory failed; stopping the node", log_dir=d.path, cause=error)
            self.failures += 1
            self._fatal = f"the metadata log directory {d.path} failed: {error}"
            self._on_fatal(self._fatal)
            return
        gone = manager.mark_dir_offline(path, error)
        self.failures += 1
        names = sorted(str(tp) for tp in gone)
        log.error("log directory offline; its replicas stop here and the controller moves them", log_dir=d.path,
                  cause=error, partitions=len(gone), affected=names[:20] + ([f"... {len(names) - 20} more"]
                                                                          if len(names) > 20 else []))
        fetchers = self.fetchers
        for tp in gone:
            if fetchers is not None:
                fetchers.unfollow(tp)
            self.data.take_offline(tp)
        self.unreported.update(gone)
        if not any(x.online and x.placement for x in manager.dirs):
            # (Kafka halts the broker here; this one stays up, serving nothing from storage, so that its
            # offline replicas are reported and the operator sees it in DescribeLogDirs.)
            log.critical("every data log directory of this broker is offline")
        if self.unreported and (self._reporting is None or self._reporting.done()):
            self._reporting = asyncio.get_running_loop().create_task(self._report())

    def replica_offline(self, tp: TopicPartition, why: str) -> None:
        """A replica the image gives this broker that it cannot host while a directory is offline (its log
        may be there: see LogManager.get_or_create_log): the controller is told, as for the directory's own."""
        log.warning("replica not hosted: a log directory is offline", partition=str(tp), cause=why)
        self.unreported.add(tp)
        if self._reporting is None or self._reporting.done():
            self._reporting = asyncio.get_running_loop().create_task(self._report())

    def gauges(self) -> dict[str, int]:
        """Kafka's OfflineLogDirectoryCount and OfflineReplicaCount."""
        return {"offline_log_dirs": sum(1 for d in self.log_manager.dirs if not d.online),
                "offline_replicas": len(self.data.offline_partitions)}

    def check_failed_paths(self) -> None:
        """I/O errors met in worker threads (flushes, checkpoints), handled here on the event loop."""
        failed, self.log_manager.failed_paths = self.log_manager.failed_paths, []
        for path, error in failed:
            self.storage_failed(path, error)

    def offline_dir_ids(self) -> list[uuid.UUID]:
        return [u for d in self.log_manager.dirs if not d.online and (u := directory_uuid(d.directory_id)) is not None]

    async def _report(self) -> None:
        """AssignReplicasToDirs(LOST) for the offline replicas, until the controller has taken them."""
        from odradek.protocol.messages import AssignReplicasToDirsRequest as R

        while self.unreported:
            image = self.metadata.image
            registration = image.brokers.get(self.node_id)
            # (A broker knows its epoch from its registration's answer; before that, from its image.)
            registered_epoch = self.broker_epoch()
            broker_epoch = registered_epoch if registered_epoch >= 0 else (
                registration.broker_epoch if registration is not None else -1)
            if broker_epoch < 0:
                await asyncio.sleep(0.2)  # not registered yet
                continue
            batch = sorted(self.unreported, key=lambda tp: (tp.topic, tp.partition))
            topics: dict[uuid.UUID, list[int]] = {}
            for tp in batch:
                topic = image.topics_by_name.get(tp.topic)
                if topic is not None:
                    topics.setdefault(topic.topic_id, []).append(tp.partition)
            if not topics:
                self.unreported.difference_update(batch)
                break
            request = R(broker_id=self.node_id, broker_epoch=broker_epoch, directories=[
                R.DirectoryData(id=LOST_DIRECTORY_ID, topics=[
                    R.DirectoryData.TopicData(topic_id=topic_id, partitions=[
                        R.DirectoryData.TopicData.PartitionData(partition_index=i) for i in indexes])
                    for topic_id, indexes in topics.items()])])
            try:
                response = await BrokerServices.future_from(self.controller.assign_replicas_to_dirs(request))
            except Exception as e:  # noqa: BLE001 - no controller now: try again
                log.debug("reporting offline replicas failed; retrying", error=str(e))
                await asyncio.sleep(0.5)
                continue
            if response.error_code:
                log.debug("offline replicas refused; retrying", error_code=response.error_code)
                await asyncio.sleep(0.5)
                continue
            self.unreported.difference_update(batch)
            log.info("controller told of offline replicas", partitions=len(batch))
