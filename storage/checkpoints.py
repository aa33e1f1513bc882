"""Small text files that record progress, written atomically, in Kafka's formats.

Every checkpoint is replaced whole: the new content goes to `<name>.tmp`, is fsynced, renamed over the old
file and the directory is fsynced, so a crash leaves either the old or the new file, never a mix.

    offset checkpoint          leader-epoch-checkpoint     partition.metadata
        0                          0                           version: 0
        <n>                        <n>                         topic_id: <base64url, no padding>
        <topic> <partition> <off>  <epoch> <start offset>
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable

from .errors import KafkaStorageError
from .names import TMP_SUFFIX, TopicPartition

_VERSION = 0


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, *, fsync: bool = True) -> None:
    tmp = path + TMP_SUFFIX
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if fsync:
        fsync_dir(os.path.dirname(path) or ".")


def read_small_file(path: str) -> bytes | None:
    """The whole content of a small file, or None if it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _read_lines(path: str) -> list[str] | None:
    data = read_small_file(path)
    return None if data is None else data.decode("utf-8").splitlines()


def _versioned_entries(path: str, fields: int) -> list[list[str]]:
    lines = _read_lines(path)
    if lines is None:
        return []
    try:
        if int(lines[0]) != _VERSION:
            raise KafkaStorageError(f"{path}: unsupported checkpoint version {lines[0]}")
        count = int(lines[1])
        entries = [line.split() for line in lines[2 : 2 + count]]
    except (IndexError, ValueError) as e:
        raise KafkaStorageError(f"{path}: malformed checkpoint file") from e
    if len(entries) != count or any(len(e) != fields for e in entries):
        raise KafkaStorageError(f"{path}: expected {count} entries of {fields} fields")
    return entries


def _versioned_text(entries: list[str]) -> bytes:
    return "\n".join([str(_VERSION), str(len(entries)), *entries, ""]).encode()


class OffsetCheckpointFile:
    """Per-partition offsets of a whole log directory (recovery points, log start offsets, cleaner offsets)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> dict[TopicPartition, int]:
        try:
            return {TopicPartition(t, int(p)): int(o) for t, p, o in _versioned_entries(self.path, 3)}
        except ValueError as e:
            raise KafkaStorageError(f"{self.path}: malformed entry") from e

    def write(self, offsets: dict[TopicPartition, int]) -> None:
        atomic_write(self.path, _versioned_text([f"{tp.topic} {tp.partition} {o}" for tp, o in sorted(offsets.items())]))


class LeaderEpochCheckpointFile:
    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> list[tuple[int, int]]:
        """The entries; none for an empty file, what a crash can leave of the unsynced write of a log
        without data (storage/log.py writes an empty log's checkpoint without fsync)."""
        if read_small_file(self.path) == b"":
            return []
        try:
            return [(int(e), int(o)) for e, o in _versioned_entries(self.path, 2)]
        except ValueError as e:
            raise KafkaStorageError(f"{self.path}: malformed entry") from e

    def write(self, entries: Iterable[tuple[int, int]], *, fsync: bool = True) -> None:
        atomic_write(self.path, _versioned_text([f"{e} {o}" for e, o in entries]), fsync=fsync)


class PartitionMetadataFile:
    """The topic id of the partition, so that a recreated topic of the same name is told apart."""

    def __init__(self, path: str) -> None:
        self.path = path

    def read(self) -> bytes | None:
        """The topic id, or None if there is no file, or an empty one (or all NULs): what a crash can leave
        of a write not fsynced yet (a new log's is fsynced with its first data; the owner assigns the id
        again)."""
        data = read_small_file(self.path)
        if data is None or not data.strip(b"\x00 \n"):
            return None
        lines = data.decode("utf-8", errors="replace").splitlines()
        fields = dict(line.split(": ", 1) for line in lines if ": " in line)
        try:
            if int(fields["version"]) != 0:
                raise KafkaStorageError(f"{self.path}: unsupported version {fields['version']}")
            topic_id = base64.urlsafe_b64decode(fields["topic_id"] + "==")
        except (KeyError, ValueError) as e:
            raise KafkaStorageError(f"{self.path}: malformed partition metadata") from e
        if len(topic_id) != 16:
            raise KafkaStorageError(f"{self.path}: a topic id has 16 bytes")
        return topic_id

    def write(self, topic_id: bytes, *, fsync: bool = True) -> None:
        """Replace the file atomically and durably; with `fsync=False` (a new log, not durable yet) write it
        in place: a crash can then leave it empty, which `read` takes as no topic id."""
        encoded = base64.urlsafe_b64encode(topic_id).rstrip(b"=").decode()
        data = f"version: 0\ntopic_id: {encoded}\n".encode()
        if fsync:
            atomic_write(self.path, data)
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
