"""The log manager: every partition log of a node's log directories (JBOD), and the periodic work on them.

Theory of operation
-------------------
A node has one or more log directories (`log.dirs`). Opening each of them:

1. Identity. A missing or empty directory is claimed by writing `meta.properties` (with a new
   `directory.id`). A directory that holds files but no `meta.properties`, or whose `meta.properties` names
   another node or cluster, is refused (ForeignLogDirectoryError): it is someone else's data, and recovery
   would "repair" it. Two directories with one directory id are refused too (a copied directory).
2. Lock. `fcntl.flock` on `.lock`, held until `close`; a second manager, in this process or another,
   is refused (LogDirectoryLockedError).
3. Clean shutdown. If `.kafka_cleanshutdown` exists the logs open without recovery; the marker is
   removed before anything else happens, so a crash from then on is seen as unclean. The marker holds
   the broker epoch of the session that closed cleanly, as Kafka's CleanShutdownFileHandler writes it
   (`{"version":0,"brokerEpoch":N}`); `previous_broker_epoch` is what the broker then sends in its
   BrokerRegistration (KIP-966): the epoch every directory names, else -1 (a directory without a marker,
   offline, or naming another epoch: the shutdown is not proven clean, and the controller keeps this
   broker out of the eligible leaders until it has caught up).
4. Checkpoints (recovery points, log start offsets, cleaner offsets) are per directory, and every
   `<topic>-<partition>` directory opens as a `Log`. Opening is lazy: no index is mapped and no log
   file stays open, so thousands of partitions open quickly. Directories of deleted partitions
   (`*-delete`) are removed. One partition in two directories is refused, as Kafka does.

Creating a log (`get_or_create_log`) places it in the online data directory holding the fewest logs (the
first such in `log.dirs` order on a tie: Kafka's nextLogDirs), makes its directory and an empty segment
file, and fsyncs nothing: an empty log needs no durability, and its first flush with data makes the
creation durable, topic id included (see log.py). An idle partition holds no descriptor: a log file is
opened on its first append or read, index files are created with their first entry, and index maps, one
descriptor each, are made on demand and bounded by the manager's `IndexMaps` (`max_open_index_maps`, by
default a quarter of the descriptor limit, at most 4,096), shared by all its logs: the least recently used
is unmapped first. A `metadata_log_dir` outside the data directories holds only what is placed there
explicitly (the metadata log), never new partitions.

Moving a replica to another directory (AlterReplicaLogDirs) goes through a *future log*,
`<topic>-<partition>.<id>-future` in the target directory (`create_future_log`): someone copies the current
log into it (storage/log_mover.py) and, once it has caught up, `replace_current_with_future` renames it
into place and deletes the old one, in one step of the caller's thread so no append falls between.

A directory fails when an I/O error is met in it (`mark_dir_offline`, called by whoever met the error):
its logs leave the manager (each released; nothing more is written there) and are reported as offline;
the other directories carry on. The broker takes the offline replicas out of service and tells the
controller, which moves their leadership elsewhere, rather than the whole node failing. A directory that
cannot be opened at start (an OSError creating, reading, locking or loading it) starts offline the same
way and the node opens with the others (`failed_at_start`); a directory that is someone else's, or locked
by a running broker, still refuses the start, and so does the metadata log directory failing or every
data directory (Kafka stops then too). While a data directory is offline, a log is created only for a
partition that is new (`get_or_create_log(is_new=...)`): any other may have its log on the failed disk.

The broker drives the rest with `maybe_*` hooks on a schedule, each taking `now_ms` and returning what it
did: retention (`maybe_delete_old_segments`, every `retention_check_interval_ms`), flushing
(`maybe_flush`: segments that rolled, and `flush.ms`), checkpoints (`maybe_checkpoint`, every
`checkpoint_interval_ms`), producer-id expiration and cleaning. `maybe_clean` picks the compacted log
with the highest dirty ratio among those at or above their `min.cleanable.dirty.ratio`, past their
`max.compaction.lag.ms`, or whose tombstones are due for removal, and cleans it; it may run in a
worker thread (`loop.run_in_executor`) while the event loop keeps appending and reading (see
cleaner.py). `close` flushes and closes every log, writes the checkpoints and the
clean-shutdown marker of every online directory, and releases the locks.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import structlog

from .checkpoints import OffsetCheckpointFile, atomic_write, fsync_dir
from .cleaner import Cleaner, CleanResult, cleanable_range
from .config import LogConfig
from .errors import ForeignLogDirectoryError, KafkaStorageError, LogDirectoryLockedError
from .index import IndexMaps
from .log import Log
from .meta_properties import new_directory_id, read_meta_properties
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

events = structlog.get_logger("odradek.storage")  # (`log` is a partition's Log throughout)

_IGNORED_ENTRIES = {"lost+found"}
FUTURE_DIR_SUFFIX = "-future"


def future_dir_name(tp: TopicPartition) -> str:
    """`<topic>-<partition>.<unique id>-future`, as Kafka names a future replica's directory."""
    return f"{tp.dir_name}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"


