"""`RaftLog` over the storage layer's `Log`: the `__cluster_metadata-0` directory as Kafka lays it out.

Records live in the partition's segments like any other partition's (the leader-epoch cache included);
snapshots are files beside them named as Kafka names them, `<end offset, 20 digits>-<epoch, 10
digits>.checkpoint`, written as `.checkpoint.part`, fsynced and renamed, so a crash leaves either the
whole snapshot or none. The log starts at the newest snapshot's end when it is opened again: a node
loads that snapshot and the log after it.

What a crash keeps is what storage keeps: whatever reached the files (the page cache survives a process
crash), recovered up to the last whole batch. The core never counts on more than what it flushed.
"""

from __future__ import annotations

import os
import re

import structlog

from odradek.raft.log import AppendedRange, SnapshotId
from odradek.storage.config import LogConfig
from odradek.storage.log import Log
from odradek.storage.producer_state import AppendOrigin

events = structlog.get_logger("odradek.storage")  # (`log` is the storage Log here)

SNAPSHOT_SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
_SNAPSHOT_NAME = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")


def snapshot_file_name(snapshot_id: SnapshotId) -> str:
    return f"{snapshot_id.end_offset:020d}-{snapshot_id.epoch:010d}{SNAPSHOT_SUFFIX}"


def list_snapshots(directory: str) -> list[SnapshotId]:
    found = []
    for name in os.listdir(directory):
        match = _SNAPSHOT_NAME.match(name)
        if match:
            found.append(SnapshotId(int(match.group(1)), int(match.group(2))))
    return sorted(found)


class StorageRaftLog:
    """A RaftLog backed by a storage `Log` in `directory`; open it with `StorageRaftLog.open`."""

    def __init__(self, log: Log) -> None:
        self.log = log
        self.directory = log.directory

    @classmethod
    def open(cls, directory: str, config: LogConfig, *, now_ms: int) -> StorageRaftLog:
        os.makedirs(directory, exist_ok=True)
        for name in os.listdir(directory):
            if name.endswith(PARTIAL_SUFFIX):
                os.unlink(os.path.join(directory, name))
        snapshots = list_snapshots(directory)
        start = snapshots[-1].end_offset if snapshots else 0
        log = Log.open(directory, config, now_ms=now_ms, log_start_offset=start)
        r = log.recovery  # (opened without a recovery point: every start re-reads it; a cut is what matters)
        if r is not None:
            (events.warning if r.truncated_bytes else events.debug)(
                "log recovered", topic="__cluster_metadata", partition=0, segments=r.segments, batches=r.batches,
                recovered_from=r.recovered_from, truncated_bytes=r.truncated_bytes, log_end_offset=r.log_end_offset)
        if log.log_end_offset < start:
            # The snapshot was installed and the crash came before the log restarted at its end.
            log.truncate_fully_and_start_at(start, now_ms=now_ms)
        return cls(log)

    def close(self) -> None:
        self.log.close()

    # -- offsets

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def flushed_end_offset(self) -> int:
        return min(self.log.recovery_point, self.log.log_end_offset)

    @property
    def latest_epoch(self) -> int:
        return self.log.latest_epoch

    # -- appends and reads

    def append_as_leader(self, batches: bytes, epoch: int, *, now_ms: int) -> AppendedRange:
        # COORDINATOR: the checks of an internal writer (layout, CRC, size), not a client's.
        info = self.log.append(bytearray(batches), leader_epoch=epoch, now_ms=now_ms, origin=AppendOrigin.COORDINATOR)
        return AppendedRange(info.first_offset, info.last_offset)

    def append_as_follower(self, batches: bytes, *, now_ms: int) -> AppendedRange:
        info = self.log.append_as_follower(batches, now_ms=now_ms)
        return AppendedRange(info.first_offset, info.last_offset)

    def read(self, offset: int, max_bytes: int) -> bytes:
        out = bytearray()
        for region in self.log.read(offset, max_bytes).regions:
            position, end = region.position, region.position + region.length
            while position < end:
                chunk = os.pread(region.fd, end - position, position)
                if not chunk:
                    raise EOFError(f"segment ends before byte {end}")
                out += chunk
                position += len(chunk)
        return bytes(out)

    def truncate_to(self, offset: int) -> None:
        self.log.truncate_to(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.log.end_offset_for_epoch(epoch)

    def epoch_for_offset(self, offset: int) -> int:
        return self.log.epoch_for_offset(offset)

    def flush(self, *, now_ms: int) -> None:
        self.log.flush(now_ms=now_ms)

    # -- snapshots and cleaning

    def latest_snapshot_id(self) -> SnapshotId | None:
        snapshots = list_snapshots(self.directory)
        return snapshots[-1] if snapshots else None

    def read_snapshot(self, snapshot_id: SnapshotId) -> bytes | None:
        try:
            with open(os.path.join(self.directory, snapshot_file_name(snapshot_id)), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def store_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        final = os.path.join(self.directory, snapshot_file_name(snapshot_id))
        partial = os.path.join(self.directory, snapshot_file_name(snapshot_id) + ".part")
        with open(partial, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, final)
        for older in list_snapshots(self.directory):
            if older < snapshot_id:
                os.unlink(os.path.join(self.directory, snapshot_file_name(older)))
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def delete_before(self, offset: int, *, now_ms: int) -> None:
        offset = min(offset, self.log.log_end_offset)
        if offset > self.log.log_start_offset:
            self.log.delete_records_before(offset, now_ms=now_ms)

    def truncate_fully_and_start_at(self, offset: int, *, now_ms: int) -> None:
        self.log.truncate_fully_and_start_at(offset, now_ms=now_ms)
