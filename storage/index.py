"""The sparse offset index and the time index of a segment.

Both are arrays of fixed-width big-endian entries, as in Kafka:

    .index      relative offset int32 | position int32        (8 bytes)   offset -> file position
    .timeindex  timestamp int64       | relative offset int32 (12 bytes)  timestamp -> offset

Theory of operation
-------------------
An index is written only while its segment is active. A new segment's index has no file yet (a missing
file reads as an empty index); the first entry creates the file, preallocated to `segment.index.bytes`
with ftruncate (a sparse file), and maps it read-write; entries are packed into the map. When the segment
stops being written (roll, close) the file is trimmed to the entries it holds and unmapped, so the number
of entries of any index at rest is its length divided by the entry size; `trim` also creates the (empty)
file of a segment that holds data, so that only empty segments go without index files. The one index
that can be found untrimmed is that of a segment past the recovery point after a crash, and recovery
rebuilds it. (`create=True` with the default `preallocate` creates the file preallocated at once.)

Nothing is opened until needed: `entries` and `last_entry` on an index that is not mapped read the file
length and the last entry with plain syscalls, and lookups in an empty index answer without any file, so
opening or creating thousands of partitions maps no index at all. The map is created on the first lookup
in a non-empty index or the first append. CPython's mmap keeps a duplicate descriptor open, so a mapped
index costs one descriptor: `IndexMaps` bounds how many are mapped at once (a log manager shares one among
all its logs) and unmaps the least recently used beyond its capacity. Unmapping loses nothing: the pages
stay in the page cache, and `flush` fsyncs through a fresh descriptor what a map no longer open wrote.
An index remembers whether it changed since its last `flush` and flushes only then.

The indexes sharing an `IndexMaps` share its lock, held while a map is used, made or closed: the cleaner
reads and writes indexes in a worker thread, and mapping an index there may unmap another that the event
loop is using. (Each hold is a lookup or an append: microseconds. One lock per index would cost memory
per partition and a try-lock dance on eviction.) A deleted index keeps its map, if it had one, for
readers still holding it, and is never unmapped by the LRU; one without a map becomes an empty index
(lookups then start at the segment's first batch).

Offset index entries map the *last* offset of a batch to the batch's position (as Kafka does since v2), so
the entry for a batch never refers to offsets that truncating the batch would remove. Time index entries
hold the largest timestamp seen so far and the last offset of the batch that carried it; an entry is added
only when that timestamp grows, and one extra slot is kept free for the final entry written when the
segment becomes inactive, so the last entry of an inactive segment's time index is its largest timestamp.
"""

from __future__ import annotations

import mmap
import os
import resource
import struct
import threading
from collections import OrderedDict

_MADV_RANDOM = getattr(mmap, "MADV_RANDOM", None)  # not on every platform
_BACK_BYTES = 64 * 1024


class CorruptIndexError(Exception):
    """An index file fails its sanity check; the owner rebuilds it from the log."""


