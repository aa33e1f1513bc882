"""The partition log: segments, offsets, reads, truncation, retention, flushing and recovery.

Offsets: `log_start_offset` is the first offset a reader may fetch; `log_end_offset` is exclusive, the
offset the next record appended will receive (every end offset in this package is exclusive).
`high_watermark` and `last_stable_offset` belong to replication; reads take them as `max_offset`.

Theory of operation
-------------------
Appends (`append` for a leader, `append_as_follower` for a replica) validate every batch of the buffer
by its header and CRC, check producer state, then stamp offsets and the leader epoch in place (both
outside the CRC) and, for LogAppendTime topics, the timestamp (which needs a new CRC). The whole buffer
then goes into the active segment with one write: no per-record work on the produce path. A client's
append of one batch, nearly every produce, takes a shorter way through the same checks
(`_append_single_batch`); a test drives both ways alike and compares what they leave. An append
never spans segments; the active segment rolls first when the append would not fit, when `segment.ms`
has passed or when an index is full.

The segment list is an immutable tuple replaced whole (copy-on-write): a reader takes the tuple once and
works on it while segments are rolled, deleted or replaced. Mutations of the list take `_lock`, a short
critical section that exists for the cleaner, which runs in another thread on a snapshot of the list
and swaps its output in with `replace_segments` only if the segments it cleaned are still there and the
log has not been truncated meanwhile (`generation`).

Transactions: a transaction marker (a control batch the partition leader appends for the transaction
coordinator, origin COORDINATOR; clients may not) closes its producer's open transaction in the producer
state (producer_state.py); an ABORT that closes one appends an entry to the active segment's
aborted-transaction index (txn_index.py), which a read_committed fetch collects
(`collect_aborted_transactions`). Followers append the same batches through the same producer-state path
and so build the same index; recovery rebuilds the index of every segment it replays.

Reads hand out file regions of whole batches (see segment.py): a region holds its file open, so it stays
valid after its segment is deleted, replaced or truncated away (a truncation shortens the file in place,
so a region over truncated bytes reads short, as in Kafka).

Truncation (`truncate_to`) removes every batch holding an offset at or above the target (a batch spanning
it goes whole) and sets the log end offset to the target, as Kafka does. Retention deletes whole leading
segments, never beyond the upper bound the caller gives (the high watermark); when every segment is
expired the active one is rolled first, so the deleted segments are never the active one.

Durability: data reaches disk when `flush` runs (after `flush.messages` appends, every `flush.ms`, or for
segments that rolled, via `maybe_flush`); `recovery_point` is the offset below which everything is known
to be on disk. A new log is created without any fsync, and a log opened without data is treated the
same: until it holds data nothing in it needs to survive a crash (the broker recreates a missing empty
log from its metadata, `Log.open` completes a partial one). Its topic id is kept in memory and
`partition.metadata` is written later, as Kafka defers it: the first flush that covers data (or follows
a roll or truncation) makes it all durable with the data: `partition.metadata`, the log's directory and
the parent directory's entry for it. `PartitionMetadataFile.read` takes an empty file, what a crash can
leave of an unsynced write, as no topic id; the broker assigns the id again on every start.

Opening a log after an unclean shutdown validates every batch from the segment holding
the recovery point onward (length, magic, CRC-32C, offsets not going backwards), cuts the log at the
first invalid or partial batch, drops the segments after it, rebuilds the indexes, completes or
discards an interrupted cleaner swap, and reloads producer state from the latest snapshot plus a replay
of batch headers after it. Two kinds of damage cannot be seen, by design of the format: a change to
baseOffset or partitionLeaderEpoch (outside the CRC) that keeps offsets ascending, and a file cut
exactly between two batches.
"""

from __future__ import annotations

import bisect
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from odradek.protocol.errors import CorruptRecordError, ProtocolError
from odradek.protocol.records import (
    ABORT,
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    COMMIT,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    iter_records,
    parse_control_record,
    peek_offset_and_length,
    set_log_append_time,
    stamp_offset_and_epoch,
    validate_batch,
)

from .checkpoints import LeaderEpochCheckpointFile, PartitionMetadataFile, fsync_dir
from .config import LogConfig
from .errors import (
    CorruptMessageError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    UnexpectedAppendOffsetError,
)
from .index import IndexMaps
from .leader_epoch import LeaderEpochCache
from .names import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    PARTITION_METADATA,
    SEGMENT_SUFFIXES,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TMP_SUFFIX,
    TXN_INDEX_SUFFIX,
    offset_file_name,
    parse_offset_file_name,
)
from .producer_state import AppendOrigin, CompletedTxn, ProducerStateManager, VerificationGuard
from .scan import check_stored_batch, iter_headers
from .segment import MAX_UNCOMPRESSED_BATCH_BYTES, LogSegment, SegmentRegion, drop_cache, read_regions
from .txn_index import AbortedTxn

_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class AppendInfo(NamedTuple):  # (a tuple: built on every append, where a frozen dataclass costs ~1 us more)
    first_offset: int
    last_offset: int  # inclusive: the offset of the last record appended
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class ReadInfo:
    regions: list[SegmentRegion]
    first_offset: int  # base offset of the first batch returned; the fetch offset when nothing is

    @property
    def size(self) -> int:
        return sum(r.length for r in self.regions)


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    timestamp: int
    offset: int
    leader_epoch: int


def _base_offset(segment: LogSegment) -> int:
    return segment.base_offset



def _made_directory(directory: str) -> bool:
    """Create `directory` (and missing parents); True when this call made it, False when it was there."""
    try:
        os.mkdir(directory)
    except FileExistsError:
        return False
    except FileNotFoundError:
        os.makedirs(directory, exist_ok=True)
    return True

class LogRecovery(NamedTuple):
    """What opening a log recovered (the log manager logs it): segments re-read from `recovered_from`, the
    valid batches found in them, and the bytes cut after the last valid one (a torn write, a partial batch,
    and the segments after it)."""

    segments: int
    batches: int
    truncated_bytes: int
    recovered_from: int
    log_end_offset: int


