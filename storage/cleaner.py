"""The log cleaner: compaction for `cleanup.policy=compact` (and `compact,delete`) logs.

Theory of operation
-------------------
The cleaner checkpoint of a log (`Log.cleaner_offset`) splits it into a clean section below, already
compacted, and a dirty section above. One cleaning pass:

1. Range. The dirty section ends at the first uncleanable offset: the base of the active segment, the
   first offset of an open transaction, or the base of the first segment holding a record newer than
   `min.compaction.lag.ms`, whichever is lowest. Cleaning works on whole segments.
   `CleanableRange.dirty_ratio` (dirty bytes over clean plus dirty bytes) is what the log manager
   compares with `min.cleanable.dirty.ratio` to choose a log; a dirty section whose first batch is older
   than `max.compaction.lag.ms` is cleaned whatever the ratio (`overdue`).
2. Offset map. Every keyed record of the dirty section goes into a map key -> latest offset (control
   batches and the batches of aborted transactions are skipped, so an aborted write never shadows a
   committed one). If the map outgrows `max_map_entries` the pass stops at a segment boundary.
3. Rewrite. The segments from the log start to the end of the mapped range are rewritten in groups that
   fit one segment (`segment.bytes`, an int32 offset range) into `.cleaned` segments. A record stays if
   no later offset holds its key; a tombstone (null value) also needs its batch's delete horizon not to
   have passed. A batch that keeps every record is copied byte for byte; otherwise it is re-encoded with
   its original base offset, lastOffsetDelta, producer id and epoch, base sequence, leader epoch,
   compression and timestamp type, so offsets never change and gaps appear. A batch emptied entirely
   is kept as an empty batch when it is its producer's last, so that sequence checks survive a reload;
   control batches are kept as they are. The first time a batch with tombstones is cleaned, its delete
   horizon (now + `delete.retention.ms`) is written into it (KIP-534: attribute bit 6, baseTimestamp),
   and a later pass after that time drops those tombstones.
4. Swap. Each group's output replaces its inputs with `Log.replace_segments`, which refuses if the log
   changed under the pass (segments deleted by retention, a truncation); the pass then stops and its
   files are removed. Only the swap takes the log's lock: everything else reads a snapshot of the
   segment list through file objects that stay open even if the segments are deleted meanwhile, so a
   pass may run in a thread while the event loop appends and reads.

Transactions, as Kafka's CleanedTransactionMetadata: the aborted transactions of each segment being
rewritten come from the log's aborted-transaction index (`_TxnState`). A batch of an aborted
transaction loses its records (it is kept empty when it is its producer's last). An ABORT marker stays
while any batch of its transaction was still seen in this pass, and its index entry is carried into the
cleaned segment; a COMMIT marker stays while any batch of its transaction was seen. A marker whose
transaction has no data left is first stamped with a delete horizon (now + `delete.retention.ms`), and
dropped by a pass after that time, so a reader that has seen the data also sees its marker. Cleaning never
goes past the first unstable offset (step 1).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from odradek.protocol.errors import ProtocolError
from odradek.protocol.records import (
    ABORT,
    ATTR_CODEC_MASK,
    ATTR_DELETE_HORIZON,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    build_batch,
    compute_crc,
    iter_records,
    parse_control_record,
    read_batch_header,
)

from .config import LONG_MAX
from .log import Log
from .segment import INT32_MAX, MAX_UNCOMPRESSED_BATCH_BYTES, LogSegment
from .txn_index import AbortedTxn, TransactionIndex

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class CleanableRange:
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    dirty_bytes: int
    overdue: bool = False  # dirty records older than max.compaction.lag.ms: clean whatever the ratio

    @property
    def dirty_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


@dataclass(frozen=True, slots=True)
class CleanResult:
    first_dirty_offset: int
    end_offset: int  # the new cleaner checkpoint
    segments_cleaned: int
    bytes_read: int
    bytes_written: int
    records_removed: int
    latest_delete_horizon_ms: int


def cleanable_range(log: Log, now_ms: int, segments: tuple[LogSegment, ...] | None = None) -> CleanableRange:
    """The clean and dirty sections of `log` (or of the snapshot `segments` of its segment list), in whole
    inactive segments."""
    segments = log.segments if segments is None else segments
    first_dirty = max(log.cleaner_offset, log.log_start_offset)
    end = segments[-1].base_offset
    unstable = log.first_unstable_offset
    if unstable is not None:
        end = min(end, unstable)
    config = log.config
    lag = config.min_compaction_lag_ms
    first_uncleanable = segments[-1].base_offset
    clean_bytes = dirty_bytes = 0
    overdue = False
    for i, segment in enumerate(segments[:-1]):
        following = segments[i + 1].base_offset
        if following <= first_dirty:
            clean_bytes += segment.size
        elif following > end or (lag > 0 and segment.max_timestamp > now_ms - lag):
            first_uncleanable = segment.base_offset
            break
        else:
            if dirty_bytes == 0 and config.max_compaction_lag_ms < LONG_MAX:
                first = segment.first_batch_timestamp()
                overdue = 0 <= first < now_ms - config.max_compaction_lag_ms
            dirty_bytes += segment.size
    return CleanableRange(first_dirty, first_uncleanable, clean_bytes, dirty_bytes, overdue)


class Cleaner:
    def __init__(self, *, max_map_entries: int = 4_000_000, io_buffer_bytes: int = 1 << 20) -> None:
        self.max_map_entries = max_map_entries
        self.io_buffer_bytes = io_buffer_bytes

    def clean(self, log: Log, *, now_ms: int) -> CleanResult | None:
        """One pass over `log` (see the module docstring). Returns None when there was nothing to rewrite or
        the log changed under the pass."""
        generation = log.generation
        segments = log.segments
        following = {id(s): segments[i + 1].base_offset for i, s in enumerate(segments[:-1])}
        cleanable = cleanable_range(log, now_ms, segments)
        first_dirty = cleanable.first_dirty_offset
        dirty = [s for s in segments[:-1]
                 if following[id(s)] > first_dirty and s.base_offset < cleanable.first_uncleanable_offset]
        offset_map, map_end, bytes_read = self._build_offset_map(log, dirty, first_dirty, following)
        if not dirty:
            map_end = cleanable.first_uncleanable_offset
        candidates = [s for s in segments[:-1] if s.base_offset < map_end]
        if not candidates:
            return None
        last_offsets = log.producer_last_offsets()
        txns = _TxnState(log.producer_marker_epochs())
        stats = _Stats(bytes_read=bytes_read)
        for group in _group_by_size(candidates, following, log.config.segment_bytes):
            new = log.new_cleaned_segment(group[0].base_offset, now_ms)
            txns.cleaned_index = new.txn_index
            try:
                self._clean_into(log, new, group, following, offset_map, last_offsets, now_ms,
                                 log.config.delete_retention_ms, stats, txns)
                new.on_become_inactive()
                new.flush()
            except BaseException:
                new.delete()
                raise
            if not log.replace_segments(new, group, generation):
                new.delete()
                return None
            stats.segments_cleaned += len(group)
        end_offset = max(first_dirty, map_end)
        log.record_cleaning(end_offset, stats.latest_delete_horizon_ms, generation)
        return CleanResult(first_dirty, end_offset, stats.segments_cleaned, stats.bytes_read, stats.bytes_written,
                           stats.records_removed, stats.latest_delete_horizon_ms)

    def _build_offset_map(self, log: Log, dirty: list[LogSegment], first_dirty: int,
                          following: dict[int, int]) -> tuple[dict[bytes, int], int, int]:
        """key -> latest offset over `dirty`, the offset where the mapped range ends, and bytes read."""
        offset_map: dict[bytes, int] = {}
        end = first_dirty
        bytes_read = 0
        txns = _TxnState()
        if dirty:
            txns.add(log.collect_aborted_transactions(first_dirty, following[id(dirty[-1])]))
        for segment in dirty:
            for _, batch in segment.batches(block_bytes=self.io_buffer_bytes):
                header = read_batch_header(batch, 0)
                if header.is_control:
                    txns.on_control_batch(batch, header)
                    continue
                if txns.on_batch(header) or header.records_count == 0 or header.last_offset < first_dirty:
                    continue
                for record in _records(batch) or ():
                    if record.key is not None and record.offset >= first_dirty:
                        offset_map[bytes(record.key)] = record.offset
            bytes_read += segment.size
            end = following[id(segment)]
            if len(offset_map) >= self.max_map_entries:
                break
        return offset_map, end, bytes_read

    def _clean_into(self, log: Log, new: LogSegment, group: list[LogSegment], following: dict[int, int],
                    offset_map: dict[bytes, int], last_offsets: dict[int, int], now_ms: int, delete_retention_ms: int,
                    stats: _Stats, txns: _TxnState) -> None:
        out = bytearray()
        indexed = []
        for segment in group:
            # The whole segment's aborted transactions: the cleaned segment's index is rebuilt from them.
            txns.add(log.collect_aborted_transactions(segment.base_offset, following[id(segment)]))
            for _, batch in segment.batches(block_bytes=self.io_buffer_bytes):
                header = read_batch_header(batch, 0)
                kept = self._filter_batch(batch, header, offset_map, last_offsets, now_ms, delete_retention_ms, stats,
                                          txns)
                if kept is None:
                    continue
                kept_header = header if kept is batch else read_batch_header(kept, 0)
                indexed.append((len(out), len(kept), kept_header.last_offset, kept_header.max_timestamp))
                out += kept
                if len(out) >= self.io_buffer_bytes:
                    new.append(out, indexed)
                    stats.bytes_written += len(out)
                    out, indexed = bytearray(), []
        if out:
            new.append(out, indexed)
            stats.bytes_written += len(out)

    @staticmethod
    def _filter_batch(batch, header: BatchHeader, offset_map: dict[bytes, int], last_offsets: dict[int, int],
                      now_ms: int, delete_retention_ms: int, stats: _Stats, txns: _TxnState):
        is_producers_last = header.producer_id >= 0 and last_offsets.get(header.producer_id) == header.last_offset
        if header.is_control:
            is_producers_last = txns.marker_epochs.get(header.producer_id) == header.producer_epoch
            return _filter_marker(batch, header, txns.on_control_batch(batch, header), is_producers_last, now_ms,
                                  delete_retention_ms, stats)
        if txns.on_batch(header):  # an aborted transaction's batch: its records go
            stats.records_removed += header.records_count
            if not is_producers_last:
                return None
            return batch if header.records_count == 0 else _empty_batch(batch, header)
        if header.records_count == 0:
            return batch if is_producers_last else None
        records = _records(batch)
        if records is None:
            return batch
        horizon = header.base_timestamp if header.attributes & ATTR_DELETE_HORIZON else None
        retained = []
        tombstones = False
        for record in records:
            if record.key is None:
                continue
            latest = offset_map.get(bytes(record.key))
            if latest is not None and record.offset < latest:
                continue
            if record.value is None:
                if horizon is not None and now_ms >= horizon:
                    continue
                tombstones = True
            retained.append(record)
        stats.records_removed += len(records) - len(retained)
        new_horizon = (horizon if horizon is not None else now_ms + delete_retention_ms) if tombstones else None
        if new_horizon is not None:
            stats.latest_delete_horizon_ms = max(stats.latest_delete_horizon_ms, new_horizon)
        if len(retained) == len(records) and new_horizon == horizon:
            return batch
        if not retained:
            return _empty_batch(batch, header) if is_producers_last else None
        rebuilt = bytearray(build_batch(
            retained,
            base_offset=header.base_offset,
            compression=header.compression,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            transactional=header.is_transactional,
            timestamp_type_log_append=header.timestamp_type_log_append,
            partition_leader_epoch=header.partition_leader_epoch,
            delete_horizon_ms=new_horizon,
        ))
        _INT32.pack_into(rebuilt, 23, header.last_offset_delta)
        _reseal(rebuilt)
        return rebuilt


class _TxnState:
    """Kafka's CleanedTransactionMetadata: which batches belong to aborted transactions, and which markers
    may go, as the cleaner walks batches in offset order."""

    def __init__(self, marker_epochs: dict[int, int] | None = None) -> None:
        self.marker_epochs = marker_epochs or {}  # see ProducerStateManager.marker_epochs
        self._aborted: list[AbortedTxn] = []  # not yet reached, by first offset
        self._seen: set[tuple[int, int]] = set()  # (producer id, first offset) already added
        self._ongoing_aborted: dict[int, list] = {}  # producer id -> [AbortedTxn, a batch of it seen]
        self._ongoing_committed: set[int] = set()
        self.cleaned_index: TransactionIndex | None = None  # the TransactionIndex of the segment being written

    def add(self, aborted: list[AbortedTxn]) -> None:
        fresh = [t for t in aborted if (t.producer_id, t.first_offset) not in self._seen]
        if fresh:
            self._seen.update((t.producer_id, t.first_offset) for t in fresh)
            self._aborted = sorted(self._aborted + fresh, key=lambda t: t.first_offset)

    def _reach(self, offset: int) -> None:
        while self._aborted and self._aborted[0].first_offset <= offset:
            txn = self._aborted.pop(0)
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, False])

    def on_batch(self, header: BatchHeader) -> bool:
        """Whether this data batch belongs to an aborted transaction."""
        self._reach(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing[1] = True
            return True
        self._ongoing_committed.add(header.producer_id)
        return False

    def on_control_batch(self, batch, header: BatchHeader) -> bool:
        """Whether this marker may be discarded: no batch of its transaction is left."""
        self._reach(header.last_offset)
        records = _records(batch)
        if not records:
            return True  # emptied already
        try:
            kind, _ = parse_control_record(records[0])
        except ProtocolError:
            return False
        pid = header.producer_id
        if kind == ABORT:
            ongoing = self._ongoing_aborted.pop(pid, None)
            if ongoing is not None and ongoing[1]:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(ongoing[0])
                return False
            return True
        if kind == 1:  # COMMIT
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False


def _filter_marker(batch, header: BatchHeader, can_discard: bool, is_producers_last: bool, now_ms: int,
                   delete_retention_ms: int, stats: _Stats):
    """A transaction marker: kept while its transaction has data; then stamped with a delete horizon, and
    dropped once that has passed (kept empty if it is its producer's last batch)."""
    if not can_discard:
        return batch
    horizon = header.base_timestamp if header.attributes & ATTR_DELETE_HORIZON else None
    if horizon is None:
        horizon = now_ms + delete_retention_ms
        stats.latest_delete_horizon_ms = max(stats.latest_delete_horizon_ms, horizon)
        records = _records(batch)
        if not records:
            return batch
        rebuilt = bytearray(build_batch(
            records, base_offset=header.base_offset, producer_id=header.producer_id,
            producer_epoch=header.producer_epoch, base_sequence=header.base_sequence, transactional=True,
            control=True, timestamp_type_log_append=header.timestamp_type_log_append,
            partition_leader_epoch=header.partition_leader_epoch, delete_horizon_ms=horizon))
        _INT32.pack_into(rebuilt, 23, header.last_offset_delta)
        _reseal(rebuilt)
        return rebuilt
    if now_ms < horizon:
        return batch
    stats.records_removed += header.records_count
    if is_producers_last:
        return batch if header.records_count == 0 else _empty_batch(batch, header)
    return None


@dataclass(slots=True)
class _Stats:
    segments_cleaned: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    latest_delete_horizon_ms: int = -1


def _records(batch):
    """The batch's records, or None if they cannot be decoded (such a batch is kept as it is)."""
    try:
        return list(iter_records(batch, max_uncompressed_bytes=MAX_UNCOMPRESSED_BATCH_BYTES))
    except ProtocolError:
        return None


def _empty_batch(batch, header: BatchHeader) -> bytearray:
    """The batch's header alone: no records, no compression, offsets and sequences as they were."""
    out = bytearray(batch[:HEADER_SIZE])
    _INT32.pack_into(out, 8, HEADER_SIZE - LOG_OVERHEAD)
    _INT16.pack_into(out, 21, header.attributes & ~ATTR_CODEC_MASK)
    _INT32.pack_into(out, 57, 0)
    _reseal(out)
    return out


def _reseal(batch: bytearray) -> None:
    _UINT32.pack_into(batch, 17, compute_crc(batch, 0, len(batch)))


def _group_by_size(candidates: list[LogSegment], following: dict[int, int], max_bytes: int) -> list[list[LogSegment]]:
    """Consecutive segments whose total size fits one segment and whose offsets fit an int32 delta."""
    groups = []
    i = 0
    while i < len(candidates):
        group = [candidates[i]]
        size = candidates[i].size
        i += 1
        while (i < len(candidates) and size + candidates[i].size <= max_bytes
               and following[id(candidates[i])] - 1 - group[0].base_offset <= INT32_MAX):
            group.append(candidates[i])
            size += candidates[i].size
            i += 1
        groups.append(group)
    return groups