def _parse_future_dir_name(name: str) -> TopicPartition | None:
    if not name.endswith(FUTURE_DIR_SUFFIX) or "." not in name:
        return None
    return TopicPartition.from_dir_name(name[: -len(FUTURE_DIR_SUFFIX)].rsplit(".", 1)[0])


@dataclass(slots=True)
class LogDir:
    """One log directory of the node."""

    path: str
    directory_id: str | None = None
    online: bool = True
    error: str | None = None  # why it went offline
    lock_fd: int | None = None
    had_clean_shutdown: bool = False
    clean_shutdown_broker_epoch: int | None = None  # what the clean-shutdown marker named
    placement: bool = True  # new partitions may be placed here (not a separate metadata.log.dir)


class LogManager:
    def __init__(
        self,
        log_dir: str | Sequence[str],
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
        metadata_log_dir: str | None = None,
    ) -> None:
        paths = [log_dir] if isinstance(log_dir, str) else list(log_dir)
        if not paths:
            raise ValueError("at least one log directory is needed")
        self.dirs: list[LogDir] = []
        for path in paths:
            path = os.path.abspath(path)
            if all(d.path != path for d in self.dirs):
                self.dirs.append(LogDir(path))
        if metadata_log_dir is not None:
            path = os.path.abspath(metadata_log_dir)
            if all(d.path != path for d in self.dirs):
                self.dirs.append(LogDir(path, placement=False))
        self.log_dir = self.dirs[0].path  # the first data directory
        self.metadata_log_dir = os.path.abspath(metadata_log_dir) if metadata_log_dir else self.log_dir
        self.default_config = default_config or LogConfig()
        self._topic_configs = dict(topic_configs or {})
        self.cleaner = cleaner or Cleaner()
        self.retention_check_interval_ms = retention_check_interval_ms
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self.producer_id_expiration_check_interval_ms = producer_id_expiration_check_interval_ms
        self._logs: dict[TopicPartition, Log] = {}
        self._topic_logs: dict[str, dict[TopicPartition, Log]] = {}  # the same logs by topic
        self._dir_of: dict[TopicPartition, LogDir] = {}
        self._future_logs: dict[TopicPartition, Log] = {}  # replicas being moved to another directory
        self._future_dir_of: dict[TopicPartition, LogDir] = {}
        self.offline_partitions: set[TopicPartition] = set()  # whose directory failed since start
        # I/O errors met by work that may run in a worker thread (flushes, checkpoints): (path, error), for
        # the owner to hand to `mark_dir_offline` on its own thread.
        self.failed_paths: list[tuple[str, str]] = []
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
        self._deleted = 0
        self._last_retention_ms = now_ms
        self._last_checkpoint_ms = now_ms
        self._last_expiration_ms = now_ms
        self.had_clean_shutdown = False
        self.failed_at_start: list[tuple[str, str]] = []  # (directory, why) of those that started offline

        try:
            for d in self.dirs:
                try:
                    os.makedirs(d.path, exist_ok=True)
                    self._check_identity(d, node_id, cluster_id)
                except OSError as e:
                    self._failed_at_start(d, e)
            ids = [d.directory_id for d in self.dirs if d.directory_id is not None and d.online]
            if len(ids) != len(set(ids)):
                raise ForeignLogDirectoryError(
                    f"two log directories have the same directory.id ({', '.join(d.path for d in self.dirs)}): "
                    "a directory was copied; refusing to use them")
            for d in self.online_dirs():
                try:
                    self._lock(d)
                except LogDirectoryLockedError:
                    raise
                except OSError as e:
                    self._failed_at_start(d, e)
            for d in self.online_dirs():
                try:
                    self._load(d, now_ms)
                except OSError as e:
                    self._failed_at_start(d, e)
            self._check_enough_online()
            self.had_clean_shutdown = all(d.had_clean_shutdown for d in self.dirs if d.online)
        except BaseException:
            for d in self.dirs:
                self._unlock(d)
            raise

    # ---------------------------------------------------------------------------------------- opening

    def _check_identity(self, d: LogDir, node_id: int | None, cluster_id: str | None) -> None:
        path = os.path.join(d.path, META_PROPERTIES)
        props = read_meta_properties(d.path)
        if props is None:
            foreign = [n for n in os.listdir(d.path) if n not in _IGNORED_ENTRIES and n != LOCK_FILE]
            if foreign:
                raise ForeignLogDirectoryError(
                    f"{d.path} is not empty and has no {META_PROPERTIES}: it is not an Odradek log "
                    f"directory (found {sorted(foreign)[:3]}); refusing to use it")
            d.directory_id = new_directory_id()
            lines = ["version=1"]
            if node_id is not None:
                lines.append(f"node.id={node_id}")
            if cluster_id is not None:
                lines.append(f"cluster.id={cluster_id}")
            lines.append(f"directory.id={d.directory_id}")
            atomic_write(path, ("\n".join(lines) + "\n").encode())
            return
        if node_id is not None and "node.id" in props and props["node.id"] != str(node_id):
            raise ForeignLogDirectoryError(
                f"{d.path} belongs to node {props['node.id']}, not to node {node_id}; refusing to use it")
        if cluster_id is not None and "cluster.id" in props and props["cluster.id"] != cluster_id:
            raise ForeignLogDirectoryError(
                f"{d.path} belongs to cluster {props['cluster.id']}, not to cluster {cluster_id}; "
                "refusing to use it")
        d.directory_id = props.get("directory.id")

    def online_dirs(self) -> list[LogDir]:
        return [d for d in self.dirs if d.online]

    def _failed_at_start(self, d: LogDir, error: OSError) -> None:
        """An I/O error opening `d` (it cannot be created, read, locked or loaded: a dead or full disk, a
        mount gone read-only): it starts offline and the node goes on with its other directories, as
        Kafka's LogManager does (a directory failing at start is added to the offline ones). Its logs
        loaded before the error are dropped again; none is created elsewhere (see get_or_create_log)."""
        d.online = False
        d.error = f"{error.strerror or error} ({type(error).__name__}, errno {error.errno}) at start"
        for tp in [tp for tp, where in self._dir_of.items() if where is d]:
            try:
                self._forget(tp).release()
            except OSError:
                pass
        for tp in [tp for tp, where in self._future_dir_of.items() if where is d]:
            del self._future_dir_of[tp]
            self._future_logs.pop(tp).release()
        self._unlock(d)
        self.failed_at_start.append((d.path, d.error))

    def _check_enough_online(self) -> None:
        """Kafka stops when the metadata log directory fails, or when every data directory has: so does a
        start here, naming what failed (a node without its metadata log cannot follow the quorum, one
        without any data directory cannot host a replica)."""
        metadata = self.find_dir(self.metadata_log_dir)
        if metadata is not None and not metadata.online:
            raise KafkaStorageError(f"the metadata log directory {metadata.path} cannot be used: {metadata.error}; "
                                    "a node does not start without it")
        if not any(d.online and d.placement for d in self.dirs):
            failed = "; ".join(f"{d.path}: {d.error}" for d in self.dirs if d.placement)
            raise KafkaStorageError(f"every log directory of this node failed ({failed})")

    def _lock(self, d: LogDir) -> None:
        fd = os.open(os.path.join(d.path, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogDirectoryLockedError(
                f"{d.path} is locked by another process or log manager (is a broker already running on "
                "it?)") from None
        d.lock_fd = fd

    @staticmethod
    def _unlock(d: LogDir) -> None:
        if d.lock_fd is not None:
            try:
                fcntl.flock(d.lock_fd, fcntl.LOCK_UN)
                os.close(d.lock_fd)
            except OSError:
                pass
            d.lock_fd = None

    @staticmethod
    def _checkpoint(d: LogDir, name: str) -> OffsetCheckpointFile:
        return OffsetCheckpointFile(os.path.join(d.path, name))

    def _load(self, d: LogDir, now_ms: int) -> None:
        marker = os.path.join(d.path, CLEAN_SHUTDOWN_FILE)
        d.had_clean_shutdown = os.path.exists(marker)
        if d.had_clean_shutdown:
            d.clean_shutdown_broker_epoch = _read_clean_shutdown_epoch(marker)
            os.unlink(marker)
            fsync_dir(d.path)
        recovery_points = self._checkpoint(d, RECOVERY_POINT_CHECKPOINT).read()
        log_start_offsets = self._checkpoint(d, LOG_START_OFFSET_CHECKPOINT).read()
        cleaner_offsets = self._checkpoint(d, CLEANER_OFFSET_CHECKPOINT).read()
        recovered = batches = truncated = 0
        for entry in os.scandir(d.path):
            if not entry.is_dir():
                continue
            if entry.name.endswith(DELETE_DIR_SUFFIX):
                shutil.rmtree(entry.path, ignore_errors=True)
                continue
            future = _parse_future_dir_name(entry.name)
            tp = future or TopicPartition.from_dir_name(entry.name)
            if tp is None:
                continue
            if future is None and tp in self._logs:
                raise KafkaStorageError(
                    f"{tp} is in two log directories ({self._dir_of[tp].path} and {d.path}); refusing to start")
            if future is not None and tp in self._future_logs:
                shutil.rmtree(entry.path, ignore_errors=True)  # a second future of one partition: a stale one
                continue
            log = Log.open(entry.path, self.config_for(tp.topic), now_ms=now_ms,
                           recovery_point=0 if future else recovery_points.get(tp, 0),
                           log_start_offset=0 if future else log_start_offsets.get(tp, 0),
                           had_clean_shutdown=d.had_clean_shutdown, index_maps=self.index_maps)
            r = log.recovery
            if r is not None and not future:
                recovered, batches, truncated = recovered + 1, batches + r.batches, truncated + r.truncated_bytes
                # Which log, from where, how many batches, what was cut: WARN when something was cut.
                (events.warning if r.truncated_bytes else events.info)(
                    "log recovered", topic=tp.topic, partition=tp.partition, log_dir=d.path,
                    clean_shutdown=d.had_clean_shutdown, segments=r.segments, batches=r.batches,
                    recovered_from=r.recovered_from, truncated_bytes=r.truncated_bytes,
                    log_end_offset=r.log_end_offset)
            if future is not None:
                self._future_logs[tp] = log
                self._future_dir_of[tp] = d
                continue
            log.cleaner_offset = cleaner_offsets.get(tp, 0)
            self._add(tp, log, d)
        if not d.had_clean_shutdown and recovered:
            events.warning("log directory recovered after an unclean shutdown", log_dir=d.path, logs=recovered,
                           batches=batches, truncated_bytes=truncated)

    # ------------------------------------------------------------------------------------------- logs

    @property
    def logs(self) -> Mapping[TopicPartition, Log]:
        return self._logs

    @property
    def future_logs(self) -> Mapping[TopicPartition, Log]:
        return self._future_logs

    def _add(self, tp: TopicPartition, log: Log, d: LogDir) -> None:
        log.cache_window_bytes = self.cache_window_bytes
        log.cache_release = self.cache_release
        log.on_roll = self._note_roll
        if log.config.flush_ms is not None:
            self._timed_flush.add(tp)
        self._logs[tp] = log
        self._topic_logs.setdefault(tp.topic, {})[tp] = log
        self._dir_of[tp] = d

    def _forget(self, tp: TopicPartition) -> Log:
        """Take `tp`'s current log out of the manager (the caller releases or deletes it)."""
        log = self._logs.pop(tp)
        del self._dir_of[tp]
        self._timed_flush.discard(tp)
        same_topic = self._topic_logs.get(tp.topic, {})
        same_topic.pop(tp, None)
        if not same_topic:
            self._topic_logs.pop(tp.topic, None)
        return log

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
        for tp, log in list(self._future_logs.items()):
            if tp.topic == topic:
                log.update_config(config)

    def get_log(self, tp: TopicPartition) -> Log | None:
        return self._logs.get(tp)

    def dir_of(self, tp: TopicPartition) -> LogDir | None:
        """The directory holding `tp`'s (current) log."""
        return self._dir_of.get(tp)

    def find_dir(self, path: str) -> LogDir | None:
        path = os.path.abspath(path)
        return next((d for d in self.dirs if d.path == path), None)

    def dir_by_id(self, directory_id: str) -> LogDir | None:
        return next((d for d in self.dirs if d.directory_id == directory_id), None)

    def _next_dir(self) -> LogDir:
        """The online data directory with the fewest logs (Kafka's nextLogDirs). With one candidate (one
        log.dirs entry, the common case) it is the answer without counting: counting every log for each
        one created made a topic of N partitions cost O(N^2) here (18% of a node's samples creating 5,000,
        bench/partition_scale.py). With several directories the count stays (JBOD; linear per creation)."""
        candidates = [d for d in self.dirs if d.online and d.placement]
        if len(candidates) == 1:
            return candidates[0]
        counts = {id(d): 0 for d in self.dirs}
        for d in self._dir_of.values():
            counts[id(d)] += 1
        for d in self._future_dir_of.values():
            counts[id(d)] += 1
        if not candidates:
            raise KafkaStorageError("every log directory of this node is offline")
        return min(candidates, key=lambda d: counts[id(d)])  # (min keeps the first of equals: log.dirs order)

    def get_or_create_log(self, tp: TopicPartition, *, now_ms: int, topic_id: bytes | None = None,
                          log_dir: str | None = None, is_new: bool = True) -> Log:
        """The partition's log, created (in `log_dir` if given, else the least-loaded data directory) when
        there is none. A partition whose directory failed is not created again elsewhere (KafkaStorageError):
        its data is still on the failed disk, as Kafka keeps it offline until the broker restarts. Nor is a
        partition that is not new (`is_new` False: it existed before) while any data directory is offline,
        as Kafka's getOrCreateLog refuses: its log may be on that directory, and an empty one made elsewhere
        would pass for a replica that lost everything."""
        log = self._logs.get(tp)
        if log is None:
            if tp in self.offline_partitions:
                raise KafkaStorageError(f"{tp} is in an offline log directory")
            offline = [d.path for d in self.dirs if not d.online and d.placement]
            if not is_new and offline:
                raise KafkaStorageError(f"Can not create log for {tp} because log directories {','.join(offline)} "
                                        "are offline")
            d = self.find_dir(log_dir) if log_dir is not None else self._next_dir()
            if d is None or not d.online:
                raise KafkaStorageError(f"log directory {log_dir} is not a log directory of this node, or is offline")
            log = Log.open(os.path.join(d.path, tp.dir_name), self.config_for(tp.topic), now_ms=now_ms,
                           index_maps=self.index_maps)
            self._add(tp, log, d)
        if topic_id is not None:
            log.assign_topic_id(topic_id)
        return log

    def delete_log(self, tp: TopicPartition) -> bool:
        """Remove the partition (and a future log of it): its directory is renamed aside, then removed.
        Regions already handed to readers stay readable until released."""
        self.abandon_future_log(tp)
        self.offline_partitions.discard(tp)
        log = self._logs.pop(tp, None)
        self._timed_flush.discard(tp)
        d = self._dir_of.pop(tp, None)
        if log is None:
            return False
        same_topic = self._topic_logs.get(tp.topic, {})
        same_topic.pop(tp, None)
        if not same_topic:
            self._topic_logs.pop(tp.topic, None)
        self._remove_dir(log, d)
        return True

    def _remove_dir(self, log: Log, d: LogDir | None) -> None:
        log.release()
        if d is None or not d.online:
            return
        parent = os.path.dirname(log.directory)
        name = os.path.basename(log.directory)
        while True:
            self._deleted += 1
            doomed = os.path.join(parent, f"{name}.{self._deleted}{DELETE_DIR_SUFFIX}")
            if not os.path.exists(doomed):
                break
        os.replace(log.directory, doomed)
        fsync_dir(parent)
        shutil.rmtree(doomed, ignore_errors=True)

    # ------------------------------------------------------------------------------ moving a replica

    def create_future_log(self, tp: TopicPartition, log_dir: str, *, now_ms: int) -> Log:
        """An empty future log of `tp` in `log_dir`, to be filled and then swapped in (see the module doc).
        An existing future log in the same directory is kept; one elsewhere is abandoned first."""
        d = self.find_dir(log_dir)
        if d is None or not d.online or not d.placement:
            raise KafkaStorageError(f"{log_dir} is not an online data directory of this node")
        current = self._logs.get(tp)
        if current is None:
            raise KafkaStorageError(f"{tp} has no log on this node")
        existing = self._future_logs.get(tp)
        if existing is not None:
            if self._future_dir_of[tp] is d:
                return existing
            self.abandon_future_log(tp)
        log = Log.open(os.path.join(d.path, future_dir_name(tp)), self.config_for(tp.topic), now_ms=now_ms,
                       index_maps=self.index_maps)
        if current.topic_id is not None:
            log.assign_topic_id(current.topic_id)
        self._future_logs[tp] = log
        self._future_dir_of[tp] = d
        return log

    def future_dir_of(self, tp: TopicPartition) -> LogDir | None:
        return self._future_dir_of.get(tp)

    def abandon_future_log(self, tp: TopicPartition) -> bool:
        log = self._future_logs.pop(tp, None)
        d = self._future_dir_of.pop(tp, None)
        if log is None:
            return False
        self._remove_dir(log, d)
        return True

    def replace_current_with_future(self, tp: TopicPartition, *, now_ms: int) -> Log:
        """Swap the caught-up future log in: it is closed, renamed to `<topic>-<partition>` in its directory
        and opened again (cleanly: nothing to recover), and the current log is deleted. The caller checks
        that the future log has caught up and switches its users to the returned log in the same step."""
        future = self._future_logs.pop(tp)
        d = self._future_dir_of.pop(tp)
        current = self._logs[tp]
        old_dir = self._dir_of[tp]
        future.flush()
        future.close()
        final = os.path.join(d.path, tp.dir_name)
        os.replace(future.directory, final)
        fsync_dir(d.path)
        moved = Log.open(final, self.config_for(tp.topic), now_ms=now_ms, recovery_point=future.log_end_offset,
                         log_start_offset=future.log_start_offset, had_clean_shutdown=True, index_maps=self.index_maps)
        moved.cleaner_offset = current.cleaner_offset
        for epoch, start_offset in current.leader_epoch_entries:  # (one begun at the log end: not reloaded)
            if epoch > moved.latest_epoch:
                moved.assign_epoch_start_offset(epoch, start_offset)
        self._add(tp, moved, d)
        self._remove_dir(current, old_dir)
        return moved

    # ----------------------------------------------------------------------------- failed directories

    def mark_dir_offline(self, path: str, error: str) -> list[TopicPartition]:
        """An I/O error was met in the directory holding `path` (a log directory, or a path inside one): the
        directory goes offline, its logs leave the manager (released, nothing more is written), and the
        partitions whose current log was there are returned (empty when it was offline already)."""
        path = os.path.abspath(path)
        d = next((d for d in self.dirs if path == d.path or path.startswith(d.path + os.sep)), None)
        if d is None or not d.online:
            return []
        d.online = False
        d.error = error
        gone = [tp for tp, where in self._dir_of.items() if where is d]
        for tp in gone:
            log = self._forget(tp)
            try:
                log.release()
            except OSError:
                pass
            self.offline_partitions.add(tp)
        for tp in [tp for tp, where in self._future_dir_of.items() if where is d]:
            log = self._future_logs.pop(tp)
            del self._future_dir_of[tp]
            try:
                log.release()
            except OSError:
                pass
        self._unlock(d)
        return gone

    def dir_of_log(self, log: Log) -> LogDir | None:
        return next((d for d in self.dirs if log.directory.startswith(d.path + os.sep)), None)

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
            gone = log.delete_old_segments(now_ms, upper_bound_offset=bound)
            if gone:
                events.info("retention deleted segments", topic=tp.topic, partition=tp.partition, segments=gone,
                            deleted_by=list(log.deleted_by), log_start_offset=log.log_start_offset)
            deleted += gone
        events.debug("retention pass", logs=len(self._logs), segments_deleted=deleted)
        return deleted

    def maybe_flush(self, now_ms: int) -> int:
        """Flush logs with rolled segments not yet on disk or whose `flush.ms` has passed. Returns how many.
        A log whose flush fails with an I/O error is noted in `failed_paths` (its directory is failing) and
        the others are flushed still."""
        self._rolled = False  # a roll from here on is seen by the next flush_due (this pass may miss it)
        flushed = 0
        for log in list(self._logs.values()):
            try:
                flushed += log.maybe_flush(now_ms)
            except OSError as e:
                self.failed_paths.append((log.directory, str(e)))
        return flushed

    def maybe_checkpoint(self, now_ms: int) -> bool:
        if now_ms - self._last_checkpoint_ms < self.checkpoint_interval_ms:
            return False
        self._last_checkpoint_ms = now_ms
        self.write_checkpoints()
        return True

    def write_checkpoints(self) -> None:
        """Each online directory's checkpoints, of the logs in it. A directory whose write fails with an
        I/O error is noted in `failed_paths`; the others are written still."""
        by_dir: dict[int, list] = {id(d): [] for d in self.dirs}
        for tp, log in list(self._logs.items()):
            d = self._dir_of.get(tp)
            if d is not None:
                by_dir[id(d)].append((tp, log))
        for d in self.dirs:
            if not d.online:
                continue
            logs = by_dir[id(d)]
            try:
                self._checkpoint(d, RECOVERY_POINT_CHECKPOINT).write({tp: log.recovery_point for tp, log in logs})
                self._checkpoint(d, LOG_START_OFFSET_CHECKPOINT).write({tp: log.log_start_offset for tp, log in logs})
                self._checkpoint(d, CLEANER_OFFSET_CHECKPOINT).write(
                    {tp: log.cleaner_offset for tp, log in logs if log.config.compact})
            except OSError as e:
                self.failed_paths.append((d.path, str(e)))

    def maybe_remove_expired_producers(self, now_ms: int) -> int:
        if now_ms - self._last_expiration_ms < self.producer_id_expiration_check_interval_ms:
            return 0
        self._last_expiration_ms = now_ms
        return sum(log.remove_expired_producers(now_ms) for log in list(self._logs.values()))

    def maybe_clean(self, now_ms: int) -> CleanResult | None:
        """Clean the filthiest compacted log, if any qualifies. Safe to call from one worker thread."""
        best, best_ratio, best_tp = None, -1.0, None
        for tp, log in list(self._logs.items()):
            if not log.config.compact or log.closed:
                continue
            cleanable = cleanable_range(log, now_ms)
            ratio = cleanable.dirty_ratio
            dirty_enough = cleanable.dirty_bytes > 0 and (ratio >= log.config.min_cleanable_dirty_ratio or cleanable.overdue)
            tombstones_due = 0 <= log.latest_delete_horizon_ms <= now_ms
            if (dirty_enough or tombstones_due) and ratio > best_ratio:
                best, best_ratio, best_tp = log, ratio, tp
        if best is None or best_tp is None:
            return None
        try:
            result = self.cleaner.clean(best, now_ms=now_ms)
        except Exception:
            if best.closed:
                return None
            raise
        if result is not None:
            events.info("log cleaned", topic=best_tp.topic, partition=best_tp.partition, dirty_ratio=round(best_ratio, 3),
                        first_dirty_offset=result.first_dirty_offset, end_offset=result.end_offset,
                        segments=result.segments_cleaned, bytes_read=result.bytes_read,
                        bytes_written=result.bytes_written, records_removed=result.records_removed)
        return result

    # ---------------------------------------------------------------------------------------- closing

    def previous_broker_epoch(self) -> int:
        """The broker epoch of the last clean shutdown, if every directory proves it (see the module doc);
        else -1. Kafka's readBrokerEpochFromCleanShutdownFiles."""
        epochs = {d.clean_shutdown_broker_epoch if d.online else None for d in self.dirs}
        if len(epochs) != 1:
            return -1
        (epoch,) = epochs
        return -1 if epoch is None else epoch

    def close(self, broker_epoch: int = -1) -> None:
        """Clean shutdown: close every log, write the checkpoints and the markers (naming `broker_epoch`, the
        session's), release the locks. A future log is closed as it is (the move resumes at the next
        start)."""
        if all(d.lock_fd is None for d in self.dirs):
            return
        for log in [*self._logs.values(), *self._future_logs.values()]:
            try:
                log.close()
            except OSError as e:
                self.failed_paths.append((log.directory, str(e)))
        failing = {os.path.abspath(path) for path, _ in self.failed_paths}
        for path in failing:
            self.mark_dir_offline(path, "I/O error at shutdown")
        self.write_checkpoints()
        for d in self.dirs:
            if d.online:
                try:
                    content = json.dumps({"version": 0, "brokerEpoch": broker_epoch}, separators=(",", ":"))
                    atomic_write(os.path.join(d.path, CLEAN_SHUTDOWN_FILE), content.encode())
                except OSError:
                    pass  # not marked clean: the next start recovers this directory
            self._unlock(d)

    def abandon(self) -> None:
        """Release the locks without closing anything, as a crash would (for tests and fatal errors)."""
        for d in self.dirs:
            self._unlock(d)


def _read_clean_shutdown_epoch(path: str) -> int | None:
    """The broker epoch a clean-shutdown marker names; None if it names none (an empty marker of an older
    release, an unreadable one, or -1)."""
    try:
        with open(path, "rb") as f:
            content = json.loads(f.read() or b"null")
    except (OSError, ValueError):
        return None
    if not isinstance(content, dict) or content.get("version") != 0:
        return None
    epoch = content.get("brokerEpoch")
    return epoch if isinstance(epoch, int) and epoch >= 0 else None