def default_max_open_maps() -> int:
    """A quarter of the soft descriptor limit, between 64 and 4,096 maps."""
    try:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (OSError, ValueError):
        soft = 1024
    if soft == resource.RLIM_INFINITY or soft <= 0:
        soft = 1 << 16
    return max(64, min(4096, soft // 4))


class IndexMaps:
    """The index maps open at once, least recently used first. Mapping one more than `capacity` unmaps
    the oldest (each map holds a descriptor). `lock` guards the maps of every index sharing this."""

    __slots__ = ("capacity", "lock", "_lru")

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = max(2, default_max_open_maps() if capacity is None else capacity)
        self.lock = threading.RLock()
        self._lru: OrderedDict[_IndexFile, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._lru)

    def opened(self, index: _IndexFile) -> None:
        """`index` has just been mapped (lock held): unmap the least recently used beyond capacity."""
        lru = self._lru
        lru[index] = None
        while len(lru) > self.capacity:
            victim = next(iter(lru))
            if victim is index:
                break
            victim._unmap()

    def used(self, index: _IndexFile) -> None:
        """Lock held."""
        try:
            self._lru.move_to_end(index)
        except KeyError:
            pass

    def forget(self, index: _IndexFile) -> None:
        """Lock held."""
        self._lru.pop(index, None)


# Indexes created without an explicit IndexMaps (logs opened outside a LogManager) share this one.
SHARED_MAPS = IndexMaps()


class _IndexFile:
    ENTRY: struct.Struct

    __slots__ = ("path", "base_offset", "entry_size", "max_entries", "_maps", "_mm", "_length", "_entries",
                 "_checked", "_deleted", "_unsynced", "_tail", "_backed")

    def __init__(self, path: str, base_offset: int, max_index_bytes: int, *, create: bool = False,
                 preallocate: bool = True, maps: IndexMaps | None = None, absent: bool = False) -> None:
        self.path = path
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self.max_entries = max(1, max_index_bytes // self.entry_size)
        self._maps = SHARED_MAPS if maps is None else maps
        self._mm: mmap.mmap | None = None
        self._length: int | None = None  # the file's length, once known
        self._entries: int | None = None
        self._checked = False
        self._deleted = False
        self._unsynced = False  # the file changed since the last flush
        self._tail: tuple | None = None  # the last entry as written by this process (None: read it from the file)
        self._backed = 0  # the file's first bytes known to have disk blocks (see _back)
        if create:
            self._create(preallocate, absent)  # (no lock: no other thread knows this index yet)

    def _create(self, preallocate: bool, absent: bool = False) -> None:
        """A new, empty index: the file preallocated (sparse) to its full size, or no file until the first
        entry. A leftover at the same path is emptied; that has to reach the disk with the next flush.
        `absent`: the caller knows there is no file (its directory was just made), so none is looked for."""
        self._unmap()
        length = self.max_entries * self.entry_size if preallocate else 0
        if absent and not length:
            self._length = self._entries = self._backed = 0
            self._checked = True
            return
        try:
            fd = os.open(self.path, os.O_RDWR | (os.O_CREAT if length else 0), 0o644)
        except FileNotFoundError:
            fd = -1
        existed = 0
        if fd >= 0:
            try:
                existed = os.fstat(fd).st_size
                if existed:
                    os.ftruncate(fd, 0)
                if length:
                    os.ftruncate(fd, length)
            finally:
                os.close(fd)
        self._length = length
        self._entries = 0
        self._backed = 0
        self._checked = True
        self._unsynced = self._unsynced or existed > 0

    def recreate(self) -> None:
        """Start over with an empty file (recovery rebuilding the index); the first entry preallocates it."""
        with self._maps.lock:
            self._create(preallocate=False)

    @property
    def _mapped(self) -> bool:
        return self._mm is not None

    # ---------------------------------------------------------------------------------- file and map

    def _file_length(self) -> int:
        length = self._length
        if length is None:
            try:
                length = os.stat(self.path).st_size
            except FileNotFoundError:
                length = 0
            self._length = length
        return length

    def _view(self) -> mmap.mmap:
        """The map of the whole file, made if needed (lock held, file not empty)."""
        mm = self._mm
        if mm is None:
            fd = os.open(self.path, os.O_RDWR)
            try:
                mm = mmap.mmap(fd, self._file_length())
            finally:
                os.close(fd)
            if _MADV_RANDOM is not None:
                # Appends touch one new page at a time and lookups binary-search: neither gains from the
                # kernel's read-around on a fault, which on a fresh (sparse) index fills 32+ page-cache
                # pages at the first entry. Measured on the bench VM: the first entry of a segment cost
                # ~2.5 ms per index (the producer's one 7 ms acknowledgement after ~24 records at 50
                # msg/s); with this, ~0.03 ms.
                mm.madvise(_MADV_RANDOM)
            self._mm = mm
            self._maps.opened(self)
        else:
            self._maps.used(self)
        return mm

    def _back(self, end: int) -> None:
        """Give the file disk blocks up to `end` (and up to `_BACK_BYTES` beyond, within the file) before the
        map writes there. The file is sparse; a store into a page of it that the file system cannot back
        (a full disk, a tmpfs at its size limit) is not an error a write could return but SIGBUS, which
        kills the process. posix_fallocate turns that into an OSError(ENOSPC) here, which the append
        answers like any other I/O error (the log directory goes offline). Once per `_BACK_BYTES` of index
        (64 KiB: some 8,000 entries), a no-op where the blocks exist already."""
        limit = self._file_length()
        start = self._backed
        stop = min(limit, max(end, start + _BACK_BYTES))
        if stop <= start:
            return
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, start, stop - start)
        finally:
            os.close(fd)
        self._backed = stop

    def _resize(self, length: int) -> None:
        """Set the file's length, creating it if needed (unmapped first; mapped again on next use). Lock held."""
        self._unmap()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, length)
        finally:
            os.close(fd)
        self._length = length
        self._backed = min(self._backed, length)
        self._unsynced = True

    def _unmap(self) -> None:
        mm = self._mm
        if mm is not None:
            self._mm = None
            self._maps.forget(self)
            mm.close()

    def release(self) -> None:
        """Unmap now (the segment went inactive); the next lookup maps the file again."""
        with self._maps.lock:
            if not self._deleted:
                self._unmap()

    # ----------------------------------------------------------------------------------------- checks

    def load(self) -> None:
        """Check the file once (length, last entry); raises CorruptIndexError. Maps nothing: the map is
        made on the first lookup that needs it."""
        if self._checked:
            return
        with self._maps.lock:
            if self._checked:
                return
            length = self._file_length()
            if length % self.entry_size:
                raise CorruptIndexError(f"{self.path}: length {length} is not a multiple of {self.entry_size}")
            if self._entries is None:
                self._entries = length // self.entry_size
            self._sanity_check()
            self._checked = True

    def _sanity_check(self) -> None:
        if self._entries and self._relative_offset(self._entries - 1) < 0:
            raise CorruptIndexError(f"{self.path}: last entry precedes the base offset")

    @property
    def entries(self) -> int:
        if self._entries is None:
            length = self._file_length()
            if length % self.entry_size:
                raise CorruptIndexError(f"{self.path}: length {length} is not a multiple of {self.entry_size}")
            self._entries = length // self.entry_size
        return self._entries

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    @property
    def size_bytes(self) -> int:
        return self.entries * self.entry_size

    def _entry(self, slot: int) -> tuple:
        """Entry `slot`, from the map if there is one, else with a pread (lock held)."""
        mm = self._mm
        if mm is not None:
            return self.ENTRY.unpack_from(mm, slot * self.entry_size)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            data = os.pread(fd, self.entry_size, slot * self.entry_size)
        finally:
            os.close(fd)
        if len(data) != self.entry_size:
            raise CorruptIndexError(f"{self.path}: short read of entry {slot}")
        return self.ENTRY.unpack(data)

    def _last(self) -> tuple | None:
        tail = self._tail
        if tail is not None:
            return tail
        n = self.entries
        if n == 0:
            return None
        with self._maps.lock:
            return self._entry(n - 1)

    def _relative_offset(self, slot: int) -> int:
        raise NotImplementedError

    def _largest_at_most(self, key, target: int) -> int:
        """Slot of the last entry whose key is <= target (keys ascend), or -1. Lock held; maps the file."""
        n = self.entries
        if n == 0:
            return -1
        self._view()
        if key(0) > target:
            return -1
        lo, hi = 0, n - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if key(mid) <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _count_below_offset(self, offset: int) -> int:
        self.load()
        with self._maps.lock:
            return self._largest_at_most(self._relative_offset, offset - self.base_offset - 1) + 1

    # ------------------------------------------------------------------------------------- changes

    def truncate_to(self, offset: int) -> None:
        """Remove every entry for an offset >= `offset`."""
        with self._maps.lock:
            self._entries = self._count_below_offset(offset)
            self._tail = None

    def make_writable(self) -> None:
        """Grow the file to its preallocated size and map it, so entries can be appended."""
        self.load()
        with self._maps.lock:
            full = self.max_entries * self.entry_size
            if self._file_length() < full:
                self._resize(full)
            self._view()

    def trim(self, *, create: bool = True) -> None:
        """Shrink the file to the entries it holds (on roll and close). A missing file is created (empty)
        unless `create` is false (the segment holds no data: no index file is as good as an empty one)."""
        with self._maps.lock:
            if self._deleted or self._entries is None:
                return
            want = self._entries * self.entry_size
            if self._file_length() != want:
                self._resize(want)
            elif not want and create:
                os.close(os.open(self.path, os.O_RDONLY | os.O_CREAT, 0o644))

    def flush(self) -> None:
        """Make what changed since the last flush durable."""
        with self._maps.lock:
            if not self._unsynced:
                return
            if not self._deleted:
                if self._mm is not None:
                    self._mm.flush()
                else:
                    try:
                        fd = os.open(self.path, os.O_RDONLY)
                    except FileNotFoundError:
                        fd = -1
                    if fd >= 0:
                        try:
                            os.fsync(fd)
                        finally:
                            os.close(fd)
            self._unsynced = False

    def close(self) -> None:
        with self._maps.lock:
            if self._mm is not None:
                self._maps.forget(self)
                mm, self._mm = self._mm, None
                mm.close()

    def rename(self, path: str) -> None:
        with self._maps.lock:
            if os.path.exists(self.path):
                os.replace(self.path, path)
            self.path = path

    def delete(self) -> None:
        """Unlink the file. A map already made stays valid for readers still holding the index; without
        one it becomes an empty index (lookups then start at the segment's first batch)."""
        with self._maps.lock:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            self._maps.forget(self)
            if self._mm is None:
                self._entries, self._length = 0, 0
                self._tail = None
            self._deleted = True
            self._checked = True
            self._unsynced = False

    def _append_entry(self, *fields, final: bool = False) -> None:
        """Lock held. The `final` entry of a segment going inactive is written with a pwrite if the index is
        not mapped: preallocating and mapping a file for one entry, to trim it right after, costs more."""
        entries = self.entries
        if final and self._mm is None:
            end = (entries + 1) * self.entry_size
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.pwrite(fd, self.ENTRY.pack(*fields), entries * self.entry_size)
                length = self._file_length() if self._length is not None else os.fstat(fd).st_size
            finally:
                os.close(fd)
            self._length = max(length, end)
            self._entries = entries + 1
            self._tail = fields
            self._unsynced = True
            return
        known_length = self._length
        if known_length is None or known_length < (entries + 1) * self.entry_size:
            if self._file_length() < (entries + 1) * self.entry_size:
                self._resize(max(self.max_entries, entries + 1) * self.entry_size)
        end = (entries + 1) * self.entry_size
        if end > self._backed:
            self._back(end)
        mm = self._mm
        if mm is None:
            mm = self._view()
        else:
            self._maps.used(self)
        self.ENTRY.pack_into(mm, entries * self.entry_size, *fields)
        self._entries = entries + 1
        self._tail = fields
        self._unsynced = True


class OffsetIndex(_IndexFile):
    ENTRY = struct.Struct(">ii")
    __slots__ = ()

    def _relative_offset(self, slot: int) -> int:
        return self._entry(slot)[0]

    def _position(self, slot: int) -> int:
        return self._entry(slot)[1]

    def lookup(self, offset: int) -> tuple[int, int]:
        """`(offset, position)` of the last entry with offset <= `offset`, else `(base_offset, 0)`."""
        self.load()
        with self._maps.lock:
            slot = self._largest_at_most(self._relative_offset, offset - self.base_offset)
            if slot < 0:
                return self.base_offset, 0
            rel, pos = self._entry(slot)
        return self.base_offset + rel, pos

    def lookup_position(self, position: int) -> tuple[int, int]:
        """`(offset, position)` of the last entry with position <= `position`, else `(base_offset, 0)`."""
        self.load()
        with self._maps.lock:
            slot = self._largest_at_most(self._position, position)
            if slot < 0:
                return self.base_offset, 0
            rel, pos = self._entry(slot)
        return self.base_offset + rel, pos

    @property
    def last_entry(self) -> tuple[int, int]:
        last = self._last()
        if last is None:
            return self.base_offset, 0
        rel, pos = last
        return self.base_offset + rel, pos

    def append(self, offset: int, position: int) -> None:
        if not self._checked:
            self.load()
        with self._maps.lock:
            if self.is_full:
                raise ValueError(f"{self.path}: offset index is full")
            if self._entries and offset <= self.last_entry[0]:
                raise ValueError(f"{self.path}: offset {offset} is not above the last indexed offset")
            self._append_entry(offset - self.base_offset, position)


class TimeIndex(_IndexFile):
    ENTRY = struct.Struct(">qi")
    __slots__ = ()

    def _relative_offset(self, slot: int) -> int:
        return self._entry(slot)[1]

    def _timestamp(self, slot: int) -> int:
        return self._entry(slot)[0]

    @property
    def is_full(self) -> bool:
        return self.entries >= self.max_entries - 1

    @property
    def last_entry(self) -> tuple[int, int]:
        """`(timestamp, offset)` of the last entry, else `(-1, base_offset)`."""
        last = self._last()
        if last is None:
            return -1, self.base_offset
        ts, rel = last
        return ts, self.base_offset + rel

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """`(timestamp, offset)` of the last entry with timestamp <= `timestamp`, else `(-1, base_offset)`."""
        self.load()
        with self._maps.lock:
            slot = self._largest_at_most(self._timestamp, timestamp)
            if slot < 0:
                return -1, self.base_offset
            ts, rel = self._entry(slot)
        return ts, self.base_offset + rel

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> bool:
        if not self._checked:
            self.load()
        with self._maps.lock:
            if not skip_full_check and self.is_full:
                raise ValueError(f"{self.path}: time index is full")
            if self._entries and not skip_full_check and self._tail is None:
                self._view()  # the last entry is read from the map, which the append needs anyway
            last_ts, last_offset = self.last_entry
            if self._entries and offset < last_offset:
                raise ValueError(f"{self.path}: offset {offset} is below the last indexed offset {last_offset}")
            if timestamp <= last_ts:
                return False
            if self.entries >= self.max_entries:
                return False
            self._append_entry(timestamp, offset - self.base_offset, final=skip_full_check)
            return True
