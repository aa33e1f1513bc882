"""The replicated log as the Raft core sees it, and an in-memory implementation with a durability point.

The core speaks to its log through `RaftLog`, shaped after `storage.log.Log` so that the real log can
stand behind it with a thin adapter: batches are Kafka record batches (magic 2), the leader appends with
its epoch and the log stamps offsets and the partitionLeaderEpoch (`Log.append(..., leader_epoch=)`),
a follower appends batches that already carry offsets (`Log.append_as_follower`), `truncate_to`,
`end_offset_for_epoch` with the leader-epoch cache's semantics (`LeaderEpochCache.end_offset_for`),
`log_start_offset` and `flush`. `flushed_end_offset` is the recovery point: what survives a crash.
The methods storage needs a clock for (segment rolls, file times) take `now_ms`, which the core passes
from the time it was given.
Snapshots (`SnapshotId` = end offset and the epoch of the record before it, as Kafka's OffsetAndEpoch)
are opaque bytes owned by the upper layer; storing one is durable before it returns.

`MemoryRaftLog` keeps batches in a list and splits its state into what is flushed and what is not:
`crash()` returns a fresh log holding only what was flushed (and every stored snapshot), which is how
the simulation models losing a process without fsync.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from odradek.protocol.records import iter_batches, stamp_offset_and_epoch
from odradek.storage.leader_epoch import UNDEFINED_EPOCH, LeaderEpochCache


class SnapshotId(NamedTuple):
    """Kafka's OffsetAndEpoch for a snapshot: it holds the state of offsets [0, end_offset)."""

    end_offset: int
    epoch: int


class AppendedRange(NamedTuple):
    first_offset: int
    last_offset: int


class RaftLog(Protocol):
    """What the Raft core needs from the `__cluster_metadata` log."""

    @property
    def log_start_offset(self) -> int: ...
    @property
    def log_end_offset(self) -> int: ...
    @property
    def flushed_end_offset(self) -> int:
        """Everything below this offset survives a crash (storage's recovery point after a flush)."""
    @property
    def latest_epoch(self) -> int:
        """The epoch of the last batch in the log, UNDEFINED_EPOCH (-1) when the log holds none."""

    def append_as_leader(self, batches: bytes, epoch: int, *, now_ms: int) -> AppendedRange:
        """Assign offsets from log_end_offset and stamp `epoch` into every batch."""
    def append_as_follower(self, batches: bytes, *, now_ms: int) -> AppendedRange:
        """Append batches that carry their offsets and epochs; the first must start at log_end_offset."""
    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the one holding `offset` (at least one batch when any, even over max_bytes)."""
    def truncate_to(self, offset: int) -> None:
        """Remove everything at and above `offset` (durably: the log never grows back after a crash)."""
    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(largest epoch <= epoch, its end offset) as `LeaderEpochCache.end_offset_for`; (-1, -1) if unknown."""
    def epoch_for_offset(self, offset: int) -> int: ...
    def flush(self, *, now_ms: int) -> None:
        """Make everything appended durable (storage: Log.flush, which advances the recovery point)."""

    def latest_snapshot_id(self) -> SnapshotId | None: ...
    def read_snapshot(self, snapshot_id: SnapshotId) -> bytes | None: ...
    def store_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """Write a snapshot durably and drop older ones; the log start offset is not changed."""
    def delete_before(self, offset: int, *, now_ms: int) -> None:
        """Advance the log start offset to `offset` (at most the log end), dropping whole batches below."""
    def truncate_fully_and_start_at(self, offset: int, *, now_ms: int) -> None:
        """Empty the log and start it at `offset` (a snapshot was installed there)."""


@dataclass(slots=True)
class _Batch:
    base_offset: int
    last_offset: int
    epoch: int
    data: bytes


class _NoCheckpoint:
    """LeaderEpochCache persists to a checkpoint file; the in-memory log rebuilds its cache instead."""

    def read(self) -> list[tuple[int, int]]:
        return []

    def write(self, entries) -> None:
        pass


