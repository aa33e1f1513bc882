"""The log manager: every partition log of one log directory, and the periodic work on them.

Theory of operation
-------------------
Opening a directory:

1. Identity. A missing or empty directory is claimed by writing `meta.properties`. A directory that holds
   files but no `meta.properties`, or whose `meta.properties` names another node or cluster, is refused
   (ForeignLogDirectoryError): it is someone else's data, and recovery would "repair" it.
2. Lock. `fcntl.flock` on `.lock`, held until `close`; a second manager, in this process or another,
   is refused (LogDirectoryLockedError).
3. Clean shutdown. If `.kafka_cleanshutdown` exists the logs open without recovery; the marker is
   removed before anything else happens, so a crash from then on is seen as unclean.
4. Checkpoints (recovery points, log start offsets, cleaner offsets) are read and every
   `<topic>-<partition>` directory opens as a `Log`. Opening is lazy: no index is mapped and no log
   file stays open, so thousands of partitions open quickly. Directories of deleted partitions
   (`*-delete`) are removed.

Creating a log (`get_or_create_log`) makes its directory and an empty segment file, and fsyncs nothing:
an empty log needs no durability, and its first flush with data makes the creation durable, topic id
included (see log.py). An idle partition holds no descriptor: a log file is opened on its first append or
read, index files are created with their first entry, and index maps, one descriptor each, are made on
demand and bounded by the manager's `IndexMaps` (`max_open_index_maps`, by default a quarter of the
descriptor limit, at most 4,096), shared by all its logs: the least recently used is unmapped first.

The broker drives the rest with `maybe_*` hooks on a schedule, each taking `now_ms` and returning what it
did: retention (`maybe_delete_old_segments`, every `retention_check_interval_ms`), flushing
(`maybe_flush`: segments that rolled, and `flush.ms`), checkpoints (`maybe_checkpoint`, every
`checkpoint_interval_ms`), producer-id expiration and cleaning. `maybe_clean` picks the compacted log
with the highest dirty ratio among those at or above their `min.cleanable.dirty.ratio`, past their
`max.compaction.lag.ms`, or whose tombstones are due for removal, and cleans it; it may run in a
worker thread (`loop.run_in_executor`) while the event loop keeps appending and reading (see
cleaner.py). `close` flushes and closes every log, writes the checkpoints and the
clean-shutdown marker, and releases the lock.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable, Mapping

from .checkpoints import OffsetCheckpointFile, atomic_write, fsync_dir
from .cleaner import Cleaner, CleanResult, cleanable_range
from .config import LogConfig
from .errors import ForeignLogDirectoryError, LogDirectoryLockedError
from .index import IndexMaps
from .log import Log
from .names import (
    CLEAN_SHUTDOWN_FILE,
    CLEANER_OFFSET_CHECKPOINT,
    DELETE_DIR_SUFFIX,
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    RECOVERY_POINT_CHECKPOINT,
    TopicPartition,
)

_IGNORED_ENTRIES = {"lost+found"}


class LogManager:
    def __init__(
        self,
        log_dir: str,
        *,
        now_ms: int,
        default_config: LogConfig | None = None,
        topic_configs: Mapping[str, LogConfig] | None = None,
        node_id: int | None = None,
        cluster_id: str | None = None,
        cleaner: Cleaner | None = None,
        retention_check_interval_ms: int = 300_000,
        checkpoint_interval_ms: int = 60_000,
        producer_id_expiration_check_interval_ms: int = 600_000,
        max_open_index_maps: int | None = None,
        cache_window_bytes: int = 0,
        cache_release: Callable | None = None,
    ) -> None:
        self.log_dir = os.path.abspath(log_dir)
        self.default_config = default_config or LogConfig()
        self._topic_configs = dict(topic_configs or {})
        self.cleaner = cleaner or Cleaner()
        self.retention_check_interval_ms = retention_check_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.producer_id_expiration_check_interval_ms = producer_id_expiration_check_interval_ms
        self._logs: dict[TopicPartition, Log] = {}
        self._topic_logs: dict[str, dict[TopicPartition, Log]] = {}  # the same logs by topic
        self.index_maps = IndexMaps(max_open_index_maps)
        # Page-cache window: each active segment keeps its last `cache_window_bytes` in the OS page cache and
        # hands older pages back (segment.drop_cache) as it grows. Without it every appended byte takes a
        # fresh page-cache page, and once free memory is used up each of those must be reclaimed first; on
        # VMs that return free memory to the host (free page reporting, ballooning) each also faults on
        # first touch. Measured on such a VM: writing 1 MiB cost 0.8-2.0 ms of CPU without, 0.35 ms with.
        # Consumers within the window (tailing, and most lag) still read from the cache; older reads go to
        # the disk. 0 leaves the page cache to the OS (Kafka's behaviour). `cache_release(file, end)`, if
        # given, runs drop_cache elsewhere (the broker: a worker thread, as the call can block on the disk);
        # without it the logs call drop_cache themselves.
        self.cache_window_bytes = cache_window_bytes
        self.cache_release = cache_release
        # What `flush_due` looks at instead of every log: a roll happened somewhere, or a log has flush.ms.
        self._rolled = False
        self._timed_flush: set[TopicPartition] = set()
        self._lock_fd: int | None = None
        self._deleted = 0
        self._last_retention_ms = now_ms
        self._last_checkpoint_ms = now_ms
        self._last_expiration_ms = now_ms
        self.had_clean_shutdown = False

        os.makedirs(self.log_dir, exist_ok=True)
        self._check_identity(node_id, cluster_id)
        self._lock()
        try:
            self._load(now_ms)
        except BaseException:
            self._unlock()
            raise

    # ---------------------------------------------------------------------------------------- opening

    def _check_identity(self, node_id: int | None, cluster_id: str | None) -> None:
        path = os.path.join(self.log_dir, META_PROPERTIES)
        if not os.path.exists(path):
            foreign = [n for n in os.listdir(self.log_dir) if n not in _IGNORED_ENTRIES and n != LOCK_FILE]
            if foreign:
                raise ForeignLogDirectoryError(
                    f"{self.log_dir} is not empty and has no {META_PROPERTIES}: it is not an Odradek log "
                    f"directory (found {sorted(foreign)[:3]}); refusing to use it")
            lines = ["version=1"]
            if node_id is not None:
                lines.append(f"node.id={node_id}")
            if cluster_id is not None:
                lines.append(f"cluster.id={cluster_id}")
            atomic_write(path, ("\n".join(lines) + "\n").encode())
            return
        with open(path, encoding="utf-8") as f:
            props = dict(line.strip().split("=", 1) for line in f if "=" in line and not line.startswith("#"))
        if node_id is not None and "node.id" in props and props["node.id"] != str(node_id):
            raise ForeignLogDirectoryError(
                f"{self.log_dir} belongs to node {props['node.id']}, not to node {node_id}; refusing to use it")
        if cluster_id is not None and "cluster.id" in props and props["cluster.id"] != cluster_id:
            raise ForeignLogDirectoryError(
                f"{self.log_dir} belongs to cluster {props['cluster.id']}, not to cluster {cluster_id}; "
                "refusing to use it")

    def _lock(self) -> None:
        fd = os.open(os.path.join(self.log_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogDirectoryLockedError(
                f"{self.log_dir} is locked by another process or log manager (is a broker already running on "
                "it?)") from None
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _checkpoint(self, name: str) -> OffsetCheckpointFile:
        return OffsetCheckpointFile(os.path.join(self.log_dir, name))

    def _load(self, now_ms: int) -> None:
        marker = os.path.join(self.log_dir, CLEAN_SHUTDOWN_FILE)
        self.had_clean_shutdown = os.path.exists(marker)
        if self.had_clean_shutdown:
            os.unlink(marker)
            fsync_dir(self.log_dir)
        recovery_points = self._checkpoint(RECOVERY_POINT_CHECKPOINT).read()
        log_start_offsets = self._checkpoint(LOG_START_OFFSET_CHECKPOINT).read()
        cleaner_offsets = self._checkpoint(CLEANER_OFFSET_CHECKPOINT).read()
        for entry in os.scandir(self.log_dir):
            if not entry.is_dir():
                continue
            if entry.name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(entry.path, ignore_errors=True)
                continue
            tp = TopicPartition.from_dir_name(entry.name)
            if tp is None:
                continue
            log = Log.open(entry.path, self.config_for(tp.topic), now_ms=now_ms,
                           recovery_point=recovery_points.get(tp, 0), log_start_offset=log_start_offsets.get(tp, 0),
                           had_clean_shutdown=self.had_clean_shutdown, index_maps=self.index_maps)
            log.cleaner_offset = cleaner_offsets.get(tp, 0)
            self._add(tp, log)

    # ------------------------------------------------------------------------------------------- logs

    @property
    def logs(self) -> Mapping[TopicPartition, Log]:
        return self._logs

    def _add(self, tp: TopicPartition, log: Log) -> None:
        log.cache_window_bytes = self.cache_window_bytes
        log.cache_release = self.cache_release
        log.on_roll = self._note_roll
        if log.config.flush_ms is not None:
            self._timed_flush.add(tp)
        self._logs[tp] = log
        self._topic_logs.setdefault(tp.topic, {})[tp] = log

    def _note_roll(self) -> None:
        self._rolled = True

    def flush_due(self, now_ms: int) -> bool:
        """Whether `maybe_flush` has anything to do: a segment rolled since the last `maybe_flush` began, or
        a log with `flush.ms` is due. Cheap (it does not visit every log), so a caller can check it on its
        own thread and hand `maybe_flush` to a worker only when it matters."""
        if self._rolled:
            return True
        for tp in list(self._timed_flush):
            log = self._logs.get(tp)
            if log is not None and log.flush_due(now_ms):
                return True
        return False

    def checkpoint_due(self, now_ms: int) -> bool:
        return now_ms - self._last_checkpoint_ms >= self.checkpoint_interval_ms

    def config_for(self, topic: str) -> LogConfig:
        return self._topic_configs.get(topic, self.default_config)

    def update_topic_config(self, topic: str, config: LogConfig) -> None:
        self._topic_configs[topic] = config
        for tp, log in list(self._topic_logs.get(topic, {}).items()):
            log.update_config(config)
            if config.flush_ms is not None:
                self._timed_flush.add(tp)
            else:
                self._timed_flush.discard(tp)

    def get_log(self, tp: TopicPartition) -> Log | None:
        return self._logs.get(tp)

    def get_or_create_log(self, tp: TopicPartition, *, now_ms: int, topic_id: bytes | None = None) -> Log:
        log = self._logs.get(tp)
        if log is None:
            log = Log.open(os.path.join(self.log_dir, tp.dir_name), self.config_for(tp.topic), now_ms=now_ms,
                           index_maps=self.index_maps)
            self._add(tp, log)
        if topic_id is not None:
            log.assign_topic_id(topic_id)
        return log

    def delete_log(self, tp: TopicPartition) -> bool:
        """Remove the partition: its directory is renamed aside, then removed. Regions already handed to
        readers stay readable until released."""
        log = self._logs.pop(tp, None)
        self._timed_flush.discard(tp)
        if log is None:
            return False
        same_topic = self._topic_logs.get(tp.topic, {})
        same_topic.pop(tp, None)
        if not same_topic:
            self._topic_logs.pop(tp.topic, None)
        log.release()
        while True:
            self._deleted += 1
            doomed = os.path.join(self.log_dir, f"{tp.dir_name}.{self._deleted}{DELETE_DIR_SUFFIX}")
            if not os.path.exists(doomed):
                break
        os.replace(log.directory, doomed)
        fsync_dir(self.log_dir)
        shutil.rmtree(doomed, ignore_errors=True)
        return True

    # --------------------------------------------------------------------------------- scheduled work

    def maybe_delete_old_segments(self, now_ms: int, *,
                                  upper_bound_offset: Callable[[TopicPartition], int | None] | None = None) -> int:
        """Retention for every log, every `retention_check_interval_ms`. `upper_bound_offset(tp)` gives the
        high watermark (segments above it stay); None means the log end offset. Returns segments deleted."""
        if now_ms - self._last_retention_ms < self.retention_check_interval_ms:
            return 0
        self._last_retention_ms = now_ms
        deleted = 0
        for tp, log in list(self._logs.items()):
            bound = upper_bound_offset(tp) if upper_bound_offset is not None else None
            deleted += log.delete_old_segments(now_ms, upper_bound_offset=bound)
        return deleted

    def maybe_flush(self, now_ms: int) -> int:
        """Flush logs with rolled segments not yet on disk or whose `flush.ms` has passed. Returns how many."""
        self._rolled = False  # a roll from here on is seen by the next flush_due (this pass may miss it)
        return sum(log.maybe_flush(now_ms) for log in list(self._logs.values()))

    def maybe_checkpoint(self, now_ms: int) -> bool:
        if now_ms - self._last_checkpoint_ms < self.checkpoint_interval_ms:
            return False
        self._last_checkpoint_ms = now_ms
        self.write_checkpoints()
        return True

    def write_checkpoints(self) -> None:
        logs = list(self._logs.items())
        self._checkpoint(RECOVERY_POINT_CHECKPOINT).write({tp: log.recovery_point for tp, log in logs})
        self._checkpoint(LOG_START_OFFSET_CHECKPOINT).write({tp: log.log_start_offset for tp, log in logs})
        self._checkpoint(CLEANER_OFFSET_CHECKPOINT).write(
            {tp: log.cleaner_offset for tp, log in logs if log.config.compact})

    def maybe_remove_expired_producers(self, now_ms: int) -> int:
        if now_ms - self._last_expiration_ms < self.producer_id_expiration_check_interval_ms:
            return 0
        self._last_expiration_ms = now_ms
        return sum(log.remove_expired_producers(now_ms) for log in list(self._logs.values()))

    def maybe_clean(self, now_ms: int) -> CleanResult | None:
        """Clean the filthiest compacted log, if any qualifies. Safe to call from one worker thread."""
        best, best_ratio = None, -1.0
        for log in list(self._logs.values()):
            if not log.config.compact or log.closed:
                continue
            cleanable = cleanable_range(log, now_ms)
            ratio = cleanable.dirty_ratio
            dirty_enough = cleanable.dirty_bytes > 0 and (ratio >= log.config.min_cleanable_dirty_ratio or cleanable.overdue)
            tombstones_due = 0 <= log.latest_delete_horizon_ms <= now_ms
            if (dirty_enough or tombstones_due) and ratio > best_ratio:
                best, best_ratio = log, ratio
        if best is None:
            return None
        try:
            return self.cleaner.clean(best, now_ms=now_ms)
        except Exception:
            if best.closed:
                return None
            raise

    # ---------------------------------------------------------------------------------------- closing

    def close(self) -> None:
        """Clean shutdown: close every log, write the checkpoints and the marker, release the lock."""
        if self._lock_fd is None:
            return
        for log in list(self._logs.values()):
            log.close()
        self.write_checkpoints()
        atomic_write(os.path.join(self.log_dir, CLEAN_SHUTDOWN_FILE), b"")
        self._unlock()

    def abandon(self) -> None:
        """Release the lock without closing anything, as a crash would (for tests and fatal errors)."""
        self._unlock()
