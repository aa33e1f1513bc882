"""The sparse offset index and the time index of a segment.

Both are arrays of fixed-width big-endian entries, as in Kafka:

    .index      relative offset int32 | position int32        (8 bytes)   offset -> file position
    .timeindex  timestamp int64       | relative offset int32 (12 bytes)  timestamp -> offset

Theory of operation
-------------------
An index is written only while its segment is active. It is then preallocated to `segment.index.bytes`
with ftruncate (a sparse file) and mmap'd read-write; entries are packed into the map. When the segment
stops being written (roll, close) the file is trimmed to the entries it holds, so the number of entries of
any index at rest is its length divided by the entry size. The one index that can be found untrimmed is
that of a segment past the recovery point after a crash, and recovery rebuilds it.

Nothing is opened until needed: `entries` and `last_entry` on an index that is not mapped read the file
length and the last entry with plain syscalls, so opening thousands of partitions maps no index at all.
The map is created on the first lookup or append. (CPython's mmap keeps a duplicate descriptor open, so a
mapped index costs one descriptor.)

Offset index entries map the *last* offset of a batch to the batch's position (as Kafka does since v2), so
the entry for a batch never refers to offsets that truncating the batch would remove. Time index entries
hold the largest timestamp seen so far and the last offset of the batch that carried it; an entry is added
only when that timestamp grows, and one extra slot is kept free for the final entry written when the
segment becomes inactive, so the last entry of an inactive segment's time index is its largest timestamp.
"""

from __future__ import annotations

import mmap
import os
import struct


class CorruptIndexError(Exception):
    """An index file fails its sanity check; the owner rebuilds it from the log."""


class _IndexFile:
    ENTRY: struct.Struct

    def __init__(self, path: str, base_offset: int, max_index_bytes: int, *, create: bool = False) -> None:
        self.path = path
        self.base_offset = base_offset
        self.entry_size = self.ENTRY.size
        self.max_entries = max(1, max_index_bytes // self.entry_size)
        self._mm: mmap.mmap | None = None
        self._length = 0
        self._entries: int | None = None
        self._mapped = False
        self._deleted = False
        if create:
            self.recreate()

    def recreate(self) -> None:
        """Start over with an empty, preallocated file (a new segment, or recovery rebuilding the index)."""
        self.close()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.close(fd)
        self._entries = 0
        self._map(self.max_entries * self.entry_size)

    def _map(self, length: int) -> None:
        """(Re)map the file at `length` bytes, resizing it first."""
        if self._deleted:
            return
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size != length:
                os.ftruncate(fd, length)
            if length:
                self._mm = mmap.mmap(fd, length)
        finally:
            os.close(fd)
        self._length = length
        self._mapped = True

    def load(self) -> None:
        """Map the file and check it; raises CorruptIndexError."""
        if self._mapped:
            return
        length = self._file_length()
        if length % self.entry_size:
            raise CorruptIndexError(f"{self.path}: length {length} is not a multiple of {self.entry_size}")
        self._entries = length // self.entry_size
        self._map(length)
        self._sanity_check()

    def _file_length(self) -> int:
        try:
            return os.stat(self.path).st_size
        except FileNotFoundError:
            return 0

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

    def _relative_offset(self, slot: int) -> int:
        raise NotImplementedError

    def _largest_at_most(self, key, target: int) -> int:
        """Slot of the last entry whose key is <= target (keys ascend), or -1."""
        n = self.entries
        if n == 0 or key(0) > target:
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
        return self._largest_at_most(self._relative_offset, offset - self.base_offset - 1) + 1

    def truncate_to(self, offset: int) -> None:
        """Remove every entry for an offset >= `offset`."""
        self._entries = self._count_below_offset(offset)

    def make_writable(self) -> None:
        """Grow the file to its preallocated size so entries can be appended."""
        self.load()
        if self._length < self.max_entries * self.entry_size:
            self._map(self.max_entries * self.entry_size)

    def trim(self) -> None:
        """Shrink the file to the entries it holds (on roll and close)."""
        if self._mapped and self._length != self.entries * self.entry_size:
            self._map(self.entries * self.entry_size)

    def flush(self) -> None:
        if self._mm is not None:
            self._mm.flush()

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        self._mapped = False

    def rename(self, path: str) -> None:
        if os.path.exists(self.path):
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        """Unlink the file. A map already made stays valid for readers still holding the index; one never
        made becomes an empty index (lookups then start at the segment's first batch)."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
        if not self._mapped:
            self._entries, self._length, self._mapped = 0, 0, True
        self._deleted = True

    def _append_entry(self, *fields) -> None:
        if self._length < (self.entries + 1) * self.entry_size:
            self.make_writable()
        self.ENTRY.pack_into(self._mm, self._entries * self.entry_size, *fields)
        self._entries += 1


class OffsetIndex(_IndexFile):
    ENTRY = struct.Struct(">ii")

    def _relative_offset(self, slot: int) -> int:
        return self._entry(slot)[0]

    def _position(self, slot: int) -> int:
        return self._entry(slot)[1]

    def lookup(self, offset: int) -> tuple[int, int]:
        """`(offset, position)` of the last entry with offset <= `offset`, else `(base_offset, 0)`."""
        self.load()
        slot = self._largest_at_most(self._relative_offset, offset - self.base_offset)
        if slot < 0:
            return self.base_offset, 0
        rel, pos = self._entry(slot)
        return self.base_offset + rel, pos

    def lookup_position(self, position: int) -> tuple[int, int]:
        """`(offset, position)` of the last entry with position <= `position`, else `(base_offset, 0)`."""
        self.load()
        slot = self._largest_at_most(self._position, position)
        if slot < 0:
            return self.base_offset, 0
        rel, pos = self._entry(slot)
        return self.base_offset + rel, pos

    @property
    def last_entry(self) -> tuple[int, int]:
        n = self.entries
        if n == 0:
            return self.base_offset, 0
        rel, pos = self._entry(n - 1)
        return self.base_offset + rel, pos

    def append(self, offset: int, position: int) -> None:
        self.load()
        if self.is_full:
            raise ValueError(f"{self.path}: offset index is full")
        if self._entries and offset <= self.last_entry[0]:
            raise ValueError(f"{self.path}: offset {offset} is not above the last indexed offset")
        self._append_entry(offset - self.base_offset, position)


class TimeIndex(_IndexFile):
    ENTRY = struct.Struct(">qi")

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
        n = self.entries
        if n == 0:
            return -1, self.base_offset
        ts, rel = self._entry(n - 1)
        return ts, self.base_offset + rel

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """`(timestamp, offset)` of the last entry with timestamp <= `timestamp`, else `(-1, base_offset)`."""
        self.load()
        slot = self._largest_at_most(self._timestamp, timestamp)
        if slot < 0:
            return -1, self.base_offset
        ts, rel = self._entry(slot)
        return ts, self.base_offset + rel

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> bool:
        self.load()
        if not skip_full_check and self.is_full:
            raise ValueError(f"{self.path}: time index is full")
        last_ts, last_offset = self.last_entry
        if self._entries and offset < last_offset:
            raise ValueError(f"{self.path}: offset {offset} is below the last indexed offset {last_offset}")
        if timestamp <= last_ts:
            return False
        if self._entries >= self.max_entries:
            return False
        self._append_entry(timestamp, offset - self.base_offset)
        return True
