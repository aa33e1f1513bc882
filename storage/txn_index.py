"""The aborted-transaction index of one segment (`<base offset>.txnindex`), Kafka's TransactionIndex.

Theory of operation
-------------------
Each entry is one aborted transaction whose ABORT marker was written in this segment (the transaction's
data may begin in an earlier segment): version int16 = 0 | producerId int64 | firstOffset int64 |
lastOffset int64 (the marker's offset) | lastStableOffset int64 (the LSO right after the abort), 34 bytes,
big-endian, appended in marker order. A read_committed fetch of [fetch offset, upper bound) collects the
entries that overlap it, segment after segment from the one holding the fetch offset, and stops at the
first entry whose last stable offset reaches the upper bound: no transaction aborted later can have
begun below it (`collect`).

The file is created with the first entry and the entries are kept in memory once read (the file is only
ever changed through this object), so a fetch does no I/O for it. A torn trailing entry (crash mid-write)
is ignored; recovery rebuilds the index of every segment it replays.
"""

from __future__ import annotations

import bisect
import os
import struct
import threading
from typing import NamedTuple

from .errors import KafkaStorageError

TXN_INDEX_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
_FIRST_LOAD = threading.Lock()


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None

    @property
    def entries(self) -> list[AbortedTxn]:
        entries = self._entries
        if entries is None:
            loaded = _read_entries(self.path)
            with _FIRST_LOAD:  # the cleaner's thread may load it too: the first list set is the one kept
                if self._entries is None:
                    self._entries = loaded
                entries = self._entries
        return entries

    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries
        if entries and entries[-1].last_offset >= txn.last_offset:
            raise ValueError(f"aborted transaction ending at {txn.last_offset} does not follow the last one "
                             f"({entries[-1].last_offset}) in {self.path}")
        data = _ENTRY.pack(TXN_INDEX_VERSION, *txn)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as e:
            raise KafkaStorageError(f"cannot append to {self.path}: {e}") from e
        self._entries = entries + [txn]  # (a new list: a reader in another thread keeps the one it took)

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [fetch_offset, upper_bound_offset), and whether the search is complete.

        Kafka walks every entry; entries are in marker order, so those ending before `fetch_offset` are a
        prefix, skipped here by bisection (a tailing reader of a segment with many aborts does not walk
        them all). Their last stable offsets never decrease (an abort's LSO is the start of an older open
        transaction or its own end), so the prefix's last entry says whether Kafka's walk would have
        stopped in it; either way the entries found are the same."""
        entries = self.entries
        start = bisect.bisect_left(entries, fetch_offset, key=_last_offset)
        if start and entries[start - 1].last_stable_offset >= upper_bound_offset:
            return [], True
        found = []
        for txn in entries[start:] if start else entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or above `offset`."""
        entries = self.entries
        keep = [t for t in entries if t.last_offset < offset]
        if len(keep) != len(entries):
            self._rewrite(keep)

    def reset(self) -> None:
        if self.entries or os.path.exists(self.path):
            self._rewrite([])

    def _rewrite(self, entries: list[AbortedTxn]) -> None:
        try:
            if entries:
                with open(self.path, "r+b") as f:
                    f.truncate(len(entries) * ENTRY_SIZE)
            else:
                _unlink(self.path)
        except OSError as e:
            raise KafkaStorageError(f"cannot truncate {self.path}: {e}") from e
        self._entries = entries

    def flush(self) -> None:
        if self._entries:
            try:
                fd = os.open(self.path, os.O_RDONLY)
            except FileNotFoundError:
                return
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def rename(self, path: str) -> None:
        if os.path.exists(self.path):
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        _unlink(self.path)


def _last_offset(txn: AbortedTxn) -> int:
    return txn.last_offset


def _read_entries(path: str) -> list[AbortedTxn]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    whole = len(data) - len(data) % ENTRY_SIZE
    if whole < len(data):  # a torn last entry (crash mid-append): cut it, so later entries stay aligned
        os.truncate(path, whole)
    entries = []
    for pos in range(0, whole, ENTRY_SIZE):
        version, *fields = _ENTRY.unpack_from(data, pos)
        if version != TXN_INDEX_VERSION:
            raise KafkaStorageError(f"unexpected aborted transaction version {version} in {path}")
        entries.append(AbortedTxn(*fields))
    return entries


def encode_entries(entries) -> bytes:
    return b"".join(_ENTRY.pack(TXN_INDEX_VERSION, *t) for t in entries)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