class Log:
    """One partition's log in its own directory. Build with `Log.open`."""

    def __init__(self, directory: str, config: LogConfig, *, now_ms: int, index_maps: IndexMaps | None = None) -> None:
        self.directory = directory
        self.config = config
        self._index_maps = index_maps
        # Page-cache release (LogManager sets these): the window kept, and what runs drop_cache (None: inline).
        self.cache_window_bytes = 0
        self.cache_release: Callable | None = None
        self.on_roll: Callable[[], None] | None = None  # a segment rolled: a flush is due (LogManager.flush_due)
        self._lock = threading.Lock()
        self._segments: tuple[LogSegment, ...] = ()
        self._log_start_offset = 0
        self._log_end_offset = 0
        self._recovery_point = 0
        self._flush_up_to = 0
        self._last_flush_ms = now_ms
        self._last_now_ms = now_ms
        self._dir_dirty = False
        self._creation_unsynced = False  # new or empty: nothing made durable yet; the first real flush does
        self._topic_id_pending = False  # partition.metadata to write with that flush
        self._position_cache: tuple[LogSegment, int, int] | None = None
        self.generation = 0
        self.closed = False
        self.cleaner_offset = 0
        self.latest_delete_horizon_ms = -1
        self.recovery: LogRecovery | None = None  # what opening it recovered, if anything
        self.deleted_by: tuple[str, ...] = ()  # what the last retention pass deleted segments for
        self._topic_id: bytes | None = None
        self._producer_state = ProducerStateManager(directory, producer_id_expiration_ms=config.producer_id_expiration_ms)
        # Whether any segment may hold an aborted-transaction index entry: a read_committed fetch of a log
        # without one answers "no aborted transactions" without looking.
        self.has_aborted_txns = False
        self._epoch_cache: LeaderEpochCache

    # ------------------------------------------------------------------------------------------- opening

    @classmethod
    def open(cls, directory: str, config: LogConfig, *, now_ms: int, recovery_point: int = 0,
             log_start_offset: int = 0, had_clean_shutdown: bool = False, index_maps: IndexMaps | None = None) -> Log:
        """Open (or create) the log in `directory`. Without a clean shutdown, everything from the segment
        holding `recovery_point` is validated and repaired. `index_maps` bounds the index maps open at once
        (shared by the logs of a log manager; a process-wide one by default)."""
        log = cls(directory, config, now_ms=now_ms, index_maps=index_maps)
        if _made_directory(directory):
            log._start_empty(now_ms, log_start_offset)
        else:
            log._load(now_ms, recovery_point, log_start_offset, had_clean_shutdown)
        return log

    def _start_empty(self, now_ms: int, log_start_offset: int) -> None:
        """What `_load` makes of a directory that `open` has just created: one empty segment, whose file and
        indexes come with the first append, and no epochs, topic id or producers. Nothing is listed, read or
        recovered: a broker creating the logs of a new topic of thousands of partitions pays one mkdir each
        (the rest of `_load`'s file-system calls, each finding nothing, were half the cost of creating one)."""
        self._producer_state.set_snapshot_offsets(())
        self._segments = (self._new_segment(log_start_offset, now_ms, create_file=False, in_new_directory=True),)
        self._dir_dirty = True
        self._creation_unsynced = True
        self._log_start_offset = self._log_end_offset = self._recovery_point = log_start_offset
        self._flush_up_to = log_start_offset
        self._epoch_cache = LeaderEpochCache(LeaderEpochCheckpointFile(os.path.join(self.directory, LEADER_EPOCH_CHECKPOINT)),
                                             durable=lambda: not self._creation_unsynced, read=False)
        self._producer_state.map_end_offset = log_start_offset

    def _new_segment(self, base_offset: int, now_ms: int, suffix: str = "", hold_open: bool = False,
                     create_file: bool = True, in_new_directory: bool = False) -> LogSegment:
        return LogSegment.create(self.directory, base_offset, index_interval_bytes=self.config.index_interval_bytes,
                                 max_index_bytes=self.config.segment_index_bytes, now_ms=now_ms, suffix=suffix,
                                 index_maps=self._index_maps, hold_open=hold_open, create_file=create_file,
                                 in_new_directory=in_new_directory)

    def _existing_segment(self, base_offset: int, now_ms: int) -> LogSegment:
        path = os.path.join(self.directory, offset_file_name(base_offset, LOG_SUFFIX))
        return LogSegment(self.directory, base_offset, index_interval_bytes=self.config.index_interval_bytes,
                          max_index_bytes=self.config.segment_index_bytes, size=os.stat(path).st_size,
                          created_ms=now_ms, index_maps=self._index_maps)

    def _load(self, now_ms: int, recovery_point: int, log_start_offset: int, had_clean_shutdown: bool) -> None:
        bases, indexed, swaps, snapshots = self._scan_directory()
        self._producer_state.set_snapshot_offsets(snapshots)
        needs_rebuild = set()
        for swap_base in swaps:
            needs_rebuild.add(self._complete_swap(swap_base, bases))
        swapped = set(needs_rebuild)
        segments = [self._existing_segment(b, now_ms) for b in sorted(bases)]
        # An empty segment may have no index files (they come with the first entry); one with data needs both.
        needs_rebuild.update(s.base_offset for s in segments if s.base_offset not in indexed and s.size)
        fresh = not segments
        if fresh:
            # A new log (or one whose segments all went): one empty segment, nothing to recover or fsync yet.
            # Its file comes with the first append: opening the log without it makes the same segment again.
            segments = [self._new_segment(log_start_offset, now_ms, create_file=False)]
            self._dir_dirty = True
            self._creation_unsynced = True

        if had_clean_shutdown or fresh:
            unflushed_from = len(segments)
        else:
            unflushed_from = max(0, bisect.bisect_right(segments, recovery_point, key=_base_offset) - 1)
        kept: list[LogSegment] = []
        recovered: list[LogSegment] = []
        truncated_bytes = 0
        for i, segment in enumerate(segments):
            kept.append(segment)
            if i >= unflushed_from or segment.base_offset in needs_rebuild:
                recovered.append(segment)
                cut = segment.recover()
                truncated_bytes += cut
                if cut > 0 and i >= unflushed_from:
                    for dropped in segments[i + 1 :]:
                        truncated_bytes += dropped.size
                        dropped.delete()
                    break
        for segment in recovered:
            if segment is not kept[-1]:
                segment.on_become_inactive()
        self._segments = tuple(kept)

        self._log_end_offset = kept[-1].read_next_offset()
        if recovered:
            self.recovery = LogRecovery(segments=len(recovered), batches=sum(s.recovered_batches for s in recovered),
                                        truncated_bytes=truncated_bytes, recovered_from=recovered[0].base_offset,
                                        log_end_offset=self._log_end_offset)
        if not any(segment.size for segment in kept):
            self._creation_unsynced = True
        self._log_start_offset = max(log_start_offset, kept[0].base_offset)
        self._recovery_point = recovered[0].base_offset if recovered else self._log_end_offset
        self.flush(now_ms=now_ms)
        self._flush_up_to = self._recovery_point

        # A log without data yet writes its epoch checkpoint without fsync (its first flush covering data
        # makes it durable with the rest, below): a new RF=3 topic of N partitions made every broker
        # fsync N checkpoint files and N directories on its event loop, ~3.5 ms each here, which at 2,000
        # partitions stalled the node long enough to lose the controller quorum (bench/partition_scale.py).
        self._epoch_cache = LeaderEpochCache(LeaderEpochCheckpointFile(os.path.join(self.directory, LEADER_EPOCH_CHECKPOINT)),
                                             durable=lambda: not self._creation_unsynced)
        self._epoch_cache.truncate_from_end(self._log_end_offset)
        self._topic_id = PartitionMetadataFile(os.path.join(self.directory, PARTITION_METADATA)).read()

        if self._log_start_offset > self._log_end_offset:
            self.truncate_fully_and_start_at(self._log_start_offset, now_ms=now_ms)
            return
        self._epoch_cache.truncate_from_start(self._log_start_offset)
        # The aborted-transaction indexes of the segments recovery replays are rebuilt with the producer
        # state (from a snapshot at or below the first of them), as Kafka's LogSegment.recover does.
        # A swap completed here lost the cleaned segment's index with its transient name: rebuilt likewise.
        starts = [kept[unflushed_from].base_offset] if not (had_clean_shutdown or fresh) and unflushed_from < len(kept) else []
        starts += [s.base_offset for s in kept if s.base_offset in swapped]
        rebuild_from = min(starts) if starts else None
        if rebuild_from is not None:
            for segment in kept:
                if segment.base_offset >= rebuild_from:
                    segment.txn_index.reset()
        self._load_producer_state(self._log_end_offset, rebuild_from=rebuild_from)
        self._producer_state.remove_expired_producers(now_ms)

    def _scan_directory(self) -> tuple[set[int], set[int], list[int], list[int]]:
        """Remove leftovers of interrupted work; return segment bases, bases with both indexes, swaps and
        producer snapshots."""
        bases: set[int] = set()
        offset_indexes: set[int] = set()
        time_indexes: set[int] = set()
        swaps: list[int] = []
        snapshots: list[int] = []
        for name in os.listdir(self.directory):
            path = os.path.join(self.directory, name)
            if name.endswith(TMP_SUFFIX):
                os.unlink(path)
                continue
            parsed = parse_offset_file_name(name)
            if parsed is None:
                continue
            offset, kind, transient = parsed
            if transient in (CLEANED_SUFFIX, DELETED_SUFFIX) or (transient == SWAP_SUFFIX and kind != LOG_SUFFIX):
                os.unlink(path)
            elif transient == SWAP_SUFFIX:
                swaps.append(offset)
            elif transient:
                continue
            elif kind == LOG_SUFFIX:
                bases.add(offset)
            elif kind == INDEX_SUFFIX:
                offset_indexes.add(offset)
            elif kind == TIME_INDEX_SUFFIX:
                time_indexes.add(offset)
            elif kind == SNAPSHOT_SUFFIX:
                snapshots.append(offset)
            elif kind == TXN_INDEX_SUFFIX:
                self.has_aborted_txns = True
        return bases, offset_indexes & time_indexes, sorted(swaps), snapshots

    def _complete_swap(self, swap_base: int, bases: set[int]) -> int:
        """A `.log.swap` file is a committed cleaner output: the segments whose offsets it covers go, it
        takes their place. Its indexes are rebuilt (returns its base offset)."""
        swap_path = os.path.join(self.directory, offset_file_name(swap_base, LOG_SUFFIX) + SWAP_SUFFIX)
        next_offset = swap_base + 1
        fd = os.open(swap_path, os.O_RDONLY)
        try:
            for _, header in iter_headers(fd, 0, os.fstat(fd).st_size):
                next_offset = max(next_offset, header.next_offset)
        finally:
            os.close(fd)
        for base in sorted(bases):
            if swap_base <= base < next_offset:
                for suffix in SEGMENT_SUFFIXES:
                    _unlink(os.path.join(self.directory, offset_file_name(base, suffix)))
                bases.discard(base)
        os.replace(swap_path, os.path.join(self.directory, offset_file_name(swap_base, LOG_SUFFIX)))
        fsync_dir(self.directory)
        bases.add(swap_base)
        return swap_base

    def _load_producer_state(self, end_offset: int, *, rebuild_from: int | None = None) -> None:
        """Latest snapshot at or below `end_offset`, then replay of the batch headers after it (a control
        batch's one record too). With `rebuild_from`, the replay starts at or below that offset and writes
        the aborted transactions it completes from there on into their segments' indexes."""
        producer_state = self._producer_state
        snapshot = producer_state.load_latest_snapshot(end_offset if rebuild_from is None else rebuild_from)
        segments = self._segments
        start = segments[0].base_offset if snapshot is None else max(snapshot, segments[0].base_offset)
        if snapshot is None or snapshot < end_offset:
            i = max(0, bisect.bisect_right(segments, start, key=_base_offset) - 1)
            for segment in segments[i:]:
                position = segment.offset_index.lookup(start)[1] if segment.base_offset <= start else 0
                for batch_position, header in segment.headers(position):
                    if header.base_offset >= end_offset:
                        break
                    if header.base_offset < start:
                        continue
                    marker = None
                    if header.is_control and header.producer_id >= 0:
                        try:
                            marker = _marker_of(segment.read_at(batch_position, header.size), 0, header)
                        except CorruptMessageError:
                            pass  # (its CRC held, its record does not parse: applied as an emptied marker)
                    completed = producer_state.replay(header, marker)
                    if completed and rebuild_from is not None and header.base_offset >= rebuild_from:
                        self._index_aborted(segment, completed)
        producer_state.map_end_offset = end_offset

    def _index_aborted(self, segment: LogSegment, completed: list[tuple[CompletedTxn, int]]) -> None:
        for txn, last_stable_offset in completed:
            if txn.is_aborted:
                segment.txn_index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, last_stable_offset))
                self.has_aborted_txns = True

    def collect_aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset) (a read_committed
        fetch's range), from the index of the segment holding `fetch_offset` on, as Kafka's
        collectAbortedTransactions."""
        if not self.has_aborted_txns:
            return []
        segments = self._segments
        i = max(0, bisect.bisect_right(segments, fetch_offset, key=_base_offset) - 1)
        found: list[AbortedTxn] = []
        for segment in segments[i:]:
            entries, complete = segment.txn_index.collect(fetch_offset, upper_bound_offset)
            found += entries
            if complete:
                break
        return found

    # ----------------------------------------------------------------------------------------- properties

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        """Exclusive: the offset the next appended record receives."""
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return self._segments

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def latest_epoch(self) -> int:
        return self._epoch_cache.latest_epoch

    @property
    def leader_epoch_entries(self) -> list[tuple[int, int]]:
        return self._epoch_cache.entries

    @property
    def producer_state(self) -> ProducerStateManager:
        return self._producer_state

    @property
    def first_unstable_offset(self) -> int | None:
        return self._producer_state.first_unstable_offset

    @property
    def topic_id(self) -> bytes | None:
        return self._topic_id

    def assign_topic_id(self, topic_id: bytes) -> None:
        """Record the topic id in `partition.metadata`; for a log without data yet, with its first flush."""
        if topic_id != self._topic_id:
            self._topic_id = topic_id
            if self._creation_unsynced:
                self._topic_id_pending = True
            else:
                PartitionMetadataFile(os.path.join(self.directory, PARTITION_METADATA)).write(topic_id)

    def update_config(self, config: LogConfig) -> None:
        """New settings apply from now on (index sizes from the next segment)."""
        self.config = config
        self._producer_state.producer_id_expiration_ms = config.producer_id_expiration_ms

    # -------------------------------------------------------------------------------------------- append

    def append(self, batches, *, leader_epoch: int, now_ms: int, origin: AppendOrigin = AppendOrigin.CLIENT,
               verification_guard: VerificationGuard | None = None) -> AppendInfo:
        """Append the concatenated batches in `batches` (a writable buffer: offsets are stamped in place) as
        leader. A retried duplicate from an idempotent producer returns the original offsets.
        `verification_guard`: what a client's transactional batch that opens a transaction must present
        (producer_state.py, "Verification"); None checks nothing."""
        buf = memoryview(batches)
        if buf.readonly:
            raise TypeError("append stamps offsets in place and needs a writable buffer (bytearray)")
        size = len(buf)
        if origin == AppendOrigin.CLIENT and size >= HEADER_SIZE and peek_offset_and_length(buf, 0)[1] + LOG_OVERHEAD == size:
            info = self._append_single_batch(buf, leader_epoch, now_ms, verification_guard)
            if info is not None:
                return info
        headers = self._validate(buf, origin, now_ms)
        log_append_time = self.config.log_append_time
        first_offset = offset = self._log_end_offset
        producer_append = self._producer_state.prepare(origin, verification_guard)
        indexed = []
        max_timestamp, offset_of_max_timestamp = -1, first_offset
        for pos, header in headers:
            last_offset = offset + header.last_offset_delta
            timestamp = now_ms if log_append_time else header.max_timestamp
            if header.producer_id >= 0:
                marker = _marker_of(buf, pos, header) if header.is_control else None
                duplicate = producer_append.append(header, offset, last_offset, timestamp, marker)
                if duplicate is not None:
                    return AppendInfo(duplicate.first_offset, duplicate.last_offset, duplicate.timestamp,
                                      duplicate.last_offset, -1, self._log_start_offset, duplicate=True)
            indexed.append((pos, header.batch_length + LOG_OVERHEAD, last_offset, timestamp))
            if timestamp > max_timestamp:
                max_timestamp, offset_of_max_timestamp = timestamp, last_offset
            offset = last_offset + 1
        for (pos, header), (_, _, last_offset, _) in zip(headers, indexed, strict=True):
            stamp_offset_and_epoch(buf, pos, header, last_offset - header.last_offset_delta, leader_epoch)
            if log_append_time:
                set_log_append_time(buf, pos, now_ms)
        self._write(buf, indexed, first_offset, offset - 1, max_timestamp, now_ms)
        if self.cache_window_bytes:
            self._maybe_release_cache()
        if leader_epoch > self._epoch_cache.latest_epoch:
            self._epoch_cache.assign(leader_epoch, first_offset)
        completed = self._producer_state.commit(producer_append, offset)
        if completed:
            self._index_aborted(self._segments[-1], completed)
        self._maybe_flush_messages(now_ms)
        return AppendInfo(first_offset, offset - 1, max_timestamp, offset_of_max_timestamp,
                          now_ms if log_append_time else -1, self._log_start_offset)

    def _append_single_batch(self, buf: memoryview, leader_epoch: int, now_ms: int,
                             verification_guard: VerificationGuard | None) -> AppendInfo | None:
        """`append` for what clients almost always send, one batch, in a handful of calls instead of the
        general loop's ~25: the same checks in the same order, the same stamps, write and state. None,
        before anything has changed, hands the rare cases back to the general loop: a compacted or
        LogAppendTime topic (their checks and stamps differ) and an append that must roll first.
        tests/unit/test_log_single_batch.py drives both ways with the same appends and compares what they
        leave (files, indexes, producer state, answers and errors)."""
        config = self.config
        if config.compact or config.log_append_time:
            return None
        header = self._validate_batch(buf, 0, AppendOrigin.CLIENT, now_ms)
        size = len(buf)
        first_offset = self._log_end_offset
        last_offset = first_offset + header.last_offset_delta
        timestamp = header.max_timestamp
        # As the general loop's running maximum from -1: a batch without timestamps reports -1 at its first offset.
        max_timestamp, offset_of_max_timestamp = (timestamp, last_offset) if timestamp > -1 else (-1, first_offset)
        producer_state = self._producer_state
        if header.producer_id >= 0:
            duplicate = producer_state.check_client_batch(header, first_offset, verification_guard)
            if duplicate is not None:
                return AppendInfo(duplicate.first_offset, duplicate.last_offset, duplicate.timestamp,
                                  duplicate.last_offset, -1, self._log_start_offset, duplicate=True)
        self._check_fits_a_segment(size)
        segment = self._segments[-1]
        if segment.should_roll(append_bytes=size, max_timestamp=max_timestamp, last_offset=last_offset, now_ms=now_ms,
                               segment_bytes=config.segment_bytes, segment_ms=config.segment_ms):
            return None
        stamp_offset_and_epoch(buf, 0, header, first_offset, leader_epoch)
        if now_ms > self._last_now_ms:
            self._last_now_ms = now_ms
        segment.append(buf, ((0, size, last_offset, timestamp),))
        self._log_end_offset = last_offset + 1
        if self.cache_window_bytes:
            self._maybe_release_cache()
        if leader_epoch > self._epoch_cache.latest_epoch:
            self._epoch_cache.assign(leader_epoch, first_offset)
        if header.producer_id >= 0:
            producer_state.record_client_batch(header, first_offset, last_offset, timestamp)
        else:
            producer_state.map_end_offset = last_offset + 1
        if config.flush_messages is not None:
            self._maybe_flush_messages(now_ms)
        return AppendInfo(first_offset, last_offset, max_timestamp, offset_of_max_timestamp, -1, self._log_start_offset)

    def append_as_follower(self, batches, *, now_ms: int) -> AppendInfo:
        """Append batches replicated from the leader, keeping their offsets and leader epochs."""
        buf = memoryview(batches)
        headers = self._validate(buf, AppendOrigin.REPLICATION, now_ms)
        first_offset = headers[0][1].base_offset
        if first_offset < self._log_end_offset:
            raise UnexpectedAppendOffsetError(
                f"replicated batches start at {first_offset}, below the log end offset {self._log_end_offset}")
        producer_append = self._producer_state.prepare(AppendOrigin.REPLICATION)
        indexed = []
        expected = first_offset
        max_timestamp, offset_of_max_timestamp = -1, first_offset
        for pos, header in headers:
            if header.base_offset < expected:
                raise CorruptMessageError(f"replicated batch at offset {header.base_offset} goes backwards")
            if header.producer_id >= 0:
                marker = _marker_of(buf, pos, header) if header.is_control else None
                producer_append.append(header, header.base_offset, header.last_offset, header.max_timestamp, marker)
            indexed.append((pos, header.size, header.last_offset, header.max_timestamp))
            if header.max_timestamp > max_timestamp:
                max_timestamp, offset_of_max_timestamp = header.max_timestamp, header.last_offset
            expected = header.next_offset
        self._write(buf, indexed, first_offset, expected - 1, max_timestamp, now_ms)
        if self.cache_window_bytes:
            self._maybe_release_cache()
        for _, header in headers:
            if header.partition_leader_epoch > self._epoch_cache.latest_epoch:
                self._epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
        completed = self._producer_state.commit(producer_append, expected)
        if completed:
            self._index_aborted(self._segments[-1], completed)
        self._maybe_flush_messages(now_ms)
        return AppendInfo(first_offset, expected - 1, max_timestamp, offset_of_max_timestamp, -1, self._log_start_offset)

    def _validate(self, buf: memoryview, origin: AppendOrigin, now_ms: int) -> list[tuple[int, BatchHeader]]:
        headers = []
        pos = 0
        end = len(buf)
        while pos < end:
            header = self._validate_batch(buf, pos, origin, now_ms)
            headers.append((pos, header))
            pos += header.batch_length + LOG_OVERHEAD
        if not headers:
            raise CorruptMessageError("an append needs at least one record batch")
        return headers

    def _validate_batch(self, buf: memoryview, pos: int, origin: AppendOrigin, now_ms: int) -> BatchHeader:
        """The batch at `pos` of an append: its layout and CRC, max.message.bytes, and for a client's batch
        the LogValidator checks."""
        try:
            if origin == AppendOrigin.REPLICATION:
                if len(buf) - pos < LOG_OVERHEAD:
                    raise CorruptRecordError("trailing bytes shorter than a batch header")
                size = peek_offset_and_length(buf, pos)[1] + LOG_OVERHEAD
                header = check_stored_batch(buf[pos : pos + size])
            else:
                header = validate_batch(buf, pos)
        except CorruptRecordError as e:
            raise CorruptMessageError(f"batch at byte {pos}: {e}") from e
        size = header.batch_length + LOG_OVERHEAD
        max_message_bytes = self.config.max_message_bytes
        if size > max_message_bytes and origin != AppendOrigin.REPLICATION:
            raise MessageTooLargeError(f"batch of {size} bytes exceeds max.message.bytes {max_message_bytes}")
        if origin == AppendOrigin.CLIENT:
            self._validate_client_batch(buf, pos, header, now_ms)
        return header

    def _validate_client_batch(self, buf: memoryview, pos: int, header: BatchHeader, now_ms: int) -> None:
        """Kafka's LogValidator checks, at batch level (timestamps are checked on baseTimestamp and
        maxTimestamp rather than on every record)."""
        config = self.config
        attributes = header.attributes
        if attributes & ATTR_CONTROL:
            raise InvalidRecordError("clients may not write control batches")
        if header.producer_id >= 0 and header.base_sequence < 0:
            raise InvalidRecordError(f"producer {header.producer_id} sent a batch without a sequence number")
        if attributes & ATTR_TRANSACTIONAL and header.producer_id < 0:
            raise InvalidRecordError("a transactional batch needs a producer id")
        # Timestamps are checked on baseTimestamp and maxTimestamp: in range there, the records are too as
        # clients build batches. Only a batch that fails it, or any batch for a compacted topic (keys), has its
        # records read, to name the bad ones as Kafka does (KIP-467); the common append never decodes a record.
        timestamps_out_of_range = False
        if not config.log_append_time:
            before_max_ms, after_max_ms = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
            for timestamp in (header.base_timestamp, header.max_timestamp):
                if timestamp >= 0 and (now_ms - timestamp > before_max_ms or timestamp - now_ms > after_max_ms):
                    timestamps_out_of_range = True
        if config.compact or timestamps_out_of_range:
            self._check_records(buf, pos, header, now_ms, timestamps_out_of_range)

    def _check_records(self, buf: memoryview, pos: int, header: BatchHeader, now_ms: int, check_timestamps: bool) -> None:
        """Kafka's LogValidator.validateRecord for each record of the batch at `pos` (keys on a compacted
        topic first, then CreateTime timestamps), raising one error that lists every bad record's index in
        the batch and why (ProduceResponse's record_errors), with Kafka's messages: INVALID_TIMESTAMP if any
        timestamp is bad, else INVALID_RECORD (LogValidator.processRecordErrors)."""
        config = self.config
        partition = os.path.basename(self.directory)
        low_ms = now_ms - config.message_timestamp_before_max_ms
        high_ms = now_ms + config.message_timestamp_after_max_ms
        errors: list[tuple[int, str]] = []
        bad_timestamp = False
        try:
            records = iter_records(buf[pos : pos + header.size], max_uncompressed_bytes=MAX_UNCOMPRESSED_BATCH_BYTES)
            for index, record in enumerate(records):
                if config.compact and record.key is None:
                    errors.append((index, f"Compacted topic cannot accept message without key in topic partition {partition}"))
                elif check_timestamps and record.timestamp >= 0 and not low_ms <= record.timestamp <= high_ms:
                    bad_timestamp = True
                    errors.append((index, f"Timestamp {record.timestamp} of message with offset {record.offset} is out "
                                          f"of range. The timestamp should be within [{low_ms}, {high_ms}]"))
        except ProtocolError as e:
            raise CorruptMessageError(f"undecodable records in batch at byte {pos}: {e}") from e
        if bad_timestamp:
            raise InvalidTimestampError("One or more records have been rejected due to invalid timestamp",
                                        record_errors=errors)
        if errors:
            shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
            raise InvalidRecordError(f"One or more records have been rejected due to {len(errors)} record errors in "
                                     f"total, and only showing the first three errors at most: [{shown}]",
                                     record_errors=errors)
        if check_timestamps:  # the header's timestamps are out of range though no record's is
            raise InvalidTimestampError(f"batch timestamps [{header.base_timestamp}, {header.max_timestamp}] are "
                                        f"out of range. The timestamp should be within [{low_ms}, {high_ms}]")

    def _write(self, buf: memoryview, indexed: list, first_offset: int, last_offset: int, max_timestamp: int,
               now_ms: int) -> None:
        self._check_fits_a_segment(len(buf))
        self._last_now_ms = max(self._last_now_ms, now_ms)
        segment = self._segments[-1]
        if segment.should_roll(append_bytes=len(buf), max_timestamp=max_timestamp, last_offset=last_offset,
                               now_ms=now_ms, segment_bytes=self.config.segment_bytes,
                               segment_ms=self.config.segment_ms):
            segment = self.roll(now_ms=now_ms, expected_base_offset=first_offset)
        segment.append(buf, indexed)
        self._log_end_offset = last_offset + 1

    def _check_fits_a_segment(self, size: int) -> None:
        if size > self.config.segment_bytes:
            raise RecordListTooLargeError(f"{size} bytes cannot fit in a segment of {self.config.segment_bytes}")

    def _maybe_release_cache(self) -> None:
        """Once the active segment has grown two windows past the last release, let the OS drop the page
        cache of everything but its last `cache_window_bytes` (see LogManager.cache_window_bytes)."""
        keep = self.cache_window_bytes
        segment = self._segments[-1]
        if segment.size - segment.cache_released <= 2 * keep:
            return
        end = (segment.size - keep) & ~(_PAGE_SIZE - 1)
        segment.cache_released = end
        (self.cache_release or drop_cache)(segment.file, end)

    # ---------------------------------------------------------------------------------------------- roll

    def roll(self, *, now_ms: int, expected_base_offset: int | None = None) -> LogSegment:
        """Start a new active segment at the log end offset (or `expected_base_offset` if above it)."""
        new_base = max(self._log_end_offset, expected_base_offset or 0)
        with self._lock:
            segments = self._segments
            active = segments[-1]
            if active.size == 0 and active.base_offset == new_base:
                return active
            if active.size == 0:
                segments = segments[:-1]
                active.delete()
            else:
                active.on_become_inactive()
            self._producer_state.map_end_offset = new_base
            self._producer_state.take_snapshot()
            segment = self._new_segment(new_base, now_ms)
            self._segments = segments + (segment,)
        self._dir_dirty = True
        self._flush_up_to = max(self._flush_up_to, new_base)
        if self.on_roll is not None:
            self.on_roll()
        return segment

    # --------------------------------------------------------------------------------------------- reads

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_message: bool = True) -> ReadInfo:
        """Whole batches from the one holding `offset`, at most `max_bytes` of them (but at least the first
        batch when `min_one_message`, KIP-74), and none holding an offset at or above `max_offset` (the high
        watermark or last stable offset; the log end offset when None). Reads stay within one segment."""
        segments = self._segments
        log_end_offset = self._log_end_offset
        if offset < self._log_start_offset or offset > log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self._log_start_offset}, {log_end_offset}]")
        limit_offset = log_end_offset if max_offset is None else min(max_offset, log_end_offset)
        if offset >= limit_offset:
            return ReadInfo([], offset)
        i = max(0, bisect.bisect_right(segments, offset, key=_base_offset) - 1)
        while i < len(segments):
            segment = segments[i]
            following = segments[i + 1].base_offset if i + 1 < len(segments) else None
            if limit_offset >= log_end_offset or (following is not None and following <= limit_offset):
                max_position = segment.size
            else:
                max_position = self._position_of(segment, limit_offset)
            found = segment.read(offset, max_bytes, max_position, min_one_message=min_one_message)
            if found is not None:
                region, first_offset = found
                return ReadInfo([region] if region.length else [], first_offset)
            if following is None or following >= limit_offset:
                break
            i += 1
        return ReadInfo([], offset)

    def read_bytes(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
                   min_one_message: bool = True) -> bytes:
        """`read`'s batches as bytes, for readers that decode them here (coordinators loading their
        partition, the metadata log) rather than send them on. Shorter than `read(...).size` only when a
        segment file was truncated under the read; the bytes then end at most with one partial batch."""
        return read_regions(self.read(offset, max_bytes, max_offset=max_offset, min_one_message=min_one_message).regions)

    def _position_of(self, segment: LogSegment, offset: int) -> int:
        cached = self._position_cache
        if cached is not None and cached[0] is segment and cached[1] == offset:
            return cached[2]
        position = segment.batch_position(offset)
        self._position_cache = (segment, offset, position)
        return position

    def fetch_offset_by_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """The first record whose timestamp is >= `timestamp` (ListOffsets by time), or None."""
        start = self._log_start_offset
        for segment in self._segments:
            if segment.max_timestamp >= timestamp:
                found = segment.find_offset_by_timestamp(timestamp, start)
                if found is not None:
                    return TimestampAndOffset(found[0], found[1], self._epoch_cache.epoch_for_offset(found[1]))
        return None

    def fetch_offset_of_max_timestamp(self) -> TimestampAndOffset | None:
        """The record with the largest timestamp (ListOffsets MAX_TIMESTAMP), or None for an empty log."""
        best = None
        for segment in self._segments:
            if segment.max_timestamp >= 0 and (best is None or segment.max_timestamp > best.max_timestamp):
                best = segment
        if best is None:
            return None
        offset = best.exact_offset_of_timestamp(best.max_timestamp, best.offset_of_max_timestamp)
        return TimestampAndOffset(best.max_timestamp, offset, self._epoch_cache.epoch_for_offset(offset))

    # --------------------------------------------------------------------------------- leader epochs

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: `(epoch, end offset)` as Kafka answers it; `(-1, -1)` if unknown."""
        return self._epoch_cache.end_offset_for(epoch, self._log_end_offset)

    def assign_epoch_start_offset(self, epoch: int, start_offset: int) -> None:
        self._epoch_cache.assign(epoch, start_offset)

    def epoch_for_offset(self, offset: int) -> int:
        return self._epoch_cache.epoch_for_offset(offset)

    # ---------------------------------------------------------------------------------------- truncation

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch holding an offset >= `offset` (a batch spanning it goes whole); the log end
        offset becomes `offset`, as in Kafka. Returns whether anything was removed."""
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self._log_end_offset:
            # Nothing to remove, but an epoch begun at the log end without a batch (a leader that was
            # elected and replaced before writing) conflicts with the new leader's history: as Kafka does,
            # the epoch cache is truncated to the log end all the same.
            self._epoch_cache.truncate_from_end(self._log_end_offset)
            return False
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset, now_ms=self._last_now_ms)
            return True
        with self._lock:
            self.generation += 1
            segments = self._segments
            keep = tuple(s for s in segments if s.base_offset <= offset)
            self._segments = keep
        for segment in segments[len(keep) :]:
            segment.delete()
        keep[-1].truncate_to(offset)
        self._after_truncation(offset)
        self._log_start_offset = min(self._log_start_offset, offset)
        self._load_producer_state(offset)
        return True

    def truncate_fully_and_start_at(self, offset: int, *, now_ms: int) -> None:
        """Drop every segment and start empty at `offset` (a replica far behind or ahead of its leader)."""
        with self._lock:
            self.generation += 1
            for segment in self._segments:
                segment.delete()
            self._segments = (self._new_segment(offset, now_ms),)
        self._dir_dirty = True
        self._after_truncation(offset)
        self._log_start_offset = offset
        self._epoch_cache.clear()
        self._producer_state.delete_snapshots_after(-1)
        self._producer_state.clear(offset)

    def _after_truncation(self, offset: int) -> None:
        self.cleaner_offset = min(self.cleaner_offset, offset)
        self._log_end_offset = offset
        self._position_cache = None
        self._recovery_point = min(self._recovery_point, offset)
        self._flush_up_to = min(self._flush_up_to, offset)
        self._epoch_cache.truncate_from_end(offset)

    # ----------------------------------------------------------------------------------------- retention

    def delete_old_segments(self, now_ms: int, *, upper_bound_offset: int | None = None) -> int:
        """Retention: delete whole leading segments below the log start offset, and, for the delete
        policy, older than `retention.ms` (by their largest timestamp) or beyond `retention.bytes`. Only
        segments wholly below `upper_bound_offset` (the high watermark) go. Returns how many went."""
        upper = self._log_end_offset if upper_bound_offset is None else min(upper_bound_offset, self._log_end_offset)
        deleted = self._delete_prefix(lambda s, following: following is not None
                                      and following.base_offset <= self._log_start_offset, upper, now_ms)
        self.deleted_by = ("log_start_offset",) if deleted else ()
        config = self.config
        if not config.delete:
            return deleted
        if config.retention_ms >= 0:
            by_time = self._delete_prefix(
                lambda s, _: s.size == 0 or now_ms - _segment_timestamp(s) > config.retention_ms, upper, now_ms)
            deleted += by_time
            self.deleted_by += ("retention.ms",) if by_time else ()
        if config.retention_bytes >= 0:
            excess = self.size_bytes - config.retention_bytes

            def over_size(segment: LogSegment, _) -> bool:
                nonlocal excess
                if excess - segment.size >= 0:
                    excess -= segment.size
                    return True
                return False

            by_size = self._delete_prefix(over_size, upper, now_ms)
            deleted += by_size
            self.deleted_by += ("retention.bytes",) if by_size else ()
        return deleted

    def delete_records_before(self, offset: int, *, now_ms: int) -> int:
        """DeleteRecords: advance the log start offset to `offset` and delete the segments wholly below it.
        Returns the new log start offset."""
        if offset > self._log_end_offset or offset < 0:
            raise OffsetOutOfRangeError(f"cannot delete records before {offset}: log end offset is {self._log_end_offset}")
        if offset > self._log_start_offset:
            self._advance_log_start_offset(offset)
            self._delete_prefix(lambda s, following: following is not None and following.base_offset <= offset,
                                self._log_end_offset, now_ms)
        return self._log_start_offset

    def _delete_prefix(self, predicate: Callable[[LogSegment, LogSegment | None], bool], upper: int, now_ms: int) -> int:
        segments = self._segments
        doomed = []
        for i, segment in enumerate(segments):
            following = segments[i + 1] if i + 1 < len(segments) else None
            end = following.base_offset if following is not None else self._log_end_offset
            if end > upper or (following is None and segment.size == 0) or not predicate(segment, following):
                break
            doomed.append(segment)
        if not doomed:
            return 0
        if len(doomed) == len(segments):
            self.roll(now_ms=now_ms)
        return self._remove_segments(doomed)

    def _remove_segments(self, doomed: Sequence[LogSegment]) -> int:
        """Remove `doomed`, a prefix of the segment list when chosen; if the cleaner replaced any of them
        meanwhile, nothing is removed (the next pass decides again)."""
        with self._lock:
            segments = self._segments
            if len(doomed) >= len(segments) or any(a is not b for a, b in zip(segments, doomed)):
                return 0
            remaining = segments[len(doomed) :]
            self._segments = remaining
        for segment in doomed:
            segment.delete()
        first_base = remaining[0].base_offset
        if first_base > self._log_start_offset:
            self._advance_log_start_offset(first_base)
        self._producer_state.delete_snapshots_before(first_base)
        return len(doomed)

    def _advance_log_start_offset(self, offset: int) -> None:
        self._log_start_offset = offset
        self._epoch_cache.truncate_from_start(offset)

    # ------------------------------------------------------------------------------------------ cleaning

    def new_cleaned_segment(self, base_offset: int, now_ms: int) -> LogSegment:
        """An empty segment with the `.cleaned` suffix, for the cleaner's output. It holds its file open from
        the start: it is swapped in from the cleaner's thread, and a reader must not have to open it by a
        name that `replace_segments` is renaming (or a later swap is deleting) at that moment."""
        return self._new_segment(base_offset, now_ms, suffix=CLEANED_SUFFIX, hold_open=True)

    def replace_segments(self, new: LogSegment, old: Sequence[LogSegment], generation: int) -> bool:
        """Swap the cleaned segment `new` in for the contiguous inactive segments `old` if they are still in
        the log and it has not been truncated since `generation`. Commit point: the rename of the new log
        file from `.cleaned` to `.swap`; recovery completes a swap from there. Returns whether it swapped."""
        with self._lock:
            segments = self._segments
            if self.closed or generation != self.generation or not old:
                return False
            i = next((k for k, s in enumerate(segments) if s is old[0]), None)
            if i is None or i + len(old) >= len(segments) or any(a is not b for a, b in zip(segments[i : i + len(old)], old)):
                return False
            new.rename_suffix(SWAP_SUFFIX)
            fsync_dir(self.directory)
            self._segments = segments[:i] + (new,) + segments[i + len(old) :]
            for segment in old:
                segment.delete()
            new.rename_suffix("")
            fsync_dir(self.directory)
            self._position_cache = None
        return True

    def record_cleaning(self, end_offset: int, latest_delete_horizon_ms: int, generation: int) -> bool:
        """Advance the cleaner checkpoint after a pass, unless the log was truncated meanwhile."""
        with self._lock:
            if generation != self.generation:
                return False
            self.cleaner_offset = max(self.cleaner_offset, end_offset)
            self.latest_delete_horizon_ms = latest_delete_horizon_ms
        return True

    def producer_last_offsets(self) -> dict[int, int]:
        return self._producer_state.last_offsets()

    def producer_marker_epochs(self) -> dict[int, int]:
        return self._producer_state.marker_epochs()

    # ------------------------------------------------------------------------------------------ flushing

    def flush(self, offset: int | None = None, *, now_ms: int | None = None) -> None:
        """fsync every segment holding offsets in [recovery point, `offset`) and advance the recovery point."""
        offset = self._log_end_offset if offset is None else min(offset, self._log_end_offset)
        if now_ms is not None:
            self._last_flush_ms = now_ms
        if offset <= self._recovery_point and (not self._dir_dirty or self._creation_unsynced):
            return  # nothing new, or a new log still without data: nothing in it needs to be durable yet
        segments = self._segments
        first = max(0, bisect.bisect_right(segments, self._recovery_point, key=_base_offset) - 1)
        for segment in segments[first:]:
            if segment.base_offset >= offset:
                break
            segment.flush()
        if self._creation_unsynced:
            metadata = os.path.join(self.directory, PARTITION_METADATA)
            if self._topic_id_pending and self._topic_id is not None:
                PartitionMetadataFile(metadata).write(self._topic_id, fsync=False)
                self._topic_id_pending = False
            _fsync_file(metadata)
            _fsync_file(os.path.join(self.directory, LEADER_EPOCH_CHECKPOINT))  # written unsynced until now
            self._dir_dirty = True
        if self._dir_dirty:
            fsync_dir(self.directory)
            self._dir_dirty = False
        if self._creation_unsynced:
            fsync_dir(os.path.dirname(os.path.abspath(self.directory)))
            self._creation_unsynced = False
        self._recovery_point = max(self._recovery_point, offset)

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush segments that rolled since the last flush, and everything when `flush.ms` has passed."""
        if self._flush_ms_due(now_ms):
            self.flush(now_ms=now_ms)
            return True
        if self._flush_up_to > self._recovery_point:
            self.flush(self._flush_up_to)
            return True
        return False

    def flush_due(self, now_ms: int) -> bool:
        """Whether `maybe_flush(now_ms)` would flush."""
        return self._flush_ms_due(now_ms) or self._flush_up_to > self._recovery_point

    def _flush_ms_due(self, now_ms: int) -> bool:
        flush_ms = self.config.flush_ms
        return flush_ms is not None and now_ms - self._last_flush_ms >= flush_ms and self._log_end_offset > self._recovery_point

    def _maybe_flush_messages(self, now_ms: int) -> None:
        flush_messages = self.config.flush_messages
        if flush_messages is not None and self._log_end_offset - self._recovery_point >= flush_messages:
            self.flush(now_ms=now_ms)

    def remove_expired_producers(self, now_ms: int) -> int:
        return self._producer_state.remove_expired_producers(now_ms)

    def in_open_transaction(self, producer_id: int, epoch: int) -> bool:
        """Whether the producer's transaction (at this epoch) is open here: nothing to verify."""
        return self._producer_state.in_open_transaction(producer_id, epoch)

    def maybe_start_transaction_verification(self, producer_id: int, sequence: int, epoch: int,
                                             now_ms: int) -> VerificationGuard:
        """Before asking a producer's coordinator about its first transactional write here: the guard that
        write must present, or SENTINEL when its transaction is open already (Kafka's
        UnifiedLog.maybeStartTransactionVerification)."""
        return self._producer_state.maybe_start_verification(producer_id, sequence, epoch, now_ms)

    # ----------------------------------------------------------------------------------------- closing

    def close(self) -> None:
        """Clean close: snapshot producer state at the log end offset, write the active segment's final
        time index entry, trim its indexes and flush everything not yet on disk."""
        with self._lock:
            self.closed = True
        producer_state = self._producer_state
        producer_state.map_end_offset = self._log_end_offset
        if producer_state.producers or producer_state.snapshot_offsets() or self.size_bytes:
            producer_state.take_snapshot()  # (a log that never held a batch has no state to keep)
        active = self._segments[-1]
        active.on_become_inactive()
        self.flush()
        active.flush()
        for segment in self._segments:
            segment.close()

    def release(self) -> None:
        """Forget the log without writing anything (its directory is being deleted); files and maps are
        released when the last reader lets go of them."""
        with self._lock:
            self.closed = True


def _marker_of(buf, pos: int, header: BatchHeader) -> tuple[int, int] | None:
    """(control type, coordinator epoch) of the transaction marker batch at `pos`, or None when it holds
    no record (the cleaner emptied it) or is not a transaction marker."""
    try:
        records = iter_records(buf[pos : pos + header.size], max_uncompressed_bytes=MAX_UNCOMPRESSED_BATCH_BYTES)
        record = next(iter(records), None)
        if record is None:
            return None
        kind, coordinator_epoch = parse_control_record(record)
    except ProtocolError as e:
        raise CorruptMessageError(f"undecodable control batch at offset {header.base_offset}: {e}") from e
    return (kind, coordinator_epoch) if kind in (ABORT, COMMIT) else None


def _segment_timestamp(segment: LogSegment) -> int:
    """Largest timestamp, or the file's modification time for a segment whose batches carry none."""
    timestamp = segment.max_timestamp
    return timestamp if timestamp >= 0 else segment.last_modified_ms()


def _fsync_file(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