class MemoryRaftLog:
    """An in-memory RaftLog. Batches below `_flushed` batches survive `crash()`; snapshots always do."""

    def __init__(self) -> None:
        self._batches: list[_Batch] = []
        self._bases: list[int] = []
        self._start = 0
        self._flushed_count = 0  # how many of _batches are durable
        self._snapshots: dict[SnapshotId, bytes] = {}
        self._epochs = LeaderEpochCache(_NoCheckpoint())  # type: ignore[arg-type]
        self.flush_count = 0

    # -- offsets

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        return self._batches[-1].last_offset + 1 if self._batches else self._start

    @property
    def flushed_end_offset(self) -> int:
        if self._flushed_count == 0:
            return self._start
        return self._batches[self._flushed_count - 1].last_offset + 1

    @property
    def latest_epoch(self) -> int:
        return self._epochs.latest_epoch

    def batches(self) -> list[tuple[int, int, int, bytes]]:
        """(base offset, last offset, epoch, bytes) of every batch, for tests and checkers."""
        return [(b.base_offset, b.last_offset, b.epoch, b.data) for b in self._batches]

    # -- appends

    def append_as_leader(self, batches: bytes, epoch: int, *, now_ms: int = 0) -> AppendedRange:
        buf = bytearray(batches)
        first = offset = self.log_end_offset
        new = []
        for pos, header in iter_batches(buf):
            stamp_offset_and_epoch(buf, pos, header, offset, epoch)
            new.append((offset, offset + header.last_offset_delta, pos, header.size))
            offset += header.last_offset_delta + 1
        if not new:
            raise ValueError("append_as_leader needs at least one whole batch")
        for base, last, pos, size in new:
            self._add(_Batch(base, last, epoch, bytes(buf[pos : pos + size])))
        return AppendedRange(first, offset - 1)

    def append_as_follower(self, batches: bytes, *, now_ms: int = 0) -> AppendedRange:
        added = []
        for pos, header in iter_batches(batches):
            if header.base_offset != self.log_end_offset:
                raise ValueError(f"batch at {header.base_offset} does not start at the log end {self.log_end_offset}")
            batch = _Batch(header.base_offset, header.last_offset, header.partition_leader_epoch,
                           bytes(batches[pos : pos + header.size]))
            self._add(batch)
            added.append(batch)
        if not added:
            raise ValueError("append_as_follower needs at least one whole batch")
        return AppendedRange(added[0].base_offset, added[-1].last_offset)

    def _add(self, batch: _Batch) -> None:
        self._batches.append(batch)
        self._bases.append(batch.base_offset)
        self._epochs.assign(batch.epoch, batch.base_offset)

    # -- reads

    def read(self, offset: int, max_bytes: int) -> bytes:
        if offset < self._start or offset > self.log_end_offset:
            raise ValueError(f"offset {offset} outside [{self._start}, {self.log_end_offset}]")
        i = bisect.bisect_right(self._bases, offset) - 1
        i = max(i, 0)
        out: list[bytes] = []
        size = 0
        while i < len(self._batches):
            b = self._batches[i]
            if b.last_offset >= offset:
                if out and size + len(b.data) > max_bytes:
                    break
                out.append(b.data)
                size += len(b.data)
            i += 1
        return b"".join(out)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self._epochs.end_offset_for(epoch, self.log_end_offset)

    def epoch_for_offset(self, offset: int) -> int:
        return self._epochs.epoch_for_offset(offset)

    # -- truncation, durability, cleaning

    def truncate_to(self, offset: int) -> None:
        if offset >= self.log_end_offset:
            return
        if offset < self._start:
            raise ValueError(f"cannot truncate to {offset} below the log start {self._start}")
        keep = bisect.bisect_left(self._bases, offset)
        if keep > 0 and self._batches[keep - 1].last_offset >= offset:
            raise ValueError(f"truncation offset {offset} falls inside a batch")
        del self._batches[keep:], self._bases[keep:]
        self._flushed_count = min(self._flushed_count, keep)
        self._epochs.truncate_from_end(offset)

    def flush(self, *, now_ms: int = 0) -> None:
        if self._flushed_count != len(self._batches):
            self._flushed_count = len(self._batches)
            self.flush_count += 1

    def delete_before(self, offset: int, *, now_ms: int = 0) -> None:
        offset = min(offset, self.log_end_offset)
        if offset <= self._start:
            return
        drop = 0
        while drop < len(self._batches) and self._batches[drop].last_offset < offset:
            drop += 1
        if drop < len(self._batches) and self._batches[drop].base_offset < offset:
            # A snapshot end always falls on a batch boundary (it is a committed offset).
            raise ValueError(f"log start offset {offset} falls inside a batch")
        del self._batches[:drop], self._bases[:drop]
        self._flushed_count = max(0, self._flushed_count - drop)
        self._start = offset
        self._epochs.truncate_from_start(offset)

    def truncate_fully_and_start_at(self, offset: int, *, now_ms: int = 0) -> None:
        self._batches.clear()
        self._bases.clear()
        self._flushed_count = 0
        self._start = offset
        self._epochs.clear()

    # -- snapshots

    def latest_snapshot_id(self) -> SnapshotId | None:
        return max(self._snapshots) if self._snapshots else None

    def read_snapshot(self, snapshot_id: SnapshotId) -> bytes | None:
        return self._snapshots.get(snapshot_id)

    def store_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        self._snapshots = {snapshot_id: bytes(data)}

    # -- crash model

    def crash(self) -> MemoryRaftLog:
        """The log a restarted process finds: flushed batches and the snapshots, nothing else."""
        log = MemoryRaftLog()
        log._start = self._start
        log._snapshots = dict(self._snapshots)
        for b in self._batches[: self._flushed_count]:
            log._add(b)
        log._flushed_count = len(log._batches)
        return log


__all__ = ["UNDEFINED_EPOCH", "AppendedRange", "MemoryRaftLog", "RaftLog", "SnapshotId"]
