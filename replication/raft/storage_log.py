"""`__cluster_metadata-0` on disk: the Raft core's `RaftLog` over storage's `Log`, with snapshot files.

The metadata log is stored like any partition (segments, indexes, the leader-epoch checkpoint, recovery
after a crash), which is what KRaft does; this adapter only translates names. The leader's appends get
their offsets and epoch stamped by `Log.append` (as the coordinators' appends: no client checks), a
follower's keep theirs (`Log.append_as_follower`), and `flushed_end_offset` is the log's recovery point,
which a flush advances: what lies below it survives a `kill -9`.

Snapshots are files in the partition's directory named as Kafka names them,
`<end offset, 20 digits>-<epoch, 10 digits>.checkpoint`, written atomically (a temporary file, fsync,
rename, fsync of the directory) so that a crash leaves either the old set or the new one. Storing a snapshot
removes the older ones; the log below it is removed separately (`delete_before`), once the core decides.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from odradek.storage.checkpoints import atomic_write
from odradek.storage.log import Log
from odradek.storage.producer_state import AppendOrigin

from .log import AppendedRange, SnapshotId

_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


def snapshot_file_name(snapshot_id: SnapshotId) -> str:
    return f"{snapshot_id.end_offset:020d}-{snapshot_id.epoch:010d}.checkpoint"


class StorageRaftLog:
    def __init__(self, log: Log, directory: str, clock: Callable[[], int]) -> None:
        self.log = log
        self.directory = directory
        self.clock = clock
        self._snapshots = self._scan_snapshots()

    # -- offsets

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def flushed_end_offset(self) -> int:
        return self.log.recovery_point

    @property
    def latest_epoch(self) -> int:
        return self.log.latest_epoch

    # -- appends and reads

    def append_as_leader(self, batches: bytes, epoch: int) -> AppendedRange:
        info = self.log.append(bytearray(batches), leader_epoch=epoch, now_ms=self.clock(), origin=AppendOrigin.COORDINATOR)
        return AppendedRange(info.first_offset, info.last_offset)

    def append_as_follower(self, batches: bytes) -> AppendedRange:
        info = self.log.append_as_follower(bytearray(batches), now_ms=self.clock())
        return AppendedRange(info.first_offset, info.last_offset)

    def read(self, offset: int, max_bytes: int) -> bytes:
        if offset >= self.log.log_end_offset:
            return b""
        return self.log.read_bytes(offset, max_bytes)

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.log.end_offset_for_epoch(epoch)

    def epoch_for_offset(self, offset: int) -> int:
        return self.log.epoch_for_offset(offset)

    def flush(self) -> None:
        self.log.flush(now_ms=self.clock())

    def delete_before(self, offset: int) -> None:
        if offset > self.log.log_start_offset:
            self.log.delete_records_before(min(offset, self.log.log_end_offset), now_ms=self.clock())

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset, now_ms=self.clock())

    # -- snapshots

    def _scan_snapshots(self) -> list[SnapshotId]:
        found = []
        for name in os.listdir(self.directory):
            m = _SNAPSHOT_NAME.match(name)
            if m:
                found.append(SnapshotId(int(m.group(1)), int(m.group(2))))
        return sorted(found)

    def latest_snapshot_id(self) -> SnapshotId | None:
        return self._snapshots[-1] if self._snapshots else None

    def read_snapshot(self, snapshot_id: SnapshotId) -> bytes | None:
        try:
            with open(os.path.join(self.directory, snapshot_file_name(snapshot_id)), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def store_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        atomic_write(os.path.join(self.directory, snapshot_file_name(snapshot_id)), bytes(data))
        for old in [s for s in self._snapshots if s < snapshot_id]:
            try:
                os.unlink(os.path.join(self.directory, snapshot_file_name(old)))
            except FileNotFoundError:
                pass
        self._snapshots = [s for s in self._snapshots if s > snapshot_id] + [snapshot_id]
        self._snapshots.sort()
