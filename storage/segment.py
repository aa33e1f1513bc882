"""A log segment: one `.log` file of whole record batches, its offset index, its time index and its
aborted-transaction index (txn_index.py).

Theory of operation
-------------------
A segment covers offsets from `base_offset` (its file name) up to the base offset of the next segment.
Appends go to the end of the active (last) segment with one pwrite of all the batches of the append;
every `index.interval.bytes` of log the offset index gains an entry (last offset of the batch -> its
position) and the time index an entry (largest timestamp so far -> last offset of the batch that
carried it) when that timestamp has grown.

Offset lookups take the index entry at or below the target and walk batch headers from there: at most
about `index.interval.bytes` of headers. Reads hand out `SegmentRegion`s: `protocol.codec.FileRegion`s
that also hold the `LogFile` owning the descriptor. A `LogFile` closes its descriptor when the last
reference goes, so a region being sent stays valid while the segment is rolled, deleted or replaced by
the cleaner: the open file outlives its directory entry.

Segments are lazy, new ones as well as those loaded from disk: the log file is opened on the first append
or read and stays open from then on (a region being sent holds it); the indexes are checked on first use
and mapped only when a lookup needs entries or an entry is appended (see index.py), and unmapped again
when the segment goes inactive. A new, empty segment therefore holds no descriptor and no map, and
neither does a segment read by a short walk from its start. The first segment of a new log does not even
have its log file until the first append (`create_file=False`): a missing file is an empty segment, and
reopening the log makes the same segment again (see log.py). The largest timestamp of a segment at rest is
the last entry of its time index, because the final entry is written whenever a segment stops being
active (roll, close) and recovery recomputes it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from odradek.protocol.codec import FileRegion
from odradek.protocol.errors import CorruptRecordError
from odradek.protocol.records import iter_records, peek_offset_and_length

from . import faults
from .index import CorruptIndexError, IndexMaps, OffsetIndex, TimeIndex
from .names import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, offset_file_name
from .scan import check_stored_batch, iter_batches, iter_headers
from .txn_index import TransactionIndex

INT32_MAX = 0x7FFFFFFF
MAX_UNCOMPRESSED_BATCH_BYTES = 256 * 1024 * 1024


class LogFile:
    """An open segment file; the descriptor is closed when the last reference to this object goes."""

    __slots__ = ("fd",)

    def __init__(self, path: str, *, create: bool = False) -> None:
        flags = os.O_RDWR | (os.O_CREAT | os.O_TRUNC if create else 0)
        self.fd = os.open(path, flags, 0o644)

    def fileno(self) -> int:
        return self.fd

    def __del__(self) -> None:
        try:
            os.close(self.fd)
        except (OSError, AttributeError):
            pass


class SegmentRegion(FileRegion):
    """A FileRegion (fd, position, length) that keeps its file open for as long as it lives."""

    file: LogFile

    def __new__(cls, file: LogFile, position: int, length: int) -> SegmentRegion:
        region = super().__new__(cls, file.fd, position, length)
        region.file = file
        return region


_DONTNEED = getattr(os, "POSIX_FADV_DONTNEED", None)


def drop_cache(file: LogFile, end: int) -> None:
    """Ask the OS to drop the cached pages of `file` before `end`: dirty ones are queued for writeback
    (and dropped by a later call), clean ones go now. May block on a busy disk: call it off the event loop.
    The `file` reference keeps the descriptor open for the duration."""
    if _DONTNEED is None:
        return
    try:
        os.posix_fadvise(file.fd, 0, end, _DONTNEED)
    except OSError:
        pass


def write_fully(fd: int, data, position: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written


def read_region(region: FileRegion, *, pad: bool = False) -> bytes:
    """The `region.length` bytes of `region`'s file from `region.position`.

    A file that ends inside the region (truncated after the read that handed the region out) gives what
    it still holds, shorter; with `pad`, zeros up to the region's length instead, for a response frame
    whose length was computed from the region and must stay honest (a client reading zeros where a batch
    was sees a partial batch and drops it). One pread in the usual case: this is the fetch path's copy of
    small regions."""
    length = region.length
    data = os.pread(region.fd, length, region.position)
    if len(data) < length:
        data = _read_rest(region, data)
        if pad and len(data) < length:
            data += bytes(length - len(data))
    return data


def _read_rest(region: FileRegion, data: bytes) -> bytes:
    # pread may return less than asked (Linux caps one read at 2 GiB - 4 KiB): go on until the file ends.
    out = bytearray(data)
    position, length = region.position, region.length
    while len(out) < length:
        chunk = os.pread(region.fd, length - len(out), position + len(out))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def read_regions(regions: Sequence[FileRegion]) -> bytes:
    """The bytes of `regions` one after another (`Log.read`'s batches, of one segment or several).

    Stops after the first region the file no longer holds whole: what follows would not continue the
    batches before it. The caller sees whole batches and at most one partial one at the end, which
    `protocol.records.iter_batches` skips."""
    if len(regions) == 1:
        return read_region(regions[0])
    out = bytearray()
    for region in regions:
        data = read_region(region)
        out += data
        if len(data) < region.length:
            break
    return bytes(out)


RECENT_BATCHES = 8


class LogSegment:
    def __init__(
        self,
        directory: str,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        size: int,
        created_ms: int,
        suffix: str = "",
        file: LogFile | None = None,
        new_indexes: bool = False,
        index_maps: IndexMaps | None = None,
        missing_file: bool = False,
        indexes_absent: bool = False,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_bytes = max_index_bytes
        self.size = size
        self.created_ms = created_ms
        self.suffix = suffix
        self._file = file
        self._missing = missing_file  # the (empty) log file is created on the first append
        self.offset_index = OffsetIndex(self.path(INDEX_SUFFIX), base_offset, max_index_bytes, create=new_indexes,
                                        preallocate=False, maps=index_maps, absent=indexes_absent)
        self.time_index = TimeIndex(self.path(TIME_INDEX_SUFFIX), base_offset, max_index_bytes, create=new_indexes,
                                    preallocate=False, maps=index_maps, absent=indexes_absent)
        self.txn_index = TransactionIndex(self.path(TXN_INDEX_SUFFIX), base_offset)
        self.recovered_batches = 0  # valid batches the last `recover` found
        self._max_timestamp: int | None = -1 if new_indexes else None
        self._offset_of_max_timestamp = base_offset
        self._first_batch_timestamp: int | None = None
        self._bytes_since_last_index_entry = 0
        self._indexes_checked = new_indexes
        # The last batches appended, `(base offset, last offset, start, end)` each, newest last. A tailing
        # reader's offset falls in one of them: `_locate` finds its batch here without reading the file, and
        # translate_offset starts its walk after the newest one below the offset instead of at the sparse
        # index entry (~4 KiB of headers earlier). Replaced whole on each append (a reader in another
        # thread sees one tuple or the next), emptied when positions change.
        self._recent: tuple[tuple[int, int, int, int], ...] = ()
        self.cache_released = 0  # the page cache before this position was last handed to drop_cache

    @classmethod
    def create(cls, directory: str, base_offset: int, *, index_interval_bytes: int, max_index_bytes: int,
               now_ms: int, suffix: str = "", index_maps: IndexMaps | None = None,
               hold_open: bool = False, create_file: bool = True, in_new_directory: bool = False) -> LogSegment:
        """A new empty segment: an empty log file, held open only with `hold_open`, or created only on the
        first append without `create_file`; the index files come with the first entry, or when the
        segment goes inactive holding data. `in_new_directory`: the directory was just made, so there
        is no leftover index to empty."""
        path = os.path.join(directory, offset_file_name(base_offset, LOG_SUFFIX) + suffix)
        file = None
        if hold_open:
            file = LogFile(path, create=True)
        elif create_file:
            os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644))
        return cls(directory, base_offset, index_interval_bytes=index_interval_bytes, max_index_bytes=max_index_bytes,
                   size=0, created_ms=now_ms, suffix=suffix, file=file, new_indexes=True, index_maps=index_maps,
                   missing_file=file is None and not create_file, indexes_absent=in_new_directory)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}{', ' + self.suffix if self.suffix else ''})"

    def path(self, kind: str = LOG_SUFFIX) -> str:
        return os.path.join(self.directory, offset_file_name(self.base_offset, kind) + self.suffix)

    @property
    def file(self) -> LogFile:
        file = self._file
        if file is None and self._missing:
            self._file = LogFile(self.path(), create=True)
            self._missing = False
            return self._file
        if file is None:
            try:
                file = LogFile(self.path())
            except FileNotFoundError:
                # Deleted by the cleaner's thread meanwhile: `delete` opens the file before unlinking it.
                file = self._file
                if file is None:
                    raise
            if self._file is None:
                self._file = file
            return self._file
        return file

    @contextmanager
    def _fd(self) -> Iterator[int]:
        """The log's descriptor, without keeping a lazily loaded segment's file open afterwards. The
        LogFile is held for the duration, so another thread dropping it cannot close the descriptor."""
        file = self._file
        if file is not None:
            yield file.fd
            return
        if self._missing:
            yield -1  # no file yet, so the segment is empty: callers read nothing (no syscall on it)
            return
        fd = os.open(self.path(), os.O_RDONLY)
        try:
            yield fd
        finally:
            os.close(fd)

    def _check_indexes(self) -> None:
        """Map both indexes once, rebuilding them from the log if either fails its sanity check."""
        if self._indexes_checked:
            return
        try:
            self.offset_index.load()
            self.time_index.load()
        except CorruptIndexError:
            self.recover()
            self.on_become_inactive()
        self._indexes_checked = True

    # ------------------------------------------------------------------------------------------ timestamps

    @property
    def max_timestamp(self) -> int:
        """Largest batch timestamp in the segment (-1 if none)."""
        if self._max_timestamp is None:
            try:
                last = self.time_index.last_entry
            except CorruptIndexError:
                last = self._scan_max_timestamp(-1, self.base_offset, 0)
            self._max_timestamp, self._offset_of_max_timestamp = last
        return self._max_timestamp

    @property
    def offset_of_max_timestamp(self) -> int:
        """Last offset of the first batch that carried `max_timestamp`."""
        self.max_timestamp
        return self._offset_of_max_timestamp

    def last_modified_ms(self) -> int:
        if self._missing:
            return self.created_ms
        return int(os.stat(self.path()).st_mtime * 1000)

    def _rescan_max_timestamp(self) -> None:
        """From the last time index entry, scan the batches after it (after a truncation)."""
        self._check_indexes()
        ts, offset = self.time_index.last_entry
        position = self.offset_index.lookup(offset)[1]
        self._max_timestamp, self._offset_of_max_timestamp = self._scan_max_timestamp(ts, offset, position)

    def _scan_max_timestamp(self, timestamp: int, offset: int, position: int) -> tuple[int, int]:
        with self._fd() as fd:
            for _, header in iter_headers(fd, position, self.size):
                if header.max_timestamp > timestamp:
                    timestamp, offset = header.max_timestamp, header.last_offset
        return timestamp, offset

    def first_batch_timestamp(self) -> int:
        """maxTimestamp of the first batch (-1 for an empty segment)."""
        if self._first_batch_timestamp is None and self.size > 0:
            with self._fd() as fd:
                for _, header in iter_headers(fd, 0, self.size):
                    self._first_batch_timestamp = header.max_timestamp
                    break
        return -1 if self._first_batch_timestamp is None else self._first_batch_timestamp

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        """As Kafka: the incoming timestamp minus the first batch's, else time since the segment was created."""
        first = self.first_batch_timestamp()
        if first >= 0:
            return message_timestamp - first
        return now_ms - self.created_ms

    def should_roll(self, *, append_bytes: int, max_timestamp: int, last_offset: int, now_ms: int,
                    segment_bytes: int, segment_ms: int) -> bool:
        return (
            self.size > segment_bytes - append_bytes
            or (self.size > 0 and self.time_waited_for_roll(now_ms, max_timestamp) > segment_ms)
            or self.offset_index.is_full
            or self.time_index.is_full
            or last_offset - self.base_offset > INT32_MAX
        )

    # ---------------------------------------------------------------------------------------------- append

    def append(self, data, batches: Sequence[tuple[int, int, int, int]]) -> None:
        """Write `data` (whole batches) at the end; `batches` lists (relative position, size, last offset,
        max timestamp) of each batch in it, for the indexes."""
        position = self.size
        file = self.file
        fd = file.fd
        self._check_indexes()
        if self._max_timestamp is None:
            self.max_timestamp
        recent = self._recent
        try:
            if faults.ARMED:
                faults.check(self.directory, len(data))
            write_fully(fd, data, position)
            for rel, size, last_offset, timestamp in batches:
                self._index_batch(position + rel, size, last_offset, timestamp)
                start = position + rel
                recent += ((peek_offset_and_length(data, rel)[0], last_offset, start, start + size),)
        except OSError:
            # A full disk (ENOSPC) or a failing one (EIO), in the log file or an index: nothing of this append
            # stays (a half-written batch would be read as the log's end after a restart, and the file's
            # size must stay the segment's), and the error goes up as it is, so that whoever met it takes
            # the directory offline (Kafka's LogDirFailureChannel) rather than answering it as one bad request.
            try:
                os.ftruncate(fd, position)
            except OSError:
                pass
            raise
        self._recent = recent[-RECENT_BATCHES:]
        if self._first_batch_timestamp is None and batches:
            self._first_batch_timestamp = batches[0][3]
        self.size = position + len(data)

    def _index_batch(self, position: int, size: int, last_offset: int, timestamp: int) -> None:
        if timestamp > self.max_timestamp:  # (loaded by `append` already: one None test)
            self._max_timestamp, self._offset_of_max_timestamp = timestamp, last_offset
        if self._bytes_since_last_index_entry > self.index_interval_bytes and not self.offset_index.is_full:
            self.offset_index.append(last_offset, position)
            if not self.time_index.is_full:
                self.time_index.maybe_append(self.max_timestamp, self._offset_of_max_timestamp)
            self._bytes_since_last_index_entry = 0
        self._bytes_since_last_index_entry += size

    # ----------------------------------------------------------------------------------------------- reads

    def translate_offset(self, offset: int, end: int | None = None):
        """`(position, header)` of the first batch whose last offset is >= `offset`, or None."""
        self._check_indexes()
        for _, last, _, stop in reversed(self._recent):
            if last < offset:  # every batch up to `stop` ends before `offset`
                start = stop
                break
        else:
            start = self.offset_index.lookup(offset)[1]
        with self._fd() as fd:
            for position, header in iter_headers(fd, start, self.size if end is None else end):
                if header.last_offset >= offset:
                    return position, header
        return None

    def _locate(self, offset: int, end: int) -> tuple[int, int, int] | None:
        """translate_offset's answer as `(position, size, base offset)`, from the recent batches when the
        offset falls among them (a tailing reader's), else by walking the file."""
        found = None
        for base, last, start, stop in reversed(self._recent):
            if last < offset:
                break  # the batch after this one (if any) is the first to end at or after `offset`
            found = start, stop - start, base
        else:
            # Empty, or even the oldest recent batch ends at or after `offset`: an older one may too.
            located = self.translate_offset(offset, end)
            return None if located is None else (located[0], located[1].size, located[1].base_offset)
        return found if found is not None and found[0] + found[1] <= end else None

    def read(self, offset: int, max_bytes: int, max_position: int, *, min_one_message: bool):
        """Whole batches from the one holding `offset`: `(region, first offset)`; None if the segment has no
        batch at or after `offset`. The region is empty when nothing fits below `max_position`."""
        if self._missing:
            return None
        file = self.file
        end = self.size
        found = self._locate(offset, end)
        if found is None:
            return None
        position, size, base_offset = found
        limit = min(max_position, position + max(max_bytes, 0), end)
        if position + size > limit:
            if min_one_message and position + size <= min(max_position, end):
                limit = position + size
            else:
                return SegmentRegion(file, position, 0), base_offset
        cut = self._batch_boundary_at_most(position, limit, end)
        return SegmentRegion(file, position, cut - position), base_offset

    def _batch_boundary_at_most(self, start: int, limit: int, end: int) -> int:
        """The largest batch boundary <= `limit`, given that `start` is a boundary at or below it."""
        if limit >= end:
            return end  # the segment's end is a boundary: appends write whole batches, recovery cuts at one
        scan_from = max(start, self.offset_index.lookup_position(limit)[1])
        cut = scan_from
        with self._fd() as fd:
            for position, header in iter_headers(fd, scan_from, end):
                if position + header.size > limit:
                    break
                cut = position + header.size
        return cut

    def batch_position(self, offset: int) -> int:
        """Position of the batch holding `offset`, or the segment size if it holds none at or after it."""
        found = self.translate_offset(offset)
        return self.size if found is None else found[0]

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int) -> tuple[int, int] | None:
        """`(timestamp, offset)` of the first record at or after `starting_offset` whose timestamp is >=
        `timestamp`, or None."""
        self._check_indexes()
        indexed_offset = self.time_index.lookup(timestamp)[1]
        position = self.offset_index.lookup(max(indexed_offset, starting_offset))[1]
        with self._fd() as fd:
            for pos, header in iter_headers(fd, position, self.size):
                if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                    continue
                if header.records_count == 0:
                    continue
                for record in self._records_at(fd, pos, header.size):
                    if record.timestamp >= timestamp and record.offset >= starting_offset:
                        return record.timestamp, record.offset
        return None

    def exact_offset_of_timestamp(self, timestamp: int, batch_last_offset: int) -> int:
        """Offset of the first record with `timestamp` in the batch ending at `batch_last_offset`."""
        found = self.translate_offset(batch_last_offset)
        if found is None:
            return batch_last_offset
        position, header = found
        with self._fd() as fd:
            for record in self._records_at(fd, position, header.size):
                if record.timestamp == timestamp:
                    return record.offset
        return batch_last_offset

    def read_at(self, position: int, size: int) -> bytes:
        """`size` bytes from `position` (one batch, e.g. a control batch whose record a replay needs)."""
        with self._fd() as fd:
            return os.pread(fd, size, position)

    @staticmethod
    def _records_at(fd: int, position: int, size: int):
        data = os.pread(fd, size, position)
        try:
            return list(iter_records(data, max_uncompressed_bytes=MAX_UNCOMPRESSED_BATCH_BYTES))
        except CorruptRecordError:
            return []

    def headers(self, start_position: int = 0):
        """`(position, header)` of every batch from `start_position`."""
        if start_position >= self.size:
            return
        with self._fd() as fd:
            yield from iter_headers(fd, start_position, self.size)

    def batches(self, *, block_bytes: int):
        """`(position, bytes)` of every whole batch, read in blocks of `block_bytes` (the file stays open
        while the iteration runs, even if the segment is deleted or closed meanwhile)."""
        if self._missing:
            return
        file = self.file
        yield from iter_batches(file.fd, 0, self.size, block_bytes=block_bytes)

    def read_next_offset(self) -> int:
        """The offset after the last batch: the last index entry, then a short walk."""
        if self.size == 0:
            return self.base_offset
        try:
            _, position = self.offset_index.last_entry
        except CorruptIndexError:
            position = 0
        if position > self.size:
            position = 0
        next_offset = None
        with self._fd() as fd:
            for _, header in iter_headers(fd, position, self.size):
                next_offset = header.next_offset
        if next_offset is None and position > 0:
            with self._fd() as fd:
                for _, header in iter_headers(fd, 0, self.size):
                    next_offset = header.next_offset
        return self.base_offset if next_offset is None else next_offset

    # ------------------------------------------------------------------------------------------- recovery

    def recover(self) -> int:
        """Validate every batch, rebuild both indexes and cut the file at the first invalid or partial
        batch. Returns the number of bytes cut."""
        self.offset_index.recreate()
        self.time_index.recreate()
        self._max_timestamp, self._offset_of_max_timestamp = -1, self.base_offset
        self._bytes_since_last_index_entry = 0
        self._first_batch_timestamp = None
        self._recent = ()
        self._indexes_checked = True
        file = self._file
        if file is None and self._missing:
            self.size = 0
            self.recovered_batches = 0
            return 0
        fd = file.fd if file is not None else os.open(self.path(), os.O_RDWR)
        try:
            file_size = os.fstat(fd).st_size
            valid_end = 0
            batches = 0
            expected_min_offset = self.base_offset
            for position, batch in iter_batches(fd, 0, file_size):
                try:
                    header = check_stored_batch(batch)
                except CorruptRecordError:
                    break
                if header.base_offset < expected_min_offset or header.last_offset - self.base_offset > INT32_MAX:
                    break
                self._index_batch(position, header.size, header.last_offset, header.max_timestamp)
                valid_end = position + header.size
                batches += 1
                expected_min_offset = header.next_offset
            self.recovered_batches = batches  # for the recovery's log line (storage/log.py)
            if valid_end < file_size:
                os.ftruncate(fd, valid_end)
            if file is None and file_size:
                # Not held open, so `flush` will not see it: what was validated (maybe only in the page cache
                # after a process crash) or cut is made durable here, before the recovery point passes it.
                os.fdatasync(fd)
        finally:
            if file is None:
                os.close(fd)
        self.size = valid_end
        return file_size - valid_end

    def truncate_to(self, offset: int) -> int:
        """Remove the batches whose last offset is >= `offset`. Returns the bytes removed."""
        found = self.translate_offset(offset)
        if found is None:
            return 0
        position = found[0]
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        os.ftruncate(self.file.fd, position)
        removed = self.size - position
        self.size = position
        self._bytes_since_last_index_entry = 0
        self._first_batch_timestamp = None
        self._recent = ()
        self._rescan_max_timestamp()
        return removed

    # ---------------------------------------------------------------------------------------- life cycle

    def on_become_inactive(self) -> None:
        """Record the largest timestamp as the time index's last entry, trim both indexes and unmap them
        (a later lookup maps them again)."""
        timestamp = self._max_timestamp
        if timestamp is not None and timestamp > self.time_index.last_entry[0]:
            self.time_index.maybe_append(timestamp, self._offset_of_max_timestamp, skip_full_check=True)
        for index in (self.offset_index, self.time_index):
            index.trim(create=self.size > 0)
            index.release()

    def flush(self) -> None:
        file = self._file
        if file is not None:
            os.fdatasync(file.fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Trim the indexes and release the maps; the file closes once no region holds it."""
        self.on_become_inactive()
        self.offset_index.close()
        self.time_index.close()
        self._file = None

    def rename_suffix(self, suffix: str) -> None:
        """Rename the files from the current transient suffix to `suffix`; the log file goes last."""
        old_log = self.path()
        self.suffix = suffix
        self.offset_index.rename(self.path(INDEX_SUFFIX))
        self.time_index.rename(self.path(TIME_INDEX_SUFFIX))
        self.txn_index.rename(self.path(TXN_INDEX_SUFFIX))
        if not self._missing:
            os.replace(old_log, self.path())

    def delete(self) -> None:
        """Unlink the files. Whoever still holds this segment (a reader's snapshot of the segment list, the
        cleaner) keeps reading it: the log file is opened first if it was not, so the data outlives its
        name, and index maps are released only when the segment object goes."""
        if not self._missing:
            try:
                self.file
            except FileNotFoundError:
                pass
        self.offset_index.delete()
        self.time_index.delete()
        for kind in (LOG_SUFFIX, TXN_INDEX_SUFFIX):
            try:
                os.unlink(self.path(kind))
            except FileNotFoundError:
                pass
